"""How low can a spread take the energy score when the mean cannot move? (issue 47's bars)

For a model and a split, the final position's energy score (ES) of:

(a) the deterministic mean prediction μ_i (ES = |y_i − μ_i|);
(b) state noise only and (c) the model as sampled (S samples, as ``uncertainty``);
(H) a *hindsight* spread: the mean μ_i plus the errors e_j = y_j − μ_j of every OTHER
    recording of the same split (leave one out). It is fitted on the scored recordings
    themselves, so no predictor with the same mean and a toss-independent spread can
    expect to beat it by much (an empirical-Bayes floor, not a bound);
(Hs) the same errors rescaled toss by toss with (c)'s own spread: μ_i + s_i e_j / s_j, s
    the RMS distance of (c)'s samples from their mean: what (c)'s heteroscedastic spread
    would give with the ideal shape.

For a Gaussian error with the right covariance, ES / |error| is 1/√2 = 0.707 in
expectation whatever the covariance, so (c)/(a) ≤ 0.65 needs more than a well-sized spread
around the engine's mean: a better mean, or a shape the errors have and a Gaussian lacks.
Also printed: the Spearman correlation between |e_i| and s_i (does (c)'s spread know which
tosses will miss?).

    python train/spread_floor.py --model data/pretrained/cube-contactnets \\
        --splits validation test --samples 32 --workers 2 --out runs/spread-floor.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from residualsim.atomic import atomic_write_text
from residualsim.errors import run_script


def _final_positions(predictions, ids: list[str]) -> np.ndarray:
    """(B, S, 3) final positions in metres, world frame."""
    return np.stack([predictions[i].position[:, -1, :] for i in ids])


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    rank = lambda v: np.argsort(np.argsort(v)).astype(float)  # noqa: E731
    return float(np.corrcoef(rank(x), rank(y))[0, 1])


def floors(mean: np.ndarray, noise: np.ndarray, full: np.ndarray, truth: np.ndarray,
           dims: slice) -> dict:
    """ES of (a), (b), (c), (H), (Hs) over the coordinates ``dims`` (metres)."""
    from residualsim.evaluation.sample_scores import energy_score

    mean, noise, full, truth = (a[..., dims] for a in (mean, noise, full, truth))
    errors = truth - mean                                            # (B, D)
    n = len(truth)
    centre = full.mean(axis=1)
    spread = np.sqrt(((full - centre[:, None, :]) ** 2).sum(-1).mean(1))   # (B,)
    others = [np.delete(np.arange(n), i) for i in range(n)]
    hindsight = np.stack([mean[i] + errors[others[i]] for i in range(n)])
    scaled = np.stack([mean[i] + spread[i] * errors[others[i]] / spread[others[i], None]
                       for i in range(n)])
    scores = {"a_deterministic": float(np.linalg.norm(errors, axis=1).mean()),
              "b_state_noise": float(energy_score(noise, truth).mean()),
              "c_model": float(energy_score(full, truth).mean()),
              "H_hindsight": float(energy_score(hindsight, truth).mean()),
              "Hs_hindsight_model_scale": float(energy_score(scaled, truth).mean())}
    # If the recordings were drawn from the ensemble itself, ES / |y - mu| would be
    # 0.5 E|X - X'| / E|X - mu| in expectation (0.707 for any Gaussian centred on mu).
    if_true = {}
    for key, ensemble in (("b", noise), ("c", full)):
        pair = np.linalg.norm(ensemble[:, :, None] - ensemble[:, None], axis=-1).mean((1, 2))
        away = np.linalg.norm(ensemble - mean[:, None], axis=-1).mean(1)
        if_true[f"{key}_if_true_over_a"] = float(0.5 * pair.mean() / away.mean())
    a = scores["a_deterministic"]
    return {**scores, **{f"{k}_over_a": v / a for k, v in scores.items()},
            "c_over_b": scores["c_model"] / scores["b_state_noise"],
            "H_over_b": scores["H_hindsight"] / scores["b_state_noise"],
            **if_true, "spearman_error_vs_spread": _spearman(np.linalg.norm(errors, axis=1), spread)}


def hindsight_gaussian_floor(dim: int, draws: int = 400_000, seed: int = 0) -> float:
    """min over t of ES(N(0, t² I), u) for a unit vector u: the ratio ES / |y − μ| of an
    isotropic Gaussian on μ whose scale is chosen knowing the realised miss |y − μ| (scale
    invariance makes it the same for every miss). Monte Carlo, t on a 0.01 grid."""
    rng = np.random.default_rng(seed)
    z, z2 = rng.standard_normal((2, draws, dim))
    pair = np.linalg.norm(z - z2, axis=1).mean()
    unit = np.eye(dim)[0]
    return float(min(np.linalg.norm(t * z - unit, axis=1).mean() - 0.5 * t * pair
                     for t in np.arange(0.02, 1.5, 0.01)))


def measure(model_dir: str, split: str, samples: int, seed: int, workers: int) -> dict:
    from residualsim.data.datasets import resolve_data
    from residualsim.data.splits import recording_selector
    from residualsim.experiments.uncertainty import state_noise_policy
    from residualsim.residual.model import ResidualModel
    from residualsim.sim.recordings import load_recordings
    from residualsim.sim.rollout import predict_trajectories

    model = ResidualModel.load(model_dir)
    path = resolve_data(None, model.scene)
    trajs = load_recordings(path, model.scene, 1.0 / model.dt_s, model.params,
                            select=recording_selector(split, None, source=str(path)))
    ids = sorted(trajs)
    runs = {}
    for name, n, policy in (("mean", 0, None), ("noise", samples, state_noise_policy(model)),
                            ("full", samples, None)):
        predictions, _ = predict_trajectories(model, trajs, samples=n, seed=seed,
                                              n_workers=workers, policy=policy)
        runs[name] = _final_positions(predictions, ids)
    truth = np.stack([trajs[i].positions_m[-1] for i in ids])
    return {"split": split, "count": len(ids), "samples": samples, "seed": seed,
            "final_3d": floors(runs["mean"][:, 0], runs["noise"], runs["full"], truth,
                               slice(0, 3)),
            "final_xy": floors(runs["mean"][:, 0], runs["noise"], runs["full"], truth,
                               slice(0, 2))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--splits", nargs="+", default=["validation", "test"])
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    print("isotropic Gaussian on the mean, scale known from the miss: ES / |miss| = " + ", ".join(
        f"{hindsight_gaussian_floor(d):.3f} ({d}-D)" for d in (1, 2, 3, 12)))
    results = [measure(args.model, s, args.samples, args.seed, args.workers)
               for s in args.splits]
    atomic_write_text(args.out, json.dumps(results, indent=1))
    for r in results:
        for kind in ("final_3d", "final_xy"):
            f = r[kind]
            print(f"{r['split']:10s} {kind}: a {f['a_deterministic']:.4f} b "
                  f"{f['b_state_noise']:.4f} c {f['c_model']:.4f} H {f['H_hindsight']:.4f} "
                  f"Hs {f['Hs_hindsight_model_scale']:.4f} | c/a {f['c_model_over_a']:.3f} "
                  f"H/a {f['H_hindsight_over_a']:.3f} Hs/a "
                  f"{f['Hs_hindsight_model_scale_over_a']:.3f} c/b {f['c_over_b']:.3f} "
                  f"H/b {f['H_over_b']:.3f} if-true b {f['b_if_true_over_a']:.3f} c "
                  f"{f['c_if_true_over_a']:.3f} rho {f['spearman_error_vs_spread']:.2f}")


if __name__ == "__main__":
    run_script(main)
