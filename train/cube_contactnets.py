"""Train the shipped residual model on the real ContactNets cube tosses, with its model card.

The pipeline, each stage resumable (re-run the same command after an interruption):

1. calibrate the engine on the training split at 10 substeps: friction, restitution,
   spinning and rolling friction and soft-contact stiffness and damping (nevergrad, CMA),
   unless ``--calibration`` gives an existing calibration;
2. train the residual mixture-density policy on the training split with nevergrad, early
   stopping on the validation split (``residualsim train``);
3. predict the validation and test splits with the model and with its engine alone, score
   them, and write ``MODEL_CARD.md`` and ``card.json`` into the model directory.

``--rescore`` re-scores a model whose weights are unchanged (after ``residualsim fit-ground
--in-place``) and rewrites card.json's held-out figures. The test split is used once, at the
end, for the card; nothing is tuned on it. With
``--no-test`` the run stops after scoring the validation split (``validation.json`` in the
model directory; the training checkpoint is kept), for comparing settings without reading
the test split: re-run the same command without ``--no-test`` (with ``--resume``) for the
card of the one chosen. The substep count is the calibration's (``--substeps`` runs the
calibration at that count when none is given).

    python train/cube_contactnets.py --data ../shared/data/contactnets-cube \\
        --out data/pretrained/cube-contactnets --workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

from residualsim.atomic import atomic_write_text
from residualsim.sysid.calibrate import CUBE_CALIBRATED as CALIBRATED
from residualsim.sysid.calibrate import CUBE_CALIBRATION_BOUNDS as CALIBRATION_BOUNDS
from residualsim.sysid.calibrate import calibrate
from residualsim.data import load_trajectories
from residualsim.data.splits import split_ids
from residualsim.evaluation.metrics import score_trajectories
from residualsim.residual.model import ResidualModel
from residualsim.sim.rollout import ContactGuard, predict_trajectories
from residualsim.residual.train import TrainingConfig, run_training
from residualsim.errors import run_script

SIDE_M = 0.1048


def _evaluate(model: ResidualModel, trajectories: dict, workers: int) -> dict:
    rows = {}
    for label, residual in (("residual", True), ("engine", False)):
        predictions, stats = predict_trajectories(model, trajectories, n_workers=workers,
                                                  residual=residual)
        rows[label] = {**score_trajectories(predictions, trajectories, SIDE_M).aggregate(),
                       **stats}
    engine, residual = rows["engine"]["position_rmse_m"], rows["residual"]["position_rmse_m"]
    rows["improvement"] = 1.0 - residual / engine
    return rows


def _stochastic(model: ResidualModel, trajectories: dict, workers: int, samples: int) -> dict:
    predictions, stats = predict_trajectories(model, trajectories, samples=samples, seed=0,
                                              n_workers=workers)
    return {**score_trajectories(predictions, trajectories, SIDE_M).aggregate(), **stats}


def _held_out(model: ResidualModel, trajectories: dict, data: str, workers: int,
              samples: int) -> dict:
    """card.json's ``held_out``: validation and test scored (mean, residual and engine), and
    the validation split's stochastic mode with ``samples`` per toss (seed 0)."""
    parts = split_ids(list(trajectories))
    held_out: dict = {"data": data, "stochastic_samples": samples}
    for split in ("validation", "test"):
        subset = {k: trajectories[k] for k in parts[split]}
        held_out[split] = {"n": len(subset), **_evaluate(model, subset, workers)}
    validation = {k: trajectories[k] for k in parts["validation"]}
    held_out["stochastic_validation"] = _stochastic(model, validation, workers, samples)
    return held_out


def rescore(out: Path, data: Path, workers: int) -> dict:
    """Re-score a shipped model whose weights are unchanged (after ``residualsim fit-ground
    --in-place``, say): card.json's ``held_out`` recomputed, its figures and the held-out
    data's name kept; MODEL_CARD.md is left for a hand edit. Returns the new ``held_out``."""
    card = json.loads((out / "card.json").read_text())
    old = card["held_out"]
    held_out = _held_out(ResidualModel.load(out), load_trajectories(data), old["data"],
                         workers, old["stochastic_samples"])
    held_out["evaluation_seconds"] = old.get("evaluation_seconds")
    atomic_write_text(out / "card.json", json.dumps({**card, "held_out": held_out},
                                                    indent=2))
    return held_out


