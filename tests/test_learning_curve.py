"""The learning-curve harness and ``residualsim evaluate``: subsets, scores, summaries,
resume, and a tiny end-to-end curve on the bundled synthetic tosses."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from residualsim.cli import main
from residualsim.data import load_trajectories
from residualsim.errors import DataError, ParameterError
from residualsim.experiments.learning_curve import (CurveConfig, curve_table, position_rmse,
                                        run_learning_curve, summarize, training_subsets)
from residualsim.sim.scenes import EngineParams

BUNDLED = Path(__file__).resolve().parents[1] / "data" / "samples" / "cube-synthetic"


def test_subsets_are_nested_seeded_and_capped():
    ids = [str(i) for i in range(30)]
    subsets = training_subsets(ids, (1, 5, 10, 300), repeats=2, seed=4)
    assert sorted({n for _, n in subsets}) == [1, 5, 10, 30]
    for repeat in range(2):
        assert subsets[(repeat, 5)][:1] == subsets[(repeat, 1)]
        assert subsets[(repeat, 10)][:5] == subsets[(repeat, 5)]
        assert sorted(subsets[(repeat, 30)]) == sorted(ids)
    assert subsets[(0, 10)] != subsets[(1, 10)]
    assert training_subsets(ids, (10,), 2, seed=4)[(1, 10)] == subsets[(1, 10)]
    with pytest.raises(DataError):
        training_subsets([], (1,), 1)


def test_position_rmse_is_the_mean_of_per_toss_rmse():
    tosses = load_trajectories(BUNDLED)
    some = dict(list(tosses.items())[:2])
    exact = {k: t.positions_m for k, t in some.items()}
    assert position_rmse(exact, some) == 0.0
    shifted = {k: t.positions_m + np.array([0.003, 0.0, 0.004]) for k, t in some.items()}
    assert position_rmse(shifted, some) == pytest.approx(0.005)
    first = next(iter(some))
    with pytest.raises(DataError, match=first):
        position_rmse({**exact, first: exact[first][:-1]}, some)


def test_summary_and_table():
    rows = [{"method": "mdn", "n_train": 5, "repeat": r, "heldout_rmse_m": v}
            for r, v in enumerate((0.010, 0.014))]
    rows.append({"method": "engine", "n_train": 5, "repeat": 0, "heldout_rmse_m": 0.012})
    summary = summarize(rows)
    assert [s["method"] for s in summary] == ["engine", "mdn"]
    mdn = summary[1]
    assert mdn["mean_m"] == pytest.approx(0.012) and mdn["std_m"] == pytest.approx(0.002)
    assert (mdn["min_m"], mdn["max_m"], mdn["repeats"]) == (0.010, 0.014, 2)
    assert "| 5 | 12.0 ± 0.0 (1) | 12.0 ± 2.0 (2) |" in curve_table(summary)


def test_bad_settings_are_refused():
    with pytest.raises(ParameterError, match="unknown methods"):
        CurveConfig(methods=("engine", "oracle"))
    with pytest.raises(ParameterError):
        CurveConfig(sizes=(0,))


def test_a_tiny_curve_runs_resumes_and_keeps_finished_rows(tmp_path):
    tosses = load_trajectories(BUNDLED)
    ids = list(tosses)
    split = {"train": ids[:5], "validation": ids[5:6], "test": ids[6:8]}
    params = EngineParams(lateral_friction=0.18, restitution=0.3)
    config = CurveConfig(sizes=(1, 3), repeats=1, methods=("engine", "gp"), seed=0)
    lines = []
    rows = run_learning_curve(tosses, split, params, 10, tmp_path, config, log=lines.append)
    assert [(r["method"], r["n_train"]) for r in rows] == [
        ("engine", 1), ("gp", 1), ("engine", 3), ("gp", 3)]
    assert all(r["n_heldout"] == 2 and np.isfinite(r["heldout_rmse_m"]) for r in rows)
    # the synthetic tosses were made by this engine: it is nearly exact on them
    assert rows[0]["heldout_rmse_m"] < 0.005
    # with one toss the GP finds no engine event to pair with the recorded contact runs
    # (rigid synthetic contact): it has nothing to learn from, corrects nothing, and says so
    assert "no contact events" in rows[1]["fallback"]
    assert rows[1]["heldout_rmse_m"] == rows[0]["heldout_rmse_m"]
    # drop the last row: a rerun computes exactly that one again
    path = tmp_path / "curve.jsonl"
    kept = path.read_text().splitlines()[:-1]
    path.write_text("\n".join(kept) + "\n")
    lines.clear()
    again = run_learning_curve(tosses, split, params, 10, tmp_path, config, log=lines.append)
    assert len(lines) == 1 and "gp" in lines[0] and len(again) == 4
    assert again[-1]["heldout_rmse_m"] == pytest.approx(rows[-1]["heldout_rmse_m"])


def test_evaluate_refuses_to_overwrite_and_checks_the_model_kind(tmp_path, capsys):
    out = tmp_path / "curve"
    out.mkdir()
    (out / "curve.jsonl").write_text("")
    code = main(["evaluate", "--scene", "cube", "--data", str(BUNDLED), "--out", str(out),
                 "--methods", "engine", "--sizes", "1", "--repeats", "1"])
    assert code == 2 and "--resume" in capsys.readouterr().err
    code = main(["evaluate", "--scene", "planar-ellipse", "--data", str(BUNDLED),
                 "--model", str(BUNDLED.parents[1] / "pretrained" / "cube-contactnets"), "--out", str(tmp_path / "x")])
    assert code == 2 and "not 'planar-ellipse'" in capsys.readouterr().err


def test_evaluate_cube_writes_table_plot_and_json(tmp_path, capsys):
    out = tmp_path / "curve"
    code = main(["evaluate", "--scene", "cube", "--data", str(BUNDLED), "--out", str(out),
                 "--methods", "engine", "--sizes", "1", "2", "--repeats", "1",
                 "--heldout", "validation"])
    assert code == 0, capsys.readouterr().err
    assert (out / "curve.png").stat().st_size > 1000
    summary = json.loads((out / "curve-summary.json").read_text())
    assert [s["n_train"] for s in summary] == [1, 2]
    assert "| training tosses | engine |" in (out / "curve.md").read_text()


def test_evaluate_records_the_guard_tolerance_and_resume_refuses_another(tmp_path, capsys):
    out = tmp_path / "curve"
    args = ["evaluate", "--scene", "cube", "--data", str(BUNDLED), "--out", str(out),
            "--methods", "engine", "--sizes", "1", "--repeats", "1", "--heldout", "validation"]
    assert main(args + ["--penetration-tolerance", "0.001"]) == 0, capsys.readouterr().err
    config = json.loads((out / "curve-config.json").read_text())
    assert config["guard"]["penetration_tolerance_m"] == 0.001  # the shipped model's is 0
    # resuming with the model's own tolerance would mix two settings in one curve
    capsys.readouterr()
    assert main(args + ["--resume"]) == 2
    assert "other settings (guard)" in capsys.readouterr().err


def test_evaluate_can_run_the_curve_on_other_engine_parameters(tmp_path, capsys):
    from residualsim.sim.scenes import EngineParams

    out = tmp_path / "curve"
    assert main(["evaluate", "--scene", "cube", "--data", str(BUNDLED), "--out", str(out),
                 "--methods", "engine", "--sizes", "1", "--repeats", "1",
                 "--heldout", "validation", "--params", "default"]) == 0, \
        capsys.readouterr().err
    config = json.loads((out / "curve-config.json").read_text())
    assert config["params"] == json.loads(json.dumps(EngineParams().as_json()))
    shipped = json.loads((BUNDLED.parents[1] / "pretrained" / "cube-contactnets"
                          / "model.json").read_text())["params"]
    assert config["params"] != shipped


def test_calibrated_method_fits_the_engine_on_the_training_subset(tmp_path):
    # The synthetic tosses were made with friction 0.18 and restitution 0.3 (rigid contact);
    # PyBullet's defaults (restitution 0) are far off, and calibrating on 3 of them helps.
    tosses = load_trajectories(BUNDLED)
    ids = list(tosses)
    split = {"train": ids[:5], "validation": ids[5:6], "test": ids[6:8]}
    config = CurveConfig(sizes=(3,), repeats=1, methods=("engine", "calibrated"),
                         calibration_budget=60, seed=0)
    rows = run_learning_curve(tosses, split, EngineParams(), 10, tmp_path, config,
                              log=lambda line: None)
    engine, calibrated = (r["heldout_rmse_m"] for r in rows)
    assert calibrated < 0.7 * engine
    with pytest.raises(ParameterError, match="calibration_budget"):
        CurveConfig(calibration_budget=0)


def test_joint_fit_moves_the_engine_and_never_validates_worse_than_its_start(tmp_path):
    """train_joint: one search over the six engine parameters and the MDN's weights. On
    synthetic tosses (friction 0.18, restitution 0.3) it starts at the centre of the
    calibration box, keeps the best validation loss (never worse than the start), returns
    parameters inside the box, and is seeded."""
    from residualsim.residual.joint import train_joint
    from residualsim.residual.train import TrainingConfig
    from residualsim.sysid.calibrate import CUBE_CALIBRATED, CUBE_CALIBRATION_BOUNDS
    from residualsim.sysid.paramspace import ParamSpace

    tosses = load_trajectories(BUNDLED)
    ids = list(tosses)
    train = {k: tosses[k] for k in ids[:3]}
    validation = {k: tosses[k] for k in ids[5:7]}
    space = ParamSpace(CUBE_CALIBRATED, bounds=CUBE_CALIBRATION_BOUNDS)
    config = TrainingConfig(budget=96, hidden=(4,), validate_every=16, patience=5)
    model, figures = train_joint("cube", train, validation, space, substeps=2, config=config)
    assert figures["validation_rmse_m"] <= figures["start_validation_rmse_m"] + 1e-12
    assert figures["evaluations"] == 96 and figures["chosen_evaluation"] >= 1
    unit = space.to_unit(np.array([getattr(model.params, n) for n in space.names]))
    assert ((unit >= 0.0) & (unit <= 1.0)).all() and not np.allclose(unit, 0.5)
    again, _ = train_joint("cube", train, validation, space, substeps=2, config=config)
    assert again.params == model.params
    np.testing.assert_array_equal(again.policy.get_flat(), model.policy.get_flat())
    split = {"train": ids[:3], "validation": ids[5:7], "test": ids[7:8]}
    curve = CurveConfig(sizes=(3,), repeats=1, methods=("joint", "calibrated+mdn"),
                        calibration_budget=16, mdn_budget=8, mdn_hidden=(4,))
    rows = run_learning_curve(tosses, split, EngineParams(), 2, tmp_path, curve,
                              log=lambda line: None)
    assert [r["method"] for r in rows] == ["joint", "calibrated+mdn"]
    assert all(np.isfinite(r["heldout_rmse_m"]) and "fallback" not in r for r in rows)
