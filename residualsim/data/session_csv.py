"""A capture session as one long CSV file, in the recording format (:mod:`residualsim.data.csv`).

Columns, names matched without regard to case:

* ``t``: the capture time, s (relative, or an epoch time; values over 1e14 are taken as
  nanoseconds, as some capture systems export them);
* ``x, y, z, qw, qx, qy, qz``: the base link frame's pose (m, world frame z up; quaternion
  w-x-y-z, base -> world; ``--quaternion-order xyzw`` reinterprets the four values);
* one column per URDF joint, named as the joint (rad or m), when the capture computed them;
* or, per other tracked link, seven columns ``<link>.x, <link>.y, <link>.z, <link>.qw,
  <link>.qx, <link>.qy, <link>.qz`` (``_`` or ``/`` may stand for the dot), from which the
  joints are derived through the URDF.

An empty cell or ``nan`` is a sample whose body was not tracked (lost tracking: a gap).
Any other column is refused, naming it, so that a misspelt joint or link is never dropped
without a word.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import numpy as np

from residualsim.data.csv import read_table
from residualsim.data.kinematics import KinematicTree
from residualsim.data.read_options import current_reading_options
from residualsim.data.session import JointStream, PoseStream
from residualsim.errors import DataError

__all__ = ["read_session_csv", "POSE_FIELDS"]

#: A pose's seven columns, in order.
POSE_FIELDS = ("x", "y", "z", "qw", "qx", "qy", "qz")
_LINK_COLUMN = re.compile(r"^(?P<link>.+)[._/](?P<field>x|y|z|qw|qx|qy|qz)$", re.IGNORECASE)


def _pose(path: Path, source: str, stamps: np.ndarray, columns: dict[str, np.ndarray],
          names: dict[str, str]) -> PoseStream:
    values = {field: columns[names[field]] for field in POSE_FIELDS}
    order = ("qw", "qx", "qy", "qz")
    if current_reading_options().quaternion_order == "xyzw":
        order = ("qz", "qw", "qx", "qy")
    return PoseStream(f"{path}:{source}", stamps,
                      np.column_stack([values[c] for c in ("x", "y", "z")]),
                      np.column_stack([values[c] for c in order]))


def read_session_csv(path: str | os.PathLike[str], tree: KinematicTree
                     ) -> tuple[dict[str, PoseStream], JointStream | None, int]:
    """The session's pose streams (link -> stream; the base always), its joint columns (None
    when the file has none) and the origin of their stamps (whole seconds taken off, the
    first stamp's); DataError naming the file and the column otherwise."""
    path = Path(path)
    header, table = read_table(path, missing_ok=True)
    lower = [name.strip().lower() for name in header]
    repeated = sorted({n for n in lower if lower.count(n) > 1})
    if repeated:
        raise DataError(f"{path}: column(s) {', '.join(repeated)} appear twice")
    columns = dict(zip(lower, table.T))
    missing = [c for c in ("t",) + POSE_FIELDS if c not in columns]
    if missing:
        raise DataError(f"{path}: a session CSV needs the columns t, x, y, z, qw, qx, qy, qz "
                        f"(the base link's pose); missing {', '.join(missing)}")
    stamps = columns["t"].copy()
    if np.nanmax(np.abs(stamps)) > 1e14:
        stamps = stamps * 1e-9
    origin = int(math.floor(np.nanmin(stamps))) if np.isfinite(stamps).any() else 0
    stamps = stamps - origin
    streams = {tree.base: _pose(path, "x..qz", stamps, columns,
                                {f: f for f in POSE_FIELDS})}
    joints = {j.name.lower(): j.name for j in tree.moving_joints}
    links = {link.lower(): link for link in tree.links}
    groups: dict[str, dict[str, str]] = {}
    joint_columns = []
    for name in lower:
        if name == "t" or name in POSE_FIELDS:
            continue
        if name in joints:
            joint_columns.append(name)
            continue
        match = _LINK_COLUMN.match(name)
        if match and match["link"].lower() in links:
            groups.setdefault(links[match["link"].lower()], {})[match["field"].lower()] = name
            continue
        raise DataError(f"{path}: column {name!r} is neither a joint of {tree.source.name} "
                        f"({', '.join(j.name for j in tree.moving_joints) or 'none'}) nor a "
                        f"link's pose (<link>.x ... <link>.qz; links: {', '.join(tree.links)})")
    for link, names in groups.items():
        absent = [f for f in POSE_FIELDS if f not in names]
        if absent:
            raise DataError(f"{path}: link {link}'s pose needs seven columns; missing "
                            f"{', '.join(f'{link}.{f}' for f in absent)}")
        if link == tree.base:
            raise DataError(f"{path}: the base link {link}'s pose is x, y, z, qw, qx, qy, qz; "
                            f"drop its {link}.* columns")
        streams[link] = _pose(path, f"{link}.*", stamps, columns, names)
    joint_stream = None
    if joint_columns:
        joint_stream = JointStream(f"{path}:joint columns", stamps,
                                   tuple(joints[c] for c in joint_columns),
                                   np.column_stack([columns[c] for c in joint_columns]))
    return streams, joint_stream, origin
