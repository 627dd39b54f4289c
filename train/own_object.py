"""Worked example: your own object, from a URDF and CSV poses to a posterior, a residual and
stochastic predictions, on objects residualsim synthesises itself (truth known).

For each object (``assets/examples/ell.toml``, a free L-shaped rigid body, and
``assets/examples/hinge.toml``, a two-box hinge with one revolute joint):

1. ``data synthesize``: tosses with known friction 0.3 and restitution 0.4, written as CSV
   poses only (no velocities), with 0.5 mm / 0.5 deg tracking noise;
2. ``calibrate`` (Metropolis-Hastings, 2 chains) on the training split: the 90 % interval
   of each parameter should hold the truth and its median lie within 10 %;
3. for the hinge, ``train`` a small residual and ``predict`` stochastic samples of the
   validation tosses (every contact event's features are the paper's 9 numbers).

Run from the repository root (about 25 minutes on 2 idle cores; calibration averages each
pose-only recording over 4 initial-state draws, see train/README.md §14)::

    python train/own_object.py --out runs/own-object [--workers 2]

The figures land in ``<out>/summary.json`` and are quoted in ``train/README.md``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from residualsim.errors import run_script

ROOT = Path(__file__).resolve().parents[1]
OBJECTS = {"ell": ROOT / "assets" / "examples" / "ell.toml",
           "hinge": ROOT / "assets" / "examples" / "hinge.toml"}
TRUTH = {"lateral_friction": 0.3, "restitution": 0.4}


def run_object(name: str, scene: Path, out: Path, args: argparse.Namespace) -> dict:
    from residualsim.experiments.jobs import synthesize_set
    from residualsim.sysid.calibrate import calibrate

    data = out / f"{name}-tosses"
    if not data.exists():
        synthesize_set(data, ",".join(f"{k}={v}" for k, v in TRUTH.items()), scene=str(scene),
                       count=args.tosses, n_samples=args.samples, noise_m=5e-4,
                       noise_rad=0.0087, seed=args.seed, n_workers=args.workers)
    start = time.perf_counter()
    summary = calibrate(str(scene), data, list(TRUTH), out / f"{name}-mh", method="mh",
                        samples=args.mh_samples, burn_in=args.mh_burn_in, chains=2,
                        substeps=10, n_workers=args.workers, seed=args.seed,
                        resume=(out / f"{name}-mh").exists(), plots=True)
    row = {"object": name, "tosses": args.tosses, "calibration_seconds":
           time.perf_counter() - start}
    for key, truth in TRUTH.items():
        median, low, high = summary["median"][key], summary["q05"][key], summary["q95"][key]
        row[key] = {"truth": truth, "median": median, "q05": low, "q95": high,
                    "holds_truth": low <= truth <= high,
                    "median_error": abs(median - truth) / truth}
    row["rhat"], row["ess"] = summary.get("rhat"), summary.get("ess")
    if name == "hinge":
        row["residual"] = residual_on(scene, data, out / f"{name}-mh", out, args)
    return row


def residual_on(scene: Path, data: Path, calibration: Path, out: Path,
                args: argparse.Namespace) -> dict:
    """Train a small residual on the calibrated engine and predict validation samples."""
    from residualsim.evaluation import score_trajectories
    from residualsim.experiments.jobs import predict_dataset
    from residualsim.residual.train import TrainingConfig, run_training

    model_dir = out / "hinge-model"
    figures = run_training(str(scene), data, model_dir, calibration=calibration,
                           config=TrainingConfig(budget=args.budget, hidden=(6,)),
                           n_workers=args.workers, resume=(model_dir / "checkpoint.npz").exists())
    predictions, stats = predict_dataset(model_dir, str(data), samples=16, seed=args.seed,
                                         n_workers=args.workers, split="validation")
    from residualsim.sim.recordings import load_recordings

    recordings = load_recordings(data, str(scene))
    score = score_trajectories(predictions, recordings).aggregate()
    return {"training": {k: figures[k] for k in ("validation_rmse_m", "engine_validation_rmse_m",
                                                 "events", "seconds")},
            "stochastic_validation": {k: score[k] for k in (
                "position_rmse_m", "rotation_error_deg", "joint_rmse", "coverage_xy_50",
                "coverage_xy_90")}, "events": stats["events"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/own-object")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tosses", type=int, default=40)
    parser.add_argument("--samples", type=int, default=70, help="samples per toss (100 Hz)")
    parser.add_argument("--mh-samples", type=int, default=600)
    parser.add_argument("--mh-burn-in", type=int, default=300)
    parser.add_argument("--budget", type=int, default=96, help="residual training evaluations")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--objects", nargs="+", default=list(OBJECTS), choices=list(OBJECTS))
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = [run_object(name, OBJECTS[name], out, args) for name in args.objects]
    (out / "summary.json").write_text(json.dumps(rows, indent=1) + "\n")
    for row in rows:
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    run_script(main)
