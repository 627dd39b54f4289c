"""Quaternion arithmetic on arrays, w-x-y-z order, for the data wing (no engine needed).

Every function broadcasts over leading axes; quaternions are unit, w-x-y-z, and map the
body (or child) frame to the world (or parent) frame: ``rotate(q, v)`` expresses a body
vector ``v`` in the world frame.
"""

from __future__ import annotations

import numpy as np

__all__ = ["multiply", "conjugate", "rotate", "from_axis_angle", "from_rpy", "angle_of",
           "normalise", "same_hemisphere", "slerp"]


def multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The Hamilton product ``a ⊗ b`` (apply ``b``, then ``a``)."""
    aw, ax, ay, az = np.moveaxis(np.asarray(a, np.float64), -1, 0)
    bw, bx, by, bz = np.moveaxis(np.asarray(b, np.float64), -1, 0)
    return np.stack([aw * bw - ax * bx - ay * by - az * bz,
                     aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx,
                     aw * bz + ax * by - ay * bx + az * bw], axis=-1)


def conjugate(q: np.ndarray) -> np.ndarray:
    """The inverse of a unit quaternion."""
    q = np.asarray(q, np.float64)
    return q * np.array([1.0, -1.0, -1.0, -1.0])


def rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``v`` (..., 3) rotated by ``q`` (..., 4): ``R(q) v``."""
    q = np.asarray(q, np.float64)
    v = np.asarray(v, np.float64)
    w = q[..., :1]
    u = q[..., 1:]
    t = 2.0 * np.cross(u, v)
    return v + w * t + np.cross(u, t)


def from_axis_angle(axis: np.ndarray, angle_rad: np.ndarray) -> np.ndarray:
    """The rotation by ``angle_rad`` (...) about the unit ``axis`` (..., 3)."""
    half = 0.5 * np.asarray(angle_rad, np.float64)[..., None]
    axis = np.asarray(axis, np.float64)
    return np.concatenate([np.cos(half), np.sin(half) * axis], axis=-1)


def from_rpy(rpy_rad: np.ndarray) -> np.ndarray:
    """URDF's fixed-axis roll-pitch-yaw (about x, then y, then z of the parent) as w-x-y-z."""
    roll, pitch, yaw = np.moveaxis(np.asarray(rpy_rad, np.float64), -1, 0)
    ex = from_axis_angle(np.array([1.0, 0.0, 0.0]), roll)
    ey = from_axis_angle(np.array([0.0, 1.0, 0.0]), pitch)
    ez = from_axis_angle(np.array([0.0, 0.0, 1.0]), yaw)
    return multiply(ez, multiply(ey, ex))


def angle_of(q: np.ndarray) -> np.ndarray:
    """The rotation angle of ``q`` in [0, pi], rad."""
    q = np.asarray(q, np.float64)
    return 2.0 * np.arctan2(np.linalg.norm(q[..., 1:], axis=-1), np.abs(q[..., 0]))


def normalise(q: np.ndarray) -> np.ndarray:
    """``q`` scaled to unit norm."""
    q = np.asarray(q, np.float64)
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def same_hemisphere(q: np.ndarray) -> np.ndarray:
    """A sequence (T, 4) with each quaternion's sign chosen to agree with the previous one's
    (q and -q are the same rotation), so interpolation takes the short way."""
    q = np.array(q, np.float64)
    if len(q) < 2:
        return q
    flips = np.einsum("ij,ij->i", q[1:], q[:-1]) < 0
    sign = np.concatenate([[1.0], np.where(np.cumsum(flips) % 2 == 1, -1.0, 1.0)])
    return q * sign[:, None]


def slerp(q0: np.ndarray, q1: np.ndarray, fraction: np.ndarray) -> np.ndarray:
    """Spherical interpolation from ``q0`` to ``q1`` (..., 4) at ``fraction`` (...) in
    [0, 1], along the shorter arc; the result keeps ``q0``'s hemisphere."""
    q0 = np.asarray(q0, np.float64)
    q1 = np.asarray(q1, np.float64)
    f = np.asarray(fraction, np.float64)[..., None]
    dot = np.einsum("...i,...i->...", q0, q1)[..., None]
    q1 = np.where(dot < 0, -q1, q1)
    dot = np.abs(dot)
    theta = np.arccos(np.clip(dot, -1.0, 1.0))
    sine = np.sin(theta)
    near = sine < 1e-9
    safe = np.where(near, 1.0, sine)
    a = np.where(near, 1.0 - f, np.sin((1.0 - f) * theta) / safe)
    b = np.where(near, f, np.sin(f * theta) / safe)
    return normalise(a * q0 + b * q1)
