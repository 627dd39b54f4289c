"""The PyBullet world of a synthetic capture session (:mod:`residualsim.sim.sessions`):
stepping one substep at a time, releases between substep instants, the hand's kinematic
samples, and every sample recorded for the truth.

A sample records every link's centre-of-mass (inertial) frame as PyBullet gives it (double
precision); :meth:`SessionWorld.arrays` turns them into URDF link frames with each link's
local inertial frame. Whether the object is at rest is read at every free sample:
the base's centre-of-mass speed below :data:`REST_SPEED_MPS`, its angular speed below
:data:`REST_OMEGA_RADPS` and every joint rate below :data:`REST_JOINT_RATE` rad/s (a
prismatic joint's below :data:`REST_SPEED_MPS` m/s).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from residualsim.sim.bullet import pb
from residualsim.sim.session_motion import (path_at, quat_conj, quat_mul, quat_rotate,
                                            sign_continuous, yaw_quat)

__all__ = ["SessionWorld", "Phase", "first_rest", "REST_SPEED_MPS", "REST_OMEGA_RADPS",
           "REST_JOINT_RATE", "CLEARANCE_M"]

#: At rest: the base's centre-of-mass speed below this, m/s.
REST_SPEED_MPS = 2e-3
#: At rest: the base's angular speed below this, rad/s.
REST_OMEGA_RADPS = 0.05
#: At rest: every joint's rate below this, rad/s (a prismatic joint: REST_SPEED_MPS).
REST_JOINT_RATE = 0.05
#: The hand keeps the object this far above the table (m), except where it sets it down.
CLEARANCE_M = 0.005


@dataclasses.dataclass
class Phase:
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


class SessionWorld:
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
        self.phases: list[Phase] = []
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
        quat = yaw_quat(self.rng.uniform(-math.pi, math.pi))
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
            position, quat, joints = path_at(segments, k / self.rate_hz)
            self.set_pose(position, quat, joints)
            self.record(held=True)
            k += 1

    def path_clear(self, segments: list, start_s: float, end_s: float) -> bool:
        """Whether the object keeps :data:`CLEARANCE_M` above the table at every sample
        instant in [start_s, end_s] and at end_s."""
        k = math.ceil(start_s * self.rate_hz - 1e-9)
        instants = [t for t in (np.arange(k, math.floor(end_s * self.rate_hz) + 1)
                                / self.rate_hz).tolist() if start_s <= t <= end_s] + [end_s]
        for t in instants:
            position, quat, joints = path_at(segments, t)
            self.set_pose(position, quat, joints)
            if self.clearance_m(CLEARANCE_M) < CLEARANCE_M:
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
            link_quat = quat_mul(com_quat, quat_conj(inertial))
            link_quat /= np.linalg.norm(link_quat, axis=1, keepdims=True)
            positions[name] = com_position - quat_rotate(link_quat, np.broadcast_to(offset, (n, 3)))
            quats[name] = sign_continuous(link_quat)
            centre += self.masses[k] * com_position
        joints = rows[:, 7 * (1 + self.n_links):].reshape(n, self.n_joints)
        return dict(positions=positions, quats=quats, joints=joints,
                    com=centre / self.masses.sum())


def first_rest(rest: np.ndarray, start: int, end: int) -> int | None:
    """First sample k in [start, end] with ``rest[k..end]`` all True, or None."""
    if start < 0 or start > end or not rest[end]:
        return None
    moving = np.flatnonzero(~rest[start:end + 1])
    return start if not len(moving) else start + int(moving[-1]) + 1
