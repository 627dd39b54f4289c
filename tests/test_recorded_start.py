"""A recorded first pose treated as uncertain (``fit_recorded``), and the SBC script's
rank statistics (train/sbc.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from residualsim.sim.engine import Engine
from residualsim.sim.recordings import fit_initial_state
from residualsim.sim.rollout import recording_settings
from residualsim.sim.scenes import EngineParams
from residualsim.sim.synthesize import synthesize_tosses
from residualsim.sysid.likelihood import TrajectoryLikelihood

ROOT = Path(__file__).resolve().parents[1]
TRUTH = EngineParams(lateral_friction=0.3, restitution=0.4)


@pytest.fixture(scope="module")
def tosses():
    """(exact, noisy): the same 6 cube tosses without and with 2 mm position noise."""
    options = dict(n_tosses=6, n_samples=40, rng=3, substeps=5)
    return (synthesize_tosses(TRUTH, **options),
            synthesize_tosses(TRUTH, noise_m=0.002, **options))


def test_pose_only_fit_halves_the_first_poses_error_and_keeps_the_velocities(tosses):
    exact, noisy = tosses
    settings = recording_settings("cube", noisy, 5)
    before, after, z_scores = [], [], []
    with Engine("cube", settings=settings) as engine:
        for key, recording in noisy.items():
            fitted = fit_initial_state(engine, recording, velocities=False)
            np.testing.assert_array_equal(fitted.linear_velocity_mps[0],
                                          recording.linear_velocity_mps[0])
            np.testing.assert_array_equal(fitted.angular_velocity_world_radps[0],
                                          recording.angular_velocity_world_radps[0])
            covariance = np.asarray(fitted.metadata["initial_state_covariance"])
            assert covariance.shape == (12, 12)
            assert np.all(covariance[6:, :] == 0) and np.all(covariance[:, 6:] == 0)
            true_position = exact[key].positions_m[0]
            before.append(recording.positions_m[0] - true_position)
            after.append(fitted.positions_m[0] - true_position)
            z_scores.append(after[-1] / np.sqrt(np.diag(covariance)[:3]))
    rms_before = np.sqrt(np.mean(np.square(before)))
    rms_after = np.sqrt(np.mean(np.square(after)))
    assert rms_after < 0.5 * rms_before, (rms_before, rms_after)
    assert 0.3 < np.sqrt(np.mean(np.square(z_scores))) < 3.0  # an honest uncertainty


def test_fit_recorded_likelihood_draws_starts_and_fits_better_at_the_truth(tosses):
    _, noisy = tosses
    batch = [TRUTH, EngineParams(lateral_friction=0.6, restitution=0.2)]
    with TrajectoryLikelihood("cube", noisy, substeps=5) as plain, \
            TrajectoryLikelihood("cube", noisy, substeps=5, fit_recorded=True) as fitted, \
            TrajectoryLikelihood("cube", noisy, substeps=5, fit_recorded=True,
                                 initial_draws=3, seed=1) as drawn:
        assert plain.initial_draws == 0 and drawn.initial_draws == 3
        errors = drawn.errors(batch)
        assert errors.shape == (2, 6) and drawn.n_rollouts == 2 * 6 * 3
        # the fitted first pose is closer to the true one: the truth fits better from it
        assert fitted(batch)[0] > plain(batch)[0]
        assert drawn(batch)[0] > drawn(batch)[1]


def _sbc():
    spec = importlib.util.spec_from_file_location("sbc", ROOT / "train" / "sbc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _results(ranks: list[int]) -> list[dict]:
    return [{"rank": {"lateral_friction": r, "restitution": 9 - r}, "truth":
             {"lateral_friction": 0.5, "restitution": 0.5},
             "q05": {"lateral_friction": 0.4, "restitution": 0.6},
             "q95": {"lateral_friction": 0.6, "restitution": 0.7},
             "rhat": {"x": 1.0}, "ess": {"x": 50.0}, "seconds": 1.0} for r in ranks]


def test_sbc_report_bins_ranks_and_tests_uniformity():
    sbc = _sbc()
    uniform = sbc.report(_results(list(range(10)) * 5), draws=9, bins=5)
    assert uniform["lateral_friction"]["histogram"] == [10] * 5
    assert uniform["lateral_friction"]["p_value"] > 0.99
    assert uniform["lateral_friction"]["coverage_90"] == 1.0
    assert uniform["restitution"]["coverage_90"] == 0.0
    extreme = sbc.report(_results([0] * 25 + [9] * 25), draws=9, bins=5)  # overconfident
    assert extreme["lateral_friction"]["histogram"] == [25, 0, 0, 0, 25]
    assert extreme["lateral_friction"]["p_value"] < 0.01
    with pytest.raises(SystemExit):
        sbc.report([], draws=9, bins=4)


def test_sbc_thinning_and_resume_refuses_another_configuration(tmp_path):
    sbc = _sbc()
    samples = np.arange(2 * 100 * 2, dtype=float).reshape(2, 100, 2)
    drawn = sbc.thin(samples, 10)
    assert drawn.shape == (10, 2)
    assert drawn[0, 0] == 0 and drawn[4, 0] == 2 * 99 and drawn[5, 0] == 200
    args = sbc.parse_args(["--out", str(tmp_path / "r.jsonl")])
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"index": 0, "config": sbc.config_of(args)}) + "\n")
    assert len(sbc.read_results(path, sbc.config_of(args))) == 1
    other = sbc.config_of(sbc.parse_args(["--out", "x", "--noise-m", "0.001"]))
    with pytest.raises(SystemExit, match="another configuration"):
        sbc.read_results(path, other)



def test_calibrate_refuses_an_unknown_recorded_start(tmp_path):
    from residualsim.errors import ParameterError
    from residualsim.sysid.calibrate import calibrate

    with pytest.raises(ParameterError, match="recorded_start"):
        calibrate("cube", tmp_path, ["restitution"], tmp_path / "out", recorded_start="guess")
    assert not (tmp_path / "out").exists()



class _Stop(Exception):
    pass


@pytest.fixture(scope="module")
def hinge_tosses(tmp_path_factory):
    """(scene, folder of CSV with velocities, exact, noisy): 8 hinge tosses, 0.5 mm and
    0.5 deg pose noise, velocities exact (as ``data synthesize`` keeps them)."""
    from residualsim.data.csv import save_csv_trajectories

    hinge = str(ROOT / "assets" / "examples" / "hinge.toml")
    options = dict(n_tosses=8, n_samples=40, rng=5, scene=hinge, rate_hz=100.0)
    exact = synthesize_tosses(TRUTH, **options)
    noisy = synthesize_tosses(TRUTH, noise_m=5e-4, noise_rad=np.deg2rad(0.5), **options)
    folder = tmp_path_factory.mktemp("hinge") / "vel"
    save_csv_trajectories(folder, noisy, with_velocities=True)
    return hinge, folder, exact, noisy


def _start_errors(starts, exact, noisy):
    """(as read, as used): each recording's first-position error against the truth, m."""
    read = [np.linalg.norm(noisy[k].positions_m[0] - exact[k].positions_m[0]) for k in starts]
    used = [np.linalg.norm(starts[k].positions_m[0] - exact[k].positions_m[0])
            for k in starts]
    return np.array(read), np.array(used)


