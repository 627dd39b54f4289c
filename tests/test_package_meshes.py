"""Issue 51: an object whose meshes are ``package://NAME/...`` (or relative to its URDF).
Body changes are written to a copy elsewhere that still finds the meshes; an exported URDF's
mesh names resolve from where it is written, and it is loaded back before it is kept; a
mesh that cannot be found is one error naming the URDF and the mesh."""

from __future__ import annotations

import itertools
import json
import struct
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pybullet as pb
import pytest
from conftest import quiet_main

from residualsim.errors import SceneError
from residualsim.sim.engine import Engine
from residualsim.sim.scenes import make_scene
from residualsim.sim.scenes.body import body_urdf, read_body, urdf_text, write_urdf
from residualsim.sim.scenes.meshes import resolve_mesh
from residualsim.sim.scenes.urdf_check import check_urdf

HALF = (0.03, 0.02, 0.01)  # a 6 x 4 x 2 cm box, m


def _corners() -> list[tuple[float, float, float]]:
    return [(sx * HALF[0], sy * HALF[1], sz * HALF[2])
            for sx, sy, sz in itertools.product((-1, 1), repeat=3)]


#: The box's faces as corner indices (into :func:`_corners`), counter-clockwise from outside.
_FACES = [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)]


def _obj() -> str:
    return ("".join(f"v {x} {y} {z}\n" for x, y, z in _corners())
            + "".join("f " + " ".join(str(i + 1) for i in face) + "\n" for face in _FACES))


def _stl() -> bytes:
    """The box as a binary STL (PyBullet reads no ASCII STL: "cannot extract mesh")."""
    corners = _corners()
    triangles = [tri for a, b, c, d in _FACES for tri in ((a, b, c), (a, c, d))]
    return (b"box".ljust(80) + struct.pack("<I", len(triangles))
            + b"".join(struct.pack("<12fH", 0, 0, 0, *(v for i in tri for v in corners[i]), 0)
                       for tri in triangles))


def _urdf(collision: str, visual: str) -> str:
    return f"""<?xml version="1.0"?>
<robot name="thing">
  <link name="base">
    <inertial><mass value="0.1"/>
      <inertia ixx="1.67e-5" iyy="3.33e-5" izz="4.33e-5" ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><geometry><mesh filename="{collision}"/></geometry></collision>
    <visual><geometry><mesh filename="{visual}"/></geometry></visual>
  </link>
</robot>
"""


def _package(root: Path, folder: str, name: str | None, scheme: str = "package") -> Path:
    """A ROS-like package in ``root/folder`` (``package.xml`` naming ``name``, none if None):
    ``meshes/box.stl`` (collision) and ``meshes/box.obj`` (visual), ``urdf/thing.urdf``
    naming them ``package://<name or folder>/meshes/...`` (``scheme="relative"``:
    ``../meshes/...``). Returns the URDF."""
    package = root / folder
    (package / "meshes").mkdir(parents=True)
    (package / "urdf").mkdir()
    if name is not None:
        (package / "package.xml").write_text(
            f'<?xml version="1.0"?>\n<package format="2"><name>{name}</name>'
            "<version>0.1.0</version></package>\n")
    (package / "meshes" / "box.stl").write_bytes(_stl())
    (package / "meshes" / "box.obj").write_text(_obj())
    prefix = f"package://{name or folder}/meshes" if scheme == "package" else "../meshes"
    urdf = package / "urdf" / "thing.urdf"
    urdf.write_text(_urdf(f"{prefix}/box.stl", f"{prefix}/box.obj"))
    return urdf


def _mesh_names(urdf: Path) -> list[str]:
    return [m.get("filename") for m in ElementTree.parse(urdf).getroot().iter("mesh")]


def _loaded_meshes(urdf: Path) -> list[str]:
    """The collision mesh files PyBullet loads from ``urdf`` (absolute)."""
    client = pb.connect(pb.DIRECT)
    try:
        body = pb.loadURDF(str(urdf), physicsClientId=client)
        return [Path(shape[4].decode()).resolve().as_posix()
                for shape in pb.getCollisionShapeData(body, -1, physicsClientId=client)]
    finally:
        pb.disconnect(client)


