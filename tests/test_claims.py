"""Work claimed as the workers free up (residualsim.parallel.claims, residualsim.belief.sharing):
every number handed out once across processes, the runs shrinking as the work runs out, a
batch of first events that takes its particles from the claims giving each particle the run
it gets when the work is split in advance, and particles a dead worker took run again."""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import pickle
import types
from pathlib import Path

import numpy as np
import pytest

from residualsim.belief.propagation import _particle_tasks, _StepRequest
from residualsim.belief.sharing import map_shared
from residualsim.parallel.claims import WorkClaims
from residualsim.residual.model import ResidualModel
from residualsim.sim import batch
from residualsim.sim.engine import Engine

MODEL_DIR = Path(__file__).resolve().parents[1] / "data" / "pretrained" / \
    "cube-contactnets-5substep"


def _take_all(claims: WorkClaims, out) -> None:
    taken = []
    while True:
        run = claims.take()
        if not run:
            break
        taken.extend(run)
    claims.close()
    out.put(taken)


def test_every_number_is_handed_out_once_across_processes():
    context = mp.get_context("spawn")
    out = context.Queue()
    with WorkClaims(5000, 4, smallest=1) as claims:
        workers = [context.Process(target=_take_all, args=(claims, out)) for _ in range(4)]
        for worker in workers:
            worker.start()
        taken = [out.get(timeout=60) for _ in workers]
        for worker in workers:
            worker.join(timeout=10)
        path = claims.path
    everything = sorted(n for share in taken for n in share)
    assert everything == list(range(5000))
    assert not os.path.exists(path)  # the maker's exit removes the file


def test_runs_shrink_as_the_work_runs_out_and_pickle_as_a_path():
    with WorkClaims(100, 2, smallest=3) as claims:
        other = pickle.loads(pickle.dumps(claims))  # another worker's handle
        assert pickle.dumps(claims).count(claims.path.encode()) == 1
        sizes = []
        for handle in [claims, other] * 20:
            run = handle.take()
            if run:
                sizes.append(len(run))
        other.close()
    assert sum(sizes) == 100
    assert sizes[0] == 25 and sizes[-1] <= 3 and min(sizes) >= 1
    assert all(a >= b for a, b in zip(sizes, sizes[1:]))


def test_a_run_is_sized_from_what_is_left_now_not_at_the_last_claim():
    with WorkClaims(100, 2, smallest=1) as claims:
        other = pickle.loads(pickle.dumps(claims))
        assert len(claims.take()) == 25
        while os.path.getsize(claims.path) < 60:  # another worker took most of the rest
            other.take()
        left = 100 - os.path.getsize(claims.path)
        assert len(claims.take()) == math.ceil(left / 4)  # not (100 - 25) / 4
        other.close()


@pytest.fixture(scope="module")
def model() -> ResidualModel:
    return ResidualModel.load(MODEL_DIR)


def _states(n: int, seed: int = 0) -> np.ndarray:
    from residualsim.belief.mixture import GaussianMixtureBelief
    from residualsim.belief.simulator import INITIAL_STD, toss_state

    initial = GaussianMixtureBelief.gaussian(
        toss_state([0.0, 0.0, 0.25], [0.9, 0.3, 0.2, 0.1], velocity_mps=[0.4, 0.0, -1.0],
                   omega_radps=[2.0, 3.0, 0.0]), INITIAL_STD * 4, planar=False)
    return initial.sample(n, np.random.default_rng(seed))


def test_first_events_from_claims_are_the_runs_split_in_advance(model):
    states = _states(30)
    seeds = [[5, i] for i in range(len(states))]
    with Engine(model.scene, model.params, model.settings()) as engine:
        whole = batch.first_events(engine, states, 150, model.sampling_policy(), seeds,
                                   model.guard, batch_size=4)
        with WorkClaims(len(states), 2, smallest=2) as claims:
            second = pickle.loads(pickle.dumps(claims))
            first_run = claims.take()  # another worker took the first run
            mine = batch.first_events(engine, states, 150, model.sampling_policy(), seeds,
                                      model.guard, batch_size=4, claims=second)
            second.close()
            rest = batch.first_events(engine, states, 150, model.sampling_policy(), seeds,
                                      model.guard, batch_size=4, claims=claims)
    assert list(first_run) == list(range(8))
    assert mine.indices.tolist() == list(range(8, 30)) and len(rest.indices) == 0
    np.testing.assert_array_equal(whole.indices, np.arange(30))
    for field in ("n_events", "samples", "engine_steps", "max_penetration_m", "pre_states",
                  "post_states", "engine_starts"):
        np.testing.assert_array_equal(getattr(mine, field), getattr(whole, field)[8:],
                                      err_msg=field)
    assert whole.n_events[8:].sum() >= 15


