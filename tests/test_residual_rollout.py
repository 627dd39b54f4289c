"""Algorithm 1 (residual rollouts) on the bundled synthetic tosses, and model files."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pybullet as pb
import pytest

from residualsim.sim.contact import unpack_features
from residualsim.data import load_trajectories
from residualsim.sim.contact import CONTACT_DISTANCE_M
from residualsim.sim.engine import Engine
from residualsim.errors import DataError
from residualsim.residual.policy import ResidualPolicy
from residualsim.residual.model import ResidualModel
from residualsim.sim.rollout import (ContactGuard, RolloutRequest, interleave, item_rollouts,
                                 predict_trajectories, recording_settings, residual_errors,
                                 residual_rollout, simulate_trajectories, trajectory_items)
from residualsim.sim.scenes import make_scene, parse_params

BUNDLED = Path(__file__).resolve().parents[1] / "data" / "samples" / "cube-synthetic"
PARAMS = "lateral_friction=0.18,restitution=0.3"


@pytest.fixture(scope="module")
def tosses() -> dict:
    return load_trajectories(BUNDLED)


@pytest.fixture(scope="module")
def layout():
    return make_scene("cube")


@pytest.fixture(scope="module")
def engine(tosses):
    settings = recording_settings("cube", tosses, substeps=1)
    with Engine("cube", PARAMS, settings) as built:
        yield built


@pytest.fixture(scope="module")
def starts(tosses, layout) -> dict:
    """id -> (initial state, number of steps)."""
    return {k: (layout.state_from_trajectory(t, 0), t.n_samples - 1) for k, t in tosses.items()}


@pytest.fixture(scope="module")
def event_features(engine, starts) -> np.ndarray:
    """Contact features of the engine's own events on every toss."""
    rows = [residual_rollout(engine, s0, n).features for s0, n in starts.values()]
    return np.concatenate(rows)


@pytest.fixture(scope="module")
def aggressive(event_features) -> ResidualPolicy:
    """A policy with N(0, 1) weights, scaled like training does: large corrections."""
    inertia, velocity = unpack_features(event_features)
    policy = ResidualPolicy().fit_scaling(event_features,
                                          np.einsum("nij,nj->ni", inertia, velocity))
    return policy.set_flat(np.random.default_rng(0).normal(0.0, 1.0, policy.n_parameters))


@pytest.fixture(scope="module")
def model(tosses, aggressive) -> ResidualModel:
    settings = recording_settings("cube", tosses, substeps=1)
    return ResidualModel(scene="cube", policy=aggressive, params=parse_params(PARAMS),
                         dt_s=settings.dt_s, substeps=1, guard=ContactGuard())


def test_recording_settings_use_the_sample_period(tosses):
    settings = recording_settings("cube", tosses, substeps=1)
    times = next(iter(tosses.values())).times_s
    assert settings.dt_s == pytest.approx(np.diff(times).mean(), rel=1e-12)
    assert settings.substeps == 1
    assert recording_settings("cube", tosses).substeps == make_scene("cube").settings.substeps
    with pytest.raises(DataError, match="no recordings"):
        recording_settings("cube", {})


# --- the engine alone and the fresh policy --------------------------------------------------
def test_without_a_policy_the_rollout_is_the_engine(engine, starts):
    total_events = 0
    for s0, n in starts.values():
        positions, quat = engine.rollout_poses(s0, n)
        run = residual_rollout(engine, s0, n)
        np.testing.assert_array_equal(run.positions_m, positions)
        np.testing.assert_array_equal(run.quat_wxyz, quat)
        np.testing.assert_array_equal(run.states, engine.rollout(s0, n).states)
        assert run.positions_m.shape == (n + 1, 3) and run.states.shape == (n + 1, 13)
        np.testing.assert_allclose(run.states[0], s0, rtol=0, atol=1e-15)
        assert run.features.shape == (run.n_events, 9)
        np.testing.assert_array_equal(run.impulses, np.zeros((run.n_events, 3)))
        assert run.n_energy_clamped == run.n_normal_clamped == run.n_engine_energy_gain == 0
        assert run.max_penetration_m >= 0.0
        # approaching contact point: the normal velocity before the step is negative
        _, velocity = unpack_features(run.features)
        assert (velocity[:, 0] <= -ContactGuard().min_approach_mps).all()
        total_events += run.n_events
    assert total_events >= len(starts)  # every toss lands


