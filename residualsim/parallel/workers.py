"""The executor: persistent workers, each holding its own state and a shard of the items.

PyBullet clients are not thread-safe and building a world costs more than a whole toss, so
parallelism is processes: :class:`ShardedWorkers` starts ``n_workers`` workers once, each
builds its state once from a picklable factory (for the physics, one
:class:`~residualsim.sim.Engine`: see :func:`residualsim.sim.engine_workers`) and keeps a
contiguous shard of the items; every :meth:`ShardedWorkers.map` call then sends only a small
payload (engine parameters, policy weights) and gathers the per-item results in the original
order. Calibration likelihoods, training losses, predictions and benchmarks all run through
it. The executor knows nothing of what the work is: it imports nothing of the physics.

Results do not depend on the backend or the number of workers: each rollout resets the world
(:meth:`Engine.reset`), random streams are seeded per item, and results are gathered in item
order. A worker that dies (killed, out of memory, a lost node), or hangs past the backend's
``task_timeout_s`` (then it is killed), has its shard re-run by a fresh worker, up to
``max_restarts`` times per shard and call; the restarts are counted in
:attr:`ShardedWorkers.restarts`. An exception raised by the work itself is not retried (it
would fail again): it comes back as :class:`WorkerError` with the worker's traceback.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from residualsim.errors import ParameterError
from residualsim.parallel.backend import (Backend, ItemFunction, StateFactory, WorkerError,
                                          current_backend, run_items)
from residualsim.parallel.local import LocalTransport

__all__ = ["ShardedWorkers", "MAX_WORKERS"]

log = logging.getLogger(__name__)


#: Most workers one pool may start: 100 000 local processes took a 2-core machine to a load
#: of 182 before a timeout ended them.
MAX_WORKERS = 256


class ShardedWorkers:
    """Run a function over items in persistent workers, each holding the state ``factory()``.

    Parameters
    ----------
    factory : callable
        Picklable, no arguments: builds what each worker holds (something with a
        ``close()``), e.g. :class:`residualsim.sim.EngineFactory` for a PyBullet engine.
    items : sequence
        Picklable work items (e.g. recorded initial states); worker i keeps shard i.
    n_workers : int
        Number of workers; 1 on the local backend runs in this process (no start-up cost).
    backend : Backend, optional
        Default: the one set by :func:`parallel_backend` (``"local"`` outside any).
    """

    def __init__(self, factory: StateFactory, items: Sequence, n_workers: int = 1,
                 backend: Backend | None = None) -> None:
        if not callable(factory):
            raise TypeError(f"factory must be a picklable callable with no arguments, got "
                            f"{type(factory).__name__} (for an engine per worker use "
                            "residualsim.sim.engine_workers)")
        if int(n_workers) != n_workers or not 1 <= n_workers <= MAX_WORKERS:
            raise ParameterError(f"n_workers must be an integer from 1 to {MAX_WORKERS}, "
                                 f"got {n_workers}")
        self.backend = backend or current_backend()
        self.items = list(items)
        self.n_workers = min(int(n_workers), max(1, len(self.items)))
        bounds = np.linspace(0, len(self.items), self.n_workers + 1).round().astype(int)
        self.shards = [self.items[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        #: Dead workers replaced so far (each re-ran its whole shard of one map call).
        self.restarts = 0
        self._state: Any = None
        self._transport: Any = None
        if self.backend.name == "ray":
            from residualsim.parallel.ray_transport import RayTransport

            self._transport = RayTransport(factory, self.shards, self.backend)
        elif self.n_workers == 1:
            self._state = factory()
        else:
            self._transport = LocalTransport(factory, self.shards, self.backend.task_timeout_s)

    def map(self, function: ItemFunction, payload: Any = None) -> list:
        """``[function(state, item, payload) for item in items]``, computed by the workers.

        ``function`` must be a module-level (picklable) function. A worker that dies is
        replaced and its shard re-run (see the module docstring).
        """
        if self._state is not None:
            return run_items(self._state, function, self.items, payload)
        transport = self._transport
        if transport is None:
            raise WorkerError("the workers are closed")
        per_shard: list = [None] * len(self.shards)
        pending = list(range(len(self.shards)))
        for index in pending:
            transport.submit(index, function, payload)
        for attempt in range(self.backend.max_restarts + 1):
            dead: list[tuple[int, str]] = []
            errors: list[str] = []
            for index in pending:  # read every answer, so none is left for the next call
                status, value = transport.collect(index)
                if status == "ok":
                    per_shard[index] = value
                elif status == "error":
                    errors.append(value)
                else:
                    dead.append((index, value))
            if errors:
                for index, _ in dead:  # leave no dead worker behind for the next call
                    transport.start(index)
                raise WorkerError("a worker failed:\n" + errors[0])
            if not dead:
                break
            if attempt == self.backend.max_restarts:
                raise WorkerError(f"{dead[0][1]}; gave up after restarting it {attempt} "
                                  "times in one call")
            for index, reason in dead:
                self.restarts += 1
                log.warning("%s: restarting it and re-running its %d items (restart %d)",
                            reason, len(self.shards[index]), self.restarts)
                transport.start(index)
                transport.submit(index, function, payload)
            pending = [index for index, _ in dead]
        return [result for shard in per_shard for result in shard]

    def pids(self) -> list[int]:
        """Process ids of the workers (this process's for the in-process worker)."""
        if self._state is not None:
            return [os.getpid()]
        if self._transport is None:
            return []
        return self._transport.pids()

    def close(self) -> None:
        """Stop the workers (or close the in-process state)."""
        if self._state is not None:
            self._state.close()
            self._state = None
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    def __enter__(self) -> ShardedWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
