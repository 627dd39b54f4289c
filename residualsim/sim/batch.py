"""Batched particle rollouts: many copies of one free rigid body in one PyBullet world.

:func:`first_events` moves particles (states of a single free rigid body: the cube scenes)
each to the end of its first contact event, what
:func:`~residualsim.sim.rollout.residual_rollout` does for one particle with
``stop_after_events=1``, with up to ``batch_size`` copies of the body in one world: one
``stepSimulation`` call steps them all and one ``getContactPoints`` call reads every
contact. A particle that meets its event (or rests, or reaches the horizon) leaves the
world (parked 1 km up beyond the table's edge) and the next one takes its copy (the next
given, or with ``claims`` the next claimed from the work shared with other workers). The events'
corrections (contact model M_c = (J M⁻¹ Jᵀ)⁻¹ and v_c, the residual's impulses, the
normal-velocity cap and the energy clamp) are computed for all particles at once at the
end (:mod:`.batch_events`): a particle stops right after its event, so its corrected
velocity never goes back into the world.

:func:`batched_rollouts` runs whole rollouts through the same loop (``predict --samples``
with ``--batch-size``): no stop after the first event; each event is corrected when it
happens, on its copy, by the lone path's own
:class:`~residualsim.sim.corrector.EventCorrector` (its residual drawn from the particle's
own generator), so the rollout equals the lone one bit for bit; every flight goes through
:meth:`FreeFlight.fly` (every sample is recorded) and rest repeats the last sample to the
horizon. It saves no time: a whole toss is mostly sustained contact, whose engine steps
(~85 µs a body-step at 5 substeps, 75 % of a lone rollout) cost the same per body alone or
among copies (train/README.md §10).

Free flight stays in closed form (:class:`~residualsim.sim.skips.FreeFlight`), as the lone
path has it: the handover sample of every particle is searched with numpy (about 12 µs a
particle, where stepping the 30-60 flight samples in the world would cost a body-step of
3-4 µs each and change the result: the closed form and the engine agree to 1e-15, not bit
for bit); the engine steps only from 3 cm above the table.

Same physics per particle:

* The copies share the same place and never touch: collision filters (group 1, mask the
  static body's group) leave each copy colliding with the table only. Bullet then steps
  each copy bit for bit as a lone body in its own world (measured on 200 tumbling cubes
  over 60 steps). Spreading the copies 0.5 m apart instead changed the trajectories by up
  to 2 mm: rounding of the absolute position, grown by tumbling contact. Sharing the place
  costs broadphase pairs quadratic in the copies in the world, hence a bounded batch
  (:data:`AUTO_BATCH`).
* Each particle runs the lone loop's own logic: its resets (park far away, one collision
  pass, place), the handover sample recomputed and checked with the lone path's float
  operations, rest detection, the new-point memory, the minimum approach speed, the stop
  after its first event. Steps, statuses, positions and the pre-event state come out bit
  for bit as the lone path's.
* The corrections follow :class:`~residualsim.sim.corrector.EventCorrector`'s formulas,
  summed in another order (numpy row by row, where the lone corrector uses BLAS
  matrix-vector products), so the post-event velocities differ from the lone path's by
  rounding (up to 4e-14 m/s and rad/s measured; the tests hold them to 1e-9). No
  operation mixes rows, so a particle's result does not depend on which particles share
  its world or its call: the same seeds give the same particles for any batch size and
  any number of workers, bit for bit.
* The residual of particle i is drawn from ``numpy.random.default_rng(seeds[i])`` as
  :meth:`~residualsim.residual.policy.NumpyPolicy.sample` draws it (one uniform, then k
  normals).

With ``RESIDUALSIM_COMPILED`` on, both take ``_compiled_loop``: the same loop with its
per-step, per-copy work in a numba kernel over Bullet's C API (:mod:`.batch_compiled`).
This module is over 600 lines because the Python loop and the compiled loop's driver share
their admission, placement, check and event helpers and stay side by side, so that a change
to the lone loop's logic meets both.

Supported (:func:`batch_unsupported`): 3D single free bodies of a registry scene whose
state is the base pose and velocity (the cube scenes), without a sustained-contact policy
or hidden-impact events. Everything else (planar and articulated bodies, scene files)
keeps the lone path; the belief step and the predictions fall back to it by themselves.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque

import numpy as np

from residualsim.parallel import paused_gc
from residualsim.parallel.claims import WorkClaims
from residualsim.sim.bullet import pb
from residualsim.sim.batch_events import EventModels, correct_events, event_models
from residualsim.sim.contact import MEMORY_STEPS, far_from
from residualsim.sim.corrector import EventCorrector, rollout_record
from residualsim.sim.engine import Engine
from residualsim.sim.batch_flight import flights
from residualsim.sim.particle import Particle, body_first
from residualsim.sim.skips import CHECK_EVERY

__all__ = ["FirstEvents", "first_events", "batched_rollouts", "batch_unsupported",
           "AUTO_BATCH"]

#: Copies in one world when the caller leaves the batch size to us. The broadphase pairs of
#: copies in one place grow with its square: at 5 substeps a body-step of cubes near the
#: table cost 25 µs alone, 15 µs in 8 copies, 20 µs in 32, 25 µs in 64 and 44 µs in 128;
#: whole particle steps (3 contacts of a validation toss, 500 particles) ran 20 % slower
#: with 8 copies than with 16, and within the busy machine's noise of 16 with 24 to 48.
AUTO_BATCH = 16
_PARK_M = 1000.0  # parking height, m, as the lone path's reset puts its body far away
_PARK_SPACING_M = 3.0  # parked copies side by side along x, m: their boxes never overlap


@dataclasses.dataclass(frozen=True)
class FirstEvents:
    """Each particle's run to the end of its first contact event (n particles).

    ``n_events`` (n,) 0 or 1; ``engine_gain`` (n,) whether the engine's own step of the
    event had gained energy beyond the guard's limit; ``max_penetration_m`` (n,) m the
    deepest penetration seen (>= 0); ``pre_states`` and ``post_states`` (n, state size) the
    last two samples (the state before the event's step and after it, residual applied:
    ``run.states[-2]`` and ``run.states[-1]`` of the lone path; a particle without an event
    may hold NaN where its lone run held a flight sample); ``samples`` (n,) the run's
    length in recording periods (``len(run.states) - 1``); ``engine_steps`` (n,) the
    periods the engine stepped (the rest flew in closed form or rested);
    ``engine_starts`` (n, state size) where the engine began (NaN: it never stepped);
    ``indices`` (n,) which of the given states each row is (all of them, in order, unless
    the particles were claimed: :func:`first_events`' ``claims``).
    With an observing policy (``observes_only``: nothing is applied at the event)
    ``models`` are the events' contact models
    (:class:`~residualsim.sim.batch_events.EventModels`) and ``touching`` their touching
    points (contact tuples, the body as A), both for the particles with an event in order
    (``numpy.flatnonzero(n_events)``); else None.
    """

    n_events: np.ndarray
    engine_gain: np.ndarray
    max_penetration_m: np.ndarray
    pre_states: np.ndarray
    post_states: np.ndarray
    samples: np.ndarray
    engine_steps: np.ndarray
    engine_starts: np.ndarray
    models: EventModels | None = None
    touching: tuple | None = None
    indices: np.ndarray | None = None


def batch_unsupported(scene, policy, guard) -> str | None:
    """Why particles of ``scene`` with ``policy`` and ``guard`` cannot go through
    :func:`first_events`, or None when they can."""
    from residualsim.sim.scenes.cube import CubeScene

    if not isinstance(scene, CubeScene):
        return f"scene {scene.name!r} is not a single free body with a base-pose state"
    if getattr(policy, "coefficients", None) is not None:
        return "a sustained-contact policy sets coefficients at every contact step"
    if guard.hidden_impact_mps is not None:
        return "hidden-impact events need a closest-point query per particle"
    return None


class _World:
    """``capacity`` copies of the engine's body (and one staging copy that collides with
    nothing) in one DIRECT client at the engine's settings and parameters."""

    def __init__(self, engine: Engine, capacity: int) -> None:
        scene = engine.scene
        self.key = (scene.name, scene.settings, engine.params)
        self.engine = Engine(scene.name, engine.params, scene.settings)
        self.scene, cid = self.engine.scene, self.engine.client
        self.flight = self.engine.free_flight(True)  # before any copy moves: it moves one
        self.rest = self.engine.rest_detector(True) is not None
        first = self.scene.body
        bodies = [first] + [self._load() for _ in range(capacity)]
        for body in bodies:
            self.scene.use_body(body)
            self.scene.apply_params(engine.params)
            pb.setCollisionFilterGroupMask(body, -1, 1, 2, physicsClientId=cid)
        self.scene.use_body(first)
        self.staging = bodies.pop()
        pb.setCollisionFilterGroupMask(self.staging, -1, 1, 0, physicsClientId=cid)
        self.copies = bodies
        # Parked copies fall while the others step: side by side beyond the table's edge,
        # never onto it (a copy that fell onto it from 1 km made every step cost 5x).
        edge = pb.getAABB(self.scene.static_body, -1, physicsClientId=cid)[1][0]
        self.spot = {body: edge + _PARK_SPACING_M * (k + 1)
                     for k, body in enumerate(bodies + [self.staging])}
        self.park_all()

    def park_all(self) -> None:
        """Every copy parked at rest, and a collision pass to drop their contacts."""
        for body in self.spot:
            self.park(body)
        pb.performCollisionDetection(physicsClientId=self.engine.client)

    def _load(self) -> int:
        from residualsim.sim.scenes.base import load_urdf

        cid = self.engine.client
        body = load_urdf(cid, self.scene.urdf, basePosition=[0, 0, 1],
                         flags=pb.URDF_USE_INERTIA_FROM_FILE)
        pb.changeDynamics(body, -1, linearDamping=0.0, angularDamping=0.0,
                          physicsClientId=cid)  # as the scene builds its own body
        return body

    def park(self, body: int) -> None:
        """Put a copy far away at rest (its contacts go at the next collision pass)."""
        cid = self.engine.client
        pb.resetBasePositionAndOrientation(body, [self.spot[body], 0.0, _PARK_M],
                                           [0.0, 0.0, 0.0, 1.0],
                                           physicsClientId=cid)
        pb.resetBaseVelocity(body, [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], physicsClientId=cid)

    def close(self) -> None:
        self.engine.close()


