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
from residualsim.sim.implausible import allow_implausible
from residualsim.sim.pool import EngineFactory
from residualsim.sim.scenes.meshes import resolve_mesh
from residualsim.sim.scenes.urdf_check import check_urdf

from conftest import load_train_script

ROOT = Path(__file__).resolve().parents[1]
# The URDF builders of the hostile-input table (train/hostile_inputs.py), shared.
_HOSTILE = load_train_script("hostile_inputs")
INERTIA, _link, _joint, _robot = (_HOSTILE.INERTIA, _HOSTILE._link, _HOSTILE._joint,
                                  _HOSTILE._robot)

DYNAMICS = '<dynamics damping="{}" friction="{}"/>'


def _moved(name: str, old: str, new: str, kind: str = "revolute") -> str:
    """A joint from ``a`` to ``b`` with ``old`` in its text replaced by ``new``."""
    text = _joint(name, "a", "b", kind)
    assert old in text
    return text.replace(old, new)


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
    "zero axis": (_robot(_link("a"), _link("b"), _moved("hinge", 'xyz="0 0 1"', 'xyz="0 0 0"')),
                  "joint 'hinge': <axis xyz='0 0 0'> has zero length"),
    "nan axis": (_robot(_link("a"), _link("b"), _moved("p", 'xyz="0 0 1"', 'xyz="0 nan 1"',
                                                        "prismatic")),
                 "joint 'p': <axis xyz='0 nan 1'> must be three finite numbers"),
    "zero axis continuous": (_robot(_link("a"), _link("b"),
                                    _moved("c", 'xyz="0 0 1"', 'xyz="0 0 0"', "continuous")),
                             "the continuous joint has no direction"),
    "two-number axis": (_robot(_link("a"), _link("b"), _moved("j", 'xyz="0 0 1"', 'xyz="0 1"')),
                        "must be three finite numbers"),
    "negative damping": (_robot(_link("a"), _link("b"), _moved("j", "</joint>", DYNAMICS.format(
        "-0.5", "0") + "</joint>")), "joint 'j': <dynamics damping='-0.5'> must be finite and "
        "not negative"),
    "nan friction": (_robot(_link("a"), _link("b"), _moved("j", "</joint>", DYNAMICS.format(
        "0", "nan") + "</joint>")), "<dynamics friction='nan'> must be finite"),
    "inverted limits": (_robot(_link("a"), _link("b"), _moved("j", 'lower="-1"', 'lower="2"')),
                        "joint 'j': <limit> lower 2 rad is above upper 1 rad"),
    "inverted prismatic limits": (_robot(_link("a"), _link("b"),
                                         _moved("j", 'lower="-1"', 'lower="2"', "prismatic")),
                                  "lower 2 m is above upper 1 m"),
    "infinite limit": (_robot(_link("a"), _link("b"), _moved("j", 'upper="1"', 'upper="inf"')),
                       "joint 'j': <limit upper='inf'> must be finite"),
    "zero box": (_robot(_link("a", geometry='<box size="0.1 0 0.1"/>')),
                 "link 'a': <collision> box: size='0.1 0 0.1' must be three finite positive"),
    "negative box": (_robot(_link("a", geometry='<box size="0.1 0.1 -0.1"/>')),
                     "size='0.1 0.1 -0.1' must be three finite positive"),
    "nan box": (_robot(_link("a", geometry='<box size="0.1 nan 0.1"/>')), "finite positive"),
    "zero sphere": (_robot(_link("a", geometry='<sphere radius="0"/>')),
                    "<collision> sphere: radius='0' must be one finite positive number (m)"),
    "negative cylinder": (_robot(_link("a", geometry='<cylinder radius="0.1" length="-1"/>')),
                          "cylinder: length='-1'"),
    "zero capsule": (_robot(_link("a", geometry='<capsule radius="0" length="0.1"/>')),
                     "capsule: radius='0'"),
    "zero mesh scale": (_robot(_link("a", geometry='<mesh filename="m.obj" scale="1 0 1"/>')),
                        "mesh: scale='1 0 1' must be three finite non-zero numbers"),
    "heavy link": (_robot(_link("a", mass="1e6")),
                   "link 'a': mass 1e+06 kg is above 1000 kg, not a tabletop object"),
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


def test_a_heavy_link_loads_with_allow_implausible_and_a_warning(tmp_path, caplog):
    path = tmp_path / "heavy.urdf"
    path.write_text(_robot(_link("a", mass="2000")))
    with allow_implausible():
        scene = make_scene(str(path))
    assert scene.mass_kg == pytest.approx(2000)
    assert "mass 2000 kg is above 1000 kg" in caplog.text and "accepted" in caplog.text
    with pytest.raises(SceneError, match="pass --allow-implausible"):  # not cached as allowed
        make_scene(str(path))
    assert EngineFactory(str(path)).allow_implausible is False
    with allow_implausible():
        factory = EngineFactory(str(path))  # what a worker process is sent
    engine = factory()  # as in a fresh worker, outside allow_implausible
    try:
        assert engine.scene.mass_kg == pytest.approx(2000)
    finally:
        engine.close()


