"""Where a model's predictive uncertainty comes from (``residualsim uncertainty``).

The same recordings are predicted three ways and scored alike
(:func:`~residualsim.evaluation.metrics.score_trajectories`):

(a) ``deterministic``: the mean prediction, S = 1: each rollout starts from the recorded
    state and applies the policy's mean residual at every contact;
(b) ``state noise``: S samples, each starting from the recorded state with velocities
    drawn from the model's ``state_noise``, with the policy's *mean* residual at every
    contact (no residual is sampled). Setting the spread to 0 instead would still draw the
    mixture component at every contact, so it would not isolate the state noise;
(c) ``state noise + residual``: the model as ``predict --samples S`` samples it: state noise,
    then residual impulses drawn from the mixture with the model's ``spread``.

Sample s of the k-th recording draws from ``default_rng([seed, k, s])``, state noise first,
so (b) and (c) start sample s from the same initial state (common random numbers) and
differ only by the residual's sampling. A model without state noise has no row (b).

Each row reports the final position's energy score, its coverage of the 50 % and 90 %
sample regions (x-y and 3-D), and the max deviation of the reliability curves (final
position and along the trajectory, x-y and 3-D) from the diagonal; the full scores are
kept in the result's ``score`` entries.
"""

from __future__ import annotations

import dataclasses

import os
import time
from dataclasses import dataclass
from typing import Any

from residualsim.data.datasets import resolve_data
from residualsim.data.splits import DEFAULT_FRACTIONS, select_recordings
from residualsim.errors import DataError

__all__ = ["MeanResidual", "uncertainty_decomposition", "format_decomposition",
           "decomposition_plot", "ROWS"]

#: The rows, in order: name and what it is.
ROWS = (("deterministic", "mean prediction, S = 1, no noise"),
        ("state noise", "initial-state noise, mean residual"),
        ("state noise + residual", "initial-state noise, sampled residual: the model as is"))

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class MeanResidual:
    """A sampling policy whose every sample is the wrapped policy's mean residual (it draws
    nothing from the generator), for rollouts whose only randomness is the state noise."""

    policy: Any

    @property
    def spin(self) -> bool:
        """Whether the policy's features end with the spin features."""
        return bool(getattr(self.policy, "spin", False))

    def mean(self, features):
        """The wrapped policy's mean residual impulse."""
        return self.policy.mean(features)

    def sample(self, features, rng):  # noqa: ARG002 - the rng is deliberately unused
        """The mean residual impulse, whatever ``rng``."""
        return self.policy.mean(features)


