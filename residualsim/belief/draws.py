"""Points drawn from a Gaussian-mixture belief for the conjugate step
(:mod:`residualsim.belief.conjugate`): sigma points of one Gaussian, and stratified
quasi-random draws from a whole mixture. Coordinates are the belief's tangent coordinates
(:class:`~residualsim.belief.mixture.StateTangent`: metres, radians, m/s, rad/s)."""

from __future__ import annotations

import functools

import numpy as np

from residualsim.belief.mixture import GaussianMixtureBelief
from residualsim.errors import ParameterError

__all__ = ["sigma_points", "stratified_draws"]


def sigma_points(mean: np.ndarray, covariance: np.ndarray, kappa: float = 0.0,
                 rotations: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Sigma points of N(mean (d,), covariance (d, d)): points (n, d) and weights (n,)
    summing to 1 (see the module docstring; κ = ``kappa`` >= 0).

    ``rotations`` 0: the 2d points along the covariance's principal axes (each point then
    sits √(d + κ) standard deviations out along one axis). ``rotations`` r >= 1: r sets of 2d
    points along the axes turned by r fixed random rotations (Haar, seeds
    0..r-1) of the whitened space, weights divided by r: each point sits about one
    standard deviation out in every coordinate, as a typical draw does; each set is still
    exact for the mean and covariance of any linear map. The square root is the symmetric
    one from an eigendecomposition, so a singular covariance is fine."""
    mean = np.asarray(mean, dtype=float)
    d = len(mean)
    if not kappa >= 0 or int(rotations) < 0:
        raise ParameterError(f"sigma_kappa must be >= 0 and sigma_rotations >= 0, got "
                             f"{kappa!r} and {rotations!r}")
    values, vectors = np.linalg.eigh(0.5 * (covariance + np.transpose(covariance)))
    root = vectors * np.sqrt(np.clip(values, 0.0, None))  # root @ root.T = covariance
    turns = [np.eye(d)] if int(rotations) == 0 else \
        [_rotation(d, seed) for seed in range(int(rotations))]
    offsets = np.vstack([np.sqrt(d + kappa) * (root @ turn).T for turn in turns])
    points = np.vstack([mean + offsets, mean - offsets])
    weights = np.full(len(points), (1.0 - kappa / (d + kappa)) / len(points))
    if kappa > 0:
        points = np.vstack([mean[None], points])
        weights = np.r_[kappa / (d + kappa), weights]
    return points, weights


@functools.lru_cache(maxsize=64)
def _rotation(d: int, seed: int) -> np.ndarray:
    """A fixed random rotation (d, d): the Q of the QR
    decomposition of a seeded standard normal matrix, signs fixed (Haar-distributed)."""
    q, r = np.linalg.qr(np.random.default_rng([int(seed), d]).standard_normal((d, d)))
    return q * np.where(np.diag(r) < 0, -1.0, 1.0)


def stratified_draws(belief: GaussianMixtureBelief, n: int, rng: np.random.Generator,
                     match_moments: bool = False) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n`` draws from ``belief`` (tangent coordinates), per component: (points (n_k, d),
    weights (n_k,) summing to 1). The counts n_k follow the weights by systematic resampling
    (one uniform offset), the points within a component are a scrambled Sobol sequence
    mapped through the normal's inverse CDF and √Σ_k (randomised quasi-Monte Carlo).
    Components with at most d + 1 draws (a belief of many components) share one Sobol
    sequence, consecutive blocks in component order: a Sobol generator per component costs
    milliseconds, seconds for hundreds of components."""
    import warnings

    from scipy.stats import norm, qmc

    if n < 1:
        raise ParameterError(f"draws must be >= 1, got {n!r}")
    edges = np.floor(np.cumsum(belief.weights) * n + rng.uniform())
    counts = np.diff(np.r_[0.0, np.clip(edges, 0, n)]).astype(int)
    counts[-1] += n - counts.sum()
    d = belief.means.shape[1]

    def sobol(count: int) -> np.ndarray:
        with warnings.catch_warnings():  # balance needs 2^m points; any count is unbiased
            warnings.simplefilter("ignore", UserWarning)
            unit = qmc.Sobol(d, scramble=True, seed=rng).random(int(count))
        return norm.ppf(np.clip(unit, 1e-12, 1 - 1e-12))

    small = (counts > 0) & (counts <= d + 1)
    units = {k: sobol(counts[k]) for k in np.flatnonzero(counts > d + 1)}
    if small.any():
        shared = np.split(sobol(int(counts[small].sum())), np.cumsum(counts[small])[:-1])
        units.update(zip(np.flatnonzero(small), shared))
    groups = []
    for k, (mu, cov, count) in enumerate(zip(belief.means, belief.covariances, counts)):
        if count <= 0:
            groups.append((np.empty((0, d)), np.empty(0)))
            continue
        values, vectors = np.linalg.eigh(0.5 * (cov + cov.T))
        # the symmetric square root: unique, so the draws move continuously with Σ_k (with
        # V √Λ alone, nearly equal eigenvalues let rounding turn V, and the draws with it)
        root = (vectors * np.sqrt(np.clip(values, 0.0, None))) @ vectors.T
        z = _standardised(units[k]) if match_moments else units[k]
        groups.append((mu + z @ root.T, np.full(int(count), 1.0 / count)))
    return groups


def _standardised(z: np.ndarray) -> np.ndarray:
    """Standard-normal draws z (n, d) moved to mean exactly 0 and turned to covariance
    exactly I (1/n normalisation: the draws' equal weights) when n > d + 1: moment matching,
    so a component's draws carry its mean and covariance exactly through any linear map.
    At most d + 1 draws are left as they are (centring them shrinks their spread, by
    (n − 1) / n for independent draws, and a single draw would sit at the mean: a belief of
    many small components, one draw each, would lose all its spread)."""
    n, d = z.shape
    if n <= d + 1:
        return z
    z = z - z.mean(axis=0)
    values, vectors = np.linalg.eigh(z.T @ z / n)
    return z @ (vectors / np.sqrt(values)) @ vectors.T
