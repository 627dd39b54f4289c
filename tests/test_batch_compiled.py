"""The compiled first-event loop (residualsim.sim.batch_compiled over residualsim.sim.capi)
against the Python loop of residualsim.sim.batch.

Claims: for the same particles and seeds, ``first_events`` gives the same result bit for bit
with ``RESIDUALSIM_COMPILED=1`` as with ``0`` (every field: statuses, steps, penetration,
pre- and post-event states, the events' contact models and touching points as
``getContactPoints`` tuples), at any batch size, for the residual's draws and for the
conjugate step's observing probe; scenes the batch does not take (a scene file with a
joint, the planar scene) keep the lone path either way; random, NaN and huge states and
copy counts give the same result or the same error both ways; an unreachable C API falls
back to the Python loop with one warning line (``auto``) or raises (``1``); a bad client or
a failure inside the kernel is a CompiledPathError. Every case that calls into C runs in a
subprocess, so that a wrong signature fails a test instead of killing pytest.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MODEL_DIR = ROOT / "data" / "pretrained" / "cube-contactnets-5substep"
FIELDS = ("n_events", "engine_gain", "max_penetration_m", "pre_states", "post_states",
          "samples", "engine_steps", "engine_starts", "indices")

pytest.importorskip("numba")


def _in_subprocess(case: str, env: dict | None = None, timeout: float = 600,
                   module: str = "test_batch_compiled") -> str:
    """Run ``_case_<case>()`` of test ``module`` (default: this one) in a fresh interpreter;
    its standard error."""
    code = f"import sys; sys.path.insert(0, {str(HERE)!r}); import {module} as t; " \
        f"t._case_{case}()"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=timeout, cwd=ROOT, env={**os.environ, **(env or {})})
    assert result.returncode == 0, f"case {case} exited with {result.returncode} " \
        f"(negative: a signal):\n{result.stderr[-4000:]}"
    return result.stderr


def _first_events(mode: str, engine, states, policy, seeds, guard, size, n_steps=150,
                  fresh: bool = False):
    """``batch.first_events`` with the switch at ``mode``; ``fresh``: in a new world (a NaN
    or huge state leaves Bullet's broadphase changed for the world's later calls)."""
    from residualsim.sim import batch

    if fresh:
        while batch._CACHE:
            batch._CACHE.pop().close()
    os.environ["RESIDUALSIM_COMPILED"] = mode
    try:
        return batch.first_events(engine, states, n_steps, policy, seeds, guard,
                                  batch_size=size)
    finally:
        os.environ.pop("RESIDUALSIM_COMPILED", None)


def _same(a, b) -> None:
    for name in FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert np.array_equal(x, y, equal_nan=True), name
    assert (a.touching is None) == (b.touching is None)
    if a.touching is not None:
        assert a.touching == b.touching
        for name in ("mass", "jacobian", "inverse_jt", "features", "centre"):
            assert np.array_equal(getattr(a.models, name), getattr(b.models, name)), name


def equal_rollouts(a, b) -> None:
    """Every field of two ResidualRollouts (and of their contact models) equal, bit for bit."""
    for field in dataclasses.fields(a):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if dataclasses.is_dataclass(x):
            equal_rollouts(x, y)
        elif isinstance(x, (list, tuple)) and x and dataclasses.is_dataclass(x[0]):
            assert len(x) == len(y), field.name
            for u, v in zip(x, y):
                equal_rollouts(u, v)
        elif x is None or y is None:
            assert x is None and y is None, field.name
        else:
            assert np.array_equal(np.asarray(x, float), np.asarray(y, float),
                                  equal_nan=True), field.name


def _cube():
    from residualsim.residual.model import ResidualModel
    from residualsim.sim.engine import Engine

    model = ResidualModel.load(MODEL_DIR)
    return model, Engine(model.scene, model.params, model.settings())


def _case_cube_bit_identical() -> None:
    from test_batch_rollout import _particles

    from residualsim.belief.conjugate_rollouts import EventProbe
    from residualsim.sim.rollout import ContactGuard

    model, engine = _cube()
    states = np.concatenate([_particles(seed) for seed in range(3)])
    policy, guard = model.sampling_policy(), ContactGuard()
    seeds = [[7, i] for i in range(len(states))]
    for size in (1, 5, 16):
        python = _first_events("0", engine, states, policy, seeds, guard, size)
        compiled = _first_events("1", engine, states, policy, seeds, guard, size)
        _same(python, compiled)
        assert python.n_events.sum() > 80 and python.engine_steps.sum() > 500
    # the policy's mean, the engine alone, the conjugate step's probe (touching tuples)
    probe = EventProbe(policy.n_outputs, getattr(policy, "spin", False),
                       getattr(policy, "contact_mode", False))
    for chosen, chosen_seeds in ((policy, None), (None, None), (probe, None)):
        _same(_first_events("0", engine, states, chosen, chosen_seeds, guard, 16),
              _first_events("1", engine, states, chosen, chosen_seeds, guard, 16))
    # Algorithm 1 as written (an event at every contact step) and a tight guard
    every = ContactGuard(every_contact_step=True, new_point_distance_m=0.005)
    _same(_first_events("0", engine, states, policy, seeds, every, 7),
          _first_events("1", engine, states, policy, seeds, every, 7))


def _case_whole_rollouts() -> None:
    """batched_rollouts (whole rollouts, events corrected on their copy as they happen)
    through the kernel: every field of every rollout equal to the Python loop's and to the
    lone residual_rollout's."""
    from test_batch_rollout import _particles

    from residualsim.sim import batch, batch_compiled
    from residualsim.sim.rollout import residual_rollout

    model, engine = _cube()
    states, policy = np.concatenate([_particles(0), _particles(1)]), model.sampling_policy()
    calls = []
    run_kernel = batch_compiled.run_kernel
    batch_compiled.run_kernel = lambda *a: calls.append(1) or run_kernel(*a)

    def runs(mode, size):
        os.environ["RESIDUALSIM_COMPILED"] = mode
        rngs = [np.random.default_rng([5, i]) for i in range(len(states))]
        try:
            return batch.batched_rollouts(engine, states, 300, policy, rngs, model.guard,
                                          batch_size=size)
        finally:
            os.environ.pop("RESIDUALSIM_COMPILED")

    lone = [residual_rollout(engine, state, 300, policy, np.random.default_rng([5, i]),
                             model.guard) for i, state in enumerate(states)]
    for size in (3, 16):
        python, compiled = runs("0", size), runs("1", size)
        for a, b, c in zip(python, compiled, lone):
            equal_rollouts(a, b)
            equal_rollouts(c, b)
    assert calls and sum(r.n_events for r in lone) > 50