@pytest.fixture(scope="module")
def package_object(tmp_path_factory) -> tuple[Path, Path]:
    """(URDF, recordings) of a box whose meshes are package://thing_description/...,
    synthesized in the scene of that URDF."""
    root = tmp_path_factory.mktemp("ws") / "src"
    urdf = _package(root, "thing_description", "thing_description")
    data = root.parent / "data"
    code, _, stderr = quiet_main("data", "synthesize", "--scene", urdf, "--count", "2",
                                 "--samples", "40", "--params", "lateral_friction=0.3",
                                 "--out", data)
    assert code == 0, stderr
    return urdf, data


def test_body_calibration_and_export_outside_the_package(package_object, tmp_path):
    """``--params contact,body`` works on package:// meshes (the body's copy, written to a
    temporary folder, finds them), and ``--export-urdf`` outside the package writes mesh
    paths relative to the export, which PyBullet loads: the package's own files."""
    urdf, data = package_object
    export = tmp_path / "exports" / "thing_calibrated.urdf"
    code, _, stderr = quiet_main("calibrate", "--scene", urdf, "--data", data, "--params",
                                 "contact,body", "--method", "lsq", "--budget", "23",
                                 "--split", "all", "--no-plots", "--quiet", "--out",
                                 tmp_path / "cal", "--export-urdf", export)
    assert code == 0, stderr
    names = _mesh_names(export)
    assert [Path(n).name for n in names] == ["box.stl", "box.obj"]
    assert not any(n.startswith(("package://", "/")) for n in names)  # relative
    for name in names:
        assert (export.parent / name).resolve() == \
            (urdf.parent.parent / "meshes" / Path(name).name).resolve()
    assert _loaded_meshes(export) == [(urdf.parent.parent / "meshes" / "box.stl")
                                      .resolve().as_posix()]
    summary = json.loads((tmp_path / "cal" / "summary.json").read_text())
    assert read_body(export).links[0].mass_kg == pytest.approx(
        summary["body"]["links"][0]["mass_kg"])


def test_an_export_inside_the_package_keeps_package_uris(package_object, tmp_path):
    urdf, _ = package_object
    out = write_urdf(urdf, urdf.parent / "calibrated" / "thing.urdf", body=read_body(urdf))
    try:
        assert _mesh_names(out) == ["package://thing_description/meshes/box.stl",
                                    "package://thing_description/meshes/box.obj"]
        assert _loaded_meshes(out) == [(urdf.parent.parent / "meshes" / "box.stl")
                                       .resolve().as_posix()]
    finally:
        out.unlink()
        out.parent.rmdir()


def test_a_package_found_by_its_package_xml(tmp_path):
    """A package folder named otherwise than the package (a clone ``NAME-main``): PyBullet
    does not find ``package://NAME/...`` there, residualsim does, through its package.xml,
    and loads the object from a copy that names the files."""
    urdf = _package(tmp_path, "thing_description-main", "thing_description")
    mesh = (urdf.parent.parent / "meshes" / "box.stl").resolve()
    assert resolve_mesh("package://thing_description/meshes/box.stl", urdf).resolve() == mesh
    assert resolve_mesh("package://thing_description/meshes/box.stl", urdf,
                        pybullet_only=True) is None
    check_urdf(urdf)
    scene = make_scene(str(urdf))
    assert _loaded_meshes(scene.info.load_path) == [mesh.as_posix()]
    with Engine(str(urdf)) as engine:
        engine.reset(engine.scene.get_state())
        engine.step()
    copy = body_urdf(urdf, read_body(urdf))
    assert _loaded_meshes(copy) == [mesh.as_posix()]
    out = write_urdf(urdf, tmp_path / "elsewhere" / "thing.urdf")
    assert _mesh_names(out) == ["../thing_description-main/meshes/box.stl",
                                "../thing_description-main/meshes/box.obj"]
    assert _loaded_meshes(out) == [mesh.as_posix()]


