"""Contact-frame math, checked against closed forms and against PyBullet itself."""

from __future__ import annotations

import numpy as np
import pybullet as pb
import pytest

from residualsim.sim.contact import (
    contact_features,
    contact_frame,
    effective_inertia,
    free_body_mass_matrix,
    free_body_point_jacobian,
    in_friction_cone,
    project_to_friction_cone,
)
from residualsim.sim.engine import Engine
from residualsim.sim.scenes import EngineSettings
from residualsim.sim.scenes.base import quat_wxyz_to_matrix

IMPULSE_TEST_SETTINGS = {
    "cube": EngineSettings(dt_s=1e-4, substeps=1, gravity_mps2=(0.0, 0.0, 0.0)),
    "planar-ellipse": EngineSettings(dt_s=1e-4, substeps=1, gravity_mps2=(0.0, 0.0, 0.0)),
}


def _quat_about_axis(axis, angle):
    axis = np.asarray(axis, float) / np.linalg.norm(axis)
    return np.concatenate([[np.cos(angle / 2)], np.sin(angle / 2) * axis])


def _cube_state(quat_wxyz, height=0.5):
    return np.concatenate([[0.1, -0.2, height], quat_wxyz, np.zeros(6)])


@pytest.mark.parametrize(
    ("scene", "state", "point_offset", "normal"),
    [
        ("cube", _cube_state(_quat_about_axis([1, 2, 3], 0.7)), None, [0, 0, 1]),
        ("planar-ellipse", np.array([0.02, 0.3, 0.4, 0, 0, 0]), (0.02, -0.02, 0.0), [0, 1, 0]),
    ],
)
def test_effective_inertia_matches_engine_response(scene, state, point_offset, normal):
    """Apply a known impulse p in PyBullet at a contact point: the measured dv_c is M_c^-1 p."""
    engine = Engine(scene, settings=IMPULSE_TEST_SETTINGS[scene])
    engine.reset(state)
    if point_offset is None:  # a cube corner, rotated into the world
        rot = quat_wxyz_to_matrix(state[3:7])
        point = state[:3] + rot @ np.array([-1, 1, -1]) * 0.0524
    else:
        point = np.array([state[0], state[1], 0.0]) + np.array(point_offset)
    model = engine.contact_model(point, normal)
    k = model.frame.shape[0]
    impulse = np.array([0.02, -0.007, 0.004][:k])
    dt = engine.dt_s
    pb.applyExternalForce(engine.scene.body, engine.scene.link,
                          (model.impulse_to_world(impulse) / dt).tolist(), point.tolist(),
                          pb.WORLD_FRAME, physicsClientId=engine.client)
    qdot_before = engine.scene.generalized_velocity()
    engine.step()
    measured = model.jacobian @ (engine.scene.generalized_velocity() - qdot_before)
    expected = np.linalg.solve(model.effective_inertia, impulse)
    np.testing.assert_allclose(measured, expected, rtol=2e-3, atol=1e-6)
    # Our own velocity correction agrees with PyBullet's response.
    engine.reset(state)
    delta = engine.apply_contact_impulse(model, impulse)
    np.testing.assert_allclose(model.jacobian @ delta, expected, rtol=1e-9)
    engine.close()


def test_free_body_effective_inertia_closed_form():
    """For a point on the axis below a sphere-like body, M_c^-1 = I/m + [r]x^T I^-1 [r]x."""
    mass, inertia = 2.0, np.diag([0.1, 0.2, 0.3])
    offset = np.array([0.05, -0.02, -0.1])
    jac = free_body_point_jacobian(offset)
    m_c = effective_inertia(free_body_mass_matrix(mass, inertia), jac)
    r_x = np.array([[0, -offset[2], offset[1]], [offset[2], 0, -offset[0]],
                    [-offset[1], offset[0], 0]])
    expected_inverse = np.eye(3) / mass + r_x @ np.linalg.inv(inertia) @ r_x.T
    np.testing.assert_allclose(np.linalg.inv(m_c), expected_inverse, rtol=1e-12)


