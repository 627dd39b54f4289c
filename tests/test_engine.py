"""The engine wrapper: parameters, contact events, energy, penetration, reuse, bad input."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pybullet as pb
import pytest

from residualsim.sim.contact import in_friction_cone
from residualsim.sim.engine import Engine
from residualsim.errors import ParameterError, SceneError
from residualsim.sim.scenes import EngineParams, make_scene, parse_params
from residualsim.sim.scenes.base import load_urdf
from residualsim.sim.synthesize import sample_toss_states

FLAT_DROP = np.array([0.0, 0.0, 0.25, 1, 0, 0, 0, 0.3, 0.0, -0.5, 0.0, 0.0, 0.0])


def test_free_flight_follows_ballistics():
    engine = Engine("cube")
    state = np.array([0, 0, 2.0, 1, 0, 0, 0, 1.0, -0.5, 2.0, 0, 0, 0])
    rollout = engine.rollout(state, 30)
    t = rollout.times_s
    substep = engine.dt_s / engine.scene.settings.substeps
    # Bullet integrates semi-implicit Euler: exact discrete ballistics at step h.
    expected_z = 2.0 + 2.0 * t - 0.5 * 9.81 * t**2 - 0.5 * 9.81 * substep * t
    np.testing.assert_allclose(rollout.states[:, 2], expected_z, atol=1e-9)
    np.testing.assert_allclose(rollout.states[:, 0], 1.0 * t, atol=1e-9)
    assert rollout.events == ()
    engine.close()


def test_cube_comes_to_rest_on_the_table():
    engine = Engine("cube")
    rollout = engine.rollout(FLAT_DROP, 300)
    assert rollout.states[-1, 2] == pytest.approx(0.0524, abs=2e-4)
    assert np.linalg.norm(rollout.states[-1, 7:]) < 1e-3
    assert rollout.events[-1].ongoing
    assert engine.penetration_depth() < 1e-3
    engine.close()


def test_event_impulse_is_the_sum_of_contact_forces_times_dt():
    """At 1 substep the momentum-balance impulse equals the reported forces x dt."""
    engine = Engine("cube", params="lateral_friction=0.3,restitution=0.4")
    settings = dataclasses.replace(engine.scene.settings, substeps=1)
    engine.close()
    engine = Engine("cube", params="lateral_friction=0.3,restitution=0.4", settings=settings)
    state = FLAT_DROP.copy()
    engine.reset(state)
    summed = np.zeros(3)
    first_event_steps = []
    for index in range(1, 80):
        engine.step()
        points = engine.contact_points()
        if points:
            first_event_steps.append(index)
            for point in points:
                summed += point.normal_force_n * point.normal_world * engine.dt_s
                summed += (point.friction_force_n @ point.friction_dirs_world) * engine.dt_s
        elif first_event_steps:
            break
    rollout = engine.rollout(state, first_event_steps[-1] + 3)
    event = rollout.events[0]
    assert (event.start_index, event.end_index) == (first_event_steps[0], first_event_steps[-1])
    np.testing.assert_allclose(event.impulse_world, summed, rtol=1e-6, atol=1e-9)
    assert in_friction_cone(event.impulse_contact, 0.3, tol=1e-6)
    assert event.impulse_contact[1] <= 0.0  # friction opposes the slip (t1 along the slip)
    engine.close()


@pytest.mark.parametrize("restitution", [0.2, 0.5, 0.8])
def test_planar_impact_rebounds_with_the_restitution_coefficient(restitution):
    engine = Engine("planar-ellipse", params={"restitution": restitution})
    state = np.array([0.0, 0.025 - 1e-4, 0.0, 0.0, -1.5, 0.0])
    rollout = engine.rollout(state, 3)
    assert rollout.states[1, 4] == pytest.approx(1.5 * restitution - 9.81 * engine.dt_s,
                                                 rel=0.02)
    engine.close()


def test_energy_never_rises_through_contact():
    engine = Engine("cube", params="lateral_friction=0.5,restitution=0.5")
    for state in sample_toss_states(5, rng=1):
        rollout = engine.rollout(state, 150)
        energy = engine.scene.energy(rollout.states)
        assert energy[-1] < energy[0]
        for event in rollout.events:
            assert energy[event.end_index] <= energy[event.start_index - 1] + 1e-3
    engine.close()


def test_reused_world_matches_a_fresh_world_bit_for_bit():
    states = sample_toss_states(3, rng=2)
    reused = Engine("cube", params="lateral_friction=0.2,restitution=0.3")
    for state in states[:2]:
        reused.rollout(state, 120)
    again = reused.rollout(states[2], 120).states
    fresh = Engine("cube", params="lateral_friction=0.2,restitution=0.3")
    np.testing.assert_array_equal(again, fresh.rollout(states[2], 120).states)
    reused.close()
    fresh.close()


def test_set_params_changes_dynamics_and_soft_contact_can_be_switched_off():
    engine = Engine("cube")
    rigid = engine.rollout(FLAT_DROP, 60).states
    engine.set_params({"contact_stiffness": 2e3, "contact_damping": 20.0})
    soft = engine.rollout(FLAT_DROP, 60).states
    assert soft[:, 2].min() < rigid[:, 2].min() - 1e-3  # a soft contact sinks in
    engine.set_params({"contact_stiffness": math.inf})
    np.testing.assert_array_equal(engine.rollout(FLAT_DROP, 60).states, rigid)
    engine.close()


def test_planar_state_round_trip_and_mass_matrix():
    engine = Engine("planar-dice")
    state = np.array([0.1, 0.2, 0.3, -0.4, 0.5, 6.0])
    engine.reset(state)
    np.testing.assert_allclose(engine.state(), state, atol=1e-12)
    scene = engine.scene
    expected = scene.mass_kg * np.diag([1, 1, scene.radius_of_gyration_m**2])
    np.testing.assert_allclose(engine.mass_matrix(), expected, rtol=1e-4, atol=1e-9)
    engine.close()


def test_cube_state_round_trip():
    engine = Engine("cube")
    quat = np.array([0.5, 0.5, -0.5, 0.5])
    state = np.concatenate([[0.1, 0.2, 0.5], quat, [1.0, 2.0, 3.0], [-1.0, 0.5, 0.25]])
    engine.reset(state)
    np.testing.assert_allclose(engine.state(), state, atol=1e-12)
    engine.close()


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ("lateral_friction=-0.1", "lateral_friction must lie in"),
        ("restitution=1.5", "restitution must lie in"),
        ("friction=0.3", "unknown engine parameter"),
        ("lateral_friction=abc", "is not a number"),
        ("lateral_friction", "expected name=value"),
        ({"restitution": float("nan")}, "must be finite"),
    ],
)
def test_bad_parameters_are_refused(params, message):
    with pytest.raises(ParameterError, match=message):
        parse_params(params)


def test_parameter_file(tmp_path):
    path = tmp_path / "calibration.json"
    path.write_text('{"median": {"lateral_friction": 0.18, "restitution": 0.125}}')
    assert parse_params(str(path)) == EngineParams(lateral_friction=0.18, restitution=0.125)
    bad = tmp_path / "bad.json"
    bad.write_text('{"lateral_friction": -1}')
    with pytest.raises(ParameterError, match="bad.json"):
        parse_params(str(bad))
    with pytest.raises(ParameterError, match="missing.json: parameter file not found"):
        parse_params(str(tmp_path / "missing.json"))


def test_unknown_scene_and_urdf():
    with pytest.raises(SceneError, match="unknown scene 'sphere'; known scenes: cube"):
        make_scene("sphere")
    client = pb.connect(pb.DIRECT)
    try:
        with pytest.raises(SceneError, match="nope.urdf: URDF file not found"):
            load_urdf(client, "nope.urdf")
    finally:
        pb.disconnect(client)


def test_wrong_state_shape():
    engine = Engine("cube")
    with pytest.raises(SceneError, match=r"shape \(13,\)"):
        engine.reset(np.zeros(6))
    engine.close()


def test_a_bounce_inside_one_step_is_still_an_event():
    """A fast impact can touch and leave within one step's substeps: no point remains after."""
    engine = Engine("planar-ellipse", params={"restitution": 0.5})
    rollout = engine.rollout(np.array([0.0, 0.025 - 1e-4, 0.0, 0.2, -2.6, 0.0]), 5)
    assert len(rollout.events) == 1
    event = rollout.events[0]
    assert event.start_index == event.end_index == 1
    np.testing.assert_allclose(event.normal_world, [0, 1, 0], atol=1e-6)
    assert event.point_world[1] == pytest.approx(0.0, abs=2e-3)
    # Normal impulse m (1 + e) v_n, up to gravity's share within the step.
    assert event.impulse_contact[0] == pytest.approx(0.0364 * 1.5 * 2.6, rel=0.03)
    engine.close()


