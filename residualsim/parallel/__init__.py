"""The executor: persistent workers (local processes or Ray actors), each holding a state built
by a picklable factory and a shard of the items; restarts of lost workers.

Generic on purpose: it imports nothing of the physics, so the physics batches its own
rollouts on it (:func:`residualsim.sim.engine_workers`).
"""

from __future__ import annotations

from residualsim.parallel.backend import (BACKENDS, Backend, WorkerError,
                                          available_memory_bytes, current_backend,
                                          default_workers, parallel_backend, paused_gc,
                                          require_memory, require_time, DEFAULT_MAX_MINUTES,
                                          PROBE_COUNT)
from residualsim.parallel.workers import MAX_WORKERS, ShardedWorkers

__all__ = ["ShardedWorkers", "MAX_WORKERS", "WorkerError", "Backend", "BACKENDS", "parallel_backend",
           "current_backend", "default_workers", "available_memory_bytes", "require_memory",
           "require_time", "DEFAULT_MAX_MINUTES", "PROBE_COUNT", "paused_gc"]