def test_features_have_9_numbers_in_3d_and_5_in_plane():
    engine = Engine("cube")
    engine.reset(np.concatenate([[0, 0, 0.06], [1, 0, 0, 0], [0.4, 0.1, -1.0], [0.5, 0, 2]]))
    assert engine.contact_model([0.05, 0.05, 0.0], [0, 0, 1]).features.shape == (9,)
    planar = Engine("planar-ellipse")
    planar.reset(np.array([0, 0.03, 0.1, 0.3, -1.0, 2.0]))
    assert planar.contact_model([0.01, 0.0, 0.0], [0, 1, 0]).features.shape == (5,)
    engine.close()
    planar.close()


@pytest.mark.parametrize("yaw", [0.3, 1.7, -2.4])
def test_features_invariant_to_rotation_about_normal(yaw):
    """Rotating the whole scene about the table normal leaves x = (M_c, v_c) unchanged."""
    engine = Engine("cube")
    quat = _quat_about_axis([0.3, -1, 0.2], 1.1)
    position = np.array([0.2, 0.1, 0.07])
    velocity, omega = np.array([0.8, -0.3, -1.2]), np.array([1.0, -2.0, 0.5])
    corner = np.array([0.25, 0.12, 0.0])
    engine.reset(np.concatenate([position, quat, velocity, omega]))
    features = engine.contact_model(corner, [0, 0, 1]).features

    rot_z = quat_wxyz_to_matrix(_quat_about_axis([0, 0, 1], yaw))
    w1, v1 = quat[0], quat[1:]
    w2, v2 = np.cos(yaw / 2), np.array([0, 0, np.sin(yaw / 2)])
    rotated_quat = np.concatenate([[w2 * w1 - v2 @ v1], w2 * v1 + w1 * v2 + np.cross(v2, v1)])
    engine.reset(np.concatenate([rot_z @ position, rotated_quat, rot_z @ velocity,
                                 rot_z @ omega]))
    rotated = engine.contact_model(rot_z @ corner, [0, 0, 1]).features
    np.testing.assert_allclose(rotated, features, atol=1e-10)
    engine.close()


def test_contact_frame_first_tangent_follows_slip():
    frame = contact_frame([0, 0, 2.0], [0.3, -0.4, -5.0])
    np.testing.assert_allclose(frame[0], [0, 0, 1])
    np.testing.assert_allclose(frame[1], [0.6, -0.8, 0])
    np.testing.assert_allclose(frame @ frame.T, np.eye(3), atol=1e-12)
    planar = contact_frame([0, 1, 0], [-0.2, -1.0, 0], planar=True)
    np.testing.assert_allclose(planar, [[0, 1, 0], [-1, 0, 0]])


def test_features_layout():
    m_c = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 5.0], [3.0, 5.0, 6.0]])
    np.testing.assert_array_equal(contact_features(m_c, np.array([7.0, 8.0, 9.0])),
                                  [1, 2, 3, 4, 5, 6, 7, 8, 9])


@pytest.mark.parametrize(
    ("impulse", "mu", "expected"),
    [
        ([1.0, 0.1, 0.0], 0.5, [1.0, 0.1, 0.0]),  # inside: unchanged
        ([-1.0, 0.1, 0.0], 0.5, [0.0, 0.0, 0.0]),  # in the polar cone: origin
        ([1.0, 2.0, 0.0], 0.5, [1.6, 0.8, 0.0]),  # outside: onto the surface
    ],
)
def test_friction_cone_projection(impulse, mu, expected):
    projected = project_to_friction_cone(np.array(impulse), mu)
    np.testing.assert_allclose(projected, expected, atol=1e-12)
    assert in_friction_cone(projected, mu, tol=1e-9)


def test_friction_cone_projection_is_closest_feasible_point():
    rng = np.random.default_rng(3)
    for _ in range(50):
        p = rng.normal(size=3)
        mu = rng.uniform(0.05, 1.5)
        projected = project_to_friction_cone(p, mu)
        candidates = rng.normal(size=(2000, 3))
        feasible = [c for c in candidates if in_friction_cone(c, mu)]
        best = min(np.linalg.norm(c - p) for c in feasible)
        assert np.linalg.norm(projected - p) <= best + 1e-12
