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
