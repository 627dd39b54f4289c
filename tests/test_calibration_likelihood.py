"""Trajectory and impact likelihoods: errors at the truth, workers, the two noise models."""

from __future__ import annotations

import math

import numpy as np
import pytest

from residualsim.errors import DataError, ParameterError
from residualsim.sysid.likelihood import (
    ERROR_FLOOR,
    ImpactLikelihood,
    TrajectoryLikelihood,
)
from residualsim.sim.rotations import geodesic_angle
from residualsim.sim.scenes import EngineParams
from residualsim.sim.synthesize import synthesize_tosses

TRUTH = EngineParams(lateral_friction=0.3, restitution=0.4)
OTHERS = [EngineParams(lateral_friction=0.6, restitution=0.1),
          EngineParams(lateral_friction=0.3, restitution=0.6),
          EngineParams(lateral_friction=0.15, restitution=0.4)]


@pytest.fixture(scope="module")
def tosses():
    """Noise-free synthetic tosses with known parameters, at one substep."""
    return synthesize_tosses("lateral_friction=0.3,restitution=0.4", n_tosses=4, n_samples=60,
                             substeps=1, rng=0)


@pytest.fixture(scope="module")
def errors_one_worker(tosses):
    with TrajectoryLikelihood("cube", tosses, substeps=1) as likelihood:
        assert likelihood.settings.substeps == 1
        assert likelihood.n_items == 4 and likelihood.ids == list(tosses)
        return likelihood.errors([TRUTH, *OTHERS])


def test_errors_vanish_at_the_truth_only(errors_one_worker):
    assert errors_one_worker.shape == (4, 4)
    assert np.all(errors_one_worker[0] < 1e-12)
    # every other parameter set misfits (m²): clearly, on average and on each toss
    assert np.all(errors_one_worker[1:].mean(axis=1) > 1e-5)
    assert np.all(errors_one_worker[1:] > 1e-9)


def test_one_and_two_workers_agree_bitwise(tosses, errors_one_worker):
    with TrajectoryLikelihood("cube", tosses, substeps=1, n_workers=2) as likelihood:
        assert likelihood.n_workers == 2
        errors = likelihood.errors([TRUTH, *OTHERS])
        log_like = likelihood([TRUTH, *OTHERS])
    np.testing.assert_array_equal(errors, errors_one_worker)
    assert likelihood.n_rollouts == 2 * 4 * 4
    # estimated noise: the truth (errors floored at 1e-10) beats every other set
    assert np.argmax(log_like) == 0
    assert log_like[0] == pytest.approx(-0.5 * 4 * math.log(ERROR_FLOOR))


def test_rotation_weight_scales_the_angle_term_only(tosses, errors_one_worker):
    """e_i(w) = position part + w × rotation part: three weights are exactly collinear."""
    errors = {}
    for weight in (3.0, 5.0):
        with TrajectoryLikelihood("cube", tosses, substeps=1, rotation_weight=weight) as lik:
            assert lik.rotation_weight == weight
            errors[weight] = lik.errors(OTHERS)
    rotation = (errors[3.0] - errors_one_worker[1:]) / 2.0
    position = errors_one_worker[1:] - rotation
    assert np.all(rotation > 1e-9) and np.all(position > 1e-9)
    np.testing.assert_allclose(errors[5.0], position + 5.0 * rotation, rtol=1e-9)


@pytest.mark.parametrize("weight", [0.0, -1.0, math.nan, math.inf])
def test_bad_rotation_weight_is_refused(tosses, weight):
    with pytest.raises(ParameterError, match="rotation_weight"):
        TrajectoryLikelihood("cube", tosses, substeps=1, rotation_weight=weight)


def test_substeps_matter(tosses):
    """Parameters are only 'true' at the substep count the tosses were made with."""
    with TrajectoryLikelihood("cube", tosses, substeps=4) as likelihood:
        assert likelihood.settings.substeps == 4
        errors = likelihood.errors([TRUTH])
    assert errors.mean() > 1e-8


@pytest.fixture(scope="module")
def likelihoods(tosses):
    with TrajectoryLikelihood("cube", tosses, substeps=1, noise_m=0.01) as given, \
            TrajectoryLikelihood("cube", tosses, substeps=1) as estimated:
        yield given, estimated


def test_log_likelihood_with_given_noise(likelihoods):
    given, _ = likelihoods
    errors = np.array([[1e-4, 4e-4, 0.0, 2.5e-5], [1e-2, 0.0, 0.0, 0.0]])
    expected = -errors.sum(axis=1) / (2 * 0.01**2)
    np.testing.assert_allclose(given.log_likelihood_from_errors(errors), expected, rtol=1e-12)
    np.testing.assert_allclose(expected, [-2.625, -50.0])


