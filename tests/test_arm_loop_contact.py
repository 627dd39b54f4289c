"""Residual contact machinery on the arm + loop scene (residualsim.sim.scenes.arm_loop_contact)."""

from __future__ import annotations

import numpy as np
import pybullet as pb
import pytest

from residualsim.sim.contact import contact_model
from residualsim.errors import SceneError
from residualsim.residual.policy import ResidualPolicy
from residualsim.sim.scenes.arm_loop import ArmLoopScene
from residualsim.sim.scenes.arm_loop_contact import (
    apply_loop_impulse, loop_contact_model, loop_contact_points, loop_residual_rollout)

LINK = 3  # loop link 2: the first link off the clamp with a full-rank point Jacobian


@pytest.fixture(scope="module")
def pressed():
    """A scene where the arm has pressed the loop onto the table (no residual: a fresh
    policy's mean is zero), with the saved state and a touching point of LINK."""
    scene = ArmLoopScene(12)
    run = loop_residual_rollout(scene, ResidualPolicy(seed=0), scene.kappa, 1.0, None,
                                deterministic=True)
    assert all(not event.impulse.any() for event in run.events)
    points = [p for p in loop_contact_points(scene) if p.link == LINK]
    assert points, "the scenario should leave loop link 2 on the table"
    state = pb.saveState(physicsClientId=scene.client)
    yield scene, state, points[0]
    scene.close()


def _rotation(quaternion):
    return np.array(pb.getMatrixFromQuaternion(quaternion)).reshape(3, 3)


def _com_local(scene, link, point_world):
    """The point in the link's centre-of-mass frame (for finite differences)."""
    pos, orn = pb.getLinkState(scene.loop, link, computeForwardKinematics=True,
                               physicsClientId=scene.client)[:2]
    return _rotation(orn).T @ (point_world - np.array(pos))


def _point_velocity_jacobian(scene, link, point_world):
    """World velocity (3,) m/s of a link point via calculateJacobian at the current q, q̇
    (offset from the link frame origin in the COM orientation; rows in the base frame)."""
    q, qdot = scene.loop_state()
    state = pb.getLinkState(scene.loop, link, computeForwardKinematics=True,
                            physicsClientId=scene.client)
    local = _rotation(state[1]).T @ (point_world - np.array(state[4]))
    linear, _ = pb.calculateJacobian(scene.loop, link, local.tolist(), q.tolist(),
                                     qdot.tolist(), [0.0] * len(q),
                                     physicsClientId=scene.client)
    base = pb.getBasePositionAndOrientation(scene.loop, physicsClientId=scene.client)[1]
    return _rotation(base) @ np.array(linear) @ qdot


def _point_velocity_link_state(scene, link, point_world):
    """The same from getLinkState's centre-of-mass velocities: v + ω × (p - c)."""
    state = pb.getLinkState(scene.loop, link, computeLinkVelocity=True,
                            computeForwardKinematics=True, physicsClientId=scene.client)
    com, v, w = np.array(state[0]), np.array(state[6]), np.array(state[7])
    return v + np.cross(w, point_world - com)


def test_contact_points_are_on_the_table(pressed):
    scene, state, point = pressed
    pb.restoreState(state, physicsClientId=scene.client)
    points = loop_contact_points(scene)
    assert {p.link for p in points} >= {1, LINK}
    for p in points:
        assert p.link % 2 == 1  # loop links, not the collision-free vertex bodies
        assert abs(p.point_world[2]) < 2e-3
        np.testing.assert_allclose(p.normal_world, [0, 0, 1], atol=1e-9)


def test_features_shape_and_effective_inertia(pressed):
    scene, state, point = pressed
    pb.restoreState(state, physicsClientId=scene.client)
    model = loop_contact_model(scene, point.link, point.point_world, point.normal_world)
    n = scene.n_loop_joints
    assert model.features.shape == (9,) and np.isfinite(model.features).all()
    assert model.mass_matrix.shape == (n, n) and model.jacobian.shape == (3, n)
    m_c = model.effective_inertia
    np.testing.assert_allclose(m_c, m_c.T, rtol=1e-9, atol=1e-12)
    assert np.linalg.eigvalsh(m_c).min() > 0
    # Loop link 2's normal inertia is below the whole loop's mass and above a link's tenth.
    assert scene.loop_params.mass_kg / 120 < m_c[0, 0] < scene.loop_params.mass_kg
    np.testing.assert_allclose(model.frame[0], [0, 0, 1], atol=1e-9)


