"""Scene files: a user's object as a URDF plus the few facts a URDF cannot carry.

A scene file is TOML::

    name = "elbow"            # optional, default: the file's stem
    urdf = "elbow.urdf"       # relative to this file
    kind = "free"             # "free": floating base in 3D, table z = 0, gravity -z
                              # "planar": the body moves in the vertical x-y plane,
                              #           floor y = 0, gravity -y (a single rigid body)
    substeps = 10             # optional, default 10, at most 1000; the rate comes from the recordings
    self_collision = false    # optional: links of the object collide with each other

A path to a ``.urdf`` is the same as a scene file with ``kind = "free"`` and the defaults.
Everything physical (mass, inertia, collision shapes, joints, joint damping and friction)
comes from the URDF. Links of one object do not collide with each other unless
``self_collision = true`` (PyBullet's default; parent and child never collide).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from residualsim.errors import SceneError
from residualsim.sim.scenes.base import check_substeps

__all__ = ["SceneSpec", "read_scene_file", "is_scene_path", "KINDS"]

#: The kinds of scene a file may ask for.
KINDS = ("free", "planar")
_KEYS = {"name", "urdf", "kind", "substeps", "self_collision"}


def _shown(value: Any) -> str:
    """``repr(value)``, cut to 60 characters (a wrong value may be a huge array)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclasses.dataclass(frozen=True)
class SceneSpec:
    """What a scene file says: ``urdf`` an absolute path, ``source`` the file it came from."""

    name: str
    urdf: Path
    kind: str = "free"
    substeps: int = 10
    self_collision: bool = False
    source: Path | None = None

    def __post_init__(self) -> None:
        where = self.source or self.urdf
        if self.kind not in KINDS:
            raise SceneError(f"{where}: kind must be one of {', '.join(KINDS)}, "
                             f"got {_shown(self.kind)}")
        if not isinstance(self.substeps, int):
            raise SceneError(f"{where}: substeps must be an integer >= 1, "
                             f"got {_shown(self.substeps)}")
        check_substeps(self.substeps, str(where))
        if not isinstance(self.self_collision, bool):
            raise SceneError(f"{where}: self_collision must be true or false, "
                             f"got {_shown(self.self_collision)}")
        if not self.urdf.is_file():
            raise SceneError(f"{where}: URDF file {self.urdf} not found")


def is_scene_path(name: str | os.PathLike[str]) -> bool:
    """Whether a ``--scene`` value names a file (a ``.toml`` scene file or a ``.urdf``)
    rather than a built-in scene."""
    text = str(name)
    return text.endswith((".toml", ".urdf")) or os.sep in text


def read_scene_file(path: str | os.PathLike[str]) -> SceneSpec:
    """The :class:`SceneSpec` of a ``.toml`` scene file or a bare ``.urdf``.

    Raises SceneError naming the file: missing, unreadable, not TOML (UTF-8, a byte-order
    mark allowed), unknown keys, a value of the wrong type, a URDF that is not there or
    cannot be resolved (a symlink loop).
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise SceneError(f"{path}: no such scene file")
    path = path.resolve()
    if path.suffix == ".urdf":
        return SceneSpec(name=path.stem, urdf=path, source=path)
    if path.suffix != ".toml":
        raise SceneError(f"{path}: a scene is a .toml scene file or a .urdf")
    import tomllib

    try:
        # utf-8-sig: a byte-order mark (Windows editors write one) read as nothing
        table: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError) as exc:
        raise SceneError(f"{path}: cannot read the scene file ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SceneError(f"{path}: not a valid TOML scene file ({exc})") from None
    except RecursionError:  # tomllib nests a call per array or inline table
        raise SceneError(f"{path}: not a scene file: arrays or tables nested too deeply "
                         "for the TOML reader") from None
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        names = [k if len(k) <= 40 else k[:37] + "..." for k in unknown[:5]]
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise SceneError(f"{path}: unknown key(s) {', '.join(names)}{more}; "
                         "a scene file has "
                         f"{', '.join(sorted(_KEYS))}")
    if "urdf" not in table or not isinstance(table["urdf"], str) or not table["urdf"]:
        raise SceneError(f"{path}: needs urdf = \"<file>.urdf\" (relative to the scene file)")
    name = table.get("name", path.stem)
    if not isinstance(name, str) or not name:
        raise SceneError(f"{path}: name must be a non-empty string, got {_shown(name)}")
    try:
        urdf = (path.parent / table["urdf"]).resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
        raise SceneError(f"{path}: URDF file {table['urdf']!r} cannot be resolved ({exc})"
                         ) from None
    return SceneSpec(name=name, urdf=urdf,
                     kind=table.get("kind", "free"), substeps=table.get("substeps", 10),
                     self_collision=table.get("self_collision", False), source=path)
