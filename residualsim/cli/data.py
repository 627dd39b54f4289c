"""``residualsim data info`` and ``residualsim data synthesize``."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from residualsim.atomic import check_output
from residualsim.cli.options import (add_allow_implausible, add_seed, add_workers, count,
                                     json_line)
from residualsim.data.datasets import resolve_data
from residualsim.errors import DataError, ParameterError


def _bag_info(path: str) -> None:
    from residualsim.data.bags import bag_topics, tf_frames

    topics = bag_topics(path)
    frames = tf_frames(path) if any(t.holds == "tf" for t in topics) else []
    width = max([len(t.topic) for t in topics] + [5])
    print(f"{'topic':<{width}}  {'type':<44} {'count':>9} {'rate_hz':>8}  holds")
    for t in topics:
        print(f"{t.topic:<{width}}  {t.msgtype:<44} {t.count:>9} {t.rate_hz:>8.2f}  "
              f"{t.holds or '-'}")
    poses = [t.topic for t in topics if t.holds == "pose"]
    print(f"pose topics (--link LINK=TOPIC): {', '.join(poses) or 'none'}"
          + (f"; TF frames (--link LINK=/tf:FRAME): {', '.join(frames)}" if frames else ""))
    json_line({"command": "data info", "path": str(path), "format": "ros bag",
               "topics": [t.summary() for t in topics], "pose_topics": poses,
               "tf_frames": frames})


def cmd_data_info(args: argparse.Namespace) -> None:
    from residualsim.data import describe, format_description
    from residualsim.data.bags import is_bag

    if is_bag(args.path):
        if args.scene or args.body:
            raise ParameterError(f"{args.path}: a ROS bag lists its topics; --scene and --body "
                                 "apply to a recordings folder (cut the bag first: residualsim "
                                 "data import)")
        _bag_info(args.path)
        return

    if args.body and not args.scene:
        raise ParameterError("--body needs --scene: the object's scene file or URDF")
    if args.scene:
        from residualsim.experiments.jobs import describe_for_scene

        description = describe_for_scene(resolve_data(args.path), args.scene, body=args.body,
                                         n_workers=args.workers)
    else:
        description = describe(resolve_data(args.path))
    body = description.pop("body_flight", None)
    print(format_description(description))
    if body is not None:
        from residualsim.sysid.flight_info import format_flight_report

        print(format_flight_report(body))
        description["body_flight"] = body
    json_line(description)


def _synthesize_session(args: argparse.Namespace, start: float) -> None:
    from residualsim.experiments.session_file import write_synthetic_session
    from residualsim.sim.scenes.scene_file import is_scene_path

    if args.scene != "cube" and not is_scene_path(args.scene):
        raise ParameterError(f"--session: the scene is a scene file, a .urdf or cube, got "
                             f"{args.scene!r}")
    unused = [flag for flag, value in (("--params", args.params), ("--like", args.like),
                                       ("--limit", args.limit)) if value]
    if unused:
        raise ParameterError(f"{', '.join(unused)} do not apply to --session (a session's "
                             "engine is fixed: friction 0.3, restitution 0.4)")
    check_output(args.out, kind="file" if Path(args.out).suffix else "dir",
                 command="data synthesize", force=args.force, fresh=True)
    truth = write_synthetic_session(
        args.out, args.scene, throws=args.count, rate_hz=args.rate or 150.0,
        noise_m=args.noise_m or 3e-4, noise_rad=args.noise_rad or 2e-3, seed=args.seed,
        storage=args.storage)
    json_line({"command": "data synthesize", "session": str(args.out),
               "throws": len(truth["throws"]), "links": truth["links"],
               "truth": f"{args.out}.truth.json", "seconds": time.perf_counter() - start})


def cmd_data_synthesize(args: argparse.Namespace) -> None:
    start = time.perf_counter()
    if args.session:
        _synthesize_session(args, start)
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


def _link_map(values: list[str] | None) -> dict[str, str] | None:
    if not values:
        return None
    links: dict[str, str] = {}
    for value in values:
        link, sep, topic = value.partition("=")
        if not sep or not link.strip() or not topic.strip():
            raise ParameterError(f"--link {value!r}: expected LINK=TOPIC, e.g. "
                                 "base=/vrpn_client_node/hinge_base/pose")
        if link.strip() in links:
            raise ParameterError(f"--link {link.strip()}: given twice")
        links[link.strip()] = topic.strip()
    return links


def cmd_data_import(args: argparse.Namespace) -> None:
    from residualsim.atomic import check_outside_inputs, check_plot_path
    from residualsim.data.cutting import CutOptions
    from residualsim.data.kinematics import read_kinematics
    from residualsim.data.session_import import import_session
    from residualsim.sim.scenes import ASSETS_DIR, read_scene_file

    start = time.perf_counter()
    options = CutOptions(**{name: getattr(args, name) for name in CutOptions.__dataclass_fields__})
    links = _link_map(args.link)
    check_output(args.out, kind="dir", command="data import", force=args.force, fresh=True)
    check_outside_inputs(args.out, {"session": (args.source, True)})
    if args.plot:
        check_plot_path(args.plot)
    scene = ASSETS_DIR / "cube.toml" if args.scene == "cube" else args.scene
    spec = read_scene_file(scene)
    if spec.kind != "free":
        raise ParameterError(f"--scene {args.scene}: data import cuts 3D sessions (kind "
                             f"\"free\", z up); this scene is {spec.kind!r}")
    tree = read_kinematics(spec.urdf)
    summary = import_session(args.source, tree, args.out, links=links, joint_topic=args.joints,
                             options=options, rigid_tolerance_m=args.rigid_tolerance_m,
                             axis_tolerance_deg=args.axis_tolerance_deg, scene=str(scene),
                             force=args.force, plot=args.plot)
    json_line({"command": "data import", "out": str(args.out), "throws": summary["throws"],
               "skipped": summary["skipped"], "rate_hz": summary["rate_hz"],
               "noise_m": summary["noise_m"], "tracked_samples": summary["tracked_samples"],
               "seconds": time.perf_counter() - start})


_IMPORT_HELP = """\
Cut a capture session into throws: a ROS 1 .bag, a ROS 2 bag (its folder, or its .db3 or
.mcap file) or one long CSV in the recording format; write DIR/<id>.csv per throw (the
recording format, joint columns included), DIR/index.csv (id,start_s,end_s,samples,
contact_s,rest_s,status,reason: times on the session's clock; skipped segments with their
reasons) and DIR/import.json. DIR is then an ordinary recordings folder (data info,
calibrate, train, ...). The folder appears whole or not at all.

