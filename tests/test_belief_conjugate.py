"""The conjugate belief step (residualsim.belief.conjugate), Runnalls' reduction and the energy
distance: closed forms for the linear-Gaussian case, then the shipped cube model against a
particle filter on a synthetic toss.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from residualsim.belief.conjugate import (DRAWS, _guarded_impulses, component_kernels,
                                          sigma_points, silverman_bandwidth, stratified_draws,
                                          velocity_coordinates)
from residualsim.belief.distance import belief_distance, energy_distance
from residualsim.belief.propagation import GaussianMixtureBelief, StateTangent, propagate_belief
from residualsim.belief.reduction import (em_refine, kmeans_start, merge_components,
                                          mixture_bic,
                                          mixture_log_density, per_draw_moments,
                                          runnalls_reduce, systematic_resample)
from residualsim.belief.simulator import INITIAL_STD, toss_state
from residualsim.errors import ParameterError
from residualsim.residual.model import ResidualModel

MODEL_DIR = Path(__file__).resolve().parents[1] / "data" / "pretrained" / "cube-contactnets"


def _spd(d: int, seed: int) -> np.ndarray:
    a = np.random.default_rng(seed).normal(size=(d, d))
    return a @ a.T / d + 0.1 * np.eye(d)


# --- sigma points -------------------------------------------------------------------------------
@pytest.mark.parametrize("kappa,rotations", [(0.0, 0), (0.0, 1), (2.0, 3)])
def test_sigma_points_carry_the_mean_and_covariance(kappa, rotations):
    mean, cov = np.arange(5.0), _spd(5, 0)
    points, weights = sigma_points(mean, cov, kappa, rotations)
    assert len(points) == 2 * 5 * max(rotations, 1) + (kappa > 0)
    assert (weights > 0).all() and weights.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(weights @ points, mean, atol=1e-12)
    spread = points - mean
    np.testing.assert_allclose(np.einsum("n,ni,nj->ij", weights, spread, spread), cov,
                               atol=1e-12)


def test_rotated_sigma_points_sit_about_one_std_out_in_every_coordinate():
    points, _ = sigma_points(np.zeros(12), np.eye(12), rotations=1)
    assert np.median(np.abs(points)) < 1.5 < np.abs(points).max() <= np.sqrt(12)
    axis, _ = sigma_points(np.zeros(12), np.eye(12))
    assert np.allclose(np.sort(np.abs(axis), axis=1)[:, -1], np.sqrt(12))


def test_sigma_points_of_a_singular_covariance_and_bad_kappa():
    points, weights = sigma_points(np.zeros(3), np.diag([1.0, 0.0, 0.0]))
    np.testing.assert_allclose(points[:, 1:], 0.0, atol=1e-12)
    with pytest.raises(ParameterError):
        sigma_points(np.zeros(3), np.eye(3), kappa=-1.0)


# --- the linear-Gaussian case: the conjugate step is exact -------------------------------------
@pytest.mark.parametrize("bandwidth", [0.0, 0.6])
def test_linear_flight_and_affine_residual_give_the_closed_form(bandwidth):
    """Flight y = A s + c, impulse p | s ~ N(C s + e, S) entering through a constant D: the
    post-contact state is Gaussian with mean (A + D C) μ + c + D e and covariance
    (A + D C) Σ (A + D C)ᵀ + D S Dᵀ; the merged kernels must equal it."""
    rng = np.random.default_rng(3)
    d, k = 6, 3
    mu, sigma = rng.normal(size=d), _spd(d, 1)
    a, c = rng.normal(size=(d, d)), rng.normal(size=d)
    jump, gain, offset = rng.normal(size=(d, k)), rng.normal(size=(k, d)), rng.normal(size=k)
    s_cov = _spd(k, 2)
    points, weights = sigma_points(mu, sigma, rotations=1)
    n = len(points)
    kernels = component_kernels(
        weights, points @ a.T + c, np.repeat(jump[None], n, 0), np.ones((n, 1)),
        (points @ gain.T + offset)[:, None, :], np.repeat(s_cov[None, None], n, 0),
        bandwidth=bandwidth)
    assert len(kernels) == n
    mass, mean, cov = merge_components(*(np.array(x) for x in zip(*kernels)))
    total = a + jump @ gain
    assert mass == pytest.approx(1.0)
    np.testing.assert_allclose(mean, total @ mu + c + jump @ offset, atol=1e-10)
    np.testing.assert_allclose(cov, total @ sigma @ total.T + jump @ s_cov @ jump.T,
                               atol=1e-10)


def test_two_residual_components_and_removed_mass():
    """Constant residual weights w_j: component j is the closed form with offset e_j and mass
    w_j times the kept fraction."""
    rng = np.random.default_rng(4)
    d, k = 4, 2
    mu, sigma = rng.normal(size=d), _spd(d, 5)
    jump = rng.normal(size=(d, k))
    points, weights = sigma_points(mu, sigma)
    n = len(points)
    offsets = np.array([[1.0, 0.0], [0.0, -2.0]])
    s = np.array([np.eye(k) * 0.1, np.eye(k) * 0.3])
    kernels = component_kernels(weights, points, np.repeat(jump[None], n, 0),
                                np.tile([0.25, 0.75], (n, 1)), np.tile(offsets, (n, 1, 1)),
                                np.tile(s, (n, 1, 1, 1)), np.tile([1.0, 0.5], (n, 1)), 0.5)
    first, second = kernels[:n], kernels[n:]
    for part, w, e, cov in ((first, 0.25, offsets[0], s[0]), (second, 0.375, offsets[1], s[1])):
        mass, mean, merged = merge_components(*(np.array(x) for x in zip(*part)))
        assert mass == pytest.approx(w)
        np.testing.assert_allclose(mean, mu + jump @ e, atol=1e-10)
        np.testing.assert_allclose(merged, sigma + jump @ cov @ jump.T, atol=1e-10)


def test_silverman_bandwidth_and_bad_bandwidth():
    assert 0 < silverman_bandwidth(24, 12) < silverman_bandwidth(6, 12) < 1
    with pytest.raises(ParameterError):
        component_kernels(np.ones(1), np.zeros((1, 2)), np.zeros((1, 2, 1)), np.ones((1, 1)),
                          np.zeros((1, 1, 1)), np.zeros((1, 1, 1, 1)), bandwidth=1.0)


def test_velocity_coordinates_of_each_scene_kind():
    assert velocity_coordinates(StateTangent(True)).tolist() == [3, 4, 5]
    assert velocity_coordinates(StateTangent(False)).tolist() == list(range(6, 12))
    assert velocity_coordinates(StateTangent(False, n_joints=2)).tolist() == \
        [6, 7, 8, 9, 10, 11, 14, 15]


# --- feasibility of the residual impulse ------------------------------------------------------
def _event(velocity, inverse_inertia, budget_j, floor_mps):
    """An event whose one touching point is the contact itself (normal row 0)."""
    velocity, inverse_inertia = np.asarray(velocity, float), np.asarray(inverse_inertia, float)
    return (None, None, velocity, inverse_inertia, budget_j,
            (velocity[:1], inverse_inertia[:1], np.array([floor_mps], float)))


def test_truncation_keeps_the_share_that_gains_no_energy():
    """With a negligible effective inverse inertia the energy change is v·p: the kept share
    is Φ((budget − v·m) / (s |v|))."""
    from scipy.stats import norm

    draws = np.random.default_rng(0).standard_normal((20000, 3))
    event = _event([0.0, 1.0, 0.0], np.eye(3) * 1e-12, 0.05, -np.inf)
    kept, means, cov = _guarded_impulses(np.zeros((1, 3)), np.full((1, 3), 0.1), draws,
                                         event, "truncate")
    assert kept[0] == pytest.approx(norm.cdf(0.05 / 0.1), abs=0.01)
    np.testing.assert_allclose(cov[0], 0.01 * np.eye(3))


def test_clamping_scales_impulses_within_the_energy_budget_and_keeps_mass():
    """A contact sliding at 1 m/s along t1: impulses along +t1 add energy and are clamped,
    so the clamped mean moves against the motion and the spread shrinks; no mass removed."""
    draws = np.random.default_rng(1).standard_normal((4000, 3))
    event = _event([0.0, 1.0, 0.0], np.eye(3) * 2.0, 0.0, -np.inf)
    kept, means, cov = _guarded_impulses(np.zeros((1, 3)), np.full((1, 3), 0.1), draws,
                                         event, "clamp")
    assert kept[0] == 1.0
    assert means[0, 1] < -0.02  # only the impulses against the sliding survive unscaled
    assert cov[0, 1, 1] < 0.01
    scaled = _guarded_impulses(np.zeros((1, 3)), np.zeros((1, 3)), draws[:1],
                               _event([0, 1, 0], np.eye(3), 0.0, -np.inf), "clamp")
    np.testing.assert_allclose(scaled[1], 0.0)


def test_clamping_respects_the_normal_velocity_floor():
    half = np.random.default_rng(2).standard_normal((1000, 3))
    draws = np.vstack([half, -half])  # antithetic, as the step draws them
    event = _event([0.0, 0.0, 0.0], np.eye(3), 10.0, -0.05)  # energy no limit here
    _, means, cov = _guarded_impulses(np.array([[-0.2, 0.0, 0.0]]), np.full((1, 3), 0.05),
                                      draws, event, "clamp")
    assert means[0, 0] == pytest.approx(-0.05, abs=1e-3)  # pushed down at most to the floor


def test_where_the_guard_never_acts_the_gaussian_is_kept_exactly():
    """64 draws shared by every point: their sample moments would shift every point's
    impulse alike; unclamped, the residual's own Gaussian is returned."""
    draws = np.random.default_rng(3).standard_normal((64, 3))
    event = _event([0.0, 0.0, -1.0], np.eye(3), 1e6, -1e6)  # no limit binds
    means, std = np.array([[0.1, -0.2, 0.3], [0.0, 0.1, 0.0]]), np.full((2, 3), 0.05)
    kept, mean, cov = _guarded_impulses(means, std, np.vstack([draws, -draws]), event, "clamp")
    np.testing.assert_array_equal(kept, 1.0)
    np.testing.assert_array_equal(mean, means)
    np.testing.assert_allclose(cov, 0.0025 * np.eye(3)[None].repeat(2, 0), atol=1e-15)


