"""The likelihood calibrate's MH samples by default (residualsim.sysid.calibrated)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from residualsim.errors import ParameterError
from residualsim.sim.scenes import EngineParams
from residualsim.sim.synthesize import synthesize_tosses
from residualsim.sysid.calibrated import calibrated_target
from residualsim.sysid.paramspace import ParamSpace
from residualsim.sysid.weighting import sandwich_posterior, small_sample_inflation

from conftest import QuadraticLikelihood

NAMES = ["lateral_friction", "restitution"]
SPACE = ParamSpace(NAMES, bounds={"lateral_friction": (0.1, 0.7), "restitution": (0.1, 0.7)})


def _stand_in(count: int, seed: int) -> tuple[QuadraticLikelihood, callable, np.ndarray]:
    """Recordings that scatter as their curvature says along friction and 3 times that along
    restitution; their summed log-likelihood; a centre near the envelope's mode."""
    scatter = np.array([0.01, 0.03]) * np.random.default_rng(seed).standard_normal((count, 2))
    likelihood = QuadraticLikelihood(SPACE, 0.5 + scatter, 1e4)

    def log_like(x: np.ndarray) -> np.ndarray:
        batch = [SPACE.engine_params(row) for row in np.atleast_2d(x)]
        return np.sum(-0.5 * likelihood.nu * np.log(likelihood.errors(batch)), axis=1)

    return likelihood, log_like, SPACE.from_unit(np.array([[0.49, 0.52]]))[0]


def _hessian(target, z: np.ndarray, h: float = 1e-3) -> np.ndarray:
    """The finite-difference Hessian (2, 2) of ``target`` at unit point ``z``."""
    def at(*offsets):
        return target(SPACE.from_unit(np.array([z + h * np.array(o) for o in offsets])))

    centre, = at((0, 0))
    xx = at((1, 0), (-1, 0)).sum() - 2 * centre
    yy = at((0, 1), (0, -1)).sum() - 2 * centre
    corners = at((1, 1), (1, -1), (-1, 1), (-1, -1))
    xy = (corners[0] - corners[1] - corners[2] + corners[3]) / 4
    return np.array([[xx, xy], [xy, yy]]) / h**2


def test_the_target_peaks_at_the_envelope_mode_with_the_sandwich_curvature():
    """λ = 1 (Chandler-Bate at ẑ) and λ = 0 (the envelope alone) both have the sandwich
    posterior's inverse covariance as curvature at ẑ, wider than the likelihood's own; with
    cr1t that covariance is widened by the t factor; the screen's two stages compose to the
    target."""
    likelihood, log_like, centre = _stand_in(400, 3)
    found = sandwich_posterior(likelihood, SPACE, centre)
    for rugged in (1.0, 0.2, 0.0):
        calibrated = calibrated_target(likelihood, log_like, SPACE, centre, rugged, "none")
        zhat = SPACE.to_unit(calibrated.start[None])[0]
        np.testing.assert_allclose(zhat, found["mode_unit"], atol=1e-6)
        precision = -_hessian(calibrated.target, zhat)
        sandwich = np.linalg.inv(found["covariance"])
        np.testing.assert_allclose(precision, sandwich, rtol=2e-3, atol=2e-3 * sandwich.max())
        assert np.linalg.eigvalsh(sandwich).max() < 400 * 1e4  # wider than the likelihood
        probe = SPACE.from_unit(zhat + np.array([[0.01, -0.02], [-0.03, 0.01]]))
        if rugged == 0.0:
            assert calibrated.screen is None
        else:  # delayed acceptance: the envelope first, then the rest; together the target
            first, token = calibrated.screen.first(probe)
            np.testing.assert_allclose(calibrated.screen.complete(probe, token),
                                       calibrated.target(probe), rtol=1e-12)
        assert calibrated.summary["rugged_weight"] == rugged
        assert calibrated.summary["inflation"] == 1.0
    few, few_log_like, centre = _stand_in(6, 4)
    wide = calibrated_target(few, few_log_like, SPACE, centre, 0.0, "cr1t")
    plain = sandwich_posterior(few, SPACE, centre, "cr1t")
    factor = small_sample_inflation(6, 2, "cr1t")
    assert wide.summary["inflation"] == pytest.approx(factor) and factor > 1.6
    zhat = SPACE.to_unit(wide.start[None])[0]
    np.testing.assert_allclose(-_hessian(wide.target, zhat),
                               np.linalg.inv(plain["covariance"]), rtol=2e-3)


