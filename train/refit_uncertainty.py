"""Redo a trained model's uncertainty fit (state noise, its factor, spread) with current code.

``residualsim train`` fits the uncertainty after training (``fit_uncertainty``), and the
policy does not depend on that fit; so a model trained before the state noise could be
estimated for its object (train/README.md §19: any free object, from the engine's
free-flight fit) gets what ``train`` would now give by refitting only that step, exactly as
``run_training`` calls it: state noise on the whole training split, spread on validation,
the model's training seed, the default hash split (a model trained with
--split-fractions or --split-ids is not handled). The new model goes to OUT (a new directory).

Run from the folder the model's scene path is relative to::

    python train/refit_uncertainty.py MODEL OUT --scene urdf/user.toml --data tosses --workers 2
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from residualsim.errors import run_script


def main() -> None:
    from residualsim.data import load_trajectories
    from residualsim.data.splits import split_recordings
    from residualsim.residual.model import ResidualModel
    from residualsim.residual.spread import fit_spread
    from residualsim.residual.uncertainty_fit import fit_uncertainty
    from residualsim.sim.recordings import prepare_recordings

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="trained model directory (read only)")
    parser.add_argument("out", help="model directory to write")
    parser.add_argument("--scene", required=True, help="the scene the model was trained on")
    parser.add_argument("--data", required=True, help="the recordings it was trained on")
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    model = ResidualModel.load(args.model)
    info = {k: v for k, v in model.info.items() if k != "uncertainty_fit"}
    model = dataclasses.replace(model, spread=1.0, state_noise=None, info=info)
    trajectories = prepare_recordings(args.scene, load_trajectories(
        Path(args.data), rate_hz=1.0 / model.dt_s))
    parts = split_recordings(list(trajectories), None, None)
    start = time.perf_counter()
    fitted, record = fit_uncertainty(
        model, {k: trajectories[k] for k in parts["train"]},
        {k: trajectories[k] for k in parts["validation"]}, fit_spread,
        seed=int(model.info.get("config", {}).get("seed", 0)), n_workers=args.workers)
    fitted.save(args.out)
    print(json.dumps({"seconds": time.perf_counter() - start,
                      **{k: v for k, v in record.items()
                         if k not in ("rows", "state_noise_rows")}}))


if __name__ == "__main__":
    run_script(main)
