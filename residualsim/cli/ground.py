"""``residualsim fit-ground``: a model's table height and the recordings' pose noise."""

from __future__ import annotations

import argparse

from residualsim.atomic import check_output
from residualsim.cli.options import add_allow_implausible, add_workers, json_line
from residualsim.errors import ParameterError


def cmd_fit_ground(args: argparse.Namespace) -> None:
    """Set a model's table height and pose noise from its training split's rest phases."""
    from residualsim.experiments.jobs import fit_ground_job

    if (args.out is None) == (not args.in_place):
        raise ParameterError("fit-ground writes a model directory: give --out DIR, or "
                             "--in-place to rewrite --model itself (not both)")
    if args.out is not None:
        check_output(args.out, kind="dir", command="fit-ground", resume=True)
    json_line({"command": "fit-ground", **fit_ground_job(args.model, args.data, out=args.out,
                                                         n_workers=args.workers)})


def register(commands) -> None:
    """Add ``fit-ground`` to the ``residualsim`` sub-parsers."""
    fg = commands.add_parser(
        "fit-ground", help="set a model's table height and the recordings' pose noise from "
        "the rest phases of its training split")
    fg.add_argument("--model", required=True, help="model directory to start from")
    fg.add_argument("--out", help="new model directory to write (default: none; give --out "
                    "or --in-place)")
    fg.add_argument("--in-place", action="store_true", help="rewrite --model itself")
    fg.add_argument("--data", help="recordings, some of whose training split end at rest on "
                    "the table (last 0.07 s within 2 mm; refused otherwise, naming the folder) "
                    "(default $RESIDUALSIM_DATA/<scene's set>)")
    add_allow_implausible(fg)
    add_workers(fg)
    fg.set_defaults(run=cmd_fit_ground)
