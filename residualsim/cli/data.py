"""``residualsim data info`` and ``residualsim data synthesize``."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from residualsim.atomic import check_output
from residualsim.cli.data_import import bag_info, register_import, synthesize_session
from residualsim.cli.options import (add_allow_implausible, add_seed, add_workers, count,
                                     json_line)
from residualsim.data.datasets import resolve_data
from residualsim.errors import DataError, ParameterError


def cmd_data_info(args: argparse.Namespace) -> None:
    from residualsim.data import describe, format_description
    from residualsim.data.bags import is_bag

    if is_bag(args.path):
        if args.scene or args.body:
            raise ParameterError(f"{args.path}: a ROS bag lists its topics; --scene and --body "
                                 "apply to a recordings folder (cut the bag first: residualsim "
                                 "data import)")
        bag_info(args.path)
        return

    if args.body and not args.scene:
        raise ParameterError("--body needs --scene: the object's scene file or URDF")
    if args.scene:
        from residualsim.experiments.jobs import describe_for_scene

        from residualsim.cli.scene_option import scene_argument

        description = describe_for_scene(resolve_data(args.path), scene_argument(args),
                                         body=args.body, n_workers=args.workers)
    else:
        description = describe(resolve_data(args.path))
    body = description.pop("body_flight", None)
    print(format_description(description))
    if body is not None:
        from residualsim.sysid.flight_info import format_flight_report

        print(format_flight_report(body))
        description["body_flight"] = body
    json_line(description)


def cmd_data_synthesize(args: argparse.Namespace) -> None:
    start = time.perf_counter()
    if args.session:
        synthesize_session(args, start)
        return
    check_output(args.out, kind="dir", command="data synthesize", force=args.force,
                 fresh=args.scene != "arm-loop")
    if args.scene == "arm-loop":
        from residualsim.sim.synthesize import synthesize_arm_loop

        path = synthesize_arm_loop(args.out, n_links=args.loop_links, rng=args.seed,
                                   substeps=args.substeps or (5 if args.loop_links == 12 else 10))
        json_line({"command": "data synthesize", "scene": "arm-loop", "out": str(path),
                   "seconds": time.perf_counter() - start})
        return
    from residualsim.sim.scenes.scene_file import is_scene_path

    if args.scene != "cube" and not is_scene_path(args.scene):
        raise DataError(f"synthesize writes ContactNets-format tosses (scene 'cube'), CSV "
                        f"poses of an object's scene file, or an arm-loop joint recording "
                        f"(scene 'arm-loop'), got {args.scene!r}")
    if not args.params:
        raise ParameterError("data synthesize needs --params: the true engine parameters, "
                             "e.g. lateral_friction=0.3,restitution=0.4")
    from residualsim.experiments.jobs import synthesize_set

    out, n, params = synthesize_set(
        args.out, args.params, scene=args.scene, like=args.like, limit=args.limit,
        count=args.count, n_samples=args.samples, noise_m=args.noise_m,
        noise_rad=args.noise_rad, seed=args.seed, substeps=args.substeps, rate_hz=args.rate,
        n_workers=args.workers, overwrite=args.force)
    json_line({"command": "data synthesize", "out": str(out), "count": n, "params": params,
               "seconds": time.perf_counter() - start})


def register(commands) -> None:
    """Add this module's commands to the ``residualsim`` sub-parsers."""
    data = commands.add_parser("data", help="inspect and make data sets")
    data_commands = data.add_subparsers(dest="data_command", required=True)
    info = data_commands.add_parser(
        "info", help="counts, durations, rates, first contacts, split sizes; per file the "
        "recorded rate, jitter, dropped samples, long gaps and resampled rate",
        description="Summarise a data set. CSV recordings are read as they come: comma, "
        "semicolon, tab or whitespace separators, # comments, BOM, CRLF, header names in any "
        "case, a separator ending every line (an empty last column); time stamps need "
        "only increase, files not uniform are resampled onto their nominal grid (period: "
        "least squares of stamp vs whole-period index; a folder of several rates to "
        "--rate-hz or its most common rate); jitter over 10 %% of the period (RMS of the "
        "steps' deviations, column jitter_pct) is warned about; gaps over 3 periods are "
        "reported, a gap of over 20 missing samples and 5 s is refused. With --scene: "
        "each file's free-flight samples and fitted gravity; with --body also how well "
        "that free flight determines the body (train/README.md §22).")
    info.add_argument("path", help="a folder of recordings (or $RESIDUALSIM_DATA/PATH)")
    info.add_argument("--scene", help="check the recordings against this object (a scene "
                      "file, .urdf or built-in name) and find first contacts on its shapes "
                      "(default: the recordings alone)")
    info.add_argument("--body", action="store_true",
                      help="with --scene (a scene file or URDF): per file and for all files, "
                      "how well the free flight determines the body and joints, as "
                      "calibrate's lsq body stage sees it: samples, condition, weak "
                      "directions. Costs 1 + d + k rollouts of each free flight (d: about "
                      "9 per link + 2 per joint; k: 12 + 2 per joint for a pose-only file): "
                      "8 pose-only hinge tosses, 280 rollouts, 1 s (default off)")
    add_allow_implausible(info)
    add_workers(info)
    info.set_defaults(run=cmd_data_info)
    register_import(data_commands)
    synth = data_commands.add_parser("synthesize", help="synthetic tosses with known truth")
    synth.add_argument("--scene", default="cube",
                       help="cube (ContactNets format), a scene file (.toml) or .urdf read "
                            "from that path (CSV poses), or arm-loop (default cube)")
    synth.add_argument("--params", help="the true engine parameters: k=v,... or a JSON file; "
                       "required for the cube and for scene files (not for arm-loop, whose "
                       "truth is the loop model's own stiffness)")
    synth.add_argument("--like", help="start from this set's initial states and lengths "
                       "(default: sampled tosses)")
    synth.add_argument("--limit", type=count(1), help="with --like: only the first N "
                       "recordings (default: all)")
    synth.add_argument("--count", type=count(1), default=8,
                       help="sampled tosses, without --like")
    synth.add_argument("--samples", type=count(2), default=110,
                       help="samples per sampled toss (--count x --samples at most 1 000 000)")
    synth.add_argument("--rate", type=float, help="Hz of sampled tosses, 10 to 2000 (a "
                       "capture system's range; default: 148 for the cube, 100 for a scene "
                       "file)")
    synth.add_argument("--out", required=True, help="folder to write (refused if it exists, "
                       "unless --force)")
    synth.add_argument("--noise-m", type=float, default=0.0,
                       help="std of the Gaussian noise added to each position axis (and "
                       "prismatic joint), m, at most 0.005 (more sinks poses 20 mm into the "
                       "table, which reading the set back refuses)")
    synth.add_argument("--noise-rad", type=float, default=0.0,
                       help="std of the orientation noise, rad, per axis of a random rotation "
                       "vector (and of revolute joints), at most 0.05")
    add_seed(synth)
    synth.add_argument("--substeps", type=count(1),
                       help="engine substeps per sample (default: the scene's)")
    synth.add_argument("--force", action="store_true", help="replace an existing --out")
    synth.add_argument("--session", action="store_true",
                       help="write one capture session instead (--count throws between a "
                       "hand's carries, placements and slides; 0.3 mm / 2 mrad noise by "
                       "default, stamp jitter, dropped messages), for data import: --out "
                       "x.bag a ROS 1 bag, x.csv one long CSV, else a ROS 2 bag folder; "
                       "the truth in <out>.truth.json")
    synth.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap",
                       help="with --session and a folder: the ROS 2 storage")
    synth.add_argument("--loop-links", type=int, choices=(12, 24), default=24,
                       help="arm-loop: links of the generating loop (default 24)")
    add_allow_implausible(synth)
    add_workers(synth)
    synth.set_defaults(run=cmd_data_synthesize)