@pytest.mark.parametrize("scene_name", ["cube", "planar-ellipse"])
def test_energy_of_one_state_equals_the_batched_energy(scene_name):
    """Scene.energy has a single-state branch (the contact guard's, once per event) and a
    batched one; they agree, and one state gives a float."""
    scene = make_scene(scene_name)
    rng = np.random.default_rng(3)
    states = rng.normal(size=(20, scene.state_size))
    if scene_name == "cube":
        states[:, 3:7] *= rng.uniform(0.5, 2.0, (20, 1))  # unnormalised quaternions too
    batched = scene.energy(states)
    single = [scene.energy(state) for state in states]
    assert all(isinstance(value, float) for value in single)
    np.testing.assert_allclose(single, batched, rtol=1e-12, atol=1e-12)


def test_rotation_of_one_quaternion_equals_the_batched_rotation():
    from residualsim.sim.scenes.base import quat_wxyz_to_matrix

    quats = np.random.default_rng(4).normal(size=(50, 4))
    batched = quat_wxyz_to_matrix(quats)
    np.testing.assert_allclose([quat_wxyz_to_matrix(q) for q in quats], batched, atol=1e-15)
    identity = np.broadcast_to(np.eye(3), (50, 3, 3))
    np.testing.assert_allclose(batched @ batched.transpose(0, 2, 1), identity, atol=1e-12)
