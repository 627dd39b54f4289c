"""Small data sets: a requested split is never silently empty, and the sizes are stated."""

from __future__ import annotations

import json
import logging

import pytest

from residualsim.cli import main
from residualsim.data import load_trajectories
from residualsim.data.bundled import REAL_SAMPLES, SYNTHETIC_SAMPLES
from residualsim.data.splits import select_recordings, split_ids
from residualsim.errors import DataError


def test_an_empty_split_is_an_error_that_states_the_sizes():
    recordings = load_trajectories(SYNTHETIC_SAMPLES)
    sizes = {k: len(v) for k, v in split_ids(list(recordings)).items()}
    assert sizes["test"] == 0  # 8 ids at 0.7/0.15/0.15: the case a newcomer meets
    with pytest.raises(DataError) as error:
        select_recordings(recordings, "test", source="here/")
    message = str(error.value)
    assert message.startswith("here/: the test split is empty")
    assert f"train {sizes['train']}, validation {sizes['validation']}, test 0" in message
    assert "--split-fractions" in message and "--split-ids" in message
    # The way out the message names works.
    chosen = select_recordings(recordings, "test", fractions=(0.4, 0.2, 0.4))
    assert 0 < len(chosen) < len(recordings)


def test_a_small_set_states_its_split_sizes(caplog):
    recordings = load_trajectories(SYNTHETIC_SAMPLES)
    with caplog.at_level(logging.WARNING, logger="residualsim.data.splits"):
        chosen = select_recordings(recordings, "train")
    assert len(chosen) == 7
    assert "only 8 recordings in the splits: train 7, validation 1, test 0" in caplog.text


def test_data_info_shows_the_split_sizes(capsys):
    assert main(["data", "info", str(REAL_SAMPLES)]) == 0
    out = capsys.readouterr().out
    splits = json.loads(out.strip().splitlines()[-1])["splits"]
    assert splits == {"rule": "hash split 0.7/0.15/0.15", "train": 8, "validation": 0,
                      "test": 0}
    assert any(line.startswith("splits") for line in out.splitlines()[:-1])


def test_predict_names_the_split_and_refuses_an_empty_one(tmp_path, capsys):
    code = main(["predict", "--model", "data/pretrained/cube-contactnets", "--data",
                 str(REAL_SAMPLES), "--split", "test", "--out", str(tmp_path / "t.npz")])
    assert code == 2
    assert "the test split is empty (train 8, validation 0, test 0" in capsys.readouterr().err
    assert not (tmp_path / "t.npz").exists()


def test_calibrate_says_its_validation_is_one_recording(tmp_path, capsys):
    code = main(["calibrate", "--data", str(SYNTHETIC_SAMPLES), "--method", "nevergrad",
                 "--budget", "4", "--max-trajectories", "2", "--no-plots", "--quiet",
                 "--params", "restitution", "--out", str(tmp_path / "cal")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    record = json.loads(captured.out.strip().splitlines()[-1])
    assert record["validation_count"] == 1
    assert any("one recording only" in w for w in record["warnings"])
