"""The planner API (residualsim.belief.simulator): toss states, batched stochastic rollouts and
beliefs of the shipped calibrated cube model. Synthetic tosses only, few samples."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from residualsim.belief.propagation import GaussianMixtureBelief
from residualsim.errors import ParameterError
from residualsim.residual.model import ResidualModel
from residualsim.belief.simulator import INITIAL_STD, StochasticSimulator, toss_state

MODEL_DIR = Path(__file__).resolve().parents[1] / "data" / "pretrained" / "cube-contactnets"
DT_S = 1.0 / 148.0
SAMPLES = 8
#: Centre height of the cube (side 0.1048 m) resting on a face.
REST_HEIGHT_M = 0.1048 / 2


def _toss() -> np.ndarray:
    """Released 0.3 m up, moving down and sideways, spinning: it lands at about 0.14 s."""
    return toss_state([0.0, 0.0, 0.3], [1.0, 0.0, 0.0, 0.0], velocity_mps=[0.5, 0.0, -1.0],
                      omega_radps=[0.0, 3.0, 0.0])


@pytest.fixture(scope="module")
def model() -> ResidualModel:
    return ResidualModel.load(MODEL_DIR)


@pytest.fixture(scope="module")
def sim(model):
    with StochasticSimulator(model) as simulator:
        yield simulator


@pytest.fixture(scope="module")
def out(sim):
    return sim.rollout(_toss(), horizon_s=1.0, samples=SAMPLES, seed=0)


@pytest.fixture(scope="module")
def mean_out(sim):
    return sim.rollout(_toss(), horizon_s=1.0, samples=SAMPLES, seed=0, mean=True)


# --- toss_state -----------------------------------------------------------------------------------
def test_toss_state_normalises_the_quaternion():
    state = toss_state([1, 2, 3], [2.0, 0.0, 0.0, 2.0], [4, 5, 6], [7, 8, 9])
    assert state.shape == (13,)
    np.testing.assert_array_equal(state[0:3], [1, 2, 3])
    np.testing.assert_allclose(state[3:7], [2 ** -0.5, 0, 0, 2 ** -0.5], atol=1e-15)
    np.testing.assert_array_equal(state[7:13], [4, 5, 6, 7, 8, 9])


@pytest.mark.parametrize("args", [
    ([0, 0], [1, 0, 0, 0], [0, 0, 0], [0, 0, 0]),
    ([0, 0, 0], [1, 0, 0], [0, 0, 0], [0, 0, 0]),
    ([0, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0]),
    ([0, 0, 0], [1, 0, 0, 0], [0, 0, 0], [0, 0]),
    ([0, 0, np.nan], [1, 0, 0, 0], [0, 0, 0], [0, 0, 0]),
    ([0, 0, 0], [1, 0, np.nan, 0], [0, 0, 0], [0, 0, 0]),
    ([0, 0, 0], [1, 0, 0, 0], [0, np.inf, 0], [0, 0, 0]),
    ([0, 0, 0], [0, 0, 0, 0], [0, 0, 0], [0, 0, 0]),
])
def test_toss_state_rejects_bad_input(args):
    with pytest.raises(ParameterError):
        toss_state(*args)


# --- rollout ------------------------------------------------------------------------------------
def test_rollout_shapes_and_start(sim, out):
    t = int(round(1.0 / DT_S)) + 1
    assert sim.dt_s == pytest.approx(DT_S, rel=1e-9)
    assert out.states.shape == (SAMPLES, t, 13)
    assert out.positions_m.shape == (SAMPLES, t, 3)
    assert out.quat_wxyz.shape == (SAMPLES, t, 4)
    assert out.times_s.shape == (t,)
    np.testing.assert_allclose(out.times_s, np.arange(t) * DT_S, rtol=1e-9)
    assert out.initial_states.shape == (SAMPLES, 13)
    assert out.n_events.shape == out.max_penetration_m.shape == (SAMPLES,)
    state = _toss()
    np.testing.assert_allclose(out.positions_m[:, 0], np.tile(state[0:3], (SAMPLES, 1)),
                               atol=1e-12)
    np.testing.assert_allclose(out.states[:, 0, 7:13], np.tile(state[7:13], (SAMPLES, 1)),
                               atol=1e-12)
    np.testing.assert_array_equal(out.positions_m, out.states[..., 0:3])
    np.testing.assert_array_equal(out.final_positions_m, out.positions_m[:, -1])
    assert (out.n_events >= 1).all()


def test_samples_differ(out):
    finals = out.final_positions_m
    spread = np.linalg.norm(finals - finals.mean(axis=0), axis=1)
    assert len({tuple(row) for row in finals}) > SAMPLES // 2
    assert spread.max() > 1e-3
    # identical until the first landing (free flight is deterministic)
    np.testing.assert_array_equal(out.states[:, :15], np.repeat(out.states[:1, :15], SAMPLES, 0))


def test_rollouts_are_seeded(sim, out):
    again = sim.rollout(_toss(), horizon_s=1.0, samples=SAMPLES, seed=0)
    np.testing.assert_array_equal(again.states, out.states)
    np.testing.assert_array_equal(again.max_penetration_m, out.max_penetration_m)
    other = sim.rollout(_toss(), horizon_s=1.0, samples=SAMPLES, seed=1)
    assert not np.allclose(other.states, out.states)


def test_mean_rollouts_are_identical(mean_out, out):
    np.testing.assert_array_equal(mean_out.states,
                                  np.repeat(mean_out.states[:1], SAMPLES, axis=0))
    assert not np.allclose(mean_out.states[0], out.states[0])


def test_two_workers_give_the_same_rollouts(model, out):
    with StochasticSimulator(model, n_workers=2) as two:
        again = two.rollout(_toss(), horizon_s=1.0, samples=SAMPLES, seed=0)
    np.testing.assert_array_equal(again.states, out.states)
    np.testing.assert_array_equal(again.n_events, out.n_events)
    np.testing.assert_array_equal(again.max_penetration_m, out.max_penetration_m)


@pytest.mark.parametrize("batch_size, workers", [(None, 1), (3, 2)])
def test_batched_rollouts_are_the_lone_ones_bit_for_bit(model, sim, out, mean_out,
                                                       batch_size, workers):
    """Copies of the cube in one world (batch_size) give each sample the lone rollout:
    states, events, clamps and penetration equal, sampled and mean, any worker count."""
    with StochasticSimulator(model, n_workers=workers) as other:
        for lone, mean in ((out, False), (mean_out, True)):
            batched = other.rollout(_toss(), horizon_s=1.0, samples=SAMPLES, seed=0,
                                    mean=mean, batch_size=batch_size)
            np.testing.assert_array_equal(batched.states, lone.states)
            for name in ("n_events", "n_energy_clamped", "n_normal_clamped",
                         "max_penetration_m"):
                np.testing.assert_array_equal(getattr(batched, name), getattr(lone, name))
    assert out.n_events.max() >= 1  # the samples met the table: events were batched too
    with pytest.raises(ParameterError, match="batch_size"):
        sim.rollout(_toss(), horizon_s=0.1, samples=2, batch_size=0)


def test_engine_alone_is_deterministic_and_differs_from_the_samples(model, out):
    with StochasticSimulator(model, residual=False) as engine_only:
        base = engine_only.rollout(_toss(), horizon_s=1.0, samples=4, seed=0)
    np.testing.assert_array_equal(base.states, np.repeat(base.states[:1], 4, axis=0))
    assert (base.max_penetration_m <= 0.002).all()
    gap = np.abs(base.positions_m[0] - out.positions_m[0]).max()
    assert gap > 1e-3


def test_penetration_is_small(out, mean_out):
    assert (out.max_penetration_m <= 0.002).all()
    assert (mean_out.max_penetration_m <= 0.002).all()
    assert (out.max_penetration_m > 0).all()  # soft contact: it does sink a little
    assert (out.positions_m[..., 2] > 0.04).all()


def test_the_cube_comes_to_rest_on_the_table(sim):
    settled = sim.rollout(_toss(), horizon_s=1.5, samples=4, seed=3)
    final = settled.states[:, -1]
    assert ((final[:, 2] > 0.04) & (final[:, 2] < 0.07)).all()
    np.testing.assert_allclose(final[:, 2], REST_HEIGHT_M, atol=2e-3)  # on a face
    assert (np.linalg.norm(final[:, 7:10], axis=1) < 0.05).all()
    assert (settled.max_penetration_m <= 0.002).all()


def test_belief_initial_draws_a_state_per_sample(sim):
    belief = GaussianMixtureBelief.gaussian(_toss(), INITIAL_STD, planar=False)
    drawn = sim.rollout(belief, horizon_s=0.2, samples=4, seed=0)
    starts = drawn.initial_states
    assert starts.shape == (4, 13)
    assert len({tuple(row) for row in starts}) == 4
    np.testing.assert_allclose(drawn.positions_m[:, 0], starts[:, 0:3], atol=1e-12)
    np.testing.assert_allclose(starts[:, 0:3], np.tile(_toss()[0:3], (4, 1)), atol=0.01)
    again = sim.rollout(belief, horizon_s=0.2, samples=4, seed=0)
    np.testing.assert_array_equal(again.states, drawn.states)


def test_state_noise_perturbs_only_the_initial_velocities_and_is_seeded(sim, model):
    noisy = sim.rollout(_toss(), horizon_s=0.2, samples=4, seed=0, state_noise=True)
    starts = noisy.initial_states
    np.testing.assert_array_equal(starts[:, :7], np.tile(_toss()[:7], (4, 1)))  # pose kept
    assert len({tuple(row) for row in starts}) == 4
    change = starts[:, 7:] - _toss()[7:]
    noise = model.state_noise
    scale = np.r_[noise.velocity_std_mps, noise.omega_std_radps]
    assert np.all(np.abs(change) < 5 * scale) and np.abs(change).max() > 0
    again = sim.rollout(_toss(), horizon_s=0.2, samples=4, seed=0, state_noise=True)
    np.testing.assert_array_equal(again.states, noisy.states)
    plain = sim.rollout(_toss(), horizon_s=0.2, samples=4, seed=0)
    np.testing.assert_array_equal(plain.initial_states, np.tile(_toss(), (4, 1)))


@pytest.mark.parametrize("kwargs", [dict(samples=0), dict(samples=1.5), dict(samples=-2),
                                    dict(horizon_s=0.0), dict(horizon_s=-1.0)])
def test_bad_rollout_arguments(sim, kwargs):
    options = dict(horizon_s=0.1, samples=2, seed=0) | kwargs
    with pytest.raises(ParameterError):
        sim.rollout(_toss(), **options)


@pytest.mark.parametrize("state", [np.zeros(12), np.zeros(14), np.zeros(6),
                                   np.r_[[0, 0, np.nan], np.zeros(10)]])
def test_bad_initial_state(sim, state):
    with pytest.raises(ParameterError):
        sim.rollout(state, horizon_s=0.1, samples=2)


# --- beliefs ------------------------------------------------------------------------------------
def test_beliefs_from_a_state(sim):
    steps = sim.beliefs(_toss(), n_events=2, n_particles=16, seed=0)
    assert 1 <= len(steps) <= 2
    for step in steps:
        summary = step.summary()
        assert summary["drawn"] == 16
        assert (summary["accepted"] + summary["no_event"] + summary["rejected_penetration"]
                + summary["rejected_energy"]) == 16
    assert len(steps[0].particles) >= 8
    again = sim.beliefs(_toss(), n_events=1, n_particles=16, seed=0)
    np.testing.assert_array_equal(again[0].particles, steps[0].particles)


def test_bench_beliefs_reports_every_figure_with_its_floor(model):
    """The beliefs benchmark on one synthetic toss: ratios for the residual, the engine and
    the bare loop at 1 substep and at the model's; particle counts add up."""
    from residualsim.experiments.bench import bench_beliefs
    from residualsim.data.trajectory import Trajectory

    state, n = _toss(), 40
    toss = Trajectory("synthetic", np.arange(n) * DT_S, np.tile(state[:3], (n, 1)),
                      np.tile(state[3:7], (n, 1)), np.tile(state[7:10], (n, 1)),
                      np.tile(state[10:], (n, 1)), source="test")
    report = bench_beliefs(model, {"synthetic": toss}, particles=6, n_workers=1, n_events=2)
    assert report["simulated_s"] == pytest.approx((n - 1) * DT_S)
    assert set(report["bare_over_real_time"]) == {"1", str(model.substeps)}
    ratios = [report["residual_over_real_time"], report["engine_over_real_time"],
              *report["bare_over_real_time"].values()]
    assert all(np.isfinite(r) and r > 0 for r in ratios)
    assert report["propagated"] == (report["accepted"] + report["no_event"]
                                    + report["rejected_penetration"]
                                    + report["rejected_energy"])
    assert report["propagated"] >= 6


