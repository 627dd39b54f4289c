"""The executor backends: same results everywhere, dead workers replaced, bad settings refused.

Every configuration — local with 1 worker (in-process), local with 2 worker processes, Ray
with 2 actors — must give bit-identical simulations and the same trained weights. A worker
that dies (``os._exit`` in the work, or SIGKILL from outside during training) is replaced and
its shard re-run without changing the result; an exception in the work is not retried.

The Ray tests share one local Ray (the fixture ``local_ray``, 2 CPUs, per module) and skip only
when Ray is not installed. Ray workers cannot import this module by name (pytest imports it
as ``test_executors`` from ``tests/``, which is not on the workers' path), so the ``backend``
fixture registers it with Ray's cloudpickle to ship the item functions below by value; the
local backend pickles them by reference (spawned children inherit ``sys.path``).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from residualsim.cli import main
from residualsim.data import load_trajectories
from residualsim.errors import ParameterError
from residualsim.sim.rollout import recording_settings, simulate_trajectories, simulation_items
from residualsim.parallel import Backend, WorkerError, current_backend, parallel_backend
from residualsim.sim.pool import engine_workers

BUNDLED = Path(__file__).resolve().parents[1] / "data" / "samples" / "cube-synthetic"
#: Training settings: four batches of 8, so the checkpoint after the first leaves three to kill
#: a worker in. (residualsim.residual.train is imported where used: it loads torch, and the workers of
#: the fault tests import this module.)
TRAINING = dict(budget=32, batch_size=8, validate_every=8, seed=0)
NAMESPACE = "residualsim"  # residualsim.parallel.ray_transport.NAMESPACE (not imported: it needs Ray)
ACTOR_PREFIX = "residualsim-worker-"
ITEMS = list(range(6))  # 2 workers: shard 0 = items 0-2, shard 1 = items 3-5
TARGET = 4  # the item whose worker dies or fails (shard 1)


# --- item functions (module level: workers receive them pickled) ------------------------------
def _square(engine, item, payload):
    """(item, item², pid of the worker that computed it)."""
    return item, item * item, os.getpid()


def _exit_once(engine, item, payload):
    """Kill the worker at item ``target`` while the flag file exists (deleting it first)."""
    flag, target = payload
    if item == target and os.path.exists(flag):
        os.remove(flag)
        os._exit(3)
    return _square(engine, item, payload)


def _exit_always(engine, item, target):
    """Kill the worker at item ``target``, every time."""
    if item == target:
        os._exit(4)
    return _square(engine, item, target)


def _raise_at(engine, item, target):
    if item == target:
        raise ValueError(f"item {item} is refused by the test")
    return item, target


def _explode(text):
    raise ValueError(text)


class Unloadable:
    """A payload that pickles but raises when a worker unpickles it."""

    def __reduce__(self):
        return _explode, ("this payload cannot be unpickled",)


def _expected(items=ITEMS) -> list[tuple[int, int]]:
    return [(i, i * i) for i in items]


# --- fixtures ---------------------------------------------------------------------------------
@pytest.fixture(params=["local", "ray"])
def backend(request) -> str:
    """A backend name; for "ray", the session's local Ray, able to unpickle this module."""
    if request.param == "ray":
        ray = request.getfixturevalue("local_ray")
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return request.param


@pytest.fixture(scope="module")
def tosses() -> dict:
    return load_trajectories(BUNDLED)


def _simulate(tosses: dict, name: str, n_workers: int) -> tuple[dict, list[int], set[int]]:
    """simulate_trajectories on a pool of the given backend: (results, the pool's pids, the
    pids of this process's multiprocessing children meanwhile)."""
    settings = recording_settings("cube", tosses)
    with parallel_backend(name), \
            engine_workers("cube", simulation_items("cube", tosses), n_workers,
                           settings) as pool:
        assert pool.backend.name == name
        results = simulate_trajectories("cube", tosses, workers=pool)
        return results, pool.pids(), {p.pid for p in mp.active_children()}


@pytest.fixture(scope="module")
def simulated_in_process(tosses) -> dict:
    results, pids, _ = _simulate(tosses, "local", 1)
    assert pids == [os.getpid()]
    return results


