"""Where a URDF's mesh files are, and how a copy of the URDF written elsewhere still finds them.

A ``<mesh filename>`` is a path relative to the URDF's folder, an absolute path, a
``file://`` URL or ``package://NAME/REST``. :func:`resolve_mesh` finds the file;
``package://NAME/REST`` is looked for, in this order:

1. as PyBullet 3.2 looks for it: ``NAME/REST`` under the URDF's folder or one of its
   parents (a folder named ``NAME`` holding the URDF, or beside the URDF or a parent);
2. in the ROS package ``NAME`` above the URDF: a parent of the URDF's folder, or a folder
   beside one, whose ``package.xml`` has ``<name>NAME</name>``;
3. in ``ROS_PACKAGE_PATH`` (folders separated by ``os.pathsep``), where set: a folder there,
   or below it (:data:`ROS_SEARCH_DEPTH` levels at most), named ``NAME`` or holding a
   ``package.xml`` naming it;
4. ``REST`` under the URDF's folder or one of its parents (a package folder renamed, as a
   clone ``NAME-main`` is).

PyBullet itself finds only the first kind (measured: ``package://NAME/meshes/x.obj`` with
the URDF in ``P/urdf/`` and the mesh in ``P/meshes/`` does not load unless ``P`` is named
``NAME``; it also searches the working directory, which residualsim does not rely on).
A URDF with a mesh only residualsim finds is loaded from a copy that names its files
(:func:`~residualsim.sim.scenes.body.loadable_urdf`).

Whenever residualsim writes a URDF somewhere else (a body being identified, in a temporary
folder; an ``--export-urdf``; a planar wrapper), :func:`point_meshes` rewrites every mesh
name to resolve from the new file: an absolute path for residualsim's own copies; for an
export, ``package://`` as written where PyBullet finds the same file from there, else a path
relative to the export (absolute only where no relative path exists: another drive). A
mesh that cannot be resolved is a :class:`~residualsim.errors.SceneError` naming the URDF
and the mesh.
"""

from __future__ import annotations

import functools
import os
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from residualsim.errors import SceneError
from residualsim.sim.scenes.stl import pybullet_mesh

__all__ = ["resolve_mesh", "point_meshes", "meshes_load_as_written", "ROS_SEARCH_DEPTH",
           "PACKAGE_SEARCH"]

#: How many folder levels below each ``ROS_PACKAGE_PATH`` entry a package is looked for.
ROS_SEARCH_DEPTH = 4
#: How the search for ``package://`` is described in messages.
PACKAGE_SEARCH = ("package:// is searched under the URDF's folder and its parents, in a "
                  "package.xml naming the package above the URDF, and in ROS_PACKAGE_PATH")


def _package_name(folder: Path) -> str | None:
    """The ``<name>`` of ``folder/package.xml``, or None."""
    manifest = folder / "package.xml"
    if not manifest.is_file():
        return None
    try:
        name = ElementTree.parse(manifest).getroot().findtext("name")
    except (ElementTree.ParseError, OSError):
        return None
    return name.strip() if name else None


def _is_package(folder: Path, name: str) -> bool:
    return folder.name == name or _package_name(folder) == name


