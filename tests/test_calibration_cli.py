"""``residualsim calibrate`` end to end on synthetic tosses with a known answer."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import quiet_main

from residualsim.cli import main
from residualsim.sysid.posterior import Posterior
from residualsim.evaluation.predictions import load_predictions

TRUTH = {"lateral_friction": 0.3, "restitution": 0.4}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# The set below is made at 1 substep, so it is calibrated at 1 (explicitly: the default is
# the scene's 10, as data synthesize uses). MH's default likelihood: the calibrated one
# (train/README.md §20.5).
MH_ARGS = ["--split", "all", "--samples", "300", "--burn-in", "200", "--chains", "2",
           "--seed", "0", "--quiet", "--substeps", "1"]


def _quiet_main(argv: list) -> tuple[int, str, str]:
    return quiet_main(*argv)


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def synth_dir(tmp_path_factory) -> Path:
    """16 noisy synthetic tosses (1 mm, 5 mrad) made at one substep with the truth."""
    out = tmp_path_factory.mktemp("calibration-cli") / "tosses"
    code, stdout, stderr = _quiet_main([
        "data", "synthesize", "--params", "lateral_friction=0.3,restitution=0.4",
        "--count", "16", "--samples", "90", "--noise-m", "0.001", "--noise-rad", "0.005",
        "--substeps", "1", "--seed", "3", "--out", str(out)])
    assert code == 0, stderr
    return out


@pytest.fixture(scope="module")
def calibrated(synth_dir, tmp_path_factory):
    """(output directory, last JSON line, wall seconds) of one MH calibration."""
    out = tmp_path_factory.mktemp("calibration-cli") / "mh"
    started = time.perf_counter()
    code, stdout, stderr = _quiet_main(["calibrate", "--data", str(synth_dir), *MH_ARGS,
                                        "--workers", "2", "--out", str(out)])
    assert code == 0, stderr
    return out, _last_json(stdout), time.perf_counter() - started


def test_synthesized_set_records_its_truth(synth_dir):
    truth = json.loads((synth_dir / "synthetic.json").read_text())
    assert truth["substeps"] == 1 and truth["count"] == 16
    assert truth["params"]["lateral_friction"] == 0.3 and truth["params"]["restitution"] == 0.4
    assert len(list((synth_dir / "tosses").glob("*.pt"))) == 16


@pytest.mark.slow
def test_calibrate_recovers_the_known_answer(calibrated):
    _, record, _ = calibrated
    for key in ("median", "q05", "q95", "rhat", "ess"):
        assert set(record[key]) == set(TRUTH), key
    assert 0.0 < record["acceptance"] < 1.0
    assert record["seconds"] > 0
    assert record["method"] == "mh" and record["scene"] == "cube"
    for name, truth in TRUTH.items():
        low, median, high = record["q05"][name], record["median"][name], record["q95"][name]
        assert low <= truth <= high, f"{name}: 90 % interval [{low}, {high}] misses {truth}"
        assert abs(median - truth) < 0.1 * truth, f"{name}: median {median} vs {truth}"


@pytest.mark.slow
def test_calibrate_writes_its_outputs(calibrated):
    out, record, _ = calibrated
    summary = json.loads((out / "summary.json").read_text())
    assert summary["format"] == "residualsim.calibration/1"
    assert set(summary["params"]) == {"lateral_friction", "restitution", "spinning_friction",
                                      "rolling_friction", "contact_stiffness",
                                      "contact_damping"}
    for name in TRUTH:
        assert summary["params"][name] == summary["median"][name] == record["median"][name]
    assert summary["params"]["contact_stiffness"] == "inf"
    assert summary["settings"]["substeps"] == 1
    assert summary["data"]["n_items"] == 16 and summary["data"]["split"] == "all"
    posterior = Posterior.load(out / "posterior.npz")
    assert posterior.samples.shape == (2, 300, 2)
    assert posterior.warmup.shape == (2, 200, 2)
    assert posterior.names == list(TRUTH)
    assert posterior.median() == record["median"]
    assert posterior.meta["substeps"] == 1 and posterior.meta["seed"] == 0
    for name in ("corner.png", "trace.png"):
        content = (out / name).read_bytes()
        assert content[:8] == PNG_SIGNATURE and len(content) > 1000
    assert (out / "checkpoint.npz").is_file()


@pytest.mark.slow
def test_simulate_uses_the_calibration_and_its_substeps(calibrated, synth_dir, tmp_path,
                                                        capsys):
    out, record, _ = calibrated
    pred = tmp_path / "pred.npz"
    code, stdout, stderr = _run(capsys, "simulate", "--data", synth_dir, "--params", out,
                                "--out", pred)
    assert code == 0, stderr
    assert _last_json(stdout)["count"] == 16
    meta = load_predictions(pred).meta
    assert meta["substeps"] == 1                       # the scene's default is 10
    assert meta["calibration"] == str(out)
    for name in TRUTH:
        assert meta["params"][name] == record["median"][name]
    code, stdout, _ = _run(capsys, "score", "--pred", pred, "--data", synth_dir)
    assert code == 0
    assert _last_json(stdout)["position_rmse_m"] < 0.01


@pytest.fixture
def copied_run(calibrated, tmp_path) -> Path:
    """A private copy of the calibration directory (checkpoint included)."""
    out, _, _ = calibrated
    return Path(shutil.copytree(out, tmp_path / "mh"))


@pytest.mark.slow
def test_resume_needs_the_flag_and_then_gives_the_same_answer(calibrated, copied_run,
                                                              synth_dir, capsys):
    _, record, _ = calibrated
    argv = ["calibrate", "--data", synth_dir, *MH_ARGS, "--out", copied_run]
    (copied_run / "bootstrap-checkpoint.json").unlink()
    code, _, err = _run(capsys, *argv)
    assert code == 2
    assert "residualsim: error:" in err and "checkpoint" in err
    # refused before any work: the bootstrap (after the pilot fit) wrote nothing
    assert not (copied_run / "bootstrap-checkpoint.json").exists()
    code, stdout, err = _run(capsys, *argv, "--resume")
    assert code == 0, err
    again = _last_json(stdout)
    assert again["median"] == record["median"]
    assert again["q05"] == record["q05"] and again["q95"] == record["q95"]
    # nothing was re-evaluated: the evaluation count is the checkpoint's
    assert again["evaluations"] == record["evaluations"]


@pytest.mark.slow
@pytest.mark.parametrize(("change", "differs"),
                         [(["--seed", "1"], "seed"), (["--substeps", "2"], "substeps"),
                          (["--rotation-weight", "4"], "rotation_weight"),
                          (["--chains", "3"], "sampler"), (["--burn-in", "100"], "burn_in")])
def test_checkpoint_of_another_run_is_refused(copied_run, synth_dir, capsys, change, differs):
    args = list(MH_ARGS)
    flag = change[0]
    if flag in args:
        index = args.index(flag)
        del args[index:index + 2]
    code, _, err = _run(capsys, "calibrate", "--data", synth_dir, *args, *change, "--resume",
                        "--out", copied_run)
    assert code == 2
    assert "another run" in err and differs in err
    assert str(copied_run / "checkpoint.npz") in err


@pytest.mark.slow
def test_damaged_checkpoint_exits_2(copied_run, synth_dir, capsys):
    (copied_run / "checkpoint.npz").write_bytes(b"")
    code, _, err = _run(capsys, "calibrate", "--data", synth_dir, *MH_ARGS, "--resume",
                        "--out", copied_run)
    assert code == 2 and "checkpoint.npz" in err


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:orphanated injected solution")  # cma, via nevergrad
def test_nevergrad_point_estimate(synth_dir, tmp_path, capsys):
    # Budget 80, not 40: at 40 evaluations CMA's best is 14.5 % off in friction for seed 0
    # and 32 % off for seed 1 (seed luck); at 80 seeds 0-2 land within 5 %.
    out = tmp_path / "ng"
    code, stdout, err = _run(capsys, "calibrate", "--data", synth_dir, "--split", "all",
                             "--method", "nevergrad", "--budget", "80", "--seed", "0",
                             "--quiet", "--substeps", "1", "--out", out)
    assert code == 0, err
    record = _last_json(stdout)
    assert record["method"] == "nevergrad" and record["evaluations"] == 80
    for name, truth in TRUTH.items():
        assert abs(record["best"][name] - truth) < 0.15 * truth, (name, record["best"])
        assert record["params"][name] == record["best"][name]
    history = json.loads((out / "history.json").read_text())
    assert len(history) == 80
    assert min(h["loss"] for h in history) == pytest.approx(record["loss"])
    assert not (out / "posterior.npz").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--params", "lateral_frictoin"], "unknown engine parameter 'lateral_frictoin'"),
        (["--bounds", "restitution=0.8:0.2"], "restitution: lower bound 0.8 must be below"),
        (["--bounds", "restitution=0.2"], "--bounds: expected restitution=LOW:HIGH"),
        (["--bounds", "restitution=0.1:1.5"], "restitution: bounds [0.1, 1.5] leave the valid"),
        (["--prior", "restitution=cauchy"], "cannot read prior 'cauchy'"),
        (["--scene", "planar-ellipse"], "cannot replay 3D recordings"),
        (["--method", "nevergrad", "--optimizer", "NoSuchOptimizer"],
         "unknown nevergrad optimizer"),
        (["--rotation-weight", "-1"], "rotation_weight must be a number > 0"),
        (["--rotation-weight", "4", "--method", "mpec"], "--rotation-weight applies to"),
    ],
    ids=["unknown-name", "reversed-bounds", "bounds-syntax", "bounds-range", "bad-prior",
         "planar-scene-on-cube-tosses", "bad-optimizer", "negative-rotation-weight",
         "rotation-weight-with-mpec"],
)
def test_bad_input_exits_2_with_a_clear_message(synth_dir, tmp_path, capsys, extra, message):
    code, out, err = _run(capsys, "calibrate", "--data", synth_dir, "--quiet", "--samples",
                          "5", "--burn-in", "0", "--out", tmp_path / "out", *extra)
    assert code == 2
    assert err.startswith("residualsim: error:") and message in err
    assert not (tmp_path / "out" / "summary.json").exists()


def test_empty_or_missing_data_dir_exits_2(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = _run(capsys, "calibrate", "--data", empty, "--out", tmp_path / "out")
    assert code == 2 and str(empty) in err and "not a recognised data set" in err
    code, _, err = _run(capsys, "calibrate", "--data", tmp_path / "nowhere", "--out",
                        tmp_path / "out")
    assert code == 2 and "no such data directory" in err


@pytest.mark.filterwarnings("ignore:orphanated injected solution")  # cma, via nevergrad
def test_a_point_estimate_never_returns_worse_than_its_start():
    """A loss whose minimum is the start: a tiny nevergrad budget finds nothing better, so
    the start comes back with a warning instead of a worse candidate."""
    from residualsim.sysid.optimize import point_estimate
    from residualsim.sysid.paramspace import ParamSpace

    space = ParamSpace(["lateral_friction", "restitution"])
    start = space.start()
    centre = space.from_unit(start)

    def loss(x):
        return np.sum((np.atleast_2d(x) - centre) ** 2, axis=1)

    found = point_estimate(loss, space, budget=4, rng=0, start=start)
    assert found["x"] == pytest.approx(centre.tolist())
    assert found["loss"] == found["start_loss"] == 0.0
    assert "beat the starting parameters" in found["warnings"][0]
    assert min(row["loss"] for row in found["history"]) > 0.0  # every candidate was worse
    far = point_estimate(lambda x: loss(x) - 10 * np.sum(np.atleast_2d(x), axis=1), space,
                         budget=8, rng=0, start=start)
    assert far["warnings"] == [] and far["loss"] < far["start_loss"]


def test_a_calibration_worse_than_the_defaults_on_validation_says_so(synth_dir, tmp_path,
                                                                     capsys, caplog):
    """Bounds that keep friction and restitution far from the truth (0.3, 0.4): the
    calibrated engine predicts the validation split worse than PyBullet's defaults, and the
    summary and stderr say so."""
    out = tmp_path / "far"
    code, stdout, err = _run(capsys, "calibrate", "--data", synth_dir, "--method", "lsq",
                             "--budget", "4", "--substeps", "1", "--bounds",
                             "lateral_friction=0.95:1,restitution=0.95:1", "--out", out)
    assert code == 0, err
    record = _last_json(stdout)
    assert any("worse than the engine's defaults" in w for w in record["warnings"])
    assert "worse than the engine's defaults" in caplog.text  # the log goes to stderr


def test_start_points_set_how_many_evaluations_mh_spends_before_its_first_step(
        synth_dir, tmp_path, capsys):
    counts = {}
    for points in (2, 8):
        code, stdout, err = _run(capsys, "calibrate", "--data", synth_dir, "--samples", "2",
                                 "--burn-in", "1", "--chains", "1", "--start-points",
                                 points, "--substeps", "1", "--no-plots", "--quiet",
                                 "--max-trajectories", "3", "--weighting", "recording",
                                 "--out", tmp_path / str(points))
        assert code == 0, err
        counts[points] = _last_json(stdout)["evaluations"]
    assert counts[8] - counts[2] == 6
