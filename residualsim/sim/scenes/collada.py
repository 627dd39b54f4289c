"""COLLADA (``.dae``) meshes as PyBullet 3.2 reads them: the checks of its crashes and the
size of the shape it builds.

Measured with ``loadURDF`` (PyBullet 3.2.7; its reader ``LoadMeshFromCollada``, TinyXML):

* it crashed (segmentation fault) on well-formed XML without ``<asset>`` under the root, a
  ``<unit>`` without ``meter``, a ``<geometry>`` without mesh data or a ``nan`` in a
  ``<float_array>``; it aborted on an empty ``<float_array>`` or ``<p>``;
* it gave no shape (the object fell through the table, exit status 0) for a file that is not
  XML, no ``<scene>`` placing a ``<visual_scene>``, or no ``<instance_geometry>`` placing a
  geometry; a ``<unit meter>`` that is not a number it read as 0 (a shape of zero size);
* it scales the mesh by ``<asset><unit meter>`` (the length of the file's unit in metres:
  a file in millimetres with ``meter="0.001"`` loads at its size in metres) and by the
  transforms of the ``<node>`` elements above each ``<instance_geometry>``: of each node the
  first ``<matrix>``, ``<translate>``, ``<scale>`` and ``<rotate>`` (degrees), applied in that
  order whatever the file's order (a second ``<scale>`` is ignored); ``<up_axis>`` does not
  change the collision shape.

:func:`read_collada` refuses each fault with one SceneError naming the file and returns the
mesh's vertices as PyBullet places them, in metres, before the URDF's ``<mesh scale>``.
"""

from __future__ import annotations

import math
from pathlib import Path
from xml.etree.ElementTree import Element

import numpy as np

from residualsim.errors import SceneError
from residualsim.sim.scenes.xml_guard import parse_xml

__all__ = ["read_collada"]

#: COLLADA elements holding a mesh's faces (their vertex indices in ``<p>``).
_PRIMITIVES = ("triangles", "polylist", "polygons", "trifans", "tristrips")
#: Deepest ``<node>`` nesting followed (a scene graph is a few levels deep).
_MAX_DEPTH = 64


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _children(element: Element, name: str) -> list[Element]:
    return [child for child in element if _local(child.tag) == name]


def _first(element: Element | None, name: str) -> Element | None:
    found = _children(element, name) if element is not None else []
    return found[0] if found else None


def _floats(path: Path, element: Element, what: str) -> np.ndarray:
    try:
        return np.array((element.text or "").split(), dtype=np.float64)
    except ValueError:
        raise SceneError(f"{path}: COLLADA {what} holds something that is not a "
                         "number") from None


def _unit(path: Path, asset: Element) -> float:
    """Metres per unit of the file (``<unit meter>``, 1 without ``<unit>``)."""
    unit = _first(asset, "unit")
    if unit is None:
        return 1.0
    text = unit.get("meter")
    if text is None:
        raise SceneError(f"{path}: COLLADA <unit> has no meter attribute (PyBullet crashes "
                         "on it)")
    try:
        meter = float(text)
    except ValueError:
        meter = math.nan
    if not (math.isfinite(meter) and meter > 0):
        raise SceneError(f"{path}: COLLADA <unit meter={text!r}> must be a finite positive "
                         "number, the length of the file's unit in metres")
    return meter