def test_too_few_recordings_or_no_envelope_leave_the_likelihood_unadjusted_and_say_why():
    likelihood, log_like, centre = _stand_in(2, 5)  # G = d: no scatter to scale by
    found = calibrated_target(likelihood, log_like, SPACE, centre, 0.2, "cr1t")
    assert "degrees of freedom" in found.summary["failed"] and found.screen is None
    probe = SPACE.from_unit(np.array([[0.4, 0.6]]))
    assert found.target(probe) == pytest.approx(log_like(probe))
    flat, flat_log_like, centre = _stand_in(8, 6)
    with pytest.raises(Exception, match="within 0 to 1"):
        calibrated_target(flat, flat_log_like, SPACE, centre, 1.5)


class _Saddle(QuadraticLikelihood):
    """Each recording pins friction (curvature a about its mode) and pushes restitution
    away from 0.5 (curvature −b): the envelope is indefinite at every scale."""

    def errors(self, batch) -> np.ndarray:
        z = self.space.to_unit(np.array([[p.lateral_friction, p.restitution] for p in batch]))
        ell = (-0.5 * self.a * (z[:, None, 0] - self.modes[None, :, 0]) ** 2
               + 0.5 * 40.0 * (z[:, None, 1] - 0.5) ** 2)
        return np.exp(-2.0 * ell / self.nu)


def test_a_direction_the_recordings_do_not_pin_is_sampled_at_the_prior_width_and_said():
    """An envelope indefinite along restitution at every scale: that direction gets the
    flat curvature (sd 10 in unit coordinates: the prior's box), friction keeps its
    sandwich width and its mode, the summary counts the direction and warns; MH's draws
    (λ = 0) spread along restitution as the prior does (uniform: sd 0.29)."""
    from residualsim.sysid.calibrated import FLAT_CURVATURE
    from residualsim.sysid.mcmc import MetropolisHastings

    scatter = 0.01 * np.random.default_rng(7).standard_normal((12, 2))
    saddle = _Saddle(SPACE, 0.5 + scatter, 1e4)

    def log_like(x: np.ndarray) -> np.ndarray:
        batch = [SPACE.engine_params(row) for row in np.atleast_2d(x)]
        return np.sum(-0.5 * saddle.nu * np.log(saddle.errors(batch)), axis=1)

    saddle_mode = SPACE.from_unit(saddle.modes.mean(axis=0)[None])[0, 0]
    found = calibrated_target(saddle, log_like, SPACE, SPACE.from_unit(
        np.array([[0.5, 0.5]]))[0], 0.0, "none")
    summary = found.summary
    assert "failed" not in summary and summary["flat_directions"] == 1
    assert "not concave along 1 of 2 directions" in summary["warnings"][0]
    information = np.array(summary["information_unit"])
    assert information[1, 1] == pytest.approx(FLAT_CURVATURE, rel=1e-6)
    assert information[0, 0] > 1e4  # friction pinned by 12 recordings of curvature 1e4
    draws = MetropolisHastings(found.target, SPACE, n_chains=2, rng=0).run(
        3000, 500, initial=found.start).samples.reshape(-1, 2)
    units = SPACE.to_unit(draws)
    assert units[:, 0].std() < 0.02 and 0.25 < units[:, 1].std() < 0.33  # the box's: 0.29
    assert abs(found.start[0] - saddle_mode) < 0.01  # friction's mode: the recordings' mean
    assert np.histogram(units[:, 1], bins=4, range=(0, 1))[0].min() > 0.15 * len(units)
    from residualsim.experiments.report import _likelihood_note

    note = _likelihood_note({"calibrated": NAMES, "weighting": {
        "method": "calibrated", "mode": list(found.start), "adjustment": summary}})
    assert "Along 1 direction(s) the envelope was not concave" in note