def test_clamping_with_few_draws_matches_many():
    """The control variate: 128 antithetic draws give the clamped moments that 200 000 give
    (within a tenth of the impulse's std), a covariance that is positive semi-definite."""
    event = _event([0.0, 1.0, 0.0], np.eye(3) * 2.0, 0.0, -np.inf)
    args = np.array([[0.0, -0.05, 0.0]]), np.full((1, 3), 0.1)
    half = np.random.default_rng(4).standard_normal((64, 3))
    _, few_mean, few_cov = _guarded_impulses(*args, np.vstack([half, -half]), event, "clamp")
    many = np.random.default_rng(5).standard_normal((200000, 3))
    _, mean, cov = _guarded_impulses(*args, many, event, "clamp")
    np.testing.assert_allclose(few_mean, mean, atol=0.01)  # impulse std 0.1 N s
    np.testing.assert_allclose(few_cov, cov, atol=0.002)  # variance 0.01
    assert np.linalg.eigvalsh(few_cov[0]).min() >= 0


def test_every_touching_point_keeps_its_normal_velocity_floor():
    """Two touching points: the event's own is far from its floor, the second's normal
    velocity falls with +t1 impulses and binds."""
    draws = np.random.default_rng(6).standard_normal((4000, 3))
    velocity, inverse = np.zeros(3), np.eye(3)
    normal = np.array([0.0, 0.0])
    gain = np.array([[1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])
    event = (None, None, velocity, inverse, 10.0, (normal, gain, np.array([-1.0, -0.02])))
    _, means, _ = _guarded_impulses(np.array([[0.0, 0.2, 0.0]]), np.full((1, 3), 0.01),
                                    draws, event, "clamp")
    assert means[0, 1] == pytest.approx(0.02, abs=1e-3)  # capped at the second floor


# --- draws from a belief ------------------------------------------------------------------------
def test_stratified_draws_follow_the_weights_and_moments():
    mixture = GaussianMixtureBelief(np.array([0.7, 0.3]), np.array([[0.0] * 12, [1.0] * 12]),
                                    np.stack([np.eye(12) * 0.01, _spd(12, 5)]),
                                    StateTangent(False))
    groups = stratified_draws(mixture, 100, np.random.default_rng(0))
    assert [len(p) for p, _ in groups] == [70, 30]
    for (points, weights), mean, cov in zip(
            stratified_draws(mixture, 4096, np.random.default_rng(1)), mixture.means,
            mixture.covariances):
        assert weights.sum() == pytest.approx(1.0)
        std = np.sqrt(np.diag(cov))
        assert (np.abs(points.mean(axis=0) - mean) < 0.03 * std).all()
        np.testing.assert_allclose(np.cov(points.T), cov, atol=0.1 * std.max() ** 2)
    again = stratified_draws(mixture, 100, np.random.default_rng(0))
    for (a, _), (b, _) in zip(groups, again):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ParameterError):
        stratified_draws(mixture, 0, np.random.default_rng(0))