def _train(out: Path, name: str, n_workers: int) -> dict:
    from residualsim.residual.train import TrainingConfig, run_training

    with parallel_backend(name):
        return run_training("cube", BUNDLED, out, config=TrainingConfig(**TRAINING),
                            n_workers=n_workers, substeps=1, max_trajectories=3)


def _losses(out: Path) -> tuple[np.ndarray, np.ndarray]:
    with np.load(out / "checkpoint.npz") as archive:
        return archive["candidates"], archive["losses"]


@pytest.fixture(scope="module")
def local_runs(tmp_path_factory) -> dict[int, tuple[Path, dict]]:
    """Training (budget 32) on the local backend with 1 and 2 workers: n -> (out, figures)."""
    runs = {}
    for n_workers in (1, 2):
        out = tmp_path_factory.mktemp(f"local{n_workers}") / "model"
        runs[n_workers] = out, _train(out, "local", n_workers)
    return runs


@pytest.fixture(scope="module")
def ray_run(local_ray, tmp_path_factory) -> tuple[Path, dict]:
    """The same training on 2 Ray actors."""
    out = tmp_path_factory.mktemp("ray2") / "model"
    return out, _train(out, "ray", 2)


# --- 1. identical results on every backend ----------------------------------------------------
def test_two_local_workers_simulate_bit_identically(tosses, simulated_in_process):
    results, pids, children = _simulate(tosses, "local", 2)
    assert len(set(pids)) == 2 and set(pids) <= children  # two processes of ours
    _assert_same_simulations(results, simulated_in_process, tosses)


def test_ray_workers_simulate_bit_identically(tosses, simulated_in_process, local_ray):
    results, pids, children = _simulate(tosses, "ray", 2)
    assert len(set(pids)) == 2 and os.getpid() not in pids
    assert not set(pids) & children  # Ray's worker processes, not ours
    _assert_same_simulations(results, simulated_in_process, tosses)


def _assert_same_simulations(results: dict, reference: dict, tosses: dict) -> None:
    assert list(results) == list(reference) == list(tosses)
    assert len(results) == 8
    for traj_id, expected in reference.items():
        got = results[traj_id]
        assert got.states.shape == (tosses[traj_id].n_samples, expected.states.shape[1])
        np.testing.assert_array_equal(got.states, expected.states)
        np.testing.assert_array_equal(got.positions_m, expected.positions_m)
        np.testing.assert_array_equal(got.quat_wxyz, expected.quat_wxyz)
        assert got.n_events == expected.n_events
    assert sum(r.n_events for r in results.values()) > 0  # the tosses do hit the ground


def _assert_same_training(run: tuple[Path, dict], reference: tuple[Path, dict],
                          resumed: bool = False) -> None:
    (out, figures), (ref_out, ref_figures) = run, reference
    # event counts cover this session's rollouts only: fewer after a resume
    for key in ("params_sha256", "best_loss", "validation_rmse_m", "chosen_evaluation",
                "evaluations", *(() if resumed else ("events",))):
        assert figures[key] == ref_figures[key], key
    candidates, losses = _losses(out)
    ref_candidates, ref_losses = _losses(ref_out)
    assert losses.shape == (32,)
    np.testing.assert_array_equal(losses, ref_losses)
    np.testing.assert_array_equal(candidates, ref_candidates)


def test_one_and_two_local_workers_train_the_same_weights(local_runs):
    (_, one), (_, two) = local_runs[1], local_runs[2]
    assert (one["backend"], one["workers"], two["backend"], two["workers"]) == (
        "local", 1, "local", 2)
    assert one["worker_restarts"] == two["worker_restarts"] == 0
    assert one["evaluations"] == 32 and len(one["params_sha256"]) == 64
    _assert_same_training(local_runs[2], local_runs[1])


def test_ray_workers_train_the_same_weights(local_runs, ray_run):
    _, figures = ray_run
    assert figures["backend"] == "ray" and figures["workers"] == 2
    assert figures["worker_restarts"] == 0
    _assert_same_training(ray_run, local_runs[1])


