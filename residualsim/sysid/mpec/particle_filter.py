"""A bootstrap particle filter on a point mass's friction μ: the seed's comparison for the MPEC.

The filter's particles are (q m, ν m/s, μ) for one point mass (:mod:`.particles`: 2D,
floor y = 0). Each step propagates every particle through the exact time-stepping model
(:func:`~residualsim.sysid.mpec.particles.particle_step`), adds a small state jitter
(0.1 ε in position, 0.1 ε/h in velocity), moves μ with a Liu-West shrinkage kernel
(a = 0.98: μ ← a μ + (1 - a) mean + √(1 - a²) std ξ, the usual remedy for a static
parameter's degeneracy), weights by a Gaussian likelihood with the uniform noise's
standard deviation ε/√3 and resamples systematically when the effective sample size drops
below half. The estimate is the weighted mean of μ after the last observation. Seeded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from residualsim.errors import DataError, ParameterError
from residualsim.sysid.mcmc import as_generator
from residualsim.sysid.mpec.particles import ParticleRecording, particle_step

__all__ = ["FilterEstimate", "filter_mu"]


@dataclass(frozen=True)
class FilterEstimate:
    """Posterior mean and std of μ per particle (P,), and the wall time (s)."""

    mu: np.ndarray
    std: np.ndarray
    seconds: float


def _systematic(weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    positions = (rng.random() + np.arange(len(weights))) / len(weights)
    return np.minimum(np.searchsorted(np.cumsum(weights), positions), len(weights) - 1)


def _filter_one(y: np.ndarray, force: np.ndarray, h: float, mass: float, noise: float,
                n: int, rng: np.random.Generator, shrink: float) -> tuple[float, float]:
    sd = max(noise, 1e-9) / np.sqrt(3.0)
    q = y[0] + rng.uniform(-noise, noise, (n, 2))
    v = (y[1] - y[0]) / h - h * force / mass + rng.normal(0.0, 2 * sd / h, (n, 2))
    mu = rng.uniform(0.0, 1.0, n)
    log_w = np.zeros(n)
    for obs in y[1:]:
        mean, spread = np.average(mu, weights=np.exp(log_w - log_w.max())), mu.std()
        mu = np.clip(shrink * mu + (1 - shrink) * mean
                     + np.sqrt(1 - shrink ** 2) * spread * rng.standard_normal(n), 0.0, 1.0)
        q, v, _ = particle_step(q, v, np.broadcast_to(force, (n, 2)), mu, h, mass)
        q = q + rng.normal(0.0, 0.1 * sd, (n, 2))
        v = v + rng.normal(0.0, 0.1 * sd / h, (n, 2))
        log_w = log_w - 0.5 * np.sum((q - obs) ** 2, axis=1) / sd ** 2
        weights = np.exp(log_w - log_w.max())
        weights /= weights.sum()
        if 1.0 / np.sum(weights ** 2) < n / 2:
            index = _systematic(weights, rng)
            q, v, mu, log_w = q[index], v[index], mu[index], np.zeros(n)
    weights = np.exp(log_w - log_w.max())
    weights /= weights.sum()
    mean = float(np.sum(weights * mu))
    return mean, float(np.sqrt(np.sum(weights * (mu - mean) ** 2)))


def filter_mu(recording: ParticleRecording, n_particles: int = 2000, shrink: float = 0.98,
              rng: int | np.random.Generator | None = None) -> FilterEstimate:
    """μ of each point mass of ``recording`` by the bootstrap filter (see the module)."""
    if int(n_particles) != n_particles or n_particles < 2:
        raise ParameterError(f"n_particles must be an integer >= 2, got {n_particles}")
    y = np.asarray(recording.observed, dtype=np.float64)
    if y.ndim != 3 or y.shape[2] != 2 or not np.isfinite(y).all():
        raise DataError("observations must be finite, of shape (P, N + 1, 2)")
    rng = as_generator(rng)
    force = np.broadcast_to(np.asarray(recording.force, dtype=np.float64), (len(y), 2))
    started = time.perf_counter()
    results = [_filter_one(y[i], force[i], recording.h, recording.mass, recording.noise,
                           int(n_particles), rng, shrink) for i in range(len(y))]
    return FilterEstimate(np.array([r[0] for r in results]), np.array([r[1] for r in results]),
                          time.perf_counter() - started)
