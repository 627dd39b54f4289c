"""``residualsim twin``: recordings (or a capture session) to a stochastic twin in one command."""

from __future__ import annotations

import argparse
import os

from residualsim.cli.options import add_seed, add_workers, json_line
from residualsim.cli.scene_option import scene_argument


#: Budgets of a smoke run (``RESIDUALSIM_TINY``: the README test).
TINY_CAPS = {"contact": 8, "body": 40, "train": 4, "fit_recordings": 3, "samples": 4}


def cmd_twin(args: argparse.Namespace) -> None:
    from residualsim.cli.data_import import link_map
    from residualsim.experiments.twin import run_twin

    tiny = os.environ.get("RESIDUALSIM_TINY", "") not in ("", "0")
    summary = run_twin(args.data, scene_argument(args), args.out, body=args.body,
                       n_workers=args.workers,
                       minutes=args.minutes, resume=args.resume, seed=args.seed,
                       links=link_map(args.link), caps=TINY_CAPS if tiny else None)
    test = summary["test"]
    json_line({"command": "twin", "out": str(args.out), "kept": summary["kept_calibration"],
               "test_recordings": test["recordings"], "errors": test["errors"],
               "energy_score_rows": test["energy_score_rows"], "verdict": summary["verdict"]})


_HELP = """\
From recordings to a stochastic twin of your object in one command, in stages (each the
stage command's own work; experts keep the stage commands):

  import   (a capture session: a .bag, a ROS 2 bag, a session .csv) as `data import`
  check    the recordings read and split 70/15/15 by a hash of each id; too few to judge
           with (validation < 3, test < 5) is refused
  contact  `calibrate --method lsq --params contact` (the ground from the rest phases, the
           held-out guard on validation)
  body     (--body) `calibrate --method lsq --params contact,body,joints`, kept only where
           it beats the contact-only fit on validation
  train    `train` from the kept calibration, state noise and spread fitted: the twin is
           the model in DIR (StochasticSimulator(DIR), Toss-v0 model=DIR, rollout and
           predict --model DIR load it)
  judge    the test split only: default engine, calibrated engine, the twin's mean; the
           energy-score decomposition and 50/90 % coverage of 32 samples
  report   DIR/report.html and the corrected URDF DIR/twin.urdf

--minutes (default 30) is shared by the stages, each stage's budget set from it by a cost
model of the data (not a clock). One line per stage on stderr; Ctrl-C or kill, then
--resume, continues from the last finished stage (a stage resumes from its own
checkpoint), with the same result. DIR/summary.json holds the figures and what each stage
was given; stdout is one JSON line.
"""


def register(commands) -> None:
    """Add this module's commands to the ``residualsim`` sub-parsers."""
    twin = commands.add_parser("twin", help="recordings or a capture session to a stochastic "
                               "twin in one command", description=_HELP)
    twin.add_argument("data", help="a recordings folder, or a capture session (.bag, ROS 2 "
                      "bag folder, .db3, .mcap, session .csv)")
    twin.add_argument("--scene", required=True, help="the object: a scene file or .urdf")
    twin.add_argument("--out", required=True, help="the twin's folder (new, or --resume)")
    twin.add_argument("--body", action="store_true",
                      help="also identify the body and joints (kept only if it wins on "
                      "validation)")
    twin.add_argument("--minutes", type=float, help="time shared by the stages (default 30)")
    twin.add_argument("--resume", action="store_true", help="continue a stopped run in --out")
    twin.add_argument("--link", action="append", metavar="LINK=TOPIC",
                      help="for a bag: a URDF link and its pose topic, as data import "
                      "(default: none, for a folder or CSV)")
    add_seed(twin)
    add_workers(twin)
    twin.set_defaults(run=cmd_twin)
