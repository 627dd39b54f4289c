"""The log score of a Gaussian-mixture predictive density against an observation.

Log score (negative log predictive density) of the observation y under
p(y) = Σ_k w_k N(y; m_k, C_k):

    LS = −log Σ_k w_k (2π)^(−D/2) |C_k|^(−1/2) exp(−½ (y − m_k)ᵀ C_k⁻¹ (y − m_k)),

computed with a Cholesky factor per component and a log-sum-exp over components. Lower is
better; it is proper (strictly so) and, unlike the energy score, infinite for a point mass,
so it is defined only for predictions with a density (covariances positive definite). Its
unit is log((unit of y)^−D): with y in m/s and D = 3, a shift of the units by a factor c
shifts every score by D log c, so compare log scores only in the same units.
"""

from __future__ import annotations

import numpy as np

__all__ = ["gaussian_mixture_log_score"]


def gaussian_mixture_log_score(truth: np.ndarray, weights: np.ndarray, means: np.ndarray,
                               covariances: np.ndarray) -> np.ndarray:
    """Negative log density of each of B observations under its Gaussian mixture.

    Parameters
    ----------
    truth : ndarray of shape (B, D)
        The observations.
    weights : ndarray of shape (B, K)
        Mixture weights, each row summing to one (normalised here).
    means : ndarray of shape (B, K, D)
        Component means, in the units of ``truth``.
    covariances : ndarray of shape (B, K, D, D)
        Component covariances, positive definite, in squared units of ``truth``.

    Returns
    -------
    ndarray of shape (B,)
        −log p(truth), in log((unit of truth)^−D).

    Raises
    ------
    ValueError
        Shapes that do not match, or a covariance that is not positive definite.
    """
    truth = np.asarray(truth, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    means = np.asarray(means, dtype=np.float64)
    covariances = np.asarray(covariances, dtype=np.float64)
    n_batch, n_dims = truth.shape
    n_components = weights.shape[1] if weights.ndim == 2 else -1
    if (weights.shape != (n_batch, n_components) or means.shape != (n_batch, n_components, n_dims)
            or covariances.shape != (n_batch, n_components, n_dims, n_dims)):
        raise ValueError(f"expected truth (B, D), weights (B, K), means (B, K, D) and "
                         f"covariances (B, K, D, D), got {truth.shape}, {weights.shape}, "
                         f"{means.shape} and {covariances.shape}")
    try:
        factor = np.linalg.cholesky(covariances)  # (B, K, D, D), lower
    except np.linalg.LinAlgError as exc:
        raise ValueError("a covariance is not positive definite: the log score needs a "
                         "density") from exc
    offset = truth[:, None, :] - means  # (B, K, D)
    whitened = np.linalg.solve(factor, offset[..., None])[..., 0]
    log_det = 2.0 * np.log(np.diagonal(factor, axis1=-2, axis2=-1)).sum(axis=-1)
    with np.errstate(divide="ignore"):
        log_weights = np.log(weights / weights.sum(axis=1, keepdims=True))
    log_component = log_weights - 0.5 * (np.einsum("bkd,bkd->bk", whitened, whitened)
                                         + log_det + n_dims * np.log(2.0 * np.pi))
    top = log_component.max(axis=1, keepdims=True)
    return -(top[:, 0] + np.log(np.exp(log_component - top).sum(axis=1)))
