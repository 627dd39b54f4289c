"""STL mesh files: read either form, and hand PyBullet only the binary one.

PyBullet 3.2 reads binary STL only, and does not check it: an ASCII STL, a truncated
binary file or one whose triangle count exceeds its data crashed the process with a
segmentation fault (measured, ``createCollisionShape`` and ``loadURDF``). CAD tools write
ASCII STL often. So every mesh residualsim gives PyBullet goes through
:func:`pybullet_mesh`: a binary STL of the right size is used as it is, an ASCII one is
converted once into a binary copy (in a per-user cache folder, named by its content's
hash, written atomically), and anything else named ``.stl`` is a
:class:`~residualsim.errors.SceneError` naming the file and what is wrong with it.

Binary layout: an 80-byte header, the triangle count n (uint32, little-endian), then n
records of 50 bytes (normal and three vertices as float32 x, y, z in the mesh's own
frame and units, and a uint16 attribute). ASCII: ``solid`` … ``facet normal`` / ``outer
loop`` / three ``vertex x y z`` / ``endloop`` / ``endfacet`` … ``endsolid``.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import numpy as np

from residualsim.errors import SceneError

__all__ = ["read_stl", "stl_form", "pybullet_mesh", "STL_RECORD"]

#: One binary STL triangle record (50 bytes).
STL_RECORD = np.dtype([("normal", "<f4", 3), ("vertices", "<f4", (3, 3)), ("attr", "<u2")])


def stl_form(raw: bytes) -> str:
    """``"binary"`` when ``raw`` has exactly the size its triangle count says (even if its
    header begins with ``solid``, as some exporters write), ``"ascii"`` when it begins
    with ``solid`` otherwise, else ``"broken"``."""
    if len(raw) >= 84:
        count = int(np.frombuffer(raw[80:84], dtype="<u4")[0])
        if len(raw) == 84 + STL_RECORD.itemsize * count:
            return "binary"
    return "ascii" if raw.lstrip()[:5].lower() == b"solid" else "broken"


def read_stl(path: str | os.PathLike[str]) -> tuple[np.ndarray, str]:
    """(triangles (n, 3, 3) float64 in the file's units and frame, ``"binary"`` or
    ``"ascii"``) of the STL file ``path``; SceneError naming it when it is neither (a
    truncated binary file, a count beyond its data), has no triangles, an ASCII vertex
    count that is not a multiple of 3, or a coordinate that is not a finite number."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SceneError(f"{path}: cannot read the STL mesh ({exc.strerror or exc})") from None
    form = stl_form(raw)
    if form == "broken":
        size = len(raw)
        count = int(np.frombuffer(raw[80:84], dtype="<u4")[0]) if size >= 84 else None
        detail = (f"{size} bytes, shorter than a binary STL's 84-byte header"
                  if count is None else
                  f"{size} bytes where its triangle count {count} needs "
                  f"{84 + STL_RECORD.itemsize * count}")
        raise SceneError(f"{path}: not a readable STL mesh: neither ASCII (no 'solid' at its "
                         f"start) nor binary ({detail}): truncated or corrupt?")
    if form == "binary":
        triangles = np.frombuffer(raw[84:], dtype=STL_RECORD)["vertices"].astype(np.float64)
    else:
        rows = [line.split()[1:] for line in raw.decode("utf-8", errors="replace").splitlines()
                if line.strip().lower().startswith("vertex")]
        if any(len(row) != 3 for row in rows) or len(rows) % 3:
            raise SceneError(f"{path}: ASCII STL with {len(rows)} 'vertex' lines, not 3 "
                             "numbers each in groups of 3 (one triangle per facet)")
        try:
            triangles = np.array(rows, dtype=np.float64).reshape(-1, 3, 3)
        except ValueError:
            raise SceneError(f"{path}: ASCII STL with a 'vertex' line that is not three "
                             "numbers") from None
    if not len(triangles):
        raise SceneError(f"{path}: the STL mesh holds no triangles")
    if not np.isfinite(triangles).all():
        raise SceneError(f"{path}: the STL mesh has a vertex that is not a finite number")
    return triangles, form


def _cache_dir() -> Path:
    """The folder of binary copies: ``$RESIDUALSIM_CACHE/meshes`` or, unset, the system's
    temporary folder's ``residualsim-meshes-<uid>``."""
    root = os.environ.get("RESIDUALSIM_CACHE")
    if root:
        return Path(root) / "meshes"
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"residualsim-meshes-{uid}"


def pybullet_mesh(path: str | os.PathLike[str]) -> Path:
    """The file PyBullet should load for the mesh ``path``: ``path`` itself unless it is an
    STL file that is not binary; an ASCII STL's binary copy (normals from the vertices'
    winding, made once: named by the source's SHA-256); SceneError for a broken STL (see
    :func:`read_stl`)."""
    path = Path(path)
    if path.suffix.lower() != ".stl":
        return path
    try:
        with open(path, "rb") as handle:
            head = handle.read(84)
        size = path.stat().st_size
    except OSError as exc:
        raise SceneError(f"{path}: cannot read the STL mesh ({exc.strerror or exc})") from None
    if len(head) == 84 and size == 84 + STL_RECORD.itemsize * int(
            np.frombuffer(head[80:84], dtype="<u4")[0]):
        return path  # binary, checked without reading it all
    triangles, _ = read_stl(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:24]
    folder = _cache_dir()
    copy = folder / f"{path.stem}-{digest}.stl"
    if copy.is_file():
        return copy
    records = np.zeros(len(triangles), dtype=STL_RECORD)
    records["vertices"] = triangles
    normals = np.cross(triangles[:, 1] - triangles[:, 0], triangles[:, 2] - triangles[:, 0])
    lengths = np.linalg.norm(normals, axis=1, keepdims=True)
    records["normal"] = np.divide(normals, lengths, out=np.zeros_like(normals),
                                  where=lengths > 0)
    header = f"binary copy of ASCII STL {path.name}".encode()[:80].ljust(80, b" ")
    data = header + np.uint32(len(records)).astype("<u4").tobytes() + records.tobytes()
    temporary = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=folder, suffix=".stl.part")
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, copy)
    except OSError as exc:
        if temporary is not None and os.path.exists(temporary):
            os.unlink(temporary)
        raise SceneError(f"{path}: ASCII STL, which PyBullet cannot read; its binary copy "
                         f"could not be written to {folder} ({exc.strerror or exc}; "
                         "RESIDUALSIM_CACHE chooses the folder)") from None
    return copy
