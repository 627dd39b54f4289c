"""The held-out guard of a calibration (issues 48 and 51): a calibration that predicts the
validation split worse than the object's own URDF body with its contact, or than PyBullet's
defaults, is never kept or exported silently; ``--keep-calibrated`` keeps it with a warning.

The search is made deterministic by replacing the optimiser with one that returns fixed
values (``_fixed_search``): a known-bad or a known-good result, tiny budgets, no hoping.
"""

from __future__ import annotations

import importlib
import json
import math
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import numpy as np
import pytest

from residualsim.sim.scenes import EngineParams
from residualsim.sim.scenes.body import read_body
from residualsim.sysid import held_out
from residualsim.sysid.held_out import choose_candidate, guard_candidates, held_out_guard

EXAMPLES = Path(__file__).resolve().parents[1] / "assets" / "examples"
HINGE = EXAMPLES / "hinge.toml"
HINGE_URDF = EXAMPLES / "hinge.urdf"
#: The truth of the synthetic hinge tosses: this contact with the URDF's own body (elbow
#: damping 0.002 N m s/rad).
TRUTH = {"lateral_friction": 0.3, "restitution": 0.4}
NAMES = ["lateral_friction", "restitution", "joint.elbow.damping"]
BAD = {**TRUTH, "joint.elbow.damping": 0.05}  # 25 times the URDF's: a sluggish elbow
GOOD = {**TRUTH, "joint.elbow.damping": 0.002}  # the URDF's own: ties with "contact"
DAMPING_BOUNDS = "joint.elbow.damping=0:0.05"


def _fixed_search(monkeypatch, values: dict[str, float]) -> None:
    """Make ``calibrate``'s nevergrad and lsq searches return ``values`` at once (one
    evaluation)."""
    def search(loss, space, **_):
        return {"x": [float(values[n]) for n in space.names], "loss": 0.0,
                "start_loss": 0.0, "evaluations": 1, "failed": 0, "history": [],
                "warnings": []}

    def staged(scene, train, space, likelihood, **_):
        return {**search(None, space), "stages": []}

    # the module itself: the package's lazy ``calibrate`` name is the function
    monkeypatch.setattr(importlib.import_module("residualsim.sysid.calibrate"),
                        "point_estimate", search)
    monkeypatch.setattr(importlib.import_module("residualsim.sysid.lsq"),
                        "staged_least_squares", staged)


#: The explicit split of :func:`hinge_csv`'s tosses: 4 to train on, 4 held out.
SPLIT = {"train": [f"synthetic-{i}" for i in range(4)],
         "validation": [f"synthetic-{i}" for i in range(4, 8)], "test": []}


@pytest.fixture(scope="module")
def hinge_csv(tmp_path_factory) -> Path:
    """8 hinge tosses (CSV, with velocities, 40 samples at 100 Hz) made with :data:`TRUTH`,
    and ``split.json`` (:data:`SPLIT`) beside them."""
    from residualsim.data.csv import save_csv_trajectories
    from residualsim.sim.synthesize import synthesize_tosses

    out = tmp_path_factory.mktemp("guard") / "hinge_csv"
    save_csv_trajectories(out, synthesize_tosses(TRUTH, n_tosses=8, n_samples=40, rng=4,
                                                 scene=str(HINGE), rate_hz=100.0),
                          with_velocities=True)
    (out.parent / "split.json").write_text(json.dumps(SPLIT))
    return out


def _cli(capsys, hinge_csv, out: Path, *extra) -> tuple[dict, str]:
    from residualsim.cli import main

    code = main(["calibrate", "--scene", str(HINGE), "--data", str(hinge_csv), "--out",
                 str(out), "--params", ",".join(NAMES), "--bounds", DAMPING_BOUNDS,
                 "--method", "lsq", "--budget", "1", "--split-ids",
                 str(hinge_csv.parent / "split.json"), "--no-ground", "--no-plots",
                 *map(str, extra)])
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    return json.loads((out / "summary.json").read_text()), stderr


