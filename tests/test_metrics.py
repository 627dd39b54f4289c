"""Tests of the scoring of trajectory and impact predictions."""

from __future__ import annotations

import math

import numpy as np
import pytest

import residualsim.evaluation.sample_scores as sample_scores_module
from residualsim.data.impacts import PlanarImpacts
from residualsim.data.trajectory import Trajectory
from residualsim.errors import DataError, PredictionError
from residualsim.evaluation.sample_scores import (
    RELIABILITY_LEVELS,
    _mahalanobis_distances,
    crps_ensemble,
    energy_score,
    region_membership,
)
from residualsim.evaluation.metrics import (
    ImpactScore,
    TrajectoryScore,
    format_table,
    score_impacts,
    score_trajectories,
)
from residualsim.evaluation.predictions import ImpactPredictions, TrajectoryPredictions

TRAJECTORY_KEYS = {
    "n_trajectories",
    "n_missing",
    "n_samples",
    "position_rmse_m",
    "position_rmse_m_median",
    "position_rmse_sides",
    "position_rmse_sides_median",
    "final_error_m",
    "final_error_m_median",
    "rotation_error_deg",
    "rotation_error_deg_median",
    "energy_score_m",
    "energy_score_m_median",
    "coverage_50",
    "coverage_90",
    "coverage_xy_50",
    "coverage_xy_90",
    "reliability_final",
    "reliability_final_xy",
    "reliability_trajectory",
    "reliability_trajectory_xy",
    "reliability_max_deviation",
    "crps_final_m",
    "trajectory_energy_score_m",
    "trajectory_energy_score_m_median",
    "energy_score_pose_m",
    "energy_score_pose_m_median",
    "trajectory_energy_score_pose_m",
    "trajectory_energy_score_pose_m_median",
    "radius_of_gyration_m",
}

IMPACT_KEYS = {
    "n_impacts",
    "n_missing",
    "n_samples",
    "velocity_rmse_mps",
    "velocity_rmse_mps_median",
    "dx_rmse_mps",
    "dy_rmse_mps",
    "kdtheta_rmse_mps",
    "dtheta_rmse_radps",
    "energy_score_mps",
    "energy_score_mps_median",
    "coverage_50",
    "coverage_90",
    "reliability",
    "reliability_max_deviation",
    "crps_mps",
}