def _positions(path: Path, geometry: Element) -> np.ndarray:
    """The vertices (n, 3) of the geometry's ``<vertices>`` POSITION sources, in its units;
    SceneError when it has no mesh data."""
    mesh = _first(geometry, "mesh")
    primitives = [e for e in mesh if _local(e.tag) in _PRIMITIVES] if mesh is not None else []
    indices = [p.text for e in primitives for p in e if _local(p.tag) == "p"]
    sources = {s.get("id"): _first(s, "float_array") for s in _children(mesh, "source")
               } if mesh is not None else {}
    positions = [sources.get((i.get("source") or "").lstrip("#"))
                 for v in _children(mesh, "vertices") if mesh is not None
                 for i in _children(v, "input") if i.get("semantic") == "POSITION"]
    positions = [array for array in positions if array is not None]
    if not positions or not indices or not all(text and text.strip() for text in indices):
        raise SceneError(f"{path}: COLLADA <geometry id={geometry.get('id')!r}> has no mesh "
                         "data (a <vertices> POSITION <source> with a <float_array>, and faces "
                         "with a non-empty <p>); PyBullet crashes on it")
    values = [_floats(path, array, f"<float_array id={array.get('id')!r}>")
              for array in positions]
    return np.concatenate([v[:len(v) // 3 * 3] for v in values]).reshape(-1, 3)


def _transform(path: Path, node: Element) -> np.ndarray:
    """The node's 4 x 4 transform as PyBullet composes it (module docstring)."""
    result = np.eye(4)
    for name, size in (("matrix", 16), ("translate", 3), ("scale", 3), ("rotate", 4)):
        element = _first(node, name)
        if element is None or not (element.text or "").strip():
            continue
        values = _floats(path, element, f"<node id={node.get('id')!r}> <{name}>")
        if len(values) != size:
            if name == "matrix":
                continue  # PyBullet warns and skips it
            raise SceneError(f"{path}: COLLADA <node id={node.get('id')!r}> <{name}> is not "
                             f"{size} numbers")
        step = np.eye(4)
        if name == "matrix":
            step = values.reshape(4, 4)
        elif name == "translate":
            step[:3, 3] = values
        elif name == "scale":
            step[:3, :3] = np.diag(values)
        else:
            axis, angle = values[:3], math.radians(values[3])
            norm = np.linalg.norm(axis)
            if norm > 0:
                x, y, z = axis / norm
                k = np.array([[0, -z, y], [z, 0, -x], [-y, x, 0]])
                step[:3, :3] += math.sin(angle) * k + (1 - math.cos(angle)) * k @ k
        result = result @ step
    return result


def _placed(path: Path, node: Element, parent: np.ndarray, shapes: dict[str, np.ndarray],
            out: list[np.ndarray], depth: int = 0) -> None:
    """Append to ``out`` the vertices of every geometry the node (and its descendants) place,
    in the scene's frame."""
    if depth > _MAX_DEPTH:
        raise SceneError(f"{path}: COLLADA <node> elements nested deeper than {_MAX_DEPTH}")
    transform = parent @ _transform(path, node)
    for instance in _children(node, "instance_geometry"):
        vertices = shapes.get((instance.get("url") or "").lstrip("#"))
        if vertices is not None:
            out.append(vertices @ transform[:3, :3].T + transform[:3, 3])
    for child in _children(node, "node"):
        _placed(path, child, transform, shapes, out, depth + 1)


def read_collada(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Every number of the COLLADA file's ``<float_array>`` elements (1-d, a check of their
    values) and the vertices (n, 3) of the shape PyBullet builds from it, in metres (its
    ``<unit>`` and node transforms applied, not the URDF's ``<mesh scale>``); SceneError
    naming the file for the faults of the module docstring."""
    path = Path(path)
    root = parse_xml(path, "COLLADA mesh")
    if _local(root.tag) != "COLLADA":
        raise SceneError(f"{path}: not a COLLADA mesh: its root element is "
                         f"<{_local(root.tag)}>")
    asset = _first(root, "asset")
    if asset is None:
        raise SceneError(f"{path}: the COLLADA mesh has no <asset> (PyBullet crashes on it)")
    unit = _unit(path, asset)
    geometries = [g for library in _children(root, "library_geometries")
                  for g in _children(library, "geometry")]
    if not geometries:
        raise SceneError(f"{path}: the COLLADA mesh has no <geometry> placed by an "
                         "<instance_geometry>: PyBullet would give the link no shape")
    shapes = {g.get("id") or "": _positions(path, g) for g in geometries}
    numbers = []
    for array in (e for e in root.iter() if _local(e.tag) == "float_array"):
        values = _floats(path, array, f"<float_array id={array.get('id')!r}>")
        if not len(values):
            raise SceneError(f"{path}: COLLADA <float_array id={array.get('id')!r}> is empty "
                             "(PyBullet aborts on it)")
        numbers.append(values)
    values = np.concatenate(numbers)
    if not np.isfinite(values).all():
        return values, np.zeros((0, 3))  # check_mesh names the fault
    scenes = {s.get("id"): s for library in _children(root, "library_visual_scenes")
              for s in _children(library, "visual_scene")}
    chosen = _first(_first(root, "scene"), "instance_visual_scene")
    scene = scenes.get((chosen.get("url") or "").lstrip("#")) if chosen is not None else None
    placed: list[np.ndarray] = []
    for node in _children(scene, "node") if scene is not None else []:
        _placed(path, node, np.eye(4), shapes, placed)
    if not placed:
        raise SceneError(f"{path}: the COLLADA mesh has no <geometry> placed by an "
                         "<instance_geometry> in the <visual_scene> its <scene> names: "
                         "PyBullet would give the link no shape")
    return values, unit * np.concatenate(placed)
