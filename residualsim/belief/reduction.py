"""Gaussian-mixture reduction: Runnalls' greedy merging, so a belief keeps at most K components.

Runnalls (2007, "Kullback-Leibler approach to Gaussian mixture reduction") merges, again and
again, the pair (i, j) whose moment-preserving merge loses the least, measured by the upper
bound on the Kullback-Leibler discrimination

    B(i, j) = ½ [(w_i + w_j) log det Σ_ij − w_i log det Σ_i − w_j log det Σ_j],

where Σ_ij is the merged component's covariance. Merging preserves the mixture's mean and
covariance exactly. The coordinates are whatever the means are in (for beliefs the tangent
coordinates of :mod:`residualsim.belief.propagation`); B is invariant to a linear change of
coordinates, so metres and rad/s need no standardising here.

Also here: the starts EM refines from (a weighted k-means, each point's kernels merged)
and the diagonal floor that keeps every reduced covariance positive definite.
"""

from __future__ import annotations

import numpy as np

from residualsim.errors import ParameterError

__all__ = ["merge_components", "runnalls_reduce", "em_refine", "kmeans_start", "weighted_kmeans",
           "merge_per_point", "per_draw_moments", "positive_definite", "variance_floor",
           "mixture_bic", "systematic_resample"]

#: Added to every covariance's diagonal before its log-determinant (tangent units squared):
#: keeps components that are flat in some direction (e.g. no residual spread) comparable.
_LOGDET_FLOOR = 1e-12


def merge_components(weights: np.ndarray, means: np.ndarray, covariances: np.ndarray | None
                     ) -> tuple[float, np.ndarray, np.ndarray]:
    """Moment-preserving merge of components (weights (n,), means (n, d), covariances
    (n, d, d); None: points) into one: (total weight, mean (d,), covariance (d, d))."""
    weights = np.asarray(weights, dtype=float)
    total = float(weights.sum())
    if total <= 0:
        raise ParameterError("cannot merge components of zero total weight")
    share = weights / total
    mean = share @ means
    spread = means - mean
    covariance = (share[:, None] * spread).T @ spread
    if covariances is not None:
        covariance = covariance + np.einsum("n,nij->ij", share, covariances)
    return total, mean, 0.5 * (covariance + covariance.T)


def _logdets(covariances: np.ndarray) -> np.ndarray:
    d = covariances.shape[-1]
    sign, value = np.linalg.slogdet(covariances + _LOGDET_FLOOR * np.eye(d))
    return np.where(sign > 0, value, -1e300)


