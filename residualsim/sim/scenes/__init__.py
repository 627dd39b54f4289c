"""Scenes: the simulated set-ups, each built from URDF in ``assets/``.

==================  =====================================================================
name                what
==================  =====================================================================
``cube``            ContactNets cube (3D free body) tossed onto a table at z = 0
``planar-ellipse``  MCube elliptic disc on planar joints, vertical arena, floor at y = 0
``planar-dice``     square PLA dice (49 g) in the same arena
==================  =====================================================================
"""

from __future__ import annotations

from residualsim.errors import SceneError
from residualsim.sim.scenes.base import ASSETS_DIR, EngineSettings, Scene
from residualsim.sim.scenes.cube import CubeScene
from residualsim.sim.scenes.params import ENGINE_PARAMS, EngineParams, ParamSpec, parse_params
from residualsim.sim.scenes.planar import PlanarDiceScene, PlanarEllipseScene, PlanarScene

__all__ = [
    "ASSETS_DIR", "SCENES", "make_scene", "Scene", "EngineSettings", "CubeScene",
    "PlanarScene", "PlanarEllipseScene", "PlanarDiceScene", "EngineParams", "ParamSpec",
    "ENGINE_PARAMS", "parse_params",
]

SCENES: dict[str, type[Scene]] = {
    CubeScene.name: CubeScene,
    PlanarEllipseScene.name: PlanarEllipseScene,
    PlanarDiceScene.name: PlanarDiceScene,
}


def make_scene(name: str | Scene, settings: EngineSettings | None = None) -> Scene:
    """A new (unbuilt) scene by registry name; SceneError naming the known scenes otherwise."""
    if isinstance(name, Scene):
        return name
    try:
        cls = SCENES[name]
    except KeyError:
        raise SceneError(f"unknown scene {name!r}; known scenes: {', '.join(SCENES)}") from None
    return cls(settings)
