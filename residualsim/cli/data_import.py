"""``residualsim data import`` (a capture session cut into throws), ``data info`` on a ROS
bag, and ``data synthesize --session``."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from residualsim.atomic import check_output
from residualsim.cli.options import json_line
from residualsim.errors import ParameterError

__all__ = ["register_import", "bag_info", "synthesize_session", "link_map"]


def bag_info(path: str) -> None:
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


def synthesize_session(args: argparse.Namespace, start: float) -> None:
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


def link_map(values: list[str] | None) -> dict[str, str] | None:
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
    links = link_map(args.link)
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


def register_import(commands) -> None:
    """Add ``import`` to the ``data`` sub-commands."""
    imp = commands.add_parser(
        "import", help="cut a capture session (ROS 1/2 bag or one long CSV) into throws",
        description=_IMPORT_HELP)
    imp.add_argument("source", help="a .bag, a ROS 2 bag folder, .db3 or .mcap, or a .csv")
    imp.add_argument("--scene", required=True,
                     help="the object: a scene file (.toml), a .urdf, or cube")
    imp.add_argument("--out", required=True, help="the recordings folder to write (refused "
                     "if it exists, unless --force)")
    imp.add_argument("--link", action="append", metavar="LINK=TOPIC",
                     help="a URDF link and the topic (or /tf:FRAME) tracking its frame; "
                     "repeat per link; the base link is required for a bag (default: none, "
                     "for a CSV)")
    imp.add_argument("--joints", metavar="TOPIC",
                     help="a sensor_msgs/JointState topic (default: joints from the links)")
    imp.add_argument("--plot", metavar="FILE.png",
                     help="draw the session's height and joints with the throws marked "
                     "(default: no picture)")
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
