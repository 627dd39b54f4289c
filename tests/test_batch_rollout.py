"""Batched particle rollouts (residualsim.sim.batch) against the lone path, on the shipped
5-substep cube model.

The claim under test: a particle stepped among other copies of the cube in one PyBullet
world meets the same first event as when it is rolled out alone
(``residual_rollout(..., stop_after_events=1)``): the same status, sample count, engine
steps, penetration and pre-event state bit for bit, the same post-event pose bit for bit,
and the post-event velocity within 1e-9 m/s and rad/s: only the event's correction is
computed differently (numpy over all events, where the lone corrector uses BLAS
matrix-vector products), which changes its rounding (measured up to 4e-14). And that a
batch's particles do not depend on which other particles share the world or the call.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from residualsim.belief.mixture import (PENETRATION_TOLERANCE_M, GaussianMixtureBelief,
                                        event_outcome, event_outcomes)
from residualsim.belief.propagation import propagate_belief
from residualsim.belief.simulator import INITIAL_STD, toss_state
from residualsim.errors import ParameterError
from residualsim.residual.model import ResidualModel
from residualsim.sim import batch
from residualsim.sim.engine import Engine
from residualsim.sim.rollout import ContactGuard, residual_rollout
from residualsim.sim.scenes import make_scene

MODEL_DIR = Path(__file__).resolve().parents[1] / "data" / "pretrained" / \
    "cube-contactnets-5substep"
SIDE_M = 0.1048
VELOCITY_TOLERANCE = 1e-9  # m/s and rad/s: rounding of the event correction, <= 4e-14 seen
MAX_STEPS = 150


@pytest.fixture(scope="module")
def model() -> ResidualModel:
    return ResidualModel.load(MODEL_DIR)


@pytest.fixture(scope="module")
def engine(model):
    with Engine(model.scene, model.params, model.settings()) as engine:
        yield engine


def _lowest_corner(quat_wxyz: np.ndarray) -> float:
    """Height of the cube's lowest corner below its centre, m."""
    corners = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)])
    rotation = Rotation.from_quat(np.roll(quat_wxyz, -1)).as_matrix()
    return float(-(corners * SIDE_M / 2 @ rotation.T)[:, 2].min())


def _particles(seed: int = 0) -> np.ndarray:
    """40 start states: 28 tumbling tosses (corners, edges and faces come down first), 8
    just above the table (below the 3 cm handover: the engine steps from the start), 4 at
    rest face down (no event: the rest check ends them)."""
    rng = np.random.default_rng(seed)
    quats = Rotation.random(36, random_state=seed).as_quat()[:, [3, 0, 1, 2]]
    states = []
    for k, quat in enumerate(quats):
        height = rng.uniform(0.15, 0.35) if k < 28 else _lowest_corner(quat) + 0.01
        velocity = [*rng.normal(0.0, 0.5, 2), rng.uniform(-1.5, -0.5) if k < 28 else -0.3]
        states.append(np.concatenate([[*rng.uniform(-0.1, 0.1, 2), height], quat, velocity,
                                      rng.normal(0.0, 5.0, 3)]))
    for k in range(4):
        states.append(np.concatenate([[0.05 * k, 0.0, SIDE_M / 2], [1.0, 0.0, 0.0, 0.0],
                                      np.zeros(6)]))
    return np.array(states)


def _lone_runs(engine, model, states, guard, seed: int = 7) -> list:
    policy = model.sampling_policy()
    return [residual_rollout(engine, state, MAX_STEPS, policy, np.random.default_rng([seed, i]),
                             guard, stop_after_events=1) for i, state in enumerate(states)]


