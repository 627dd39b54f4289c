"""Persistent worker processes, each with its own PyBullet engine and a shard of the data.

PyBullet clients are not thread-safe and building a world costs more than a whole toss, so
parallelism is processes: :class:`ShardedWorkers` starts ``n_workers`` processes once, each
builds one :class:`~residualsim.engine.Engine` and keeps a contiguous shard of the items;
every :meth:`ShardedWorkers.map` call then sends only a small payload (e.g. engine
parameters) and gathers the per-item results in the original order. Because each rollout
resets the world (see :meth:`Engine.reset`), results do not depend on the number of workers.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .engine import Engine
from .errors import ResidualSimError
from .scenes import EngineSettings

__all__ = ["ShardedWorkers", "WorkerError", "default_workers"]

ItemFunction = Callable[[Engine, Any, Any], Any]


class WorkerError(ResidualSimError, RuntimeError):
    """A worker process failed; the message carries its traceback."""


def default_workers() -> int:
    """Number of usable CPU cores."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _run_items(engine: Engine, function: ItemFunction, items: Sequence, payload: Any) -> list:
    return [function(engine, item, payload) for item in items]


def _worker_main(connection, scene: str, settings: EngineSettings | None, items: list) -> None:
    engine = Engine(scene, settings=settings)
    while True:
        message = connection.recv()
        if message is None:
            break
        function, payload = message
        try:
            connection.send(("ok", _run_items(engine, function, items, payload)))
        except BaseException:  # report anything, the parent decides
            connection.send(("error", traceback.format_exc()))
    engine.close()
    connection.close()


class ShardedWorkers:
    """Run a function over items in persistent worker processes, one engine each.

    Parameters
    ----------
    scene : str
        Scene name each worker builds.
    items : sequence
        Picklable work items (e.g. recorded initial states); worker i keeps shard i.
    n_workers : int
        Number of processes; 1 runs in this process (no start-up cost).
    settings : EngineSettings, optional
        Solver settings for every worker's engine.
    """

    def __init__(self, scene: str, items: Sequence, n_workers: int = 1,
                 settings: EngineSettings | None = None) -> None:
        if int(n_workers) != n_workers or n_workers < 1:
            raise ValueError(f"n_workers must be an integer >= 1, got {n_workers}")
        self.items = list(items)
        self.n_workers = min(int(n_workers), max(1, len(self.items)))
        bounds = np.linspace(0, len(self.items), self.n_workers + 1).round().astype(int)
        self.shards = [self.items[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        self._engine: Engine | None = None
        self._processes: list[mp.Process] = []
        self._connections: list = []
        if self.n_workers == 1:
            self._engine = Engine(scene, settings=settings)
            return
        context = mp.get_context("spawn")
        for shard in self.shards:
            parent, child = context.Pipe()
            process = context.Process(target=_worker_main, args=(child, scene, settings, shard),
                                      daemon=True)
            process.start()
            child.close()
            self._processes.append(process)
            self._connections.append(parent)

    def map(self, function: ItemFunction, payload: Any = None) -> list:
        """``[function(engine, item, payload) for item in items]``, computed by the workers.

        ``function`` must be a module-level (picklable) function.
        """
        if self._engine is not None:
            return _run_items(self._engine, function, self.items, payload)
        if not self._connections:
            raise WorkerError("the workers are closed")
        for connection in self._connections:
            connection.send((function, payload))
        results: list = []
        failures: list[str] = []
        for index, connection in enumerate(self._connections):
            try:
                status, value = connection.recv()
            except (EOFError, OSError):
                status, value = "error", f"worker {index} exited unexpectedly"
            if status == "ok":
                results.extend(value)
            else:
                failures.append(value)
        if failures:
            raise WorkerError("a worker failed:\n" + failures[0])
        return results

    def close(self) -> None:
        """Stop the worker processes (or the in-process engine)."""
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        for connection in self._connections:
            try:
                connection.send(None)
                connection.close()
            except OSError:
                pass
        for process in self._processes:
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()
        self._connections, self._processes = [], []

    def __enter__(self) -> ShardedWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
