"""Planar impacts as distributions: the GP's samples, the closed-form log score, seeds, and
the evaluate command's new keys."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from residualsim.errors import ParameterError
from residualsim.evaluation.log_scores import gaussian_mixture_log_score
from residualsim.residual.impact import GPImpactResidual, impact_contacts
from residualsim.residual.impact_scores import (ImpulseMixture, gp_mixture, off_plane_normals,
                                                sample_post_velocity, velocity_map,
                                                velocity_mixture)
from test_impact_residual import K, synthetic_impacts


@pytest.fixture(scope="module")
def fitted_gp():
    """A GP residual on synthetic impacts whose recorded bounce has a feature-dependent
    extra normal impulse plus noise."""
    impacts = synthetic_impacts(n=80)
    contacts = impact_contacts(impacts)
    rng = np.random.default_rng(4)
    engine = contacts.pre_velocity * np.array([0.8, -0.5, 0.8])
    extra = np.column_stack([0.01 + 0.005 * contacts.features[:, 3],
                             0.002 * rng.standard_normal(80)])
    recorded = engine + contacts.velocity_changes(extra)
    gp = GPImpactResidual(0.5, seed=0).fit(contacts, engine, recorded)
    return impacts, contacts, engine, recorded, gp


def test_gp_samples_have_the_gps_mean_and_variance(fitted_gp):
    impacts, contacts, engine, _, gp = fitted_gp
    mixture = gp_mixture(gp, contacts)
    mean, std = gp.predict_impulse(contacts)
    assert (std > 0).all()
    draws = mixture.sample(impacts.rows, 4000, seed=3)  # (S, N, 2)
    # Monte Carlo tolerance: 5 standard errors of the mean and of the variance
    error = np.abs(draws.mean(axis=0) - mean) / (std / np.sqrt(4000))
    assert error.max() < 5
    ratio = draws.var(axis=0) / std ** 2
    assert np.abs(ratio - 1).max() < 5 * np.sqrt(2 / 4000)
    # the samples in velocity space: engine + M^-1 J^T p (the guard does not bind here)
    post, guarded = sample_post_velocity(mixture, contacts, engine, impacts.rows, 200, seed=3)
    assert guarded == 0.0
    np.testing.assert_allclose(post, engine + np.stack(
        [contacts.velocity_changes(d) for d in mixture.sample(impacts.rows, 200, seed=3)]),
        atol=1e-12)


def test_seeds_reproduce_and_do_not_depend_on_the_other_impacts(fitted_gp):
    impacts, contacts, _, _, gp = fitted_gp
    mixture = gp_mixture(gp, contacts)
    first = mixture.sample(impacts.rows, 16, seed=7)
    np.testing.assert_array_equal(first, mixture.sample(impacts.rows, 16, seed=7))
    assert not np.allclose(first, mixture.sample(impacts.rows, 16, seed=8))
    part = ImpulseMixture(mixture.weights[5:9], mixture.means[5:9], mixture.covariances[5:9])
    np.testing.assert_array_equal(part.sample(impacts.rows[5:9], 16, seed=7), first[:, 5:9])
    with pytest.raises(ParameterError):
        mixture.sample(impacts.rows, 0)


def test_mixture_log_score_equals_a_direct_density():
    rng = np.random.default_rng(0)
    weights = np.array([[0.3, 0.7], [0.5, 0.5]])
    means = rng.normal(size=(2, 2, 3))
    factor = rng.normal(size=(2, 2, 3, 3))
    covariances = factor @ factor.transpose(0, 1, 3, 2) + 0.1 * np.eye(3)
    truth = rng.normal(size=(2, 3))
    direct = [-np.log(sum(weights[b, k] * multivariate_normal(means[b, k], covariances[b, k])
                          .pdf(truth[b]) for k in range(2))) for b in range(2)]
    np.testing.assert_allclose(gaussian_mixture_log_score(truth, weights, means, covariances),
                               direct, rtol=1e-10)
    with pytest.raises(ValueError):
        gaussian_mixture_log_score(truth, weights, means, -covariances)


def test_velocity_mixture_is_the_impulse_mixture_mapped_plus_off_plane_noise():
    """The closed form on one impact: the density of u = (dx, dy, k dθ) from a 2-component
    impulse mixture equals a direct evaluation of B p ~ N(Bμ, BCBᵀ) plus N(0, σ²nnᵀ)."""
    impacts = synthetic_impacts(n=3)
    contacts = impact_contacts(impacts)
    engine = contacts.pre_velocity * np.array([0.8, -0.5, 0.8])
    mixture = ImpulseMixture(np.array([[0.4, 0.6]] * 3),
                             np.array([[[0.01, 0.0], [0.02, 0.003]]] * 3),
                             np.array([[np.diag([1e-5, 4e-6]), np.diag([2e-5, 1e-6])]] * 3))
    weights, means, covariances = velocity_mixture(mixture, contacts, engine, 0.05)
    scale = np.array([1.0, 1.0, K])
    b = velocity_map(contacts)[1]
    for column in range(2):  # B's columns: the scaled velocity change of a unit impulse
        unit = np.zeros((3, 2))
        unit[:, column] = 1.0
        np.testing.assert_allclose(b[:, column], contacts.velocity_changes(unit)[1] * scale)
    normal = off_plane_normals(contacts)[1]
    assert abs(normal @ b[:, 0]) < 1e-12 and abs(normal @ b[:, 1]) < 1e-12
    recorded = (engine[1] + contacts.velocity_changes(np.array([[0.015, 0.001]] * 3))[1]) \
        * scale + 0.02 * normal
    direct = 0.0
    for k in range(2):
        mean = engine[1] * scale + b @ mixture.means[1, k]
        cov = b @ mixture.covariances[1, k] @ b.T + 0.05 ** 2 * np.outer(normal, normal)
        direct += mixture.weights[1, k] * multivariate_normal(mean, cov).pdf(recorded)
    score = gaussian_mixture_log_score(recorded[None], weights[1:2], means[1:2],
                                       covariances[1:2])
    assert score[0] == pytest.approx(-np.log(direct), rel=1e-9)
    with pytest.raises(ParameterError):
        velocity_mixture(mixture, contacts, engine, 0.0)


def test_evaluate_reports_the_distributional_scores(make_mcube, tmp_path, capsys):
    """The shipped model on a small synthetic set in the upstream layout (seconds; the real
    set's figures are in train/README.md §8)."""
    from residualsim.cli import main

    data, out = tmp_path / "mcube", tmp_path / "impacts"
    make_mcube(data, n_rows=40)
    assert main(["evaluate", "--scene", "planar-ellipse", "--data", str(data), "--out",
                 str(out), "--samples", "4"]) == 0
    scores = json.loads((out / "impact-scores.json").read_text())
    names = [row["model"] for row in scores["rows"]]
    assert names[0] == "calibrated engine" and "GP residual on the engine" in names
    assert any(n.startswith("residual MDN") for n in names)
    for row in scores["rows"]:
        for part in ("validation", "test"):
            assert {f"{part}_rmse_mps", f"{part}_energy_score_mps", f"{part}_log_score"} <= \
                set(row)
            assert row[f"{part}_energy_score_mps"] <= row[f"{part}_rmse_mps"] * 1.8
    assert scores["rows"][0]["validation_log_score"] is None
    assert all(np.isfinite(r["validation_log_score"]) for r in scores["rows"][1:])
    assert scores["info"]["samples"] == 4 and scores["info"]["off_plane_std_mps"] > 0
    printed = capsys.readouterr().out
    assert "energy score" in printed and "log score" in printed
    line = json.loads(printed.strip().splitlines()[-1])
    assert line["scores"]["calibrated engine"]["samples"] == 1