def test_a_run_interrupted_locally_resumes_on_ray_to_the_same_weights(
        local_runs, local_ray, tmp_path, monkeypatch):
    """The checkpoint does not depend on the backend: start on local processes, finish on Ray."""
    from residualsim.residual.train import TrajectoryLoss

    original, calls = TrajectoryLoss.__call__, []

    def interrupt_third_batch(self, thetas):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(len(thetas))
        return original(self, thetas)

    out = tmp_path / "model"
    monkeypatch.setattr(TrajectoryLoss, "__call__", interrupt_third_batch)
    with pytest.raises(KeyboardInterrupt):
        _train(out, "local", 2)
    assert len(_losses(out)[1]) == 16 and not (out / "model.json").exists()
    monkeypatch.setattr(TrajectoryLoss, "__call__", original)
    from residualsim.residual.train import TrainingConfig, run_training

    with parallel_backend("ray"):
        figures = run_training("cube", BUNDLED, out, config=TrainingConfig(**TRAINING),
                               n_workers=2, substeps=1, max_trajectories=3, resume=True)
    assert figures["backend"] == "ray"
    _assert_same_training((out, figures), local_runs[1], resumed=True)


# --- 2. faults at the map level ---------------------------------------------------------------
def test_a_dead_worker_is_replaced_and_its_shard_rerun(backend, tmp_path):
    flag = tmp_path / "die-once"
    flag.touch()
    with parallel_backend(backend), engine_workers("cube", ITEMS, 2) as pool:
        before = pool.pids()
        results = pool.map(_exit_once, (str(flag), TARGET))
        after = pool.pids()
        assert not flag.exists()  # the worker did reach the target item
        assert [r[:2] for r in results] == _expected()
        assert pool.restarts == 1
        assert after[0] == before[0]  # shard 0's worker survived
        assert after[1] != before[1]  # shard 1's was replaced...
        assert [r[2] for r in results] == [after[0]] * 3 + [after[1]] * 3  # ...and re-ran it
        # the replacement keeps serving later calls; nothing else restarts
        again = pool.map(_exit_once, (str(flag), TARGET))
        assert [r[:2] for r in again] == _expected() and pool.restarts == 1
        assert pool.pids() == after


