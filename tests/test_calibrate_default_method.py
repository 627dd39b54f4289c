"""calibrate's method when none is named: lsq for body or joint names; nevergrad refused
for them (issue 48); mh takes them, starting from lsq's staged fit (issue 50)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from residualsim.errors import ParameterError
from residualsim.sysid.bodyspace import (BODY_LSQ_BUDGET, DEFAULT_BUDGET, default_budget,
                                         resolve_method)

ROOT = Path(__file__).resolve().parents[1]
HINGE = ROOT / "assets" / "examples" / "hinge.toml"


@pytest.mark.parametrize("names, method", [
    (["lateral_friction", "restitution"], "mh"),
    (["contact"], "mh"),
    (["contact", "body", "joints"], "lsq"),
    (["joints"], "lsq"),
    (["lateral_friction", " body.base.com_x"], "lsq"),
    (["joint.hinge.damping"], "lsq"),
])
def test_no_method_named_is_lsq_exactly_when_body_or_joint_names_are(names, method):
    assert resolve_method(None, names) == method


def test_a_named_method_is_kept_and_nevergrad_on_the_body_is_refused():
    assert resolve_method("sandwich", ["contact"]) == "sandwich"
    assert resolve_method("nevergrad", ["contact"]) == "nevergrad"
    assert resolve_method("lsq", ["body"]) == "lsq"
    for names in (["contact", "body"], ["joint.elbow.damping"], [" joints"]):
        assert resolve_method("mh", names) == "mh"
        with pytest.raises(ParameterError, match="--method nevergrad is refused.*"
                                                 "use --method lsq"):
            resolve_method("nevergrad", names)


def test_the_command_line_refuses_nevergrad_on_the_body(tmp_path, capsys):
    """Exit 2, one line naming the methods that work, nothing written."""
    from residualsim.cli import main

    code = main(["calibrate", "--scene", str(HINGE), "--data", str(ROOT / "data" / "samples" /
                 "contactnets-cube"), "--params", "contact,body,joints", "--method",
                 "nevergrad", "--out", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert code == 2
    assert "--method nevergrad is refused for body or joint parameters" in err
    assert "use --method lsq" in err and "free flight -> contact -> weak directions" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "c").exists()


def test_the_default_budget_is_larger_only_for_lsq_and_its_pilot_on_the_body():
    assert BODY_LSQ_BUDGET > DEFAULT_BUDGET
    assert default_budget("lsq", ["contact", "body", "joints"]) == BODY_LSQ_BUDGET
    assert default_budget("mh", ["contact", "joints"]) == BODY_LSQ_BUDGET
    assert default_budget("sandwich", ["body.arm.mass_ratio"]) == BODY_LSQ_BUDGET
    assert default_budget("sandwich", ["contact"]) == DEFAULT_BUDGET
    assert default_budget("mh", ["contact"]) == DEFAULT_BUDGET
    assert default_budget("lsq", ["joint.elbow.damping"]) == BODY_LSQ_BUDGET
    assert default_budget("lsq", ["contact"]) == DEFAULT_BUDGET
    assert default_budget("nevergrad", ["contact", "body"]) == DEFAULT_BUDGET


def test_the_command_line_runs_lsq_on_joints_when_no_method_is_named(tmp_path, capsys):
    from residualsim.cli import main
    from residualsim.data.csv import save_csv_trajectories
    from residualsim.sim.synthesize import synthesize_tosses

    save_csv_trajectories(tmp_path / "data", synthesize_tosses(
        {"lateral_friction": 0.3}, n_tosses=2, n_samples=20, rng=2, scene=str(HINGE),
        rate_hz=100.0), with_velocities=True)
    assert main(["calibrate", "--scene", str(HINGE), "--data", str(tmp_path / "data"),
                 "--params", "joints", "--budget", "4", "--split", "all", "--no-plots",
                 "--out", str(tmp_path / "cal")]) == 0
    summary = json.loads((tmp_path / "cal" / "summary.json").read_text())
    assert summary["method"] == "lsq"
    assert "warning: --method" not in capsys.readouterr().err


@pytest.mark.parametrize("params, extra, method, budget", [
    ("contact,body,joints", [], "lsq", BODY_LSQ_BUDGET),
    ("contact", ["--method", "lsq"], "lsq", DEFAULT_BUDGET),
    ("contact", ["--method", "nevergrad"], "nevergrad", DEFAULT_BUDGET),
    ("contact,body", ["--budget", "7"], "lsq", 7),
    ("contact,joints", ["--method", "mh"], "mh", BODY_LSQ_BUDGET),
])
def test_the_command_line_passes_the_resolved_method_and_budget(tmp_path, monkeypatch,
                                                                 params, extra, method, budget):
    import residualsim.sysid.calibrate as calibration
    from residualsim.cli import main

    seen = {}

    def fake(scene, data, names, out, **options):
        seen.update(options)
        return {"method": options["method"]}

    monkeypatch.setattr(calibration, "calibrate", fake)
    assert main(["calibrate", "--scene", str(HINGE), "--data", str(ROOT / "data" / "samples" /
                 "contactnets-cube"), "--params", params, "--out", str(tmp_path / "c"),
                 "--quiet", *extra]) == 0
    assert (seen["method"], seen["budget"]) == (method, budget)


def test_mh_on_joints_samples_about_the_staged_least_squares_fit(tmp_path):
    """calibrate --method mh with a joint name: the staged fit first (its record in the
    summary), the calibrated likelihood's pilot refined from it, then MH."""
    from residualsim.data.csv import save_csv_trajectories
    from residualsim.sim.synthesize import synthesize_tosses
    from residualsim.sysid.calibrate import calibrate
    from residualsim.sysid.paramspace import ParamSpace

    truth = ParamSpace(["joint.elbow.damping"], scene=str(HINGE)).engine_params([0.004])
    save_csv_trajectories(tmp_path / "data", synthesize_tosses(
        truth, n_tosses=5, n_samples=20,
        rng=3, scene=str(HINGE), rate_hz=100.0, noise_m=0.001), with_velocities=True)
    summary = calibrate(str(HINGE), tmp_path / "data", ["joint.elbow.damping"],
                        tmp_path / "cal", method="mh", samples=40, burn_in=20, budget=6,
                        split="all", plots=False, start_points=2, bootstrap_replicates=2,
                        bounds={"joint.elbow.damping": (0.0005, 0.01)})
    pilot = summary["lsq_pilot"]
    assert [stage["stage"] for stage in pilot["stages"]] == ["body"]
    assert 0 < pilot["evaluations"] <= 6 + 2 and "x" not in pilot and "history" not in pilot
    weighting = summary["weighting"]
    assert weighting["pilot_evaluations"] <= 40 + 30 + 60  # refined, no Sobol search
    assert summary["method"] == "mh" and summary["q05"]["joint.elbow.damping"] <= \
        summary["q95"]["joint.elbow.damping"]
    replicates = weighting["adjustment"].get("bootstrap", {}).get("estimates", [])
    assert all(0.0005 <= row[0] <= 0.01 for row in replicates)


