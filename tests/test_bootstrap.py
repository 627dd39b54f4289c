"""The parametric bootstrap of calibrate's sandwich (``--covariance bootstrap``): the pose
noise it simulates, its replicates' seeds and checkpoint, and the command end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest

from residualsim.cli import main
from residualsim.data.csv import save_csv_trajectories
from residualsim.errors import ParameterError
from residualsim.sim.synthesize import synthesize_tosses
from residualsim.sysid.bootstrap import (bootstrap_covariance, bootstrap_estimates,
                                         check_covariance, pose_noise)
from residualsim.sysid.paramspace import ParamSpace

NAMES = ["lateral_friction", "restitution"]
TRUTH = "lateral_friction=0.3,restitution=0.4"


@pytest.fixture(scope="module")
def tosses():
    return synthesize_tosses(TRUTH, n_tosses=4, n_samples=50, noise_m=0.002, noise_rad=0.01,
                             rng=3, substeps=5)


def test_pose_noise_reads_the_synthetic_levels(tosses):
    """Third differences see the white noise through flight and impacts alike."""
    noise_m, noise_rad = pose_noise(tosses)
    assert noise_m == pytest.approx(0.002, rel=0.15)
    assert noise_rad == pytest.approx(0.01, rel=0.2)
    clean = synthesize_tosses(TRUTH, n_tosses=4, n_samples=50, rng=3, substeps=5)
    assert pose_noise(clean)[0] < 1e-4


def _spread_fit(recordings: dict, b: int) -> np.ndarray:
    """A stand-in estimator that reads the replicate's data: mean first height and speed."""
    first = np.array([t.positions_m[1] for t in recordings.values()])
    return np.array([first[:, 2].mean(), np.abs(first[:, 0]).mean()])


def test_replicates_are_seeded_and_resume_from_their_checkpoint(tosses, tmp_path):
    space = ParamSpace(NAMES, scene="cube")
    estimate = np.array([0.3, 0.4])
    path = tmp_path / "boot.json"
    kwargs = dict(replicates=3, seed=5, substeps=5, noise=(0.002, 0.0))
    full = bootstrap_estimates("cube", tosses, space, estimate, _spread_fit, **kwargs)
    assert full.shape == (3, 2) and np.ptp(full[:, 0]) > 0  # fresh noise per replicate
    again = bootstrap_estimates("cube", tosses, space, estimate, _spread_fit, **kwargs)
    np.testing.assert_array_equal(full, again)

    calls = []

    def counted(recordings, b):
        calls.append(b)
        return _spread_fit(recordings, b)

    bootstrap_estimates("cube", tosses, space, estimate, counted, checkpoint=path,
                        **{**kwargs, "replicates": 2})
    resumed = bootstrap_estimates("cube", tosses, space, estimate, counted, checkpoint=path,
                                  resume=True, **kwargs)
    assert calls == [0, 1, 2]  # replicates 0 and 1 came from the checkpoint
    np.testing.assert_array_equal(resumed, full)
    with pytest.raises(ParameterError, match="another calibration"):
        bootstrap_estimates("cube", tosses, space, estimate + 0.01, counted,
                            checkpoint=path, resume=True, **kwargs)


def test_covariance_is_in_unit_coordinates():
    space = ParamSpace(NAMES, bounds={"lateral_friction": (0.1, 0.7),
                                      "restitution": (0.1, 0.7)}, scene="cube")
    estimates = np.array([[0.31, 0.40], [0.29, 0.40], [0.30, 0.43], [0.30, 0.37]])
    covariance = bootstrap_covariance(space, estimates)
    expected = np.cov(estimates.T) / 0.6 ** 2
    np.testing.assert_allclose(covariance, expected, atol=2e-12)


def test_bootstrap_is_for_the_sandwich_and_calibrated_mh_only():
    check_covariance("bootstrap", "sandwich")
    check_covariance("bootstrap", "mh", weighting="calibrated")
    for covariance, method, weighting in (("bootstrap", "mh", "recording"),
                                          ("bootstrap", "lsq", None),
                                          ("jackknife", "sandwich", None)):
        with pytest.raises(ParameterError, match="--covariance"):
            check_covariance(covariance, method, weighting=weighting)


