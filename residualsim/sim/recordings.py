"""Recordings as a scene sees them: checked against the object, initial states fitted.

:func:`load_recordings` (and :func:`prepare_recordings` for recordings already loaded) is
where recordings meet a scene:

1. every recording is checked against the scene (planar or 3D, the object's joints, and
   a first pose that does not sink more than ``START_PENETRATION_M`` into the table, no
   pose deeper than ``WRONG_OBJECT_DEPTH_M``, no rest that far above it) and a mismatch is
   one DataError naming the file;
2. a recording whose velocities were ESTIMATED from poses (plain CSV without velocity
   columns, ``metadata["velocities"] == "estimated"``) gets its initial state (sample 0)
   fitted by the engine itself: the first samples in free flight (before the first sample
   where the object comes within ``CONTACT_TOLERANCE_M`` of the table, or where its
   distance to the table has a minimum below ``BOUNCE_DISTANCE_M``: a fast bounce can fall
   between two samples; or where it is level within that of the table: a rest or a slide
   above an offset table, :func:`~residualsim.sim.plausibility.level_at`; a geometric test
   on the URDF's collision shapes at the recorded poses) are matched by a rollout from
   the fitted initial pose and velocities (``scipy.optimize.least_squares``, Levenberg-
   Marquardt, over windows of 8, 16 and then all free samples, each warm-started from the
   last, so a fast-spinning object does not settle in a local minimum; residuals:
   position m, r_g × rotation angle, joint positions × r_g or m; samples a resampled CSV
   file filled in across a dropped-frame gap, ``metadata["time_base"]["filled_samples"]``,
   are left out: a chord of the flight, not data). A base link of an
   articulated body is not ballistic, nor is a rigid body's angular velocity constant
   unless its inertia is isotropic, so a rollout is the model that fits free flight of any
   object. With fewer than ``MIN_FREE_SAMPLES`` free samples the estimate is kept.

Recordings with recorded velocities (the ContactNets and MCube sets, NPZ, CSV with
velocity columns) are returned unchanged.

Plausibility (refused by default, allowed inside :func:`allow_implausible`, the CLI's
``--allow-implausible``): a recording sampled below ``MIN_RATE_HZ`` (checked first: time
stamps in milliseconds or nanoseconds slipped through when the free flight was too short
for the gravity check, and 1e300 s ones ended in a traceback there); a recording whose
base moves faster than ``MAX_SPEED_MPS`` between two consecutive samples or records such a
velocity (the real cube tosses peak at 2.0 m/s; a tracking spike of 1e30 m is caught here),
or records an angular velocity above ``MAX_ANGULAR_SPEED_RADPS`` (the real tosses peak at 19
rad/s); and a state given by hand
(:func:`check_start_state`, ``rollout --state``) deeper than ``START_PENETRATION_M`` into the
table, beyond its edge, more than ``MAX_START_HEIGHT_M`` above it, or whose base moves
faster than those bounds.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from collections.abc import Callable, Mapping

import numpy as np
from residualsim.sim.bullet import pb

from residualsim.data import Trajectory, load_trajectories
from residualsim.data.trajectory import QUATERNION_NORM_TOLERANCE
from residualsim.errors import DataError, ParameterError
from residualsim.sim.engine import Engine
from residualsim.sim.implausible import allow_implausible, implausible_allowed, refuse_implausible
from residualsim.sim.plausibility import (check_gravity, check_joint_units,
                                          check_quaternion_order, check_velocity_point,
                                          level_at)
from residualsim.sim.rotations import quat_relative_rotvec, rotate_by_rotvec
from residualsim.sim.rollout import recording_settings
from residualsim.sim.scenes import make_scene

__all__ = ["load_recordings", "prepare_recordings", "fit_initial_state",
           "free_flight_samples", "table_distance_m", "check_plausible", "check_start_state",
           "check_state_bounds",
           "allow_implausible", "implausible_allowed", "CONTACT_TOLERANCE_M",
           "MIN_FREE_SAMPLES", "MAX_SPEED_MPS", "MIN_RATE_HZ", "check_rate",
           "MAX_ANGULAR_SPEED_RADPS", "MAX_START_HEIGHT_M",
           "initial_state_draws", "offset_initial_state", "with_initial_state", "FITTED_START",
           "fit_starts", "RECORDED_FIRST_STATE",
           "rollout_residuals"]

log = logging.getLogger(__name__)

#: A recorded pose this close to the table (m) counts as in contact: 2 mm, four times the
#: tracking noise the project is built for.
CONTACT_TOLERANCE_M = 0.002
#: A recording whose first pose puts the object deeper than this (m) into the table is
#: refused: it is another object's, or in another frame (a resting real cube sits 1.1 mm in).
START_PENETRATION_M = 0.005
#: A recorded pose deeper than this into the table (m), or an object at rest (its last
#: ``REST_SAMPLES`` positions within 1 mm) farther than this above it, is not this object's:
#: the 400 real cube tosses reach at most 5.2 mm into the table under the cube scene, while
#: under the L-shaped example half of them come to rest 36 mm or more above it and a tenth
#: sink 49 mm into it.
WRONG_OBJECT_DEPTH_M = 0.02
REST_SAMPLES = 5
#: A minimum of the distance to the table below this (m) is a bounce between two samples.
BOUNCE_DISTANCE_M = 0.02
#: Fewest free-flight samples worth a fit, and the most that are used.
MIN_FREE_SAMPLES = 4
MAX_FREE_SAMPLES = 30
#: ``metadata["initial_state"]`` of a recording whose sample 0 (pose and velocities) was
#: fitted to its free flight by :func:`fit_initial_state` (pose-only recordings, when read);
#: `` (pose only)`` is appended when the recorded velocities were kept.
FITTED_START = "fitted by rollout"
#: Metadata key of a fitted recording's first state as recorded (scene layout), from which
#: a fit with another body starts again (:func:`fit_starts`).
RECORDED_FIRST_STATE = "recorded_first_state"
#: The metadata :func:`fit_initial_state` writes (dropped before a recording is fitted again).
_FIT_NOTES = ("initial_state", RECORDED_FIRST_STATE, "free_flight_samples", "initial_fit_rms_m",
              "initial_state_covariance")
#: Fastest plausible motion of a recorded base (m/s), between two consecutive samples or as a
#: recorded velocity: ten times the fastest real cube toss (2.0 m/s).
MAX_SPEED_MPS = 20.0
#: Fastest plausible recorded angular velocity (rad/s): 80 turns per second; the real cube
#: tosses peak at 19 rad/s.
MAX_ANGULAR_SPEED_RADPS = 500.0

#: Slowest plausible sample rate (Hz) of a recording: a toss lasts about a second, and the
#: real recordings are tracked at 148 and 250 Hz. Slower is most likely a time column in
#: milliseconds, microseconds or nanoseconds (named by the factor that brings it above).
MIN_RATE_HZ = 10.0
#: Longest recording read even with --allow-implausible (s): 11.6 days.
MAX_DURATION_S = 1e6
_TIME_UNITS = ((1e3, "milliseconds"), (1e6, "microseconds"), (1e9, "nanoseconds"))

#: Highest plausible start of a hand-given state above the table top (m): tosses start
#: below 1 m; from 1e200 m a rollout only falls.
MAX_START_HEIGHT_M = 10.0


def _implausible(message: str) -> None:
    refuse_implausible(message, DataError, log)


def check_rate(trajectory: Trajectory) -> None:
    """Refuse a recording sampled below ``MIN_RATE_HZ`` (its time stamps in another unit?),
    and, even with ``--allow-implausible``, one longer than ``MAX_DURATION_S``: its time
    steps square past float64 in the gravity and velocity fits."""
    rate = trajectory.rate_hz
    if rate >= MIN_RATE_HZ:
        return
    cause = next((f": times look like {unit} (divide t by {factor:g})"
                  for factor, unit in _TIME_UNITS if MIN_RATE_HZ <= rate * factor < 1e5), "")
    what = (f"{trajectory.source or trajectory.traj_id}: {trajectory.n_samples} samples "
            f"over {trajectory.duration_s:.4g} s, {rate:.3g} Hz")
    if not trajectory.duration_s <= MAX_DURATION_S:
        raise DataError(f"{what}: longer than {MAX_DURATION_S:g} s, not a recording with t in "
                        f"seconds{cause} (--allow-implausible does not accept it)")
    _implausible(f"{what}, slower than {MIN_RATE_HZ:g} Hz (t in seconds){cause}")


def check_plausible(trajectory: Trajectory) -> None:
    """Refuse a recording whose motion no real object makes (see the module docstring)."""
    name = trajectory.source or trajectory.traj_id
    dt = np.diff(trajectory.times_s)
    if len(dt):
        with np.errstate(over="ignore", invalid="ignore"):
            speeds = np.linalg.norm(np.diff(trajectory.positions_m, axis=0), axis=1) / dt
        worst = int(np.argmax(speeds))
        if not speeds[worst] <= MAX_SPEED_MPS:
            _implausible(f"{name}: the position jumps {speeds[worst] * dt[worst]:.3g} m "
                         f"between samples {worst} and {worst + 1} ({speeds[worst]:.3g} m/s, "
                         f"more than {MAX_SPEED_MPS:g} m/s)")
            return
    for values, bound, what, unit in (
            (trajectory.linear_velocity_mps, MAX_SPEED_MPS, "velocity", "m/s"),
            (trajectory.angular_velocity_world_radps, MAX_ANGULAR_SPEED_RADPS,
             "angular velocity", "rad/s")):
        if values is None or not len(values):
            continue
        with np.errstate(over="ignore"):
            norms = np.linalg.norm(values, axis=1)
        worst = int(np.argmax(norms))
        if not norms[worst] <= bound:
            _implausible(f"{name}: a recorded {what} of {norms[worst]:.3g} {unit} at sample "
                         f"{worst} (more than {bound:g} {unit})")
            return


@functools.lru_cache(maxsize=8)
def _checking_engine(scene: str) -> Engine:
    """An engine of ``scene`` (PyBullet's defaults) kept open in this process for
    :func:`check_start_state`: opening one costs about 20 ms, a check in it well under 1 ms
    (every ``propagate_belief`` and simulator rollout checks its start)."""
    return Engine(scene)


def check_start_state(scene: str, state: np.ndarray, what: str = "--state",
                      engine: Engine | None = None) -> None:
    """Refuse a hand-given initial state (scene layout) that :func:`check_state_bounds`
    refuses, or that puts the object deeper than ``START_PENETRATION_M`` into the table, or
    wholly below the table top (3D scenes: its bounding box under z = 0); allowed inside
    :func:`allow_implausible`. ``engine``: an open engine of ``scene`` to test in, else
    this process's own (:func:`_checking_engine`)."""
    check_state_bounds(scene, state, what)
    engine = engine if engine is not None else _checking_engine(scene)
    layout = engine.scene
    engine.reset(np.asarray(state, dtype=float))
    near = pb.getClosestPoints(layout.body, layout.static_body, 0.0, layout.link, -1,
                               physicsClientId=engine.client)
    depth = max(0.0, -min((p[8] for p in near), default=0.0))
    if not layout.planar:
        links = [layout.link] if layout.link >= -1 else \
            [-1, *range(pb.getNumJoints(layout.body, physicsClientId=engine.client))]
        boxes = [pb.getAABB(layout.body, link, physicsClientId=engine.client)
                 for link in links]  # link -2 (every link) has no box of its own
        low, high = min(b[0][2] for b in boxes), max(b[1][2] for b in boxes)
        if high < 0.0:  # wholly under the table top (a slab 1 m thick)
            depth = max(depth, -low)
    if depth > START_PENETRATION_M:
        _implausible(f"{what}: the state puts the object {1000 * depth:.0f} mm into the "
                     f"table (more than {1000 * START_PENETRATION_M:.0f} mm; scene "
                     f"{layout.name!r}: z up, table at z = 0)")


def check_state_bounds(scene: str, state: np.ndarray, what: str = "initial state") -> None:
    """Refuse a state (scene layout) no rollout can use, without running the engine:
    ParameterError for a non-finite entry or (3D) a quaternion w-x-y-z whose norm is off 1 by
    more than ``QUATERNION_NORM_TOLERANCE``; as implausible (:func:`allow_implausible`) a base
    beyond the table's edge or more than ``MAX_START_HEIGHT_M`` above its top, or a base
    velocity (m/s, world frame) or angular velocity (rad/s) above ``MAX_SPEED_MPS`` /
    ``MAX_ANGULAR_SPEED_RADPS``. Such states sent to a worker leave its PyBullet world
    broken for the rollouts after them."""
    state = np.asarray(state, dtype=float)
    layout = make_scene(scene)
    if state.shape != (layout.state_size,) or not np.isfinite(state).all():
        raise ParameterError(f"{what}: expected {layout.state_size} finite numbers for scene "
                             f"{layout.name!r}, got shape {state.shape}")
    position, _, velocity, spin = layout.rigid_motion(state[None])
    if not layout.planar:
        norm = float(np.hypot.reduce(state[3:7]))  # the raw quaternion, before any use
        if abs(norm - 1.0) > QUATERNION_NORM_TOLERANCE:
            raise ParameterError(f"{what}: the quaternion w,x,y,z has norm {norm:.4g}, "
                                 f"expected 1 (within {QUATERNION_NORM_TOLERANCE:g})")
    low, high = _table_box(scene)
    for axis in range(1) if layout.planar else range(2):  # planar: x along the floor
        if not low[axis] <= position[0, axis] <= high[axis]:
            _implausible(f"{what}: the base is at {'xyz'[axis]} = {position[0, axis]:.3g} m, "
                         f"beyond the table's edge ({low[axis]:g} to {high[axis]:g} m)")
            return
    up = 1 if layout.planar else 2
    if not position[0, up] <= high[up] + MAX_START_HEIGHT_M:
        _implausible(f"{what}: the base is {position[0, up]:.3g} m high, more than "
                     f"{MAX_START_HEIGHT_M:g} m above the table")
        return
    # hypot: the length of (1e200, 0, 0) is 1e200, not an overflow to inf
    speeds = (float(np.hypot.reduce(velocity[0])), float(np.hypot.reduce(spin[0])))
    for value, bound, quantity, unit in zip(
            speeds, (MAX_SPEED_MPS, MAX_ANGULAR_SPEED_RADPS),
            ("velocity", "angular velocity"), ("m/s", "rad/s")):
        if not value <= bound:
            _implausible(f"{what}: the state's base {quantity} is {value:.3g} {unit} "
                         f"(more than {bound:g} {unit})")
            return


@functools.lru_cache(maxsize=16)
def _table_box(scene: str) -> tuple[tuple, tuple]:
    """The static body's (table's or floor's) bounding box (low, high), m world frame."""
    with Engine(scene) as engine:
        return pb.getAABB(engine.scene.static_body, -1, physicsClientId=engine.client)


def load_recordings(path: str | os.PathLike[str], scene: str,
                    rate_hz: float | None = None, params=None,
                    select: Callable[[dict[str, Trajectory]], dict[str, Trajectory]] | None
                    = None) -> dict[str, Trajectory]:
    """Recordings in ``path`` (any format residualsim reads) prepared for ``scene``;
    ``rate_hz``: the rate CSV recordings are resampled to (a model's; the CLI's
    ``--rate-hz`` wins, :func:`residualsim.data.load_trajectories`). ``select``: a function
    of the recordings as read returning those wanted (e.g. a split,
    :func:`residualsim.data.splits.select_recordings`): only those are checked and fitted.
    ``params``: the engine parameters whose body fits pose-only starts
    (:func:`prepare_recordings`)."""
    trajectories = load_trajectories(path, rate_hz=rate_hz)
    return prepare_recordings(scene, select(trajectories) if select else trajectories, params)


def prepare_recordings(scene: str, trajectories: Mapping[str, Trajectory], params=None
                       ) -> dict[str, Trajectory]:
    """Check every recording against ``scene`` and fit the initial state of those whose
    velocities were estimated (see the module docstring); returns a new dict. ``params``
    (EngineParams, a calibration's or a model's): the engine the starts are fitted with, so
    a calibrated body rolls out from starts fitted with its own free flight (fitted with
    the URDF's body, a start carries that body's error: on pose-only synthetic hinge
    tosses the true body scored 25.0 mm held out from starts fitted with the URDF's body,
    12.0 mm from its own; train/README.md §22); default PyBullet's, the URDF's body."""
    layout = make_scene(scene)
    for traj in trajectories.values():
        layout.check_recording(traj)
        check_rate(traj)
        check_joint_units(layout, traj, _implausible)
    if not trajectories:
        return {}
    with Engine(scene) as engine:  # units and conventions first: they explain the rest
        for traj in trajectories.values():
            check_quaternion_order(engine, traj, table_distance_m, _implausible, REST_SAMPLES,
                                   WRONG_OBJECT_DEPTH_M)
            check_gravity(engine, traj, free_flight_samples(engine, traj), _implausible)
            check_velocity_point(engine.scene, traj, _implausible)
    for traj in trajectories.values():
        check_plausible(traj)
    out = dict(trajectories)
    estimated = sum(t.metadata.get("velocities") == "estimated" for t in trajectories.values())
    from residualsim.parallel.progress import progress_bar

    # Fitting initial states takes ~1 s a recording: a bar on a terminal, lines in logs.
    bar = progress_bar(total=len(trajectories), desc="read: initial states",
                       unit="recording", disable=estimated < 20, leave=False)
    with bar, Engine(scene, settings=recording_settings(scene, trajectories)) as engine:
        if params is not None:
            engine.set_params(params)
        for key, traj in trajectories.items():
            bar.update()
            depth = _penetration(engine, traj, 0)
            if depth > START_PENETRATION_M:
                raise DataError(f"{traj.source or key}: the first pose puts the object "
                                f"{1000 * depth:.1f} mm into the table (more than "
                                f"{1000 * START_PENETRATION_M:.0f} mm): not a recording of "
                                f"scene {layout.name!r} in its world frame (z up, table at "
                                "z = 0; planar: y up, floor at y = 0)")
            _check_object_fits(engine, traj, key)
            if traj.metadata.get("velocities") == "estimated":
                out[key] = fit_initial_state(engine, traj)
    return out


def _penetration(engine: Engine, trajectory: Trajectory, index: int) -> float:
    """How deep (m, >= 0) the recorded pose at ``index`` puts the object into the table."""
    return max(0.0, -table_distance_m(engine, trajectory, index, 0.0))


def table_distance_m(engine: Engine, trajectory: Trajectory, index: int,
                     horizon_m: float) -> float:
    """Signed distance (m) of the object at the recorded pose ``index`` to the table,
    negative inside; ``horizon_m`` when it is farther than that."""
    scene = engine.scene
    engine.reset(scene.state_from_trajectory(trajectory, index))
    near = pb.getClosestPoints(scene.body, scene.static_body, horizon_m, scene.link, -1,
                               physicsClientId=engine.client)
    return min((p[8] for p in near), default=horizon_m)


def _check_object_fits(engine: Engine, trajectory: Trajectory, key: str) -> None:
    """Refuse a recording whose poses cannot be this object's: deeper than
    ``WRONG_OBJECT_DEPTH_M`` into the table at some sample, or at rest (its last
    ``REST_SAMPLES`` positions within 1 mm) farther than that above it."""
    name = trajectory.source or key
    distances = np.array([table_distance_m(engine, trajectory, i, 2 * WRONG_OBJECT_DEPTH_M)
                          for i in range(trajectory.n_samples)])
    filled = [i for i in (trajectory.metadata.get("time_base") or {}).get("filled_samples", [])
              if 0 <= i < trajectory.n_samples]
    if filled and -distances[filled].min() > WRONG_OBJECT_DEPTH_M:
        # a bounce inside a gap: the straight line across it passes through the table
        worst = filled[int(np.argmin(distances[filled]))]
        log.warning("%s: samples %d to %d were filled in across a gap in the time stamps "
                    "(%.3f to %.3f s, interpolated, not measured) and pass %.0f mm into the "
                    "table at sample %d (a contact inside the gap); they are not used as "
                    "measurements", name, filled[0], filled[-1], trajectory.times_s[filled[0]],
                    trajectory.times_s[filled[-1]], -1000 * distances[worst], worst)
        distances[filled] = np.maximum(distances[filled], 0.0)
    deepest = int(np.argmin(distances))
    if -distances[deepest] > WRONG_OBJECT_DEPTH_M:
        raise DataError(
            f"{name}: the pose at sample {deepest} (t = {trajectory.times_s[deepest]:.3f} s) "
            f"puts the object {-1000 * distances[deepest]:.0f} mm into the table (more than "
            f"{1000 * WRONG_OBJECT_DEPTH_M:.0f} mm): a recording of another object or in "
            f"another frame than scene {engine.scene.name!r}")
    last = np.asarray(trajectory.positions_m)[-REST_SAMPLES:]
    at_rest = trajectory.n_samples > REST_SAMPLES and np.ptp(last, axis=0).max() < 1e-3
    if at_rest and distances[-REST_SAMPLES:].min() > WRONG_OBJECT_DEPTH_M:
        raise DataError(
            f"{name}: the object comes to rest {1000 * distances[-1]:.0f} mm or more above "
            f"the table (more than {1000 * WRONG_OBJECT_DEPTH_M:.0f} mm): a recording of "
            f"another object or in another frame than scene {engine.scene.name!r}")


def free_flight_samples(engine: Engine, trajectory: Trajectory,
                        tolerance_m: float = CONTACT_TOLERANCE_M,
                        max_samples: int = MAX_FREE_SAMPLES) -> int:
    """Number of leading samples before the first contact (see the module docstring), at
    most ``max_samples`` (the initial-state fit's :data:`MAX_FREE_SAMPLES`; ``data info``
    looks over a window in seconds)."""
    scene, distances = engine.scene, []
    for index in range(min(trajectory.n_samples, max_samples + 1)):
        engine.reset(scene.state_from_trajectory(trajectory, index))
        near = pb.getClosestPoints(scene.body, scene.static_body, BOUNCE_DISTANCE_M,
                                   scene.link, -1, physicsClientId=engine.client)
        distance = min((p[8] for p in near), default=np.inf)
        if distance <= tolerance_m or (distance < BOUNCE_DISTANCE_M  # or level above it
                                       and level_at(trajectory, index, 2 - scene.planar)):
            return index
        if len(distances) >= 2 and distances[-2] > distances[-1] < distance \
                and distances[-1] < BOUNCE_DISTANCE_M:
            return index - 1
        distances.append(distance)
    return min(trajectory.n_samples, max_samples)


def fit_initial_state(engine: Engine, trajectory: Trajectory,
                      velocities: bool = True) -> Trajectory:
    """``trajectory`` with its sample 0 (pose, velocities, joints) replaced by the initial
    state whose rollout best matches the free-flight samples (see the module docstring);
    unchanged when fewer than :data:`MIN_FREE_SAMPLES` samples are in free flight.

    ``velocities=False`` fits the pose (and joint positions) only, keeping the recorded
    velocities: for a recording whose velocities were recorded, not estimated (its first
    pose is as noisy as any other; the fit averages that noise over the free flight). The
    stored covariance then has zero rows and columns for the velocities."""
    from scipy.optimize import least_squares

    scene = engine.scene
    recorded_first = trajectory.metadata.get(RECORDED_FIRST_STATE)
    if recorded_first is not None:  # fitted before (another body): start from the data
        trajectory = with_initial_state(trajectory, scene, np.asarray(recorded_first), {})
        trajectory = dataclasses.replace(trajectory, metadata={  # the earlier fit's notes go
            k: v for k, v in trajectory.metadata.items() if k not in _FIT_NOTES})
    else:
        recorded_first = scene.state_from_trajectory(trajectory, 0).tolist()
    n_free = free_flight_samples(engine, trajectory)
    if n_free < MIN_FREE_SAMPLES:
        log.info("%s: %d free-flight samples, initial state kept as estimated",
                 trajectory.traj_id, n_free)
        return trajectory
    states = np.array([scene.state_from_trajectory(trajectory, i) for i in range(n_free)])
    positions, quat, _, _ = scene.rigid_motion(states)
    radius = scene.radius_of_gyration_m
    n_joints = getattr(scene, "n_joints", 0)
    joints = states[:, 13:13 + n_joints] if n_joints else None
    scale = np.array([radius if kind == "revolute" else 1.0
                      for kind in scene.info.joint_types]) if n_joints else None

    def initial(z: np.ndarray) -> np.ndarray:
        state = states[0].copy()
        if scene.planar:
            state[:3] += z[:3]
            state[3:6] = z[3:6]
            return state
        state[0:3] += z[0:3]
        state[3:7] = rotate_by_rotvec(states[0, 3:7], z[3:6])
        state[7:13] = z[6:12]
        if n_joints:
            state[13:13 + n_joints] += z[12:12 + n_joints]
            state[13 + n_joints:] = z[12 + n_joints:]
        return state

    filled = set(trajectory.metadata.get("time_base", {}).get("filled_samples", ()))
    recorded = np.array([i not in filled for i in range(n_free)])  # not inside a gap

    def residuals(z: np.ndarray, n: int) -> np.ndarray:
        run = engine.rollout(initial(z), n - 1, detect_contacts=False).states
        sim_pos, sim_quat, _, _ = scene.rigid_motion(run)
        keep = recorded[:n]
        parts = [(sim_pos - positions[:n])[keep].ravel(),
                 radius * quat_relative_rotvec(sim_quat, quat[:n])[keep].ravel()]
        if n_joints:
            parts.append(((run[:, 13:13 + n_joints] - joints[:n]) * scale)[keep].ravel())
        return np.concatenate(parts)

    full = (np.concatenate([np.zeros(3), states[0, 3:6]]) if scene.planar else
            np.concatenate([np.zeros(6), states[0, 7:13]] + (
                [np.zeros(n_joints), states[0, 13 + n_joints:]] if n_joints else [])))
    if velocities:
        fitted = np.arange(len(full))
    else:  # the pose unknowns: planar (dx, dy, dθ), free (dp, rotation) and joint positions
        fitted = np.arange(3) if scene.planar else np.concatenate(
            [np.arange(6), 12 + np.arange(n_joints)]).astype(int)

    def expand(part: np.ndarray) -> np.ndarray:
        z = full.copy()
        z[fitted] = part
        return z

    start = full[fitted]
    for n in sorted({min(8, n_free), min(16, n_free), n_free}):
        if recorded[:n].sum() * (3 + n_joints) < len(start):  # fewer residuals than unknowns
            continue
        fit = least_squares(lambda part, n: residuals(expand(part), n), start, method="lm",
                            x_scale="jac", args=(n,), max_nfev=100 * len(start))
        start = fit.x
    state = initial(expand(start))
    rms_m = float(np.sqrt(np.mean(fit.fun ** 2)))
    covariance = np.zeros((len(full), len(full)))
    covariance[np.ix_(fitted, fitted)] = _fit_covariance(fit)
    return with_initial_state(trajectory, scene, state, {
        "initial_state": FITTED_START + ("" if velocities else " (pose only)"),
        RECORDED_FIRST_STATE: recorded_first,
        "free_flight_samples": n_free, "initial_fit_rms_m": rms_m,
        "initial_state_covariance": covariance.tolist()})


def fit_starts(scene: str, trajectories: Mapping[str, Trajectory], settings, params=None,
               n_workers: int = 1, *, estimated: bool = True, recorded: bool = False
               ) -> dict[str, Trajectory]:
    """The recordings with their first states fitted again to their free flight with the
    engine at ``params`` (EngineParams; its body is what matters; default PyBullet's) at
    ``settings``, each from its first state as recorded: ``estimated``, those whose
    velocities were estimated from poses (pose and velocities, as
    :func:`prepare_recordings` fits them); ``recorded``, those with recorded velocities
    (pose only, velocities kept: ``calibrate --recorded-start fit``). A start fitted with
    one body is biased for another (issue 51; train/README.md §22). The fits run over
    ``n_workers`` engine processes; each is deterministic, so the result does not depend on
    the count."""
    from residualsim.sim.pool import engine_workers

    out = dict(trajectories)
    pending = [(key, traj, traj.metadata.get("velocities") == "estimated")
               for key, traj in trajectories.items()
               if (estimated if traj.metadata.get("velocities") == "estimated" else recorded)]
    if not pending:
        return out
    with engine_workers(scene, pending, min(int(n_workers), len(pending)), settings) as pool:
        for key, fitted in pool.map(_fit_start, params):
            out[key] = fitted
    return out


def _fit_start(engine: Engine, item: tuple, params) -> tuple[str, Trajectory]:
    """Worker function of :func:`fit_starts`: (id, the recording with its start fitted)."""
    if params is not None:
        engine.set_params(params)
    key, traj, estimated = item
    return key, fit_initial_state(engine, traj, velocities=estimated)


def _fit_covariance(fit) -> np.ndarray:
    """Covariance of a least-squares fit's unknowns, s² (JᵀJ)⁺ with s² the residual
    variance (m²); the units are those of the unknowns (see :func:`offset_initial_state`)."""
    jac = np.asarray(fit.jac, dtype=np.float64)
    dof = max(1, jac.shape[0] - jac.shape[1])
    variance = float(np.sum(fit.fun ** 2)) / dof
    return variance * np.linalg.pinv(jac.T @ jac)


def offset_initial_state(scene, state: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """``state`` (scene layout) moved by ``offset`` in the unknowns of
    :func:`fit_initial_state`: planar (dx, dy, dθ, dvx, dvy, dω); free (dp m world, rotation
    vector rad applied as in the fit, dv m/s world, dω rad/s world, then each joint's
    position and velocity offset)."""
    out = np.array(state, dtype=np.float64)
    if scene.planar:
        out[:6] += offset[:6]
        return out
    n_joints = getattr(scene, "n_joints", 0)
    out[0:3] += offset[0:3]
    out[3:7] = rotate_by_rotvec(out[3:7], offset[3:6])
    out[7:13] += offset[6:12]
    if n_joints:
        out[13:13 + 2 * n_joints] += offset[12:12 + 2 * n_joints]
    return out


def initial_state_draws(scene, trajectory: Trajectory, count: int,
                        rng: np.random.Generator) -> np.ndarray:
    """``count`` initial states (count, state size) drawn from the Gaussian uncertainty of a
    fitted initial state (``metadata["initial_state_covariance"]``, see
    :func:`fit_initial_state`); the recorded state repeated when it was not fitted."""
    state = scene.state_from_trajectory(trajectory, 0)
    covariance = trajectory.metadata.get("initial_state_covariance")
    if covariance is None:
        return np.repeat(state[None], count, axis=0)
    covariance = np.asarray(covariance, dtype=np.float64)
    offsets = rng.multivariate_normal(np.zeros(len(covariance)), covariance, size=count,
                                      method="eigh")
    return np.array([offset_initial_state(scene, state, z) for z in offsets])


def with_initial_state(trajectory: Trajectory, scene, state: np.ndarray,
                        notes: dict) -> Trajectory:
    """A copy of ``trajectory`` whose sample 0 holds ``state`` (scene layout)."""
    position, quat, velocity, omega = (a[0] for a in scene.rigid_motion(state[None]))
    arrays = {name: np.array(getattr(trajectory, name)) for name in (
        "positions_m", "quat_wxyz", "linear_velocity_mps", "angular_velocity_world_radps",
        "joint_positions", "joint_velocities")}
    arrays["positions_m"][0] = position
    arrays["quat_wxyz"][0] = quat
    arrays["linear_velocity_mps"][0] = velocity
    arrays["angular_velocity_world_radps"][0] = omega
    n_joints = getattr(scene, "n_joints", 0)
    if n_joints:
        arrays["joint_positions"][0] = state[13:13 + n_joints]
        arrays["joint_velocities"][0] = state[13 + n_joints:]
    return dataclasses.replace(trajectory, **arrays,
                               metadata={**trajectory.metadata, **notes})


def rollout_residuals(engine: Engine, initial_state: np.ndarray, positions: np.ndarray,
                 quat: np.ndarray, radius: float, *joint_item) -> np.ndarray:
    """The residual vector (T * (6 + joints),) of one rollout of ``engine`` (at its current
    parameters) from ``initial_state`` against T recorded samples after it: per sample the
    position error (3, m, world), ``radius`` times the rotation vector from recorded to
    simulated orientation (3, m, world; its norm is radius × the angle, and its signed
    components give Gauss-Newton a smooth model where the angle has a kink at zero) and
    each joint's error times its scale (m per rad, or 1). A failed rollout gives 1 m."""
    states = engine.rollout(initial_state, len(positions), detect_contacts=False).states
    sim_positions, sim_quat, _, _ = engine.scene.rigid_motion(states)
    parts = [sim_positions[1:] - positions, radius * quat_relative_rotvec(sim_quat[1:], quat)]
    if joint_item:
        joints, scale = joint_item
        parts.append((engine.scene.joint_positions(states)[1:] - joints) * scale)
    row = np.concatenate(parts, axis=1).ravel()
    return row if np.all(np.isfinite(row)) else np.ones_like(row)