class _Cycle:
    """An object that refers to itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


_LEFT: list = []  # in a worker: a weak reference to the cycle its first task dropped


def _load_and_drop_a_cycle(engine, item, payload):
    """First call: leave a cycle as garbage and import a module the worker had not loaded;
    later calls: (is the cycle still alive, objects frozen out of the collector, was the
    module new at the first call)."""
    import gc
    import importlib
    import weakref

    if not _LEFT:
        new = "colorsys" not in sys.modules
        importlib.import_module("colorsys")  # any library a task loads

        _LEFT.extend([weakref.ref(_Cycle()), new])
        return None
    return _LEFT[0]() is not None, gc.get_freeze_count(), _LEFT[1]


def test_a_worker_freezes_the_libraries_a_task_loaded_after_collecting_its_garbage():
    """A full collection of a worker that holds torch and scikit-learn walked ~266 000
    objects (0.14-0.17 s); once a task has loaded libraries the worker collects, then
    freezes what it holds, so later collections walk only what is new. The garbage of
    the task is collected first, not frozen for ever."""
    with parallel_backend("local"), engine_workers("cube", [0, 1], 2) as pool:
        pool.map(_load_and_drop_a_cycle, None)
        answers = pool.map(_load_and_drop_a_cycle, None)  # one item per worker process
    assert [new for _, _, new in answers] == [True, True]
    assert not any(alive for alive, _, _ in answers)
    assert min(frozen for _, frozen, _ in answers) > 1000


def test_a_worker_that_always_dies_gives_up_after_max_restarts(backend):
    with parallel_backend(backend, max_restarts=1) as chosen, \
            engine_workers("cube", ITEMS, 2) as pool:
        assert chosen.max_restarts == 1 and pool.backend is chosen
        with pytest.raises(WorkerError, match=r"gave up after restarting it 1 times") as caught:
            pool.map(_exit_always, TARGET)
        assert pool.restarts == 1
    message = str(caught.value)
    assert "worker 1" in message  # the shard holding the target item
    if backend == "local":
        assert "exited with 4" in message
    else:
        assert "died" in message


def test_max_restarts_0_gives_up_at_the_first_death(backend):
    with parallel_backend(backend, max_restarts=0), engine_workers("cube", ITEMS, 2) as pool:
        with pytest.raises(WorkerError, match=r"gave up after restarting it 0 times"):
            pool.map(_exit_always, TARGET)
        assert pool.restarts == 0


def test_an_exception_in_the_work_is_not_retried(backend):
    with parallel_backend(backend), engine_workers("cube", ITEMS, 2) as pool:
        before = pool.pids()
        with pytest.raises(WorkerError) as caught:
            pool.map(_raise_at, TARGET)
        assert pool.restarts == 0
        assert pool.pids() == before  # nobody was replaced
    message = str(caught.value)
    assert "ValueError: item 4 is refused by the test" in message
    assert "Traceback" in message and "_raise_at" in message


@pytest.mark.parametrize("backend", ["local", "ray"], indirect=True)
def test_the_workers_answer_the_next_call_after_an_exception(backend):
    with parallel_backend(backend), engine_workers("cube", ITEMS, 2) as pool:
        with pytest.raises(WorkerError):
            pool.map(_raise_at, 1)  # shard 0 fails, shard 1 answers (unread)
        assert pool.map(_raise_at, 100) == [(i, 100) for i in ITEMS]
        assert pool.restarts == 0


@pytest.mark.parametrize("backend", ["local", "ray"], indirect=True)
def test_a_payload_the_workers_cannot_unpickle_is_a_worker_error(backend):
    with parallel_backend(backend, max_restarts=0), engine_workers("cube", ITEMS, 2) as pool:
        try:
            pool.map(_square, Unloadable())
        except WorkerError:
            pass
        except Exception as exc:
            raise AssertionError(f"map raised {type(exc).__module__}.{type(exc).__name__}, "
                                 "not WorkerError") from exc
        else:
            pytest.fail("map returned")


# --- 3. a worker killed from outside during training ------------------------------------------
class WorkerKiller(threading.Thread):
    """SIGKILL one of the training's workers once its first checkpoint is on disk.

    ``find_pids()`` lists the pids of the training's workers (found before the checkpoint, so
    that asking cannot delay the kill). Never blocks the test: it gives up at ``timeout_s`` or
    when ``finished`` is set, leaving the reason in ``error``.
    """

    def __init__(self, checkpoint: Path, find_pids, n_workers: int = 2,
                 timeout_s: float = 120.0) -> None:
        super().__init__(daemon=True)
        self.checkpoint, self.find_pids, self.n_workers = checkpoint, find_pids, n_workers
        self.deadline = time.monotonic() + timeout_s
        self.finished = threading.Event()
        self.killed: int | None = None
        self.error: str | None = None
        self.pids: list[int] = []

    def _give_up(self, waiting_for: str) -> bool:
        if self.finished.is_set():
            self.error = f"training finished before {waiting_for}: raise the budget"
        elif time.monotonic() > self.deadline:
            self.error = f"timed out waiting for {waiting_for}"
        return self.error is not None

    def run(self) -> None:
        try:
            while len(self.pids) < self.n_workers:
                if self._give_up(f"{self.n_workers} workers (found {self.pids})"):
                    return
                try:
                    self.pids = self.find_pids()
                except RuntimeError:  # a set of children changed while being listed
                    pass
                time.sleep(0.02)
            while not self.checkpoint.exists():
                if self._give_up("the first checkpoint"):
                    return
                time.sleep(0.005)
            if self._give_up("the kill"):
                return
            os.kill(self.pids[-1], signal.SIGKILL)
            self.killed = self.pids[-1]
        except Exception as exc:  # report it in the test, not in a thread's traceback
            self.error = f"{type(exc).__name__}: {exc}"


def _local_worker_finder():
    existing = {p.pid for p in mp.active_children()}
    return lambda: [p.pid for p in mp.active_children() if p.pid not in existing]


def _ray_worker_finder(ray):
    def names() -> set[str]:
        return {actor["name"] for actor in ray.util.list_named_actors(all_namespaces=True)
                if actor["namespace"] == NAMESPACE and actor["name"].startswith(ACTOR_PREFIX)}

    existing = names()

    def find() -> list[int]:
        pids = []
        for name in sorted(names() - existing):
            try:
                handle = ray.get_actor(name, namespace=NAMESPACE)
                pids.append(ray.get(handle.pid.remote(), timeout=30))
            except Exception:  # gone already (closed or replaced): not a current worker
                continue
        return pids

    return find


def test_training_survives_a_killed_worker(backend, local_runs, tmp_path):
    _, reference = local_runs[2]
    out = tmp_path / "model"
    if backend == "ray":
        import ray

        finder = _ray_worker_finder(ray)
    else:
        finder = _local_worker_finder()
    killer = WorkerKiller(out / "checkpoint.npz", finder)
    killer.start()
    try:
        figures = _train(out, backend, 2)
    finally:
        killer.finished.set()
        killer.join(timeout=60)
    assert not killer.is_alive(), "the killer thread hung"
    assert killer.error is None, killer.error
    assert killer.killed is not None
    assert figures["backend"] == backend
    assert figures["worker_restarts"] >= 1, f"killed pid {killer.killed}, nobody restarted"
    _assert_same_training((out, figures), local_runs[2])
    assert figures["params_sha256"] == reference["params_sha256"]


# --- 4. backend validation --------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, words", [
    (dict(name="dask"), "unknown backend 'dask'"),
    (dict(name="local", address="auto"), "address"),
    (dict(name="local", address="10.0.0.1:6379"), "'ray' backend only"),
    (dict(name="local", max_restarts=-1), "max_restarts"),
    (dict(name="ray", max_restarts=1.5), "max_restarts"),
])
def test_bad_backends_are_refused(kwargs, words):
    with pytest.raises(ParameterError, match=words):
        Backend(**kwargs)
    before = current_backend()
    with pytest.raises(ParameterError, match=words):
        with parallel_backend(**kwargs):
            pytest.fail("entered the block")  # pragma: no cover
    assert current_backend() is before


def test_parallel_backend_is_restored_after_the_block():
    assert current_backend() == Backend()
    with parallel_backend("ray", address="auto", max_restarts=2) as chosen:
        assert current_backend() is chosen
        assert (chosen.name, chosen.address, chosen.max_restarts) == ("ray", "auto", 2)
        with parallel_backend("local"):
            assert current_backend().name == "local"
        assert current_backend() is chosen
    assert current_backend() == Backend()
    with pytest.raises(KeyError), parallel_backend("ray"):
        raise KeyError("boom")
    assert current_backend() == Backend()


def test_cli_address_without_the_ray_backend_exits_2(tmp_path, capsys):
    out = tmp_path / "sim.npz"
    code = main(["simulate", "--data", str(BUNDLED), "--out", str(out), "--address", "auto"])
    stdout, stderr = capsys.readouterr()
    assert code == 2
    assert stderr.startswith("residualsim: error:") and "--backend ray" in stderr
    assert stdout == "" and not out.exists()


def test_cli_unknown_backend_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as caught:
        main(["simulate", "--data", str(BUNDLED), "--out", str(tmp_path / "x.npz"),
              "--backend", "dask"])
    assert caught.value.code == 2
    assert "invalid choice: 'dask'" in capsys.readouterr().err


# --- the benchmark ----------------------------------------------------------------------------
def test_bench_executors_reports_each_backend_with_identical_errors(tosses, local_ray):
    from residualsim.experiments.bench import bench_executors
    from residualsim.residual.model import ResidualModel

    model = ResidualModel.load(Path(__file__).resolve().parents[1] / "data" / "pretrained"
                               / "cube-contactnets")
    report = bench_executors(model, dict(list(tosses.items())[:4]), candidates=2, repeats=1,
                             noop_calls=3)
    assert report["n_trajectories"] == 4 and report["candidates"] == 2
    for key in ("local_1", "local_2", "ray_2"):
        row = report[key]
        assert row["identical_to_first"] is True
        assert row["evals_per_s"] > 0 and row["noop_ms"] >= 0 and row["startup_s"] > 0
    assert report["ray_2"]["speedup_over_first"] == pytest.approx(
        report["ray_2"]["evals_per_s"] / report["local_1"]["evals_per_s"])
    assert report["ray_over_local_noop"] == pytest.approx(
        report["ray_2"]["noop_ms"] / report["local_2"]["noop_ms"])
