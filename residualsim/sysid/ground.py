"""The table's height and the recordings' pose noise, in closed form from the rest phases.

A trajectory-error search is a poor way to find a millimetre: the error of a toss is
centimetres of bouncing and sliding. The last samples of a toss are different: a body at
rest on the table has its resting height fixed by the table and the contact, so

    d_i = h_recorded,i - h_simulated,i      (m, along the world's up axis)

of a recording i whose recorded and simulated motions both end at rest **in the same
resting attitude** is the table's misplacement plus that recording's pose offset. The
attitude test compares the up axis seen in the body frame (R^T up) of the two final poses:
a turn about the up axis leaves the resting height unchanged, a different face down does
not (within ``max_tilt_deg``, default 10 degrees).

:func:`estimate_table_height` rolls the recordings out with given engine parameters (the
engine alone: a residual acts at impacts, the resting height is the engine's contact) and
returns a :class:`GroundEstimate`: the median of d_i added to the parameters'
``table_height_m`` (the table height that puts the simulated rests where the recorded ones
are), the spread of d_i across recordings (1.4826 x median absolute deviation: the
per-recording pose offset once the median is removed), the median's standard error
(1.2533 x spread / sqrt(n)), the within-recording jitter of the recorded rest heights
(pooled standard deviation about a straight line through each window: a slow creep is not
jitter) and how many recordings were used.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from residualsim.data import Trajectory
from residualsim.errors import DataError
from residualsim.sim.rotations import geodesic_angle
from residualsim.sim.scenes import EngineParams, make_scene, parse_params

log = logging.getLogger(__name__)

__all__ = ["GroundEstimate", "ground_stage", "ground_note", "estimate_table_height", "at_rest",
           "rest_gap_m", "MIN_REST_RECORDINGS",
           "REST_WINDOW_S", "REST_STILL_M", "REST_STILL_DEG", "MAX_TILT_DEG"]

#: The rest window: the last this many seconds of a recording (10 samples at 148 Hz).
REST_WINDOW_S = 0.07
#: At rest: over the window, the position moves less than this (m, largest distance from
#: the window's first sample; the real cube tosses creep up to 0.8 mm in x-y there)...
REST_STILL_M = 2e-3
#: ... and the attitude turns less than this (degrees).
REST_STILL_DEG = 2.0
#: Same resting attitude: the up axis seen from the body differs by at most this (degrees).
MAX_TILT_DEG = 10.0
#: Fewest recordings ending at rest in a shared attitude for ``calibrate`` to set the table.
MIN_REST_RECORDINGS = 5


@dataclass(frozen=True)
class GroundEstimate:
    """The table height from rest phases (:func:`estimate_table_height`).

    ``table_height_m``: the estimate, m along the world's up axis, relative to the scene's
    table (the parameters' own ``table_height_m`` plus ``offset_m``); ``offset_m`` the
    median over the used recordings of recorded minus simulated resting height (m);
    ``spread_m`` their robust standard deviation (1.4826 x MAD, m); ``stderr_m`` the
    median's standard error (m); ``jitter_std_m`` the pooled within-recording standard
    deviation of the recorded resting heights about a line in time (m); ``offset_std_m`` the per-recording
    offset's standard deviation, ``spread_m`` with the jitter's share of a window mean
    removed (m); ``n_used`` of ``n_recordings`` recordings ended at rest in the same
    attitude in both; ``ids`` and ``differences_m`` those recordings and their d_i (m).
    """

    table_height_m: float
    offset_m: float
    spread_m: float
    stderr_m: float
    jitter_std_m: float
    offset_std_m: float
    n_used: int
    n_recordings: int
    ids: tuple[str, ...] = ()
    differences_m: tuple[float, ...] = ()

    def as_json(self) -> dict:
        """Plain JSON (the per-recording lists left out)."""
        return {"table_height_m": self.table_height_m, "offset_m": self.offset_m,
                "spread_m": self.spread_m, "stderr_m": self.stderr_m,
                "jitter_std_m": self.jitter_std_m, "offset_std_m": self.offset_std_m,
                "n_used": self.n_used, "n_recordings": self.n_recordings}


def rest_gap_m(engine, trajectory: Trajectory, window_s: float = REST_WINDOW_S,
               horizon_m: float = 0.1) -> float | None:
    """The gap (m; + above the table, - into it; ``horizon_m`` at most) between the object
    and the engine's table (z = 0 at the engine's ``table_height_m``) at a recording's last
    pose, when the recording ends at rest (:func:`at_rest` over its last ``window_s``);
    None otherwise. ``engine``: a :class:`~residualsim.sim.engine.Engine` of its scene."""
    from residualsim.sim.recordings import table_distance_m

    window = max(3, int(round(window_s * trajectory.rate_hz)))
    if not at_rest(trajectory.positions_m, trajectory.quat_wxyz, window):
        return None
    return float(table_distance_m(engine, trajectory, trajectory.n_samples - 1, horizon_m))


def at_rest(positions_m: np.ndarray, quat_wxyz: np.ndarray, window: int,
            still_m: float = REST_STILL_M, still_deg: float = REST_STILL_DEG) -> bool:
    """Whether the last ``window`` samples of a motion (positions (T, 3) m and quaternions
    (T, 4) w-x-y-z, world frame) are still: every position within ``still_m`` of the
    window's first and every attitude within ``still_deg`` of it."""
    if len(positions_m) < window or window < 2:
        return False
    pos, quat = np.asarray(positions_m)[-window:], np.asarray(quat_wxyz)[-window:]
    moved = np.linalg.norm(pos - pos[0], axis=1).max()
    turned = np.degrees(geodesic_angle(quat, np.broadcast_to(quat[0], quat.shape))).max()
    return bool(moved < still_m and turned < still_deg)


