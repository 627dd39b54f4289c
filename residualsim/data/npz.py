"""residualsim's own trajectory files: one ``<id>.npz`` per trajectory.

Each file holds the five arrays of a :class:`~residualsim.data.trajectory.Trajectory`
(``times_s`` s; ``positions_m`` m, world frame, base link frame; ``quat_wxyz`` w-x-y-z,
base -> world; ``linear_velocity_mps`` m/s, world frame; ``angular_velocity_world_radps``
rad/s, world frame) as float64, plus ``meta``, a 0-d unicode array holding a JSON object::

    {"format": "residualsim-trajectory", "format_version": 1,
     "planar": false, "source": "...", "metadata": {...}}

A trajectory with joints is written as ``format_version`` 2, which adds ``joint_names`` (a
(n,) unicode array, URDF order), ``joint_positions`` and ``joint_velocities`` ((T, n)
float64; rad or m, rad/s or m/s); older readers then refuse the file instead of dropping
its joints. A rigid body's file stays version 1, as before; version 1 files load with no
joints. The joint arrays are required in version 2 and read wherever present.

The trajectory id is the file stem.  Files are written atomically (temporary file in the
same directory, then ``os.replace``) and read with ``allow_pickle=False``; anything else —
a foreign ``.npz``, a newer format version, a truncated archive — raises
:class:`~residualsim.errors.DataError` naming the file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import numpy as np

from residualsim.atomic import atomic_open
from residualsim.errors import DataError, ParameterError
from residualsim.data.listing import recording_files
from residualsim.data.trajectory import Trajectory

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "ARRAY_NAMES",
    "JOINT_ARRAY_NAMES",
    "save_trajectory",
    "load_trajectory",
    "save_trajectories",
    "load_trajectories",
]

#: Value of ``meta["format"]``.
FORMAT_NAME = "residualsim-trajectory"
#: Newest ``meta["format_version"]`` this module reads; written for trajectories with joints
#: (version 1, without joint arrays, for the others).
FORMAT_VERSION = 2
#: The joint arrays of a version 2 file.
JOINT_ARRAY_NAMES = ("joint_names", "joint_positions", "joint_velocities")
#: The arrays every file holds, besides ``meta``.
ARRAY_NAMES = (
    "times_s",
    "positions_m",
    "quat_wxyz",
    "linear_velocity_mps",
    "angular_velocity_world_radps",
)


def _check_id(traj_id: str) -> None:
    if (
        not isinstance(traj_id, str)
        or not traj_id
        or traj_id.startswith(".")
        or any(c in traj_id for c in "/\\\0")
    ):
        raise ParameterError(f"trajectory id {traj_id!r} cannot be used as a file name")


def save_trajectory(path: str | os.PathLike[str], traj: Trajectory) -> None:
    """Write one trajectory to ``path`` atomically.

    Parameters
    ----------
    path : path-like
        Destination file, ending in ``.npz``; its directory must exist.  The stem is the id
        the file will be read back under.
    traj : Trajectory
        Its ``metadata`` must be JSON-serialisable.

    Raises
    ------
    ParameterError
        ``path`` does not end in ``.npz``.
    DataError
        ``traj`` is not a Trajectory, its metadata is not JSON-serialisable, or the
        directory does not exist.
    """
    path = Path(path)
    if path.suffix != ".npz":
        raise ParameterError(f"{path}: trajectory files must end in .npz")
    if not isinstance(traj, Trajectory):
        raise DataError(f"{path}: expected a Trajectory, got {type(traj).__name__}")
    meta = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION if traj.n_joints else 1,
        "planar": bool(traj.planar),
        "source": str(traj.source),
        "metadata": traj.metadata,
    }
    try:
        meta_json = json.dumps(meta, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{path}: metadata is not JSON-serialisable ({exc})") from None
    if not path.parent.is_dir():
        raise DataError(f"{path}: directory {path.parent} does not exist")
    arrays = {name: np.asarray(getattr(traj, name), dtype=np.float64) for name in ARRAY_NAMES}
    if traj.n_joints:
        arrays["joint_names"] = np.array(traj.joint_names, dtype=str)
        arrays["joint_positions"] = np.asarray(traj.joint_positions, dtype=np.float64)
        arrays["joint_velocities"] = np.asarray(traj.joint_velocities, dtype=np.float64)
    with atomic_open(path) as handle:
        np.savez(handle, meta=np.array(meta_json), **arrays)


def load_trajectory(path: str | os.PathLike[str]) -> Trajectory:
    """Read one trajectory written by :func:`save_trajectory`.

    Parameters
    ----------
    path : path-like
        A ``.npz`` file; its stem becomes ``traj_id``.

    Returns
    -------
    Trajectory
        With ``source`` and ``metadata`` as stored.

    Raises
    ------
    DataError
        Missing, truncated, foreign or invalid file; the message starts with the path.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    try:
        loaded = np.load(path, allow_pickle=False)
    except Exception as exc:  # numpy/zipfile raise OSError, ValueError, BadZipFile, EOFError...
        raise DataError(
            f"{path}: not a readable .npz archive, truncated or corrupt "
            f"({type(exc).__name__}: {str(exc)[:200]})"
        ) from None
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise DataError(f"{path}: not a residualsim trajectory file (a bare array, not .npz)")
    try:
        with loaded as archive:
            names = set(archive.files)
            if "meta" not in names:
                raise DataError(f"{path}: not a residualsim trajectory file (no 'meta' entry)")
            missing = [name for name in ARRAY_NAMES if name not in names]
            if missing:
                raise DataError(f"{path}: missing array(s) {', '.join(missing)}")
            meta_array = archive["meta"]
            arrays = {name: archive[name] for name in ARRAY_NAMES}
            joints = {name: archive[name] for name in JOINT_ARRAY_NAMES if name in names}
    except DataError:
        raise
    except Exception as exc:  # a damaged member: BadZipFile (CRC), ValueError, zlib.error...
        raise DataError(
            f"{path}: a member of the archive is unreadable, truncated or corrupt "
            f"({type(exc).__name__}: {str(exc)[:200]})"
        ) from None
    if meta_array.shape != () or meta_array.dtype.kind != "U":
        raise DataError(f"{path}: 'meta' is not a JSON string")
    try:
        meta = json.loads(str(meta_array))
    except ValueError as exc:
        raise DataError(f"{path}: 'meta' is not valid JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        found = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise DataError(f"{path}: format is {found!r}, expected {FORMAT_NAME!r}")
    version = meta.get("format_version")
    supported = isinstance(version, int) and not isinstance(version, bool)
    if not supported or not 1 <= version <= FORMAT_VERSION:
        raise DataError(
            f"{path}: format_version {version!r} is not supported (this reader knows 1 to "
            f"{FORMAT_VERSION})"
        )
    metadata = meta.get("metadata", {})
    if not isinstance(metadata, dict) or not isinstance(meta.get("planar", False), bool):
        raise DataError(f"{path}: 'meta' has a malformed 'metadata' or 'planar' entry")
    for name, array in [*arrays.items(), *joints.items()]:
        if name != "joint_names" and array.dtype.kind not in "fiu":
            raise DataError(f"{path}: {name} has dtype {array.dtype}, expected float64")
    missing = [name for name in JOINT_ARRAY_NAMES if name not in joints]
    if joints and missing or version >= 2 and missing:
        raise DataError(f"{path}: format_version {version} file lacks joint array(s) "
                        f"{', '.join(missing)}")
    if joints:
        names = joints.pop("joint_names")
        if names.ndim != 1 or (names.size and names.dtype.kind != "U"):
            raise DataError(f"{path}: joint_names is not a 1-d string array")
        joints["joint_names"] = tuple(str(n) for n in names)
    try:
        return Trajectory(
            traj_id=path.stem,
            planar=meta.get("planar", False),
            source=str(meta.get("source", "")),
            metadata=metadata,
            **arrays,
            **joints,
        )
    except DataError as exc:
        raise DataError(f"{path}: {exc}") from None


def save_trajectories(
    directory: str | os.PathLike[str],
    trajs: Mapping[str, Trajectory] | Iterable[Trajectory],
) -> list[Path]:
    """Write several trajectories as ``<directory>/<id>.npz`` (the directory is created).

    Parameters
    ----------
    directory : path-like
        Destination directory.
    trajs : mapping of str -> Trajectory, or iterable of Trajectory
        Keys (or each ``traj_id``) become the file stems.

    Returns
    -------
    list of Path
        The files written, in input order.

    Raises
    ------
    ParameterError
        An id is not usable as a file name or appears twice.
    DataError
        A trajectory cannot be written.
    """
    return save_each(directory, trajs, ".npz", save_trajectory)


def save_each(directory: str | os.PathLike[str],
              trajs: Mapping[str, Trajectory] | Iterable[Trajectory], suffix: str,
              save: Callable[[Path, Trajectory], None]) -> list[Path]:
    """Write ``<directory>/<id><suffix>`` with ``save(path, trajectory)`` for each one, after
    checking every id (usable as a file name, not repeated) before anything is written;
    returns the paths. Shared by the NPZ and CSV writers."""
    directory = Path(directory)
    items = list(trajs.items()) if isinstance(trajs, Mapping) else [
        (getattr(t, "traj_id", None), t) for t in trajs
    ]
    seen: set[str] = set()
    for traj_id, _ in items:
        _check_id(traj_id)
        if traj_id in seen:
            raise ParameterError(f"trajectory id {traj_id!r} appears twice")
        seen.add(traj_id)
    if directory.exists() and not directory.is_dir():
        raise DataError(f"{directory}: not a directory")
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for traj_id, traj in items:
        target = directory / f"{traj_id}{suffix}"
        save(target, traj)
        written.append(target)
    return written




def load_trajectories(directory: str | os.PathLike[str]) -> dict[str, Trajectory]:
    """Read every ``*.npz`` trajectory in a directory, ordered by numeric id then name.

    Parameters
    ----------
    directory : path-like
        A directory written by :func:`save_trajectories`.

    Returns
    -------
    dict of str -> Trajectory
        Keyed by file stem.

    Raises
    ------
    DataError
        Missing or empty directory, or any bad file.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise DataError(f"{directory}: no such directory")
    files = recording_files(directory, ".npz")
    if not files:
        raise DataError(f"{directory}: no .npz trajectory files found")
    return {p.stem: load_trajectory(p) for p in files}
