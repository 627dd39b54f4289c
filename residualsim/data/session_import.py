"""``data import``: a capture session (ROS bag or one long CSV) in, a recordings folder out.

The steps, each in its own module: read the streams (:mod:`~residualsim.data.bags`,
:mod:`~residualsim.data.session_csv`), clean and align them on the base link's stamps
(:mod:`~residualsim.data.session`), take the joint values from a joint topic or derive them
from the tracked links through the URDF (:mod:`~residualsim.data.kinematics`), find the
throws on the centre of mass (:mod:`~residualsim.data.cutting`), and write one
``<id>.csv`` recording per throw, ``index.csv`` and ``import.json``, atomically.

The stamps are put on the capture system's steady clock where they lie on one
(:func:`~residualsim.data.session.capture_grid`: a driver's jitter removed).

Joint values derived from links: each moving joint needs its parent and child links
tracked (or a ``--joints`` topic naming it). Links whose tracked frames are not where the
URDF's joint puts them are refused, naming the links and the size of the drift: the
child frame's distance from where the joint allows it (m) and its rotation off the joint's
axis (degrees), median over the session, beyond ``rigid_tolerance_m`` /
``axis_tolerance_deg``; single samples beyond three times those (a marker swap) are
dropped as lost tracking and counted. Revolute and continuous values are unwrapped within
each throw (continuous joints may pass +-pi); a revolute joint's values are moved by whole
turns to lie within its limits where they can, a continuous joint's to start in (-pi, pi].
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from residualsim.atomic import atomic_write_text
from residualsim.data.bags import is_bag, read_bag_streams
from residualsim.data.csv import save_csv_trajectory
from residualsim.data.cutting import CutOptions, Segment, find_throws
from residualsim.data.kinematics import KinematicTree
from residualsim.data.session import (CaptureGrid, JointStream, PoseStream, align_poses,
                                      align_values, capture_grid, clean_joints, clean_poses)
from residualsim.data.session_csv import read_session_csv
from residualsim.data.trajectory import Trajectory
from residualsim.errors import DataError, ParameterError

__all__ = ["TrackedSession", "read_session", "import_session", "INDEX_FILE", "IMPORT_FILE"]

log = logging.getLogger("residualsim.data")

#: The throws' index written beside them, and the import's record.
INDEX_FILE = "index.csv"
IMPORT_FILE = "import.json"


@dataclass
class TrackedSession:
    """A session's tracked samples on the base link's stamps (gaps removed): ``times_s``
    (T,) s since ``origin_s`` (whole seconds on the session's clock: its first second);
    the base link frame's ``base_m`` (T, 3) and ``base_wxyz`` (T, 4);
    ``joint_values`` (T, n) in the URDF's moving-joint order (revolute values in (-pi, pi]
    where derived from links); ``com_m`` (T, 3) the centre of mass. ``streams`` and
    ``dropped`` record what cleaning and alignment removed."""

    source: Path
    tree: KinematicTree
    origin_s: int
    times_s: np.ndarray
    base_m: np.ndarray
    base_wxyz: np.ndarray
    joint_values: np.ndarray
    com_m: np.ndarray
    streams: list[dict] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)
    joints_from: dict[str, str] = field(default_factory=dict)
    clock: dict = field(default_factory=dict)


def _on_grid(stamps: np.ndarray, grid: CaptureGrid) -> tuple[np.ndarray, np.ndarray]:
    """Stamps put on the capture grid, and which to keep (the first of any that land on
    the same frame)."""
    snapped = grid.snap(stamps)
    keep = np.ones(len(snapped), bool)
    keep[1:] = np.diff(snapped) > 0.5 * grid.period_s
    return snapped, keep


def _check_links(source: Path, tree: KinematicTree, links: dict[str, str]) -> None:
    unknown = [link for link in links if link not in tree.links]
    if unknown:
        raise ParameterError(f"--link {unknown[0]}={links[unknown[0]]}: no link "
                             f"{unknown[0]!r} in {tree.source} (its links: "
                             f"{', '.join(tree.links)})")
    if tree.base not in links:
        raise ParameterError(f"{source}: --link {tree.base}=TOPIC is required: the base link "
                             f"{tree.base!r} of {tree.source.name} (see `residualsim data info "
                             f"{source}` for the pose topics)")


def _read_streams(source: Path, tree: KinematicTree, links: dict[str, str] | None,
                  joint_topic: str | None
                  ) -> tuple[dict[str, PoseStream], JointStream | None, int]:
    if is_bag(source):
        if not links:
            raise ParameterError(f"{source}: a bag needs --link {tree.base}=TOPIC (and one "
                                 "per other tracked link); `residualsim data info "
                                 f"{source}` lists its pose topics")
        _check_links(source, tree, links)
        return read_bag_streams(source, links, joint_topic)
    if source.suffix.lower() != ".csv":
        raise DataError(f"{source}: not a capture session: a ROS 1 .bag, a ROS 2 bag (a "
                        "folder with metadata.yaml, or its .db3 or .mcap file) or a .csv")
    if links or joint_topic:
        raise ParameterError(f"{source}: --link and --joints apply to bags; a session CSV "
                             "names its links and joints in its header")
    return read_session_csv(source, tree)


def _joint_values(tree: KinematicTree, times: np.ndarray, poses: dict, joints: JointStream |
                  None, max_gap_s: float, rigid_tolerance_m: float,
                  axis_tolerance_deg: float) -> tuple[np.ndarray, np.ndarray, dict[str, str]]:
    """(T, n) joint values at the base stamps, a (T,) mask of usable samples, and where
    each joint's values came from."""
    moving = tree.moving_joints
    values = np.full((len(times), len(moving)), np.nan)
    usable = np.ones(len(times), bool)
    origin: dict[str, str] = {}
    for k, joint in enumerate(moving):
        if joints is not None and joint.name in joints.names:
            column = joints.positions[:, joints.names.index(joint.name)]
            if joint.type != "prismatic":
                finite = np.isfinite(column)
                column = column.copy()
                column[finite] = np.unwrap(column[finite])
            values[:, k] = align_values(joints.stamps_s, column, times, max_gap_s)[:, 0]
            origin[joint.name] = joints.source
            continue
        missing = [link for link in (joint.parent, joint.child) if link not in poses]
        if missing:
            raise ParameterError(f"joint {joint.name}: its {'parent' if missing[0] == joint.parent else 'child'} "
                                 f"link {missing[0]} is not tracked (--link {missing[0]}=TOPIC) "
                                 "and no --joints topic gives the joint")
        reading = tree.joint_from_links(joint, poses[joint.parent], poses[joint.child])
        tracked = np.isfinite(reading.drift_m)
        if not tracked.any():
            continue
        drift = float(np.median(reading.drift_m[tracked]))
        off_axis = math.degrees(float(np.median(reading.off_axis_rad[tracked])))
        if drift > rigid_tolerance_m or off_axis > axis_tolerance_deg:
            raise DataError(
                f"links {joint.parent} and {joint.child} (joint {joint.name}) are not held "
                f"together as {tree.source.name} says: the child frame sits {drift * 1e3:.1f} "
                f"mm from where the joint allows it and turns {off_axis:.1f} deg off its axis "
                f"(medians; tolerated {rigid_tolerance_m * 1e3:g} mm, {axis_tolerance_deg:g} "
                "deg): a wrong topic for a link, or a tracked frame that is not the link's")
        glitch = tracked & ((reading.drift_m > 3 * rigid_tolerance_m) | (
            reading.off_axis_rad > math.radians(3 * axis_tolerance_deg)))
        usable &= ~glitch
        values[:, k] = reading.values
        origin[joint.name] = f"links {joint.parent}, {joint.child}"
    return values, usable, origin


