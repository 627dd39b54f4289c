"""The project's NPZ files with joints: version 2 round trip; version 1 files still load."""

from __future__ import annotations

import json

import numpy as np
import pytest

from residualsim.data import Trajectory, load_trajectory, save_trajectory
from residualsim.errors import DataError


def _traj(joints: bool = True) -> Trajectory:
    n = 6
    extra = dict(joint_names=("hinge", "slide"), joint_positions=np.arange(12.0).reshape(n, 2),
                 joint_velocities=-np.arange(12.0).reshape(n, 2)) if joints else {}
    return Trajectory(traj_id="j", times_s=np.arange(n) / 100.0, positions_m=np.ones((n, 3)),
                      quat_wxyz=np.tile([1.0, 0, 0, 0], (n, 1)),
                      linear_velocity_mps=np.zeros((n, 3)),
                      angular_velocity_world_radps=np.zeros((n, 3)), **extra)


def _meta(path):
    with np.load(path, allow_pickle=False) as archive:
        return json.loads(str(archive["meta"])), sorted(archive.files)


def test_joints_round_trip_as_version_2(tmp_path):
    traj = _traj()
    save_trajectory(tmp_path / "j.npz", traj)
    meta, files = _meta(tmp_path / "j.npz")
    assert meta["format_version"] == 2
    assert {"joint_names", "joint_positions", "joint_velocities"} <= set(files)
    loaded = load_trajectory(tmp_path / "j.npz")
    assert loaded.joint_names == ("hinge", "slide")
    np.testing.assert_array_equal(loaded.joint_positions, traj.joint_positions)
    np.testing.assert_array_equal(loaded.joint_velocities, traj.joint_velocities)


def test_a_rigid_body_stays_version_1_and_old_files_load(tmp_path):
    save_trajectory(tmp_path / "r.npz", _traj(joints=False))
    meta, files = _meta(tmp_path / "r.npz")
    assert meta["format_version"] == 1 and not any(f.startswith("joint") for f in files)
    loaded = load_trajectory(tmp_path / "r.npz")
    assert loaded.n_joints == 0 and loaded.joint_positions.shape == (6, 0)


def test_version_2_without_joint_arrays_is_refused(tmp_path):
    traj = _traj()
    save_trajectory(tmp_path / "j.npz", traj)
    with np.load(tmp_path / "j.npz", allow_pickle=False) as archive:
        arrays = {k: archive[k] for k in archive.files if k != "joint_velocities"}
    np.savez(tmp_path / "k.npz", **arrays)
    with pytest.raises(DataError, match=r"k\.npz: format_version 2 file lacks joint array\(s\) "
                                        "joint_velocities"):
        load_trajectory(tmp_path / "k.npz")
    arrays["joint_velocities"] = np.zeros((6, 3))
    np.savez(tmp_path / "s.npz", **arrays)
    with pytest.raises(DataError, match=r"s\.npz: .*joint_velocities has shape \(6, 3\)"):
        load_trajectory(tmp_path / "s.npz")
