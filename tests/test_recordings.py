"""Recordings meet a scene: checked against the object, initial states fitted by rollout."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from residualsim.data import Trajectory, load_trajectories
from residualsim.data.csv import save_csv_trajectories
from residualsim.errors import DataError
from residualsim.sim.recordings import load_recordings, prepare_recordings
from residualsim.sim.synthesize import synthesize_tosses

ROOT = Path(__file__).resolve().parents[1]
HINGE = str(ROOT / "assets" / "examples" / "hinge.toml")
ELL = str(ROOT / "assets" / "examples" / "ell.toml")
TRUTH = "lateral_friction=0.3,restitution=0.4"


@pytest.mark.parametrize("scene, lin_mps, ang_radps", [(ELL, 0.008, 0.12), (HINGE, 0.01, 0.15)])
def test_initial_velocities_of_pose_only_recordings_are_fitted_by_rollout(
        tmp_path, scene, lin_mps, ang_radps):
    """Poses with 0.5 mm / 0.5 deg noise, written as CSV without velocities: the fitted
    initial velocities are close to the simulated truth (median over tosses), far closer
    than the poses' smoothed differences."""
    truth = synthesize_tosses(TRUTH, n_tosses=10, n_samples=60, noise_m=5e-4,
                              noise_rad=np.radians(0.5), rng=4, scene=scene)
    save_csv_trajectories(tmp_path, truth)
    raw = load_trajectories(tmp_path)
    fitted = load_recordings(tmp_path, scene)
    errors = {"raw": [], "fitted": []}
    for key, recording in truth.items():
        exact = np.r_[recording.linear_velocity_mps[0], recording.angular_velocity_world_radps[0]]
        for name, source in (("raw", raw), ("fitted", fitted)):
            got = np.r_[source[key].linear_velocity_mps[0],
                        source[key].angular_velocity_world_radps[0]]
            errors[name].append(np.abs(got - exact))
    fitted_errors, raw_errors = np.array(errors["fitted"]), np.array(errors["raw"])
    assert np.median(fitted_errors[:, :3]) < lin_mps
    assert np.median(fitted_errors[:, 3:]) < ang_radps
    assert np.median(fitted_errors) < 0.5 * np.median(raw_errors)
    notes = [r.metadata for r in fitted.values() if "initial_fit_rms_m" in r.metadata]
    assert len(notes) >= 8
    assert np.median([n["initial_fit_rms_m"] for n in notes]) < 1e-3  # about the noise


def test_recordings_with_recorded_velocities_are_left_alone():
    tosses = load_trajectories(ROOT / "data" / "samples" / "contactnets-cube")
    prepared = prepare_recordings("cube", tosses)
    for key, toss in tosses.items():
        assert prepared[key] is toss


def test_a_recording_that_cannot_be_the_scenes_is_named(tmp_path):
    planar = Trajectory(traj_id="p1", times_s=np.arange(5) * 0.01,
                        positions_m=np.zeros((5, 3)) + [0, 0.1, 0],
                        quat_wxyz=np.tile([1.0, 0, 0, 0], (5, 1)),
                        linear_velocity_mps=np.zeros((5, 3)),
                        angular_velocity_world_radps=np.zeros((5, 3)), planar=True,
                        source="csv:p1.csv")
    with pytest.raises(DataError, match="p1.csv: a planar recording, but scene 'hinge'"):
        prepare_recordings(HINGE, {"p1": planar})
    cube_like = synthesize_tosses(TRUTH, n_tosses=1, n_samples=5, rng=0)
    with pytest.raises(DataError, match=r"joints \[\] do not match scene 'hinge'"):
        prepare_recordings(HINGE, cube_like)


def test_a_recording_that_starts_inside_the_table_is_refused():
    toss = synthesize_tosses(TRUTH, n_tosses=1, n_samples=5, rng=0)["synthetic-0"]
    sunk = Trajectory(traj_id="sunk", times_s=toss.times_s,
                      positions_m=toss.positions_m - [0, 0, toss.positions_m[0, 2] + 0.26],
                      quat_wxyz=toss.quat_wxyz, linear_velocity_mps=toss.linear_velocity_mps,
                      angular_velocity_world_radps=toss.angular_velocity_world_radps,
                      source="tosses/sunk.pt")
    with pytest.raises(DataError, match=r"tosses/sunk.pt: the first pose puts the object 3\d\d"):
        prepare_recordings("cube", {"sunk": sunk})


def test_another_objects_recordings_are_refused():
    """The real cube tosses are the cube's (they sink at most 5.2 mm into the table), but
    not the L-shape's: at the cube's resting poses it floats above the table; a resting
    pose moved 30 mm into the table is refused too, naming the sample."""
    tosses = load_trajectories(ROOT / "data" / "samples" / "contactnets-cube")
    prepare_recordings("cube", tosses)
    prepare_recordings(str(ROOT / "assets" / "cube.toml"), tosses)
    with pytest.raises(DataError, match=r"tosses/\d+.pt: the object comes to rest \d+ mm or "
                                        r"more above the table .* scene 'ell'"):
        prepare_recordings(ELL, tosses)
    toss = next(iter(tosses.values()))
    positions = np.array(toss.positions_m)
    positions[-1, 2] -= 0.03  # the cube rests on the table there
    sunk = Trajectory(traj_id="sunk", times_s=toss.times_s, positions_m=positions,
                      quat_wxyz=toss.quat_wxyz, linear_velocity_mps=toss.linear_velocity_mps,
                      angular_velocity_world_radps=toss.angular_velocity_world_radps,
                      source="tosses/sunk.pt")
    with pytest.raises(DataError, match=rf"tosses/sunk.pt: the pose at sample {toss.n_samples - 1} \(t = "
                                        r"[\d.]+ s\) puts the object 3\d mm into the table"):
        prepare_recordings("cube", {"sunk": sunk})
