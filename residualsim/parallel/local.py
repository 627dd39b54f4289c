"""The local transport of :class:`~residualsim.parallel.workers.ShardedWorkers`: one spawned
process per shard, talking over a pipe.

Each process builds its state once (``factory()``, e.g. a PyBullet engine) and keeps its
shard of the items; a map call sends the function and the payload, and the process answers
``("ok", results)`` or ``("error", traceback)``. A process that dies is reported as
``("died", reason)`` so the pool can restart it.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import traceback
from typing import Any

from residualsim.parallel.backend import ItemFunction, StateFactory, run_items

__all__ = ["LocalTransport"]


def _worker_main(connection, factory: StateFactory, items: list) -> None:
    state = factory()
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
            connection.send(("ok", run_items(state, function, items, payload)))
        except BaseException:  # report anything, the parent decides
            connection.send(("error", traceback.format_exc()))
    state.close()
    connection.close()


class LocalTransport:
    """One spawned process per shard."""

    def __init__(self, factory: StateFactory, shards: list[list]) -> None:
        self.factory, self.shards = factory, shards
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
            target=_worker_main, args=(child, self.factory, self.shards[index]),
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
