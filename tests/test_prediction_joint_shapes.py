"""A prediction whose joints do not match the recording's is an error, not a "nan" score."""

from __future__ import annotations

import numpy as np
import pytest

from residualsim.data import Trajectory
from residualsim.errors import PredictionError
from residualsim.evaluation.metrics import score_trajectories
from residualsim.evaluation.predictions import TrajectoryPredictions


def _recording(n_joints: int) -> Trajectory:
    times = np.arange(5) * 0.01
    quats = np.tile([1.0, 0, 0, 0], (5, 1))
    return Trajectory(traj_id="1", times_s=times, positions_m=np.zeros((5, 3)),
                      quat_wxyz=quats, linear_velocity_mps=np.zeros((5, 3)),
                      angular_velocity_world_radps=np.zeros((5, 3)),
                      joint_names=tuple(f"j{k}" for k in range(n_joints)),
                      joint_positions=np.zeros((5, n_joints)),
                      joint_velocities=np.zeros((5, n_joints)))


def _prediction(n_joints: int) -> TrajectoryPredictions:
    return TrajectoryPredictions.from_arrays(
        ["1"], [np.zeros((2, 5, 3))], [np.tile([1.0, 0, 0, 0], (2, 5, 1))],
        joint_positions=[np.full((2, 5, n_joints), 0.1)])


def test_wrong_joint_width_is_refused_naming_the_trajectory():
    with pytest.raises(PredictionError, match="'1' predicts 2 joint position.*has 1 joint"):
        score_trajectories(_prediction(2), [_recording(1)])


def test_matching_joints_are_scored():
    score = score_trajectories(_prediction(1), [_recording(1)])
    assert score.joint_rmse is not None and score.joint_rmse[0] == pytest.approx(0.1)