def test_calibrate_mh_samples_the_calibrated_likelihood_when_asked(tmp_path):
    """``weighting="calibrated"`` on 6 synthetic tosses: the summary names the likelihood and its
    adjustment; the draws spread as the widened envelope says (λ = 0: a Gaussian of the
    sandwich covariance × the t factor, truncated to the box, no rollouts while sampling);
    λ = 0.2 screens proposals on the envelope; the default is the bootstrap's envelope
    alone from fitted starts, and the raw one is kept behind ``weighting="recording"``."""
    from residualsim.data.csv import save_csv_trajectories
    from residualsim.experiments.report import _posterior_section
    from residualsim.sysid.calibrate import calibrate
    from residualsim.sysid.posterior import Posterior

    truth = EngineParams(lateral_friction=0.3, restitution=0.4)
    tosses = synthesize_tosses(truth, n_tosses=6, n_samples=40, noise_m=0.002, rng=11,
                               substeps=5)
    save_csv_trajectories(tmp_path / "data", tosses, with_velocities=True)
    options = dict(split="all", substeps=5, chains=2, plots=False, start_points=4, seed=0,
                   weighting="calibrated", covariance="sandwich")
    flat = calibrate("cube", tmp_path / "data", NAMES, tmp_path / "flat", samples=1500,
                     burn_in=500, rugged_weight=0.0, **options)
    weighting = flat["weighting"]
    assert weighting["method"] == "calibrated" and "failed" not in weighting["adjustment"]
    adjustment = weighting["adjustment"]
    assert adjustment["inflation"] == pytest.approx(small_sample_inflation(6, 2, "cr1t"))
    # MH's draws against the widened envelope's covariance (unit coordinates)
    draws = Posterior.load(tmp_path / "flat" / "posterior.npz").samples.reshape(-1, 2)
    transform = np.array(adjustment["transform_unit"])
    precision = transform.T @ np.array(adjustment["information_unit"]) @ transform
    sd = np.sqrt(np.diag(np.linalg.inv(precision)))
    space = ParamSpace.from_json(flat["space"])  # calibrate's: each parameter's valid range
    np.testing.assert_allclose(space.to_unit(draws).std(axis=0), sd, rtol=0.2)
    # the pilot fit, ν's reference and the envelope's design rolled out; MH's 4000 steps
    # nothing
    assert flat["rollouts"] == 6 * (weighting["pilot_evaluations"] + 1) < 6 * 250
    rugged = calibrate("cube", tmp_path / "data", NAMES, tmp_path / "rugged", samples=60,
                       burn_in=40, **options)
    assert rugged["weighting"]["adjustment"]["rugged_weight"] == 0.2
    # screened on the envelope: fewer full evaluations than proposals (2 chains x 100)
    assert 0 < rugged["evaluations"] < rugged["screened"] <= 2 * 100
    with pytest.raises(ParameterError, match="screens every proposal on the envelope"):
        calibrate("cube", tmp_path / "data", NAMES, tmp_path / "both", samples=60,
                  burn_in=40, delayed_acceptance=0.5, **options)
    assert not (tmp_path / "both").exists()  # refused before anything was written
    options.update(weighting="recording", covariance=None)
    raw = calibrate("cube", tmp_path / "data", NAMES, tmp_path / "raw", samples=60,
                    burn_in=40, **options)
    assert raw["weighting"] == {"method": "recording"}
    options.pop("weighting")  # the default: calibrated, the bootstrap's envelope alone
    default = calibrate("cube", tmp_path / "data", NAMES, tmp_path / "default", samples=60,
                        burn_in=40, bootstrap_replicates=2, **options)
    adjusted = default["weighting"]["adjustment"]
    assert default["weighting"]["method"] == "calibrated"
    assert adjusted["covariance"] == "bootstrap" and adjusted["rugged_weight"] == 0.0
    assert default["recorded_start"] == "fit" and default["initial_draws"] == 0
    saved = json.loads((tmp_path / "flat" / "summary.json").read_text())
    text, _ = _posterior_section(tmp_path / "flat", saved)
    assert "Likelihood: calibrated" in text and "λ = 0 of" in text
    assert f"×{adjustment['inflation']:.3g}" in text
    raw_text, _ = _posterior_section(tmp_path / "raw", json.loads(
        (tmp_path / "raw" / "summary.json").read_text()))
    assert "Likelihood: raw" in raw_text


