"""Synthetic motion-capture sessions with known truth: throws, carries, placements, slides.

A lab records one continuous session: an object (a URDF, rigid or articulated) is thrown
onto a table again and again; between throws a hand picks it up and carries it, sets it down
(a placement, sometimes with a drop of a few millimetres) or slides it along the table. The
capture publishes each tracked link's pose. :func:`synthesize_session` makes such a session
in PyBullet, with the truth a session reader must recover (release instants, first
contacts, rest, the hand's phases); :func:`corrupt_session` turns it into the noisy,
gappy message streams a capture system publishes, which
:func:`residualsim.data.session_write.write_pose_bag` writes as a ROS bag.

Timeline (session clock ``t = start_s + k / rate_hz``, sample k)
    The object starts at rest on the table. Each throw: the hand picks it up (a kinematic,
    minimum-jerk path: a vertical lift, then a move to the wind-up pose, 0.5-1.5 s in all,
    joints moving slowly), winds up for 0.2-0.35 s (the velocity ramps from 0 to the
    release velocity, v(u) = dv (u + u^2) / 2 for u = 0..1, an acceleration of 8-20 m/s^2
    at release pointing up and forward, never like gravity's), and RELEASES it at an
    instant between samples. The release state (pose, base velocity, angular velocity,
    joint angles and rates) is the hand's there; PyBullet takes over (free flight of
    0.15-0.45 s, bounces, sliding) until the object has been at rest for 0.5-1 s (at most
    4 s after the release), and the hand picks it up again between two samples. Release
    heights 0.15-0.5 m (base link origin), horizontal speeds 0.3-1.5 m/s, angular speeds
    1-10 rad/s; joint rates at release U(-4, 4) rad/s (limited revolute joints),
    +-U(8, 15) rad/s (continuous joints), U(-0.15, 0.15) m/s (prismatic joints, reduced
    so the wind-up stays within the limits). Between throws: ``placements`` carries that
    set the object down on the table, in the resting pose it was picked up in turned about
    the vertical and moved 0.1-0.35 m (every other one let go 2-8 mm above the table, a
    free drop; the others let go at rest on it), and ``slides`` pushes along the table
    (z and tilt held, 5-20 cm, turning up to 0.5 rad). Every hand path keeps the object
    at least 5 mm clear of the table except where it is meant to touch (the lift's start,
    a set-down, a slide), checked at every sample instant.

Physics
    One :class:`~residualsim.sim.engine.Engine` world of the scene (the table top at z = 0,
    gravity -9.81 z) stepped at 1 / (rate_hz * substeps); a release between two substep
    instants first takes a partial step to the next one. Contact parameters: ``params``
    over :data:`SESSION_PARAMS` (bouncy and slippery enough to bounce and slide). Hand
    phases set the pose kinematically (no physics); every link pose is read back from
    PyBullet's forward kinematics, so links always agree with the URDF. In free flight a
    rigid body's centre of mass is a parabola under g to rounding (1e-15 m); an articulated
    body's strays from it by O(dt omega^2 r T), since Bullet integrates the base rotation
    and the joints to first order (measured on the hinge at 1.5 kHz, |omega| = 10 rad/s,
    0.45 s: 1e-5 to 1e-4 m; 48 session throws at 150 Hz x 10 substeps: at most 6e-5 m).

Truth (:class:`SyntheticSession`)
    Every link's URDF frame pose at every sample. PyBullet gives every link's centre-of-mass
    (inertial) frame: the base's from ``getBasePositionAndOrientation``, the others'
    from ``getLinkState`` indices 0 and 1; each is turned into the URDF link frame with the
    link's local inertial frame (``getDynamicsInfo`` indices 3 and 4 for the base,
    ``getLinkState`` indices 2 and 3 for the others). ``getLinkState`` indices 4 and 5 are
    the URDF link frame too, but PyBullet computes them in single precision (measured: off
    by 1e-8 to 6e-8 m from the base pose times the joint transform, against 1e-16 this
    way). Then the joint angles (continuous joints not wrapped), the object's centre of
    mass, which samples the hand holds, each throw's release, first contact and rest, and
    the phases as events. At rest: the base's centre-of-mass speed below
    :data:`REST_SPEED_MPS`, its angular speed below :data:`REST_OMEGA_RADPS` and every
    joint rate below :data:`REST_JOINT_RATE` rad/s (a prismatic joint's below
    :data:`REST_SPEED_MPS`), at every sample up to the throw's end.

Cost: a 6-throw session (about 25-40 s of capture at 150 Hz, 10 substeps) takes 0.5-1.8 s
to generate (measured over 8 seeds: cube 0.5 s, slider 0.6 s, spinner and hinge 1.2 s on
average).

Modules: the hand's paths and numpy quaternions in :mod:`.session_motion`, the PyBullet
world and the recording in :mod:`.session_world`, what the hand does (throws, placements,
slides) in :mod:`.session_plans`; this module holds the truth and the corruption.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from residualsim.data.session_write import PoseMessages
from residualsim.errors import ParameterError, SceneError
from residualsim.sim.session_motion import quat_exp, quat_mul, sign_continuous
from residualsim.sim.session_plans import plan_actions, run_action
from residualsim.sim.session_world import (REST_JOINT_RATE, REST_OMEGA_RADPS, REST_SPEED_MPS,
                                           Phase, SessionWorld, first_rest)

__all__ = ["ThrowTruth", "SyntheticSession", "synthesize_session", "corrupt_session",
           "SESSION_PARAMS", "REST_SPEED_MPS", "REST_OMEGA_RADPS", "REST_JOINT_RATE",
           "EVENT_KINDS"]

#: Contact parameters of a session unless ``params`` says otherwise (effective pair values).
SESSION_PARAMS = {"lateral_friction": 0.3, "restitution": 0.4, "spinning_friction": 0.001,
                  "rolling_friction": 0.0}
#: The kinds of :attr:`SyntheticSession.events`.
EVENT_KINDS = ("throw", "carry", "placement", "slide", "rest")


@dataclasses.dataclass(frozen=True)
class ThrowTruth:
    """The truth of one throw (indices into :attr:`SyntheticSession.times_s`).

    release_index : first sample in free flight (at or after the release instant)
    release_time_s : the release instant, s, session clock (between two samples)
    rest_index : first sample at which the object is at rest again (see the module
        docstring), or ``end_index`` when it is picked up before it rests
    end_index : last sample before the hand touches the object again
    contact_index : first sample touched by the first contact with the table (samples
        ``release_index .. contact_index - 1`` are in free flight)
    release_velocity_mps, release_omega_radps : the base link origin's velocity (3,) m/s
        and the base's angular velocity (3,) rad/s at release, world frame
    release_joint_rates : (n,) rad/s or m/s at release
    """

    release_index: int
    release_time_s: float
    rest_index: int
    end_index: int
    contact_index: int = -1
    release_velocity_mps: tuple[float, ...] = ()
    release_omega_radps: tuple[float, ...] = ()
    release_joint_rates: tuple[float, ...] = ()


@dataclasses.dataclass(frozen=True)
class SyntheticSession:
    """A synthetic capture session and its truth (noise-free).

    times_s : (T,) uniform sample instants, s, session clock (from ``start_s``)
    link_names : every URDF link, base first
    link_positions_m : link -> (T, 3) link frame origin, m, world
    link_quat_wxyz : link -> (T, 4) w-x-y-z, link -> world (sign continuous in time)
    joint_names : the non-fixed joints, URDF order
    joint_positions : (T, n) rad or m (continuous joints not wrapped)
    throws : one :class:`ThrowTruth` per throw, in time order
    events : (kind, start_s, end_s) in time order, kinds :data:`EVENT_KINDS`: ``rest``
        (the object lies still, or settles, untouched), ``carry`` (pick-up to the release
        of a throw, the wind-up included), ``throw`` (release to rest, or to the next
        pick-up when it does not rest), ``placement`` (pick-up to rest on the table after
        the hand lets go, a drop included), ``slide`` (the hand pushes it along the table)
    rate_hz : sample rate, Hz
    com_positions_m : (T, 3) the whole object's centre of mass, m, world
    held : (T,) True where the hand holds the object (kinematic samples)
    metadata : scene, seed, substeps, contact parameters and the like
    """

    times_s: np.ndarray
    link_names: tuple[str, ...]
    link_positions_m: dict[str, np.ndarray]
    link_quat_wxyz: dict[str, np.ndarray]
    joint_names: tuple[str, ...]
    joint_positions: np.ndarray
    throws: tuple[ThrowTruth, ...]
    events: tuple[tuple[str, float, float], ...]
    rate_hz: float
    com_positions_m: np.ndarray | None = None
    held: np.ndarray | None = None
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.times_s)


def _session_scene(scene) -> str:
    """The scene path a session runs: a scene file or URDF of a free object ("cube": the
    bundled cube's)."""
    from residualsim.sim.scenes import ASSETS_DIR, is_scene_path, read_scene_file

    if isinstance(scene, (str, Path)) and str(scene) == "cube":
        return str(ASSETS_DIR / "cube.toml")
    if not isinstance(scene, (str, Path)) or not is_scene_path(scene):
        raise SceneError(f"scene must be the path of a scene file (.toml) or a .urdf of a "
                         f"free object, got {scene!r}")
    spec = read_scene_file(scene)
    if spec.kind != "free":
        raise SceneError(f"{scene}: a {spec.kind} scene; sessions need a free object (3D)")
    return str(scene)


def _check_arguments(rate_hz, n_throws, placements, slides, substeps, start_s) -> None:
    if not (isinstance(rate_hz, (int, float)) and math.isfinite(rate_hz)
            and 10.0 <= rate_hz <= 2000.0):
        raise ParameterError(f"rate_hz must be a number in [10, 2000] Hz, got {rate_hz!r}")
    for name, value in (("n_throws", n_throws), ("placements", placements),
                        ("slides", slides)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ParameterError(f"{name} must be an int >= 0, got {value!r}")
    if isinstance(substeps, bool) or not isinstance(substeps, (int, np.integer)) \
            or not 1 <= substeps <= 100:
        raise ParameterError(f"substeps must be an int in [1, 100], got {substeps!r}")
    if not (isinstance(start_s, (int, float)) and math.isfinite(start_s) and start_s >= 0):
        raise ParameterError(f"start_s must be a finite number >= 0, got {start_s!r}")


def synthesize_session(scene, *, rate_hz: float = 150.0, n_throws: int = 6, seed: int = 0,
                       start_s: float = 0.0, placements: int = 2, slides: int = 1,
                       substeps: int = 10, params=None) -> SyntheticSession:
    """Simulate a capture session of ``scene`` with known truth (see the module docstring).

    Parameters
    ----------
    scene : str or path
        A scene file (``.toml``, kind "free") or a ``.urdf`` (``"cube"``: the bundled cube).
    rate_hz : float
        Sample rate of the capture, Hz (10-2000).
    n_throws : int
        Throws in the session.
    seed : int
        Seed of every random choice: the same seed gives the same session, bit for bit.
    start_s : float
        Session clock at the first sample, s (e.g. a Unix epoch time like 1.7e9).
    placements, slides : int
        Set-downs and pushes along the table, at random places between throws.
    substeps : int
        Physics steps per sample.
    params : EngineParams, mapping or str, optional
        Contact parameters over :data:`SESSION_PARAMS`.

    Returns
    -------
    SyntheticSession
    """
    from residualsim.sim.engine import Engine
    from residualsim.sim.scenes import EngineParams, EngineSettings, parse_params

    _check_arguments(rate_hz, n_throws, placements, slides, substeps, start_s)
    path = _session_scene(scene)
    engine_params = parse_params(params, base=EngineParams().replace(**SESSION_PARAMS))
    settings = EngineSettings(dt_s=1.0 / (rate_hz * substeps), substeps=1)
    rng = np.random.default_rng(seed)
    plan = plan_actions(rng, n_throws, placements, slides)
    with Engine(path, engine_params, settings) as engine:
        world = SessionWorld(engine, rate_hz, substeps, rng)
        world.settle()
        stop, _ = world.free_phase(0, 0.0, touching=True, hold_s=rng.uniform(0.5, 1.0),
                                   cap_s=math.inf)
        world.phases.append(Phase("start", 0.0, 0.0, 0, stop=stop, contact=0))
        for kind, drop_m in plan:
            run_action(world, kind, drop_m)
        arrays = world.arrays()
        return _session(world, arrays, start_s, dict(
            scene=path, seed=seed, rate_hz=float(rate_hz), substeps=int(substeps),
            params=dataclasses.asdict(engine_params), n_throws=n_throws,
            placements=placements, slides=slides))


def _session(world: SessionWorld, arrays: dict, start_s: float, metadata: dict
             ) -> SyntheticSession:
    """The session's truth from the run: throws, events (session clock) and arrays."""
    n = len(world.rows)
    times = start_s + np.arange(n) / world.rate_hz
    rest = np.array(world.rest, dtype=bool)
    events: list[tuple[str, float, float]] = []
    throws: list[ThrowTruth] = []
    phases = world.phases

    def clock(seconds: float) -> float:
        return float(start_s + seconds)

    for number, phase in enumerate(phases):
        later = phases[number + 1].pick_s if number + 1 < len(phases) else None
        free_end = clock(later) if later is not None else float(times[-1])
        settled = first_rest(rest, max(phase.contact, phase.first_free), phase.stop)
        settled_s = float(times[settled]) if settled is not None else None
        if phase.kind == "start":
            events.append(("rest", float(times[0]), free_end))
            continue
        if phase.kind == "throw":
            events.append(("carry", clock(phase.pick_s), clock(phase.release_s)))
            events.append(("throw", clock(phase.release_s),
                            settled_s if settled_s is not None else free_end))
            throws.append(ThrowTruth(
                release_index=phase.first_free, release_time_s=clock(phase.release_s),
                rest_index=settled if settled is not None else phase.stop,
                end_index=phase.stop, contact_index=phase.contact,
                release_velocity_mps=phase.release_velocity,
                release_omega_radps=phase.release_omega,
                release_joint_rates=phase.release_rates))
        elif phase.kind == "placement":
            events.append(("placement", clock(phase.pick_s),
                           settled_s if settled_s is not None else free_end))
        else:
            events.append(("slide", clock(phase.pick_s), clock(phase.release_s)))
            settled_s = clock(phase.release_s)
        if settled_s is not None and settled_s < free_end:
            events.append(("rest", settled_s, free_end))
    positions, quats = arrays["positions"], arrays["quats"]
    return SyntheticSession(
        times_s=times, link_names=tuple(world.link_names),
        link_positions_m=positions, link_quat_wxyz=quats,
        joint_names=tuple(world.scene.joint_names), joint_positions=arrays["joints"],
        throws=tuple(throws), events=tuple(events), rate_hz=world.rate_hz,
        com_positions_m=arrays["com"], held=np.array(world.held, dtype=bool),
        metadata=metadata)


# --- what a capture system makes of it ----------------------------------------------------
def _runs(rng: np.random.Generator, free: np.ndarray, count: int, low: int, high: int,
          guard_before: int = 0) -> list[tuple[int, int]]:
    """``count`` runs [start, stop) of low..high consecutive samples where ``free`` is True
    (and ``guard_before`` samples before them), marked used (with a one-sample gap)."""
    runs = []
    n = len(free)
    for _ in range(count):
        for _attempt in range(200):
            length = int(rng.integers(low, high + 1))
            start = int(rng.integers(guard_before + 1, max(guard_before + 2, n - length - 1)))
            stop = start + length
            if stop < n and free[start - 1 - guard_before:stop + 1].all():
                free[start - 1 - guard_before:stop + 1] = False
                runs.append((start, stop))
                break
    return sorted(runs)


def corrupt_session(session: SyntheticSession, *, noise_m: float = 3e-4,
                    noise_rad: float = 2e-3, jitter_s: float = 0.0, dropout: float = 0.0,
                    nan_runs: int = 0, frozen_runs: int = 0, out_of_order: int = 0,
                    duplicates: int = 0, seed: int = 0) -> dict[str, PoseMessages]:
    """The message streams a capture system would publish for ``session``: one per link,
    keyed by link name.

    Each stream gets, from its own random stream (``seed`` and the link's place):

    * Gaussian position noise of ``noise_m`` per axis (m, world) and an orientation noise
      ``exp(δ) ⊗ q`` with δ of ``noise_rad`` per world axis (rad);
    * header stamps = truth + N(0, ``jitter_s``); receive times = the true sample instants;
    * ``nan_runs`` runs of 2-6 messages whose pose is NaN (lost tracking);
    * ``frozen_runs`` runs of 3-8 messages repeating the message before them exactly (a
      frozen tracker), with their own stamps;
    * ``out_of_order`` adjacent pairs whose receive times are swapped (header stamps kept);
    * ``duplicates`` messages sent twice (same stamp and pose);
    * dropped messages: a fraction ``dropout`` at random, plus (when ``dropout`` > 0) three
      runs of 3-10 consecutive ones.

    No corruption but dropping falls on the first 5 samples from a throw's release (or the
    sample before it), and nothing, not even a drop, on the release sample itself. The
    corruptions never overlap (each is where the metadata says). Each stream's
    ``metadata``: ``truth_index`` (message -> session sample), ``dropped`` (session
    samples), ``nan_runs`` and ``frozen_runs`` ([start, stop) session samples),
    ``out_of_order`` (session sample i swapped with i + 1), ``duplicates`` (session samples)
    and the settings.
    """
    for name, value in (("noise_m", noise_m), ("noise_rad", noise_rad),
                        ("jitter_s", jitter_s)):
        if not (math.isfinite(value) and value >= 0):
            raise ParameterError(f"{name} must be finite and >= 0, got {value!r}")
    if not 0.0 <= dropout < 1.0:
        raise ParameterError(f"dropout must lie in [0, 1), got {dropout!r}")
    n = len(session.times_s)
    protected = np.zeros(n, dtype=bool)
    release = np.zeros(n, dtype=bool)
    for throw in session.throws:
        protected[max(throw.release_index - 1, 0):throw.release_index + 5] = True
        release[throw.release_index] = True
    settings = dict(noise_m=noise_m, noise_rad=noise_rad, jitter_s=jitter_s, dropout=dropout,
                    seed=seed)
    streams = {}
    for place, link in enumerate(session.link_names):
        rng = np.random.default_rng([seed, place])
        positions = session.link_positions_m[link] + rng.normal(0.0, noise_m, (n, 3))
        quat = quat_mul(quat_exp(rng.normal(0.0, noise_rad, (n, 3))), session.link_quat_wxyz[link])
        quat = sign_continuous(quat / np.linalg.norm(quat, axis=1, keepdims=True))
        stamps = session.times_s + (rng.normal(0.0, jitter_s, n) if jitter_s else 0.0)
        receive = session.times_s.copy()
        free = ~protected
        free[[0, n - 1]] = False
        unused = free.copy()
        nan = _runs(rng, free, nan_runs, 2, 6)
        frozen = _runs(rng, free, frozen_runs, 3, 8, guard_before=1)
        swaps = [start for start, _ in _runs(rng, free, out_of_order, 2, 2)]
        doubled = [start for start, _ in _runs(rng, free, duplicates, 1, 1)]
        for start, stop in nan:
            positions[start:stop] = np.nan
            quat[start:stop] = np.nan
        for start, stop in frozen:
            positions[start:stop] = positions[start - 1]
            quat[start:stop] = quat[start - 1]
        for i in swaps:
            receive[i], receive[i + 1] = receive[i + 1], receive[i]
        corrupted = unused & ~free  # the corruptions' samples and the gaps beside them
        dropped = np.zeros(n, dtype=bool)
        if dropout > 0:
            for start, stop in _runs(rng, free, 3, 3, 10):
                dropped[start:stop] = True
            dropped |= ~corrupted & ~release & (rng.random(n) < dropout)
        keep = np.flatnonzero(~dropped)
        index = np.sort(np.concatenate([keep, np.array(doubled, dtype=int)]), kind="stable")
        streams[link] = PoseMessages(
            stamps_s=stamps[index], positions_m=positions[index], quat_wxyz=quat[index],
            receive_s=receive[index],
            metadata=dict(truth_index=index, dropped=np.flatnonzero(dropped),
                          nan_runs=nan, frozen_runs=frozen, out_of_order=swaps,
                          duplicates=doubled, **settings))
    return streams
