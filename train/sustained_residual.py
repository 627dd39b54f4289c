"""The residual through sustained contact alone, by CMA on the published metric (issue 35).

    python train/sustained_residual.py --data $RESIDUALSIM_DATA/contactnets-cube \\
        --model data/pretrained/cube-contactnets --out runs/sustained --budget 320

Trains a :class:`~residualsim.residual.coefficients.CoefficientResidual` (multipliers on
the calibrated engine's lateral, spinning and rolling friction at every step that ends in
contact, from the contact features) on top of a model's engine and event residual, by
nevergrad CMA on the training split's full trajectories, with the published metric as the
loss: per toss the mean position error in % of ``--length-m`` (default the cube's width,
0.1048 m) plus the mean rotation error in degrees, averaged over the tosses. The search
is :func:`residualsim.sysid.optimize.minimize` (checkpointed in ``OUT/checkpoint.npz``
after every batch; ``--resume`` continues it) with ``train``'s early stopping: every
``--validate-every`` evaluations the best candidate so far is scored on the validation
split, the best of those is kept if it beats the engine (``--patience`` checks without
improvement stop the run). Prints the validation figures of the engine, the model's event
residual, the sustained residual alone and both together. The test split is not read.
Writes ``OUT/sustained.json`` (the network, its history) atomically.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

import numpy as np

from residualsim.atomic import atomic_write_text
from residualsim.sim.recordings import load_recordings
from residualsim.data.splits import split_ids
from residualsim.errors import DataError, run_script
from residualsim.residual.coefficients import SustainedPolicy, sustained_start
from residualsim.residual.model import ResidualModel
from residualsim.residual.train import keep_if_better
from residualsim.sysid.optimize import minimize
from residualsim.sim.pool import engine_workers
from residualsim.sim.rollout import (interleave, recording_settings, residual_rollout,
                                     trajectory_items)
from residualsim.sim.rotations import geodesic_angle

CUBE_WIDTH_M = 0.1048


@dataclasses.dataclass(frozen=True)
class _Request:
    params: object
    guard: object
    policies: tuple
    split: str | None
    length_m: float = CUBE_WIDTH_M


def _scores(engine, item, request) -> np.ndarray | None:
    """(candidates, 2): mean position error (% of width) and rotation error (deg)."""
    if request.split is not None and item[1] != request.split:
        return None
    if engine.params != request.params:
        engine.set_params(request.params)
    _, _, _, state, positions, quat = item
    rows = []
    for policy in request.policies:
        run = residual_rollout(engine, state, len(positions) - 1, policy, None, request.guard)
        rows.append((np.linalg.norm(run.positions_m - positions, axis=1).mean()
                     / request.length_m * 100,
                     np.degrees(geodesic_angle(run.quat_wxyz, quat)).mean()))
    return np.array(rows)


def _evaluate(workers, model, policies, split, length_m) -> np.ndarray:
    """(candidates, 2) means over the split's tosses."""
    out = [r for r in workers.map(_scores, _Request(model.params, model.guard,
                                                    tuple(policies), split, length_m))
           if r is not None]
    return np.mean(out, axis=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.join(os.environ.get("RESIDUALSIM_DATA", ""),
                                                       "contactnets-cube"))
    parser.add_argument("--model", default="data/pretrained/cube-contactnets")
    parser.add_argument("--out", required=True)
    parser.add_argument("--budget", type=int, default=400)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=8)
    parser.add_argument("--sigma", type=float, default=0.3)
    parser.add_argument("--max-tosses", type=int, default=140)
    parser.add_argument("--validate-every", type=int, default=48)
    parser.add_argument("--patience", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--length-m", type=float, default=CUBE_WIDTH_M,
                        help="length the position error is a percentage of (m)")
    parser.add_argument("--resume", action="store_true",
                        help="continue OUT/checkpoint.npz (ends with the same result)")
    args = parser.parse_args()
    checkpoint = os.path.join(args.out, "checkpoint.npz")
    if os.path.exists(checkpoint) and not args.resume:  # before any work
        raise DataError(f"{checkpoint}: a checkpoint of an earlier run exists; pass --resume "
                        "or choose another --out")
    os.makedirs(args.out, exist_ok=True)
    model = ResidualModel.load(args.model)
    trajectories = load_recordings(args.data, model.scene)
    parts = split_ids(list(trajectories))
    train = {k: trajectories[k] for k in parts["train"][:args.max_tosses]}
    validation = {k: trajectories[k] for k in parts["validation"]}
    items = interleave(trajectory_items(model.scene, train, "train"),
                       trajectory_items(model.scene, validation, "validation",
                                        start=len(train)))
    settings = recording_settings(model.scene, trajectories, model.substeps)
    event = model.sampling_policy()
    started = time.time()
    with engine_workers(model.scene, items, args.workers, settings) as workers:
        start = sustained_start(workers, model.params, model.guard, args.hidden, args.seed)
        print(f"{len(train)} training tosses", file=sys.stderr)
        base = _evaluate(workers, model, [None, event], "validation", args.length_m)
        print(f"validation: engine {base[0][0]:.2f} % {base[0][1]:.2f} deg; event residual "
              f"{base[1][0]:.2f} % {base[1][1]:.2f} deg", file=sys.stderr)
        engine_figures = {"loss": float(base[0].sum())}

        def loss(thetas: np.ndarray) -> np.ndarray:
            policies = [SustainedPolicy(start.with_flat(theta)) for theta in thetas]
            return _evaluate(workers, model, policies, "train", args.length_m).sum(axis=1)

        def after_batch(result) -> bool:  # the best so far, checked on validation
            state = result.state
            if result.evaluations < state.get("next_check", args.validate_every):
                return False
            state["next_check"] = result.evaluations + args.validate_every
            figures = _evaluate(workers, model, [SustainedPolicy(start.with_flat(
                result.best))], "validation", args.length_m)[0]
            print(f"{result.evaluations} evaluations, {time.time() - started:.0f} s: train "
                  f"best {result.best_loss:.3f}, validation {figures[0]:.2f} % "
                  f"{figures[1]:.2f} deg", file=sys.stderr)
            return keep_if_better(state, {"loss": float(figures.sum()),
                                          "index": result.best_index}, args.patience)

        result = minimize(loss, start.get_flat(), budget=args.budget, sigma=args.sigma,
                          optimizer="CMA", batch_size=args.batch, seed=args.seed,
                          checkpoint=checkpoint,
                          resume=args.resume, after_batch=after_batch,
                          fingerprint={"model": os.path.abspath(args.model),
                                       "train": sorted(train), "hidden": args.hidden,
                                       "length_m": args.length_m,
                                       "validate_every": args.validate_every})
        chosen = result.state.get("chosen")
        best_theta = start.get_flat() if chosen is None or \
            chosen["loss"] >= engine_figures["loss"] else result.candidates[chosen["index"]]
        done = result.evaluations
        history = [[i + 1, float(v)]
                   for i, v in enumerate(np.minimum.accumulate(result.losses))]
        best = start.with_flat(best_theta)
        final = _evaluate(workers, model, [None, event, SustainedPolicy(best),
                                           SustainedPolicy(best, event)], "validation",
                          args.length_m)
        train_figures = _evaluate(workers, model, [None, SustainedPolicy(best)], "train",
                                  args.length_m)
    rows = ["engine", "event residual", "sustained", "sustained + event"]
    summary = {"validation": {r: final[i].tolist() for i, r in enumerate(rows)},
               "train": {r: train_figures[i].tolist() for i, r in enumerate(rows[::2])},
               "evaluations": done, "history": history, "seconds": time.time() - started,
               "network": best.as_json(), "command": " ".join(sys.argv),
               "train_tosses": len(train), "validation_tosses": len(validation)}
    atomic_write_text(os.path.join(args.out, "sustained.json"), json.dumps(summary, indent=1))
    print(f"| validation ({len(validation)} recordings) | position (% of {args.length_m} m) | "
          "rotation (deg) |")
    print("|---|---|---|")
    for i, r in enumerate(rows):
        print(f"| {r} | {final[i][0]:.2f} | {final[i][1]:.2f} |")


if __name__ == "__main__":
    run_script(main)
