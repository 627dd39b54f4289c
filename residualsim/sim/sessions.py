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

Cost: a 6-throw session (about 30-40 s of capture at 150 Hz, 10 substeps) takes about
1-2 s to generate.
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
from residualsim.sim.bullet import pb

__all__ = ["ThrowTruth", "SyntheticSession", "synthesize_session", "corrupt_session",
           "SESSION_PARAMS", "REST_SPEED_MPS", "REST_OMEGA_RADPS", "REST_JOINT_RATE",
           "EVENT_KINDS"]

#: Contact parameters of a session unless ``params`` says otherwise (effective pair values).
SESSION_PARAMS = {"lateral_friction": 0.3, "restitution": 0.4, "spinning_friction": 0.001,
                  "rolling_friction": 0.0}
#: At rest: the base's centre-of-mass speed below this, m/s.
REST_SPEED_MPS = 2e-3
#: At rest: the base's angular speed below this, rad/s.
REST_OMEGA_RADPS = 0.05
#: At rest: every joint's rate below this, rad/s (a prismatic joint: REST_SPEED_MPS).
REST_JOINT_RATE = 0.05
#: The kinds of :attr:`SyntheticSession.events`.
EVENT_KINDS = ("throw", "carry", "placement", "slide", "rest")

_GRAVITY = 9.81
_CLEARANCE_M = 0.005
_CAP_S = 4.0
_ATTEMPTS = 400
#: F(1) of the wind-up's position profile F(u) = u^2/4 + u^3/6 (velocity (u + u^2)/2).
_WINDUP_F1 = 5.0 / 12.0


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


# --- quaternions (w-x-y-z), numpy ---------------------------------------------------------
def _qmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a ⊗ b, broadcast over (..., 4)."""
    w1, x1, y1, z1 = np.moveaxis(np.asarray(a, dtype=np.float64), -1, 0)
    w2, x2, y2, z2 = np.moveaxis(np.asarray(b, dtype=np.float64), -1, 0)
    return np.stack([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
                     w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
                     w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2], axis=-1)


def _qconj(q: np.ndarray) -> np.ndarray:
    return np.asarray(q, dtype=np.float64) * np.array([1.0, -1.0, -1.0, -1.0])


def _qexp(rotvec: np.ndarray) -> np.ndarray:
    """Unit quaternions (..., 4) of rotation vectors (..., 3), rad."""
    rotvec = np.asarray(rotvec, dtype=np.float64)
    angle = np.linalg.norm(rotvec, axis=-1, keepdims=True)
    half = 0.5 * angle
    scale = np.where(angle > 1e-12, np.sin(half) / np.where(angle > 1e-12, angle, 1.0), 0.5)
    return np.concatenate([np.cos(half), rotvec * scale], axis=-1)


def _qlog(q: np.ndarray) -> np.ndarray:
    """Rotation vectors (..., 3) of unit quaternions (..., 4) (the shorter way round)."""
    q = np.asarray(q, dtype=np.float64)
    q = q * np.where(q[..., :1] < 0, -1.0, 1.0)
    vector = q[..., 1:]
    norm = np.linalg.norm(vector, axis=-1, keepdims=True)
    angle = 2.0 * np.arctan2(norm, q[..., :1])
    return vector * np.where(norm > 1e-12, angle / np.where(norm > 1e-12, norm, 1.0), 2.0)


def _qrotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Vectors (..., 3) rotated by unit quaternions (..., 4)."""
    q = np.asarray(q, dtype=np.float64)
    u, w = q[..., 1:], q[..., :1]
    t = 2.0 * np.cross(u, v)
    return v + w * t + np.cross(u, t)


def _sign_continuous(quat: np.ndarray) -> np.ndarray:
    """``quat`` (T, 4) with signs flipped so that consecutive quaternions agree (q·q' >= 0)."""
    if len(quat) < 2:
        return quat
    flips = np.sum(quat[1:] * quat[:-1], axis=1) < 0
    sign = np.cumprod(np.concatenate([[1.0], np.where(flips, -1.0, 1.0)]))
    return quat * sign[:, None]


def _random_quat(rng: np.random.Generator) -> np.ndarray:
    q = rng.normal(size=4)
    q /= np.linalg.norm(q)
    return q if q[0] >= 0 else -q


