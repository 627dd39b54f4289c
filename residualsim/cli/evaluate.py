"""``residualsim evaluate``: the impact table (planar-ellipse) or the learning curve (cube)."""

from __future__ import annotations

import argparse
import time

from residualsim.atomic import check_output
from residualsim.cli.options import (SPLITS, add_allow_implausible, add_max_minutes,
                                     add_seed, add_split_options, add_workers, count,
                                     json_line, nonnegative_float)
from residualsim.data.bundled import PRETRAINED
from residualsim.data.datasets import resolve_data
from residualsim.errors import DataError


def cmd_evaluate(args: argparse.Namespace) -> None:
    """Impact table (planar-ellipse) or learning curve (cube) into --out."""
    from residualsim.experiments.evaluate import (evaluate_curve, evaluate_impact_scores,
                                                  impact_markdown, score_markdown)
    from residualsim.experiments.learning_curve import DEFAULT_METHODS, CurveConfig, curve_table
    from residualsim.residual.model import ResidualModel

    from residualsim.sim.scenes import same_scene

    check_output(args.out, kind="dir", command="evaluate", resume=args.resume)
    start = time.perf_counter()
    if args.model is None and args.scene not in PRETRAINED:
        raise DataError(f"evaluate --scene {args.scene} needs --model: a model trained on "
                        "that scene (residualsim train --scene ...)")
    model = ResidualModel.load(args.model or PRETRAINED[args.scene])
    if not same_scene(model.scene, args.scene):
        raise DataError(f"{args.model}: a {model.scene!r} model, not {args.scene!r}")
    data = resolve_data(args.data, args.scene)
    if args.scene == "planar-ellipse":
        table, scores = evaluate_impact_scores(model, data, args.out, n_workers=args.workers,
                                               seed=args.seed, samples=args.samples)
        print(impact_markdown(table), end="")
        if scores is not None:
            print(f"\nAs distributions (S = {args.samples} samples, seed {args.seed}; m/s, "
                  "log score in log((m/s)^-3)):\n")
            print(score_markdown(scores["rows"], scores["info"]["parts"]), end="")
        json_line({"command": "evaluate", "scene": args.scene, "out": str(args.out),
                    "table": {r["model"]: [r["validation"], r["test"]] for r in table},
                    "scores": None if scores is None else {
                        r["model"]: {k: v for k, v in r.items() if k != "model"}
                        for r in scores["rows"]},
                    "seconds": time.perf_counter() - start})
        return
    import dataclasses

    if args.params is not None:  # another engine under the same curve (e.g. the defaults)
        from residualsim.sim.scenes import parse_params

        model = dataclasses.replace(
            model, params=parse_params(None if args.params == "default" else args.params))
    guard = model.guard
    if args.penetration_tolerance is not None:
        guard = dataclasses.replace(guard, penetration_tolerance_m=args.penetration_tolerance)
    methods = tuple(args.methods or (DEFAULT_METHODS if model.scene == "cube"
                                     else ("engine", "mdn")))
    config = CurveConfig(sizes=tuple(args.sizes), repeats=args.repeats, methods=methods,
                         mdn_budget=args.budget, seed=args.seed, workers=args.workers,
                         guard=guard, scene=model.scene)
    summary = evaluate_curve(model, data, args.out, config, resume=args.resume,
                             heldout=args.heldout)
    print(curve_table(summary), end="")
    json_line({"command": "evaluate", "scene": args.scene, "out": str(args.out),
                "summary": summary, "seconds": time.perf_counter() - start})


def _progress_line(start: float):
    """``uncertainty``'s progress: a plain line per finished row, and the estimate of the
    sampled rows before they start (standard error; a terminal or a log file alike)."""
    from residualsim.parallel.progress import stage_line

    def line(row: dict) -> None:
        stage_line("uncertainty", f"the sampled rows: about {row['estimate_s']:.0f} s"
                   if "estimate_s" in row else
                   f"row {row['row']} done in {row['seconds']:.1f} s", start)
    return line


