"""Issue 67: the belief API takes what the command line takes.

``GaussianMixtureBelief.gaussian(state, [0.0] * 12)`` (a state known exactly) was accepted
and ``propagate_belief`` on it raised numpy's LinAlgError; a singular covariance is now
raised to a stated floor (``COVARIANCE_FLOOR``) and propagates, a non-finite, asymmetric or
indefinite one is refused at construction, and ``n_workers=0`` is refused as ``--workers
0`` is (it ran one worker)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from residualsim.belief.mixture import COVARIANCE_FLOOR
from residualsim.belief.propagation import METHODS, GaussianMixtureBelief, propagate_belief
from residualsim.belief.simulator import INITIAL_STD, StochasticSimulator, toss_state
from residualsim.errors import ParameterError
from residualsim.residual.model import ResidualModel

MODEL_DIR = Path(__file__).resolve().parents[1] / "data" / "pretrained" / "cube-contactnets"
STATE = toss_state([0.0, 0.0, 0.3], [1, 0, 0, 0], [0.5, 0.0, -0.5], [0.0, 5.0, 0.0])


@pytest.fixture(scope="module")
def model():
    return ResidualModel.load(MODEL_DIR)


@pytest.mark.parametrize("method", METHODS)
def test_a_state_known_exactly_propagates_with_the_stated_floor(model, method):
    belief = GaussianMixtureBelief.gaussian(STATE, [0.0] * 12, planar=False)
    assert np.allclose(belief.covariances[0], COVARIANCE_FLOOR * np.eye(12))
    steps = propagate_belief(model, belief, n_events=1, n_particles=20, seed=0,
                             method=method)
    assert steps[0].belief is not None and steps[0].summary()["accepted"] > 0
    # the draws sit on the state, within nanometres
    draws = belief.sample(50, np.random.default_rng(0))
    assert np.abs(draws[:, :3] - STATE[:3]).max() < 1e-7


def test_a_singular_covariance_is_floored_and_a_regular_one_left_alone():
    plain = GaussianMixtureBelief.gaussian(STATE, INITIAL_STD, planar=False)
    same = GaussianMixtureBelief(plain.weights, plain.means, plain.covariances, plain.tangent)
    assert same.covariances is plain.covariances  # positive definite: untouched
    rank_one = np.outer(np.arange(1.0, 13.0), np.arange(1.0, 13.0))[None] * 1e-4
    floored = GaussianMixtureBelief(plain.weights, plain.means, rank_one, plain.tangent)
    np.linalg.cholesky(floored.covariances[0])  # sampled without a LinAlgError
    assert np.allclose(floored.covariances, rank_one, atol=1e-12)
    floored.sample(10, np.random.default_rng(1))


@pytest.mark.parametrize(("change", "message"), [
    (lambda c: c * np.nan, "must be finite"),
    (lambda c: c + np.triu(np.ones((12, 12)), 1)[None] * 1e-3, "must be symmetric"),
    (lambda c: -c, r"covariance 0 is not positive semi-definite \(smallest eigenvalue"),
])
def test_a_covariance_that_is_no_covariance_is_refused_at_construction(change, message):
    plain = GaussianMixtureBelief.gaussian(STATE, INITIAL_STD, planar=False)
    with pytest.raises(ParameterError, match=message):
        GaussianMixtureBelief(plain.weights, plain.means, change(plain.covariances),
                              plain.tangent)


@pytest.mark.parametrize("workers", [0, -1, 2.5, 10 ** 6])
def test_n_workers_out_of_range_is_refused(model, workers):
    belief = GaussianMixtureBelief.gaussian(STATE, INITIAL_STD, planar=False)
    with pytest.raises(ParameterError, match=r"n_workers must be an integer from 1 to"):
        propagate_belief(model, belief, n_events=1, n_particles=4, n_workers=workers)
    with pytest.raises(ParameterError, match=r"n_workers must be an integer from 1 to"):
        StochasticSimulator(model, n_workers=workers)
