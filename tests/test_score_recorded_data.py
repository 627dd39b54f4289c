"""``residualsim score --pred FILE`` without ``--data``: the prediction file records the
folder of its recordings, relative to itself, so the pair moves together."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np

from residualsim.cli import main
from residualsim.data.bundled import SYNTHETIC_SAMPLES
from residualsim.evaluation import TrajectoryPredictions, load_predictions, save_predictions


def _last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


def test_score_finds_the_data_through_the_prediction_file(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("RESIDUALSIM_DATA", raising=False)
    project = tmp_path / "project"
    shutil.copytree(SYNTHETIC_SAMPLES, project / "tosses-here")
    monkeypatch.chdir(project)
    assert main(["simulate", "--data", "tosses-here", "--limit", "3",
                 "--out", "runs/pred.npz"]) == 0
    capsys.readouterr()
    stored = load_predictions(project / "runs" / "pred.npz").meta["data"]
    assert stored == os.path.join("..", "tosses-here")  # relative to the file, not the cwd
    assert main(["score", "--pred", "runs/pred.npz", "--data", "tosses-here"]) == 0
    with_data = _last_json(capsys.readouterr().out)
    # Elsewhere, after moving the project: the file still finds its recordings.
    moved = shutil.move(project, tmp_path / "moved")
    monkeypatch.chdir(tmp_path)
    assert main(["score", "--pred", str(Path(moved) / "runs" / "pred.npz")]) == 0
    without = _last_json(capsys.readouterr().out)
    assert without == with_data and without["n_trajectories"] == 3


def test_a_recorded_folder_that_is_gone_is_one_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("RESIDUALSIM_DATA", raising=False)
    monkeypatch.chdir(tmp_path)
    positions = np.zeros((5, 3))
    quats = np.tile([1.0, 0.0, 0.0, 0.0], (5, 1))
    pred = TrajectoryPredictions.from_arrays(["1"], [positions], [quats],
                                             meta={"data": "/nonexistent/recordings"})
    save_predictions(tmp_path / "p.npz", pred)
    assert main(["score", "--pred", "p.npz"]) == 2
    err = capsys.readouterr().err
    assert "p.npz" in err and "/nonexistent/recordings" in err and "--data" in err


def test_a_scene_file_travels_with_the_prediction_file(tmp_path, monkeypatch):
    """A scene given relative to the working directory is stored relative to the file, so
    score finds it from any directory; built-in scene names stay names."""
    from residualsim.evaluation.predictions import recorded_scene

    project = tmp_path / "project"
    (project / "objects").mkdir(parents=True)
    (project / "objects" / "obj.toml").write_text("urdf = 'obj.urdf'\n")
    (project / "runs").mkdir()
    monkeypatch.chdir(project)
    positions = np.zeros((5, 3))
    quats = np.tile([1.0, 0.0, 0.0, 0.0], (5, 1))
    for scene, expected in (("objects/obj.toml", "../objects/obj.toml"), ("cube", "cube")):
        pred = TrajectoryPredictions.from_arrays(["1"], [positions], [quats],
                                                 meta={"scene": scene})
        save_predictions(project / "runs" / "p.npz", pred)
        assert load_predictions(project / "runs" / "p.npz").meta["scene"] == expected
    save_predictions(project / "runs" / "p.npz", TrajectoryPredictions.from_arrays(
        ["1"], [positions], [quats], meta={"scene": "objects/obj.toml"}))
    monkeypatch.chdir(tmp_path)
    loaded = load_predictions(project / "runs" / "p.npz")
    resolved = recorded_scene(loaded, project / "runs" / "p.npz")
    assert Path(resolved).resolve() == (project / "objects" / "obj.toml").resolve()


def test_a_calibration_summary_stores_its_scene_file_relative_to_itself(tmp_path, monkeypatch):
    """calibrate from one directory, then train from another with the same calibration and
    the scene written another way: the summary's scene resolves, and it is the same scene."""
    from residualsim.data.csv import save_csv_trajectories
    from residualsim.residual.train import TrainingConfig, run_training
    from residualsim.sim.synthesize import synthesize_tosses
    from residualsim.sysid.calibrate import calibrate
    from residualsim.sysid.calibration_file import load_calibration

    project = tmp_path / "project"
    shutil.copytree(Path(__file__).resolve().parents[1] / "assets" / "examples",
                    project / "objects")
    tosses = synthesize_tosses({"lateral_friction": 0.3}, n_tosses=4, n_samples=25, rng=3,
                               scene=str(project / "objects" / "ell.toml"), rate_hz=100.0)
    save_csv_trajectories(project / "data", tosses, with_velocities=True)
    monkeypatch.chdir(project)
    calibrate("objects/ell.toml", "data", ["lateral_friction"], "runs/cal", method="lsq",
              budget=3, split="all", plots=False)
    summary = json.loads((project / "runs" / "cal" / "summary.json").read_text())
    assert summary["scene"] == "../../objects/ell.toml"
    monkeypatch.chdir(tmp_path)
    calibration = load_calibration(project / "runs" / "cal")
    assert Path(calibration.scene).resolve() == (project / "objects" / "ell.toml").resolve()
    run_training(str(project / "objects" / "ell.toml"), project / "data", tmp_path / "model",
                 calibration=project / "runs" / "cal", config=TrainingConfig(budget=2),
                 split_lists={"train": ["synthetic-0", "synthetic-1"],
                              "validation": ["synthetic-2"], "test": ["synthetic-3"]},
                 fit_uncertainty=False)
    assert (tmp_path / "model" / "model.json").is_file()