_CACHE: list = []  # the process's one world, reused while engine, settings and size fit


def _world(engine: Engine, capacity: int) -> _World:
    key = (engine.scene.name, engine.scene.settings, engine.params)
    if _CACHE and _CACHE[0].key == key and len(_CACHE[0].copies) >= capacity:
        return _CACHE[0]
    while _CACHE:
        _CACHE.pop().close()
    _CACHE.append(_World(engine, capacity))
    return _CACHE[0]


def first_events(engine: Engine, states: np.ndarray, n_steps: int, policy, seeds, guard,
                 batch_size: int | None = None, claims: WorkClaims | None = None
                 ) -> FirstEvents:
    """Each of ``states`` (n, state size; scene layout, world frame) to the end of its first
    contact event within ``n_steps`` recording periods, in batches of ``batch_size`` copies
    of ``engine``'s body in one world (None: :data:`AUTO_BATCH`); see the module docstring.

    ``policy`` None (the engine alone), or a policy with ``sample(features, rng)`` and
    ``mean(features)`` (a :class:`~residualsim.residual.policy.NumpyPolicy` is evaluated for
    all events at once), or an observing one (``observes_only``: the events' contact models
    are returned, nothing applied); ``seeds`` None (the policy's mean) or one seed per
    particle for ``numpy.random.default_rng``; ``guard`` the
    :class:`~residualsim.sim.rollout.ContactGuard`. The world (kept for the next call in
    this process) has the engine's scene, settings and parameters. ``claims``: a
    :class:`~residualsim.parallel.claims.WorkClaims` over the states' rows shared with other
    workers: this call runs only the particles it takes from it, as copies free up (the
    result's ``indices`` say which), and ``seeds`` are for all the states. Raises ValueError
    when :func:`batch_unsupported` gives a reason."""
    reason = batch_unsupported(engine.scene, policy, guard)
    if reason is not None:
        raise ValueError(f"batched rollouts do not support this: {reason}")
    states = np.asarray(states, dtype=np.float64).reshape(-1, engine.scene.state_size)
    size = max(1, min(int(batch_size or AUTO_BATCH), len(states)))
    with paused_gc():  # the loop's tuples made it collect every few hundred ms
        world = _world(engine, size)
        world.park_all()
        return _results(world, _run(world, states, int(n_steps), guard, size, None, claims),
                        policy, seeds, guard)  # the particles freed before the collector is back


