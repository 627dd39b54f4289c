"""Issue 67: with standard error sent to a file (a cluster job, nohup), long work says what
it is doing in plain lines, at most one every few seconds (MH's bootstrap and the body
stages printed nothing there); on a terminal it keeps its bar."""

from __future__ import annotations

import io
import sys
from pathlib import Path

from conftest import quiet_main

from residualsim.parallel import progress
from residualsim.parallel.progress import PlainProgress, progress_bar

ROOT = Path(__file__).resolve().parents[1]
SYNTHETIC = ROOT / "data" / "samples" / "cube-synthetic"


def test_plain_lines_say_stage_done_total_elapsed_and_estimate(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    clock = iter([0.0, 5.0, 12.0, 12.0, 13.0, 30.0])
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    bar = PlainProgress(total=10, desc="bootstrap", unit="refits")
    bar.update()  # 5 s: under EVERY_S, no line
    bar.set_postfix(best="0.1")
    bar.update()  # 12 s: a line
    bar.update(3)  # 13 s: too soon
    bar.close()  # the last line, always
    lines = err.getvalue().splitlines()
    assert lines == ["[bootstrap] 2/10 refits, 12 s, about 48 s left (best 0.1)",
                     "[bootstrap] 5/10 refits, 30 s, about 30 s left (best 0.1)"]


def test_a_terminal_gets_a_bar_and_a_file_gets_lines(monkeypatch):
    monkeypatch.setattr(progress, "_terminal", lambda: False)
    assert isinstance(progress_bar(total=3, desc="x"), PlainProgress)
    assert not isinstance(progress_bar(total=3, desc="x", disable=True), PlainProgress)
    monkeypatch.setattr(progress, "_terminal", lambda: True)
    assert not isinstance(progress_bar(total=3, desc="x"), PlainProgress)


def test_calibrate_with_stderr_in_a_file_prints_its_stages(tmp_path, monkeypatch):
    monkeypatch.setattr(progress, "_terminal", lambda: False)
    code, _, err = quiet_main("calibrate", "--data", SYNTHETIC, "--split", "all", "--method",
                              "lsq", "--budget", "8", "--no-ground", "--out", tmp_path / "cal")
    assert code == 0, err
    assert "[lsq all] 8/8 sets" in err and "\r" not in err
