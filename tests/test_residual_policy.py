"""The residual policy: torch network, its numpy twin, flat parameters, scaling and files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from residualsim.sim.contact import contact_features, contact_model, unpack_features
from residualsim.errors import DataError, ParameterError
from residualsim.residual.policy import INITIAL_SCALE, NumpyPolicy, ResidualPolicy


def _random_policy(planar: bool = False, seed: int = 0, weight_scale: float = 0.5,
                   **kwargs) -> tuple[ResidualPolicy, np.ndarray]:
    """A policy with non-trivial scaling and random weights; returns it and test features."""
    rng = np.random.default_rng(seed)
    policy = ResidualPolicy.for_scene(planar, seed=seed, **kwargs)
    features = rng.normal(size=(64, policy.n_features)) * rng.uniform(0.5, 3.0,
                                                                       policy.n_features)
    features += rng.normal(size=policy.n_features)
    impulses = rng.normal(size=(64, policy.n_outputs)) * 0.05
    policy.fit_scaling(features, impulses)
    policy.set_flat(rng.normal(0.0, weight_scale, policy.n_parameters))
    return policy, features


def _spd(rng: np.random.Generator, k: int) -> np.ndarray:
    a = rng.normal(size=(k, k))
    return a @ a.T + k * np.eye(k)


# --- architecture and the fresh policy -------------------------------------------------------
def test_sizes_for_3d_and_planar_scenes():
    cube = ResidualPolicy.for_scene(False)
    planar = ResidualPolicy.for_scene(True)
    assert (cube.n_features, cube.n_outputs) == (9, 3)
    assert (planar.n_features, planar.n_outputs) == (5, 2)
    # 9 -> 16 tanh -> K (1 + 2 k) head with K = 2, k = 3
    assert cube.n_parameters == (9 * 16 + 16) + (16 * 14 + 14)
    assert planar.n_parameters == (5 * 16 + 16) + (16 * 10 + 10)
    assert cube.get_flat().shape == (cube.n_parameters,)


@pytest.mark.parametrize("kwargs", [{"n_components": 0}, {"n_features": 0},
                                    {"hidden": (16, 0)}, {"n_outputs": 1.5}])
def test_bad_architecture_is_refused(kwargs):
    with pytest.raises(ParameterError):
        ResidualPolicy(**kwargs)


@pytest.mark.parametrize("planar", [False, True])
def test_fresh_policy_predicts_no_correction(planar):
    policy = ResidualPolicy.for_scene(planar, seed=4)
    rng = np.random.default_rng(1)
    features = rng.normal(size=(20, policy.n_features)) * 5.0
    np.testing.assert_array_equal(policy.mean(features), np.zeros((20, policy.n_outputs)))
    fast = policy.numpy()
    for x in features[:5]:
        np.testing.assert_array_equal(fast.mean(x), np.zeros(policy.n_outputs))
        weights, means, scales = fast.components(x)
        np.testing.assert_allclose(weights, np.full(policy.n_components,
                                                    1.0 / policy.n_components))
        np.testing.assert_array_equal(means, 0.0)
        np.testing.assert_allclose(scales, INITIAL_SCALE, rtol=1e-6)


def test_initial_weights_depend_on_the_seed_only():
    a, b, c = ResidualPolicy(seed=7), ResidualPolicy(seed=7), ResidualPolicy(seed=8)
    np.testing.assert_array_equal(a.get_flat(), b.get_flat())
    assert not np.array_equal(a.get_flat(), c.get_flat())
    # the global torch generator is left alone
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    ResidualPolicy(seed=9)
    torch.testing.assert_close(torch.rand(3), expected)


# --- numpy twin of the network -------------------------------------------------------------
@pytest.mark.parametrize("planar", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_numpy_mean_matches_torch_mean(planar, seed):
    policy, features = _random_policy(planar, seed, n_components=3, hidden=(16, 8))
    torch_mean = policy.mean(features)
    assert torch_mean.dtype == np.float64 and torch_mean.shape == (64, policy.n_outputs)
    assert np.abs(torch_mean).max() > 1e-3 * policy.impulse_scale_ns  # not trivially zero
    fast = policy.numpy()
    assert isinstance(fast, NumpyPolicy)
    numpy_mean = np.array([fast.mean(x) for x in features])
    np.testing.assert_allclose(numpy_mean, torch_mean, rtol=1e-5,
                               atol=1e-5 * policy.impulse_scale_ns)


def test_numpy_components_match_the_torch_distribution():
    policy, features = _random_policy(False, 5)
    distribution = policy.distribution(features[:8])
    probs = distribution.mixture_distribution.probs.detach().numpy()
    means = distribution.component_distribution.base_dist.loc.detach().numpy()
    scales = distribution.component_distribution.base_dist.scale.detach().numpy()
    fast = policy.numpy()
    for i, x in enumerate(features[:8]):
        w, mu, sigma = fast.components(x)
        np.testing.assert_allclose(w, probs[i], rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(mu, means[i], rtol=1e-5, atol=1e-6 * policy.impulse_scale_ns)
        np.testing.assert_allclose(sigma, scales[i], rtol=1e-5)
        assert np.isclose(w.sum(), 1.0) and (sigma > 0).all()


def test_numpy_policy_is_a_snapshot():
    policy, features = _random_policy(False, 3)
    fast = policy.numpy()
    before = fast.mean(features[0])
    policy.set_flat(np.zeros(policy.n_parameters))
    policy.feature_mean[:] = 100.0
    np.testing.assert_array_equal(fast.mean(features[0]), before)


def test_numpy_samples_follow_the_mixture():
    policy, features = _random_policy(False, 11, weight_scale=0.8)
    x = features[3]
    fast = policy.numpy()
    weights, means, scales = fast.components(x)
    assert weights.min() > 0.05  # both components matter for this check
    rng = np.random.default_rng(0)
    draws = np.array([fast.sample(x, rng) for _ in range(4000)])
    mixture_mean = weights @ means
    second = weights @ (scales**2 + means**2)
    mixture_std = np.sqrt(second - mixture_mean**2)
    standard_error = mixture_std / np.sqrt(len(draws))
    assert np.all(np.abs(draws.mean(axis=0) - mixture_mean) < 4.5 * standard_error)
    np.testing.assert_allclose(draws.std(axis=0), mixture_std, rtol=0.08)
    np.testing.assert_allclose(draws.mean(axis=0), policy.mean(x[None])[0],
                               atol=4.5 * standard_error.max())
    log_prob = policy.log_prob(np.repeat(x[None], len(draws), axis=0), draws)
    assert log_prob.shape == (4000,) and np.isfinite(log_prob).all()
    # far from the mixture the density is much lower than at the draws
    far = policy.log_prob(x[None], (mixture_mean + 50 * mixture_std)[None])
    assert far[0] < log_prob.min()


def test_spread_scales_the_deviation_from_the_chosen_component_only():
    policy, features = _random_policy(False, 11, weight_scale=0.8)
    x = features[3]
    _, means, _ = policy.numpy().components(x)
    draws = {}
    for spread in (0.0, 1.0, 2.5):
        rng = np.random.default_rng(9)
        draws[spread] = np.array([policy.numpy(spread).sample(x, rng) for _ in range(50)])
    # same random numbers: the same component, the deviation from its mean scaled
    at_means = draws[0.0]
    assert all(any(np.allclose(row, m) for m in means) for row in at_means)
    np.testing.assert_allclose(draws[2.5] - at_means, 2.5 * (draws[1.0] - at_means),
                               rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(policy.numpy(2.5).mean(x), policy.numpy().mean(x))


def test_sampling_is_reproducible_and_uses_fixed_random_numbers():
    policy, features = _random_policy(False, 2)
    fast = policy.numpy()
    a = policy.sample(features[:10], 42)
    b = policy.sample(features[:10], np.random.default_rng(42))
    np.testing.assert_array_equal(a, b)
    assert a.shape == (10, 3)
    assert not np.array_equal(a, policy.sample(features[:10], 43))
    # one uniform and k normals per draw, whatever the weights
    rng = np.random.default_rng(5)
    fast.sample(features[0], rng)
    reference = np.random.default_rng(5)
    reference.random()
    reference.standard_normal(3)
    assert rng.random() == reference.random()


# --- flat parameters ------------------------------------------------------------------------
def test_flat_round_trip_is_exact():
    policy, features = _random_policy(False, 0)
    theta = policy.get_flat()
    assert theta.dtype == np.float64
    other = ResidualPolicy(seed=99).fit_scaling(features, np.ones((64, 3)))
    other.feature_mean, other.feature_std = policy.feature_mean, policy.feature_std
    other.impulse_scale_ns = policy.impulse_scale_ns
    other.set_flat(theta)
    np.testing.assert_array_equal(other.get_flat(), theta)
    np.testing.assert_array_equal(other.mean(features), policy.mean(features))
    # get_flat returns a copy
    theta[:] = 0.0
    assert np.abs(policy.get_flat()).max() > 0


def test_set_flat_keeps_float32_and_does_not_alias_its_input():
    policy = ResidualPolicy()
    theta = np.random.default_rng(0).normal(size=policy.n_parameters)  # float64
    assert policy.set_flat(theta) is policy
    for parameter in policy.network.parameters():
        assert parameter.dtype == torch.float32
    np.testing.assert_array_equal(policy.get_flat(), theta.astype(np.float32).astype(np.float64))
    theta[:] = 7.0
    assert not np.any(policy.get_flat() == 7.0)
    # still usable in float32
    out = policy.mean(np.zeros((2, 9)))
    assert out.shape == (2, 3) and np.isfinite(out).all()


@pytest.mark.parametrize("make", [lambda n: np.zeros(n - 1), lambda n: np.zeros(n + 1),
                                  lambda n: np.zeros((1, n)), lambda n: np.zeros(0)],
                         ids=["short", "long", "2d", "empty"])
def test_set_flat_rejects_the_wrong_length(make):
    policy, _ = _random_policy(False, 0)
    before = policy.get_flat()
    with pytest.raises(ParameterError, match=str(policy.n_parameters)):
        policy.set_flat(make(policy.n_parameters))
    np.testing.assert_array_equal(policy.get_flat(), before)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_set_flat_rejects_non_finite_values(bad):
    policy, _ = _random_policy(False, 0)
    before = policy.get_flat()
    theta = before.copy()
    theta[17] = bad
    with pytest.raises(ParameterError, match="NaN or inf"):
        policy.set_flat(theta)
    np.testing.assert_array_equal(policy.get_flat(), before)


# --- scaling --------------------------------------------------------------------------------
def test_fit_scaling_sets_mean_spread_and_impulse_unit():
    rng = np.random.default_rng(3)
    features = rng.normal(size=(50, 9)) * 2.0 + 5.0
    features[:, 4] = 1.25  # a constant column keeps unit spread
    impulses = rng.normal(size=(50, 3)) * 0.02
    policy = ResidualPolicy()
    assert policy.fit_scaling(features, impulses) is policy
    np.testing.assert_allclose(policy.feature_mean, features.mean(axis=0))
    expected_std = features.std(axis=0)
    expected_std[4] = 1.0
    np.testing.assert_allclose(policy.feature_std, expected_std)
    assert policy.impulse_scale_ns == pytest.approx(np.sqrt(np.mean(np.sum(impulses**2, 1))))
    # the unit scales the output: same weights, doubled unit -> doubled mean
    policy.set_flat(rng.normal(size=policy.n_parameters) * 0.3)
    mean = policy.mean(features[:5])
    policy.impulse_scale_ns *= 2.0
    np.testing.assert_allclose(policy.mean(features[:5]), 2.0 * mean, rtol=1e-6)


def test_fit_scaling_with_zero_impulses_keeps_a_unit_of_one():
    policy = ResidualPolicy().fit_scaling(np.random.default_rng(0).normal(size=(5, 9)),
                                          np.zeros((5, 3)))
    assert policy.impulse_scale_ns == 1.0


@pytest.mark.parametrize("where", ["features", "impulses"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_fit_scaling_rejects_non_finite_input(where, bad):
    rng = np.random.default_rng(0)
    features, impulses = rng.normal(size=(10, 9)), rng.normal(size=(10, 3))
    (features if where == "features" else impulses)[2, 1] = bad
    policy = ResidualPolicy()
    with pytest.raises(DataError, match="NaN or inf"):
        policy.fit_scaling(features, impulses)
    np.testing.assert_array_equal(policy.feature_mean, np.zeros(9))
    np.testing.assert_array_equal(policy.feature_std, np.ones(9))
    assert policy.impulse_scale_ns == 1.0


@pytest.mark.parametrize("shape", [(1, 9), (10, 5), (10,)])
def test_fit_scaling_rejects_too_few_or_wrong_width_rows(shape):
    with pytest.raises(DataError, match="at least 2"):
        ResidualPolicy().fit_scaling(np.ones(shape), np.ones((10, 3)))


def test_features_of_the_wrong_width_are_refused():
    with pytest.raises(ParameterError, match="9 columns"):
        ResidualPolicy().mean(np.zeros((3, 5)))


# --- files ----------------------------------------------------------------------------------
@pytest.mark.parametrize("planar", [False, True])
def test_save_load_round_trip(tmp_path, planar):
    policy, features = _random_policy(planar, 6, n_components=3, hidden=(8, 6))
    policy.save(tmp_path / "model")
    assert {p.name for p in (tmp_path / "model").iterdir()} == {"policy.json", "policy.npz"}
    config = json.loads((tmp_path / "model" / "policy.json").read_text())
    assert config["format"] == "residualsim.policy/1"
    assert config["n_parameters"] == policy.n_parameters and config["hidden"] == [8, 6]
    loaded = ResidualPolicy.load(tmp_path / "model")
    assert (loaded.n_features, loaded.n_outputs, loaded.n_components, loaded.hidden) == \
        (policy.n_features, policy.n_outputs, 3, (8, 6))
    np.testing.assert_array_equal(loaded.get_flat(), policy.get_flat())
    np.testing.assert_array_equal(loaded.feature_mean, policy.feature_mean)
    np.testing.assert_array_equal(loaded.feature_std, policy.feature_std)
    assert loaded.impulse_scale_ns == policy.impulse_scale_ns
    for parameter in loaded.network.parameters():
        assert parameter.dtype == torch.float32
    fast, fast_loaded = policy.numpy(), loaded.numpy()
    for x in features[:10]:
        np.testing.assert_array_equal(fast_loaded.mean(x), fast.mean(x))
        for a, b in zip(fast_loaded.components(x), fast.components(x)):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(loaded.mean(features), policy.mean(features))


@pytest.fixture
def saved(tmp_path) -> Path:
    policy, _ = _random_policy(False, 1)
    policy.save(tmp_path / "p")
    return tmp_path / "p"


def test_missing_policy_json_names_it(saved):
    (saved / "policy.json").unlink()
    with pytest.raises(DataError, match="policy.json"):
        ResidualPolicy.load(saved)


def test_missing_weights_name_them(saved):
    (saved / "policy.npz").unlink()
    with pytest.raises(DataError, match="policy.npz"):
        ResidualPolicy.load(saved)


def test_unreadable_policy_json_names_it(saved):
    (saved / "policy.json").write_text("{not json")
    with pytest.raises(DataError, match="policy.json"):
        ResidualPolicy.load(saved)


def test_policy_json_of_another_format_is_refused(saved):
    config = json.loads((saved / "policy.json").read_text())
    config["format"] = "something/2"
    (saved / "policy.json").write_text(json.dumps(config))
    with pytest.raises(DataError, match="not a residualsim policy"):
        ResidualPolicy.load(saved)


def test_weights_of_another_architecture_are_refused(saved):
    config = json.loads((saved / "policy.json").read_text())
    config["hidden"] = [12]
    (saved / "policy.json").write_text(json.dumps(config))
    with pytest.raises(DataError, match="policy.npz"):
        ResidualPolicy.load(saved)


def test_non_finite_weights_are_refused(saved):
    with np.load(saved / "policy.npz") as archive:
        arrays = {k: archive[k].copy() for k in archive.files}
    arrays["head.bias"][0] = np.nan
    np.savez(saved / "policy.npz", **arrays)
    with pytest.raises(DataError, match="NaN or inf"):
        ResidualPolicy.load(saved)


def test_truncated_weights_name_the_file(saved):
    content = (saved / "policy.npz").read_bytes()
    (saved / "policy.npz").write_bytes(content[: len(content) // 2])
    with pytest.raises(DataError, match="policy.npz"):
        ResidualPolicy.load(saved)


def test_empty_weights_file_names_the_file(saved):
    (saved / "policy.npz").write_bytes(b"")
    with pytest.raises(DataError, match="policy.npz"):
        ResidualPolicy.load(saved)


def test_policy_json_that_is_not_an_object_is_refused(saved):
    (saved / "policy.json").write_text("[1, 2, 3]")
    with pytest.raises(DataError, match="policy"):
        ResidualPolicy.load(saved)


# --- contact features -----------------------------------------------------------------------
@pytest.mark.parametrize("k", [3, 2])
def test_unpack_features_inverts_contact_features(k):
    rng = np.random.default_rng(k)
    inertia = np.array([_spd(rng, k) for _ in range(7)])
    velocity = rng.normal(size=(7, k))
    features = np.array([contact_features(m, v) for m, v in zip(inertia, velocity)])
    assert features.shape == (7, 9 if k == 3 else 5)
    unpacked_m, unpacked_v = unpack_features(features)
    np.testing.assert_array_equal(unpacked_m, inertia)
    np.testing.assert_array_equal(unpacked_v, velocity)
    single_m, single_v = unpack_features(features[0])
    np.testing.assert_array_equal(single_m, inertia[0])
    np.testing.assert_array_equal(single_v, velocity[0])
    # and back again
    np.testing.assert_array_equal(contact_features(single_m, single_v), features[0])


@pytest.mark.parametrize("planar", [False, True])
def test_unpack_features_of_a_contact_model(planar):
    rng = np.random.default_rng(0)
    from residualsim.sim.contact import free_body_mass_matrix, free_body_point_jacobian

    mass = free_body_mass_matrix(0.37, _spd(rng, 3) * 1e-3)
    point = np.array([0.03, -0.05, 0.0]) if planar else rng.normal(size=3) * 0.05
    qdot = rng.normal(size=6)
    if planar:
        qdot[[2, 3, 4]] = 0.0
    model = contact_model(mass, free_body_point_jacobian(point), qdot, point,
                          np.array([0.1, 1.0, 0.0]) if planar else np.array([0.1, 0.2, 1.0]),
                          planar=planar)
    inertia, velocity = unpack_features(model.features)
    np.testing.assert_allclose(inertia, model.effective_inertia, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(velocity, model.velocity)


@pytest.mark.parametrize("width", [4, 6, 10])
def test_unpack_features_refuses_other_widths(width):
    with pytest.raises(ValueError, match="9 \\(3D\\) or 5"):
        unpack_features(np.zeros(width))


@pytest.mark.parametrize("options, words", [
    ({"hidden": (100000,)}, "about 2700014 network parameters"),
    ({"hidden": (64, 64)}, "at most 5000"),
    ({"hidden": (4, 0)}, "hidden sizes must be integers >= 1"),
    ({"rotation_weight": float("inf")}, "rotation_weight must be finite"),
    ({"sigma": float("nan")}, "sigma must be finite and positive"),
])
def test_training_config_refuses_networks_the_search_cannot_hold(options, words):
    """--hidden 100000 asked numpy for 41.9 TiB (CMA's covariance over the weights) and
    --rotation-weight inf trained on a loss of inf: refused when the config is made."""
    from residualsim.residual.train import TrainingConfig

    with pytest.raises(ParameterError, match=words):
        TrainingConfig(**options)
    TrainingConfig(hidden=(64,))  # 1742 parameters: still allowed
