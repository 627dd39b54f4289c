"""Issue 67: messages that misled.

Degrees in a continuous joint were blamed on the base ("another up axis", "not the units
residualsim reads"); fit-ground without a rest phase did not name the data folder;
check-calibration said "no evidence against uniform ranks" over chains with R-hat 2.7 and
demanded --bounds for restitution alone; report printed corner's unexplained "Too few points
to create valid contours"."""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import numpy as np
import pytest
from conftest import quiet_main

from residualsim.data import load_trajectories

ROOT = Path(__file__).resolve().parents[1]
HINGE = ROOT / "assets" / "examples" / "hinge.toml"
SYNTHETIC = ROOT / "data" / "samples" / "cube-synthetic"
MODEL = ROOT / "data" / "pretrained" / "cube-contactnets"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(URDF with the hinge's joint continuous, tosses in radians, the same in degrees)."""
    root = tmp_path_factory.mktemp("wheel")
    urdf = root / "wheel.urdf"
    urdf.write_text(HINGE.with_suffix(".urdf").read_text().replace(
        'type="revolute"', 'type="continuous"'))
    code, _, stderr = quiet_main("data", "synthesize", "--scene", HINGE, "--count", "2",
                                 "--samples", "60", "--params", "lateral_friction=0.3",
                                 "--out", root / "radians")
    assert code == 0, stderr
    degrees = root / "degrees"
    degrees.mkdir()
    for path in sorted((root / "radians").glob("*.csv")):
        rows = list(csv.reader(path.open()))
        column = rows[0].index("elbow")
        for row in rows[1:]:  # in degrees, wrapped into (-180, 180] as exporters write them
            row[column] = repr(float((np.degrees(float(row[column])) + 180.0) % 360.0 - 180.0))
        with (degrees / path.name).open("w", newline="") as handle:
            csv.writer(handle).writerows(rows)
    return urdf, root / "radians", degrees


def test_degrees_in_a_continuous_joint_are_named_as_degrees(wheel):
    urdf, radians, degrees = wheel
    code, _, stderr = quiet_main("data", "info", "--scene", urdf, radians)
    assert code == 0, stderr
    code, _, stderr = quiet_main("data", "info", "--scene", urdf, degrees)
    assert code == 2, stderr
    assert "continuous joint 'elbow'" in stderr and "look like degrees" in stderr
    assert "residualsim reads radians" in stderr
    assert "up axis" not in stderr and "not the units" not in stderr


def test_a_column_spanning_more_than_a_turn_is_not_unwrapped(wheel):
    """Unwrapping takes steps over pi for wraps at +-pi: in a column of degrees it changed
    the values, so no check could read them as degrees again."""
    _, _, degrees = wheel
    path = sorted(degrees.glob("*.csv"))[1]
    rows = list(csv.reader(path.open()))
    raw = np.array([float(row[rows[0].index("elbow")]) for row in rows[1:]])
    assert np.ptp(raw) > 2 * np.pi and np.abs(np.diff(raw)).max() > np.pi
    toss = load_trajectories(degrees)[path.stem]
    np.testing.assert_array_equal(toss.joint_positions[:, 0], raw)
    assert "unwrapped_joints" not in toss.metadata


def test_fit_ground_without_rest_names_the_data_folder(tmp_path):
    code, _, stderr = quiet_main("fit-ground", "--model", MODEL, "--data", SYNTHETIC,
                                 "--out", tmp_path / "fg")
    assert code == 2, stderr
    line = stderr.strip().splitlines()[-1]
    assert line.startswith(f"residualsim: error: {SYNTHETIC} (its training split, ")
    assert "end at rest on the table" in line and "s within 2 mm" in line
    assert not (tmp_path / "fg").exists()


def _figures(max_rhat: float) -> dict:
    row = {"histogram": [2, 2, 2, 2], "p_value": 0.9, "coverage_90": 0.9, "mean_rank": 4.0}
    return {"datasets": 8, "restitution": row, "max_rhat": max_rhat}


def test_check_calibration_verdict_says_when_the_chains_did_not_mix():
    from residualsim.cli.check_calibration import _table

    mixed = _table(_figures(1.01), ["restitution"], 8)
    assert mixed.splitlines()[-1].startswith("no evidence against uniform ranks")
    assert "R-hat" not in mixed
    unmixed = _table(_figures(2.7), ["restitution"], 8).splitlines()[-1]
    assert "the chains did not mix (R-hat up to 2.7 > 1.05)" in unmixed
    assert "not its posterior" in unmixed


def test_check_calibration_takes_restitution_alone_without_bounds(monkeypatch, tmp_path):
    import residualsim.sysid.sbc as sbc

    seen = {}

    def fake(scene, names, out, **kwargs):
        seen.update(names=names, bounds=kwargs["bounds"])
        row = {"histogram": [1], "p_value": None, "coverage_90": None, "mean_rank": None}
        return {"datasets": 1, **{n: row for n in names}}

    monkeypatch.setattr(sbc, "simulation_based_calibration", fake)
    code, _, stderr = quiet_main("check-calibration", "--params", "restitution", "--out",
                                 tmp_path / "r.jsonl")
    assert code == 0, stderr
    assert seen == {"names": ["restitution"], "bounds": {"restitution": (0.1, 0.7)}}
    code, _, stderr = quiet_main("check-calibration", "--params", "restitution,"
                                 "spinning_friction", "--out", tmp_path / "r.jsonl")
    assert code == 2
    assert "--bounds name=LOW:HIGH,... is required for spinning_friction" in stderr


def test_the_corner_plot_says_its_draws_are_few_instead_of_corner_warning(tmp_path, caplog):
    from residualsim.sysid.paramspace import ParamSpace
    from residualsim.sysid.plots import corner_plot
    from residualsim.sysid.posterior import Posterior

    space = ParamSpace(["lateral_friction", "restitution"])
    draws = np.array([[0.3, 0.4]] * 6 + [[0.5, 0.1], [0.2, 0.3]])  # MH repeats rejected steps
    posterior = Posterior(space, draws[None], np.zeros((1, 8)), np.zeros((1, 8)),
                          np.array([0.3]))
    with caplog.at_level(logging.WARNING):
        corner_plot(posterior, tmp_path / "corner.png")
    assert "Too few points" not in caplog.text
    assert (tmp_path / "corner.png").read_bytes().startswith(b"\x89PNG")