@pytest.mark.parametrize("change, kwargs, words", [
    ({3: 0.0, 4: 0.0, 5: 0.0, 6: 0.0}, {}, "the quaternion w,x,y,z has norm 0"),
    ({7: 1e200}, {}, "base velocity is 1e+200 m/s"),
    ({0: 50.0}, {}, "beyond the table's edge"),
    # found auditing issue 51: rollout checked only the bounds (rollout --state also the
    # table), and ran a start 1 m under the table or halfway into it
    ({2: -1.0}, {}, "the state puts the object 1052 mm into the table"),
    ({2: 0.0}, {}, "the state puts the object 52 mm into the table"),
    ({}, {"seed": -1}, "seed must be an integer >= 0"),
    ({}, {"horizon_s": float("inf")}, "horizon_s must be in (0, 3600] s"),
])
def test_unusable_rollout_arguments_are_refused_and_leave_the_workers_sound(sim, change,
                                                                           kwargs, words):
    """A zero quaternion or a velocity of 1e200 m/s sent to a worker returned NaN or garbage
    and left its PyBullet world broken: the same good state then fell through the table.
    Such states, negative seeds and endless horizons are refused before any worker runs."""
    state = _toss()
    for index, value in change.items():
        state[index] = value
    arguments = {"horizon_s": 0.5, "samples": 2, **kwargs}
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")
                       .replace("+", r"\+")):
        sim.rollout(state, **arguments)
    good = sim.rollout(_toss(), 0.5, samples=2)
    assert (good.n_events > 0).all() and (good.final_positions_m[:, 2] > 0).all()


