"""``residualsim evaluate``: the comparisons a researcher asks for before adopting a model.

* ``--scene planar-ellipse``: the impact table (:func:`residualsim.residual.impact.impact_table`)
  of a planar impact model on the MCube ellipse impacts: every model's RMSE of
  (dx, dy, k dθ) on the validation and test splits, in the corrected axis convention; and,
  with S samples, the calibrated engine, the GP baselines and the residual MDN judged as
  distributions (energy score, log score: :mod:`residualsim.residual.impact_scores`).
* ``--scene cube``: the learning curve (:mod:`residualsim.experiments.learning_curve`) on the ContactNets
  tosses, on the engine of a cube model (its calibrated parameters, substeps and guard).

Both write into one output directory (JSON, a Markdown table, and for the curve a PNG), each
file atomically; the curve resumes from ``curve.jsonl`` with ``resume=True``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from residualsim.atomic import atomic_write_text
from residualsim.errors import DataError, ParameterError

__all__ = ["evaluate_impacts", "evaluate_impact_scores", "evaluate_curve", "impact_markdown",
           "score_markdown"]


def impact_markdown(table: Sequence[dict[str, Any]]) -> str:
    """The impact table as Markdown (m/s)."""
    lines = ["| model | validation | test |", "|---|---|---|"]
    lines += [f"| {row['model']} | {row['validation']:.3f} | {row['test']:.3f} |"
              for row in table]
    return "\n".join(lines) + "\n"


def score_markdown(rows: Sequence[dict[str, Any]], parts: Sequence[str]) -> str:
    """The distributional impact scores as Markdown: per part, RMSE of the mean and energy
    score (m/s) and log score (log((m/s)^-3); "–" where undefined)."""
    head = " | ".join(f"{p} RMSE | {p} energy score | {p} log score" for p in parts)
    lines = [f"| model | S | {head} |", "|---|---|" + "---|" * (3 * len(parts))]
    for row in rows:
        cells = []
        for p in parts:
            log_score = row[f"{p}_log_score"]
            cells += [f"{row[f'{p}_rmse_mps']:.3f}", f"{row[f'{p}_energy_score_mps']:.4f}",
                      "–" if log_score is None else f"{log_score:.2f}"]
        lines.append(f"| {row['model']} | {row['samples']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def evaluate_impacts(model, data: str | Path, out: str | Path, n_workers: int = 1,
                     seed: int = 0, samples: int = 64,
                     parts: Sequence[str] = ("validation", "test")) -> list[dict[str, Any]]:
    """Write ``impact-table.json`` and ``impact-table.md`` for a planar impact model and,
    with ``samples`` > 0, ``impact-scores.json`` (``{"rows", "info"}``) and
    ``impact-scores.md``: the engine, GP baselines and residual MDN judged as distributions
    on ``parts`` (:func:`residualsim.residual.impact_scores.impact_distribution_table`).
    Returns the RMSE table (:func:`evaluate_impact_scores` returns the scores too)."""
    table, _ = evaluate_impact_scores(model, data, out, n_workers, seed, samples, parts)
    return table


def evaluate_impact_scores(model, data: str | Path, out: str | Path, n_workers: int = 1,
                           seed: int = 0, samples: int = 64,
                           parts: Sequence[str] = ("validation", "test")
                           ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """:func:`evaluate_impacts`, returning (RMSE table, ``{"rows", "info"}`` of the
    distributional scores or None when ``samples`` is 0)."""
    from residualsim.data import load_impacts
    from residualsim.data.splits import split_ids
    from residualsim.residual.impact import fit_gp_baselines, impact_table, split_index
    from residualsim.residual.impact_scores import impact_distribution_table
    from residualsim.sim.rollout import simulate_impacts

    if model.info.get("kind") != "impacts":
        raise DataError(f"{model.scene} model is not a planar impact model (train one with "
                        "train/planar_impacts.py)")
    if int(samples) < 0:
        raise ParameterError(f"samples must be >= 0, got {samples}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    impacts = load_impacts(data, convention="corrected")
    split = split_ids(impacts.rows.tolist())
    engine = simulate_impacts(model.layout, impacts, model.params, n_workers, model.substeps)
    gps = fit_gp_baselines(impacts, engine, split_index(impacts, split)["train"],
                           model.params.lateral_friction, seed)
    table = impact_table(model, impacts, split, n_workers=n_workers, seed=seed,
                         engine_post=engine, gps=gps)
    atomic_write_text(out / "impact-table.json", json.dumps(table, indent=1) + "\n")
    atomic_write_text(out / "impact-table.md", impact_markdown(table))
    if int(samples) == 0:
        return table, None
    rows, info = impact_distribution_table(model, impacts, split, engine, gps,
                                           samples=int(samples), seed=seed, parts=parts)
    scores = {"rows": rows, "info": info}
    atomic_write_text(out / "impact-scores.json", json.dumps(scores, indent=1) + "\n")
    atomic_write_text(out / "impact-scores.md", score_markdown(rows, parts))
    return table, scores


def evaluate_curve(model, data: str | Path, out: str | Path, config, resume: bool = False,
                   heldout: str = "test", log=print) -> list[dict[str, Any]]:
    """Run (or, with ``resume``, continue) the learning curve into ``out``: ``curve.jsonl``
    (one row per method, size and repeat), ``curve-summary.json``, ``curve.md`` and
    ``curve.png``. Returns the summary."""
    import dataclasses
    from dataclasses import asdict

    from residualsim.data.splits import split_ids
    from residualsim.sim.recordings import load_recordings
    from residualsim.experiments.learning_curve import curve_plot, curve_table, run_learning_curve, summarize

    if model.info.get("kind") == "impacts":
        raise DataError("the learning curve runs on trajectories, not a model of single "
                        "impacts")
    if config.scene != model.scene:
        config = dataclasses.replace(config, scene=model.scene)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    settings = {**asdict(config), "heldout": heldout, "params": model.params.as_json(),
                "substeps": model.substeps}
    settings.pop("workers")
    settings_path = out / "curve-config.json"
    if (out / "curve.jsonl").exists():
        if not resume:
            raise ParameterError(f"{out / 'curve.jsonl'} exists: pass --resume to continue it, "
                                 "or choose another --out")
        if settings_path.exists():
            before = json.loads(settings_path.read_text())
            if before != json.loads(json.dumps(settings)):
                changed = sorted(k for k in settings if before.get(k) !=
                                 json.loads(json.dumps(settings))[k])
                raise ParameterError(f"{settings_path}: the run was started with other "
                                     f"settings ({', '.join(changed)}); use another --out")
    atomic_write_text(settings_path, json.dumps(settings, indent=1) + "\n")
    trajectories = load_recordings(data, model.scene, 1.0 / model.dt_s, model.params)
    rows = run_learning_curve(trajectories, split_ids(list(trajectories)), model.params,
                              model.substeps, out, config, heldout=heldout, log=log)
    summary = summarize(rows)
    atomic_write_text(out / "curve-summary.json", json.dumps(summary, indent=1) + "\n")
    atomic_write_text(out / "curve.md", curve_table(summary))
    curve_plot(summary, out / "curve.png",
               title=f"{'cube' if model.scene == 'cube' else Path(model.scene).stem} tosses: "
                     f"held-out ({heldout}) position RMSE vs training tosses")
    return summary
