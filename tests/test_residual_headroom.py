"""The first-event headroom diagnostic (train/residual_headroom.py) on the bundled tosses."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]




def test_the_oracle_never_does_worse_than_the_engine_and_figures_are_written(tmp_path, capsys,
                                                                             train_script):
    out = tmp_path / "headroom.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a GP on 7 points warns about its length scales
        figures = train_script("residual_headroom").main([
            "--model", str(ROOT / "data" / "pretrained" / "cube-contactnets"),
            "--data", str(ROOT / "data" / "samples" / "cube-synthetic"),
            "--budget", "6", "--workers", "1", "--out", str(out)])
    for split, n in (("train", 7), ("validation", 1)):
        row = figures[split]
        assert row["n"] == n
        assert 0 < row["oracle_rmse_m"] <= row["engine_rmse_m"]
        assert 0 <= row["oracle_improvement"] < 1
    assert set(figures["validation_r2"]) == {
        f"{inputs}/{regressor}" for inputs in ("contact_features_9", "with_spin_12",
                                               "state_error_6")
        for regressor in ("ridge", "gaussian_process")}
    assert all(len(v) == 3 for v in figures["validation_r2"].values())
    assert len(figures["constant_impulse_ns"]) == 3
    assert np.isfinite(figures["constant_validation_rmse_m"])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == json.loads(
        json.dumps(figures))
    assert json.loads(out.read_text()) == json.loads(json.dumps(figures))


def test_first_event_impulse_is_applied_once(train_script):
    policy = train_script("residual_headroom").FirstEventImpulse(np.array([0.1, 0.0, -0.2]))
    np.testing.assert_array_equal(policy.mean(np.zeros(9)), [0.1, 0.0, -0.2])
    np.testing.assert_array_equal(policy.mean(np.zeros(9)), [0.0, 0.0, 0.0])


def test_state_errors_are_rotated_into_the_contact_frame(train_script):
    from residualsim.data import load_trajectories
    from residualsim.residual.state_noise import free_flight_velocities

    tosses = dict(list(load_trajectories(ROOT / "data" / "samples" / "cube-synthetic")
                       .items())[:2])
    swap = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])  # rows n, t1, t2
    errors = train_script("residual_headroom").state_errors(
        tosses, np.stack([swap, np.full((3, 3), np.nan)]))
    traj = next(iter(tosses.values()))
    velocity, omega = free_flight_velocities(traj, traj.metadata["half_width_m"])
    np.testing.assert_allclose(errors[0, :3], swap @ (velocity - traj.linear_velocity_mps[0]))
    np.testing.assert_allclose(errors[0, 3:],
                               swap @ (omega - traj.angular_velocity_world_radps[0]))
    assert np.isnan(errors[1]).all()  # no first event: no frame
