"""``residualsim bench ...``: benchmarks that print ratios against a baseline measured in the
same run (engine wrapper, calibration step, residual rollouts, executors, beliefs, loop
identification, MPEC)."""

from __future__ import annotations

import argparse

from residualsim.cli.argtypes import (batch_sizes, belief_methods as _methods, draw_counts,
                                      loop_names, seed, worker_count)
from residualsim.cli.options import SCENE_HELP, add_seed, count, json_line, kappa_option
from residualsim.data.bundled import PRETRAINED_CUBE


def cmd_bench_engine(args: argparse.Namespace) -> None:
    from residualsim.experiments.bench import bench_engine_job, format_engine_report

    report = bench_engine_job(args.scene, args.data, n_tosses=args.tosses,
                              repeats=args.repeats)
    print(format_engine_report(report))
    json_line({"command": "bench engine", **report})


def cmd_bench_calibration(args: argparse.Namespace) -> None:
    from residualsim.experiments.bench_calibration import (bench_calibration_job,
                                                         format_calibration_report)

    report = bench_calibration_job(args.scene, args.data, n_tosses=args.tosses,
                                   substeps=args.substeps, n_chains=args.chains,
                                   steps=args.samples + args.burn_in,
                                   probe_steps=args.probe_steps,
                                   sampler_steps=args.sampler_steps,
                                   fraction=args.delayed_acceptance)
    print(format_calibration_report(report))
    json_line({"command": "bench calibration", **report})


def model_and_tosses(*args):
    """:func:`residualsim.experiments.jobs.model_and_tosses`, imported on use (it loads the
    physics; ``residualsim --help`` should not)."""
    from residualsim.experiments.jobs import model_and_tosses as load

    return load(*args)


def cmd_bench_residual(args: argparse.Namespace) -> None:
    from residualsim.experiments.bench import bench_residual, format_residual_report

    model, tosses = model_and_tosses(args.model, args.data, "validation", args.tosses)
    report = bench_residual(model, tosses, repeats=args.repeats)
    print(format_residual_report(report))
    json_line({"command": "bench residual", **report})


def cmd_bench_beliefs(args: argparse.Namespace) -> None:
    from residualsim.experiments.bench_beliefs import (METHOD_OPTIONS, bench_beliefs,
                                                       check_methods, format_beliefs_report)

    methods = {key: getattr(args, key) for key in METHOD_OPTIONS}
    check_methods(**methods)  # before the model and the tosses load
    model, tosses = model_and_tosses(args.model, args.data, "validation", args.tosses)
    report = bench_beliefs(model, tosses, particles=args.particles, n_workers=args.workers,
                           n_events=args.events, seed=args.seed, repeats=args.repeats, **methods)
    print(format_beliefs_report(report))
    json_line({"command": "bench beliefs", **report})


def cmd_bench_executors(args: argparse.Namespace) -> None:
    from residualsim.experiments.bench import bench_executors

    model, tosses = model_and_tosses(args.model, args.data, "train", args.tosses)
    report = bench_executors(model, tosses, candidates=args.candidates, repeats=args.repeats)
    print(f"{report['n_trajectories']} training tosses, {report['substeps']} substeps, "
          f"batches of {report['candidates']} candidates (mean mode):")
    for key, row in report.items():
        if isinstance(row, dict):
            ratio = row.get("speedup_over_first")
            print(f"  {key:>8}: {row['evals_per_s']:6.2f} evaluations/s"
                  + (f" ({ratio:.2f}x local_1)" if ratio else "")
                  + f"; empty map call {row['noop_ms']:.2f} ms; start {row['startup_s']:.2f} s"
                  + f"; identical {row['identical_to_first']}")
    if "ray_over_local_noop" in report:
        print(f"  Ray / local (2 workers): map-call overhead {report['ray_over_local_noop']:.2f}x,"
              f" evaluations/s {report['ray_over_local_evals']:.2f}x")
    json_line({"command": "bench executors", **report})