def cmd_uncertainty(args: argparse.Namespace) -> None:
    """Deterministic / state noise / state noise + residual, scored alike."""
    import json

    from residualsim.atomic import atomic_write_text, check_output, check_plot_path, make_parent
    from residualsim.cli.options import split_options
    from residualsim.experiments.uncertainty import (decomposition_plot,
                                                     format_decomposition,
                                                     uncertainty_decomposition)

    # no --force: existing files are replaced, as before; the rest is refused up front
    if args.out:
        check_output(args.out, force=True)
    if args.plot:
        check_output(args.plot, flag="--plot", force=True)
        check_plot_path(args.plot, out=args.out)
    start = time.perf_counter()
    result = uncertainty_decomposition(
        args.model or PRETRAINED["cube"], args.data, split=args.split, samples=args.samples,
        seed=args.seed, n_workers=args.workers, limit=args.limit, **split_options(args),
        max_minutes=args.max_minutes or None, progress=_progress_line(start))
    print(format_decomposition(result), end="")
    if args.plot:
        decomposition_plot(result, make_parent(args.plot))
    if args.out:
        atomic_write_text(make_parent(args.out), json.dumps(result, indent=1) + "\n")
    json_line({"command": "uncertainty", **{k: v for k, v in result.items() if k != "rows"},
               "rows": [{k: v for k, v in row.items() if k != "score"}
                        for row in result["rows"]],
               "plot": args.plot, "out": args.out, "seconds": time.perf_counter() - start})


def register(commands) -> None:
    """Add this module's commands to the ``residualsim`` sub-parsers."""
    from residualsim.experiments.learning_curve import DEFAULT_METHODS, METHODS, SIZES

    ev = commands.add_parser(
        "evaluate", help="impact table (planar-ellipse) or learning curve (cube) on real data")
    ev.add_argument("--scene", required=True, help="planar-ellipse (impact table), cube or "
                    "a scene file (learning curve; a scene file needs --model)")
    ev.add_argument("--model", help="model directory (default: the shipped model of the scene)")
    ev.add_argument("--data", help="recordings (default $RESIDUALSIM_DATA/<scene's set>)")
    ev.add_argument("--out", required=True, help="output directory")
    ev.add_argument("--sizes", type=count(1), nargs="+", default=list(SIZES),
                    help="cube: training-set sizes (tosses; capped at the training split)")
    ev.add_argument("--repeats", type=count(1), default=3, help="cube: subsets per size")
    ev.add_argument("--methods", nargs="+", choices=METHODS,
                    help=f"methods to fit (default: {' '.join(DEFAULT_METHODS)} on the cube, "
                         "engine mdn on another object; 'calibrated' fits the engine's "
                         "parameters on each training subset instead, 'calibrated+mdn' and "
                         "'joint' both, in two stages or at once)")
    ev.add_argument("--samples", type=count(0), default=64,
                    help="planar-ellipse: samples per impact for the energy score of the "
                         "engine, GP baselines and residual MDN as distributions (with the "
                         "log score; 0: the RMSE table only)")
    ev.add_argument("--budget", type=count(1), default=96,
                    help="cube: nevergrad evaluations per MDN fit")
    ev.add_argument("--heldout", choices=("validation", "test"), default="test",
                    help="cube: the split scored (validation is used for early stopping)")
    add_seed(ev)
    ev.add_argument("--params", metavar="P",
                    help="cube: engine parameters for every method instead of the model's "
                         "calibrated ones: k=v,..., a JSON file, or 'default' (PyBullet's)")
    ev.add_argument("--penetration-tolerance", type=nonnegative_float, default=None,
                    metavar="M", help="cube: the contact guard's penetration tolerance for the "
                    "MDN and GP rollouts, m (default: the model's)")
    ev.add_argument("--resume", action="store_true", help="cube: continue an interrupted run")
    add_allow_implausible(ev)
    add_workers(ev)
    ev.set_defaults(run=cmd_evaluate)

    un = commands.add_parser(
        "uncertainty", help="a model's uncertainty decomposed: deterministic, initial-state "
        "noise only, state noise + residual (energy score, coverage, reliability)")
    un.add_argument("--model", help="trajectory model directory (default: the shipped cube "
                    "model)")
    un.add_argument("--data", help="recordings (default $RESIDUALSIM_DATA/<scene's set>)")
    un.add_argument("--samples", type=count(2), default=64, help="samples S (default 64; "
                    "refused when its estimate, from the deterministic row's time, exceeds "
                    "--max-minutes, or its predictions the memory left)")
    add_max_minutes(un, "the sampled rows")
    add_seed(un)
    un.add_argument("--plot", metavar="FILE.png", help="reliability plot of the sampled rows "
                    "(default: no plot)")
    un.add_argument("--out", metavar="FILE.json", help="the full result (every row's scores) "
                    "(default: not written)")
    un.add_argument("--split", choices=SPLITS, default="validation",
                    help="which split of the recordings (default validation)")
    un.add_argument("--limit", type=count(1), help="only the first N recordings (default: all)")
    add_split_options(un)
    add_allow_implausible(un)
    add_workers(un)
    un.set_defaults(run=cmd_uncertainty)

