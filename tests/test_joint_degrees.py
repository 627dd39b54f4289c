"""Issue 51: joint angles recorded in degrees are named as such (the joint, the file, "look
like degrees"; residualsim reads radians), not blamed on the base's frame or units."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import numpy as np
import pytest
from conftest import quiet_main

from residualsim.data import load_trajectories
from residualsim.errors import DataError
from residualsim.sim.plausibility import check_joint_units
from residualsim.sim.recordings import prepare_recordings
from residualsim.sim.scenes import make_scene

HINGE = Path(__file__).resolve().parents[1] / "assets" / "examples" / "hinge.toml"


def _scaled(source: Path, out: Path, factor: float) -> Path:
    """``source``'s CSV recordings with the ``elbow`` column times ``factor``."""
    out.mkdir()
    for path in sorted(source.glob("*.csv")):
        with path.open() as handle:
            rows = list(csv.reader(handle))
        column = rows[0].index("elbow")
        for row in rows[1:]:
            row[column] = repr(float(row[column]) * factor)
        with (out / path.name).open("w", newline="") as handle:
            csv.writer(handle).writerows(rows)
    return out


@pytest.fixture(scope="module")
def recordings(tmp_path_factory) -> tuple[Path, Path]:
    """(radians, degrees): two synthetic hinge tosses, and the same with the joint in
    degrees."""
    root = tmp_path_factory.mktemp("degrees")
    code, _, stderr = quiet_main("data", "synthesize", "--scene", HINGE, "--count", "2",
                                 "--samples", "60", "--params", "lateral_friction=0.3",
                                 "--out", root / "radians")
    assert code == 0, stderr
    return root / "radians", _scaled(root / "radians", root / "degrees", 180 / np.pi)


def _says_degrees(stderr: str, folder: Path) -> None:
    assert "joint 'elbow'" in stderr and "look like degrees" in stderr
    assert "residualsim reads radians" in stderr and "[-2.5, 2.5] rad" in stderr
    assert str(folder / "synthetic-0.csv") in stderr
    assert "free flight" not in stderr and "frame" not in stderr  # not blamed on the base
    assert "Traceback" not in stderr


def test_data_info_names_the_joint_in_degrees(recordings):
    radians, degrees = recordings
    code, _, stderr = quiet_main("data", "info", "--scene", HINGE, radians)
    assert code == 0, stderr
    code, _, stderr = quiet_main("data", "info", "--scene", HINGE, degrees)
    assert code == 2
    _says_degrees(stderr, degrees)


def test_calibrate_names_the_joint_in_degrees_and_writes_nothing(recordings, tmp_path):
    _, degrees = recordings
    code, _, stderr = quiet_main("calibrate", "--scene", HINGE, "--data", degrees,
                                 "--params", "lateral_friction", "--method", "nevergrad",
                                 "--budget", "2", "--out", tmp_path / "cal")
    assert code == 2
    _says_degrees(stderr, degrees)
    assert not (tmp_path / "cal").exists()


def test_the_library_refuses_degrees_before_the_units_of_the_base(recordings):
    _, degrees = recordings
    with pytest.raises(DataError) as refused:
        prepare_recordings(str(HINGE), load_trajectories(degrees))
    assert "look like degrees" in refused.value.reason


@pytest.mark.parametrize("factor, degrees", [(180 / np.pi, True), (1.0, False),
                                             (1000.0, False), (4.0, False)])
def test_only_values_that_are_degrees_are_called_degrees(recordings, factor, degrees):
    """Beyond the limits by a factor that is not 180/pi (1000: not degrees; 4: within a
    radian of the limits) is left to the other checks."""
    radians, _ = recordings
    trajectory = next(iter(load_trajectories(radians).values()))
    scaled = trajectory.joint_positions * factor
    trajectory = dataclasses.replace(trajectory, joint_positions=scaled)
    messages: list[str] = []
    check_joint_units(make_scene(str(HINGE)), trajectory, messages.append)
    assert bool(messages) == degrees


def test_a_continuous_joint_with_limits_is_not_called_degrees(recordings, tmp_path):
    """PyBullet ignores a continuous joint's <limit lower upper> (exporters write them) but
    reports them: a wheel turning 8 rad, in radians, was refused as degrees."""
    radians, _ = recordings
    urdf = tmp_path / "wheel.urdf"
    urdf.write_text(HINGE.with_suffix(".urdf").read_text().replace(
        'type="revolute"', 'type="continuous"'))
    spinning = _scaled(radians, tmp_path / "spinning", 1.0)
    for path in spinning.glob("*.csv"):
        rows = path.read_text().splitlines()
        column = rows[0].split(",").index("elbow")
        cells = [row.split(",") for row in rows[1:]]
        for index, row in enumerate(cells):
            row[column] = repr(8.0 * index / len(cells))
        path.write_text("\n".join([rows[0]] + [",".join(row) for row in cells]) + "\n")
    code, _, stderr = quiet_main("data", "info", "--scene", urdf, spinning)
    assert code == 0, stderr
    assert make_scene(str(urdf)).info.joint_limits == (None,)
