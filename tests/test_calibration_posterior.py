"""Posterior: file round trip, summaries and diagnostics, load errors, plots."""

from __future__ import annotations

import json

import numpy as np
import pytest

from residualsim.errors import DataError
from residualsim.sysid.paramspace import ParamSpace
from residualsim.sysid.plots import corner_plot, trace_plot
from residualsim.sysid.posterior import POSTERIOR_FORMAT, Posterior
from residualsim.sim.scenes import EngineParams

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
NAMES = ["lateral_friction", "restitution"]


@pytest.fixture(scope="module")
def space() -> ParamSpace:
    return ParamSpace(NAMES, priors={"restitution": "normal:0.4:0.2"},
                      base=EngineParams(spinning_friction=0.01))


def make_posterior(space, samples, seed=0, warmup=None, meta=None) -> Posterior:
    rng = np.random.default_rng(seed)
    chains, draws = samples.shape[:2]
    return Posterior(space=space, samples=samples,
                     log_likelihood=rng.normal(size=(chains, draws)),
                     log_prior=rng.normal(size=(chains, draws)),
                     acceptance=rng.uniform(0.2, 0.4, chains), meta=meta or {},
                     warmup=warmup)


def iid_samples(chains=4, draws=1000, seed=0):
    rng = np.random.default_rng(seed)
    return np.column_stack([rng.normal(0.3, 0.02, chains * draws),
                            rng.normal(0.5, 0.05, chains * draws)]).reshape(chains, draws, 2)


def ar1_samples(chains=2, draws=1000, phi=0.98, seed=0):
    rng = np.random.default_rng(seed)
    noise = rng.normal(size=(chains, draws, 2))
    out = np.zeros_like(noise)
    for t in range(1, draws):
        out[:, t] = phi * out[:, t - 1] + noise[:, t]
    return np.array([0.3, 0.5]) + 0.005 * out


@pytest.fixture(scope="module")
def iid_posterior(space):
    warmup = iid_samples(4, 50, seed=9)
    return make_posterior(space, iid_samples(), warmup=warmup,
                          meta={"scene": "cube", "burn_in": 50, "nested": {"a": [1, 2.5]}})


# --- files ------------------------------------------------------------------------------------
def test_save_load_round_trip(iid_posterior, tmp_path):
    path = tmp_path / "posterior.npz"
    iid_posterior.save(path)
    loaded = Posterior.load(path)
    for name in ("samples", "log_likelihood", "log_prior", "acceptance", "warmup"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(iid_posterior, name))
    assert loaded.space == iid_posterior.space
    assert loaded.space.base == EngineParams(spinning_friction=0.01)
    assert loaded.meta == iid_posterior.meta
    assert loaded.summary()["median"] == iid_posterior.summary()["median"]


def test_round_trip_without_warmup(space, tmp_path):
    posterior = make_posterior(space, iid_samples(2, 20))
    posterior.save(tmp_path / "p.npz")
    loaded = Posterior.load(tmp_path / "p.npz")
    assert loaded.warmup is None
    np.testing.assert_array_equal(loaded.samples, posterior.samples)


def test_missing_file_is_a_data_error(tmp_path):
    path = tmp_path / "nowhere.npz"
    with pytest.raises(DataError, match="not found") as info:
        Posterior.load(path)
    assert str(path) in str(info.value)


def test_non_npz_file_is_a_data_error(tmp_path):
    path = tmp_path / "notes.npz"
    path.write_text("these are not arrays\n" * 20)
    with pytest.raises(DataError) as info:
        Posterior.load(path)
    assert str(path) in str(info.value)


def test_npz_without_header_is_a_data_error(tmp_path):
    path = tmp_path / "plain.npz"
    np.savez(path, samples=np.zeros((2, 3, 2)))
    with pytest.raises(DataError) as info:
        Posterior.load(path)
    assert str(path) in str(info.value)


def test_npz_with_another_format_tag_is_a_data_error(iid_posterior, tmp_path):
    path = tmp_path / "other.npz"
    header = {"format": "residualsim.mh-checkpoint/1", "space": iid_posterior.space.as_json()}
    np.savez(path, header=np.array(json.dumps(header)), samples=iid_posterior.samples,
             log_likelihood=iid_posterior.log_likelihood, log_prior=iid_posterior.log_prior,
             acceptance=iid_posterior.acceptance)
    with pytest.raises(DataError, match="mh-checkpoint") as info:
        Posterior.load(path)
    assert str(path) in str(info.value) and POSTERIOR_FORMAT in str(info.value)


