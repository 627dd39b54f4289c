"""Delayed-acceptance calibration: the staged likelihood, the command, the bench."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from residualsim.cli import main
from residualsim.data import load_trajectories
from residualsim.errors import ParameterError
from residualsim.sim.scenes import EngineParams
from residualsim.sysid.likelihood import StagedLikelihood, TrajectoryLikelihood
from residualsim.sysid.paramspace import ParamSpace

ROOT = Path(__file__).resolve().parents[1]
TOSSES = ROOT / "data" / "samples" / "contactnets-cube"
X = np.array([[0.2, 0.1], [0.4, 0.3], [0.15, 0.0]])


def test_the_stages_add_up_to_the_whole_likelihood():
    tosses = load_trajectories(TOSSES)
    space = ParamSpace(["lateral_friction", "restitution"])
    params = [space.engine_params(row) for row in X]
    with StagedLikelihood("cube", tosses, 0.25, substeps=1) as staged, \
            TrajectoryLikelihood("cube", tosses, substeps=1) as whole:
        assert staged.first.n_items == 2 and staged.rest.n_items == 6
        assert sorted(staged.ids) == sorted(whole.ids) and staged.fraction == 0.25
        np.testing.assert_allclose(staged(params), whole(params), rtol=1e-12)
        screen = staged.screen(space.engine_params)
        approx, token = screen.first(X)
        np.testing.assert_allclose(approx, 4 * staged.first(params), rtol=1e-12)
        np.testing.assert_allclose(screen.complete(X, token), whole(params), rtol=1e-12)
        assert staged.errors(params).shape == (3, 8)
    with pytest.raises(ParameterError, match=r"fraction must lie in \(0, 1\)"):
        StagedLikelihood("cube", tosses, 1.0, substeps=1)


def test_calibrate_with_delayed_acceptance(tmp_path, capsys):
    """The command records the screen's share and how many proposals met it only; a run
    with another fraction cannot resume its checkpoint; a bad fraction exits 2."""
    out = tmp_path / "cal"
    args = ["calibrate", "--scene", "cube", "--data", str(TOSSES), "--split", "all",
            "--samples", "30", "--burn-in", "10", "--substeps", "1", "--quiet",
            "--no-plots", "--out", str(out)]
    assert main([*args, "--delayed-acceptance", "0.25"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["delayed_acceptance"] == 0.25 and summary["screened"] == 2 * 40
    assert summary["evaluations"] < summary["screened"] + 64  # 64: the Sobol start
    capsys.readouterr()
    assert main([*args, "--delayed-acceptance", "0.5", "--resume"]) == 2
    assert "delayed_acceptance" in capsys.readouterr().err
    assert main([*args[:-1], str(tmp_path / "bad"), "--delayed-acceptance", "nan"]) == 2
    assert not (tmp_path / "bad").exists()


def test_bench_calibration_runs_real_chains_plain_and_delayed(capsys):
    assert main(["bench", "calibration", "--data", str(TOSSES), "--tosses", "8",
                 "--probe-steps", "2", "--sampler-steps", "24"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["sampler"]
    for label in ("plain", "delayed"):
        row = report[label]
        assert row["seconds_per_step"] > 0 and np.isfinite(row["ess_per_minute"])
    assert report["plain"]["completed_share"] == 1.0
    assert 0 < report["delayed"]["completed_share"] < 1.0
    assert report["speedup"] > 0
