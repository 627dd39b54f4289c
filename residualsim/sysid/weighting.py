"""How many independent observations a recording's residuals hold (the likelihood's ν_i).

With its noise scale σ_i integrated out under p(σ_i) ∝ 1/σ_i, a recording whose sum of
squared residuals S_i = n_i e_i is made of ν_i independent Gaussian residuals of variance
σ_i² contributes

    log L_i(θ) = −(ν_i / 2) log e_i(θ)      (up to a constant)

to the log-likelihood (:mod:`residualsim.sysid.likelihood`). ν_i = 1 (the old rule) makes a
recording one scalar observation however long it is, and the posterior far too wide
(train/README.md §20); ν_i = the number of residuals treats the samples of a trajectory as
independent, and they are not: an error of the initial pose, a missed bounce or any model
mismatch shifts every sample after it. So ν_i is the number of *effectively* independent
residuals, measured on the recording's own residuals at a reference θ (a pilot fit, see
:func:`pilot_reference`) and then FIXED for the whole chain (MH samples one fixed target):

* the residual components c (position x, y, z in m, world frame; r_g × rotation vector in
  m; each joint's error × its scale) count as (Σ_c S_c)² / Σ_c S_c² series (S_c the
  component's sum of squares; Welch-Satterthwaite for a sum of scaled chi-squares): equal
  components count fully, a component with (almost) no error counts for (almost) nothing;
* along time, the n samples count as n / τ, τ the integrated autocorrelation time of the
  residuals about ZERO (the model says they have mean zero: a constant offset is
  correlated error, not signal), pooled over the components, by Geyer's initial positive
  sequence estimator (:func:`autocorrelation_time`);
* ν = (Σ_c S_c)² / Σ_c S_c² × n / τ, clipped to [1, n × components].

White residuals (synthetic noise at the right θ) give ν ≈ n × components; a recording far
from any θ the model can reach (chaotic contact from a noisy start, real-data mismatch) has
smooth, autocorrelated residuals, a small ν, and weighs little. n / τ is the variance
inflation of a smooth (low-frequency) signal fitted through autocorrelated noise, so the
weight is the information the recording holds about θ, not its sample count.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from residualsim.errors import ParameterError
from residualsim.sim.engine import Engine
from residualsim.sim.rotations import quat_relative_rotvec

__all__ = ["autocorrelation_time", "effective_count", "signed_residuals", "pilot_reference"]


def autocorrelation_time(series: np.ndarray) -> float:
    """Integrated autocorrelation time τ = 1 + 2 Σ_k ρ_k of a series (n,) or (n, c) about
    zero (not about its mean; the c columns' autocovariances summed, i.e. pooled), by
    Geyer's (1992) initial positive sequence: pairs ρ_2m + ρ_2m+1 summed while positive,
    made non-increasing. τ ≈ 1 for white noise, about n for a constant; 1 for all zeros."""
    x = np.asarray(series, dtype=np.float64)
    x = x.reshape(len(x), -1)
    n = len(x)
    power = float(np.sum(x * x))
    if n < 2 or power <= 0.0 or not math.isfinite(power):
        return 1.0
    size = 1 << (2 * n - 1).bit_length()
    spectrum = np.fft.rfft(x, size, axis=0)
    rho = np.sum(np.fft.irfft(np.abs(spectrum) ** 2, size, axis=0)[:n], axis=1) / power
    if n % 2:
        rho = np.append(rho, 0.0)
    pairs = rho[0::2] + rho[1::2]
    stop = np.flatnonzero(pairs <= 0.0)
    pairs = np.minimum.accumulate(pairs[:stop[0]] if len(stop) else pairs)
    return float(min(max(1.0, -1.0 + 2.0 * np.sum(pairs)), n))


def effective_count(residuals: np.ndarray) -> float:
    """ν, the effective number of independent residuals in ``residuals`` (n samples,
    c components; see the module doc): (Σ_c S_c)² / Σ_c S_c² × n / τ, in [1, n c]."""
    r = np.asarray(residuals, dtype=np.float64)
    r = r.reshape(len(r), -1)
    n, components = r.shape
    if not np.all(np.isfinite(r)):
        return 1.0
    sums = np.sum(r * r, axis=0)
    total = float(np.sum(sums))
    if total <= 0.0:
        return float(n * components)
    nu = total ** 2 / float(np.sum(sums ** 2)) * n / autocorrelation_time(r)
    return float(np.clip(nu, 1.0, n * components))


def signed_residuals(engine: Engine, item: tuple, batch) -> list[np.ndarray]:
    """Worker function: per parameter set, the signed residuals of one rollout item of
    :class:`~residualsim.sysid.likelihood.TrajectoryLikelihood`, shape (T-1, 6 + joints):
    position error (3, m, world), r_g × the rotation vector from recorded to simulated
    orientation (3, m; its norm is the r_g·angle of e_i) and each joint's error × scale."""
    initial_state, positions, quat, radius, *joint_item = item
    out = []
    for params in batch:
        if engine.params != params:
            engine.set_params(params)
        states = engine.rollout(initial_state, len(positions), detect_contacts=False).states
        sim_positions, sim_quat, _, _ = engine.scene.rigid_motion(states)
        parts = [sim_positions[1:] - positions,
                 radius * quat_relative_rotvec(sim_quat[1:], quat)]
        if joint_item:
            joints, scale = joint_item
            parts.append((engine.scene.joint_positions(states)[1:] - joints) * scale)
        out.append(np.concatenate(parts, axis=1))
    return out


def pilot_reference(log_likelihood: Callable[[np.ndarray], np.ndarray], space,
                    seed: int = 0, sobol_points: int = 16, evaluations: int = 40,
                    start: np.ndarray | None = None) -> np.ndarray:
    """A pilot fit: natural parameter values (d,) near the likelihood's maximum, where the
    residuals are measured for ν. The best of a scrambled Sobol set of ``sobol_points``
    (seeded) over the space's box (or ``start``, natural values), refined by Nelder-Mead in
    the unit coordinates for at most ``evaluations`` likelihood evaluations.
    ``log_likelihood`` maps natural values (n, d) to (n,), e.g. with ν = 1 (robust far
    from the optimum)."""
    from scipy.optimize import minimize
    from scipy.stats import qmc

    if sobol_points < 1 or evaluations < 0:
        raise ParameterError("pilot fit needs sobol_points >= 1 and evaluations >= 0")
    d = space.ndim
    if start is None:
        sobol = qmc.Sobol(d, scramble=True, seed=np.random.default_rng([seed, 37]))
        candidates = sobol.random_base2(max(1, math.ceil(math.log2(sobol_points))))
        values = np.asarray(log_likelihood(space.from_unit(candidates)), dtype=np.float64)
        values = np.where(np.isnan(values), -np.inf, values)
        z0 = candidates[int(np.argmax(values))]
    else:
        z0 = space.to_unit(np.asarray(start, dtype=np.float64)[None])[0]
    if evaluations == 0:
        return space.from_unit(z0[None])[0]

    def loss(z: np.ndarray) -> float:
        if np.any(z < 0) or np.any(z > 1):
            return math.inf
        value = float(np.asarray(log_likelihood(space.from_unit(z[None])))[0])
        return -value if math.isfinite(value) else math.inf

    simplex = np.vstack([z0] + [np.clip(z0 + 0.05 * np.eye(d)[k], 0, 1)
                                if z0[k] < 0.95 else z0 - 0.05 * np.eye(d)[k]
                                for k in range(d)])
    found = minimize(loss, z0, method="Nelder-Mead",
                     options={"maxfev": evaluations, "initial_simplex": simplex,
                              "xatol": 1e-4, "fatol": 1e-3})
    z = found.x if found.fun <= loss(z0) else z0
    return space.from_unit(np.clip(z, 0, 1)[None])[0]