def _contact(path: Path) -> dict[str, float]:
    """The ``<contact>`` values of the URDF's first link with a collision shape."""
    for link in ElementTree.parse(path).getroot().findall("link"):
        if link.find("contact") is not None:
            return {c.tag: float(c.get("value")) for c in link.find("contact")}
    raise AssertionError(f"{path}: no <contact>")


# --- a worse calibration is replaced (or kept on request), never exported silently -------------
def test_a_worse_body_is_replaced_by_the_urdfs_own_in_summary_and_export(monkeypatch, capsys,
                                                                           hinge_csv, tmp_path):
    _fixed_search(monkeypatch, BAD)
    summary, stderr = _cli(capsys, hinge_csv, tmp_path / "cal", "--export-urdf",
                           tmp_path / "x.urdf")
    figures = summary["validation"]
    assert set(figures) == {"calibrated", "contact", "default"}
    rmse = {label: f["position_rmse_m"] for label, f in figures.items()}
    assert rmse["contact"] < rmse["calibrated"] and rmse["contact"] < rmse["default"]
    assert summary["held_out_choice"] == "contact"
    assert set(summary["held_out_ratio_to_default"]) == set(figures)
    assert summary["held_out_ratio_to_default"]["default"] == pytest.approx(1.0)
    assert summary["held_out_ratio_to_default"]["calibrated"] == pytest.approx(
        rmse["calibrated"] / rmse["default"])
    # the kept set: the calibrated contact, the URDF's own body; the calibrated one recorded
    assert summary["params"]["lateral_friction"] == pytest.approx(0.3)
    assert summary["params"]["restitution"] == pytest.approx(0.4)
    assert "body" not in summary
    assert summary["calibrated_body"]["joints"][0]["damping"] == pytest.approx(0.05)
    assert summary["calibrated_params"]["restitution"] == pytest.approx(0.4)
    from residualsim.sysid.calibration_file import load_calibration

    assert getattr(load_calibration(tmp_path / "cal").params, "body", None) is None
    # the export holds the kept set: the URDF's own elbow, the calibrated contact
    assert read_body(tmp_path / "x.urdf").joint("elbow").damping == pytest.approx(0.002)
    assert _contact(tmp_path / "x.urdf")["restitution"] == pytest.approx(0.4)
    # and says so: summary, stderr (the three figures on one line, the export on the next)
    warning = next(w for w in summary["warnings"] if w.startswith("held-out guard"))
    assert "kept the contact set instead" in warning
    assert all(f"{label} {rmse[label]:.4g} m" in warning for label in rmse)
    assert "--budget" in warning  # an lsq run: a larger budget is a remedy
    assert "kept: contact" in stderr
    assert all(f"{label} {rmse[label]:.4g} m" in stderr for label in rmse)
    assert "wrote the contact set, not the calibrated one" in stderr


def test_keep_calibrated_keeps_and_exports_it_with_a_warning(monkeypatch, capsys, hinge_csv,
                                                             tmp_path):
    _fixed_search(monkeypatch, BAD)
    summary, stderr = _cli(capsys, hinge_csv, tmp_path / "cal", "--keep-calibrated",
                           "--export-urdf", tmp_path / "x.urdf")
    assert summary["held_out_choice"] == "calibrated"
    assert summary["held_out_best"] == "contact"
    assert summary["body"]["joints"][0]["damping"] == pytest.approx(0.05)
    assert read_body(tmp_path / "x.urdf").joint("elbow").damping == pytest.approx(0.05)
    assert any("held-out guard" in w and "--keep-calibrated" in w
               for w in summary["warnings"])
    assert "kept: calibrated" in stderr and "wrote the" not in stderr


