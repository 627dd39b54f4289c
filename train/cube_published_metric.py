"""The cube figures in the metric of the published comparisons (Acosta et al., RA-L 2022).

    python train/cube_published_metric.py --data $RESIDUALSIM_DATA/contactnets-cube \\
        [--models data/pretrained/cube-contactnets data/pretrained/cube-contactnets-5substep]

Per toss the mean over its samples of ‖Δp‖ (predicted minus recorded position, world frame)
in % of the cube's width (0.1048 m), and of the geodesic rotation angle in degrees; then the
mean ± standard deviation over tosses. Deterministic (mean) predictions of each model's
engine alone and with its residual, on the validation and test splits (issue 25's targets:
≤ 12 % and ≤ 18° on test). Nothing is fitted here.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from residualsim.data import load_trajectories
from residualsim.data.splits import split_ids
from residualsim.residual.policy import ResidualModel
from residualsim.sim.rollout import predict_trajectories
from residualsim.sim.rotations import geodesic_angle
from residualsim.errors import run_script

WIDTH_M = 0.1048


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.join(os.environ.get("RESIDUALSIM_DATA", ""),
                                                       "contactnets-cube"))
    parser.add_argument("--models", nargs="+", default=["data/pretrained/cube-contactnets",
                                                        "data/pretrained/cube-contactnets-5substep"])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    trajectories = load_trajectories(args.data)
    parts = split_ids(list(trajectories))
    print("| model | split | prediction | mean ‖Δp‖ (% of width) | rotation (deg) |")
    print("|---|---|---|---|---|")
    for path in args.models:
        model = ResidualModel.load(path)
        for split in ("validation", "test"):
            subset = {k: trajectories[k] for k in parts[split]}
            for residual in (False, True):
                predicted, _ = predict_trajectories(model, subset, n_workers=args.workers,
                                                    residual=residual)
                distance = np.array([np.linalg.norm(
                    predicted[k].position[0] - subset[k].positions_m, axis=1).mean()
                    for k in subset]) / WIDTH_M * 100
                angle = np.array([np.degrees(geodesic_angle(
                    predicted[k].quaternion[0], subset[k].quat_wxyz)).mean() for k in subset])
                print(f"| {path} | {split} | {'residual' if residual else 'engine'} | "
                      f"{distance.mean():.1f} ± {distance.std():.1f} | {angle.mean():.1f} |")


if __name__ == "__main__":
    run_script(main)
