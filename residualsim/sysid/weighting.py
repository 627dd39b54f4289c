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

ν_i alone made MH's posterior too narrow in simulation-based calibration (train/README.md
§20): away from the true initial state the likelihood is rugged (contact timing against
the substeps), and each recording's start error pulls its fit elsewhere. Two remedies
use the scatter between recordings (Godambe information, :func:`magnitude_adjustment`):
the curvature adjustment of MH's target (:func:`curvature_transform`, ``calibrate
--weighting effective``; still too narrow) and the Gaussian sandwich posterior around the
likelihood's envelope (:func:`sandwich_posterior`, ``calibrate --method sandwich``; it
passed).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from residualsim.errors import ParameterError
from residualsim.sim.engine import Engine
from residualsim.sim.recordings import rollout_residuals

log = logging.getLogger(__name__)

__all__ = ["autocorrelation_time", "effective_count", "signed_residuals", "pilot_reference",
           "magnitude_adjustment", "curvature_transform", "adjusted_log_likelihood",
           "adjusted_point", "sandwich_posterior", "effective_weights",
           "sandwich_calibration", "sandwich_covariance", "SMALL_SAMPLE",
           "small_sample_inflation", "t_inflation", "weighted_mode"]

SMALL_SAMPLE = ("none", "cr1t")


def small_sample_inflation(groups: int, d: int, method: str = "none") -> float:
    """The factor on the sandwich covariance for few recordings (clusters), ``method``:

    * ``none``: 1;
    * ``cr1t``: (t_{0.95, G−d} / z_{0.95})², G = ``groups`` recordings, d = ``d``
      parameters. The standard cluster-robust small-sample correction (Cameron and Miller
      2015, "A practitioner's guide to cluster-robust inference", J. Human Resources 50,
      §VI; G − d degrees of freedom after Donald and Lang 2007, G − L for L parameters
      identified by between-cluster variation, here all d of them) is CR1, J scaled by
      G/(G−1), plus Wald intervals from Student's t with G − d degrees of freedom instead
      of the normal. The score scatter J
      of :func:`magnitude_adjustment` / :func:`sandwich_posterior` already carries the
      G/(G−1) (it is n/(n−1) Σ (s_i − s̄)(s_i − s̄)ᵀ), so only the t part is applied here,
      as a factor on the whole covariance H⁻¹ (J + H) H⁻¹: its 90 % Gaussian intervals
      (±1.645 sd) then have the t interval's width (±t_{0.95, G−d} sd), and draws from it
      spread as much. G = 6, d = 2: t_{0.95, 4} = 2.132, factor 1.68 (1.30 on the sd).
      Not CR2 (Bell and McCaffrey 2002): its leverage correction needs each recording's
      own information H_i positive definite, which the recordings' rugged quadratic fits
      often are not; and with recordings of equal length and weight (H_i ≈ H / G, the SBC
      design) the parameter-space leverage H_i H⁻¹ ≈ I / G and CR2's (I − H_i H⁻¹)^-½ on
      each score reduces to CR1's G/(G−1) on J.

    G ≤ d leaves no degrees of freedom for J: ParameterError (not a silent fallback)."""
    if method not in SMALL_SAMPLE:
        raise ParameterError(f"small-sample correction {method!r}: expected one of "
                             f"{', '.join(SMALL_SAMPLE)}")
    if method == "none":
        return 1.0
    if groups <= d:
        raise ParameterError(f"small-sample correction {method}: {groups} recordings for "
                             f"{d} parameters leave no degrees of freedom for the scatter "
                             "between recordings (needs more recordings than parameters)")
    return t_inflation(groups - d)


def sandwich_covariance(information: np.ndarray, spread: np.ndarray,
                        inflation: float = 1.0) -> np.ndarray:
    """k H⁻¹ (J + H) H⁻¹ (d, d): the sandwich covariance of information H and score scatter
    J (unit coordinates), times the few-recordings factor k (:func:`small_sample_inflation`)."""
    inverse = np.linalg.inv(information)
    return inflation * inverse @ (spread + information) @ inverse


def t_inflation(dof: int) -> float:
    """(t_{0.95, dof} / z_{0.95})²: the factor on a covariance estimated with ``dof``
    degrees of freedom that gives its ±1.645 sd intervals the t interval's width."""
    from scipy.stats import norm, t

    return float((t.ppf(0.95, dof) / norm.ppf(0.95)) ** 2)


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