def read_session(source: str | os.PathLike[str], tree: KinematicTree, *,
                 links: dict[str, str] | None = None, joint_topic: str | None = None,
                 max_gap_s: float = 0.1, rigid_tolerance_m: float = 0.01,
                 axis_tolerance_deg: float = 5.0) -> TrackedSession:
    """Read, clean and align a session (module docstring); a DataError or ParameterError
    naming the file and the problem for what cannot be read."""
    source = Path(source)
    if not source.exists():
        raise DataError(f"{source}: no such file or folder")
    raw, joints, origin = _read_streams(source, tree, links, joint_topic)
    reports = []
    cleaned = {}
    for link, stream in raw.items():
        cleaned[link], report = clean_poses(stream)
        reports.append({"link": link, **report.summary()})
    if joints is not None:
        joints, report = clean_joints(joints)
        reports.append({"link": None, **report.summary()})
    grid = capture_grid(cleaned[tree.base].stamps_s)
    clock = {"stamps": "header stamps, as written"}
    if grid is not None:
        clock = {"stamps": "on the capture grid", **grid.summary()}
        for link, stream in cleaned.items():
            stamps, keep = _on_grid(stream.stamps_s, grid)
            cleaned[link] = PoseStream(stream.source, stamps[keep], stream.positions_m[keep],
                                       stream.quat_wxyz[keep])
        if joints is not None:
            stamps, keep = _on_grid(joints.stamps_s, grid)
            joints = JointStream(joints.source, stamps[keep], joints.names,
                                 joints.positions[keep])
    base = cleaned[tree.base]
    if len(base) < 3:
        raise DataError(f"{source}: {base.source} has {len(base)} tracked pose(s); a session "
                        "needs many")
    times = base.stamps_s
    poses = {tree.base: (base.positions_m, base.quat_wxyz)}
    usable = np.ones(len(times), bool)
    for link, stream in cleaned.items():
        if link != tree.base:
            poses[link] = align_poses(stream, times, max_gap_s)
            usable &= np.isfinite(poses[link][0]).all(axis=1)
    values, consistent, joints_from = _joint_values(tree, times, poses, joints, max_gap_s,
                                               rigid_tolerance_m, axis_tolerance_deg)
    dropped = {"links_untracked": int(np.count_nonzero(~usable)),
               "joints_missing": int(np.count_nonzero(usable & ~np.isfinite(values).all(axis=1))),
               "links_inconsistent": int(np.count_nonzero(~consistent))}
    usable &= np.isfinite(values).all(axis=1) & consistent
    base_m, base_wxyz = base.positions_m[usable], base.quat_wxyz[usable]
    values = values[usable]
    return TrackedSession(source=source, tree=tree, origin_s=origin, times_s=times[usable],
                          base_m=base_m,
                          base_wxyz=base_wxyz, joint_values=values,
                          com_m=tree.centre_of_mass(base_m, base_wxyz, values),
                          streams=reports, dropped=dropped, joints_from=joints_from,
                          clock=clock)