def test_fresh_policy_in_mean_mode_is_the_engine(engine, starts):
    fresh = ResidualPolicy().numpy()
    for s0, n in starts.values():
        alone = residual_rollout(engine, s0, n)
        run = residual_rollout(engine, s0, n, fresh)
        np.testing.assert_array_equal(run.positions_m, alone.positions_m)
        np.testing.assert_array_equal(run.quat_wxyz, alone.quat_wxyz)
        np.testing.assert_array_equal(run.states, alone.states)
        assert run.n_events == alone.n_events
        np.testing.assert_array_equal(run.features, alone.features)
        np.testing.assert_array_equal(run.impulses, 0.0)
        assert run.n_normal_clamped == 0
        # (n_energy_clamped is not checked: an event where the engine itself gained energy
        # counts as an energy clamp even though the residual is zero; see the report.)


def test_a_fresh_policy_sampled_does_perturb(engine, starts):
    """Its components have a spread of 5 % of the unit: samples move the cube."""
    fresh = ResidualPolicy().numpy()
    s0, n = starts["synthetic-0"]
    alone = residual_rollout(engine, s0, n)
    run = residual_rollout(engine, s0, n, fresh, np.random.default_rng(0))
    assert np.abs(run.impulses).max() > 0
    assert not np.array_equal(run.positions_m, alone.positions_m)


# --- stochastic and deterministic modes ---------------------------------------------------------
def test_same_seed_same_rollout_other_seed_differs(engine, starts, aggressive):
    fast = aggressive.numpy()
    differs = 0
    for s0, n in list(starts.values())[:4]:
        a = residual_rollout(engine, s0, n, fast, np.random.default_rng(7))
        b = residual_rollout(engine, s0, n, fast, np.random.default_rng(7))
        c = residual_rollout(engine, s0, n, fast, np.random.default_rng(8))
        np.testing.assert_array_equal(a.states, b.states)
        np.testing.assert_array_equal(a.impulses, b.impulses)
        assert (a.n_events, a.n_energy_clamped, a.n_normal_clamped) == \
            (b.n_events, b.n_energy_clamped, b.n_normal_clamped)
        differs += not np.array_equal(a.positions_m, c.positions_m)
    assert differs >= 3


def test_mean_mode_is_deterministic_and_corrects(engine, starts, aggressive):
    fast = aggressive.numpy()
    changed = 0
    for s0, n in list(starts.values())[:4]:
        a = residual_rollout(engine, s0, n, fast)
        b = residual_rollout(engine, s0, n, fast)
        np.testing.assert_array_equal(a.states, b.states)
        alone = residual_rollout(engine, s0, n)
        changed += not np.allclose(a.positions_m, alone.positions_m, atol=1e-6)
        assert np.abs(a.impulses).max() > 0
    assert changed >= 3


def test_event_frames_are_orthonormal_with_the_table_normal_first(engine, starts, aggressive):
    run = residual_rollout(engine, *list(starts.values())[0], aggressive.numpy())
    assert run.n_events > 0 and run.frames.shape == (run.n_events, 3, 3)
    for frame in run.frames:
        np.testing.assert_allclose(frame @ frame.T, np.eye(3), atol=1e-9)
        np.testing.assert_allclose(frame[0], [0.0, 0.0, 1.0], atol=1e-6)  # table normal, up
    # the world-frame impulse keeps the contact-frame normal component along +z
    world = np.einsum("eki,ek->ei", run.frames, run.impulses)
    np.testing.assert_allclose(world[:, 2], run.impulses[:, 0], atol=1e-9)


