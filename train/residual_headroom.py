"""How much could a residual at the first contact event help, and can the features predict it?

A diagnostic for the residual learner on recorded tosses, on top of a model's calibrated
engine and contact guard:

1. **Per-toss oracle.** For each toss, nevergrad CMA fits the one residual impulse at its
   first contact event (contact frame: normal, slip tangent, second tangent; in units of
   the model policy's impulse scale) that minimises that toss's position RMSE. The mean
   oracle RMSE is an upper bound on what any first-event residual can do; it is fitted on
   the toss itself, so it is not a prediction.
2. **Predictability.** Regressors from the first event's inputs to the oracle impulse
   (ridge, Gaussian process) are fitted on the training tosses and scored on the
   validation tosses (R² per component): a feature-conditioned policy can only learn what
   its inputs predict. Three input sets: the 9 contact features (M_c, v_c); those plus the
   spin r_g C ω (12); and the recorded initial state's estimation error, the free-flight
   fit minus the recorded first-sample velocities (:mod:`residualsim.residual.state_noise`),
   rotated into the event's contact frame (6). The last is not available to a policy (it
   uses samples after the first); it asks whether the oracle is compensating the error
   of the recorded initial state.
3. **A constant correction.** The validation RMSE when the training tosses' mean oracle
   impulse is applied at every first event (what a policy learns from uninformative
   features).

    python train/residual_headroom.py --model data/pretrained/cube-contactnets \\
        --data ../shared/data/contactnets-cube --workers 2 --out headroom.json
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np

from residualsim.atomic import atomic_write_text
from residualsim.data import load_trajectories
from residualsim.data.splits import split_ids
from residualsim.residual.model import ResidualModel
from residualsim.sim.rollout import recording_settings, residual_rollout
from residualsim.sim.scenes import make_scene
from residualsim.residual.state_noise import free_flight_velocities
from residualsim.sim.pool import engine_workers
from residualsim.errors import run_script


class FirstEventImpulse:
    """A stand-in policy: ``impulse`` (contact frame, N s) at the first event, then nothing.
    It asks for the spin features, so the rollout records all 12 inputs."""

    spin = True

    def __init__(self, impulse: np.ndarray) -> None:
        self.impulse, self.calls = np.asarray(impulse, dtype=np.float64), 0

    def mean(self, features: np.ndarray) -> np.ndarray:
        self.calls += 1
        return self.impulse if self.calls == 1 else np.zeros_like(self.impulse)


def _rollout(engine, item, impulse, guard):
    _, state, positions = item
    run = residual_rollout(engine, state, len(positions) - 1, FirstEventImpulse(impulse),
                           None, guard)
    rmse = float(np.sqrt(np.mean(np.sum((run.positions_m[1:] - positions[1:]) ** 2, axis=1))))
    return rmse, run


def oracle_one(engine, item, payload):
    """Worker function: (engine RMSE, oracle RMSE, first-event features (12) or NaN, applied
    impulse or NaN, the first event's contact frame (3, 3) or NaN) of one toss."""
    import nevergrad as ng

    params, guard, scale, budget, seed = payload
    if engine.params != params:
        engine.set_params(params)
    engine_rmse, run = _rollout(engine, item, np.zeros(3), guard)
    if run.n_events == 0:
        return (engine_rmse, engine_rmse, np.full(12, np.nan), np.full(3, np.nan),
                np.full((3, 3), np.nan))
    parametrization = ng.p.Array(init=np.zeros(3)).set_mutation(sigma=0.3)
    parametrization.random_state = np.random.RandomState(seed)
    optimizer = ng.optimizers.registry["CMA"](parametrization=parametrization, budget=budget)
    found = optimizer.minimize(lambda z: _rollout(engine, item, scale * z, guard)[0]).value
    best_rmse, best_run = _rollout(engine, item, scale * found, guard)
    if best_rmse >= engine_rmse:
        best_rmse, best_run = engine_rmse, run
    return (engine_rmse, best_rmse, best_run.features[0], best_run.impulses[0],
            best_run.frames[0])


def constant_one(engine, item, payload):
    """Worker function: RMSE of one toss with a fixed first-event impulse."""
    params, guard, impulse = payload
    if engine.params != params:
        engine.set_params(params)
    return _rollout(engine, item, impulse, guard)[0]


def state_errors(chosen: dict, frames: np.ndarray) -> np.ndarray:
    """(N, 6): free-flight fit minus recorded initial (velocity m/s, angular velocity
    rad/s), each rotated into the toss's first-event contact frame; NaN where either is
    missing."""
    out = np.full((len(chosen), 6), np.nan)
    for row, (traj, frame) in enumerate(zip(chosen.values(), frames)):
        fitted = free_flight_velocities(traj, float(traj.metadata["half_width_m"]))
        if fitted is None or not np.isfinite(frame).all():
            continue
        out[row, :3] = frame @ (fitted[0] - traj.linear_velocity_mps[0])
        out[row, 3:] = frame @ (fitted[1] - traj.angular_velocity_world_radps[0])
    return out


def _r2(predicted: np.ndarray, truth: np.ndarray, train_mean: np.ndarray) -> list[float]:
    residual = ((predicted - truth) ** 2).sum(axis=0)
    spread = ((truth - train_mean) ** 2).sum(axis=0)
    return (1.0 - residual / spread).tolist()


def main(argv: list[str] | None = None) -> dict:
    """Run the diagnostic; print and return its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="data/pretrained/cube-contactnets")
    parser.add_argument("--data", required=True, help="ContactNets tosses")
    parser.add_argument("--budget", type=int, default=60, help="CMA evaluations per toss")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="JSON file for the figures")
    args = parser.parse_args(argv)

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
    from sklearn.linear_model import Ridge
    from sklearn.preprocessing import StandardScaler

    warnings.filterwarnings("ignore", category=ConvergenceWarning)  # GP bounds on 3 targets
    started = time.perf_counter()
    model = ResidualModel.load(args.model)
    tosses = load_trajectories(args.data)
    parts = split_ids(list(tosses))
    layout = make_scene(model.scene)
    splits = {name: {k: tosses[k] for k in parts[name]} for name in ("train", "validation")}
    figures: dict = {"model": args.model, "budget_per_toss": args.budget, "seed": args.seed}
    results = {}
    for name, chosen in splits.items():
        items = [(k, layout.state_from_trajectory(t, 0), t.positions_m) for k, t in chosen.items()]
        settings = recording_settings(model.scene, chosen, model.substeps)
        with engine_workers(model.scene, items, args.workers, settings) as pool:
            rows = pool.map(oracle_one, (model.params, model.guard,
                                         model.policy.impulse_scale_ns, args.budget, args.seed))
            results[name] = {
                "engine": np.array([r[0] for r in rows]), "oracle": np.array([r[1] for r in rows]),
                "features": np.array([r[2] for r in rows]), "impulses": np.array([r[3] for r in rows]),
                "state_error": state_errors(chosen, np.array([r[4] for r in rows]))}
            if name == "validation":
                train = results["train"]
                usable = np.isfinite(train["features"]).all(axis=1)
                mean_impulse = train["impulses"][usable].mean(axis=0)
                constant = np.array(pool.map(constant_one, (model.params, model.guard,
                                                            mean_impulse)))
        figures[name] = {"n": len(items), "engine_rmse_m": float(results[name]["engine"].mean()),
                         "oracle_rmse_m": float(results[name]["oracle"].mean()),
                         "oracle_improvement": float(1 - results[name]["oracle"].mean()
                                                     / results[name]["engine"].mean())}
        print(name, json.dumps(figures[name]), flush=True)
    train, val = results["train"], results["validation"]
    inputs = {"contact_features_9": lambda r: r["features"][:, :9],
              "with_spin_12": lambda r: r["features"],
              "state_error_6": lambda r: r["state_error"]}
    figures["validation_r2"] = {}
    for name, pick in inputs.items():
        x_train, x_val = pick(train), pick(val)
        fit = np.isfinite(x_train).all(axis=1) & np.isfinite(train["impulses"]).all(axis=1)
        test = np.isfinite(x_val).all(axis=1) & np.isfinite(val["impulses"]).all(axis=1)
        scaler = StandardScaler().fit(x_train[fit])
        width = x_train.shape[1]
        regressors = {"ridge": Ridge(alpha=1.0),
                      "gaussian_process": GaussianProcessRegressor(
                          ConstantKernel() * RBF(np.ones(width)) + WhiteKernel(),
                          normalize_y=True, random_state=args.seed)}
        for label, regressor in regressors.items():
            regressor.fit(scaler.transform(x_train[fit]), train["impulses"][fit])
            predicted = regressor.predict(scaler.transform(x_val[test]))
            figures["validation_r2"][f"{name}/{label}"] = _r2(
                predicted, val["impulses"][test], mean_impulse)
            print(name, label, "R2 (normal, slip, second tangent):",
                  np.round(figures["validation_r2"][f"{name}/{label}"], 3), flush=True)
    figures["constant_impulse_ns"] = mean_impulse.tolist()
    figures["constant_validation_rmse_m"] = float(constant.mean())
    figures["seconds"] = time.perf_counter() - started
    if args.out:
        atomic_write_text(Path(args.out), json.dumps(figures, indent=2))
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    run_script(main)
