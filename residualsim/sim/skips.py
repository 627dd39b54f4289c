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

**Rest** (:class:`RestDetector`). Every ``CHECK_EVERY`` samples: a body whose position moved
less than ``REST_SPEED_MPS`` × dt over the last sample and ``REST_SPEED_MPS`` × dt ×
``CHECK_EVERY`` over the last ``CHECK_EVERY`` samples (orientation likewise with
``REST_SPIN_RADPS``), at ``REST_CHECKS`` checks in a row, is at rest: the remaining samples
repeat its last state. In free
flight no sample is calm (gravity changes the velocity by g dt each sample), so a calm run
means the table holds the body. On the 400 real tosses at 10 substeps, predictions with
and without both skips differ by at most 0.028 mm and 0.018° (``train/skips_check.py``).

Every rollout loop (:meth:`Engine.rollout`, :meth:`Engine.rollout_poses`,
:func:`residualsim.sim.rollout.residual_rollout`) uses both unless told not to
(``skips=False``).
"""

from __future__ import annotations

import math

import numpy as np
from residualsim.sim.bullet import pb

__all__ = ["FreeFlight", "RestDetector", "HANDOVER_M", "REST_SPEED_MPS", "REST_SPIN_RADPS",
           "REST_CHECKS", "CHECK_EVERY"]

#: Clearance (m) between the body's collision box and the table top at which the engine
#: takes over from the closed form: beyond Bullet's contact-breaking threshold (0.02 m).
HANDOVER_M = 0.03
#: Rest: largest speed (m/s) and rotation rate (rad/s, from the quaternion change), over the
#: last sample and over the last ``CHECK_EVERY``, at this many checks in a row.
REST_SPEED_MPS = 2e-3
REST_SPIN_RADPS = 2e-2
REST_CHECKS = 3
#: The loops look for free flight and rest every this many samples, not every sample: at 1
#: substep a step costs ~9 µs and a check ~1.5 µs (measured; checking every sample made
#: the lean pose loop 33 % slower at 1 substep).
CHECK_EVERY = 5


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
        self._gravity = tuple(self.gravity.tolist())

    @staticmethod
    def supports(scene) -> bool:
        """Whether the closed form is exact for ``scene``: a single rigid body in 3D with
        isotropic inertia, under gravity along -z."""
        if getattr(scene, "planar", True) or getattr(scene, "n_joints", 0) \
                or getattr(scene, "inertia_body", None) is None:
            return False
        inertia = np.linalg.eigvalsh(np.asarray(scene.inertia_body, dtype=np.float64))
        gravity = np.asarray(scene.settings.gravity_mps2, dtype=np.float64)
        return bool(inertia.max() - inertia.min() <= 1e-9 * inertia.max()
                    and gravity[0] == gravity[1] == 0.0 and gravity[2] < 0.0)

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
        as long as the body stays clear of the table; a list of (pose, velocity) records.
        Plain Python: a flight is a few dozen samples, where numpy's per-call cost would
        outweigh the engine steps saved at 1 substep."""
        out = []
        for j in range(1, max_samples + 1):
            record = self.sample(pose, velocity, j)
            if not self.clear(record[0]):
                break
            out.append(record)
        return out

    def sample(self, pose: tuple, velocity: tuple, j: int) -> tuple:
        """Sample ``j`` (>= 0, recording periods) after (``pose``, ``velocity``), PyBullet
        base records in the world frame as :meth:`fly` takes them, as a (pose, velocity)
        record, whether or not the body is clear of the table. The one formula of the
        closed-form flight: :meth:`fly` and the batched rollouts' handover
        (:mod:`residualsim.sim.batch_flight`) use it, so both get the same bits."""
        (px, py, pz), (x, y, z, w) = pose
        (vx, vy, vz), omega = velocity
        wx, wy, wz = omega
        gx, gy, gz = self._gravity
        h, substeps = self.h, self.substeps
        rate = math.sqrt(wx * wx + wy * wy + wz * wz)
        m = j * substeps
        t, a = m * h, h * h * m * (m + 1) / 2
        half = 0.5 * rate * t
        c, s = math.cos(half), (math.sin(half) / rate if rate else 0.0)
        dx, dy, dz = wx * s, wy * s, wz * s
        quat = _bullet_sign(c * x + dx * w + dy * z - dz * y, c * y - dx * z + dy * w + dz * x,
                            c * z + dx * y - dy * x + dz * w, c * w - dx * x - dy * y - dz * z)
        sample = ((px + t * vx + a * gx, py + t * vy + a * gy, pz + t * vz + a * gz), quat)
        return sample, ((vx + t * gx, vy + t * gy, vz + t * gz), omega)


def _bullet_sign(x: float, y: float, z: float, w: float) -> tuple:
    """(x, y, z, w) with the sign PyBullet reports a base orientation with: it converts from
    the rotation matrix (``btMatrix3x3::getRotation``), so w > 0 when |w| > 1/2 (trace > 0),
    else the component of the largest diagonal entry (largest of |x|, |y|, |z|, the first
    on ties) > 0."""
    if w * w > 0.25:
        lead = w
    else:
        lead = x
        if y * y > lead * lead:
            lead = y
        if z * z > lead * lead:
            lead = z
    return (-x, -y, -z, -w) if lead < 0 else (x, y, z, w)


class RestDetector:
    """Rest of a base pose, checked every ``CHECK_EVERY`` samples (see the module
    docstring)."""

    @staticmethod
    def supports(scene) -> bool:
        """Rest is read off the base pose: single rigid bodies in 3D only (a resting base
        may carry a swinging link)."""
        return not getattr(scene, "planar", True) and not getattr(scene, "n_joints", 0)

    def __init__(self, dt_s: float) -> None:
        self.step_m = REST_SPEED_MPS * dt_s
        # |Δq| of unit quaternions ≈ half the rotation angle, for small angles
        self.step_q = 0.5 * REST_SPIN_RADPS * dt_s
        self.calm = 0

    def _close(self, pose: tuple, other: tuple, samples: int) -> bool:
        (x, y, z), q = pose
        (a, b, c), r = other
        m, k = self.step_m * samples, self.step_q * samples
        return (math.fabs(x - a) < m and math.fabs(y - b) < m and math.fabs(z - c) < m
                and math.fabs(q[0] - r[0]) < k and math.fabs(q[1] - r[1]) < k
                and math.fabs(q[2] - r[2]) < k and math.fabs(q[3] - r[3]) < k)

    def at_rest(self, now: tuple, before: tuple, earlier: tuple) -> bool:
        """Feed base poses ((x, y, z), (qx, qy, qz, qw)) of this sample, the one before and
        the one ``CHECK_EVERY`` samples back; True once ``REST_CHECKS`` checks in a row
        found the body calm over both."""
        calm = self._close(now, before, 1) and self._close(now, earlier, CHECK_EVERY)
        self.calm = self.calm + 1 if calm else 0
        return self.calm >= REST_CHECKS