def batched_rollouts(engine: Engine, states: np.ndarray, n_steps: int, policy, rngs, guard,
                     batch_size: int | None = None) -> list:
    """Whole rollouts of ``states`` (n, state size; scene layout, world frame) over
    ``n_steps`` recording periods, what :func:`~residualsim.sim.rollout.residual_rollout`
    gives for each alone, with up to ``batch_size`` copies of ``engine``'s body in one world
    (None: :data:`AUTO_BATCH`). Each particle goes through every contact event of its
    horizon: its events are corrected as they happen (the corrected velocity goes back into
    its copy) by its own :class:`~residualsim.sim.corrector.EventCorrector`, drawing from
    ``rngs[i]`` (a numpy Generator per state, or ``rngs`` None: the policy's mean); flight,
    rest and the horizon as the lone loop has them. Returns a
    :class:`~residualsim.sim.corrector.ResidualRollout` per state, in order, equal to the
    lone path's (same float operations; tests/test_batch_trajectories.py). Raises ValueError
    when :func:`batch_unsupported` gives a reason."""
    reason = batch_unsupported(engine.scene, policy, guard)
    if reason is not None:
        raise ValueError(f"batched rollouts do not support this: {reason}")
    states = np.asarray(states, dtype=np.float64).reshape(-1, engine.scene.state_size)
    rngs = [None] * len(states) if rngs is None else list(rngs)
    if len(rngs) != len(states):
        raise ValueError(f"{len(states)} states but {len(rngs)} random streams")
    size = max(1, min(int(batch_size or AUTO_BATCH), len(states)))
    with paused_gc():
        world = _world(engine, size)
        world.park_all()
        correctors = [EventCorrector(world.engine, policy, rng, guard) for rng in rngs]
        particles = _run(world, states, int(n_steps), guard, size, correctors)
        return [rollout_record(world.scene, p.raws, policy, p.correct, p.deepest, p.stepped,
                               p.first_raw if p.stepped else None) for p in particles]


