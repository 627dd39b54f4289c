"""Samples that need no engine: free flight in closed form, and a body at rest.

**Free flight** (:class:`FreeFlight`). Away from the table a free rigid body's centre of mass
follows Bullet's semi-implicit Euler exactly in closed form: after m internal steps of
h = dt / substeps,

    v_m = v_0 + m h g,    x_m = x_0 + m h v_0 + h² g m (m + 1) / 2,

and, for a body whose inertia is isotropic (the cube), the angular velocity ω (world) is
constant, so the orientation is q_m = exp(m h ω) ⊗ q_0 (torque-free motion; a body with
unequal principal moments would precess, so it stays with the engine, as do articulated
bodies and planar scenes). Measured against PyBullet over 40 samples: 6e-15 m, 9e-16 in
the quaternion (``tests/test_skips.py``). The engine takes over at the last sample before
the lowest corner of the body's collision box (its bounding box in the centre-of-mass
frame, which holds every collision shape) comes within ``HANDOVER_M`` of the table top,
beyond Bullet's contact-breaking threshold (0.02 m): no contact point can exist before
that, so the engine, reset there, continues as if it had stepped all along.

**Rest** (:class:`RestDetector`). A body whose position moved less than ``REST_SPEED_MPS``
× dt and whose orientation turned less than ``REST_SPIN_RADPS`` × dt in each of the last
``REST_SAMPLES`` samples is at rest: the remaining samples repeat its last state. In free
flight no sample is calm (gravity changes the velocity by g dt each sample), so a calm run
means the table holds the body. On 100 real tosses at 10 substeps the engine's poses after
detected rest stay within 0.014 mm and 0.005° of the rest pose.

Every rollout loop (:meth:`Engine.rollout`, :meth:`Engine.rollout_poses`,
:func:`residualsim.sim.rollout.residual_rollout`) uses both unless told not to
(``skips=False``).
"""

from __future__ import annotations

import math

import numpy as np
import pybullet as pb

__all__ = ["FreeFlight", "RestDetector", "HANDOVER_M", "REST_SPEED_MPS", "REST_SPIN_RADPS",
           "REST_SAMPLES"]

#: Clearance (m) between the body's collision box and the table top at which the engine
#: takes over from the closed form: beyond Bullet's contact-breaking threshold (0.02 m).
HANDOVER_M = 0.03
#: Rest: largest speed (m/s) and rotation rate (rad/s, from the quaternion change) per
#: sample, for this many consecutive samples.
REST_SPEED_MPS = 2e-3
REST_SPIN_RADPS = 2e-2
REST_SAMPLES = 10


class FreeFlight:
    """Closed-form free flight of one engine's body (see the module docstring).

    Works on PyBullet's base (centre-of-mass) pose and velocity, so it produces the
    scene's own raw records (:meth:`Scene.read_raw`) and any base-link offset is handled by
    the scene's conversion as usual.
    """

    def __init__(self, engine) -> None:
        scene = engine.scene
        self.body, self.client = scene.body, engine.client
        self.substeps = int(engine.scene.settings.substeps)
        self.h = engine.dt_s / self.substeps
        self.gravity = np.asarray(engine.scene.settings.gravity_mps2, dtype=np.float64)
        body, cid = self.body, self.client
        pose = pb.getBasePositionAndOrientation(body, physicsClientId=cid)
        velocity = pb.getBaseVelocity(body, physicsClientId=cid)
        pb.resetBasePositionAndOrientation(body, [0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0],
                                           physicsClientId=cid)
        low, high = (np.asarray(c) for c in pb.getAABB(body, -1, physicsClientId=cid))
        pb.resetBasePositionAndOrientation(body, *pose, physicsClientId=cid)
        pb.resetBaseVelocity(body, *velocity, physicsClientId=cid)
        #: The body's collision shapes lie in this box of the centre-of-mass frame: centre
        #: (3,) m and half extents (3,) m.
        self.box_centre, self.box_half = (low + high) / 2, (high - low) / 2
        self.table_top = float(pb.getAABB(scene.static_body, -1, physicsClientId=cid)[1][2])
        self._floats = (*self.box_centre.tolist(), *self.box_half.tolist(),
                        self.table_top + HANDOVER_M)

    @staticmethod
    def supports(scene) -> bool:
        """Whether the closed form is exact for ``scene``: a single rigid body in 3D with
        isotropic inertia, under gravity along -z."""
        if scene.planar or getattr(scene, "n_joints", 0):
            return False
        inertia = np.linalg.eigvalsh(np.asarray(scene.inertia_body, dtype=np.float64))
        gravity = np.asarray(scene.settings.gravity_mps2, dtype=np.float64)
        return bool(inertia.max() - inertia.min() <= 1e-9 * inertia.max()
                    and gravity[0] == gravity[1] == 0.0 and gravity[2] < 0.0)

    def clearance(self, height_m, quat_xyzw) -> np.ndarray:
        """Lower bound (m) on the gap between the body and the table top for centre-of-mass
        heights (...,) and orientations (..., 4) x-y-z-w: the lowest corner of its
        collision box."""
        x, y, z, w = np.moveaxis(np.asarray(quat_xyzw, dtype=np.float64), -1, 0)
        row = np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1)
        return (height_m + row @ self.box_centre - np.abs(row) @ self.box_half
                - self.table_top)

    def clear(self, pose: tuple) -> bool:
        """Whether the body at a PyBullet base pose ((x, y, z), (qx, qy, qz, qw)) is at
        least ``HANDOVER_M`` above the table."""
        (_, _, z), (x, y, qz, w) = pose
        c0, c1, c2, e0, e1, e2, level = self._floats
        r0, r1, r2 = 2 * (x * qz - w * y), 2 * (y * qz + w * x), 1 - 2 * (x * x + y * y)
        return (z + r0 * c0 + r1 * c1 + r2 * c2 - abs(r0) * e0 - abs(r1) * e1
                - abs(r2) * e2 >= level)

    def fly(self, pose: tuple, velocity: tuple, max_samples: int) -> list[tuple]:
        """Up to ``max_samples`` samples after (``pose``, ``velocity``) (PyBullet base
        records: ((x, y, z), (qx, qy, qz, qw)), ((vx, vy, vz), (wx, wy, wz)), world frame),
        as long as the body stays clear of the table; a list of (pose, velocity) records."""
        m = np.arange(1, max_samples + 1, dtype=np.float64)[:, None] * self.substeps
        h, g = self.h, self.gravity
        p0, v0, w0 = np.asarray(pose[0]), np.asarray(velocity[0]), np.asarray(velocity[1])
        positions = p0 + m * h * v0 + h * h * g * m * (m + 1) / 2
        quats = _rotate(np.asarray(pose[1], dtype=np.float64), w0, m[:, 0] * h)
        clear = self.clearance(positions[:, 2], quats) >= HANDOVER_M
        count = max_samples if clear.all() else int(np.argmin(clear))
        if count == 0:
            return []
        velocities = v0 + m[:count] * h * g
        omega = tuple(velocity[1])
        return [((tuple(p), tuple(q)), (tuple(v), omega)) for p, q, v in zip(
            positions[:count].tolist(), quats[:count].tolist(), velocities.tolist())]


