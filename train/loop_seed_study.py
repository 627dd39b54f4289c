"""How often do plain gradient descent and the homotopy method reach the global minimum?

Generates the same-model arm-loop recording (12-link loop, sensor noise, seed 0), finds the
global minimum κ* of its cost (least squares started at the truth), then for 20 seeds of κ
drawn log-uniformly over two orders of magnitude (the whole search box, [0.1, 10] N m/rad
per component, seeded) runs the gradient and the homotopy identification and appends one
JSON line per (seed, method) to ``--out`` (resumable: finished lines are kept and skipped).
"Reached" = both components within 1 % of κ*. (κ* itself differs from the truth by the
sensor noise's effect; its error is printed first.)

    python train/loop_seed_study.py --out runs/loop/seeds.jsonl [--seeds 20] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from residualsim.atomic import atomic_write_text
from residualsim.data.joint_recording import load_joint_recording
from residualsim.sysid.loop_stiffness import KAPPA_BOUNDS, identify_stiffness
from residualsim.sim.synthesize import synthesize_arm_loop
from residualsim.errors import run_script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--methods", default="homotopy,gradient")
    parser.add_argument("--max-rollouts", type=int, default=100,
                        help="rollout budget of the gradient method (about twice what the "
                             "homotopy method spends from [5, 5])")
    args = parser.parse_args()
    out = Path(args.out)
    done = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    seeds = np.exp(np.random.default_rng(2026).uniform(*np.log(KAPPA_BOUNDS), (args.seeds, 2)))
    with tempfile.TemporaryDirectory() as scratch:
        recording = load_joint_recording(synthesize_arm_loop(scratch, n_links=12, substeps=5))
    truth = np.array(recording.metadata["kappa_truth_12"])
    if not any(row["method"] == "reference" for row in done):
        reference = identify_stiffness(recording, "lsq", truth, n_workers=args.workers,
                                       xtol=1e-4)  # κ* tighter than the methods stop
        done.append({"seed_index": -1, "seed_kappa": truth.tolist(), **reference.as_json(),
                     "method": "reference", "rel_error": ((reference.kappa - truth) / truth)
                     .tolist()})
        atomic_write_text(out, "".join(json.dumps(r) + "\n" for r in done))
        print(json.dumps(done[-1]), flush=True)
    optimum = np.array(next(r for r in done if r["method"] == "reference")["kappa"])
    finished = {(row["seed_index"], row["method"]) for row in done}
    for method in args.methods.split(","):  # one method over all seeds, then the next
        for index, seed in enumerate(seeds):
            if (index, method) in finished:
                continue
            result = identify_stiffness(recording, method, seed, n_workers=args.workers,
                                        max_rollouts=args.max_rollouts)
            error = (result.kappa - truth) / truth
            off_optimum = np.abs(result.kappa / optimum - 1).max()
            row = {"seed_index": index, "seed_kappa": seed.tolist(), **result.as_json(),
                   "rel_error": error.tolist(), "off_optimum": float(off_optimum),
                   "reached": bool(off_optimum < 0.01)}
            done.append(row)
            atomic_write_text(out, "".join(json.dumps(r) + "\n" for r in done))
            print(json.dumps(row), flush=True)
    for method in args.methods.split(","):
        rows = [r for r in done if r["method"] == method]
        print(f"{method}: reached the global minimum from {sum(r['reached'] for r in rows)} "
              f"of {len(rows)} seeds; median rollouts {np.median([r['rollouts'] for r in rows])}")


if __name__ == "__main__":
    run_script(main)
