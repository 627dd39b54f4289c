"""The sampling spread: the factor on the residual mixture's scales, chosen on recordings.

:func:`fit_spread` rolls out stochastic predictions at every spread of a grid and ranks the
spreads by the energy score, the coverage of the 50 % / 90 % regions or the reliability
curve (:func:`rank_key`, shared with the uncertainty fit of
:mod:`residualsim.residual.uncertainty_fit`). ``train --objective energy`` learns the
mixture's scales themselves (:mod:`residualsim.residual.energy_loss`); this fit remains
for models trained on the mean, and for checking a learned spread against a scalar one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from residualsim.data.trajectory import Trajectory
from residualsim.errors import ParameterError
from residualsim.residual.policy import params_sha256
from residualsim.residual.model import ResidualModel

__all__ = ["SPREAD_GRID", "SPREAD_CRITERIA", "fit_spread", "rank_key"]

log = logging.getLogger(__name__)


#: Spreads tried by :func:`fit_spread` (factors on the mixture's scales).
SPREAD_GRID = (1.0, 2.0, 4.0, 8.0, 16.0)
#: How :func:`fit_spread` picks a spread from the grid.
SPREAD_CRITERIA = ("energy", "coverage", "reliability")


def fit_spread(model: ResidualModel, train: Mapping[str, Trajectory], samples: int = 32,
               grid: Sequence[float] = SPREAD_GRID, seed: int = 0, n_workers: int = 1,
               criterion: str = "energy", checkpoint: str | os.PathLike[str] | None = None
               ) -> tuple[float, list[dict[str, Any]]]:
    """Choose the model's sampling spread on training recordings.

    Training (Algorithm 2) scores the policy's *mean*, which leaves the mixture's scales
    uncalibrated (the shipped cube model's samples covered the recorded final position of
    no validation toss). For every factor in ``grid`` this rolls out ``samples`` stochastic
    predictions of each training recording and scores their final positions, then picks a
    factor by ``criterion``:

    * ``"energy"``: the lowest mean energy score (a proper scoring rule: lowest for the
      calibrated spread, penalising both over- and under-confidence, but weighing sharpness
      as well as calibration);
    * ``"coverage"``: the smallest miscalibration of the sample regions on the table plane,
      |c50 - 0.5| + |c90 - 0.9| with c50, c90 the fractions of recorded final x-y positions
      inside the 50 % and 90 % sample regions (what a planner relying on the regions needs;
      ties go to the lower energy score);
    * ``"reliability"``: the smallest largest distance of the final x-y reliability curve
      (coverage of the 10 %, ..., 90 % regions) from the diagonal, the check of every level
      rather than two (ties go to the lower energy score).

    Returns (spread, one row per factor: spread, energy score m, coverages, miscalibration,
    RMSE m).

    ``checkpoint``: a JSON file rewritten atomically after each factor. A rerun with the
    same model, recordings, samples and seed reuses the rows it holds (an interrupted fit
    loses at most one factor); one written for anything else is ignored.
    """
    import json

    from residualsim.atomic import atomic_write_text, read_json
    from residualsim.evaluation.metrics import score_trajectories
    from residualsim.sim.rollout import predict_trajectories

    if int(samples) != samples or samples < 2:
        raise ParameterError(f"fit_spread needs samples >= 2, got {samples!r}")
    if not grid or any(not (g >= 0 and np.isfinite(g)) for g in grid):
        raise ParameterError(f"spreads must be finite and >= 0, got {list(grid)}")
    if criterion not in SPREAD_CRITERIA:
        raise ParameterError(f"unknown spread criterion {criterion!r}; choose one of "
                             f"{', '.join(SPREAD_CRITERIA)}")
    fingerprint = hashlib.sha256(json.dumps({
        "weights": params_sha256(model.policy), "params": model.params.as_json(),
        "guard": asdict(model.guard), "substeps": model.substeps,
        "state_noise": None if model.state_noise is None else model.state_noise.as_json(),
        "ids": sorted(train), "samples": int(samples), "seed": int(seed)},
        sort_keys=True, default=str).encode()).hexdigest()
    done: dict[float, dict[str, Any]] = {}
    if checkpoint is not None and Path(checkpoint).is_file():
        saved = read_json(Path(checkpoint))
        if isinstance(saved, dict) and saved.get("fingerprint") == fingerprint:
            done = {float(row["spread"]): row for row in saved.get("rows", [])}
            log.info("%s: reusing %d finished spreads", checkpoint, len(done))
    rows = []
    for spread in grid:
        if float(spread) in done:
            rows.append(done[float(spread)])
            continue
        candidate = dataclasses.replace(model, spread=float(spread))
        predictions, _ = predict_trajectories(candidate, train, samples=int(samples),
                                              seed=seed, n_workers=n_workers)
        score = score_trajectories(predictions, train).aggregate()
        rows.append({"spread": float(spread), "energy_score_m": score["energy_score_m"],
                     "coverage_50": score["coverage_50"], "coverage_90": score["coverage_90"],
                     "coverage_xy_50": score["coverage_xy_50"],
                     "coverage_xy_90": score["coverage_xy_90"],
                     "miscalibration_xy": abs(score["coverage_xy_50"] - 0.5)
                     + abs(score["coverage_xy_90"] - 0.9),
                     "reliability_xy": score["reliability_final_xy"],
                     "reliability_xy_max_deviation":
                         score["reliability_max_deviation"]["final_xy"],
                     "position_rmse_m": score["position_rmse_m"]})
        log.info("spread %g: energy score %.4f m, x-y coverage %.3f / %.3f", spread,
                 score["energy_score_m"], score["coverage_xy_50"], score["coverage_xy_90"])
        if checkpoint is not None:
            done[float(spread)] = rows[-1]
            atomic_write_text(Path(checkpoint), json.dumps(
                {"fingerprint": fingerprint, "rows": list(done.values())}))
    best = min(rows, key=rank_key(criterion))
    return best["spread"], rows


def rank_key(criterion: str) -> Callable[[Mapping[str, Any]], tuple[float, ...]]:
    """How a spread or start-width row ranks under ``criterion`` (lowest first), the one
    ranking ``fit_spread`` and this module share: ``"coverage"`` the x-y miscalibration,
    ``"reliability"`` the worst deviation of the final x-y reliability curve from the
    diagonal (both rounded to 9 digits, ties to the lower energy score, m), ``"energy"``
    the energy score alone."""
    column = {"coverage": "miscalibration_xy",
              "reliability": "reliability_xy_max_deviation"}.get(criterion)
    if column is None:
        return lambda row: (row["energy_score_m"],)
    return lambda row: (round(row[column], 9), row["energy_score_m"])