def test_a_batch_gives_each_particle_its_lone_run(engine, model):
    states = _particles()
    lone = _lone_runs(engine, model, states, model.guard)
    runs = batch.first_events(engine, states, MAX_STEPS, model.sampling_policy(),
                              [[7, i] for i in range(len(states))], model.guard, batch_size=7)
    modes = set()
    for i, run in enumerate(lone):
        assert runs.n_events[i] == run.n_events, i
        assert runs.samples[i] == len(run.states) - 1, i
        assert runs.engine_steps[i] == run.engine_steps, i
        assert runs.max_penetration_m[i] == run.max_penetration_m, i
        assert runs.engine_gain[i] == bool(run.n_engine_energy_gain), i
        if run.n_events:
            modes.update(run.touching_counts.tolist())
            np.testing.assert_array_equal(runs.pre_states[i], run.states[-2])
            np.testing.assert_array_equal(runs.post_states[i, :7], run.states[-1, :7])
            np.testing.assert_allclose(runs.post_states[i, 7:], run.states[-1, 7:], rtol=0,
                                       atol=VELOCITY_TOLERANCE)
    assert runs.n_events.sum() >= 30 and runs.n_events[-4:].sum() == 0  # the resting ones
    assert {1, 2} <= modes  # first events on a corner and on an edge
    assert (runs.engine_steps[:28] > 0).all() and np.isnan(runs.engine_starts).sum() == 0
    # the residual acted: the engine alone ends elsewhere
    alone = batch.first_events(engine, states, MAX_STEPS, None, None, model.guard, 7)
    assert np.abs(alone.post_states[:, 7:] - runs.post_states[:, 7:]).max() > 1e-3


def test_rejections_agree_with_the_lone_path(engine, model):
    """Penetration and energy rejections, judged as the belief step judges them: a tighter
    depth and a guard that wants every event to lose 0.1 J make both kinds common."""
    states = _particles(seed=1)
    guard = dataclasses.replace(model.guard, energy_tolerance_j=-0.1)
    depth = 0.0008
    lone = [event_outcome(engine, run, guard, depth)[0]
            for run in _lone_runs(engine, model, states, guard)]
    runs = batch.first_events(engine, states, MAX_STEPS, model.sampling_policy(),
                              [[7, i] for i in range(len(states))], guard, batch_size=5)
    assert event_outcomes(engine.scene, runs, guard, depth) == lone
    assert {"ok", "penetration", "energy", "no_event"} <= set(lone)


def test_particles_do_not_depend_on_their_company(model):
    """The same seed gives bit-identical steps for any batch size and number of workers;
    one particle at a time (batch 1, the lone path) gives the same statuses and engine
    steps, and particles within rounding of the event correction."""
    initial = GaussianMixtureBelief.gaussian(
        toss_state([0.0, 0.0, 0.3], [0.9, 0.3, 0.2, 0.1], velocity_mps=[0.5, 0.0, -1.0],
                   omega_radps=[2.0, 3.0, 0.0]), INITIAL_STD * 4, planar=False)
    runs = {(workers, size): propagate_belief(model, initial, n_events=2, n_particles=24,
                                              seed=3, n_workers=workers, batch_size=size)
            for workers, size in ((1, 5), (2, None), (1, 1))}
    first = runs[1, 5]
    for step, other in zip(first, runs[2, None]):
        assert step.summary() == other.summary()
        assert step.engine_steps == other.engine_steps > 0
        np.testing.assert_array_equal(step.particles, other.particles)
        np.testing.assert_array_equal(step.belief.means, other.belief.means)
    lone = runs[1, 1]
    assert [s.summary() for s in first] == [s.summary() for s in lone]
    assert [s.engine_steps for s in first] == [s.engine_steps for s in lone]
    np.testing.assert_allclose(first[0].particles, lone[0].particles, rtol=0,
                               atol=VELOCITY_TOLERANCE)
    # the second step draws from beliefs refitted to particles that differ by rounding
    np.testing.assert_allclose(first[1].particles, lone[1].particles, rtol=0, atol=1e-6)


