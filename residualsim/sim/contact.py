"""Contact-frame math: Jacobians, effective contact inertia, invariant contact features.

Notation (the residual-learning paper's): generalised velocity q_dot (nv,), mass matrix
M (nv, nv), the Jacobian of a body point J_p (3, nv) mapping q_dot to the point's
world-frame velocity (m/s), and a contact frame C whose rows are the unit normal n (from the
static body into the moving body) and the tangents (t1, t2) in 3D or t in the plane. Then

* contact Jacobian            J   = C J_p                      (k, nv), k = 3 or 2
* effective contact inertia   M_c = (J M^-1 J^T)^-1            (k, k), kg
* contact-point velocity      v_c = J q_dot                    (k,), m/s, contact frame
* an impulse p (N s, contact frame) changes the velocity by  dq_dot = M^-1 J^T p,
  so dv_c = M_c^-1 p.
* features x = (upper triangle of M_c, v_c): 6 + 3 = 9 numbers in 3D, 3 + 2 = 5 in the plane.
* optional *spin* features s = r_g C ω (:func:`spin_features`): the body's angular velocity
  in the contact frame, times its radius of gyration r_g (m/s): 3 more numbers in 3D, 1 in
  the plane. (M_c, v_c) fix the contact point's velocity but not how fast the body turns
  about it; on the real planar impacts that spin carries information the residual needs.

The first tangent points along the pre-contact slip (the tangential part of v_c), so
rotating the world about the normal leaves x unchanged. With no slip (below
``SLIP_TOLERANCE_MPS``) the tangent falls back to the world axis least aligned with n,
projected onto the tangent plane. Functions here are pure numpy; PyBullet is only read
by the scenes that supply M and J_p.
"""

from __future__ import annotations

from dataclasses import dataclass

import math

import numpy as np

__all__ = ["CONTACT_DISTANCE_M", "is_touching", "MEMORY_STEPS", "far_from",
    "SLIP_TOLERANCE_MPS",
    "skew",
    "free_body_mass_matrix",
    "free_body_point_jacobian",
    "contact_frame",
    "ContactModel",
    "contact_model",
    "effective_inertia",
    "contact_features",
    "unpack_features",
    "spin_features",
    "feature_width",
    "velocity_change",
    "in_friction_cone",
    "largest_steps",
    "project_to_friction_cone",
]

#: Contact points farther apart than this (m) are not in contact unless a force acts.
CONTACT_DISTANCE_M = 1e-4


def is_touching(point: tuple) -> bool:
    """Whether a PyBullet contact point (a ``getContactPoints`` tuple) is in contact: closer
    than :data:`CONTACT_DISTANCE_M` or pushed by a normal force."""
    return point[8] <= CONTACT_DISTANCE_M or point[9] > 0.0


#: A touched point is new when it is far from every point touched in this many previous steps
#: (contact points flicker while a body rests or slides).
MEMORY_STEPS = 5


def far_from(point: tuple, recent: list[list[tuple]], spacing2: float) -> bool:
    """Whether ``point`` (x, y, z) m is farther than sqrt(``spacing2``) m from every point of
    ``recent`` (the touched points of the last :data:`MEMORY_STEPS` contact steps, world
    frame): a new contact point."""
    x, y, z = point
    for points in recent:
        for a, b, c in points:
            if (x - a) ** 2 + (y - b) ** 2 + (z - c) ** 2 <= spacing2:
                return False
    return True

_TRIU = {k: np.triu_indices(k) for k in (1, 2, 3)}

#: Below this tangential speed (m/s) the slip direction is undefined and a fixed tangent is used.
SLIP_TOLERANCE_MPS = 1e-6


def skew(vector: np.ndarray) -> np.ndarray:
    """The cross-product matrix [r]x (3, 3), so that [r]x a = r x a."""
    x, y, z = vector
    return np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])


def free_body_mass_matrix(mass_kg: float, inertia_world: np.ndarray) -> np.ndarray:
    """M = diag(m I3, I_world) (6, 6) for q_dot = (v world m/s, omega world rad/s)."""
    matrix = np.zeros((6, 6))
    matrix[:3, :3] = mass_kg * np.eye(3)
    matrix[3:, 3:] = inertia_world
    return matrix


def free_body_point_jacobian(offset_world: np.ndarray) -> np.ndarray:
    """J_p = [I3, -[r]x] (3, 6) for a point at world offset r (m) from the centre of mass.

    The point's velocity is v + omega x r = v - r x omega.
    """
    jac = np.zeros((3, 6))
    jac[:, :3] = np.eye(3)
    jac[:, 3:] = -skew(np.asarray(offset_world, dtype=np.float64))
    return jac