def _pair_merges(w: np.ndarray, mu: np.ndarray, cov: np.ndarray, i: int, others: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Runnalls' cost of merging component i with each of ``others``, and the merged
    covariances (m, d, d)."""
    total = w[i] + w[others]
    a, b = (w[i] / total)[:, None, None], (w[others] / total)[:, None, None]
    gap = mu[i] - mu[others]
    merged = a * cov[i] + b * cov[others] + a * b * np.einsum("md,me->mde", gap, gap)
    return merged, total


def runnalls_reduce(weights: np.ndarray, means: np.ndarray, covariances: np.ndarray,
                    max_components: int, min_weight: float = 1e-9
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Reduce a mixture to at most ``max_components`` components by Runnalls' merging.

    Components lighter than ``min_weight`` (relative to the total) are dropped first. Returns
    (weights (K,) summing to 1, means (K, d), covariances (K, d, d)), heaviest first. The
    pair costs are kept in a matrix and only the merged component's row is recomputed, so
    reducing n components costs O(n²) log-determinants.
    """
    if int(max_components) < 1:
        raise ParameterError(f"max_components must be >= 1, got {max_components!r}")
    weights = np.asarray(weights, dtype=float)
    if weights.sum() <= 0:
        raise ParameterError("a mixture needs a positive total weight")
    keep = weights / weights.sum() >= min_weight
    w = weights[keep] / weights[keep].sum()
    mu = np.asarray(means, dtype=float)[keep].copy()
    cov = np.asarray(covariances, dtype=float)[keep].copy()
    n = len(w)
    logdet = _logdets(cov)
    alive = np.ones(n, bool)
    cost = np.full((n, n), np.inf)
    for i in range(n - 1):
        others = np.arange(i + 1, n)
        merged, total = _pair_merges(w, mu, cov, i, others)
        cost[i, others] = 0.5 * (total * _logdets(merged) - w[i] * logdet[i]
                                 - w[others] * logdet[others])
    while alive.sum() > int(max_components):
        i, j = np.unravel_index(np.argmin(cost), cost.shape)
        total, mu[i], cov[i] = merge_components(w[[i, j]], mu[[i, j]], cov[[i, j]])
        w[i], logdet[i] = total, _logdets(cov[i][None])[0]
        alive[j] = False
        cost[j, :] = cost[:, j] = np.inf
        others = np.flatnonzero(alive & (np.arange(n) != i))
        if len(others):
            merged, pair_total = _pair_merges(w, mu, cov, i, others)
            values = 0.5 * (pair_total * _logdets(merged) - w[i] * logdet[i]
                            - w[others] * logdet[others])
            low, high = np.minimum(i, others), np.maximum(i, others)
            cost[low, high] = values
    order = np.flatnonzero(alive)[np.argsort(-w[alive], kind="stable")]
    return w[order], mu[order], cov[order]


def em_refine(weights: np.ndarray, means: np.ndarray, covariances: np.ndarray | None,
              start: tuple[np.ndarray, np.ndarray, np.ndarray], iterations: int = 100,
              floor: np.ndarray | float = 0.0, tolerance: float = 1e-8
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fit a K-component mixture to a larger mixture (the kernels: ``weights`` (n,),
    ``means`` (n, d), ``covariances`` (n, d, d)) by expectation-maximisation on the kernels
    themselves, from ``start`` = (weights (K,), means (K, d), covariances (K, d, d)), e.g.
    Runnalls' reduction. ``covariances`` None: the kernels are points (weighted EM on
    samples).

    Each kernel acts as a weighted data point that carries its own covariance: the E-step
    gives kernel i's responsibility r_ik ∝ w_k N(μ_i | m_k, C_k) exp(−½ tr(C_k⁻¹ P_i)) (its
    expected log-likelihood under component k), the M-step w_k = Σ π_i r_ik, m_k the
    weighted mean of the μ_i and C_k = Σ π_i r_ik (P_i + (μ_i − m_k)(μ_i − m_k)ᵀ) / w_k
    (+ ``floor`` on the diagonal, (d,) or scalar): EM on infinitely many draws from the
    kernels, without drawing them. Stops when the expected log-likelihood gains less than
    ``tolerance``; returns (weights, means, covariances), heaviest first."""
    pi = np.asarray(weights, float) / np.sum(weights)
    mu = np.asarray(means, float)
    cov = None if covariances is None else np.asarray(covariances, float)
    w, m, c = (np.array(x, dtype=float, copy=True) for x in start)
    d = mu.shape[1]
    ridge = np.diag(np.broadcast_to(np.asarray(floor, float), (d,)))
    if cov is None:
        return _em_points(pi, mu, (w, m, c), int(iterations), ridge, tolerance)
    previous = -np.inf
    for _ in range(int(iterations)):
        log_r = np.empty((len(pi), len(w)))
        for k in range(len(w)):
            chol = np.linalg.cholesky(c[k])
            whiten = np.linalg.inv(chol)  # L⁻¹ (12 x 12: cheaper than a solve per point)
            gap = (mu - m[k]) @ whiten.T  # (n, d)
            log_r[:, k] = (np.log(max(w[k], 1e-300)) - np.log(np.diag(chol)).sum()
                           - 0.5 * (gap ** 2).sum(axis=1) - 0.5 * d * np.log(2 * np.pi))
            if cov is not None:
                log_r[:, k] -= 0.5 * np.einsum("ij,nji->n", np.linalg.inv(c[k]), cov)
        top = log_r.max(axis=1, keepdims=True)
        norm = top[:, 0] + np.log(np.exp(log_r - top).sum(axis=1))
        score = float(pi @ norm)
        r = np.exp(log_r - norm[:, None]) * pi[:, None]  # (n, K), sums to 1 overall
        w = r.sum(axis=0)
        keep = w > 1e-12
        r, w = r[:, keep], w[keep]
        m = (r.T @ mu) / w[:, None]
        c = np.empty((len(w), d, d))
        for k in range(len(w)):
            gap = mu - m[k]
            c[k] = (r[:, k, None] * gap).T @ gap / w[k] + ridge
            if cov is not None:
                c[k] += np.einsum("n,nij->ij", r[:, k], cov) / w[k]
            c[k] = 0.5 * (c[k] + c[k].T)
        if score - previous < tolerance:
            break
        previous = score
    order = np.argsort(-w, kind="stable")
    return w[order] / w.sum(), m[order], c[order]


def _em_points(pi: np.ndarray, x: np.ndarray, start: tuple, iterations: int,
               ridge: np.ndarray, tolerance: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`em_refine` on points (no kernel covariances), every component at once: the
    conjugate step's reduction fits thousands of weighted samples each step, where stacked
    array products take about half the time of a loop over components (same fit to 1e-12)."""
    w, m, c = start
    d = x.shape[1]
    const = -0.5 * d * np.log(2 * np.pi)
    previous = -np.inf
    for _ in range(iterations):
        chol = np.linalg.cholesky(c)
        whiten_t = np.linalg.inv(chol).transpose(0, 2, 1)  # (L⁻¹)ᵀ per component
        gap = np.matmul(x, whiten_t)  # (K, n, d): whitened points
        gap -= np.matmul(m[:, None, :], whiten_t)
        log_r = np.einsum("knd,knd->kn", gap, gap)
        log_r *= -0.5
        log_r += (np.log(np.maximum(w, 1e-300)) + const
                  - np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(axis=1))[:, None]
        top = log_r.max(axis=0)
        r = np.exp(log_r - top)
        total = r.sum(axis=0)
        score = float(pi @ (top + np.log(total)))
        r *= pi / total  # (K, n), sums to 1 overall
        w = r.sum(axis=1)
        keep = w > 1e-12
        if not keep.all():
            r, w = r[keep], w[keep]
        m = (r @ x) / w[:, None]
        gap = x[None] - m[:, None, :]  # (K, n, d)
        c = np.matmul((gap * r[:, :, None]).transpose(0, 2, 1), gap) / w[:, None, None] \
            + ridge
        c = 0.5 * (c + c.transpose(0, 2, 1))
        if score - previous < tolerance:
            break
        previous = score
    order = np.argsort(-w, kind="stable")
    return w[order] / w.sum(), m[order], c[order]


