"""Reader and writer for the ContactNets cube tosses (``tosses/<id>.pt``).

Upstream format (Pfrommer, Halm, Posa, CoRL 2020): one toss per file, a float64 torch tensor
of shape ``[1, T, 19]`` sampled every 1/148 s, in units of the cube HALF-width
(:data:`CUBE_HALF_WIDTH_M`):

==========  ==============================================================
columns     meaning
==========  ==============================================================
0:3         cube-centre position, half-widths, world frame (table z = 0)
3:7         orientation quaternion (w, x, y, z), body -> world
7:10        linear velocity, half-widths/s, world frame
10:13       angular velocity, rad/s, BODY frame
13:19       zeros (no control input); read, checked finite, then dropped
==========  ==============================================================

:func:`load_toss` returns a :class:`~residualsim.data.trajectory.Trajectory` in metres and
with the angular velocity rotated to the WORLD frame, ``w_world = R(q) w_body``.  The body
frame was verified on the 400 recorded tosses: the relative rotation between consecutive
samples, ``R_k^T R_{k+1}`` as a rotation vector divided by 1/148 s, matches the mean of the
two stored angular velocities to a median of 0.07 rad/s per toss, while the world-frame
reading ``R_{k+1} R_k^T`` misses by 2.0 rad/s.  In free flight (before the lowest corner
comes within 5 mm of the table) ``R w_body`` stays constant to a median 5 % of its norm, as
the angular momentum of a uniform cube must, while the wrong rotation ``R^T w_body`` varies
by 17 %.

:func:`write_toss` writes the same format back (atomically), so converted or simulated
trajectories can be fed to upstream tools.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from residualsim.atomic import atomic_open
from residualsim.errors import DataError, ParameterError
from residualsim.data.listing import recording_files
from residualsim.data.trajectory import QUATERNION_NORM_TOLERANCE, Trajectory

__all__ = [
    "CUBE_HALF_WIDTH_M",
    "SAMPLE_PERIOD_S",
    "SAMPLE_RATE_HZ",
    "N_COLUMNS",
    "COLUMN_GROUPS",
    "load_toss",
    "load_tosses",
    "write_toss",
    "toss_from_array",
    "toss_to_array",
    "quaternion_to_matrix",
]

#: Half the cube's side, metres: the length unit of the upstream files.
CUBE_HALF_WIDTH_M = 0.0524
#: Sample rate of the tracker, Hz.
SAMPLE_RATE_HZ = 148.0
#: Time between samples, seconds.
SAMPLE_PERIOD_S = 1.0 / 148.0
#: Columns per sample in the upstream tensor.
N_COLUMNS = 19
#: (name, first column, end column) of each column group.
COLUMN_GROUPS: tuple[tuple[str, int, int], ...] = (
    ("position", 0, 3),
    ("quaternion", 3, 7),
    ("linear velocity", 7, 10),
    ("angular velocity", 10, 13),
    ("control input", 13, 19),
)


def quaternion_to_matrix(quat_wxyz: np.ndarray) -> np.ndarray:
    """Rotation matrices of unit quaternions.

    Parameters
    ----------
    quat_wxyz : ndarray of shape (..., 4)
        Unit quaternions, w-x-y-z order.

    Returns
    -------
    ndarray of shape (..., 3, 3)
        ``R`` such that ``R @ v_body`` is ``v_body`` expressed in the world frame.
    """
    w, x, y, z = np.moveaxis(np.asarray(quat_wxyz, dtype=np.float64), -1, 0)
    rows = [
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ]
    return np.stack([np.stack(row, axis=-1) for row in rows], axis=-2)


def _group_of(column: int) -> str:
    for name, start, stop in COLUMN_GROUPS:
        if start <= column < stop:
            return f"columns {start}:{stop} ({name})"
    return f"column {column}"


def toss_from_array(array: Any, traj_id: str, source: str) -> Trajectory:
    """Validate one upstream toss array and convert it to a :class:`Trajectory`.

    Parameters
    ----------
    array : array_like of shape (1, T, 19)
        The upstream tensor's values (half-widths, body-frame angular velocity).
    traj_id : str
        Identifier of the toss (the file stem).
    source : str
        Where the array came from; every error message starts with it.

    Returns
    -------
    Trajectory
        Metres, world-frame angular velocity, ``times_s = arange(T) / 148``, unit quaternions.

    Raises
    ------
    DataError
        Wrong type, dtype, shape, fewer than 2 samples, a NaN/inf value (naming the column
        group and the sample) or a quaternion whose norm is off 1 by more than 1e-2.
    """
    if not isinstance(array, np.ndarray):
        raise DataError(f"{source}: contains a {type(array).__name__}, expected a tensor")
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise DataError(f"{source}: has dtype {array.dtype}, expected float64")
    if array.ndim != 3 or array.shape[0] != 1 or array.shape[2] != N_COLUMNS:
        raise DataError(
            f"{source}: has shape {tuple(array.shape)}, expected (1, T, {N_COLUMNS})"
        )
    values = np.asarray(array[0], dtype=np.float64)
    n_samples = values.shape[0]
    if n_samples < 2:
        raise DataError(f"{source}: has {n_samples} sample(s), a toss needs at least 2")
    bad = ~np.isfinite(values)
    if bad.any():
        sample, column = (int(i) for i in np.argwhere(bad)[0])
        raise DataError(
            f"{source}: {values[sample, column]} in {_group_of(column)} at sample {sample}"
        )
    quat = values[:, 3:7]
    norms = np.linalg.norm(quat, axis=1)
    off = np.abs(norms - 1.0) > QUATERNION_NORM_TOLERANCE
    if off.any():
        sample = int(np.argmax(off))
        raise DataError(
            f"{source}: columns 3:7 (quaternion) have norm {norms[sample]:.4g} at sample "
            f"{sample}, expected 1 (tolerance {QUATERNION_NORM_TOLERANCE})"
        )
    quat = quat / norms[:, None]
    omega_world = np.einsum("tij,tj->ti", quaternion_to_matrix(quat), values[:, 10:13])
    return Trajectory(
        traj_id=traj_id,
        times_s=np.arange(n_samples) * SAMPLE_PERIOD_S,
        positions_m=values[:, 0:3] * CUBE_HALF_WIDTH_M,
        quat_wxyz=quat,
        linear_velocity_mps=values[:, 7:10] * CUBE_HALF_WIDTH_M,
        angular_velocity_world_radps=omega_world,
        planar=False,
        source=source,
        metadata={
            "format": "contactnets",
            "object": "cube",
            "half_width_m": CUBE_HALF_WIDTH_M,
            "rate_hz": SAMPLE_RATE_HZ,
        },
    )


def toss_to_array(traj: Trajectory) -> np.ndarray:
    """The upstream ``(1, T, 19)`` float64 array of a trajectory; see :func:`toss_from_array`.

    Parameters
    ----------
    traj : Trajectory
        Sampled every 1/148 s (the format stores no times; the start time is dropped).

    Returns
    -------
    ndarray of shape (1, T, 19)
        Half-widths, body-frame angular velocity, zero control columns.

    Raises
    ------
    DataError
        If ``traj`` is not a Trajectory or is not sampled at 148 Hz.
    """
    if not isinstance(traj, Trajectory):
        raise DataError(f"expected a Trajectory, got {type(traj).__name__}")
    steps = np.diff(traj.times_s)
    if not np.allclose(steps, SAMPLE_PERIOD_S, rtol=1e-6, atol=0.0):
        raise DataError(
            f"{traj.source or traj.traj_id}: times are not sampled every 1/148 s "
            f"(steps {steps.min():.6g} to {steps.max():.6g} s); the ContactNets format "
            "stores no times"
        )
    rotations = quaternion_to_matrix(traj.quat_wxyz)
    omega_body = np.einsum("tji,tj->ti", rotations, traj.angular_velocity_world_radps)
    out = np.zeros((1, traj.n_samples, N_COLUMNS), dtype=np.float64)
    out[0, :, 0:3] = traj.positions_m / CUBE_HALF_WIDTH_M
    out[0, :, 3:7] = traj.quat_wxyz
    out[0, :, 7:10] = traj.linear_velocity_mps / CUBE_HALF_WIDTH_M
    out[0, :, 10:13] = omega_body
    return out


def load_toss(path: str | os.PathLike[str]) -> Trajectory:
    """Read one ``tosses/<id>.pt`` file.

    Parameters
    ----------
    path : path-like
        The ``.pt`` file; its stem becomes ``traj_id`` and ``str(path)`` the ``source``.

    Returns
    -------
    Trajectory
        Positions m and velocities m/s in the world frame (table z = 0, gravity -z),
        angular velocity rad/s in the WORLD frame, ``times_s = arange(T) / 148``.

    Raises
    ------
    DataError
        Missing, truncated or corrupt file, or any problem :func:`toss_from_array` reports;
        the message starts with the path.
    """
    import torch

    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises RuntimeError, UnpicklingError, EOFError, ...
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise DataError(
            f"{path}: not a readable torch file, truncated or corrupt "
            f"({type(exc).__name__}: {reason[:200]})"
        ) from None
    if isinstance(loaded, torch.Tensor):
        if loaded.is_complex() or loaded.dtype == torch.bool or loaded.layout != torch.strided:
            raise DataError(
                f"{path}: has a {loaded.dtype} {loaded.layout} tensor, expected float64"
            )
        loaded = loaded.detach().to(torch.float64).numpy()
    return toss_from_array(loaded, traj_id=path.stem, source=str(path))


def _toss_dir(path: Path) -> Path:
    if not path.exists():
        raise DataError(f"{path}: no such directory")
    if not path.is_dir():
        raise DataError(f"{path}: not a directory")
    return path / "tosses" if (path / "tosses").is_dir() else path


def _id_key(traj_id: str) -> tuple[int, int, str]:
    return (0, int(traj_id), "") if traj_id.isdigit() else (1, 0, traj_id)


def load_tosses(
    path: str | os.PathLike[str],
    ids: Iterable[str | int] | None = None,
    limit: int | None = None,
) -> dict[str, Trajectory]:
    """Read a set of tosses, ordered by numeric id.

    Parameters
    ----------
    path : path-like
        The set directory (holding ``tosses/``) or the ``tosses`` directory itself.
    ids : iterable of str or int, optional
        Only these tosses (each must exist); default all ``*.pt`` files.
    limit : int, optional
        Keep at most the first ``limit`` ids in numeric order.

    Returns
    -------
    dict of str -> Trajectory
        Keyed by id, in numeric id order.

    Raises
    ------
    DataError
        Missing or empty directory, a requested id without a file, or a bad file.
    ParameterError
        ``limit`` is not an int >= 0.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ParameterError(f"limit must be an int >= 0 or None, got {limit!r}")
    directory = _toss_dir(Path(path))
    if ids is None:
        wanted = [p.stem for p in recording_files(directory, ".pt")]
        if not wanted:
            raise DataError(f"{directory}: no .pt toss files found")
    else:
        wanted = list(dict.fromkeys(str(i) for i in ids))
        for traj_id in wanted:
            if not (directory / f"{traj_id}.pt").is_file():
                raise DataError(f"{directory / f'{traj_id}.pt'}: no such file (requested id)")
    wanted.sort(key=_id_key)
    if limit is not None:
        wanted = wanted[:limit]
    return {traj_id: load_toss(directory / f"{traj_id}.pt") for traj_id in wanted}


def write_toss(path: str | os.PathLike[str], traj: Trajectory) -> None:
    """Write a trajectory in the upstream format, atomically.

    The tensor goes to a temporary file in the destination directory, which then replaces
    ``path`` (``os.replace``), so readers never see a half-written file.

    Parameters
    ----------
    path : path-like
        Destination ``.pt`` file; its directory must exist.
    traj : Trajectory
        Sampled every 1/148 s; see :func:`toss_to_array`.

    Raises
    ------
    DataError
        The trajectory cannot be stored in this format or the directory does not exist.
    """
    import torch

    path = Path(path)
    array = toss_to_array(traj)
    if not path.parent.is_dir():
        raise DataError(f"{path}: directory {path.parent} does not exist")
    with atomic_open(path) as handle:
        torch.save(torch.from_numpy(array), handle)
