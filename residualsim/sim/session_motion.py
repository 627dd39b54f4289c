"""The hand's motion in a synthetic capture session (:mod:`residualsim.sim.sessions`):
unit quaternions in numpy and the kinematic path segments.

Quaternions are w-x-y-z arrays of any leading shape; ``quat_mul(a, b)`` applies ``b`` first,
so ``quat_mul(quat_exp(r), q)`` turns the body by ``r`` (rad) about a world axis. These are
plain numpy (no :class:`scipy.spatial.transform.Rotation` and its sign convention), cheap
enough to evaluate the hand's path at every sample and keep each quaternion's sign.

A hand path is a list of segments, each with ``t1`` (its end, s) and ``at(t)`` -> (base link
origin (3,) m world, quaternion (4,) w-x-y-z base -> world, joints (n,)):
:class:`HandMove` (minimum jerk, from rest to rest) and :class:`HandWindup` (a throw's
wind-up, ending at the release velocity).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from residualsim.data import quaternions

__all__ = ["quat_mul", "quat_conj", "quat_exp", "quat_log", "quat_rotate", "sign_continuous",
           "random_quat", "yaw_quat", "minimum_jerk", "HandMove", "HandWindup", "path_at",
           "WINDUP_F1"]

#: F(1) of the wind-up's position profile F(u) = u^2/4 + u^3/6 (velocity (u + u^2)/2).
WINDUP_F1 = 5.0 / 12.0


# One home for quaternion arithmetic (w-x-y-z): the data wing's, which reads recordings too.
quat_mul = quaternions.multiply
quat_conj = quaternions.conjugate


def quat_exp(rotvec: np.ndarray) -> np.ndarray:
    """Unit quaternions (..., 4) of rotation vectors (..., 3), rad."""
    rotvec = np.asarray(rotvec, dtype=np.float64)
    angle = np.linalg.norm(rotvec, axis=-1, keepdims=True)
    half = 0.5 * angle
    scale = np.where(angle > 1e-12, np.sin(half) / np.where(angle > 1e-12, angle, 1.0), 0.5)
    return np.concatenate([np.cos(half), rotvec * scale], axis=-1)


def quat_log(q: np.ndarray) -> np.ndarray:
    """Rotation vectors (..., 3) of unit quaternions (..., 4) (the shorter way round)."""
    q = np.asarray(q, dtype=np.float64)
    q = q * np.where(q[..., :1] < 0, -1.0, 1.0)
    vector = q[..., 1:]
    norm = np.linalg.norm(vector, axis=-1, keepdims=True)
    angle = 2.0 * np.arctan2(norm, q[..., :1])
    return vector * np.where(norm > 1e-12, angle / np.where(norm > 1e-12, norm, 1.0), 2.0)


quat_rotate = quaternions.rotate


def sign_continuous(quat: np.ndarray) -> np.ndarray:
    """``quat`` (T, 4) with signs flipped so that consecutive quaternions agree (q·q' >= 0)."""
    if len(quat) < 2:
        return quat
    flips = np.sum(quat[1:] * quat[:-1], axis=1) < 0
    sign = np.cumprod(np.concatenate([[1.0], np.where(flips, -1.0, 1.0)]))
    return quat * sign[:, None]


def random_quat(rng: np.random.Generator) -> np.ndarray:
    q = rng.normal(size=4)
    q /= np.linalg.norm(q)
    return q if q[0] >= 0 else -q


def yaw_quat(angle: float) -> np.ndarray:
    return np.array([math.cos(angle / 2), 0.0, 0.0, math.sin(angle / 2)])


def minimum_jerk(u: float) -> float:
    u = min(max(u, 0.0), 1.0)
    return u * u * u * (10.0 + u * (-15.0 + 6.0 * u))


@dataclasses.dataclass(frozen=True)
class HandMove:
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
        s = minimum_jerk((t - self.t0) / (self.t1 - self.t0))
        return (self.p0 + s * (self.p1 - self.p0), quat_mul(quat_exp(s * self.turn), self.q0),
                self.j0 + s * (self.j1 - self.j0))


@dataclasses.dataclass(frozen=True)
class HandWindup:
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
        return (self.p0 + f * self.dv, quat_mul(quat_exp(f * self.omega), self.q0),
                self.j0 + f * self.rates)


def path_at(segments: list, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    for segment in segments:
        if t < segment.t1:
            return segment.at(t)
    return segments[-1].at(t)
