"""Scores of a sample ensemble against an observation: the energy score, the CRPS, sample
regions and the reliability curve.

Energy score of an ensemble of S points X_s against the observation y:
ES = mean_s ||X_s - y|| - 1/(2 S^2) sum_{s,s'} ||X_s - X_s'|| (for S = 1, the error).

CRPS of one coordinate (:func:`crps_ensemble`): the same estimator in one dimension,
CRPS = mean_s |X_s - y| - 1/(2 S^2) sum_{s,s'} |X_s - X_s'|, the CRPS of the ensemble's
empirical distribution (the "energy" form, ``scoringrules``' ``estimator="nrg"``; not the
fair form with 1/(2 S (S - 1)), which is unbiased for the CRPS of the distribution the
samples come from but undefined at S = 1). It is computed with ``scoringrules``'
``estimator="qd"``, the quantile decomposition of the same value, O(S log S) instead of the
O(S^2) pairs. A point mass (S = 1) scores its absolute error;
in one dimension the energy score equals this CRPS.

Sample regions (Mahalanobis depth). For the S sample points X_s in D dimensions, take
their mean m and covariance C (divisor S - 1), regularised as C + eps I with
eps = 1e-8 (units^2) + 1e-6 trace(C) / D, so that degenerate clouds (a planar motion with
z = 0, identical samples) still work. The Mahalanobis distance is
d(x) = sqrt((x - m)^T (C + eps I)^-1 (x - m)). The recorded point y is inside the
alpha-region when d(y) <= the alpha-quantile (linear interpolation, :func:`numpy.quantile`)
of the samples' own distances.

The samples' own distances are leave-one-out distances (for S >= 3): each X_s is measured
against the mean and covariance of the other S - 1 samples, as y is measured against
samples it is not part of. Measured in-sample, the samples sit closer to their own mean
than a fresh draw does, and a perfectly calibrated ensemble would show too little coverage
(for 3-D Gaussians: 0.86 instead of 0.90 at S = 64, 0.72 at S = 16). With leave-one-out
distances, y and the samples are (nearly) exchangeable for a calibrated ensemble, and the expected
coverage is about (alpha (S - 1) + 1) / (S + 1) (the interpolated quantile sits between
order statistics): 0.888 for alpha = 0.9 and S = 64, 0.898 at S = 400, and alpha for
alpha = 0.5. The leave-one-out distance has a closed form
(Sherman-Morrison): with a = d(X_s)^2 measured in-sample,
d_(s)^2 = (S / (S - 1))^2 (S - 2) / (S - 1) a / (1 - S a / (S - 1)^2), a monotone map of
a, so the region's shape is unchanged, only its size. With S = 2 the in-sample distances
are used.

Reliability curve (:func:`reliability_curve`): the coverage, i.e. the fraction of
observations inside their ensembles' alpha-regions defined above, at each level alpha of
:data:`RELIABILITY_LEVELS` (10 %, 20 %, ..., 90 %). A calibrated ensemble lies on the
diagonal up to the finite-S offset (alpha (S - 1) + 1) / (S + 1) - alpha (at most 1.2
points at S = 64) and the sampling noise of the fraction; coverage below the diagonal means
overconfident samples (regions too small), above it underconfident ones.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

__all__ = ["COVERAGE_LEVELS", "RELIABILITY_LEVELS", "energy_score", "region_membership",
           "crps_ensemble", "reliability_curve", "max_deviation", "pose_points",
           "trajectory_energy_score", "antithetic_energy_score"]

#: Probability levels of the sample regions whose coverage is reported.
COVERAGE_LEVELS = (0.5, 0.9)

#: Levels of the reliability curve (central sample regions of 10 %, 20 %, ..., 90 %).
RELIABILITY_LEVELS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)

#: Regularisation of the sample covariance: eps = ABS + REL * trace(C) / D.
COVARIANCE_EPS_ABS = 1e-8
COVARIANCE_EPS_REL = 1e-6

#: Upper bound on the size of the pairwise-distance block built at once.
_CHUNK_ELEMENTS = 1 << 22


def _ensembles(samples, truth) -> tuple[np.ndarray, np.ndarray]:
    """``samples`` (B, S, D) and ``truth`` (B, D) as float64 arrays; ValueError otherwise."""
    samples = np.asarray(samples, dtype=np.float64)
    truth = np.asarray(truth, dtype=np.float64)
    if samples.ndim != 3 or truth.shape != (samples.shape[0], samples.shape[2]):
        raise ValueError(
            f"expected samples of shape (B, S, D) and truth of shape (B, D), got "
            f"{samples.shape} and {truth.shape}"
        )
    return samples, truth


def energy_score(samples: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Energy score of each of B ensembles against its observation.

    ES = mean_s ||X_s - y|| - 1/(2 S^2) sum_{s,s'} ||X_s - X_s'||.

    Parameters
    ----------
    samples : ndarray of shape (B, S, D)
        B ensembles of S points in D dimensions.
    truth : ndarray of shape (B, D)
        The observed point of each ensemble.

    Returns
    -------
    ndarray of shape (B,)
        The energy scores, in the units of the points; 0 only for an exact deterministic
        prediction.
    """
    samples, truth = _ensembles(samples, truth)
    n_batch, n_samples, _ = samples.shape
    accuracy = np.linalg.norm(samples - truth[:, None, :], axis=-1).mean(axis=1)
    if n_samples == 1:
        return accuracy
    # Pairwise distances from the Gram matrix of the centred points (centring keeps the
    # cancellation error at the scale of the spread, not of the positions).
    centred = samples - samples.mean(axis=1, keepdims=True)
    spread = np.empty(n_batch)
    step = max(1, _CHUNK_ELEMENTS // (n_samples * n_samples))
    diagonal = np.arange(n_samples)
    for start in range(0, n_batch, step):
        block = centred[start : start + step]
        squared = np.einsum("bsd,bsd->bs", block, block)
        distance2 = squared[:, :, None] + squared[:, None, :]
        distance2 -= 2.0 * (block @ block.transpose(0, 2, 1))
        np.maximum(distance2, 0.0, out=distance2)
        distance2[:, diagonal, diagonal] = 0.0
        spread[start : start + step] = np.sqrt(distance2).sum(axis=(1, 2))
    return accuracy - spread / (2.0 * n_samples * n_samples)


def antithetic_energy_score(samples: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Energy score of ensembles drawn in antithetic pairs, unbiased for the distribution.

    Samples 2j and 2j + 1 are antithetic partners (drawn from one stream, the second with
    every normal negated and every uniform u replaced by 1 - u), so they are dependent; the
    pairs are independent of each other. The score is
    ES = mean_s ||X_s - y|| - 1/(2 S (S - 2)) sum over s, s' of different pairs ||X_s - X_s'||:
    the first term keeps every sample (antithetic pairs lower its variance), the second only
    pairs of independent samples (a partner's distance is larger than an independent
    draw's and would reward width). Both terms are unbiased, so the expectation is the
    energy score of the distribution the samples come from (the "fair" form), which a
    training loss needs: the ensemble form of :func:`energy_score` (1/(2 S^2) over all
    pairs, the zero diagonal included) scores the empirical ensemble, not the
    distribution, and is biased by the shrunken spread term (tested).

    Parameters
    ----------
    samples : ndarray (B, S, D), S even and >= 4
    truth : ndarray (B, D)

    Returns
    -------
    ndarray (B,), in the units of the points.
    """
    samples, truth = _ensembles(samples, truth)
    n_batch, n_samples, _ = samples.shape
    if n_samples < 4 or n_samples % 2:
        raise ValueError(f"antithetic pairs need an even number of samples >= 4, got "
                         f"{n_samples}")
    accuracy = np.linalg.norm(samples - truth[:, None, :], axis=-1).mean(axis=1)
    pair = np.arange(n_samples) // 2
    independent = pair[:, None] != pair[None, :]
    spread = np.empty(n_batch)
    step = max(1, _CHUNK_ELEMENTS // (n_samples * n_samples * samples.shape[2]))
    for start in range(0, n_batch, step):
        block = samples[start : start + step]
        distance = np.linalg.norm(block[:, :, None, :] - block[:, None, :, :], axis=-1)
        spread[start : start + step] = distance[:, independent].sum(axis=1)
    return accuracy - spread / (2.0 * n_samples * (n_samples - 2))


def pose_points(positions_m: np.ndarray, quat_wxyz: np.ndarray, radius_m: float,
                rotation_weight: float = 1.0) -> np.ndarray:
    """Poses as points of R^12 whose Euclidean distance is a pose distance in metres.

    A pose (position p in metres, world frame; unit quaternion q, w-x-y-z, body to world)
    becomes (p, c vec(R(q))) with c = w r_g / sqrt(2), so that the distance between two
    poses is sqrt(||p - p'||^2 + (2 w r_g sin(theta / 2))^2), theta the geodesic angle
    between the rotations: w r_g theta for small angles, as in the training loss. Being a
    Euclidean embedding, the energy score on these points is a proper scoring rule for
    poses (the geodesic angle itself is not known to be of negative type on SO(3)).

    Parameters
    ----------
    positions_m : ndarray (..., 3)
    quat_wxyz : ndarray (..., 4), normalised here
    radius_m : float
        The body's radius of gyration r_g, metres.
    rotation_weight : float
        w, the weight of rotation against position.

    Returns
    -------
    ndarray (..., 12), metres.
    """
    quat = np.asarray(quat_wxyz, dtype=np.float64)
    quat = quat / np.linalg.norm(quat, axis=-1, keepdims=True)
    w, x, y, z = np.moveaxis(quat, -1, 0)
    matrix = np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
                       2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
                       2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
                      axis=-1)
    scale = float(rotation_weight) * float(radius_m) / np.sqrt(2.0)
    return np.concatenate([np.asarray(positions_m, dtype=np.float64), scale * matrix], axis=-1)


def trajectory_energy_score(samples: np.ndarray, truth: np.ndarray) -> float:
    """Energy score along a trajectory: the mean over time of each time's energy score.

    Parameters
    ----------
    samples : ndarray (S, T, D)
        S sampled trajectories of T points (e.g. positions in metres, or :func:`pose_points`).
    truth : ndarray (T, D)
        The recorded trajectory on the same time samples.

    Returns
    -------
    float, in the units of the points; a deterministic prediction (S = 1) scores its mean
    error.
    """
    samples = np.asarray(samples, dtype=np.float64)
    return float(energy_score(np.swapaxes(samples, 0, 1), truth).mean())


def _mahalanobis_distances(
    samples: np.ndarray, truth: np.ndarray, leave_one_out: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Mahalanobis distances of the samples, shape (B, S), and of the truth, shape (B,)."""
    n_batch, n_samples, n_dims = samples.shape
    mean = samples.mean(axis=1)
    centred = samples - mean[:, None, :]
    covariance = centred.transpose(0, 2, 1) @ centred / (n_samples - 1)
    trace = np.trace(covariance, axis1=1, axis2=2)
    covariance += (COVARIANCE_EPS_ABS + COVARIANCE_EPS_REL * trace / n_dims)[
        :, None, None
    ] * np.eye(n_dims)
    solved = np.linalg.solve(covariance, centred.transpose(0, 2, 1))  # (B, D, S)
    sample_d2 = np.maximum(np.einsum("bsd,bds->bs", centred, solved), 0.0)
    if leave_one_out and n_samples >= 3:
        s = float(n_samples)
        leverage = np.maximum(1.0 - s / (s - 1.0) ** 2 * sample_d2, 1e-12)
        sample_d2 = (s / (s - 1.0)) ** 2 * (s - 2.0) / (s - 1.0) * sample_d2 / leverage
    offset = truth - mean
    truth_solved = np.linalg.solve(covariance, offset[:, :, None])[:, :, 0]
    truth_d2 = np.maximum(np.einsum("bd,bd->b", offset, truth_solved), 0.0)
    return np.sqrt(sample_d2), np.sqrt(truth_d2)


def region_membership(
    samples: np.ndarray,
    truth: np.ndarray,
    levels: Iterable[float] = COVERAGE_LEVELS,
    *,
    leave_one_out: bool = True,
) -> np.ndarray:
    """Whether each observation lies in its ensemble's Mahalanobis-depth sample regions.

    See the module docstring for the definition of the alpha-region.

    Parameters
    ----------
    samples : ndarray of shape (B, S, D)
        B ensembles of S >= 2 points in D dimensions.
    truth : ndarray of shape (B, D)
        The observed point of each ensemble.
    levels : iterable of float in (0, 1]
        The alphas.
    leave_one_out : bool, default True
        Measure each sample against the other S - 1 (calibrated; the default used by the
        scores) or against all S samples including itself (biased towards too little
        coverage for small S).

    Returns
    -------
    ndarray of bool, shape (len(levels), B)
    """
    samples, truth = _ensembles(samples, truth)
    levels = np.asarray(list(levels), dtype=np.float64)
    if samples.shape[1] < 2:
        raise ValueError(f"sample regions need S >= 2 samples, got {samples.shape[1]}")
    if ((levels <= 0) | (levels > 1)).any():
        raise ValueError(f"levels must lie in (0, 1], got {levels.tolist()}")
    sample_distance, truth_distance = _mahalanobis_distances(samples, truth, leave_one_out)
    thresholds = np.quantile(sample_distance, levels, axis=1)  # (L, B)
    return truth_distance[None, :] <= thresholds




def crps_ensemble(samples: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """CRPS of each coordinate of B ensembles against their observations.

    CRPS = mean_s |X_s - y| - 1/(2 S^2) sum_{s,s'} |X_s - X_s'| per coordinate (the
    empirical distribution's CRPS, see the module docstring), computed by ``scoringrules``
    (``crps_ensemble``, ``estimator="qd"``: the same value as ``"nrg"`` from sorted samples).

    Parameters
    ----------
    samples : ndarray of shape (B, S, D)
        B ensembles of S >= 1 points in D dimensions.
    truth : ndarray of shape (B, D)
        The observed point of each ensemble.

    Returns
    -------
    ndarray of shape (B, D)
        In the units of the points; for S = 1 the absolute errors.
    """
    import scoringrules

    samples, truth = _ensembles(samples, truth)
    if samples.shape[0] == 0:
        return np.zeros(truth.shape)
    crps = scoringrules.crps_ensemble(truth, samples, m_axis=1, estimator="qd",
                                      backend="numpy")
    return np.asarray(crps, dtype=np.float64).reshape(truth.shape)


def reliability_curve(inside: np.ndarray, levels: Iterable[float] = RELIABILITY_LEVELS
                      ) -> dict[str, float]:
    """The coverage at each level as ``{"0.1": c, ...}`` (JSON-ready keys).

    Parameters
    ----------
    inside : ndarray of shape (n, L), bool or float
        Per observation (or per recording, a fraction of its time samples), whether it
        lies in the region of each level; the coverage is the mean over the n rows.
    levels : iterable of float
        The L levels, in the columns' order.
    """
    inside = np.asarray(inside, dtype=np.float64)
    levels = list(levels)
    if inside.ndim != 2 or inside.shape[1] != len(levels):
        raise ValueError(f"expected inside of shape (n, {len(levels)}), got {inside.shape}")
    coverage = inside.mean(axis=0)
    return {f"{level:g}": float(value) for level, value in zip(levels, coverage)}


def max_deviation(curve: dict[str, float] | None) -> float | None:
    """max over levels of |coverage - level| of a :func:`reliability_curve` (None stays
    None)."""
    if curve is None:
        return None
    return max(abs(value - float(level)) for level, value in curve.items())