class _Spy:
    """Wraps a NumpyPolicy; at each event records what the engine resolved before the
    residual is applied: the post-step state, its energy and the touching points."""

    def __init__(self, inner, engine, layout) -> None:
        self.inner, self.engine, self.layout, self.calls = inner, engine, layout, []

    def _record(self) -> None:
        scene = self.engine.scene
        state = self.engine.state()
        touching = [(np.array(p[6]), np.array(p[7])) for p in pb.getContactPoints(
            scene.body, scene.static_body, scene.link, -1, physicsClientId=self.engine.client)
            if p[8] <= CONTACT_DISTANCE_M or p[9] > 0.0]
        self.calls.append((state, self.layout.energy(state), touching))

    def mean(self, features):
        self._record()
        return self.inner.mean(features)

    def sample(self, features, rng):
        self._record()
        return self.inner.sample(features, rng)


def _point_normal_speed(state: np.ndarray, point: np.ndarray, normal: np.ndarray) -> float:
    """Normal velocity (m/s) of the body point at ``point`` in a cube state."""
    return float(normal @ (state[7:10] + np.cross(state[10:13], point - state[0:3])))


def _worst_event_energy_gain(engine, layout, starts, policy, guard) -> tuple[float, float, dict]:
    """Largest E(after event step) - max(E(before step), E(engine's step)) over all events,
    the largest E(t) - E(0), and summed counts (``pushed``: the deepest push of a touching
    point into the table below min(0, the engine's normal velocity), m/s)."""
    worst, rise = -np.inf, -np.inf
    counts = dict(events=0, energy=0, normal=0, gain=0, pushed=-np.inf)
    for s0, n in starts.values():
        for rng in (None, np.random.default_rng(1), np.random.default_rng(2)):
            spy = _Spy(policy, engine, layout)
            run = residual_rollout(engine, s0, n, spy, rng, guard)
            energy = layout.energy(run.states)
            assert len(spy.calls) == run.n_events
            for resolved, engine_energy, touching in spy.calls:
                (index,) = np.flatnonzero((run.positions_m == resolved[:3]).all(axis=1))
                worst = max(worst, energy[index] - max(energy[index - 1], engine_energy))
                np.testing.assert_array_equal(run.states[index, :7], resolved[:7])
                for point, normal in touching:
                    before = _point_normal_speed(resolved, point, normal)
                    after = _point_normal_speed(run.states[index], point, normal)
                    counts["pushed"] = max(counts["pushed"], min(0.0, before) - after)
            rise = max(rise, float(np.max(energy - energy[0])))
            for name, value in (("events", run.n_events), ("energy", run.n_energy_clamped),
                                ("normal", run.n_normal_clamped),
                                ("gain", run.n_engine_energy_gain)):
                assert value >= 0
                counts[name] += value
            assert run.n_energy_clamped <= run.n_events
            assert run.n_normal_clamped <= run.n_events
            assert run.n_engine_energy_gain <= run.n_events
            assert run.features.shape == (run.n_events, 9)
            assert run.impulses.shape == (run.n_events, 3)
            assert np.isfinite(run.states).all()
    return worst, rise, counts


def test_residual_never_adds_energy_across_an_event(engine, layout, starts, aggressive):
    guard = ContactGuard()
    worst, rise, counts = _worst_event_energy_gain(engine, layout, starts, aggressive.numpy(),
                                                   guard)
    assert worst <= guard.energy_tolerance_j + 1e-9
    # gravity-only flight (semi-implicit Euler) loses energy and contact only dissipates
    assert rise <= 1e-6
    assert counts["events"] > 0
    assert counts["energy"] > 0  # the policy is aggressive enough to need the limit
    assert counts["normal"] > 0
    # the correction drives no touching point into the table faster than the tolerance
    # allows within one step
    allowed = guard.penetration_tolerance_m / engine.dt_s
    assert np.isfinite(counts["pushed"]) and counts["pushed"] <= allowed + 1e-9


