"""End to end through the command line (issue 34 §1): a model of the hinge predicts the six
ordinary export forms of its recordings as it predicts the clean files, refuses the wrong
units and orders naming the cause, and ``data info`` shows each file's time base."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import quiet_main

from residualsim.evaluation.predictions import load_predictions

ROOT = Path(__file__).resolve().parents[1]
HINGE = ROOT / "assets" / "examples" / "hinge.toml"
TRUTH = "lateral_friction=0.4,restitution=0.3"


_main = quiet_main  # (exit code, stdout, stderr)


def _ok(*argv) -> dict:
    code, out, err = _main(*argv)
    assert code == 0, err
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def setup(tmp_path_factory, train_script):
    """Clean hinge recordings (poses only, 100 Hz), a model at 100 Hz, its predictions."""
    from residualsim.residual.policy import ResidualPolicy
    from residualsim.residual.model import ResidualModel
    from residualsim.sim.rollout import ContactGuard
    from residualsim.sim.scenes import parse_params

    root = tmp_path_factory.mktemp("forms")
    clean = root / "clean"
    _ok("data", "synthesize", "--scene", HINGE, "--count", 4, "--samples", 70, "--params",
        TRUTH, "--out", clean, "--seed", 5)
    model = ResidualModel(scene=str(HINGE), policy=ResidualPolicy(hidden=(4,), seed=0),
                          params=parse_params(TRUTH), dt_s=0.01, substeps=10,
                          guard=ContactGuard()).save(root / "model")
    _ok("predict", "--model", model, "--data", clean, "--out", root / "clean.npz")
    return {"root": root, "clean": clean, "model": model, "forms": train_script(
        "recording_forms"), "reference": load_predictions(root / "clean.npz")}


#: Largest mean distance (m) between a form's predictions and the clean files' predictions,
#: per recording: the same values (semicolon, tab), the same values at other time stamps
#: (epoch). Resampled values (jitter, gaps, mixed) differ from the clean ones by up to
#: 0.1 mm (6 mm across a 7-period gap in free flight), the initial states fitted on them by
#: a little, and rollouts through contact amplify it (one toss starts touching the table:
#: its initial velocities come from differences of the poses): the median recording stays
#: within 2 mm and the set's error against the clean recordings within 25 % + 3 mm.
SAME = {"semicolon": 1e-12, "tab": 1e-12, "epoch": 1e-4}


@pytest.mark.slow
@pytest.mark.parametrize("form", ["jitter", "gaps", "epoch", "mixed", "semicolon", "tab"])
def test_each_export_form_predicts_as_the_clean_files(setup, form):
    folder = setup["forms"].export_form(setup["clean"], setup["root"] / form, form)
    out = setup["root"] / f"{form}.npz"
    figures = _ok("predict", "--model", setup["model"], "--data", folder, "--out", out)
    assert figures["count"] == 4
    got, reference = load_predictions(out), setup["reference"]
    assert sorted(got.ids) == sorted(reference.ids)
    distances = []
    for key in reference.ids:
        a, b = got[key].position[0], reference[key].position[0]
        assert abs(len(a) - len(b)) <= 1  # one sample shorter where the last stamp is early
        n = min(len(a), len(b))
        distances.append(float(np.linalg.norm(a[:n] - b[:n], axis=1).mean()))
    if form in SAME:
        assert max(distances) <= SAME[form], distances
    else:
        assert np.median(distances) < 2e-3, distances
        error = setup["forms"]._position_error
        clean = error(setup["root"] / "clean.npz", setup["clean"])
        assert abs(error(out, setup["clean"]) - clean) <= 0.25 * clean + 0.003
    assert _ok("score", "--pred", out, "--data", folder)["n_trajectories"] == 4


@pytest.mark.parametrize("form, cause", [
    ("millimetres", "positions look like millimetres"),
    ("milliseconds", "times look like milliseconds"),
    ("y-up", "another up axis"),
    ("decimal-comma", "has a decimal comma"),
    ("xyzw", "pass --quaternion-order xyzw"),
    ("zero-velocities", "are all zero while the poses move"),
    ("time-backwards", "does not increase"),
])
def test_wrong_forms_are_refused_naming_the_cause(setup, form, cause):
    folder = setup["forms"].export_form(setup["clean"], setup["root"] / form, form)
    code, out, err = _main("predict", "--model", setup["model"], "--data", folder, "--out",
                           setup["root"] / f"{form}.npz")
    assert code == 2 and "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("residualsim: error:")]
    assert len(errors) == 1 and cause in errors[0] and ".csv" in errors[0], err
    assert not (setup["root"] / f"{form}.npz").exists()


def test_xyzw_export_predicts_with_the_option(setup):
    folder = setup["forms"].export_form(setup["clean"], setup["root"] / "xyzw2", "xyzw")
    out = setup["root"] / "xyzw2.npz"
    _ok("predict", "--model", setup["model"], "--data", folder, "--out", out,
        "--quaternion-order", "xyzw")
    for key in setup["reference"].ids:
        np.testing.assert_allclose(load_predictions(out)[key].position,
                                   setup["reference"][key].position, atol=1e-9)


def test_data_info_shows_each_files_time_base(setup):
    folder = setup["forms"].export_form(setup["clean"], setup["root"] / "mixed-info", "mixed")
    code, out, err = _main("data", "info", folder, "--scene", HINGE, "--rate-hz", 100)
    assert code == 0, err
    record = json.loads(out.strip().splitlines()[-1])
    rates = sorted(f["rate_hz"] for f in record["files"])
    assert rates == [100.0, 100.0, 120.0, 120.0]
    assert {f["resampled_hz"] for f in record["files"]} == {None, 100.0}
    assert all(f["g_fit_mps2"] is None or abs(f["g_fit_mps2"] - 9.81) < 1.0
               for f in record["files"])
    assert sum(v for k, v in record["splits"].items() if k != "rule") == 4
    assert "per file:" in out and "times need only increase" in out
