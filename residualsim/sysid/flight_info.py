"""How well each recording's free flight determines an object's body: ``data info --body``.

``calibrate --method lsq`` fits the body and joint parameters (groups ``body`` and
``joints``, :mod:`residualsim.sysid.bodyspace`) on each recording's free flight first
(:mod:`residualsim.sysid.lsq`, stage ``body``). Before such a run this module asks, per
recording and for all of them together, what that stage would see at the user's URDF: the
forward-difference Jacobian (:func:`~residualsim.sysid.lsq.forward_differences`, the same
step and horizon: the samples before the first contact less
:data:`~residualsim.sysid.lsq.FLIGHT_MARGIN_S`) of the free flight's pose residuals over the
parameters' unit coordinates, at each recording's initial state, and at the start of each
of its later flights between bounces (:mod:`residualsim.sysid.flight_segments`, which the
body stage fits too): a file's row stacks its first flight's rows and its later flights'.

A recording of poses only had its initial state fitted when it was read; the body stage
searches that state beside the body (:mod:`residualsim.sysid.joint_states`), so whatever a
change of the body does that a change of the initial state can do as well is no evidence:
its columns of the state offsets are projected out of the body's. The result is scaled by
the body columns' norms *before* the projection, so a parameter whose effect the fitted
velocities absorb shows as weak, not rescaled back to full strength.

Reported per recording and for the stacked Jacobian (what a calibration on all of them
sees): the samples compared, the condition (the smallest singular value of the scaled
Jacobian over its largest; 0 when a parameter moves nothing) and the weak directions
(:func:`~residualsim.sysid.identifiability.weak_directions`, below
:data:`~residualsim.sysid.identifiability.WEAK_RATIO` of the strongest). A direction weak
in every recording may still be determined by all of them together (different tumbles
see different combinations); one weak in the stacked Jacobian is not determined by the
free flight at all: a calibration leaves it at the URDF's values, or, with contact
names, searches it on the first contact (train/README.md §19, §22).

Cost: 1 + d + k rollouts of each flight, first or later (d parameters, k initial-state
unknowns of a pose-only recording: 12 + 2 per joint), and for a pose-only recording a fit
of each later flight's start: a few seconds per recording.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from residualsim.data.trajectory import Trajectory
from residualsim.errors import DataError, ParameterError
from residualsim.sysid.identifiability import (WEAK_RATIO, describe, weak_directions,
                                               without_inertia_scale)
from residualsim.sysid.lsq import FLIGHT_MARGIN_S

__all__ = ["flight_identifiability", "format_flight_report", "check_body_scene"]

#: Weak directions listed per file in the text table (all of them for all files together;
#: the JSON line has every file's): its column ``determined`` counts the rest.
LISTED = 1


def _summary(projected: np.ndarray, rows: np.ndarray, names: list[str],
             scale: np.ndarray | None = None) -> dict[str, Any]:
    """Condition, weak directions and the directions determined of the Jacobian
    ``projected`` (the initial states' share taken out of ``rows``), scaled by the columns
    of ``rows`` and against the largest singular value of ``rows`` so scaled; ``scale``: a
    single body's inertia-scale direction, which free flight cannot see (taken out too,
    and named)."""
    projected, rows = np.nan_to_num(projected), np.nan_to_num(rows)
    projected = without_inertia_scale(projected, scale)
    norms = np.linalg.norm(rows, axis=0)
    live = norms > 0
    condition, reference = 0.0, None
    if np.any(live) and len(rows):
        reference = float(np.linalg.svd(rows[:, live] / norms[live], compute_uv=False)[0])
    if np.all(live) and reference:
        singular = np.linalg.svd(projected / norms, compute_uv=False)
        condition = float(singular[-1] / reference) if len(singular) == len(names) else 0.0
    weak = weak_directions(projected, names, norms=norms, reference=reference, scale=scale)
    return {"condition": condition, "determined": len(names) - len(weak),
            "weak_directions": weak}


def check_body_scene(scene: str) -> None:
    """ParameterError unless ``scene`` is a free object from a scene file or URDF (a
    built-in or planar scene has no body parameters)."""
    from residualsim.sim.scenes import make_scene

    layout = make_scene(scene)
    if getattr(layout, "spec", None) is None or layout.planar:
        kind = "a planar scene" if layout.planar else "a built-in scene"
        raise ParameterError(f"--body needs a free object from a scene file or URDF, whose "
                             f"body and joints a calibration can move; {layout.name!r} is "
                             f"{kind}, with no body parameters")


def flight_identifiability(scene: str, recordings: Mapping[str, Trajectory], *,
                           n_workers: int = 1, rotation_weight: float = 1.0
                           ) -> dict[str, Any]:
    """The module doc's report on ``recordings`` (read for ``scene`` by
    :func:`~residualsim.sim.recordings.load_recordings`: pose-only ones carry their fitted
    initial state). Returns ``{"names", "step", "weak_ratio", "rollouts", "seconds",
    "files": [{"id", "samples" (compared, later flights included), "later_flights" (their
    count), "contact" (some of the first flight's in contact: fewer than 3 before it), "initial_state": "recorded" | "fitted", "condition", "determined" (directions
    not weak), "weak_directions"}], "all": {"samples", "condition", "determined",
    "weak_directions"}, "no_free_flight": [{"id", "why"}]}``: a recording with no free
    flight (still the whole time, or in contact from its first sample with no later
    flight) is listed there, not compared (DataError when none has any). ParameterError for
    a built-in or planar scene (its body is not a parameter)."""
    from residualsim.sim.engine import Engine
    from residualsim.sim.recordings import free_flight_samples
    from residualsim.sim.rollout import recording_settings
    from residualsim.sim.scenes import make_scene
    from residualsim.sysid.bodyspace import body_space, inertia_scale_direction
    from residualsim.sysid.flight_segments import SEGMENT_KEY, flight_segments
    from residualsim.sysid.joint_states import OffsetResiduals, estimated_ids
    from residualsim.sysid.lsq import FLIGHT_STEP, flight_horizons, forward_differences
    from residualsim.sysid.paramspace import ParamSpace

    check_body_scene(scene)
    started = time.perf_counter()
    groups = ["body"] + (["joints"] if body_space(scene).group("joints") else [])
    space = ParamSpace(groups, scene=scene)
    d, names = space.ndim, space.names
    scale = inertia_scale_direction(space, scene)
    settings = recording_settings(scene, recordings)
    with Engine(scene, settings=settings) as engine:  # to say where contact comes in
        flight = dict(zip(recordings, (free_flight_samples(engine, t)
                                       for t in recordings.values())))
    segments = flight_segments(scene, recordings, settings, space.engine_params(space.start()),
                               n_workers)
    grounded = _without_flight(recordings, flight, segments)
    recordings = {k: t for k, t in recordings.items() if k not in grounded}
    segments = {k: s for k, s in segments.items() if k.rpartition(SEGMENT_KEY)[0] in recordings}
    if not recordings:
        raise DataError(f"no recording has free flight to tell the body by: "
                        f"{'; '.join(f'{k}: {why}' for k, why in list(grounded.items())[:5])}")
    flight = [flight[k] for k in recordings]
    margin = [math.ceil(FLIGHT_MARGIN_S * t.rate_hz - 1e-9) for t in recordings.values()]
    flights = {**recordings, **segments}
    horizons = flight_horizons(scene, flights, settings, 0.0)
    target = OffsetResiduals(scene, flights, settings, horizons, estimated_ids(flights),
                             n_workers, rotation_weight)
    block = target.block
    k = block.k if block.size else 0

    def evaluate(z: np.ndarray) -> np.ndarray:
        params = [space.engine_params(x) for x in space.from_unit(z[:, :d])]
        return target(params, z[:, d:].reshape(len(z), -1, k) if k else None)

    try:
        z0 = np.concatenate([space.start(), np.zeros(block.size if k else 0)])
        r0 = evaluate(z0[None])[0]
        jacobian = forward_differences(evaluate, z0, r0, d, FLIGHT_STEP, block if k else None)
        rollouts = target.n_rollouts
    finally:
        target.close()
    n_joints = getattr(make_scene(scene), "n_joints", 0)
    fitted = {index for index, _, _ in block.items}
    per_file: dict[str, list[tuple[np.ndarray, np.ndarray, int]]] = {k: [] for k in recordings}
    for index, (key, (first, end)) in enumerate(zip(target.ids, target.spans)):
        rows = jacobian[first:end, :d]
        projected = rows
        if index in fitted:  # what the fitted initial state can do as well is no evidence
            states = np.nan_to_num(jacobian[first:end, d:])  # its own offset's columns
            clean = np.nan_to_num(rows)
            projected = clean - states @ np.linalg.lstsq(states, clean, rcond=None)[0]
        per_file[key.rpartition(SEGMENT_KEY)[0] if key in segments else key].append(
            (rows, projected, (end - first) // (6 + n_joints)))
    files = []
    for index, (key, parts) in enumerate(per_file.items()):
        first_samples = parts[0][2]
        rows, projected = (np.vstack([part[j] for part in parts]) for j in (0, 1))
        files.append({"id": key, "samples": sum(part[2] for part in parts),
                      "later_flights": len(parts) - 1,
                      "contact": first_samples > max(0, flight[index] - margin[index]),
                      "initial_state": "fitted" if index in fitted else "recorded",
                      **_summary(projected, rows, names, scale)})
    blocks = [part for parts in per_file.values() for part in parts]
    together = {"samples": sum(f["samples"] for f in files), **_summary(
        np.vstack([p for _, p, _ in blocks]), np.vstack([r for r, _, _ in blocks]), names,
        scale)}
    return {"names": names, "step": FLIGHT_STEP, "weak_ratio": WEAK_RATIO,
            "rollouts": rollouts, "seconds": round(time.perf_counter() - started, 1),
            "files": files, "all": together,
            "no_free_flight": [{"id": k, "why": why} for k, why in grounded.items()]}


def _without_flight(recordings: Mapping[str, Trajectory], flight: Mapping[str, int],
                    segments: Mapping[str, Any]) -> dict[str, str]:
    """{id: why} of the recordings with no free flight to compare: still the whole time
    (every pose within :data:`~residualsim.sysid.ground.REST_STILL_M` and
    :data:`~residualsim.sysid.ground.REST_STILL_DEG` of the first), or in contact from the
    first sample with no later flight between bounces."""
    from residualsim.sysid.flight_segments import SEGMENT_KEY
    from residualsim.sysid.ground import at_rest

    later = {key.rpartition(SEGMENT_KEY)[0] for key in segments}
    out = {}
    for key, traj in recordings.items():
        if at_rest(traj.positions_m, traj.quat_wxyz, traj.n_samples):
            out[key] = "still the whole time"
        elif flight[key] == 0 and key not in later:
            out[key] = "in contact from its first sample, no later flight"
    return out


def format_flight_report(report: Mapping[str, Any], listed: int = LISTED) -> str:
    """The report of :func:`flight_identifiability` as a text table: a line per file with
    its ``listed`` weakest directions, then all files together with all of theirs."""
    names = report["names"]
    d = len(names)
    head = (f"body on the free flight: {d} parameters (body"
            f"{', joints' if any(n.startswith('joint.') for n in names) else ''}), "
            f"{report['rollouts']} rollouts, {report['seconds']:.0f} s; weak: below "
            f"{100 * report['weak_ratio']:.0f} % of the strongest direction; flights: the "
            "first and the later ones between bounces; per file the weakest (all in the JSON "
            "line)")
    entries = [(f["id"], str(1 + f.get("later_flights", 0)),
                f"{f['samples']}{'*' if f['contact'] else ''}", f["initial_state"], f, listed)
               for f in report["files"]]
    entries.append(("all files", str(sum(1 + f.get("later_flights", 0) for f in report["files"])),
                    str(report["all"]["samples"]), "-", report["all"], d))
    keys = ["file", "flights", "samples", "initial state", "condition", "determined"]
    cells = [[key, flights, samples, state, f"{f['condition']:.2g}", f"{f['determined']}/{d}"]
             for key, flights, samples, state, f, _ in entries]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    lines = [head, "  " + "  ".join(f"{k:<{w}}" for k, w in zip(keys, widths))
             + "  weakest directions"]
    for row, (_, _, _, _, f, most) in zip(cells, entries):
        lead = "  " + "  ".join(f"{c:<{w}}" for c, w in zip(row, widths)) + "  "
        text = [describe(w) for w in f["weak_directions"][:most]] or ["none"]
        lines.append(lead + text[0])
        lines += [" " * len(lead) + t for t in text[1:]]
    for entry in report.get("no_free_flight", []):
        lines.append(f"  {entry['id']}: no free flight ({entry['why']}): not compared")
    if any(f["contact"] for f in report["files"]):
        lines.append(f"* fewer than 3 samples of free flight {1000 * FLIGHT_MARGIN_S:.0f} ms "
                     "before the first contact: calibrate's body stage compares 3, some in "
                     "contact")
    return "\n".join(lines)
