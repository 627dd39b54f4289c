"""Worker pools whose workers each hold one PyBullet :class:`~residualsim.sim.engine.Engine`.

The executor (:class:`~residualsim.parallel.ShardedWorkers`) is generic: it runs a function
over items with whatever state a picklable factory builds. :class:`EngineFactory` is that
factory for the physics, and :func:`engine_workers` the pool every batch of rollouts uses::

    with engine_workers("cube", items, n_workers=2, settings=settings) as pool:
        results = pool.map(simulate_one, params)   # simulate_one(engine, item, params)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from residualsim.parallel import Backend, ShardedWorkers
from residualsim.sim.implausible import allow_implausible, implausible_allowed
from residualsim.sim.scenes import EngineSettings, Scene

__all__ = ["EngineFactory", "engine_workers"]


@dataclasses.dataclass(frozen=True)
class EngineFactory:
    """Builds ``Engine(scene, settings)`` in a worker (picklable: an unbuilt scene, or its
    name, and settings; a pickled scene arrives as its description, no file read again),
    under the ``--allow-implausible`` switch as it was where the factory was made (a spawned
    worker starts with it off, and an implausible URDF would be refused there)."""

    scene: str | Scene
    settings: EngineSettings | None = None
    allow_implausible: bool = dataclasses.field(default_factory=implausible_allowed)

    def __call__(self):
        from residualsim.sim.engine import Engine  # pybullet loads in the worker, on first use

        with allow_implausible(self.allow_implausible):
            return Engine(self.scene, settings=self.settings)


def engine_workers(scene: str | Scene, items: Sequence, n_workers: int = 1,
                   settings: EngineSettings | None = None, backend: Backend | None = None
                   ) -> ShardedWorkers:
    """A :class:`~residualsim.parallel.ShardedWorkers` pool over ``items`` whose workers each
    build one engine of ``scene`` (a resolved Scene, pickled to the workers as its
    description, or a name) with ``settings`` (default: the scene's)."""
    return ShardedWorkers(EngineFactory(scene, settings), items, n_workers, backend=backend)
