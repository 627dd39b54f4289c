"""Pose points (a Euclidean embedding of poses) and the energy score along a trajectory."""

import numpy as np
from scipy.spatial.transform import Rotation

from residualsim.evaluation.sample_scores import (energy_score, pose_points,
                                                  trajectory_energy_score)


def _wxyz(rotation: Rotation) -> np.ndarray:
    x, y, z, w = rotation.as_quat()
    return np.array([w, x, y, z])


def test_pose_distance_is_chordal_rotation_distance_weighted_by_radius():
    rng = np.random.default_rng(0)
    for _ in range(20):
        a, b = Rotation.random(random_state=rng), Rotation.random(random_state=rng)
        p, p2 = rng.normal(size=3), rng.normal(size=3)
        angle = (a.inv() * b).magnitude()
        distance = np.linalg.norm(pose_points(p, _wxyz(a), 0.05, 2.0)
                                  - pose_points(p2, _wxyz(b), 0.05, 2.0))
        expected = np.hypot(np.linalg.norm(p - p2), 2 * 2.0 * 0.05 * np.sin(angle / 2))
        assert np.isclose(distance, expected)


def test_sign_of_quaternion_does_not_matter():
    q = _wxyz(Rotation.from_rotvec([0.2, -0.4, 1.0]))
    assert np.allclose(pose_points(np.zeros(3), q, 0.1), pose_points(np.zeros(3), -q, 0.1))


def test_trajectory_energy_score_is_mean_of_per_time_scores():
    rng = np.random.default_rng(1)
    samples, truth = rng.normal(size=(8, 5, 3)), rng.normal(size=(5, 3))
    per_time = [energy_score(samples[None, :, t], truth[None, t])[0] for t in range(5)]
    assert np.isclose(trajectory_energy_score(samples, truth), np.mean(per_time))
    # one sample: the mean distance
    assert np.isclose(trajectory_energy_score(samples[:1], truth),
                      np.linalg.norm(samples[0] - truth, axis=1).mean())


def test_trajectory_energy_score_prefers_the_true_spread():
    rng = np.random.default_rng(2)
    truth = rng.normal(size=(400, 2))
    scores = {width: trajectory_energy_score(width * rng.normal(size=(64, 400, 2)), truth)
              for width in (0.3, 1.0, 3.0)}
    assert scores[1.0] < scores[0.3] and scores[1.0] < scores[3.0]