def _step_request(model: ResidualModel, n: int, seed: int, draws: int) -> _StepRequest:
    """A particle step's request for 2 workers: ``n`` states (:func:`_states` with ``seed``),
    particle i's residual drawn from ``default_rng([draws, i])``, batches of 4."""
    return _StepRequest(n_slots=2, states=_states(n, seed=seed),
                        seeds=[[draws, i] for i in range(n)], params=model.params,
                        policy=model.sampling_policy(), guard=model.guard, max_steps=150,
                        penetration_tolerance_m=0.002, batch_size=4)


class _Recording:
    """Two local workers in this process that record the payloads they were sent."""

    backend = types.SimpleNamespace(name="local")
    n_workers = 2
    items = [0, 1]

    def __init__(self, engine):
        self.engine, self.calls = engine, []

    def map(self, function, payload):
        self.calls.append(payload)
        return [function(self.engine, slot, payload) for slot in self.items]


class _Losing(_Recording):
    """In the first map call the second worker claims a run of particles and dies (its
    chunk never comes back)."""

    def map(self, function, payload):
        if self.calls:
            return super().map(function, payload)
        self.calls.append(payload)
        dying = pickle.loads(pickle.dumps(payload.claims))  # its own handle
        self.lost = list(dying.take())
        dying.close()
        return [function(self.engine, 0, payload)]


def test_particles_a_dead_worker_took_run_again(model):
    request = _step_request(model, 24, seed=1, draws=9)
    with Engine(model.scene, model.params, model.settings()) as engine:
        workers = _Losing(engine)
        chunks = map_shared(workers, _particle_tasks, request)
        static = [_particle_tasks(engine, slot, request) for slot in (0, 1)]
    first, second = workers.calls
    assert first.claims is not None and second.claims is None
    assert list(second.only) == workers.lost == list(range(6))  # 24 / (2 x 2 workers)
    assert sorted(i for chunk in chunks for i in chunk[0]) == list(range(24))

    def by_index(parts):
        order = np.argsort(np.concatenate([c[0] for c in parts]))
        return np.concatenate([c[2] for c in parts])[order]

    np.testing.assert_array_equal(by_index(chunks), by_index(static))


class _Doubling(_Recording):
    """The first map call comes back with a particle twice (claims that overlapped)."""

    def map(self, function, payload):
        chunks = super().map(function, payload)
        return chunks + chunks[:1] if len(self.calls) == 1 else chunks


def test_particles_claimed_twice_run_the_step_again_split_in_advance(model):
    request = _step_request(model, 12, seed=3, draws=6)
    with Engine(model.scene, model.params, model.settings()) as engine:
        workers = _Doubling(engine)
        chunks = map_shared(workers, _particle_tasks, request)
    first, second = workers.calls
    assert first.claims is not None and second.claims is None and second.only is None
    assert [list(chunk[0]) for chunk in chunks] == [list(range(0, 12, 2)), list(range(1, 12, 2))]


def test_without_a_temporary_file_the_work_is_split_in_advance(model, monkeypatch):
    import tempfile

    def refuse(*args, **kwargs):
        raise PermissionError("read-only temporary directory")

    request = _step_request(model, 10, seed=2, draws=4)
    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with Engine(model.scene, model.params, model.settings()) as engine:
        workers = _Recording(engine)
        chunks = map_shared(workers, _particle_tasks, request)
    assert len(workers.calls) == 1 and workers.calls[0].claims is None
    assert [list(chunk[0]) for chunk in chunks] == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
