"""ContactNets toss reader/writer: units, frames, round trips, and the real 400 tosses."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy.spatial.transform import Rotation

from residualsim.data import (
    Trajectory,
    describe,
    detect_format,
    format_description,
    load_toss,
    load_tosses,
    write_toss,
)
from residualsim.data.contactnets import (
    CUBE_HALF_WIDTH_M,
    SAMPLE_PERIOD_S,
    quaternion_to_matrix,
    toss_from_array,
    toss_to_array,
)
from residualsim.data.datasets import first_contact_index
from residualsim.errors import DataError


def _save(path, array) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(torch.from_numpy(np.asarray(array, dtype=np.float64)), path)


# --- quaternion conventions ------------------------------------------------------------


def test_quaternion_to_matrix_matches_scipy_scalar_first():
    quats = np.random.default_rng(1).normal(size=(50, 4))
    quats /= np.linalg.norm(quats, axis=1, keepdims=True)
    expected = Rotation.from_quat(quats[:, [1, 2, 3, 0]]).as_matrix()
    np.testing.assert_allclose(quaternion_to_matrix(quats), expected, atol=1e-12)


def test_quarter_turn_about_z_maps_body_x_spin_to_world_y():
    half = np.sqrt(0.5)
    array = np.zeros((1, 3, 19))
    array[0, :, 3:7] = [half, 0.0, 0.0, half]  # body -> world: +90 deg about world z
    array[0, :, 10:13] = [2.0, 0.0, 0.0]  # spinning about body x
    traj = toss_from_array(array, "q", "q.pt")
    np.testing.assert_allclose(traj.angular_velocity_world_radps, [[0.0, 2.0, 0.0]] * 3, atol=1e-12)


def test_units_times_and_metadata(make_toss):
    array = make_toss(30)
    traj = toss_from_array(array, "5", "tosses/5.pt")
    np.testing.assert_allclose(traj.positions_m, array[0, :, 0:3] * 0.0524)
    np.testing.assert_allclose(traj.linear_velocity_mps, array[0, :, 7:10] * 0.0524)
    np.testing.assert_allclose(traj.times_s, np.arange(30) / 148.0)
    assert traj.traj_id == "5" and traj.source == "tosses/5.pt" and not traj.planar
    assert traj.metadata["half_width_m"] == CUBE_HALF_WIDTH_M
    assert traj.rate_hz == pytest.approx(148.0)


def test_synthetic_spin_is_constant_in_world_frame(make_toss):
    """make_toss spins at a constant world-frame rate: the loader must recover it."""
    traj = toss_from_array(make_toss(40, seed=3), "s", "s.pt")
    omega = traj.angular_velocity_world_radps
    np.testing.assert_allclose(omega, np.broadcast_to(omega[0], omega.shape), atol=1e-9)
    rotations = Rotation.from_quat(traj.quat_wxyz[:, [1, 2, 3, 0]])
    step = (rotations[1:] * rotations[:-1].inv()).as_rotvec() / SAMPLE_PERIOD_S
    np.testing.assert_allclose(step, omega[1:], atol=1e-9)


def test_slightly_off_quaternions_are_normalised(make_toss):
    array = make_toss(10)
    array[0, :, 3:7] *= 1.004
    traj = toss_from_array(array, "n", "n.pt")
    np.testing.assert_allclose(np.linalg.norm(traj.quat_wxyz, axis=1), 1.0, atol=1e-14)


# --- writer ------------------------------------------------------------------------------


def test_write_load_round_trip_synthetic(tmp_path, make_toss):
    array = make_toss(25, seed=7)
    _save(tmp_path / "a" / "11.pt", array)
    traj = load_toss(tmp_path / "a" / "11.pt")
    write_toss(tmp_path / "b.pt", traj)
    raw = torch.load(tmp_path / "b.pt", weights_only=True)
    assert raw.dtype == torch.float64 and tuple(raw.shape) == (1, 25, 19)
    np.testing.assert_allclose(raw.numpy(), array, rtol=1e-12, atol=1e-12)
    again = load_toss(tmp_path / "b.pt")
    for name in ("positions_m", "quat_wxyz", "linear_velocity_mps", "angular_velocity_world_radps"):
        np.testing.assert_allclose(getattr(again, name), getattr(traj, name), rtol=0, atol=1e-12)
    assert {p.name for p in tmp_path.iterdir()} == {"a", "b.pt"}  # no temporary left behind


def test_write_is_atomic_and_replaces(tmp_path, make_toss, monkeypatch):
    target = tmp_path / "3.pt"
    write_toss(target, toss_from_array(make_toss(10, seed=1), "3", "x"))
    before = target.read_bytes()

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", boom)
    with pytest.raises(OSError, match="disk full"):
        write_toss(target, toss_from_array(make_toss(12, seed=2), "3", "x"))
    assert target.read_bytes() == before  # the old file is untouched
    assert [p.name for p in tmp_path.iterdir()] == ["3.pt"]  # no temporary left behind


def test_writer_refuses_other_rates_and_missing_dirs(tmp_path, make_toss):
    traj = toss_from_array(make_toss(10), "1", "x")
    slow = Trajectory(
        "1", traj.times_s * 2, traj.positions_m, traj.quat_wxyz, traj.linear_velocity_mps,
        traj.angular_velocity_world_radps,
    )
    with pytest.raises(DataError, match="1/148"):
        write_toss(tmp_path / "1.pt", slow)
    with pytest.raises(DataError, match="does not exist"):
        write_toss(tmp_path / "nowhere" / "1.pt", traj)


# --- directory reader --------------------------------------------------------------------


def test_load_tosses_orders_by_numeric_id_and_filters(tmp_path, make_toss):
    for traj_id in ("10", "9", "100", "2"):
        _save(tmp_path / "set" / "tosses" / f"{traj_id}.pt", make_toss(5))
    assert list(load_tosses(tmp_path / "set")) == ["2", "9", "10", "100"]
    assert list(load_tosses(tmp_path / "set" / "tosses", limit=2)) == ["2", "9"]
    assert list(load_tosses(tmp_path / "set", ids=[100, "9"])) == ["9", "100"]
    with pytest.raises(DataError, match="7.pt"):
        load_tosses(tmp_path / "set", ids=["7"])


def test_missing_and_empty_directories(tmp_path):
    with pytest.raises(DataError, match="nope"):
        load_tosses(tmp_path / "nope")
    (tmp_path / "empty" / "tosses").mkdir(parents=True)
    with pytest.raises(DataError, match="no .pt"):
        load_tosses(tmp_path / "empty")
    with pytest.raises(DataError, match="missing.pt"):
        load_toss(tmp_path / "missing.pt")


# --- real data ---------------------------------------------------------------------------


def test_all_real_tosses_load(real_tosses):
    assert len(real_tosses) == 400
    ids = list(real_tosses)
    assert ids == sorted(ids, key=int)
    for traj_id, traj in real_tosses.items():
        assert traj.traj_id == traj_id and traj.source.endswith(f"{traj_id}.pt")
        assert 80 <= traj.n_samples <= 450
        assert traj.rate_hz == pytest.approx(148.0)
        np.testing.assert_allclose(np.linalg.norm(traj.quat_wxyz, axis=1), 1.0, atol=1e-12)
    # metres: every toss ends resting on the table, centre about 0.98 half-widths up
    final_z = np.array([t.positions_m[-1, 2] for t in real_tosses.values()])
    assert np.all(np.abs(final_z - 0.98 * CUBE_HALF_WIDTH_M) < 0.003)


def test_real_angular_velocity_is_converted_from_body_frame(real_tosses):
    """Consecutive orientations step by the stored world-frame spin, not by its body reading."""
    right, wrong = [], []
    for traj in list(real_tosses.values())[::10]:
        rotations = Rotation.from_quat(traj.quat_wxyz[:, [1, 2, 3, 0]])
        world_step = (rotations[1:] * rotations[:-1].inv()).as_rotvec() / SAMPLE_PERIOD_S
        omega = traj.angular_velocity_world_radps
        mean_world = 0.5 * (omega[1:] + omega[:-1])
        body_reading = rotations.inv().apply(omega.copy())  # the raw body-frame values
        mean_body = 0.5 * (body_reading[1:] + body_reading[:-1])
        right.append(np.median(np.linalg.norm(world_step - mean_world, axis=1)))
        wrong.append(np.median(np.linalg.norm(world_step - mean_body, axis=1)))
    assert np.median(right) < 0.2 and np.median(wrong) > 1.0


def test_real_free_flight_conserves_world_angular_momentum(real_tosses):
    """For a uniform cube L = R I R^T w_world is constant in free flight."""
    inertia = np.eye(3) * 0.37 * (2 * CUBE_HALF_WIDTH_M) ** 2 / 6
    spread_right, spread_wrong = [], []
    for traj in real_tosses.values():
        contact = first_contact_index(traj, CUBE_HALF_WIDTH_M)
        if contact is None or contact < 4:
            continue
        rot = quaternion_to_matrix(traj.quat_wxyz[:contact])
        omega = traj.angular_velocity_world_radps[:contact]
        momentum = np.einsum("tij,jk,tlk,tl->ti", rot, inertia, rot, omega)
        body = np.einsum("tji,tj->ti", rot, omega)  # the raw body-frame values
        wrong = np.einsum("tji,tj->ti", rot, body)  # rotated the wrong way, R^T w_body
        for values, spreads in ((momentum, spread_right), (wrong, spread_wrong)):
            mean = values.mean(axis=0)
            spreads.append(np.linalg.norm(values - mean, axis=1).max() / np.linalg.norm(mean))
    assert len(spread_right) > 300
    assert np.median(spread_right) < 0.08 < 0.12 < np.median(spread_wrong)


def test_real_toss_round_trips_through_writer(contactnets_dir, tmp_path):
    source = contactnets_dir / "tosses" / "465.pt"
    traj = load_toss(source)
    write_toss(tmp_path / "465.pt", traj)
    original = torch.load(source, weights_only=True).numpy()
    written = torch.load(tmp_path / "465.pt", weights_only=True).numpy()
    np.testing.assert_allclose(written, original, rtol=1e-12, atol=1e-12)
    again = load_toss(tmp_path / "465.pt")
    np.testing.assert_allclose(again.angular_velocity_world_radps, traj.angular_velocity_world_radps,
                               rtol=0, atol=1e-12)
    np.testing.assert_allclose(toss_to_array(traj), original, rtol=1e-12, atol=1e-12)


def test_describe_real_set(contactnets_dir):
    summary = describe(contactnets_dir)
    assert json.loads(json.dumps(summary)) == summary
    assert detect_format(contactnets_dir) == detect_format(contactnets_dir / "tosses") == "contactnets"
    assert summary["format"] == "contactnets" and summary["count"] == 400
    assert summary["samples"] == {"min": 80, "median": 102, "max": 442}
    assert summary["rate_hz"] == {"median": pytest.approx(148.0), "all_equal": True}
    assert summary["duration_s"]["total"] == pytest.approx((sum_samples(contactnets_dir) - 400) / 148)
    contact = summary["first_contact_s"]
    assert contact["count"] == 400 and contact["without_contact"] == 0
    assert contact["tolerance_m"] == 0.005
    assert 4 / 148 - 1e-9 <= contact["min"] <= contact["median"] <= contact["max"] <= 37 / 148 + 1e-9
    text = format_description(summary)
    assert "first_contact_s" in text and "count" in text.splitlines()[2]


def sum_samples(directory) -> int:
    return sum(torch.load(p, weights_only=True).shape[1] for p in (directory / "tosses").glob("*.pt"))


def test_first_contact_index_on_a_drop(make_toss):
    """A level cube dropping from 10 cm: contact when its bottom face is 5 mm up."""
    t = np.arange(60) / 148.0
    z = 0.1 + CUBE_HALF_WIDTH_M - 0.5 * 9.81 * t**2
    traj = Trajectory(
        "d", t, np.column_stack([0 * t, 0 * t, z]), np.tile([1.0, 0, 0, 0], (60, 1)),
        np.zeros((60, 3)), np.zeros((60, 3)),
    )
    expected = int(np.argmax(z - CUBE_HALF_WIDTH_M <= 0.005))
    assert first_contact_index(traj, CUBE_HALF_WIDTH_M) == expected
    # turned 45 degrees about x, the lowest edge is sqrt(2) h below the centre
    q = [np.cos(np.pi / 8), np.sin(np.pi / 8), 0.0, 0.0]
    tilted = Trajectory(**{**traj.__dict__, "quat_wxyz": np.tile(q, (60, 1))})
    expected = int(np.argmax(z - np.sqrt(2) * CUBE_HALF_WIDTH_M <= 0.005))
    assert first_contact_index(tilted, CUBE_HALF_WIDTH_M) == expected
    assert first_contact_index(traj, CUBE_HALF_WIDTH_M, tolerance_m=-1.0) is None
