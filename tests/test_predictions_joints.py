"""Prediction files for scenes with joints: '<id>/joint_positions' (S, T, n), URDF order."""

from __future__ import annotations

import numpy as np
import pytest

from residualsim.data import Trajectory
from residualsim.errors import PredictionError
from residualsim.evaluation.predictions import (TrajectoryPredictions, load_predictions,
                                                save_predictions)


def _unit(rng, shape):
    q = rng.normal(size=(*shape, 4))
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def test_joint_positions_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    joints = rng.normal(size=(2, 5, 3))
    predictions = TrajectoryPredictions.from_arrays(
        ["a", "b"], [rng.normal(size=(2, 5, 3)), rng.normal(size=(2, 4, 3))],
        [_unit(rng, (2, 5)), _unit(rng, (2, 4))], joint_positions=[joints, None])
    loaded = load_predictions(save_predictions(tmp_path / "p.npz", predictions))
    np.testing.assert_array_equal(loaded["a"].joint_positions, joints)
    assert loaded["b"].joint_positions is None
    with np.load(tmp_path / "p.npz") as archive:
        assert "a/joint_positions" in archive.files and "b/joint_positions" not in archive.files


def test_from_trajectories_keeps_the_joints():
    t = np.arange(4) / 100.0
    samples = [Trajectory(traj_id="x", times_s=t, positions_m=np.zeros((4, 3)),
                          quat_wxyz=np.tile([1.0, 0, 0, 0], (4, 1)),
                          linear_velocity_mps=np.zeros((4, 3)),
                          angular_velocity_world_radps=np.zeros((4, 3)), joint_names=("h",),
                          joint_positions=np.full((4, 1), float(k)),
                          joint_velocities=np.zeros((4, 1))) for k in range(3)]
    prediction = TrajectoryPredictions.from_trajectories({"x": samples})["x"]
    assert prediction.joint_positions.shape == (3, 4, 1)
    np.testing.assert_array_equal(prediction.joint_positions[:, 0, 0], [0, 1, 2])


@pytest.mark.parametrize("joints, message", [
    (np.zeros((1, 4, 2)), r"'x/joint_positions' has shape \(1, 4, 2\), expected \(S, T, n\) = "
                          r"\(2, 5, n >= 1\)"),
    (np.zeros((2, 5, 0)), "'x/joint_positions' has shape"),
    (np.full((2, 5, 1), np.nan), "'x/joint_positions' has a NaN"),
])
def test_bad_joint_positions_name_the_key(joints, message):
    rng = np.random.default_rng(1)
    with pytest.raises(PredictionError, match=message):
        TrajectoryPredictions({"x": (np.zeros((2, 5, 3)), _unit(rng, (2, 5)), joints)})


def test_joint_positions_without_a_position_are_refused(tmp_path):
    np.savez(tmp_path / "j.npz", **{"x/joint_positions": np.zeros((1, 3, 1))})
    with pytest.raises(PredictionError, match=r"j\.npz: key 'x/joint_positions' has no "
                                              r"matching 'x/position'"):
        load_predictions(tmp_path / "j.npz")
