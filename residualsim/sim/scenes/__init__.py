"""Scenes: the simulated set-ups, each built from URDF in ``assets/``.

==================  =====================================================================
name                what
==================  =====================================================================
``cube``            ContactNets cube (3D free body) tossed onto a table at z = 0
``planar-ellipse``  MCube elliptic disc on planar joints, vertical arena, floor at y = 0
``planar-dice``     square PLA dice (49 g) in the same arena
==================  =====================================================================

Any other object comes as a scene file (``.toml``: a URDF plus ``kind``, ``substeps``; see
:mod:`~residualsim.sim.scenes.scene_file`) or a bare ``.urdf``: ``make_scene("elbow.toml")``
builds a :class:`~residualsim.sim.scenes.urdf_scene.FreeUrdfScene` (3D, rigid or
articulated) or a :class:`~residualsim.sim.scenes.planar_urdf.PlanarUrdfScene`.
"""

from __future__ import annotations

from residualsim.errors import SceneError
from residualsim.sim.scenes.base import ASSETS_DIR, EngineSettings, Scene
from residualsim.sim.scenes.cube import CubeScene
from residualsim.sim.scenes.params import (ENGINE_PARAMS, SOLVER_PARAMS, EngineParams,
                                           ObjectParams, ParamSpec, parse_params)
from residualsim.sim.scenes.planar import PlanarDiceScene, PlanarEllipseScene, PlanarScene
from residualsim.sim.scenes.scene_file import SceneSpec, is_scene_path, read_scene_file

__all__ = [
    "ASSETS_DIR", "SCENES", "make_scene", "Scene", "EngineSettings", "CubeScene",
    "PlanarScene", "PlanarEllipseScene", "PlanarDiceScene", "EngineParams", "ObjectParams",
    "ParamSpec", "ENGINE_PARAMS", "SOLVER_PARAMS", "parse_params", "SceneSpec",
    "read_scene_file", "is_scene_path",
    "scene_from_spec", "same_scene", "scene_reference",
]

SCENES: dict[str, type[Scene]] = {
    CubeScene.name: CubeScene,
    PlanarEllipseScene.name: PlanarEllipseScene,
    PlanarDiceScene.name: PlanarDiceScene,
}


def scene_from_spec(spec: SceneSpec, settings: EngineSettings | None = None) -> Scene:
    """The scene a scene file describes (free: 3D, rigid or articulated; planar)."""
    if spec.kind == "planar":
        from residualsim.sim.scenes.planar_urdf import PlanarUrdfScene

        return PlanarUrdfScene(spec, settings)
    from residualsim.sim.scenes.urdf_scene import FreeUrdfScene

    return FreeUrdfScene(spec, settings)


def make_scene(name: str | Scene, settings: EngineSettings | None = None) -> Scene:
    """A new (unbuilt) scene: a registry name, or the path of a scene file (``.toml``) or a
    ``.urdf``. SceneError naming the known scenes, or the file and its problem, otherwise.
    A Scene is handed back as is (with ``settings``: an unbuilt copy with them): resolve a
    ``--scene`` once, at the top of a command, and pass the object down."""
    if isinstance(name, Scene):
        return name if settings is None else name.unbuilt(settings)
    if name in SCENES:
        return SCENES[name](settings)
    if is_scene_path(name):
        return scene_from_spec(read_scene_file(name), settings)
    raise SceneError(f"unknown scene {name!r}; known scenes: {', '.join(SCENES)}, or the path "
                     "of a scene file (.toml) or a .urdf")


def scene_reference(scene: str | Scene) -> str:
    """The string that names a scene in files and summaries: a registry name, or the path
    of the scene file (or ``.urdf``) it was read from."""
    if isinstance(scene, Scene):
        source = getattr(getattr(scene, "spec", None), "source", None)
        return str(source) if source is not None else scene.name
    return str(scene)


def same_scene(a: str | Scene, b: str | Scene) -> bool:
    """Whether two ``--scene`` values name the same scene (a name, or the same file however
    its path is spelled)."""
    from pathlib import Path

    def key(scene: str | Scene) -> str:
        scene = scene_reference(scene)
        return str(Path(scene).resolve()) if is_scene_path(scene) else str(scene)

    return key(a) == key(b)