def _rotate(quat_xyzw: np.ndarray, omega: np.ndarray, times: np.ndarray) -> np.ndarray:
    """exp(t ω) ⊗ q for each t (s), ω rad/s world: (len(times), 4) x-y-z-w, PyBullet's
    order and sign."""
    rate = float(np.linalg.norm(omega))
    if rate == 0.0:
        return np.tile(quat_xyzw, (len(times), 1))
    half = 0.5 * rate * times
    s, c = np.sin(half), np.cos(half)
    dx, dy, dz = (omega / rate)[:, None] * s
    x, y, z, w = quat_xyzw
    out = np.empty((len(times), 4))
    out[:, 0] = c * x + dx * w + dy * z - dz * y
    out[:, 1] = c * y - dx * z + dy * w + dz * x
    out[:, 2] = c * z + dx * y - dy * x + dz * w
    out[:, 3] = c * w - dx * x - dy * y - dz * z
    return _bullet_sign(out)


def _bullet_sign(quat_xyzw: np.ndarray) -> np.ndarray:
    """The sign PyBullet reports a base orientation with: it converts from the rotation
    matrix (``btMatrix3x3::getRotation``), so w > 0 when |w| > 1/2 (trace > 0), else the
    component of the largest diagonal entry (largest of |x|, |y|, |z|, first on ties) > 0."""
    w = quat_xyzw[:, 3]
    squares = quat_xyzw[:, :3] ** 2
    largest = np.where(squares[:, 1] > squares[:, 0], 1, 0)
    largest = np.where(squares[:, 2] > squares[np.arange(len(w)), largest], 2, largest)
    lead = np.where(w * w > 0.25, w, quat_xyzw[np.arange(len(w)), largest])
    return quat_xyzw * np.where(lead < 0, -1.0, 1.0)[:, None]


class RestDetector:
    """Counts consecutive calm samples of base poses (see the module docstring)."""

    @staticmethod
    def supports(scene) -> bool:
        """Rest is read off the base pose: single rigid bodies in 3D only (a resting base
        may carry a swinging link)."""
        return not scene.planar and not getattr(scene, "n_joints", 0)

    def __init__(self, dt_s: float) -> None:
        self.step_m = REST_SPEED_MPS * dt_s
        # |Δq| of unit quaternions ≈ half the rotation angle, for small angles
        self.step_q = 0.5 * REST_SPIN_RADPS * dt_s
        self.calm = 0
        self.last: tuple | None = None

    def at_rest(self, pose: tuple) -> bool:
        """Feed the next base pose ((x, y, z), (qx, qy, qz, qw)); True once the body has
        been calm for ``REST_SAMPLES`` samples."""
        last, self.last = self.last, pose
        if last is None:
            return False
        (x, y, z), q = pose
        (a, b, c), r = last
        if (math.fabs(x - a) < self.step_m and math.fabs(y - b) < self.step_m
                and math.fabs(z - c) < self.step_m
                and max(math.fabs(q[0] - r[0]), math.fabs(q[1] - r[1]), math.fabs(q[2] - r[2]),
                        math.fabs(q[3] - r[3])) < self.step_q):
            self.calm += 1
        else:
            self.calm = 0
        return self.calm >= REST_SAMPLES