def contact_frame(normal_world: np.ndarray, point_velocity_world: np.ndarray | None = None,
                  planar: bool = False) -> np.ndarray:
    """Rows (n, t1, t2) in 3D, or (n, t) in the x-y plane, as world-frame unit vectors.

    Parameters
    ----------
    normal_world : ndarray of shape (3,)
        Contact normal, pointing from the static body into the moving one (normalised here).
    point_velocity_world : ndarray of shape (3,), optional
        Pre-contact velocity of the contact point (m/s, world); its tangential part sets t1.
    planar : bool
        True for bodies in the x-y plane: returns (2, 3) with t in the plane.
    """
    n = np.asarray(normal_world, dtype=np.float64)
    n = n / np.linalg.norm(n)
    slip = np.zeros(3) if point_velocity_world is None else np.asarray(point_velocity_world, float)
    slip = slip - (slip @ n) * n
    if planar:
        tangent = np.array([n[1], -n[0], 0.0])
        tangent /= np.linalg.norm(tangent)
        if slip @ tangent < -SLIP_TOLERANCE_MPS:
            tangent = -tangent
        return np.stack([n, tangent])
    speed = np.linalg.norm(slip)
    if speed > SLIP_TOLERANCE_MPS:
        t1 = slip / speed
    else:
        axis = np.eye(3)[int(np.argmin(np.abs(n)))]
        t1 = axis - (axis @ n) * n
        t1 /= np.linalg.norm(t1)
    t2 = np.array([n[1] * t1[2] - n[2] * t1[1], n[2] * t1[0] - n[0] * t1[2],
                   n[0] * t1[1] - n[1] * t1[0]])  # n x t1 (np.cross costs ~10 us here)
    return np.array([n, t1, t2])


def effective_inertia(mass_matrix: np.ndarray, contact_jacobian: np.ndarray) -> np.ndarray:
    """M_c = (J M^-1 J^T)^-1 (k, k) in kg: the operational-space inertia at the contact."""
    inverse_mass_jt = np.linalg.solve(mass_matrix, contact_jacobian.T)
    return np.linalg.inv(contact_jacobian @ inverse_mass_jt)


def contact_features(effective_inertia_kg: np.ndarray, contact_velocity_mps: np.ndarray
                     ) -> np.ndarray:
    """x = (upper triangle of M_c row by row, v_c): (9,) in 3D, (5,) in the plane."""
    rows, cols = _TRIU[effective_inertia_kg.shape[0]]
    return np.concatenate([effective_inertia_kg[rows, cols], contact_velocity_mps])


