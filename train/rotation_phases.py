"""Where the cube's rotation and position errors come from: flight, first impact, sliding, rest.

    python train/rotation_phases.py --data $RESIDUALSIM_DATA/contactnets-cube \\
        [--model data/pretrained/cube-contactnets] [--split validation] [--out FILE.json]

Predicts the split's tosses with the model's mean (residual) and its engine alone, and
splits the score's rotation error (per toss the mean over all samples of the geodesic angle
between predicted and recorded orientation, degrees; then the mean over tosses), and the
published comparisons' position error (the same mean of ‖Δp‖, world frame, in % of the
cube's width), into the recording's phases (issue 25):

* flight: the samples before the first contact (lowest corner within 5 mm of the table,
  :func:`residualsim.data.datasets.first_contact_index`);
* first impact: the ``--impact-samples`` samples from the first contact on (default 10, 68 ms);
* sliding and tumbling: from there to the start of rest;
* rest: from :func:`residualsim.data.datasets.rest_index` on (speed under 2 cm/s, spin under
  0.2 rad/s to the end).

Each phase's share is its samples' summed error over the toss's sample count, so the
shares add up to the score. It also prints the errors at the phase boundaries (end of
flight, after the first impact, at rest) and the share of the tosses that carry half of the
error, and the engine restarted from the recorded state right after the first impact
(``after_first_impact``): how much error the later phases make on their own. The
test split is not read unless asked for.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

from residualsim.atomic import atomic_write_text, check_output
from residualsim.data import load_trajectories
from residualsim.data.datasets import first_contact_index, rest_index
from residualsim.data.splits import split_ids
from residualsim.residual.model import ResidualModel
from residualsim.sim.rollout import predict_trajectories
from residualsim.sim.rotations import geodesic_angle
from residualsim.errors import run_script

PHASES = ("flight", "first impact", "sliding and tumbling", "rest")


def phase_table(predictions, trajectories: dict, impact_samples: int) -> dict:
    """Per-phase shares of the mean rotation error (deg) and of the mean position error
    (‖Δp‖ in % of the cube's width), boundary angles and distances, for one prediction set."""
    shares, boundaries, per_toss = [], [], []
    for traj_id, traj in trajectories.items():
        half_width = float(traj.metadata.get("half_width_m", 0.0524))
        angles = np.degrees(geodesic_angle(
            np.asarray(predictions[traj_id].quaternion[0], float), traj.quat_wxyz))
        distances = 100.0 / (2.0 * half_width) * np.linalg.norm(
            np.asarray(predictions[traj_id].position[0], float) - traj.positions_m, axis=1)
        first = first_contact_index(traj, half_width)
        first = traj.n_samples - 1 if first is None else first
        rest = rest_index(traj, first)
        impact_end = min(first + impact_samples, rest)
        edges = (0, first, impact_end, rest, traj.n_samples)
        shares.append([[errors[a:b].sum() / traj.n_samples for a, b in zip(edges, edges[1:])]
                       for errors in (angles, distances)])
        boundaries.append([[errors[i] for i in (first, impact_end, rest, -1)]
                           for errors in (angles, distances)])
        per_toss.append([angles.mean(), distances.mean()])
    shares, boundaries, per_toss = map(np.array, (shares, boundaries, per_toss))
    report = {}
    for k, (name, unit) in enumerate((("rotation", "deg"), ("position", "pct_width"))):
        ordered = np.sort(per_toss[:, k])[::-1]
        half = int(np.searchsorted(np.cumsum(ordered), ordered.sum() / 2)) + 1
        at = ("first contact", "after the first impact", "start of rest", "last sample")
        report.update({
            f"{name}_error_{unit}": float(per_toss[:, k].mean()),
            f"{name}_share_{unit}": dict(zip(PHASES, shares[:, k].mean(axis=0).round(3).tolist())),
            f"{name}_at_{unit}": dict(zip(at, boundaries[:, k].mean(axis=0).round(2).tolist())),
            f"{name}_at_median_{unit}": dict(zip(at, np.median(boundaries[:, k], axis=0)
                                                  .round(2).tolist())),
            f"{name}_tosses_with_half_the_error": f"{half} of {len(per_toss)}"})
    return report


def restarted_after_first_impact(model, trajectories: dict, impact_samples: int,
                                 workers: int) -> dict:
    """The engine alone restarted from the recorded state (finite-difference velocities)
    ``impact_samples`` after each toss's first contact, scored from there to the end: the
    rotation and position errors the phases after the first impact make on their own.
    Returns the mean over tosses of the mean angle (deg) and distance (% of the width) over
    those samples, and the same for the uninterrupted engine over the same samples."""
    import dataclasses

    tails = {}
    for traj_id, traj in trajectories.items():
        first = first_contact_index(traj, float(traj.metadata.get("half_width_m", 0.0524)))
        if first is None or first + impact_samples >= traj.n_samples - 2:
            continue
        cut = first + impact_samples
        tails[traj_id] = (cut, dataclasses.replace(
            traj, times_s=traj.times_s[cut:], positions_m=traj.positions_m[cut:],
            quat_wxyz=traj.quat_wxyz[cut:], linear_velocity_mps=traj.linear_velocity_mps[cut:],
            angular_velocity_world_radps=traj.angular_velocity_world_radps[cut:]))
    restarted, _ = predict_trajectories(model, {k: t for k, (_, t) in tails.items()},
                                        n_workers=workers, residual=False)
    whole, _ = predict_trajectories(model, {k: trajectories[k] for k in tails},
                                    n_workers=workers, residual=False)
    again, through = [], []
    for traj_id, (cut, tail) in tails.items():
        width = 2.0 * float(tail.metadata.get("half_width_m", 0.0524))
        for errors, prediction, start in ((again, restarted[traj_id], 0),
                                          (through, whole[traj_id], cut)):
            errors.append([
                np.degrees(geodesic_angle(np.asarray(prediction.quaternion[0][start:], float),
                                          tail.quat_wxyz)).mean(),
                100.0 / width * np.linalg.norm(np.asarray(prediction.position[0][start:], float)
                                               - tail.positions_m, axis=1).mean()])
    again, through = np.array(again), np.array(through)
    report = {"n": len(tails)}
    for k, unit in enumerate(("deg", "pct_width")):
        report.update({f"restarted_{unit}": float(again[:, k].mean()),
                       f"restarted_median_{unit}": float(np.median(again[:, k])),
                       f"uninterrupted_{unit}": float(through[:, k].mean()),
                       f"uninterrupted_median_{unit}": float(np.median(through[:, k]))})
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.join(os.environ.get("RESIDUALSIM_DATA", ""),
                                                       "contactnets-cube"))
    parser.add_argument("--model", default="data/pretrained/cube-contactnets")
    parser.add_argument("--split", default="validation", choices=("train", "validation", "test"))
    parser.add_argument("--impact-samples", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.out:  # checked before the work: a report is rewritten on a rerun
        check_output(args.out, force=True)
    model = ResidualModel.load(args.model)
    everything = load_trajectories(args.data)
    trajectories = {k: everything[k] for k in split_ids(list(everything))[args.split]}
    report = {"split": args.split, "n": len(trajectories), "model": args.model}
    for label, residual in (("engine", False), ("residual", True)):
        predictions, _ = predict_trajectories(model, trajectories, n_workers=args.workers,
                                              residual=residual)
        report[label] = phase_table(predictions, trajectories, args.impact_samples)
    report["after_first_impact"] = restarted_after_first_impact(
        model, trajectories, args.impact_samples, args.workers)
    if args.out:
        atomic_write_text(args.out, json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    run_script(main)
