"""The GP residual on per-event optimal impulses (residualsim.baselines.event_gp): the best impulse in
the 3D friction cone, event segmentation on tosses made by the engine itself, the GP as a
residual policy of Algorithm 1, seeded determinism and errors. Everything is synthetic and
small (< 30 s in all)."""

from __future__ import annotations

import types

import numpy as np
import pytest
from scipy.optimize import minimize

from residualsim.sim.contact import contact_model, free_body_mass_matrix, free_body_point_jacobian
from residualsim.data import Trajectory
from residualsim.sim.engine import Engine
from residualsim.errors import DataError, ParameterError, SceneError
from residualsim.baselines.event_gp import EventGPResidual
from residualsim.baselines.recorded_events import (JUMP_THRESHOLD_MPS, best_impulse_3d, contact_runs,
                                         segment_events, table_offset, velocity_jumps)
from residualsim.sim.rollout import ContactGuard, recording_settings, residual_rollout
from residualsim.sim.synthesize import synthesize_tosses

#: Soft contact like the calibrated engine (restitution is inactive in Bullet's soft contact).
SOFT = "lateral_friction=0.3,restitution=0.2,contact_stiffness=1e5,contact_damping=500"
#: Rigid contact, and the "real world" of the perturbed-engine test: more restitution.
RIGID = "lateral_friction=0.3,restitution=0.2"
BOUNCY = "lateral_friction=0.3,restitution=0.6"
RIGID_SUBSTEPS = 4