def unpack_features(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`contact_features` for rows (..., 9) or (..., 5): (M_c (..., k, k),
    v_c (..., k))."""
    features = np.asarray(features, dtype=np.float64)
    k = {9: 3, 5: 2}.get(features.shape[-1])
    if k is None:
        raise ValueError(f"contact features have 9 (3D) or 5 (planar) entries, "
                         f"got {features.shape[-1]}")
    rows, cols = np.triu_indices(k)
    inertia = np.zeros(features.shape[:-1] + (k, k))
    inertia[..., rows, cols] = features[..., :len(rows)]
    inertia[..., cols, rows] = features[..., :len(rows)]
    return inertia, features[..., len(rows):]


def spin_features(frame: np.ndarray, angular_velocity_world: np.ndarray,
                  radius_of_gyration_m: float) -> np.ndarray:
    """s = r_g C ω in m/s: (3,) in 3D (ω (3,) rad/s, world frame, on the frame rows (n, t1,
    t2)), (1,) in the plane (ω about +z, signed by the frame's handedness (n × t)·z, so that
    mirror-image impacts get the same features)."""
    frame = np.asarray(frame, dtype=np.float64)
    omega = np.asarray(angular_velocity_world, dtype=np.float64)
    if frame.shape[0] == 2:
        handedness = frame[0, 0] * frame[1, 1] - frame[0, 1] * frame[1, 0]
        return np.array([radius_of_gyration_m * float(np.ravel(omega)[-1]) * handedness])
    return radius_of_gyration_m * frame @ omega


def feature_width(planar: bool, spin: bool = False, contact_mode: bool = False) -> int:
    """Number of residual-policy inputs at a contact event: the contact features (5 planar,
    9 in 3D), then the spin features (1 or 3) with ``spin``, then the contact mode (1, the
    number of touching points) with ``contact_mode``."""
    return (5 + spin if planar else 9 + 3 * spin) + contact_mode


def velocity_change(mass_matrix: np.ndarray, contact_jacobian: np.ndarray,
                    impulse_contact: np.ndarray) -> np.ndarray:
    """dq_dot = M^-1 J^T p (nv,) for an impulse p (k,) in N s, contact frame."""
    return np.linalg.solve(mass_matrix, contact_jacobian.T @ np.asarray(impulse_contact))


@dataclass(frozen=True)
class ContactModel:
    """Contact quantities at one point of a body in one state (see module docstring).

    Attributes: ``frame`` (k, 3) world rows (n, t1[, t2]); ``point_world`` (3,) m;
    ``jacobian`` J (k, nv); ``mass_matrix`` M (nv, nv); ``effective_inertia`` M_c (k, k) kg;
    ``velocity`` v_c (k,) m/s in the contact frame; ``features`` x (9,) or (5,).
    """

    frame: np.ndarray
    point_world: np.ndarray
    jacobian: np.ndarray
    mass_matrix: np.ndarray
    effective_inertia: np.ndarray
    velocity: np.ndarray
    features: np.ndarray

    def velocity_change(self, impulse_contact: np.ndarray) -> np.ndarray:
        """dq_dot (nv,) that an impulse p (k,) in N s, contact frame, causes."""
        return velocity_change(self.mass_matrix, self.jacobian, impulse_contact)

    def impulse_to_world(self, impulse_contact: np.ndarray) -> np.ndarray:
        """The impulse as a world-frame vector (3,) in N s."""
        return np.asarray(impulse_contact) @ self.frame


def contact_model(mass_matrix: np.ndarray, point_jacobian: np.ndarray, qdot: np.ndarray,
                  point_world: np.ndarray, normal_world: np.ndarray,
                  planar: bool = False) -> ContactModel:
    """Build a :class:`ContactModel` from M, J_p (3, nv), q_dot and the contact geometry."""
    point_velocity = point_jacobian @ qdot
    frame = contact_frame(normal_world, point_velocity, planar=planar)
    jacobian = frame @ point_jacobian
    m_c = effective_inertia(mass_matrix, jacobian)
    v_c = jacobian @ qdot
    return ContactModel(frame=frame, point_world=np.asarray(point_world, dtype=np.float64),
                        jacobian=jacobian, mass_matrix=mass_matrix, effective_inertia=m_c,
                        velocity=v_c, features=contact_features(m_c, v_c))


def in_friction_cone(impulse_contact: np.ndarray, friction: float, tol: float = 1e-12) -> bool:
    """True when p_n >= 0 and ||p_t|| <= mu p_n (p = (p_n, p_t...), N s, contact frame)."""
    p = np.asarray(impulse_contact, dtype=np.float64)
    return bool(p[0] >= -tol and np.linalg.norm(p[1:]) <= friction * p[0] + tol)


def project_to_friction_cone(impulse_contact: np.ndarray, friction: float) -> np.ndarray:
    """Euclidean projection of p = (p_n, p_t...) onto {p_n >= 0, ||p_t|| <= mu p_n}."""
    if friction < 0:
        raise ValueError(f"friction must be >= 0, got {friction}")
    p = np.asarray(impulse_contact, dtype=np.float64).copy()
    normal, tangential = p[0], p[1:]
    slip = float(np.linalg.norm(tangential))
    if slip <= friction * normal:
        return p
    if friction * slip <= -normal:
        return np.zeros_like(p)
    new_normal = (normal + friction * slip) / (1.0 + friction**2)
    p[0] = new_normal
    p[1:] = tangential * (friction * new_normal / slip)
    return p


def largest_steps(a, b, c, cap) -> np.ndarray:
    """Largest α in [0, cap] with a α² + b α + c <= 0, elementwise over arrays (0 where only
    α = 0 comes close). With a = ½ΔᵀMΔ, b = vᵀMΔ and c = kinetic energy now minus the
    allowed energy, it is the longest step along a correction Δ that keeps the energy
    within the allowance. Four scalars give a float (the rollout's case, once per event)."""
    if all(np.ndim(v) == 0 for v in (a, b, c, cap)):
        return _largest_step(float(a), float(b), float(c), float(cap))
    a, b, c, cap = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (a, b, c, cap)))
    disc = b * b - 4.0 * a * c
    with np.errstate(divide="ignore", invalid="ignore"):
        sqrt = np.sqrt(np.maximum(disc, 0.0))
        root, lower = (-b + sqrt) / (2.0 * a), (-b - sqrt) / (2.0 * a)
        linear = np.where(b <= 0.0, cap, np.minimum(cap, -c / b))
    quadratic = np.where((disc < 0.0) | (root < 0.0) | (lower > cap), 0.0,
                         np.minimum(cap, root))
    alpha = np.where(a <= 1e-300, linear, quadratic)
    return np.where((c > 0.0) & ((a <= 0.0) | (b >= 0.0)), 0.0, alpha)


def _largest_step(a: float, b: float, c: float, cap: float) -> float:
    """:func:`largest_steps` of scalars, branch by branch in Python floats."""
    if c > 0.0 and (a <= 0.0 or b >= 0.0):
        return 0.0
    if a <= 1e-300:
        return cap if b <= 0.0 else min(cap, -c / b)
    disc = b * b - 4.0 * a * c
    sqrt = math.sqrt(max(disc, 0.0))
    root, lower = (-b + sqrt) / (2.0 * a), (-b - sqrt) / (2.0 * a)
    if disc < 0.0 or root < 0.0 or lower > cap:
        return 0.0
    return min(cap, root)