def test_moment_matched_draws_carry_each_component_exactly():
    """match_moments: a component with more than d + 1 draws gets its mean and covariance
    exactly (1/n normalisation, the draws' equal weights); fewer draws are left as drawn
    (unbiased: below)."""
    mixture = GaussianMixtureBelief(np.array([0.92, 0.08]), np.array([[0.0] * 12, [1.0] * 12]),
                                    np.stack([_spd(12, 3), _spd(12, 5)]), StateTangent(False))
    groups = stratified_draws(mixture, 100, np.random.default_rng(2), match_moments=True)
    (big, _), (small, _) = groups
    assert len(big) == 92 and len(small) == 8
    np.testing.assert_allclose(big.mean(axis=0), mixture.means[0], atol=1e-12)
    spread = big - big.mean(axis=0)
    np.testing.assert_allclose(spread.T @ spread / len(big), mixture.covariances[0], atol=1e-10)
    plain_small = stratified_draws(mixture, 100, np.random.default_rng(2))[1][0]
    np.testing.assert_array_equal(small, plain_small)
    plain = stratified_draws(mixture, 100, np.random.default_rng(2))[0][0]
    assert np.abs(plain.mean(axis=0) - mixture.means[0]).max() > 1e-3  # not by chance


def test_many_small_components_keep_their_spread():
    """A belief of 200 components and 200 draws (one each, as a belief without reduction
    gets): every draw a standard normal of its component, not its mean, with or without
    moment matching; over seeds the whitened draws have mean 0 and covariance I (centring
    would shrink them)."""
    rng = np.random.default_rng(5)
    k = 200
    covs = np.stack([_spd(12, s) for s in range(k)])
    mixture = GaussianMixtureBelief(np.full(k, 1 / k), rng.normal(size=(k, 12)), covs,
                                    StateTangent(False))
    roots = np.linalg.cholesky(covs)

    def whitened(groups):
        return np.vstack([np.linalg.solve(roots[j], (p - mixture.means[j]).T).T
                          for j, (p, _) in enumerate(groups) if len(p)])

    one = stratified_draws(mixture, k, np.random.default_rng(0), match_moments=True)
    assert [len(p) for p, _ in one] == [1] * k
    assert (np.abs(whitened(one)).max(axis=1) > 0.1).all()  # none at its mean
    for counts_per_component in (1, 3):
        z = np.vstack([whitened(stratified_draws(mixture, counts_per_component * k,
                                                 np.random.default_rng(s), match_moments=True))
                       for s in range(20)])
        assert np.abs(z.mean(axis=0)).max() < 0.05
        np.testing.assert_allclose(np.cov(z.T), np.eye(12), atol=0.06)


