"""The Ray transport of :class:`~residualsim.parallel.workers.ShardedWorkers`: one actor per shard.

Each actor builds its state once (``factory()``) and keeps its shard of the items, exactly like a local worker
process; a map call sends the function and the payload to every actor. Actors are created
without Ray's automatic restarts (``max_restarts=0``): a dead actor surfaces as
``RayActorError`` here and :class:`ShardedWorkers` replaces it (Ray schedules the new actor
wherever the cluster has a free CPU) and re-runs its shard, counting the restart.

Ray is imported only when this backend is chosen (``pip install residualsim[ray]``). If no
Ray is initialised in this process, :func:`ensure_ray` joins ``address`` or starts a local
Ray with one CPU per core (at least as many as workers asked for, so actors never wait for
each other).
"""

from __future__ import annotations

import logging
import os
import traceback
import uuid
from typing import Any

from residualsim.errors import ParameterError
from residualsim.parallel.backend import default_workers, run_items

log = logging.getLogger(__name__)

#: Ray namespace of residualsim's actors (tests and tools find the workers by it).
NAMESPACE = "residualsim"


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ParameterError("the 'ray' backend needs Ray: pip install 'residualsim[ray]'"
                             ) from None
    return ray


def ensure_ray(address: str | None, n_workers: int):
    """The ray module, initialised (joined at ``address`` or started locally)."""
    ray = _import_ray()
    if not ray.is_initialized():
        options: dict[str, Any] = dict(namespace=NAMESPACE, log_to_driver=False,
                                       include_dashboard=False, configure_logging=False)
        if address is None:
            options["num_cpus"] = max(n_workers, default_workers())
        else:
            options["address"] = address
        log.info("starting Ray (%s)", address or "local")
        ray.init(**options)
    return ray


class _ShardActor:
    """Body of the Ray actor: a state built by the factory and a shard of the items."""

    def __init__(self, factory, items: list) -> None:
        self.state = factory()
        self.items = items

    def run(self, function, payload) -> tuple[str, Any]:
        try:
            return "ok", run_items(self.state, function, self.items, payload)
        except BaseException:  # the parent decides; the traceback travels as text
            return "error", traceback.format_exc()

    def pid(self) -> int:
        return os.getpid()


class RayTransport:
    """One Ray actor per shard (see the module docstring)."""

    def __init__(self, factory, shards: list[list], backend) -> None:
        self.ray = ensure_ray(backend.address, len(shards))
        self.factory, self.shards = factory, shards
        self.task_timeout_s = backend.task_timeout_s
        self._actor_class = self.ray.remote(num_cpus=1, max_restarts=0)(_ShardActor)
        self._actors: list = [None] * len(shards)
        self._pending: list = [None] * len(shards)
        self._shard_refs = [self.ray.put(shard) for shard in shards]
        for index in range(len(shards)):
            self.start(index)

    def start(self, index: int) -> None:
        """(Re)start the actor of shard ``index`` (named uniquely, so tools can find it)."""
        self._kill(index)
        self._actors[index] = self._actor_class.options(
            name=f"residualsim-worker-{uuid.uuid4().hex[:12]}", namespace=NAMESPACE).remote(
                self.factory, self._shard_refs[index])

    def submit(self, index: int, function, payload) -> None:
        self._pending[index] = self._actors[index].run.remote(function, payload)

    def collect(self, index: int) -> tuple[str, Any]:
        from ray.exceptions import GetTimeoutError, RayActorError, RayError, WorkerCrashedError

        try:
            return self.ray.get(self._pending[index], timeout=self.task_timeout_s)
        except GetTimeoutError:
            self._kill(index)  # hung: replaced like a dead actor
            return "died", (f"Ray worker {index} did not answer within the task timeout of "
                            f"{self.task_timeout_s:g} s")
        except (RayActorError, WorkerCrashedError) as exc:
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            return "died", f"Ray worker {index} died ({type(exc).__name__}: {first_line})"
        except RayError as exc:  # e.g. a function or payload the actor cannot unpickle
            return "error", f"Ray worker {index}: {type(exc).__name__}: {exc}"
        finally:
            self._pending[index] = None

    def pids(self) -> list[int]:
        return self.ray.get([actor.pid.remote() for actor in self._actors])

    def _kill(self, index: int) -> None:
        if self._actors[index] is not None:
            try:
                self.ray.kill(self._actors[index], no_restart=True)
            except Exception:  # already dead: nothing to stop
                pass
            self._actors[index] = None

    def close(self) -> None:
        for index in range(len(self.shards)):
            self._kill(index)