def _throw_joints(tree: KinematicTree, values: np.ndarray) -> np.ndarray:
    """One throw's joint values, unwrapped and placed on their branch (module docstring)."""
    values = values.copy()
    for k, joint in enumerate(tree.moving_joints):
        if joint.type == "prismatic":
            continue
        column = np.unwrap(values[:, k])
        turns = np.round(column[0] / (2 * math.pi))
        if joint.type == "revolute" and joint.lower is not None and joint.upper is not None:
            middle = 0.5 * (joint.lower + joint.upper)
            turns = np.round((np.median(column) - middle) / (2 * math.pi))
        values[:, k] = column - 2 * math.pi * turns
    return values


def _recording(session: TrackedSession, segment: Segment, traj_id: str) -> Trajectory:
    rows = slice(segment.start, segment.end + 1)
    times = session.times_s[rows] - session.times_s[segment.start]
    n = len(times)
    joints = _throw_joints(session.tree, session.joint_values[rows])
    zeros = np.zeros((n, 3))
    return Trajectory(traj_id=traj_id, times_s=times, positions_m=session.base_m[rows],
                      quat_wxyz=session.base_wxyz[rows], linear_velocity_mps=zeros,
                      angular_velocity_world_radps=zeros, planar=False,
                      source=f"import:{session.source}",
                      metadata={}, joint_names=tuple(j.name for j in
                                                     session.tree.moving_joints),
                      joint_positions=joints, joint_velocities=np.zeros_like(joints))


def _id_prefix(source: Path) -> str:
    stem = source.name if source.is_dir() else source.stem
    cleaned = "".join(c if c.isalnum() or c in "-_" else "_" for c in stem).strip("_")
    return (cleaned or "session") + "-"


