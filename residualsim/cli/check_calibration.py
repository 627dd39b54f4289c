"""``residualsim check-calibration``: simulation-based calibration of ``calibrate`` on a scene
(are its intervals honest for this object?)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from residualsim.cli.options import (SCENE_HELP, add_envelope_options, add_max_minutes,
                                     add_seed, add_workers, bounds_option, count, json_line,
                                     nonnegative_float)
from residualsim.errors import ParameterError

DEFAULT_PARAMS = "lateral_friction,restitution"
DEFAULT_BOUNDS = "lateral_friction=0.1:0.7,restitution=0.1:0.7"


def _table(figures: dict, names: list[str], draws: int) -> str:
    """The report as a few lines for the person watching (its verdict says when the chains
    did not mix: R-hat above :data:`~residualsim.sysid.posterior.RHAT_MAX`)."""
    from residualsim.sysid.posterior import RHAT_MAX

    lines = [f"SBC of calibrate: {figures['datasets']} data sets, ranks 0..{draws} "
             f"(uniform when the posterior is right: mean rank {draws / 2:g}, 90 % interval "
             "coverage 0.9)",
             f"{'parameter':<24} {'histogram':<24} {'chi2 p':>7} {'cover90':>7} {'mean':>6}"]
    for name in names:
        row = figures[name]
        p = "-" if row["p_value"] is None else f"{row['p_value']:.3f}"
        cover = "-" if row["coverage_90"] is None else f"{row['coverage_90']:.2f}"
        mean = "-" if row["mean_rank"] is None else f"{row['mean_rank']:.1f}"
        lines.append(f"{name:<24} {' '.join(map(str, row['histogram'])):<24} {p:>7} "
                     f"{cover:>7} {mean:>6}")
    low = [n for n in names if figures[n]["p_value"] is not None  # (p may underflow to 0)
           and figures[n]["p_value"] < 0.05]
    verdict = ("ranks not uniform (p < 0.05) for " + ", ".join(low) + ": calibrate's "
               "intervals are not honest here" if low else
               "no evidence against uniform ranks at p < 0.05 (more --datasets test harder)")
    rhat = figures.get("max_rhat")
    if rhat is not None and rhat > RHAT_MAX:  # the ranks are of chains that did not mix
        verdict += (f"; but the chains did not mix (R-hat up to {rhat:.3g} > {RHAT_MAX}): "
                    "these ranks test calibrate's unconverged chains, not its posterior "
                    "(raise --mh-samples and --burn-in)")
    return "\n".join([*lines, verdict])


def cmd_check_calibration(args: argparse.Namespace) -> None:
    from residualsim.parallel.progress import stage_line
    from residualsim.sysid.calibrate_options import DEFAULT_WEIGHTING, check_applicable
    from residualsim.sysid.sbc import simulation_based_calibration

    names = [n.strip() for n in args.params.split(",")]
    ranges = dict(item.split("=") for item in DEFAULT_BOUNDS.split(","))
    if args.bounds is None and set(names) - set(ranges):
        raise ParameterError(f"--bounds name=LOW:HIGH,... is required for "
                             f"{', '.join(n for n in names if n not in ranges)}: the truths "
                             f"are drawn from that box (default only for {DEFAULT_BOUNDS})")
    args.bounds = args.bounds or ",".join(f"{n}={ranges[n]}" for n in names)
    if Path(args.out).is_dir():
        raise ParameterError(f"--out {args.out}: a directory; name a .jsonl file")
    check_applicable(args.method, weighting=args.weighting, small_sample=args.small_sample,
                     rugged_weight=args.rugged_weight)
    options = {"method": args.method}
    if args.method == "mh":
        options.update(samples=args.mh_samples, burn_in=args.burn_in)
    if args.weighting is not None:
        options["weighting"] = args.weighting
    for key in ("rugged_weight", "small_sample", "covariance", "recorded_start"):
        if getattr(args, key) is not None:
            options[key] = getattr(args, key)
    if args.bootstrap is not None:
        options["bootstrap_replicates"] = args.bootstrap

    start = time.perf_counter()

    def starting(index: int, done: int, left: float | None) -> None:
        about = "" if left is None else f", about {left:.0f} s left"
        stage_line("check-calibration", f"{done}/{args.datasets} data set {index} starting"
                   f"{about}", start)

    def progress(result: dict, done: int) -> None:
        truth = " ".join(f"{k}={v:.3f}" for k, v in result["truth"].items())
        stage_line("check-calibration", f"{done}/{args.datasets} data set {result['index']} "
                   f"done: truth {truth} ranks {result['rank']} {result['seconds']:.1f} s",
                   start)

    figures = simulation_based_calibration(
        args.scene, names, args.out, datasets=args.datasets, tosses=args.tosses,
        samples=args.toss_samples, noise_m=args.noise_m, noise_rad=args.noise_rad,
        substeps=args.substeps, bounds=bounds_option(args.bounds),
        draws=args.draws, bins=args.bins, seed=args.seed, n_workers=args.workers,
        calibrate_options=options, progress=progress, starting=starting,
        max_minutes=args.max_minutes)
    print(_table(figures, [k for k, v in figures.items() if isinstance(v, dict)], args.draws),
          file=sys.stderr, flush=True)
    json_line({"command": "check-calibration", "scene": args.scene, "method": args.method,
               "weighting": args.weighting or DEFAULT_WEIGHTING, "draws": args.draws,
               "bins": args.bins, **figures})


def register(commands) -> None:
    """Add ``check-calibration`` to the ``residualsim`` sub-parsers."""
    sub = commands.add_parser(
        "check-calibration", help="simulation-based calibration of calibrate on a scene: "
        "are its intervals honest for this object?",
        description="Simulation-based calibration (Talts et al. 2018) of calibrate: per "
        "data set, draw the truth from the prior (--bounds), synthesize --tosses tosses of "
        "the scene with it, run calibrate on them and rank the truth among --draws "
        "posterior draws. Honest intervals give uniform ranks (chi-square p, 90 % "
        "coverage near 0.9). A table goes to standard error, one JSON line to standard "
        "output.")
    sub.add_argument("--scene", default="cube", help=SCENE_HELP)
    sub.add_argument("--params", default=DEFAULT_PARAMS, help="comma-separated parameters "
                     f"to calibrate, as calibrate's --params (default {DEFAULT_PARAMS})")
    sub.add_argument("--bounds", help="name=LOW:HIGH,... the prior's box the truths are drawn "
                     "from, natural units; calibrate gets the same (default 0.1:0.7 for each "
                     "default parameter; required for any other parameter)")
    sub.add_argument("--datasets", type=count(1), default=20,
                     help="synthetic data sets, each one calibrate run (default 20)")
    add_max_minutes(sub, "the data sets left (timed on the first run, or on those --out "
                    "holds; refused before the next, the finished ones kept)")
    sub.add_argument("--tosses", type=count(1), default=6,
                     help="synthetic tosses per data set (default 6)")
    sub.add_argument("--samples", dest="toss_samples", metavar="N", type=count(2), default=50,
                     help="samples per toss, at the scene's rate (default 50)")
    sub.add_argument("--noise-m", type=nonnegative_float, default=0.002,
                     help="position noise of the synthetic poses, m per axis (default 0.002)")
    sub.add_argument("--noise-rad", type=nonnegative_float, default=0.0,
                     help="orientation noise of the synthetic poses, rad (default 0)")
    sub.add_argument("--substeps", type=count(1), help="engine substeps per sample, of the "
                     "truth and of calibrate (default: the scene's)")
    sub.add_argument("--method", choices=("mh", "sandwich"), default="mh",
                     help="calibrate's method: mh (posterior draws thinned) or sandwich (draws "
                     "from its Gaussian) (default mh)")
    sub.add_argument("--weighting", choices=("recording", "calibrated", "effective"),
                     help="calibrate's --weighting for mh (default: calibrate's, calibrated)")
    sub.add_argument("--rugged-weight", type=float, metavar="LAMBDA",
                     help="calibrate's --rugged-weight with --weighting calibrated (default: "
                     "calibrate's)")
    add_envelope_options(sub, passed_on=True)
    sub.add_argument("--recorded-start", choices=("fit", "recorded"), help="calibrate's "
                     "--recorded-start (default: calibrate's)")
    sub.add_argument("--mh-samples", type=count(1), default=3000,
                     help="calibrate's --samples: kept MH draws per chain (default 3000)")
    sub.add_argument("--burn-in", type=count(0), default=1000,
                     help="calibrate's --burn-in: MH steps discarded per chain (default 1000)")
    sub.add_argument("--draws", type=count(1), default=19,
                     help="L posterior draws per data set, ranks 0..L (default 19)")
    sub.add_argument("--bins", type=count(1), default=5,
                     help="rank histogram bins, must divide L+1 (default 5)")
    sub.add_argument("--out", required=True, metavar="FILE.jsonl",
                     help="results, one JSON line per data set (required; no default). A "
                     "rerun of the same command resumes: finished data sets are skipped; a "
                     "file of another configuration is refused")
    add_seed(sub, "seed of data set j's truth and tosses ([seed, j]); calibrate gets j")
    add_workers(sub)
    sub.set_defaults(run=cmd_check_calibration)