def _run(world: _World, states: np.ndarray, n_steps: int, guard, size: int,
         correctors: list | None, claims: WorkClaims | None = None) -> list:
    """The particles (:class:`~.particle.Particle`) of ``states`` (those taken from ``claims``, when
    given) run to their first events (``correctors`` None) or, with an event corrector per
    state, over the whole horizon, through the compiled loop (:mod:`.batch_compiled`, the
    same particles bit for bit) where :func:`~residualsim.sim.capi.compiled_reason` allows
    it."""
    from residualsim.sim.capi import compiled_reason

    scene, home = world.scene, world.scene.body
    try:
        if compiled_reason() is None:
            return _compiled_loop(world, states, n_steps, guard, size, claims, correctors)
        return _loop(world, states, n_steps, guard, size, correctors, claims)
    finally:
        scene.use_body(home)  # a whole rollout's corrector pointed it at each copy


def _admit(world: _World, states: np.ndarray, numbers: range, n_steps: int,
           correctors: list | None) -> list:
    """Particles ``numbers`` (rows of ``states``) made ready to queue: their first reset as
    the lone path reads it back (through the staging copy), the first check's closed-form
    flight (a whole rollout flies in :func:`_prepare`, every sample recorded) and where
    each is to be placed."""
    from residualsim.sim.skips import RestDetector

    scene, cid, flight = world.scene, world.engine.client, world.flight
    whole = correctors is not None
    placements, raws0 = _placements(states[numbers.start:numbers.stop]), []
    get_pose, get_velocity = pb.getBasePositionAndOrientation, pb.getBaseVelocity
    for position, quat, velocity, omega in placements:  # what the lone path reads after
        pb.resetBasePositionAndOrientation(world.staging, position, quat,  # its reset
                                           physicsClientId=cid)
        pb.resetBaseVelocity(world.staging, velocity, omega, physicsClientId=cid)
        raws0.append((get_pose(world.staging, physicsClientId=cid),
                      get_velocity(world.staging, physicsClientId=cid)))
    world.park(world.staging)
    flown = flights(flight, raws0, n_steps) if flight is not None and not whole \
        else [None] * len(raws0)
    particles = []
    for k, raw, tail, place in zip(numbers, raws0, flown, placements):
        particle = Particle(k, [raw], RestDetector(world.engine.dt_s) if world.rest else None,
                            correctors[k] if whole else None)
        particle.place = place
        if tail:  # the first check's flight: samples added, reset at the last one
            particle.index, particle.raws = tail[0], [raw] + tail[1]
        particles.append(particle)
    handed = [p for p in particles if p.index]
    for p, place in zip(handed, _placements(scene.raw_to_states([p.raws[-1] for p in handed]))):
        p.start = p.place = place
    return particles


