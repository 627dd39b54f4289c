"""Recorded velocity columns are checked against the poses without taking tracking noise for
motion: noisy poses with true velocities load; zero or mis-scaled velocities are refused."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from residualsim.data import load_trajectories, save_csv_trajectories
from residualsim.data.bundled import REAL_SAMPLES, SYNTHETIC_SAMPLES
from residualsim.errors import DataError


@pytest.mark.parametrize("source", [SYNTHETIC_SAMPLES, REAL_SAMPLES])
def test_true_velocities_with_noisy_poses_load(tmp_path, source):
    """1 mm pose noise at 148 Hz is 0.2 m/s of one-sample differences at rest."""
    tosses = load_trajectories(source)
    save_csv_trajectories(tmp_path, tosses, with_velocities=True)
    loaded = load_trajectories(tmp_path)
    assert sorted(loaded) == sorted(tosses)


@pytest.mark.parametrize("change, problem", [
    (lambda v: np.zeros_like(v), "are all zero while the poses move"),
    (lambda v: 1000.0 * v, "disagree with the poses' differences"),
    (lambda v: -v, "disagree"),
])
def test_wrong_velocity_columns_are_refused(tmp_path, change, problem):
    toss = next(iter(load_trajectories(SYNTHETIC_SAMPLES).values()))
    bad = dataclasses.replace(toss, linear_velocity_mps=change(toss.linear_velocity_mps))
    save_csv_trajectories(tmp_path, [bad], with_velocities=True)
    with pytest.raises(DataError, match=problem) as caught:
        load_trajectories(tmp_path)
    assert toss.traj_id in str(caught.value)