def test_link_one_has_no_effective_inertia(pressed):
    scene, state, _ = pressed
    pb.restoreState(state, physicsClientId=scene.client)
    point = next(p for p in loop_contact_points(scene, touching_only=False) if p.link == 1)
    with pytest.raises(SceneError, match="fewer than 3 degrees"):
        loop_contact_model(scene, 1, point.point_world, point.normal_world)


@pytest.mark.parametrize("impulse", [(1e-4, 0.0, 0.0), (2e-4, -5e-5, 3e-5)])
def test_impulse_changes_point_velocity_by_inverse_inertia(pressed, impulse):
    scene, state, point = pressed
    pb.restoreState(state, physicsClientId=scene.client)
    model = loop_contact_model(scene, point.link, point.point_world, point.normal_world)
    q_before = scene.loop_state()[0]
    before_jac = _point_velocity_jacobian(scene, point.link, point.point_world)
    before_state = _point_velocity_link_state(scene, point.link, point.point_world)
    dqdot = apply_loop_impulse(scene, model, np.array(impulse))
    np.testing.assert_array_equal(scene.loop_state()[0], q_before)
    expected = np.linalg.solve(model.effective_inertia, impulse)
    change_jac = model.frame @ (_point_velocity_jacobian(scene, point.link, point.point_world)
                                - before_jac)
    change_state = model.frame @ (_point_velocity_link_state(scene, point.link,
                                                             point.point_world) - before_state)
    scale = np.linalg.norm(expected)
    assert np.linalg.norm(change_jac - expected) <= 1e-8 * scale
    assert np.linalg.norm(change_state - expected) <= 1e-8 * scale
    np.testing.assert_allclose(dqdot, model.velocity_change(np.array(impulse)), rtol=1e-12)


def test_jacobian_matches_finite_differences(pressed):
    scene, state, point = pressed
    pb.restoreState(state, physicsClientId=scene.client)
    model = loop_contact_model(scene, point.link, point.point_world, point.normal_world)
    jac_p = model.frame.T @ model.jacobian  # back to world rows
    local = _com_local(scene, point.link, point.point_world)
    q, _ = scene.loop_state()

    def where(angles):
        for joint, angle in enumerate(angles):
            pb.resetJointState(scene.loop, joint, float(angle), 0.0,
                               physicsClientId=scene.client)
        pos, orn = pb.getLinkState(scene.loop, point.link, computeForwardKinematics=True,
                                   physicsClientId=scene.client)[:2]
        return np.array(pos) + _rotation(orn) @ local

    def central(j, step):
        offset = np.zeros(len(q))
        offset[j] = step
        return (where(q + offset) - where(q - offset)) / (2 * step)

    # Richardson-extrapolated central differences; link poses come back in single
    # precision, so the steps cannot be small.
    numeric = np.column_stack([(4 * central(j, 5e-3) - central(j, 1e-2)) / 3
                               for j in range(len(q))])
    pb.restoreState(state, physicsClientId=scene.client)
    assert np.abs(numeric - jac_p).max() <= 1e-4 * np.abs(jac_p).max()
    assert np.abs(jac_p[:, point.link + 1:]).max() == 0  # joints beyond the link do not act


def test_mass_matrix_gives_kinetic_energy(pressed):
    scene, state, point = pressed
    pb.restoreState(state, physicsClientId=scene.client)
    model = loop_contact_model(scene, point.link, point.point_world, point.normal_world)
    q, _ = scene.loop_state()
    qdot = np.random.default_rng(4).normal(size=len(q))
    for joint, (angle, velocity) in enumerate(zip(q, qdot)):
        pb.resetJointState(scene.loop, joint, float(angle), float(velocity),
                           physicsClientId=scene.client)
    kinetic = 0.0
    for link in range(len(q)):
        link_state = pb.getLinkState(scene.loop, link, computeLinkVelocity=True,
                                     computeForwardKinematics=True,
                                     physicsClientId=scene.client)
        mass, _, inertia = pb.getDynamicsInfo(scene.loop, link,
                                              physicsClientId=scene.client)[:3]
        rot, v, w = _rotation(link_state[1]), np.array(link_state[6]), np.array(link_state[7])
        kinetic += 0.5 * mass * v @ v + 0.5 * w @ rot @ np.diag(inertia) @ rot.T @ w
    pb.restoreState(state, physicsClientId=scene.client)
    assert kinetic == pytest.approx(0.5 * qdot @ model.mass_matrix @ qdot, rel=1e-9)