def test_log_likelihood_with_estimated_noise(likelihoods):
    _, estimated = likelihoods
    errors = np.array([[1e-4, 4e-4, 0.0, 2.5e-5], [1e-12, 1e-6, 1e-6, 1e-6]])
    expected = -0.5 * np.log(np.maximum(errors, ERROR_FLOOR)).sum(axis=1)
    got = estimated.log_likelihood_from_errors(errors)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    # the floor: an exact fit counts like a 1e-10 m² error, not +inf
    assert got[0] == pytest.approx(-0.5 * (math.log(1e-4) + math.log(4e-4)
                                           + math.log(1e-10) + math.log(2.5e-5)))
    # a single vector gives a scalar
    assert np.ndim(estimated.log_likelihood_from_errors(errors[0])) == 0


@pytest.mark.parametrize("bad", [math.inf, math.nan])
def test_failed_rollouts_give_minus_inf(likelihoods, bad):
    for likelihood in likelihoods:
        values = likelihood.log_likelihood_from_errors(
            np.array([[1e-4, bad, 1e-4, 1e-4], [1e-4, 1e-4, 1e-4, 1e-4]]))
        assert values[0] == -np.inf
        assert np.isfinite(values[1])


def test_noise_estimate(likelihoods):
    given, _ = likelihoods
    # cube: d = 4 per recording (3 position + 1 angle)
    assert given.dims == 4
    assert given.noise_estimate(np.full(4, 4e-6)) == pytest.approx(1e-3)


@pytest.mark.parametrize("noise", [0.0, -0.01, math.nan, math.inf])
def test_bad_noise_is_refused(tosses, noise):
    with pytest.raises(ParameterError, match="noise"):
        TrajectoryLikelihood("cube", tosses, substeps=1, noise_m=noise)


def test_no_trajectories_is_a_data_error():
    with pytest.raises(DataError):
        TrajectoryLikelihood("cube", {}, substeps=1)


# --- impacts ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_impacts(mcube_dir):
    from residualsim.data import load_impacts

    impacts = load_impacts(mcube_dir, convention="corrected")
    return impacts.subset(impacts.rows[:20])


def test_impact_likelihood_on_real_impacts(real_impacts):
    with ImpactLikelihood("planar-ellipse", real_impacts) as likelihood:
        assert likelihood.n_items == 20
        assert likelihood.ids == [str(r) for r in real_impacts.rows]
        errors = likelihood.errors([EngineParams(), EngineParams(lateral_friction=0.5,
                                                                 restitution=0.3)])
        log_like = likelihood.log_likelihood_from_errors(errors)
    assert errors.shape == (2, 20)
    assert np.all(np.isfinite(errors)) and np.all(errors >= 0)
    assert np.all(np.isfinite(log_like))
    assert not np.array_equal(errors[0], errors[1])


def test_impact_likelihood_refuses_the_upstream_convention(mcube_dir):
    from residualsim.data import load_impacts

    upstream = load_impacts(mcube_dir, convention="upstream")
    with pytest.raises(DataError, match="corrected"):
        ImpactLikelihood("planar-ellipse", upstream.subset(upstream.rows[:5]))


def test_impact_likelihood_refusals_on_a_synthetic_set(tmp_path, make_mcube):
    """Also without the real data: convention and scene checks."""
    from residualsim.data import load_impacts

    make_mcube(tmp_path / "mcube")
    with pytest.raises(DataError, match="corrected"):
        ImpactLikelihood("planar-ellipse", load_impacts(tmp_path / "mcube",
                                                        convention="upstream"))
    with pytest.raises(DataError, match="planar scene"):
        ImpactLikelihood("cube", load_impacts(tmp_path / "mcube", convention="corrected"))


# --- geodesic angle -----------------------------------------------------------------------------
def test_geodesic_angle():
    identity = np.array([1.0, 0.0, 0.0, 0.0])
    assert geodesic_angle(identity, identity) == 0.0
    rng = np.random.default_rng(0)
    q = rng.normal(size=(10, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    np.testing.assert_allclose(geodesic_angle(q, -q), 0.0, atol=1e-6)
    quarter_z = np.array([math.cos(math.pi / 4), 0.0, 0.0, math.sin(math.pi / 4)])
    assert geodesic_angle(identity, quarter_z) == pytest.approx(math.pi / 2)
    assert geodesic_angle(quarter_z, identity) == pytest.approx(math.pi / 2)
    half_x = np.array([0.0, 1.0, 0.0, 0.0])
    assert geodesic_angle(identity, half_x) == pytest.approx(math.pi)
    # batched: shape (...,)
    assert geodesic_angle(q, q).shape == (10,)
