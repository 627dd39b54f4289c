"""``residualsim fit-spread``: set a trained model's sampling spread afterwards."""

from __future__ import annotations

import argparse

from residualsim.atomic import check_output
from residualsim.cli.options import (add_allow_implausible, add_seed, add_workers, count,
                                     float_list, json_line)
from residualsim.errors import ParameterError


def cmd_fit_spread(args: argparse.Namespace) -> None:
    """Set a model's sampling spread from its training tosses (energy score or coverage)."""
    from residualsim.experiments.jobs import fit_spread_job

    if (args.out is None) == (not args.in_place):
        raise ParameterError("fit-spread writes a new model directory: give --out DIR, or "
                             "--in-place to rewrite --model itself (not both)")
    if args.out is not None:
        check_output(args.out, kind="dir", command="train", resume=True)
    figures = fit_spread_job(args.model, args.data, out=args.out, tosses=args.tosses,
                             unseen=args.unseen, samples=args.samples, grid=args.grid,
                             seed=args.seed,
                             n_workers=args.workers, criterion=args.criterion,
                             state_noise=args.state_noise,
                             with_validation=args.with_validation,
                             observation_noise=args.observation_noise)
    json_line({"command": "fit-spread", **figures})


def register(commands) -> None:
    """Add ``fit-spread`` to the ``residualsim`` sub-parsers."""
    fs = commands.add_parser(
        "fit-spread", help="set a model's sampling spread from its training tosses")
    fs.add_argument("--model", required=True, help="model directory to start from")
    fs.add_argument("--out", help="new model directory to write (the --model directory is "
                    "left untouched) (default: none; give --out or --in-place)")
    fs.add_argument("--in-place", action="store_true",
                    help="rewrite --model itself instead (its MODEL_CARD.md, if any, gets a "
                         "note that the spread changed after it was written)")
    fs.add_argument("--data", help="recordings (default $RESIDUALSIM_DATA/<scene's set>)")
    fs.add_argument("--tosses", type=count(1), default=60,
                    help="first N tosses of the training split (default 60)")
    fs.add_argument("--unseen", action="store_true",
                    help="only training-split tosses the model was not trained on (its "
                         "mean fits its own training tosses better, which would make the "
                         "spread too narrow)")
    fs.add_argument("--with-validation", action="store_true",
                    help="score the validation split's tosses too, pooled with those")
    fs.add_argument("--samples", type=count(2), default=32, help="samples per toss")
    fs.add_argument("--grid", type=float_list, default=(1.0, 1.5, 2.0, 3.0, 4.0),
                    help="spreads to try (default 1,1.5,2,3,4)")
    add_seed(fs)
    fs.add_argument("--criterion", choices=("energy", "coverage", "reliability"),
                    default="energy",
                    help="energy: lowest energy score (default); coverage: 50 %% and 90 %% "
                         "sample regions closest to their nominal coverage on the table "
                         "plane, |c50 - 0.5| + |c90 - 0.9|; reliability: the final x-y "
                         "reliability curve (10 %%-90 %%) closest to the diagonal at its "
                         "worst level")
    fs.add_argument("--state-noise", action="store_true",
                    help="first estimate the noise of the recorded initial velocities from "
                         "the free flight before the first contact (whole training split) "
                         "and draw each sample's initial state from it (times the factor "
                         "train chose on validation, if the model has one)")
    fs.add_argument("--observation-noise", action="store_true",
                    help="first set the table height and the recordings' pose noise from "
                         "the training split's rest phases (as fit-ground does)")
    add_allow_implausible(fs)
    add_workers(fs)
    fs.set_defaults(run=cmd_fit_spread)
