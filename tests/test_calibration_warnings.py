"""Calibration defaults agree with the rest of the pipeline, and a sampler that has not
converged says so (issue 27)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from residualsim.cli import main
from residualsim.sysid.posterior import convergence_warnings

BUNDLED = Path(__file__).resolve().parents[1] / "data" / "samples" / "cube-synthetic"


def test_convergence_warnings_name_each_limit():
    good = {"rhat": {"restitution": 1.01}, "ess": {"restitution": 450.0},
            "acceptance": 0.3}
    assert convergence_warnings(good) == []
    bad = {"rhat": {"restitution": 2.39, "lateral_friction": 1.0},
           "ess": {"restitution": 3.9, "lateral_friction": 150.0}, "acceptance": 0.03}
    warnings = convergence_warnings(bad)
    assert len(warnings) == 3
    assert "R-hat of restitution is 2.39 (> 1.05)" in warnings[0]
    assert "bulk ESS of restitution is 3.9 (< 100)" in warnings[1]
    assert "acceptance is 3.0 % (outside 10-60 %)" in warnings[2] and "too large" in warnings[2]
    assert "too small" in convergence_warnings({"acceptance": 0.9})[0]
    assert convergence_warnings({"rhat": {"x": float("nan")}}) == []  # one chain: no R-hat


def test_a_short_calibration_warns_in_its_summary_line_and_log(tmp_path, capsys, caplog):
    out = tmp_path / "cal"
    with caplog.at_level(logging.WARNING, logger="residualsim.sysid.calibrate"):
        code = main(["calibrate", "--data", str(BUNDLED), "--params", "restitution",
                     "--split", "all", "--max-trajectories", "2", "--samples", "20",
                     "--burn-in", "10", "--no-plots", "--quiet", "--out", str(out)])
    stdout, err = capsys.readouterr()
    assert code == 0, err
    line = json.loads(stdout.strip().splitlines()[-1])
    summary = json.loads((out / "summary.json").read_text())
    assert line["warnings"] == summary["warnings"]
    assert any("bulk ESS of restitution" in w for w in summary["warnings"])  # 40 draws
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert all(any(w in m for m in logged) for w in summary["warnings"])
    # the default substeps are the scene's (10 for the cube), as data synthesize uses
    assert summary["settings"]["substeps"] == 10


def test_explicit_one_substep_still_calibrates_at_one(tmp_path, capsys):
    out = tmp_path / "cal"
    code = main(["calibrate", "--data", str(BUNDLED), "--params", "restitution",
                 "--split", "all", "--max-trajectories", "2", "--method", "nevergrad",
                 "--budget", "4", "--substeps", "1", "--quiet", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["settings"]["substeps"] == 1 and summary["warnings"] == []