# --- no reduction: one Gaussian per draw ---------------------------------------------------------
def test_per_draw_moments_are_each_draws_weighted_moments():
    rng = np.random.default_rng(8)
    points = rng.normal(size=(60, 3))
    labels = np.repeat([5, 2, 9], 20)  # sorted order: 2, 5, 9
    mass = rng.uniform(0.5, 1.5, 60)
    w, m, c = per_draw_moments(mass, points, labels, floor=np.array([1e-3, 0.0, 0.0]))
    for row, label in enumerate((2, 5, 9)):
        part = labels == label
        _, mean, cov = merge_components(mass[part], points[part], np.zeros((20, 3, 3)))
        assert w[row] == pytest.approx(mass[part].sum() / mass.sum())
        np.testing.assert_allclose(m[row], mean, atol=1e-12)
        np.testing.assert_allclose(c[row], cov + np.diag([1e-3, 0.0, 0.0]), atol=1e-12)
    with pytest.raises(ParameterError):
        per_draw_moments(np.zeros(60), points, labels)


# --- EM on the kernels ---------------------------------------------------------------------------
def test_em_on_weighted_points_finds_the_clusters_and_their_masses():
    """covariances=None: weighted EM on points. Two clusters of 200 points each carrying
    masses 1:3 end as components of weights 0.25 / 0.75 at the weighted cluster moments,
    the same fit as with zero kernel covariances."""
    rng = np.random.default_rng(4)
    points = np.vstack([rng.normal(0.0, 0.2, (200, 3)), rng.normal(4.0, 0.5, (200, 3))])
    mass = np.r_[np.full(200, 1.0), np.full(200, 3.0)] * rng.uniform(0.5, 1.5, 400)
    start = (np.array([0.5, 0.5]), np.array([[1.0] * 3, [2.0] * 3]),
             np.repeat(np.eye(3)[None], 2, 0))
    w, m, c = em_refine(mass, points, None, start)
    share = mass / mass.sum()
    heavy, light = slice(200, 400), slice(0, 200)
    np.testing.assert_allclose(w, [share[heavy].sum(), share[light].sum()], atol=1e-6)
    for k, part in enumerate((heavy, light)):
        _, mean, cov = merge_components(mass[part], points[part], np.zeros((200, 3, 3)))
        np.testing.assert_allclose(m[k], mean, atol=1e-6)
        np.testing.assert_allclose(c[k], cov, atol=1e-6)
    again = em_refine(mass, points, np.zeros((400, 3, 3)), start)
    for a, b in zip((w, m, c), again):
        np.testing.assert_allclose(a, b, atol=1e-10)


