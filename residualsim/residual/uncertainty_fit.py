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
2. **Spread**: the factor on the mixture's scales, chosen on the *validation* split by the
   reliability criterion of ``fit-spread --criterion reliability``
   (:func:`~residualsim.residual.train.fit_spread`): the final x-y reliability curve
   (10 %-90 % sample regions) closest to the diagonal at its worst level.

The model keeps both, and ``model.json``'s ``info.uncertainty_fit`` records what was
fitted, on which recordings, and every spread tried.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from residualsim.data.trajectory import Trajectory
from residualsim.errors import DataError
from residualsim.residual.policy import ResidualModel

__all__ = ["UNCERTAINTY_GRID", "UNCERTAINTY_SAMPLES", "fit_uncertainty",
           "training_state_noise", "CUBE_ESTIMATE", "ENGINE_ESTIMATE"]

log = logging.getLogger(__name__)

#: Spreads tried on the validation split (factors on the mixture's scales).
UNCERTAINTY_GRID: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
#: Stochastic samples per validation recording for each spread tried.
UNCERTAINTY_SAMPLES = 32


def fit_uncertainty(model: ResidualModel, train: Mapping[str, Trajectory],
                    validation: Mapping[str, Trajectory], fit_spread: Callable[..., Any], *,
                    samples: int = UNCERTAINTY_SAMPLES,
                    grid: Sequence[float] = UNCERTAINTY_GRID, seed: int = 0,
                    n_workers: int = 1,
                    checkpoint: str | os.PathLike[str] | None = None
                    ) -> tuple[ResidualModel, dict[str, Any]]:
    """The model with its state noise and spread fitted, and the record of the fit.

    ``train``: the recordings the state noise is estimated on (the whole training split);
    ``validation``: those the spread is chosen on (``samples`` seeded samples each, for
    every factor in ``grid``) by ``fit_spread``
    (:func:`residualsim.residual.train.fit_spread`, passed in so that this module and
    ``train`` do not import each other). The record (also stored in ``info["uncertainty_fit"]``)
    holds the criterion, the recordings' counts, the state noise and which estimate gave it
    (``state_noise_estimate``: ``"cube free flight"`` or ``"engine free-flight fit"``; its
    ``n_recordings``: how many had free flight to fit) or why there is none, the chosen
    spread and one row per spread tried (energy score m, coverages, largest reliability
    deviation).
    """
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
    candidate = dataclasses.replace(model, state_noise=noise)
    spread, rows = fit_spread(candidate, validation, samples=samples, grid=grid, seed=seed,
                              n_workers=n_workers, criterion="reliability",
                              checkpoint=None if checkpoint is None else Path(checkpoint))
    chosen = next(row for row in rows if row["spread"] == spread)
    record = {"criterion": "reliability", "split": "validation",
              "validation_recordings": len(validation), "samples": int(samples),
              "seed": int(seed), "grid": [float(g) for g in grid], "spread": spread,
              "coverage_xy_50": chosen["coverage_xy_50"],
              "coverage_xy_90": chosen["coverage_xy_90"],
              "reliability_xy_max_deviation": chosen["reliability_xy_max_deviation"],
              "state_noise": None if noise is None else noise.as_json(),
              "state_noise_estimate": estimate,
              "state_noise_recordings": len(train),
              "state_noise_missing_because": reason, "rows": rows}
    log.info("spread %g on %d validation recordings: x-y coverage %.2f / %.2f of the 50 / "
             "90 %% regions", spread, len(validation), chosen["coverage_xy_50"],
             chosen["coverage_xy_90"])
    info = {**model.info, "uncertainty_fit": record}
    return dataclasses.replace(candidate, spread=spread, info=info), record


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
        noise = estimate_rollout_state_noise(model.scene, model.params, train,
                                             substeps=model.substeps, n_workers=n_workers)
    except DataError as exc:
        return None, None, f"{cube_reason}; {exc}"
    return noise, ENGINE_ESTIMATE, None