def _card(out: Path, command: str, calibration: Path, calibration_summary: dict,
          figures: dict, held_out: dict, config: TrainingConfig, name: str) -> str:
    val, test = held_out["validation"], held_out["test"]

    def row(name: str, split: dict) -> str:
        r, e = split["residual"], split["engine"]
        return (f"| {name} | {split['n']} | {e['position_rmse_m']:.4f} "
                f"({e['position_rmse_sides']:.3f}) | {r['position_rmse_m']:.4f} "
                f"({r['position_rmse_sides']:.3f}) | {100 * split['improvement']:.1f} % | "
                f"{e['rotation_error_deg']:.1f} | {r['rotation_error_deg']:.1f} |")

    params = ", ".join(f"{k} = {v:.4g}" if isinstance(v, float) else f"{k} = {v}"
                       for k, v in calibration_summary["params"].items())
    stochastic = held_out.get("stochastic_validation", {})
    target = "mean prediction" if config.samples == 0 else f"{config.samples} samples"
    tolerance = config.guard.penetration_tolerance_m
    weight = "" if config.rotation_weight == 1 else f" × {config.rotation_weight:g}"
    return f"""# Model card: {name} residual contact model

**What**: a residual mixture-density contact model (residualsim {figures.get('version', '')})
for a 0.1048 m cube tossed onto a table, on top of PyBullet calibrated on the same data.
At each contact event it adds a corrective impulse, drawn from a {config.n_components}-component
Gaussian mixture over the contact-frame impulse, conditioned on the effective contact
inertia M_c and the contact-point velocity v_c (9 numbers). {figures['n_parameters']} weights.

**Data**: ContactNets cube tosses (real, 148 Hz, Pfrommer et al.), read from
`{held_out['data']}`; never stored in this repository.
Split: residualsim's hash split (seed 0): {figures['n_train']} training tosses,
{val['n']} validation tosses (early stopping), {test['n']} test tosses (used once, for this card).

**Engine**: PyBullet 3.2.7, {calibration_summary['settings']['substeps']} substeps per
sample, parameters fitted on the training split by `residualsim calibrate --method nevergrad`
({calibration}): {params}.

**Training**: nevergrad {config.optimizer}, budget {config.budget}, batches of
{config.batch_size}, σ = {config.sigma}, seed {config.seed}, loss = mean per-toss pose RMSE
(position and rotation × radius of gyration{weight}) of the {target}; contact guard's
penetration tolerance {1000 * tolerance:g} mm per step;
{figures['evaluations']} evaluations (best at {figures['chosen_evaluation']}), stopped early:
{figures['stopped_early']}; training {figures['seconds'] / 60:.1f} min on 2 cores
(calibration {calibration_summary.get('seconds', float('nan')) / 60:.1f} min).
`params_sha256` = `{figures['params_sha256']}`.

**Command** (from the repository root):

    {command}

## Held-out figures (mean prediction; position RMSE in m, in cube sides in brackets)

| split | tosses | engine | residual | lower by | engine rot. (deg) | residual rot. (deg) |
|---|---|---|---|---|---|---|
{row('validation', val)}
{row('test', test)}

Stochastic mode (validation, {held_out.get('stochastic_samples', 0)} samples per toss):
position RMSE {stochastic.get('position_rmse_m', float('nan')):.4f} m, energy score
{stochastic.get('energy_score_m', float('nan')):.4f} m (engine {val['engine']['energy_score_m']:.4f} m),
coverage of the final position 50 %: {stochastic.get('coverage_50', float('nan'))},
90 %: {stochastic.get('coverage_90', float('nan'))}; {stochastic.get('events', 0)} events,
{stochastic.get('energy_clamped', 0)} residuals scaled down by the energy limit,
{stochastic.get('normal_clamped', 0)} by the normal-velocity limit,
deepest penetration {1000 * stochastic.get('max_penetration_m', float('nan')):.2f} mm
(engine alone {1000 * val['engine']['max_penetration_m']:.2f} mm).

## Use

    residualsim predict --model data/pretrained/{name} --data DIR --out pred.npz
    residualsim score --pred pred.npz --data DIR

## Limits
Trained on one cube and one table surface; contact events are impacts (a new contact point
or a first touch), not sustained sliding. The mixture's spread was not fitted for coverage
(the loss is the mean prediction's error); use the stochastic mode as a plausibility
sampler, not as calibrated uncertainty.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.join(os.environ.get("RESIDUALSIM_DATA", ""),
                                                       "contactnets-cube"))
    parser.add_argument("--out", default="data/pretrained/cube-contactnets")
    parser.add_argument("--calibration", help="existing calibration (default: run one into "
                        "<out>-calibration)")
    parser.add_argument("--calibration-budget", type=int, default=300)
    parser.add_argument("--budget", type=int, default=800)
    parser.add_argument("--hidden", type=int, nargs="+", default=[16])
    parser.add_argument("--components", type=int, default=2)
    parser.add_argument("--sigma", type=float, default=0.1)
    parser.add_argument("--optimizer", default="CMA")
    parser.add_argument("--samples", type=int, default=0)
    parser.add_argument("--max-tosses", type=int,
                        help="train on the first N training tosses only (default all)")
    parser.add_argument("--patience", type=int, default=6)
    parser.add_argument("--stochastic-samples", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--substeps", type=int, help="engine substeps of the calibration run "
                        "when --calibration is not given (default 10); training always uses "
                        "the calibration's")
    parser.add_argument("--penetration-tolerance", type=float,
                        default=ContactGuard().penetration_tolerance_m,
                        help="contact guard's penetration tolerance per step, m (default "
                        "%(default)s; the shipped 10-substep model used 0)")
    parser.add_argument("--every-contact-step", action="store_true",
                        help="apply the residual after every step in contact (the paper's "
                        "Algorithm 1 as written), not only at contact events")
    parser.add_argument("--hidden-impacts", type=float, metavar="MPS",
                        help="also treat a step that ends touching nothing as an event when "
                        "the body's velocity jumped by more than MPS beyond gravity "
                        "(ContactGuard.hidden_impact_mps; default off)")
    parser.add_argument("--rotation-weight", type=float, default=1.0, metavar="W",
                        help="w multiplying r_g x angle in the loss's pose RMSE (default 1; "
                             "calibrate's --rotation-weight W weighs the squared angle, so "
                             "W = w^2)")
    parser.add_argument("--contact-mode", action="store_true",
                        help="the policy also reads the contact mode: the number of points "
                        "touching after each event's step")
    parser.add_argument("--no-test", action="store_true",
                        help="score the validation split only (validation.json), keep the "
                        "checkpoint, write no card: the test split is not read")
    parser.add_argument("--name", help="model name in the card (default: --out's last part)")
    parser.add_argument("--rescore", action="store_true",
                        help="only re-score the model in --out (weights unchanged, e.g. after "
                        "fit-ground --in-place) and rewrite card.json's held-out figures")
    args = parser.parse_args(argv)
    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    data, out = Path(args.data), Path(args.out)
    if args.rescore:
        held_out = rescore(out, data, args.workers)
        print(json.dumps({split: held_out[split]["improvement"]
                          for split in ("validation", "test")}))
        return 0

    calibration = Path(args.calibration) if args.calibration else Path(f"{out}-calibration")
    if not (calibration / "summary.json").exists():
        calibrate("cube", data, list(CALIBRATED), calibration, method="nevergrad",
                  bounds=CALIBRATION_BOUNDS, substeps=args.substeps or 10,
                  budget=args.calibration_budget,
                  n_workers=args.workers, seed=args.seed, resume=args.resume or
                  (calibration / "nevergrad-checkpoint.npz").exists(), plots=False,
                  progress=True)
    calibration_summary = json.loads((calibration / "summary.json").read_text())
    if args.substeps and args.substeps != calibration_summary["settings"]["substeps"]:
        parser.error(f"{calibration} was calibrated at "
                     f"{calibration_summary['settings']['substeps']} substeps, not {args.substeps}")

    config = TrainingConfig(budget=args.budget, samples=args.samples, hidden=tuple(args.hidden),
                            n_components=args.components, sigma=args.sigma,
                            optimizer=args.optimizer,
                            patience=args.patience, seed=args.seed,
                            contact_mode=args.contact_mode,
                            rotation_weight=args.rotation_weight,
                            guard=ContactGuard(penetration_tolerance_m=args.penetration_tolerance,
                                              every_contact_step=args.every_contact_step,
                                              hidden_impact_mps=args.hidden_impacts))
    start = time.perf_counter()
    figures = run_training("cube", data, out, calibration=calibration, config=config,
                           max_trajectories=args.max_tosses,
                           n_workers=args.workers, resume=args.resume, progress=True,
                           command=command)
    print(json.dumps(figures))

    model = ResidualModel.load(out)
    trajectories = load_trajectories(data)
    parts = split_ids(list(trajectories))
    if args.no_test:  # the test split is not read
        validation = {k: trajectories[k] for k in parts["validation"]}
        figures["n_train"] = model.info["n_train"]
        scored = {"figures": figures, "substeps": model.substeps,
                  "calibration_seconds": calibration_summary.get("seconds"),
                  "validation": {"n": len(validation),
                                 **_evaluate(model, validation, args.workers)}}
        atomic_write_text(out / "validation.json", json.dumps(scored, indent=2))
        print(json.dumps({"validation": scored["validation"]["improvement"]}))
        return 0
    held_out = _held_out(model, trajectories, str(data), args.workers,
                         args.stochastic_samples)
    held_out["evaluation_seconds"] = time.perf_counter() - start - figures["seconds"]
    figures["n_train"] = model.info["n_train"]
    from residualsim import __version__
    figures["version"] = __version__
    atomic_write_text(out / "card.json", json.dumps({"figures": figures,
                                                     "held_out": held_out}, indent=2))
    atomic_write_text(out / "MODEL_CARD.md", _card(out, command, calibration,
                                                   calibration_summary, figures, held_out,
                                                   config, args.name or out.name))
    (out / "checkpoint.npz").unlink(missing_ok=True)  # training history: not shipped
    print(json.dumps({"validation": held_out["validation"]["improvement"],
                      "test": held_out["test"]["improvement"]}))
    return 0


if __name__ == "__main__":
    run_script(main)
