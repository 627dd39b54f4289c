"""Issue 51 cases 6 and 7: messages that name the real problem. ``calibrate
--export-urdf`` onto an existing file says what to do (calibrate has no --force) and refuses
the scene's own URDF as such; a --base made for another object names the mismatch; a bad
single body or joint parameter name says which part is wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import quiet_main

from residualsim.errors import ParameterError
from residualsim.sim.scenes.body import read_body
from residualsim.sysid.paramspace import ParamSpace

EXAMPLES = Path(__file__).resolve().parents[1] / "assets" / "examples"
HINGE = EXAMPLES / "hinge.toml"


@pytest.fixture(scope="module")
def hinge_csv(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("issue51") / "hinge_csv"
    code, _, stderr = quiet_main(*["data", "synthesize", "--scene", str(HINGE), "--count", "2",
                                  "--samples", "40", "--params", "lateral_friction=0.3",
                                  "--out", str(out)])
    assert code == 0, stderr
    return out


def _calibrate(hinge_csv, tmp_path, *extra) -> tuple[int, str]:
    code, _, stderr = quiet_main(*["calibrate", "--scene", str(HINGE), "--data", str(hinge_csv),
                                  "--out", str(tmp_path / "cal"), "--params",
                                  "lateral_friction", "--method", "nevergrad", "--budget", "2",
                                  *map(str, extra)])
    return code, stderr


def test_export_urdf_onto_an_existing_file_says_what_to_do(hinge_csv, tmp_path):
    existing = tmp_path / "mine.urdf"
    existing.write_text("<robot name='x'/>")
    code, stderr = _calibrate(hinge_csv, tmp_path, "--export-urdf", existing)
    assert code == 2
    assert "already exists (calibrate replaces no file: choose another path or remove this " \
           "one first)" in stderr
    assert "--force" not in stderr  # calibrate has no --force
    assert existing.read_text() == "<robot name='x'/>"


def test_export_urdf_onto_the_scenes_own_urdf_is_refused_as_such(hinge_csv, tmp_path):
    urdf = EXAMPLES / "hinge.urdf"
    before = urdf.read_bytes()
    code, stderr = _calibrate(hinge_csv, tmp_path, "--export-urdf", urdf)
    assert code == 2
    assert f"is the scene's own URDF {urdf}, which this command reads" in stderr
    assert urdf.read_bytes() == before


def test_a_base_made_for_another_object_names_the_mismatch(hinge_csv, tmp_path):
    other = tmp_path / "ell_cal"
    other.mkdir()
    body = read_body(EXAMPLES / "ell.urdf").as_json()
    (other / "summary.json").write_text(json.dumps({"params": {"restitution": 0.4},
                                                    "body": body}))
    code, stderr = _calibrate(hinge_csv, tmp_path, "--base", other)
    assert code == 2
    assert "was identified for another object: its links are ell and joints none, this " \
           "URDF's links are base, arm and joints elbow" in stderr
    assert "the body has no link" not in stderr  # was: blamed the URDF's own link 'base'


@pytest.mark.parametrize("name, message", [
    ("body.nolink.com_x", r"^body.nolink.com_x: the object has no link 'nolink': its links "
                          r"are base, arm$"),
    ("joint.nojoint.damping", r"^joint.nojoint.damping: the object has no joint 'nojoint': "
                              r"its non-fixed joints are elbow$"),
    ("body.base.mass_ratio", r"^body.base.mass_ratio: 'base' is the root link: its mass "
                             r"ratio is 1 by definition"),
    ("body.arm.moment_4", r"^body.arm.moment_4: 'arm' has no parameter 'moment_4': its "
                          r"parameters are axes_x, .*moment_3$"),
    ("joint.elbow.stiffness", r"'elbow' has no parameter 'stiffness': its parameters are "
                              r"damping, friction$"),
])
def test_a_bad_body_or_joint_name_says_what_is_wrong(name, message):
    with pytest.raises(ParameterError, match=message):
        ParamSpace([name], scene=str(HINGE))


def test_the_command_line_gives_the_same_reason(hinge_csv, tmp_path):
    code, _, stderr = quiet_main(*["calibrate", "--scene", str(HINGE), "--data", str(hinge_csv),
                                  "--out", str(tmp_path / "cal"), "--params",
                                  "lateral_friction,body.nolink.com_x", "--method",
                                  "lsq", "--budget", "2"])
    assert code == 2 and "the object has no link 'nolink': its links are base, arm" in stderr
    assert "Traceback" not in stderr