def test_every_contact_step_corrects_after_each_step_in_contact(engine, layout, starts,
                                                               aggressive):
    """Algorithm 1 as written: an event after every step that ends touching the table; a
    zero policy leaves the engine's motion alone, an aggressive one stays within the
    energy limit at every step."""
    every = ContactGuard(every_contact_step=True)
    fresh = ResidualPolicy().numpy()
    for s0, n in list(starts.values())[:4]:
        events_only = residual_rollout(engine, s0, n)
        run = residual_rollout(engine, s0, n, fresh, guard=every)
        np.testing.assert_array_equal(run.states, events_only.states)
        touching_steps = 0
        engine.reset(s0)
        for _ in range(n):
            engine.step()
            touching_steps += bool(engine.contact_points())
        assert run.n_events == touching_steps > events_only.n_events
    worst, rise, counts = _worst_event_energy_gain(engine, layout, starts, aggressive.numpy(),
                                                   every)
    assert worst <= every.energy_tolerance_j + 1e-9 and counts["events"] > 0


def test_the_energy_check_detects_a_disabled_limit(engine, layout, starts, aggressive):
    """Control: without the energy limit the same policy does add energy at events."""
    worst, rise, _ = _worst_event_energy_gain(engine, layout, starts, aggressive.numpy(),
                                              ContactGuard(energy_tolerance_j=1e3))
    assert worst > 1e-3 and rise > 1e-3


# --- work items -------------------------------------------------------------------------------
def test_interleave_spreads_each_group_in_proportion():
    a = [f"a{i}" for i in range(6)]
    b = ["b0", "b1"]
    merged = interleave(a, b)
    assert sorted(merged) == sorted(a + b)
    assert [x for x in merged if x in a] == a and [x for x in merged if x in b] == b
    halves = merged[:4], merged[4:]
    assert all(sum(x in b for x in half) == 1 for half in halves)
    assert interleave(a) == a


def test_trajectory_items_and_split_filter(engine, tosses):
    items = trajectory_items("cube", tosses, "validation", start=5)
    assert [item[0] for item in items] == list(range(5, 5 + len(tosses)))
    assert {item[1] for item in items} == {"validation"}
    assert [item[2] for item in items] == list(tosses)
    request = RolloutRequest(params=engine.params, policies=(None,), split="train")
    assert item_rollouts(engine, items[0], request) is None
    assert residual_errors(engine, items[0], request) is None


def test_residual_errors_are_zero_on_the_engine_s_own_motion(engine, starts):
    s0, n = starts["synthetic-2"]
    positions, quat = engine.rollout_poses(s0, n)
    item = (0, None, "own", s0, positions, quat)
    request = RolloutRequest(params=engine.params, policies=(None, None))
    table = residual_errors(engine, item, request)
    assert table.shape == (2, 1, 7)
    assert np.all(table[:, :, 0] == 0.0)
    assert np.all(table[:, :, 1] < 1e-12)
    assert np.all(table[:, :, 2] >= 1)  # the toss lands
    shifted = (0, None, "own", s0, positions + [0.0, 0.0, 0.01], quat)
    np.testing.assert_allclose(residual_errors(engine, shifted, request)[:, :, 0], 1e-4,
                               rtol=1e-9)


# --- predictions ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def few(tosses) -> dict:
    return dict(list(tosses.items())[:3])