def _up_in_body(quat_wxyz: np.ndarray, up: np.ndarray) -> np.ndarray:
    """The world up axis in the body frame, R^T up, for one quaternion (4,) w-x-y-z."""
    from residualsim.sim.scenes.base import quat_wxyz_to_matrix

    return quat_wxyz_to_matrix(np.asarray(quat_wxyz, dtype=np.float64)).T @ up


def estimate_table_height(scene: str, trajectories: Mapping[str, Trajectory],
                          params: EngineParams | Mapping | str | None = None,
                          substeps: int | None = None, n_workers: int = 1, *,
                          window_s: float = REST_WINDOW_S,
                          max_tilt_deg: float = MAX_TILT_DEG,
                          simulated: Mapping | None = None) -> GroundEstimate:
    """The table height (and rest-phase pose noise) from recordings' rest phases.

    Parameters
    ----------
    scene : str
        A free (3-D) or planar scene: built-in name or scene file.
    trajectories : mapping of id -> Trajectory
        Recordings (one rate); those not ending at rest are skipped.
    params : EngineParams or anything :func:`~residualsim.sim.scenes.parse_params` reads
        The engine the recordings are rolled out with; its ``table_height_m`` (None: 0) is
        where the simulated table stands, so the result is an absolute table height.
    substeps, n_workers : int
        As :func:`residualsim.sim.rollout.simulate_trajectories`.
    window_s : float
        Rest window, seconds at the end of each recording.
    max_tilt_deg : float
        Largest difference (degrees) of the body-frame up axis between the recorded and
        simulated final poses for the two to count as one resting attitude.
    simulated : mapping of id -> object with ``positions_m`` and ``quat_wxyz``, optional
        Rollouts already made with ``params`` (skips the simulation).

    Raises
    ------
    DataError
        When no recording ends at rest in the same attitude as its rollout (the message
        says how many ended at rest at all).
    """
    from residualsim.sim.rollout import simulate_trajectories

    params = parse_params(params)
    if not trajectories:
        raise DataError("no recordings to estimate the table height from")
    layout = make_scene(scene)
    up = layout.up_axis
    if simulated is None:
        simulated = simulate_trajectories(scene, trajectories, params, n_workers, substeps)
    ids, differences, jitters = [], [], []
    recorded_rest = simulated_rest = 0
    for traj_id, traj in trajectories.items():
        window = max(3, int(round(window_s * traj.rate_hz)))
        sim = simulated[traj_id]
        if not at_rest(traj.positions_m, traj.quat_wxyz, window):
            continue
        recorded_rest += 1
        if not at_rest(sim.positions_m, sim.quat_wxyz, window):
            continue
        simulated_rest += 1
        tilt = math.degrees(math.acos(np.clip(
            _up_in_body(traj.quat_wxyz[-1], up) @ _up_in_body(sim.quat_wxyz[-1], up), -1, 1)))
        if tilt > max_tilt_deg:
            continue
        heights = np.asarray(traj.positions_m[-window:]) @ up
        ids.append(str(traj_id))
        differences.append(float(heights.mean() - np.asarray(sim.positions_m[-window:]).mean(
            axis=0) @ up))
        ticks = np.arange(window) - (window - 1) / 2  # about a straight line: creep is no jitter
        slope = ticks @ heights / (ticks @ ticks)
        jitters.append((heights - heights.mean() - slope * ticks, window))
    if not differences:
        raise DataError(f"no recording ends at rest in the attitude its rollout rests in "
                        f"({recorded_rest} of {len(trajectories)} recordings end at rest, "
                        f"{simulated_rest} of them with their rollout): no table height")
    d = np.array(differences)
    offset = float(np.median(d))
    spread = float(1.4826 * np.median(np.abs(d - offset))) if len(d) > 1 else 0.0
    residuals = np.concatenate([r for r, _ in jitters])
    dof = sum(w - 2 for _, w in jitters)
    jitter = float(math.sqrt(np.sum(residuals ** 2) / dof)) if dof > 0 else 0.0
    mean_window = float(np.mean([w for _, w in jitters]))
    offset_std = math.sqrt(max(spread ** 2 - jitter ** 2 / mean_window, 0.0))
    return GroundEstimate(
        table_height_m=params.table_offset_m + offset, offset_m=offset, spread_m=spread,
        stderr_m=1.2533 * spread / math.sqrt(len(d)), jitter_std_m=jitter,
        offset_std_m=offset_std, n_used=len(d), n_recordings=len(trajectories),
        ids=tuple(ids), differences_m=tuple(differences))


