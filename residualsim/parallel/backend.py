"""Where worker pools run: the backend choice, the core count, and the worker error.

Backends (the transport that carries shards and payloads; chosen like scikit-learn's
joblib backends, by a context manager, so library calls keep their ``n_workers`` argument):

* ``"local"`` (default): worker processes on this machine (``multiprocessing``, spawn);
* ``"ray"``: Ray actors, on an existing cluster (``address="auto"`` or ``"HOST:PORT"``) or
  on a local Ray started on first use. Needs ``pip install residualsim[ray]``.

::

    with residualsim.parallel_backend("ray", address="auto"):
        calibrate("cube", data, ["lateral_friction"], "out", n_workers=32)
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from residualsim.errors import ParameterError, ResidualSimError

__all__ = ["WorkerError", "default_workers", "available_memory_bytes", "require_memory",
           "require_time", "DEFAULT_MAX_MINUTES", "PROBE_COUNT", "paused_gc",
           "Backend", "BACKENDS", "current_backend", "parallel_backend", "run_items", "ItemFunction", "StateFactory"]

#: ``function(state, item, payload)``: the work, run on each item of a worker's shard with the
#: state the worker holds (for the physics: its engine).
ItemFunction = Callable[[Any, Any, Any], Any]
#: A picklable callable with no arguments building what one worker holds; the result needs a
#: ``close()``.
StateFactory = Callable[[], Any]

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


def available_memory_bytes() -> int | None:
    """Memory this machine can still give (``MemAvailable`` of /proc/meminfo, else free
    physical pages), or None where neither is known."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def require_memory(need_bytes: int, what: Callable[[float], str], remedy: str) -> None:
    """ParameterError when ``need_bytes`` exceed the memory left (:func:`available_memory_bytes`;
    nothing is checked where that is unknown): ``what(GiB needed)``, the GiB available and
    ``remedy``, one line, instead of numpy's bare MemoryError later."""
    have = available_memory_bytes()
    if have is not None and need_bytes > have:
        raise ParameterError(f"{what(need_bytes / 2**30)}, more than the {have / 2**30:.3g} "
                             f"GiB available: {remedy}")


#: ``--max-minutes`` of the sampling commands: the estimated time a count is refused beyond.
DEFAULT_MAX_MINUTES = 60.0
#: Items (samples, particles) of the timed first measurement a time estimate rests on.
PROBE_COUNT = 2


def require_time(estimate_s: float, max_minutes: float | None, what: str, measured: str,
                 remedy: str) -> None:
    """ParameterError when ``estimate_s`` (from a short first measurement, ``measured``)
    exceeds ``max_minutes`` (None or 0: no limit): ``what`` would take about N min
    (``measured``), more than --max-minutes M: ``remedy``, or raise --max-minutes. The one
    rule of every sampling command's time bound (issue 67), as :func:`require_memory` is
    of its memory bound."""
    if max_minutes and estimate_s > 60.0 * max_minutes:
        raise ParameterError(f"{what} would take about {estimate_s / 60:.3g} min ({measured}), "
                             f"more than --max-minutes {max_minutes:g}: {remedy}, or raise "
                             "--max-minutes")


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block (as it was after it). For loops
    that allocate many short-lived containers (PyBullet's tuples) and keep some for a
    while: their survivors trigger collections of the oldest generation, each walking every
    object of the process (0.1-0.15 s with scikit-learn and torch loaded, 266 000
    objects), one every ~5 batched particle steps. Refcounting still frees everything
    without cycles; cycles wait for the first collection after the block. Let the block's
    garbage die inside it (return from a helper), or that collection walks it."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclasses.dataclass(frozen=True)
class Backend:
    """Where :class:`ShardedWorkers` run: ``name`` in :data:`BACKENDS`; ``address`` of a Ray
    cluster (``"auto"``, ``"HOST:PORT"`` or None: start a local Ray); ``max_restarts``
    replacements of one shard's worker within one :meth:`ShardedWorkers.map` call before
    giving up; ``task_timeout_s``: seconds a worker may take over its shard in one map call
    (counted from when its answer is awaited) before it is taken for hung, killed and
    replaced like a dead one (None, the default: wait for ever; a rollout of a toss takes
    milliseconds, a whole shard of a calibration step well under a minute on this
    project's sets)."""

    name: str = "local"
    address: str | None = None
    max_restarts: int = 3
    task_timeout_s: float | None = None

    def __post_init__(self) -> None:
        if self.name not in BACKENDS:
            raise ParameterError(f"unknown backend {self.name!r}; choose one of {BACKENDS}")
        if self.address is not None and self.name != "ray":
            raise ParameterError("an address is for the 'ray' backend only")
        if int(self.max_restarts) != self.max_restarts or self.max_restarts < 0:
            raise ParameterError(f"max_restarts must be an integer >= 0, got "
                                 f"{self.max_restarts!r}")
        if self.task_timeout_s is not None and not (
                isinstance(self.task_timeout_s, (int, float))
                and not isinstance(self.task_timeout_s, bool)
                and 0 < self.task_timeout_s < float("inf")):
            raise ParameterError(f"task_timeout_s must be a finite number of seconds > 0 or "
                                 f"None, got {self.task_timeout_s!r}")


_current = Backend()


def current_backend() -> Backend:
    """The backend new :class:`ShardedWorkers` use (see :func:`parallel_backend`)."""
    return _current


@contextlib.contextmanager
def parallel_backend(name: str = "local", address: str | None = None,
                     max_restarts: int = 3,
                     task_timeout_s: float | None = None) -> Iterator[Backend]:
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
    task_timeout_s : float, optional
        Seconds before a worker that has not answered is taken for hung and replaced (see
        :class:`Backend`); default None, no limit.
    """
    global _current
    backend = Backend(name, address, max_restarts, task_timeout_s)
    previous, _current = _current, backend
    try:
        yield backend
    finally:
        _current = previous


def run_items(state: Any, function: ItemFunction, items: Sequence, payload: Any) -> list:
    """``[function(state, item, payload) for item in items]``: what a worker does per call."""
    return [function(state, item, payload) for item in items]
