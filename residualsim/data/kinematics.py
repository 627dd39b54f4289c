"""A URDF's kinematic tree, for recordings: link frames from a base pose and joint values,
the centre of mass, and joint values from tracked link frames.

Only what the URDF's XML says is read (no engine): each joint's type, parent and child,
``<origin xyz rpy>`` (the joint frame in the parent link's frame, m and rad) and ``<axis>``
(in the joint frame), and each link's ``<inertial>`` mass (kg) and origin (its centre of
mass, m, link frame). Frames follow URDF: a child link's frame is its joint frame moved by
the joint's value, a rotation of ``q`` rad about the axis (revolute, continuous) or a
translation of ``q`` m along it (prismatic). Poses are (positions (..., 3) m, world frame;
quaternions (..., 4) w-x-y-z, link -> world).
"""

from __future__ import annotations

import math
import os
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from residualsim.data import quaternions as quat
from residualsim.errors import DataError

__all__ = ["KinematicJoint", "KinematicTree", "read_kinematics", "JointReading"]

#: Joint types that move (fixed joints join links rigidly).
MOVING_TYPES = ("revolute", "continuous", "prismatic")


@dataclass(frozen=True)
class KinematicJoint:
    """One URDF joint: ``origin_m`` (3,) and ``origin_wxyz`` (4,) the joint frame in the
    parent link's frame; ``axis`` (3,) unit, joint frame; limits in rad or m (None: none)."""

    name: str
    type: str
    parent: str
    child: str
    origin_m: np.ndarray
    origin_wxyz: np.ndarray
    axis: np.ndarray
    lower: float | None = None
    upper: float | None = None

    @property
    def moving(self) -> bool:
        return self.type in MOVING_TYPES


@dataclass(frozen=True)
class JointReading:
    """A joint's values derived from its parent's and child's tracked frames, per sample:
    ``values`` (T,) rad or m; ``drift_m`` (T,) how far the child frame sits from where the
    joint allows it (m); ``off_axis_rad`` (T,) the child's rotation not about the axis."""

    values: np.ndarray
    drift_m: np.ndarray
    off_axis_rad: np.ndarray


