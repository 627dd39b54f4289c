"""COLLADA (``.dae``) collision meshes are sized as PyBullet places them (its ``<unit meter>``
and node transforms applied; residualsim.sim.scenes.collada): a mesh in millimetres is
implausible, exit 2 naming the file; malformed files and XML entity declarations (a "billion
laughs") are one clear error."""

from __future__ import annotations

import time

import numpy as np
import pybullet
import pytest
from test_mesh_check import _POSITIONS, _dae

from conftest import load_train_script
from residualsim.errors import SceneError
from residualsim.sim.implausible import allow_implausible
from residualsim.sim.scenes.mesh_check import check_mesh
from residualsim.sim.scenes.urdf_check import check_urdf

HOSTILE = load_train_script("hostile_inputs")
#: The box of test_mesh_check in millimetres: 60 x 40 x 20 mm.
_MM = " ".join(f"{1000 * float(v):g}" for v in _POSITIONS.split())
_INERTIA = 'ixx="1e-4" iyy="1e-4" izz="1e-4" ixy="0" ixz="0" iyz="0"'
#: Ten entities of ten references each: 1e9 copies of "ha" from under a kilobyte.
_LAUGHS = ('<?xml version="1.0"?><!DOCTYPE COLLADA [<!ENTITY a0 "ha">'
           + "".join(f'<!ENTITY a{i} "{f"&a{i - 1};" * 10}">' for i in range(1, 10))
           + ']><COLLADA><asset>&a9;</asset></COLLADA>')


def _urdf(folder, mesh: str, scale: str = "") -> str:
    path = folder / "thing.urdf"
    scale = f' scale="{scale}"' if scale else ""
    path.write_text(f'<?xml version="1.0"?><robot name="thing"><link name="a"><inertial>'
                    f'<mass value="0.3"/><inertia {_INERTIA}/></inertial><collision><geometry>'
                    f'<mesh filename="{mesh}"{scale}/></geometry></collision></link></robot>')
    return str(path)


def _node(text: str, transform: str) -> str:
    return text.replace('<node id="n">', f'<node id="n">{transform}')


@pytest.mark.parametrize("name,text,expected", [
    ("metres", _dae(), (0.06, 0.04, 0.02)),
    ("mm-with-unit", _dae(_MM).replace('meter="1"', 'meter="0.001"'), (0.06, 0.04, 0.02)),
    ("inches", _dae().replace('meter="1"', 'meter="0.0254"'), (0.001524, 0.001016, 0.000508)),
    ("y-up", _dae().replace("Z_UP", "Y_UP"), (0.06, 0.04, 0.02)),
    ("node-scale", _node(_dae(), "<scale>10 10 10</scale>"), (0.6, 0.4, 0.2)),
    ("second-scale-ignored", _node(_dae(), "<scale>2 2 2</scale><scale>9 9 9</scale>"),
     (0.12, 0.08, 0.04)),
    ("matrix", _node(_dae(), "<matrix>5 0 0 1 0 5 0 0 0 0 5 0 0 0 0 1</matrix>"),
     (0.3, 0.2, 0.1)),
    ("rotate", _node(_dae(), "<rotate>1 0 0 90</rotate>"), (0.06, 0.02, 0.04)),
    ("nested", _dae().replace('<node id="n">', '<node id="o"><scale>10 10 10</scale>'
                              '<node id="n">').replace("</node>", "</node></node>"),
     (0.6, 0.4, 0.2)),
])
def test_a_collada_mesh_is_sized_as_pybullet_places_it(tmp_path, name, text, expected):
    """check_mesh's extents (m) match the collision shape PyBullet builds (its AABB less the
    collision margin, 2 mm a side)."""
    (tmp_path / f"{name}.dae").write_text(text)
    extents = check_mesh(tmp_path / f"{name}.dae")
    np.testing.assert_allclose(extents, expected, rtol=1e-6)
    client = pybullet.connect(pybullet.DIRECT)
    try:
        body = pybullet.loadURDF(_urdf(tmp_path, f"{name}.dae"), physicsClientId=client)
        low, high = pybullet.getAABB(body, physicsClientId=client)
    finally:
        pybullet.disconnect(client)
    np.testing.assert_allclose(np.subtract(high, low) - 0.004, expected, atol=2e-4)


def test_a_collada_mesh_in_metres_passes_the_urdf_check(tmp_path):
    (tmp_path / "box.dae").write_text(_dae())
    check_urdf(_urdf(tmp_path, "box.dae"))
    (tmp_path / "mm.dae").write_text(_dae(_MM))  # millimetres, scaled in the URDF
    check_urdf(_urdf(tmp_path, "mm.dae", scale="0.001 0.001 0.001"))


def test_a_collada_mesh_in_millimetres_is_refused_with_exit_2_naming_it(tmp_path, capsys):
    from residualsim.cli import main

    (tmp_path / "mm.dae").write_text(_dae(_MM))  # <unit meter="1">: a 60 m box
    urdf = _urdf(tmp_path, "mm.dae")
    with pytest.raises(SceneError, match=r"mesh 'mm\.dae' spans 60, 40, 20 m.*millimetres.*"
                                         r'<unit meter="0\.001"/>.*--allow-implausible'):
        check_urdf(urdf)
    with allow_implausible():
        check_urdf(urdf)
    code = main(["data", "info", str(HOSTILE._csv_set(tmp_path)), "--scene", urdf])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "thing.urdf: link 'a': mesh 'mm.dae' spans 60, 40, 20 m" in err


@pytest.mark.parametrize("name,text,message", [
    ("not-xml.dae", "<COLLADA><asset>", "not valid XML"),
    ("no-meter.dae", _dae().replace('<unit meter="1"/>', "<unit/>"),
     "<unit> has no meter attribute"),  # segfault
    ("word-meter.dae", _dae().replace('meter="1"', 'meter="mm"'),
     "<unit meter='mm'> must be a finite positive number"),  # a shape of zero size
    ("no-scene.dae", _dae().replace('<scene><instance_visual_scene url="#s"/></scene>', ""),
     "in the <visual_scene> its <scene> names"),  # no shape
    ("no-vertices.dae", _dae().replace('semantic="POSITION"', 'semantic="NORMAL"'),
     "has no mesh data"),
    ("bad-matrix.dae", _node(_dae(), "<scale>1 x 1</scale>"), "<scale> holds something"),
    ("huge-node.dae", _node(_dae(), "<scale>1e300 1e300 1e300</scale>"), "single precision"),
    ("laughs.dae", _LAUGHS, "declares an XML entity"),
    ("external.dae", _dae().replace('<?xml version="1.0"?>', '<?xml version="1.0"?>'
                                    '<!DOCTYPE COLLADA [<!ENTITY e SYSTEM "/etc/passwd">]>'),
     "declares an XML entity"),
])
def test_a_malformed_collada_mesh_is_one_clear_error(tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    start = time.perf_counter()
    with pytest.raises(SceneError, match=message) as refused:
        check_mesh(tmp_path / name)
    assert name in str(refused.value)
    assert time.perf_counter() - start < 5


def test_a_billion_laughs_urdf_is_refused_at_once(tmp_path):
    path = tmp_path / "laughs.urdf"
    path.write_text(_LAUGHS.replace("COLLADA", "robot").replace("asset", "link"))
    start = time.perf_counter()
    with pytest.raises(SceneError, match=r"laughs\.urdf: the URDF declares an XML entity"):
        check_urdf(path)
    assert time.perf_counter() - start < 5