@pytest.mark.parametrize("height, words", [
    (float("nan"), "the belief's mean is not finite"),
    (-1.0, "the belief's mean: the state puts the object 1052 mm into the table")])
def test_a_belief_start_is_checked_as_a_state_is(sim, height, words):
    """Found auditing issue 51: ``rollout`` from a belief drew from it with no check (a NaN
    mean, a mean under the table); it is refused naming the belief, as propagate_belief
    refuses it."""
    from residualsim.belief.propagation import GaussianMixtureBelief
    from residualsim.belief.simulator import INITIAL_STD

    belief = GaussianMixtureBelief.gaussian(_toss(), INITIAL_STD, planar=False)
    means = belief.means.copy()
    means[0, 2] = height
    belief = GaussianMixtureBelief(belief.weights, means, belief.covariances, belief.tangent)
    with pytest.raises(ParameterError, match=f"^initial belief: {words}"):
        sim.rollout(belief, 0.5, samples=2)
    good = sim.rollout(_toss(), 0.5, samples=2)
    assert (good.n_events > 0).all()


def test_rollouts_beyond_the_memory_left_are_refused_naming_samples(sim):
    """Found auditing issue 51: 10^9 samples raised numpy's bare MemoryError."""
    with pytest.raises(ParameterError, match=r"^samples = 1000000000 x \d+ steps need at "
                                             r"least .* GiB, more than the .* GiB available"):
        sim.rollout(_toss(), 0.5, samples=10 ** 9)
