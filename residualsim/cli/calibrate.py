"""``residualsim calibrate``: engine parameters (Metropolis-Hastings or nevergrad), or the arm +
loop's spring stiffnesses (``--scene arm-loop``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from residualsim.atomic import check_output, resume_note
from residualsim.cli.options import bounds_option, json_line, mapping_option, split_options
from residualsim.data.datasets import resolve_data
from residualsim.errors import ParameterError


def _identify_loop(args: argparse.Namespace) -> None:
    from residualsim.experiments.jobs import identify_loop

    summary = identify_loop(
        args.data, args.out, args.method, args.seed_kappa, n_workers=args.workers,
        estimate_offsets=args.estimate_offsets, samples=args.samples, burn_in=args.burn_in,
        seed=args.seed, resume=args.resume,
        progress=None if args.quiet else lambda row: print(json.dumps(row), file=sys.stderr,
                                                           flush=True))
    json_line({"command": "calibrate", "out": str(args.out),
               **{k: v for k, v in summary.items() if k != "history"}})


def _note(args: argparse.Namespace, text: str | None) -> None:
    """A line for the person watching (none for None): standard error, silenced by --quiet."""
    if text and not args.quiet:
        print(text, file=sys.stderr)


def cmd_calibrate(args: argparse.Namespace) -> None:
    from residualsim.cli.scene_option import scene_argument
    from residualsim.sysid.bodyspace import default_budget, resolve_method
    from residualsim.sysid.calibrate import calibrate
    from residualsim.sysid.calibrate_options import APPLICABLE, check_command
    from residualsim.sysid.held_out import held_out_note
    from residualsim.sysid.paramspace import calibration_run

    args.method = resolve_method(args.method, args.params.split(","))
    run = calibration_run(args.scene, args.params.split(","), args.method, args.base)
    check_output(args.out, kind="dir", command="calibrate", resume=args.resume, run=run)
    if args.resume:
        print(resume_note(args.out), file=sys.stderr)
    args.budget = args.budget or default_budget(args.method, args.params.split(","))
    check_command(args.scene, args.method, args.params.split(","), init=args.init,
                  rotation_weight=args.rotation_weight, base=args.base, noise=args.noise,
                  **{key: getattr(args, key) for key in APPLICABLE})
    if args.scene == "arm-loop":
        return _identify_loop(args)
    if args.export_urdf is not None:
        check_output(args.export_urdf, kind="file", command="calibrate", flag="--export-urdf",
                     force=args.resume, replace_hint="calibrate replaces no file: choose "
                     "another path or remove this one first")
        if not str(args.export_urdf).endswith(".urdf"):
            raise ParameterError(f"--export-urdf {args.export_urdf}: name a .urdf file")
    data = resolve_data(args.data, args.scene)
    split = split_options(args)
    initial = None
    if args.method == "mpec" or args.init == "mpec":
        from residualsim.sysid.mpec.calibration import calibrate_mpec

        mpec_out = args.out if args.method == "mpec" else Path(args.out) / "mpec-init"
        summary = calibrate_mpec(args.scene, data, args.params.split(","), mpec_out,
                                 bounds=bounds_option(args.bounds), split=args.split,
                                 max_items=args.max_trajectories, substeps=args.substeps,
                                 n_workers=args.workers, validate=args.method == "mpec",
                                 resume=args.resume)
        initial = summary["best"]
        _note(args, f"MPEC: {initial} in {summary['mpec_seconds']:.1f} s, IPOPT "
                    f"{summary['solver_status']}, complementarity violation "
                    f"{summary['complementarity_violation']:.2g}")
    if args.method != "mpec":
        summary = calibrate(
            scene_argument(args), data, args.params.split(","), args.out, method=args.method,
            samples=args.samples, burn_in=args.burn_in, chains=args.chains,
            proposal_scale=args.proposal_scale, adapt=not args.no_adapt,
            bounds=bounds_option(args.bounds), priors=mapping_option(args.prior, "--prior"),
            noise=args.noise, substeps=args.substeps, split=args.split,
            max_items=args.max_trajectories, n_workers=args.workers, seed=args.seed,
            budget=args.budget, optimizer=args.optimizer, checkpoint_every=args.checkpoint_every,
            resume=args.resume, plots=not args.no_plots, progress=not args.quiet,
            initial=initial, split_fractions=split["fractions"], split_lists=split["lists"],
            initial_draws=args.initial_draws, delayed_acceptance=args.delayed_acceptance,
            rotation_weight=args.rotation_weight, export_urdf=args.export_urdf,
            recorded_start=args.recorded_start, start_points=args.start_points,
            weighting=args.weighting, rugged_weight=args.rugged_weight,
            small_sample=args.small_sample, base=args.base, ground=not args.no_ground,
            keep_calibrated=args.keep_calibrated, covariance=args.covariance,
            guard_against=args.guard_against,
            bootstrap_replicates=args.bootstrap)
        if summary.get("ground"):
            from residualsim.sysid.ground import ground_note

            _note(args, ground_note(summary["ground"]))
    _note(args, held_out_note(summary, args.export_urdf))
    keys = ("method", "scene", "median", "q05", "q95", "rhat", "ess", "acceptance", "best",
            "loss", "params", "held_out_choice", "settings", "evaluations", "validation",
            "worker_restarts", "validation_count", "backend", "complementarity_violation",
            "solver_status", "iterations", "warnings", "ground", "seconds")
    if (summary.get("data") or {}).get("kind") == "trajectories":
        from residualsim.cli.report import report_command

        _note(args, "report: " + report_command(
            str(Path(args.out) / "report.html"), calibration=args.out, data=args.data,
            split="validation" if summary.get("validation_count") else "all"))
    json_line({"command": "calibrate", "out": str(args.out), **{k: summary[k] for k in keys
                                                                 if k in summary}})


def register(commands) -> None:
    """Add this module's commands to the ``residualsim`` sub-parsers."""
    from residualsim.cli.calibrate_args import add_calibrate_arguments

    cal = commands.add_parser(
        "calibrate", help="posterior (Metropolis-Hastings) or point estimate of engine "
        "parameters from recordings")
    add_calibrate_arguments(cal)
    cal.set_defaults(run=cmd_calibrate)