def _case_belief_steps() -> None:
    """propagate_belief (particles, conjugate) gives the same beliefs both ways."""
    from residualsim.belief.mixture import GaussianMixtureBelief
    from residualsim.belief.propagation import propagate_belief
    from residualsim.belief.simulator import INITIAL_STD
    from residualsim.residual.model import ResidualModel

    model = ResidualModel.load(MODEL_DIR)
    start = np.array([0.0, 0.0, 0.25, 0.9, 0.1, 0.3, 0.2, 0.3, -0.2, -0.5, 1.0, 2.0, 3.0])
    start[3:7] /= np.linalg.norm(start[3:7])
    belief = GaussianMixtureBelief.gaussian(start, INITIAL_STD, planar=False)
    for method in ("particles", "conjugate"):
        out = {}
        for mode in ("0", "1"):
            os.environ["RESIDUALSIM_COMPILED"] = mode
            steps = propagate_belief(model, belief, n_events=2, n_particles=200, seed=3,
                                     method=method)
            out[mode] = [(s.particles, s.belief.means, s.belief.covariances, s.belief.weights)
                         for s in steps if s.belief is not None]
        os.environ.pop("RESIDUALSIM_COMPILED")
        assert len(out["0"]) == len(out["1"]) > 0
        for a, b in zip(out["0"], out["1"]):
            for x, y in zip(a, b):
                assert np.array_equal(x, y), method


def _case_other_scenes() -> None:
    """A scene file with a joint and the planar scene are not batched: the compiled switch
    leaves their particles as they were (the lone path)."""
    from residualsim.sim import batch
    from residualsim.sim.engine import Engine
    from residualsim.sim.rollout import ContactGuard

    for name in (str(ROOT / "assets" / "examples" / "hinge.toml"), "planar-ellipse"):
        with Engine(name) as engine:
            reason = batch.batch_unsupported(engine.scene, None, ContactGuard())
            assert reason is not None, name


def _case_fuzz() -> None:
    """Random states (NaN, huge, inside the table, fast) and copy counts: the same result,
    or the same error, both ways, each in a new world."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from residualsim.sim.rollout import ContactGuard

    model, engine = _cube()
    policy, guard = model.sampling_policy(), ContactGuard()
    value = st.one_of(st.floats(-3.0, 3.0), st.sampled_from([np.nan, 1e6, -1e6, 1e300, 0.0]))

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck),
              database=None)
    @given(st.lists(st.lists(value, min_size=13, max_size=13), min_size=1, max_size=20),
           st.integers(1, 20), st.integers(1, 60))
    def check(rows, size, n_steps):
        states = np.array(rows)
        states[:, 2] = np.where(np.isfinite(states[:, 2]), np.abs(states[:, 2]) * 0.2,
                                states[:, 2])
        seeds = [[1, i] for i in range(len(states))]
        results = []
        for mode in ("0", "1"):
            try:
                results.append(_first_events(mode, engine, states, policy, seeds, guard,
                                             size, n_steps, fresh=True))
            except Exception as err:  # noqa: BLE001 - compared below, type and message
                results.append(f"{type(err).__name__}: {err}")
        if isinstance(results[0], str) or isinstance(results[1], str):
            assert results[0] == results[1], results
        else:
            _same(*results)

    check()


def _case_fallback_numba_missing() -> None:
    """auto, numba missing: one warning line, the Python loop's particles."""
    import logging

    sys.modules["numba"] = None  # import numba now raises ImportError
    from test_batch_rollout import _particles

    from residualsim.sim import capi
    from residualsim.sim.rollout import ContactGuard

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("residualsim.sim.capi").addHandler(handler)
    model, engine = _cube()
    states, guard = _particles()[:10], ContactGuard()
    a = _first_events("auto", engine, states, None, None, guard, 4)
    b = _first_events("auto", engine, states, None, None, guard, 4)
    _same(a, _first_events("0", engine, states, None, None, guard, 4))
    _same(a, b)
    assert len(records) == 1 and "numba is not installed" in records[0].getMessage()
    assert "\n" not in records[0].getMessage()
    os.environ["RESIDUALSIM_COMPILED"] = "1"
    try:
        capi.compiled_reason()
    except capi.CompiledPathError as err:
        assert "numba is not installed" in str(err)
    else:
        raise AssertionError("forced on without numba did not raise")


