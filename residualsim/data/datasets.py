"""Recognise a data set on disk, load its trajectories, and summarise it.

Formats: ``"contactnets"`` (a directory holding ``tosses/*.pt``, the ``tosses`` directory
itself, or one ``.pt`` file), ``"mcube"`` (a directory holding ``data_ellipse.mat``),
``"npz"`` (a directory of residualsim ``*.npz`` trajectories, or one such file) and ``"csv"``
(a directory of plain ``<id>.csv`` recordings, :mod:`residualsim.data.csv`, or one such
file). A directory holding more than one of these (``.csv`` beside ``.npz``, say) is
refused with what was found, before anything is read.

First contact (reported by :func:`describe`): the first sample at which the lowest corner
of the cube, corners at (+-h, +-h, +-h) in the body frame, is at most
:data:`CONTACT_TOLERANCE_M` = 5 mm above the table z = 0.  Why 5 mm: at rest the recorded
tosses put the lowest corner 0.9 to 3.2 mm BELOW the table (centre at about 0.98
half-widths), and the deepest penetration in a toss is 2 to 5.9 mm; the tosses start with
the lowest corner 15 to 172 mm up.  With 5 mm every one of the 400 tosses has a contact,
at sample 4 to 37 (27 to 250 ms).  Only cube trajectories (``metadata["half_width_m"]``)
are tested this way. Other free bodies (their size unknown) get the first sample whose
acceleration departs from gravity (:func:`residualsim.data.velocities.first_contact_by_acceleration`:
a 60 ms local quadratic, more than 7 m/s² from 9.81 m/s² along -z); planar ones get none.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from residualsim.errors import DataError
from residualsim.data import contactnets, csv, mcube, npz
from residualsim.data.duplicates import duplicate_groups, duplicates_note
from residualsim.data.splits import split_ids, split_rule
from residualsim.data.trajectory import Trajectory
from residualsim.data.velocities import CONTACT_ACCELERATION_MPS2, first_contact_by_acceleration

__all__ = [
    "resolve_data",
    "DEFAULT_SETS",
    "FORMATS",
    "CONTACT_TOLERANCE_M",
    "detect_format",
    "load_trajectories",
    "first_contact_index",
    "rest_index",
    "describe",
    "format_description",
]

#: The formats :func:`detect_format` recognises.
FORMATS = ("contactnets", "mcube", "npz", "csv")
#: Height of the lowest cube corner above the table that counts as contact, m.
CONTACT_TOLERANCE_M = 0.005

_CORNER_SIGNS = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], float)


def _formats_in_dir(path: Path) -> dict[str, str]:
    """Each format found in a directory -> what shows it (``"12 .csv files"``)."""
    found = {}
    if (path / "tosses").is_dir() and any((path / "tosses").glob("*.pt")):
        found["contactnets"] = "tosses/*.pt"
    if (path / "data_ellipse.mat").is_file():
        found["mcube"] = "data_ellipse.mat"
    for kind, suffix in (("contactnets", ".pt"), ("npz", ".npz"), ("csv", ".csv")):
        count = sum(1 for p in path.glob(f"*{suffix}") if p.is_file())
        if count:
            found.setdefault(kind, f"{count} {suffix} file{'s' if count > 1 else ''}")
    return found


def _format_of_dir(path: Path) -> str | None:
    found = _formats_in_dir(path)
    if len(found) > 1:
        listing = "; ".join(f"{kind}: {what}" for kind, what in found.items())
        raise DataError(f"{path}: mixes data formats ({listing}); keep one format per "
                        "directory")
    return next(iter(found), None)


def detect_format(path: str | os.PathLike[str]) -> str:
    """The format of a data set.

    Parameters
    ----------
    path : path-like
        A directory (or a single ``.pt`` / ``.npz`` file).

    Returns
    -------
    {"contactnets", "mcube", "npz", "csv"}

    Raises
    ------
    DataError
        The path does not exist, holds none of the formats (sub-directories that do are
        suggested) or more than one (each is listed).
    """
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no such file or directory")
    if path.is_file():
        found = {".pt": "contactnets", ".npz": "npz", ".csv": "csv"}.get(path.suffix)
        if found is None:
            raise DataError(f"{path}: not a .pt or .npz file or a .csv recording")
        return found
    found = _format_of_dir(path)
    if found is not None:
        return found
    hints = sorted(p.name for p in path.iterdir() if p.is_dir() and _formats_in_dir(p))
    hint = f"; try {', '.join(hints)}" if hints else ""
    raise DataError(
        f"{path}: not a recognised data set (expected tosses/*.pt, data_ellipse.mat, "
        f"*.npz or *.csv){hint}"
    )


def load_trajectories(path: str | os.PathLike[str], *, planar: bool | None = None,
                      joint_names: Sequence[str] | None = None,
                      com_offset_base_m: np.ndarray | None = None,
                      rate_hz: float | None = None) -> dict[str, Trajectory]:
    """Load every trajectory of a ContactNets, npz or CSV data set.

    Parameters
    ----------
    path : path-like
        A directory or a single file, see :func:`detect_format`.
    planar : bool, optional
        The scene's kind; when given, every trajectory must be planar (True) or free
        (False). CSV files are read with the matching columns.
    joint_names : sequence of str, optional
        The scene's non-fixed joints in URDF order; when given, every trajectory must have
        exactly these joints (CSV columns are put in this order).
    com_offset_base_m : ndarray of shape (3,), optional
        Centre of mass in the base link frame, m, for CSV recordings whose velocities are
        estimated (:func:`residualsim.data.csv.load_csv_trajectory`).
    rate_hz : float, optional
        CSV recordings: the rate (Hz) to resample to, e.g. a model's dt; the CLI's
        ``--rate-hz`` wins over it (:mod:`residualsim.data.timebase`). Other formats are
        uniform already and loaded as they are.

    Returns
    -------
    dict of str -> Trajectory
        In id order.

    Raises
    ------
    DataError
        Unknown or mixed format, the planar impact set (not trajectories), a bad file, or
        a trajectory that does not match ``planar`` or ``joint_names`` (naming its file).
    """
    path = Path(path)
    kind = detect_format(path)
    if kind == "mcube":
        raise DataError(
            f"{path}: the planar impact set holds single impacts, not trajectories; "
            "use load_impacts"
        )
    if kind == "csv":
        options = {"planar": planar, "joint_names": joint_names,
                   "com_offset_base_m": com_offset_base_m, "rate_hz": rate_hz}
        if path.is_file():
            traj = csv.load_csv_trajectory(path, **options)
            return {traj.traj_id: traj}
        return csv.load_csv_trajectories(path, **options)
    if path.is_file():
        traj = contactnets.load_toss(path) if kind == "contactnets" else npz.load_trajectory(path)
        trajs = {traj.traj_id: traj}
    else:
        trajs = (contactnets.load_tosses(path) if kind == "contactnets"
                 else npz.load_trajectories(path))
    for traj in trajs.values():
        where = traj.source or f"{path}: trajectory {traj.traj_id!r}"
        if planar is not None and traj.planar != planar:
            raise DataError(f"{where}: a {'planar' if traj.planar else 'free'} recording, the "
                            f"scene is {'planar' if planar else 'free'}")
        if joint_names is not None and traj.joint_names != tuple(joint_names):
            raise DataError(f"{where}: joints {list(traj.joint_names)}, the scene's are "
                            f"{list(joint_names)}")
    return trajs


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


def _describe_trajectories(path: Path, kind: str, **options: Any) -> dict[str, Any]:
    loaded = load_trajectories(path, **options)
    trajs = list(loaded.values())
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
    names = {t.joint_names for t in trajs}
    result["joints"] = {"count": trajs[0].n_joints, "names": list(trajs[0].joint_names),
                        "all_equal": len(names) == 1}
    kinds = [str(t.metadata.get("velocities", "recorded")) for t in trajs]
    result["velocities"] = {k: kinds.count(k) for k in ("recorded", "estimated")}
    contact_times = []
    n_free = 0
    criteria = set()
    shares = np.zeros(3)  # seconds in free flight, contact phases, rest
    for traj in trajs:
        if traj.planar:
            continue
        half_width = traj.metadata.get("half_width_m")
        if isinstance(half_width, (int, float)):
            index = first_contact_index(traj, float(half_width))
            criteria.add("lowest cube corner within tolerance_m of the table")
        else:
            index = first_contact_by_acceleration(traj.times_s, traj.positions_m)
            criteria.add("acceleration departs from gravity by more than threshold_mps2")
        n_free += 1
        if index is not None:
            contact_times.append(traj.times_s[index] - traj.times_s[0])
        shares += _phase_seconds(traj, index)
    result["reading"] = READING_RULES
    result["files"] = [file_summary(t) for t in trajs]
    contact: dict[str, Any] = {"tolerance_m": CONTACT_TOLERANCE_M, "count": len(contact_times)}
    contact["without_contact"] = n_free - len(contact_times)
    contact["criteria"] = sorted(criteria)
    contact["threshold_mps2"] = CONTACT_ACCELERATION_MPS2
    if contact_times:
        contact.update(_stats(np.array(contact_times)))
    result["first_contact_s"] = contact if n_free else None
    result["time_share"] = (dict(zip(("flight", "contact", "rest"),
                                     (shares / shares.sum()).round(4).tolist()))
                            if n_free and shares.sum() > 0 else None)
    parts = split_ids(list(loaded))
    result["splits"] = {"rule": split_rule(None, None), **{k: len(v) for k, v in parts.items()}}
    groups = duplicate_groups(loaded)
    if groups:  # copies under other names (issue 67): in the summary and on stderr
        note = duplicates_note(groups, {k: set(v) for k, v in parts.items()})
        result["duplicates"] = {"groups": groups, "note": note}
        logging.getLogger(__name__).warning("%s: %s", path, note)
    return result


#: How recordings are read, as ``data info`` states it (README "Your own object" has more).
READING_RULES = ("CSV: comma/semicolon/tab/whitespace separators, # comments, BOM, CRLF; "
                 "times need only increase; files not uniform (1e-6) are resampled onto "
                 "their nominal grid from t = 0 (positions linear, quaternions slerp), a "
                 "folder of several rates to --rate-hz, else a model's or calibration's, "
                 "else its most common rate; gaps > 3 periods reported")


def file_summary(traj: Trajectory) -> dict[str, Any]:
    """One recording's time base for ``data info``: ``id``, the recorded nominal
    ``rate_hz``, ``jitter_ms`` (std of the steps' deviations from whole periods) and
    ``jitter_pct`` (that as a share of the period, %; a warning above 10 %),
    ``dropped`` samples, ``long_gaps`` (more than 3 periods: ``"<periods>@<t s>"``),
    ``resampled_hz`` (None: read as recorded) and ``samples`` as loaded."""
    base = traj.metadata.get("time_base")
    if base is None:  # read as recorded: uniform
        base = {"recorded_rate_hz": traj.rate_hz, "jitter_s": 0.0, "dropped_samples": 0,
                "long_gaps": [], "resampled_hz": None}
    return {"id": traj.traj_id, "rate_hz": round(float(base["recorded_rate_hz"]), 4),
            "jitter_ms": round(1000 * float(base["jitter_s"]), 4),
            "jitter_pct": round(100 * float(base.get("jitter_share", 0.0)), 1),
            "dropped": int(base["dropped_samples"]),
            "long_gaps": [f"{g['periods']}@{g['t_s']:.3f}s" for g in base["long_gaps"]],
            "resampled_hz": base["resampled_hz"], "samples": traj.n_samples}


#: A recording is at rest from the first sample after which its speed stays below these.
REST_SPEED_MPS, REST_SPIN_RADPS = 0.02, 0.2


def rest_index(traj: Trajectory, first_contact: int) -> int:
    """First sample of a cube recording's rest: the one after its last sample moving faster
    than ``REST_SPEED_MPS`` (m/s) or spinning faster than ``REST_SPIN_RADPS`` (rad/s), not
    before ``first_contact`` and at most the last sample."""
    moving = np.flatnonzero(
        (np.linalg.norm(traj.linear_velocity_mps, axis=1) > REST_SPEED_MPS)
        | (np.linalg.norm(traj.angular_velocity_world_radps, axis=1) > REST_SPIN_RADPS))
    return min(max(moving[-1] + 1 if moving.size else 0, first_contact), traj.n_samples - 1)


def _phase_seconds(traj: Trajectory, first_contact: int | None) -> np.ndarray:
    """Seconds of a cube recording in free flight (before its first contact), at rest (from
    the sample after its last one moving faster than ``REST_SPEED_MPS`` or
    ``REST_SPIN_RADPS``) and in the contact phases between (bounces, tumbling, sliding)."""
    times = traj.times_s - traj.times_s[0]
    if first_contact is None:
        return np.array([times[-1], 0.0, 0.0])
    rest_from = rest_index(traj, first_contact)
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


def describe(path: str | os.PathLike[str], **options: Any) -> dict[str, Any]:
    """A JSON-serialisable summary of a data set (``residualsim data info PATH``).

    Parameters
    ----------
    path : path-like
        Any path :func:`detect_format` accepts.
    **options
        For trajectory sets, passed to :func:`load_trajectories` (``planar``,
        ``joint_names``, ``com_offset_base_m``: the scene's facts).

    Returns
    -------
    dict
        Trajectory sets: ``format``, ``count``, ``planar`` (how many), ``samples``
        (min/median/max), ``duration_s`` (min/median/max/total, s), ``rate_hz`` (median Hz,
        ``all_equal``), ``joints`` (``count`` and ``names`` of the first trajectory's,
        ``all_equal``), ``velocities`` (how many ``recorded`` and ``estimated``),
        ``reading`` (the reading rules, one line), ``split`` (train/validation/test
        sizes of :func:`~residualsim.data.splits.split_ids` at the default fractions),
        ``files`` (one :func:`file_summary` per recording: recorded rate, jitter, dropped
        samples, long gaps, resampled rate),
        ``first_contact_s`` (min/median/max s after the first sample, with ``count``,
        ``without_contact``, the ``criteria`` used, ``tolerance_m`` of the cube's and
        ``threshold_mps2`` of the others'; None when every trajectory is planar) and
        ``time_share`` (flight, contact, rest) of the free ones, and ``splits``: the sizes
        of the default hash split (``train``, ``validation``, ``test``, with its ``rule``);
        ``duplicates`` (only when some recordings repeat others:
        :func:`~residualsim.data.duplicates.duplicate_groups`, ``groups`` and a ``note``).
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
    if kind == "mcube":
        return _describe_impacts(path)
    return _describe_trajectories(path, kind, **options)


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
    lines = [f"{str(k):<{width}}  {_format_value(v)}" for k, v in description.items()
             if k != "files"]
    files = description.get("files")
    if files:
        keys = list(files[0])
        cells = [[_format_value(f.get(k)) or "-" for k in keys] for f in files]
        widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
        lines.append("per file:")
        lines += ["  " + "  ".join(f"{v:<{w}}" for v, w in zip(row, widths)).rstrip()
                  for row in [keys, *cells]]
    return "\n".join(lines)


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
        if not (candidate.is_dir() or candidate.is_file()):
            raise DataError(f"{candidate}: not a data directory or a regular file (a device, "
                            "FIFO or socket)")
        return candidate
    if root and scene in DEFAULT_SETS and (Path(root) / DEFAULT_SETS[scene]).exists():
        return Path(root) / DEFAULT_SETS[scene]
    raise DataError("no data given: pass --data DIR or set RESIDUALSIM_DATA to the folder "
                    "holding contactnets-cube/ and planar-impact-ellipse/")
