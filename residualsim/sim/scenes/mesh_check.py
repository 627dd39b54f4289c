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
* COLLADA (:mod:`residualsim.sim.scenes.collada`): well-formed XML without ``<asset>`` or
  a ``<unit meter>``, a ``<geometry>`` without mesh data, a ``nan`` in a ``<float_array>``
  crashed the process (segmentation fault); an empty ``<float_array>`` or ``<p>`` aborted
  it; a file that is not XML, or whose geometry no ``<instance_geometry>`` places, gave no
  shape. A file declaring an XML entity is refused too (a "billion laughs").

:func:`check_mesh` refuses each with one :class:`~residualsim.errors.SceneError` naming the
file and the fault; :func:`obj_vertices` is the one OBJ reader (the MPEC's contact candidates
too). Other extensions are left to PyBullet, which names them.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from residualsim.errors import SceneError
from residualsim.sim.scenes.collada import read_collada
from residualsim.sim.scenes.stl import read_stl

__all__ = ["check_mesh", "obj_vertices"]

#: Largest coordinate PyBullet can hold: it reads meshes in single precision.
_FLOAT32_MAX = float(np.finfo(np.float32).max)


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


def check_mesh(path: str | os.PathLike[str]) -> np.ndarray | None:
    """SceneError naming the mesh file ``path`` when PyBullet would crash on it or load it
    as no shape (module docstring), or when a coordinate is not a finite single-precision
    number. An extension other than ``.obj``, ``.stl`` or ``.dae`` is not checked. Returns
    the extents (3,) of the mesh's bounding box: an OBJ or STL mesh's in the file's units,
    a COLLADA mesh's in metres as PyBullet places it (its ``<unit>`` and node transforms
    applied; :mod:`residualsim.sim.scenes.collada`); None for unchecked files."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".obj":
        values = vertices = obj_vertices(path)
    elif suffix == ".stl":
        values = vertices = read_stl(path)[0].reshape(-1, 3)
    elif suffix == ".dae":
        values, vertices = read_collada(path)
    else:
        return None
    for numbers in (values, vertices):
        if not (np.isfinite(numbers) & (np.abs(numbers) <= _FLOAT32_MAX)).all():
            raise SceneError(f"{path}: the mesh has a coordinate that is not a finite number "
                             "in single precision (PyBullet's; up to 3.4e38): it would load "
                             "as no shape or a wrong one")
    if not len(vertices):
        return None
    return vertices.max(axis=0) - vertices.min(axis=0)
