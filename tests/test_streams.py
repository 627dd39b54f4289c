"""The command as a user runs it (a subprocess, from an empty directory): standard output
carries the result only, so ``residualsim simulate ... | jq`` works; PyBullet's banner is
gone and progress goes to standard error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from residualsim.data.bundled import PRETRAINED_CUBE, REAL_SAMPLES

ROOT = Path(__file__).resolve().parents[1]


def run_cli(cwd: Path, *argv: str, data_env: str | None = None) -> subprocess.CompletedProcess:
    """``python -m residualsim ARGV`` in ``cwd`` with this checkout's code and
    ``RESIDUALSIM_DATA`` set to ``data_env`` (unset when None)."""
    env = {k: v for k, v in os.environ.items() if k != "RESIDUALSIM_DATA"}
    env["PYTHONPATH"] = str(ROOT)
    if data_env is not None:
        env["RESIDUALSIM_DATA"] = data_env
    return subprocess.run([sys.executable, "-m", "residualsim", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def one_json_line(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1, f"stdout is not one line: {result.stdout!r}"
    return json.loads(lines[0])


def test_simulate_stdout_is_exactly_one_json_line_on_two_workers(tmp_path):
    result = run_cli(tmp_path, "simulate", "--data", str(REAL_SAMPLES), "--out", "p.npz",
                     "--limit", "2", "--workers", "2")
    record = one_json_line(result)
    assert record["command"] == "simulate" and record["count"] == 2
    assert "pybullet build time" not in result.stdout + result.stderr
    assert (tmp_path / "p.npz").is_file()


def test_predict_and_rollout_stdout_is_one_json_line(tmp_path):
    record = one_json_line(run_cli(tmp_path, "predict", "--model", str(PRETRAINED_CUBE),
                                   "--data", str(REAL_SAMPLES), "--limit", "1",
                                   "--out", "p.npz"))
    assert record["command"] == "predict" and record["count"] == 1
    toss = sorted(p.stem for p in (REAL_SAMPLES / "tosses").iterdir())[0]
    result = run_cli(tmp_path, "rollout", "--toss", toss, "--data", str(REAL_SAMPLES),
                     "--samples", "2", "--particles", "0", "--events", "1", "--out", "r.npz")
    assert one_json_line(result)["command"] == "rollout"
    assert "pybullet build time" not in result.stderr


@pytest.mark.slow
def test_the_demo_runs_in_a_clone_with_nothing_beside_it(tmp_path):
    """No data folder, RESIDUALSIM_DATA pointing nowhere, an empty working directory: the
    demo reads the bundled tosses. Its table and JSON line on stdout, its progress on stderr."""
    result = run_cli(tmp_path, "demo", "--samples", "4", "--particles", "20",
                     data_env=str(tmp_path / "nowhere"))
    assert result.returncode == 0, result.stderr
    *table, last = result.stdout.splitlines()
    assert "position RMSE" in "\n".join(table)
    assert json.loads(last)["n_trajectories"] == 8
    assert "demo" in result.stderr  # the progress bar
    assert "pybullet build time" not in result.stdout + result.stderr
    assert (tmp_path / "residualsim-demo").is_dir()
    quiet = run_cli(tmp_path, "demo", "--samples", "4", "--particles", "20", "--quiet",
                    "--out", "quiet")
    assert quiet.returncode == 0 and quiet.stderr == ""