class _Admission:
    """The particles not yet on a copy, and their placing, as both loops (:func:`_loop`,
    :func:`_compiled_loop`) do it: they come all at once, or run by run from the claims as
    copies free up (:func:`_admit`), and each is placed by the lone loop's top (its first
    check's flight, then the reset) until it steps or ends."""

    def __init__(self, world: _World, states: np.ndarray, n_steps: int,
                 correctors: list | None, claims: WorkClaims | None) -> None:
        self.world, self.states, self.n_steps = world, states, n_steps
        self.correctors = correctors
        self.runs = iter([range(len(states))]) if claims is None else \
            iter(claims.take, range(0))
        self.more, self.particles, self.queue = True, [], deque()

    @property
    def pending(self) -> bool:
        """Whether particles are still to be placed (queued, or runs still to claim)."""
        return bool(self.queue) or self.more

    def place(self, free: list, activate) -> None:
        """Put queued particles on the ``free`` copies (popped from its end) until either
        runs out; ``activate`` takes each placed particle."""
        world, whole = self.world, self.correctors is not None
        scene, cid, flight = world.scene, world.engine.client, world.flight
        while free and self.pending:
            if not self.queue:
                numbers = next(self.runs, None)
                if numbers is None:
                    self.more = False
                else:
                    admitted = _admit(world, self.states, numbers, self.n_steps,
                                      self.correctors)
                    self.particles += admitted
                    self.queue.extend(admitted)
                continue
            p = self.queue.popleft()
            index = p.index
            if not _prepare(p, flight, self.n_steps, first=not whole, fill=whole):
                continue
            if p.index != index:  # a (second) flight before its first step
                p.place = _placements(scene.raw_to_states(p.raws[-1:]))[0]
            p.body, p.start, p.reset = free.pop(), p.place, False
            p.first_raw = p.raws[-1]
            _reset(cid, p.body, p.start)
            activate(p)

    def restart(self, particles: list, activate) -> None:
        """A later flight's reset of each of ``particles`` (its copy has had a collision
        pass), at its last sample; ``activate`` takes each."""
        for p in particles:
            _reset(self.world.engine.client, p.body,
                   _placements(self.world.scene.raw_to_states(p.raws[-1:]))[0])
            activate(p)


def _reset(cid: int, body: int, place: tuple) -> None:
    """Put ``body`` at ``place`` as the lone path resets its body: position (m), quaternion
    (x, y, z, w), velocity (m/s) and angular velocity (rad/s), world frame."""
    pb.resetBasePositionAndOrientation(body, *place[:2], physicsClientId=cid)
    pb.resetBaseVelocity(body, *place[2:], physicsClientId=cid)