def test_unsupported_scenes_and_policies_take_the_lone_path(engine, model):
    guard = ContactGuard(hidden_impact_mps=0.5)
    assert "hidden-impact" in batch.batch_unsupported(engine.scene, None, guard)
    assert "single free body" in batch.batch_unsupported(make_scene("planar-ellipse"), None,
                                                         ContactGuard())

    class Sustained:
        coefficients = object()

    assert "sustained" in batch.batch_unsupported(engine.scene, Sustained(), ContactGuard())
    with pytest.raises(ValueError, match="hidden-impact"):
        batch.first_events(engine, _particles()[:2], 10, None, None, guard)
    hidden = dataclasses.replace(model, guard=guard)
    initial = GaussianMixtureBelief.gaussian(_particles()[0], INITIAL_STD, planar=False)
    a, b = (propagate_belief(hidden, initial, n_events=1, n_particles=6, seed=0,
                             batch_size=size)[0] for size in (None, 1))
    np.testing.assert_array_equal(a.particles, b.particles)  # both lone: bit for bit


@pytest.mark.parametrize("size", [0, -1, 2.5, True, "4"])
def test_batch_size_must_be_a_positive_integer(model, size):
    initial = GaussianMixtureBelief.gaussian(_particles()[0], INITIAL_STD, planar=False)
    with pytest.raises(ParameterError, match="batch_size"):
        propagate_belief(model, initial, n_events=1, n_particles=4, batch_size=size)


def test_a_particle_step_reports_the_engine_work(model):
    initial = GaussianMixtureBelief.gaussian(_particles()[0], INITIAL_STD, planar=False)
    step = propagate_belief(model, initial, n_events=1, n_particles=8, seed=0)[0]
    starts, steps = step.engine_runs
    assert starts.shape == (8, 13) and steps.shape == (8,)
    assert step.engine_steps == steps.sum() > 0 and step.rollout_s > 0
    assert (starts[steps > 0, 2] < 0.2).all()  # stepping begins near the table: it flew there
    assert PENETRATION_TOLERANCE_M > 0


def test_seeded_draws_are_default_rngs_draws():
    from residualsim.sim.batch_events import seeded_draws

    seeds = [[2 ** 62 + 5, i] for i in range(300)] + [[0, 0], [2 ** 40, 7], [123, 2 ** 33],
                                                     [1, 2, 3, 4, 5, 6], [9], 11]
    u, z = seeded_draws(seeds, 3)
    for i, seed in enumerate(seeds):
        rng = np.random.default_rng(seed)
        assert u[i] == rng.random()
        np.testing.assert_array_equal(z[i], rng.standard_normal(3))


def _synthetic_toss(model) -> dict:
    """{"synthetic": a 40-sample recording holding one test particle's state}: a toss for
    ``bench beliefs`` to start its beliefs from."""
    from residualsim.data.trajectory import Trajectory

    state, n = _particles()[0], 40
    return {"synthetic": Trajectory(
        "synthetic", np.arange(n) * model.dt_s, np.tile(state[:3], (n, 1)),
        np.tile(state[3:7], (n, 1)), np.tile(state[7:10], (n, 1)), np.tile(state[10:], (n, 1)),
        source="test")}


def test_bench_reports_engine_steps_and_the_bare_loop_per_method(model):
    """``bench beliefs --methods particles --batch-sizes 1,auto`` on one synthetic toss: each
    row counts the same engine steps (same particles), replays them in a bare loop, and
    gives finite overheads; the formatted report names both rows."""
    from residualsim.experiments.bench_beliefs import bench_beliefs, format_beliefs_report

    report = bench_beliefs(model, _synthetic_toss(model), particles=6, n_workers=1, n_events=2,
                           methods=("particles",), reference_particles=8, distance_samples=50,
                           batch_sizes=(1, None))
    lone, batched = report["methods"]["particles[batch=1]"], report["methods"]["particles"]
    assert lone["engine_steps"] == batched["engine_steps"] > 0
    assert lone["distance_to_reference"] == pytest.approx(batched["distance_to_reference"])
    for row in (lone, batched):
        assert row["bare_s"] > 0 and np.isfinite(row["overhead"]) and row["overhead"] > 0
        assert 0 < row["rollout_s"] <= row["wall_s"]
    text = format_beliefs_report(report)
    assert "particles[batch=1]" in text and "engine steps" in text and "overhead" in text


