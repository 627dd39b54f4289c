"""The executor: persistent workers, each with its own PyBullet engine and a shard of the data.

PyBullet clients are not thread-safe and building a world costs more than a whole toss, so
parallelism is processes: :class:`ShardedWorkers` starts ``n_workers`` workers once, each
builds one :class:`~residualsim.engine.Engine` and keeps a contiguous shard of the items;
every :meth:`ShardedWorkers.map` call then sends only a small payload (engine parameters,
policy weights) and gathers the per-item results in the original order. Calibration
likelihoods, training losses, predictions and benchmarks all run through it.

Backends (the transport that carries shards and payloads; chosen like scikit-learn's
joblib backends, by a context manager, so library calls keep their ``n_workers`` argument):

* ``"local"`` (default): worker processes on this machine (``multiprocessing``, spawn);
* ``"ray"``: Ray actors, on an existing cluster (``address="auto"`` or ``"HOST:PORT"``) or
  on a local Ray started on first use. Needs ``pip install residualsim[ray]``.

::

    with residualsim.parallel_backend("ray", address="auto"):
        calibrate("cube", data, ["lateral_friction"], "out", n_workers=32)

Results do not depend on the backend or the number of workers: each rollout resets the world
(:meth:`Engine.reset`), random streams are seeded per item, and results are gathered in item
order. A worker that dies (killed, out of memory, a lost node) has its shard re-run by a
fresh worker, up to ``max_restarts`` times per shard and call; the restarts are counted in
:attr:`ShardedWorkers.restarts`. An exception raised by the work itself is not retried (it
would fail again): it comes back as :class:`WorkerError` with the worker's traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import multiprocessing as mp
import os
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import ParameterError, ResidualSimError

if TYPE_CHECKING:  # the engine (pybullet) loads with the first pool, not with this module
    from .engine import Engine
    from .scenes import EngineSettings

__all__ = ["ShardedWorkers", "WorkerError", "default_workers", "Backend", "parallel_backend",
           "current_backend", "BACKENDS"]

log = logging.getLogger(__name__)

ItemFunction = Callable[["Engine", Any, Any], Any]

#: The backends :func:`parallel_backend` accepts.
BACKENDS = ("local", "ray")


class WorkerError(ResidualSimError, RuntimeError):
    """A worker failed; the message carries its traceback (or why it could not be restarted)."""


def default_workers() -> int:
    """Number of usable CPU cores."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


@dataclasses.dataclass(frozen=True)
class Backend:
    """Where :class:`ShardedWorkers` run: ``name`` in :data:`BACKENDS`; ``address`` of a Ray
    cluster (``"auto"``, ``"HOST:PORT"`` or None: start a local Ray); ``max_restarts``
    replacements of one shard's worker within one :meth:`ShardedWorkers.map` call before
    giving up."""

    name: str = "local"
    address: str | None = None
    max_restarts: int = 3

    def __post_init__(self) -> None:
        if self.name not in BACKENDS:
            raise ParameterError(f"unknown backend {self.name!r}; choose one of {BACKENDS}")
        if self.address is not None and self.name != "ray":
            raise ParameterError("an address is for the 'ray' backend only")
        if int(self.max_restarts) != self.max_restarts or self.max_restarts < 0:
            raise ParameterError(f"max_restarts must be an integer >= 0, got "
                                 f"{self.max_restarts!r}")


_current = Backend()


def current_backend() -> Backend:
    """The backend new :class:`ShardedWorkers` use (see :func:`parallel_backend`)."""
    return _current


@contextlib.contextmanager
def parallel_backend(name: str = "local", address: str | None = None,
                     max_restarts: int = 3) -> Iterator[Backend]:
    """Run the worker pools created inside the ``with`` block on backend ``name``.

    Parameters
    ----------
    name : {"local", "ray"}
        ``"local"``: processes on this machine; ``"ray"``: Ray actors.
    address : str, optional
        Ray cluster to join (``"auto"`` or ``"HOST:PORT"``); default: the Ray already
        initialised in this process, else a new local one.
    max_restarts : int
        Replacements of one shard's worker within one map call before :class:`WorkerError`.
    """
    global _current
    backend = Backend(name, address, max_restarts)
    previous, _current = _current, backend
    try:
        yield backend
    finally:
        _current = previous


# --- the local transport: spawned processes talking over pipes -------------------------------
def _run_items(engine: Engine, function: ItemFunction, items: Sequence, payload: Any) -> list:
    return [function(engine, item, payload) for item in items]


def make_worker_engine(scene: str | Callable[[], Any], settings: EngineSettings | None) -> Any:
    """What a worker holds: ``Engine(scene, settings)`` for a scene name, or ``scene()`` for a
    picklable factory (e.g. a ``functools.partial`` building an arm-loop replay); either
    has a ``close()``."""
    if callable(scene):
        return scene()
    from .engine import Engine

    return Engine(scene, settings=settings)


