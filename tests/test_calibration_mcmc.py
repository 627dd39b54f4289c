"""MetropolisHastings on analytic targets (no engine): accuracy, determinism, checkpoints."""

from __future__ import annotations

import numpy as np
import pytest

from residualsim.errors import DataError, ParameterError
from residualsim.sysid.mcmc import MetropolisHastings
from residualsim.sysid.paramspace import ParamSpace

MEAN = np.array([0.4, 0.5])
COV = np.array([[0.004, 0.002], [0.002, 0.006]])
PRECISION = np.linalg.inv(COV)


def gaussian_log_likelihood(x: np.ndarray) -> np.ndarray:
    d = np.asarray(x) - MEAN
    return -0.5 * np.einsum("ni,ij,nj->n", d, PRECISION, d)


class Interrupted(Exception):
    """Stands in for a killed run."""


class Counting:
    """A log-likelihood that counts its calls and can 'crash' after a number of them."""

    def __init__(self, function=gaussian_log_likelihood, fail_after: int | None = None):
        self.function = function
        self.fail_after = fail_after
        self.calls = 0

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise Interrupted(f"stopped after {self.calls} calls")
        self.calls += 1
        return self.function(x)


@pytest.fixture(scope="module")
def space() -> ParamSpace:
    return ParamSpace(["lateral_friction", "restitution"],
                      bounds={"lateral_friction": (0.0, 1.0), "restitution": (0.0, 1.0)})


@pytest.fixture(scope="module")
def gaussian_posterior(space):
    sampler = MetropolisHastings(gaussian_log_likelihood, space, n_chains=4, rng=3)
    return sampler.run(3000, burn_in=500)


# --- accuracy on a correlated Gaussian ---------------------------------------------------------
def test_gaussian_mean_and_covariance_are_recovered(gaussian_posterior):
    flat = gaussian_posterior.flat()
    assert gaussian_posterior.samples.shape == (4, 3000, 2)
    np.testing.assert_allclose(flat.mean(axis=0), MEAN, atol=0.02)
    cov = np.cov(flat, rowvar=False)
    np.testing.assert_allclose(np.diag(cov), np.diag(COV), rtol=0.2)
    corr = cov[0, 1] / np.sqrt(cov[0, 0] * cov[1, 1])
    true_corr = COV[0, 1] / np.sqrt(COV[0, 0] * COV[1, 1])
    assert abs(corr - true_corr) < 0.1


def test_gaussian_diagnostics(gaussian_posterior):
    summary = gaussian_posterior.summary()
    assert set(summary["rhat"]) == {"lateral_friction", "restitution"}
    assert all(value < 1.05 for value in summary["rhat"].values())
    assert 0.1 < summary["acceptance"] < 0.6
    assert all(0.1 < a < 0.6 for a in summary["acceptance_per_chain"])
    assert all(value > 200 for value in summary["ess"].values())
    # the kept draws of a chain are stored with their log-likelihood
    np.testing.assert_allclose(
        gaussian_posterior.log_likelihood[0],
        gaussian_log_likelihood(gaussian_posterior.samples[0]), rtol=1e-12, atol=1e-12)
    meta = gaussian_posterior.meta
    assert meta["burn_in"] == 500 and meta["n_samples"] == 3000
    assert gaussian_posterior.warmup.shape == (4, 500, 2)
    # adaptation moved the step (the adapt=False test below is then meaningful)
    assert meta["final_scale"] != pytest.approx(0.05, rel=0.05)


# --- determinism --------------------------------------------------------------------------------
def _small_run(space, seed, **kwargs):
    return MetropolisHastings(gaussian_log_likelihood, space, n_chains=2,
                              rng=seed).run(150, burn_in=100, **kwargs)


def test_same_seed_same_draws_other_seed_other_draws(space):
    first, again, other = (_small_run(space, s) for s in (11, 11, 12))
    np.testing.assert_array_equal(first.samples, again.samples)
    np.testing.assert_array_equal(first.log_likelihood, again.log_likelihood)
    np.testing.assert_array_equal(first.warmup, again.warmup)
    assert not np.array_equal(first.samples, other.samples)