def ground_stage(scene: str, train: Mapping, params: EngineParams, searched: Sequence[str],
                 substeps: int, n_workers: int = 1) -> tuple[EngineParams, dict[str, Any]]:
    """Calibration's ground stage, after its search: (``params`` with the closed-form
    ``table_height_m`` (m) set, the summary's ``ground`` entry); unchanged when the height was
    among the ``searched`` names or fewer than :data:`MIN_REST_RECORDINGS` recordings rest
    comparably (the entry says why)."""
    if "table_height_m" in searched:
        return params, {"skipped": "table_height_m was searched"}
    try:
        found = estimate_table_height(scene, train, params, substeps, n_workers)
    except DataError as exc:
        return params, {"skipped": str(exc)}
    if found.n_used < MIN_REST_RECORDINGS:
        return params, {**found.as_json(), "skipped": (
            f"{found.n_used} recordings end at rest in their rollout's attitude, fewer "
            f"than {MIN_REST_RECORDINGS}: table height left unset")}
    log.info("table height %.3g mm from %d rest phases (median standard error %.2g mm)",
             1e3 * found.table_height_m, found.n_used, 1e3 * found.stderr_m)
    return params.replace(table_height_m=found.table_height_m), found.as_json()


def ground_note(ground: Mapping[str, Any]) -> str:
    """One line for the user about calibration's ground stage (its summary entry)."""
    if "skipped" in ground:
        return f"table height: not set ({ground['skipped']})"
    return (f"table height: {1e3 * ground['table_height_m']:+.3f} mm (median of "
            f"{ground['n_used']} rest phases, standard error {1e3 * ground['stderr_m']:.3f} "
            f"mm); --no-ground skips it")
