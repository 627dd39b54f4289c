"""Planar impacts: how much of the outcome no predictor of the pre-impact state can explain,
and how close predictors of different structure come to it.

    python train/planar_noise_floor.py --data $RESIDUALSIM_DATA/planar-impact-ellipse \\
        [--model data/pretrained/planar-ellipse] [--out runs/planar-noise-floor.json]

The Gamma test (Stefánsson, Končar and Jones, Neural Comput. Appl. 1997; also the Delta
test): for impacts i and their p-th nearest neighbours j in the pre-impact state,

    γ_p = ½ mean ‖y_i − y_j‖²,   δ_p = mean ‖x_i − x_j‖²,   p = 1 … P,

where y is the recorded post-impact velocity (dx, dy, k dθ) in m/s (world frame, the metric
of the RMSE target) and x the standardised pre-impact state. For a smooth map y = f(x) + ε,
γ_p → Var ε as δ_p → 0; the intercept of the line through (δ_p, γ_p) estimates it. Its square
root is the RMSE floor of *any* predictor of the post-velocity from the pre-impact state,
the contact residual included: with identical pre-states, outcomes still differ by that much.

The pre-impact state is (cos 2θ, sin 2θ, dx, dy, k dθ): the ellipse is the same shape after a
half turn, its resting height is fixed by θ when it touches, and x does not matter on a flat
floor. Computed on each split of the project's hash split on its own (neighbours in the same
split) and for the test impacts with their neighbours in the training split (what a learner
sees; its intercept is ½ (σ²_test + σ²_train), so σ_test follows with the training split's
σ², from neighbours denser than the test split's own).

Then three Gaussian processes (scikit-learn, constant × anisotropic RBF + white noise,
hyperparameters by marginal likelihood, 2 seeded restarts; inputs standardised on the
training split), fitted on the training impacts and scored (RMSE of (dx, dy, k dθ), m/s) on
every split, which separate the noise from the residual's structure:

* ``no engine``: the post-velocity straight from the pre-impact state;
* ``velocity residual``: v_e + GP(features) with v_e the model's calibrated engine and a
  free 3-D velocity change (not an impulse at the contact point);
* ``impulse residual``: v_e + M⁻¹Jᵀ GP(features), the GP fitted to the impulse that best
  explains y − v_e (M-weighted least squares, no friction cone), guarded like the residual
  (no energy gain, no push into the floor): the shipped residual's structure.

Nothing is chosen on test; the test column is read for the table.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from residualsim.atomic import atomic_write_text, check_output
from residualsim.data import load_impacts
from residualsim.data.splits import split_ids
from residualsim.errors import run_script
from residualsim.residual.model import ResidualModel


def pre_impact_inputs(pre_state: np.ndarray, radius_of_gyration_m: float) -> np.ndarray:
    """(N, 5) inputs (cos 2θ, sin 2θ, dx m/s, dy m/s, k dθ m/s) from (N, 6) pre-states."""
    theta = pre_state[:, 2]
    return np.column_stack([np.cos(2 * theta), np.sin(2 * theta), pre_state[:, 3],
                            pre_state[:, 4], radius_of_gyration_m * pre_state[:, 5]])


def gamma_test(x_query: np.ndarray, y_query: np.ndarray, x_ref: np.ndarray, y_ref: np.ndarray,
               neighbours: int = 10, same_set: bool = True) -> dict:
    """Gamma test of y on x: noise variance (intercept), slope and the (δ_p, γ_p) points.

    ``x_ref``/``y_ref`` are the neighbours' set; with ``same_set`` a query point is not its
    own neighbour. Inputs are standardised by the reference set.
    """
    from sklearn.neighbors import NearestNeighbors

    centre, scale = x_ref.mean(axis=0), np.maximum(x_ref.std(axis=0), 1e-12)
    ref, query = (x_ref - centre) / scale, (x_query - centre) / scale
    skip = 1 if same_set else 0
    distance, index = NearestNeighbors(n_neighbors=neighbours + skip).fit(ref).kneighbors(query)
    distance, index = distance[:, skip:], index[:, skip:]
    delta = np.mean(distance ** 2, axis=0)
    gamma = 0.5 * np.mean(np.sum((y_query[:, None, :] - y_ref[index]) ** 2, axis=-1), axis=0)
    slope, intercept = np.polyfit(delta, gamma, 1)
    return {"noise_variance": float(intercept), "slope": float(slope),
            "rmse_floor": float(np.sqrt(max(intercept, 0.0))),
            "nearest_neighbour_rmse_floor": float(np.sqrt(gamma[0])),
            "delta": delta.round(5).tolist(), "gamma": gamma.round(5).tolist()}


def gaussian_process(inputs: np.ndarray, target: np.ndarray, train: np.ndarray) -> np.ndarray:
    """Posterior mean at every row of ``inputs`` of a GP fitted on the ``train`` rows."""
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    centre, scale = inputs[train].mean(axis=0), np.maximum(inputs[train].std(axis=0), 1e-12)
    z = (inputs - centre) / scale
    kernel = ConstantKernel() * RBF(np.ones(z.shape[1])) + WhiteKernel()
    process = GaussianProcessRegressor(kernel, normalize_y=True, n_restarts_optimizer=2,
                                       random_state=0).fit(z[train], target[train])
    return process.predict(z)


def structured_predictors(impacts, model, index: dict, workers: int) -> dict:
    """RMSE (m/s) per split of the engine, the engine-free GP and the two GP residuals."""
    from residualsim.residual.impact import guarded_correction, impact_contacts, impact_rmse
    from residualsim.sim.rollout import simulate_impacts

    k = impacts.radius_of_gyration_m
    scale = np.array([1.0, 1.0, k])
    recorded = impacts.post_state[:, 3:6]
    engine = simulate_impacts("planar-ellipse", impacts, model.params, workers, model.substeps)
    contacts = impact_contacts(impacts, spin=True)
    train = index["train"]
    direct = gaussian_process(pre_impact_inputs(impacts.pre_state, k), recorded * scale, train)
    change = gaussian_process(contacts.features, (recorded - engine) * scale, train)
    impulse = gaussian_process(contacts.features, contacts.impulses_of(recorded - engine), train)
    rows = {"calibrated engine": engine,
            "GP, no engine (pre-impact state)": direct / scale,
            "engine + GP velocity residual (features)": engine + change / scale,
            "engine + GP impulse residual (features, guarded)":
                guarded_correction(contacts, engine, impulse)[0]}
    return {name: {part: impact_rmse(post[ids], recorded[ids], k) for part, ids in index.items()}
            for name, post in rows.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--neighbours", type=int, default=10)
    parser.add_argument("--model", default="data/pretrained/planar-ellipse",
                        help="its calibrated engine is the residuals' base")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if args.out:  # checked before the work: a report is rewritten on a rerun
        check_output(args.out, force=True)
    impacts = load_impacts(args.data, convention="corrected")
    k = impacts.radius_of_gyration_m
    x = pre_impact_inputs(impacts.pre_state, k)
    y = impacts.post_state[:, 3:6] * [1.0, 1.0, k]
    split = split_ids(impacts.rows.tolist())
    index = {name: np.array([i for i, r in enumerate(impacts.rows) if str(r) in set(ids)])
             for name, ids in split.items()}
    report = {"n": {name: len(ids) for name, ids in index.items()}}
    for name, ids in index.items():
        report[name] = gamma_test(x[ids], y[ids], x[ids], y[ids], args.neighbours)
    train, test = index["train"], index["test"]
    report["test with training neighbours"] = gamma_test(
        x[test], y[test], x[train], y[train], args.neighbours, same_set=False)
    # the cross intercept is ½ (σ²_test + σ²_train): the test impacts' own noise, with the
    # denser training neighbours instead of the test split's sparse ones
    report["test noise floor from the cross estimate"] = float(np.sqrt(max(
        2 * report["test with training neighbours"]["noise_variance"]
        - report["train"]["noise_variance"], 0.0)))
    report["predictors"] = structured_predictors(impacts, ResidualModel.load(args.model),
                                                 index, args.workers)
    if args.out:
        atomic_write_text(args.out, json.dumps(report, indent=1) + "\n")
    print("| predictor | train | validation | test |\n|---|---|---|---|")
    for name, row in report["predictors"].items():
        print(f"| {name} | {row['train']:.3f} | {row['validation']:.3f} | {row['test']:.3f} |")
    print("| impacts | noise floor (m/s, Gamma test) | nearest neighbour's outcome / √2 |")
    print("|---|---|---|")
    for name in (*index, "test with training neighbours"):
        row = report[name]
        print(f"| {name} | {row['rmse_floor']:.3f} | {row['nearest_neighbour_rmse_floor']:.3f} |")
    print(f"test impacts' noise floor from the cross estimate: "
          f"{report['test noise floor from the cross estimate']:.3f} m/s")
    return 0


if __name__ == "__main__":
    run_script(main)
