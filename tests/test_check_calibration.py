"""``residualsim check-calibration``: simulation-based calibration of calibrate on a scene
(:mod:`residualsim.sysid.sbc`)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from residualsim.cli import main
from residualsim.errors import ParameterError
from residualsim.sysid import sbc

TINY = ["--scene", "cube", "--datasets", "2", "--tosses", "3", "--samples", "20",
        "--substeps", "2", "--mh-samples", "30", "--burn-in", "10", "--draws", "9",
        "--bins", "5", "--workers", "1"]


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_check_calibration_runs_resumes_and_refuses_another_configuration(
        tmp_path, capsys, monkeypatch):
    out = tmp_path / "sbc.jsonl"
    assert main(["check-calibration", *TINY, "--out", str(out)]) == 0
    captured = capsys.readouterr()
    figures = json.loads(captured.out.strip().splitlines()[-1])
    assert figures["command"] == "check-calibration" and figures["ran"] == 2
    assert figures["weighting"] == "calibrated"  # calibrate's default, named in the result
    assert "chi2 p" in captured.err
    lines = _lines(out)
    assert sorted(r["index"] for r in lines) == [0, 1]
    for line in lines:
        assert set(line["rank"]) == {"lateral_friction", "restitution"}
        envelope = line["envelope"]  # what the posterior was built from, for re-analysis
        assert np.shape(envelope["covariance_unit"]) == (2, 2)
        assert np.shape(envelope["bootstrap"]["estimates"]) == (10, 2)
        assert len(envelope["envelope_mode"]) == 2 and "transform_unit" not in envelope
        assert all(0 <= r <= 9 for r in line["rank"].values())
        assert all(0.1 <= v <= 0.7 for v in line["truth"].values())
    for name in ("lateral_friction", "restitution"):
        assert sum(figures[name]["histogram"]) == 2
        assert len(figures[name]["histogram"]) == 5
    assert figures["max_rhat"] is not None and figures["min_ess"] is not None

    def no_calibration(*args, **kwargs):
        raise AssertionError("a finished data set was calibrated again")

    monkeypatch.setattr("residualsim.sysid.calibrate.calibrate", no_calibration)
    assert main(["check-calibration", *TINY, "--out", str(out)]) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert again["ran"] == 0 and again["lateral_friction"] == figures["lateral_friction"]
    assert _lines(out) == lines

    assert main(["check-calibration", *TINY, "--noise-m", "0.001", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "another configuration" in err and str(out) in err
    assert _lines(out) == lines


def test_check_calibration_sandwich_and_bad_input(tmp_path, capsys):
    out = tmp_path / "sand.jsonl"
    args = [*TINY, "--method", "sandwich", "--out", str(out)]
    assert main(["check-calibration", *args]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["method"] == "sandwich" and figures["ran"] == 2
    assert all(len(line["envelope"]["mode_unit"]) == 2 for line in _lines(out))
    assert sum(figures["restitution"]["histogram"]) == 2
    assert all(0 <= r <= 9 for line in _lines(out) for r in line["rank"].values())
    bad = tmp_path / "bad.jsonl"
    for extra in (["--bins", "4"], ["--params", "restitution,spinning_friction"]):  # no range
        assert main(["check-calibration", *TINY, *extra, "--out", str(bad)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("residualsim: error:")
    assert not bad.exists()


def test_thinning_and_rank_report_on_hand_made_ranks(tmp_path):
    samples = np.arange(2 * 100 * 2, dtype=float).reshape(2, 100, 2)
    drawn = sbc.thin(samples, 10)
    assert drawn.shape == (10, 2)
    assert drawn[0, 0] == 0 and drawn[4, 0] == 2 * 99 and drawn[5, 0] == 200
    assert sbc.rank_of(np.array([[0.1, 5.0], [0.3, 6.0], [0.5, 7.0]]), [0.35, 4.0]) == [2, 0]

    def results(ranks):
        return [{"rank": {"a": r}, "truth": {"a": 0.5}, "q05": {"a": 0.4},
                 "q95": {"a": 0.6}, "seconds": 2.0} for r in ranks]

    uniform = sbc.report(results(list(range(10)) * 4), draws=9, bins=5)
    assert uniform["a"]["histogram"] == [8] * 5 and uniform["a"]["p_value"] > 0.99
    assert uniform["a"]["mean_rank"] == 4.5 and uniform["a"]["coverage_90"] == 1.0
    assert uniform["seconds_per_dataset"] == 2.0 and uniform["max_rhat"] is None
    zeros = sbc.report(results([0] * 40), draws=9, bins=5)
    assert zeros["a"]["histogram"] == [40, 0, 0, 0, 0] and zeros["a"]["p_value"] < 1e-6
    with pytest.raises(ParameterError, match="divide"):
        sbc.report([], draws=9, bins=4)
    z = sbc.reflected_gaussian([0.95, 0.05], np.eye(2) * 0.01, 500, np.random.default_rng(0))
    assert z.min() >= 0 and z.max() <= 1
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"index": 0, "config": {"seed": 0}}) + "\n")
    assert len(sbc.read_results(path, {"seed": 0})) == 1
    with pytest.raises(ParameterError, match="r.jsonl:1: a result of another configuration"):
        sbc.read_results(path, {"seed": 1})


def test_the_table_flags_ranks_that_are_not_uniform_even_when_p_underflows():
    from residualsim.cli.check_calibration import _table

    row = {"histogram": [50, 0, 0, 0, 0], "p_value": 0.0, "coverage_90": 0.1, "mean_rank": 0.2}
    text = _table({"datasets": 50, "restitution": row}, ["restitution"], 19)
    assert "ranks not uniform (p < 0.05) for restitution" in text
    fine = dict(row, p_value=0.3)
    assert "no evidence against" in _table({"datasets": 50, "restitution": fine},
                                           ["restitution"], 19)
