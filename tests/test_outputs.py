"""Output paths are checked before any work (issue 27): one helper, every writing command."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from residualsim.atomic import check_output
from residualsim.cli import main
from residualsim.errors import ParameterError

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "data" / "samples" / "cube-synthetic"
MODEL = ROOT / "data" / "pretrained" / "cube-contactnets"
SAMPLES = ROOT / "data" / "samples" / "contactnets-cube"
STATE = "0,0,0.3,1,0,0,0,0.5,0,-0.5,0,5,0"


def _run(capsys, *argv):
    started = time.perf_counter()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err, time.perf_counter() - started


# --- the helper --------------------------------------------------------------------------------
def test_a_missing_parent_is_fine_and_nothing_is_created(tmp_path):
    target = tmp_path / "a" / "b" / "x.npz"
    assert check_output(target) == target
    assert not (tmp_path / "a").exists()  # made when written, not when checked
    assert check_output(tmp_path / "new" / "dir", kind="dir", command="calibrate")


def test_an_ancestor_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ParameterError, match=r"f is a file, not a directory"):
        check_output(tmp_path / "f" / "deeper" / "x.npz")
    with pytest.raises(ParameterError, match="exists and is not a directory"):
        check_output(tmp_path / "f", kind="dir", command="calibrate")


def test_existing_files_directories_and_devices(tmp_path):
    (tmp_path / "x.npz").write_bytes(b"old")
    with pytest.raises(ParameterError, match=r"already exists \(pass --force"):
        check_output(tmp_path / "x.npz")
    assert check_output(tmp_path / "x.npz", force=True)
    with pytest.raises(ParameterError, match="is a directory"):
        check_output(tmp_path)
    with pytest.raises(ParameterError, match="not a regular file"):
        check_output("/dev/null", force=True)


def test_read_only_places_are_refused():
    with pytest.raises(ParameterError, match="cannot write here"):
        check_output("/sys/residualsim-test.npz")
    with pytest.raises(ParameterError, match="cannot write here"):
        check_output("/proc/residualsim-test", kind="dir", command="calibrate")


def test_another_commands_directory_is_never_written(tmp_path):
    cal = tmp_path / "cal"
    cal.mkdir()
    (cal / "summary.json").write_text("{}")
    with pytest.raises(ParameterError, match="holds the output of residualsim calibrate"):
        check_output(cal, kind="dir", command="train", force=True)
    with pytest.raises(ParameterError, match="is the output of residualsim calibrate"):
        check_output(cal / "summary.json", force=True)
    assert check_output(cal, kind="dir", command="calibrate", resume=True)
    # a finished model is not retrained over
    with pytest.raises(ParameterError, match="already holds a trained model"):
        check_output(MODEL, kind="dir", command="train")
    # a directory replaced as a whole (data synthesize --force) must be its own output
    other = tmp_path / "home"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(ParameterError, match="not residualsim data synthesize output"):
        check_output(other, kind="dir", command="data synthesize", fresh=True, force=True)


# --- every command refuses before any computation ----------------------------------------------
def _commands(tmp_path: Path, out: Path) -> dict[str, list]:
    return {
        "simulate": ["simulate", "--data", BUNDLED, "--out", out],
        "predict": ["predict", "--model", MODEL, "--data", SAMPLES, "--out", out],
        "rollout": ["rollout", "--state", STATE, "--samples", "2", "--out", out],
        "rollout --plot": ["rollout", "--state", STATE, "--samples", "2",
                           "--out", tmp_path / "r.npz", "--plot", out],
        "calibrate": ["calibrate", "--data", BUNDLED, "--out", out, "--samples", "2"],
        "train": ["train", "--data", BUNDLED, "--out", out, "--budget", "2"],
        "fit-spread": ["fit-spread", "--model", MODEL, "--data", SAMPLES, "--out", out],
        "evaluate": ["evaluate", "--scene", "cube", "--data", SAMPLES, "--out", out],
        "data synthesize": ["data", "synthesize", "--params", "lateral_friction=0.3",
                            "--out", out],
        "demo": ["demo", "--out", out],
    }


@pytest.mark.parametrize("name", ["simulate", "predict", "rollout", "rollout --plot",
                                  "calibrate", "train", "fit-spread", "evaluate",
                                  "data synthesize", "demo"])
def test_every_command_refuses_an_output_under_a_file(capsys, tmp_path, name):
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    argv = _commands(tmp_path, blocker / "out")[name]
    code, out, err, seconds = _run(capsys, *argv)
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{blocker} is a file, not a directory" in err
    assert seconds < 5  # refused before loading or simulating anything
    assert blocker.read_text() == "not a directory"


@pytest.mark.parametrize("name", ["simulate", "predict", "rollout", "rollout --plot"])
def test_result_files_are_not_replaced_without_force(capsys, tmp_path, name):
    out = tmp_path / "result"
    out.write_bytes(b"earlier result")
    code, _, err, _ = _run(capsys, *_commands(tmp_path, out)[name])
    assert code == 2 and "already exists (pass --force to replace it)" in err
    assert out.read_bytes() == b"earlier result"


@pytest.mark.parametrize("argv, words", [
    (["rollout", "--state", STATE, "--out", "r.png", "--plot", "r.png"], "same file as --out"),
    (["rollout", "--state", STATE, "--out", "r.npz", "--plot", "r.jpg"], "name it *.png"),
    (["score", "--pred", "p.png", "--plot", "p.png"], "the same file as --pred"),
    (["score", "--pred", "p.png", "--plot", "p.npz"], "name it *.png"),
    (["uncertainty", "--model", MODEL, "--data", SAMPLES, "--out", "u.json",
      "--plot", "u.json"], "name it *.png"),
])
def test_a_plot_is_a_png_apart_from_the_other_files(capsys, tmp_path, monkeypatch, argv,
                                                   words):
    """--plot must not be one of the command's other files (score --pred p.npz --plot
    p.npz replaced the predictions by the plot), and is a PNG by name."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.png").write_bytes(b"predictions")
    code, _, err, _ = _run(capsys, *argv)
    assert code == 2 and words in err and "Traceback" not in err
    assert (tmp_path / "p.png").read_bytes() == b"predictions"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.png"]


