"""residualsim: residual contact learning for PyBullet.

The main classes are importable from here (loaded on first use, so ``import residualsim``
stays light): :class:`Engine`, :class:`Trajectory`, :class:`PlanarImpacts`,
:class:`EngineParams`, :func:`make_scene`, :func:`simulate_trajectories`,
:func:`load_predictions`, :func:`score_trajectories`, :func:`parallel_backend`, the planner
API :class:`StochasticSimulator` and :class:`GaussianMixtureBelief`.

Importing the package registers its gymnasium environments (``residualsim/CubeToss-v0``,
``residualsim/ArmLoop-v0``; see :mod:`residualsim.envs`), without importing them.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "Engine": "residualsim.engine",
    "ContactEvent": "residualsim.engine",
    "Trajectory": "residualsim.data",
    "PlanarImpacts": "residualsim.data",
    "EngineParams": "residualsim.scenes",
    "EngineSettings": "residualsim.scenes",
    "make_scene": "residualsim.scenes",
    "simulate_trajectories": "residualsim.rollout",
    "TrajectoryPredictions": "residualsim.predictions",
    "ImpactPredictions": "residualsim.predictions",
    "load_predictions": "residualsim.predictions",
    "save_predictions": "residualsim.predictions",
    "score_trajectories": "residualsim.metrics",
    "score_impacts": "residualsim.metrics",
    "ResidualSimError": "residualsim.errors",
    "parallel_backend": "residualsim.workers",
    "StochasticSimulator": "residualsim.simulator",
    "SampledRollouts": "residualsim.simulator",
    "toss_state": "residualsim.simulator",
    "GaussianMixtureBelief": "residualsim.belief",
    "propagate_belief": "residualsim.belief",
}

__all__ = ["__version__", *_EXPORTS]


def _register_environments() -> None:
    try:
        from gymnasium.envs.registration import register, registry
    except ImportError:  # gymnasium is a dependency, but the physics work without it
        return
    for env_id, entry_point in (("residualsim/CubeToss-v0", "residualsim.envs:CubeTossEnv"),
                                ("residualsim/ArmLoop-v0", "residualsim.envs:ArmLoopEnv")):
        if env_id not in registry:
            register(id=env_id, entry_point=entry_point)


_register_environments()


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'residualsim' has no attribute {name!r}")
