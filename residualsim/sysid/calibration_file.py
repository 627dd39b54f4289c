"""A calibration folder read back: what later stages take of it.

``summary.json`` (format :data:`SUMMARY_FORMAT`, written by
:func:`residualsim.sysid.calibrate.calibrate`) holds the point parameters, the settings
they were fitted at and the diagnostics; :func:`load_calibration` reads it into a
:class:`Calibration`, :func:`engine_from_option` turns a ``--params`` value (values, a JSON
file or such a folder) into engine parameters and their substep count.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from residualsim.atomic import path_from_file, read_json
from residualsim.errors import DataError
from residualsim.sim.scenes import (EngineParams, Scene, is_scene_path, same_scene,
                                    scene_reference)
from residualsim.sim.scenes.body import BodyParams
from residualsim.sim.scenes.params import ObjectParams

__all__ = ["SUMMARY_FORMAT", "Calibration", "is_calibration", "load_calibration",
           "calibration_rate_hz", "engine_from_option"]

#: Format tag of ``summary.json``.
SUMMARY_FORMAT = "residualsim.calibration/1"

@dataclass(frozen=True)
class Calibration:
    """A calibration as later stages use it: point parameters and the settings they hold at.

    ``params`` are full engine parameters (uncalibrated ones at their base values);
    ``substeps`` the internal steps per recorded sample they were fitted at.
    """

    scene: str
    params: EngineParams
    substeps: int
    summary: dict[str, Any]
    path: Path | None = None


def is_calibration(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a calibration directory or its ``summary.json``."""
    path = Path(path)
    summary_path = path / "summary.json" if path.is_dir() else path
    try:
        content = json.loads(summary_path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(content, dict) and content.get("format") == SUMMARY_FORMAT


def load_calibration(path: str | os.PathLike[str]) -> Calibration:
    """Read a calibration directory (or its ``summary.json``)."""
    path = Path(path)
    summary_path = path / "summary.json" if path.is_dir() else path
    summary = read_json(summary_path, missing=f"{summary_path}: no calibration summary here")
    if not isinstance(summary, dict) or summary.get("format") != SUMMARY_FORMAT:
        raise DataError(f"{summary_path}: not a residualsim calibration summary")
    try:
        params = EngineParams(**{k: float(v) for k, v in summary["params"].items()})
        if isinstance(summary.get("body"), dict):
            params = ObjectParams.of(params, BodyParams.from_json(summary["body"],
                                                                  str(summary_path)))
        scene = str(summary["scene"])
        if is_scene_path(scene):  # stored relative to the summary (older: to the cwd)
            scene = str(path_from_file(scene, summary_path.parent))
        return Calibration(scene=scene, params=params,
                           substeps=int(summary["settings"]["substeps"]), summary=summary,
                           path=summary_path.parent)
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"{summary_path}: incomplete calibration summary ({exc})") from None


def calibration_rate_hz(path: str | os.PathLike[str] | None) -> float | None:
    """The sample rate (Hz) a calibration was fitted at (``settings.dt_s`` of its summary),
    the rate CSV recordings are resampled to when it is given; None when ``path`` is not a
    calibration or does not say."""
    if not path or not is_calibration(path):
        return None
    dt_s = load_calibration(path).summary.get("settings", {}).get("dt_s")
    return 1.0 / float(dt_s) if isinstance(dt_s, (int, float)) and dt_s > 0 else None


def engine_from_option(params: str | None, substeps: int | None, scene: str | Scene
                       ) -> tuple[object, int | None, dict]:
    """(EngineParams, substeps, provenance) from ``--params`` and ``--substeps``.

    ``--params`` may name a calibration output (directory or its summary.json): its point
    parameters are used at the substep count they were calibrated at, unless ``--substeps``
    says otherwise (a warning then: parameters do not transfer across substep counts).
    """
    from residualsim.sim.scenes import parse_params

    engine_params = parse_params(params)
    provenance: dict = {"params": engine_params.as_json()}
    if params:
        if is_calibration(params):
            calibration = load_calibration(params)
            summary = calibration.path / "summary.json"
            if not same_scene(calibration.scene, scene):
                raise DataError(f"{summary}: calibrated for scene {calibration.scene!r}, "
                                f"not {scene_reference(scene)!r}")
            if substeps is not None and substeps != calibration.substeps:
                logging.getLogger(__name__).warning(
                    "%s was calibrated at %d substeps; running at %d", summary,
                    calibration.substeps, substeps)
            substeps = substeps or calibration.substeps
            provenance["calibration"] = str(calibration.path)
    provenance["substeps"] = substeps
    return engine_params, substeps, provenance