def test_the_sandwich_on_a_body_name_starts_from_the_staged_fit_not_a_box_search(tmp_path):
    """calibrate --method sandwich with a body name: the staged fit first (recorded in the
    summary, its warnings passed on), the sandwich's pilot refined from it (no Sobol points
    spent), its interval about the truth the synthetic tosses were made with."""
    from residualsim.data.csv import save_csv_trajectories
    from residualsim.sim.synthesize import synthesize_tosses
    from residualsim.sysid.calibrate import calibrate
    from residualsim.sysid.paramspace import ParamSpace

    names = ["body.arm.mass_ratio"]
    truth = ParamSpace(names, scene=str(HINGE)).engine_params([0.6])
    save_csv_trajectories(tmp_path / "data", synthesize_tosses(
        truth, n_tosses=6, n_samples=30, rng=5, scene=str(HINGE), rate_hz=100.0,
        noise_m=0.001), with_velocities=True)
    summary = calibrate(str(HINGE), tmp_path / "data", names, tmp_path / "cal",
                        method="sandwich", budget=8, split="all", plots=False,
                        start_points=50, bounds={names[0]: (0.3, 1.2)})
    pilot = summary["lsq_pilot"]
    assert [stage["stage"] for stage in pilot["stages"]] == ["body"]
    assert 0 < pilot["evaluations"] <= 8 + 2
    assert set(pilot["warnings"]) <= set(summary["warnings"])
    assert summary["evaluations"] < 50 + 71  # a Sobol search would have spent 50 more
    assert summary["q05"][names[0]] < summary["median"][names[0]] < summary["q95"][names[0]]
    assert abs(summary["median"][names[0]] - 0.6) < 0.1


