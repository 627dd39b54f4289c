"""Recordings of an articulated scene: joint angles and torques of an arm at a fixed rate.

One ``<id>.npz`` per recording, written atomically and read with ``allow_pickle=False``:

* ``times_s``              (T,)       seconds, strictly increasing, uniform.
* ``joint_angles_rad``     (T, J)     measured joint angles at the samples, radians.
* ``joint_torques_nm``     (T-1, J)   measured joint torque over each sample period, N m
  (the mean over [t_k, t_k+1), so that a zero-order-hold replay applies what was measured).
* ``meta``                 0-d unicode array, a JSON object::

    {"format": "residualsim-joint-recording", "format_version": 1, "scene": "arm-loop",
     "joint_names": [...], "source": "...", "metadata": {...}}

``metadata`` holds what the recording knows of itself (for a synthetic one: the generating
loop, the true stiffnesses, the noise and the seed). Anything else raises
:class:`~residualsim.errors.DataError` naming the file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from residualsim.atomic import atomic_open
from residualsim.errors import DataError

__all__ = ["JointRecording", "save_joint_recording", "load_joint_recording",
           "JOINT_FORMAT_NAME"]

#: Value of ``meta["format"]``.
JOINT_FORMAT_NAME = "residualsim-joint-recording"
_VERSION = 1


@dataclass(frozen=True)
class JointRecording:
    """Joint angles (T, J) rad and per-period torques (T-1, J) N m sampled at ``times_s``."""

    rec_id: str
    times_s: np.ndarray
    joint_angles_rad: np.ndarray
    joint_torques_nm: np.ndarray
    scene: str = "arm-loop"
    joint_names: tuple[str, ...] = ()
    source: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = self.source or f"recording {self.rec_id!r}"
        arrays = {}
        for name in ("times_s", "joint_angles_rad", "joint_torques_nm"):
            try:
                array = np.array(getattr(self, name), dtype=np.float64)
            except (TypeError, ValueError) as exc:
                raise DataError(f"{where}: {name} is not numeric ({exc})") from None
            bad = ~np.isfinite(array)
            if bad.any():
                index = int(np.argwhere(bad)[0][0])
                raise DataError(f"{where}: {name} has a NaN or infinite value at sample {index}")
            array.setflags(write=False)
            arrays[name] = array
            object.__setattr__(self, name, array)
        times, angles, torques = arrays.values()
        if times.ndim != 1 or len(times) < 2:
            raise DataError(f"{where}: times_s must be (T,) with T >= 2, got {times.shape}")
        if angles.ndim != 2 or angles.shape[0] != len(times):
            raise DataError(f"{where}: joint_angles_rad has shape {angles.shape}, expected "
                            f"({len(times)}, J)")
        if torques.shape != (len(times) - 1, angles.shape[1]):
            raise DataError(f"{where}: joint_torques_nm has shape {torques.shape}, expected "
                            f"({len(times) - 1}, {angles.shape[1]}): one row per period")
        steps = np.diff(times)
        if (steps <= 0).any():
            raise DataError(f"{where}: times do not increase at sample "
                            f"{int(np.argmax(steps <= 0)) + 1}")
        if np.abs(steps - steps.mean()).max() > 1e-6 * steps.mean() + 1e-9:
            raise DataError(f"{where}: samples are not uniformly spaced "
                            f"({steps.min():.6g} s to {steps.max():.6g} s)")
        if self.joint_names and len(self.joint_names) != angles.shape[1]:
            raise DataError(f"{where}: {len(self.joint_names)} joint names for "
                            f"{angles.shape[1]} joints")

    @property
    def dt_s(self) -> float:
        """Sample period, seconds."""
        return float(self.times_s[1] - self.times_s[0])

    @property
    def n_samples(self) -> int:
        return int(len(self.times_s))

    @property
    def duration_s(self) -> float:
        return float(self.times_s[-1] - self.times_s[0])


def save_joint_recording(recording: JointRecording, directory: str | os.PathLike[str]) -> Path:
    """Write ``<directory>/<rec_id>.npz`` atomically; returns the path."""
    path = Path(directory) / f"{recording.rec_id}.npz"
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"format": JOINT_FORMAT_NAME, "format_version": _VERSION, "scene": recording.scene,
            "joint_names": list(recording.joint_names), "source": recording.source,
            "metadata": recording.metadata}
    with atomic_open(path) as handle:
        np.savez(handle, times_s=recording.times_s, joint_angles_rad=recording.joint_angles_rad,
                 joint_torques_nm=recording.joint_torques_nm, meta=np.array(json.dumps(meta)))
    return path


def load_joint_recording(path: str | os.PathLike[str]) -> JointRecording:
    """Read one joint recording; DataError naming the file if it is not one."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.npz"))
        if len(files) != 1:
            raise DataError(f"{path}: expected one joint recording (.npz) here, found "
                            f"{len(files)}")
        path = files[0]
    try:
        with np.load(path, allow_pickle=False) as archive:
            content = {name: archive[name] for name in archive.files}
    except FileNotFoundError:
        raise DataError(f"{path}: no such recording") from None
    except Exception as exc:  # zipfile, OSError, ValueError: a damaged or foreign file
        raise DataError(f"{path}: not a readable .npz archive ({exc})") from None
    missing = {"times_s", "joint_angles_rad", "joint_torques_nm", "meta"} - set(content)
    if missing:
        raise DataError(f"{path}: not a residualsim joint recording (missing "
                        f"{', '.join(sorted(missing))})")
    try:
        meta = json.loads(str(content["meta"]))
    except ValueError as exc:
        raise DataError(f"{path}: meta is not JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != JOINT_FORMAT_NAME:
        raise DataError(f"{path}: not a residualsim joint recording (format "
                        f"{meta.get('format') if isinstance(meta, dict) else None!r})")
    if meta.get("format_version", 0) > _VERSION:
        raise DataError(f"{path}: format version {meta['format_version']} is newer than this "
                        f"residualsim reads ({_VERSION})")
    return JointRecording(
        rec_id=path.stem, times_s=content["times_s"],
        joint_angles_rad=content["joint_angles_rad"],
        joint_torques_nm=content["joint_torques_nm"], scene=str(meta.get("scene", "")),
        joint_names=tuple(meta.get("joint_names", ())), source=f"{path}",
        metadata=dict(meta.get("metadata", {})))