def kmeans_start(kernels: tuple[np.ndarray, np.ndarray, np.ndarray], k: int, seed: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A start for EM as the particle step's refit makes one: k-means (:func:`weighted_kmeans`,
    one k-means++ start seeded by ``seed``) on the kernels' means weighted by their masses, in
    coordinates standardised by the kernels' mixture; each cluster's kernels merged with
    their moments kept. Returns (weights, means, covariances), at most ``k`` components.
    Covariances None: the kernels are points."""
    weights, means, covariances = kernels
    _, _, total = merge_components(weights, means, covariances)
    x = means / np.sqrt(np.maximum(np.diag(total), 1e-24))
    labels = weighted_kmeans(x, weights / weights.sum(), k, np.random.default_rng(seed))
    rows = [merge_components(weights[labels == c], means[labels == c],
                             None if covariances is None else covariances[labels == c])
            for c in np.unique(labels)]
    return (np.array([r[0] for r in rows]) / sum(r[0] for r in rows),
            np.array([r[1] for r in rows]), np.array([r[2] for r in rows]))


def weighted_kmeans(x: np.ndarray, w: np.ndarray, k: int, rng: np.random.Generator,
            iterations: int = 50) -> np.ndarray:
    """Weighted k-means of points x (n, d) with weights w (n,) summing to 1: k-means++
    seeding (centres drawn in proportion to w times the squared distance to the nearest
    centre so far), then Lloyd's iterations. Returns each point's cluster label (n,)."""
    n = len(x)
    k = min(int(k), n)
    centres = [x[rng.choice(n, p=w)]]
    nearest = ((x - centres[0]) ** 2).sum(axis=1)
    for _ in range(1, k):
        p = w * nearest
        if p.sum() <= 0:
            break
        centres.append(x[rng.choice(n, p=p / p.sum())])
        nearest = np.minimum(nearest, ((x - centres[-1]) ** 2).sum(axis=1))
    centres = np.array(centres)
    labels = np.full(n, -1)
    for _ in range(iterations):
        # ‖x − c‖² up to ‖x‖², the same for every centre: one matrix product
        new = np.argmin((centres ** 2).sum(axis=1)[None] - 2.0 * x @ centres.T, axis=1)
        if (new == labels).all():
            break
        labels = new
        one_hot = np.zeros((n, len(centres)))
        one_hot[np.arange(n), labels] = w
        mass = one_hot.sum(axis=0)
        moved = mass > 0
        centres[moved] = (one_hot.T @ x)[moved] / mass[moved, None]
    return labels


def merge_per_point(kernels: tuple[np.ndarray, np.ndarray, np.ndarray], points: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The kernels of each point (its residual components) merged into one, moments kept:
    (weights, means, covariances) with one row per point, the start Runnalls' merging
    reduces (O(n²) in the number of kernels) before EM refines on all kernels."""
    rows = [merge_components(*(part[points == i] for part in kernels))
            for i in np.unique(points)]
    return (np.array([r[0] for r in rows]), np.array([r[1] for r in rows]),
            np.array([r[2] for r in rows]))