# --- the best impulse --------------------------------------------------------------------------
def _problem(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(M (6, 6), J (3, 6)) of a body with an anisotropic inertia at a random orientation,
    touching the table z = 0 at a corner, with a random velocity (so t1 is random)."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    mass = free_body_mass_matrix(0.37, q @ np.diag([4e-4, 7e-4, 9e-4]) @ q.T)
    offset = rng.uniform(-0.06, 0.06, 3)
    model = contact_model(mass, free_body_point_jacobian(offset), rng.normal(size=6),
                          offset, np.array([0.0, 0.0, 1.0]))
    return mass, model.jacobian


def _error(mass: np.ndarray, jac: np.ndarray, change: np.ndarray, p: np.ndarray) -> float:
    """‖M⁻¹Jᵀp − Δ‖²_M."""
    d = np.linalg.solve(mass, jac.T @ p) - change
    return float(d @ mass @ d)


def _slsqp(mass: np.ndarray, jac: np.ndarray, change: np.ndarray, mu: float) -> np.ndarray:
    """Reference: SLSQP on the smooth form of the cone (p_n >= 0, μ²p_n² − |p_t|² >= 0)."""
    cons = [{"type": "ineq", "fun": lambda p: p[0]},
            {"type": "ineq", "fun": lambda p: mu**2 * p[0] ** 2 - p[1] ** 2 - p[2] ** 2}]
    best = None
    for start in ([0.1, 0.0, 0.0], [0.1, 0.5 * mu * 0.1, 0.0], [0.1, 0.0, -0.5 * mu * 0.1]):
        res = minimize(lambda p: _error(mass, jac, change, p), np.array(start), method="SLSQP",
                       constraints=cons, options={"ftol": 1e-15, "maxiter": 500})
        if best is None or res.fun < best.fun:
            best = res
    return best.x


@pytest.mark.parametrize("seed", range(6))
def test_best_impulse_is_exact_when_the_change_is_reachable(seed):
    mass, jac = _problem(seed)
    rng = np.random.default_rng(100 + seed)
    mu = 0.3
    p_n = rng.uniform(0.05, 0.5)
    tangent = rng.normal(size=2)
    tangent *= rng.uniform(0.0, 0.99) * mu * p_n / np.linalg.norm(tangent)
    inside = np.array([p_n, *tangent])
    change = np.linalg.solve(mass, jac.T @ inside)
    np.testing.assert_allclose(best_impulse_3d(mass, jac, change, mu), inside, rtol=0,
                               atol=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_best_impulse_lies_on_the_cone_edge_when_the_change_is_not_reachable(seed):
    mass, jac = _problem(seed)
    rng = np.random.default_rng(200 + seed)
    mu = 0.25
    p_n = rng.uniform(0.05, 0.5)
    tangent = rng.normal(size=2)
    tangent *= 2.5 * mu * p_n / np.linalg.norm(tangent)  # outside the cone
    change = np.linalg.solve(mass, jac.T @ np.array([p_n, *tangent]))
    change += rng.normal(size=6) * 0.05  # and not in the range of M⁻¹Jᵀ either
    best = best_impulse_3d(mass, jac, change, mu)
    assert best[0] > 0
    assert np.hypot(best[1], best[2]) == pytest.approx(mu * best[0], rel=1e-9)
    # no better than the SLSQP reference can find ...
    reference = _slsqp(mass, jac, change, mu)
    scale = _error(mass, jac, change, np.zeros(3))
    assert _error(mass, jac, change, best) <= _error(mass, jac, change, reference) + 1e-10 * scale
    np.testing.assert_allclose(best, reference, atol=1e-5 * np.abs(best).max())
    # ... nor than any of 5000 random points of the cone
    n = rng.uniform(0, 2 * best[0] + 0.1, 5000)
    angle, radius = rng.uniform(0, 2 * np.pi, 5000), rng.uniform(0, 1, 5000) * mu * n
    trials = np.column_stack([n, radius * np.cos(angle), radius * np.sin(angle)])
    values = [_error(mass, jac, change, p) for p in trials]
    assert _error(mass, jac, change, best) <= min(values) + 1e-15


def test_best_impulse_apex_and_frictionless():
    mass, jac = _problem(0)
    pulling = np.linalg.solve(mass, jac.T @ np.array([-0.2, 0.01, 0.0]))  # table would pull
    np.testing.assert_array_equal(best_impulse_3d(mass, jac, pulling, 0.3), np.zeros(3))
    change = np.linalg.solve(mass, jac.T @ np.array([0.2, 0.05, -0.03]))
    frictionless = best_impulse_3d(mass, jac, change, 0.0)
    assert frictionless[1] == frictionless[2] == 0.0 and frictionless[0] > 0
    row = jac[0]  # 1-D least squares along the normal
    expected = (row @ change) / (row @ np.linalg.solve(mass, row))
    assert frictionless[0] == pytest.approx(expected, rel=1e-9)


def test_best_impulse_rejects_bad_input():
    mass, jac = _problem(0)
    with pytest.raises(ParameterError, match="friction"):
        best_impulse_3d(mass, jac, np.zeros(6), -0.1)
    with pytest.raises(ParameterError, match="friction"):
        best_impulse_3d(mass, jac, np.zeros(6), float("nan"))
    with pytest.raises(ParameterError, match="finite"):
        best_impulse_3d(mass, jac, np.full(6, np.nan), 0.3)
    with pytest.raises(ParameterError):
        best_impulse_3d(mass, jac[:2], np.zeros(6), 0.3)


# --- segmentation on tosses made by the engine itself -------------------------------------------
@pytest.fixture(scope="module")
def soft_tosses() -> dict:
    return synthesize_tosses(SOFT, n_tosses=6, n_samples=100, rng=1)


@pytest.fixture(scope="module")
def soft_engine(soft_tosses):
    with Engine("cube", SOFT, recording_settings("cube", soft_tosses)) as engine:
        yield engine


@pytest.fixture(scope="module")
def soft_events(soft_tosses, soft_engine) -> list:
    counts: dict = {}
    events = [e for t in soft_tosses.values()
              for e in segment_events(t, soft_engine, counts=counts)]
    assert counts["events"] == len(events) >= 12
    assert counts["shifted"] == 0  # the engine's own cube rests on its table
    return events


def _flight(n: int = 60, traj_id: str = "flight") -> Trajectory:
    """A spinning cube in free flight (no contact), exact velocities."""
    t = np.arange(n) / 148.0
    omega = np.array([3.0, -2.0, 5.0])  # a cube's world angular velocity stays constant
    angle = np.linalg.norm(omega) * t
    axis = omega / np.linalg.norm(omega)
    quat = np.column_stack([np.cos(angle / 2), np.sin(angle / 2)[:, None] * axis])
    velocity = np.array([0.4, -0.2, 1.0]) + np.outer(t, [0.0, 0.0, -9.81])
    position = np.array([0.0, 0.0, 0.5]) + np.outer(t, [0.4, -0.2, 1.0]) + \
        0.5 * np.outer(t**2, [0.0, 0.0, -9.81])
    return Trajectory(traj_id, t, position, quat, velocity, np.tile(omega, (n, 1)),
                      source="test")


def test_free_flight_has_no_contact_runs():
    flight = _flight()
    assert velocity_jumps(flight).max() < 1e-9
    assert contact_runs(flight) == []


def test_contact_runs_cover_the_engine_s_impacts(soft_tosses, soft_engine):
    for traj in soft_tosses.values():
        runs = contact_runs(traj)
        jumps = velocity_jumps(traj)
        assert runs and all(1 <= s <= e < traj.n_samples - 1 for s, e in runs)
        assert all(jumps[s - 1:e].max() > JUMP_THRESHOLD_MPS for s, e in runs)
        assert all(a[1] < b[0] for a, b in zip(runs, runs[1:]))
        # the engine's first contact (its own rollout) lies in the first run
        first = soft_engine.rollout(traj.state_at(0), traj.n_samples - 1).events[0]
        assert runs[0][0] <= first.start_index <= runs[0][1]


def test_event_features_are_those_algorithm_1_computes(soft_events, soft_engine):
    """A rollout from the event's start state, stopped at its event step, fires the event
    there with bit-identical features: the GP is queried where it was trained."""
    for event in soft_events:
        run = residual_rollout(soft_engine, event.start_state,
                               event.event_index - event.start_index)
        assert run.n_events >= 1
        np.testing.assert_array_equal(run.features[-1], event.features)
        assert event.start_index <= event.pre_index < event.event_index <= event.post_index


def test_engine_made_tosses_have_no_residual(soft_events):
    """Recording = engine: p* = p_e. The engine rerun from a recorded state differs from
    the recording only by Bullet's contact cache, which reset() clears (its warm start):
    at most 2e-3 m/s in Δq̇ here, i.e. about 1e-3 N s on a 0.37 kg cube; most events
    agree to rounding."""
    residuals = np.array([np.linalg.norm(e.residual) for e in soft_events])
    impulses = np.array([np.linalg.norm(e.engine_impulse) for e in soft_events])
    mismatch = np.array([np.abs(e.recorded_change - e.engine_change).max()
                         for e in soft_events])
    assert mismatch.max() < 5e-3
    assert residuals.max() < 2e-3
    assert np.median(residuals) < 1e-9
    assert np.median(impulses) > 0.02  # real impacts, not empty windows
    for e in soft_events:  # both impulses lie in the friction cone
        for p in (e.best_impulse, e.engine_impulse):
            assert p[0] >= 0 and np.hypot(p[1], p[2]) <= 0.3 * p[0] + 1e-12


def test_a_recording_below_the_table_is_moved_up(soft_tosses, soft_engine):
    traj = next(iter(soft_tosses.values()))
    assert abs(table_offset(traj, soft_engine)) < 2e-4
    low = Trajectory(traj.traj_id, traj.times_s, traj.positions_m - [0.0, 0.0, 0.002],
                     traj.quat_wxyz, traj.linear_velocity_mps,
                     traj.angular_velocity_world_radps, source="test")
    assert table_offset(low, soft_engine) == pytest.approx(table_offset(traj, soft_engine)
                                                           - 0.002, abs=1e-9)
    counts: dict = {}
    moved = segment_events(low, soft_engine, counts=counts)
    original = segment_events(traj, soft_engine)
    assert counts["shifted"] == 1
    assert len(moved) == len(original)
    for a, b in zip(moved, original):  # up to the original's own resting depth (0.1 mm)
        np.testing.assert_allclose(a.start_state[:3], b.start_state[:3], atol=2e-4)
        np.testing.assert_allclose(a.best_impulse, b.best_impulse, atol=1e-3)


# --- the GP as a residual policy ----------------------------------------------------------------
@pytest.fixture(scope="module")
def bouncy() -> tuple[dict, dict]:
    """The "real world": rigid contact with restitution 0.6; the engine has 0.2."""
    train = synthesize_tosses(BOUNCY, n_tosses=10, n_samples=100, rng=1,
                              substeps=RIGID_SUBSTEPS)
    held_out = synthesize_tosses(BOUNCY, n_tosses=4, n_samples=100, rng=2,
                                 substeps=RIGID_SUBSTEPS)
    return train, held_out


@pytest.fixture(scope="module")
def fitted(bouncy) -> EventGPResidual:
    return EventGPResidual.fit(bouncy[0], params=RIGID, substeps=RIGID_SUBSTEPS, seed=0)


def _rmse(engine, trajectory, policy, rng=None) -> float:
    run = residual_rollout(engine, trajectory.state_at(0), trajectory.n_samples - 1, policy,
                           rng, ContactGuard())
    return float(np.sqrt(np.mean(np.sum((run.positions_m - trajectory.positions_m) ** 2, 1))))


def test_gp_residual_beats_the_engine_on_held_out_tosses(bouncy, fitted):
    _, held_out = bouncy
    info = fitted.info
    assert info["n_events"] == len(fitted.events) >= 30
    assert info["n_used"] == info["n_events"]  # below the cap: every event
    # the engine under-bounces: the residual's normal component is positive on average
    assert np.mean([e.residual[0] for e in fitted.events]) > 0.01
    with Engine("cube", RIGID, recording_settings("cube", held_out, RIGID_SUBSTEPS)) as engine:
        alone = np.mean([_rmse(engine, t, None) for t in held_out.values()])
        corrected = np.mean([_rmse(engine, t, fitted) for t in held_out.values()])
    assert corrected < 0.85 * alone, (corrected, alone)


def test_policy_interface_and_sampling(bouncy, fitted):
    x = fitted.events[0].features
    mean, std = fitted.predict(np.stack([x, x]))
    assert mean.shape == std.shape == (2, 3) and (std > 0).all()
    np.testing.assert_allclose(fitted.mean(x), mean[0], rtol=1e-12, atol=1e-15)
    a, b = np.random.default_rng(5), np.random.default_rng(5)
    draw = fitted.sample(x, a)
    np.testing.assert_allclose(draw, mean[0] + std[0] * b.standard_normal(3), rtol=1e-12)
    assert a.random() == b.random()  # exactly three normals consumed
    traj = next(iter(bouncy[1].values()))
    with Engine("cube", RIGID, recording_settings("cube", bouncy[1], RIGID_SUBSTEPS)) as engine:
        one = residual_rollout(engine, traj.state_at(0), 60, fitted, np.random.default_rng(3))
        two = residual_rollout(engine, traj.state_at(0), 60, fitted, np.random.default_rng(3))
    np.testing.assert_array_equal(one.states, two.states)
    assert np.abs(one.impulses).max() > 0
    with pytest.raises(ParameterError, match="contact features"):
        fitted.mean(np.zeros(5))


def test_seeded_fits_are_deterministic(bouncy):
    train = dict(list(bouncy[0].items())[:6])
    options = dict(params=RIGID, substeps=RIGID_SUBSTEPS, max_events=25, hyper_events=20,
                   restarts=1)
    first = EventGPResidual.fit(train, seed=3, **options)
    second = EventGPResidual.fit(train, seed=3, **options)
    other = EventGPResidual.fit(train, seed=4, **options)
    assert first.info["n_events"] > 25 and first.info["n_used"] == 25  # the cap applies
    x = np.array([e.features for e in first.events])
    np.testing.assert_array_equal(first.predict(x)[0], second.predict(x)[0])
    assert first.info["kernel"] == second.info["kernel"]
    assert not np.allclose(first.predict(x)[0], other.predict(x)[0])


# --- errors -------------------------------------------------------------------------------------
def test_bad_trajectories_are_named(soft_engine):
    flight = _flight(traj_id="toss-17")
    short = Trajectory("toss-17", flight.times_s[:2], flight.positions_m[:2],
                       flight.quat_wxyz[:2], flight.linear_velocity_mps[:2],
                       flight.angular_velocity_world_radps[:2], source="test")
    with pytest.raises(DataError, match="toss-17.*2 samples"):
        contact_runs(short)
    broken = types.SimpleNamespace(**{k: getattr(flight, k) for k in (
        "traj_id", "times_s", "positions_m", "quat_wxyz", "angular_velocity_world_radps")},
        linear_velocity_mps=flight.linear_velocity_mps.copy(), planar=False, source="")
    broken.linear_velocity_mps[7, 1] = np.nan
    with pytest.raises(DataError, match="toss-17.*NaN.*sample 7"):
        segment_events(broken, soft_engine)
    with pytest.raises(DataError, match="toss-17"):
        EventGPResidual.fit({"toss-17": broken}, params=SOFT, substeps=10)
    planar = Trajectory("p", flight.times_s, flight.positions_m, flight.quat_wxyz,
                        flight.linear_velocity_mps, flight.angular_velocity_world_radps,
                        planar=True)
    with pytest.raises(SceneError, match="planar"):
        contact_runs(planar)
    slow = Trajectory("slow", flight.times_s * 2, flight.positions_m, flight.quat_wxyz,
                      flight.linear_velocity_mps, flight.angular_velocity_world_radps)
    with pytest.raises(DataError, match="slow.*Hz"):
        segment_events(slow, soft_engine)


def test_fit_errors(soft_tosses):
    with pytest.raises(DataError, match="no trajectories"):
        EventGPResidual.fit({}, params=SOFT, substeps=10)
    with pytest.raises(DataError, match="no contact events"):
        EventGPResidual.fit({"a": _flight(traj_id="a"), "b": _flight(traj_id="b")},
                            params=SOFT, substeps=10)
    with pytest.raises(ParameterError, match="friction"):
        EventGPResidual.fit(soft_tosses, params=SOFT, substeps=10, friction=-0.2)
    with pytest.raises(ParameterError):
        EventGPResidual.fit(soft_tosses, params="lateral_friction=-0.2", substeps=10)
    with pytest.raises(ParameterError, match="threshold"):
        contact_runs(next(iter(soft_tosses.values())), threshold_mps=0.0)
    with pytest.raises(ParameterError, match="fit the event GP"):
        EventGPResidual().mean(np.zeros(9))
