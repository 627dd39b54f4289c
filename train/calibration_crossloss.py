"""The cube calibration's training loss of given parameters at a given substep count.

The loss nevergrad minimised in ``residualsim calibrate --method nevergrad`` (negative
log-likelihood per toss on the training split, the six ``CUBE_CALIBRATED`` parameters), for
the parameters of one or more calibrations, evaluated at SUBSTEPS: did a calibration's
optimiser miss a better point that another calibration found (train/README.md §17)?

    python train/calibration_crossloss.py 2 runs/cube-ng1 runs/cube-ng2 \\
        data/pretrained/cube-contactnets/calibration-summary.json

Prints one JSON line per calibration. Reads ``$RESIDUALSIM_DATA/contactnets-cube`` (or
``--data``); the validation and test splits are not read.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from residualsim.sysid.calibrate import (CUBE_CALIBRATED, CUBE_CALIBRATION_BOUNDS,
                                         DEFAULT_INITIAL_DRAWS)
from residualsim.sysid.calibration_data import load_calibration_data
from residualsim.sysid.likelihood import TrajectoryLikelihood
from residualsim.sysid.paramspace import ParamSpace
from residualsim.errors import run_script


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("substeps", type=int)
    parser.add_argument("calibrations", nargs="+",
                        help="calibration directories or summary.json files")
    parser.add_argument("--data", default=os.path.join(os.environ.get("RESIDUALSIM_DATA", ""),
                                                       "contactnets-cube"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0, help="the calibration's --seed")
    args = parser.parse_args(argv)
    space = ParamSpace(list(CUBE_CALIBRATED), bounds=CUBE_CALIBRATION_BOUNDS)
    train = load_calibration_data("cube", Path(args.data), "train", None).train
    with TrajectoryLikelihood("cube", train, args.substeps, None, args.workers,
                              initial_draws=DEFAULT_INITIAL_DRAWS, seed=args.seed) as likelihood:
        for source in args.calibrations:
            path = Path(source)
            summary = json.loads((path / "summary.json" if path.is_dir() else path).read_text())
            x = [summary["params"][name] for name in space.names]
            loss = -likelihood([space.engine_params(x)])[0] / likelihood.n_items
            print(json.dumps({"substeps": args.substeps, "calibration": source,
                              "calibrated_at": summary["settings"]["substeps"],
                              "loss": float(loss)}), flush=True)
    return 0


if __name__ == "__main__":
    run_script(main)
