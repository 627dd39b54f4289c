"""Recognise a data set on disk, load its trajectories, and summarise it.

Formats: ``"contactnets"`` (a directory holding ``tosses/*.pt``, the ``tosses`` directory
itself, or one ``.pt`` file), ``"mcube"`` (a directory holding ``data_ellipse.mat``) and
``"npz"`` (a directory of residualsim ``*.npz`` trajectories, or one such file).

First contact (reported by :func:`describe`): the first sample at which the lowest corner
of the cube, corners at (+-h, +-h, +-h) in the body frame, is at most
:data:`CONTACT_TOLERANCE_M` = 5 mm above the table z = 0.  Why 5 mm: at rest the recorded
tosses put the lowest corner 0.9 to 3.2 mm BELOW the table (centre at about 0.98
half-widths), and the deepest penetration in a toss is 2 to 5.9 mm; the tosses start with
the lowest corner 15 to 172 mm up.  With 5 mm every one of the 400 tosses has a contact,
at sample 4 to 37 (27 to 250 ms).  Only cube trajectories (``metadata["half_width_m"]``)
get a first-contact time.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from residualsim.errors import DataError
from residualsim.data import contactnets, mcube, npz
from residualsim.data.trajectory import Trajectory

__all__ = [
    "resolve_data",
    "DEFAULT_SETS",
    "FORMATS",
    "CONTACT_TOLERANCE_M",
    "detect_format",
    "load_trajectories",
    "first_contact_index",
    "describe",
    "format_description",
]

#: The formats :func:`detect_format` recognises.
FORMATS = ("contactnets", "mcube", "npz")
#: Height of the lowest cube corner above the table that counts as contact, m.
CONTACT_TOLERANCE_M = 0.005

_CORNER_SIGNS = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], float)


def _format_of_dir(path: Path) -> str | None:
    if (path / "tosses").is_dir() and any((path / "tosses").glob("*.pt")):
        return "contactnets"
    if (path / "data_ellipse.mat").is_file():
        return "mcube"
    if any(path.glob("*.pt")):
        return "contactnets"
    if any(path.glob("*.npz")):
        return "npz"
    return None


def detect_format(path: str | os.PathLike[str]) -> str:
    """The format of a data set.

    Parameters
    ----------
    path : path-like
        A directory (or a single ``.pt`` / ``.npz`` file).

    Returns
    -------
    {"contactnets", "mcube", "npz"}

    Raises
    ------
    DataError
        The path does not exist or holds none of the formats; sub-directories that do are
        suggested.
    """
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no such file or directory")
    if path.is_file():
        found = {".pt": "contactnets", ".npz": "npz"}.get(path.suffix)
        if found is None:
            raise DataError(f"{path}: not a .pt or .npz file")
        return found
    found = _format_of_dir(path)
    if found is not None:
        return found
    hints = sorted(p.name for p in path.iterdir() if p.is_dir() and _format_of_dir(p))
    hint = f"; try {', '.join(hints)}" if hints else ""
    raise DataError(
        f"{path}: not a recognised data set (expected tosses/*.pt, data_ellipse.mat or "
        f"*.npz){hint}"
    )


def load_trajectories(path: str | os.PathLike[str]) -> dict[str, Trajectory]:
    """Load every trajectory of a ContactNets or npz data set.

    Parameters
    ----------
    path : path-like
        A directory or a single file, see :func:`detect_format`.

    Returns
    -------
    dict of str -> Trajectory
        In id order.

    Raises
    ------
    DataError
        Unknown format, the planar impact set (not trajectories), or a bad file.
    """
    path = Path(path)
    kind = detect_format(path)
    if kind == "mcube":
        raise DataError(
            f"{path}: the planar impact set holds single impacts, not trajectories; "
            "use load_impacts"
        )
    if path.is_file():
        traj = contactnets.load_toss(path) if kind == "contactnets" else npz.load_trajectory(path)
        return {traj.traj_id: traj}
    return contactnets.load_tosses(path) if kind == "contactnets" else npz.load_trajectories(path)


def first_contact_index(
    traj: Trajectory, half_width_m: float, tolerance_m: float = CONTACT_TOLERANCE_M
) -> int | None:
    """First sample at which the lowest corner of a cube is near the table z = 0.

    Parameters
    ----------
    traj : Trajectory
        A 3D cube trajectory (world frame, table at z = 0).
    half_width_m : float
        Half the cube's side, m; corners at (+-h, +-h, +-h) in the body frame.
    tolerance_m : float
        Contact when the lowest corner is at most this high, m.

    Returns
    -------
    int or None
        The sample index, or None if the cube never comes that close.
    """
    rotations = contactnets.quaternion_to_matrix(traj.quat_wxyz)  # (T, 3, 3)
    corner_z = np.einsum("tj,kj->tk", rotations[:, 2, :], _CORNER_SIGNS * half_width_m)
    lowest = traj.positions_m[:, 2] + corner_z.min(axis=1)
    hits = np.flatnonzero(lowest <= tolerance_m)
    return int(hits[0]) if hits.size else None


def _stats(values: np.ndarray, total: bool = False) -> dict[str, float]:
    values = np.asarray(values, dtype=np.float64)
    out = {
        "min": float(values.min()),
        "median": float(np.median(values)),
        "max": float(values.max()),
    }
    if total:
        out["total"] = float(values.sum())
    return out


def _describe_trajectories(path: Path, kind: str) -> dict[str, Any]:
    trajs = list(load_trajectories(path).values())
    samples = np.array([t.n_samples for t in trajs])
    rates = np.array([t.rate_hz for t in trajs])
    result: dict[str, Any] = {
        "path": str(path),
        "format": kind,
        "count": len(trajs),
        "planar": int(sum(t.planar for t in trajs)),
        "samples": {k: int(v) for k, v in _stats(samples).items()},
        "duration_s": _stats(np.array([t.duration_s for t in trajs]), total=True),
        "rate_hz": {
            "median": float(np.median(rates)),
            "all_equal": bool(np.allclose(rates, rates[0], rtol=1e-6, atol=0.0)),
        },
    }
    contact_times = []
    n_cubes = 0
    shares = np.zeros(3)  # seconds in free flight, contact phases, rest
    for traj in trajs:
        half_width = traj.metadata.get("half_width_m")
        if traj.planar or not isinstance(half_width, (int, float)):
            continue
        n_cubes += 1
        index = first_contact_index(traj, float(half_width))
        if index is not None:
            contact_times.append(traj.times_s[index] - traj.times_s[0])
        shares += _phase_seconds(traj, index)
    contact: dict[str, Any] = {"tolerance_m": CONTACT_TOLERANCE_M, "count": len(contact_times)}
    contact["without_contact"] = n_cubes - len(contact_times)
    if contact_times:
        contact.update(_stats(np.array(contact_times)))
    result["first_contact_s"] = contact if n_cubes else None
    result["time_share"] = (dict(zip(("flight", "contact", "rest"),
                                     (shares / shares.sum()).round(4).tolist()))
                            if n_cubes and shares.sum() > 0 else None)
    return result


#: A recording is at rest from the first sample after which its speed stays below these.
REST_SPEED_MPS, REST_SPIN_RADPS = 0.02, 0.2


def _phase_seconds(traj: Trajectory, first_contact: int | None) -> np.ndarray:
    """Seconds of a cube recording in free flight (before its first contact), at rest (from
    the sample after its last one moving faster than ``REST_SPEED_MPS`` or
    ``REST_SPIN_RADPS``) and in the contact phases between (bounces, tumbling, sliding)."""
    times = traj.times_s - traj.times_s[0]
    if first_contact is None:
        return np.array([times[-1], 0.0, 0.0])
    moving = np.flatnonzero(
        (np.linalg.norm(traj.linear_velocity_mps, axis=1) > REST_SPEED_MPS)
        | (np.linalg.norm(traj.angular_velocity_world_radps, axis=1) > REST_SPIN_RADPS))
    rest_from = min(max(moving[-1] + 1 if moving.size else 0, first_contact), len(times) - 1)
    flight, rest = times[first_contact], times[-1] - times[rest_from]
    return np.array([flight, times[-1] - flight - rest, rest])


def _describe_impacts(path: Path) -> dict[str, Any]:
    impacts = mcube.load_impacts(path)
    speed = np.linalg.norm(impacts.pre_state[:, 3:5], axis=1)
    residual = np.abs(mcube.rigid_body_residual(impacts))
    return {
        "path": str(path),
        "format": "mcube",
        "count": impacts.n_impacts,
        "rate_hz": mcube.SAMPLE_RATE_HZ,
        "convention": impacts.convention,
        "models": list(mcube.MODEL_NAMES),
        "pre_impact_speed_mps": _stats(speed),
        "pre_impact_angular_speed_radps": _stats(np.abs(impacts.pre_state[:, 5])),
        "rigid_body_residual_median_m2ps": float(np.median(residual)),
    }


def describe(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A JSON-serialisable summary of a data set (``residualsim data info PATH``).

    Parameters
    ----------
    path : path-like
        Any path :func:`detect_format` accepts.

    Returns
    -------
    dict
        Trajectory sets: ``format``, ``count``, ``planar`` (how many), ``samples``
        (min/median/max), ``duration_s`` (min/median/max/total, s), ``rate_hz`` (median Hz,
        ``all_equal``), ``first_contact_s`` (min/median/max s after the first sample, with
        ``tolerance_m``, ``count``, ``without_contact``; None when no trajectory is a cube).
        The planar impact set: ``count``, ``rate_hz``, ``convention``, ``models``,
        ``pre_impact_speed_mps`` and ``pre_impact_angular_speed_radps``
        (min/median/max), ``rigid_body_residual_median_m2ps``.

    Raises
    ------
    DataError
        Unknown format or a bad file.
    """
    path = Path(path)
    kind = detect_format(path)
    return _describe_impacts(path) if kind == "mcube" else _describe_trajectories(path, kind)