def unit_quaternions(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    q = rng.normal(size=(*shape, 4))
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def quaternion_multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product of w-x-y-z quaternions, broadcasting."""
    aw, ax, ay, az = np.moveaxis(a, -1, 0)
    bw, bx, by, bz = np.moveaxis(b, -1, 0)
    return np.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        axis=-1,
    )


def axis_angle(axis: np.ndarray, angle_deg: float) -> np.ndarray:
    axis = np.asarray(axis, dtype=float) / np.linalg.norm(axis)
    half = math.radians(angle_deg) / 2.0
    return np.concatenate([[math.cos(half)], math.sin(half) * axis])


def make_recording(traj_id: str, n_steps: int, rng: np.random.Generator) -> Trajectory:
    return Trajectory(
        traj_id=traj_id,
        times_s=np.arange(n_steps) / 100.0,
        positions_m=rng.normal(size=(n_steps, 3)),
        quat_wxyz=unit_quaternions(rng, (n_steps,)),
        linear_velocity_mps=np.zeros((n_steps, 3)),
        angular_velocity_world_radps=np.zeros((n_steps, 3)),
    )


def make_recordings(lengths: dict[str, int], seed: int = 0) -> dict[str, Trajectory]:
    rng = np.random.default_rng(seed)
    return {traj_id: make_recording(traj_id, t, rng) for traj_id, t in lengths.items()}


def copy_predictions(
    recordings: dict[str, Trajectory], n_samples: int = 1
) -> TrajectoryPredictions:
    ids = list(recordings)
    return TrajectoryPredictions.from_arrays(
        ids,
        [np.repeat(recordings[i].positions_m[None], n_samples, axis=0) for i in ids],
        [np.repeat(recordings[i].quat_wxyz[None], n_samples, axis=0) for i in ids],
    )


# --------------------------------------------------------------------------- trajectories


@pytest.mark.parametrize("n_samples", [1, 3])
def test_perfect_prediction_scores_zero(n_samples):
    recordings = make_recordings({"a": 20, "b": 7, "c": 2})
    score = score_trajectories(copy_predictions(recordings, n_samples), recordings, side_m=0.1,
                               radius_of_gyration_m=0.04)
    summary = score.aggregate()
    assert set(summary) == TRAJECTORY_KEYS
    assert summary["n_trajectories"] == 3 and summary["n_samples"] == n_samples
    assert summary["n_missing"] == 0
    for key in ("position_rmse_m", "position_rmse_sides", "final_error_m", "energy_score_m",
                "trajectory_energy_score_m", "energy_score_pose_m",
                "trajectory_energy_score_pose_m"):
        assert summary[key] == pytest.approx(0.0, abs=1e-12), key
    assert summary["rotation_error_deg"] == pytest.approx(0.0, abs=1e-9)
    if n_samples == 1:
        assert summary["coverage_50"] is None and summary["coverage_90"] is None
        assert score.inside_50 is None
    else:  # a degenerate cloud sitting exactly on the truth contains it
        assert summary["coverage_50"] == 1.0 and summary["coverage_90"] == 1.0


def test_quaternion_sign_does_not_matter():
    recordings = make_recordings({"a": 10})
    predictions = TrajectoryPredictions.from_arrays(
        ["a"], [recordings["a"].positions_m], [-recordings["a"].quat_wxyz]
    )
    score = score_trajectories(predictions, recordings)
    assert score.rotation_error_deg[0] == pytest.approx(0.0, abs=1e-9)


def test_constant_offset_gives_rmse_and_final_error():
    recordings = make_recordings({"a": 30, "b": 5})
    d = 0.025
    offset = d * np.array([2.0, -1.0, 2.0]) / 3.0  # norm d
    predictions = TrajectoryPredictions.from_arrays(
        ["a", "b"],
        [recordings[i].positions_m + offset for i in ("a", "b")],
        [recordings[i].quat_wxyz for i in ("a", "b")],
    )
    score = score_trajectories(predictions, recordings, side_m=0.05)
    np.testing.assert_allclose(score.position_rmse_m, d, rtol=1e-12)
    np.testing.assert_allclose(score.final_error_m, d, rtol=1e-12)
    np.testing.assert_allclose(score.energy_score_m, d, rtol=1e-12)  # S = 1: the error
    np.testing.assert_allclose(score.position_rmse_sides, d / 0.05, rtol=1e-12)
    summary = score.aggregate()
    assert summary["position_rmse_m"] == pytest.approx(d)
    assert summary["position_rmse_sides"] == pytest.approx(0.5)
    assert summary["final_error_m"] == pytest.approx(d)


def test_offsets_in_different_directions_per_sample():
    recordings = make_recordings({"a": 12})
    d = 0.3
    directions = np.array([[1.0, 0, 0], [0, -1.0, 0], [0, 0, 1.0], [0.6, 0.8, 0]])
    position = recordings["a"].positions_m[None] + d * directions[:, None, :]
    quaternion = np.repeat(recordings["a"].quat_wxyz[None], 4, axis=0)
    score = score_trajectories(
        TrajectoryPredictions.from_arrays(["a"], [position], [quaternion]), recordings
    )
    assert score.position_rmse_m[0] == pytest.approx(d)
    assert score.final_error_m[0] == pytest.approx(d)


def test_rmse_weights_steps_and_samples_equally():
    recordings = make_recordings({"a": 4})
    position = np.repeat(recordings["a"].positions_m[None], 2, axis=0)
    position[0, 1, 0] += 2.0  # one of 8 (s, t) points off by 2 m
    quaternion = np.repeat(recordings["a"].quat_wxyz[None], 2, axis=0)
    score = score_trajectories(
        TrajectoryPredictions.from_arrays(["a"], [position], [quaternion]), recordings
    )
    assert score.position_rmse_m[0] == pytest.approx(math.sqrt(4.0 / 8.0))
    assert score.final_error_m[0] == pytest.approx(0.0)


@pytest.mark.parametrize(
    ("angle_deg", "expected_deg"),
    [(0.001, 0.001), (10.0, 10.0), (90.0, 90.0), (179.0, 179.0), (270.0, 90.0)],
)
def test_known_rotation_gives_its_angle(angle_deg, expected_deg):
    rng = np.random.default_rng(3)
    recordings = make_recordings({"a": 15, "b": 6}, seed=4)
    ids, positions, quaternions = [], [], []
    for traj_id, recording in recordings.items():
        delta = axis_angle(rng.normal(size=3), angle_deg)
        body = quaternion_multiply(recording.quat_wxyz, delta)  # rotated in the body frame
        world = quaternion_multiply(delta, recording.quat_wxyz)  # rotated in the world frame
        ids.append(traj_id)
        positions.append(np.repeat(recording.positions_m[None], 2, axis=0))
        quaternions.append(np.stack([body, world]))
    score = score_trajectories(
        TrajectoryPredictions.from_arrays(ids, positions, quaternions), recordings
    )
    np.testing.assert_allclose(score.rotation_error_deg, expected_deg, rtol=1e-9, atol=1e-9)
    assert score.aggregate()["rotation_error_deg"] == pytest.approx(expected_deg)


def test_rotation_error_is_mean_over_steps():
    recordings = make_recordings({"a": 4})
    quaternion = recordings["a"].quat_wxyz.copy()
    quaternion[2] = quaternion_multiply(quaternion[2], axis_angle([0, 0, 1], 40.0))
    score = score_trajectories(
        TrajectoryPredictions.from_arrays(["a"], [recordings["a"].positions_m], [quaternion]),
        recordings,
    )
    assert score.rotation_error_deg[0] == pytest.approx(10.0)


def test_slightly_unnormalised_quaternions_are_normalised():
    recordings = make_recordings({"a": 5})
    predictions = TrajectoryPredictions.from_arrays(
        ["a"], [recordings["a"].positions_m], [1.005 * recordings["a"].quat_wxyz]
    )
    assert score_trajectories(predictions, recordings).rotation_error_deg[0] < 1e-9


def test_mean_and_median_over_trajectories():
    recordings = make_recordings({"a": 5, "b": 8, "c": 3})
    offsets = {"a": 1.0, "b": 2.0, "c": 6.0}
    predictions = TrajectoryPredictions.from_arrays(
        list(offsets),
        [recordings[i].positions_m + [0.0, 0.0, offsets[i]] for i in offsets],
        [recordings[i].quat_wxyz for i in offsets],
    )
    score = score_trajectories(predictions, recordings)
    assert score.ids == ("a", "b", "c")
    summary = score.aggregate()
    assert summary["position_rmse_m"] == pytest.approx(3.0)
    assert summary["position_rmse_m_median"] == pytest.approx(2.0)
    assert summary["final_error_m"] == pytest.approx(3.0)
    assert summary["final_error_m_median"] == pytest.approx(2.0)
    assert summary["position_rmse_sides"] is None


def test_unpredicted_recordings_are_counted_not_scored():
    recordings = make_recordings({"a": 5, "b": 6, "c": 7, "d": 8})
    predictions = copy_predictions({i: recordings[i] for i in ("c", "a")})
    score = score_trajectories(predictions, recordings)
    assert score.ids == ("c", "a")
    assert score.missing_ids == ("b", "d")
    assert score.aggregate()["n_missing"] == 2
    assert score.aggregate()["n_trajectories"] == 2
    # An iterable of trajectories is keyed by traj_id.
    assert score_trajectories(predictions, list(recordings.values())).n_missing == 2


def test_prediction_without_recording_raises_naming_the_id():
    recordings = make_recordings({"a": 5, "zz9": 6})
    predictions = copy_predictions(recordings)
    del recordings["zz9"]
    with pytest.raises(PredictionError, match="'zz9'"):
        score_trajectories(predictions, recordings)


def test_length_mismatch_raises_naming_id_and_lengths():
    recordings = make_recordings({"a": 5, "b": 9})
    predictions = copy_predictions(make_recordings({"a": 5, "b": 8}))
    with pytest.raises(PredictionError, match=r"'b'.*T=8.*T=9"):
        score_trajectories(predictions, recordings)


@pytest.mark.parametrize("side", [0.0, -1.0, float("nan"), float("inf"), "0.1", True])
def test_bad_side_is_refused(side):
    recordings = make_recordings({"a": 5})
    with pytest.raises(PredictionError, match="side_m"):
        score_trajectories(copy_predictions(recordings), recordings, side_m=side)


def test_wrong_prediction_kind_is_refused():
    recordings = make_recordings({"a": 5})
    with pytest.raises(PredictionError, match="score_impacts"):
        score_trajectories(ImpactPredictions(np.zeros((1, 2, 3)), [1, 2]), recordings)
    with pytest.raises(TypeError):
        score_trajectories({"a": None}, recordings)


# --------------------------------------------------------------------------- energy score


def naive_energy_score(samples: np.ndarray, truth: np.ndarray) -> float:
    s = len(samples)
    accuracy = np.mean([np.linalg.norm(x - truth) for x in samples])
    spread = sum(np.linalg.norm(a - b) for a in samples for b in samples)
    return accuracy - spread / (2 * s * s)


def test_energy_score_matches_definition():
    rng = np.random.default_rng(5)
    samples = rng.normal(size=(6, 9, 3)) * [1.0, 0.1, 3.0] + 100.0
    truth = rng.normal(size=(6, 3)) + 100.0
    expected = [naive_energy_score(x, y) for x, y in zip(samples, truth)]
    np.testing.assert_allclose(energy_score(samples, truth), expected, rtol=1e-10)


def test_energy_score_of_symmetric_two_point_ensemble():
    # X = y + b v +- a u with u, v orthonormal: ES = sqrt(a^2 + b^2) - a / 2.
    a, b = 0.3, 0.4
    recordings = make_recordings({"a": 6})
    recording = recordings["a"]
    u, v = np.array([0.0, 0.6, 0.8]), np.array([1.0, 0.0, 0.0])
    position = np.repeat(recording.positions_m[None], 2, axis=0)
    position[0, -1] += b * v + a * u
    position[1, -1] += b * v - a * u
    quaternion = np.repeat(recording.quat_wxyz[None], 2, axis=0)
    score = score_trajectories(
        TrajectoryPredictions.from_arrays(["a"], [position], [quaternion]), recordings
    )
    assert score.energy_score_m[0] == pytest.approx(math.hypot(a, b) - a / 2, rel=1e-12)
    assert score.final_error_m[0] == pytest.approx(math.hypot(a, b))


def test_energy_score_single_sample_is_the_error():
    rng = np.random.default_rng(6)
    samples = rng.normal(size=(4, 1, 3))
    truth = rng.normal(size=(4, 3))
    np.testing.assert_allclose(
        energy_score(samples, truth), np.linalg.norm(samples[:, 0] - truth, axis=1), rtol=1e-14
    )


# --------------------------------------------------------------------------- coverage


def gaussian_ensembles(rng, n_batch, n_samples, mean, factor, truth_shift=0.0):
    samples = mean + rng.normal(size=(n_batch, n_samples, 3)) @ factor.T
    truth = mean + rng.normal(size=(n_batch, 3)) @ factor.T + truth_shift
    return samples, truth


def predictions_from_final(samples, truth):
    """Two-step trajectories whose final positions are the given ensembles and truths."""
    n_batch, n_samples, _ = samples.shape
    recordings, positions, quaternions = {}, [], []
    identity = np.tile([1.0, 0.0, 0.0, 0.0], (2, 1))
    for index in range(n_batch):
        recorded = np.stack([truth[index], truth[index]])
        recordings[str(index)] = Trajectory(
            str(index), np.array([0.0, 0.1]), recorded, identity, np.zeros((2, 3)), np.zeros((2, 3))
        )
        position = np.repeat(recorded[None], n_samples, axis=0)
        position[:, -1] = samples[index]
        positions.append(position)
        quaternions.append(np.broadcast_to(identity, (n_samples, 2, 4)))
    predictions = TrajectoryPredictions.from_arrays(list(recordings), positions, quaternions)
    return predictions, recordings


FACTOR = np.array([[0.02, 0.0, 0.0], [0.01, 0.005, 0.0], [0.0, -0.003, 0.001]])


def test_coverage_is_calibrated_for_a_matching_gaussian():
    rng = np.random.default_rng(7)
    samples, truth = gaussian_ensembles(rng, 600, 200, np.array([0.3, -0.2, 0.05]), FACTOR)
    predictions, recordings = predictions_from_final(samples, truth)
    summary = score_trajectories(predictions, recordings).aggregate()
    assert summary["n_samples"] == 200
    assert summary["coverage_50"] == pytest.approx(0.5, abs=0.06)
    assert summary["coverage_90"] == pytest.approx(0.9, abs=0.04)


def test_coverage_is_calibrated_for_a_flat_cloud():
    # Planar motion: every sample and the truth have z = 0, the covariance is singular.
    rng = np.random.default_rng(8)
    flat = FACTOR.copy()
    flat[2] = 0.0
    samples, truth = gaussian_ensembles(rng, 800, 100, np.zeros(3), flat)
    inside = region_membership(samples, truth)
    assert inside.shape == (2, 800)
    assert inside[0].mean() == pytest.approx(0.5, abs=0.06)
    assert inside[1].mean() == pytest.approx(0.9, abs=0.04)


def test_truth_far_away_is_never_covered():
    rng = np.random.default_rng(9)
    samples, truth = gaussian_ensembles(rng, 50, 64, np.zeros(3), FACTOR, truth_shift=1.0)
    predictions, recordings = predictions_from_final(samples, truth)
    score = score_trajectories(predictions, recordings)
    assert score.aggregate()["coverage_50"] == 0.0
    assert score.aggregate()["coverage_90"] == 0.0
    assert score.inside_90.shape == (50,) and score.inside_90.dtype == bool


def test_table_plane_coverage_ignores_a_resting_height_offset():
    """Bodies at rest: the samples agree on the height, the recording sits 1 mm lower. The
    3-D regions then miss every recording; the x-y regions stay calibrated."""
    rng = np.random.default_rng(12)
    flat = FACTOR.copy()
    flat[2] = 0.0
    samples, truth = gaussian_ensembles(rng, 600, 100, np.array([0.0, 0.0, 0.0524]), flat)
    truth[:, 2] -= 0.0011
    predictions, recordings = predictions_from_final(samples, truth)
    summary = score_trajectories(predictions, recordings).aggregate()
    assert summary["coverage_90"] == 0.0
    assert summary["coverage_xy_50"] == pytest.approx(0.5, abs=0.06)
    assert summary["coverage_xy_90"] == pytest.approx(0.9, abs=0.04)
    # and the x-y regions still miss a recording that is off in x and y
    far, far_truth = gaussian_ensembles(rng, 50, 64, np.zeros(3), FACTOR, truth_shift=1.0)
    far_summary = score_trajectories(*predictions_from_final(far, far_truth)).aggregate()
    assert far_summary["coverage_xy_90"] == 0.0


def test_leave_one_out_distances_match_refitting(monkeypatch):
    # Without the regularisation, the closed form equals refitting without each sample.
    monkeypatch.setattr(sample_scores_module, "COVARIANCE_EPS_ABS", 0.0)
    monkeypatch.setattr(sample_scores_module, "COVARIANCE_EPS_REL", 0.0)
    rng = np.random.default_rng(11)
    samples = rng.normal(size=(3, 12, 3)) @ FACTOR.T
    truth = rng.normal(size=(3, 3))
    sample_distance, truth_distance = _mahalanobis_distances(samples, truth)
    for b in range(3):
        mean = samples[b].mean(axis=0)
        inverse = np.linalg.inv(np.cov(samples[b], rowvar=False))
        offset = truth[b] - mean
        assert truth_distance[b] == pytest.approx(math.sqrt(offset @ inverse @ offset), rel=1e-9)
        for s in range(12):
            others = np.delete(samples[b], s, axis=0)
            offset = samples[b, s] - others.mean(axis=0)
            expected = math.sqrt(offset @ np.linalg.inv(np.cov(others, rowvar=False)) @ offset)
            assert sample_distance[b, s] == pytest.approx(expected, rel=1e-9)


def test_coverage_stays_calibrated_for_few_samples():
    # In-sample distances would give about 0.81 for the 90 % region at S = 32.
    rng = np.random.default_rng(12)
    samples, truth = gaussian_ensembles(rng, 4000, 32, np.ones(3), FACTOR)
    inside = region_membership(samples, truth)
    assert inside[0].mean() == pytest.approx(0.5, abs=0.03)
    assert inside[1].mean() == pytest.approx((0.9 * 31 + 1) / 33, abs=0.02)
    biased = region_membership(samples, truth, leave_one_out=False)
    assert biased[1].mean() < 0.85


def test_region_membership_checks_its_input():
    with pytest.raises(ValueError, match="S >= 2"):
        region_membership(np.zeros((2, 1, 3)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="levels"):
        region_membership(np.zeros((2, 4, 3)), np.zeros((2, 3)), levels=[1.5])
    with pytest.raises(ValueError, match="shape"):
        region_membership(np.zeros((2, 4, 3)), np.zeros((3, 3)))


def test_wider_region_covers_more():
    rng = np.random.default_rng(10)
    samples, truth = gaussian_ensembles(rng, 300, 50, np.zeros(3), FACTOR)
    inside = region_membership(samples, truth)
    assert (inside[0] <= inside[1]).all()


# --------------------------------------------------------------------------- impacts


def make_impacts(rng: np.random.Generator, n: int = 8, k: float = 0.0192) -> PlanarImpacts:
    rows = rng.permutation(1000)[:n]
    return PlanarImpacts(
        pre_state=rng.normal(size=(n, 6)),
        post_state=rng.normal(size=(n, 6)),
        rows=rows,
        normal_jacobian=np.zeros((n, 3)),
        tangent_jacobian=np.zeros((n, 3)),
        best_impulse=np.zeros((n, 2)),
        radius_of_gyration_m=k,
    )


def test_perfect_impact_prediction_scores_zero():
    rng = np.random.default_rng(11)
    impacts = make_impacts(rng)
    order = rng.permutation(impacts.n_impacts)  # any order: matched by row
    predictions = ImpactPredictions(impacts.post_state[order, 3:][None], impacts.rows[order])
    score = score_impacts(predictions, impacts)
    summary = score.aggregate()
    assert set(summary) == IMPACT_KEYS
    assert summary["n_impacts"] == impacts.n_impacts and summary["n_missing"] == 0
    for key in ("velocity_rmse_mps", "dx_rmse_mps", "dy_rmse_mps", "kdtheta_rmse_mps"):
        assert summary[key] == 0.0
    assert summary["energy_score_mps"] == 0.0
    assert summary["coverage_50"] is None and summary["coverage_90"] is None
    np.testing.assert_array_equal(score.rows, impacts.rows[order])


def test_impact_errors_follow_the_documented_formula():
    rng = np.random.default_rng(12)
    k = 0.05
    impacts = make_impacts(rng, n=6, k=k)
    truth = impacts.post_state[:, 3:]
    offset = np.array([0.3, -0.4, 2.0])  # dx, dy in m/s; dtheta in rad/s
    predictions = ImpactPredictions(np.stack([truth + offset, truth - offset]), impacts.rows)
    summary = score_impacts(predictions, impacts).aggregate()
    assert summary["dx_rmse_mps"] == pytest.approx(0.3)
    assert summary["dy_rmse_mps"] == pytest.approx(0.4)
    assert summary["kdtheta_rmse_mps"] == pytest.approx(k * 2.0)
    assert summary["dtheta_rmse_radps"] == pytest.approx(2.0)
    expected = math.sqrt(0.3**2 + 0.4**2 + (k * 2.0) ** 2)
    assert summary["velocity_rmse_mps"] == pytest.approx(expected)
    assert summary["velocity_rmse_mps_median"] == pytest.approx(expected)
    # Symmetric two-point ensemble centred on the truth: ES = a - a / 2.
    assert summary["energy_score_mps"] == pytest.approx(expected / 2)


def test_impact_rmse_pools_over_impacts():
    rng = np.random.default_rng(13)
    impacts = make_impacts(rng, n=2)
    predicted = impacts.post_state[:, 3:].copy()
    predicted[0, 0] += 3.0  # one impact off by 3 m/s in dx, the other exact
    score = score_impacts(ImpactPredictions(predicted[None], impacts.rows), impacts)
    np.testing.assert_allclose(score.velocity_error_mps, [3.0, 0.0])
    assert score.aggregate()["velocity_rmse_mps"] == pytest.approx(math.sqrt(4.5))


def test_impact_coverage():
    rng = np.random.default_rng(14)
    n, s = 600, 200
    k = 0.0192
    impacts = make_impacts(rng, n=n, k=k)
    truth = impacts.post_state[:, 3:] * [1.0, 1.0, k]
    samples = truth[None] + rng.normal(size=(s, n, 3)) @ FACTOR.T
    truth_draw = rng.normal(size=(n, 3)) @ FACTOR.T
    # Move the ensembles so that the recorded point is one more draw of the same Gaussian.
    samples = samples - truth_draw[None]
    predictions = ImpactPredictions(samples / [1.0, 1.0, k], impacts.rows)
    summary = score_impacts(predictions, impacts).aggregate()
    assert summary["coverage_50"] == pytest.approx(0.5, abs=0.06)
    assert summary["coverage_90"] == pytest.approx(0.9, abs=0.04)
    far = ImpactPredictions((samples + 10.0) / [1.0, 1.0, k], impacts.rows)
    assert score_impacts(far, impacts).aggregate()["coverage_90"] == 0.0


def test_impacts_subset_and_unknown_rows():
    rng = np.random.default_rng(15)
    impacts = make_impacts(rng, n=5)
    subset = ImpactPredictions(impacts.post_state[[1, 3], 3:][None], impacts.rows[[1, 3]])
    score = score_impacts(subset, impacts)
    assert score.aggregate()["n_missing"] == 3
    assert sorted(score.missing_rows.tolist()) == sorted(impacts.rows[[0, 2, 4]].tolist())
    absent = int(impacts.rows.max()) + 17
    wrong = ImpactPredictions(np.zeros((1, 2, 3)), [int(impacts.rows[0]), absent])
    with pytest.raises(PredictionError, match=f"row {absent}"):
        score_impacts(wrong, impacts)


def test_impacts_with_repeated_rows_are_refused():
    rng = np.random.default_rng(16)
    impacts = make_impacts(rng, n=3)
    repeated = PlanarImpacts(
        impacts.pre_state, impacts.post_state, [4, 4, 5], impacts.normal_jacobian,
        impacts.tangent_jacobian, impacts.best_impulse,
    )
    with pytest.raises(DataError, match="repeat"):
        score_impacts(ImpactPredictions(np.zeros((1, 1, 3)), [5]), repeated)


# --------------------------------------------------------------------------- tables


def test_format_table_for_trajectories():
    recordings = make_recordings({"a": 5, "b": 6})
    table = format_table(score_trajectories(copy_predictions(recordings), recordings, side_m=0.1))
    lines = table.splitlines()
    assert lines[0].startswith("2 trajectories scored")
    assert lines[1].split() == ["metric", "value", "unit"]
    assert any("position RMSE" in line and line.endswith("sides") for line in lines)
    assert any("coverage of 90 % region" in line and "n/a" in line for line in lines)
    assert all(len(line) <= len(lines[1]) + 3 for line in lines[2:])


def test_format_table_for_impacts():
    rng = np.random.default_rng(17)
    impacts = make_impacts(rng, n=4)
    predictions = ImpactPredictions(
        impacts.post_state[:, 3:][None] + rng.normal(size=(3, 4, 3)), impacts.rows
    )
    score = score_impacts(predictions, impacts)
    assert isinstance(score, ImpactScore)
    table = format_table(score)
    assert "dtheta RMSE" in table and "rad/s" in table and "n/a" not in table
    with pytest.raises(TypeError):
        format_table({"position_rmse_m": 1.0})


def test_scores_are_read_only():
    recordings = make_recordings({"a": 5})
    score = score_trajectories(copy_predictions(recordings, 2), recordings)
    assert isinstance(score, TrajectoryScore)
    with pytest.raises(ValueError):
        score.position_rmse_m[0] = 1.0


# --------------------------------------------------------------------------- reliability, CRPS

LEVELS = np.array(RELIABILITY_LEVELS)


def expected_coverage(n_samples: int) -> np.ndarray:
    """What a calibrated S-sample ensemble covers at each level (sample_scores docstring)."""
    return (LEVELS * (n_samples - 1) + 1) / (n_samples + 1)


def curve_values(curve: dict) -> np.ndarray:
    assert list(curve) == [f"{level:g}" for level in RELIABILITY_LEVELS]
    return np.array(list(curve.values()))


def gaussian_trajectories(rng, n_batch, n_samples, n_steps, shrink=1.0):
    """Trajectories whose recorded position at every time (after the first) is one more draw
    of the Gaussian its samples come from (samples narrowed by ``shrink``)."""
    recordings, positions, quaternions = {}, [], []
    identity = np.tile([1.0, 0.0, 0.0, 0.0], (n_steps, 1))
    for index in range(n_batch):
        centre = np.cumsum(rng.normal(scale=0.05, size=(n_steps, 3)), axis=0)
        scale = np.linspace(0.2, 1.5, n_steps)[:, None, None] * FACTOR.T  # grows with time
        recorded = centre + np.einsum("td,tde->te", rng.normal(size=(n_steps, 3)), scale)
        noise = np.einsum("std,tde->ste", rng.normal(size=(n_samples, n_steps, 3)), scale)
        sampled = centre[None] + noise / shrink
        recorded[0] = sampled[:, 0] = centre[0]  # rollouts start at the recorded position
        recordings[str(index)] = Trajectory(str(index), np.arange(n_steps) / 100.0, recorded,
                                            identity, np.zeros((n_steps, 3)),
                                            np.zeros((n_steps, 3)))
        positions.append(sampled)
        quaternions.append(np.broadcast_to(identity, (n_samples, n_steps, 4)))
    return TrajectoryPredictions.from_arrays(list(recordings), positions, quaternions), recordings


def test_reliability_curve_is_on_the_diagonal_for_matching_samples():
    rng = np.random.default_rng(21)
    samples, truth = gaussian_ensembles(rng, 1500, 64, np.array([0.3, -0.2, 0.05]), FACTOR)
    summary = score_trajectories(*predictions_from_final(samples, truth)).aggregate()
    for key in ("reliability_final", "reliability_final_xy"):
        coverage = curve_values(summary[key])
        np.testing.assert_allclose(coverage, expected_coverage(64), atol=0.04, err_msg=key)
        np.testing.assert_allclose(coverage, LEVELS, atol=0.05, err_msg=key)
        assert summary["reliability_max_deviation"][key.removeprefix("reliability_")] < 0.05
    # the 50 % and 90 % points are the existing coverages (the same regions)
    assert summary["reliability_final"]["0.5"] == summary["coverage_50"]
    assert summary["reliability_final_xy"]["0.9"] == summary["coverage_xy_90"]


def test_reliability_along_the_trajectory_for_matching_and_overconfident_samples():
    rng = np.random.default_rng(22)
    predictions, recordings = gaussian_trajectories(rng, 60, 64, 25)
    score = score_trajectories(predictions, recordings)
    assert score.trajectory_inside.shape == (60, len(LEVELS))
    summary = score.aggregate()
    for key in ("reliability_trajectory", "reliability_trajectory_xy"):
        # 60 x 24 time samples (the first, the common start, is not scored)
        np.testing.assert_allclose(curve_values(summary[key]), LEVELS, atol=0.04, err_msg=key)
    narrow = score_trajectories(*gaussian_trajectories(np.random.default_rng(22), 60, 64, 25,
                                                       shrink=3.0)).aggregate()
    for key in ("reliability_trajectory", "reliability_trajectory_xy"):
        coverage = curve_values(narrow[key])
        assert (coverage < LEVELS - 0.05).all(), key
        assert coverage[-1] < 0.45, key  # the 90 % region covers under half the times
        assert narrow["reliability_max_deviation"][key.removeprefix("reliability_")] > 0.4


def test_overconfident_samples_fall_well_below_the_diagonal():
    rng = np.random.default_rng(23)
    samples, truth = gaussian_ensembles(rng, 1500, 64, np.zeros(3), FACTOR)
    centre = samples.mean(axis=1, keepdims=True)
    narrow = centre + (samples - centre) / 3.0  # the same centres, spread shrunk 3x
    summary = score_trajectories(*predictions_from_final(narrow, truth)).aggregate()
    coverage = curve_values(summary["reliability_final"])
    # 3-D Gaussian: the 90 % region shrunk 3x holds P(chi2_3 <= 6.25 / 9) = 0.13
    assert coverage[-1] == pytest.approx(0.13, abs=0.04)
    assert (coverage <= LEVELS - 0.08).all()
    assert summary["reliability_max_deviation"]["final"] > 0.7
    np.testing.assert_array_less(curve_values(summary["reliability_final_xy"]), LEVELS)


def test_one_sample_reports_no_reliability():
    recordings = make_recordings({"a": 6, "b": 4})
    score = score_trajectories(copy_predictions(recordings, 1), recordings)
    summary = score.aggregate()
    for key in ("reliability_final", "reliability_final_xy", "reliability_trajectory",
                "reliability_trajectory_xy", "reliability_max_deviation"):
        assert summary[key] is None, key
    assert score.inside_levels is None and score.trajectory_inside is None
    assert "reliability" not in format_table(score)


def test_crps_of_a_point_mass_is_the_absolute_error():
    recordings = make_recordings({"a": 8, "b": 3})
    offsets = {"a": np.array([0.01, -0.02, 0.003]), "b": np.array([-0.04, 0.0, 0.5])}
    predictions = TrajectoryPredictions.from_arrays(
        ["a", "b"], [recordings[i].positions_m[None] + offsets[i] for i in ("a", "b")],
        [recordings[i].quat_wxyz[None] for i in ("a", "b")])
    score = score_trajectories(predictions, recordings)
    np.testing.assert_allclose(score.crps_final_m, np.abs([offsets["a"], offsets["b"]]),
                               rtol=1e-12, atol=1e-15)
    crps = score.aggregate()["crps_final_m"]
    assert list(crps) == ["x", "y", "z"]
    assert crps["z"] == pytest.approx((0.003 + 0.5) / 2)
    assert "CRPS, final z" in format_table(score)


def test_crps_matches_the_energy_form_definition():
    rng = np.random.default_rng(24)
    samples = rng.normal(size=(5, 17, 3))
    truth = rng.normal(size=(5, 3))
    accuracy = np.abs(samples - truth[:, None]).mean(axis=1)
    spread = np.abs(samples[:, :, None] - samples[:, None, :]).mean(axis=(1, 2))
    np.testing.assert_allclose(crps_ensemble(samples, truth), accuracy - 0.5 * spread,
                               rtol=1e-12)
    # in one dimension the energy score is the CRPS
    np.testing.assert_allclose(crps_ensemble(samples[..., :1], truth[:, :1])[:, 0],
                               energy_score(samples[..., :1], truth[:, :1]), rtol=1e-12)
    # a sharper ensemble around the truth scores lower; a calibrated one beats a narrow one
    wide = truth[:, None] + rng.normal(size=(5, 400, 3))
    narrow = truth[:, None] + 0.1 * rng.normal(size=(5, 400, 3))
    assert (crps_ensemble(narrow, truth) < crps_ensemble(wide, truth)).all()


def test_impact_reliability_and_crps():
    rng = np.random.default_rng(25)
    n, s, k = 900, 64, 0.0192
    impacts = make_impacts(rng, n=n, k=k)
    truth = impacts.post_state[:, 3:] * [1.0, 1.0, k]
    samples = truth[None] + rng.normal(size=(s, n, 3)) @ FACTOR.T
    samples = samples - (rng.normal(size=(n, 3)) @ FACTOR.T)[None]
    score = score_impacts(ImpactPredictions(samples / [1.0, 1.0, k], impacts.rows), impacts)
    summary = score.aggregate()
    np.testing.assert_allclose(curve_values(summary["reliability"]), LEVELS, atol=0.05)
    assert summary["reliability"]["0.9"] == summary["coverage_90"]
    assert summary["reliability_max_deviation"] < 0.05
    assert list(summary["crps_mps"]) == ["dx", "dy", "kdtheta"]
    # Gaussian CRPS of a calibrated forecast: E = sigma / sqrt(pi)
    sigma = np.sqrt((FACTOR**2).sum(axis=1))
    np.testing.assert_allclose(list(summary["crps_mps"].values()), sigma / math.sqrt(math.pi),
                               rtol=0.08)
    table = format_table(score)
    assert "CRPS, kdtheta" in table and "reliability" in table
    exact = score_impacts(ImpactPredictions(impacts.post_state[:, 3:][None], impacts.rows),
                          impacts).aggregate()
    assert exact["reliability"] is None and exact["crps_mps"]["dx"] == pytest.approx(0.0)


# ------------------------------------------------------------ pose and trajectory energy scores


def _pose_distance(p, q, p_ref, q_ref, radius):
    """sqrt(||p - p'||^2 + (2 r_g sin(theta / 2))^2), theta the geodesic angle, directly."""
    cos_half = abs(float(np.dot(q / np.linalg.norm(q), q_ref / np.linalg.norm(q_ref))))
    theta = 2.0 * math.acos(min(cos_half, 1.0))
    return math.sqrt(float(np.sum((p - p_ref) ** 2)) + (2 * radius * math.sin(theta / 2)) ** 2)


def _direct_energy_score(points, truth, distance):
    """mean_s d(X_s, y) - 1/(2 S^2) sum_{s,s'} d(X_s, X_s') with the given distance."""
    n = len(points)
    accuracy = sum(distance(x, truth) for x in points) / n
    spread = sum(distance(x, z) for x in points for z in points) / (2.0 * n * n)
    return accuracy - spread


def _noisy_pose_predictions(recordings, n_samples, rng, scale_m=0.05, angle_deg=20.0):
    ids = list(recordings)
    positions, quaternions = [], []
    for i in ids:
        recorded = recordings[i]
        positions.append(recorded.positions_m[None]
                         + scale_m * rng.normal(size=(n_samples, *recorded.positions_m.shape)))
        turns = np.empty((n_samples, recorded.n_samples, 4))
        for s in range(n_samples):
            for t in range(recorded.n_samples):
                turn = axis_angle(rng.normal(size=3), angle_deg * rng.uniform())
                turns[s, t] = quaternion_multiply(turn, recorded.quat_wxyz[t])
        quaternions.append(turns * rng.choice([-1.0, 1.0], size=(n_samples, 1, 1)))
    return TrajectoryPredictions.from_arrays(ids, positions, quaternions)


def test_deterministic_trajectory_energy_score_is_the_mean_error():
    """S = 1: along the trajectory, the energy score is the mean over time of the position
    error (and of the pose distance); at the end, the final error (final pose distance)."""
    rng = np.random.default_rng(31)
    recordings = make_recordings({"a": 9, "b": 4}, seed=31)
    predictions = _noisy_pose_predictions(recordings, 1, rng)
    radius = 0.05
    score = score_trajectories(predictions, recordings, radius_of_gyration_m=radius)
    for k, traj_id in enumerate(predictions.ids):
        p, q = predictions[traj_id].position[0], predictions[traj_id].quaternion[0]
        rec = recordings[traj_id]
        errors = np.linalg.norm(p - rec.positions_m, axis=1)
        assert score.trajectory_energy_score_m[k] == pytest.approx(errors.mean(), rel=1e-12)
        pose = [_pose_distance(p[t], q[t], rec.positions_m[t], rec.quat_wxyz[t], radius)
                for t in range(rec.n_samples)]
        assert score.trajectory_energy_score_pose_m[k] == pytest.approx(np.mean(pose), rel=1e-9)
        assert score.energy_score_pose_m[k] == pytest.approx(pose[-1], rel=1e-9)
        assert pose[-1] > errors[-1]  # the rotation adds to the distance
    summary = score.aggregate()
    assert summary["radius_of_gyration_m"] == radius
    assert summary["trajectory_energy_score_m"] == pytest.approx(
        score.trajectory_energy_score_m.mean())
    assert summary["energy_score_pose_m_median"] == pytest.approx(
        np.median(score.energy_score_pose_m))


def test_sampled_pose_energy_scores_match_the_definition():
    rng = np.random.default_rng(32)
    recordings = make_recordings({"a": 5, "b": 3}, seed=32)
    predictions = _noisy_pose_predictions(recordings, 4, rng)
    radius = 0.03
    score = score_trajectories(predictions, recordings, radius_of_gyration_m=radius)

    def position_distance(x, y):
        return float(np.linalg.norm(x[0] - y[0]))

    def pose_distance(x, y):
        return _pose_distance(x[0], x[1], y[0], y[1], radius)

    for k, traj_id in enumerate(predictions.ids):
        p, q = predictions[traj_id].position, predictions[traj_id].quaternion
        rec = recordings[traj_id]
        per_time, per_time_pose = [], []
        for t in range(rec.n_samples):
            points = [(p[s, t], q[s, t]) for s in range(p.shape[0])]
            truth = (rec.positions_m[t], rec.quat_wxyz[t])
            per_time.append(_direct_energy_score(points, truth, position_distance))
            per_time_pose.append(_direct_energy_score(points, truth, pose_distance))
        assert score.trajectory_energy_score_m[k] == pytest.approx(np.mean(per_time), rel=1e-9)
        assert score.trajectory_energy_score_pose_m[k] == pytest.approx(np.mean(per_time_pose),
                                                                        rel=1e-9)
        assert score.energy_score_pose_m[k] == pytest.approx(per_time_pose[-1], rel=1e-9)
        assert score.energy_score_m[k] == pytest.approx(per_time[-1], rel=1e-9)


def test_pose_scores_need_a_radius_of_gyration():
    recordings = make_recordings({"a": 5})
    score = score_trajectories(copy_predictions(recordings, 2), recordings)
    summary = score.aggregate()
    assert summary["energy_score_pose_m"] is None and score.radius_of_gyration_m is None
    assert summary["trajectory_energy_score_pose_m"] is None
    assert summary["trajectory_energy_score_m"] == pytest.approx(0.0, abs=1e-12)
    assert "final pose" not in format_table(score)
    table = format_table(score_trajectories(copy_predictions(recordings, 2), recordings,
                                            radius_of_gyration_m=0.1))
    assert "energy score (final pose)" in table and "pose along the trajectory" in table
    for radius in (0.0, -1.0, float("nan"), "0.1", True):
        with pytest.raises(PredictionError, match="radius_of_gyration_m"):
            score_trajectories(copy_predictions(recordings), recordings,
                               radius_of_gyration_m=radius)
