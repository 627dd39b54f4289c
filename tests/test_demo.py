"""``residualsim.experiments.demo`` on the real tosses bundled in ``data/samples/contactnets-cube``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from residualsim.data import load_trajectories, split_ids
from residualsim.data.bundled import PRETRAINED_CUBE, REAL_SAMPLES
from residualsim.errors import ParameterError
from residualsim.experiments.demo import ENGINES, format_demo, run_demo

SETTINGS = {"seed": 0, "samples": 8, "particles": 40, "progress": False}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "not-yet-there"  # created by run_demo
    return run_demo(REAL_SAMPLES, out, n_workers=2, **SETTINGS)


def test_bundle_is_small_licensed_training_tosses():
    files = [p for p in REAL_SAMPLES.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 400_000
    assert (REAL_SAMPLES / "LICENSE").is_file()
    readme = (REAL_SAMPLES / "README.md").read_text()
    assert "Pfrommer" in readme and "BSD-3-Clause" in readme
    ids = list(load_trajectories(REAL_SAMPLES))
    assert 3 <= len(ids) <= 10
    assert all(i in readme for i in ids)
    # Training split by the id hash alone, which does not depend on the other ids.
    assert split_ids(ids)["train"] == ids
    trained = json.loads((PRETRAINED_CUBE / "model.json").read_text())["info"]["train_ids"]
    assert set(ids) <= set(trained)


def test_three_engines_scored_with_finite_errors(demo):
    assert [key for key, _ in ENGINES] == list(demo.engines)
    for row in demo.engines.values():
        assert row["n_trajectories"] == len(demo.ids) == 8
        assert row["n_samples"] == 1
        for key in ("position_rmse_m", "position_rmse_sides", "rotation_error_deg",
                    "final_error_m"):
            assert math.isfinite(row[key]) and row[key] > 0
        assert 0 < row["rotation_error_deg"] < 180
        # Same quantity in two units: the cube side is 0.1048 m.
        assert row["position_rmse_sides"] == pytest.approx(row["position_rmse_m"] / 0.1048)


def test_calibration_beats_pybullet_defaults_on_position(demo):
    # Measured: 0.0128 m against 0.0456 m on the 8 bundled tosses.
    default = demo.engines["default"]["position_rmse_m"]
    calibrated = demo.engines["calibrated"]["position_rmse_m"]
    assert calibrated < 0.5 * default
    # The shipped residual's mean correction is zero (validation kept the engine): the
    # residual row is the calibrated engine's.
    residual = demo.engines["residual"]["position_rmse_m"]
    assert residual == pytest.approx(calibrated, rel=1e-12)
    assert residual < 0.5 * default


def test_stochastic_prediction_has_coverage(demo):
    s = demo.stochastic
    assert s["n_samples"] == SETTINGS["samples"] and s["seed"] == 0
    for key in ("coverage_50", "coverage_90", "coverage_xy_50", "coverage_xy_90"):
        assert s[key] is not None and 0.0 <= s[key] <= 1.0
    assert s["coverage_xy_50"] <= s["coverage_xy_90"]
    assert s["events"] > 0 and math.isfinite(s["energy_score_m"])


def test_belief_picture_and_record(demo):
    assert demo.png_path.parent.is_dir() and demo.png_path.name == "belief.png"
    assert demo.png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(demo.belief) == 3
    assert all(step["accepted"] >= 2 for step in demo.belief)
    assert demo.belief_toss in demo.ids
    record = json.loads(json.dumps(demo.to_json(), allow_nan=False))
    assert record["png"] == str(demo.png_path) and record["seconds"] > 0
    assert record["trained_on"] == len(demo.ids)
    text = format_demo(demo)
    assert "TRAINING tosses" in text and "README" in text
    assert all(label in text for _, label in ENGINES)
    assert str(demo.png_path) in text


def test_same_seed_same_numbers_for_any_worker_count(demo, tmp_path):
    single = run_demo(REAL_SAMPLES, tmp_path, n_workers=1, **SETTINGS)
    assert single.engines == demo.engines
    assert single.stochastic == demo.stochastic
    assert single.belief == demo.belief


def _no_computation(*args, **kwargs):
    raise AssertionError("the demo computed before checking its output directory")


def test_out_dir_that_is_a_file_fails_before_any_work(tmp_path, monkeypatch):
    import residualsim.residual.model as model_module
    import residualsim.sim.rollout as rollout

    monkeypatch.setattr(rollout, "predict_trajectories", _no_computation)
    monkeypatch.setattr(model_module.ResidualModel, "load", _no_computation)
    target = tmp_path / "out.txt"
    target.write_text("keep me")
    with pytest.raises(ParameterError, match="out.txt.*existing file"):
        run_demo(tmp_path / "no-such-data", target, **SETTINGS)
    with pytest.raises(ParameterError, match="out.txt"):
        run_demo(REAL_SAMPLES, target / "below", **SETTINGS)
    assert target.read_text() == "keep me"


@pytest.mark.parametrize("setting", [{"samples": 1}, {"particles": 1}, {"n_workers": 0}])
def test_bad_settings_are_refused(tmp_path, setting):
    with pytest.raises(ParameterError):
        run_demo(REAL_SAMPLES, tmp_path, **{**SETTINGS, **setting})


def test_bundled_paths_exist():
    assert Path(REAL_SAMPLES, "tosses").is_dir() and PRETRAINED_CUBE.is_dir()