# --- checkpoints --------------------------------------------------------------------------------
RUN = {"n_samples": 200, "burn_in": 300}   # shape adaptation at steps 200 and 300


def test_interrupted_run_resumes_to_the_same_draws(space, tmp_path):
    a_path, b_path = tmp_path / "a.npz", tmp_path / "b.npz"
    posterior_a = MetropolisHastings(Counting(), space, n_chains=2, rng=5).run(
        **RUN, checkpoint=a_path, checkpoint_every=50)
    assert a_path.is_file()

    # 1 call for the starting points, then one per step: crash during step 260
    crashing = Counting(fail_after=260)
    with pytest.raises(Interrupted):
        MetropolisHastings(crashing, space, n_chains=2, rng=5).run(
            **RUN, checkpoint=b_path, checkpoint_every=50)
    assert b_path.is_file()

    resumed_like = Counting()
    posterior_b = MetropolisHastings(resumed_like, space, n_chains=2, rng=5).run(
        **RUN, checkpoint=b_path, checkpoint_every=50, resume=True)
    # continued from the step-250 checkpoint: no new start, 250 steps to go
    assert resumed_like.calls == 500 - 250
    np.testing.assert_array_equal(posterior_b.samples, posterior_a.samples)
    np.testing.assert_array_equal(posterior_b.log_likelihood, posterior_a.log_likelihood)
    np.testing.assert_array_equal(posterior_b.log_prior, posterior_a.log_prior)
    np.testing.assert_array_equal(posterior_b.acceptance, posterior_a.acceptance)
    np.testing.assert_array_equal(posterior_b.warmup, posterior_a.warmup)
    assert posterior_b.meta["final_scale"] == posterior_a.meta["final_scale"]
    assert posterior_b.meta["proposal_shape"] == posterior_a.meta["proposal_shape"]
    assert posterior_b.meta["evaluations"] == posterior_a.meta["evaluations"]


def test_resume_with_more_samples_extends_the_run(space, tmp_path):
    path = tmp_path / "run.npz"
    short = MetropolisHastings(Counting(), space, n_chains=2, rng=9).run(
        **RUN, checkpoint=path)
    extending = Counting()
    longer = MetropolisHastings(extending, space, n_chains=2, rng=9).run(
        400, burn_in=300, checkpoint=path, resume=True)
    assert extending.calls == 200
    assert longer.samples.shape == (2, 400, 2)
    np.testing.assert_array_equal(longer.samples[:, :200], short.samples)
    straight = MetropolisHastings(gaussian_log_likelihood, space, n_chains=2, rng=9).run(
        400, burn_in=300)
    np.testing.assert_array_equal(longer.samples, straight.samples)
    # a finished run resumed with the same size draws nothing new
    finished = Counting()
    same = MetropolisHastings(finished, space, n_chains=2, rng=9).run(
        400, burn_in=300, checkpoint=path, resume=True)
    assert finished.calls == 0
    np.testing.assert_array_equal(same.samples, longer.samples)


def test_existing_checkpoint_needs_resume(space, tmp_path):
    path = tmp_path / "run.npz"
    _small_run(space, 1, checkpoint=path)
    with pytest.raises(DataError, match="checkpoint of an earlier run exists") as info:
        _small_run(space, 1, checkpoint=path)
    assert str(path) in str(info.value)


def test_checkpoint_of_another_problem_is_refused(space, tmp_path):
    path = tmp_path / "run.npz"
    _small_run(space, 1, checkpoint=path, fingerprint={"scene": "cube"})
    with pytest.raises(DataError) as info:
        _small_run(space, 1, checkpoint=path, resume=True, fingerprint={"scene": "planar-ellipse"})
    assert "scene" in str(info.value) and str(path) in str(info.value)
    # other sampler options or another burn-in are another run too
    with pytest.raises(DataError, match="sampler"):
        MetropolisHastings(gaussian_log_likelihood, space, n_chains=2, proposal_scale=0.1,
                           rng=1).run(150, burn_in=100, checkpoint=path, resume=True,
                                      fingerprint={"scene": "cube"})
    with pytest.raises(DataError, match="burn_in"):
        MetropolisHastings(gaussian_log_likelihood, space, n_chains=2, rng=1).run(
            150, burn_in=120, checkpoint=path, resume=True, fingerprint={"scene": "cube"})
    # the matching fingerprint resumes (the run is complete: same draws)
    again = _small_run(space, 1, checkpoint=path, resume=True, fingerprint={"scene": "cube"})
    np.testing.assert_array_equal(again.samples, _small_run(space, 1).samples)


