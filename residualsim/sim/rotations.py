"""Unit quaternions in w-x-y-z order (the project's and the data files' convention), through
:class:`scipy.spatial.transform.Rotation` (which uses x-y-z-w, as PyBullet does).

Every function takes arrays of any leading shape (..., 4) or (..., 3) and returns the same
leading shape. Rotation vectors are axis × angle in radians; compositions ``a ⊗ b`` apply
``b`` first, then ``a`` (for body-to-world orientations: ``exp(δ) ⊗ q`` turns the body by δ
in the world frame).
"""

from __future__ import annotations

import numpy as np
from scipy.spatial.transform import Rotation

__all__ = ["as_rotation", "as_quat_wxyz", "quat_multiply", "quat_relative_rotvec",
           "rotvec_to_quat", "rotate_by_rotvec", "geodesic_angle"]


def as_rotation(quat_wxyz: np.ndarray) -> Rotation:
    """A (flat) :class:`Rotation` stack from quaternions (..., 4) w-x-y-z, normalised."""
    quat = np.array(quat_wxyz, dtype=np.float64).reshape(-1, 4)  # a writable copy
    return Rotation.from_quat(quat[:, [1, 2, 3, 0]])


def as_quat_wxyz(rotation: Rotation, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """Quaternions w-x-y-z of ``rotation`` with w ≥ 0 (one sign per rotation), (N, 4) or
    ``shape + (4,)``."""
    quat = np.atleast_2d(rotation.as_quat())[:, [3, 0, 1, 2]]
    quat = quat * np.where(quat[:, :1] < 0, -1.0, 1.0)
    return quat if shape is None else quat.reshape(*shape, 4)


def quat_multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a ⊗ b`` (..., 4) w-x-y-z (w ≥ 0) of unit quaternions (..., 4), broadcast."""
    a, b = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64))
    return as_quat_wxyz(as_rotation(a) * as_rotation(b), a.shape[:-1])


def quat_relative_rotvec(target: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Rotation vectors (..., 3) rad of ``target ⊗ reference⁻¹``: the shortest rotation that
    turns ``reference`` into ``target``, in the frame the quaternions map to (world)."""
    a, b = np.broadcast_arrays(np.asarray(target, np.float64),
                               np.asarray(reference, np.float64))
    return (as_rotation(a) * as_rotation(b).inv()).as_rotvec().reshape(*a.shape[:-1], 3)


def rotvec_to_quat(rotvec: np.ndarray) -> np.ndarray:
    """Quaternions (..., 4) w-x-y-z (w ≥ 0) of rotation vectors (..., 3) rad."""
    rotvec = np.asarray(rotvec, dtype=np.float64)
    return as_quat_wxyz(Rotation.from_rotvec(rotvec.reshape(-1, 3)), rotvec.shape[:-1])


def rotate_by_rotvec(quat_wxyz: np.ndarray, rotvec: np.ndarray) -> np.ndarray:
    """``exp(rotvec) ⊗ q`` (..., 4) w-x-y-z: turn orientations ``q`` by ``rotvec`` (rad) in
    the world frame. Each result keeps the sign of its ``q`` (non-negative dot product), so
    a sequence of orientations stays continuous."""
    q, r = np.asarray(quat_wxyz, np.float64), np.asarray(rotvec, np.float64)
    shape = np.broadcast_shapes(q.shape[:-1], r.shape[:-1])
    q, r = np.broadcast_to(q, shape + (4,)), np.broadcast_to(r, shape + (3,))
    turned = as_quat_wxyz(Rotation.from_rotvec(np.array(r).reshape(-1, 3)) * as_rotation(q), shape)
    return turned * np.where(np.sum(turned * q, axis=-1, keepdims=True) < 0, -1.0, 1.0)


def geodesic_angle(quat_a: np.ndarray, quat_b: np.ndarray) -> np.ndarray:
    """Rotation angle (radians, in [0, π]) between unit quaternions (..., 4), any order."""
    dot = np.abs(np.sum(np.asarray(quat_a) * np.asarray(quat_b), axis=-1))
    return 2.0 * np.arccos(np.clip(dot, 0.0, 1.0))
