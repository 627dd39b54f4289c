"""``residualsim calibrate``: engine parameters (Metropolis-Hastings or nevergrad), or the arm +
loop's spring stiffnesses (``--scene arm-loop``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from residualsim.atomic import check_output, resume_note
from residualsim.cli.options import (SCENE_HELP, add_allow_implausible, add_envelope_options,
                                     add_seed, add_split_options, add_workers, bounds_option,
                                     count, json_line, kappa_option, mapping_option,
                                     split_options)
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
    cal = commands.add_parser(
        "calibrate", help="posterior (Metropolis-Hastings) or point estimate of engine "
        "parameters from recordings")
    cal.add_argument("--scene", default="cube", help=SCENE_HELP.replace(
        " (default cube", "; or arm-loop, the arm + loop's spring stiffnesses (default cube"))
    cal.add_argument("--data", help="recordings (default $RESIDUALSIM_DATA/<scene's set>)")
    cal.add_argument("--params", default="lateral_friction,restitution",
                     help="comma-separated parameters (default lateral_friction,restitution): "
                     "names or groups: contact (frictions, restitution), soft_contact "
                     "(stiffness, damping), solver (contact_erp, solver_iterations, "
                     "friction_anchor... the scene's engine honours), and for an object from a "
                     "scene file or URDF body (per link: centre of mass, inertia; total mass "
                     "kept) and joints (damping, friction); single names body.<link>.com_x, "
                     ".moment_1, .axes_x, .mass_ratio, joint.<joint>.damping (README)")
    cal.add_argument("--base", help="values of the parameters not calibrated: name=value,..., "
                     "a JSON file or a calibration directory (default PyBullet's)")
    cal.add_argument("--export-urdf", metavar="FILE.urdf",
                     help="also write the scene's URDF with the kept values (default: none): "
                     "the best on validation of the calibrated ones, the URDF's own body with "
                     "the calibrated contact and PyBullet's defaults. A new file (--resume "
                     "rewrites its own), never the scene's own URDF")
    cal.add_argument("--out", required=True, help="output directory (summary.json, plots, "
                     "run.json: one holding another run or command is refused, --resume too)")
    cal.add_argument("--method", choices=("mh", "sandwich", "nevergrad", "mpec", "lsq",
                                          "gradient", "homotopy"),
                     help="mh (its likelihood: --weighting), sandwich (trajectories, noise "
                     "estimated: the Gaussian around the likelihood's envelope with the sandwich "
                     "covariance, ~200 evaluations), nevergrad, lsq (least squares on trajectory "
                     "error, finite differences, --budget parameter sets; body and joints in "
                     "stages) or mpec (complementarity-constrained, no simulator; fits "
                     "lateral_friction, restitution); arm-loop: lsq, gradient, homotopy or mh "
                     "(default: lsq with body or joint names, else mh; nevergrad is refused for "
                     "them; mh samples about lsq's fit). An option of another method is refused")
    cal.add_argument("--init", choices=("sobol", "mpec"), default="sobol", help="mh, sandwich "
                     "only: from the best Sobol points (default; a body: lsq's fit) or MPEC's")
    cal.add_argument("--start-points", type=count(1), default=32, help="mh --init sobol: Sobol "
                     "points per chain, one evaluation each before the first step (default 32)")
    cal.add_argument("--seed-kappa", type=kappa_option, default=(5.0, 5.0),
                     help="arm-loop: starting (kappa_theta, kappa_psi) N m/rad (default 5,5)")
    cal.add_argument("--estimate-offsets", action="store_true",
                     help="arm-loop homotopy/lsq: estimate the joint-angle sensor offsets too")
    cal.add_argument("--samples", type=count(1), default=3000, help="kept draws per chain")
    cal.add_argument("--burn-in", type=count(0), default=1000, help="steps discarded per chain")
    cal.add_argument("--chains", type=count(1), default=2, help="Metropolis-Hastings chains")
    cal.add_argument("--proposal-scale", type=float, default=0.05,
                     help="random-walk step in units of each parameter's range (default 0.05)")
    cal.add_argument("--no-adapt", action="store_true",
                     help="keep the proposal fixed during burn-in too (the paper's setting)")
    cal.add_argument("--bounds", help="name=LOW:HIGH,... search bounds, in each parameter's "
                     "unit (default: each parameter's valid range)")
    cal.add_argument("--prior", help="name=uniform|loguniform|normal:MEAN:STD,... "
                     "(default: uniform within the bounds)")
    cal.add_argument("--noise", type=float, help="observation noise (m; m/s for impacts); "
                     "default estimated")
    cal.add_argument("--substeps", type=count(1), help="substeps per sample (default: scene's)")
    cal.add_argument("--initial-draws", type=count(0), help="initial states per fitted start,"
                     " drawn from its fit's uncertainty (default 4, 0 with --covariance bootstrap)")
    cal.add_argument("--recorded-start", choices=("fit", "recorded"),
                     help="recordings with recorded velocities: fit the first pose to the "
                     "free flight (fit), or roll out from it as recorded (default: fit for lsq "
                     "and the default MH, else recorded; train/README.md section 22)")
    cal.add_argument("--weighting", choices=("recording", "calibrated", "effective"),
                     help="mh only: the likelihood it samples on trajectories, noise estimated "
                     "(default calibrated: tied to its envelope, whose covariance is the "
                     "wider of a parametric bootstrap's and the sandwich's, --covariance; passed "
                     "simulation-based calibration on 6 and 20 tosses, train/README.md 20.5; "
                     "recording with --delayed-acceptance); recording: the raw one, each "
                     "recording one observation, too wide on few tosses, too narrow on many, "
                     "for comparison; effective: too narrow")
    cal.add_argument("--rugged-weight", type=float, metavar="LAMBDA",
                     help="mh, --weighting calibrated only: share of the likelihood's "
                     "departure from its envelope kept, 0 to 1 (default 0, the envelope alone, "
                     "with the bootstrap's covariance; 0.2 with the sandwich's; 1: Chandler-Bate)")
    add_envelope_options(cal)
    cal.add_argument("--delayed-acceptance", type=float, metavar="FRACTION", help="MH: screen "
                     "each proposal on this share of the recordings first (default: off)")
    cal.add_argument("--rotation-weight", type=float, default=1.0, metavar="W", help="weight "
                     "of the squared rotation angle (x r_g^2) against position (default 1)")
    cal.add_argument("--split", choices=("train", "all"), default="train", help="recordings "
                     "to fit (default train; all: no guard unless --max-trajectories leaves some)")
    cal.add_argument("--max-trajectories", type=count(1),
                     help="fit the first N of the split (default: all), hold out the rest")
    cal.add_argument("--budget", type=count(1), help="nevergrad, lsq, or mh's and sandwich's "
                     "lsq pilot: parameter sets, each rolled out on every recording (default "
                     "200; 600 with body or joint names: body on free flight (BUDGET), contact "
                     "(at most 12 (k + 1)), the body's weak directions through the first impact)")
    cal.add_argument("--optimizer", help="nevergrad only: its optimizer (default CMA)")
    cal.add_argument("--checkpoint-every", type=count(1), help="mh, nevergrad only: MH steps "
                     "(default 50) or evaluations (default: each batch) between checkpoints")
    cal.add_argument("--no-ground", action="store_true", help="do not set table_height_m from "
                     "the rest phases after a search (set when >= 5 recordings rest)")
    cal.add_argument("--keep-calibrated", action="store_true", help="export the calibrated "
                     "values even when another set predicts validation better")
    cal.add_argument("--resume", action="store_true", help="continue the run in --out (named "
                     "on standard error; needed to run again into a folder holding this run)")
    add_seed(cal)
    cal.add_argument("--no-plots", action="store_true", help="skip corner.png, trace.png")
    cal.add_argument("--quiet", action="store_true", help="no progress bar, no notes")
    add_split_options(cal)
    add_allow_implausible(cal)
    add_workers(cal)
    cal.set_defaults(run=cmd_calibrate)