@pytest.mark.parametrize("name", ["simulate", "predict", "rollout"])
def test_an_existing_directory_is_not_a_result_file(capsys, tmp_path, name):
    out = tmp_path / "dir"
    out.mkdir()
    code, _, err, _ = _run(capsys, *_commands(tmp_path, out)[name])
    assert code == 2 and "is a directory" in err


@pytest.mark.parametrize("name", ["train", "evaluate", "data synthesize", "demo", "fit-spread"])
def test_no_command_writes_into_a_calibration_directory(capsys, tmp_path, name):
    cal = tmp_path / "cal"
    cal.mkdir()
    summary = {"format": "residualsim.calibration/1"}
    (cal / "summary.json").write_text(json.dumps(summary))
    (cal / "checkpoint.npz").write_bytes(b"chain")
    code, _, err, _ = _run(capsys, *_commands(tmp_path, cal)[name])
    assert code == 2 and "holds the output of residualsim calibrate" in err
    assert sorted(p.name for p in cal.iterdir()) == ["checkpoint.npz", "summary.json"]


def test_calibrate_refuses_a_model_directory(capsys, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(MODEL, model)
    before = sorted(p.name for p in model.iterdir())
    code, _, err, _ = _run(capsys, *_commands(tmp_path, model)["calibrate"])
    assert code == 2 and "holds the output of residualsim train (model.json)" in err
    assert sorted(p.name for p in model.iterdir()) == before


def test_simulate_makes_a_missing_parent_and_force_replaces(capsys, tmp_path):
    out = tmp_path / "new" / "deeper" / "pred.npz"
    argv = ["simulate", "--data", BUNDLED, "--out", out, "--limit", "1"]
    assert _run(capsys, *argv)[0] == 0 and out.is_file()
    assert _run(capsys, *argv)[0] == 2
    assert _run(capsys, *argv, "--force")[0] == 0


def test_fit_spread_writes_a_new_model_directory(capsys, tmp_path):
    out = tmp_path / "refit"
    before = {p.name: p.read_bytes() for p in MODEL.iterdir()}
    code, stdout, err, _ = _run(capsys, "fit-spread", "--model", MODEL, "--data", SAMPLES,
                                "--tosses", "2", "--samples", "2", "--grid", "1", "--out", out)
    assert code == 0, err
    assert {p.name: p.read_bytes() for p in MODEL.iterdir()} == before  # shipped model intact
    refit = json.loads((out / "model.json").read_text())
    assert refit["spread"] == 1.0 and refit["info"]["derived_from"] == str(MODEL)
    # neither --out nor --in-place: refused, naming both
    code, _, err, _ = _run(capsys, "fit-spread", "--model", MODEL, "--data", SAMPLES)
    assert code == 2 and "--out DIR" in err and "--in-place" in err


def test_fit_spread_in_place_notes_the_change_in_the_model_card(capsys, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(MODEL, model)
    code, _, err, _ = _run(capsys, "fit-spread", "--model", model, "--data", SAMPLES,
                           "--tosses", "2", "--samples", "2", "--grid", "2", "--in-place")
    assert code == 0, err
    card = (model / "MODEL_CARD.md").read_text()
    assert "fit-spread --in-place" in card and "spread is now 2" in card


@pytest.mark.parametrize("argv", [
    ["train", "--data", BUNDLED, "--budget", "2", "--optimizer", "Bogus"],
    ["calibrate", "--data", BUNDLED, "--params", "lateral_friction,restitution", "--method",
     "mh", "--samples", "2", "--burn-in", "1", "--chains", "1", "--proposal-scale", "nan"],
])
def test_a_refused_command_leaves_no_empty_output_folders(capsys, tmp_path, argv):
    """Refused after it made --out (and its missing parents): the folders it created and
    left empty are removed; the folder that was there before stays."""
    code, _, err, _ = _run(capsys, *argv, "--out", tmp_path / "a" / "b" / "c")
    assert code == 2 and "Traceback" not in err
    assert tmp_path.is_dir() and list(tmp_path.iterdir()) == []