def test_predictions_with_one_and_two_workers_are_identical(model, few):
    one, stats_one = predict_trajectories(model, few, samples=2, seed=3, n_workers=1)
    two, stats_two = predict_trajectories(model, few, samples=2, seed=3, n_workers=2)
    assert list(one) == list(two) == list(few)
    for traj_id in few:
        np.testing.assert_array_equal(one[traj_id].position, two[traj_id].position)
        np.testing.assert_array_equal(one[traj_id].quaternion, two[traj_id].quaternion)
    assert stats_one == stats_two
    assert stats_one["rollouts"] == 6 and stats_one["events"] > 0


def test_engine_only_predictions_equal_simulate_trajectories(model, few):
    predictions, stats = predict_trajectories(model, few, residual=False)
    simulated = simulate_trajectories("cube", few, PARAMS, substeps=1)
    assert predictions.n_samples == 1
    for traj_id in few:
        np.testing.assert_array_equal(predictions[traj_id].position[0],
                                      simulated[traj_id].positions_m)
        np.testing.assert_array_equal(predictions[traj_id].quaternion[0],
                                      simulated[traj_id].quat_wxyz)
    assert stats["energy_clamped"] == stats["normal_clamped"] == 0
    assert predictions.meta["residual"] is False


def test_predictions_replay_single_rollouts(model, few, engine, starts):
    mean, _ = predict_trajectories(model, few)
    sampled, stats = predict_trajectories(model, few, samples=3, seed=11)
    again, _ = predict_trajectories(model, few, samples=3, seed=11)
    other, _ = predict_trajectories(model, few, samples=3, seed=12)
    assert mean.n_samples == 1 and sampled.n_samples == 3
    assert stats["rollouts"] == 9
    fast = model.policy.numpy()
    for k, traj_id in enumerate(few):
        s0, n = starts[traj_id]
        assert sampled[traj_id].position.shape == (3, n + 1, 3)
        np.testing.assert_array_equal(mean[traj_id].position[0],
                                      residual_rollout(engine, s0, n, fast).positions_m)
        for s in range(3):
            direct = residual_rollout(engine, s0, n, fast, np.random.default_rng([11, k, s]))
            np.testing.assert_array_equal(sampled[traj_id].position[s], direct.positions_m)
            np.testing.assert_array_equal(sampled[traj_id].quaternion[s], direct.quat_wxyz)
        np.testing.assert_array_equal(again[traj_id].position, sampled[traj_id].position)
    assert any(not np.array_equal(other[t].position, sampled[t].position) for t in few)
    assert sampled.meta["samples"] == 3 and sampled.meta["seed"] == 11
    assert sampled.meta["substeps"] == 1 and sampled.meta["scene"] == "cube"


def test_predict_refuses_bad_requests(model, few, tosses):
    with pytest.raises(DataError, match="samples"):
        predict_trajectories(model, few, samples=-1)
    with pytest.raises(DataError, match="no recordings"):
        predict_trajectories(model, {})
    slow = {k: dataclasses.replace(t, times_s=t.times_s * 2) for k, t in few.items()}
    with pytest.raises(DataError, match="trained"):
        predict_trajectories(model, slow)


# --- model files ------------------------------------------------------------------------------
def test_model_save_load_round_trip(model, tmp_path, few):
    guard = ContactGuard(new_point_distance_m=0.03, min_approach_mps=0.01)
    original = dataclasses.replace(model, guard=guard, info={"note": "x", "n": 3})
    original.save(tmp_path / "m")
    assert {p.name for p in (tmp_path / "m").iterdir()} == {"model.json", "policy.json",
                                                            "policy.npz"}
    header = json.loads((tmp_path / "m" / "model.json").read_text())
    assert header["format"] == "residualsim.model/1" and header["scene"] == "cube"
    loaded = ResidualModel.load(tmp_path / "m")
    assert loaded.scene == "cube" and loaded.params == model.params
    assert loaded.dt_s == model.dt_s and loaded.substeps == 1
    assert loaded.guard == guard and loaded.info == {"note": "x", "n": 3}
    np.testing.assert_array_equal(loaded.policy.get_flat(), model.policy.get_flat())
    settings = loaded.settings()
    assert settings.dt_s == model.dt_s and settings.substeps == 1
    a, _ = predict_trajectories(original, few, samples=1, seed=2)
    b, _ = predict_trajectories(loaded, few, samples=1, seed=2)
    for traj_id in few:
        np.testing.assert_array_equal(a[traj_id].position, b[traj_id].position)


