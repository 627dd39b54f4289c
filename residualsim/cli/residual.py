"""``residualsim train`` and ``predict``: the residual model's life cycle (``fit-spread``:
:mod:`residualsim.cli.spread`)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from residualsim.atomic import check_output, make_parent
from residualsim.cli.argtypes import batch_size
from residualsim.cli.options import (add_allow_implausible, add_force, add_max_minutes,
                                     add_scene, add_seed, add_selection, add_split_options,
                                     add_workers, count, json_line, split_options)
from residualsim.cli.scene_option import scene_argument
from residualsim.data.datasets import resolve_data


def cmd_train(args: argparse.Namespace) -> None:
    from residualsim.sim.rollout import ContactGuard
    from residualsim.residual.train import TrainingConfig, run_training

    check_output(args.out, kind="dir", command="train", resume=args.resume)
    config = TrainingConfig(
        budget=args.budget, samples=args.samples, hidden=tuple(args.hidden),
        n_components=args.components, sigma=args.sigma, optimizer=args.optimizer,
        batch_size=args.batch_size, rotation_weight=args.rotation_weight,
        validate_every=args.validate_every, patience=args.patience, seed=args.seed,
        guard=ContactGuard(), contact_mode=args.contact_mode, sustained=args.sustained,
        objective=args.objective, energy_params=args.energy_params)
    figures = run_training(scene_argument(args), resolve_data(args.data, args.scene), args.out,
                           calibration=args.calibration, substeps=args.substeps,
                           max_trajectories=args.max_tosses, config=config,
                           n_workers=args.workers, resume=args.resume,
                           checkpoint_every=args.checkpoint_every, progress=not args.quiet,
                           command=" ".join(["residualsim", *sys.argv[1:]]),
                           fit_uncertainty=not args.no_fit_uncertainty,
                           observation_noise=args.observation_noise, init=args.init,
                           **_split(args))
    if not args.quiet:
        print(f"validation position RMSE: residual {figures['validation_rmse_m']:.4g} m, "
              f"engine {figures['engine_validation_rmse_m']:.4g} m "
              f"({100 * figures['improvement']:.1f} % lower); rotation "
              f"{figures['validation_rotation_deg']:.1f} deg vs "
              f"{figures['engine_validation_rotation_deg']:.1f} deg", file=sys.stderr)
        if "spread" in figures:
            factor = figures.get("state_noise_factor")
            noise = "not available" if factor is None else f"fitted (x {factor:g})"
            print(f"uncertainty fitted on validation: spread {figures['spread']:g}, state "
                  f"noise {noise}; "
                  f"final x-y in the 50 / 90 % sample regions "
                  f"{100 * figures['validation_coverage_xy_50']:.0f} / "
                  f"{100 * figures['validation_coverage_xy_90']:.0f} %", file=sys.stderr)
        if figures.get("objective") == "energy":
            print(f"validation energy score {figures['validation_energy_score_m']:.4g} m "
                  f"(engine with state noise {figures['engine_validation_energy_score_m']:.4g}"
                  f" m); final x-y in the 50 / 90 % regions "
                  f"{100 * figures['validation_coverage_xy_50']:.0f} / "
                  f"{100 * figures['validation_coverage_xy_90']:.0f} %", file=sys.stderr)
        from residualsim.cli.report import report_command

        print("report: " + report_command(str(Path(args.out) / "report.html"), model=args.out,
                                          data=args.data), file=sys.stderr)
    json_line({"command": "train", "out": str(args.out), **figures})


def _split(args: argparse.Namespace) -> dict:
    options = split_options(args)
    return {"fractions": options["fractions"], "split_lists": options["lists"]}


def cmd_predict(args: argparse.Namespace) -> None:
    from residualsim.evaluation import save_predictions
    from residualsim.experiments.jobs import predict_dataset
    from residualsim.parallel.progress import stage_line

    check_output(args.out, force=args.force)
    start = time.perf_counter()
    predictions, figures = predict_dataset(
        args.model, args.data, samples=args.samples, seed=args.seed, n_workers=args.workers,
        residual=not args.no_residual, split=args.split, limit=args.limit,
        batch_size=args.batch_size, **split_options(args), max_minutes=args.max_minutes,
        progress=lambda s: stage_line("predict", f"--samples {args.samples}: about "
                                      f"{s:.0f} s", start))
    save_predictions(make_parent(args.out), predictions)
    count_, samples = figures.pop("count"), figures.pop("samples")
    json_line({"command": "predict", "model": str(args.model), "split": args.split,
               "count": count_,
               "samples": samples, "residual": not args.no_residual, "out": str(args.out),
               **figures, "seconds": time.perf_counter() - start})


def register(commands) -> None:
    """Add this module's commands to the ``residualsim`` sub-parsers."""
    tr = commands.add_parser("train", help="train the residual contact model (nevergrad)")
    add_scene(tr)
    tr.add_argument("--data", help="recordings (default $RESIDUALSIM_DATA/<scene's set>)")
    tr.add_argument("--calibration", help="calibration directory (default: engine defaults)")
    tr.add_argument("--out", required=True, help="model directory to write")
    tr.add_argument("--budget", type=count(1), default=800,
                    help="nevergrad: training-loss evaluations")
    tr.add_argument("--max-tosses", type=count(1),
                    help="only the first N training recordings (default: all)")
    tr.add_argument("--objective", choices=("mean", "energy"), default="mean",
                    help="loss: the mean's pose RMSE, or the energy score of sampled "
                         "trajectories (train/README §25)")
    tr.add_argument("--energy-params", choices=("all", "spread"), default="all",
                    help="what --objective energy trains besides the start's width: all "
                         "the network's weights (default), or spread: only the mixture's "
                         "scales and weights (the last layer's rows), means held at the "
                         "start's")
    tr.add_argument("--init", metavar="MODEL", help="start from this model's network (its "
                    "spread folded into the scales) and contact guard instead of a fresh "
                    "network and the default guard (default: fresh)")
    tr.add_argument("--samples", type=count(0), default=0, help="samples per recording "
                    "in the loss (0: the mean; energy: even >= 4, 0 meaning 8)")
    tr.add_argument("--hidden", type=count(1), nargs="+", default=[16],
                    help="hidden layer widths (default 16)")
    tr.add_argument("--components", type=count(1), default=2,
                    help="Gaussian components of the mixture-density network")
    tr.add_argument("--sigma", type=float, default=0.1,
                    help="initial mutation scale on the network weights θ (unitless)")
    tr.add_argument("--optimizer", default="CMA", help="nevergrad optimizer (default CMA)")
    tr.add_argument("--batch-size", type=count(1), default=8,
                    help="candidates evaluated together")
    tr.add_argument("--rotation-weight", type=float, default=1.0,
                    help="weight of the rotation error (x radius of gyration) in the loss")
    tr.add_argument("--contact-mode", action="store_true",
                    help="the policy also reads the number of points touching at each event")
    tr.add_argument("--sustained", action="store_true", help="also learn friction "
                    "coefficients at every contact step (train/README §19.2)")
    tr.add_argument("--validate-every", type=count(1), default=48,
                    help="evaluations between validation checks")
    tr.add_argument("--patience", type=count(1), default=6,
                    help="validation checks without improvement before stopping")
    tr.add_argument("--substeps", type=count(1),
                    help="engine substeps (default: the calibration's, else the scene's)")
    add_seed(tr)
    tr.add_argument("--checkpoint-every", type=count(1), help="evaluations per checkpoint "
                    "(default: each batch)")
    tr.add_argument("--resume", action="store_true", help="continue the checkpoint in --out "
                    "(CMA: --budget may grow, or equal what it holds to end there)")
    tr.add_argument("--observation-noise", action="store_true",
                    help="set the table height and the recordings' pose noise from the "
                         "training split's rest phases (as fit-ground does; after training, "
                         "or before it with --objective energy; default: off)")
    tr.add_argument("--no-fit-uncertainty", action="store_true",
                    help="skip what train does after training by default: estimate the "
                         "initial-state noise from the training split's free flights (a "
                         "cube's in closed form; any other free object's, joint velocities "
                         "included, by the calibrated engine's rollout fit of each initial "
                         "state), then choose on the validation split (32 samples, the "
                         "reliability criterion of fit-spread) a factor on that noise "
                         "(0.25, 0.5, 1, 2) and then the sampling spread; the model card "
                         "records all three")
    tr.add_argument("--quiet", action="store_true", help="no progress bar")
    add_split_options(tr)
    add_allow_implausible(tr)
    add_workers(tr)
    tr.set_defaults(run=cmd_train)

    pr = commands.add_parser("predict", help="predict recordings with a trained model")
    pr.add_argument("--model", required=True, help="model directory (residualsim train)")
    pr.add_argument("--data", help="recordings (default $RESIDUALSIM_DATA/<scene's set>)")
    pr.add_argument("--out", required=True, help="prediction file to write (.npz)")
    pr.add_argument("--samples", type=count(0), default=0,
                    help="stochastic samples per recording (default 0: the mean prediction; "
                    "refused when their predictions exceed the memory left, or their time, "
                    "estimated from 2 samples of each recording, --max-minutes)")
    add_max_minutes(pr, "--samples")
    add_seed(pr, "seed of the sampled rollouts")
    pr.add_argument("--batch-size", type=batch_size, default=1,
                    help="copies of the body a worker steps in one PyBullet world for a "
                    "recording's --samples (cube scenes; the same predictions bit for bit): "
                    "an integer or auto (default 1: one rollout at a time)")
    pr.add_argument("--no-residual", action="store_true",
                    help="the model's calibrated engine alone")
    add_selection(pr)
    add_force(pr)
    add_allow_implausible(pr)
    add_workers(pr)
    pr.set_defaults(run=cmd_predict)
