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

Each row reports, scored by :func:`~residualsim.evaluation.metrics.score_trajectories`
with the scene's radius of gyration r_g:

* energy scores (metres): of the final position and of the final pose, and along the
  trajectory (mean over time) of the position and of the pose (poses as
  :func:`~residualsim.evaluation.sample_scores.pose_points`, rotation weight 1, r_g);
* the CRPS of the final x, y, z (metres);
* the coverage of the 50 % and 90 % sample regions of the final position (x-y and 3-D);
* the reliability curves (final position and along the trajectory, x-y and 3-D) and their
  max deviation from the diagonal.

The result's ``ratios`` compare the rows by these energy scores: ``c_over_b`` is (c)/(b),
what sampling the residual changes over the state noise alone (None without row (b)), and
``c_over_a`` is (c)/(a), the sampled model against its mean prediction; below 1, the
first row of the ratio scores better. The full scores are kept in each row's ``score``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from residualsim.data.datasets import resolve_data
from residualsim.data.splits import recording_selector
from residualsim.errors import DataError
from residualsim.parallel.backend import DEFAULT_MAX_MINUTES, PROBE_COUNT

__all__ = ["MeanResidual", "uncertainty_decomposition", "format_decomposition",
           "decomposition_plot", "decomposition_row", "decomposition_ratios",
           "decomposition_tables", "state_noise_policy", "ROWS", "ENERGY_SCORES"]

#: The rows, in order: name and what it is.
ROWS = (("deterministic", "mean prediction, S = 1, no noise"),
        ("state noise", "initial-state noise, mean residual"),
        ("state noise + residual", "initial-state noise, sampled residual: the model as is"))

#: The energy scores of each row (keys of :meth:`TrajectoryScore.aggregate`, metres) and
#: their column titles; the ratios compare the rows by these.
ENERGY_SCORES = (("energy_score_m", "final position"),
                 ("energy_score_pose_m", "final pose"),
                 ("trajectory_energy_score_m", "position along the trajectory"),
                 ("trajectory_energy_score_pose_m", "pose along the trajectory"))

#: The reliability curves of each sampled row: key of the aggregate and title.
CURVES = (("reliability_final_xy", "final x-y"), ("reliability_final", "final 3-D"),
          ("reliability_trajectory_xy", "along the trajectory, x-y"),
          ("reliability_trajectory", "along the trajectory, 3-D"))

PathLike = str | os.PathLike[str]

if TYPE_CHECKING:
    from residualsim.residual.model import ResidualModel


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


def state_noise_policy(model) -> Any | None:
    """The sampling policy of row (b): the model's own sampling policy with its impulses
    replaced by their mean (a sustained-contact part is kept); None when the model has no
    state noise (then there is no row (b))."""
    if model.state_noise is None:
        return None
    sampling = model.sampling_policy()
    if getattr(sampling, "coefficients", None) is not None:  # keep the sustained part
        return dataclasses.replace(sampling, impulses=MeanResidual(sampling.impulses))
    return MeanResidual(sampling)


def decomposition_row(name: str, score, *, seconds: float | None = None,
                      max_penetration_m: float | None = None) -> dict:
    """One row of the decomposition from its :class:`TrajectoryScore`: ``row`` (name),
    ``samples``, ``seconds``, the energy scores of :data:`ENERGY_SCORES`, the coverages,
    ``crps_final_m``, ``max_deviation`` and ``score`` (the full aggregate)."""
    summary = score.aggregate()
    keys = [key for key, _ in ENERGY_SCORES] + ["coverage_xy_50", "coverage_xy_90",
                                                  "coverage_50", "coverage_90", "crps_final_m"]
    return {"row": name, "samples": score.n_samples, "seconds": seconds,
            **{key: summary[key] for key in keys},
            "max_deviation": summary["reliability_max_deviation"],
            "max_penetration_m": max_penetration_m, "score": summary}


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return float(numerator) / float(denominator)


def decomposition_ratios(rows: list[dict]) -> dict[str, dict[str, float | None] | None]:
    """``c_over_b`` and ``c_over_a``: for each energy score of :data:`ENERGY_SCORES`, row
    (c)'s over row (b)'s and over row (a)'s (None where a row or a score is absent)."""
    by_name = {row["row"]: row for row in rows}
    full = by_name.get(ROWS[2][0])
    ratios: dict[str, dict[str, float | None] | None] = {}
    for key, name in (("c_over_b", ROWS[1][0]), ("c_over_a", ROWS[0][0])):
        other = by_name.get(name)
        ratios[key] = None if full is None or other is None else {
            score: _ratio(full[score], other[score]) for score, _ in ENERGY_SCORES}
    return ratios