def _case_fallback_stripped() -> None:
    """auto, a module without PyBullet's client table in its symbol table: the reason says
    so; forcing the path on raises."""
    from residualsim.sim import capi

    capi._elf_symbols = lambda path, names: {}
    os.environ["RESIDUALSIM_COMPILED"] = "auto"
    reason = capi.compiled_reason()
    assert reason is not None and "stripped" in reason, reason
    os.environ["RESIDUALSIM_COMPILED"] = "1"
    try:
        capi.compiled_reason()
    except capi.CompiledPathError as err:
        assert "stripped" in str(err)
    else:
        raise AssertionError("forced on without the symbol did not raise")


def _case_bad_handles() -> None:
    from residualsim.sim import capi
    from residualsim.sim.bullet import pb

    for client, words in ((9999, "int in [0, 1024)"), (-1, "int in [0, 1024)"),
                          (777, "not connected"), ("0", "int in")):
        try:
            capi.client_handle(client, 0)
        except capi.CompiledPathError as err:
            assert words in str(err), (client, str(err))
        else:
            raise AssertionError(f"client {client!r} did not raise")
    cid = pb.connect(pb.DIRECT)
    pb.disconnect(cid)
    try:
        capi.client_handle(cid, 0)
    except capi.CompiledPathError as err:
        assert "not connected" in str(err)
    else:
        raise AssertionError("a disconnected client did not raise")
    cid = pb.connect(pb.DIRECT)  # a world without the body asked for: a failed state read
    try:
        capi.client_handle(cid, 3)
    except capi.CompiledPathError as err:
        assert "status" in str(err), str(err)
    else:
        raise AssertionError("a missing body did not raise")


def _case_kernel_errors() -> None:
    """A failure inside the kernel (here: a contact buffer too small for the world's points)
    is a CompiledPathError naming it, and the world stays usable."""
    from test_batch_rollout import _particles

    from residualsim.sim import batch_compiled, capi
    from residualsim.sim.rollout import ContactGuard

    model, engine = _cube()
    states, guard = _particles()[28:36], ContactGuard()  # just above the table: contacts
    batch_compiled._CONTACTS = 0
    try:
        _first_events("1", engine, states, None, None, guard, 4)
    except capi.CompiledPathError as err:
        assert "more than 0 contact points in one world step" in str(err), str(err)
    else:
        raise AssertionError("a full contact buffer did not raise")
    batch_compiled._CONTACTS = 4096
    _same(_first_events("0", engine, states, None, None, guard, 4, fresh=True),
          _first_events("1", engine, states, None, None, guard, 4, fresh=True))


def test_cube_bit_identical():
    _in_subprocess("cube_bit_identical")


def test_whole_rollouts_bit_identical():
    _in_subprocess("whole_rollouts")


def test_belief_steps_bit_identical():
    _in_subprocess("belief_steps")


def test_other_scenes_keep_the_lone_path():
    _in_subprocess("other_scenes")


def test_fuzz_both_ways():
    _in_subprocess("fuzz", timeout=900)


def test_fallback_when_numba_is_missing():
    _in_subprocess("fallback_numba_missing")


def test_fallback_when_the_module_is_stripped():
    _in_subprocess("fallback_stripped")


def test_bad_handles_raise():
    _in_subprocess("bad_handles")


def test_kernel_errors_raise():
    _in_subprocess("kernel_errors")


def test_switch_values():
    from residualsim.sim import capi

    for value, wanted in (("0", False), ("1", True), ("auto", None), (" AUTO ", None)):
        os.environ["RESIDUALSIM_COMPILED"] = value
        try:
            assert capi.compiled_wanted() is wanted
        finally:
            os.environ.pop("RESIDUALSIM_COMPILED")
    os.environ["RESIDUALSIM_COMPILED"] = "yes"
    try:
        with pytest.raises(capi.CompiledPathError, match="0, 1 or auto"):
            capi.compiled_wanted()
    finally:
        os.environ.pop("RESIDUALSIM_COMPILED")
