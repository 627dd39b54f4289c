"""Meshes PyBullet 3.2 crashes on (segmentation fault, abort) or loads as no shape (the object
falls through the table, exit status 0) are refused before it sees them, naming the file
(residualsim.sim.scenes.mesh_check); meshes it reads well pass."""

from __future__ import annotations

import pytest
from test_package_meshes import _obj

from residualsim.errors import SceneError
from residualsim.sim.scenes.mesh_check import check_mesh, obj_vertices

_POSITIONS = ("-0.03 -0.02 -0.01 0.03 -0.02 -0.01 0.03 0.02 -0.01 -0.03 0.02 -0.01 "
              "-0.03 -0.02 0.01 0.03 -0.02 0.01 0.03 0.02 0.01 -0.03 0.02 0.01")
_TRIANGLES = "0 2 1 0 3 2 4 5 6 4 6 7 0 1 5 0 5 4 1 2 6 1 6 5 2 3 7 2 7 6 3 0 4 3 4 7"


def _dae(positions: str = _POSITIONS, triangles: str = _TRIANGLES, asset: bool = True,
         instance: bool = True) -> str:
    """The 6 x 4 x 2 cm box as a COLLADA file PyBullet loads (with the defaults)."""
    return f"""<?xml version="1.0"?>
<COLLADA xmlns="http://www.collada.org/2005/11/COLLADASchema" version="1.4.1">
{'<asset><unit meter="1"/><up_axis>Z_UP</up_axis></asset>' if asset else ''}
<library_geometries><geometry id="g"><mesh>
<source id="p"><float_array id="pa" count="24">{positions}</float_array>
<technique_common><accessor source="#pa" count="8" stride="3"><param name="X" type="float"/>
<param name="Y" type="float"/><param name="Z" type="float"/></accessor></technique_common>
</source>
<vertices id="v"><input semantic="POSITION" source="#p"/></vertices>
<triangles count="12"><input semantic="VERTEX" source="#v" offset="0"/><p>{triangles}</p>
</triangles></mesh></geometry></library_geometries>
<library_visual_scenes><visual_scene id="s"><node id="n">
{'<instance_geometry url="#g"/>' if instance else ''}</node></visual_scene>
</library_visual_scenes><scene><instance_visual_scene url="#s"/></scene></COLLADA>
"""


def test_meshes_pybullet_reads_pass(tmp_path):
    (tmp_path / "box.obj").write_text(_obj() + "f 1 2\n")  # an edge: skipped, as PyBullet does
    (tmp_path / "box.dae").write_text(_dae())
    check_mesh(tmp_path / "box.obj")
    check_mesh(tmp_path / "box.dae")
    assert obj_vertices(tmp_path / "box.obj").shape == (8, 3)


@pytest.mark.parametrize("name,text,message", [
    ("faces-only.obj", "f 1 2 3\n", "names a vertex that does not exist"),  # segfault
    ("index-0.obj", _obj() + "f 0 1 2\n", "names a vertex that does not exist"),
    ("empty.obj", "", "has no face"),
    ("points.obj", "v 0 0 0\nv 1 0 0\nv 0 1 0\n", "has no face"),
    ("word.obj", "v 0 zero 0\nf 1 1 1\n", "is not three numbers"),
    ("nan.obj", _obj().replace("v 0.03", "v nan", 1), "not a finite number"),
    ("huge.obj", _obj().replace("v 0.03", "v 1e300", 1), "single precision"),
    ("no-asset.dae", _dae(asset=False), "no <asset>"),  # segfault
    ("nan.dae", _dae(positions=_POSITIONS.replace("0.03", "nan", 1)), "not a finite"),
    ("empty-p.dae", _dae(triangles=""), "has no mesh data"),  # abort
    ("not-placed.dae", _dae(instance=False), "no <geometry> placed"),
    ("word.dae", _dae(positions=_POSITIONS.replace("0.03", "abc", 1)), "not a number"),
    ("not-xml.dae", "solid", "not valid XML"),
    ("other.dae", '<?xml version="1.0"?><foo/>', "root element is <foo>"),  # segfault
])
def test_a_mesh_pybullet_crashes_on_or_drops_is_refused(tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    with pytest.raises(SceneError, match=message) as refused:
        check_mesh(tmp_path / name)
    assert name in str(refused.value)


def test_a_utf16_obj_is_refused(tmp_path):
    (tmp_path / "box.obj").write_text(_obj(), encoding="utf-16")
    with pytest.raises(SceneError, match="UTF-16"):
        check_mesh(tmp_path / "box.obj")