@pytest.mark.parametrize("recorded_start", [None, "recorded"])
def test_lsq_starts_recordings_with_velocities_from_fitted_poses(hinge_tosses, tmp_path,
                                                                 monkeypatch, recorded_start):
    """Issue 51: lsq rolled recordings with recorded velocities out from their noisy first
    poses as if exact (``--recorded-start fit`` was ignored by its stages). By default its
    contact search now starts them from poses fitted to the free flight, velocities kept;
    ``recorded_start="recorded"`` keeps them as read."""
    import residualsim.sysid.joint_states as joint_states
    from residualsim.sysid.calibrate import calibrate

    hinge, folder, exact, noisy = hinge_tosses
    seen = {}

    def offsets(scene, trajectories, *args, **kwargs):
        seen["train"] = trajectories
        raise _Stop

    monkeypatch.setattr(joint_states, "OffsetResiduals", offsets)
    ids = sorted(noisy)
    with pytest.raises(_Stop):
        calibrate(hinge, folder, ["restitution"], tmp_path / "out", method="lsq",
                  n_workers=1, plots=False, ground=False, recorded_start=recorded_start,
                  split_lists={"train": ids[:6], "validation": ids[6:]})
    starts = seen["train"]
    assert set(starts) == set(ids[:6])
    for k in starts:  # the recorded velocities are kept either way
        np.testing.assert_array_equal(starts[k].linear_velocity_mps[0],
                                      noisy[k].linear_velocity_mps[0])
    read, used = _start_errors(starts, exact, noisy)
    if recorded_start == "recorded":
        np.testing.assert_allclose(used, read, atol=1e-12)
        return
    moved = np.abs(used - read) > 1e-12  # a too short free flight is kept as read
    assert moved.mean() >= 0.5
    assert np.sqrt(np.mean(used[moved] ** 2)) < 0.6 * np.sqrt(np.mean(read[moved] ** 2))