def _signed(engine: Engine, item: tuple, initial_state: np.ndarray) -> np.ndarray:
    """Signed residual rows (T-1, 6 + joints) of one rollout from ``initial_state`` (the
    rows of :func:`~residualsim.sim.recordings.rollout_residuals`)."""
    
    _, positions, *recorded = item
    row = rollout_residuals(engine, initial_state, positions, *recorded)
    return row.reshape(len(positions), -1)


def signed_residuals(engine: Engine, item: tuple, batch) -> list[np.ndarray]:
    """Worker function: per parameter set, the signed residuals of one rollout item of
    :class:`~residualsim.sysid.likelihood.TrajectoryLikelihood`, shape (T-1, 6 + joints):
    position error (3, m, world), r_g × the rotation vector from recorded to simulated
    orientation (3, m; its norm is the r_g·angle of e_i) and each joint's error × scale."""
    out = []
    for params in batch:
        if engine.params != params:
            engine.set_params(params)
        out.append(_signed(engine, item, item[0]))
    return out


def pilot_reference(log_likelihood: Callable[[np.ndarray], np.ndarray], space,
                    seed: int = 0, sobol_points: int = 16, evaluations: int = 40,
                    start: np.ndarray | None = None, simplex: float = 0.05) -> np.ndarray:
    """A pilot fit: natural parameter values (d,) near the likelihood's maximum, where the
    residuals are measured for ν. The best of a scrambled Sobol set of ``sobol_points``
    (seeded) over the space's box (or ``start``, natural values), refined by Nelder-Mead in
    the unit coordinates for at most ``evaluations`` likelihood evaluations (first simplex
    ``simplex`` wide).
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

    corners = np.vstack([z0] + [z0 + simplex * np.eye(d)[k] if z0[k] + simplex <= 1
                                else z0 - simplex * np.eye(d)[k] for k in range(d)])
    found = minimize(loss, z0, method="Nelder-Mead",
                     options={"maxfev": evaluations, "initial_simplex": corners,
                              "xatol": 1e-4, "fatol": 1e-3})
    z = found.x if found.fun <= loss(z0) else z0
    return space.from_unit(np.clip(z, 0, 1)[None])[0]


def magnitude_adjustment(likelihood, space, center: np.ndarray) -> dict:
    """The factor w ≤ 1 on every ν_i that makes the likelihood's curvature match the
    scatter between recordings (Godambe information; the magnitude adjustment of composite
    likelihoods, w = d / tr(H⁻¹ J)), at ``center`` (natural values (d,), a pilot fit).

    Each recording's log-likelihood ℓ_i = −(ν_i/2) log e_i is fitted by a quadratic in the
    space's unit coordinates, by least squares over a design around ``center`` (0, ±h,
    ±2h along each axis and (±h, ±h) on each pair of axes; 4d + 1 + 2d(d−1) evaluations of
    all recordings; within 2h of a bound the design's centre moves inward to 2h from it, and
    the envelope's mode is read from the quadratic there), twice: h = 0.01, then h = 1.5
    standard deviations of the resulting posterior per axis (the design spans ±3: contact
    likelihoods are rugged on small scales, and the envelope is what a posterior should
    follow). H = −Σ_i ∇²ℓ_i and J = n/(n−1) Σ_i (s_i − s̄)(s_i − s̄)ᵀ, s_i = ∇ℓ_i at the
    design's centre (``center``, or moved inward near a bound). If each recording's data were
    the model's (independent noise, the start's error small), recordings would scatter as
    their curvatures say and w ≈ 1; each recording pulled elsewhere by its own initial
    state's error amplified by contact, or by model mismatch, gives w < 1 and widens the
    posterior to that scatter (a sandwich covariance, spread over a scalar). Returns
    ``{"w", "w_raw", "h", "evaluations"}``: w clipped to [1e-3, 1]; w = 1 and w_raw None
    with fewer than 2 recordings or when H stayed indefinite (no adjustment possible: the
    caller warns)."""
    return _local_quadratics(likelihood, space, center)


def _local_quadratics(likelihood, space, center: np.ndarray, first_step: float = 0.01,
                      sandwich: bool = False, flat: float | None = None) -> dict:
    """See :func:`magnitude_adjustment`; ``sandwich``: rescale the design to 1.5 standard
    deviations of the sandwich covariance H⁻¹ J H⁻¹ (not of H⁻¹) until it is stable.
    ``flat`` (a curvature, unit coordinates): when H stays indefinite at every scale, the
    widest design's H with its eigenvalues raised to at least ``flat``, the envelope's mode
    moved from the design's centre along the other eigenvectors only; the result's
    ``flat_directions`` counts the eigenvalues raised (the recordings do not pin those
    directions, or the likelihood is rugged there at every scale tried)."""
    nu = np.asarray(likelihood.nu, dtype=np.float64)
    d = space.ndim
    zc = space.to_unit(np.asarray(center, dtype=np.float64)[None])[0]
    n_items = likelihood.n_items
    if n_items < 2:
        return {"w": 1.0, "w_raw": None, "h": None, "evaluations": 0}
    unit = np.eye(d)
    offsets = [np.zeros(d)] + [s * unit[k] for k in range(d) for s in (1, -1, 2, -2)]
    offsets += [a * unit[j] + b * unit[k] for j in range(d) for k in range(j + 1, d)
                for a in (1, -1) for b in (1, -1)]
    offsets = np.array(offsets)
    pairs = [(j, k) for j in range(d) for k in range(j, d)]
    steps, evaluations, found, scaled, last = np.full(d, first_step), 0, None, False, None
    for _ in range(6 if sandwich else 4):
        h = np.minimum(steps, 0.25)
        # near a bound the design moves inward (one-sided about the mode), as a clipped
        # one collapses there and finds no envelope (the real cube's restitution at 0.007)
        middle = np.clip(zc, 2 * h, 1.0 - 2 * h)
        z = np.clip(middle + offsets * h, 0.0, 1.0)
        errors = likelihood.errors([space.engine_params(x) for x in space.from_unit(z)])
        evaluations += len(z)
        with np.errstate(divide="ignore", invalid="ignore"):
            ell = -0.5 * nu * np.log(np.maximum(errors, 1e-10))  # (points, items)
        finite = np.all(np.isfinite(ell), axis=1)
        u = z[finite] - middle
        design = np.column_stack([np.ones(len(u)), u] + [u[:, j] * u[:, k] for j, k in pairs])
        coef = np.linalg.lstsq(design, ell[finite], rcond=None)[0]  # (1 + d + pairs, items)
        grad = coef[1:1 + d].T
        hess = np.zeros((n_items, d, d))
        for index, (j, k) in enumerate(pairs):
            c = coef[1 + d + index]
            if j == k:
                hess[:, j, j] = 2 * c
            else:
                hess[:, j, k] = hess[:, k, j] = c
        total = -hess.sum(axis=0)
        if np.linalg.eigvalsh(total).min() > 0:
            found = (total, grad, h, -hess, middle)
            if sandwich:
                centred = grad - grad.mean(axis=0)
                spread = n_items / (n_items - 1) * centred.T @ centred
                width = 1.5 * np.sqrt(np.diag(sandwich_covariance(total, spread)))
                if np.all(np.abs(np.log(width / h)) < np.log(1.5)):
                    break
                steps = np.maximum(width, 1e-4)
                continue
            if scaled:
                break
            steps, scaled = 1.5 / np.sqrt(np.diag(total)), True
        else:
            steps, last = 2 * h, (total, grad, h, -hess, middle)  # rugged or flat: look wider
    raised, step = 0, None
    if found is None and flat is not None and last is not None:
        values, vectors = np.linalg.eigh(last[0])
        raised, pinned = int(np.sum(values < flat)), values >= flat
        found = (vectors @ np.diag(np.maximum(values, flat)) @ vectors.T, *last[1:])
        # the mode moves along the pinned directions only: along the others it is the prior's
        step = vectors[:, pinned] @ ((vectors[:, pinned].T @ last[1].sum(axis=0))
                                     / values[pinned])
    if found is None:
        return {"w": 1.0, "w_raw": None, "h": h.tolist(), "evaluations": evaluations}
    information, grad, h, items, middle = found
    if step is None:
        step = np.linalg.solve(information, grad.sum(axis=0))
    centred = grad - grad.mean(axis=0)
    spread = n_items / (n_items - 1) * centred.T @ centred
    scatter = float(np.trace(np.linalg.solve(information, spread)))
    w = d / scatter if scatter > 0 else math.inf  # recordings that agree exactly: no widening
    return {"w": float(np.clip(w, 1e-3, 1.0)), "w_raw": w, "h": h.tolist(),
            "evaluations": evaluations, "information": information, "spread": spread,
            "transform": curvature_transform(information, spread),
            "envelope_mode": np.clip(middle + step, 0.0, 1.0),
            "scores": grad, "item_information": items, "flat_directions": raised}


def curvature_transform(information: np.ndarray, spread: np.ndarray) -> np.ndarray:
    """C (d, d) with Cᵀ H C = H_adj, H_adj = H J⁻¹ H the inverse sandwich covariance
    (Chandler and Bate 2007, the curvature adjustment): the adjusted log-likelihood
    ℓ(ẑ + C (z − ẑ)) has the curvature the scatter between recordings implies, direction by
    direction. Never sharper than H along any direction (the eigenvalues of
    H^{-1/2} H_adj H^{-1/2} clipped to [1e-6, 1]); H, J in unit coordinates."""
    values, vectors = np.linalg.eigh(information)
    root = vectors @ np.diag(np.sqrt(values)) @ vectors.T
    inverse_root = vectors @ np.diag(1 / np.sqrt(values)) @ vectors.T
    adjusted = information @ np.linalg.pinv(spread) @ information
    inner = inverse_root @ adjusted @ inverse_root
    lam, basis = np.linalg.eigh((inner + inner.T) / 2)
    lam = np.clip(lam, 1e-6, 1.0)
    return inverse_root @ basis @ np.diag(np.sqrt(lam)) @ basis.T @ root


def adjusted_log_likelihood(log_likelihood: Callable[[np.ndarray], np.ndarray], space,
                            center: np.ndarray, transform: np.ndarray
                            ) -> Callable[[np.ndarray], np.ndarray]:
    """x ↦ log L(x̂ + C (x − x̂)) in the space's unit coordinates (natural values in and
    out; ``center`` x̂ natural (d,), ``transform`` C from :func:`curvature_transform`)."""
    move = adjusted_point(space, center, transform)

    def adjusted(x: np.ndarray) -> np.ndarray:
        return log_likelihood(move(x))

    return adjusted


def adjusted_point(space, center: np.ndarray, transform: np.ndarray
                   ) -> Callable[[np.ndarray], np.ndarray]:
    """x ↦ x̂ + C (x − x̂) in the space's unit coordinates, natural values (n, d) or (d,) in
    and out: where the adjusted likelihood evaluates the engine."""
    zc = space.to_unit(np.asarray(center, dtype=np.float64)[None])[0]
    matrix = np.asarray(transform, dtype=np.float64)

    def move(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        z = space.to_unit(np.atleast_2d(x))
        out = space.from_unit(np.clip(zc + (z - zc) @ matrix.T, 0.0, 1.0))
        return out if x.ndim == 2 else out[0]

    return move


def sandwich_posterior(likelihood, space, center: np.ndarray,
                       small_sample: str = "none") -> dict:
    """A Gaussian posterior from the envelope of a rugged likelihood, with the sandwich
    covariance (Müller 2013; Godambe information), in the space's unit coordinates.

    Each recording's ℓ_i = −(ν_i/2) log e_i is fitted by a quadratic over a design around
    ``center`` (natural values (d,), e.g. the ν-weighted mode) whose steps are rescaled to
    1.5 standard deviations of the result until they agree within a factor 1.5 (so the
    design spans ±3 of the posterior it yields, not the likelihood's spikes between
    neighbouring contact events). Mode ẑ = ``center`` + H⁻¹ Σ_i s_i (the envelope's
    maximum), covariance H⁻¹ (J + H) H⁻¹: the sandwich H⁻¹ J H⁻¹ (J the scatter of the
    recordings' scores, so each recording's own bias, from its initial state's error
    amplified by contact or from model mismatch, counts as the noise it is) plus the
    model-based H⁻¹ (conservative with few recordings). Invariant to a common factor on ν.
    ``small_sample``: the covariance × :func:`small_sample_inflation` (``cr1t``: a t
    quantile for few recordings; the design and the envelope are unchanged).

    Returns ``mode`` / ``median`` / ``q05`` / ``q95`` (natural values per name; marginal
    Gaussian quantiles clipped to the box), ``mode_unit``, ``covariance`` (unit
    coordinates; None when no positive-definite envelope was found: then the quantiles
    are the prior's), ``w`` (the magnitude factor d / tr(H⁻¹J)), ``h`` (the design steps),
    ``inflation`` (the small-sample factor) and ``evaluations`` (likelihood evaluations of
    all recordings)."""
    inflation = small_sample_inflation(likelihood.n_items, space.ndim, small_sample)
    found = _local_quadratics(likelihood, space, center, sandwich=True)
    d = space.ndim
    names = space.names
    if found.get("information") is None:
        half = np.full((1, d), 0.5)
        return {"mode_unit": half[0], "covariance": None, "w": None, "h": found["h"],
                "evaluations": found["evaluations"], "inflation": inflation,
                **{key: dict(zip(names, space.from_unit(np.full((1, d), q))[0].tolist()))
                   for key, q in (("mode", .5), ("median", .5), ("q05", .05), ("q95", .95))}}
    information, spread = found["information"], found["spread"]
    covariance = sandwich_covariance(information, spread, inflation)
    mode = found["envelope_mode"]
    quantiles = gaussian_quantiles(space, mode, covariance)
    return {"mode_unit": mode, "covariance": covariance, "w": found["w_raw"],
            "h": found["h"], "evaluations": found["evaluations"], "inflation": inflation,
            "mode": quantiles["median"], **quantiles}


def gaussian_quantiles(space, mode_unit: np.ndarray, covariance: np.ndarray
                       ) -> dict[str, dict[str, float]]:
    """``median``, ``q05`` and ``q95`` (natural values per name) of the marginals of
    N(``mode_unit``, ``covariance``) in the space's unit coordinates, clipped to the box."""
    mode = np.asarray(mode_unit, dtype=np.float64)
    sd = np.sqrt(np.diag(covariance))
    return {key: dict(zip(space.names,
                          space.from_unit(np.clip(mode + k * sd, 0, 1)[None])[0].tolist()))
            for key, k in (("median", 0.0), ("q05", -1.645), ("q95", 1.645))}


def weighted_mode(likelihood, log_like: Callable[[np.ndarray], np.ndarray], space,
                  seed: int, sobol_points: int, start: Sequence[float] | None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The pilot stage MH's adjusted likelihoods share: a pilot fit with ν = 1
    (:func:`pilot_reference`: ``start`` natural values, or the best of ``sobol_points``
    seeded Sobol points, refined by 40 Nelder-Mead evaluations), each recording's ν_i
    measured there and fixed on ``likelihood``, and the ν-weighted likelihood's mode (30
    more evaluations). Returns (the pilot fit, ν (n_items,), the mode: natural values (d,),
    and the likelihood evaluations spent)."""
    counted = {"evaluations": 0}

    def counting(x: np.ndarray) -> np.ndarray:
        counted["evaluations"] += len(x)
        return log_like(x)

    reference = pilot_reference(counting, space, seed=seed, sobol_points=sobol_points,
                                start=None if start is None else np.asarray(start, float))
    nu = likelihood.set_reference(space.engine_params(reference))
    mode = pilot_reference(counting, space, start=reference, evaluations=30, simplex=0.01)
    return reference, nu, mode, counted["evaluations"]


def effective_weights(likelihood, log_like, space, seed: int,
                       sobol_points: int, start: Sequence[float] | None
                       ) -> tuple[dict[str, Any], Callable | None]:
    """The effective weighting of MH (:func:`~residualsim.sysid.calibrate.calibrate`'s
    ``weighting``): a pilot fit with
    ν = 1, each recording's ν_i measured there and fixed, the mode of the ν-weighted
    likelihood, and the curvature adjustment there
    (:func:`~residualsim.sysid.weighting.magnitude_adjustment`). Returns the summary's
    ``weighting`` entry (``mode``: natural values the chains start from) and the map x ↦
    x̂ + C (x − x̂) where the adjusted likelihood evaluates the engine (None: no adjustment
    possible, a warning)."""
    started = time.perf_counter()
    reference, nu, mode, evaluations = weighted_mode(likelihood, log_like, space, seed,
                                                     sobol_points, start)
    adjustment = magnitude_adjustment(likelihood, space, mode)
    move = None
    if adjustment["w_raw"] is not None:
        move = adjusted_point(space, mode, adjustment["transform"])
    logging.getLogger(__name__).info("effective residuals per recording at the pilot fit %s: median %.1f (%.1f..%.1f); "
             "curvature adjustment %s", dict(zip(space.names, np.round(reference, 4))),
             np.median(nu), nu.min(), nu.max(),
             "not possible" if move is None else f"w = {adjustment['w']:.3g}")
    entry = {"mode": [float(v) for v in mode], "reference": [float(v) for v in reference],
             "pilot_evaluations": evaluations + adjustment["evaluations"],
             "pilot_seconds": time.perf_counter() - started,
             "nu_median": float(np.median(nu)), "nu_min": float(nu.min()),
             "nu_max": float(nu.max()), "nu_total": float(nu.sum()),
             "adjustment_w": adjustment["w_raw"],
             "adjustment_transform": None if move is None else
             np.asarray(adjustment["transform"]).tolist()}
    return entry, move


def sandwich_calibration(likelihood, log_like: Callable[[np.ndarray], np.ndarray], space,
                         seed: int, sobol_points: int, start, *,
                         checkpoint: Any = None, fingerprint: Any = None,
                         resume: bool = False) -> dict[str, Any]:
    """``calibrate --method sandwich``: a pilot fit (ν = 1; ``start`` natural values or the
    best of ``sobol_points`` Sobol points, refined by 40 Nelder-Mead evaluations), each
    recording's ν_i measured there, the ν-weighted mode (30 evaluations) and
    :func:`sandwich_posterior` there. Returns the summary's entries (``median``, ``q05``,
    ``q95``, ``sandwich``, ``evaluations``, ``warnings``).

    ``checkpoint``: a JSON file (path) rewritten atomically after the pilot fit and after
    the mode, holding ``fingerprint`` (any JSON value) and the finished stages; with
    ``resume`` a file of the same fingerprint skips them (an interrupted run loses at most
    the stage it was in), and one of another fingerprint is refused (ParameterError)."""
    stages = _sandwich_stages(checkpoint, fingerprint, resume)
    if "reference" in stages:
        reference = np.asarray(stages["reference"], dtype=np.float64)
        log.info("%s: reusing the pilot fit", checkpoint)
    else:
        reference = pilot_reference(log_like, space, seed=seed, sobol_points=sobol_points,
                                    start=start)
        _save_stage(checkpoint, fingerprint, stages, reference=reference.tolist())
    nu = likelihood.set_reference(space.engine_params(reference))
    if "mode" in stages:
        mode = np.asarray(stages["mode"], dtype=np.float64)
        log.info("%s: reusing the weighted mode", checkpoint)
    else:
        mode = pilot_reference(log_like, space, start=reference, evaluations=30,
                               simplex=0.01)
        _save_stage(checkpoint, fingerprint, stages, mode=np.asarray(mode).tolist())
    found = sandwich_posterior(likelihood, space, mode)
    result: dict[str, Any] = {key: found[key] for key in ("median", "q05", "q95")}
    result["sandwich"] = {
        "mode_unit": np.asarray(found["mode_unit"]).tolist(),
        "covariance_unit": None if found["covariance"] is None else
        np.asarray(found["covariance"]).tolist(),
        "magnitude_w": found["w"], "design_steps_unit": found["h"],
        "reference": reference.tolist(), "nu_median": float(np.median(nu)),
        "nu_min": float(nu.min()), "nu_max": float(nu.max())}
    result["evaluations"] = int(found["evaluations"]) + (sobol_points if start is None else 0) + 71
    result["warnings"] = [] if found["covariance"] is not None else [
        "no positive-definite envelope of the likelihood around its mode: the intervals "
        "are the prior's (the data do not pin these parameters here)"]
    return result


def _sandwich_stages(checkpoint: Any, fingerprint: Any, resume: bool) -> dict[str, Any]:
    """The finished stages in ``checkpoint`` (empty without ``resume`` or a file)."""
    import json
    from pathlib import Path

    from residualsim.atomic import read_json

    if checkpoint is None or not resume or not Path(checkpoint).is_file():
        return {}
    saved = read_json(Path(checkpoint))
    expected = json.loads(json.dumps(fingerprint))
    if not isinstance(saved, dict) or saved.get("fingerprint") != expected:
        raise ParameterError(f"{checkpoint}: written by a sandwich calibration with other "
                             "settings or data; --resume continues only the same run (remove "
                             "the file, or choose a new --out)")
    return dict(saved.get("stages", {}))


def _save_stage(checkpoint: Any, fingerprint: Any, stages: dict[str, Any],
                **finished: Any) -> None:
    """Add ``finished`` to ``stages`` and rewrite ``checkpoint`` (if any) atomically."""
    import json
    from pathlib import Path

    from residualsim.atomic import atomic_write_text

    stages.update(finished)
    if checkpoint is not None:
        atomic_write_text(Path(checkpoint), json.dumps(
            {"fingerprint": fingerprint, "stages": stages}, default=str))