def test_ros_package_path(tmp_path, monkeypatch):
    """A URDF kept apart from its package: found through ROS_PACKAGE_PATH when set (the
    package a few folders below an entry), refused naming the URDF and the mesh when not."""
    _package(tmp_path / "ros" / "src" / "group", "thing_description", "thing_description")
    urdf = tmp_path / "robots" / "thing.urdf"
    urdf.parent.mkdir()
    urdf.write_text(_urdf("package://thing_description/meshes/box.stl",
                          "package://thing_description/meshes/box.obj"))
    monkeypatch.delenv("ROS_PACKAGE_PATH", raising=False)
    with pytest.raises(SceneError) as refused:
        check_urdf(urdf)
    assert str(urdf) in str(refused.value) and \
        "'package://thing_description/meshes/box.stl' not found" in str(refused.value)
    assert "ROS_PACKAGE_PATH" in str(refused.value)
    monkeypatch.setenv("ROS_PACKAGE_PATH", f"{tmp_path / 'nowhere'}:{tmp_path / 'ros'}")
    mesh = tmp_path / "ros" / "src" / "group" / "thing_description" / "meshes" / "box.stl"
    assert resolve_mesh("package://thing_description/meshes/box.stl", urdf) == mesh
    check_urdf(urdf)
    assert _loaded_meshes(body_urdf(urdf, read_body(urdf))) == [mesh.resolve().as_posix()]


def test_relative_meshes_resolve_from_the_copies(tmp_path):
    urdf = _package(tmp_path, "thing", None, scheme="relative")
    mesh = (urdf.parent.parent / "meshes" / "box.stl").resolve().as_posix()
    assert _loaded_meshes(body_urdf(urdf, read_body(urdf))) == [mesh]
    out = write_urdf(urdf, tmp_path / "a" / "b" / "thing.urdf")
    assert _mesh_names(out) == ["../../thing/meshes/box.stl", "../../thing/meshes/box.obj"]
    assert _loaded_meshes(out) == [mesh]


def test_a_mesh_that_cannot_be_found_names_the_urdf_and_the_mesh(tmp_path):
    urdf = _package(tmp_path, "thing", "thing")
    (urdf.parent.parent / "meshes" / "box.obj").unlink()
    for text in (lambda: urdf_text(urdf), lambda: body_urdf(urdf, read_body(urdf))):
        with pytest.raises(SceneError, match="mesh 'package://thing/meshes/box.obj' not "
                                             "found") as refused:
            text()
        assert str(urdf) in str(refused.value)


def test_calibrate_on_a_missing_mesh_is_one_error_and_no_output(package_object, tmp_path):
    urdf, data = package_object
    broken = urdf.parent / "broken.urdf"
    broken.write_text(urdf.read_text().replace("meshes/box.obj", "meshes/gone.obj"))
    try:
        code, _, stderr = quiet_main("calibrate", "--scene", broken, "--data", data,
                                     "--params", "contact,body", "--method", "lsq",
                                     "--budget", "2", "--out", tmp_path / "cal",
                                     "--export-urdf", tmp_path / "x.urdf")
    finally:
        broken.unlink()
    assert code == 2
    assert str(broken) in stderr and "package://thing_description/meshes/gone.obj" in stderr
    assert "Traceback" not in stderr
    assert not (tmp_path / "cal").exists() and not (tmp_path / "x.urdf").exists()


def test_an_export_that_does_not_load_is_not_written(tmp_path):
    """The export is loaded back in PyBullet before it is kept: a mesh PyBullet cannot read
    (a .ply) is a SceneError naming the export, and nothing is left, not even its folder."""
    (tmp_path / "meshes").mkdir()
    (tmp_path / "meshes" / "box.ply").write_text("ply\n")
    urdf = tmp_path / "thing.urdf"
    urdf.write_text(_urdf("meshes/box.ply", "meshes/box.ply"))
    out = tmp_path / "new" / "deeper" / "thing.urdf"
    with pytest.raises(SceneError, match="does not load back in PyBullet") as refused:
        write_urdf(urdf, out)
    assert str(out) in str(refused.value)
    assert not (tmp_path / "new").exists()
