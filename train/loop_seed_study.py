"""How often do plain gradient descent and the homotopy method reach the global minimum?

Generates the same-model arm-loop recording (12-link loop, sensor noise, seed 0), then for
20 seeds of κ drawn log-uniformly over two orders of magnitude ([0.15, 15] N m/rad per
component, seeded) runs the gradient and the homotopy identification, and appends one JSON
line per (seed, method) to ``--out`` (resumable: finished lines are kept and skipped).
"Reached" = both components within 1 % of the truth.

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
from residualsim.identify import identify_stiffness
from residualsim.synthesize import synthesize_arm_loop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--methods", default="homotopy,gradient")
    parser.add_argument("--max-rollouts", type=int, default=120)
    args = parser.parse_args()
    out = Path(args.out)
    done = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    finished = {(row["seed_index"], row["method"]) for row in done}
    seeds = np.exp(np.random.default_rng(2026).uniform(np.log(0.15), np.log(15.0),
                                                       (args.seeds, 2)))
    with tempfile.TemporaryDirectory() as scratch:
        recording = load_joint_recording(synthesize_arm_loop(scratch, n_links=12, substeps=5))
    truth = np.array(recording.metadata["kappa_truth_12"])
    for index, seed in enumerate(seeds):
        for method in args.methods.split(","):
            if (index, method) in finished:
                continue
            result = identify_stiffness(recording, method, seed, n_workers=args.workers,
                                        max_rollouts=args.max_rollouts)
            error = (result.kappa - truth) / truth
            row = {"seed_index": index, "seed_kappa": seed.tolist(), **result.as_json(),
                   "rel_error": error.tolist(), "reached": bool(np.abs(error).max() < 0.01)}
            done.append(row)
            atomic_write_text(out, "".join(json.dumps(r) + "\n" for r in done))
            print(json.dumps(row), flush=True)
    for method in args.methods.split(","):
        rows = [r for r in done if r["method"] == method]
        print(f"{method}: reached the global minimum from {sum(r['reached'] for r in rows)} "
              f"of {len(rows)} seeds; median rollouts {np.median([r['rollouts'] for r in rows])}")


if __name__ == "__main__":
    main()