def test_limits_may_meet_and_sizes_may_be_absent(tmp_path):
    """Boundaries that are not refused: lower == upper (a locked joint), zero damping, a
    1000 kg link, a joint without <axis> (URDF's default x axis)."""
    joint = _joint("j", "a", "b").replace('lower="-1"', 'lower="1"').replace(
        '<axis xyz="0 0 1"/>', "").replace("</joint>", DYNAMICS.format("0", "0") + "</joint>")
    path = tmp_path / "edge.urdf"
    path.write_text(_robot(_link("a", mass="1000"), _link("b"), joint))
    check_urdf(path)


def test_visual_shapes_and_mirrored_meshes_are_not_refused(tmp_path):
    """A <visual> takes no part in the physics (a placeholder size of 0 is left alone), and
    a negative mesh scale mirrors a part, as robot descriptions do for left and right."""
    (tmp_path / "m.obj").write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\n"
                                    "f 1 2 3\nf 1 2 4\nf 1 3 4\nf 2 3 4\n")
    link = _link("a", geometry='<mesh filename="m.obj" scale="-0.1 0.1 0.1"/>').replace(
        "</link>", '<visual><geometry><box size="0 0 0"/></geometry></visual></link>')
    path = tmp_path / "mirrored.urdf"
    path.write_text(_robot(link))
    check_urdf(path)


def test_a_mesh_in_millimetres_is_implausible_unless_scaled(tmp_path):
    """A 100-unit OBJ read as metres is a 100 m object: refused as implausible (with the
    --allow-implausible escape); the same file scaled by 0.001, or as a visual only, is not."""
    (tmp_path / "mm.obj").write_text("v 0 0 0\nv 100 0 0\nv 0 100 0\nv 0 0 100\n"
                                     "f 1 2 3\nf 1 2 4\nf 1 3 4\nf 2 3 4\n")
    path = tmp_path / "mm.urdf"
    path.write_text(_robot(_link("a", geometry='<mesh filename="mm.obj"/>')))
    with pytest.raises(SceneError, match=r"mm\.urdf: link 'a': mesh 'mm\.obj' spans 100, 100, "
                                         r"100 m.*millimetres.*--allow-implausible"):
        check_urdf(path)
    with allow_implausible():
        check_urdf(path)
    path.write_text(_robot(_link("a", geometry='<mesh filename="mm.obj" scale="0.001 0.001 '
                                 '0.001"/>').replace("</link>", '<visual><geometry><mesh '
                                                     'filename="mm.obj"/></geometry></visual>'
                                                     '</link>')))
    check_urdf(path)


def test_every_bundled_urdf_passes_the_joint_and_shape_checks():
    """The user-object URDFs pass the whole check; the built-ins (fixed-base links of mass 0,
    which the check is not for) pass the joint and shape checks."""
    import xml.etree.ElementTree as ElementTree

    from residualsim.sim.scenes import urdf_check

    for path in [ROOT / "assets" / "cube.urdf", *(ROOT / "assets" / "examples").glob("*.urdf")]:
        check_urdf(path)
    urdfs = sorted((ROOT / "assets").rglob("*.urdf"))
    assert len(urdfs) >= 9
    for path in urdfs:
        root = ElementTree.parse(path).getroot()
        for joint in root.findall("joint"):
            urdf_check._joint_physics(joint, path, joint.get("name"), joint.get("type"))
        for link in root.findall("link"):
            urdf_check._geometry(link, path, link.get("name"))


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


@pytest.mark.parametrize("target, problem", [("folder", "is a folder"),
                                             ("/dev/null", "is not a regular file")])
def test_a_mesh_path_to_a_folder_or_device_says_so(tmp_path, target, problem):
    """Not "not found": the path is there, and is not a mesh file."""
    if target == "folder":
        (tmp_path / "folder").mkdir()
    path = tmp_path / "thing.urdf"
    path.write_text(_robot(_link("a", geometry=f'<mesh filename="{target}"/>')))
    with pytest.raises(SceneError) as caught:
        make_scene(str(path))
    assert str(path) in str(caught.value) and problem in str(caught.value), caught.value


def test_params_from_a_device_is_refused_naming_it():
    from residualsim.errors import ParameterError
    from residualsim.sim.scenes.params import parse_params

    with pytest.raises(ParameterError, match="/dev/null: not a regular file"):
        parse_params("/dev/null")


def test_params_text_too_long_for_a_file_name_is_read_as_pairs():
    """5000 characters are no path (the OS refuses the name): one short message, no
    OSError traceback."""
    from residualsim.errors import ParameterError
    from residualsim.sim.scenes.params import parse_params

    with pytest.raises(ParameterError, match=r"expected name=value .*'\.\.\.$") as caught:
        parse_params("lateral_friction=0.3," + "x" * 5000)
    assert len(str(caught.value)) < 200
