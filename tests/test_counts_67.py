"""Issue 67: bound every count. ``uncertainty --samples 100000000`` ran 300 s on one
recording with no output, no cap and no estimate: now its predictions are checked against
the memory left before any rollout, its time is estimated from a short first measurement
and refused past ``--max-minutes``, and each row prints a plain progress line."""

from __future__ import annotations

from pathlib import Path

from conftest import quiet_main

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "data" / "samples" / "contactnets-cube"
ARGS = ["uncertainty", "--data", REAL, "--split", "all", "--limit", "1"]


def test_a_count_past_the_memory_left_is_refused_before_any_rollout(monkeypatch, tmp_path):
    import residualsim.parallel.backend as backend

    monkeypatch.setattr(backend, "available_memory_bytes", lambda: 2 ** 30)
    code, _, err = quiet_main(*ARGS, "--samples", "100000000", "--out", tmp_path / "u.json")
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    assert "--samples 100000000 on 1 recordings needs at least" in line
    assert "GiB available: lower --samples or --limit" in line
    assert "[uncertainty]" not in err  # refused before the first row
    assert not (tmp_path / "u.json").exists()


def test_a_count_past_max_minutes_is_refused_with_its_estimate(tmp_path):
    code, _, err = quiet_main(*ARGS, "--samples", "5000", "--max-minutes", "0.001", "--out",
                              tmp_path / "u.json")
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("residualsim: error: --samples 5000 would take about ")
    assert "2 samples of the 1 recordings took" in line and "--max-minutes 0.001" in line
    assert not (tmp_path / "u.json").exists()


def test_progress_is_plain_lines_with_the_estimate(tmp_path):
    code, _, err = quiet_main(*ARGS, "--samples", "4")
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.startswith("[uncertainty]")]
    assert len(lines) == 4  # the deterministic row, the estimate, two sampled rows
    assert "the sampled rows: about" in lines[1] and "\r" not in err


# predict --samples: the same bounds, the same rule (parallel.require_time/require_memory).
MODEL = ROOT / "data" / "pretrained" / "cube-contactnets"
PREDICT = ["predict", "--model", MODEL, "--data", REAL, "--split", "all", "--limit", "1"]


def test_predict_samples_past_the_memory_left_are_refused_before_any_rollout(monkeypatch,
                                                                             tmp_path):
    import residualsim.parallel.backend as backend

    monkeypatch.setattr(backend, "available_memory_bytes", lambda: 2 ** 30)
    code, _, err = quiet_main(*PREDICT, "--samples", "100000000", "--out", tmp_path / "p.npz")
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    assert "--samples 100000000 on 1 recordings needs at least" in line, line
    assert "[predict]" not in err and not (tmp_path / "p.npz").exists()


def test_predict_samples_past_max_minutes_are_refused_with_the_estimate(tmp_path):
    code, _, err = quiet_main(*PREDICT, "--samples", "5000", "--max-minutes", "0.001",
                              "--out", tmp_path / "p.npz")
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("residualsim: error: --samples 5000 would take about "), line
    assert "(2 samples of the 1 recordings took" in line and "--max-minutes 0.001" in line
    assert "raise --max-minutes" in line and not (tmp_path / "p.npz").exists()


def test_predict_prints_its_estimate_and_writes_the_same_predictions(tmp_path):
    import numpy as np

    code, _, err = quiet_main(*PREDICT, "--samples", "3", "--out", tmp_path / "p.npz")
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.startswith("[predict]")]
    assert len(lines) == 1 and "--samples 3: about" in lines[0], err
    code, _, err = quiet_main(*PREDICT, "--samples", "3", "--max-minutes", "0", "--out",
                              tmp_path / "q.npz")
    assert code == 0, err
    with np.load(tmp_path / "p.npz") as p, np.load(tmp_path / "q.npz") as q:
        assert all(np.array_equal(p[k], q[k]) for k in p.files if p[k].dtype != object)


def test_predict_impact_samples_are_bounded_too(mcube_dir, tmp_path):
    shipped = ROOT / "data" / "pretrained" / "planar-ellipse"
    args = ["predict", "--model", shipped, "--data", mcube_dir, "--split", "validation",
            "--out", tmp_path / "p.npz"]
    code, _, err = quiet_main(*args, "--samples", "5000", "--max-minutes", "0.001")
    assert code == 2 and "samples of the 210 impacts took" in err.strip().splitlines()[-1]
    code, _, err = quiet_main(*args, "--samples", "3")
    assert code == 0 and "[predict]" in err and (tmp_path / "p.npz").is_file()


# rollout --samples/--particles/--events: the same rule (memory checked before, as it was).
ROLLOUT = ["rollout", "--toss", "20", "--data", REAL]


def test_rollout_counts_past_max_minutes_are_refused_with_the_estimate(tmp_path):
    code, _, err = quiet_main(*ROLLOUT, "--samples", "5000", "--particles", "100000",
                              "--max-minutes", "0.001", "--out", tmp_path / "r.npz")
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("residualsim: error: --samples 5000 with --particles 100000 x "
                           "--events 3 would take about "), line
    assert "(2 rollouts took" in line and "one event of 50 particles" in line
    assert "--max-minutes 0.001" in line and not (tmp_path / "r.npz").exists()


def test_rollout_prints_its_estimate(tmp_path):
    code, _, err = quiet_main(*ROLLOUT, "--samples", "3", "--particles", "60", "--events", "1",
                              "--out", tmp_path / "r.npz")
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.startswith("[rollout]")]
    assert len(lines) == 1 and "about" in lines[0] and (tmp_path / "r.npz").is_file()


# check-calibration --datasets: timed on its first data set (or those --out holds), refused
# before the next past --max-minutes, the finished ones kept; a line before and after each.
SBC = ["check-calibration", "--scene", "cube", "--datasets", "2", "--tosses", "3", "--samples",
       "20", "--substeps", "2", "--mh-samples", "30", "--burn-in", "10", "--draws", "9",
       "--bins", "5", "--workers", "1"]


def test_check_calibration_bounds_its_data_sets_and_says_each(tmp_path, monkeypatch):
    import json

    out = tmp_path / "sbc.jsonl"
    code, _, err = quiet_main(*SBC, "--max-minutes", "0.001", "--out", out)
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("residualsim: error: the 1 data sets left of --datasets 2 would "
                           "take about "), line
    assert "(data set 0 took" in line and f"{out} keeps it, a rerun resumes" in line
    assert "--max-minutes 0.001: lower --datasets, --tosses, --mh-samples or --burn-in" in line
    lines = [x for x in err.splitlines() if x.startswith("[check-calibration]")]
    assert len(lines) == 2 and "0/2 data set 0 starting" in lines[0] and "1/2 data set 0 done" \
        in lines[1], lines
    assert len(out.read_text().splitlines()) == 1  # the finished data set kept, whole

    def no_calibration(*args, **kwargs):
        raise AssertionError("calibrated before the estimate was checked")

    monkeypatch.setattr("residualsim.sysid.calibrate.calibrate", no_calibration)
    code, _, err = quiet_main(*SBC, "--max-minutes", "0.001", "--out", out)
    assert code == 2 and "(data set 0 took" in err.strip().splitlines()[-1]  # from the file
    monkeypatch.undo()
    code, stdout, err = quiet_main(*SBC, "--max-minutes", "0", "--out", out)
    assert code == 0, err
    assert json.loads(stdout.strip().splitlines()[-1])["ran"] == 1
    lines = [x for x in err.splitlines() if x.startswith("[check-calibration]")]
    assert "1/2 data set 1 starting, about" in lines[0] and "2/2 data set 1 done" in lines[1]
