"""Hostile URDFs are refused before PyBullet sees them, each with one message naming the file
and the element (issue 37): no crash, no silent change, no bare "Cannot load URDF file."."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from residualsim.errors import SceneError
from residualsim.sim.scenes import make_scene
from residualsim.sim.scenes.urdf_check import check_urdf, resolve_mesh

from conftest import load_train_script

ROOT = Path(__file__).resolve().parents[1]
# The URDF builders of the hostile-input table (train/hostile_inputs.py), shared.
_HOSTILE = load_train_script("hostile_inputs")
INERTIA, _link, _joint, _robot = (_HOSTILE.INERTIA, _HOSTILE._link, _HOSTILE._joint,
                                  _HOSTILE._robot)


GOOD = _robot(_link("a"), _link("b"), _joint("hinge", "a", "b"))

HOSTILE = {
    "two roots": (_robot(_link("a"), _link("b")), "2 root links ('a', 'b')"),
    "loop": (_robot(_link("a"), _link("b"), _link("c"), _joint("j1", "a", "b"),
                    _joint("j2", "b", "c"), _joint("j3", "a", "c")),
             "link 'c' is the child of two joints"),
    "cycle without root": (_robot(_link("a"), _link("b"), _joint("j1", "a", "b"),
                                  _joint("j2", "b", "a")), "root links"),
    "self joint": (_robot(_link("a"), _joint("j", "a", "a")), "joins link 'a' to itself"),
    "floating joint": (_robot(_link("a"), _link("b"), _joint("f", "a", "b", "floating")),
                       "joint 'f' has type 'floating' (PyBullet would silently make it fixed)"),
    "planar joint": (_robot(_link("a"), _link("b"), _joint("p", "a", "b", "planar")),
                     "type 'planar'"),
    "unknown joint": (_robot(_link("a"), _link("b"), _joint("u", "a", "b", "hinge")),
                      "type 'hinge' (unknown joint type)"),
    "missing child": (_robot(_link("a"), _joint("j", "a", "ghost")),
                      "child link 'ghost' is not a <link>"),
    "duplicate link": (_robot(_link("a"), _link("a")), "link name(s) 'a' used twice"),
    "nan inertia": (_robot(_link("a", INERTIA.replace('ixx="1e-4"', 'ixx="nan"'))),
                    "non-finite entry"),
    "inf inertia": (_robot(_link("a", INERTIA.replace('izz="1e-4"', 'izz="inf"'))),
                    "non-finite entry"),
    "negative inertia": (_robot(_link("a", INERTIA.replace('iyy="1e-4"', 'iyy="-1e-4"'))),
                         "not positive definite"),
    "zero inertia": (_robot(_link("a", 'ixx="0" iyy="0" izz="0" ixy="0" ixz="0" iyz="0"')),
                     "not positive definite"),
    "triangle": (_robot(_link("a", 'ixx="1e-4" iyy="1e-4" izz="5e-4" ixy="0" ixz="0" iyz="0"')),
                 "triangle inequality"),
    "text inertia": (_robot(_link("a", INERTIA.replace('ixx="1e-4"', 'ixx="big"'))),
                     "ixx='big' is not a number"),
    "zero mass": (_robot(_link("a", mass="0")), "mass '0' kg must be finite and positive"),
    "nan mass": (_robot(_link("a", mass="nan")), "must be finite and positive"),
    "no inertial": (_robot('<link name="a"><collision><geometry><box size="1 1 1"/>'
                           "</geometry></collision></link>"), "no mass"),
    "no collision": (_robot(_link("a"), _link("b", geometry=""), _joint("j", "a", "b")),
                     "link 'b' has no <collision> shape"),
    "missing mesh": (_robot(_link("a", geometry='<mesh filename="meshes/gone.obj"/>')),
                     "mesh file 'meshes/gone.obj' not found"),
    "missing package mesh": (_robot(_link("a", geometry='<mesh filename="package://pkg/x.obj"/>')),
                             "package:// is searched"),
    "not xml": ("<robot", "not valid XML"),
    "not a robot": ("<sdf version='1.6'/>", "root element is <sdf>"),
    "no links": ("<robot name='x'/>", "no <link> element"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_urdf_is_refused_naming_file_and_element(tmp_path, case):
    text, problem = HOSTILE[case]
    path = tmp_path / "thing.urdf"
    path.write_text(text)
    with pytest.raises(SceneError) as caught:
        make_scene(str(path))
    message = str(caught.value)
    assert str(path) in message and problem in message, message


def test_good_urdf_passes_and_loads(tmp_path):
    path = tmp_path / "thing.urdf"
    path.write_text(GOOD)
    check_urdf(path)
    scene = make_scene(str(path))
    assert scene.joint_names == ("hinge",)


def test_two_roots_no_longer_crash_the_interpreter(tmp_path):
    """PyBullet segfaults on two unconnected root links: the check must come first."""
    path = tmp_path / "two.urdf"
    path.write_text(HOSTILE["two roots"][0])
    code = ("from residualsim.sim.scenes import make_scene\n"
            f"make_scene({str(path)!r})\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1  # an ordinary Python exception, not a signal
    assert "SceneError" in result.stderr and "root links" in result.stderr


def test_package_uri_resolves_under_the_urdf_folder_and_its_parents(tmp_path):
    mesh = tmp_path / "meshes" / "part.obj"
    mesh.parent.mkdir()
    mesh.write_text("v 0 0 0\n")
    urdf = tmp_path / "robots" / "thing.urdf"
    urdf.parent.mkdir()
    assert resolve_mesh("package://mypkg/meshes/part.obj", urdf) == mesh
    assert resolve_mesh("../meshes/part.obj", urdf).resolve() == mesh.resolve()
    assert resolve_mesh("package://mypkg/meshes/none.obj", urdf) is None


def _inertia_text(matrix: np.ndarray) -> str:
    keys = {"ixx": (0, 0), "ixy": (0, 1), "ixz": (0, 2), "iyy": (1, 1), "iyz": (1, 2),
            "izz": (2, 2)}
    return " ".join(f'{k}="{float(matrix[i, j])!r}"' for k, (i, j) in keys.items())


@settings(max_examples=60, deadline=None)
@given(moments=st.lists(st.floats(1e-6, 1.0), min_size=3, max_size=3),
       angles=st.lists(st.floats(-3.0, 3.0), min_size=3, max_size=3))
def test_inertia_check_accepts_exactly_the_physical_tensors(tmp_path_factory, moments, angles):
    """A rotated diagonal tensor passes iff its moments obey the triangle inequality."""
    from scipy.spatial.transform import Rotation

    rotation = Rotation.from_euler("xyz", angles).as_matrix()
    matrix = rotation @ np.diag(moments) @ rotation.T
    path = tmp_path_factory.mktemp("inertia") / "body.urdf"
    path.write_text(_robot(_link("a", _inertia_text(matrix))))
    low, mid, high = sorted(moments)
    if low + mid >= high * (1 + 1e-6):
        check_urdf(path)
    elif low + mid < high * (1 - 1e-6):
        with pytest.raises(SceneError, match="triangle inequality"):
            check_urdf(path)


def test_pybullet_load_failure_carries_pybullets_reason(tmp_path, capfd):
    """A file the check passes but PyBullet refuses: PyBullet's own reason is in the one
    message, and nothing of it reaches stdout."""
    import pybullet as pb

    from residualsim.sim.scenes.base import load_urdf

    path = tmp_path / "cylinder.urdf"
    path.write_text(_robot(_link("a", geometry='<cylinder radius="0.1"/>')))
    client = pb.connect(pb.DIRECT)
    try:
        capfd.readouterr()
        with pytest.raises(SceneError) as caught:
            load_urdf(client, str(path))
    finally:
        pb.disconnect(client)
    message = str(caught.value)
    assert str(path) in message and "could not load this URDF" in message
    assert "Cylinder shape must have both length and radius" in message
    assert "b3Error" not in message
    assert capfd.readouterr().out == ""
