"""The cube figures in the metric of the published comparisons (Acosta et al., RA-L 2022).

    python train/cube_published_metric.py --data $RESIDUALSIM_DATA/contactnets-cube \\
        [--models data/pretrained/cube-contactnets data/pretrained/cube-contactnets-5substep]

Per toss the mean over its samples of ‖Δp‖ (predicted minus recorded position, world frame)
in % of the cube's width (0.1048 m), and of the geodesic rotation angle in degrees; then the
mean ± standard deviation over tosses. Deterministic (mean) predictions of each model's
engine alone and with its residual, on the validation and test splits (issue 25's targets:
≤ 12 % and ≤ 18° on test). ``--calibrations DIR...`` also scores calibrated engines alone
(the first model's settings with each calibration's parameters and substeps). With
``--predictive-mean S`` also the mean of S stochastic
samples as the point prediction (per sample time the mean position and the chordal L2 mean
orientation, scipy's ``Rotation.mean``). ``--splits validation`` leaves test unread.
Nothing is fitted here.
"""

from __future__ import annotations

import argparse
import dataclasses
import os

import numpy as np

from residualsim.data import load_trajectories
from residualsim.data.splits import split_ids
from residualsim.residual.model import ResidualModel
from residualsim.sim.rollout import predict_trajectories
from residualsim.sim.rotations import as_quat_wxyz, as_rotation, geodesic_angle
from residualsim.sysid.calibration_file import load_calibration
from residualsim.errors import run_script

WIDTH_M = 0.1048


def predictive_mean(position: np.ndarray, quat_wxyz: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(T, 3) mean position (m, world frame) and (T, 4) chordal mean orientation (w-x-y-z)
    of S samples given as (S, T, 3) and (S, T, 4)."""
    orientation = np.array([as_quat_wxyz(as_rotation(quat_wxyz[:, t]).mean(), shape=())
                            for t in range(quat_wxyz.shape[1])])
    return position.mean(axis=0), orientation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.join(os.environ.get("RESIDUALSIM_DATA", ""),
                                                       "contactnets-cube"))
    parser.add_argument("--models", nargs="+", default=["data/pretrained/cube-contactnets",
                                                        "data/pretrained/cube-contactnets-5substep"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--splits", nargs="+", choices=("validation", "test"),
                        default=["validation", "test"])
    parser.add_argument("--calibrations", nargs="+", default=[], metavar="DIR",
                        help="also score these calibrations' engines alone (the first model "
                             "with its engine parameters and substeps replaced)")
    parser.add_argument("--predictive-mean", type=int, default=0, metavar="S",
                        help="also score the mean of S samples of the model (default: no)")
    args = parser.parse_args()
    trajectories = load_trajectories(args.data)
    parts = split_ids(list(trajectories))
    print("| model | split | prediction | mean ‖Δp‖ (% of width) | rotation (deg) |")
    print("|---|---|---|---|---|")
    runs = [(path, ResidualModel.load(path), (False, True)) for path in args.models]
    for path in args.calibrations:
        calibration = load_calibration(path)
        runs.append((path, dataclasses.replace(runs[0][1], params=calibration.params,
                                               substeps=calibration.substeps), (False,)))
    for path, model, modes in runs:
        for split in args.splits:
            subset = {k: trajectories[k] for k in parts[split]}
            rows = []
            for residual in modes:
                predicted, _ = predict_trajectories(model, subset, n_workers=args.workers,
                                                    residual=residual)
                rows.append(("residual" if residual else "engine",
                             {k: (predicted[k].position[0], predicted[k].quaternion[0])
                              for k in subset}))
            if args.predictive_mean and True in modes:  # a model's residual, not a calibration
                sampled, _ = predict_trajectories(model, subset, samples=args.predictive_mean,
                                                  n_workers=args.workers)
                rows.append((f"mean of {args.predictive_mean} samples",
                             {k: predictive_mean(np.asarray(sampled[k].position, float),
                                                 np.asarray(sampled[k].quaternion, float))
                              for k in subset}))
            for label, poses in rows:
                distance = np.array([np.linalg.norm(poses[k][0] - subset[k].positions_m,
                                                    axis=1).mean() for k in subset]) / WIDTH_M * 100
                angle = np.array([np.degrees(geodesic_angle(
                    poses[k][1], subset[k].quat_wxyz)).mean() for k in subset])
                print(f"| {path} | {split} | {label} | "
                      f"{distance.mean():.1f} ± {distance.std():.1f} | {angle.mean():.1f} |")


if __name__ == "__main__":
    run_script(main)
