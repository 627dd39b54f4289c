"""residualsim's own .npz trajectory files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from residualsim.data import (
    Trajectory,
    describe,
    detect_format,
    format_description,
    load_toss,
    load_trajectories,
    load_trajectory,
    save_trajectories,
    save_trajectory,
)
from residualsim.data.contactnets import toss_from_array
from residualsim.data.npz import ARRAY_NAMES
from residualsim.errors import DataError, ParameterError


def _planar(traj_id: str = "p1") -> Trajectory:
    t = np.linspace(0.0, 0.2, 11)
    theta = 3.0 * t
    quat = np.column_stack([np.cos(theta / 2), 0 * t, 0 * t, np.sin(theta / 2)])
    zeros = np.zeros_like(t)
    return Trajectory(
        traj_id,
        t,
        np.column_stack([t, 0.1 - t**2, zeros]),
        quat,
        np.column_stack([np.ones_like(t), -2 * t, zeros]),
        np.column_stack([zeros, zeros, 3.0 + zeros]),
        planar=True,
        source="simulated",
        metadata={"scene": "planar_ellipse", "params": [0.1, 0.2], "nested": {"a": 1}},
    )


def _assert_same(a: Trajectory, b: Trajectory) -> None:
    for name in ARRAY_NAMES:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert (a.planar, a.source, a.metadata) == (b.planar, b.source, b.metadata)


def test_round_trip_is_exact(tmp_path):
    traj = _planar()
    save_trajectory(tmp_path / "p1.npz", traj)
    loaded = load_trajectory(tmp_path / "p1.npz")
    _assert_same(traj, loaded)
    assert loaded.traj_id == "p1"
    with np.load(tmp_path / "p1.npz", allow_pickle=False) as archive:
        meta = json.loads(str(archive["meta"]))
    assert meta["format"] == "residualsim-trajectory" and meta["format_version"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["p1.npz"]  # no temporary left behind


def test_round_trip_of_a_toss(tmp_path, make_toss):
    traj = toss_from_array(make_toss(20), "17", "tosses/17.pt")
    save_trajectories(tmp_path / "out", {"17": traj})
    loaded = load_trajectories(tmp_path / "out")
    assert list(loaded) == ["17"]
    _assert_same(traj, loaded["17"])


def test_real_toss_round_trip(contactnets_dir, tmp_path):
    traj = load_toss(contactnets_dir / "tosses" / "0.pt")
    save_trajectory(tmp_path / "0.npz", traj)
    _assert_same(traj, load_trajectory(tmp_path / "0.npz"))


def test_save_trajectories_names_and_order(tmp_path):
    trajs = [_planar(i) for i in ("12", "3", "b", "a")]
    written = save_trajectories(tmp_path / "set", trajs)
    assert [p.name for p in written] == ["12.npz", "3.npz", "b.npz", "a.npz"]
    assert list(load_trajectories(tmp_path / "set")) == ["3", "12", "a", "b"]
    with pytest.raises(ParameterError, match="twice"):
        save_trajectories(tmp_path / "x", [_planar("1"), _planar("1")])
    for bad in ("", "../evil", ".hidden", "a/b"):
        with pytest.raises(ParameterError, match="file name"):
            save_trajectories(tmp_path / "x", {bad: _planar()})


def test_save_refuses_bad_targets(tmp_path):
    with pytest.raises(ParameterError, match=".npz"):
        save_trajectory(tmp_path / "p1.pt", _planar())
    with pytest.raises(DataError, match="does not exist"):
        save_trajectory(tmp_path / "no" / "p1.npz", _planar())
    unserialisable = Trajectory(**{**_planar().__dict__, "metadata": {"x": object()}})
    with pytest.raises(DataError, match="JSON"):
        save_trajectory(tmp_path / "p1.npz", unserialisable)
    assert not any(tmp_path.iterdir())


def test_overwrite_replaces_atomically(tmp_path, monkeypatch):
    target = tmp_path / "p1.npz"
    save_trajectory(target, _planar())
    before = target.read_bytes()

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", boom)
    with pytest.raises(OSError, match="disk full"):
        save_trajectory(target, _planar())
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["p1.npz"]


def test_detect_and_describe_npz_sets(tmp_path, make_toss):
    trajs = {str(i): toss_from_array(make_toss(40 + i, seed=i), str(i), f"{i}.pt") for i in range(3)}
    save_trajectories(tmp_path / "cubes", trajs)
    save_trajectories(tmp_path / "planar", [_planar("p1")])
    assert detect_format(tmp_path / "cubes") == detect_format(tmp_path / "cubes" / "1.npz") == "npz"
    assert list(load_trajectories(tmp_path / "cubes" / "1.npz")) == ["1"]
    summary = describe(tmp_path / "cubes")
    assert json.loads(json.dumps(summary)) == summary
    assert summary["format"] == "npz" and summary["count"] == 3
    assert summary["samples"] == {"min": 40, "median": 41, "max": 42}
    assert summary["rate_hz"]["all_equal"] and summary["rate_hz"]["median"] == pytest.approx(148)
    assert summary["duration_s"]["total"] == pytest.approx((39 + 40 + 41) / 148)
    # synthetic tosses start 4 half-widths up and fall: every one reaches the table
    assert summary["first_contact_s"]["count"] == 3
    planar = describe(tmp_path / "planar")
    assert planar["planar"] == 1 and planar["first_contact_s"] is None
    text = format_description(planar)
    lines = text.split("\nper file:")[0].splitlines()  # the per-file table follows
    assert len({line.index(line.split()[1]) for line in lines}) == 1  # values aligned
    assert text.splitlines()[-2].split()[:3] == ["id", "rate_hz", "jitter_ms"]


def test_importing_the_package_is_light():
    code = (
        "import sys, residualsim.data; "
        "print(any(m in sys.modules for m in ('torch', 'scipy.io', 'scipy.spatial')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    assert result.stdout.strip() == "False"


def test_describe_splits_cube_time_into_flight_contact_and_rest(tmp_path):
    # 10 samples falling high above the table, 20 moving on it, 10 at rest: the shares are
    # measured between samples, so 10 / 20 / 9 periods of the 39.
    n, half = 40, 0.05
    z = np.where(np.arange(n) < 10, 0.5, half)
    speed = np.where(np.arange(n) < 30, 1.0, 0.0)
    traj = Trajectory(traj_id="c", times_s=np.arange(n) / 148.0,
                      positions_m=np.c_[np.zeros(n), np.zeros(n), z],
                      quat_wxyz=np.tile([1.0, 0, 0, 0], (n, 1)),
                      linear_velocity_mps=np.c_[speed, np.zeros(n), np.zeros(n)],
                      angular_velocity_world_radps=np.zeros((n, 3)),
                      metadata={"half_width_m": half})
    save_trajectories(tmp_path / "c", [traj])
    share = describe(tmp_path / "c")["time_share"]
    assert share == pytest.approx({"flight": 10 / 39, "contact": 20 / 39, "rest": 9 / 39},
                                  abs=1e-4)
    save_trajectories(tmp_path / "p", [_planar("p1")])
    assert describe(tmp_path / "p")["time_share"] is None
