"""Honest uncertainty by default: ``train`` fits the state noise and the residual's spread.

Training (Algorithm 2) scores the policy's mean prediction, so a freshly trained model
knows nothing of how wide its samples should be. :func:`fit_uncertainty` runs right after
training, on the model it produced:

1. **State noise**: the noise of the recorded initial velocities, estimated from the free
   flight before the first contact of every training recording: in closed form for cube
   recordings (:func:`~residualsim.residual.state_noise.estimate_state_noise`, they carry
   ``metadata["half_width_m"]``), otherwise, for any free object, articulated ones
   included, from the model's engine fitting each initial state by rollout
   (:func:`~residualsim.residual.state_noise.estimate_rollout_state_noise`, base and joint
   velocities). Planar recordings, or none with free flight, leave it unset, and the record
   says why.
2. **Width of the start** (``StateNoise.factor``): a factor on the estimate's standard
   deviations, chosen from :data:`NOISE_FACTORS` on the *validation* split with the
   mixture's own scales (spread 1). The estimate can be right and the samples still too
   wide or narrow: a pose-only start's velocity errors are correlated with each other and
   with its (unperturbed) pose, while the samples draw every component independently, so
   the estimate's width is not the width the final positions need (measured on a
   pose-only hinge: 83 / 100 % test coverage with factor 1, train/README.md §19).
3. **Spread**: the factor on the mixture's scales, chosen on the validation split with the
   chosen start width.

Steps 2 and 3 are one pass of a coordinate search (4 + 6 - 1 = 9 validation evaluations,
not the 24 of the full grid; the row at factor 1 and spread 1 is shared), both by the
reliability criterion of ``fit-spread --criterion reliability``
(:func:`~residualsim.residual.spread.fit_spread`): the final x-y reliability curve
(10 %-90 % sample regions) closest to the diagonal at its worst level, ties to the lower
energy score (then, for the start's factor, to the factor nearest 1: a zero estimate
gives the same samples at every factor). Every evaluation draws the same seeded samples
(``seed``), so the choice does not depend on the worker count.

The model keeps the estimate, its factor and the spread (every sampler applies them:
``predict --samples``, ``fit-spread``, ``uncertainty``, the beliefs'
``StochasticSimulator``), and ``model.json``'s ``info.uncertainty_fit`` records what was
fitted, on which recordings, and every factor and spread tried.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from residualsim.data.trajectory import Trajectory
from residualsim.errors import DataError, ParameterError
from residualsim.residual.model import ResidualModel

__all__ = ["UNCERTAINTY_GRID", "UNCERTAINTY_SAMPLES", "NOISE_FACTORS", "fit_uncertainty",
           "rank_key", "training_state_noise", "CUBE_ESTIMATE", "ENGINE_ESTIMATE"]

log = logging.getLogger(__name__)

#: Spreads tried on the validation split (factors on the mixture's scales).
UNCERTAINTY_GRID: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
#: Factors on the estimated state noise tried on the validation split (at spread 1).
NOISE_FACTORS: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0)
#: Stochastic samples per validation recording for each factor and spread tried.
UNCERTAINTY_SAMPLES = 32


def fit_uncertainty(model: ResidualModel, train: Mapping[str, Trajectory],
                    validation: Mapping[str, Trajectory], fit_spread: Callable[..., Any], *,
                    samples: int = UNCERTAINTY_SAMPLES,
                    grid: Sequence[float] = UNCERTAINTY_GRID, seed: int = 0,
                    n_workers: int = 1,
                    checkpoint: str | os.PathLike[str] | None = None,
                    noise_factors: Sequence[float] = NOISE_FACTORS
                    ) -> tuple[ResidualModel, dict[str, Any]]:
    """The model with its state noise, the noise's factor and the spread fitted, and the
    record of the fit.

    ``train``: the recordings the state noise is estimated on (the whole training split);
    ``validation``: those the noise's factor (from ``noise_factors``, at spread 1) and then
    the spread (from ``grid``) are chosen on, ``samples`` seeded samples each, by
    ``fit_spread`` (:func:`residualsim.residual.spread.fit_spread`, passed in so that this
    module and ``train`` do not import each other). ``checkpoint``: the spread pass's
    checkpoint file; the factor pass uses one per factor beside it (``<stem>.noise-<f>.json``,
    removed when the fit is done). The record (also stored in ``info["uncertainty_fit"]``)
    holds the criterion, the recordings' counts, the state noise (with its chosen ``factor``)
    and which estimate gave it (``state_noise_estimate``: ``"cube free flight"`` or
    ``"engine free-flight fit"``; its ``n_recordings``: how many had free flight to fit) or
    why there is none, the chosen factor (``state_noise_factor``, None without state noise)
    and one row per factor tried (``state_noise_rows``), the chosen spread and one row per
    spread tried (``rows``: energy score m, coverages, largest reliability deviation).
    """
    if not noise_factors or any(not (f >= 0 and math.isfinite(f)) for f in noise_factors):
        raise ParameterError(f"state-noise factors must be finite and >= 0, got "
                             f"{list(noise_factors)}")
    noise, estimate, reason = training_state_noise(model, train, n_workers)
    if noise is not None:
        log.info("state noise (%s) from %d training recordings: velocity %s m/s, angular "
                 "velocity %s rad/s (world x, y, z)%s", estimate, noise.n_recordings,
                 [round(v, 4) for v in noise.velocity_std_mps],
                 [round(v, 3) for v in noise.omega_std_radps],
                 f", joints {[round(v, 3) for v in noise.joint_velocity_std]}"
                 if noise.joint_velocity_std else "")
    else:
        log.info("no state noise fitted: %s", reason)

    def evaluate(candidate: ResidualModel, spreads: Sequence[float],
                 path: Path | None) -> list[dict[str, Any]]:
        return fit_spread(candidate, validation, samples=samples, grid=spreads, seed=seed,
                          n_workers=n_workers, criterion="reliability", checkpoint=path)[1]

    base = None if checkpoint is None else Path(checkpoint)
    factor, noise_rows, shared = None, [], None
    if noise is not None:
        for value in noise_factors:
            path = None if base is None else base.with_name(f"{base.stem}.noise-{value:g}.json")
            row = evaluate(dataclasses.replace(model, state_noise=dataclasses.replace(
                noise, factor=float(value))), (1.0,), path)[0]
            noise_rows.append({"state_noise_factor": float(value), **row})
            log.info("state noise x %g: x-y coverage %.2f / %.2f, worst reliability "
                     "deviation %.3f", value, row["coverage_xy_50"], row["coverage_xy_90"],
                     row["reliability_xy_max_deviation"])
        best = min(noise_rows, key=lambda row: (*_reliability_key(row),
                                                abs(math.log(row["state_noise_factor"]))
                                                if row["state_noise_factor"] > 0 else math.inf))
        factor = best["state_noise_factor"]
        noise = dataclasses.replace(noise, factor=factor)
        shared = {k: v for k, v in best.items() if k != "state_noise_factor"}
    candidate = dataclasses.replace(model, state_noise=noise)
    rest = [float(g) for g in grid if shared is None or float(g) != 1.0]
    computed = iter(evaluate(candidate, rest, base) if rest else [])
    rows = [shared if shared is not None and float(g) == 1.0 else next(computed)
            for g in grid]
    chosen = min(rows, key=_reliability_key)
    spread = chosen["spread"]
    record = {"criterion": "reliability", "split": "validation",
              "validation_recordings": len(validation), "samples": int(samples),
              "seed": int(seed), "grid": [float(g) for g in grid], "spread": spread,
              "coverage_xy_50": chosen["coverage_xy_50"],
              "coverage_xy_90": chosen["coverage_xy_90"],
              "reliability_xy_max_deviation": chosen["reliability_xy_max_deviation"],
              "state_noise": None if noise is None else noise.as_json(),
              "state_noise_estimate": estimate,
              "state_noise_recordings": len(train),
              "state_noise_missing_because": reason,
              "state_noise_factor": factor,
              "state_noise_factor_grid": [float(f) for f in noise_factors],
              "state_noise_rows": noise_rows, "rows": rows}
    log.info("state noise factor %s, spread %g on %d validation recordings: x-y coverage "
             "%.2f / %.2f of the 50 / 90 %% regions", factor, spread, len(validation),
             chosen["coverage_xy_50"], chosen["coverage_xy_90"])
    if base is not None:
        for value in noise_factors:
            base.with_name(f"{base.stem}.noise-{value:g}.json").unlink(missing_ok=True)
    info = {**model.info, "uncertainty_fit": record}
    return dataclasses.replace(candidate, spread=spread, info=info), record


from residualsim.residual.spread import rank_key  # noqa: E402

_reliability_key = rank_key("reliability")


#: ``info.uncertainty_fit.state_noise_estimate`` of the two estimates.
CUBE_ESTIMATE = "cube free flight"
ENGINE_ESTIMATE = "engine free-flight fit"


def training_state_noise(model: ResidualModel, train: Mapping[str, Trajectory],
                         n_workers: int = 1) -> tuple[Any, str | None, str | None]:
    """(state noise or None, which estimate, why none) for ``model`` from its training
    recordings (as :func:`~residualsim.sim.recordings.prepare_recordings` returns them): the
    cube's closed form when the recordings allow it (:data:`CUBE_ESTIMATE`), else the
    engine's free-flight fit with the model's parameters (:data:`ENGINE_ESTIMATE`)."""
    from residualsim.residual.state_noise import (estimate_rollout_state_noise,
                                                  estimate_state_noise)

    try:
        return estimate_state_noise(train), CUBE_ESTIMATE, None
    except DataError as exc:  # planar recordings, or no known half-width or free flight
        cube_reason = str(exc)
    try:
        noise = estimate_rollout_state_noise(model.layout, model.params, train,
                                             substeps=model.substeps, n_workers=n_workers)
    except DataError as exc:
        return None, None, f"{cube_reason}; {exc}"
    return noise, ENGINE_ESTIMATE, None
