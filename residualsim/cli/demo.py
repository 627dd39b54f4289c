"""``residualsim demo``: the point of residualsim on a handful of bundled real tosses."""

from __future__ import annotations

import argparse
from pathlib import Path

from residualsim.atomic import check_output
from residualsim.cli.options import add_seed, add_workers, count, json_line
from residualsim.data.bundled import REAL_SAMPLES
from residualsim.parallel import default_workers


def cmd_demo(args: argparse.Namespace) -> None:
    from residualsim.experiments.demo import format_demo, run_demo

    check_output(args.out, kind="dir", command="demo")
    result = run_demo(Path(args.data), Path(args.out), n_workers=args.workers, seed=args.seed,
                      samples=args.samples, particles=args.particles, progress=not args.quiet)
    print(format_demo(result))
    json_line({"command": "demo", **result.to_json()})


def register(commands) -> None:
    """Add this module's commands to the ``residualsim`` sub-parsers."""
    demo = commands.add_parser(
        "demo", help="default engine vs calibrated engine vs residual, stochastic coverage "
        "and the belief picture, on bundled real tosses")
    demo.add_argument("--data", default=str(REAL_SAMPLES),
                      help=f"tosses to use (default: the bundled {REAL_SAMPLES.name})")
    demo.add_argument("--out", default="residualsim-demo",
                      help="directory for the belief picture (default ./residualsim-demo)")
    demo.add_argument("--samples", type=count(2), default=32,
                      help="stochastic samples per toss (default 32)")
    demo.add_argument("--particles", type=count(2), default=300,
                      help="belief particles per contact event (default 300)")
    add_seed(demo)
    demo.add_argument("--quiet", action="store_true", help="no progress")
    add_workers(demo)
    demo.set_defaults(run=cmd_demo, workers=min(2, default_workers()))