def test_a_calibration_as_good_as_the_others_keeps_its_result(monkeypatch, hinge_csv,
                                                              tmp_path):
    """The URDF's own damping found: calibrated and contact tie (the calibrated set is kept)
    and both beat PyBullet's defaults; no guard warning."""
    from residualsim.sysid.calibrate import calibrate

    _fixed_search(monkeypatch, GOOD)
    summary = calibrate(str(HINGE), hinge_csv, NAMES, tmp_path / "cal", method="nevergrad",
                        budget=1, bounds={"joint.elbow.damping": (0.0, 0.05)},
                        split_lists=SPLIT, ground=False, plots=False,
                        export_urdf=tmp_path / "x.urdf")
    rmse = {label: f["position_rmse_m"] for label, f in summary["validation"].items()}
    assert rmse["calibrated"] == pytest.approx(rmse["contact"])
    assert rmse["calibrated"] < rmse["default"]
    assert summary["held_out_choice"] == "calibrated"
    assert summary["held_out_ratio_to_default"]["calibrated"] < 1.0
    assert summary["body"] == summary["calibrated_body"]
    assert summary["params"] == summary["calibrated_params"]
    assert not any("held-out guard" in w for w in summary.get("warnings", []))
    assert _contact(tmp_path / "x.urdf")["lateral_friction"] == pytest.approx(0.3)


# --- the guard also scores the training recordings --max-trajectories leaves unused ----------
def test_the_guard_scores_unused_training_recordings_beside_validation(monkeypatch, capsys,
                                                                      hinge_csv, tmp_path):
    """4 training tosses, --max-trajectories 1: the fit sees one, the guard scores the 4
    validation tosses and the 3 unused ones, and says so."""
    seen = []
    real = held_out.held_out_figures

    def spy(scene, kind, validation, *rest):
        seen.append(sorted(validation))
        return real(scene, kind, validation, *rest)

    monkeypatch.setattr(held_out, "held_out_figures", spy)
    _fixed_search(monkeypatch, BAD)
    summary, stderr = _cli(capsys, hinge_csv, tmp_path / "cal", "--max-trajectories", 1)
    assert summary["data"]["n_items"] == 1
    assert seen == [sorted(SPLIT["validation"] + SPLIT["train"][1:])]
    assert summary["held_out_counts"] == {"validation": 4, "unused_training": 3}
    assert summary["validation_count"] == 4
    assert "held out (4 validation + 3 unused training recordings)" in stderr
    from residualsim.sysid.held_out import held_out_note

    only_unused = {**summary, "held_out_counts": {"validation": 0, "unused_training": 3}}
    assert held_out_note(only_unused).startswith("held out (3 unused training recordings)")


def test_calibration_data_holds_out_what_max_items_leaves_and_caps_the_unused(
        monkeypatch, hinge_csv):
    """With split "all" the recordings max_items leaves out are held out too (issue 67:
    they were not, and the guard never ran); the validation split is fitted then."""
    from residualsim.sysid import calibration_data
    from residualsim.sysid.calibration_data import load_calibration_data

    everything = load_calibration_data(str(HINGE), hinge_csv, "all", 3, lists=SPLIT)
    assert len(everything.train) == 3
    assert everything.unused and everything.held_out == everything.unused
    assert not set(everything.held_out) & set(everything.train)
    assert everything.held_out_counts()["validation"] == 0
    assert load_calibration_data(str(HINGE), hinge_csv, "all", None, lists=SPLIT).held_out \
        is None
    monkeypatch.setattr(calibration_data, "MAX_UNUSED_HELD_OUT", 2)
    part = load_calibration_data(str(HINGE), hinge_csv, "train", 1, lists=SPLIT)
    assert list(part.train) == SPLIT["train"][:1]
    assert list(part.unused) == SPLIT["train"][1:3]  # the first two left, in split order
    assert sorted(part.held_out) == sorted(SPLIT["validation"] + SPLIT["train"][1:3])
    assert part.held_out_counts() == {"validation": 4, "unused_training": 2}
    whole = load_calibration_data(str(HINGE), hinge_csv, "train", None, lists=SPLIT)
    assert whole.unused is None and sorted(whole.held_out) == sorted(SPLIT["validation"])


