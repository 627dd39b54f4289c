"""Effective residual counts ν_i (residualsim.sysid.weighting) and the likelihood they weigh."""

from __future__ import annotations

import json

import numpy as np
import pytest

from residualsim.errors import ParameterError
from residualsim.sim.scenes import EngineParams
from residualsim.sim.synthesize import synthesize_tosses
from residualsim.sysid.likelihood import TrajectoryLikelihood
from residualsim.sysid.weighting import autocorrelation_time, effective_count

from conftest import QuadraticLikelihood

TRUTH = EngineParams(lateral_friction=0.3, restitution=0.4)


def _ar1(phi: float, n: int, columns: int, rng: np.random.Generator) -> np.ndarray:
    out = np.zeros((n, columns))
    noise = rng.standard_normal((n, columns))
    out[0] = noise[0] / np.sqrt(1 - phi**2)
    for t in range(1, n):
        out[t] = phi * out[t - 1] + noise[t]
    return out


def test_white_residuals_count_nearly_all_and_ar1_as_its_autocorrelation_time():
    rng = np.random.default_rng(0)
    white = [effective_count(rng.standard_normal((100, 3))) for _ in range(50)]
    assert 0.75 * 300 < np.mean(white) <= 300
    # AR(1) with φ = 0.9: τ = (1 + φ) / (1 - φ) = 19
    taus = [autocorrelation_time(_ar1(0.9, 2000, 1, rng)) for _ in range(10)]
    assert 13 < np.mean(taus) < 25
    correlated = [effective_count(_ar1(0.9, 100, 3, rng)) for _ in range(20)]
    assert np.mean(correlated) < 0.15 * np.mean(white)


def test_an_offset_counts_as_correlated_error_and_silent_components_do_not_count():
    rng = np.random.default_rng(1)
    noise = rng.standard_normal((60, 3))
    assert effective_count(noise + 1.0) < 10  # a shift as large as the noise: a few
    assert autocorrelation_time(np.ones(40)) == pytest.approx(40, rel=0.05)
    half_silent = np.hstack([noise, np.zeros((60, 3))])
    assert effective_count(half_silent) == pytest.approx(effective_count(noise), rel=1e-9)
    assert effective_count(np.zeros((5, 2))) == 10 and autocorrelation_time(np.zeros(5)) == 1
    assert effective_count(np.full((5, 2), np.nan)) == 1


@pytest.fixture(scope="module")
def tosses():
    return synthesize_tosses(TRUTH, n_tosses=4, n_samples=40, noise_m=0.002, rng=5, substeps=5)


def test_reference_weights_sharpen_the_likelihood_and_more_data_sharpens_more(tosses):
    wrong = EngineParams(lateral_friction=0.36, restitution=0.46)
    few = dict(list(tosses.items())[:2])
    drops = {}
    for label, data in (("few", few), ("all", tosses)):
        with TrajectoryLikelihood("cube", data, substeps=5) as likelihood:
            flat = likelihood([TRUTH, wrong])
            nu = likelihood.set_reference(TRUTH)
            sharp = likelihood([TRUTH, wrong])
            assert nu.shape == (len(data),) and np.all(nu > 3)
            assert np.all(nu <= 39 * 6) and likelihood.reference == TRUTH
            # ν_i multiplies each recording's −½ log e_i
            errors = likelihood.errors([TRUTH])[0]
            assert sharp[0] == pytest.approx(-0.5 * np.sum(nu * np.log(errors)))
            assert sharp[0] - sharp[1] > 5 * (flat[0] - flat[1]) > 0
            drops[label] = sharp[0] - sharp[1]
    assert drops["all"] > 1.5 * drops["few"]


def test_reference_weights_need_the_noise_estimated(tosses):
    with TrajectoryLikelihood("cube", tosses, substeps=5, noise_m=0.002) as likelihood:
        with pytest.raises(ParameterError, match="noise scale estimated"):
            likelihood.set_reference(TRUTH)


def test_a_fitted_first_pose_leaves_fewer_correlated_residuals_than_the_recorded_one(tosses):
    # the recorded first pose is 2 mm off: every later sample shares that offset
    with TrajectoryLikelihood("cube", tosses, substeps=5) as recorded, \
            TrajectoryLikelihood("cube", tosses, substeps=5, fit_recorded=True) as fitted:
        assert np.mean(fitted.set_reference(TRUTH)) > 2 * np.mean(recorded.set_reference(TRUTH))