def _loop(world: _World, states: np.ndarray, n_steps: int, guard, size: int,
          correctors: list | None, claims: WorkClaims | None = None) -> list:
    scene, cid, flight = world.scene, world.engine.client, world.flight
    whole = correctors is not None
    limit = n_steps + 1 if whole else 1  # events after which a particle stops
    get_pose, get_velocity = pb.getBasePositionAndOrientation, pb.getBaseVelocity
    admission = _Admission(world, states, n_steps, correctors, claims)
    free, cooling = list(world.copies[:size]), []  # cooling: parked since the last pass
    active, waiting, replace = [], [], []  # waiting: parked for a reset; replace: cooled
    spacing2, every = guard.new_point_distance_m ** 2, guard.every_contact_step
    approach = guard.min_approach_mps
    longest = math.inf if whole else 4 * CHECK_EVERY  # raw records kept (a whole run: all)
    table, step, contacts_of = scene.static_body, pb.stepSimulation, pb.getContactPoints
    while admission.pending or active or waiting or replace:
        admission.place(free, active.append)  # the lone loop's top until each steps or ends
        admission.restart(replace, active.append)  # a later flight's reset, after a pass
        if active:
            step(cid)
        else:
            pb.performCollisionDetection(physicsClientId=cid)
        free += cooling
        cooling, replace, waiting = [], waiting, []
        touching: dict = {}  # copy -> (table first, touching points), as the world lists them
        for point in contacts_of(physicsClientId=cid) if active else ():
            if point[8] <= 1e-4 or point[9] > 0.0:  # contact.is_touching
                flip = point[1] == table
                touching.setdefault(point[2] if flip else point[1], (flip, []))[1].append(point)
        still = []
        # every copy's state read together, right after the step (PyBullet reads per body)
        reads = [(get_pose(p.body, cid), get_velocity(p.body, cid)) for p in active]
        for p, raw in zip(active, reads):
            body, raws = p.body, p.raws
            p.index += 1
            p.stepped += 1
            if body in touching:
                flip, mine = touching[body]
                on = 5 if flip else 6  # the point on the table
                deepest = -min([q[8] for q in mine])
                if deepest > p.deepest:
                    p.deepest = deepest
                recent = p.recent
                fresh = [q for q in mine if far_from(q[on], recent, spacing2)] if recent \
                    else mine
                if whole and (fresh or every):  # the lone loop's correction, on this copy
                    scene.use_body(body)
                    if p.correct(scene.raw_to_states([raws[-1]])[0],
                                 body_first(fresh or mine, flip), body_first(mine, flip)):
                        p.events += 1
                        if p.correct.policy is not None:
                            raw = (get_pose(body, cid), get_velocity(body, cid))
                elif not whole and ((fresh and _approaching(fresh, on, raws[-1], raw, approach))
                                    or every):
                    p.events, p.event = 1, (body_first(fresh or mine, flip),
                                            body_first(mine, flip))
                recent.append([q[on] for q in mine])
                if len(recent) > MEMORY_STEPS:
                    del recent[0]
            elif p.recent:
                p.recent = []
            raws.append(raw)
            if len(raws) > longest:
                del raws[:-(CHECK_EVERY + 2)]  # the rest check looks 6 samples back
            if p.events >= limit or ((p.index % CHECK_EVERY == 0 or p.index >= n_steps)
                                     and not _prepare(p, flight, n_steps, fill=whole)):
                world.park(body)
                cooling.append(body)
            elif p.reset:  # it flew: the lone path's reset, a collision pass away
                world.park(body)
                waiting.append(p)
                p.reset = False
            else:
                still.append(p)
        active = still
    return admission.particles