def test_replicates_are_checked_before_any_work(tmp_path, capsys, tosses):
    check_covariance("bootstrap", "sandwich", 2)
    with pytest.raises(ParameterError, match="apply to --covariance bootstrap only"):
        check_covariance("sandwich", "sandwich", 5)
    with pytest.raises(ParameterError, match="integer >= 2"):
        check_covariance("bootstrap", "sandwich", 1)
    save_csv_trajectories(tmp_path / "data", tosses, with_velocities=True)
    out = tmp_path / "cal"
    assert main(["calibrate", "--method", "sandwich", "--bootstrap", "5", "--data",
                 str(tmp_path / "data"), "--out", str(out)]) == 2
    assert "--covariance bootstrap only" in capsys.readouterr().err
    assert not out.exists()


def test_calibrate_sandwich_with_bootstrap_end_to_end(tmp_path, capsys):
    """The command writes the bootstrap's covariance beside the sandwich's, and its
    intervals come from it."""
    tosses = synthesize_tosses(TRUTH, n_tosses=5, n_samples=40, noise_m=0.002, rng=4,
                               substeps=5)
    save_csv_trajectories(tmp_path / "data", tosses, with_velocities=True)
    out = tmp_path / "cal"
    assert main(["calibrate", "--data", str(tmp_path / "data"), "--split", "all",
                 "--substeps", "5", "--method", "sandwich", "--covariance", "bootstrap",
                 "--bootstrap", "2", "--no-plots", "--quiet", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    sandwich = summary["sandwich"]
    boot = sandwich["bootstrap"]
    assert boot["replicates"] == 2 and len(boot["estimates"]) == 2
    assert boot["noise_m"] == pytest.approx(0.002, rel=0.25)
    covariance = np.array(sandwich["covariance_unit"])
    assert not np.allclose(covariance, sandwich["sandwich_covariance_unit"])
    space = ParamSpace(NAMES, scene="cube")
    sd = np.sqrt(covariance[1, 1])
    mode = sandwich["mode_unit"][1]
    expected = space.from_unit(np.array([[0.5, np.clip(mode + 1.645 * sd, 0, 1)]]))[0, 1]
    assert summary["q95"]["restitution"] == pytest.approx(expected)
    assert (out / "bootstrap-checkpoint.json").is_file()


def test_bootstrap_rolls_fitted_starts_out_once(tmp_path, capsys):
    """With --recorded-start fit the bootstrap carries the start's error, so the likelihood
    does not also average over drawn starts (4 by default otherwise; they biased restitution
    low on 20 x 60, train/README.md §20.4), unless --initial-draws says so."""
    tosses = synthesize_tosses(TRUTH, n_tosses=4, n_samples=40, noise_m=0.002, rng=6,
                               substeps=5)
    save_csv_trajectories(tmp_path / "data", tosses, with_velocities=True)
    common = ["calibrate", "--data", str(tmp_path / "data"), "--split", "all", "--substeps",
              "5", "--method", "sandwich", "--recorded-start", "fit", "--no-plots", "--quiet"]
    draws = {}
    for name, extra in (("sandwich", []), ("bootstrap", ["--covariance", "bootstrap",
                                                         "--bootstrap", "2"])):
        assert main([*common, *extra, "--out", str(tmp_path / name)]) == 0
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        draws[name] = summary["initial_draws"]
    assert draws == {"sandwich": 4, "bootstrap": 0}


def test_check_calibration_passes_the_bootstrap_on(tmp_path, capsys):
    out = tmp_path / "sbc.jsonl"
    assert main(["check-calibration", "--scene", "cube", "--datasets", "1", "--tosses", "4",
                 "--samples", "30", "--substeps", "2", "--method", "sandwich",
                 "--covariance", "bootstrap", "--bootstrap", "2", "--recorded-start", "fit",
                 "--draws", "9", "--bins", "5", "--out", str(out)]) == 0
    line = json.loads(out.read_text().splitlines()[0])
    assert line["config"]["calibrate"] == {"method": "sandwich", "covariance": "bootstrap",
                                           "recorded_start": "fit",
                                           "bootstrap_replicates": 2}


def test_mh_samples_the_bootstrap_scaled_envelope(tmp_path, capsys):
    """--weighting calibrated --covariance bootstrap: the envelope MH samples has the
    bootstrap's covariance (λ = 0: the envelope alone, so the draws' spread must match it),
    and the summary and report name it."""
    tosses = synthesize_tosses(TRUTH, n_tosses=5, n_samples=40, noise_m=0.002, rng=4,
                               substeps=5)
    save_csv_trajectories(tmp_path / "data", tosses, with_velocities=True)
    out = tmp_path / "cal"
    assert main(["calibrate", "--data", str(tmp_path / "data"), "--split", "all",
                 "--substeps", "5", "--weighting", "calibrated", "--covariance", "bootstrap",
                 "--bootstrap", "3", "--rugged-weight", "0", "--recorded-start", "fit",
                 "--samples", "3000", "--burn-in", "500", "--chains", "2", "--no-plots",
                 "--quiet", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    adjustment = summary["weighting"]["adjustment"]
    assert adjustment["covariance"] == "bootstrap"
    assert len(adjustment["bootstrap"]["estimates"]) == 3
    boot = np.array(adjustment["bootstrap"]["estimates"])
    space = ParamSpace(NAMES, scene="cube")
    from residualsim.sysid.weighting import t_inflation

    assert adjustment["bootstrap"]["inflation"] == pytest.approx(t_inflation(2))  # B - 1 dof
    expected = t_inflation(2) * bootstrap_covariance(space, boot)
    # the map never sharpens the likelihood beyond its own curvature: compare where the
    # bootstrap is wider than the sandwich (here it is, or the test says so)
    sampled = np.array(adjustment["covariance_unit"])
    assert np.all(np.diag(sampled) >= np.diag(expected) * 0.999) or \
        np.allclose(sampled, expected, rtol=1e-6)
    from residualsim.sysid.posterior import Posterior

    draws = space.to_unit(Posterior.load(out / "posterior.npz").samples.reshape(-1, 2))
    spread = np.sqrt(np.diag(np.cov(draws.T)))
    np.testing.assert_allclose(spread, np.sqrt(np.diag(sampled)), rtol=0.35)
    assert (out / "bootstrap-checkpoint.json").is_file()
    from residualsim.experiments.report import _likelihood_note

    assert "parametric bootstrap" in _likelihood_note(summary)


def test_the_envelope_takes_the_wider_covariance_in_every_direction():
    """The bootstrap (shared start error) or the sandwich (scatter between recordings,
    model mismatch), whichever is wider along each direction."""
    from residualsim.sysid.calibrated import wider

    widened, count = wider(np.diag([1.0, 4.0]), np.diag([2.0, 1.0]))
    np.testing.assert_allclose(widened, np.diag([2.0, 4.0]), atol=1e-12)
    assert count == 1
    a = np.array([[2.0, 0.6], [0.6, 1.0]])
    same, none = wider(a, 0.5 * a)
    np.testing.assert_allclose(same, a, atol=1e-12)
    assert none == 0
    singular, _ = wider(np.ones((2, 2)), np.eye(2))  # a sandwich of no spread along (1, -1)
    np.testing.assert_allclose(singular, [[1.5, 0.5], [0.5, 1.5]], atol=1e-9)
    rng = np.random.default_rng(0)
    for _ in range(20):
        x, y = rng.standard_normal((2, 5, 3))
        first, second = x.T @ x + 0.1 * np.eye(3), y.T @ y + 0.1 * np.eye(3)
        both, _ = wider(first, second)
        for other in (first, second):  # at least as wide as each, in every direction
            assert np.linalg.eigvalsh(both - other).min() > -1e-9


def test_bootstrap_replicates_on_impacts_are_refused_not_ignored(make_mcube, tmp_path):
    """MH's default takes the bootstrap on trajectories only: --bootstrap on planar impacts
    is an error naming it, before anything is written."""
    from residualsim.sysid.calibrate import calibrate

    make_mcube(tmp_path / "mcube", n_rows=6)
    with pytest.raises(ParameterError, match="--covariance bootstrap only"):
        calibrate("planar-ellipse", tmp_path / "mcube", NAMES, tmp_path / "cal",
                  bootstrap_replicates=3, plots=False)
    assert not (tmp_path / "cal").exists()