@pytest.mark.parametrize("spread, expected", [(1.0, 1.0), (3.0, 1 / 9)])
def test_magnitude_adjustment_matches_the_scatter_between_recordings(spread, expected):
    from residualsim.sysid.paramspace import ParamSpace
    from residualsim.sysid.weighting import magnitude_adjustment

    space = ParamSpace(["lateral_friction", "restitution"],
                       bounds={"lateral_friction": (0.1, 0.7), "restitution": (0.1, 0.7)})
    curvature = 1e4  # each recording alone: standard deviation 0.01 in unit coordinates
    modes = 0.5 + spread * 0.01 * np.random.default_rng(2).standard_normal((400, 2))
    found = magnitude_adjustment(QuadraticLikelihood(space, modes, curvature), space,
                                 space.from_unit(np.array([[0.5, 0.5]]))[0])
    assert found["w"] == pytest.approx(expected, rel=0.25), found
    assert found["w_raw"] is not None and found["evaluations"] == 2 * 13


def test_curvature_transform_gives_the_sandwich_curvature_and_never_sharpens():
    from residualsim.sysid.weighting import curvature_transform

    information = np.array([[4.0, 1.0], [1.0, 2.0]])
    spread = 3.0 * information  # recordings scatter three times as their curvature says
    transform = curvature_transform(information, spread)
    np.testing.assert_allclose(transform.T @ information @ transform, information / 3.0,
                               rtol=1e-9)
    agreeing = curvature_transform(information, 0.1 * information)  # would sharpen: kept
    np.testing.assert_allclose(agreeing.T @ information @ agreeing, information, rtol=1e-9)


def test_calibrate_sandwich_gives_intervals_around_the_truth(tmp_path):
    from residualsim.data.csv import save_csv_trajectories
    from residualsim.sysid.calibrate import calibrate

    tosses = synthesize_tosses(TRUTH, n_tosses=5, n_samples=40, noise_m=0.002, rng=7,
                               substeps=5)
    save_csv_trajectories(tmp_path / "data", tosses, with_velocities=True)
    names = ["lateral_friction", "restitution"]
    summary = calibrate("cube", tmp_path / "data", names, tmp_path / "cal",
                        method="sandwich", split="all", substeps=5, chains=1, plots=False)
    covariance = np.array(summary["sandwich"]["covariance_unit"])
    assert np.all(np.linalg.eigvalsh(covariance) > 0)  # and no warning but the guard's own:
    assert all(w.startswith("the held-out guard did not run") for w in summary["warnings"])
    for name in names:
        assert summary["q05"][name] < summary["median"][name] < summary["q95"][name]
        half = (summary["q95"][name] - summary["q05"][name]) / 2
        assert 0 < half < 0.1  # the data inform
        # the truth within 3.3 posterior standard deviations (99.9 %)
        assert abs(summary["median"][name] - getattr(TRUTH, name)) < 2 * half, summary
    assert summary["params"]["lateral_friction"] == summary["median"]["lateral_friction"]
    from residualsim.experiments.report import _posterior_section

    text, figures = _posterior_section(tmp_path / "cal", summary)
    assert f"{summary['q95']['restitution']:.4g}" in text and figures == []
    with pytest.raises(ParameterError, match="noise scale estimated"):
        calibrate("cube", tmp_path / "data", names, tmp_path / "cal2", method="sandwich",
                  split="all", substeps=5, noise=0.002, plots=False)


def test_an_interrupted_sandwich_calibration_resumes_from_its_finished_stages(tmp_path,
                                                                             monkeypatch):
    """Ctrl-C after the pilot fit and the mode keeps them in sandwich-checkpoint.json;
    --resume reuses both (no pilot fit runs again) and ends where an uninterrupted run
    does; the file of another run is refused."""
    import residualsim.sysid.weighting as weighting
    from residualsim.data.csv import save_csv_trajectories
    from residualsim.sysid.calibrate import calibrate

    tosses = synthesize_tosses(TRUTH, n_tosses=4, n_samples=30, noise_m=0.002, rng=3,
                               substeps=5)
    save_csv_trajectories(tmp_path / "data", tosses, with_velocities=True)
    names = ["lateral_friction", "restitution"]
    options = dict(method="sandwich", split="all", substeps=5, chains=1, plots=False)
    whole = calibrate("cube", tmp_path / "data", names, tmp_path / "whole", **options)

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(weighting, "sandwich_posterior", interrupt)
        with pytest.raises(KeyboardInterrupt):
            calibrate("cube", tmp_path / "data", names, tmp_path / "cut", **options)
    saved = json.loads((tmp_path / "cut" / "sandwich-checkpoint.json").read_text())
    assert set(saved["stages"]) == {"reference", "mode"}
    pilots = []
    original = weighting.pilot_reference
    monkeypatch.setattr(weighting, "pilot_reference",
                        lambda *a, **k: pilots.append(1) or original(*a, **k))
    resumed = calibrate("cube", tmp_path / "data", names, tmp_path / "cut", resume=True,
                        **options)
    assert pilots == []
    assert resumed["median"] == whole["median"] and resumed["q95"] == whole["q95"]
    with pytest.raises(ParameterError, match="not this run"):
        calibrate("cube", tmp_path / "data", ["lateral_friction"], tmp_path / "cut",
                  resume=True, **options)