def _worker_main(connection, scene, settings: EngineSettings | None, items: list) -> None:
    engine = make_worker_engine(scene, settings)
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):  # the parent is gone
            break
        except BaseException:  # a function or payload this process cannot unpickle
            connection.send(("error", traceback.format_exc()))
            continue
        if message is None:
            break
        function, payload = message
        try:
            connection.send(("ok", _run_items(engine, function, items, payload)))
        except BaseException:  # report anything, the parent decides
            connection.send(("error", traceback.format_exc()))
    engine.close()
    connection.close()


class _LocalTransport:
    """One spawned process per shard."""

    def __init__(self, scene: str, settings: EngineSettings | None,
                 shards: list[list]) -> None:
        self.scene, self.settings, self.shards = scene, settings, shards
        self._context = mp.get_context("spawn")
        self._processes: list = [None] * len(shards)
        self._connections: list = [None] * len(shards)
        self._lost = [False] * len(shards)
        for index in range(len(shards)):
            self.start(index)

    def start(self, index: int) -> None:
        """(Re)start worker ``index`` with its shard."""
        self._stop(index)
        parent, child = self._context.Pipe()
        process = self._context.Process(
            target=_worker_main, args=(child, self.scene, self.settings, self.shards[index]),
            daemon=True)
        process.start()
        child.close()
        self._processes[index], self._connections[index] = process, parent
        self._lost[index] = False

    def submit(self, index: int, function: ItemFunction, payload: Any) -> None:
        try:
            self._connections[index].send((function, payload))
        except (BrokenPipeError, ConnectionResetError, EOFError):
            self._lost[index] = True

    def collect(self, index: int) -> tuple[str, Any]:
        """("ok", results), ("error", traceback) or ("died", reason)."""
        if self._lost[index]:
            return "died", f"worker {index} (pid {self._processes[index].pid}) is gone"
        try:
            return self._connections[index].recv()
        except (EOFError, OSError):
            process = self._processes[index]
            process.join(timeout=1)
            return "died", f"worker {index} (pid {process.pid}) exited with {process.exitcode}"

    def pids(self) -> list[int]:
        return [process.pid for process in self._processes]

    def _stop(self, index: int) -> None:
        connection, process = self._connections[index], self._processes[index]
        if connection is not None:
            with contextlib.suppress(OSError):
                connection.send(None)
            connection.close()
        if process is not None:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()
        self._connections[index] = self._processes[index] = None

    def close(self) -> None:
        for index in range(len(self.shards)):
            self._stop(index)


class ShardedWorkers:
    """Run a function over items in persistent workers, one engine each.

    Parameters
    ----------
    scene : str or callable
        Scene name each worker builds an :class:`~residualsim.engine.Engine` for, or a
        picklable factory whose result the workers hold instead (see
        :func:`make_worker_engine`).
    items : sequence
        Picklable work items (e.g. recorded initial states); worker i keeps shard i.
    n_workers : int
        Number of workers; 1 on the local backend runs in this process (no start-up cost).
    settings : EngineSettings, optional
        Solver settings for every worker's engine.
    backend : Backend, optional
        Default: the one set by :func:`parallel_backend` (``"local"`` outside any).
    """

    def __init__(self, scene: str | Callable[[], Any], items: Sequence, n_workers: int = 1,
                 settings: EngineSettings | None = None, backend: Backend | None = None
                 ) -> None:
        if int(n_workers) != n_workers or n_workers < 1:
            raise ValueError(f"n_workers must be an integer >= 1, got {n_workers}")
        self.backend = backend or current_backend()
        self.items = list(items)
        self.n_workers = min(int(n_workers), max(1, len(self.items)))
        bounds = np.linspace(0, len(self.items), self.n_workers + 1).round().astype(int)
        self.shards = [self.items[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        #: Dead workers replaced so far (each re-ran its whole shard of one map call).
        self.restarts = 0
        self._engine: Engine | None = None
        self._transport: Any = None
        if self.backend.name == "ray":
            from ._ray import RayTransport

            self._transport = RayTransport(scene, settings, self.shards, self.backend)
        elif self.n_workers == 1:
            self._engine = make_worker_engine(scene, settings)
        else:
            self._transport = _LocalTransport(scene, settings, self.shards)

    def map(self, function: ItemFunction, payload: Any = None) -> list:
        """``[function(engine, item, payload) for item in items]``, computed by the workers.

        ``function`` must be a module-level (picklable) function. A worker that dies is
        replaced and its shard re-run (see the module docstring).
        """
        if self._engine is not None:
            return _run_items(self._engine, function, self.items, payload)
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
        if self._engine is not None:
            return [os.getpid()]
        if self._transport is None:
            return []
        return self._transport.pids()

    def close(self) -> None:
        """Stop the workers (or the in-process engine)."""
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    def __enter__(self) -> ShardedWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
