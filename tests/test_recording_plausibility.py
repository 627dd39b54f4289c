"""Recordings in the wrong units or conventions are refused with the cause named (issue 34
§1): gravity fitted on the free flight (millimetres, centimetres, milliseconds, a y-up
export), quaternions in x-y-z-w order under a w-x-y-z header (the bundled hinge and L
examples, synthetic tosses), ``--allow-implausible`` lets them through."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from residualsim.data import load_trajectories, save_csv_trajectories
from residualsim.data.read_options import reading_options
from residualsim.errors import DataError
from residualsim.sim.engine import Engine
from residualsim.sim.plausibility import gravity_fit
from residualsim.sim.recordings import allow_implausible, free_flight_samples, prepare_recordings
from residualsim.sim.rotations import quat_multiply
from residualsim.sim.synthesize import synthesize_tosses

ROOT = Path(__file__).resolve().parents[1]
HINGE = str(ROOT / "assets" / "examples" / "hinge.toml")
ELL = str(ROOT / "assets" / "examples" / "ell.toml")
TRUTH = "lateral_friction=0.4,restitution=0.3"


@pytest.fixture(scope="module")
def tosses(tmp_path_factory) -> dict[str, dict]:
    """Synthetic poses-only tosses of the hinge and the L (1 s at 100 Hz), as CSV files."""
    root = tmp_path_factory.mktemp("plausibility")
    out = {}
    for name, scene in (("hinge", HINGE), ("ell", ELL)):
        made = synthesize_tosses(TRUTH, n_tosses=2, n_samples=100, rng=4, scene=scene)
        save_csv_trajectories(root / name, made)
        out[name] = load_trajectories(root / name)
    return out


def _changed(trajs: dict, **arrays) -> dict:
    return {k: dataclasses.replace(t, **{name: f(t) for name, f in arrays.items()})
            for k, t in trajs.items()}


def test_clean_recordings_fit_gravity(tosses):
    with Engine(HINGE) as engine:
        for traj in tosses["hinge"].values():
            fit = gravity_fit(engine, traj, free_flight_samples(engine, traj))
            assert fit is not None and fit.samples >= 6
            assert abs(fit.magnitude_mps2 - 9.81) < 0.5  # the whole body's centre of mass
            assert fit.tilt_deg(np.array([0.0, 0.0, -1.0])) < 3.0
    prepare_recordings(HINGE, tosses["hinge"])


@pytest.mark.parametrize("change, cause", [
    (dict(positions_m=lambda t: 1000 * t.positions_m),
     r"\d+ times g.*positions look like millimetres"),
    (dict(positions_m=lambda t: 100 * t.positions_m),
     r"positions look like centimetres"),
    (dict(positions_m=lambda t: t.positions_m[:, [0, 2, 1]] * [1, 1, -1],
          quat_wxyz=lambda t: quat_multiply(
              np.broadcast_to([np.sqrt(0.5), -np.sqrt(0.5), 0, 0], t.quat_wxyz.shape),
              t.quat_wxyz)),
     r"gravity is along -y: an export with another up axis \(y-up\)"),
])
def test_wrong_units_and_axes_are_refused_naming_the_cause(tosses, change, cause):
    trajs = _changed(tosses["hinge"], **change)
    with pytest.raises(DataError, match=rf"csv:.*synthetic-0\.csv: the free flight \(samples 0 "
                                        rf"to \d+\) falls with .*{cause}.*pass "
                                        r"--allow-implausible"):
        prepare_recordings(HINGE, trajs)


@pytest.mark.parametrize("factor, unit, refusal", [
    (1e3, "milliseconds", r"slower than 10 Hz \(t in seconds\).*pass --allow-implausible"),
    (1e9, "nanoseconds", r"longer than 1e\+06 s, not a recording with t in seconds.*does not "
                         r"accept it")])
def test_times_in_another_unit_are_refused_by_their_rate(tosses, factor, unit, refusal):
    """Checked before gravity: a recording whose free flight is too short for the gravity
    fit got through in milliseconds or nanoseconds (0.1 Hz, 1e-7 Hz), exit 0. Longer than
    1e6 s (a 1 s toss in nanoseconds) it is refused even with --allow-implausible (1e300 s
    was a LinAlgError traceback in the gravity fit)."""
    trajs = _changed(tosses["hinge"], times_s=lambda t: factor * t.times_s)
    with pytest.raises(DataError, match=rf"csv:.*synthetic-0\.csv: 100 samples over .* Hz"
                                        rf".*{refusal}"):
        prepare_recordings(HINGE, trajs)
    with allow_implausible():
        if factor > 1e6:
            with pytest.raises(DataError, match=f"times look like {unit}"):
                prepare_recordings(HINGE, trajs)


def test_allow_implausible_lets_the_units_through_with_a_warning(tosses, caplog):
    trajs = _changed(tosses["hinge"], positions_m=lambda t: t.positions_m * [1, 1, 1.0] * 100)
    with allow_implausible(), pytest.raises(DataError) as refused:
        prepare_recordings(HINGE, trajs)  # later checks still see another object's poses
    assert "centimetres (divide them by 100) (accepted: --allow-implausible)" in caplog.text
    assert "falls with" not in str(refused.value)


@pytest.mark.parametrize("example", ["hinge", "ell"])
def test_xyzw_under_a_wxyz_header_is_detected_and_the_option_reads_it(tosses, tmp_path,
                                                                       example):
    scene = HINGE if example == "hinge" else ELL
    swapped = _changed(tosses[example], quat_wxyz=lambda t: t.quat_wxyz[:, [1, 2, 3, 0]])
    save_csv_trajectories(tmp_path, swapped)  # x, y, z, w values under qw, qx, qy, qz
    wrong = load_trajectories(tmp_path)
    with pytest.raises(DataError, match=r"the quaternions look like x-y-z-w order: .* pass "
                                        r"--quaternion-order xyzw"):
        prepare_recordings(scene, wrong)
    with reading_options(quaternion_order="xyzw"):
        right = load_trajectories(tmp_path)
    for key, traj in right.items():
        np.testing.assert_allclose(traj.quat_wxyz, tosses[example][key].quat_wxyz, atol=1e-15)
    prepare_recordings(scene, right)
    save_csv_trajectories(tmp_path / "plain", tosses[example])
    with reading_options(quaternion_order="xyzw"), pytest.raises(
            DataError, match=r"look like w-x-y-z order: .*drop --quaternion-order xyzw"):
        prepare_recordings(scene, load_trajectories(tmp_path / "plain"))


def _sliding_cube(deceleration_mps2: float, height_m: float = 0.0524) -> dict:
    """A cube pushed along the table at 1 m/s, decelerating at ``deceleration_mps2``
    (friction), 0.4 s at 100 Hz, level the whole time."""
    from residualsim.data.trajectory import Trajectory

    t = np.arange(40) / 100.0
    x = 1.0 * t - 0.5 * deceleration_mps2 * t ** 2
    positions = np.column_stack([x, np.zeros_like(t), np.full_like(t, height_m)])
    velocity = np.column_stack([1.0 - deceleration_mps2 * t, np.zeros((len(t), 2))])
    quat = np.tile([1.0, 0.0, 0.0, 0.0], (len(t), 1))
    return {"slide": Trajectory(traj_id="slide", times_s=t, positions_m=positions,
                                quat_wxyz=quat, linear_velocity_mps=velocity,
                                angular_velocity_world_radps=np.zeros((len(t), 3)))}


@pytest.mark.parametrize("deceleration", [2.45, 5.0])
def test_a_box_pushed_along_the_table_is_not_taken_for_free_flight(deceleration):
    """Issue 51: a slide decelerating at mu g was refused as gravity along x."""
    prepare_recordings("cube", _sliding_cube(deceleration))


def test_a_level_object_off_the_table_is_still_refused():
    """Level, but hovering 5 cm above the table at its first sample: not on the table, so
    the fitted 'gravity' along x is refused as before."""
    with pytest.raises(DataError, match="falls with"):
        prepare_recordings("cube", _sliding_cube(5.0, height_m=0.10))


def test_a_gap_across_a_contact_is_named_not_refused(caplog):
    """Issue 51: an occlusion across a bounce, filled in by interpolation, put the object
    43 mm into the table and the recording was refused as another object's. Samples filled
    across a gap (``time_base.filled_samples``) are now named in a warning and not held
    against the recording; the same poses measured are still refused."""
    slide = _sliding_cube(2.45)["slide"]
    positions = slide.positions_m.copy()
    positions[20:25, 2] = 0.01  # 42 mm into the table
    measured = dataclasses.replace(slide, positions_m=positions)
    with pytest.raises(DataError, match="into the table"):
        prepare_recordings("cube", {"slide": measured})
    gapped = dataclasses.replace(measured, metadata={
        "time_base": {"filled_samples": [19, 20, 21, 22, 23, 24, 25]}})
    with caplog.at_level("WARNING"):
        assert len(prepare_recordings("cube", {"slide": gapped})) == 1
    assert "samples 19 to 25 were filled in across a gap" in caplog.text
    assert "42 mm into the table" in caplog.text


def test_centre_of_mass_velocities_are_refused_naming_the_convention(tmp_path):
    """Issue 51: vx, vy, vz of the hinge's base centre of mass (2 cm off its link origin, as
    PyBullet's getBaseVelocity gives it) passed the reader's 50 % check and misled lsq; the
    origin's (what residualsim reads), with noisy poses, load."""
    from residualsim.sim.rotations import as_rotation

    made = synthesize_tosses(TRUTH, n_tosses=3, n_samples=60, rng=6, scene=HINGE,
                             noise_m=5e-4, noise_rad=np.deg2rad(0.5))
    com = np.array([0.02, 0.0, 0.0])  # hinge.urdf's base <inertial> origin

    def at_com(t):
        lever = np.cross(t.angular_velocity_world_radps, as_rotation(t.quat_wxyz).apply(com))
        return t.linear_velocity_mps + lever

    for name, trajs in (("origin", made), ("com", _changed(made, linear_velocity_mps=at_com))):
        save_csv_trajectories(tmp_path / name, trajs, with_velocities=True)
    assert len(prepare_recordings(HINGE, load_trajectories(tmp_path / "origin"))) == 3
    with pytest.raises(DataError, match="centre of mass .*getBaseVelocity"):
        prepare_recordings(HINGE, load_trajectories(tmp_path / "com"))