def test_held_out_figures_fit_each_sets_starts(hinge_tosses, monkeypatch):
    """The held-out guard scores recordings with recorded velocities from first poses
    fitted with each candidate's own parameters: at the truth the fitted starts predict
    better than the noisy recorded ones, and each candidate gets its own fit."""
    import residualsim.sim.recordings as recordings_module
    from residualsim.sim.recordings import load_recordings
    from residualsim.sysid.held_out import held_out_figures

    hinge, folder, exact, noisy = hinge_tosses
    recordings = load_recordings(folder, hinge)
    candidates = {"truth": TRUTH, "default": EngineParams()}
    plain = held_out_figures(hinge, "trajectories", recordings, candidates, None, 1)
    real, fitted_with = recordings_module.fit_starts, []

    def spy(scene, trajectories, settings, params=None, n_workers=1, **which):
        fitted_with.append((params, which))
        return real(scene, trajectories, settings, params, n_workers, **which)

    monkeypatch.setattr(recordings_module, "fit_starts", spy)
    fitted = held_out_figures(hinge, "trajectories", recordings, candidates, None, 1,
                              fit_starts=True)
    assert fitted_with == [(TRUTH, {"estimated": False, "recorded": True}),
                           (EngineParams(), {"estimated": False, "recorded": True})]
    assert fitted["truth"]["position_rmse_m"] < 0.9 * plain["truth"]["position_rmse_m"]


def test_fitted_starts_do_not_depend_on_the_worker_count(hinge_tosses):
    """fit_starts runs its fits over worker processes: 1 or 2 workers give the same fitted
    first states, and the fits moved them off the recorded ones (those with enough free
    flight: a short one keeps its recorded start)."""
    from residualsim.sim.recordings import fit_starts, load_recordings

    hinge, folder, _, _ = hinge_tosses
    recordings = load_recordings(folder, hinge)
    settings = recording_settings(hinge, recordings, None)
    one = fit_starts(hinge, recordings, settings, TRUTH, 1, recorded=True)
    two = fit_starts(hinge, recordings, settings, TRUTH, 2, recorded=True)
    assert list(one) == list(two) == list(recordings)
    for key in recordings:
        assert np.array_equal(one[key].positions_m[0], two[key].positions_m[0])
        assert np.array_equal(one[key].quat_wxyz[0], two[key].quat_wxyz[0])
    assert any(not np.array_equal(one[key].positions_m[0], recorded.positions_m[0])
               for key, recorded in recordings.items())  # a toss long enough in flight


