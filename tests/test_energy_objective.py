"""``train --objective energy``: antithetic draws, the fair energy score, the trained start
width, and the job end to end on the bundled synthetic tosses (tiny budgets)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import quiet_main
from scipy.stats import norm

from residualsim.data import load_trajectories
from residualsim.errors import ParameterError
from residualsim.evaluation.sample_scores import antithetic_energy_score, energy_score
from residualsim.residual.energy_loss import Antithetic, sample_stream
from residualsim.residual.policy import params_sha256
from residualsim.residual.model import ResidualModel
from residualsim.residual.state_noise import StateNoise
from residualsim.residual.train import TrainingConfig, train_residual
from residualsim.sim.scenes import EngineParams

BUNDLED = Path(__file__).resolve().parents[1] / "data" / "samples" / "cube-synthetic"


def _gaussian_crps(y: float, sigma: float) -> float:
    z = y / sigma
    return sigma * (z * (2 * norm.cdf(z) - 1) + 2 * norm.pdf(z) - 1 / math.sqrt(math.pi))


def test_antithetic_twin_negates_normals_and_mirrors_uniforms():
    a, b = np.random.default_rng(3), np.random.default_rng(3)
    twin = Antithetic(b)
    assert twin.random() == pytest.approx(1.0 - a.random())
    np.testing.assert_allclose(twin.standard_normal(4), -a.standard_normal(4))
    np.testing.assert_allclose(twin.normal(2.0, 0.5, 3), 2.0 - 0.5 * a.standard_normal(3))


def test_sample_streams_pair_up_and_differ_between_pairs():
    first, second = sample_stream(0, 5, 2), sample_stream(0, 5, 3)
    assert isinstance(second, Antithetic) and not isinstance(first, Antithetic)
    np.testing.assert_allclose(second.standard_normal(3), -first.standard_normal(3))
    other = sample_stream(0, 5, 4).standard_normal(3)
    assert not np.allclose(other, sample_stream(0, 5, 2).standard_normal(3))


def test_antithetic_energy_score_is_unbiased_where_the_ensemble_form_is_not():
    """1-D Gaussian samples in antithetic pairs: the mean score matches the Gaussian's
    CRPS; the ensemble form and a fair form that keeps the partners' distances are not."""
    rng = np.random.default_rng(0)
    sigma, y, n_pairs, batches = 0.7, 0.4, 4, 40000
    z = rng.standard_normal((batches, n_pairs))
    samples = np.stack([z, -z], axis=2).reshape(batches, 2 * n_pairs, 1) * sigma
    truth = np.full((batches, 1), y)
    expected = _gaussian_crps(y, sigma)
    fair = antithetic_energy_score(samples, truth).mean()
    assert fair == pytest.approx(expected, rel=0.01)
    # the ensemble form (all pairs, 1 / (2 S^2)) is biased for the distribution
    assert abs(energy_score(samples, truth).mean() - expected) > 0.02
    # so is the fair form over every distinct pair, partners included: they are farther
    # apart than independent draws, so it rewards width
    accuracy = np.abs(samples[..., 0] - y).mean(axis=1)
    pairs = np.abs(samples[:, :, None, 0] - samples[:, None, :, 0]).sum(axis=(1, 2))
    n = samples.shape[1]
    assert (accuracy - pairs / (2 * n * (n - 1))).mean() < expected - 0.02


def test_antithetic_energy_score_needs_even_samples():
    with pytest.raises(ValueError, match="even"):
        antithetic_energy_score(np.zeros((2, 5, 3)), np.zeros((2, 3)))


@pytest.mark.parametrize("samples", [3, 2, 7])
def test_energy_objective_refuses_samples_that_are_not_antithetic_pairs(samples):
    with pytest.raises(ParameterError, match="antithetic"):
        TrainingConfig(objective="energy", samples=samples)


def test_energy_objective_defaults_to_eight_samples_and_unknown_objectives_fail():
    assert TrainingConfig(objective="energy").samples == 8
    with pytest.raises(ParameterError, match="objective"):
        TrainingConfig(objective="crps")


NOISE = StateNoise(velocity_std_mps=(0.02, 0.02, 0.02), omega_std_radps=(0.2, 0.2, 0.2),
                   velocity_bias_mps=(0.0, 0.0, 0.0), omega_bias_radps=(0.0, 0.0, 0.0),
                   n_recordings=3)


def _train(out: Path, workers: int = 1, **changes) -> tuple[ResidualModel, dict]:
    tosses = load_trajectories(BUNDLED)
    ids = sorted(tosses)
    config = TrainingConfig(**{"budget": 8, "batch_size": 4, "validate_every": 4,
                               "hidden": (3,), "objective": "energy", "samples": 4,
                               "sigma": 0.5, **changes})
    return train_residual("cube", {k: tosses[k] for k in ids[:3]},
                          {k: tosses[k] for k in ids[3:5]}, out, params=EngineParams(),
                          substeps=1, config=config, n_workers=workers, state_noise=NOISE)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("energy") / "model"
    return (out, *_train(out))


def test_energy_training_keeps_the_trained_start_width_and_records_its_scores(trained):
    out, model, figures = trained
    assert figures["objective"] == "energy"
    assert model.state_noise is not None
    assert model.state_noise.factor == pytest.approx(figures["state_noise_factor"])
    assert model.state_noise.velocity_std_mps == NOISE.velocity_std_mps
    # the chosen candidate is never worse on validation than the starting point
    assert figures["validation_energy_score_m"] <= figures["start_validation_energy_score_m"]
    saved = ResidualModel.load(out)
    assert saved.state_noise.factor == pytest.approx(model.state_noise.factor)
    assert params_sha256(saved.policy) == figures["params_sha256"]
    config = json.loads((out / "model.json").read_text())["info"]["config"]
    assert config["objective"] == "energy" and config["samples"] == 4


def test_energy_training_is_the_same_on_two_workers(trained, tmp_path):
    _, model, figures = trained
    other_model, other = _train(tmp_path / "two", 2)
    assert other["params_sha256"] == figures["params_sha256"]
    assert other["validation_energy_score_m"] == figures["validation_energy_score_m"]
    assert other_model.state_noise.factor == model.state_noise.factor


def test_the_loss_is_deterministic_and_punishes_a_start_far_too_wide():
    """Common random numbers: the same θ scores the same in any batch position; a start
    width 20 times the estimate scores worse than the estimate's on these tosses."""
    from residualsim.residual.energy_loss import EnergyLoss
    from residualsim.residual.train import scaled_policy, split_items
    from residualsim.sim.pool import engine_workers
    from residualsim.sim.rollout import recording_settings
    from residualsim.sim.scenes import make_scene

    tosses = load_trajectories(BUNDLED)
    train = {k: tosses[k] for k in sorted(tosses)[:4]}
    config = TrainingConfig(objective="energy", samples=4, hidden=(3,))
    settings = recording_settings("cube", train, 1)
    with engine_workers("cube", split_items("cube", train, {}), 1, settings) as workers:
        policy = scaled_policy(workers, "cube", EngineParams(), config)
        loss = EnergyLoss(workers, policy, EngineParams(), make_scene("cube").radius_of_gyration_m,
                          config, state_noise=NOISE)
        start = loss.start(policy.get_flat())
        wide = start.copy()
        wide[-1] = math.log(20.0)
        values = loss(np.stack([start, wide, start]))
    assert values[0] == values[2]
    assert values[1] > values[0]