def test_small_sample_correction_widens_the_sandwich_by_the_t_quantile_and_needs_g_above_d():
    """cr1t: the sandwich covariance of few recordings × (t_0.95,G−d / z_0.95)², the same
    envelope otherwise (so the 90 % interval is t_0.95,G−d standard deviations wide each
    side); G ≤ d refused (MH's calibrated target: tests/test_calibrated.py)."""
    from scipy.stats import norm, t

    from residualsim.sysid.paramspace import ParamSpace
    from residualsim.sysid.weighting import sandwich_posterior, small_sample_inflation

    factor = (t.ppf(0.95, 4) / norm.ppf(0.95)) ** 2
    assert small_sample_inflation(6, 2, "cr1t") == pytest.approx(factor)
    assert 1.67 < factor < 1.69  # t_0.95,4 = 2.132 against 1.645
    assert small_sample_inflation(6, 2, "none") == 1.0
    assert small_sample_inflation(200, 2, "cr1t") == pytest.approx(1.0, abs=0.02)
    space = ParamSpace(["lateral_friction", "restitution"],
                       bounds={"lateral_friction": (0.1, 0.7), "restitution": (0.1, 0.7)})
    modes = 0.5 + np.array([0.01, 0.03]) * np.random.default_rng(4).standard_normal((6, 2))
    likelihood = QuadraticLikelihood(space, modes, 1e4)
    centre = space.from_unit(np.array([[0.49, 0.52]]))[0]
    plain = sandwich_posterior(likelihood, space, centre)
    wide = sandwich_posterior(likelihood, space, centre, small_sample="cr1t")
    assert plain["inflation"] == 1.0 and wide["inflation"] == pytest.approx(factor)
    np.testing.assert_allclose(wide["covariance"], factor * plain["covariance"], rtol=1e-9)
    np.testing.assert_allclose(wide["mode_unit"], plain["mode_unit"], atol=1e-12)

    def width(found: dict) -> np.ndarray:  # the 90 % intervals' widths, unit coordinates
        low, high = (space.to_unit(np.array([[found[q][n] for n in space.names]]))[0]
                     for q in ("q05", "q95"))
        return high - low

    np.testing.assert_allclose(width(wide), np.sqrt(factor) * width(plain), rtol=1e-9)

    with pytest.raises(ParameterError, match="degrees of freedom"):
        small_sample_inflation(2, 2, "cr1t")
    with pytest.raises(ParameterError, match="degrees of freedom"):
        sandwich_posterior(QuadraticLikelihood(space, modes[:2], 1e4), space, centre, "cr1t")
    with pytest.raises(ParameterError, match="expected one of"):
        small_sample_inflation(6, 2, "cr2")


def test_an_envelope_is_found_with_its_mode_near_a_bound():
    """A mode 0.004 from the box's edge (the real cube's restitution): the design moves
    inward instead of collapsing on the bound, and the envelope's mode and spread are
    read from it (before: no envelope, the prior's intervals)."""
    from residualsim.sysid.paramspace import ParamSpace
    from residualsim.sysid.weighting import sandwich_posterior

    space = ParamSpace(["lateral_friction", "restitution"],
                       bounds={"lateral_friction": (0.1, 0.7), "restitution": (0.0, 0.7)})
    modes = np.array([0.5, 0.03]) + 0.01 * np.random.default_rng(5).standard_normal((30, 2))
    likelihood = QuadraticLikelihood(space, modes, 1e4)
    designs = []
    errors = likelihood.errors

    def recorded(batch):
        designs.append(space.to_unit(np.array([[p.lateral_friction, p.restitution]
                                               for p in batch])))
        return errors(batch)

    likelihood.errors = recorded
    found = sandwich_posterior(likelihood, space, space.from_unit(np.array([[0.5, 0.004]]))[0])
    for z in designs:  # every point distinct: none piled up on the bound
        assert len(np.unique(np.round(z, 12), axis=0)) == len(z)
    assert found["covariance"] is not None
    np.testing.assert_allclose(found["mode_unit"], modes.mean(axis=0), atol=0.004)
    sd = np.sqrt(np.diag(found["covariance"]))
    expected = np.sqrt(2 * 0.01 ** 2 / 30)  # each recording's 0.01 and the scatter's, over 30
    np.testing.assert_allclose(sd, expected, rtol=0.3)
