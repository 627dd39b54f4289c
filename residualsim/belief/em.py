"""Expectation-maximisation of a full-covariance Gaussian mixture, for the belief refit.

:func:`fit_full_mixture` is scikit-learn's
``GaussianMixture(k, covariance_type="full", init_params="kmeans", n_init=1)`` fit and its
``bic``, step for step (the same k-means start from scikit-learn's own
:class:`~sklearn.cluster.KMeans`, the same E and M steps, covariance floor, stopping rule
and parameter count; tests/test_belief_em.py holds the results to 1e-8 of scikit-learn's).
Why not scikit-learn's estimator itself: a belief step refits 1..4 components to 1000
particles of 12 coordinates, and there ``GaussianMixture`` spends ~0.75 ms an EM iteration
(4 components) in input checks, array-API dispatch and per-component SciPy calls, where the
arithmetic takes a few tens of µs; here the components' quadratic forms are one matrix
product and their Cholesky factors one batched call (~0.3 ms an iteration, the 1000 × 4
``exp`` and sums being most of it). 48 fits (4 candidates × 12 belief steps' particles)
took 0.54 s with scikit-learn and 0.32 s here (one thread); a 1000-particle refit on 2
workers, 29-35 ms before, 20-23 ms (train/README.md §10, "Batched particle steps").
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["fit_full_mixture"]

_LOG_2PI = math.log(2.0 * math.pi)


def fit_full_mixture(points: np.ndarray, k: int, seed: int, reg_covar: float = 1e-6,
                     tol: float = 1e-3, max_iter: int = 100
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """A ``k``-component full-covariance mixture fitted by EM to ``points`` (n, d), started
    from k-means labels (``KMeans(k, n_init=1)`` seeded ``seed``): weights (k,), means
    (k, d), covariances (k, d, d) (``reg_covar`` added to their diagonals) and the Bayesian
    information criterion on ``points`` (lower is better). EM stops when the mean
    log-likelihood changes by less than ``tol`` or after ``max_iter`` iterations (silently:
    scikit-learn warns). A covariance that is not positive definite gives a NaN BIC
    (scikit-learn raises)."""
    from sklearn.cluster import KMeans

    points = np.ascontiguousarray(points, dtype=np.float64)
    n, d = points.shape
    labels = KMeans(n_clusters=k, n_init=1,
                    random_state=np.random.RandomState(seed)).fit(points).labels_
    resp = np.zeros((n, k))
    resp[np.arange(n), labels] = 1.0
    try:
        weights, means, covariances, factors = _m_step(points, resp, reg_covar)
        weights = weights / n
        lower = -math.inf
        for _ in range(max_iter):
            norm, log_resp = _e_step(points, weights, means, factors)
            weights, means, covariances, factors = _m_step(points, np.exp(log_resp),
                                                           reg_covar)
            weights = weights / weights.sum()
            previous, lower = lower, float(norm.mean())
            if abs(lower - previous) < tol:
                break
        norm, _ = _e_step(points, weights, means, factors)
    except np.linalg.LinAlgError:
        return np.full(k, 1.0 / k), np.zeros((k, d)), np.full((k, d, d), np.nan), math.nan
    parameters = k * d * (d + 1) / 2.0 + k * d + k - 1
    return weights, means, covariances, -2.0 * float(norm.mean()) * n + parameters * math.log(n)


def _m_step(points: np.ndarray, resp: np.ndarray, reg_covar: float) -> tuple:
    """Component masses (k,) (not normalised), means, covariances and the precisions'
    upper Cholesky factors P (P Pᵀ = Σ⁻¹) from responsibilities ``resp`` (n, k)."""
    k, d = resp.shape[1], points.shape[1]
    mass = resp.sum(axis=0) + 10.0 * np.finfo(np.float64).eps
    means = (resp.T @ points) / mass[:, None]
    covariances = np.empty((k, d, d))
    for j in range(k):
        diff = points - means[j]
        covariances[j] = ((resp[:, j] * diff.T) @ diff) / mass[j]
    covariances[:, np.arange(d), np.arange(d)] += reg_covar
    lower = np.linalg.cholesky(covariances)  # LinAlgError: not positive definite
    factors = np.linalg.solve(lower, np.broadcast_to(np.eye(d), lower.shape)).transpose(0, 2, 1)
    return mass, means, covariances, factors


def _e_step(points: np.ndarray, weights: np.ndarray, means: np.ndarray,
            factors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per point the log of its mixture density (n,) and its log responsibilities (n, k)."""
    n, d = points.shape
    k = len(weights)
    log_det = np.log(factors[:, np.arange(d), np.arange(d)]).sum(axis=1)
    stacked = factors.transpose(1, 0, 2).reshape(d, k * d)  # every component in one product
    shift = np.einsum("kd,kde->ke", means, factors)
    y = (points @ stacked).reshape(n, k, d) - shift[None]
    with np.errstate(divide="ignore"):
        weighted = (-0.5 * (d * _LOG_2PI + np.einsum("nkd,nkd->nk", y, y)) + log_det
                    + np.log(weights))
    top = weighted.max(axis=1)
    norm = np.log(np.exp(weighted - top[:, None]).sum(axis=1)) + top
    return norm, weighted - norm[:, None]