def test_refit_starts_fits_the_first_poses_with_the_given_body(tmp_path):
    """A start fitted with the URDF's joint damping is biased for another damping; refit
    with the true one it rolls the recordings out closer to the truth, the workers
    restarted on the new starts and the rollouts counted on."""
    from residualsim.sim.synthesize import synthesize_tosses
    from residualsim.sysid.likelihood import TrajectoryLikelihood
    from residualsim.sysid.paramspace import ParamSpace

    space = ParamSpace(["joint.elbow.damping"], scene=str(HINGE))
    truth = space.engine_params([0.008])  # the URDF's: 0.002
    tosses = synthesize_tosses(truth, n_tosses=3, n_samples=40, rng=4, scene=str(HINGE),
                               rate_hz=100.0, noise_m=0.002, noise_rad=0.01)
    with TrajectoryLikelihood(str(HINGE), tosses, fit_recorded=True) as likelihood:
        before = likelihood.errors([truth])[0]
        rollouts = likelihood.n_rollouts
        starts = {k: t.positions_m[0].copy() for k, t in likelihood.trajectories.items()}
        likelihood.refit_starts(truth)
        after = likelihood.errors([truth])[0]
        assert likelihood.n_rollouts == rollouts + 3
        moved = [np.linalg.norm(likelihood.trajectories[k].positions_m[0] - starts[k])
                 for k in starts]
    assert max(moved) > 0 and after.sum() < before.sum()
    with TrajectoryLikelihood(str(HINGE), tosses) as plain:  # recorded starts: no refit
        plain.refit_starts(truth)
        assert plain.trajectories.keys() == tosses.keys() and plain.n_rollouts == 0


def test_refit_starts_fits_pose_only_recordings_again_too(tmp_path):
    """Recordings read from poses alone had pose and velocities fitted with the URDF's
    body; refit with the true joint damping they are what reading them with it gives, and
    roll out closer to the truth (12 tosses: 3.3x less error)."""
    from residualsim.data.csv import save_csv_trajectories
    from residualsim.sim.recordings import load_recordings
    from residualsim.sim.synthesize import synthesize_tosses
    from residualsim.sysid.likelihood import TrajectoryLikelihood
    from residualsim.sysid.paramspace import ParamSpace

    truth = ParamSpace(["joint.elbow.damping"], scene=str(HINGE)).engine_params([0.008])
    save_csv_trajectories(tmp_path / "poses", synthesize_tosses(
        truth, n_tosses=12, n_samples=40, rng=4, scene=str(HINGE), rate_hz=100.0,
        noise_m=0.001))
    recordings = load_recordings(tmp_path / "poses", str(HINGE))
    assert {t.metadata.get("velocities") for t in recordings.values()} == {"estimated"}
    with TrajectoryLikelihood(str(HINGE), load_recordings(tmp_path / "poses", str(HINGE),
                                                          params=truth)) as read:
        expected = read.errors([truth])[0]
    with TrajectoryLikelihood(str(HINGE), recordings) as likelihood:
        before = likelihood.errors([truth])[0].sum()
        likelihood.refit_starts(truth)
        after = likelihood.errors([truth])[0]
    np.testing.assert_allclose(after, expected, rtol=1e-9)
    assert after.sum() < 0.5 * before
