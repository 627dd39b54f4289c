"""``data info --body`` (issue 48): how well each recording's free flight determines the
body and joints, per file and for all files together, before a calibration is run."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from residualsim.cli import main

ROOT = Path(__file__).resolve().parents[1]
HINGE = str(ROOT / "assets" / "examples" / "hinge.toml")
ELL = str(ROOT / "assets" / "examples" / "ell.toml")
MOMENTS = {f"body.ell.moment_{i}" for i in (1, 2, 3)}


def _late(traj, first: int, key: str):
    """The same toss from sample ``first`` on: a free flight that ends a few samples in."""
    arrays = {f.name: getattr(traj, f.name)[first:] for f in dataclasses.fields(traj)
              if isinstance(getattr(traj, f.name), np.ndarray)}
    return dataclasses.replace(traj, traj_id=key, **arrays)


def _write(folder: Path, scene: str, with_velocities: bool) -> Path:
    """Two files of one toss: ``long`` (about 17 samples of free flight at 100 Hz) and
    ``short`` (the same toss from sample 12: about 5)."""
    from residualsim.data.csv import save_csv_trajectories
    from residualsim.sim.synthesize import synthesize_tosses

    toss = list(synthesize_tosses({"lateral_friction": 0.3}, n_tosses=4, n_samples=40, rng=2,
                                  scene=scene, rate_hz=100.0).values())[3]
    save_csv_trajectories(folder, {"long": dataclasses.replace(toss, traj_id="long"),
                                   "short": _late(toss, 12, "short")},
                          with_velocities=with_velocities)
    return folder


@pytest.fixture(scope="module")
def sets(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("flight")
    return {"hinge": _write(root / "hinge", HINGE, True),
            "ell": _write(root / "ell", ELL, True),
            "ell-poses": _write(root / "ell-poses", ELL, False)}


def _info(capsys, data: Path, scene: str) -> tuple[dict, str]:
    code = main(["data", "info", str(data), "--scene", scene, "--body"])
    out = capsys.readouterr().out
    assert code == 0
    return json.loads(out.strip().splitlines()[-1])["body_flight"], out


def test_a_single_bodys_inertia_scale_is_weak_in_free_flight(sets, capsys):
    """Torque-free motion depends on the moments' ratios only: their common scale is the
    weakest direction of every file and of all together; the rest is determined."""
    report, out = _info(capsys, sets["ell"], ELL)
    assert len(report["names"]) == 9 and report["rollouts"] == 2 * (1 + 9)
    for entry in [*report["files"], report["all"]]:
        weakest = entry["weak_directions"][0]
        assert set(weakest["members"]) == MOMENTS and weakest["ratio"] < 1e-3
        signs = np.sign(list(weakest["members"].values()))
        assert np.all(signs == signs[0])  # all three moments together: a scale
        assert entry["condition"] < 1e-3
    assert report["all"]["determined"] >= 6
    assert "body on the free flight: 9 parameters (body)" in out
    assert "all files" in out and "body.ell.moment_1" in out


def test_a_toss_that_lands_at_once_determines_less(sets, capsys):
    """The short file (the same toss a few samples before landing) compares fewer samples
    and determines fewer directions; the two links' moments along the hinge axis enter
    free flight only as their sum, in every file."""
    report, out = _info(capsys, sets["hinge"], HINGE)
    files = {f["id"]: f for f in report["files"]}
    assert files["short"]["samples"] < files["long"]["samples"]
    assert report["all"]["samples"] == files["short"]["samples"] + files["long"]["samples"]
    assert files["short"]["determined"] < files["long"]["determined"] < len(report["names"])
    assert all(f["initial_state"] == "recorded" for f in files.values())
    for entry in [*files.values(), report["all"]]:
        members = entry["weak_directions"][0]["members"]
        assert {"body.base.moment_3", "body.arm.moment_3"} <= set(members)
    assert "joint.elbow.damping" in report["names"] and "(body, joints)" in out


def test_fitted_initial_states_absorb_part_of_the_body(sets, capsys):
    """Pose-only files: the initial velocities are unknowns beside the body, so what they
    can mimic is no evidence: fewer directions are determined than with velocities, and
    the report costs the 12 state offsets' rollouts more."""
    poses, _ = _info(capsys, sets["ell-poses"], ELL)
    velocities, _ = _info(capsys, sets["ell"], ELL)
    assert all(f["initial_state"] == "fitted" for f in poses["files"])
    assert poses["rollouts"] == 2 * (1 + 9 + 12)
    for mine, theirs in zip([*poses["files"], poses["all"]],
                            [*velocities["files"], velocities["all"]]):
        assert mine["determined"] <= theirs["determined"]
    assert poses["all"]["determined"] < velocities["all"]["determined"]
    assert set(poses["all"]["weak_directions"][0]["members"]) == MOMENTS


@pytest.mark.parametrize("argv, message", [
    (["--scene", "cube", "--body"], "'cube' is a built-in scene"),
    (["--body"], "--body needs --scene"),
])
def test_body_report_refuses_what_has_no_body(capsys, argv, message):
    code = main(["data", "info", str(ROOT / "data" / "samples" / "contactnets-cube"), *argv])
    assert code == 2
    err = capsys.readouterr().err
    assert message in err


def test_the_later_flights_between_bounces_count_as_calibrate_fits_them(tmp_path, capsys):
    """A toss that bounces and flies again: its row stacks the later flights (as lsq's body
    stage fits them, :mod:`residualsim.sysid.flight_segments`), so it compares more samples
    than the same toss cut short after its first landing, which has none."""
    from residualsim.data.csv import save_csv_trajectories
    from residualsim.sim.engine import Engine
    from residualsim.sim.synthesize import synthesize_tosses
    from residualsim.sysid.flight_segments import later_flights

    tosses = synthesize_tosses({"lateral_friction": 0.3, "restitution": 0.6}, n_tosses=6,
                               n_samples=120, rng=4, scene=HINGE, rate_hz=100.0)
    with Engine(HINGE) as engine:
        counted = {k: later_flights(engine, t) for k, t in tosses.items()}
    key = next(k for k, flights in counted.items() if flights)
    first_later = counted[key][0][0]
    save_csv_trajectories(tmp_path, {"bounces": dataclasses.replace(tosses[key], traj_id="bounces"),
                                     "cut": _late(tosses[key], 0, "cut")}, with_velocities=True)
    cut = tmp_path / "cut.csv"  # the same toss up to just before its first later flight
    lines = cut.read_text().splitlines()
    cut.write_text("\n".join(lines[:first_later]) + "\n")
    report, out = _info(capsys, tmp_path, HINGE)
    files = {f["id"]: f for f in report["files"]}
    assert files["bounces"]["later_flights"] == len(counted[key]) >= 1
    assert files["cut"]["later_flights"] == 0
    assert files["bounces"]["samples"] > files["cut"]["samples"]
    assert report["all"]["samples"] == files["bounces"]["samples"] + files["cut"]["samples"]
    assert any(line.split()[:3] == ["file", "flights", "samples"] for line in out.splitlines())
