"""``residualsim simulate`` and ``residualsim score``: the engine on recordings, and scores."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from residualsim.atomic import check_output, check_plot_path, make_parent
from residualsim.cli.options import (add_allow_implausible, add_force, add_scene,
                                     add_selection, add_workers, count, json_line,
                                     split_options)
from residualsim.data.datasets import resolve_data


def cmd_simulate(args: argparse.Namespace) -> None:
    from residualsim.evaluation import save_predictions
    from residualsim.cli.scene_option import scene_argument
    from residualsim.experiments.jobs import simulate_dataset

    check_output(args.out, force=args.force)
    data = resolve_data(args.data, args.scene)
    start = time.perf_counter()
    predictions, n = simulate_dataset(scene_argument(args), data, args.params, args.workers,
                                      args.substeps, args.split, args.limit,
                                      **split_options(args))
    save_predictions(make_parent(args.out), predictions)
    json_line({"command": "simulate", "scene": args.scene, "split": args.split, "count": n,
               "out": str(args.out),
               "workers": args.workers, "seconds": time.perf_counter() - start})


def cmd_score(args: argparse.Namespace) -> None:
    from residualsim.evaluation import format_table
    from residualsim.experiments.jobs import score_file

    if args.plot:  # score has no --force: an existing plot is replaced, as before
        check_output(args.plot, flag="--plot", force=True)
        check_plot_path(args.plot, pred=args.pred)
    data = resolve_data(args.data) if args.data else None
    score, meta = score_file(Path(args.pred), data, args.scene, with_meta=True)
    split = meta.get("split", "unknown")
    print(f"{args.pred}: split {split}")
    print(format_table(score))
    if args.plot:
        from residualsim.evaluation import reliability_plot

        reliability_plot(score.reliability(), make_parent(args.plot), n_samples=score.n_samples,
                         title=f"{Path(args.pred).name}: S = {score.n_samples}")
    json_line({"command": "score", "split": split, **score.aggregate(),
               **({"plot": str(args.plot)} if args.plot else {})})


def register(commands) -> None:
    """Add this module's commands to the ``residualsim`` sub-parsers."""
    sim = commands.add_parser("simulate", help="roll the plain engine from recorded states")
    add_scene(sim)
    sim.add_argument("--data", help="recordings (default $RESIDUALSIM_DATA/<scene's set>)")
    sim.add_argument("--out", required=True, help="prediction file to write (.npz)")
    sim.add_argument("--params", help="engine parameters: k=v,..., a JSON file or a "
                     "calibration directory (its substeps are used too) (default: "
                     "PyBullet's defaults)")
    sim.add_argument("--substeps", type=count(1), help="engine steps per recorded sample "
                     "(default: the calibration's, else the scene's)")
    add_selection(sim)
    add_force(sim)
    add_allow_implausible(sim)
    add_workers(sim)
    sim.set_defaults(run=cmd_simulate)

    score = commands.add_parser("score", help="score a prediction file against recordings")
    score.add_argument("--pred", required=True, metavar="FILE.npz",
                       help="prediction file (simulate or predict writes one)")
    score.add_argument("--data", help="recordings (default: the folder the prediction file "
                       "records, else $RESIDUALSIM_DATA/<scene's set>)")
    score.add_argument("--scene", help="scene (default: the one in the prediction file)")
    add_allow_implausible(score)  # a scene file's URDF or its recordings may be implausible
    score.add_argument("--plot", metavar="FILE.png", help="write the reliability plot "
                       "(coverage of the 10 %%..90 %% sample regions; needs S > 1) "
                       "(default: no plot)")
    score.set_defaults(run=cmd_score)
