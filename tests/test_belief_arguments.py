"""Issue 51 case 4: propagate_belief checks its arguments up front, each a ParameterError
naming the argument, for both methods (it returned an empty belief silently for a NaN mean,
a start under the table or far away, or 1e4 m/s, and raised bare ValueError/OverflowError
for n_events=nan, horizon_s=inf, seed=-1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from residualsim.belief.propagation import METHODS, GaussianMixtureBelief, propagate_belief
from residualsim.belief.simulator import INITIAL_STD, toss_state
from residualsim.errors import ParameterError
from residualsim.residual.model import ResidualModel
from residualsim.sim.implausible import allow_implausible

MODEL_DIR = Path(__file__).resolve().parents[1] / "data" / "pretrained" / "cube-contactnets"


@pytest.fixture(scope="module")
def model():
    return ResidualModel.load(MODEL_DIR)


def _belief(position=(0.0, 0.0, 0.25), velocity=(0.3, 0.0, -1.0)) -> GaussianMixtureBelief:
    state = toss_state(position, [1, 0, 0, 0], velocity, [0.0, 0.0, 0.0])
    return GaussianMixtureBelief.gaussian(state, INITIAL_STD, planar=False)


def _nan_mean() -> GaussianMixtureBelief:
    belief = _belief()
    means = belief.means.copy()
    means[0, 2] = np.nan
    return GaussianMixtureBelief(belief.weights, means, belief.covariances, belief.tangent)


BAD_STARTS = {
    "nan mean": (_nan_mean, r"initial: the belief's mean is not finite"),
    "1 m under the table": (lambda: _belief(position=(0.0, 0.0, -1.0)),
                            r"initial: the belief's mean: the state puts the object \d+ mm "
                            r"into the table"),
    "1 km away": (lambda: _belief(position=(1000.0, 0.0, 0.25)),
                  r"initial: the belief's mean: the base is at x = 1e\+03 m, beyond the "
                  r"table's edge"),
    "1e4 m/s": (lambda: _belief(velocity=(1e4, 0.0, 0.0)),
                r"initial: the belief's mean: the state's base velocity is 1e\+04 m/s"),
}


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("case", sorted(BAD_STARTS))
def test_a_bad_start_is_refused_naming_initial(model, method, case):
    make, message = BAD_STARTS[case]
    with pytest.raises(ParameterError, match=message):
        propagate_belief(model, make(), n_events=1, n_particles=8, method=method)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("argument,value,message", [
    ("n_events", float("nan"), r"n_events must be an integer >= 1, got nan"),
    ("n_events", 0, r"n_events must be an integer >= 1, got 0"),
    ("horizon_s", float("inf"), r"horizon_s must be in \(0, 3600\] s, got inf"),
    ("horizon_s", -1.0, r"horizon_s must be in \(0, 3600\] s, got -1.0"),
    ("horizon_s", float("nan"), r"horizon_s must be in \(0, 3600\] s, got nan"),
    ("seed", -1, r"seed must be an integer >= 0, got -1"),
    ("seed", 1.5, r"seed must be an integer >= 0, got 1.5"),
])
def test_bad_arguments_are_refused_naming_them(model, method, argument, value, message):
    with pytest.raises(ParameterError, match=message):
        propagate_belief(model, _belief(), n_particles=8, method=method, **{argument: value})


def test_particles_need_a_whole_number_of_particles(model):
    with pytest.raises(ParameterError, match=r"n_particles must be an integer >= 2, got nan"):
        propagate_belief(model, _belief(), n_particles=float("nan"))


def test_allow_implausible_lets_a_far_start_through(model):
    with allow_implausible():  # warned, not refused: the step runs
        steps = propagate_belief(model, _belief(velocity=(25.0, 0.0, -1.0)), n_events=1,
                                 n_particles=8, horizon_s=0.05, method="conjugate")
    assert len(steps) == 1


@pytest.mark.parametrize("n_particles", [10 ** 9, 10 ** 12])
def test_particles_beyond_the_memory_left_are_refused_naming_them(model, n_particles):
    """Found auditing issue 51: 10^12 particles raised numpy's bare MemoryError (87.3 TiB)."""
    from residualsim.parallel import available_memory_bytes

    if (available_memory_bytes() or 0) > n_particles * 12 * 16:
        pytest.skip("this machine has the memory")
    with pytest.raises(ParameterError, match=rf"^n_particles = {n_particles} needs at least "
                                             r".* GiB for its draws, more than the .* GiB "
                                             "available: lower n_particles"):
        propagate_belief(model, _belief(), n_events=1, n_particles=n_particles)
