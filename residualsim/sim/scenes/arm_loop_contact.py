"""Residual contact machinery on the articulated arm + loop scene (:mod:`.arm_loop`).

A contact between a loop link and the table yields the same 9 features as the free cube
(:func:`residualsim.sim.contact.contact_features`): the generalised coordinates are the loop's 2n
joint angles q (its base, the clamp, is fixed), M(q) (2n, 2n) comes from
``pb.calculateMassMatrix`` and the contact point's translational Jacobian J_p (3, 2n) from
``pb.calculateJacobian``.

**Modelling choice.** M is the loop's *own* mass matrix as an open chain: the arm and the
two closure constraints (last link onto the clamp, top link onto the arm's last link) are
not in it. M_c = (J M⁻¹ Jᵀ)⁻¹ is therefore the loop's inertia as seen at the contact, the
paper's definition for one articulated body in the engine. An impulse applied as
q̇ += M⁻¹ Jᵀ p (:func:`apply_loop_impulse`) may violate the closure constraints' velocity
conditions; PyBullet's constraint solver projects that out at the next step.

In these coordinates loop link 1 (PyBullet link 1, hanging from the clamp on θ_1, ψ_1 only)
has two degrees of freedom: its point Jacobian has rank 2, J M⁻¹ Jᵀ is singular and M_c
does not exist (infinite inertia along the blocked direction). :func:`loop_contact_model`
refuses such points (SceneError) and the rollout skips them; every other link has rank 3.

Units: metres, kilograms, seconds, radians; impulses in N s; vectors in the world frame
unless said "contact frame" (rows n, t1, t2 of :func:`residualsim.sim.contact.contact_frame`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from residualsim.sim.bullet import pb

from residualsim.sim.contact import ContactModel, contact_model
from residualsim.sim.contact import is_touching
from residualsim.errors import SceneError
from residualsim.sim.scenes.arm_loop import EE_LINK, ArmLoopScene, lqr_gains

#: Smallest/largest singular value of J_p below which the point has < 3 DOF (no M_c).
RANK_TOLERANCE = 1e-9

__all__ = ["RANK_TOLERANCE", "LoopContact", "LoopContactEvent", "LoopRollout",
           "loop_contact_points", "loop_contact_model", "apply_loop_impulse", "lower_reference",
           "loop_residual_rollout"]


@dataclass(frozen=True)
class LoopContact:
    """One loop-table contact point: loop ``link`` index (2k-1 for loop link k),
    ``point_world`` (3,) m on the loop's surface, ``normal_world`` (3,) unit vector from the
    table into the loop, ``distance_m`` (negative: penetration) and ``normal_force_n``."""

    link: int
    point_world: np.ndarray
    normal_world: np.ndarray
    distance_m: float
    normal_force_n: float


def loop_contact_points(scene: ArmLoopScene, touching_only: bool = True) -> list[LoopContact]:
    """Current contact points between loop links and the table (``pb.getContactPoints``).

    With ``touching_only`` only points closer than ``residualsim.sim.contact.CONTACT_DISTANCE_M`` or
    carrying a normal force are kept (PyBullet also reports points within its margin).
    """
    points = pb.getContactPoints(scene.loop, scene.table, physicsClientId=scene.client)
    return [LoopContact(link=p[3], point_world=np.array(p[5]), normal_world=np.array(p[7]),
                        distance_m=float(p[8]), normal_force_n=float(p[9]))
            for p in points
            if not touching_only or is_touching(p)]


def _loop_point_jacobian(scene: ArmLoopScene, link: int, point_world: np.ndarray,
                         q: np.ndarray, qdot: np.ndarray) -> np.ndarray:
    """J_p (3, 2n): world velocity (m/s) of the link point now at ``point_world`` per q̇.

    ``pb.calculateJacobian`` (checked against joint-axis kinematics and finite differences)
    wants the point as its offset from the link's URDF frame origin, expressed in the
    centre-of-mass frame's orientation (the same as the URDF frame's for the loop's links),
    and returns rows in the *base* frame (the loop's base is turned about z), so they are
    rotated to the world here.
    """
    cid = scene.client
    state = pb.getLinkState(scene.loop, link, computeForwardKinematics=True,
                            physicsClientId=cid)
    com_orn, frame_pos = state[1], np.array(state[4])
    com_rot = np.array(pb.getMatrixFromQuaternion(com_orn)).reshape(3, 3)
    local = com_rot.T @ (np.asarray(point_world, dtype=float) - frame_pos)
    linear, _ = pb.calculateJacobian(scene.loop, link, local.tolist(), q.tolist(),
                                     qdot.tolist(), [0.0] * len(q), physicsClientId=cid)
    base_orn = pb.getBasePositionAndOrientation(scene.loop, physicsClientId=cid)[1]
    return np.array(pb.getMatrixFromQuaternion(base_orn)).reshape(3, 3) @ np.array(linear)


def loop_contact_model(scene: ArmLoopScene, link: int, point_world: np.ndarray,
                       normal_world: np.ndarray, qdot: np.ndarray | None = None
                       ) -> ContactModel:
    """Contact quantities (M, J, M_c, v_c, the 9 features) of a loop link point, now.

    Parameters
    ----------
    link : int
        Loop link index (2k-1 for loop link k).
    point_world, normal_world : arrays (3,)
        Contact point (m, world) on the loop and normal from the table into the loop.
    qdot : array (2n,), optional
        Loop joint velocities (rad/s) giving v_c and the slip tangent; default the current
        ones (a rollout passes the pre-contact ones).

    M (2n, 2n) is the loop's own mass matrix at the current angles (arm and closure
    constraints excluded, see the module docstring). Raises SceneError when J_p has rank
    < 3 (loop link 1), where M_c is undefined.
    """
    q, qdot_now = scene.loop_state()
    qdot = qdot_now if qdot is None else np.asarray(qdot, dtype=float)
    mass = np.array(pb.calculateMassMatrix(scene.loop, q.tolist(),
                                           physicsClientId=scene.client))
    jac = _loop_point_jacobian(scene, link, point_world, q, qdot)
    singular = np.linalg.svd(jac, compute_uv=False)
    if singular[-1] <= RANK_TOLERANCE * singular[0]:
        raise SceneError(f"loop link {link}: the contact point has fewer than 3 degrees of "
                         f"freedom (J_p singular values {singular.tolist()}), no M_c")
    return contact_model(mass, jac, qdot, np.asarray(point_world, float), normal_world)


def apply_loop_impulse(scene: ArmLoopScene, model: ContactModel,
                       impulse_contact: np.ndarray) -> np.ndarray:
    """Apply an impulse p (3,) N s, contact frame, as q̇ += M⁻¹ Jᵀ p on the loop joints
    (angles kept). Returns dq̇ (2n,) rad/s."""
    q, qdot = scene.loop_state()
    delta = model.velocity_change(np.asarray(impulse_contact, dtype=float))
    for joint, (angle, velocity) in enumerate(zip(q, qdot + delta)):
        pb.resetJointState(scene.loop, joint, float(angle), float(velocity),
                           physicsClientId=scene.client)
    return delta


@dataclass(frozen=True)
class LoopContactEvent:
    """A loop link touching the table after a period it did not: sample ``index`` (the
    period's end), ``link``, ``features`` (9,), the applied ``impulse`` (3,) N s, contact
    frame, and the loop's velocity change ``dqdot`` (2n,) rad/s."""

    index: int
    link: int
    features: np.ndarray
    impulse: np.ndarray
    dqdot: np.ndarray


@dataclass(frozen=True)
class LoopRollout:
    """Arm angles (T, 7) rad, loop angles (T, 2n) rad at the samples, the events, and the
    ``skipped`` new contacts (sample index, link) where M_c is undefined (loop link 1)."""

    arm_angles: np.ndarray
    loop_angles: np.ndarray
    events: tuple[LoopContactEvent, ...]
    skipped: tuple[tuple[int, int], ...] = ()


def lower_reference(scene: ArmLoopScene, n_samples: int, drop_m: float, descent_s: float
                    ) -> np.ndarray:
    """Arm reference angles (n_samples, 7) rad lowering the last link from its start pose by
    ``drop_m`` along -z (smooth cosine profile over ``descent_s``, then held), pointing down
    (inverse kinematics seeded by the previous sample). Leaves the arm where it was."""
    saved = scene.arm_state()
    start = scene.ee_position()
    down = pb.getQuaternionFromEuler([math.pi, 0.0, 0.0])
    reference = np.empty((n_samples, 7))
    for t in range(n_samples):
        frac = min(t * scene.settings.dt_s / descent_s, 1.0)
        target = start - np.array([0.0, 0.0, drop_m * 0.5 * (1.0 - math.cos(math.pi * frac))])
        for _ in range(3):
            solution = pb.calculateInverseKinematics(
                scene.arm, EE_LINK, target.tolist(), down, maxNumIterations=200,
                residualThreshold=1e-10, physicsClientId=scene.client)
            scene.set_arm(np.array(solution[:7]))
        reference[t] = solution[:7]
    scene.set_arm(*saved)
    return reference


def loop_residual_rollout(scene: ArmLoopScene, policy, kappa: np.ndarray,
                          duration_s: float, rng: int | np.random.Generator | None,
                          deterministic: bool = False, drop_m: float = 0.4,
                          descent_s: float = 1.0, bandwidth_radps: float = 30.0
                          ) -> LoopRollout:
    """The arm presses the loop down onto the table; the residual acts at contact events.

    From the scene's built state (:meth:`ArmLoopScene.reset`), the arm tracks
    :func:`lower_reference` (last link ``drop_m`` lower after ``descent_s``: 0.4 m in 1 s
    flattens the clamp-side loop links 1 and 2 onto the table, after about 0.4 s and 0.7 s)
    under LQR feedback (:func:`lqr_gains` at ``bandwidth_radps``) with gravity feedforward, one
    :meth:`ArmLoopScene.drive` period at a time, loop springs ``kappa`` (κ_θ, κ_ψ) N m/rad.
    After each period, a loop link touching the table that did not after the previous
    period is an event: its features use the pre-period loop velocity (the points and
    normals of the link averaged, weighted by normal force), the policy's impulse (a sample
    drawn with ``rng``, or its mean when ``deterministic``) is applied by
    :func:`apply_loop_impulse`. Contacts of loop link 1 are skipped (no M_c, see the module
    docstring). No energy or penetration guard is applied here. Same ``rng`` seed, same
    result; ``deterministic`` ignores ``rng``. ``policy`` is a
    :class:`~residualsim.residual.ResidualPolicy` (anything with its ``numpy()``: the physics
    wing does not import the residual wing above it).
    """
    scene.reset()
    generator = np.random.default_rng(rng)
    fast = policy.numpy()
    n_periods = int(round(duration_s / scene.settings.dt_s))
    reference = lower_reference(scene, n_periods + 1, drop_m, descent_s)
    gains = lqr_gains(scene.arm_mass_matrix(scene.arm_start), bandwidth_radps)
    feedforward = np.array([scene.gravity_torques(row) for row in reference[:-1]])
    arm = np.empty((n_periods + 1, 7))
    loop = np.empty((n_periods + 1, scene.n_loop_joints))
    arm[0], loop[0] = scene.arm_state()[0], scene.loop_state()[0]
    events: list[LoopContactEvent] = []
    skipped: list[tuple[int, int]] = []
    touched: set[int] = set()
    for k in range(n_periods):
        qdot_before = scene.loop_state()[1]
        scene.drive(kappa, feedforward[k:k + 1], reference[k:k + 2], gains)
        by_link: dict[int, list[LoopContact]] = {}
        for point in loop_contact_points(scene):
            by_link.setdefault(point.link, []).append(point)
        for link in sorted(set(by_link) - touched):
            points = by_link[link]
            forces = np.array([max(p.normal_force_n, 0.0) for p in points])
            weights = forces if forces.sum() > 0 else np.ones(len(points))
            where = weights @ np.array([p.point_world for p in points]) / weights.sum()
            normal = weights @ np.array([p.normal_world for p in points])
            try:
                model = loop_contact_model(scene, link, where,
                                           normal / np.linalg.norm(normal), qdot=qdot_before)
            except SceneError:
                skipped.append((k + 1, link))
                continue
            impulse = (fast.mean(model.features) if deterministic
                       else fast.sample(model.features, generator))
            dqdot = apply_loop_impulse(scene, model, impulse)
            events.append(LoopContactEvent(index=k + 1, link=link, features=model.features,
                                           impulse=np.asarray(impulse, float), dqdot=dqdot))
        touched = set(by_link)
        arm[k + 1], loop[k + 1] = scene.arm_state()[0], scene.loop_state()[0]
    return LoopRollout(arm_angles=arm, loop_angles=loop, events=tuple(events),
                       skipped=tuple(skipped))
