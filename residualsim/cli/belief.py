"""``residualsim rollout``: stochastic rollouts and per-contact beliefs from a state or a toss."""

from __future__ import annotations

import argparse
import time

from residualsim.atomic import check_output, check_plot_path
from residualsim.cli.options import (add_allow_implausible, add_force, add_max_minutes,
                                     add_seed, add_workers, count, json_line, state_option)
from residualsim.data.bundled import PRETRAINED_CUBE


def cmd_rollout(args: argparse.Namespace) -> None:
    """Stochastic rollouts and per-contact beliefs from one initial state (or toss)."""
    from residualsim.experiments.jobs import rollout_job
    from residualsim.parallel.progress import stage_line

    check_output(args.out, force=args.force)
    if args.plot:
        check_output(args.plot, flag="--plot", force=args.force)
        check_plot_path(args.plot, out=args.out)
    start = time.perf_counter()
    figures = rollout_job(args.model, args.out, state=args.state, toss=args.toss,
                          data=args.data, horizon_s=args.horizon, samples=args.samples,
                          particles=args.particles, events=args.events, seed=args.seed,
                          belief_method=args.belief_method,
                          n_workers=args.workers, residual=not args.no_residual,
                          plot=args.plot, max_minutes=args.max_minutes,
                          progress=lambda s: stage_line("rollout", f"about {s:.0f} s", start))
    json_line({"command": "rollout", **figures})


def register(commands) -> None:
    """Add this module's commands to the ``residualsim`` sub-parsers."""
    ro = commands.add_parser(
        "rollout", help="stochastic rollouts and per-contact beliefs from a state or a toss")
    ro.add_argument("--model", default=str(PRETRAINED_CUBE),
                    help="model directory (default: the shipped cube model)")
    ro.add_argument("--state", type=state_option,
                    help="the initial state, comma-separated: 13 numbers for a free body "
                         "(position m, quaternion w,x,y,z, velocity m/s, angular velocity "
                         "rad/s; world frame), or the scene's full state, 13 + 2 per joint "
                         "for an articulated object (then the joint positions, rad or m, and "
                         "the joint velocities, rad/s or m/s, in URDF order) (default: give "
                         "--toss instead)")
    ro.add_argument("--toss", help="start from this recorded toss instead (with --data) and "
                    "draw it in the plot (default: give --state instead)")
    ro.add_argument("--data", help="recordings for --toss (default $RESIDUALSIM_DATA/...)")
    ro.add_argument("--horizon", type=float, help="seconds (default: the toss's length, or "
                    "1.5 s)")
    ro.add_argument("--samples", type=count(1), default=64, help="sampled rollouts")
    ro.add_argument("--particles", type=count(0), default=1000,
                    help="belief particles per contact event (0: no beliefs)")
    ro.add_argument("--events", type=count(1), default=3, help="contact events to follow")
    add_max_minutes(ro, "--samples with --particles x --events (2 rollouts and one event of "
                    "50 particles timed)")
    ro.add_argument("--belief-method", choices=("particles", "conjugate"), default="particles",
                    help="belief step: particles (default; --particles per event) or "
                         "conjugate (250 draws per event, each carrying 32 guard-scaled "
                         "residual impulses at no rollout cost, refitted by EM)")
    add_seed(ro)
    ro.add_argument("--no-residual", action="store_true", help="the calibrated engine alone")
    ro.add_argument("--out", required=True, help=".npz file to write")
    ro.add_argument("--plot", help="PNG of the particle clouds after each contact "
                    "(default: no plot)")
    add_force(ro)
    add_allow_implausible(ro)
    add_workers(ro)
    ro.set_defaults(run=cmd_rollout)