def _yaw(angle: float) -> np.ndarray:
    return np.array([math.cos(angle / 2), 0.0, 0.0, math.sin(angle / 2)])


def _minimum_jerk(u: float) -> float:
    u = min(max(u, 0.0), 1.0)
    return u * u * u * (10.0 + u * (-15.0 + 6.0 * u))


# --- the hand's paths -----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _Move:
    """A minimum-jerk move from rest to rest over [t0, t1]: position ``p0`` -> ``p1``,
    orientation ``q0`` -> ``exp(turn) ⊗ q0`` (turned about a fixed world axis), joints
    ``j0`` -> ``j1``."""

    t0: float
    t1: float
    p0: np.ndarray
    p1: np.ndarray
    q0: np.ndarray
    turn: np.ndarray
    j0: np.ndarray
    j1: np.ndarray

    def at(self, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        s = _minimum_jerk((t - self.t0) / (self.t1 - self.t0))
        return (self.p0 + s * (self.p1 - self.p0), _qmul(_qexp(s * self.turn), self.q0),
                self.j0 + s * (self.j1 - self.j0))


@dataclasses.dataclass(frozen=True)
class _Windup:
    """The throw's wind-up over [t0, t0 + duration]: u = (t - t0) / duration, velocity
    ``dv (u + u^2) / 2`` (0 to ``dv``), position ``p0 + dv duration F(u)`` with
    F(u) = u^2/4 + u^3/6; the same profile for the rotation (angular velocity ``omega``
    at the end, a fixed world axis) and the joints (rates ``rates`` at the end)."""

    t0: float
    duration: float
    p0: np.ndarray
    dv: np.ndarray
    q0: np.ndarray
    omega: np.ndarray
    j0: np.ndarray
    rates: np.ndarray

    @property
    def t1(self) -> float:
        return self.t0 + self.duration

    def at(self, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        u = min(max((t - self.t0) / self.duration, 0.0), 1.0)
        f = self.duration * (u * u / 4.0 + u ** 3 / 6.0)
        return (self.p0 + f * self.dv, _qmul(_qexp(f * self.omega), self.q0),
                self.j0 + f * self.rates)


def _path_at(segments: list, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    for segment in segments:
        if t < segment.t1:
            return segment.at(t)
    return segments[-1].at(t)


@dataclasses.dataclass
class _Phase:
    """One hand phase and the free phase after it, as the run went (for the truth)."""

    kind: str  # "start", "throw", "placement", "slide"
    pick_s: float  # the hand's first touch, s from the session start
    release_s: float  # the hand lets go
    first_free: int  # first sample after the release
    stop: int = -1  # last sample of the free phase
    contact: int = -1
    release_velocity: tuple = ()
    release_omega: tuple = ()
    release_rates: tuple = ()


# --- the world ------------------------------------------------------------------------------
class _SessionWorld:
    """An Engine world of the scene, stepped one substep at a time, recording samples."""

    def __init__(self, engine, rate_hz: float, substeps: int, rng: np.random.Generator
                 ) -> None:
        self.engine, self.scene = engine, engine.scene
        self.cid, self.body = engine.client, engine.scene.body
        self.table = engine.scene.static_body
        self.rate_hz, self.substeps = float(rate_hz), int(substeps)
        self.substep_hz = self.rate_hz * self.substeps
        self.dt_sub = 1.0 / self.substep_hz
        self.rng = rng
        info = self.scene.info
        self.n_links = info.n_links
        self.links = list(range(self.n_links))
        self.joints = list(info.joint_indices)
        self.n_joints = len(self.joints)
        self.joint_limits = [info.joint_limits[k] if k < len(info.joint_limits) else None
                             for k in range(self.n_joints)]
        self.prismatic = np.array([kind == "prismatic" for kind in info.joint_types], bool)
        dynamics = [pb.getDynamicsInfo(self.body, k, physicsClientId=self.cid)
                    for k in [-1] + self.links]
        self.masses = np.array([d[0] for d in dynamics])
        inertial = dynamics[0]
        self.base_offset = np.asarray(inertial[3], dtype=np.float64)
        x, y, z, w = inertial[4]
        self.base_inertial_quat = np.array([w, x, y, z])
        # each link's inertial frame in its URDF link frame (getLinkState indices 2, 3)
        self.link_inertial = []
        for k in self.links:
            state = pb.getLinkState(self.body, k, physicsClientId=self.cid)
            x, y, z, w = state[3]
            self.link_inertial.append((np.asarray(state[2], dtype=np.float64),
                                       np.array([w, x, y, z])))
        self.link_names = (pb.getBodyInfo(self.body, physicsClientId=self.cid)[0].decode(),
                           *(pb.getJointInfo(self.body, k, physicsClientId=self.cid)[12]
                             .decode() for k in self.links))
        self.continuous = np.array([limits is None and not prismatic for limits, prismatic
                                    in zip(self.joint_limits, self.prismatic)], dtype=bool)
        self.joint_rest_limit = np.where(self.prismatic, REST_SPEED_MPS, REST_JOINT_RATE)
        self.rows: list[tuple] = []
        self.rest: list[bool] = []
        self.held: list[bool] = []
        self.m = 0  # the world's time: substep m, s = m / substep_hz
        self.phases: list[_Phase] = []
        self._timestep = self.dt_sub

    # --- state ------------------------------------------------------------------------------
    def set_pose(self, position, quat, joints, velocity=None, omega=None, rates=None,
                 clear_contacts: bool = False) -> None:
        zeros3 = np.zeros(3)
        state = np.concatenate([position, quat, zeros3 if velocity is None else velocity,
                                zeros3 if omega is None else omega, joints,
                                np.zeros(self.n_joints) if rates is None else rates])
        if clear_contacts:
            self.engine.reset(state)
        else:
            self.scene.set_state(state)

    def pose(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Base link frame origin (3,), quaternion (4,) w-x-y-z, joints (n,) now."""
        state = self.scene.get_state()
        return state[0:3].copy(), state[3:7] / np.linalg.norm(state[3:7]), \
            state[13:13 + self.n_joints].copy()

    def clearance_m(self, limit: float) -> float:
        """Distance (m) of the object's lowest point above the table, up to ``limit``."""
        points = pb.getClosestPoints(self.body, self.table, limit, -2, -1,
                                     physicsClientId=self.cid)
        return min((p[8] for p in points), default=limit)

    # --- stepping and recording -----------------------------------------------------------------
    def _step(self, dt: float | None = None) -> None:
        dt = self.dt_sub if dt is None else dt
        if dt != self._timestep:
            pb.setPhysicsEngineParameter(fixedTimeStep=dt, physicsClientId=self.cid)
            self._timestep = dt
        pb.stepSimulation(physicsClientId=self.cid)

    def _touching(self) -> bool:
        return any(p[9] > 0.0 or p[8] < 0.0 for p in
                   pb.getContactPoints(self.body, self.table, physicsClientId=self.cid))

    def record(self, held: bool) -> bool:
        """Append the sample now (index ``len(self.rows)``); whether the object is at rest."""
        cid, body = self.cid, self.body
        position, orientation = pb.getBasePositionAndOrientation(body, physicsClientId=cid)
        row = [*position, *orientation]
        if self.links:
            for state in pb.getLinkStates(body, self.links, computeForwardKinematics=1,
                                          physicsClientId=cid):
                row += [*state[0], *state[1]]  # the inertial frame: double precision
        rates = ()
        if self.joints:
            joint_states = pb.getJointStates(body, self.joints, physicsClientId=cid)
            row += [j[0] for j in joint_states]
            rates = [j[1] for j in joint_states]
        self.rows.append(tuple(row))
        self.held.append(held)
        resting = False
        if not held:
            velocity, omega = pb.getBaseVelocity(body, physicsClientId=cid)
            resting = (math.hypot(*velocity) < REST_SPEED_MPS
                       and math.hypot(*omega) < REST_OMEGA_RADPS
                       and all(abs(r) < limit for r, limit in zip(rates, self.joint_rest_limit)))
        self.rest.append(resting)
        return resting

    def settle(self) -> None:
        """Put the object on the table at the origin (unrotated, joints at 0 or mid-limits)
        and let it come to rest (not recorded)."""
        joints = np.array([0.0 if limits is None or limits[0] <= 0.0 <= limits[1]
                           else 0.5 * (limits[0] + limits[1]) for limits in self.joint_limits])
        quat = _qmul(_yaw(self.rng.uniform(-math.pi, math.pi)), np.array([1.0, 0, 0, 0]))
        self.set_pose(np.array([0.0, 0.0, 1.0]), quat, joints, clear_contacts=True)
        lift = 1.0 - self.clearance_m(2.0) + 0.002
        self.set_pose(np.array([0.0, 0.0, lift]), quat, joints, clear_contacts=True)
        still = 0
        for _ in range(int(5.0 * self.substep_hz)):
            self._step()
            velocity, omega = pb.getBaseVelocity(self.body, physicsClientId=self.cid)
            rates = [j[1] for j in pb.getJointStates(self.body, self.joints,
                                                     physicsClientId=self.cid)] \
                if self.joints else []
            if (math.hypot(*velocity) < 1e-3 and math.hypot(*omega) < 1e-2
                    and all(abs(r) < 1e-2 for r in rates)):
                still += 1
                if still > 0.3 * self.substep_hz:
                    break
            else:
                still = 0
        position, quat, joints = self.pose()
        self.set_pose(position, quat, joints, clear_contacts=True)

    def free_phase(self, release_m: int, fraction: float, touching: bool, hold_s: float,
                   cap_s: float) -> tuple[int, int]:
        """Simulate from the state set at the release instant ``(release_m + fraction) /
        substep_hz`` (fraction in [0, 1)) until the object has been at rest for ``hold_s``
        after touching the table (or ``cap_s`` after the release), recording every sample
        instant on the way. Returns (last sample recorded, the first sample touched by
        contact or -1)."""
        sub = self.substeps
        release = release_m + fraction
        contact = -1
        if touching:
            contact = -(-release_m // sub)
        self.m = release_m
        if fraction > 0.0:
            self._step((1.0 - fraction) * self.dt_sub)
            self.m += 1
            if contact < 0 and self._touching():
                contact = -(-self.m // sub)
        rest_since = None
        hold = hold_s * self.rate_hz
        while True:
            if self.m % sub == 0:
                k = self.m // sub
                assert k == len(self.rows), (k, len(self.rows))
                resting = self.record(held=False)
                if contact >= 0 and resting:
                    rest_since = k if rest_since is None else rest_since
                    if k - rest_since >= hold:
                        return k, contact
                else:
                    rest_since = None
                if (self.m - release) * self.dt_sub >= cap_s:
                    return k, contact
            self._step()
            self.m += 1
            if contact < 0 and self._touching():
                contact = -(-self.m // sub)

    def advance_to_pick(self) -> float:
        """Step on to a random substep after the last sample (up to the next sample
        instant, not recorded): the hand's first touch. Returns its time, s."""
        steps = int(self.rng.integers(1, self.substeps + 1))
        for _ in range(steps):
            self._step()
            self.m += 1
        return self.m * self.dt_sub

    def hand_phase(self, segments: list, release_m: int) -> None:
        """Record the hand's path at every sample instant from the world's time up to the
        release (sample instants at or before substep ``release_m``)."""
        sub = self.substeps
        k = len(self.rows)
        while k * sub <= release_m:
            position, quat, joints = _path_at(segments, k / self.rate_hz)
            self.set_pose(position, quat, joints)
            self.record(held=True)
            k += 1

    def path_clear(self, segments: list, start_s: float, end_s: float) -> bool:
        """Whether the object keeps :data:`_CLEARANCE_M` above the table at every sample
        instant in [start_s, end_s] and at end_s."""
        k = math.ceil(start_s * self.rate_hz - 1e-9)
        instants = [t for t in (np.arange(k, math.floor(end_s * self.rate_hz) + 1)
                                / self.rate_hz).tolist() if start_s <= t <= end_s] + [end_s]
        for t in instants:
            position, quat, joints = _path_at(segments, t)
            self.set_pose(position, quat, joints)
            if self.clearance_m(_CLEARANCE_M) < _CLEARANCE_M:
                return False
        return True

    def release_at(self, pick_s: float, duration_s: float) -> tuple[int, float, float]:
        """A release instant about ``duration_s`` after ``pick_s`` that falls strictly between
        two substep instants: (substep m, fraction in [0.1, 0.9], time s)."""
        nominal = (pick_s + duration_s) * self.substep_hz
        m = int(math.floor(nominal))
        fraction = float(self.rng.uniform(0.1, 0.9))
        return m, fraction, (m + fraction) * self.dt_sub

    # --- the truth -----------------------------------------------------------------------------
    def arrays(self) -> dict[str, Any]:
        """The recorded samples as truth arrays."""
        rows = np.array(self.rows, dtype=np.float64)
        n = len(rows)
        positions, quats = {}, {}
        centre = np.zeros((n, 3))
        for k, name in enumerate(self.link_names):
            at = 7 * k
            com_position = rows[:, at:at + 3]
            com_quat = rows[:, [at + 6, at + 3, at + 4, at + 5]]
            offset, inertial = ((self.base_offset, self.base_inertial_quat) if k == 0
                                else self.link_inertial[k - 1])
            link_quat = _qmul(com_quat, _qconj(inertial))
            link_quat /= np.linalg.norm(link_quat, axis=1, keepdims=True)
            positions[name] = com_position - _qrotate(link_quat, np.broadcast_to(offset, (n, 3)))
            quats[name] = _sign_continuous(link_quat)
            centre += self.masses[k] * com_position
        joints = rows[:, 7 * (1 + self.n_links):].reshape(n, self.n_joints)
        return dict(positions=positions, quats=quats, joints=joints,
                    com=centre / self.masses.sum())


def _first_rest(rest: np.ndarray, start: int, end: int) -> int | None:
    """First sample k in [start, end] with ``rest[k..end]`` all True, or None."""
    if start < 0 or start > end or not rest[end]:
        return None
    moving = np.flatnonzero(~rest[start:end + 1])
    return start if not len(moving) else start + int(moving[-1]) + 1


# --- what the hand does -----------------------------------------------------------------------
def _joint_release(world: _SessionWorld, rng: np.random.Generator, j0: np.ndarray,
                   duration_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Joint angles at the wind-up's start and at release, and the rates at release: the
    angle at release within 1 rad (or half the range) of ``j0``, so the carry moves the
    joints slowly."""
    n = world.n_joints
    j_start, j_release, rates = np.zeros(n), np.zeros(n), np.zeros(n)
    span = duration_s * _WINDUP_F1
    for k in range(n):
        limits = world.joint_limits[k]
        if world.prismatic[k]:
            rate = rng.uniform(-0.15, 0.15)
        elif world.continuous[k]:
            rate = rng.choice([-1.0, 1.0]) * rng.uniform(8.0, 15.0)
        else:
            rate = rng.uniform(-4.0, 4.0)
        if limits is None:
            j_start[k] = j0[k] + rng.uniform(-1.0, 1.0)
            j_release[k] = j_start[k] + rate * span
        else:
            low, high = limits
            margin, reach = 0.1 * (high - low), min(1.0, 0.5 * (high - low))
            near = min(max(j0[k], low + margin), high - margin)  # within 1 rad of now
            j_release[k] = rng.uniform(max(low + margin, near - reach),
                                       min(high - margin, near + reach))
            j_start[k] = min(max(j_release[k] - rate * span, low + 0.02 * (high - low)),
                             high - 0.02 * (high - low))
            rate = (j_release[k] - j_start[k]) / span
        rates[k] = rate
    return j_start, j_release, rates


def _toward_origin(rng: np.random.Generator, xy: np.ndarray, spread: float) -> float:
    """A heading (rad) from ``xy`` roughly toward the origin (random when near it)."""
    if np.hypot(*xy) < 0.2:
        return float(rng.uniform(-math.pi, math.pi))
    return float(math.atan2(-xy[1], -xy[0]) + rng.uniform(-spread, spread))


def _plan_throw(world: _SessionWorld, pick_s: float, p0, q0, j0):
    """Sample a carry and wind-up (rejecting paths that would touch the table, flights
    outside 0.15-0.45 s, wind-up accelerations outside 8-20 m/s^2)."""
    rng = world.rng
    for _ in range(_ATTEMPTS):
        carry = rng.uniform(0.5, 1.5)
        release_m, fraction, release_s = world.release_at(pick_s,
                                                          carry + rng.uniform(0.2, 0.35))
        windup = release_s - (pick_s + carry)
        p_release = np.array([p0[0] + rng.uniform(-0.15, 0.15),
                              p0[1] + rng.uniform(-0.15, 0.15), rng.uniform(0.15, 0.5)])
        q_release = _random_quat(rng)
        j_start, j_release, rates = _joint_release(world, rng, j0, windup)
        world.set_pose(p_release, q_release, j_release)
        low = world.clearance_m(2.0)
        # the vertical speed that lands the lowest point after the flight time wanted, then
        # a horizontal speed that makes the wind-up's acceleration at release 8-20 m/s^2
        flight = rng.uniform(0.15, 0.45)
        speed_z = (0.5 * _GRAVITY * flight ** 2 - low) / flight
        slowest = max(0.3, math.sqrt(max((8.0 * windup / 1.5) ** 2 - speed_z ** 2, 0.0)))
        fastest = min(1.5, math.sqrt(max((20.0 * windup / 1.5) ** 2 - speed_z ** 2, 0.0)))
        if low < 0.02 or speed_z < 0.3 or slowest > fastest:
            continue
        speed_h = rng.uniform(slowest, fastest)
        heading = _toward_origin(rng, p0[:2], 0.8)
        dv = np.array([speed_h * math.cos(heading), speed_h * math.sin(heading), speed_z])
        axis = rng.normal(size=3)
        omega = axis / np.linalg.norm(axis) * rng.uniform(1.0, 10.0)
        span = windup * _WINDUP_F1
        p_start = p_release - dv * span
        q_start = _qmul(_qexp(-omega * span), q_release)
        lift = np.array([0.0, 0.0, rng.uniform(0.05, 0.1)])
        lift_end = pick_s + rng.uniform(0.25, 0.35) * carry
        turn = _qlog(_qmul(q_start, _qconj(q0)))
        segments = [_Move(pick_s, lift_end, p0, p0 + lift, q0, np.zeros(3), j0, j0),
                    _Move(lift_end, pick_s + carry, p0 + lift, p_start, q0, turn, j0, j_start),
                    _Windup(pick_s + carry, windup, p_start, dv, q_start, omega, j_start,
                            rates)]
        if not world.path_clear(segments, lift_end, release_s):
            continue
        return segments, release_m, fraction, release_s, (p_release, q_release, j_release, dv,
                                                         omega, rates)
    raise SceneError(f"{world.scene.name}: found no throw that keeps the object clear of the "
                     f"table in {_ATTEMPTS} tries (is the object larger than ~0.4 m?)")


def _plan_placement(world: _SessionWorld, pick_s: float, p0, q0, j0, drop_m: float):
    rng = world.rng
    for _ in range(_ATTEMPTS):
        duration = rng.uniform(0.7, 1.5)
        release_m, fraction, release_s = world.release_at(pick_s, duration)
        heading = _toward_origin(rng, p0[:2], 1.2)
        distance = rng.uniform(0.1, 0.35)
        target = p0 + np.array([distance * math.cos(heading), distance * math.sin(heading), 0])
        turn = np.array([0.0, 0.0, rng.uniform(-math.pi, math.pi)])
        lift = np.array([0.0, 0.0, rng.uniform(0.05, 0.12)])
        lift_end = pick_s + 0.25 * (release_s - pick_s)
        move_end = pick_s + 0.7 * (release_s - pick_s)
        q1 = _qmul(_qexp(turn), q0)
        segments = [_Move(pick_s, lift_end, p0, p0 + lift, q0, np.zeros(3), j0, j0),
                    _Move(lift_end, move_end, p0 + lift, target + lift, q0, turn, j0, j0),
                    _Move(move_end, release_s, target + lift,
                          target + np.array([0.0, 0.0, drop_m]), q1, np.zeros(3), j0, j0)]
        if world.path_clear(segments, lift_end, move_end):
            return segments, release_m, fraction, release_s
    raise SceneError(f"{world.scene.name}: found no placement clear of the table")


def _plan_slide(world: _SessionWorld, pick_s: float, p0, q0, j0):
    rng = world.rng
    duration = rng.uniform(0.5, 1.2)
    release_m, fraction, release_s = world.release_at(pick_s, duration)
    heading = _toward_origin(rng, p0[:2], 1.5)
    distance = rng.uniform(0.05, 0.2)
    target = p0 + np.array([distance * math.cos(heading), distance * math.sin(heading), 0.0])
    turn = np.array([0.0, 0.0, rng.uniform(-0.5, 0.5)])
    return [_Move(pick_s, release_s, p0, target, q0, turn, j0, j0)], release_m, fraction, \
        release_s


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
    plan = _plan(rng, n_throws, placements, slides)
    with Engine(path, engine_params, settings) as engine:
        world = _SessionWorld(engine, rate_hz, substeps, rng)
        world.settle()
        stop, _ = world.free_phase(0, 0.0, touching=True, hold_s=rng.uniform(0.5, 1.0),
                                   cap_s=math.inf)
        world.phases.append(_Phase("start", 0.0, 0.0, 0, stop=stop, contact=0))
        for kind, drop_m in plan:
            _run_action(world, kind, drop_m)
        arrays = world.arrays()
        return _session(world, arrays, start_s, dict(
            scene=path, seed=seed, rate_hz=float(rate_hz), substeps=int(substeps),
            params=dataclasses.asdict(engine_params), n_throws=n_throws,
            placements=placements, slides=slides))


def _plan(rng: np.random.Generator, n_throws: int, placements: int, slides: int
          ) -> list[tuple[str, float]]:
    """The actions in order: ("throw", 0), ("placement", drop m), ("slide", 0)."""
    extras = [("placement", float(rng.uniform(0.002, 0.008)) if p % 2 == 0 else 0.0)
              for p in range(placements)] + [("slide", 0.0)] * slides
    order = rng.permutation(len(extras))
    gaps = (rng.integers(1, n_throws, size=len(extras)) if n_throws >= 2
            else np.zeros(len(extras), dtype=int))
    plan: list[tuple[str, float]] = []
    for gap in range(n_throws + 1):
        plan += [extras[i] for i in order if gaps[i] == gap]
        if gap < n_throws:
            plan.append(("throw", 0.0))
    return plan


def _run_action(world: _SessionWorld, kind: str, drop_m: float) -> None:
    rng = world.rng
    pick_s = world.advance_to_pick()
    p0, q0, j0 = world.pose()
    if kind == "throw":
        segments, release_m, fraction, release_s, release = _plan_throw(world, pick_s, p0, q0,
                                                                         j0)
        p_release, q_release, j_release, dv, omega, rates = release
    elif kind == "placement":
        segments, release_m, fraction, release_s = _plan_placement(world, pick_s, p0, q0, j0,
                                                                   drop_m)
    else:
        segments, release_m, fraction, release_s = _plan_slide(world, pick_s, p0, q0, j0)
    world.hand_phase(segments, release_m)
    first_free = len(world.rows)
    if kind == "throw":
        world.set_pose(p_release, q_release, j_release, dv, omega, rates, clear_contacts=True)
    else:
        position, quat, joints = _path_at(segments, release_s)
        world.set_pose(position, quat, joints, clear_contacts=True)
    phase = _Phase(kind, pick_s, release_s, first_free)
    if kind == "throw":
        phase.release_velocity, phase.release_omega = tuple(dv.tolist()), tuple(omega.tolist())
        phase.release_rates = tuple(rates.tolist())
    phase.stop, phase.contact = world.free_phase(
        release_m, fraction, touching=kind == "slide" or (kind == "placement" and not drop_m),
        hold_s=rng.uniform(0.5, 1.0), cap_s=_CAP_S)
    world.phases.append(phase)


def _session(world: _SessionWorld, arrays: dict, start_s: float, metadata: dict
             ) -> SyntheticSession:
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
        settled = _first_rest(rest, max(phase.contact, phase.first_free), phase.stop)
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


# --- what a capture system makes of it ---------------------------------------------------------
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
        quat = _qmul(_qexp(rng.normal(0.0, noise_rad, (n, 3))), session.link_quat_wxyz[link])
        quat = _sign_continuous(quat / np.linalg.norm(quat, axis=1, keepdims=True))
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