def test_model_load_errors_name_the_problem(model, tmp_path):
    with pytest.raises(DataError, match="model directory not found"):
        ResidualModel.load(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no model.json"):
        ResidualModel.load(tmp_path / "empty")
    model.save(tmp_path / "m")
    path = tmp_path / "m" / "model.json"
    header = json.loads(path.read_text())
    path.write_text(json.dumps({**header, "format": "residualsim.model/0"}))
    with pytest.raises(DataError, match="not a residualsim model") as info:
        ResidualModel.load(tmp_path / "m")
    assert str(path) in str(info.value)
    path.write_text(json.dumps({**header, "scene": "planar-ellipse"}))
    with pytest.raises(DataError, match="planar"):
        ResidualModel.load(tmp_path / "m")
    path.write_text(json.dumps({**header, "guard": {"bogus": 1}}))
    with pytest.raises(DataError, match="malformed"):
        ResidualModel.load(tmp_path / "m")


def test_zero_penetration_tolerance_never_pushes_a_touching_point_down(engine, layout, starts,
                                                                       aggressive):
    guard = ContactGuard(penetration_tolerance_m=0.0)
    _, _, counts = _worst_event_energy_gain(engine, layout, starts, aggressive.numpy(), guard)
    assert counts["normal"] > 0
    assert np.isfinite(counts["pushed"]) and counts["pushed"] <= 1e-9


def _recorded_rollout(engine, state, n_steps, policy):
    """A mean rollout of ``policy`` (a NumpyPolicy) that also returns the features it was
    asked about, in order."""
    seen = []

    class Recorder:
        spin, contact_mode = policy.spin, policy.contact_mode

        def mean(self, features):
            seen.append(np.array(features))
            return policy.mean(features)

    return residual_rollout(engine, state, n_steps, Recorder()), seen


def test_a_spin_policy_sees_the_contact_features_and_the_spin_at_each_event(engine, starts):
    """With ``spin``, each event's features end with r_g C ω of the pre-step state."""
    from residualsim.sim.contact import spin_features

    policy = ResidualPolicy.for_scene(False, spin=True, hidden=(4,), seed=1).numpy()
    s0, n = next(iter(starts.values()))
    run, seen = _recorded_rollout(engine, s0, n, policy)
    assert run.n_events >= 1 and run.features.shape == (run.n_events, 12)
    np.testing.assert_array_equal(np.array(seen), run.features)
    alone = residual_rollout(engine, s0, n)
    np.testing.assert_array_equal(run.features[0, :9], alone.features[0])
    # the first event's spin: the pre-contact angular velocity on the contact frame, × r_g
    spin = run.features[0, 9:]
    assert np.linalg.norm(spin) > 0
    radius = engine.scene.radius_of_gyration_m
    omega_norm = np.linalg.norm(spin) / radius
    assert np.isclose(omega_norm, np.linalg.norm(spin_features(np.eye(3), s0[10:13], 1.0)),
                      rtol=1e-6)  # a cube (isotropic inertia) keeps ω in free flight


def test_a_contact_mode_policy_reads_the_touching_count_after_the_spin(engine, starts):
    """With ``contact_mode``, each event's features end with the number of points touching
    after its step, which every rollout records (engine alone too)."""
    policy = ResidualPolicy.for_scene(False, spin=True, contact_mode=True, hidden=(4,),
                                      seed=1).numpy()
    assert policy.contact_mode and len(policy.feature_mean) == 13
    s0, n = next(iter(starts.values()))
    run, seen = _recorded_rollout(engine, s0, n, policy)
    assert run.n_events >= 1 and run.features.shape == (run.n_events, 13)
    np.testing.assert_array_equal(np.array(seen), run.features)
    np.testing.assert_array_equal(run.features[:, 12], run.touching_counts)
    assert set(run.touching_counts.tolist()) <= {1, 2, 3, 4} and run.touching_counts.min() >= 1
    alone = residual_rollout(engine, s0, n)
    assert alone.features.shape[1] == 9 and len(alone.touching_counts) == alone.n_events
    assert alone.touching_counts[0] == run.touching_counts[0]


def test_a_contact_mode_policy_round_trips_and_needs_its_width(tmp_path):
    policy = ResidualPolicy.for_scene(False, contact_mode=True, hidden=(4,), seed=3)
    assert policy.n_features == 10 and not policy.spin
    policy.set_flat(np.random.default_rng(0).normal(size=policy.n_parameters))
    policy.save(tmp_path)
    back = ResidualPolicy.load(tmp_path)
    assert back.contact_mode and back.n_features == 10
    x = np.random.default_rng(1).normal(size=(5, 10))
    np.testing.assert_allclose(back.numpy().mean(x), policy.numpy().mean(x))
    from residualsim.errors import ParameterError
    with pytest.raises(ParameterError, match="contact mode"):
        ResidualPolicy(n_features=9, n_outputs=3, contact_mode=True)


def test_a_bounce_inside_one_step_is_an_event_only_with_hidden_impact_detection():
    """A stiff, bouncy cube (the re-shipped calibration, 10 substeps at 148 Hz) whose corner
    hits and leaves the table inside one recorded step: no touching point after that step,
    so no event by default; with ``hidden_impact_mps`` the velocity jump makes it one, at the
    closest corner, with the engine-alone trajectory unchanged."""
    params = parse_params("lateral_friction=0.185,restitution=0.3119,spinning_friction=9.4e-05,"
                          "rolling_friction=0.00179,contact_stiffness=196485,"
                          "contact_damping=653")
    state = np.array([-0.000472, -0.001005, 0.2993, 0.999923, -0.007366, 0.006022, 0.007953,
                      0.474877, -0.023634, -1.03537, -0.192771, 2.378733, -0.228456])
    state[3:7] /= np.linalg.norm(state[3:7])
    settings = make_scene("cube").settings
    with Engine("cube", params, dataclasses.replace(settings, dt_s=1 / 148, substeps=10)) as e:
        plain = residual_rollout(e, state, 60, None, None, ContactGuard(), stop_after_events=1)
        seen = residual_rollout(e, state, 60, None, None,
                                ContactGuard(hidden_impact_mps=0.3), stop_after_events=1)
        full_plain = residual_rollout(e, state, 60, None, None, ContactGuard())
        full_seen = residual_rollout(e, state, 60, None, None,
                                     ContactGuard(hidden_impact_mps=0.3))
    # the corner reaches the table about 0.14 s in (step 21); by default the first event is
    # a later touch, with the option it is that impact
    assert len(seen.states) - 1 < 25 < len(plain.states) - 1
    assert seen.features.shape == (1, 9) and np.isfinite(seen.features).all()
    np.testing.assert_allclose(seen.frames[0, 0], [0.0, 0.0, 1.0], atol=1e-6)  # table normal
    assert seen.features[0, 6] < -0.02  # the corner was approaching before the step
    assert full_seen.n_events > full_plain.n_events
    np.testing.assert_array_equal(full_seen.states, full_plain.states)  # engine alone


@pytest.mark.parametrize("speed", [0.0, -0.3, float("nan"), float("inf")])
def test_a_bad_hidden_impact_threshold_is_refused(speed):
    from residualsim.errors import ParameterError

    with pytest.raises(ParameterError, match="hidden_impact_mps"):
        ContactGuard(hidden_impact_mps=speed)