def per_draw_moments(weights: np.ndarray, points: np.ndarray, labels: np.ndarray,
                     floor: np.ndarray | float = 0.0
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One Gaussian per label: the weighted mean and covariance of the points (n, d) with
    that label (n,), ``floor`` (d,) or scalar added to each diagonal, weights (n,) summed
    per label. Returns (weights (L,) summing to 1, means (L, d), covariances (L, d, d)) in
    the labels' sorted order: no reduction, the mixture of each draw's own samples."""
    weights = np.asarray(weights, float)
    points = np.asarray(points, float)
    _, index = np.unique(labels, return_inverse=True)
    mass = np.bincount(index, weights)
    if (mass <= 0).any():
        raise ParameterError("every draw needs a positive mass")
    d = points.shape[1]
    means = np.zeros((len(mass), d))
    np.add.at(means, index, weights[:, None] * points)
    means /= mass[:, None]
    gap = points - means[index]
    covariances = np.zeros((len(mass), d, d))
    np.add.at(covariances, index, weights[:, None, None] * gap[:, :, None] * gap[:, None, :])
    covariances = covariances / mass[:, None, None] + \
        np.diag(np.broadcast_to(np.asarray(floor, float), (d,)))[None]
    return mass / mass.sum(), means, 0.5 * (covariances + np.transpose(covariances, (0, 2, 1)))


def positive_definite(weights: np.ndarray, means: np.ndarray, covariances: np.ndarray
                       ) -> np.ndarray:
    """Covariances with a floor on the diagonal: 1e-6 of the mixture's variance per
    coordinate (plus 1e-12), as the particle step's fit regularises in standardised
    coordinates. A kernel can be flat in some direction (the sigma points' scatter has rank
    at most 2d; the residual moves velocities only), and a belief must be sampled."""
    floor = variance_floor(weights, means, covariances)
    covariances = 0.5 * (covariances + np.transpose(covariances, (0, 2, 1)))
    return covariances + np.diag(floor)[None]


def variance_floor(weights: np.ndarray, means: np.ndarray, covariances: np.ndarray | None
                    ) -> np.ndarray:
    """1e-6 of the mixture's variance per coordinate, plus 1e-12 (tangent units²)."""
    _, _, total = merge_components(weights, means, covariances)
    return 1e-6 * np.clip(np.diag(total), 0.0, None) + 1e-12


def mixture_log_density(fit: tuple[np.ndarray, np.ndarray, np.ndarray], points: np.ndarray
                        ) -> np.ndarray:
    """log p(x) (n,) of points (n, d) under the mixture ``fit`` = (weights (K,), means
    (K, d), covariances (K, d, d))."""
    weights, means, covariances = fit
    d = points.shape[1]
    log_r = np.empty((len(points), len(weights)))
    for k in range(len(weights)):
        chol = np.linalg.cholesky(covariances[k])
        gap = np.linalg.solve(chol, (points - means[k]).T).T
        log_r[:, k] = (np.log(max(weights[k], 1e-300)) - np.log(np.diag(chol)).sum()
                       - 0.5 * (gap ** 2).sum(axis=1) - 0.5 * d * np.log(2 * np.pi))
    top = log_r.max(axis=1, keepdims=True)
    return top[:, 0] + np.log(np.exp(log_r - top).sum(axis=1))


def mixture_bic(fit: tuple[np.ndarray, np.ndarray, np.ndarray], weights: np.ndarray,
                points: np.ndarray, n: int) -> float:
    """The Bayesian information criterion of a full-covariance mixture ``fit`` on weighted
    points (``weights`` (m,) summing to 1, ``points`` (m, d)) counted as ``n`` data:
    −2 n Σ w log p(x) + p log n, p = K − 1 + K d + K d (d + 1) / 2 (scikit-learn's count)."""
    k, d = np.shape(fit[1])
    parameters = k - 1 + k * d + k * d * (d + 1) // 2
    return float(-2.0 * n * (weights @ mixture_log_density(fit, points))
                 + parameters * np.log(n))


def systematic_resample(weights: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Indices (n,) of a systematic resample of ``weights`` (m,) summing to 1: one uniform
    offset, each index about n w_i times."""
    edges = np.cumsum(weights)
    ticks = (np.arange(int(n)) + rng.uniform()) / int(n) * edges[-1]
    return np.minimum(np.searchsorted(edges, ticks, side="right"), len(weights) - 1)
