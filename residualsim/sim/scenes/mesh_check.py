"""Mesh files PyBullet would crash on or silently drop, refused before it sees them.

PyBullet 3.2 reads OBJ, STL and COLLADA (``.dae``) meshes and checks none of them
(measured with ``loadURDF``; a link's collision and visual meshes alike):

* OBJ: faces without any vertex crashed the process (segmentation fault); a file without a
  face (empty, binary, UTF-16 text, vertices only) or a face naming vertex 0 loaded with
  "cannot extract anything useful" on PyBullet's output and no shape: the object fell
  through the table, exit status 0; a coordinate ``inf``, or one beyond single precision
  (``1e300``), did the same; a ``nan`` one let the body rest 9 mm deep in the table;
* STL (:mod:`residualsim.sim.scenes.stl`): a binary file of zero triangles gave no shape,
  a ``nan`` or ``inf`` vertex made the object fall through the table;
* COLLADA: well-formed XML without ``<asset>``, a ``<geometry>`` without mesh data, a
  ``nan`` in a ``<float_array>`` crashed the process (segmentation fault); an empty
  ``<float_array>`` or ``<p>`` aborted it; a file that is not XML, or whose geometry no
  ``<instance_geometry>`` places, gave no shape.

:func:`check_mesh` refuses each with one :class:`~residualsim.errors.SceneError` naming the
file and the fault; :func:`obj_vertices` is the one OBJ reader (the MPEC's contact candidates
too). Other extensions are left to PyBullet, which names them.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import numpy as np

from residualsim.errors import SceneError
from residualsim.sim.scenes.stl import read_stl

__all__ = ["check_mesh", "obj_vertices"]

#: Largest coordinate PyBullet can hold: it reads meshes in single precision.
_FLOAT32_MAX = float(np.finfo(np.float32).max)
#: COLLADA elements holding a mesh's faces (their vertex indices in ``<p>``).
_PRIMITIVES = ("triangles", "polylist", "polygons", "trifans", "tristrips")


def obj_vertices(path: str | os.PathLike[str]) -> np.ndarray:
    """Vertices (n, 3) float64 of the OBJ file ``path``, in its own units and frame;
    SceneError naming it when a ``v`` line is not three numbers, it has no face of three or
    more vertices, or a face names a vertex that does not exist (indices count from 1;
    negative ones back from the last vertex read)."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise SceneError(f"{path}: cannot read the OBJ mesh ({exc.strerror or exc})") from None
    vertices: list[list[float]] = []
    faces = 0
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or words[0] not in ("v", "f"):
            continue
        if words[0] == "v":
            try:
                vertices.append([float(word) for word in words[1:4]])
            except ValueError:
                vertices.append([])
            if len(vertices[-1]) != 3:
                raise SceneError(f"{path}: line {number}: vertex {line.strip()[:60]!r} is not "
                                 "three numbers")
            continue
        faces += len(words) >= 4  # an edge (two indices) is no face: PyBullet skips it
        for word in words[1:]:
            try:
                index = int(word.split("/")[0])
            except ValueError:
                index = 0
            if index == 0 or abs(index) > len(vertices):
                raise SceneError(f"{path}: line {number}: face {line.strip()[:60]!r} names a "
                                 f"vertex that does not exist ({len(vertices)} read so far; "
                                 "indices count from 1)")
    if not faces:
        raise SceneError(f"{path}: the OBJ mesh has no face ('f' line of 3+ vertices; "
                         f"{len(vertices)} vertices): "
                         "empty, not OBJ text (binary or UTF-16?) or a point cloud; PyBullet "
                         "would give the link no shape")
    return np.array(vertices, dtype=np.float64).reshape(-1, 3)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _dae_vertices(path: Path) -> np.ndarray:
    """Every number of the COLLADA file's ``<float_array>`` elements, as (n, 3) where their
    count allows (a check of their values, not the mesh's vertices); SceneError naming the
    file for the faults of the module docstring."""
    try:
        root = ElementTree.parse(path).getroot()
    except ElementTree.ParseError as exc:
        raise SceneError(f"{path}: not a COLLADA mesh: not valid XML ({exc})") from None
    except OSError as exc:
        raise SceneError(f"{path}: cannot read the COLLADA mesh ({exc.strerror or exc})"
                         ) from None
    if _local(root.tag) != "COLLADA":
        raise SceneError(f"{path}: not a COLLADA mesh: its root element is "
                         f"<{_local(root.tag)}>")
    elements = {name: [e for e in root.iter() if _local(e.tag) == name]
                for name in ("asset", "geometry", "instance_geometry", "float_array")}
    if not elements["asset"]:
        raise SceneError(f"{path}: the COLLADA mesh has no <asset> (PyBullet crashes on it)")
    if not elements["geometry"] or not elements["instance_geometry"]:
        raise SceneError(f"{path}: the COLLADA mesh has no <geometry> placed by an "
                         "<instance_geometry>: PyBullet would give the link no shape")
    for geometry in elements["geometry"]:
        primitives = [e for e in geometry.iter() if _local(e.tag) in _PRIMITIVES]
        arrays = [e for e in geometry.iter() if _local(e.tag) == "float_array"]
        indices = [p.text for e in primitives for p in e if _local(p.tag) == "p"]
        if not arrays or not indices or not all(text and text.strip() for text in indices):
            raise SceneError(f"{path}: COLLADA <geometry id={geometry.get('id')!r}> has no "
                             "mesh data (a <float_array> and faces with a non-empty <p>); "
                             "PyBullet crashes on it")
    numbers = []
    for array in elements["float_array"]:
        try:
            values = np.array((array.text or "").split(), dtype=np.float64)
        except ValueError:
            raise SceneError(f"{path}: COLLADA <float_array id={array.get('id')!r}> holds "
                             "something that is not a number") from None
        if not len(values):
            raise SceneError(f"{path}: COLLADA <float_array id={array.get('id')!r}> is empty "
                             "(PyBullet aborts on it)")
        numbers.append(values)
    values = np.concatenate(numbers)
    return values.reshape(-1, 3) if len(values) % 3 == 0 else values.reshape(-1, 1)


def check_mesh(path: str | os.PathLike[str]) -> np.ndarray | None:
    """SceneError naming the mesh file ``path`` when PyBullet would crash on it or load it
    as no shape (module docstring), or when a coordinate is not a finite single-precision
    number. An extension other than ``.obj``, ``.stl`` or ``.dae`` is not checked. Returns
    the extents (3,) of an OBJ or STL mesh's bounding box, in the file's units (None for
    COLLADA, whose ``<unit>`` scales them, and unchecked files)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".obj":
        values = obj_vertices(path)
    elif suffix == ".stl":
        values = read_stl(path)[0].reshape(-1, 3)
    elif suffix == ".dae":
        values = _dae_vertices(path)
    else:
        return
    if not (np.isfinite(values) & (np.abs(values) <= _FLOAT32_MAX)).all():
        raise SceneError(f"{path}: the mesh has a coordinate that is not a finite number in "
                         "single precision (PyBullet's; up to 3.4e38): it would load as no "
                         "shape or a wrong one")
    if suffix == ".dae" or not len(values):
        return None
    return values.max(axis=0) - values.min(axis=0)
