"""The uncertainty of a fitted initial state, and the likelihood averaged over it."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from residualsim.data.csv import save_csv_trajectories
from residualsim.sim.recordings import initial_state_draws, load_recordings
from residualsim.sim.scenes import EngineParams, make_scene
from residualsim.sim.synthesize import synthesize_tosses
from residualsim.sysid.likelihood import ERROR_FLOOR, TrajectoryLikelihood

ROOT = Path(__file__).resolve().parents[1]
ELL = str(ROOT / "assets" / "examples" / "ell.toml")
TRUTH = "lateral_friction=0.3,restitution=0.4"
PARAMS = [EngineParams(lateral_friction=0.3, restitution=0.4),
          EngineParams(lateral_friction=0.5, restitution=0.1)]


@pytest.fixture(scope="module")
def ell_tosses(tmp_path_factory):
    """(truth, fitted): 8 L-shape tosses, 0.5 mm / 0.5 deg noise, CSV poses only."""
    truth = synthesize_tosses(TRUTH, n_tosses=8, n_samples=40, noise_m=5e-4,
                              noise_rad=np.radians(0.5), rng=7, scene=ELL)
    folder = tmp_path_factory.mktemp("ell")
    save_csv_trajectories(folder, truth)
    return truth, load_recordings(folder, ELL)


def test_the_fitted_states_uncertainty_matches_its_actual_error(ell_tosses):
    """Initial velocities' errors against the simulated truth, in units of the fit's own
    standard deviations, have an RMS near 1 (the covariance is neither far too small nor
    far too large)."""
    truth, fitted = ell_tosses
    z_scores = []
    for key, recording in fitted.items():
        covariance = np.asarray(recording.metadata["initial_state_covariance"])
        assert covariance.shape == (12, 12)
        assert np.all(np.linalg.eigvalsh(covariance) > -1e-15)
        exact = np.r_[truth[key].linear_velocity_mps[0],
                      truth[key].angular_velocity_world_radps[0]]
        got = np.r_[recording.linear_velocity_mps[0],
                    recording.angular_velocity_world_radps[0]]
        z_scores.append((got - exact) / np.sqrt(np.diag(covariance)[6:12]))
    rms = float(np.sqrt(np.mean(np.square(z_scores))))
    assert 0.5 < rms < 2.0, rms


def test_draws_follow_the_covariance_and_recorded_states_are_repeated(ell_tosses):
    truth, fitted = ell_tosses
    scene = make_scene(ELL)
    recording = next(iter(fitted.values()))
    draws = initial_state_draws(scene, recording, 4000, np.random.default_rng(0))
    covariance = np.asarray(recording.metadata["initial_state_covariance"])
    centre = scene.state_from_trajectory(recording, 0)
    spread = np.std(draws[:, 7:13] - centre[7:13], axis=0)  # velocities: plain offsets
    np.testing.assert_allclose(spread, np.sqrt(np.diag(covariance)[6:12]), rtol=0.08)
    np.testing.assert_allclose(np.linalg.norm(draws[:, 3:7], axis=1), 1.0, atol=1e-12)
    exact = next(iter(truth.values()))  # synthesized with velocities: nothing was fitted
    repeated = initial_state_draws(scene, exact, 3, np.random.default_rng(0))
    np.testing.assert_array_equal(repeated, np.repeat(
        scene.state_from_trajectory(exact, 0)[None], 3, axis=0))


def test_likelihood_averages_over_draws_and_is_the_same_on_any_worker_count(ell_tosses):
    truth, fitted = ell_tosses
    with TrajectoryLikelihood(ELL, fitted, substeps=2, initial_draws=3, seed=5) as one, \
            TrajectoryLikelihood(ELL, fitted, substeps=2, initial_draws=3, seed=5,
                                 n_workers=2) as two, \
            TrajectoryLikelihood(ELL, fitted, substeps=2, initial_draws=3, seed=6) as other, \
            TrajectoryLikelihood(ELL, fitted, substeps=2) as plain:
        errors = one.errors(PARAMS)
        assert errors.shape == (2, 8) and one.initial_draws == 3
        assert one.n_rollouts == 2 * 8 * 3
        np.testing.assert_array_equal(errors, two.errors(PARAMS))
        assert not np.array_equal(errors, other.errors(PARAMS))  # the seed picks the draws
        assert not np.array_equal(errors, plain.errors(PARAMS))
        assert np.all(np.isfinite(errors)) and np.all(errors > 0)
    with TrajectoryLikelihood(ELL, truth, substeps=2, initial_draws=3) as recorded, \
            TrajectoryLikelihood(ELL, truth, substeps=2) as once:
        assert recorded.initial_draws == 0 and recorded.n_rollouts == 0
        np.testing.assert_array_equal(recorded.errors(PARAMS), once.errors(PARAMS))
        assert recorded.n_rollouts == 2 * 8


def test_effective_error_is_the_error_with_the_mean_likelihood(ell_tosses):
    """exp(log L(e_eff)) equals the mean over draws of exp(log L(e_k)), for σ estimated
    (L ∝ e^-1/2) and given (L ∝ exp(-e / 2σ²)); equal draws give that error back."""
    _, fitted = ell_tosses
    draws = np.array([[1e-4, 4e-4, 9e-4], [2e-6, 2e-6, 2e-6], [math.inf, 1e-4, 1e-4],
                      [0.0, 1e-3, 1e-3]])
    with TrajectoryLikelihood(ELL, fitted, substeps=2, initial_draws=3) as estimated, \
            TrajectoryLikelihood(ELL, fitted, substeps=2, initial_draws=3,
                                 noise_m=0.01) as given:
        got = estimated._effective_error(draws)
        np.testing.assert_allclose(got ** -0.5, np.mean(
            np.maximum(draws, ERROR_FLOOR) ** -0.5, axis=1), rtol=1e-12)
        assert got[1] == pytest.approx(2e-6, rel=1e-12)
        assert got[2] == pytest.approx(1e-4 * 1.5 ** 2, rel=1e-12)  # a failed draw counts 0
        two_var = 2 * 0.01 ** 2
        known = given._effective_error(draws)
        np.testing.assert_allclose(np.exp(-known / two_var),
                                   np.mean(np.exp(-draws / two_var), axis=1), rtol=1e-10)


def test_calibrate_draws_initial_states_of_pose_only_recordings(ell_tosses, tmp_path, capsys):
    """``calibrate`` averages pose-only recordings over 4 initial states by default, records
    it, and ``--initial-draws 0`` turns it off; a resumed run must use the same K."""
    import json

    from residualsim.cli import main
    from residualsim.data.csv import save_csv_trajectories as save

    truth, _ = ell_tosses
    data = tmp_path / "poses"
    save(data, truth)
    args = ["calibrate", "--scene", ELL, "--data", str(data), "--method", "nevergrad",
            "--budget", "4", "--substeps", "2", "--split", "all", "--no-plots", "--quiet"]
    main([*args, "--out", str(tmp_path / "default")])
    assert json.loads((tmp_path / "default" / "summary.json").read_text())["initial_draws"] == 4
    main([*args, "--out", str(tmp_path / "off"), "--initial-draws", "0"])
    assert json.loads((tmp_path / "off" / "summary.json").read_text())["initial_draws"] == 0
    capsys.readouterr()
    assert main([*args, "--out", str(tmp_path / "off"), "--initial-draws", "2",
                 "--resume"]) == 2
    assert "checkpoint belongs to another run (initial_draws differ)" in \
        capsys.readouterr().err