@dataclass(frozen=True)
class KinematicTree:
    """A URDF's links (base first, then in file order), joints (file order) and masses."""

    source: Path
    base: str
    links: tuple[str, ...]
    joints: tuple[KinematicJoint, ...]
    masses_kg: dict[str, float]
    coms_m: dict[str, np.ndarray]

    @property
    def moving_joints(self) -> tuple[KinematicJoint, ...]:
        """The non-fixed joints in URDF order (a recording's joint columns)."""
        return tuple(j for j in self.joints if j.moving)

    def joint(self, name: str) -> KinematicJoint:
        for joint in self.joints:
            if joint.name == name:
                return joint
        raise KeyError(name)

    def _order(self) -> list[KinematicJoint]:
        """Joints parents first (a breadth-first walk from the base)."""
        ordered, frontier = [], [self.base]
        while frontier:
            link = frontier.pop(0)
            for joint in self.joints:
                if joint.parent == link:
                    ordered.append(joint)
                    frontier.append(joint.child)
        return ordered

    def link_poses(self, base_m: np.ndarray, base_wxyz: np.ndarray,
                   joint_values: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Every link frame's world pose from the base link's pose (T, 3), (T, 4) and the
        moving joints' values (T, n) in :attr:`moving_joints` order."""
        base_m = np.asarray(base_m, np.float64)
        base_wxyz = np.asarray(base_wxyz, np.float64)
        values = np.asarray(joint_values, np.float64).reshape(len(base_m), -1)
        column = {j.name: k for k, j in enumerate(self.moving_joints)}
        poses = {self.base: (base_m, base_wxyz)}
        for joint in self._order():
            parent_m, parent_wxyz = poses[joint.parent]
            frame_m = parent_m + quat.rotate(parent_wxyz, joint.origin_m)
            frame_wxyz = quat.multiply(parent_wxyz, joint.origin_wxyz)
            if joint.moving:
                q = values[:, column[joint.name]]
                if joint.type == "prismatic":
                    frame_m = frame_m + quat.rotate(frame_wxyz, joint.axis * q[:, None])
                else:
                    frame_wxyz = quat.multiply(frame_wxyz, quat.from_axis_angle(joint.axis, q))
            poses[joint.child] = (frame_m, frame_wxyz)
        return poses

    def centre_of_mass(self, base_m: np.ndarray, base_wxyz: np.ndarray,
                       joint_values: np.ndarray) -> np.ndarray:
        """The whole object's centre of mass (T, 3), m, world frame."""
        poses = self.link_poses(base_m, base_wxyz, joint_values)
        total = np.zeros_like(np.asarray(base_m, np.float64))
        for link, (position, orientation) in poses.items():
            total = total + self.masses_kg[link] * (
                position + quat.rotate(orientation, self.coms_m[link]))
        return total / sum(self.masses_kg[link] for link in poses)

    def joint_from_links(self, joint: KinematicJoint, parent: tuple[np.ndarray, np.ndarray],
                         child: tuple[np.ndarray, np.ndarray]) -> JointReading:
        """The values of ``joint`` that place its child frame where it was tracked, given
        the tracked parent and child link frames (each (T, 3), (T, 4), world). Revolute and
        continuous values are in (-pi, pi] here (unwrap them over time)."""
        parent_m, parent_wxyz = parent
        frame_m = parent_m + quat.rotate(parent_wxyz, joint.origin_m)
        frame_wxyz = quat.multiply(parent_wxyz, joint.origin_wxyz)
        inverse = quat.conjugate(frame_wxyz)
        offset = quat.rotate(inverse, child[0] - frame_m)  # child origin in the joint frame
        relative = quat.multiply(inverse, child[1])  # child rotation in the joint frame
        if joint.type == "prismatic":
            values = offset @ joint.axis
            drift = np.linalg.norm(offset - values[:, None] * joint.axis, axis=1)
            return JointReading(values, drift, quat.angle_of(relative))
        sign = np.where(relative[:, 0] < 0, -1.0, 1.0)[:, None]
        relative = relative * sign
        values = 2.0 * np.arctan2(relative[:, 1:] @ joint.axis, relative[:, 0])
        rest = quat.multiply(quat.from_axis_angle(joint.axis, -values), relative)
        return JointReading(values, np.linalg.norm(offset, axis=1), quat.angle_of(rest))


def _floats(path: Path, element, attribute: str, default: list[float]) -> np.ndarray:
    text = None if element is None else element.get(attribute)
    if text is None:
        return np.array(default, np.float64)
    try:
        values = [float(v) for v in text.split()]
    except ValueError:
        values = []
    if len(values) != len(default) or not all(math.isfinite(v) for v in values):
        raise DataError(f"{path}: {element.tag} {attribute}={text!r} is not "
                        f"{len(default)} finite numbers")
    return np.array(values, np.float64)


def read_kinematics(path: str | os.PathLike[str]) -> KinematicTree:
    """Read a URDF's kinematic tree; a DataError naming the file when it is not a URDF with
    one root link, or a joint's type, links or axis are missing or wrong."""
    path = Path(path)
    try:
        root = ElementTree.parse(path).getroot()
    except (ElementTree.ParseError, OSError) as exc:
        raise DataError(f"{path}: cannot read this URDF ({exc})") from None
    links = [link.get("name") for link in root.findall("link")]
    if not links or None in links:
        raise DataError(f"{path}: a URDF needs <link name=...> elements")
    masses, coms = {}, {}
    for link in root.findall("link"):
        inertial = link.find("inertial")
        mass = inertial.find("mass") if inertial is not None else None
        masses[link.get("name")] = float(mass.get("value", 0.0)) if mass is not None else 0.0
        coms[link.get("name")] = _floats(path, inertial.find("origin") if inertial is not None
                                         else None, "xyz", [0.0, 0.0, 0.0])
    joints = []
    for element in root.findall("joint"):
        name, kind = element.get("name"), element.get("type")
        parent, child = element.find("parent"), element.find("child")
        if kind not in MOVING_TYPES + ("fixed",):
            raise DataError(f"{path}: joint {name!r} of type {kind!r}; recordings take "
                            f"{', '.join(MOVING_TYPES)} and fixed joints")
        if parent is None or child is None or parent.get("link") not in links \
                or child.get("link") not in links:
            raise DataError(f"{path}: joint {name!r} needs a parent and a child link of this "
                            "URDF")
        origin = element.find("origin")
        axis = _floats(path, element.find("axis"), "xyz", [1.0, 0.0, 0.0])
        if kind != "fixed" and np.linalg.norm(axis) < 1e-9:
            raise DataError(f"{path}: joint {name!r} has a zero axis")
        limit = element.find("limit")
        lower = limit.get("lower") if limit is not None else None
        upper = limit.get("upper") if limit is not None else None
        joints.append(KinematicJoint(
            name=name, type=kind, parent=parent.get("link"), child=child.get("link"),
            origin_m=_floats(path, origin, "xyz", [0.0, 0.0, 0.0]),
            origin_wxyz=quat.from_rpy(_floats(path, origin, "rpy", [0.0, 0.0, 0.0])),
            axis=axis / max(np.linalg.norm(axis), 1e-12),
            lower=float(lower) if lower is not None and kind != "continuous" else None,
            upper=float(upper) if upper is not None and kind != "continuous" else None))
    children = {j.child for j in joints}
    roots = [link for link in links if link not in children]
    if len(roots) != 1:
        raise DataError(f"{path}: a URDF has one root link (the base), found {roots}")
    ordered = [roots[0]] + [link for link in links if link != roots[0]]
    if sum(masses.values()) <= 0:
        masses = {link: 1.0 for link in links}  # no inertials: the frames' mean
    return KinematicTree(source=path, base=roots[0], links=tuple(ordered), joints=tuple(joints),
                         masses_kg=masses, coms_m=coms)