def _format_value(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {_format_value(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_format_value(v) for v in value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if value is None:
        return "-"
    return str(value)


def format_description(description: dict[str, Any]) -> str:
    """Human-readable lines of a :func:`describe` result, keys aligned.

    Parameters
    ----------
    description : dict
        As returned by :func:`describe`.

    Returns
    -------
    str
        One ``key  value`` line per entry; nested dicts on one line as ``name value``
        pairs; floats to 4 significant digits.
    """
    width = max((len(str(k)) for k in description), default=0)
    return "\n".join(f"{str(k):<{width}}  {_format_value(v)}" for k, v in description.items())


#: Where each built-in scene's real set lives below ``$RESIDUALSIM_DATA``.
DEFAULT_SETS = {"cube": "contactnets-cube", "planar-ellipse": "planar-impact-ellipse"}


def resolve_data(path: str | None, scene: str = "cube") -> Path:
    """A data directory from ``--data``, else ``$RESIDUALSIM_DATA/<the scene's set>``.

    A relative ``--data`` that does not exist is also tried below ``$RESIDUALSIM_DATA``.
    """
    root = os.environ.get("RESIDUALSIM_DATA")
    if path:
        candidate = Path(path)
        if not candidate.exists() and root and (Path(root) / path).exists():
            candidate = Path(root) / path
        if not candidate.exists():
            raise DataError(f"{candidate}: no such data directory")
        return candidate
    if root and scene in DEFAULT_SETS and (Path(root) / DEFAULT_SETS[scene]).exists():
        return Path(root) / DEFAULT_SETS[scene]
    raise DataError("no data given: pass --data DIR or set RESIDUALSIM_DATA to the folder "
                    "holding contactnets-cube/ and planar-impact-ellipse/")