def test_corrupt_checkpoint_is_a_data_error_naming_the_file(space, tmp_path):
    path = tmp_path / "garbage.npz"
    path.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(DataError) as info:
        _small_run(space, 1, checkpoint=path, resume=True)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_truncated_or_empty_checkpoint_is_a_data_error(space, tmp_path, damage):
    path = tmp_path / "run.npz"
    _small_run(space, 1, checkpoint=path)
    content = path.read_bytes()
    path.write_bytes(content[: len(content) // 2] if damage == "truncated" else b"")
    with pytest.raises(DataError):
        _small_run(space, 1, checkpoint=path, resume=True)


# --- failed rollouts --------------------------------------------------------------------------
def test_minus_inf_and_nan_regions_are_never_accepted(space):
    """-inf where friction > 0.45, NaN where restitution < 0.45: both next to the mode."""
    asked = []

    def log_likelihood(x):
        asked.append(np.array(x))
        values = gaussian_log_likelihood(x)
        values = np.where(x[:, 0] > 0.45, -np.inf, values)
        return np.where(x[:, 1] < 0.45, np.nan, values)

    posterior = MetropolisHastings(log_likelihood, space, n_chains=4, rng=4).run(
        400, burn_in=200)
    asked = np.concatenate(asked)
    # the walk did propose into both regions...
    assert np.sum(asked[:, 0] > 0.45) > 50 and np.sum(asked[:, 1] < 0.45) > 50
    # ...but never stayed there, in burn-in or after
    for draws in (posterior.samples, posterior.warmup):
        assert np.all(draws[..., 0] <= 0.45) and np.all(draws[..., 1] >= 0.45)
    assert np.all(np.isfinite(posterior.log_likelihood))
    assert np.all(posterior.acceptance > 0)


# --- options ----------------------------------------------------------------------------------
def test_without_adaptation_the_proposal_is_kept(space):
    posterior = MetropolisHastings(gaussian_log_likelihood, space, n_chains=2,
                                   proposal_scale=0.07, adapt=False, rng=2).run(100, burn_in=300)
    assert posterior.meta["final_scale"] == 0.07
    assert posterior.meta["proposal_shape"] == np.eye(2).tolist()
    assert posterior.meta["sampler"]["adapt"] is False


def test_initial_values_start_every_chain_there(space):
    calls = []

    def log_likelihood(x):
        calls.append(np.array(x))
        return gaussian_log_likelihood(x)

    MetropolisHastings(log_likelihood, space, n_chains=3, rng=0).run(
        5, burn_in=0, initial=[0.2, 0.7])
    np.testing.assert_allclose(calls[0], [[0.2, 0.7]] * 3)


@pytest.mark.parametrize(
    "kwargs",
    [{"n_chains": 0}, {"n_chains": 1.5}, {"proposal_scale": 0.0}, {"proposal_scale": 2.0},
     {"proposal_scale": float("nan")}, {"target_acceptance": 1.0}, {"init_draws": 0},
     {"rng": "seed"}],
)
def test_bad_sampler_arguments(space, kwargs):
    with pytest.raises(ParameterError):
        MetropolisHastings(gaussian_log_likelihood, space, **kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [{"n_samples": 0}, {"n_samples": 10, "burn_in": -1}, {"n_samples": 10, "burn_in": 2.5},
     {"n_samples": 10, "checkpoint_every": 0}, {"n_samples": 10, "initial": [1.5, 0.5]},
     {"n_samples": 10, "initial": [0.5, -0.1]}],
)
def test_bad_run_arguments(space, kwargs):
    sampler = MetropolisHastings(gaussian_log_likelihood, space, rng=0)
    with pytest.raises(ParameterError):
        sampler.run(**kwargs)


# --- delayed acceptance --------------------------------------------------------------------------
def _biased_screen(shift: float, widen: float):
    """A first stage that is a wrong Gaussian (mean shifted, covariance scaled), with a token
    the second stage must receive for exactly the points that passed."""
    from residualsim.sysid.mcmc import Screen

    calls = {"first": 0, "complete": 0}
    precision = PRECISION / widen

    def first(x):
        calls["first"] += len(x)
        d = np.asarray(x) - (MEAN + shift)
        return -0.5 * np.einsum("ni,ij,nj->n", d, precision, d), np.asarray(x).copy()

    def complete(x, token):
        np.testing.assert_array_equal(token, x)  # the token rows follow the points
        calls["complete"] += len(x)
        return gaussian_log_likelihood(x)

    return Screen(first, complete), calls


@pytest.mark.parametrize("shift, widen", [(0.0, 1.0), (0.05, 0.5), (-0.03, 3.0)])
def test_delayed_acceptance_samples_the_true_posterior_with_any_screen(space, shift, widen):
    """However wrong the first stage, the chain samples the true Gaussian (mean, variances,
    correlation as plain MH does), and proposals the screen rejects skip the full
    likelihood."""
    screen, calls = _biased_screen(shift, widen)
    sampler = MetropolisHastings(gaussian_log_likelihood, space, n_chains=4, rng=3,
                                 screen=screen)
    posterior = sampler.run(3000, burn_in=500)
    flat = posterior.flat()
    np.testing.assert_allclose(flat.mean(axis=0), MEAN, atol=0.02)
    cov = np.cov(flat, rowvar=False)
    np.testing.assert_allclose(np.diag(cov), np.diag(COV), rtol=0.2)
    corr = cov[0, 1] / np.sqrt(cov[0, 0] * cov[1, 1])
    assert abs(corr - COV[0, 1] / np.sqrt(COV[0, 0] * COV[1, 1])) < 0.1
    assert posterior.meta["screened"] == 4 * 3500
    assert posterior.meta["evaluations"] < 0.8 * posterior.meta["screened"] + 128
    assert calls["complete"] == posterior.meta["evaluations"] - 128  # 128: the Sobol start


def test_delayed_acceptance_resumes_to_the_same_draws(space, tmp_path):
    """Killed mid-run, a delayed-acceptance chain resumes to the draws of an uninterrupted
    one (the first stage's value at the current points is in the checkpoint); a plain
    chain's checkpoint is refused."""
    screen, _ = _biased_screen(0.05, 0.5)
    whole = MetropolisHastings(gaussian_log_likelihood, space, rng=5, screen=screen).run(
        150, burn_in=50)
    path = tmp_path / "da.npz"
    killed = MetropolisHastings(gaussian_log_likelihood, space, rng=5,
                                screen=_interrupting(screen, after=90))
    with pytest.raises(Interrupted):
        killed.run(150, burn_in=50, checkpoint=path, checkpoint_every=20)
    resumed = MetropolisHastings(gaussian_log_likelihood, space, rng=5, screen=screen).run(
        150, burn_in=50, checkpoint=path, checkpoint_every=20, resume=True)
    np.testing.assert_array_equal(resumed.samples, whole.samples)
    MetropolisHastings(gaussian_log_likelihood, space, rng=5).run(
        150, burn_in=50, checkpoint=tmp_path / "plain.npz")
    with pytest.raises(DataError, match="sampler"):
        MetropolisHastings(gaussian_log_likelihood, space, rng=5, screen=screen).run(
            150, burn_in=50, checkpoint=tmp_path / "plain.npz", resume=True)


def _interrupting(screen, after: int):
    """``screen`` whose first stage raises Interrupted after ``after`` calls."""
    from residualsim.sysid.mcmc import Screen

    count = {"n": 0}

    def first(x):
        if count["n"] >= after:
            raise Interrupted("stopped")
        count["n"] += 1
        return screen.first(x)

    return Screen(first, screen.complete)
