"""Ctrl-C twice: the command ends at once with one line, no traceback, and the checkpoint
written before stays loadable (issue 37)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SYNTHETIC = ROOT / "data" / "samples" / "cube-synthetic"


@pytest.mark.slow
def test_second_ctrl_c_exits_at_once_without_traceback(tmp_path):
    out = tmp_path / "cal"
    command = [sys.executable, "-m", "residualsim", "calibrate", "--scene", "cube", "--data",
               str(SYNTHETIC), "--params", "lateral_friction,restitution", "--samples",
               "100000", "--burn-in", "10", "--workers", "2", "--out", str(out)]
    # preexec_fn: Ctrl-C at its default in the child, as in a terminal (a runner started in
    # the background, e.g. `nohup pytest &`, passes SIGINT on ignored, and the CLI keeps an
    # ignored SIGINT ignored).
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True, cwd=tmp_path,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(out.glob("*checkpoint*")):
        time.sleep(0.5)
    assert any(out.glob("*checkpoint*")), "no checkpoint within 2 minutes"
    os.killpg(process.pid, signal.SIGINT)  # Ctrl-C reaches the whole process group
    time.sleep(0.05)
    os.killpg(process.pid, signal.SIGINT)
    try:
        stdout, stderr = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail("still running 30 s after the second Ctrl-C")
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert "interrupted" in stderr
    for checkpoint in out.glob("*checkpoint*"):
        if checkpoint.suffix == ".json":
            json.loads(checkpoint.read_text())


def _interrupted_calibrate(tmp_path, monkeypatch, write) -> tuple[int, str, Path]:
    """``residualsim calibrate`` whose search is stopped by Ctrl-C (KeyboardInterrupt) after
    ``write(out)``: (exit code, stderr, --out)."""
    import residualsim.sysid.calibrate as calibration
    from conftest import quiet_main

    out = tmp_path / "runs" / "cal"

    def stopped(*args, **kwargs):
        write(out)
        raise KeyboardInterrupt

    monkeypatch.setattr(calibration, "calibrate", stopped)
    code, _, stderr = quiet_main("calibrate", "--scene", "cube", "--data", SYNTHETIC,
                                 "--params", "lateral_friction", "--out", out, "--quiet")
    return code, stderr, out


def test_ctrl_c_before_the_first_checkpoint_leaves_no_empty_folder(tmp_path, monkeypatch):
    # issue 51: the README's cube calibrate line killed early left an empty cal/ and said
    # only "interrupted"
    code, stderr, out = _interrupted_calibrate(
        tmp_path, monkeypatch, lambda out: out.mkdir(parents=True))
    assert code == 130
    assert not out.exists() and not out.parent.exists()  # both made by the command
    assert f"interrupted before anything was saved: {out} removed (it was empty)" in stderr


def test_ctrl_c_after_a_checkpoint_keeps_it_and_names_resume(tmp_path, monkeypatch):
    def checkpoint(out: Path) -> None:
        out.mkdir(parents=True)
        (out / "checkpoint.npz").write_bytes(b"saved")

    code, stderr, out = _interrupted_calibrate(tmp_path, monkeypatch, checkpoint)
    assert code == 130
    assert (out / "checkpoint.npz").read_bytes() == b"saved"
    assert f"{out} keeps what was saved up to the last checkpoint: the same command with " \
           "--resume continues from there" in stderr