Topics to links: --link LINK=TOPIC per tracked URDF link, the base link required. A topic
holds PoseStamped, PoseWithCovarianceStamped, TransformStamped or nav_msgs/Odometry; a TF
child frame is LINK=/tf:FRAME. Stamps are the messages' header stamps, not the bag's
receive times. Joint values come from --joints (sensor_msgs/JointState, by joint name) or
are derived from the tracked parent and child links through the URDF's joint origins and
axes (revolute, continuous, prismatic); links not held together as the URDF says (median
drift over --rigid-tolerance-m, or rotation off the axis over --axis-tolerance-deg) are
refused, naming them. A session CSV has t,x,y,z,qw,qx,qy,qz (base), joint columns, or
<link>.x ... <link>.qz per other link; empty cells are lost tracking.

Clean-up: messages sorted by stamp; duplicate stamps dropped; NaN poses, zero quaternions
and poses repeated bit for bit (a frozen tracker) are lost tracking; the other links are
interpolated (slerp for rotations) at the base's stamps; a gap over --max-gap-s ends a
recording.

Cutting (on the centre of mass, from the URDF's masses and the joint values): a parabola
is fitted over every --window-s; free flight where its acceleration is gravity's (-z)
within --accel-tolerance; each arc is followed back to the release and on to the first
contact within 4 sigma of its parabola (sigma: the session's tracking noise). An arc within
--bounce-gap-s of the previous one is a bounce; any other is a release, a throw when its
flight lasts --min-flight-s and is one parabola (within --arc-accel-tolerance of gravity,
no jerk or snap over --jerk-tolerance / --snap-tolerance: a hand lowering it fast passes
the windows, not this). A throw ends --rest-tail-s after rest (still for --rest-s:
within --rest-motion-m and --rest-angle-deg), before a hand moves it again (after 0.1 s
slower than 0.1 m/s, 0.1 s faster than --hand-speed outside free flight),
at a tracking gap, at the next release, or --max-throw-s after the release; shorter than
--min-throw-s, or a flight lost before contact: skipped, with its reason.
"""


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
    imp = data_commands.add_parser(
        "import", help="cut a capture session (ROS 1/2 bag or one long CSV) into throws",
        description=_IMPORT_HELP)
    imp.add_argument("source", help="a .bag, a ROS 2 bag folder, .db3 or .mcap, or a .csv")
    imp.add_argument("--scene", required=True,
                     help="the object: a scene file (.toml), a .urdf, or cube")
    imp.add_argument("--out", required=True, help="the recordings folder to write (refused "
                     "if it exists, unless --force)")
    imp.add_argument("--link", action="append", metavar="LINK=TOPIC",
                     help="a URDF link and the topic (or /tf:FRAME) tracking its frame; "
                     "repeat per link; the base link is required for a bag")
    imp.add_argument("--joints", metavar="TOPIC",
                     help="a sensor_msgs/JointState topic (default: joints from the links)")
    imp.add_argument("--plot", metavar="FILE.png",
                     help="draw the session's height and joints with the throws marked")
    imp.add_argument("--force", action="store_true", help="replace an existing --out")
    from residualsim.data.cutting import CutOptions

    units = {"window_s": "s", "accel_tolerance": "m/s^2", "min_flight_s": "s",
             "bounce_gap_s": "s", "max_gap_s": "s", "rest_s": "s", "rest_motion_m": "m",
             "rest_angle_deg": "deg", "rest_tail_s": "s", "hand_speed": "m/s",
             "max_throw_s": "s", "min_throw_s": "s", "jerk_tolerance": "m/s^3",
             "arc_accel_tolerance": "m/s^2", "snap_tolerance": "m/s^4",
             "gravity": "m/s^2"}
    for name, default in CutOptions().summary().items():
        imp.add_argument(f"--{name.replace('_', '-')}", type=float, default=default,
                         help=f"cutting threshold, {units[name]} (see above)")
    imp.add_argument("--rigid-tolerance-m", type=float, default=0.01,
                     help="largest median drift of a child link from its joint, m")
    imp.add_argument("--axis-tolerance-deg", type=float, default=5.0,
                     help="largest median rotation of a child link off its joint axis, deg")
    imp.set_defaults(run=cmd_data_import)
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
