"""``calibrate --method mpec``: engine friction and restitution by MPEC, written as a
calibration directory that ``simulate --params DIR`` and ``train --calibration DIR`` read.

Fitted: ``lateral_friction`` (μ, the Coulomb coefficient at each contact) and
``restitution`` (Newton's e at the contact point), the two parameters with a counterpart in
the rigid complementarity model. Kept at their base values (PyBullet's defaults: rigid
contact, zero spinning and rolling friction), because the model has none of them:
``contact_stiffness``, ``contact_damping`` (the MPEC contact is rigid, so rigid is the
consistent choice), ``spinning_friction``, ``rolling_friction``.

The summary has the layout of :func:`residualsim.sysid.calibrate.calibrate`'s
(``format``, ``params`` as full engine parameters, ``settings`` = the dt and substep count
the engine should run at, ``validation`` = the engine's held-out figures at the estimate
and at the defaults) plus the MPEC's ``complementarity_violation`` (max over pairs of
min(a, b)), ``solver_status``, iterations and each solve's wall time. ``settings``: the
MPEC has no substeps, so they are those the engine is calibrated and scored at by default
(impacts: the scene's, 10 at 250 Hz, where the engine's restitution equals Newton's e;
trajectories: :data:`~residualsim.sysid.calibrate.DEFAULT_TRAJECTORY_SUBSTEPS`); the held-out
figures are measured at them.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from residualsim.atomic import atomic_write_text, check_output, claim_output
from residualsim.errors import ParameterError
from residualsim.sim.scenes import EngineParams
from residualsim.sysid.calibrate import (DEFAULT_TRAJECTORY_SUBSTEPS, _data_fingerprint,
                                         _json_safe, calibration_run)
from residualsim.sysid.calibration_file import SUMMARY_FORMAT
from residualsim.sysid.calibration_data import load_calibration_data
from residualsim.sysid.held_out import held_out_figures
from residualsim.sysid.paramspace import ParamSpace

__all__ = ["calibrate_mpec", "MPEC_FITTED", "MPEC_KEPT", "MPEC_SCENES"]

MPEC_FITTED = ("lateral_friction", "restitution")
MPEC_KEPT = ("contact_stiffness", "contact_damping", "spinning_friction", "rolling_friction")
#: Built-in scenes with an MPEC contact model: the cube tosses (8 corner candidates) and the
#: planar ellipse's impacts. Besides them: a free single-link scene file (``.toml`` or
#: ``.urdf``), its candidates read from the URDF (:mod:`~residualsim.sysid.mpec.body`).
MPEC_SCENES = ("cube", "planar-ellipse")


def calibrate_mpec(scene: str, data: str | os.PathLike[str], names: Sequence[str],
                   out: str | os.PathLike[str], *,
                   bounds: Mapping[str, Sequence[float]] | None = None, split: str = "train",
                   max_items: int | None = None, substeps: int | None = None,
                   n_workers: int = 1, validate: bool = True,
                   options: Mapping[str, Any] | None = None, resume: bool = False
                   ) -> dict[str, Any]:
    """Fit ``names`` (a subset of :data:`MPEC_FITTED`) by MPEC; write ``out/summary.json``.

    Impacts go to :func:`~residualsim.sysid.mpec.impacts.identify_impacts`, trajectories to
    :func:`~residualsim.sysid.mpec.cube.identify_tosses` (its contact windows solved over
    ``n_workers`` processes; ``options`` are passed on: window sizes, friction
    directions...). A parameter not in ``names`` is held at its default value (its bounds
    collapse to it). ``scene`` must be one of :data:`MPEC_SCENES` or a free single-link
    scene file (:func:`~residualsim.sysid.mpec.body.body_from_scene`: ParameterError naming
    the file and the reason for an articulated, planar or rounded object; for other names
    ParameterError naming the scenes; both before any data is read). ``out`` holding another
    run, or this one without ``resume`` (which solves again), is refused before any work
    (:func:`residualsim.atomic.check_output`). Returns the summary.
    """
    from residualsim.sim.rollout import impact_settings, recording_settings
    from residualsim.sim.scenes.scene_file import is_scene_path
    from residualsim.sysid.mpec.body import body_from_scene
    from residualsim.sysid.mpec.cube import identify_tosses
    from residualsim.sysid.mpec.impacts import identify_impacts

    started = time.perf_counter()
    names = list(names)
    unknown = sorted(set(names) - set(MPEC_FITTED))
    if unknown or not names:
        raise ParameterError(f"--method mpec fits {', '.join(MPEC_FITTED)} only (no "
                             f"counterpart in the rigid complementarity model for "
                             f"{', '.join(unknown) or 'an empty list'})")
    body = None
    if is_scene_path(scene):
        body = body_from_scene(scene)
    elif scene not in MPEC_SCENES:
        raise ParameterError(
            f"--method mpec supports the scenes {', '.join(MPEC_SCENES)} (the cube's 8 corners "
            f"and the planar impacts' recorded Jacobian rows are its contact models) and free "
            f"single-link scene files, not {scene!r}: calibrate it with --method mh or "
            "nevergrad")
    space = ParamSpace(names, bounds=bounds)
    run = calibration_run(scene, names, "mpec")
    check_output(out, kind="dir", command="calibrate", run=run, resume=resume, flag="out")
    base = EngineParams()
    ranges = {}
    for name in MPEC_FITTED:
        if name in names:
            parameter = space.parameters[space.names.index(name)]
            ranges[name] = (parameter.low, parameter.high)
        else:
            value = getattr(base, name)
            ranges[name] = (value, value)
    data, out = Path(data), Path(out)
    recordings = load_calibration_data(scene, data, split, max_items)
    kind, train, validation = recordings.kind, recordings.train, recordings.validation
    if kind == "impacts":
        estimate = identify_impacts(train, mu_bounds=ranges["lateral_friction"],
                                    restitution_bounds=ranges["restitution"], **(options or {}))
        settings = impact_settings(scene, substeps)
        ids = [str(r) for r in train.rows.tolist()]
        extra = {"mpec_post_velocity_rms_mps": estimate.post_rms_mps}
    else:
        estimate = identify_tosses(train, mu_bounds=ranges["lateral_friction"],
                                   restitution_bounds=ranges["restitution"],
                                   **{"n_workers": n_workers, "body": body, **(options or {})})
        settings = recording_settings(scene, train, substeps or DEFAULT_TRAJECTORY_SUBSTEPS)
        ids = list(train)
        extra = {"mpec_position_rms_m": estimate.position_rms_m, "table_m": estimate.table_m,
                 "windows": {k: [list(w) for w in v] for k, v in estimate.windows.items()}}
    point = {"lateral_friction": estimate.mu, "restitution": estimate.restitution}
    params = base.replace(**point)
    mpec_seconds = time.perf_counter() - started
    held_out = None
    if validate and validation is not None and split != "all":
        held_out = held_out_figures(scene, kind, validation,
                                    {"calibrated": params, "default": EngineParams()},
                                    settings.substeps, n_workers)
    report = estimate.report
    summary = {
        "format": SUMMARY_FORMAT, "method": "mpec", "scene": scene,
        "params": params.as_json(), "calibrated": names,
        "kept": {name: getattr(params, name) if getattr(params, name) != float("inf")
                 else "inf" for name in MPEC_KEPT},
        "best": {n: point[n] for n in names},
        "complementarity_violation": report["complementarity_violation"],
        "violation_measure": report["violation_measure"],
        "solver_status": report["solver_status"], "iterations": report["iterations"],
        "solver_seconds": report["solver_seconds"], "mpec_seconds": mpec_seconds,
        "solves": report["solves"], **extra,
        "settings": {"dt_s": settings.dt_s, "substeps": settings.substeps},
        "data": {"path": str(data), "kind": kind, "split": split, "n_items": len(ids),
                 "ids_sha256": _data_fingerprint(ids)},
        "space": space.as_json(), "workers": n_workers, "validation": held_out,
        "seconds": time.perf_counter() - started,
    }
    claim_output(out, run, resume=resume, flag="out")
    atomic_write_text(out / "summary.json", json.dumps(_json_safe(summary), indent=2))
    return summary