def test_features_invariant_to_rotation_about_normal(pressed):
    scene, state, point = pressed
    pb.restoreState(state, physicsClientId=scene.client)
    _, qdot = scene.loop_state()
    qdot = qdot + 0.05 * np.cos(np.arange(len(qdot)))  # make sure the point slips
    model = loop_contact_model(scene, point.link, point.point_world, point.normal_world, qdot)
    assert model.velocity[1] > 1e-3 and abs(model.velocity[2]) < 1e-12  # t1 along slip
    n = model.frame[0]
    jac_p = model.frame.T @ model.jacobian
    for angle in (0.7, 2.5, -1.9):  # rotate the world (J_p's rows) about the normal
        k = np.array([[0, -n[2], n[1]], [n[2], 0, -n[0]], [-n[1], n[0], 0]])
        rot = np.eye(3) + np.sin(angle) * k + (1 - np.cos(angle)) * k @ k
        rotated = contact_model(model.mass_matrix, rot @ jac_p, qdot, rot @ point.point_world,
                                n)
        np.testing.assert_allclose(rotated.features, model.features, rtol=1e-9, atol=1e-12)


@pytest.fixture(scope="module")
def rollouts():
    """Rollouts of a small seeded policy with non-zero weights, keyed (deterministic, seed)."""
    scene = ArmLoopScene(12)
    policy = ResidualPolicy(seed=3, hidden=(8,))
    policy.set_flat(np.random.default_rng(11).normal(0.0, 0.3, policy.n_parameters))
    policy.impulse_scale_ns = 1e-3  # N s: a few cm/s on a link of ~10 g
    runs = {key: loop_residual_rollout(scene, policy, scene.kappa, 1.0,
                                       np.random.default_rng(key[1]), deterministic=key[0])
            for key in [(False, 1), (False, 1, "again"), (False, 2), (True, 1), (True, 7)]}
    ee_end = scene.ee_position()
    scene.close()
    return policy, runs, ee_end


def _same(a, b):
    return (np.array_equal(a.arm_angles, b.arm_angles)
            and np.array_equal(a.loop_angles, b.loop_angles)
            and len(a.events) == len(b.events)
            and all(x.link == y.link and x.index == y.index
                    and np.array_equal(x.features, y.features)
                    and np.array_equal(x.impulse, y.impulse)
                    for x, y in zip(a.events, b.events)))


def test_rollout_has_contact_events(rollouts):
    _, runs, ee_end = rollouts
    run = runs[False, 1]
    assert run.arm_angles.shape == (101, 7) and run.loop_angles.shape == (101, 24)
    assert ee_end[2] < 0.8 - 0.35  # the last link went down ~0.4 m
    assert len(run.events) >= 1
    assert run.skipped and all(link == 1 for _, link in run.skipped)  # no M_c on link 1
    for event in run.events:
        assert event.link % 2 == 1 and event.link != 1
        assert event.features.shape == (9,) and np.isfinite(event.features).all()
        assert event.impulse.shape == (3,) and np.abs(event.impulse).max() > 0
        assert np.abs(event.dqdot).max() > 0


def test_rollout_seeding(rollouts):
    policy, runs, _ = rollouts
    assert _same(runs[False, 1], runs[False, 1, "again"])
    one, two = runs[False, 1], runs[False, 2]
    np.testing.assert_array_equal(one.events[0].features, two.events[0].features)
    assert not np.allclose(one.events[0].impulse, two.events[0].impulse)
    assert not np.array_equal(one.loop_angles[-1], two.loop_angles[-1])  # the kick acted
    assert _same(runs[True, 1], runs[True, 7])  # the mean ignores the generator
    fast = policy.numpy()
    for event in runs[True, 1].events:
        np.testing.assert_allclose(event.impulse, fast.mean(event.features), rtol=1e-12)
