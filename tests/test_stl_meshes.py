"""STL meshes as users bring them: PyBullet 3.2 reads binary STL only and crashes (a
segmentation fault, measured) on an ASCII one, a truncated one or one whose triangle count
exceeds its data. An ASCII STL loads from a binary copy; a broken one is one error naming
the URDF, the link and the mesh (exit 2 from the command line), before PyBullet sees it."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from conftest import quiet_main
from test_package_meshes import _FACES, _corners, _stl, _urdf

from residualsim.errors import SceneError
from residualsim.sim.engine import Engine
from residualsim.sim.scenes.body import read_body, write_urdf
from residualsim.sim.scenes.stl import pybullet_mesh, read_stl, stl_form
from residualsim.sim.scenes.urdf_check import check_urdf


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    """Binary copies go to this test's own folder, not the user's cache."""
    monkeypatch.setenv("RESIDUALSIM_CACHE", str(tmp_path / "cache"))


def _ascii_stl() -> str:
    """The same box as :func:`test_package_meshes._stl`, written as ASCII STL."""
    corners = _corners()
    lines = ["solid box"]
    for a, b, c, d in _FACES:
        for tri in ((a, b, c), (a, c, d)):
            lines += ["  facet normal 0 0 0", "    outer loop"]
            lines += [f"      vertex {corners[i][0]!r} {corners[i][1]!r} {corners[i][2]!r}"
                      for i in tri]
            lines += ["    endloop", "  endfacet"]
    return "\n".join(lines + ["endsolid box", ""])


def _object(folder, stl: bytes | str, name: str = "box.stl"):
    folder.mkdir(parents=True, exist_ok=True)
    mesh = folder / name
    mesh.write_bytes(stl) if isinstance(stl, bytes) else mesh.write_text(stl)
    (folder / "box.obj").write_text("v 0 0 0\nv 0.01 0 0\nv 0 0.01 0\nf 1 2 3\n")
    urdf = folder / "thing.urdf"
    urdf.write_text(_urdf(name, "box.obj"))
    return urdf


def _drop(urdf) -> np.ndarray:
    """Where the object is (position m, world) 100 periods after a drop from 5 cm, upright
    (identity quaternion, w-x-y-z), at rest."""
    with Engine(str(urdf)) as engine:
        start = np.zeros(engine.scene.state_size)
        start[2], start[3] = 0.05, 1.0
        return engine.rollout_poses(start, 100)[0][-1]


def test_read_stl_reads_both_forms_alike(tmp_path):
    (tmp_path / "b.stl").write_bytes(_stl())
    (tmp_path / "a.stl").write_text(_ascii_stl())
    binary, form_b = read_stl(tmp_path / "b.stl")
    text, form_a = read_stl(tmp_path / "a.stl")
    assert (form_b, form_a) == ("binary", "ascii")
    assert binary.shape == (12, 3, 3)
    np.testing.assert_allclose(text, binary, atol=1e-7)  # float32 in the binary file
    # a binary file whose header begins with "solid" is still binary
    assert stl_form(b"solid exported by CAD".ljust(80) + struct.pack("<I", 0)) == "binary"


def test_an_ascii_stl_object_loads_and_rests_as_the_binary_one(tmp_path):
    ascii_urdf = _object(tmp_path / "ascii", _ascii_stl())
    binary_urdf = _object(tmp_path / "binary", _stl())
    copy = pybullet_mesh(ascii_urdf.parent / "box.stl")
    assert copy.parent == tmp_path / "cache" / "meshes"
    assert stl_form(copy.read_bytes()) == "binary"
    assert pybullet_mesh(copy) == copy  # binary: used as it is
    rest_ascii, rest_binary = _drop(ascii_urdf), _drop(binary_urdf)
    np.testing.assert_allclose(rest_ascii, rest_binary, atol=1e-9)
    assert rest_ascii[2] == pytest.approx(0.01, abs=2e-3)  # resting on its 2 cm face


def test_an_export_of_an_ascii_stl_object_keeps_its_mesh_and_loads(tmp_path):
    urdf = _object(tmp_path / "ascii", _ascii_stl())
    out = write_urdf(urdf, tmp_path / "out" / "thing.urdf", read_body(urdf))
    assert "../ascii/box.stl" in out.read_text()  # the user's file, not the cache's copy
    np.testing.assert_allclose(_drop(out), _drop(urdf), atol=1e-9)


@pytest.mark.parametrize("what,stl", [
    ("truncated", _stl()[:-30]),
    ("count beyond its data", _stl()[:80] + struct.pack("<I", 10 ** 6) + _stl()[84:]),
    ("empty", b""),
])
def test_a_broken_stl_is_refused_before_pybullet_sees_it(tmp_path, what, stl):
    urdf = _object(tmp_path / "broken", stl)
    with pytest.raises(SceneError, match="not a readable STL mesh") as refused:
        check_urdf(urdf)
    message = str(refused.value)
    assert str(urdf) in message and "link 'base'" in message and "box.stl" in message


def test_ascii_stl_faults_are_named(tmp_path):
    two_vertices = "solid x\nfacet normal 0 0 0\nouter loop\nvertex 0 0 0\nvertex 1 0 0\n" \
                   "endloop\nendfacet\nendsolid x\n"
    (tmp_path / "two.stl").write_text(two_vertices)
    with pytest.raises(SceneError, match="2 'vertex' lines"):
        read_stl(tmp_path / "two.stl")
    (tmp_path / "nan.stl").write_text(two_vertices.replace("vertex 1 0 0",
                                                           "vertex 1 0 0\nvertex nan 0 0"))
    with pytest.raises(SceneError, match="not a finite number"):
        read_stl(tmp_path / "nan.stl")
    (tmp_path / "none.stl").write_text("solid x\nendsolid x\n")
    with pytest.raises(SceneError, match="no triangles"):
        read_stl(tmp_path / "none.stl")


def test_the_command_line_refuses_a_broken_stl_with_exit_2(tmp_path):
    urdf = _object(tmp_path / "broken", _stl()[:-30])
    code, _, stderr = quiet_main("data", "synthesize", "--scene", urdf, "--count", "1",
                                 "--samples", "10", "--params", "lateral_friction=0.3",
                                 "--out", tmp_path / "data")
    assert code == 2
    assert "not a readable STL mesh" in stderr and "Traceback" not in stderr
    assert not (tmp_path / "data").exists()