def _subfolders(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []


@functools.lru_cache(maxsize=64)
def _ros_package(name: str, roots: str) -> Path | None:
    """The package folder ``name`` under the ``os.pathsep``-separated ``roots``."""
    for entry in filter(None, roots.split(os.pathsep)):
        level = [Path(entry)]
        for _ in range(ROS_SEARCH_DEPTH + 1):
            for folder in level:
                if folder.is_dir() and _is_package(folder, name):
                    return folder
            # a package holds no other package: do not look inside one
            level = [sub for folder in level if _package_name(folder) is None
                     for sub in _subfolders(folder)]
    return None


def _upward(relative: str, folder: Path) -> Path | None:
    """The file ``relative`` under ``folder`` or its nearest parent holding it."""
    for base in (folder, *folder.parents):
        if (base / relative).is_file():
            return base / relative
    return None


def resolve_mesh(filename: str, urdf: Path, pybullet_only: bool = False) -> Path | None:
    """The file a mesh ``filename`` of the URDF ``urdf`` names, or None when it cannot be
    found (the search: the module docstring; ``pybullet_only``: PyBullet's own only)."""
    folder = Path(urdf).resolve().parent
    if filename.startswith("package://"):
        package, _, inner = filename[len("package://"):].partition("/")
        if not (package and inner):
            return None
        found = _upward(f"{package}/{inner}", folder)
        if found is not None or pybullet_only:
            return found
        near = (f for base in (folder, *folder.parents)
                for f in (base, *_subfolders(base)) if _package_name(f) == package)
        root = next(near, None) or _ros_package(package, os.environ.get("ROS_PACKAGE_PATH",
                                                                        ""))
        if root is not None and (root / inner).is_file():
            return root / inner
        return _upward(inner, folder)
    if filename.startswith("file://"):
        filename = filename[len("file://"):]
    candidate = Path(filename)
    candidate = candidate if candidate.is_absolute() else folder / candidate
    return candidate if candidate.is_file() else None


def mesh_not_found(filename: str, urdf: Path) -> str:
    """Why :func:`resolve_mesh` found no file for ``filename``: "not found", or, for a
    plain path that exists, that it is a folder or not a regular file (a device, a pipe)."""
    plain = filename[len("file://"):] if filename.startswith("file://") else filename
    if filename.startswith("package://") or not plain:
        return "not found"
    candidate = Path(plain)
    candidate = candidate if candidate.is_absolute() else Path(urdf).resolve().parent / candidate
    if candidate.is_dir():
        return f"is a folder ({candidate}), not a mesh file"
    if candidate.exists():
        return f"is not a regular file ({candidate}: a device or pipe), not a mesh file"
    return "not found"


def meshes_load_as_written(urdf: Path, root: ElementTree.Element) -> bool:
    """Whether PyBullet finds and reads every mesh of ``urdf`` (its XML ``root``) itself:
    not when a ``package://`` mesh is found only by residualsim's search, nor when a mesh is
    an STL file PyBullet would crash on (:func:`~residualsim.sim.scenes.stl.pybullet_mesh`:
    an ASCII one is then loaded from a binary copy)."""
    for mesh in root.iter("mesh"):
        name = mesh.get("filename", "")
        if name.startswith("package://") and \
                resolve_mesh(name, urdf, pybullet_only=True) is None:
            return False
        found = resolve_mesh(name, urdf) if name else None
        if found is not None and pybullet_mesh(found) != found:
            return False
    return True


def point_meshes(root: ElementTree.Element, urdf: Path, written: Path | None = None) -> None:
    """Rewrite every ``<mesh filename>`` of ``root`` (the XML of ``urdf``) to resolve from
    the URDF file ``written`` (None: a copy of residualsim's own, absolute paths); see the
    module docstring. SceneError naming ``urdf`` and the mesh when one is not found."""
    for mesh in root.iter("mesh"):
        name = mesh.get("filename", "")
        found = resolve_mesh(name, urdf) if name else None
        if found is None:
            hint = f" ({PACKAGE_SEARCH})" if name.startswith("package://") else ""
            raise SceneError(f"{urdf}: mesh {name!r} {mesh_not_found(name, urdf)}{hint}")
        found = found.resolve()
        if written is None:  # residualsim's own copy: what PyBullet can read
            mesh.set("filename", str(pybullet_mesh(found)))
            continue
        if name.startswith("package://"):
            again = resolve_mesh(name, written, pybullet_only=True)
            if again is not None and again.resolve() == found:
                continue
        try:
            mesh.set("filename", Path(os.path.relpath(found, written.resolve().parent))
                     .as_posix())
        except ValueError:  # another drive: no relative path
            mesh.set("filename", str(found))
