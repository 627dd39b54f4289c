"""``--scene`` resolved once per command: the CLI reads the scene file (and parses its URDF)
a single time and every stage takes the object (issue 66)."""

from __future__ import annotations

import argparse
import contextlib
import os

from residualsim.errors import ResidualSimError

__all__ = ["resolve_scene", "scene_argument"]


def resolve_scene(args: argparse.Namespace) -> None:
    """Resolve ``--scene`` once (its file read, its URDF parsed) into ``args.scene_object``,
    which the commands hand down (:func:`scene_argument`); None for
    no ``--scene``, ``arm-loop`` and values a command refuses itself, in its own words."""
    scene, args.scene_object = getattr(args, "scene", None), None
    if isinstance(scene, str):
        from residualsim.sim.scenes import SCENES, is_scene_path, make_scene

        if scene in SCENES or (is_scene_path(scene) and os.path.isfile(scene)):
            with contextlib.suppress(ResidualSimError):  # refused later, by the command
                args.scene_object = make_scene(scene)


def scene_argument(args: argparse.Namespace):
    """``--scene`` as the command hands it down: the Scene the CLI resolved once, or the
    value as given where it resolved to none (``arm-loop``, an error the command words)."""
    resolved = getattr(args, "scene_object", None)
    return resolved if resolved is not None else getattr(args, "scene", None)
