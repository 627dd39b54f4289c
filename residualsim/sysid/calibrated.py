"""The calibrated likelihood ``calibrate --method mh --weighting calibrated`` samples.

The trajectory likelihood ℓ(θ) = −Σ_i (ν_i / 2) log e_i(θ) (:mod:`residualsim.sysid.weighting`)
is right in shape only near the true initial states: elsewhere it is rugged (contact timing
against the substeps) and its curvature ignores how far the recordings scatter (each
recording's start error and any model mismatch pull its fit elsewhere). Sampled as it is, MH
finds a few of its spikes and its intervals miss the truth (train/README.md §20). The
calibrated target keeps the likelihood but ties it to its smooth envelope, scaled to the
scatter between recordings:

1. a pilot fit (ν = 1), each recording's ν_i measured there and fixed, the ν-weighted mode
   (:func:`~residualsim.sysid.weighting.weighted_mode`);
2. the envelope: each recording's ℓ_i fitted by a quadratic over a design spanning ±3
   standard deviations of the result (:func:`~residualsim.sysid.weighting.sandwich_posterior`'s
   design), giving its maximum ẑ, the information H = −Σ ∇²ℓ_i and the scatter J of the
   recordings' scores (unit coordinates of the space);
3. the sandwich covariance Σ = k H⁻¹ (J + H) H⁻¹ (Müller 2013; k the few-recordings
   correction ``small_sample``, :func:`~residualsim.sysid.weighting.small_sample_inflation`,
   the cluster-robust t quantile on G − d degrees of freedom) and the Chandler and Bate (2007)
   map C with Cᵀ H C = Σ⁻¹, centred on ẑ: ℓ_C(z) = ℓ(ẑ + C (z − ẑ)) has the envelope's
   curvature Σ⁻¹;
4. the target q(z) + λ (ℓ_C(z) − q(z)), q(z) = −½ (z − ẑ)ᵀ Σ⁻¹ (z − ẑ) the adjusted envelope
   and λ = ``rugged`` the share of the likelihood's departure from it that is kept (1:
   Chandler-Bate as it is; 0: the envelope alone, the sandwich's Gaussian truncated to the
   prior's box, no rollouts while sampling). The default λ = 0.2 passed simulation-based
   calibration on 6 short tosses where λ = 1 and λ = 0 did not (§20.2).

MH evaluates the target with delayed acceptance (Christen and Fox 2005): a proposal faces
the envelope q first, which costs nothing, and only one that passes is rolled out; the
chain is still exact for the target (:mod:`residualsim.sysid.mcmc`).

Where the envelope stays indefinite at every design scale, its curvature along the
directions that are not concave is raised to :data:`FLAT_CURVATURE` (flat over the prior's
box: the recordings do not pin them, or the likelihood is rugged there; a warning): on the
two-link hinge the joint's damping near its lower bound did this (train/README.md §20.6).
Where the recordings are too few for the scatter (G ≤ d), :func:`calibrated_weights` falls
back to the raw likelihood (ν_i = 1, ``--weighting recording``: too wide on few tosses,
where the ν-weighted one would be too narrow), chains starting at the ν-weighted mode, and
the summary says so (a warning). Near a bound the design moves inward (§20.5).

The default of ``calibrate --method mh`` since issue 50 (train/README.md §20.5), with the
bootstrap's covariance where it is wider than the sandwich's (``--covariance bootstrap``,
:func:`wider`: the scatter between recordings does not see the error they share, a noisy
recorded first pose, which the bootstrap's replicates do; the bootstrap, simulating the
model, does not see a model mismatch, which the scatter does) and λ = 0. With the sandwich's covariance it covered 0.68 /
0.68 on 20 tosses of 60 samples (§20.3); λ = 0.2 on the bootstrap's envelope put MH on
the likelihood's spikes (16 tosses of 90 samples: 90 % intervals 0.0002 wide, off the
truth), so the default samples the envelope alone: its Gaussian truncated to the prior's
box, times the prior.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from residualsim.errors import ParameterError
from residualsim.sysid.mcmc import Screen
from residualsim.sysid.weighting import (_local_quadratics, adjusted_point,
                                         curvature_transform, sandwich_covariance,
                                         small_sample_inflation, t_inflation,
                                         weighted_mode)

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_RUGGED", "CalibratedTarget", "calibrated_target", "calibrated_weights",
           "wider"]

#: λ, the share of the likelihood's departure from its adjusted envelope MH keeps.
DEFAULT_RUGGED = 0.2
#: The curvature (unit coordinates) an envelope indefinite at every design scale gets along
#: the directions the recordings do not pin (:func:`calibrated_target`): a Gaussian of
#: standard deviation 10, flat over the prior's box, so that the posterior there is the
#: prior's. (4, a standard deviation of 0.5 about the design's centre, missed truths near
#: the box's corners: train/README.md §20.6.)
FLAT_CURVATURE = 0.01
#: The few-recordings correction of the envelope's covariance.
DEFAULT_SMALL_SAMPLE = "cr1t"
#: The envelope's mode (natural values (d,)) → its bootstrap covariance (unit coordinates)
#: and a JSON record of the replicates.
Bootstrap = Callable[[np.ndarray], tuple[np.ndarray, dict]]


@dataclass
class CalibratedTarget:
    """What MH samples: ``target`` (natural values (n, d) → log target (n,)), ``screen``
    (the envelope as delayed acceptance's first stage; None when the target is the envelope
    itself or unadjusted), ``start`` (natural values (d,): ẑ, where chains start) and
    ``summary`` (JSON: λ, the inflation k, ẑ, C, H, J, the design, or ``failed``)."""

    target: Callable[[np.ndarray], np.ndarray]
    screen: Screen | None
    start: np.ndarray
    summary: dict[str, Any] = field(default_factory=dict)


def calibrated_target(likelihood, log_like: Callable[[np.ndarray], np.ndarray], space,
                      center: np.ndarray, rugged: float = DEFAULT_RUGGED,
                      small_sample: str = DEFAULT_SMALL_SAMPLE,
                      bootstrap: Bootstrap | None = None) -> CalibratedTarget:
    """Steps 2-4 of the module docstring around ``center`` (natural values (d,), the
    ν-weighted mode; ``likelihood`` with its ν_i set, ``log_like`` its log-likelihood of
    natural values (n, d)). ``bootstrap``: the envelope's mode (natural (d,)) → (its
    covariance Σ_b (d, d), unit coordinates; a JSON record), which then replaces the
    sandwich's k H⁻¹ (J + H) H⁻¹ where it is wider (:func:`wider`; ``--covariance
    bootstrap``, :func:`~residualsim.sysid.bootstrap.bootstrap_about`): the bootstrap sees
    the error the recordings share (a noisy first pose), the scatter between them a model
    mismatch the bootstrap, simulating the model, cannot. Σ_b is widened by
    ``small_sample`` ``cr1t`` as a covariance of B − 1 degrees of freedom (B = 10: × 1.24);
    the map C then has Cᵀ H C = Σ⁻¹."""
    if not 0.0 <= rugged <= 1.0:
        raise ParameterError(f"rugged weight λ must be within 0 to 1, got {rugged}")
    center = np.asarray(center, dtype=np.float64)
    try:
        inflation = small_sample_inflation(likelihood.n_items, space.ndim, small_sample)
    except ParameterError as error:  # G <= d: no scatter to scale by
        return CalibratedTarget(log_like, None, center, {"failed": str(error)})
    found = _local_quadratics(likelihood, space, center, sandwich=True, flat=FLAT_CURVATURE)
    if found.get("information") is None:
        return CalibratedTarget(log_like, None, center, {
            "failed": "no envelope of the likelihood around its mode",
            "evaluations": found["evaluations"]})
    information, spread = found["information"], found["spread"]
    mode_unit = np.asarray(found["envelope_mode"], dtype=np.float64)
    mode = space.from_unit(mode_unit[None])[0]
    record = None
    covariance = sandwich_covariance(information, spread, inflation)
    if bootstrap is not None:
        replicated, record = bootstrap(mode)  # B − 1 degrees of freedom: cr1t's t on them
        k_b = 1.0 if small_sample == "none" else t_inflation(record["replicates"] - 1)
        covariance, record["wider_directions"] = wider(covariance, k_b * replicated)
        record["inflation"] = k_b
    transform = curvature_transform(information, information @ covariance @ information)
    curvature = transform.T @ information @ transform
    move = adjusted_point(space, mode, transform)

    def envelope(x: np.ndarray) -> np.ndarray:
        u = space.to_unit(np.atleast_2d(x)) - mode_unit
        return -0.5 * np.einsum("ni,ij,nj->n", u, curvature, u)

    def stretched(x: np.ndarray) -> np.ndarray:
        return np.asarray(log_like(move(np.atleast_2d(x))), dtype=np.float64)

    def complete(x: np.ndarray, q: np.ndarray) -> np.ndarray:
        """The target at ``x`` given its envelope value ``q``: rolls out unless λ = 0."""
        return q if rugged == 0.0 else (1.0 - rugged) * q + rugged * stretched(x)

    def target(x: np.ndarray) -> np.ndarray:
        return complete(x, envelope(x))

    def first(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        q = envelope(x)
        return q, q

    screen = Screen(first, complete) if rugged > 0.0 else None
    summary = {"rugged_weight": float(rugged), "small_sample": small_sample,
               "inflation": float(inflation), "envelope_mode": mode.tolist(),
               "transform_unit": transform.tolist(), "information_unit": information.tolist(),
               "spread_unit": spread.tolist(), "design_steps_unit": found["h"],
               "magnitude_w": found["w_raw"], "evaluations": found["evaluations"],
               "flat_directions": found["flat_directions"]}
    if found["flat_directions"]:
        summary["warnings"] = [
            f"the likelihood's envelope is not concave along {found['flat_directions']} of "
            f"{space.ndim} directions at any scale tried (the recordings do not pin them, or "
            "it is rugged there): MH samples them as the prior has them"]
    if record is not None:
        summary.update(covariance="bootstrap", bootstrap=record,
                       covariance_unit=np.linalg.inv(curvature).tolist())
    return CalibratedTarget(target, screen, mode, summary)


def wider(first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, int]:
    """The covariance (d, d) as wide as the wider of ``first`` and ``second`` (positive
    definite, d × d) in every direction: in ``first``'s whitened coordinates the
    eigenvalues of ``second`` raised to at least 1. Also returns the number of directions
    ``second`` widened."""
    scale, basis = np.linalg.eigh((first + first.T) / 2)  # first^½, floored: a nearly
    scale = np.sqrt(np.maximum(scale, 1e-12 * max(scale.max(), 1e-300)))  # singular one too
    root, inverse = basis @ np.diag(scale) @ basis.T, basis @ np.diag(1 / scale) @ basis.T
    inner = inverse @ second @ inverse
    values, vectors = np.linalg.eigh((inner + inner.T) / 2)
    widened = root @ vectors @ np.diag(np.maximum(values, 1.0)) @ vectors.T @ root.T
    return (widened + widened.T) / 2, int(np.sum(values > 1.0))


def calibrated_weights(likelihood, log_like: Callable[[np.ndarray], np.ndarray], space,
                       seed: int, sobol_points: int, start: Sequence[float] | None,
                       rugged: float = DEFAULT_RUGGED,
                       small_sample: str = DEFAULT_SMALL_SAMPLE,
                       bootstrap: Bootstrap | None = None
                       ) -> tuple[dict[str, Any], CalibratedTarget]:
    """Steps 1-4 of the module docstring: the pilot fit (``start`` natural values, or the
    best of ``sobol_points`` seeded Sobol points, refined by 40 Nelder-Mead evaluations),
    ν_i, the ν-weighted mode (30 more), then :func:`calibrated_target`. Returns the
    summary's ``weighting`` entry and the target."""
    started = time.perf_counter()
    reference, nu, mode, evaluations = weighted_mode(likelihood, log_like, space, seed,
                                                     sobol_points, start)
    calibrated = calibrated_target(likelihood, log_like, space, mode, rugged, small_sample,
                                   bootstrap)
    adjustment = calibrated.summary
    if "failed" in adjustment:  # the raw likelihood (too wide on few tosses), not the
        likelihood.reset_weights()  # ν-weighted one (too narrow)
        adjustment["fallback"] = "recording"
        adjustment["warnings"] = [f"the calibrated likelihood could not be built "
                                  f"({adjustment['failed']}): MH sampled the raw one (as "
                                  "--weighting recording), whose intervals may be too wide"]
    scale = (f"bootstrap covariance ({adjustment['bootstrap']['replicates']} replicates)"
             if "bootstrap" in adjustment else
             f"covariance x {adjustment.get('inflation', 1.0):.3g}")
    log.info("effective residuals per recording at the pilot fit: median %.1f (%.1f..%.1f); "
             "%s", np.median(nu), nu.min(), nu.max(),
             f"not calibrated: {adjustment['failed']}" if "failed" in adjustment else
             f"envelope mode {dict(zip(space.names, np.round(calibrated.start, 4)))}, "
             f"{scale}, lambda {rugged:g}")
    entry = {"mode": [float(v) for v in calibrated.start],
             "reference": [float(v) for v in reference],
             "weighted_mode": [float(v) for v in mode],
             "pilot_evaluations": evaluations + adjustment.get("evaluations", 0),
             "pilot_seconds": time.perf_counter() - started,
             "nu_median": float(np.median(nu)), "nu_min": float(nu.min()),
             "nu_max": float(nu.max()), "nu_total": float(nu.sum()),
             "adjustment": adjustment}
    return entry, calibrated