def _index_lines(session: TrackedSession, segments: list[Segment], ids: dict[int, str]
                 ) -> str:
    lines = ["id,start_s,end_s,samples,contact_s,rest_s,status,reason"]
    times = session.times_s + session.origin_s  # the session's clock
    for k, segment in enumerate(segments):
        contact = "" if segment.contact is None else repr(float(times[segment.contact]))
        rest = "" if segment.rest is None else repr(float(times[segment.rest]))
        reason = (segment.reason or "").replace('"', "'")
        lines.append(",".join([ids.get(k, ""), repr(float(times[segment.start])),
                               repr(float(times[segment.end])),
                               str(segment.end - segment.start + 1), contact, rest,
                               "throw" if segment.is_throw else "skipped",
                               f'"{reason}"' if reason else ""]))
    return "\n".join(lines) + "\n"


def import_session(source: str | os.PathLike[str], tree: KinematicTree,
                   out: str | os.PathLike[str], *, links: dict[str, str] | None = None,
                   joint_topic: str | None = None, options: CutOptions = CutOptions(),
                   rigid_tolerance_m: float = 0.01, axis_tolerance_deg: float = 5.0,
                   scene: str | None = None, force: bool = False,
                   plot: str | os.PathLike[str] | None = None) -> dict:
    """Cut a session into throws and write ``out`` (module docstring): one ``<id>.csv``
    recording per throw, ``index.csv``, ``import.json``; the folder appears whole or not
    at all (built beside it, then renamed). Returns the summary ``import.json`` holds.
    A DataError when the session holds no throw (nothing is written)."""
    session = read_session(source, tree, links=links, joint_topic=joint_topic,
                           max_gap_s=options.max_gap_s, rigid_tolerance_m=rigid_tolerance_m,
                           axis_tolerance_deg=axis_tolerance_deg)
    segments, facts = find_throws(session.times_s, session.com_m, session.base_wxyz,
                                  session.joint_values, options)
    throws = [k for k, s in enumerate(segments) if s.is_throw]
    skipped = [segments[k] for k in range(len(segments)) if not segments[k].is_throw]
    if not throws:
        reasons = sorted({s.reason.split(",")[0] for s in skipped})
        raise DataError(f"{session.source}: no throw found in {len(session.times_s)} tracked "
                        f"samples ({facts['arcs']} free-flight arc(s); skipped: "
                        f"{'; '.join(reasons) or 'none'}); the world must be z up, "
                        "gravity -z (see data import --help for the rules and thresholds)")
    prefix = _id_prefix(session.source)
    ids = {k: f"{prefix}{n + 1:03d}" for n, k in enumerate(throws)}
    summary = {
        "command": "data import", "source": str(session.source), "scene": scene,
        "urdf": str(tree.source), "links": links, "joints_from": session.joints_from,
        "throws": len(throws), "skipped": len(skipped),
        "skipped_reasons": [{"start_s": session.origin_s + float(session.times_s[s.start]),
                             "end_s": session.origin_s + float(session.times_s[s.end]),
                             "reason": s.reason}
                            for s in skipped],
        "tracked_samples": int(len(session.times_s)), "streams": session.streams,
        "clock": session.clock,
        "dropped_samples": session.dropped, "options": options.summary(),
        "rigid_tolerance_m": rigid_tolerance_m, "axis_tolerance_deg": axis_tolerance_deg,
        **{k: v for k, v in facts.items()}}
    out = Path(out)
    building = out.parent / f".{out.name}.{uuid.uuid4().hex}.tmp"
    building.mkdir(parents=True)
    try:
        for k in throws:
            traj = _recording(session, segments[k], ids[k])
            save_csv_trajectory(building / f"{ids[k]}.csv", traj)
        atomic_write_text(building / INDEX_FILE, _index_lines(session, segments, ids))
        atomic_write_text(building / IMPORT_FILE, json.dumps(summary, indent=1) + "\n")
        if plot is not None:
            from residualsim.data.session_plot import plot_session

            plot_session(session, segments, ids, plot)
        _replace_folder(building, out, force)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    summary["out"] = str(out)
    return summary


def _replace_folder(building: Path, out: Path, force: bool) -> None:
    """Rename the finished folder into place (an existing one only with ``force``)."""
    if out.exists():
        if not force:
            raise ParameterError(f"--out {out}: already exists (pass --force to replace it)")
        old = out.parent / f".{out.name}.{uuid.uuid4().hex}.old"
        os.replace(out, old)
        os.replace(building, out)
        shutil.rmtree(old, ignore_errors=True)
        return
    os.replace(building, out)