def _compiled_loop(world: _World, states: np.ndarray, n_steps: int, guard, size: int,
                   claims: WorkClaims | None = None, correctors: list | None = None) -> list:
    """:func:`_loop` with the per-step, per-copy work in the compiled kernel
    (:mod:`.batch_compiled`), which keeps the active copies and their order; Python sees
    only the copies that go back to it (an event, to be corrected on its copy in a whole
    rollout; rest, the horizon, a possible flight). The same particles, bit for bit."""
    from residualsim.sim.batch_compiled import (CHECK, CORRECT, EVENT, GOING, REST, Slots,
                                                run_kernel)
    from residualsim.sim.capi import client_handle

    scene, cid, flight = world.scene, world.engine.client, world.flight
    whole = correctors is not None
    handle = client_handle(cid, world.copies[0])
    slots = Slots(world.copies[:size], scene.static_body, world.engine.dt_s, flight,
                  world.rest, n_steps, guard, whole)
    get_pose, get_velocity = pb.getBasePositionAndOrientation, pb.getBaseVelocity
    admission = _Admission(world, states, n_steps, correctors, claims)
    free, cooling = list(world.copies[:size]), []
    waiting, replace = [], []
    exits, owner = slots.exits, slots.particle
    while admission.pending or slots.n_active or waiting or replace:
        admission.place(free, slots.activate)
        admission.restart(replace, slots.activate)
        if not slots.n_active:
            pb.performCollisionDetection(physicsClientId=cid)
            free += cooling
            cooling, replace, waiting = [], waiting, []
            continue
        # more than one step only while nothing waits for the top of the loop
        longest = 1 if (waiting or (cooling and admission.pending)) else 1 << 30
        left = run_kernel(handle, slots, longest, cid)
        free += cooling
        cooling, replace, waiting = [], waiting, []
        for s in left:
            p, code = owner[s], exits[s]
            exits[s] = GOING
            slots.unload(p, finished=code not in (CHECK, CORRECT))
            if code == EVENT:
                fresh, mine, flip = slots.event_points(s)
                p.events, p.event = 1, (body_first(fresh or mine, flip), body_first(mine, flip))
            elif code == REST:  # the lone path fills the rest with the last sample
                p.raws.extend([p.raws[-1]] * (n_steps - p.index))
                p.index = n_steps
            elif code == CORRECT:  # the lone loop's correction, on this copy
                fresh, mine, flip = slots.event_points(s)
                scene.use_body(p.body)
                if p.correct(scene.raw_to_states([p.raws[-2]])[0],
                             body_first(fresh or mine, flip), body_first(mine, flip)):
                    p.events += 1
                    if p.correct.policy is not None:
                        p.raws[-1] = (get_pose(p.body, cid), get_velocity(p.body, cid))
                if (p.index % CHECK_EVERY == 0 or p.index >= n_steps) and not _prepare(
                        p, flight, n_steps, fill=True):
                    slots.drop(s)
                elif p.reset:
                    slots.drop(s)
                    world.park(p.body)
                    waiting.append(p)
                    p.reset = False
                    continue
                else:
                    slots.load(p)  # it goes on, in its place
                    continue
            elif code == CHECK:
                if _prepare(p, flight, n_steps, fill=whole):
                    if not p.reset:
                        slots.load(p)  # it goes on, in its place
                        continue
                    slots.drop(s)
                    world.park(p.body)
                    waiting.append(p)
                    p.reset = False
                    continue
                slots.drop(s)
            world.park(p.body)
            cooling.append(p.body)
    return admission.particles


def _placements(states: np.ndarray) -> list:
    """Per state (scene layout) the arguments :meth:`CubeScene.set_state` gives PyBullet:
    (position, quaternion x-y-z-w normalised as it normalises it, velocity, angular
    velocity), lists of floats."""
    states = np.asarray(states, dtype=np.float64).reshape(-1, 13)
    quats = np.ascontiguousarray(states[:, 3:7])  # as set_state's contiguous copy rounds
    unit = quats / np.array([math.sqrt(q.dot(q)) for q in quats])[:, None]
    return list(zip(states[:, 0:3].tolist(), unit[:, [1, 2, 3, 0]].tolist(),
                    states[:, 7:10].tolist(), states[:, 10:13].tolist()))