# --- pose-only recordings: starts fitted with the body that rolls them out ----------------------
@pytest.fixture(scope="module")
def heavy_arm(tmp_path_factory):
    """(scene, pose-only CSV folder, true parameters): 6 hinge tosses made with every
    link's inertia doubled and the elbow damped (0.005 N m s/rad), as the study of
    train/own_object_body.py; the scene is the example URDF's own body."""
    import dataclasses

    from residualsim.data.csv import save_csv_trajectories
    from residualsim.sim.scenes.body import JointDynamics, read_body
    from residualsim.sim.scenes.params import ObjectParams

    hinge = str(ROOT / "assets" / "examples" / "hinge.toml")
    nominal = read_body(ROOT / "assets" / "examples" / "hinge.urdf")
    body = dataclasses.replace(nominal, links=tuple(
        dataclasses.replace(link, inertia=tuple(2.0 * np.asarray(link.inertia)))
        for link in nominal.links), joints=tuple(JointDynamics(j.name, 0.005, j.friction)
                                                 for j in nominal.joints))
    truth = ObjectParams.of(TRUTH, body)
    tosses = synthesize_tosses(truth, n_tosses=6, n_samples=40, rng=7, scene=hinge,
                               rate_hz=100.0, noise_m=2e-4, noise_rad=np.deg2rad(0.2))
    folder = tmp_path_factory.mktemp("heavy") / "poses"
    save_csv_trajectories(folder, tosses, with_velocities=False)
    return hinge, folder, truth


def test_pose_only_starts_are_fitted_with_the_body_that_rolls_them_out(heavy_arm):
    """Read with the true body (``load_recordings(params=...)``) the starts predict the
    recordings better than those fitted with the URDF's body; refitting the latter with
    the true body (fit_starts) starts from the recorded first state, so it gives the same
    starts as reading with the true body; and the held-out guard rolls a candidate with a
    body from starts fitted with it."""
    from residualsim.sim.recordings import RECORDED_FIRST_STATE, fit_starts, load_recordings
    from residualsim.sysid.held_out import held_out_figures

    hinge, folder, truth = heavy_arm
    urdf_fitted = load_recordings(folder, hinge)
    own_fitted = load_recordings(folder, hinge, params=truth)
    settings = recording_settings(hinge, urdf_fitted, None)
    refitted = fit_starts(hinge, urdf_fitted, settings, truth, 1)
    fitted = [key for key, traj in own_fitted.items() if RECORDED_FIRST_STATE in traj.metadata]
    assert len(fitted) >= 4  # the others too short in flight: kept as estimated
    for key, traj in own_fitted.items():
        assert traj.metadata.get(RECORDED_FIRST_STATE) == \
            urdf_fitted[key].metadata.get(RECORDED_FIRST_STATE)
        np.testing.assert_allclose(refitted[key].positions_m[0], traj.positions_m[0],
                                   atol=1e-9)
        np.testing.assert_allclose(refitted[key].angular_velocity_world_radps[0],
                                   traj.angular_velocity_world_radps[0], atol=1e-6)
    guarded = held_out_figures(hinge, "trajectories", urdf_fitted, {"truth": truth}, None, 1)
    plain = held_out_figures(hinge, "trajectories", own_fitted, {"truth": truth}, None, 1)
    from residualsim.sim.rollout import simulate_trajectories

    def rmse(recordings):
        runs = simulate_trajectories(hinge, recordings, truth, 1)
        return np.sqrt(np.mean(np.concatenate([
            np.sum((runs[k].positions_m - recordings[k].positions_m) ** 2, axis=1)
            for k in recordings])))

    assert rmse(own_fitted) < 0.8 * rmse(urdf_fitted)
    # the same starts to 1e-9 m; contact amplifies what is left to a fraction of a percent
    assert guarded["truth"]["position_rmse_m"] == pytest.approx(
        plain["truth"]["position_rmse_m"], rel=1e-2)
