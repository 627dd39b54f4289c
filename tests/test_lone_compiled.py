"""Lone rollouts through the compiled kernel (residualsim.sim.lone_compiled) against the
Python loop of residual_rollout.

Claims: with ``RESIDUALSIM_COMPILED=1`` a lone ``residual_rollout`` of a cube goes through the
kernel (and not the Python loop) and gives every field of the Python loop's rollout bit for
bit: the residual's draws, its mean, the engine alone, Algorithm 1 as written (every contact
step), a stop after one or two events, without the skips, and the calibration's engine loop
(``Engine.rollout_poses``); a sustained-contact policy, hidden-impact events and other
scenes keep the Python loop; random, NaN and huge states give the same rollout or the same
error both ways. Every case runs in a subprocess (a bad C call fails the test, not pytest).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from test_batch_compiled import MODEL_DIR, ROOT, _cube, _in_subprocess, equal_rollouts

pytest.importorskip("numba")


def _run(case: str) -> str:
    return _in_subprocess(case, module="test_lone_compiled")


def _both(call):
    """``call()`` with the switch at 0 and at 1 (the Python loop, the compiled loop)."""
    out = []
    for mode in ("0", "1"):
        os.environ["RESIDUALSIM_COMPILED"] = mode
        try:
            out.append(call())
        finally:
            os.environ.pop("RESIDUALSIM_COMPILED")
    return out


def _counting():
    """Counts of kernel calls from the lone loop and of Python-loop rollouts."""
    from residualsim.sim import batch_compiled, rollout

    counts = {"kernel": 0, "python": 0}
    run_kernel, python_loop = batch_compiled.run_kernel, rollout._rollout

    def kernel(*args):
        counts["kernel"] += 1
        return run_kernel(*args)

    def python(*args):
        counts["python"] += 1
        return python_loop(*args)

    batch_compiled.run_kernel, rollout._rollout = kernel, python
    return counts


def _case_bit_identical() -> None:
    from test_batch_rollout import _particles

    from residualsim.sim.rollout import ContactGuard, residual_rollout

    model, engine = _cube()
    counts = _counting()
    states, policy = np.concatenate([_particles(0), _particles(1)]), model.sampling_policy()
    every = ContactGuard(every_contact_step=True, new_point_distance_m=0.005)
    cases = [(policy, True, model.guard, None, True), (policy, False, model.guard, None, True),
             (None, False, model.guard, None, True), (policy, True, every, None, True),
             (policy, True, model.guard, 1, True), (policy, True, model.guard, 2, True),
             (policy, True, model.guard, None, False)]
    events = 0
    for case, (chosen, sampled, guard, stop, skips) in enumerate(cases):
        for i, state in enumerate(states if case == 0 else states[:40]):  # 40: every kind of start
            python, compiled = _both(lambda: residual_rollout(
                engine, state, 300, chosen, np.random.default_rng([5, i]) if sampled else None,
                guard, stop_after_events=stop, skips=skips))
            equal_rollouts(python, compiled)
            events += compiled.n_events
    runs = len(states) + (len(cases) - 1) * 40
    assert counts["python"] == runs and counts["kernel"] >= runs, counts
    assert events > 300


def _case_real_tosses() -> None:
    """The shipped model on validation tosses (what predict and training roll out)."""
    from residualsim.data.contactnets import load_tosses
    from residualsim.sim.rollout import residual_rollout

    model, engine = _cube()
    tosses = load_tosses(ROOT / "data" / "samples" / "contactnets-cube")
    for k, traj in enumerate(list(tosses.values())[:6]):
        state, n_steps = engine.scene.state_from_trajectory(traj, 0), traj.n_samples - 1
        for s in range(3):
            python, compiled = _both(lambda: residual_rollout(
                engine, state, n_steps, model.sampling_policy(),
                np.random.default_rng([1, k, s]), model.guard))
            equal_rollouts(python, compiled)


def _case_pose_rollouts() -> None:
    """The calibration's pose loop (pose_rollout against Engine.rollout_poses) and one
    calibration likelihood (trajectory_errors over tosses and parameter sets)."""
    from test_batch_rollout import _particles

    from residualsim.data.contactnets import load_tosses
    from residualsim.sim import batch_compiled
    from residualsim.sim.lone_compiled import pose_rollout
    from residualsim.sysid.likelihood import trajectory_errors

    model, engine = _cube()
    calls = []
    run_kernel = batch_compiled.run_kernel
    batch_compiled.run_kernel = lambda *a: calls.append(1) or run_kernel(*a)
    for skips in (True, False):
        for state in _particles(2):
            python, compiled = _both(lambda: pose_rollout(engine, state, 250, skips))
            reference = engine.rollout_poses(state, 250, skips)
            for a, b, c in zip(python, compiled, reference):
                assert np.array_equal(a, b) and np.array_equal(a, c)
    assert calls
    tosses = load_tosses(ROOT / "data" / "samples" / "contactnets-cube")
    batch = [model.params, dataclasses.replace(model.params, lateral_friction=0.2,
                                               restitution=0.3)]
    for traj in tosses.values():
        state = model.layout.state_from_trajectory(traj, 0)
        item = (state, traj.positions_m[1:], traj.quat_wxyz[1:], 0.05)
        python, compiled = _both(lambda: trajectory_errors(engine, item, batch))
        assert np.array_equal(python, compiled) and np.all(np.isfinite(python))


def _case_python_loop_kept() -> None:
    """A sustained-contact policy, hidden-impact events and other scenes: the Python loop
    even with the switch on."""
    from residualsim.residual.coefficients import CoefficientResidual, SustainedPolicy
    from residualsim.sim.engine import Engine
    from residualsim.sim.rollout import ContactGuard, residual_rollout

    model, engine = _cube()
    counts = _counting()
    state = np.array([0.0, 0.0, 0.2, 1.0, 0.0, 0.0, 0.0, 0.3, 0.0, -1.0, 1.0, 2.0, 3.0])
    hidden = ContactGuard(hidden_impact_mps=0.5)
    _both(lambda: residual_rollout(engine, state, 120, None, None, hidden))
    sustained = SustainedPolicy(CoefficientResidual.zeros(np.zeros(10), np.ones(10)),
                                model.sampling_policy())
    _both(lambda: residual_rollout(engine, state, 120, sustained, None, model.guard))
    for name in (str(ROOT / "assets" / "examples" / "hinge.toml"), "planar-ellipse"):
        with Engine(name) as other:
            start = other.scene.get_state()
            _both(lambda: residual_rollout(other, start, 40, None, None, ContactGuard()))
    assert counts == {"kernel": 0, "python": 8}, counts


def _case_fuzz() -> None:
    """Random states (NaN, huge, inside the table, fast) and horizons: the same rollout or
    the same error both ways, each from a new engine."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from residualsim.residual.model import ResidualModel
    from residualsim.sim.engine import Engine
    from residualsim.sim.rollout import residual_rollout

    model = ResidualModel.load(MODEL_DIR)
    value = st.one_of(st.floats(-3.0, 3.0), st.sampled_from([np.nan, 1e6, -1e6, 1e300, 0.0]))

    @settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck),
              database=None)
    @given(st.lists(value, min_size=13, max_size=13), st.integers(1, 80))
    def check(row, n_steps):
        state = np.array(row)
        state[2] = abs(state[2]) * 0.2 if np.isfinite(state[2]) else state[2]
        results = []
        for mode in ("0", "1"):
            os.environ["RESIDUALSIM_COMPILED"] = mode
            try:
                with Engine(model.scene, model.params, model.settings()) as engine:
                    results.append(residual_rollout(engine, state, n_steps,
                                                    model.sampling_policy(),
                                                    np.random.default_rng(3), model.guard))
            except Exception as err:  # noqa: BLE001 - compared below, type and message
                results.append(f"{type(err).__name__}: {err}")
            finally:
                os.environ.pop("RESIDUALSIM_COMPILED")
        if isinstance(results[0], str) or isinstance(results[1], str):
            assert results[0] == results[1], results
        else:
            equal_rollouts(*results)

    check()


def test_lone_rollouts_bit_identical():
    _run("bit_identical")


def test_real_tosses_bit_identical():
    _run("real_tosses")


def test_pose_rollouts_and_likelihood_bit_identical():
    _run("pose_rollouts")


def test_other_rollouts_keep_the_python_loop():
    _run("python_loop_kept")


def test_fuzz_both_ways():
    _run("fuzz")
