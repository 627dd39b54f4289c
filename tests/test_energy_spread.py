"""``train --objective energy --energy-params spread`` and ``train --init``: θ holds only
the mixture's scale and logit rows (and the start's width), so candidates move the sampled
spread and never the means; a start can be another model's network."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from residualsim.data import load_trajectories
from residualsim.errors import ParameterError
from residualsim.residual.energy_loss import EnergyLoss
from residualsim.residual.policy import ResidualPolicy
from residualsim.residual.state_noise import StateNoise
from residualsim.residual.train import TrainingConfig, train_residual
from residualsim.sim.scenes import EngineParams

BUNDLED = Path(__file__).resolve().parents[1] / "data" / "samples" / "cube-synthetic"
NOISE = StateNoise(velocity_std_mps=(0.02, 0.02, 0.02), omega_std_radps=(0.2, 0.2, 0.2),
                   velocity_bias_mps=(0.0, 0.0, 0.0), omega_bias_radps=(0.0, 0.0, 0.0),
                   n_recordings=3)
SPREAD = ("logits", "scales")


def _random_network(seed: int = 1, size: float = 0.5) -> ResidualPolicy:
    """A 3D policy (hidden 6, 2 components) with every weight random: components with
    different, non-zero means."""
    policy = ResidualPolicy.for_scene(False, hidden=(6,))
    rng = np.random.default_rng(seed)
    return policy.set_flat(rng.normal(0.0, size, policy.n_parameters))


def _loss(policy: ResidualPolicy, free) -> tuple[EnergyLoss, np.ndarray]:
    """An energy loss (no workers: only θ's mapping is used) and its starting θ."""
    config = TrainingConfig(objective="energy", hidden=(6,),
                            energy_params="all" if free is None else "spread")
    loss = EnergyLoss(None, policy, EngineParams(), 0.04, config, state_noise=NOISE, free=free)
    return loss, loss.start(policy.get_flat())


def test_flat_indices_are_the_head_rows_of_the_chosen_outputs():
    policy = _random_network()
    k, d, width = 2, 3, 6
    free = policy.flat_indices(SPREAD)
    assert len(free) == (k + k * d) * (width + 1) == 56
    # only head entries, and changing them changes exactly the logit and scale outputs
    n_body = sum(p.numel() for p in policy.network.body.parameters())
    assert free.min() >= n_body
    theta = policy.get_flat()
    x = torch.randn(20, 9)
    before = [t.detach().clone() for t in policy.network(x)]
    theta[free] += 0.3
    after = policy.set_flat(theta).network(x)
    assert torch.equal(before[1], after[1])  # means
    assert not torch.allclose(before[0], after[0]) and not torch.allclose(before[2], after[2])
    with pytest.raises(ParameterError, match="unknown head outputs"):
        policy.flat_indices(("variances",))


def test_spread_candidates_keep_the_component_means_for_any_features():
    """Random starts and random candidates: the components' means are those of the start,
    their scales and weights are not; with every weight free the means move."""
    rng = np.random.default_rng(0)
    features = rng.normal(0.0, 1.0, (200, 9))
    start = _random_network().numpy()
    _, means0, scales0 = start.components(features)
    weights0 = start.components(features)[0]
    loss, theta0 = _loss(_random_network(), _random_network().flat_indices(SPREAD))
    assert theta0.shape == (57,)  # 56 head entries, then the log factor
    for _ in range(5):
        theta = theta0 + rng.normal(0.0, 0.5, theta0.shape)
        weights, means, scales = loss.rollout_policy(theta).components(features)
        np.testing.assert_array_equal(means, means0)
        assert not np.allclose(scales, scales0) and not np.allclose(weights, weights0)
        assert loss.trained_state_noise(theta).factor == pytest.approx(math.exp(theta[-1]))
    everything, theta_all = _loss(_random_network(), None)
    moved = everything.rollout_policy(theta_all + 0.1).components(features)[1]
    assert not np.allclose(moved, means0)


def test_spread_candidates_keep_the_mean_residual_and_change_the_sampled_spread():
    """From a fresh network (zero means, as the shipped cube model's): the mixture's mean
    is zero for every candidate while the drawn impulses' spread follows the candidate."""
    policy = ResidualPolicy.for_scene(False, hidden=(6,))
    loss, theta0 = _loss(policy, policy.flat_indices(SPREAD))
    rng = np.random.default_rng(2)
    features = rng.normal(0.0, 1.0, (50, 9))
    x = features[0]
    spreads = []
    for shift in (0.0, 1.0, -1.0):
        theta = theta0 + rng.normal(0.0, 0.3, theta0.shape) * (shift != 0.0)
        # shift every head scale row's bias (θ holds them in head order: logits, scales)
        theta[-1 - 6:-1] += shift
        fast = loss.rollout_policy(theta)
        np.testing.assert_array_equal(fast.mean(features), 0.0)
        draws = np.array([fast.sample(x, np.random.default_rng(s)) for s in range(400)])
        spreads.append(draws.std(axis=0).mean())
    assert spreads[1] > 1.5 * spreads[0] > 1.5 ** 2 * spreads[2]


def test_a_folded_spread_samples_as_the_model_spread_does():
    """Inside the log-scale bounds (small weights: log-scales near 0) the two agree."""
    policy = _random_network(size=0.05)
    x = np.random.default_rng(4).normal(0.0, 1.0, 9)
    wide = policy.numpy(spread=2.0).sample(x, np.random.default_rng(5))
    folded = _random_network(size=0.05).fold_spread(2.0).numpy().sample(
        x, np.random.default_rng(5))
    np.testing.assert_allclose(folded, wide, rtol=1e-6)
    with pytest.raises(ParameterError, match="> 0"):
        policy.fold_spread(0.0)


def test_spread_only_needs_the_energy_objective_and_no_sustained_part():
    assert TrainingConfig(objective="energy", energy_params="spread").energy_params == "spread"
    with pytest.raises(ParameterError, match="objective 'energy'"):
        TrainingConfig(energy_params="spread")
    with pytest.raises(ParameterError, match="sustained"):
        TrainingConfig(objective="energy", energy_params="spread", sustained=True)
    with pytest.raises(ParameterError, match="energy_params"):
        TrainingConfig(objective="energy", energy_params="means")


def _train(out: Path, start: ResidualPolicy | None = None, **changes):
    tosses = load_trajectories(BUNDLED)
    ids = sorted(tosses)
    config = TrainingConfig(**{"budget": 8, "batch_size": 4, "validate_every": 4,
                               "hidden": (3,), "objective": "energy", "samples": 4,
                               "sigma": 0.5, "energy_params": "spread", **changes})
    return train_residual("cube", {k: tosses[k] for k in ids[:3]},
                          {k: tosses[k] for k in ids[3:5]}, out, params=EngineParams(),
                          substeps=1, config=config, state_noise=NOISE, start_policy=start)


def test_spread_training_from_a_start_keeps_its_means_and_hidden_layer(tmp_path):
    start = ResidualPolicy.for_scene(False, hidden=(3,))
    rng = np.random.default_rng(3)
    start.set_flat(rng.normal(0.0, 0.5, start.n_parameters))
    start.feature_std = np.full(9, 2.0)
    start.impulse_scale_ns = 0.3
    held = np.setdiff1d(np.arange(start.n_parameters), start.flat_indices(SPREAD))
    before = start.get_flat()
    model, figures = _train(tmp_path / "m", start=start, sigma=1.0, budget=12)
    assert figures["n_parameters"] == 2 * 4 * 4 + 1
    after = model.policy.get_flat()
    np.testing.assert_array_equal(after[held], before[held])
    assert model.policy.impulse_scale_ns == 0.3 and model.policy.feature_std[0] == 2.0
    config = json.loads((tmp_path / "m" / "model.json").read_text())["info"]["config"]
    assert config["energy_params"] == "spread"
    with pytest.raises(ParameterError, match="same --hidden"):
        _train(tmp_path / "other", start=start, hidden=(4,))


def test_a_start_model_gives_its_network_with_the_spread_folded_and_its_guard(tmp_path):
    from residualsim.errors import DataError
    from residualsim.residual.model import ResidualModel
    from residualsim.residual.train import _start_network
    from residualsim.sim.rollout import ContactGuard

    guard = ContactGuard(penetration_tolerance_m=0.0)
    network = _random_network(size=0.05)
    ResidualModel(scene="cube", policy=network, params=EngineParams(), dt_s=0.01, substeps=1,
                  guard=guard, spread=2.0).save(tmp_path / "m")
    policy, found = _start_network(tmp_path / "m", "cube", 1)
    assert found == guard
    x = np.random.default_rng(6).normal(0.0, 1.0, 9)
    np.testing.assert_allclose(policy.numpy().sample(x, np.random.default_rng(7)),
                               network.numpy(2.0).sample(x, np.random.default_rng(7)),
                               rtol=1e-6)
    with pytest.raises(DataError, match="substeps"):
        _start_network(tmp_path / "m", "cube", 10)
