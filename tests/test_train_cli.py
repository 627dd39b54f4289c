"""``residualsim train`` / ``predict`` end to end on the bundled synthetic tosses.

The bundled set has 8 tosses: 7 in the training split and 1 (synthetic-6) in validation
(hash split, seed 0), so no extra data set is needed. Budgets are tiny (16 evaluations,
3 training tosses, 1 substep) to keep the module fast.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import quiet_main

from residualsim.cli import main
from residualsim.data import load_trajectories
from residualsim.data.splits import split_ids
from residualsim.evaluation.predictions import load_predictions
from residualsim.residual.model import ResidualModel
from residualsim.sim.rollout import predict_trajectories
from residualsim.sim.scenes import EngineParams
from residualsim.residual.policy import params_sha256
from residualsim.residual.train import TrajectoryLoss

BUNDLED = Path(__file__).resolve().parents[1] / "data" / "samples" / "cube-synthetic"
TRAIN_ARGS = ["--data", str(BUNDLED), "--budget", "16", "--batch-size", "8",
              "--validate-every", "8", "--substeps", "1", "--seed", "0", "--max-tosses", "3",
              "--quiet"]
FIGURES = ("best_loss", "validation_rmse_m", "evaluations", "seconds", "params_sha256")


def _quiet_main(argv: list) -> tuple[int, str, str]:
    return quiet_main(*argv)


def _last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def _train(out: Path, *extra) -> dict:
    code, stdout, stderr = _quiet_main(["train", *TRAIN_ARGS, "--out", out, *extra])
    assert code == 0, stderr
    return _last_json(stdout)


@pytest.fixture(scope="module")
def tosses() -> dict:
    return load_trajectories(BUNDLED)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("train") / "model"
    return out, _train(out)


@pytest.fixture(scope="module")
def mean_predictions(trained, tmp_path_factory) -> tuple[Path, dict]:
    model, _ = trained
    pred = tmp_path_factory.mktemp("predict") / "mean.npz"
    code, stdout, stderr = _quiet_main(["predict", "--model", model, "--data", BUNDLED,
                                        "--out", pred])
    assert code == 0, stderr
    return pred, _last_json(stdout)


def test_bundled_split_has_training_and_validation_tosses(tosses):
    parts = split_ids(list(tosses))
    assert len(parts["train"]) >= 3 and len(parts["validation"]) >= 1


# --- train ------------------------------------------------------------------------------------
def test_train_writes_the_model_and_a_json_line(trained, tosses):
    out, record = trained
    for name in ("model.json", "policy.json", "policy.npz", "checkpoint.npz"):
        assert (out / name).is_file(), name
    for key in FIGURES:
        assert key in record, key
    assert record["command"] == "train" and record["evaluations"] == 16
    assert record["seconds"] > 0 and record["best_loss"] > 0
    assert 0 < record["validation_rmse_m"] < 1.0
    assert len(record["params_sha256"]) == 64
    int(record["params_sha256"], 16)
    model = ResidualModel.load(out)
    assert params_sha256(model.policy) == record["params_sha256"]
    assert model.scene == "cube" and model.substeps == 1
    assert model.dt_s == pytest.approx(1 / 148.0, rel=1e-3)
    assert model.params == EngineParams()  # no calibration: the engine's defaults
    assert model.policy.impulse_scale_ns != 1.0  # scaled from the engine's events
    info = model.info
    parts = split_ids(list(tosses))
    assert info["n_train"] == 3 and info["train_ids"] == parts["train"][:3]
    assert info["n_validation"] == len(parts["validation"])
    assert info["figures"]["params_sha256"] == record["params_sha256"]
    assert info["config"]["budget"] == 16 and info["config"]["seed"] == 0
    assert [check["evaluations"] for check in info["validation_checks"]] == [8, 16]
    with np.load(out / "checkpoint.npz") as archive:
        assert archive["candidates"].shape == (16, model.policy.n_parameters)
        losses = archive["losses"]
    assert record["best_loss"] in set(losses.tolist())


def test_training_twice_gives_the_same_weights(trained, tmp_path):
    _, first = trained
    second = _train(tmp_path / "again")
    assert second["params_sha256"] == first["params_sha256"]
    assert second["best_loss"] == first["best_loss"]
    assert second["validation_rmse_m"] == first["validation_rmse_m"]


def test_two_workers_give_the_same_weights(trained, tmp_path):
    _, first = trained
    second = _train(tmp_path / "two", "--workers", "2")
    assert second["params_sha256"] == first["params_sha256"]
    assert second["best_loss"] == first["best_loss"]


def test_another_seed_gives_other_weights(trained, tmp_path):
    _, first = trained
    code, stdout, stderr = _quiet_main(["train", *TRAIN_ARGS[:-3], "--quiet", "--seed", "1",
                                        "--max-tosses", "2", "--budget", "8",
                                        "--out", tmp_path / "seed1"])
    assert code == 0, stderr
    assert _last_json(stdout)["params_sha256"] != first["params_sha256"]


def test_resume_needs_the_flag_and_gives_the_same_weights(trained, tmp_path):
    out, first = trained
    copy = Path(shutil.copytree(out, tmp_path / "copy"))
    code, _, err = _quiet_main(["train", *TRAIN_ARGS, "--out", copy])
    assert code == 2
    assert err.startswith("residualsim: error:") and "checkpoint" in err
    resumed = _train(copy, "--resume")
    assert resumed["params_sha256"] == first["params_sha256"]
    assert resumed["evaluations"] == 16 and resumed["best_loss"] == first["best_loss"]
    assert params_sha256(ResidualModel.load(copy).policy) == first["params_sha256"]


def test_resume_may_extend_a_cma_run_but_not_cut_it_below_what_it_holds(trained, tmp_path):
    """CMA's proposals do not depend on the budget: a finished 16-evaluation run resumed
    with --budget 24 ends where a 24-evaluation run does; --budget 8 is refused, naming
    the 16 evaluations the checkpoint holds."""
    out, _ = trained
    copy = Path(shutil.copytree(out, tmp_path / "copy"))
    code, _, err = _quiet_main(["train", *TRAIN_ARGS, "--out", copy, "--resume",
                                "--budget", "8"])
    assert code == 2 and "holds 16 evaluations" in err and "at least 16" in err
    extended = _train(copy, "--resume", "--budget", "24")
    fresh = _train(tmp_path / "fresh", "--budget", "24")
    assert extended["evaluations"] == 24
    assert extended["params_sha256"] == fresh["params_sha256"]
    assert extended["best_loss"] == fresh["best_loss"]


def test_interrupted_training_resumes_to_the_same_weights(trained, tmp_path, monkeypatch):
    _, first = trained
    out = tmp_path / "interrupted"
    original = TrajectoryLoss.__call__
    calls = []

    def interrupt_second_batch(self, thetas):
        if len(calls) == 1:
            raise KeyboardInterrupt
        calls.append(len(thetas))
        return original(self, thetas)

    monkeypatch.setattr(TrajectoryLoss, "__call__", interrupt_second_batch)
    code, _, err = _quiet_main(["train", *TRAIN_ARGS, "--out", out])
    assert code == 130 and "interrupted" in err
    assert not (out / "model.json").exists()
    with np.load(out / "checkpoint.npz") as archive:
        assert len(archive["losses"]) == 8  # the first batch was saved

    def counting(self, thetas):
        calls.append(len(thetas))
        return original(self, thetas)

    calls.clear()
    monkeypatch.setattr(TrajectoryLoss, "__call__", counting)
    resumed = _train(out, "--resume")
    assert calls == [8]  # only the second batch was evaluated
    assert resumed["params_sha256"] == first["params_sha256"]
    assert resumed["best_loss"] == first["best_loss"]
    assert resumed["validation_rmse_m"] == first["validation_rmse_m"]


def test_resume_with_other_settings_is_refused(trained, tmp_path):
    out, _ = trained
    copy = Path(shutil.copytree(out, tmp_path / "copy"))
    code, _, err = _quiet_main(["train", *TRAIN_ARGS, "--out", copy, "--resume",
                                "--components", "3"])
    assert code == 2 and "another run" in err and "checkpoint.npz" in err


def _write_calibration(directory: Path, substeps: int = 1) -> Path:
    directory.mkdir(parents=True)
    params = EngineParams().replace(lateral_friction=0.18, restitution=0.3).as_json()
    (directory / "summary.json").write_text(json.dumps(
        {"format": "residualsim.calibration/1", "scene": "cube", "params": params,
         "settings": {"dt_s": 1 / 148.0, "substeps": substeps}}))
    return directory


def test_train_uses_the_calibration_and_its_substeps(tmp_path):
    calibration = _write_calibration(tmp_path / "cal", substeps=1)
    code, stdout, stderr = _quiet_main([
        "train", "--data", BUNDLED, "--calibration", calibration, "--budget", "8",
        "--batch-size", "8", "--validate-every", "8", "--max-tosses", "2", "--quiet",
        "--out", tmp_path / "m"])
    assert code == 0, stderr
    model = ResidualModel.load(tmp_path / "m")
    assert model.params.lateral_friction == 0.18 and model.params.restitution == 0.3
    assert model.substeps == 1  # the calibration's, not the scene's 10
    assert model.info["calibration"] == str(calibration)
    assert _last_json(stdout)["evaluations"] == 8


def test_train_with_a_directory_that_is_not_a_calibration_exits_2(trained, tmp_path):
    model, _ = trained
    for bogus in (tmp_path / "empty", model):
        bogus.mkdir(exist_ok=True)
        out = tmp_path / f"out-{bogus.name}"
        code, _, err = _quiet_main(["train", *TRAIN_ARGS, "--calibration", bogus,
                                    "--out", out])
        assert code == 2
        assert err.startswith("residualsim: error:") and str(bogus) in err
        assert "calibration" in err
        assert not (out / "model.json").exists()


# --- predict ----------------------------------------------------------------------------------
def test_predict_writes_mean_predictions(trained, mean_predictions, tosses):
    model_dir, record = trained
    pred, line = mean_predictions
    assert line["command"] == "predict" and line["count"] == len(tosses)
    assert line["samples"] == 1 and line["residual"] is True
    predictions = load_predictions(pred)
    assert predictions.n_samples == 1 and set(predictions) == set(tosses)
    for traj_id, traj in tosses.items():
        assert predictions[traj_id].position.shape == (1, traj.n_samples, 3)
        np.testing.assert_allclose(predictions[traj_id].position[0, 0], traj.positions_m[0])
    assert predictions.meta["residual"] is True and predictions.meta["model"] == str(model_dir)
    # the same as the library call on the loaded model
    model = ResidualModel.load(model_dir)
    first = dict(list(tosses.items())[:2])
    direct, _ = predict_trajectories(model, first)
    for traj_id in first:
        np.testing.assert_array_equal(predictions[traj_id].position, direct[traj_id].position)


def test_predict_samples_are_reproducible(trained, tmp_path):
    model, _ = trained
    paths = []
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        pred = tmp_path / f"{name}.npz"
        code, stdout, stderr = _quiet_main(["predict", "--model", model, "--data", BUNDLED,
                                            "--out", pred, "--samples", "3", "--seed", seed,
                                            "--limit", "3"])
        assert code == 0, stderr
        assert _last_json(stdout)["samples"] == 3 and _last_json(stdout)["count"] == 3
        paths.append(load_predictions(pred))
    a, b, c = paths
    assert a.n_samples == 3 and len(a) == 3
    for traj_id in a:
        np.testing.assert_array_equal(a[traj_id].position, b[traj_id].position)
        np.testing.assert_array_equal(a[traj_id].quaternion, b[traj_id].quaternion)
        # the samples of one toss are not all the same
        assert not np.array_equal(a[traj_id].position[0], a[traj_id].position[1])
    assert any(not np.array_equal(a[t].position, c[t].position) for t in a)


def test_predict_without_residual_matches_simulate(trained, tmp_path):
    model, _ = trained
    engine_only, simulated = tmp_path / "engine.npz", tmp_path / "sim.npz"
    code, stdout, stderr = _quiet_main(["predict", "--model", model, "--data", BUNDLED,
                                        "--out", engine_only, "--no-residual"])
    assert code == 0, stderr
    assert _last_json(stdout)["residual"] is False
    code, _, stderr = _quiet_main(["simulate", "--data", BUNDLED, "--out", simulated,
                                   "--params", model / "model.json", "--substeps", "1"])
    assert code == 0, stderr
    a, b = load_predictions(engine_only), load_predictions(simulated)
    assert set(a) == set(b)
    for traj_id in a:
        np.testing.assert_array_equal(a[traj_id].position, b[traj_id].position)
        np.testing.assert_array_equal(a[traj_id].quaternion, b[traj_id].quaternion)


def test_residual_predictions_differ_from_the_engine(mean_predictions, trained, tmp_path):
    model, _ = trained
    pred, _ = mean_predictions
    engine_only = tmp_path / "engine.npz"
    code, _, stderr = _quiet_main(["predict", "--model", model, "--data", BUNDLED,
                                   "--out", engine_only, "--no-residual"])
    assert code == 0, stderr
    a, b = load_predictions(pred), load_predictions(engine_only)
    assert any(not np.allclose(a[t].position, b[t].position) for t in a)


def test_score_reads_the_predictions(mean_predictions, capsys):
    pred, _ = mean_predictions
    code = main(["score", "--pred", str(pred), "--data", str(BUNDLED)])
    out, err = capsys.readouterr()
    assert code == 0, err
    figures = _last_json(out)
    assert figures["n_trajectories"] == 8
    assert 0 < figures["position_rmse_m"] < 0.5


def test_predict_one_split(trained, tmp_path, tosses):
    model, _ = trained
    pred = tmp_path / "val.npz"
    code, stdout, stderr = _quiet_main(["predict", "--model", model, "--data", BUNDLED,
                                        "--out", pred, "--split", "validation"])
    assert code == 0, stderr
    assert set(load_predictions(pred)) == set(split_ids(list(tosses))["validation"])


# --- predict errors ----------------------------------------------------------------------------
def test_predict_with_a_missing_model_exits_2(tmp_path):
    missing = tmp_path / "no-model"
    code, _, err = _quiet_main(["predict", "--model", missing, "--data", BUNDLED,
                                "--out", tmp_path / "p.npz"])
    assert code == 2
    assert err.startswith("residualsim: error:") and str(missing) in err
    assert not (tmp_path / "p.npz").exists()


@pytest.mark.parametrize("content", [
    lambda header: json.dumps({**header, "format": "residualsim.calibration/1"}),
    lambda header: json.dumps({k: v for k, v in header.items() if k != "format"}),
    lambda header: "[1, 2]",
    lambda header: "{broken",
    lambda header: json.dumps({**header, "settings": {"dt_s": 0.01}}),
    lambda header: json.dumps({**header, "params": [0.3, 0.4]}),
    lambda header: json.dumps({**header, "info": [1, 2]})],
    ids=["other-format", "no-format", "list", "not-json", "no-substeps", "params-list",
         "info-list"])
def test_predict_with_a_wrong_model_json_exits_2(trained, tmp_path, content):
    model, _ = trained
    copy = Path(shutil.copytree(model, tmp_path / "copy"))
    header = json.loads((copy / "model.json").read_text())
    (copy / "model.json").write_text(content(header))
    code, _, err = _quiet_main(["predict", "--model", copy, "--data", BUNDLED,
                                "--out", tmp_path / "p.npz"])
    assert code == 2
    assert err.startswith("residualsim: error:") and str(copy / "model.json") in err
    assert not (tmp_path / "p.npz").exists()


def test_predict_with_missing_weights_exits_2(trained, tmp_path):
    model, _ = trained
    copy = Path(shutil.copytree(model, tmp_path / "copy"))
    (copy / "policy.npz").unlink()
    code, _, err = _quiet_main(["predict", "--model", copy, "--data", BUNDLED,
                                "--out", tmp_path / "p.npz"])
    assert code == 2 and "policy.npz" in err


def test_predict_with_truncated_weights_exits_2(trained, tmp_path):
    model, _ = trained
    copy = Path(shutil.copytree(model, tmp_path / "copy"))
    content = (copy / "policy.npz").read_bytes()
    (copy / "policy.npz").write_bytes(content[: len(content) // 2])
    code, _, err = _quiet_main(["predict", "--model", copy, "--data", BUNDLED,
                                "--out", tmp_path / "p.npz"])
    assert code == 2 and "policy.npz" in err


def test_training_keeps_no_correction_when_no_candidate_beats_the_engine(tosses, tmp_path,
                                                                        monkeypatch):
    """Validation at evaluation 0: if the engine alone scores best on validation, the model
    keeps the starting point (a zero mean correction), not the best training candidate."""
    from residualsim.residual.train import TrainingConfig, train_residual

    real_validation = TrajectoryLoss.validation

    def engine_always_best(self, theta):
        figures = real_validation(self, theta)
        return {**figures, "loss": 0.0 if theta is None else 1.0 + figures["loss"]}

    monkeypatch.setattr(TrajectoryLoss, "validation", engine_always_best)
    split = split_ids(list(tosses))
    train = {k: tosses[k] for k in split["train"]}
    validation = {k: tosses[k] for k in split["validation"]}
    model, figures = train_residual(
        "cube", train, validation, tmp_path, params=EngineParams(), substeps=10,
        config=TrainingConfig(budget=16, batch_size=8, validate_every=8, hidden=(4,)))
    assert figures["chosen_evaluation"] == 0 and figures["improvement"] == 0.0
    features = np.random.default_rng(0).normal(size=(5, 9))
    np.testing.assert_array_equal(model.policy.mean(features), np.zeros((5, 3)))


def test_train_refuses_substeps_other_than_the_calibrations(tmp_path):
    calibration = _write_calibration(tmp_path / "cal", substeps=1)
    code, _, err = _quiet_main([
        "train", "--data", BUNDLED, "--calibration", calibration, "--substeps", "10",
        "--budget", "8", "--max-tosses", "2", "--quiet", "--out", tmp_path / "m"])
    assert code == 2
    assert "calibrated at 1 substeps, not --substeps 10" in err
    assert not (tmp_path / "m" / "model.json").exists()


def test_a_contact_mode_model_trains_scales_its_mode_input_and_loads(tosses, tmp_path):
    """``TrainingConfig(contact_mode=True)``: the policy's 10th input is the touching count,
    scaled by the engine's own events (a mean between 1 and 4 points), and the saved model
    loads and predicts with it."""
    from residualsim.residual.train import TrainingConfig, train_residual

    split = split_ids(list(tosses))
    train = {k: tosses[k] for k in split["train"]}
    validation = {k: tosses[k] for k in split["validation"]}
    model, _ = train_residual(
        "cube", train, validation, tmp_path, params=EngineParams(), substeps=10,
        config=TrainingConfig(budget=8, batch_size=8, validate_every=8, hidden=(4,),
                              contact_mode=True))
    policy = ResidualModel.load(tmp_path).policy
    assert policy.contact_mode and policy.n_features == 10
    assert 1.0 <= policy.feature_mean[-1] <= 4.0 and policy.feature_std[-1] > 0
    predictions, stats = predict_trajectories(ResidualModel.load(tmp_path), validation)
    assert stats["events"] >= 1 and set(predictions) == set(validation)


@pytest.mark.parametrize("engine_best", [False, True])
def test_a_sustained_model_trains_both_parts_and_keeps_them_only_when_they_win(
        tosses, tmp_path, monkeypatch, engine_best):
    """``TrainingConfig(sustained=True)``: candidates carry the event policy's weights and
    the sustained-contact network's; the chosen one's network travels with the model (and
    changes its predictions), unless the engine alone wins on validation."""
    import dataclasses

    from residualsim.residual.coefficients import SustainedPolicy
    from residualsim.residual.train import TrainingConfig, train_residual

    real_validation = TrajectoryLoss.validation

    def judged(self, theta):
        figures = real_validation(self, theta)
        engine_loss = 0.0 if engine_best else 1e9
        return {**figures, "loss": engine_loss if theta is None else 1.0 + figures["loss"]}

    monkeypatch.setattr(TrajectoryLoss, "validation", judged)
    split = split_ids(list(tosses))
    train = {k: tosses[k] for k in split["train"][:3]}
    validation = {k: tosses[k] for k in split["validation"]}
    model, figures = train_residual(
        "cube", train, validation, tmp_path, params=EngineParams(), substeps=1,
        config=TrainingConfig(budget=8, batch_size=8, validate_every=8, hidden=(4,),
                              sustained=True, sustained_hidden=3))
    assert figures["n_parameters"] == model.policy.n_parameters + 10 * 3 + 3 + 3 * 3 + 3
    loaded = ResidualModel.load(tmp_path)
    if engine_best:
        assert loaded.sustained is None and not figures["sustained"]
        return
    assert figures["sustained"]
    np.testing.assert_array_equal(loaded.sustained.get_flat(), model.sustained.get_flat())
    assert isinstance(loaded.sampling_policy(), SustainedPolicy)
    with_part, _ = predict_trajectories(loaded, validation)
    without, _ = predict_trajectories(dataclasses.replace(loaded, sustained=None), validation)
    moved = [np.abs(with_part[k].position[0] - without[k].position[0]).max()
             for k in validation]
    assert max(moved) > 1e-6



def test_sustained_training_of_a_planar_scene_is_refused_before_any_work(tmp_path):
    """Planar recordings are single impacts: no sustained contact to learn from."""
    from residualsim.errors import ParameterError
    from residualsim.residual.train import TrainingConfig, train_residual

    with pytest.raises(ParameterError, match="needs a 3D scene"):
        train_residual("planar-ellipse", {"a": None}, {"b": None}, tmp_path / "m",
                       params=EngineParams(), substeps=1,
                       config=TrainingConfig(sustained=True))
    assert not (tmp_path / "m").exists()