def cmd_bench_identify_loop(args: argparse.Namespace) -> None:
    from residualsim.experiments.bench import bench_identify_loop

    report = bench_identify_loop(args.method, args.seed_kappa, n_links=args.generator_links,
                                 n_workers=args.workers, estimate_offsets=args.offsets,
                                 offset_rad=args.offset_rad, rng=args.seed)
    print(f"{args.method} from {list(args.seed_kappa)} ({report['generator_n_links']}-link "
          f"recording): kappa = {[round(k, 5) for k in report['kappa']]} vs truth "
          f"{report['truth']}, relative error "
          f"{[f'{100 * e:+.2f} %' for e in report['rel_error']]}, {report['rollouts']} "
          f"rollouts, {report['wall_s']:.1f} s")
    json_line({"command": "bench identify-loop", **report})


def cmd_bench_mpec(args: argparse.Namespace) -> None:
    from residualsim.experiments.bench_mpec import bench_mpec, format_mpec_report

    report = bench_mpec(filter_particles=args.particles, rng=args.seed)
    if args.cube_tosses:
        from residualsim.data.datasets import resolve_data
        from residualsim.experiments.bench_mpec import bench_mpec_cube

        report["cube"] = bench_mpec_cube(resolve_data(args.data, "cube"), args.cube_tosses,
                                         n_workers=args.workers, mh_substeps=args.mh_substeps)
    print(format_mpec_report(report))
    json_line({"command": "bench mpec", **report})