def test_points_merge_and_start_as_kernels_of_zero_covariance():
    """covariances=None (points) in merge_components and kmeans_start: the same moments and
    the same start as zero kernel covariances, without building them."""
    rng = np.random.default_rng(5)
    points = np.vstack([rng.normal(0.0, 0.3, (150, 4)), rng.normal(2.0, 0.6, (50, 4))])
    mass = rng.uniform(0.2, 1.0, 200)
    zeros = np.zeros((200, 4, 4))
    for a, b in zip(merge_components(mass, points, None), merge_components(mass, points, zeros)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    for a, b in zip(kmeans_start((mass, points, None), 2, 3),
                    kmeans_start((mass, points, zeros), 2, 3)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_em_refine_finds_the_clusters_a_poor_start_misses():
    """Kernels in two clusters (3:1), start with both components mixed across them: EM ends
    with each component the moment match of one cluster; the mixture's mean is kept."""
    rng = np.random.default_rng(7)
    centres = np.vstack([rng.normal(0.0, 0.1, (30, 2)), rng.normal(3.0, 0.1, (10, 2))])
    covs = np.repeat((0.01 * np.eye(2))[None], 40, 0)
    weights = np.full(40, 1 / 40)
    start = (np.array([0.5, 0.5]), np.array([[1.0, 0.5], [2.0, 2.5]]),
             np.repeat(np.eye(2)[None], 2, 0))
    w, m, c = em_refine(weights, centres, covs, start)
    np.testing.assert_allclose(w, [0.75, 0.25], atol=1e-6)
    for k, part in enumerate((slice(0, 30), slice(30, 40))):
        _, mean, cov = merge_components(weights[part], centres[part], covs[part])
        np.testing.assert_allclose(m[k], mean, atol=1e-6)
        np.testing.assert_allclose(c[k], cov, atol=1e-6)
    np.testing.assert_allclose(w @ m, weights @ centres, atol=1e-12)


# --- choosing K and resampling -------------------------------------------------------------------
def test_mixture_log_density_and_bic_choose_the_number_of_clusters():
    """The log density is the mixture's (checked with scipy); BIC counted over 1000 data
    prefers two components for two separated clusters and one for a single Gaussian."""
    from scipy.stats import multivariate_normal

    rng = np.random.default_rng(3)
    cov = _spd(3, 1)
    fit = (np.array([0.3, 0.7]), np.array([[0.0] * 3, [1.0, 2.0, 3.0]]), np.array([cov, 2 * cov]))
    x = rng.normal(size=(5, 3))
    expected = np.log(0.3 * multivariate_normal(fit[1][0], cov).pdf(x)
                      + 0.7 * multivariate_normal(fit[1][1], 2 * cov).pdf(x))
    np.testing.assert_allclose(mixture_log_density(fit, x), expected, rtol=1e-10)
    one = rng.normal(size=(400, 3))
    two = np.vstack([one[:200], one[200:] + 6.0])
    weights = np.full(400, 1 / 400)
    for points, best in ((two, 2), (one, 1)):
        start = (np.array([0.5, 0.5]), points[[0, -1]], np.repeat(np.eye(3)[None], 2, 0))
        fits = {1: merge_components(weights, points, np.zeros((400, 3, 3))),
                2: em_refine(weights, points, None, start)}
        fits[1] = (np.ones(1), fits[1][1][None], fits[1][2][None])
        bic = {k: mixture_bic(f, weights, points, 1000) for k, f in fits.items()}
        assert min(bic, key=bic.get) == best


def test_systematic_resample_keeps_each_weight_within_one_draw():
    weights = np.random.default_rng(2).dirichlet(np.ones(50))
    chosen = systematic_resample(weights, 1000, np.random.default_rng(0))
    counts = np.bincount(chosen, minlength=50)
    assert counts.sum() == 1000 and (np.abs(counts - 1000 * weights) < 1.0 + 1e-9).all()


# --- Runnalls' reduction ----------------------------------------------------------------------
def test_runnalls_merges_the_closest_pair_and_preserves_the_moments():
    means = np.array([[0.0, 0.0], [0.01, 0.0], [5.0, 5.0]])
    covs = np.array([np.eye(2) * 0.1] * 3)
    weights = np.array([0.3, 0.3, 0.4])
    w, m, c = runnalls_reduce(weights, means, covs, 2)
    assert len(w) == 2
    np.testing.assert_allclose(sorted(w), [0.4, 0.6])
    np.testing.assert_allclose(m[np.argmax(w)], [0.005, 0.0])
    full = merge_components(weights, means, covs)
    once = merge_components(w, m, c)
    np.testing.assert_allclose(once[1], full[1], atol=1e-12)
    np.testing.assert_allclose(once[2], full[2], atol=1e-12)
    w1, m1, c1 = runnalls_reduce(weights, means, covs, 1)
    np.testing.assert_allclose(c1[0], full[2], atol=1e-12)
    with pytest.raises(ParameterError):
        runnalls_reduce(weights, means, covs, 0)


def test_runnalls_of_many_components_keeps_separated_clusters():
    rng = np.random.default_rng(6)
    centres = np.array([[0.0, 0.0, 0.0], [10.0, 0.0, 0.0], [0.0, 10.0, 0.0]])
    means = np.vstack([c + 0.1 * rng.normal(size=(40, 3)) for c in centres])
    covs = np.repeat(np.eye(3)[None] * 0.01, 120, 0)
    w, m, _ = runnalls_reduce(np.ones(120), means, covs, 3)
    np.testing.assert_allclose(w, [1 / 3] * 3)
    assert sorted(np.round(m[:, :2]).tolist()) == [[0, 0], [0, 10], [10, 0]]


# --- the energy distance ------------------------------------------------------------------------
def test_energy_distance_is_small_for_one_law_and_grows_with_a_shift():
    rng = np.random.default_rng(7)
    x, y = rng.normal(size=(800, 3)), rng.normal(size=(800, 3))
    same = energy_distance(x, y)
    assert same < 0.15
    assert energy_distance(x, y + [1.0, 0, 0]) > 4 * same
    with pytest.raises(ParameterError):
        energy_distance(x, y[:, :2])


def test_belief_distance_is_standardised():
    """Scaling one coordinate of both beliefs by 1000 (metres to millimetres) changes
    nothing: coordinates are divided by the reference's spread."""
    state = toss_state([0, 0, 0.3], [1, 0, 0, 0], [0.5, 0, -1], [0, 3, 0])
    a = GaussianMixtureBelief.gaussian(state, INITIAL_STD, planar=False)
    shifted = state.copy()
    shifted[7] += 0.02  # one velocity standard deviation
    b = GaussianMixtureBelief.gaussian(shifted, INITIAL_STD, planar=False)
    wide = INITIAL_STD.copy()
    wide[0] *= 1000
    a_wide = GaussianMixtureBelief.gaussian(state, wide, planar=False)
    b_wide = GaussianMixtureBelief.gaussian(shifted, wide, planar=False)
    assert belief_distance(a, b, 1000) == pytest.approx(belief_distance(a_wide, b_wide, 1000),
                                                      rel=0.05)
    assert belief_distance(a, a, 1000) < 0.6 * belief_distance(a, b, 1000)


def test_belief_distance_of_a_marginal_sees_only_its_coordinates():
    """A shift of one velocity standard deviation: the velocity marginal (6..11) sees it as
    the whole does, the pose marginal (0..5) not at all (its own sampling floor)."""
    state = toss_state([0, 0, 0.3], [1, 0, 0, 0], [0.5, 0, -1], [0, 3, 0])
    a = GaussianMixtureBelief.gaussian(state, INITIAL_STD, planar=False)
    shifted = state.copy()
    shifted[7] += 0.02
    b = GaussianMixtureBelief.gaussian(shifted, INITIAL_STD, planar=False)
    pose, velocity = np.arange(6), np.arange(6, 12)
    floor = belief_distance(a, a, 1000, coordinates=pose)
    assert belief_distance(a, b, 1000, coordinates=pose) < 1.5 * floor
    assert belief_distance(a, b, 1000, coordinates=velocity) > 2 * floor


# --- the cube through contact ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def model() -> ResidualModel:
    return ResidualModel.load(MODEL_DIR)


def _tilted_toss() -> np.ndarray:
    """Released 0.25 m up, turned 0.5 rad about (1, 1, 0): a corner lands first."""
    quat = Rotation.from_rotvec([0.35, 0.35, 0.0]).as_quat()[[3, 0, 1, 2]]
    return toss_state([0.0, 0.0, 0.25], quat, [0.3, 0.0, -1.0], [0.0, 0.0, 0.0])


@pytest.fixture(scope="module")
def initial() -> GaussianMixtureBelief:
    return GaussianMixtureBelief.gaussian(_tilted_toss(), INITIAL_STD, planar=False)


@pytest.fixture(scope="module")
def conjugate(model, initial) -> list:
    return propagate_belief(model, initial, n_events=2, seed=0, n_workers=1,
                            method="conjugate")


@pytest.mark.slow
def test_first_contact_agrees_with_a_large_particle_filter(model, initial, conjugate):
    """Against 400 particles: every tangent coordinate's mean within half the particle
    filter's standard deviation, spreads within a factor 1.5, with 150 rollouts."""
    particles = propagate_belief(model, initial, n_events=1, n_particles=400, seed=1,
                                 n_workers=2)[0]
    step = conjugate[0]
    assert step.n_drawn == DRAWS and step.method == "conjugate"
    rng = np.random.default_rng(0)
    reference = particles.belief.tangent
    ours = reference.to_tangent(step.belief.sample(4000, rng))
    theirs = reference.to_tangent(particles.belief.sample(4000, rng))
    spread = theirs.std(axis=0)
    assert (np.abs(ours.mean(axis=0) - theirs.mean(axis=0)) < 0.5 * spread).all()
    assert (ours.std(axis=0) < 1.5 * spread).all() and (ours.std(axis=0) > spread / 1.5).all()


def test_conjugate_steps_are_post_event_beliefs(conjugate):
    assert len(conjugate) == 2
    for step in conjugate:
        assert step.belief is not None and 1 <= step.belief.n_components <= 4
        np.linalg.cholesky(step.belief.covariances)  # positive definite: it can be sampled
        assert (step.particles[:, 2] < 0.1).all() and (step.elapsed_s > 0).all()
        assert 0.0 <= step.rejected_fraction <= 1.0
        assert step.summary()["method"] == "conjugate"
    assert conjugate[0].n_drawn == conjugate[1].n_drawn == DRAWS


def test_the_event_probe_records_the_engine_rollout_without_guard_work(model, initial):
    """The conjugate step's rollouts apply nothing at the event (``observes_only``): the
    same states, event features and contact model as a rollout whose policy gives a zero
    impulse through the guard, and the same verdict on the engine's own energy."""
    from residualsim.belief.conjugate_rollouts import EventProbe as _EventProbe
    from residualsim.belief.mixture import event_outcome
    from residualsim.sim.pool import EngineFactory
    from residualsim.sim.rollout import residual_rollout

    class ZeroPolicy(_EventProbe):
        observes_only = False

    engine = EngineFactory(model.scene, model.settings())()
    engine.set_params(model.params)
    policy = model.sampling_policy()
    for state in initial.sample(12, np.random.default_rng(2)):
        runs = [residual_rollout(engine, state, 400, kind(policy.n_outputs, policy.spin,
                                                            policy.contact_mode),
                                 None, model.guard, stop_after_events=1)
                for kind in (_EventProbe, ZeroPolicy)]
        assert runs[0].n_events == runs[1].n_events == 1
        np.testing.assert_array_equal(runs[0].states, runs[1].states)
        np.testing.assert_array_equal(runs[0].features, runs[1].features)
        np.testing.assert_array_equal(runs[0].contact_models[-1].mass_matrix,
                                      runs[1].contact_models[-1].mass_matrix)
        assert event_outcome(engine, runs[0], model.guard, 0.002) == \
            event_outcome(engine, runs[1], model.guard, 0.002)


def test_sigma_points_remain_an_option(model, initial):
    steps = propagate_belief(model, initial, n_events=2, seed=0, n_workers=1,
                             method="conjugate", draws=None)
    assert steps[0].n_drawn == 24  # 2d sigma points of the one initial component
    assert steps[1].n_drawn == 24 * steps[0].belief.n_components


def test_without_reduction_the_belief_keeps_one_gaussian_per_draw(model, initial):
    """max_components=None: one component per accepted draw ("samples": its guard-scaled
    impulse samples' moments; "kernels": its kernels merged), equal weights for the equal
    draws of one initial component; em_iterations=0: the k-means clusters, at most K."""
    for reduction in ("samples", "kernels"):
        step = propagate_belief(model, initial, n_events=1, seed=0, n_workers=1,
                                method="conjugate", draws=40, max_components=None,
                                reduction=reduction)[0]
        accepted = step.n_drawn - step.n_no_event - step.n_rejected_penetration - \
            step.n_rejected_energy
        assert accepted > 30 and step.belief.n_components == accepted == len(step.particles)
        np.testing.assert_allclose(step.belief.weights, 1 / accepted)
        np.linalg.cholesky(step.belief.covariances)
        gap = step.belief.tangent.to_tangent(step.particles) - step.belief.means
        spread = np.sqrt(np.diagonal(step.belief.covariances, axis1=1, axis2=2))
        assert np.median(np.abs(gap) / spread) < 1.0  # each near its own draw's centre
    clusters = propagate_belief(model, initial, n_events=1, seed=0, n_workers=1,
                                method="conjugate", draws=40, max_components=8,
                                em_iterations=0)[0]
    assert 1 <= clusters.belief.n_components <= 8
    with pytest.raises(ParameterError):
        propagate_belief(model, initial, n_events=1, method="conjugate", max_components=-1)


def test_refits_choose_at_most_k_components(model, initial):
    """refit "bic" (weighted EM for 1..K, BIC over refit_samples) and "resample" (the
    particle step's scikit-learn refit on a weighted resample) both give at most K
    positive-definite components; "resample-k" exactly K."""
    for refit, count in (("bic", None), ("resample", None), ("resample-k", 3)):
        step = propagate_belief(model, initial, n_events=1, seed=0, n_workers=1,
                                method="conjugate", draws=40, max_components=3,
                                refit=refit, refit_samples=300)[0]
        assert 1 <= step.belief.n_components <= 3
        assert count is None or step.belief.n_components == count
        np.linalg.cholesky(step.belief.covariances)
    for bad in (dict(refit="sklearn"), dict(refit_samples=1)):
        with pytest.raises(ParameterError):
            propagate_belief(model, initial, n_events=1, method="conjugate", **bad)


def test_sinking_mass_is_removed_and_no_event_mass_left_out(model, initial):
    """Zero penetration tolerance (the soft contact always sinks a little): every draw
    from the landing component (weight 0.7: 70 of 100) is removed; a second component thrown
    up from 0.5 m meets no event within 0.3 s and is left out, not counted as removed."""
    thrown = toss_state([0.0, 0.0, 0.5], [1, 0, 0, 0], [0.0, 0.0, 2.0], [0.0, 0.0, 0.0])
    mixture = GaussianMixtureBelief(
        np.array([0.7, 0.3]), np.vstack([initial.means[0],
                                         initial.tangent.to_tangent(thrown[None])[0]]),
        np.repeat(initial.covariances, 2, 0), initial.tangent)
    step = propagate_belief(model, mixture, n_events=1, seed=0, n_workers=1,
                            method="conjugate", horizon_s=0.3, penetration_tolerance_m=0.0,
                            draws=100)[0]
    assert step.n_drawn == 100
    assert step.n_rejected_penetration == 70 and step.n_no_event == 30
    assert step.rejected_fraction == 1.0 and step.belief is None
    assert len(step.particles) == 0


def test_truncation_removes_impulse_mass_that_clamping_keeps(model, initial):
    steps = {rule: propagate_belief(model, initial, n_events=1, seed=0, n_workers=1,
                                    method="conjugate", feasibility=rule)[0]
             for rule in ("clamp", "truncate")}
    clamp, truncate = steps["clamp"], steps["truncate"]
    assert clamp.n_rejected_penetration == truncate.n_rejected_penetration
    removed = clamp.n_rejected_penetration / DRAWS  # one component: equal weights
    assert clamp.rejected_fraction == pytest.approx(removed)
    assert truncate.rejected_fraction > clamp.rejected_fraction
    assert truncate.belief is not None


def test_same_seed_same_conjugate_belief_for_one_and_two_workers(model, initial, conjugate):
    again = propagate_belief(model, initial, n_events=2, seed=0, n_workers=2,
                             method="conjugate")
    for a, b in zip(conjugate, again):
        assert a.summary() == b.summary()
        np.testing.assert_array_equal(a.belief.weights, b.belief.weights)
        np.testing.assert_array_equal(a.belief.means, b.belief.means)
        np.testing.assert_array_equal(a.belief.covariances, b.belief.covariances)


def test_engine_alone_and_bad_options(model, initial):
    a, b = (propagate_belief(model, initial, n_events=1, seed=seed, n_workers=1,
                             method="conjugate", residual=False, draws=None)[0]
            for seed in (0, 1))
    assert a.belief is not None  # sigma points, no residual: the seed changes nothing
    np.testing.assert_array_equal(a.belief.means, b.belief.means)
    np.testing.assert_array_equal(a.belief.covariances, b.belief.covariances)
    with pytest.raises(ParameterError):
        propagate_belief(model, initial, n_events=1, method="kalman")
    with pytest.raises(ParameterError):
        propagate_belief(model, initial, n_events=1, method="conjugate", max_components=0)
    with pytest.raises(ParameterError):
        propagate_belief(model, initial, n_events=1, method="conjugate",
                         feasibility="ignore")
    with pytest.raises(ParameterError):
        propagate_belief(model, initial, n_events=1, method="conjugate", draws=0)


def test_bench_methods_option_names_the_known_steps():
    import argparse

    from residualsim.cli.bench import _methods

    assert _methods("particles, conjugate") == ("particles", "conjugate")
    for bad in ("particles,kalman", ",", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            _methods(bad)
