"""``residualsim data info DIR --scene FILE``: a data set checked against its object.

What :func:`residualsim.data.describe` says of any folder, and what only the object's shapes
tell: where the first contacts come (over a window in seconds, whatever the rate), how far
each rest sits from the table, how well the free flight determines the body (``--body``).
"""

from __future__ import annotations

import logging
import math
import os

import numpy as np

from residualsim.errors import DataError
from residualsim.sim.recordings import load_recordings
from residualsim.sim.scenes import Scene

__all__ = ["describe_for_scene", "FIRST_CONTACT_WINDOW_S", "REST_GAP_NOTE_M"]

log = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]


#: ``data info --scene``: first contacts are looked for over this window (s) from the
#: first sample (its key: ``later_than_0.3_s_or_never``).
FIRST_CONTACT_WINDOW_S = 0.3
#: A median rest gap (m) beyond this is reported (``rest_note``; the bundled real tosses
#: rest 2.1 mm into the table at z = 0, train/README.md §24).
REST_GAP_NOTE_M = 0.003


def describe_for_scene(path: PathLike, scene: str | Scene, body: bool = False,
                       n_workers: int = 1) -> dict:
    """``data info DIR --scene FILE``: the data set's summary (:func:`residualsim.data.describe`)
    checked against the object, with its first contacts found on the object's own
    collision shapes (seconds after the first sample; min, median, max) and, for pose-only
    recordings, how well the initial-state fits matched the free flight (m); per file
    also the free-flight samples before the first contact (``flight_samples``) and the
    gravity fitted on them (``g_fit_mps2``, :func:`residualsim.sim.plausibility.gravity_fit`;
    None when too short to tell), and for those that end at rest the gap between the object
    and the table at z = 0 (``rest_gap_mm``; summarised as ``rest_gap_m``, with a
    ``rest_note`` past :data:`REST_GAP_NOTE_M`); first contacts are looked for over
    :data:`FIRST_CONTACT_WINDOW_S` seconds, whatever the rate. ``body``: also
    ``body_flight``, how well each file's free flight determines the body and joints
    (:func:`residualsim.sysid.flight_info.flight_identifiability`, on ``n_workers``)."""
    from residualsim.data import describe
    from residualsim.sim.engine import Engine
    from residualsim.sim.plausibility import gravity_fit
    from residualsim.sim.recordings import (CONTACT_TOLERANCE_M, MAX_FREE_SAMPLES,
                                            free_flight_samples)
    from residualsim.sim.rollout import recording_settings
    from residualsim.sim.scenes import make_scene
    from residualsim.sysid.ground import rest_gap_m

    scene = make_scene(scene)  # resolved once; the checks below take the object
    if body:  # refused before reading anything for a scene without body parameters
        from residualsim.sysid.flight_info import check_body_scene

        check_body_scene(scene)
    description = describe(path)
    if description.get("format") == "mcube":
        raise DataError(f"{path}: planar impacts; --scene is for trajectory recordings")
    recordings = load_recordings(path, scene)
    layout = scene
    firsts, gaps = [], []
    files = {f["id"]: f for f in description.get("files", [])}
    with Engine(scene, settings=recording_settings(scene, recordings)) as engine:
        for key, recording in recordings.items():
            window = math.ceil(FIRST_CONTACT_WINDOW_S * recording.rate_hz)  # samples
            n = free_flight_samples(engine, recording, max_samples=window)
            if n < min(recording.n_samples, window):
                firsts.append(float(recording.times_s[n] - recording.times_s[0]))
            fit = gravity_fit(engine, recording, min(n, MAX_FREE_SAMPLES))  # as checked
            gap = rest_gap_m(engine, recording)
            if gap is not None:
                gaps.append(gap)
            if key in files:
                files[key]["flight_samples"] = n
                files[key]["g_fit_mps2"] = None if fit is None else \
                    round(fit.magnitude_mps2, 3)
                files[key]["rest_gap_mm"] = None if gap is None else round(1e3 * gap, 2)
    fits = [r.metadata["initial_fit_rms_m"] for r in recordings.values()
            if "initial_fit_rms_m" in r.metadata]
    description["scene"] = {"name": layout.name, "mass_kg": layout.mass_kg,
                            "joints": list(getattr(layout, "joint_names", ()))}
    description["first_contact_on_shapes_s"] = {
        "count": len(firsts), "later_than_0.3_s_or_never": len(recordings) - len(firsts),
        **({"min": min(firsts), "median": float(np.median(firsts)), "max": max(firsts)}
           if firsts else {})}
    if gaps:  # the object at rest against the table at z = 0: m, + above it
        description["rest_gap_m"] = {"count": len(gaps), "min": min(gaps),
                                     "median": float(np.median(gaps)), "max": max(gaps)}
        gap = float(np.median(gaps))
        if abs(gap) > REST_GAP_NOTE_M:
            description["rest_note"] = (
                f"at rest the object sits {1e3 * abs(gap):.1f} mm "
                f"{'above' if gap > 0 else 'into'} the table at z = 0 (median of the "
                f"recordings ending at rest): their table or frame is offset (calibrate sets "
                f"table_height_m from the rest phases)" + (
                    "; these checks measure contact from each recording's own rest, so its "
                    "rest and slides are not taken for free flight" if gap >
                    CONTACT_TOLERANCE_M else ""))
            log.warning("%s: %s", path, description["rest_note"])
    if fits:
        description["initial_state_fit_rms_m"] = {"fitted": len(fits),
                                                  "median": float(np.median(fits)),
                                                  "max": float(max(fits))}
    if body:
        from residualsim.sysid.flight_info import flight_identifiability

        description["body_flight"] = flight_identifiability(scene, recordings,
                                                            n_workers=n_workers)
    return description
