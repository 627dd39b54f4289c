"""The local transport of :class:`~residualsim.parallel.workers.ShardedWorkers`: one spawned
process per shard, talking over a pipe.

Each process builds its state once (``factory()``, e.g. a PyBullet engine) and keeps its
shard of the items; a map call sends the function and the payload, and the process answers
``("ok", results)`` or ``("error", traceback)``. A process that dies, or that has not
answered within the task timeout (then it is killed), is reported as ``("died", reason)``
so the pool can restart it.

Workers ignore SIGINT (Ctrl-C reaches the whole process group): the parent alone handles
the interruption and stops them, so one Ctrl-C prints one line, not a traceback per worker.
They are started with SIGINT already ignored, so not even their start-up is interrupted.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing as mp
import signal
import sys
import threading
import traceback
from typing import Any

from residualsim.parallel.backend import ItemFunction, StateFactory, run_items

__all__ = ["LocalTransport"]


def _freeze_libraries(loaded: int) -> int:
    """Once a task has imported libraries (``sys.modules`` grew past ``loaded``), collect and
    then freeze every object the process holds (:func:`gc.freeze`): a full collection
    walks only what was made since. A worker holds ~266 000 objects once torch and
    scikit-learn are in (modules, functions, classes that live as long as it does); a full
    collection of them took 0.14-0.17 s, stalling one worker of a belief step about once
    in 36 steps (train/README.md §10). Returns the module count now."""
    if len(sys.modules) > loaded:
        gc.collect()  # the tasks' cyclic garbage goes first: frozen, it would never go
        gc.freeze()
    return len(sys.modules)


def _worker_main(connection, factory: StateFactory, items: list) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    state = factory()
    loaded = _freeze_libraries(0)
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):  # the parent is gone
            break
        except BaseException:  # a function or payload this process cannot unpickle
            if not _answer(connection, ("error", traceback.format_exc())):
                break
            continue
        if message is None:
            break
        function, payload = message
        try:
            reply = ("ok", run_items(state, function, items, payload))
        except BaseException:  # report anything, the parent decides
            reply = ("error", traceback.format_exc())
        if not _answer(connection, reply):
            break
        loaded = _freeze_libraries(loaded)
    state.close()
    connection.close()


def _answer(connection, reply: tuple) -> bool:
    """Send ``reply``; False when the parent is gone (stopped or interrupted: the worker
    then ends quietly). A reply that cannot be pickled is reported as an error."""
    try:
        connection.send(reply)
    except OSError:  # BrokenPipeError, ConnectionResetError: nobody listens any more
        return False
    except BaseException:
        try:
            connection.send(("error", traceback.format_exc()))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def _sigint_ignored():
    """SIGINT ignored in this process for the ``with`` block (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class LocalTransport:
    """One spawned process per shard."""

    def __init__(self, factory: StateFactory, shards: list[list],
                 task_timeout_s: float | None = None) -> None:
        self.factory, self.shards = factory, shards
        self.task_timeout_s = task_timeout_s
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
        with _sigint_ignored():  # inherited: the child starts up deaf to Ctrl-C
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
            timeout = self.task_timeout_s
            if timeout is not None and not self._connections[index].poll(timeout):
                process = self._processes[index]
                process.kill()  # hung: replaced like a dead worker
                process.join(timeout=5)
                self._lost[index] = True
                return "died", (f"worker {index} (pid {process.pid}) did not answer within "
                                f"the task timeout of {timeout:g} s")
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
