"""Synthetic tosses of an object (a scene file) whose truth includes body and joint
parameters, written as check-calibration writes its data sets: CSV poses with the
simulated velocities (issue 50's 170-toss check on the two-link hinge, train/README.md
§20.6). ``data synthesize --params`` takes engine parameters only.

    python train/object_truth_set.py --scene assets/examples/hinge.toml \
        --truth lateral_friction=0.3,restitution=0.4,body.arm.mass_ratio=0.6,joint.elbow.damping=0.004 \
        --count 170 --samples 60 --substeps 5 --noise-m 0.002 --seed 0 --out runs/hinge170
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from residualsim.data.csv import save_csv_trajectories
from residualsim.sim.synthesize import synthesize_tosses
from residualsim.sysid.paramspace import ParamSpace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scene", required=True)
    parser.add_argument("--truth", required=True, help="name=value,... natural units")
    parser.add_argument("--count", type=int, default=170)
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--substeps", type=int)
    parser.add_argument("--noise-m", type=float, default=0.002)
    parser.add_argument("--noise-rad", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    truth = {k: float(v) for k, v in (pair.split("=") for pair in args.truth.split(","))}
    out = Path(args.out)
    if out.exists():
        parser.error(f"{out} exists")
    space = ParamSpace(list(truth), scene=args.scene)
    params = space.engine_params(np.array(list(truth.values())))
    tosses = synthesize_tosses(params, n_tosses=args.count, n_samples=args.samples,
                               noise_m=args.noise_m, noise_rad=args.noise_rad,
                               rng=args.seed, substeps=args.substeps, scene=args.scene,
                               n_workers=args.workers)
    save_csv_trajectories(out / "recordings", tosses, with_velocities=True)
    (out / "truth.json").write_text(json.dumps({**vars(args), "truth": truth}, indent=1))
    print(json.dumps({"out": str(out), "count": len(tosses), "truth": truth}))


if __name__ == "__main__":
    main()
