"""``residualsim report``: one self-contained HTML page of a calibration and/or a model."""

from __future__ import annotations

import argparse

from residualsim.atomic import check_output
from residualsim.cli.options import (SPLITS, add_force, add_seed, add_split_options,
                                     add_workers, count, json_line, split_options)


def cmd_report(args: argparse.Namespace) -> None:
    from residualsim.experiments.report import build_report

    check_output(args.out, force=args.force)
    figures = build_report(args.out, model=args.model, calibration=args.calibration,
                           data=args.data, split=args.split, samples=args.samples,
                           seed=args.seed, max_figures=args.figures, n_workers=args.workers,
                           lists_file=args.split_ids, progress=not args.quiet,
                           decomposition=not args.no_decomposition,
                           **split_options(args))
    json_line({"command": "report", **figures})


def report_command(out: str, *, model: str | None = None, calibration: str | None = None,
                   data: str | None = None, split: str = "validation") -> str:
    """The ``residualsim report`` line that shows a calibration or a model (printed by
    ``calibrate`` and ``train`` on standard error)."""
    import shlex

    argv = ["residualsim", "report"]
    for flag, value in (("--model", model), ("--calibration", calibration), ("--data", data)):
        if value is not None:
            argv += [flag, str(value)]
    argv += ["--split", split, "--out", str(out)]
    return " ".join(shlex.quote(a) for a in argv)


def register(commands) -> None:
    """Add this module's commands to the ``residualsim`` sub-parsers."""
    from residualsim.experiments.report import DEFAULT_FIGURES

    rep = commands.add_parser(
        "report", help="one self-contained HTML page: errors, trajectories with sampled "
        "bands, posterior, reliability")
    rep.add_argument("--model", metavar="DIR", help="model directory (residualsim train) "
                     "(default: none; give --model and/or --calibration)")
    rep.add_argument("--calibration", metavar="DIR", help="calibration directory "
                     "(residualsim calibrate) (default: the model's own calibrated engine)")
    rep.add_argument("--data", metavar="DIR", help="recordings (default "
                     "$RESIDUALSIM_DATA/<scene's set>)")
    rep.add_argument("--split", choices=SPLITS, default="validation",
                     help="which split of the recordings, or all")
    rep.add_argument("--samples", type=count(0), default=32,
                     help="sampled residual rollouts per recording, for the 50 %% / 90 %% "
                     "bands and the reliability curve (0 or 1: none)")
    rep.add_argument("--figures", type=count(0), default=DEFAULT_FIGURES, metavar="N",
                     help="draw the first N recordings of the split (all are in the table)")
    rep.add_argument("--no-decomposition", action="store_true",
                     help="skip row (b) of the uncertainty decomposition (state noise with the "
                     "mean residual), which costs as many rollouts as --samples (default: run "
                     "it for a model with state noise)")
    add_seed(rep, "seed of the sampled rollouts")
    rep.add_argument("--out", required=True, metavar="FILE.html", help="the page to write")
    rep.add_argument("--quiet", action="store_true", help="no progress bar")
    add_split_options(rep)
    add_force(rep)
    add_workers(rep)
    rep.set_defaults(run=cmd_report)
