"""The predictive mean of train/cube_published_metric.py: mean position, chordal mean turn."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from residualsim.sim.rotations import as_quat_wxyz, geodesic_angle


def test_samples_turned_symmetrically_about_a_pose_average_to_it(train_script):
    centre = Rotation.from_euler("xyz", [0.3, -0.2, 1.1])
    turns = Rotation.from_rotvec([[0.2, 0, 0], [-0.2, 0, 0], [0, 0.3, 0], [0, -0.3, 0]])
    samples = as_quat_wxyz(turns * centre, shape=(4,))
    # two sample times; the second with q and -q mixed (the same orientations)
    quat = np.stack([samples, samples * [[1], [-1], [1], [-1]]], axis=1)  # (S=4, T=2, 4)
    position = np.arange(24, dtype=float).reshape(4, 2, 3)
    mean_position, mean_quat = train_script("cube_published_metric").predictive_mean(position, quat)
    assert mean_position == pytest.approx(position.mean(axis=0))
    assert mean_quat.shape == (2, 4)
    assert geodesic_angle(mean_quat, as_quat_wxyz(centre, shape=(1,))) == pytest.approx(
        [0, 0], abs=1e-9)