# --- planar impacts: calibrated against default, no body -------------------------------------
def test_impacts_are_guarded_between_calibrated_and_default(monkeypatch, make_mcube,
                                                             tmp_path):
    """The calibrated figure made ten times worse (the rollouts still run): the defaults are
    kept, and said to be."""
    from residualsim.sysid.calibrate import calibrate

    make_mcube(tmp_path / "mcube", n_rows=12)
    real = held_out.held_out_figures

    def worse_calibrated(scene, kind, validation, params, substeps, n_workers, *options):
        figures = real(scene, kind, validation, params, substeps, n_workers, *options)
        figures["calibrated"]["velocity_rmse_mps"] *= 10
        return figures

    monkeypatch.setattr(held_out, "held_out_figures", worse_calibrated)
    _fixed_search(monkeypatch, {"lateral_friction": 1.5, "restitution": 0.9})
    summary = calibrate("planar-ellipse", tmp_path / "mcube",
                        ["lateral_friction", "restitution"], tmp_path / "cal",
                        method="nevergrad", budget=1, split_fractions=(0.5, 0.5, 0.0),
                        plots=False)
    assert set(summary["validation"]) == {"calibrated", "default"}
    assert summary["held_out_choice"] == "default"
    assert summary["params"] == EngineParams().as_json()
    assert summary["calibrated_params"]["lateral_friction"] == pytest.approx(1.5)
    assert summary["held_out_ratio_to_default"]["calibrated"] > 1.0
    assert any("worse than the engine's defaults" in w and "m/s" in w
               for w in summary["warnings"])


# --- the guard's rules, without rollouts -----------------------------------------------------
def _figures(**rmse: float) -> dict:
    return {label: {"position_rmse_m": value} for label, value in rmse.items()}


def test_choice_is_the_least_error_and_a_tie_keeps_the_calibrated_set():
    assert choose_candidate(_figures(calibrated=0.02, contact=0.01, default=0.03),
                            "position_rmse_m") == "contact"
    assert choose_candidate(_figures(calibrated=0.02, contact=0.02, default=0.02),
                            "position_rmse_m") == "calibrated"
    assert choose_candidate(_figures(calibrated=0.02 + 1e-12, contact=0.02, default=0.03),
                            "position_rmse_m") == "calibrated"  # rounding is a tie
    assert choose_candidate(_figures(calibrated=math.nan, default=0.5),
                            "position_rmse_m") == "default"
    assert choose_candidate(_figures(calibrated=math.inf, default=math.nan),
                            "position_rmse_m") == "calibrated"


def test_the_contact_candidate_only_when_a_body_was_identified():
    from residualsim.sysid.paramspace import ParamSpace

    space = ParamSpace(NAMES, scene=str(HINGE), bounds={"joint.elbow.damping": (0.0, 0.05)})
    params = space.engine_params(np.array([BAD[n] for n in space.names])).replace(
        table_height_m=-0.001)
    candidates = guard_candidates(params, space.names)
    assert list(candidates) == ["calibrated", "contact", "default"]
    contact = candidates["contact"]
    assert getattr(contact, "body", None) is None
    assert contact.as_dict() == params.as_dict()  # contact and table height kept
    assert candidates["default"] == EngineParams()
    plain = EngineParams(lateral_friction=0.3)
    assert list(guard_candidates(plain, ["lateral_friction"])) == ["calibrated", "default"]


@pytest.mark.parametrize("method", ["lsq", "nevergrad", "mh"])
def test_the_remedy_named_is_not_the_method_already_used(monkeypatch, method):
    monkeypatch.setattr(held_out, "held_out_figures",
                        lambda *args: _figures(calibrated=0.05, default=0.02))
    kept, entry, warnings = held_out_guard("cube", "trajectories", {}, EngineParams(0.9),
                                           ["lateral_friction"], 1, 1, method=method)
    assert kept == EngineParams() and entry["held_out_choice"] == "default"
    assert entry["held_out_ratio_to_default"]["calibrated"] == pytest.approx(2.5)
    (warning,) = warnings
    assert "worse than the engine's defaults" in warning
    assert ("--method lsq" in warning) == (method != "lsq")
    if method == "lsq":
        assert "--budget" in warning and "--bounds" in warning
