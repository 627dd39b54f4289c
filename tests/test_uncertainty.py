"""Checkable uncertainty: the reliability plot, ``score --plot`` and the decomposition
deterministic / state noise / state noise + residual (``residualsim uncertainty``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from residualsim.cli import main
from residualsim.data import load_tosses
from residualsim.data.bundled import PRETRAINED_CUBE, REAL_SAMPLES
from residualsim.errors import PredictionError
from residualsim.evaluation import (TrajectoryPredictions, reliability_plot,
                                    save_predictions)
from residualsim.experiments.uncertainty import (MeanResidual, format_decomposition,
                                                 uncertainty_decomposition)

BUNDLED = Path(__file__).resolve().parents[1] / "data" / "samples" / "cube-synthetic"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _valid_png(path: Path) -> tuple[int, ...]:
    """The image's shape; fails unless ``path`` is a PNG matplotlib can read back."""
    import matplotlib.image

    assert path.read_bytes()[:8] == PNG_SIGNATURE
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    return image.shape


def _noisy_predictions(recordings, n_samples: int, scale: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    ids = list(recordings)
    positions = [recordings[i].positions_m[None]
                 + scale * rng.normal(size=(n_samples, *recordings[i].positions_m.shape))
                 for i in ids]
    quaternions = [np.repeat(recordings[i].quat_wxyz[None], n_samples, axis=0) for i in ids]
    return TrajectoryPredictions.from_arrays(ids, positions, quaternions,
                                             meta={"scene": "cube"})


def test_reliability_plot_writes_a_png(tmp_path):
    curve = {"0.1": 0.05, "0.5": 0.4, "0.9": 0.8}
    reliability_plot({"final x-y": curve, "absent": None}, tmp_path / "r.png", n_samples=64)
    _valid_png(tmp_path / "r.png")
    with pytest.raises(PredictionError, match="S = 1"):
        reliability_plot({"final": None}, tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()


def test_score_plot_option_writes_the_reliability_png(capsys, tmp_path):
    recordings = load_tosses(BUNDLED)
    pred = tmp_path / "pred.npz"
    save_predictions(pred, _noisy_predictions(recordings, 16, 0.002))
    plot = tmp_path / "plots" / "reliability.png"
    code = main(["score", "--pred", str(pred), "--data", str(BUNDLED), "--plot", str(plot)])
    out = capsys.readouterr().out
    assert code == 0
    figures = json.loads(out.strip().splitlines()[-1])
    assert figures["plot"] == str(plot)
    _valid_png(plot)
    assert set(figures["reliability_final"]) == {f"0.{k}" for k in range(1, 10)}
    assert "reliability" in out and "CRPS, final x" in out
    # one sample: no regions, so no plot; the error says why
    single = tmp_path / "single.npz"
    save_predictions(single, _noisy_predictions(recordings, 1, 0.002))
    code = main(["score", "--pred", str(single), "--data", str(BUNDLED),
                 "--plot", str(tmp_path / "single.png")])
    captured = capsys.readouterr()
    assert code == 2 and "S = 1" in captured.err
    assert not (tmp_path / "single.png").exists()


def test_mean_residual_samples_the_state_noise_only():
    """Row (b)'s policy: with common random numbers its samples leave from the same
    initial states as the model's own samples (identical before the first contact), and
    without state noise and pose noise they are all the deterministic prediction."""
    from residualsim.residual.model import ResidualModel
    from residualsim.sim.recordings import load_recordings
    from residualsim.sim.rollout import predict_trajectories

    model = ResidualModel.load(PRETRAINED_CUBE)
    tosses = dict(list(load_recordings(REAL_SAMPLES, model.scene).items())[:2])
    mean_only = MeanResidual(model.sampling_policy())
    noise_only, _ = predict_trajectories(model, tosses, samples=4, seed=3, policy=mean_only)
    full, _ = predict_trajectories(model, tosses, samples=4, seed=3)
    deterministic, _ = predict_trajectories(model, tosses)
    for traj_id in tosses:
        a, b = noise_only[traj_id].position, full[traj_id].position
        np.testing.assert_array_equal(a[:, :2], b[:, :2])  # same start, same free flight
        assert np.ptp(a[:, -1], axis=0).max() > 1e-3  # the state noise spreads them
        assert np.abs(a[:, -1] - b[:, -1]).max() > 1e-4  # the residual's draws differ
    quiet = dataclasses.replace(model, state_noise=None, observation_noise=None)
    repeated, _ = predict_trajectories(quiet, tosses, samples=3, seed=3, policy=mean_only)
    for traj_id in tosses:
        np.testing.assert_allclose(repeated[traj_id].position,
                                   np.repeat(deterministic[traj_id].position, 3, axis=0),
                                   atol=1e-12)


def test_decomposition_rows_and_table():
    result = uncertainty_decomposition(PRETRAINED_CUBE, str(REAL_SAMPLES), split="all",
                                       samples=3, limit=3, seed=1)
    assert result["count"] == 3 and result["samples"] == 3
    assert [row["row"] for row in result["rows"]] == [
        "deterministic", "state noise", "state noise + residual"]
    first, *sampled = result["rows"]
    assert first["samples"] == 1 and first["coverage_xy_90"] is None
    assert first["max_deviation"] is None
    # S = 1: the energy score is the final error, the CRPS the per-axis absolute error
    assert first["energy_score_m"] == pytest.approx(first["score"]["final_error_m"])
    for row in sampled:
        assert row["samples"] == 3
        assert set(row["max_deviation"]) == {"final", "final_xy", "trajectory",
                                             "trajectory_xy"}
        assert 0.0 <= row["coverage_xy_50"] <= row["coverage_xy_90"] <= 1.0
    # the new figures: the deterministic row's trajectory energy score is its mean error
    # over time, and the sampled rows' pose scores add the rotation to the position's
    assert first["trajectory_energy_score_m"] <= first["score"]["position_rmse_m"] + 1e-12
    assert result["radius_of_gyration_m"] == pytest.approx(0.1048 / 6 ** 0.5)
    for row in result["rows"]:
        assert row["energy_score_pose_m"] >= row["energy_score_m"]
        assert row["trajectory_energy_score_pose_m"] >= row["trajectory_energy_score_m"] > 0
        assert row["score"]["trajectory_energy_score_m"] == row["trajectory_energy_score_m"]
    table = format_decomposition(result)
    assert "| deterministic (" in table and "| — |" in table
    assert "energy score, final pose (m)" in table and "(c) / (b)" in table
    assert "state noise + residual: along the trajectory, 3-D" in table
    # three rows in the scores and coverage tables, two ratios, 4 curves per sampled row
    assert table.count("\n| deterministic (") == 2
    assert table.count("\n| state noise + residual: ") == 4


def _row(name, samples, **scores):
    row = {"row": name, "samples": samples, "crps_final_m": None, "max_deviation": None,
           "coverage_xy_50": None, "coverage_xy_90": None, "coverage_50": None,
           "coverage_90": None, "score": {}}
    return {**row, **scores}


def test_ratios_are_the_ratios_of_the_reported_scores():
    from residualsim.experiments.uncertainty import ENERGY_SCORES, decomposition_ratios

    keys = [key for key, _ in ENERGY_SCORES]
    rows = [_row("deterministic", 1, **dict(zip(keys, (0.03, 0.05, 0.02, 0.04)))),
            _row("state noise", 8, **dict(zip(keys, (0.025, 0.045, 0.016, 0.03)))),
            _row("state noise + residual", 8, **dict(zip(keys, (0.024, 0.04, 0.012, 0.0))))]
    ratios = decomposition_ratios(rows)
    for key in keys[:3]:
        assert ratios["c_over_b"][key] == pytest.approx(rows[2][key] / rows[1][key])
        assert ratios["c_over_a"][key] == pytest.approx(rows[2][key] / rows[0][key])
    assert ratios["c_over_b"]["trajectory_energy_score_pose_m"] == 0.0
    # no state noise: no row (b), no (c)/(b); a missing score gives no ratio
    ratios = decomposition_ratios([rows[0], {**rows[2], "energy_score_pose_m": None}])
    assert ratios["c_over_b"] is None and ratios["c_over_a"]["energy_score_pose_m"] is None
    table = format_decomposition({"count": 3, "split": "all", "samples": 8, "seed": 0,
                                  "spread": 1.0, "rows": rows,
                                  "ratios": decomposition_ratios(rows)})
    ratio_line = next(line for line in table.splitlines() if line.startswith("| (c) / (b)"))
    assert ratio_line.split(" | ")[1:4] == ["0.960", "0.889", "0.750"]


def test_decomposition_json_has_the_ratios_of_its_rows(capsys, tmp_path):
    out = tmp_path / "u.json"
    code = main(["uncertainty", "--model", str(PRETRAINED_CUBE), "--data", str(REAL_SAMPLES),
                 "--split", "all", "--limit", "2", "--samples", "2", "--workers", "1",
                 "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    line = json.loads(captured.out.strip().splitlines()[-1])
    saved = json.loads(out.read_text())
    assert line["ratios"] == saved["ratios"]
    rows = {row["row"]: row for row in saved["rows"]}
    for key in ("energy_score_m", "trajectory_energy_score_m"):
        full = rows["state noise + residual"][key]
        assert line["ratios"]["c_over_b"][key] == pytest.approx(full / rows["state noise"][key])
        assert line["ratios"]["c_over_a"][key] == pytest.approx(full / rows["deterministic"][key])
    assert "energy_score_pose_m" in line["rows"][0] and "score" not in line["rows"][0]