def register(commands) -> None:
    """Add this module's commands to the ``residualsim`` sub-parsers."""
    bench = commands.add_parser("bench", help="benchmarks (ratios against in-run baselines)")
    bench_commands = bench.add_subparsers(dest="bench_command", required=True)
    engine = bench_commands.add_parser("engine", help="wrapper overhead and worker speed-up")
    engine.add_argument("--scene", default="cube", help=SCENE_HELP)
    engine.add_argument("--data", help="the scene's recordings, for the worker speed-up "
                        "(default $RESIDUALSIM_DATA/<scene's set>; skipped without)")
    engine.add_argument("--tosses", type=count(1), default=20,
                        help="sampled tosses timed for the wrapper overhead")
    engine.add_argument("--repeats", type=count(1), default=5, help="timing repeats (the "
                        "fastest counts)")
    engine.set_defaults(run=cmd_bench_engine)
    bcal = bench_commands.add_parser(
        "calibration", help="Metropolis-Hastings step cost, 1 vs 2 workers, projected time")
    bcal.add_argument("--scene", default="cube", help=SCENE_HELP)
    bcal.add_argument("--data", help="the scene's recordings (default "
                      "$RESIDUALSIM_DATA/<scene's set>)")
    bcal.add_argument("--tosses", type=count(1), default=100, help="first N recordings")
    bcal.add_argument("--substeps", type=count(1), default=1,
                      help="engine steps per recorded sample")
    bcal.add_argument("--chains", type=count(1), default=2, help="Metropolis-Hastings chains")
    bcal.add_argument("--samples", type=count(1), default=3000,
                      help="kept draws per chain, for the projected time")
    bcal.add_argument("--burn-in", type=count(0), default=1000,
                      help="discarded steps per chain, for the projected time")
    bcal.add_argument("--probe-steps", type=count(1), default=20,
                      help="sampler steps timed per worker count")
    bcal.add_argument("--sampler-steps", type=count(0), default=200, help="also run real "
                      "chains this long, plain and with delayed acceptance (0: skip)")
    bcal.add_argument("--delayed-acceptance", type=float, default=0.25, metavar="FRACTION",
                      help="share of the recordings each proposal is screened on")
    bcal.set_defaults(run=cmd_bench_calibration)
    bres = bench_commands.add_parser(
        "residual", help="residual rollout cost against the calibrated engine alone")
    bres.add_argument("--model", default=str(PRETRAINED_CUBE), help="model directory "
                      "(default: the shipped cube model)")
    bres.add_argument("--data", help="real tosses (default $RESIDUALSIM_DATA/contactnets-cube)")
    bres.add_argument("--tosses", type=count(1), default=40, help="validation tosses timed")
    bres.add_argument("--repeats", type=count(1), default=5, help="timing repeats")
    bres.set_defaults(run=cmd_bench_residual)

    bexe = bench_commands.add_parser(
        "executors", help="evaluations/s with 1 and 2 local workers and 2 Ray actors")
    bexe.add_argument("--model", default=str(PRETRAINED_CUBE), help="model whose training "
                      "loss is evaluated (default: the shipped cube model)")
    bexe.add_argument("--data", help="real tosses (default $RESIDUALSIM_DATA/contactnets-cube)")
    bexe.add_argument("--tosses", type=count(1), default=40, help="training tosses used")
    bexe.add_argument("--candidates", type=count(1), default=8, help="per batch")
    bexe.add_argument("--repeats", type=count(1), default=3, help="timing repeats")
    bexe.set_defaults(run=cmd_bench_executors)

    bbel = bench_commands.add_parser(
        "beliefs", help="particles through real tosses: wall / simulated time, vs the engine")
    bbel.add_argument("--model", default=str(PRETRAINED_CUBE), help="model directory "
                      "(default: the shipped cube model)")
    bbel.add_argument("--data", help="real tosses (default $RESIDUALSIM_DATA/contactnets-cube)")
    bbel.add_argument("--tosses", type=count(1), default=4, help="validation tosses")
    bbel.add_argument("--particles", type=count(2), default=1000,
                      help="belief particles per contact event")
    bbel.add_argument("--events", type=count(1), default=3, help="contact events to follow")
    bbel.add_argument("--workers", type=worker_count, default=2, help="worker processes")
    add_seed(bbel)
    bbel.add_argument("--methods", type=_methods, default=(), help="also compare belief "
                      "steps, e.g. particles,conjugate: wall / simulated time, engine "
                      "rollouts and the energy distance to a reference belief, per method")
    bbel.add_argument("--reference-particles", type=count(2),
                      help="particles of the reference belief for --methods (default 20000)")
    bbel.add_argument("--batch-sizes", type=batch_sizes, help="with --methods: each method "
                      "once per batch size (bodies per PyBullet world; 1: one at a time), "
                      "e.g. 1,auto (default auto)")
    bbel.add_argument("--draws", type=draw_counts, help="with conjugate in --methods: it "
                      "once per draws per step, e.g. 250,410 (default: the step's 250)")
    bbel.add_argument("--repeats", type=count(1), default=1, help="time each method's belief "
                      "steps and their bare loop N times in turn: medians, ranges (default 1)")
    bbel.add_argument("--loops", type=loop_names, help="with --methods: each method once per "
                      "rollout loop, compiled and/or python (default: the switch's one)")
    bbel.set_defaults(run=cmd_bench_beliefs)

    bid = bench_commands.add_parser(
        "identify-loop", help="generate an arm-loop recording and identify the loop springs")
    bid.add_argument("--method", choices=("lsq", "gradient", "homotopy", "mh"), default="lsq",
                     help="identification method: least squares, gradient descent, homotopy "
                     "or Metropolis-Hastings")
    bid.add_argument("--seed-kappa", type=kappa_option, default=(5.0, 5.0),
                     help="starting (kappa_theta, kappa_psi) N m/rad (default 5,5)")
    bid.add_argument("--generator-links", type=int, choices=(12, 24), default=12,
                     help="links of the generating loop (24: model error; default 12)")
    bid.add_argument("--offsets", action="store_true",
                     help="estimate the 7 joint-angle sensor offsets with kappa")
    bid.add_argument("--offset-rad", type=float, default=0.0,
                     help="std of the sensor zero offsets put in the recording, rad")
    bid.add_argument("--workers", type=worker_count, default=2, help="worker processes")
    bid.add_argument("--seed", type=seed, default=0, help="noise seed of the recording")
    bid.set_defaults(run=cmd_bench_identify_loop)
    bmp = bench_commands.add_parser("mpec", help="MPEC identification of synthetic particles")
    bmp.add_argument("--particles", type=count(2), default=2000, help="particle filter size")
    add_seed(bmp)
    bmp.add_argument("--cube-tosses", type=count(0), default=0, help="also time the cube MPEC "
                     "on the first N training tosses against MH (2 chains) on them")
    bmp.add_argument("--data", help="cube tosses (default $RESIDUALSIM_DATA/<cube's set>)")
    bmp.add_argument("--workers", type=worker_count, default=2, help="for --cube-tosses")
    bmp.add_argument("--mh-substeps", type=count(1), default=1, help="MH's engine substeps "
                     "for --cube-tosses (default 1; calibrate's default is the scene's, 10)")
    bmp.set_defaults(run=cmd_bench_mpec)
