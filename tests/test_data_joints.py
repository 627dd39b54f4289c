"""Trajectory with joints: defaults keep old calls working, the joint arrays are validated."""

from __future__ import annotations

import numpy as np
import pytest

from residualsim.data import Trajectory
from residualsim.errors import DataError


def _base(n: int = 5) -> dict:
    return dict(traj_id="a", times_s=np.arange(n) / 100.0, positions_m=np.zeros((n, 3)),
                quat_wxyz=np.tile([1.0, 0, 0, 0], (n, 1)), linear_velocity_mps=np.zeros((n, 3)),
                angular_velocity_world_radps=np.zeros((n, 3)))


def test_a_rigid_body_has_no_joints():
    traj = Trajectory(**_base())
    assert traj.n_joints == 0 and traj.joint_names == ()
    assert traj.joint_positions.shape == traj.joint_velocities.shape == (5, 0)
    assert traj.joint_state_at(2).shape == (0,)
    assert traj.state_at(0).shape == (13,)


def test_joints_are_copied_frozen_and_stacked_in_the_joint_state():
    positions = np.arange(10.0).reshape(5, 2)
    traj = Trajectory(**_base(), joint_names=["elbow", "slide"], joint_positions=positions,
                      joint_velocities=-positions)
    positions[0, 0] = 99.0  # the caller's array is not shared
    assert traj.joint_names == ("elbow", "slide") and traj.n_joints == 2
    assert traj.joint_positions[0, 0] == 0.0 and not traj.joint_positions.flags.writeable
    np.testing.assert_array_equal(traj.joint_state_at(1), [2.0, 3.0, -2.0, -3.0])


@pytest.mark.parametrize("changes, message", [
    ({"joint_names": ("a",), "joint_positions": np.zeros((5, 2)),
      "joint_velocities": np.zeros((5, 1))}, r"joint_positions has shape \(5, 2\), expected \(5, 1\)"),
    ({"joint_names": ("a",), "joint_positions": np.zeros((5, 1))},
     r"joint_velocities has shape \(5, 0\), expected \(5, 1\)"),
    ({"joint_names": ("a", "a"), "joint_positions": np.zeros((5, 2)),
      "joint_velocities": np.zeros((5, 2))}, "joint 'a' is named more than once"),
    ({"joint_names": "ab"}, "sequence of non-empty str"),
    ({"joint_names": ("a",), "joint_positions": np.full((5, 1), np.nan),
      "joint_velocities": np.zeros((5, 1))}, "joint_positions has a NaN .* sample 0 .*'a'"),
    ({"joint_positions": np.zeros((5, 1))}, r"joint_positions has shape \(5, 1\), expected \(5, 0\)"),
])
def test_bad_joint_arrays_are_refused(changes, message):
    with pytest.raises(DataError, match=message):
        Trajectory(**_base(), source="x.csv", **changes)


def test_replace_with_fewer_samples_keeps_working_for_a_rigid_body():
    import dataclasses

    traj = Trajectory(**_base())
    short = dataclasses.replace(traj, **{k: v[:3] for k, v in _base().items() if k != "traj_id"})
    assert short.joint_positions.shape == (3, 0)
    jointed = Trajectory(**_base(), joint_names=("a",), joint_positions=np.zeros((5, 1)),
                         joint_velocities=np.zeros((5, 1)))
    with pytest.raises(DataError, match=r"joint_positions has shape \(5, 1\), expected \(3, 1\)"):
        dataclasses.replace(jointed, **{k: v[:3] for k, v in _base().items() if k != "traj_id"})