def _prepare(p: Particle, flight, n_steps: int, first: bool = False,
             fill: bool = False) -> bool:
    """The top of the lone loop (:func:`~residualsim.sim.rollout.residual_rollout`) for one
    particle: the flight and rest checks every ``CHECK_EVERY`` samples, until it is to step
    (True) or has ended (False: the horizon, or at rest). ``first``: the first check's
    flight was done already (:func:`~.batch_flight.flights`); ``fill``: a body at rest
    repeats its last sample to the horizon (a whole rollout's records)."""
    while p.index < n_steps:
        if p.index % CHECK_EVERY == 0 and not (first and p.index == 0):
            last = p.raws[-1]
            if flight is not None and flight.clear(last[0]):
                extra = tuple(last[2:])
                added = [record + extra for record in
                         flight.fly(last[0], last[1], n_steps - p.index)]
                if added:
                    p.raws.extend(added)
                    p.index += len(added)
                    p.recent, p.reset = [], True
                    first = False
                    continue
            if p.rest is not None and p.index >= CHECK_EVERY and p.rest.at_rest(
                    last[0], p.raws[-2][0], p.raws[-1 - CHECK_EVERY][0]):
                if fill:
                    p.raws.extend([last] * (n_steps - p.index))
                p.index = n_steps  # the lone path fills the rest with the last sample
                return False
        first = False
        if p.index < n_steps:
            return True
    return False


def _approaching(points: list, on: int, pre: tuple, post: tuple, min_approach_mps: float
                 ) -> bool:
    """Whether the event's contact point (the normal-force-weighted mean of the new
    ``points``, contact tuples whose point on the table is at ``on``: 6 as
    ``getContactPoints(body, table)`` lists them, 5 with the table as body A and the normal
    reversed; equal weights without force; at the post-step centre ``post``) approached the
    table along the mean normal faster than ``min_approach_mps`` before the step (raw
    record ``pre``): the corrector's event test, in plain floats."""
    px = py = pz = nx = ny = nz = total = 0.0
    forced = any(q[9] > 0.0 for q in points)
    for q in points:
        weight = max(q[9], 0.0) if forced else 1.0
        (x, y, z), (a, b, c) = q[on], q[7]
        px, py, pz = px + weight * x, py + weight * y, pz + weight * z
        nx, ny, nz, total = nx + weight * a, ny + weight * b, nz + weight * c, total + weight
    (cx, cy, cz), _ = post[0]
    rx, ry, rz = px / total - cx, py / total - cy, pz / total - cz
    (vx, vy, vz), (wx, wy, wz) = pre[1]
    speed = (nx * (vx + wy * rz - wz * ry) + ny * (vy + wz * rx - wx * rz)
             + nz * (vz + wx * ry - wy * rx)) / math.sqrt(nx * nx + ny * ny + nz * nz)
    return not (-speed if on == 5 else speed) > -min_approach_mps


def _results(world: _World, particles: list, policy, seeds, guard) -> FirstEvents:
    scene, size = world.scene, world.scene.state_size
    seeds = None if seeds is None else [seeds[p.number] for p in particles]
    last = scene.raw_to_states([r for p in particles for r in (
        p.raws[-2] if len(p.raws) > 1 else p.raws[-1], p.raws[-1])]).reshape(-1, 2, size)
    post, gain = last[:, 1], np.zeros(len(particles), dtype=bool)
    owners = [k for k, p in enumerate(particles) if p.event is not None]
    models = touching = None
    if owners and getattr(policy, "observes_only", False):  # describe the events, apply nothing
        touching = tuple(particles[k].event[1] for k in owners)
        models = event_models(scene, last[owners, 0], last[owners, 1],
                              [particles[k].event[0] for k in owners], list(touching), policy)
    elif owners:
        post[owners], gain[owners] = correct_events(
            scene, world.engine.dt_s, last[owners, 0], last[owners, 1],
            [particles[k].event[0] for k in owners], [particles[k].event[1] for k in owners],
            owners, policy, seeds, guard)
    starts = np.full((len(particles), size), np.nan)
    for k, p in enumerate(particles):
        if p.stepped:
            position, (x, y, z, w), velocity, omega = p.start
            starts[k] = [*position, w, x, y, z, *velocity, *omega]
    return FirstEvents(
        n_events=np.array([p.events for p in particles], dtype=np.int64),
        engine_gain=gain, max_penetration_m=np.array([p.deepest for p in particles]),
        pre_states=last[:, 0], post_states=post,
        samples=np.array([p.index for p in particles], dtype=np.int64),
        engine_steps=np.array([p.stepped for p in particles], dtype=np.int64),
        engine_starts=starts, models=models, touching=touching,
        indices=np.array([p.number for p in particles], dtype=np.int64))