def test_file_with_wrong_sample_shape_is_a_data_error(iid_posterior, tmp_path):
    path = tmp_path / "flat.npz"
    header = {"format": POSTERIOR_FORMAT, "space": iid_posterior.space.as_json(), "meta": {}}
    np.savez(path, header=np.array(json.dumps(header)), samples=iid_posterior.flat(),
             log_likelihood=iid_posterior.log_likelihood, log_prior=iid_posterior.log_prior,
             acceptance=iid_posterior.acceptance)
    with pytest.raises(DataError, match="shape") as info:
        Posterior.load(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_truncated_or_empty_file_is_a_data_error(iid_posterior, tmp_path, damage):
    path = tmp_path / "posterior.npz"
    iid_posterior.save(path)
    content = path.read_bytes()
    path.write_bytes(content[: len(content) // 2] if damage == "truncated" else b"")
    with pytest.raises(DataError):
        Posterior.load(path)


@pytest.mark.parametrize(
    ("samples", "log_like_shape"),
    [(np.zeros((10, 2)), (10,)), (np.zeros((2, 10, 3)), (2, 10)), (np.zeros((2, 0, 2)), (2, 0)),
     (np.zeros((2, 10, 2)), (2, 9))],
    ids=["2d", "three-parameters", "no-draws", "log-likelihood-shape"],
)
def test_wrong_shapes_are_refused(space, samples, log_like_shape):
    with pytest.raises(DataError, match="shape"):
        Posterior(space=space, samples=samples, log_likelihood=np.zeros(log_like_shape),
                  log_prior=np.zeros(log_like_shape), acceptance=np.zeros(2))


# --- summaries and diagnostics ----------------------------------------------------------------
def test_summary_has_every_figure_per_parameter(iid_posterior):
    summary = iid_posterior.summary()
    for key in ("median", "q05", "q95", "mean", "std", "rhat", "ess", "max_posterior"):
        assert set(summary[key]) == set(NAMES), key
    flat = iid_posterior.flat()
    for i, name in enumerate(NAMES):
        assert summary["median"][name] == pytest.approx(np.median(flat[:, i]))
        assert summary["q05"][name] == pytest.approx(np.quantile(flat[:, i], 0.05))
        assert summary["q95"][name] == pytest.approx(np.quantile(flat[:, i], 0.95))
        assert summary["q05"][name] < summary["median"][name] < summary["q95"][name]
    assert summary["acceptance"] == pytest.approx(float(np.mean(iid_posterior.acceptance)))
    assert summary["chains"] == 4 and summary["draws_per_chain"] == 1000
    best = np.unravel_index(np.argmax(iid_posterior.log_likelihood + iid_posterior.log_prior),
                            (4, 1000))
    assert list(summary["max_posterior"].values()) == list(iid_posterior.samples[best])
    json.dumps(summary)  # JSON-safe


def test_rhat_near_one_for_iid_chains(iid_posterior):
    for value in iid_posterior.rhat().values():
        assert abs(value - 1.0) < 0.01


def test_rhat_large_for_chains_that_disagree(space):
    samples = iid_samples(2, 500, seed=1)
    samples[1] += np.array([0.05, 0.12])   # 2.5 standard deviations apart
    for value in make_posterior(space, samples).rhat().values():
        assert value > 1.1


def test_ess_of_iid_draws_near_their_number(iid_posterior):
    for value in iid_posterior.ess().values():
        assert 4000 / 2 < value < 4000 * 2


def test_ess_of_an_autocorrelated_chain_is_much_smaller(space):
    # AR(1) with phi = 0.98: integrated autocorrelation time (1 + phi) / (1 - phi) = 99
    ess = make_posterior(space, ar1_samples()).ess()
    for value in ess.values():
        assert value < 2000 / 10


# --- plots ----------------------------------------------------------------------------------------
def _png(path) -> bytes:
    content = path.read_bytes()
    assert content[:8] == PNG_SIGNATURE
    assert len(content) > 1000
    return content


def test_corner_and_trace_plots_write_png(iid_posterior, tmp_path):
    corner_plot(iid_posterior, tmp_path / "corner.png",
                truths={"lateral_friction": 0.3, "restitution": 0.5})
    trace_plot(iid_posterior, tmp_path / "trace.png")
    _png(tmp_path / "corner.png")
    _png(tmp_path / "trace.png")


def test_plots_of_a_constant_parameter_and_without_warmup(space, tmp_path):
    samples = iid_samples(2, 100)
    samples[..., 1] = 0.4   # never moved: corner cannot bin it
    posterior = make_posterior(space, samples)
    corner_plot(posterior, tmp_path / "corner.png")
    trace_plot(posterior, tmp_path / "trace.png")
    _png(tmp_path / "corner.png")
    _png(tmp_path / "trace.png")