def test_bench_repeats_time_the_same_particles_and_report_the_median(model):
    """``--repeats 3``: each method's steps and bare loop timed three times in turn (the same
    particles: the same engine steps each time); the overhead is the median of the three
    repeats' overheads, each repeat's listed and their range printed."""
    from residualsim.experiments.bench_beliefs import bench_beliefs, format_beliefs_report

    report = bench_beliefs(model, _synthetic_toss(model), particles=6, n_workers=1, n_events=2,
                           methods=("particles",), reference_particles=8, distance_samples=50,
                           repeats=3)
    row = report["methods"]["particles"]
    [toss_row] = row["per_toss"]
    assert len(toss_row["timings"]) == 3 and len(row["overheads"]) == 3
    walls, bares = ([t[i] for t in toss_row["timings"]] for i in (0, 1))
    assert row["overheads"] == pytest.approx([w / b for w, b in zip(walls, bares)])
    assert row["overhead"] == pytest.approx(float(np.median(row["overheads"])))
    assert row["wall_s"] == pytest.approx(float(np.median(walls)))
    assert "median of 3 repeats" in format_beliefs_report(report)


def test_bench_runs_each_method_once_before_the_clocks():
    """Every (method, batch size, draws) row runs one contact untimed first, so that no row
    pays for what its first call imports (the conjugate step's scipy.stats)."""
    from residualsim.experiments.bench_beliefs import WARM_PARTICLES, _warm_methods

    calls = []

    class Recorder:
        def beliefs(self, belief, **options):
            calls.append((belief, options))

    runs = [("particles", None, None, None), ("particles", 1, None, None),
            ("conjugate", None, 410, None)]
    _warm_methods(Recorder(), "belief", runs, seed=3)
    assert [(c[1]["method"], c[1]["batch_size"], c[1].get("draws")) for c in calls] == \
        [("particles", None, None), ("particles", 1, None), ("conjugate", None, WARM_PARTICLES)]
    assert all(c[0] == "belief" and c[1]["n_events"] == 1 and c[1]["seed"] == 3 and
               c[1]["n_particles"] == WARM_PARTICLES for c in calls)


def test_bench_loops_switch_the_workers_per_row(monkeypatch):
    """--loops compiled,python: each row sets RESIDUALSIM_COMPILED in the simulator's workers
    (and this process) before it runs; rows are named by their loop; --loops without
    --methods and unknown or repeated loops are refused."""
    import argparse

    from residualsim.cli.argtypes import loop_names as _loops
    from residualsim.experiments import bench_beliefs as bench

    monkeypatch.setenv("RESIDUALSIM_COMPILED", "0")
    seen = []

    class Workers:
        def map(self, function, payload):
            seen.append((function, payload))

    class Recorder:
        _workers = Workers()

        def beliefs(self, belief, **options):
            seen.append(("beliefs", __import__("os").environ["RESIDUALSIM_COMPILED"]))

    bench._warm_methods(Recorder(), "belief", [("particles", None, None, "compiled"),
                                               ("particles", None, None, "python")], seed=0)
    assert seen == [(bench._set_loop, "1"), ("beliefs", "1"), (bench._set_loop, "0"),
                    ("beliefs", "0")]
    assert bench.method_label("particles", None, None, "compiled") == \
        "particles[loop=compiled]"
    assert _loops("compiled,python") == ("compiled", "python")
    for text in ("compiled,compiled", "c", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            _loops(text)
    with pytest.raises(ParameterError, match="--loops"):
        bench.check_methods((), loops=("compiled",))