#: Samples per recording of the timed first measurement the estimate rests on.
PROBE_SAMPLES = PROBE_COUNT
#: Bytes a sampled prediction holds per sample per recorded sample at least: a position and
#: a quaternion (float64), twice (the predictions and their scores' copies).
BYTES_PER_SAMPLE = 2 * 7 * 8


def check_samples_memory(trajectories: dict, samples: int) -> None:
    """ParameterError naming ``samples`` when one sampled row's predictions (or
    ``predict``'s) would not fit in the memory left (``uncertainty --samples 100000000`` ran
    300 s with no word)."""
    from residualsim.parallel import require_memory

    need = samples * sum(t.n_samples for t in trajectories.values()) * BYTES_PER_SAMPLE
    require_memory(need, lambda gib: f"--samples {samples} on {len(trajectories)} recordings "
                                     f"needs at least {gib:.3g} GiB for one row's predictions",
                   "lower --samples or --limit")


def _check_time(estimate_s: float, samples: int, count: int, probe_s: float,
                max_minutes: float | None) -> None:
    """ParameterError naming the estimate, what it rests on and the options to change when
    the sampled rows would take longer than ``max_minutes`` (the rule:
    :func:`residualsim.parallel.require_time`)."""
    from residualsim.parallel import require_time

    require_time(estimate_s, max_minutes, f"--samples {samples}",
                 f"{PROBE_SAMPLES} samples of the {count} recordings took {probe_s:.3g} s",
                 "lower --samples or --limit")


