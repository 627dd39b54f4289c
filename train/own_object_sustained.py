"""The residual through sustained contact on an articulated object whose true contact the
engine cannot represent (issue 35): synthetic hinge tosses with speed-dependent friction.

The truth: ``assets/examples/hinge.urdf`` (two boxes, one revolute joint) with restitution
0.4 and a friction coefficient that falls with the sliding speed v_t (m/s) of its contact,

    μ(v_t) = 0.2 + 0.4 exp(−v_t / 0.1),

(static-like 0.6 when barely sliding, 0.2 when fast; set after every step that ends in
contact, from that step's contact velocity), where the engine has one constant μ. Tosses:
100 Hz, 70 samples, 0.5 mm / 0.5 deg pose noise, CSV with velocities. Stages (each skipped
when its output exists, so a rerun resumes):

1. ``calibration``: ``calibrate --params contact --method lsq`` (the body is the true one:
   only the contact differs);
2. ``event``: ``train`` (the event residual);
3. ``sustained``: ``train --sustained`` (the event residual and the sustained-contact part,
   jointly), same budget;
4. mean predictions of the validation and test splits: mean base position error (m) and
   rotation error (deg) of the calibrated engine, the event residual and the sustained one.

Run from the repository root::

    python train/own_object_sustained.py --out runs/own-object-sustained [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from residualsim.atomic import atomic_write_text
from residualsim.errors import run_script

ROOT = Path(__file__).resolve().parents[1]
SCENE = ROOT / "assets" / "examples" / "hinge.toml"
TRUTH = {"lateral_friction": 0.2, "restitution": 0.4}
STATIC_FRICTION, SLIP_SPEED_MPS = 0.6, 0.1


class SpeedDependentFriction:
    """The true contact: μ(v_t) set on the contact links after every step in contact (the
    :class:`~residualsim.residual.coefficients.CoefficientResidual` interface)."""

    def apply(self, engine, features: np.ndarray) -> None:
        import pybullet as pb

        slip = float(np.linalg.norm(features[7:9]))  # v_c's tangential part, m/s
        mu = TRUTH["lateral_friction"] + (STATIC_FRICTION - TRUTH["lateral_friction"]) * \
            np.exp(-slip / SLIP_SPEED_MPS)
        for link in engine.scene.contact_links():
            pb.changeDynamics(engine.scene.body, link, lateralFriction=float(mu),
                              physicsClientId=engine.client)


def synthesize(data: Path, args: argparse.Namespace) -> None:
    import dataclasses

    from residualsim.data.csv import save_csv_trajectories
    from residualsim.residual.coefficients import SustainedPolicy
    from residualsim.sim.engine import Engine
    from residualsim.sim.rollout import ContactGuard, residual_rollout
    from residualsim.sim.scenes import make_scene
    from residualsim.sim.synthesize import observed_recording, toss_states

    if data.exists():
        return
    rng = np.random.default_rng(args.seed)
    layout = make_scene(str(SCENE))
    settings = dataclasses.replace(layout.settings, dt_s=0.01)
    states = toss_states(str(SCENE), args.tosses, rng)
    truth = SustainedPolicy(SpeedDependentFriction())
    tosses = {}
    with Engine(str(SCENE), TRUTH, settings) as engine:
        for i, state in enumerate(states):
            run = residual_rollout(engine, state, args.samples - 1, truth, None, ContactGuard())
            tosses[f"synthetic-{i}"] = observed_recording(layout, f"synthetic-{i}", run.states,
                                                 settings.dt_s, 5e-4, np.deg2rad(0.5), rng)
    staging = data.with_name(data.name + ".partial")
    save_csv_trajectories(staging, tosses, with_velocities=True)
    (staging / "synthetic.json").write_text(json.dumps(
        {"truth": TRUTH, "friction": f"{TRUTH['lateral_friction']} + "
         f"{STATIC_FRICTION - TRUTH['lateral_friction']} exp(-v_t / {SLIP_SPEED_MPS})",
         "scene": str(SCENE), "noise_m": 5e-4, "noise_rad": float(np.deg2rad(0.5)),
         "seed": args.seed}, indent=1))
    staging.rename(data)


def scores(model_dir: Path, data: Path, split: str, residual: bool, workers: int) -> dict:
    """Mean base position error (m) and rotation error (deg) of mean predictions."""
    from residualsim.data.splits import split_ids
    from residualsim.residual.model import ResidualModel
    from residualsim.sim.recordings import load_recordings
    from residualsim.sim.rollout import predict_trajectories
    from residualsim.sim.rotations import geodesic_angle

    recordings = load_recordings(data, str(SCENE))
    subset = {k: recordings[k] for k in split_ids(list(recordings))[split]}
    predicted, _ = predict_trajectories(ResidualModel.load(model_dir), subset,
                                        n_workers=workers, residual=residual)
    position = [np.linalg.norm(predicted[k].position[0] - subset[k].positions_m, axis=1).mean()
                for k in subset]
    angle = [np.degrees(geodesic_angle(predicted[k].quaternion[0], subset[k].quat_wxyz)).mean()
             for k in subset]
    return {"position_m": float(np.mean(position)), "rotation_deg": float(np.mean(angle)),
            "n": len(subset)}


def main() -> None:
    from residualsim.residual.train import TrainingConfig, run_training
    from residualsim.sysid.calibrate import calibrate

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/own-object-sustained")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tosses", type=int, default=200)
    parser.add_argument("--samples", type=int, default=70, help="samples per toss (100 Hz)")
    parser.add_argument("--budget", type=int, default=144, help="train evaluations")
    parser.add_argument("--train-tosses", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = out / "tosses"
    synthesize(data, args)
    calibration = out / "calibration"
    if not (calibration / "summary.json").is_file():
        print(f"residualsim calibrate --scene {SCENE} --data {data} --params contact "
              f"--method lsq --budget 60 --max-trajectories 100 --substeps 10 "
              f"--workers {args.workers} --out {calibration}", flush=True)
        calibrate(str(SCENE), data, ["contact"], calibration, method="lsq", budget=60,
                  max_items=100, n_workers=args.workers, seed=args.seed, substeps=10,
                  resume=calibration.exists(), plots=False)
    rows = {}
    for name, sustained in (("event", False), ("sustained", True)):
        model_dir = out / name
        started = time.perf_counter()
        if not (model_dir / "model.json").is_file():
            print(f"residualsim train --scene {SCENE} --data {data} --calibration "
                  f"{calibration} --budget {args.budget} --hidden 6 --max-tosses "
                  f"{args.train_tosses} --workers {args.workers} --no-fit-uncertainty"
                  f"{' --sustained' if sustained else ''} --out {model_dir}", flush=True)
            run_training(str(SCENE), data, model_dir, calibration=calibration,
                         config=TrainingConfig(budget=args.budget, hidden=(6,),
                                               sustained=sustained),
                         max_trajectories=args.train_tosses, n_workers=args.workers,
                         resume=(model_dir / "checkpoint.npz").exists(),
                         fit_uncertainty=False)
        rows[name] = {"seconds": time.perf_counter() - started,
                      **{split: scores(model_dir, data, split, True, args.workers)
                         for split in ("validation", "test")}}
    rows["engine"] = {split: scores(out / "event", data, split, False, args.workers)
                      for split in ("validation", "test")}
    atomic_write_text(out / "summary.json", json.dumps(rows, indent=1))
    print("| model | validation position (mm) | rotation (deg) | test position (mm) | rotation |")
    print("|---|---|---|---|---|")
    for name in ("engine", "event", "sustained"):
        v, t = rows[name]["validation"], rows[name]["test"]
        print(f"| {name} | {1000 * v['position_m']:.2f} | {v['rotation_deg']:.2f} | "
              f"{1000 * t['position_m']:.2f} | {t['rotation_deg']:.2f} |")


if __name__ == "__main__":
    run_script(main)
