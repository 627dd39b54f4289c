"""The lone rollout loop (:func:`~residualsim.sim.rollout.residual_rollout`) with its engine
steps in the compiled kernel of :mod:`.batch_compiled`, on the engine's own world.

The kernel is the batched loop's (one home for the per-step work: the step, the contact
listing, the state read, the touching points, the new-point memory, the flight, rest and
horizon checks), given a single slot: the engine's own body. Python keeps the top of the
lone loop (:meth:`Engine.skip_ahead`: the closed-form flight and rest every
``CHECK_EVERY`` samples, where the kernel says the body may fly), the events' corrections
(:class:`~residualsim.sim.corrector.EventCorrector`, on the engine's body, its state read
back) and the record (:func:`~residualsim.sim.corrector.rollout_record`). The engine sees the
same calls in the same order as the Python loop makes (a reset, then steps, contact
listings and state reads through Bullet's C API), so the rollout is the Python loop's bit
for bit (``tests/test_lone_compiled.py``). A batch world (:mod:`.batch`) would park copies
and stage each start: at one copy that cost more than it saved (train/README.md §10).

:func:`pose_rollout` is the calibration likelihood's loop (:meth:`Engine.rollout_poses`: the
engine alone, poses read) on the same driver, the kernel's contact listing off.

Supported where the batch is (:func:`~residualsim.sim.batch.batch_unsupported`: the cube
scenes, without a sustained-contact policy or hidden-impact events); the caller keeps the
Python loop elsewhere.
"""

from __future__ import annotations

import numpy as np

from residualsim.sim.capi import client_handle, compiled_reason
from residualsim.sim.corrector import EventCorrector, ResidualRollout, rollout_record
from residualsim.sim.engine import Engine
from residualsim.sim.guard import ContactGuard
from residualsim.sim.particle import Particle, body_first
from residualsim.sim.skips import CHECK_EVERY

__all__ = ["compiled_rollout", "compiled_applies", "pose_rollout"]

_SLOTS: dict = {}  # the process's slots per (engine, settings): arrays reused across rollouts


def compiled_applies(scene, policy, guard: ContactGuard) -> bool:
    """Whether a lone rollout of ``scene`` with ``policy`` and ``guard`` takes the compiled
    loop: the switch allows it (:func:`~residualsim.sim.capi.compiled_reason`) and the
    kernel supports them (:func:`~residualsim.sim.batch.batch_unsupported`)."""
    from residualsim.sim.batch import batch_unsupported

    return batch_unsupported(scene, policy, guard) is None and compiled_reason() is None


def compiled_rollout(engine: Engine, initial_state: np.ndarray, n_steps: int, policy,
                     rng: np.random.Generator | None, guard: ContactGuard,
                     stop_after_events: int | None, skips: bool) -> ResidualRollout:
    """:func:`~residualsim.sim.rollout.residual_rollout`'s loop (without a sustained-contact
    policy or hidden-impact events) with the steps in the compiled kernel; the same
    arguments, the same rollout bit for bit. Raises
    :class:`~residualsim.sim.capi.CompiledPathError` naming a failed C call."""
    scene = engine.scene
    flight, rest = engine.free_flight(skips), engine.rest_detector(skips)
    engine.reset(initial_state)
    correct = EventCorrector(engine, policy, rng, guard)
    slots = _slots(engine, flight, rest is not None, n_steps, guard)
    p = Particle(0, [scene.read_raw()], rest, correct)
    start = _drive(engine, p, slots, n_steps, flight, stop_after_events)
    return rollout_record(scene, p.raws, policy, correct, p.deepest, p.stepped, start)


def pose_rollout(engine: Engine, initial_state: np.ndarray, n_steps: int, skips: bool = True
                 ) -> tuple[np.ndarray, np.ndarray]:
    """:meth:`Engine.rollout_poses` (the calibration likelihood's loop: the engine alone,
    poses read, no contacts), through the compiled kernel where :func:`compiled_applies`
    says so, else the Python loop; the same poses bit for bit: positions (n_steps + 1, 3) m
    world and quaternions (n_steps + 1, 4) w-x-y-z body to world."""
    if not compiled_applies(engine.scene, None, _NO_EVENTS):
        return engine.rollout_poses(initial_state, n_steps, skips)
    flight = engine.free_flight(skips)
    engine.reset(initial_state)
    rest = engine.rest_detector(skips)
    slots = _slots(engine, flight, rest is not None, n_steps, _NO_EVENTS, contacts=False)
    p = Particle(0, [engine.scene.read_raw()], rest, None)
    _drive(engine, p, slots, n_steps, flight, None)
    return engine.scene.raw_to_poses([raw[0] for raw in p.raws])


def _drive(engine: Engine, p: Particle, slots, n_steps: int, flight,
           stop_after_events: int | None):
    """The lone loop from ``p`` (its engine reset to its one raw record) to ``n_steps``
    samples: the top in Python (:meth:`Engine.skip_ahead`), the steps in the kernel, each
    event corrected by ``p.correct`` (None: the kernel lists no contacts, no events). Returns
    the raw record the engine first stepped from (None: it never stepped)."""
    from residualsim.sim.batch_compiled import CHECK, CORRECT, GOING, REST, run_kernel

    scene, cid = engine.scene, engine.client
    handle = client_handle(cid, scene.body)
    p.body, start, correct = scene.body, None, p.correct
    while p.index < n_steps:
        if p.index % CHECK_EVERY == 0:
            added, resting = engine.skip_ahead(flight, p.rest, p.raws, n_steps - p.index)
            if resting:
                break
            if added:
                p.index += added
                p.recent = []
                continue
        start = p.raws[-1] if start is None else start
        slots.counts[0] = 0
        slots.activate(p)
        run_kernel(handle, slots, 1 << 30, cid)
        code = int(slots.exits[0])
        slots.exits[0] = GOING
        slots.unload(p, finished=False)
        if code == CORRECT:
            fresh, mine, flip = slots.event_points(0)
            if correct(scene.raw_to_states([p.raws[-2]])[0], body_first(fresh or mine, flip),
                       body_first(mine, flip)):
                p.events += 1
                if correct.policy is not None:
                    p.raws[-1] = scene.read_raw()
                if stop_after_events is not None and p.events >= stop_after_events:
                    break
        elif code == REST:  # as skip_ahead fills a body at rest
            p.raws.extend([p.raws[-1]] * (n_steps - p.index))
            break
        elif code != CHECK:  # the horizon
            break
    return start


_NO_EVENTS = ContactGuard()  # the pose loop's kernel lists no contacts: no events to define


def _slots(engine: Engine, flight, rest: bool, n_steps: int, guard, contacts: bool = True):
    """The kernel's arrays for the engine's body, made once per engine, guard and skips
    (``contacts`` False: the pose loop's, listing none)."""
    from residualsim.sim.batch_compiled import Slots

    key = (id(engine), engine.client, engine.scene.body, engine.scene.static_body, engine.dt_s,
           flight._floats if flight is not None else None, rest, guard, contacts)
    slots = _SLOTS.get(key)
    if slots is None:
        if len(_SLOTS) >= 4:  # a worker's engines come one at a time: keep few arrays
            _SLOTS.clear()
        slots = Slots([engine.scene.body], engine.scene.static_body, engine.dt_s, flight,
                      rest, n_steps, guard, whole=True, contacts=contacts)
        _SLOTS[key] = slots
    slots.horizon(n_steps)
    return slots
