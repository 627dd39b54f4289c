"""The recordings' pose noise in stochastic predictions: the right statistics, its own
stream (seeds reproduce, any worker count), nothing changed for models without it; and its
estimate, with the table height, from rest phases with known noise."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from residualsim.errors import DataError
from residualsim.residual.observation_noise import ObservationNoise, fit_ground
from residualsim.residual.policy import ResidualPolicy
from residualsim.residual.model import ResidualModel
from residualsim.sim.rollout import ContactGuard, predict_trajectories
from residualsim.sim.scenes import EngineParams, make_scene
from residualsim.sim.synthesize import synthesize_tosses

TRUTH = EngineParams(lateral_friction=0.3, restitution=0.2)
NOISE = ObservationNoise(offset_std_m=0.002, jitter_std_m=0.0005, n_recordings=9)


@pytest.fixture(scope="module")
def setting():
    tosses = synthesize_tosses(TRUTH, n_tosses=3, n_samples=60, rng=2)
    model = ResidualModel(scene="cube", policy=ResidualPolicy.for_scene(False, hidden=(4,)),
                          params=TRUTH, dt_s=1.0 / 148.0,
                          substeps=make_scene("cube").settings.substeps, guard=ContactGuard())
    return model, tosses


def _positions(predictions, traj_id):
    return predictions[traj_id].position


def test_sample_statistics_match_the_stds_and_the_rollouts_are_untouched(setting):
    model, tosses = setting
    noisy = dataclasses.replace(model, observation_noise=NOISE)
    plain, _ = predict_trajectories(model, tosses, samples=64, seed=5)
    with_noise, _ = predict_trajectories(noisy, tosses, samples=64, seed=5)
    for traj_id in tosses:
        added = _positions(with_noise, traj_id) - _positions(plain, traj_id)  # (S, T, 3)
        offsets = added.mean(axis=1)  # per sample: its offset plus a T-mean of jitter
        jitter = added - offsets[:, None, :]
        assert np.std(jitter) == pytest.approx(0.0005, rel=0.05)
        assert np.std(offsets) == pytest.approx(0.002, rel=0.15)
        np.testing.assert_array_equal(with_noise[traj_id].quaternion,
                                      plain[traj_id].quaternion)  # attitudes unchanged


def test_seeds_reproduce_and_workers_do_not_matter(setting):
    model, tosses = setting
    noisy = dataclasses.replace(model, observation_noise=NOISE)
    one, _ = predict_trajectories(noisy, tosses, samples=4, seed=1, n_workers=1)
    two, _ = predict_trajectories(noisy, tosses, samples=4, seed=1, n_workers=2)
    other, _ = predict_trajectories(noisy, tosses, samples=4, seed=2, n_workers=1)
    for traj_id in tosses:
        np.testing.assert_array_equal(_positions(one, traj_id), _positions(two, traj_id))
        assert not np.array_equal(_positions(one, traj_id), _positions(other, traj_id))


def test_mean_prediction_and_engine_alone_carry_no_noise(setting):
    model, tosses = setting
    noisy = dataclasses.replace(model, observation_noise=NOISE)
    for kwargs in ({"samples": 0}, {"samples": 3, "residual": False}):
        a, _ = predict_trajectories(model, tosses, seed=0, **kwargs)
        b, _ = predict_trajectories(noisy, tosses, seed=0, **kwargs)
        for traj_id in tosses:
            np.testing.assert_array_equal(_positions(a, traj_id), _positions(b, traj_id))


def test_saved_only_when_set_and_round_trips(setting, tmp_path):
    import json

    model, _ = setting
    model.save(tmp_path / "plain")
    assert "observation_noise" not in json.loads((tmp_path / "plain/model.json").read_text())
    assert ResidualModel.load(tmp_path / "plain").observation_noise is None
    dataclasses.replace(model, observation_noise=NOISE).save(tmp_path / "noisy")
    assert ResidualModel.load(tmp_path / "noisy").observation_noise == NOISE
    with pytest.raises(DataError, match="unknown field"):
        ObservationNoise.from_json({"offset_std_m": 0.001, "jitter_std_m": 0.0, "x": 1})


def test_fit_ground_recovers_the_table_and_the_pose_offsets(setting):
    """Tosses made with the table 1.5 mm low, each recording then shifted by its own offset
    (std 0.4 mm, all axes) plus jitter (0.05 mm): the estimate finds all three."""
    model, _ = setting
    low = TRUTH.replace(table_height_m=-0.0015)
    exact = synthesize_tosses(low, n_tosses=40, n_samples=180, rng=7)
    rng = np.random.default_rng(11)
    recorded = {}
    for key, traj in exact.items():
        shift = rng.normal(0.0, 0.0004, 3) + rng.normal(0.0, 0.00005, traj.positions_m.shape)
        recorded[key] = dataclasses.replace(traj, positions_m=traj.positions_m + shift)
    fitted, found = fit_ground(model, recorded)
    assert found.n_used >= 25
    assert fitted.params.table_height_m == pytest.approx(-0.0015, abs=3 * found.stderr_m)
    assert found.stderr_m < 1e-4
    assert fitted.observation_noise.offset_std_m == pytest.approx(0.0004, rel=0.35)
    assert fitted.observation_noise.jitter_std_m == pytest.approx(0.00005, rel=0.1)
    assert fitted.info["ground"]["n_used"] == found.n_used


def test_fit_ground_command_writes_the_model_atomically(tmp_path, capsys):
    import json

    from residualsim.cli import main

    data = tmp_path / "tosses"
    assert main(["data", "synthesize", "--params", "lateral_friction=0.3,restitution=0.2,"
                 "table_height_m=-0.0011", "--count", "16", "--samples", "150",
                 "--substeps", "1", "--seed", "4", "--out", str(data)]) == 0
    model = ResidualModel(scene="cube", policy=ResidualPolicy.for_scene(False, hidden=(4,)),
                          params=TRUTH, dt_s=1.0 / 148.0, substeps=1, guard=ContactGuard())
    model.save(tmp_path / "model")
    capsys.readouterr()
    assert main(["fit-ground", "--model", str(tmp_path / "model"), "--data", str(data),
                 "--out", str(tmp_path / "model"), "--in-place"]) == 2
    assert "give --out DIR, or --in-place" in capsys.readouterr().err
    assert main(["fit-ground", "--model", str(tmp_path / "model"), "--data", str(data),
                 "--out", str(tmp_path / "fitted")]) == 0
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    fitted = ResidualModel.load(tmp_path / "fitted")
    assert fitted.params.table_height_m == pytest.approx(-0.0011, abs=2e-5)
    assert fitted.observation_noise.n_recordings == record["ground"]["n_used"] >= 5
    assert ResidualModel.load(tmp_path / "model").observation_noise is None  # untouched


def test_too_few_rest_phases_are_refused(setting):
    model, tosses = setting  # three tosses: fewer than five rest phases at most
    with pytest.raises(DataError, match="fewer than 5"):
        fit_ground(model, tosses)