def test_effective_weighting_shares_the_pilot_stage_and_starts_at_the_weighted_mode(tmp_path):
    """``weighting="effective"`` (Chandler-Bate at the rugged mode) runs the same pilot stage
    (:func:`~residualsim.sysid.weighting.weighted_mode`): its chains start at the
    ν-weighted mode the calibrated likelihood's summary records for the same data and seed."""
    from residualsim.data.csv import save_csv_trajectories
    from residualsim.sysid.calibrate import calibrate

    tosses = synthesize_tosses(EngineParams(lateral_friction=0.3, restitution=0.4),
                               n_tosses=4, n_samples=30, noise_m=0.002, rng=12, substeps=5)
    save_csv_trajectories(tmp_path / "data", tosses, with_velocities=True)
    options = dict(split="all", substeps=5, chains=1, plots=False, start_points=4, seed=1,
                   samples=10, burn_in=5)
    effective = calibrate("cube", tmp_path / "data", NAMES, tmp_path / "effective",
                          weighting="effective", **options)["weighting"]
    calibrated = calibrate("cube", tmp_path / "data", NAMES, tmp_path / "calibrated",
                           weighting="calibrated", rugged_weight=0.0, covariance="sandwich",
                           **options)["weighting"]
    assert effective["method"] == "effective" and effective["adjustment_transform"]
    assert effective["mode"] == calibrated["weighted_mode"]
    assert effective["reference"] == calibrated["reference"]
    assert effective["nu_median"] == calibrated["nu_median"] > 1


def test_without_a_calibrated_likelihood_mh_falls_back_to_the_raw_one(tmp_path):
    """Two recordings for two parameters leave no scatter to scale by: MH then samples the
    raw likelihood (ν_i = 1, as --weighting recording, too wide rather than too narrow), and
    the summary and its warning say so."""
    from residualsim.data.csv import save_csv_trajectories
    from residualsim.sysid.calibrate import calibrate
    from residualsim.sysid.likelihood import TrajectoryLikelihood

    tosses = synthesize_tosses(EngineParams(lateral_friction=0.3, restitution=0.4),
                               n_tosses=2, n_samples=30, noise_m=0.002, rng=13, substeps=5)
    save_csv_trajectories(tmp_path / "data", tosses, with_velocities=True)
    summary = calibrate("cube", tmp_path / "data", NAMES, tmp_path / "cal", split="all",
                        substeps=5, chains=1, plots=False, start_points=4, samples=10,
                        burn_in=5, weighting="calibrated")
    adjustment = summary["weighting"]["adjustment"]
    assert "degrees of freedom" in adjustment["failed"]
    assert adjustment["fallback"] == "recording"
    assert any("raw one" in warning for warning in summary["warnings"])
    with TrajectoryLikelihood("cube", tosses, substeps=5) as likelihood:
        assert np.all(likelihood.set_reference(EngineParams()) > 1)
        likelihood.reset_weights()
        assert np.all(likelihood.nu == 1.0) and likelihood.reference is None
