"""Issue 67: the held-out guard runs whenever a recording is left out of the fit.

``calibrate --split all --max-trajectories 100`` left 224 recordings unused, yet the summary
said ``validation: null, validation_count: 0``: the guard never ran and nothing said so.
Now the recordings ``--max-trajectories`` leaves out are scored with ``--split all`` too,
and where none is left out the summary and standard error say that the guard did not run
and why."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import quiet_main

from residualsim.sysid.calibration_data import load_calibration_data

ROOT = Path(__file__).resolve().parents[1]
SYNTHETIC = ROOT / "data" / "samples" / "cube-synthetic"
QUICK = ["--data", str(SYNTHETIC), "--split", "all", "--method", "lsq", "--budget", "8",
         "--no-ground", "--quiet"]


def test_split_all_with_max_trajectories_scores_the_rest(tmp_path):
    code, _, err = quiet_main("calibrate", *QUICK, "--max-trajectories", "4", "--out",
                              tmp_path / "cal")
    assert code == 0, err
    summary = json.loads((tmp_path / "cal" / "summary.json").read_text())
    assert summary["held_out_counts"] == {"validation": 0, "unused_training": 4}
    assert set(summary["validation"]) == {"calibrated", "default"}
    assert summary["held_out_choice"] in ("calibrated", "default")
    assert "held_out_guard" not in summary


def test_a_guard_that_did_not_run_says_so_and_why(tmp_path, caplog):
    code, _, err = quiet_main("calibrate", *QUICK, "--out", tmp_path / "cal")
    assert code == 0, err
    summary = json.loads((tmp_path / "cal" / "summary.json").read_text())
    assert summary["validation"] is None
    assert summary["held_out_guard"].startswith("did not run: --split all fits every "
                                                "recording, none is left out")
    assert any(w.startswith("the held-out guard did not run") for w in summary["warnings"])
    assert "the held-out guard did not run" in caplog.text


def test_the_validation_split_fitted_with_split_all_is_not_counted_as_held_out():
    data = load_calibration_data("cube", SYNTHETIC, "all", 3)
    assert data.validation  # the validation split's ids: fitted with split "all"
    assert data.held_out_counts() == {"validation": 0, "unused_training": 5}
    assert set(data.held_out) == set(data.unused) and not set(data.held_out) & set(data.train)


def _guard(monkeypatch, names):
    """held_out_guard with its rollouts replaced: each candidate's figure as given."""
    from residualsim.sim.scenes import EngineParams
    from residualsim.sysid import held_out

    figures = {"calibrated": 0.0826, "contact": 0.0779, "default": 0.1}
    monkeypatch.setattr(held_out, "held_out_figures", lambda scene, kind, validation, params,
                        *args: {k: {"position_rmse_m": figures[k]} for k in params})
    monkeypatch.setattr(held_out, "body_of",  # a body of its own, but PyBullet's defaults
                        lambda params: None if params == EngineParams() else object())
    monkeypatch.setattr(held_out.ObjectParams, "of",
                        staticmethod(lambda params, body: EngineParams(restitution=0.5)))
    return held_out.held_out_guard("cube", "trajectories", None, EngineParams(restitution=0.4),
                                   names, None, 1, method="lsq")


def test_the_guard_says_which_candidates_it_compared_and_which_it_did_not(monkeypatch):
    """Issue 67: "compares against the best contact-only fit, not only the run's own". The
    'contact' candidate is the URDF's body with the contact fitted beside the body, not a
    contact-only fit: the summary and standard error say what was compared and what not."""
    from residualsim.sysid.held_out import held_out_note

    _, entry, _ = _guard(monkeypatch, ["lateral_friction", "restitution", "body.ixx"])
    assert list(entry["held_out_compared"]) == ["calibrated", "contact", "default"]
    assert "URDF body with the calibrated contact" in entry["held_out_compared"]["contact"]
    assert entry["held_out_not_compared"].startswith("a contact-only fit with the URDF's body")
    assert "calibrate --params lateral_friction,restitution fits one" in \
        entry["held_out_not_compared"]
    note = held_out_note({**entry, "validation": {k: {"position_rmse_m": 0.1} for k in
                                                  entry["held_out_compared"]}})
    assert "held-out guard compared calibrated: " in note and "not compared: a contact-only" \
        in note


def test_without_body_names_nothing_is_said_not_compared(monkeypatch):
    _, entry, _ = _guard(monkeypatch, ["lateral_friction", "restitution"])
    assert list(entry["held_out_compared"]) == ["calibrated", "default"]
    assert "held_out_not_compared" not in entry


def test_a_contact_only_fit_given_is_scored_and_can_win(monkeypatch):
    """Issue 67: "It compares against the best contact-only fit". With ``contact_fit`` (a
    contact-only calibration: ``--guard-against DIR``) the guard scores it beside the others,
    keeps it when it predicts validation best, and no longer says it was not compared."""
    from residualsim.sim.scenes import EngineParams
    from residualsim.sysid import held_out

    figures = {"calibrated": 0.0826, "contact": 0.0800, "contact_fit": 0.0779, "default": 0.1}
    monkeypatch.setattr(held_out, "held_out_figures", lambda scene, kind, validation, params,
                        *args: {k: {"position_rmse_m": figures[k]} for k in params})
    monkeypatch.setattr(held_out, "body_of",
                        lambda params: None if params in (EngineParams(), alone) else object())
    monkeypatch.setattr(held_out.ObjectParams, "of",
                        staticmethod(lambda params, body: EngineParams(restitution=0.5)))
    alone = EngineParams(restitution=0.3)
    kept, entry, warnings = held_out.held_out_guard(
        "cube", "trajectories", None, EngineParams(restitution=0.4),
        ["lateral_friction", "restitution", "body.ixx"], None, 1, method="lsq",
        contact_fit=alone, contact_fit_source="stages/contact")
    assert list(entry["held_out_compared"]) == ["calibrated", "contact", "contact_fit", "default"]
    assert "(stages/contact)" in entry["held_out_compared"]["contact_fit"]
    assert "held_out_not_compared" not in entry
    assert entry["held_out_choice"] == "contact_fit" and kept is alone
    assert "the contact fitted alone with the URDF's body" in warnings[0]


def test_guard_against_refuses_what_is_not_a_contact_only_fit_of_this_scene(tmp_path):
    contact = tmp_path / "contact"
    code, _, err = quiet_main("calibrate", *QUICK, "--max-trajectories", "4",
                              "--out", contact)
    assert code == 0, err
    code, _, err = quiet_main("calibrate", *QUICK, "--max-trajectories", "4", "--out",
                              tmp_path / "again", "--guard-against", contact)
    assert code == 0, err
    summary = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert set(summary["validation"]) == {"calibrated", "contact_fit", "default"}
    code, _, err = quiet_main("calibrate", *QUICK, "--max-trajectories", "4", "--substeps",
                              "5", "--out", tmp_path / "five", "--guard-against", contact)
    assert code == 2 and "contact values do not transfer across substep counts" in err
    assert not (tmp_path / "five").exists()
    code, _, err = quiet_main("calibrate", *QUICK, "--out", tmp_path / "x",
                              "--guard-against", tmp_path / "missing")
    assert code == 2 and "missing" in err and "Traceback" not in err
