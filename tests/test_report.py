"""``residualsim report``: one self-contained HTML page (figures inline, nothing external)."""

from __future__ import annotations

import base64
import json
import re

import pytest

from residualsim.cli import main
from residualsim.data.bundled import PRETRAINED_CUBE, REAL_SAMPLES, SYNTHETIC_SAMPLES
from residualsim.experiments.report import build_report


def _images(page: str) -> list[bytes]:
    sources = re.findall(r'<img [^>]*src="([^"]*)"', page)
    assert all(s.startswith("data:image/png;base64,") for s in sources), sources
    return [base64.b64decode(s.split(",", 1)[1]) for s in sources]


def _self_contained(page: str) -> None:
    assert "http://" not in page and "https://" not in page and 'src="//' not in page
    assert not re.search(r'(src|href)="(?!data:)', page)  # no file, script or style links


@pytest.mark.slow
def test_report_of_the_shipped_model_on_the_bundled_tosses(tmp_path, capsys):
    out = tmp_path / "sub" / "report.html"
    code = main(["report", "--model", str(PRETRAINED_CUBE), "--data", str(REAL_SAMPLES),
                 "--split", "all", "--samples", "4", "--figures", "3", "--workers", "2",
                 "--quiet", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    record = json.loads(captured.out.strip().splitlines()[-1])
    assert record["recordings"] == 8 and record["drawn"] == 3
    page = out.read_text()
    images = _images(page)
    assert len(images) >= 4 and record["figures"] == len(images) == 4  # 3 tosses + reliability
    assert all(png.startswith(b"\x89PNG") and len(png) > 5000 for png in images)
    _self_contained(page)
    for row in ("PyBullet defaults", "calibrated engine", "residual model (mean)",
                "position RMSE [m]", "rotation error [deg]", "all split"):
        assert row in page
    assert page.count("Reproduce:") == len(images) + 1  # the figures and the decomposition
    assert "5 more recordings are in the table but not drawn" in page
    # issue 51: the final x-y coverage is the headline, the 3-D figure beside it
    headline = re.search(r'<p class="headline">(.*?)</p>', page).group(1)
    assert headline.index("on the table (x-y)") < headline.index("in 3-D")
    assert page.index("<p class=\"headline\">") < page.index("<table>")
    head = re.findall(r"<th>([^<]*)</th>", page[page.index("<table>"):])
    assert head.index("final x-y in 50 % region") < head.index("3-D: in 50 % region")
    # the title names the folders, not their absolute paths
    title = re.search(r"<title>(.*?)</title>", page).group(1)
    assert title == re.search(r"<h1>(.*?)</h1>", page).group(1)
    assert "/" not in title and "cube-contactnets" in title and REAL_SAMPLES.name in title
    # the shipped model's mean residual is zero: every drawn caption says its line hides
    # the calibrated engine's
    assert len(record["zero_residual"]) == 3
    assert page.count("The residual is zero here") == 3
    # the decomposition (a), (b), (c) with the pose and trajectory energy scores, ratios
    decomposition = record["decomposition"]
    rows = {row["row"]: row for row in decomposition["rows"]}
    assert list(rows) == ["deterministic", "state noise", "state noise + residual"]
    for key in ("energy_score_m", "trajectory_energy_score_m"):
        full = rows["state noise + residual"][key]
        assert decomposition["ratios"]["c_over_b"][key] == pytest.approx(
            full / rows["state noise"][key])
        assert f"{decomposition['ratios']['c_over_a'][key]:.3f}" in page
    assert "energy score, pose along the trajectory (m)" in page
    assert "state noise + residual: along the trajectory, 3-D" in page
    # Refused before any work when it exists.
    assert main(["report", "--model", str(PRETRAINED_CUBE), "--data", str(REAL_SAMPLES),
                 "--out", str(out)]) == 2


@pytest.mark.slow
def test_report_of_an_mh_calibration_shows_the_posterior(tmp_path):
    from residualsim.sysid.calibrate import calibrate

    calibrate("cube", SYNTHETIC_SAMPLES, ["restitution"], tmp_path / "cal", method="mh",
              samples=20, burn_in=10, chains=2, max_items=2, substeps=2, plots=False)
    figures = build_report(tmp_path / "r.html", calibration=tmp_path / "cal",
                           data=SYNTHETIC_SAMPLES, split="all", max_figures=1, progress=False)
    page = (tmp_path / "r.html").read_text()
    assert figures["figures"] == len(_images(page)) == 3  # one toss, corner, trace
    assert "R-hat" in page and "bulk ESS" in page and "restitution" in page
    assert "Posterior: corner plot" in page and "Posterior: trace plot" in page
    assert "residual model" not in page  # no model: no residual rows or bands
    _self_contained(page)


def test_report_needs_a_model_or_a_calibration(tmp_path, capsys):
    assert main(["report", "--out", str(tmp_path / "r.html")]) == 2
    assert "--model DIR and/or --calibration DIR" in capsys.readouterr().err


def test_coinciding_mean_predictions_are_detected():
    """The zero-residual note rests on this: the same trajectory to 1e-9 m, not nearly."""
    import numpy as np

    from residualsim.evaluation.predictions import TrajectoryPrediction
    from residualsim.experiments.report import _coincide

    rng = np.random.default_rng(0)
    position = rng.normal(size=(1, 5, 3))
    quaternion = rng.normal(size=(1, 5, 4))
    first = TrajectoryPrediction(position, quaternion)
    assert _coincide(first, TrajectoryPrediction(position.copy(), quaternion.copy()))
    assert not _coincide(first, TrajectoryPrediction(position + 1e-6, quaternion))
    assert not _coincide(first, TrajectoryPrediction(position, quaternion + 1e-6))
    assert not _coincide(first, TrajectoryPrediction(position[:, :4], quaternion[:, :4]))


def test_the_headline_explains_a_low_3d_coverage_only_when_it_is_low():
    from residualsim.experiments.report import _headline

    low = _headline({"coverage_xy_50": 0.5, "coverage_xy_90": 0.9, "coverage_50": 0.1,
                     "coverage_90": 0.2}, 32)
    close = _headline({"coverage_xy_50": 0.46, "coverage_xy_90": 0.89, "coverage_50": 0.48,
                       "coverage_90": 0.94}, 32)
    assert "rarely hold a recording" in low and "fit-ground" in low
    assert "rarely hold a recording" not in close
    assert "in 3-D: 48% / 94%" in close
