"""The particle step's refit (GaussianMixtureBelief.fit's candidates, EM by
belief.reduction.em_refine) is scikit-learn's GaussianMixture fit."""

import math

import numpy as np
import pytest
from sklearn.mixture import GaussianMixture

from residualsim.belief import mixture


def _clouds(seed: int, n: int = 600, d: int = 5) -> np.ndarray:
    """Three separated, correlated Gaussian clouds, standardised as the refit has them."""
    rng = np.random.default_rng(seed)
    parts = []
    for shift, count in zip((0.0, 4.0, -3.0), (n // 2, n // 3, n - n // 2 - n // 3)):
        mixing = rng.standard_normal((d, d)) * 0.5 + np.eye(d)
        parts.append(rng.standard_normal((count, d)) @ mixing + shift)
    points = np.vstack(parts)
    return (points - points.mean(axis=0)) / points.std(axis=0)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_same_fit_and_bic_as_scikit_learn(seed, k):
    points = _clouds(seed)
    weights, means, covariances, bic = mixture._fit_candidate(points, k, seed)
    model = GaussianMixture(k, covariance_type="full", reg_covar=1e-6,
                            random_state=seed).fit(points)
    order = np.argsort(-model.weights_, kind="stable")  # ours come heaviest first
    np.testing.assert_allclose(weights, model.weights_[order], rtol=0, atol=1e-8)
    np.testing.assert_allclose(means, model.means_[order], rtol=0, atol=1e-8)
    np.testing.assert_allclose(covariances, model.covariances_[order], rtol=0, atol=1e-8)
    assert bic == pytest.approx(model.bic(points), rel=1e-10)


def test_bic_prefers_the_three_clouds():
    points = _clouds(3)
    bics = [mixture._fit_candidate(points, k, 0)[3] for k in (1, 2, 3, 4)]
    assert int(np.argmin(bics)) + 1 in (3, 4)
    assert bics[0] > bics[2] + 100


def test_a_covariance_not_positive_definite_gives_nan_bic(monkeypatch):
    from residualsim.belief import reduction

    def fails(*args, **kwargs):
        raise np.linalg.LinAlgError("Matrix is not positive definite")

    monkeypatch.setattr(reduction, "em_refine", fails)
    weights, _, covariances, bic = mixture._fit_candidate(_clouds(0), 2, 0)
    assert math.isnan(bic) and np.isnan(covariances).all() and weights.shape == (2,)


def test_a_belief_refit_that_no_candidate_fits_is_refused_not_returned_with_nan(monkeypatch):
    states = np.tile(np.r_[0.0, 0.0, 0.1, 1.0, 0.0, 0.0, 0.0, [0.0] * 6], (30, 1))
    monkeypatch.setattr(mixture, "_fit_candidate", lambda unit, k, rng: (
        np.ones(k) / k, np.zeros((k, 12)), np.full((k, 12, 12), np.nan), math.nan))
    with pytest.raises(ValueError, match="not positive definite"):
        mixture.GaussianMixtureBelief.fit(states, planar=False)
