"""The conjugate step's rollouts in batched worlds (residualsim.belief.conjugate_rollouts)
against the lone path, on the shipped 5-substep cube model.

The claim under test: a draw rolled out among other copies of the cube in one PyBullet
world meets the same first event as alone (``residual_rollout(..., stop_after_events=1)``
with the event probe): the same status, steps, engine steps and post-event state bit for
bit (the probe applies nothing), and the same description of the event (features, M⁻¹Jᵀ,
J q̇, J M⁻¹Jᵀ, energy budget, touching points' normal rows) within 1e-9 relative: numpy's
row by row arithmetic against the lone path's BLAS products (about 6e-15 seen). The step
built on them keeps its counts and draws, and its belief within rounding grown by the
refit; for any batch size and worker count the batched beliefs are bit for bit the same.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from residualsim.belief.conjugate_rollouts import (EventProbe, SigmaRequest, sigma_tasks,
                                                   unpack_outcomes)
from residualsim.belief.mixture import GaussianMixtureBelief
from residualsim.belief.propagation import propagate_belief
from residualsim.belief.simulator import INITIAL_STD, toss_state
from residualsim.residual.model import ResidualModel
from residualsim.sim.engine import Engine

MODEL_DIR = Path(__file__).resolve().parents[1] / "data" / "pretrained" / \
    "cube-contactnets-5substep"
TOLERANCE = 1e-9  # relative, the events' descriptions: rounding, <= 6e-15 seen
COUNTS = ("method", "drawn", "accepted", "no_event", "rejected_penetration",
          "rejected_energy", "components")


@pytest.fixture(scope="module")
def model() -> ResidualModel:
    return ResidualModel.load(MODEL_DIR)


def _initial(spread: float = 1.0) -> GaussianMixtureBelief:
    """Released 0.25 m up, turned 0.5 rad about (1, 1, 0): a corner lands first."""
    quat = Rotation.from_rotvec([0.35, 0.35, 0.0]).as_quat()[[3, 0, 1, 2]]
    return GaussianMixtureBelief.gaussian(
        toss_state([0.0, 0.0, 0.25], quat, [0.3, 0.0, -1.0], [0.0, 0.0, 0.0]),
        INITIAL_STD * spread, planar=False)


def _draws() -> np.ndarray:
    """60 draws from a wide belief (corners and edges land first, some sink too deep) and
    2 cubes at rest face down (no event)."""
    states = _initial(4.0).sample(60, np.random.default_rng(0))
    rest = [np.r_[[0.1 * k, 0.0, 0.0524], [1.0, 0.0, 0.0, 0.0], np.zeros(6)] for k in (1, 2)]
    return np.vstack([states, rest])


@pytest.mark.parametrize("features", [(False, False), (True, True)])
def test_batched_draws_meet_their_lone_events(model, features):
    """Spin and contact-mode features (``features``) included: the probe asks for what the
    policy would."""
    policy = model.sampling_policy()
    probe = EventProbe(policy.n_outputs, *features)
    states = _draws()
    with Engine(model.scene, model.params, model.settings()) as engine:
        runs = {size: unpack_outcomes([sigma_tasks(engine, 0, SigmaRequest(
            n_slots=1, states=states, params=model.params, probe=probe, guard=model.guard,
            max_steps=400, penetration_tolerance_m=0.002, batch_size=size))], len(states))
            for size in (1, 7, None)}
    lone = runs[1]
    statuses = [lone[i][0] for i in range(len(states))]
    assert {"ok", "penetration", "no_event"} <= set(statuses)
    assert statuses[-2:] == ["no_event", "no_event"]
    for size in (7, None):
        for i in range(len(states)):
            a, b = lone[i], runs[size][i]
            assert (a[0], a[2], a[4]) == (b[0], b[2], b[4]), i  # status, steps, engine steps
            np.testing.assert_array_equal(a[1], b[1])  # post-event state
            np.testing.assert_allclose(a[5], b[5], rtol=0, atol=1e-12)  # engine start
            assert (a[3] is None) == (b[3] is None) == (a[0] != "ok"), i
            if a[3] is None:
                continue
            assert len(a[3][0]) == 9 + 3 * features[0] + features[1]
            for x, y in zip(a[3][:5] + a[3][5], b[3][:5] + b[3][5]):
                x, y = np.asarray(x), np.asarray(y)
                assert x.shape == y.shape, i
                np.testing.assert_allclose(y, x, rtol=TOLERANCE, atol=TOLERANCE * 10)


def test_batched_conjugate_step_keeps_the_lone_steps(model):
    """Three steps, 80 draws: batched (automatic, 1 worker; batch 5, 2 workers) and one
    draw at a time give the same counts and engine steps; the batched beliefs are bit for
    bit the same for both batch sizes and worker counts, the lone path's within rounding
    (the first step 1e-9; later ones draw from beliefs that the refit's EM moved by
    rounding, so within 1e-5)."""
    initial = _initial()
    runs = {(workers, size): propagate_belief(model, initial, n_events=3, seed=0,
                                              n_workers=workers, method="conjugate",
                                              draws=80, batch_size=size)
            for workers, size in ((1, 1), (1, None), (2, 5))}
    lone, batched, other = runs[1, 1], runs[1, None], runs[2, 5]
    assert len(lone) == len(batched) == len(other) == 3
    for k, (a, b, c) in enumerate(zip(lone, batched, other)):
        assert b.summary() == c.summary() and b.engine_steps == c.engine_steps
        for name in ("weights", "means", "covariances"):
            np.testing.assert_array_equal(getattr(b.belief, name), getattr(c.belief, name))
        np.testing.assert_array_equal(b.particles, c.particles)
        summary, mine = a.summary(), b.summary()
        assert [summary[key] for key in COUNTS] == [mine[key] for key in COUNTS]
        assert a.engine_steps == b.engine_steps > 0
        assert a.rejected_fraction == pytest.approx(b.rejected_fraction, abs=1e-9)
        tolerance = 1e-9 if k == 0 else 1e-5
        for name in ("weights", "means", "covariances"):
            np.testing.assert_allclose(getattr(b.belief, name), getattr(a.belief, name),
                                       rtol=0, atol=tolerance)
        np.testing.assert_allclose(b.particles, a.particles, rtol=0, atol=tolerance)


def test_conjugate_batch_size_is_checked(model):
    from residualsim.errors import ParameterError

    with pytest.raises(ParameterError, match="batch_size"):
        propagate_belief(model, _initial(), n_events=1, method="conjugate", draws=10,
                         batch_size=0)


def test_draws_move_continuously_with_the_covariance():
    """Nearly equal eigenvalues: a rounding-sized change of the covariance (as a batched
    step's refit differs from the lone one's) moves the draws by about as much, not by a
    turn of the eigenvectors (V √Λ did: 119 of 410 draws moved by up to 0.23 in one step)."""
    from residualsim.belief.draws import stratified_draws
    from residualsim.belief.mixture import StateTangent

    covariance = np.diag([1e-4, 1e-4, 4e-4, 1e-2, 1e-2, 1e-2, 1.0, 1.0, 0.5, 25.0, 25.0, 9.0])
    nudge = np.random.default_rng(1).normal(0.0, 1e-18, (12, 12))
    draws = [stratified_draws(GaussianMixtureBelief(np.ones(1), np.zeros((1, 12)),
                                                    (covariance + n + n.T)[None],
                                                    StateTangent(False)),
                              100, np.random.default_rng(0), True)[0][0]
             for n in (np.zeros((12, 12)), nudge)]
    np.testing.assert_allclose(draws[1], draws[0], rtol=0, atol=1e-9)