def uncertainty_decomposition(model_dir: PathLike, data: str | None = None, *,
                              split: str = "validation", samples: int = 64, seed: int = 0,
                              n_workers: int = 1, limit: int | None = None,
                              fractions=None, lists=None, progress=None) -> dict:
    """Rows (a), (b), (c) of the module docstring for a trajectory model on ``split``.

    Parameters
    ----------
    model_dir : path-like
        A trained trajectory model (``residualsim train``, ``fit-spread``).
    data : str, optional
        Recordings (default ``$RESIDUALSIM_DATA/<the model scene's set>``).
    split, limit, fractions, lists
        The recordings scored (as ``predict --split``).
    samples : int
        S >= 2 for rows (b) and (c).
    seed : int
        Seeds sample s of recording k as ``default_rng([seed, k, s])``.
    n_workers : int
        Engine worker processes.
    progress : callable, optional
        Called with each finished row (for logging).

    Returns
    -------
    dict
        ``model``, ``data``, ``split``, ``count`` (recordings), ``samples``, ``seed`` and
        ``rows``: per row ``row`` (name), ``samples`` (S), ``seconds``, the table's figures
        (``energy_score_m``, ``coverage_xy_50`` / ``_90``, ``coverage_50`` / ``_90``,
        ``max_deviation`` {final, final_xy, trajectory, trajectory_xy}, ``crps_final_m``)
        and ``score``, the full :meth:`TrajectoryScore.aggregate`.
    """
    from residualsim.evaluation.metrics import score_trajectories
    from residualsim.residual.policy import ResidualModel
    from residualsim.sim.recordings import load_recordings
    from residualsim.sim.rollout import predict_trajectories
    from residualsim.sim.scenes import make_scene

    if int(samples) != samples or samples < 2:
        raise DataError(f"the decomposition needs samples >= 2, got {samples!r}")
    model = ResidualModel.load(model_dir)
    if model.info.get("kind") == "impacts":
        raise DataError(f"{model_dir}: a model of single impacts; the decomposition is for "
                        "trajectory models (their initial-state noise)")
    path = resolve_data(data, model.scene)
    trajectories = select_recordings(load_recordings(path, model.scene, 1.0 / model.dt_s),
                                     split, limit,
                                     fractions=fractions or DEFAULT_FRACTIONS, lists=lists,
                                     source=str(path))
    if not trajectories:
        raise DataError(f"{path}: no recordings in the {split} split")
    side = getattr(make_scene(model.scene), "side_m", None)
    variants = [(ROWS[0][0], 0, None)]
    if model.state_noise is not None:
        sampling = model.sampling_policy()
        if getattr(sampling, "coefficients", None) is not None:  # keep the sustained part
            sampling = dataclasses.replace(sampling, impulses=MeanResidual(sampling.impulses))
        else:
            sampling = MeanResidual(sampling)
        variants.append((ROWS[1][0], int(samples), sampling))
    variants.append((ROWS[2][0], int(samples), None))
    rows = []
    for name, n_samples, policy in variants:
        start = time.perf_counter()
        predictions, stats = predict_trajectories(model, trajectories, samples=n_samples,
                                                  seed=seed, n_workers=n_workers,
                                                  policy=policy)
        score = score_trajectories(predictions, trajectories, side_m=side).aggregate()
        row = {"row": name, "samples": predictions.n_samples,
               "seconds": time.perf_counter() - start,
               **{key: score[key] for key in ("energy_score_m", "coverage_xy_50",
                                              "coverage_xy_90", "coverage_50", "coverage_90",
                                              "crps_final_m")},
               "max_deviation": score["reliability_max_deviation"],
               "max_penetration_m": stats["max_penetration_m"], "score": score}
        rows.append(row)
        if progress is not None:
            progress(row)
    return {"model": str(model_dir), "data": str(path), "split": split,
            "count": len(trajectories), "samples": int(samples), "seed": int(seed),
            "spread": model.spread, "state_noise": model.state_noise is not None,
            "state_noise_factor": (None if model.state_noise is None
                                   else model.state_noise.factor), "rows": rows}


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}"


def _pair(row: dict, first: str, second: str) -> str:
    if row[first] is None:
        return "—"
    return f"{_percent(row[first])} / {_percent(row[second])} %"


def _deviation(row: dict, first: str, second: str) -> str:
    deviation = row["max_deviation"]
    if deviation is None:
        return "—"
    return f"{_percent(deviation[first])} / {_percent(deviation[second])}"


def format_decomposition(result: dict) -> str:
    """The decomposition as a Markdown table (one line per row, then a blank line)."""
    lines = [
        f"{result['count']} recordings of the {result['split']} split, S = "
        f"{result['samples']}, seed {result['seed']}, spread {result['spread']:g}"
        + (f", state noise x {result['state_noise_factor']:g}"
           if result.get("state_noise_factor") not in (None, 1.0) else ""),
        "",
        "| prediction | energy score, final (m) | x-y coverage 50 / 90 % | "
        "3-D coverage 50 / 90 % | max deviation from the diagonal, final x-y / 3-D "
        "(points) | the same along the trajectory |",
        "|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        label = dict(ROWS)[row["row"]]
        lines.append(
            f"| {row['row']} ({label}) | {row['energy_score_m']:.4f} | "
            f"{_pair(row, 'coverage_xy_50', 'coverage_xy_90')} | "
            f"{_pair(row, 'coverage_50', 'coverage_90')} | "
            f"{_deviation(row, 'final_xy', 'final')} | "
            f"{_deviation(row, 'trajectory_xy', 'trajectory')} |")
    return "\n".join(lines) + "\n"


def decomposition_plot(result: dict, path: PathLike) -> None:
    """The reliability curves (final x-y and along the trajectory, x-y) of the sampled rows
    in one PNG (:func:`~residualsim.evaluation.plots.reliability_plot`)."""
    from residualsim.evaluation.plots import reliability_plot

    curves = {}
    for row in result["rows"]:
        score = row["score"]
        if row["samples"] >= 2:
            curves[f"{row['row']}: final x-y"] = score["reliability_final_xy"]
            curves[f"{row['row']}: trajectory x-y"] = score["reliability_trajectory_xy"]
    reliability_plot(curves, path, n_samples=result["samples"],
                     title=f"{result['count']} {result['split']} recordings, "
                           f"S = {result['samples']}")
