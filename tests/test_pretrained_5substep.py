"""The second shipped cube model, calibrated and trained at 5 substeps (train/README.md §17):
complete, runs at its own substep count, and its card's validation figures are what the code
computes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from residualsim.cli import main
from residualsim.data import load_trajectories
from residualsim.data.splits import split_ids
from residualsim.evaluation.metrics import score_trajectories
from residualsim.evaluation.predictions import load_predictions
from residualsim.residual.model import ResidualModel
from residualsim.sim.rollout import predict_trajectories

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "data" / "pretrained" / "cube-contactnets-5substep"
SAMPLES = ROOT / "data" / "samples" / "cube-synthetic"


def test_five_substep_model_is_complete_and_runs_at_five_substeps():
    model = ResidualModel.load(MODEL)
    card = (MODEL / "MODEL_CARD.md").read_text()
    figures = json.loads((MODEL / "card.json").read_text())["figures"]
    calibration = json.loads((MODEL / "calibration-summary.json").read_text())
    assert model.scene == "cube" and model.substeps == 5
    assert calibration["settings"]["substeps"] == 5
    params = model.params.as_json()
    assert {k: params[k] for k in calibration["params"]} == pytest.approx(calibration["params"])
    assert model.guard.penetration_tolerance_m == 0.0  # as the 10-substep model
    assert figures["params_sha256"] in card
    assert not (MODEL / "checkpoint.npz").exists()
    assert model.settings().substeps == 5


def test_predict_with_the_five_substep_model(tmp_path, capsys):
    out = tmp_path / "pred.npz"
    assert main(["predict", "--model", str(MODEL), "--data", str(SAMPLES),
                 "--out", str(out), "--samples", "2", "--seed", "3"]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    predictions = load_predictions(out)
    assert predictions.n_samples == 2 and len(predictions) == len(load_trajectories(SAMPLES))
    assert line["events"] > 0 and line["rollouts"] == 2 * len(predictions)


@pytest.mark.slow
def test_five_substep_card_figures_reproduce_on_validation(contactnets_dir):
    trajectories = load_trajectories(contactnets_dir)
    held_out = {k: trajectories[k] for k in split_ids(list(trajectories))["validation"]}
    model = ResidualModel.load(MODEL)
    card = json.loads((MODEL / "card.json").read_text())["held_out"]["validation"]
    for residual, key in ((True, "residual"), (False, "engine")):
        predictions, _ = predict_trajectories(model, held_out, n_workers=2, residual=residual)
        rmse = score_trajectories(predictions, held_out).aggregate()["position_rmse_m"]
        # 1e-5 relative: the last bits follow the CPU's kernels (tests/test_pretrained.py)
        assert rmse == pytest.approx(card[key]["position_rmse_m"], rel=1e-5)
