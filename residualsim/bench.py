"""Benchmarks that print ratios against a baseline measured in the same run.

These machines are noisy, so nothing here asserts a time: each figure is the best of
several interleaved repeats, reported next to its baseline.

* wrapper overhead: :meth:`Engine.rollout` (step, read state, detect contacts) against a
  raw PyBullet loop doing the same calls on the same world, and :meth:`Engine.step` against
  bare ``stepSimulation``, at 1 substep and at the scene's default.
* worker speed-up: simulating a set of tosses with 1 and 2 persistent worker processes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping

import numpy as np
import pybullet as pb

from .data.trajectory import Trajectory
from .engine import Engine
from .rollout import simulate_one, recording_settings, simulation_items
from .scenes import parse_params
from .synthesize import sample_toss_states
from .workers import ShardedWorkers

__all__ = ["bench_engine_overhead", "bench_workers"]


def _best_of(function, repeats: int) -> float:
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def _raw_rollout(engine: Engine, state: np.ndarray, n_steps: int) -> list:
    """What a user would write by hand: reset, then step, read pose/velocity, query contacts."""
    engine.reset(state)
    cid, body, table = engine.client, engine.scene.body, engine.scene.static_body
    records = []
    for _ in range(n_steps):
        pb.stepSimulation(physicsClientId=cid)
        records.append((pb.getBasePositionAndOrientation(body, physicsClientId=cid),
                        pb.getBaseVelocity(body, physicsClientId=cid),
                        pb.getContactPoints(body, table, -1, -1, physicsClientId=cid)))
    return records


def bench_engine_overhead(n_tosses: int = 20, n_steps: int = 110, repeats: int = 5,
                          substeps: tuple[int, ...] = (1, 10)) -> dict:
    """Time per step of the wrapper against raw PyBullet on the same cube tosses.

    Returns, per substep count, microseconds per step for the raw loop and the wrapper's
    rollout and their ratio, plus the same for bare stepping (``Engine.step``).
    """
    states = sample_toss_states(n_tosses, rng=0)
    report: dict = {}
    for count in substeps:
        engine = Engine("cube")
        settings = dataclasses.replace(engine.scene.settings, substeps=count)
        engine.close()
        engine = Engine("cube", settings=settings)
        total = n_tosses * n_steps

        def raw() -> None:
            for state in states:
                _raw_rollout(engine, state, n_steps)

        def wrapped() -> None:
            for state in states:
                engine.rollout(state, n_steps)

        def raw_step() -> None:
            engine.reset(states[0])
            for _ in range(total):
                pb.stepSimulation(physicsClientId=engine.client)

        def wrapped_step() -> None:
            engine.reset(states[0])
            engine.step(total)

        times = {name: np.inf for name in ("raw", "wrapped", "raw_step", "wrapped_step")}
        for _ in range(repeats):  # interleave so load changes hit both alike
            for name, fn in (("raw", raw), ("wrapped", wrapped), ("raw_step", raw_step),
                             ("wrapped_step", wrapped_step)):
                times[name] = min(times[name], _best_of(fn, 1))
        engine.close()
        report[f"substeps_{count}"] = {
            "rollout_raw_us_per_step": 1e6 * times["raw"] / total,
            "rollout_wrapper_us_per_step": 1e6 * times["wrapped"] / total,
            "rollout_ratio": times["wrapped"] / times["raw"],
            "step_raw_us": 1e6 * times["raw_step"] / total,
            "step_wrapper_us": 1e6 * times["wrapped_step"] / total,
            "step_ratio": times["wrapped_step"] / times["raw_step"],
        }
    return report


def bench_workers(trajectories: Mapping[str, Trajectory], params=None,
                  worker_counts: tuple[int, ...] = (1, 2), repeats: int = 2) -> dict:
    """Seconds to simulate every trajectory with 1 and 2 persistent worker processes.

    ``map_s`` is one simulation pass over the set with the pool already running (what a
    calibration likelihood pays per evaluation); ``startup_s`` is starting the pool.
    """
    params = parse_params(params)
    items = simulation_items("cube", trajectories)
    settings = recording_settings("cube", trajectories)
    report: dict = {"n_trajectories": len(items),
                    "n_samples": int(sum(item[2] for item in items))}
    reference = None
    for count in worker_counts:
        start = time.perf_counter()
        with ShardedWorkers("cube", items, count, settings) as pool:
            startup = time.perf_counter() - start
            results = pool.map(simulate_one, params)  # warm-up, and the check below
            seconds = _best_of(lambda: pool.map(simulate_one, params), repeats)
        states = [r.states for r in results]
        if reference is None:
            reference = states
        identical = all(np.array_equal(a, b) for a, b in zip(reference, states))
        report[f"workers_{count}"] = {"map_s": seconds, "startup_s": startup,
                                      "identical_to_first": identical}
    first = report[f"workers_{worker_counts[0]}"]["map_s"]
    for count in worker_counts[1:]:
        report[f"speedup_{count}_over_{worker_counts[0]}"] = first / report[f"workers_{count}"]["map_s"]
    return report