def uncertainty_decomposition(model_dir: PathLike | ResidualModel, data: str | None = None, *,
                              split: str = "validation", samples: int = 64, seed: int = 0,
                              n_workers: int = 1, limit: int | None = None,
                              fractions=None, lists=None, progress=None,
                              max_minutes: float | None = DEFAULT_MAX_MINUTES) -> dict:
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
        Called with each finished row (for logging), and with the estimate of the sampled
        rows (a dict with ``estimate_s``) before they start.
    max_minutes : float, optional
        The sampled rows' cost is estimated from a short first measurement
        (:data:`PROBE_SAMPLES` samples of each recording, timed, after the deterministic
        row has started the workers). A ParameterError naming the
        estimate and ``samples`` is raised, before they start, when it exceeds this
        (:data:`DEFAULT_MAX_MINUTES`; None: no limit), or, before any rollout, when one
        row's predictions would not fit in the memory left.

    Returns
    -------
    dict
        ``model``, ``data``, ``split``, ``count`` (recordings), ``samples``, ``seed``,
        ``radius_of_gyration_m`` (the pose scores' r_g), ``rows``: per row
        (:func:`decomposition_row`) ``row`` (name), ``samples`` (S), ``seconds``, the
        table's figures (``energy_score_m``, ``energy_score_pose_m``,
        ``trajectory_energy_score_m``, ``trajectory_energy_score_pose_m``,
        ``coverage_xy_50`` / ``_90``, ``coverage_50`` / ``_90``, ``max_deviation`` {final,
        final_xy, trajectory, trajectory_xy}, ``crps_final_m``) and ``score``, the full
        :meth:`TrajectoryScore.aggregate`; and ``ratios`` (:func:`decomposition_ratios`).
    """
    from residualsim.evaluation.metrics import score_trajectories
    from residualsim.residual.model import ResidualModel
    from residualsim.sim.recordings import load_recordings
    from residualsim.experiments.budget import probe_seconds
    from residualsim.sim.rollout import predict_trajectories

    if int(samples) != samples or samples < 2:
        raise DataError(f"the decomposition needs samples >= 2, got {samples!r}")
    model = ResidualModel.of(model_dir)
    if model.info.get("kind") == "impacts":
        raise DataError(f"{model_dir}: a model of single impacts; the decomposition is for "
                        "trajectory models (their initial-state noise)")
    path = resolve_data(data, model.scene)
    trajectories = load_recordings(path, model.layout, 1.0 / model.dt_s, model.params,
                                   select=recording_selector(split, limit, fractions=fractions,
                                                             lists=lists, source=str(path)))
    if not trajectories:
        raise DataError(f"{path}: no recordings in the {split} split")
    layout = model.layout
    side = getattr(layout, "side_m", None)
    radius = layout.radius_of_gyration_m
    variants = [(ROWS[0][0], 0, None)]
    noise_only = state_noise_policy(model)
    if noise_only is not None:
        variants.append((ROWS[1][0], int(samples), noise_only))
    variants.append((ROWS[2][0], int(samples), None))
    check_samples_memory(trajectories, int(samples))
    rows = []
    for name, n_samples, policy in variants:
        if n_samples and len(rows) == 1:  # a short first measurement: 2 samples, timed
            probe = probe_seconds(lambda s: predict_trajectories(
                model, trajectories, samples=s, seed=seed, n_workers=n_workers))
            estimate = probe / PROBE_SAMPLES * n_samples * (len(variants) - 1)
            _check_time(estimate, int(samples), len(trajectories), probe, max_minutes)
            if progress is not None:
                progress({"estimate_s": estimate})
        start = time.perf_counter()
        predictions, stats = predict_trajectories(model, trajectories, samples=n_samples,
                                                  seed=seed, n_workers=n_workers,
                                                  policy=policy)
        score = score_trajectories(predictions, trajectories, side_m=side,
                                   radius_of_gyration_m=radius)
        row = decomposition_row(name, score, seconds=time.perf_counter() - start,
                                max_penetration_m=stats["max_penetration_m"])
        rows.append(row)
        if progress is not None:
            progress(row)
    return {"model": str(model_dir), "data": str(path), "split": split,
            "count": len(trajectories), "samples": int(samples), "seed": int(seed),
            "spread": model.spread, "state_noise": model.state_noise is not None,
            "state_noise_factor": (None if model.state_noise is None
                                   else model.state_noise.factor),
            "radius_of_gyration_m": radius, "rows": rows,
            "ratios": decomposition_ratios(rows)}


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


def _metres(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


def _times(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _crps(row: dict) -> str:
    crps = row.get("crps_final_m")
    if crps is None:
        return "—"
    return " / ".join(f"{1000 * crps[axis]:.2f}" for axis in "xyz")


def decomposition_tables(result: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """The decomposition's tables as text cells, for Markdown and HTML alike: a list of
    ``(caption, header, rows)``: the energy scores and CRPS, the ratios (c)/(b) and (c)/(a),
    the coverages with the reliability curves' max deviations, and the reliability curves
    of the sampled rows (coverage % at each level)."""
    from residualsim.evaluation.sample_scores import RELIABILITY_LEVELS, max_deviation

    labels = dict(ROWS)
    rows = result["rows"]
    names = [f"{row['row']} ({labels.get(row['row'], '')})" for row in rows]
    scores = ("Energy scores (m; lower is better) and the CRPS of the final position",
              ["prediction", *(f"energy score, {title} (m)" for _, title in ENERGY_SCORES),
               "CRPS final x / y / z (mm)"],
              [[name, *(_metres(row.get(key)) for key, _ in ENERGY_SCORES), _crps(row)]
               for name, row in zip(names, rows)])
    ratio_rows = []
    for key, title in (("c_over_b", "(c) / (b): sampled residual over state noise alone"),
                       ("c_over_a", "(c) / (a): the sampled model over its mean prediction")):
        ratio = (result.get("ratios") or {}).get(key)
        ratio_rows.append([title, *(_times(None if ratio is None else ratio[score])
                                    for score, _ in ENERGY_SCORES)])
    ratios = ("Ratios of the energy scores (below 1: (c) scores better)",
              ["ratio", *(f"{title}" for _, title in ENERGY_SCORES)], ratio_rows)
    coverage = ("Coverage of the final position's sample regions and the reliability "
                "curves' max deviation from the diagonal",
                ["prediction", "x-y coverage 50 / 90 %", "3-D coverage 50 / 90 %",
                 "max deviation from the diagonal, final x-y / 3-D (points)",
                 "the same along the trajectory"],
                [[name, _pair(row, "coverage_xy_50", "coverage_xy_90"),
                  _pair(row, "coverage_50", "coverage_90"),
                  _deviation(row, "final_xy", "final"),
                  _deviation(row, "trajectory_xy", "trajectory")]
                 for name, row in zip(names, rows)])
    curve_rows = []
    for row in rows:
        for key, title in CURVES:
            curve = row["score"].get(key)
            if curve is not None:
                curve_rows.append([f"{row['row']}: {title}",
                                   *(_percent(curve[f"{level:g}"])
                                     for level in RELIABILITY_LEVELS),
                                   _percent(max_deviation(curve))])
    curves = ("Reliability curves: coverage (%) of the central sample regions of each level",
              ["curve", *(f"{100 * level:.0f} %" for level in RELIABILITY_LEVELS),
               "max dev (points)"], curve_rows)
    return [scores, ratios, coverage, curves]


def format_decomposition(result: dict) -> str:
    """The decomposition as Markdown tables (:func:`decomposition_tables`), each after a
    line naming it."""
    lines = [
        f"{result['count']} recordings of the {result['split']} split, S = "
        f"{result['samples']}, seed {result['seed']}, spread {result['spread']:g}"
        + (f", state noise x {result['state_noise_factor']:g}"
           if result.get("state_noise_factor") not in (None, 1.0) else "")
        + (f", pose scores with r_g = {result['radius_of_gyration_m']:.4g} m"
           if result.get("radius_of_gyration_m") is not None else ""),
    ]
    for caption, header, rows in decomposition_tables(result):
        if not rows:
            continue
        lines += ["", f"{caption}:", "", "| " + " | ".join(header) + " |",
                  "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(cells) + " |" for cells in rows]
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
