"""Beliefs through contact: a Gaussian-mixture particle filter from event to event.

The beliefs themselves (tangent coordinates, mixtures) are in :mod:`.mixture`.

The *dynamic stochastic step* (:func:`stochastic_step`) goes from the end of one contact
event to the end of the next: draw m particles from the mixture, simulate each with the
engine through free flight to its next contact event, apply a sampled residual impulse
there (:func:`~residualsim.sim.rollout.residual_rollout`), reject particles that penetrate the
table by more than ``penetration_tolerance_m`` or whose total energy rose across the event
beyond the contact guard's limit (:meth:`~residualsim.sim.rollout.ContactGuard.energy_budget_j`,
which allows for rounding: a residual the guard clamped to the limit is kept), and refit
the mixture (scikit-learn's GaussianMixture fit, run by :func:`.reduction.em_refine`;
components chosen by BIC or fixed). :func:`propagate_belief` chains the steps.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from residualsim.belief.mixture import (PENETRATION_TOLERANCE_M, BeliefStep,
                                        GaussianMixtureBelief, StateTangent, check_batch_size,
                                        event_outcome, event_outcomes, slot_particles)
from residualsim.belief.sharing import batched_first_events, lone_share, map_shared
from residualsim.errors import DataError, ParameterError

__all__ = ["StateTangent", "GaussianMixtureBelief", "BeliefStep", "stochastic_step",
           "propagate_belief", "PENETRATION_TOLERANCE_M", "METHODS", "slot_particles",
           "MAX_HORIZON_S", "check_seed"]

#: Longest horizon (s of simulated time) :func:`propagate_belief` searches for an event and
#: :meth:`~residualsim.belief.simulator.StochasticSimulator.rollout` simulates: an hour, far
#: beyond a toss; an infinite horizon is refused, not overflowed.
MAX_HORIZON_S = 3600.0


def check_seed(seed) -> None:
    """ParameterError unless ``seed`` is an integer >= 0 (numpy's generators take no other)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ParameterError(f"seed must be an integer >= 0, got {seed!r}")


def _check_count(name: str, value, least: int, most: int | None = None) -> int:
    """``value`` as an int, or a ParameterError naming ``name`` (NaN, 2.5, "3", < least,
    > most)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer, float, np.floating)) \
            or not np.isfinite(value) or value != int(value) or value < least \
            or (most is not None and value > most):
        span = f">= {least}" if most is None else f"from {least} to {most}"
        raise ParameterError(f"{name} must be an integer {span}, got {value!r}")
    return int(value)


def check_workers(n_workers) -> int:
    """``n_workers`` as an int from 1 to :data:`~residualsim.parallel.MAX_WORKERS` (what
    ``--workers`` takes), or a ParameterError naming it (0 was taken as 1)."""
    from residualsim.parallel import MAX_WORKERS

    return _check_count("n_workers", n_workers, 1, MAX_WORKERS)


#: Bytes a particle step holds per particle at the least: its draw in the tangent space and
#: its state (float64), as the step samples them all at once.
PARTICLE_BYTES_PER_DIMENSION = 8 * 2


def _check_particle_memory(n_particles: int, state_size: int) -> None:
    """A ParameterError naming ``n_particles`` when the draws alone of one particle step
    (``state_size`` floats each) would not fit in the memory left (10^12 particles raised
    numpy's bare MemoryError for 87 TiB)."""
    from residualsim.parallel import require_memory

    require_memory(n_particles * int(state_size) * PARTICLE_BYTES_PER_DIMENSION,
                   lambda gib: f"n_particles = {n_particles} needs at least {gib:.3g} GiB for "
                               "its draws", "lower n_particles")


def _check_initial(scene: str, initial: GaussianMixtureBelief, engine=None,
                   name: str = "initial") -> None:
    """Each component's mean state must pass the checks of a hand-given start state
    (:func:`residualsim.sim.recordings.check_start_state`, in ``engine`` if given: finite,
    unit quaternion, on the table, at most 10 m above it, not into it, at most 20 m/s and
    500 rad/s), and the covariances must be finite: else a ParameterError naming ``name``."""
    from residualsim.sim.recordings import check_start_state

    if not np.isfinite(initial.covariances).all():
        raise ParameterError(f"{name}: the belief's covariances are not all finite")
    states = initial.tangent.from_tangent(np.asarray(initial.means, dtype=float))
    for k, state in enumerate(states):
        what = f"{name}: the belief's mean" if len(states) == 1 else \
            f"{name}: the belief's component {k} mean"
        if not np.isfinite(initial.means[k]).all():
            raise ParameterError(f"{what} is not finite: {initial.means[k].tolist()}")
        try:
            check_start_state(scene, state, what, engine)
        except DataError as exc:  # implausible: refused as the argument it is
            error = ParameterError(str(exc))
            error.reason = getattr(exc, "reason", str(exc))
            raise error from None


def _to_next_event(engine, state: np.ndarray, max_steps: int, policy, rng, guard,
                   penetration_tolerance_m: float) -> tuple:
    """One particle to the end of its next contact event: (status, post state, steps).
    status: "ok", "no_event", "penetration" or "energy" (:func:`.mixture.event_outcome`)."""
    return _lone_next_event(engine, state, max_steps, policy, rng, guard,
                            penetration_tolerance_m)[:3]


def _lone_next_event(engine, state: np.ndarray, max_steps: int, policy, rng, guard,
                     penetration_tolerance_m: float) -> tuple:
    """:func:`_to_next_event`, then the engine's steps and where they began (NaN: none)."""
    from residualsim.sim.rollout import residual_rollout

    run = residual_rollout(engine, state, max_steps, policy, rng, guard, stop_after_events=1)
    status, _ = event_outcome(engine, run, guard, penetration_tolerance_m)
    start = np.full(len(state), np.nan) if run.engine_start is None else run.engine_start
    return status, run.states[-1], len(run.states) - 1, run.engine_steps, start


@dataclasses.dataclass(frozen=True)
class _StepRequest:
    """What each worker needs to move its particles to their next events."""

    n_slots: int
    states: np.ndarray
    seeds: list | None
    params: Any  # EngineParams
    policy: Any
    guard: Any
    max_steps: int
    penetration_tolerance_m: float
    batch_size: int | None = None
    claims: Any = None  # WorkClaims over the particles (:mod:`.sharing`), or None
    only: tuple | None = None  # the particles left to run (None: all)


def _particle_tasks(engine, slot: int, request: _StepRequest) -> tuple:
    """Worker function: the particles of ``slot`` to their next events, as arrays in the
    order of their indices: (indices, statuses, post states, steps, engine steps, engine
    starts); in batched worlds (:func:`~residualsim.sim.batch.first_events`, the particles
    claimed as copies free up: :mod:`.sharing`) unless ``batch_size`` is 1 or the scene or
    policy needs the lone path (:func:`~residualsim.sim.batch.batch_unsupported`)."""
    indices = lone_share(engine, slot, request, request.policy)
    if indices is not None:
        runs = [_lone_next_event(engine, state, request.max_steps, request.policy, rng,
                                 request.guard, request.penetration_tolerance_m)
                for _, state, rng in slot_particles(engine, slot, request)]
        width = request.states.shape[1]
        return (indices, [run[0] for run in runs],
                np.array([run[1] for run in runs]).reshape(-1, width),
                np.array([run[2] for run in runs], dtype=np.int64),
                np.array([run[3] for run in runs], dtype=np.int64),
                np.array([run[4] for run in runs]).reshape(-1, width))
    indices, runs = batched_first_events(engine, slot, request, request.policy, request.seeds)
    return (indices, event_outcomes(engine.scene, runs, request.guard,
                                    request.penetration_tolerance_m),
            runs.post_states, runs.samples, runs.engine_steps, runs.engine_starts)


def stochastic_step(workers, model, belief: GaussianMixtureBelief, n_particles: int,
                    rng: np.random.Generator, max_steps: int, residual: bool = True,
                    deterministic_residual: bool = False,
                    penetration_tolerance_m: float = PENETRATION_TOLERANCE_M,
                    n_components: int | str = "bic", batch_size: int | None = None
                    ) -> BeliefStep:
    """The dynamic stochastic step from ``belief`` (see the module docstring).

    ``workers`` a :class:`~residualsim.parallel.ShardedWorkers` whose items are the slot
    indices ``0..n_workers-1`` at the ``model``'s settings (see :func:`propagate_belief`);
    ``model`` a :class:`~residualsim.residual.model.ResidualModel` (engine parameters, policy,
    contact guard; ``residual=False``: the engine alone). The residual of particle i is
    drawn from ``default_rng([seed, i])``, ``seed`` drawn from ``rng``
    (``deterministic_residual``: the policy mean). ``max_steps`` recording periods bound
    the search for the next event.

    ``batch_size``: copies of the body each worker steps in one PyBullet world
    (:mod:`residualsim.sim.batch`; None: :data:`~residualsim.sim.batch.AUTO_BATCH`), 1:
    one particle at a time (:func:`~residualsim.sim.rollout.residual_rollout`). Scenes and
    policies the batch does not support (planar and articulated bodies, scene files,
    sustained-contact residuals, hidden-impact guards) take the one-at-a-time path
    whatever ``batch_size`` says. Both give each particle the same run: the same status,
    steps and post-event position bit for bit, the velocity within rounding of the
    residual's correction (the tests hold it to 1e-9 m/s and rad/s).
    """
    batch_size = check_batch_size(batch_size)
    states = belief.sample(int(n_particles), rng)
    base = int(rng.integers(2 ** 63))
    request = _StepRequest(
        n_slots=len(workers.items), states=states,
        seeds=None if deterministic_residual else [[base, i] for i in range(len(states))],
        params=model.params, policy=model.sampling_policy() if residual else None,
        guard=model.guard, max_steps=int(max_steps),
        penetration_tolerance_m=float(penetration_tolerance_m),
        batch_size=batch_size)
    start = time.perf_counter()
    chunks = map_shared(workers, _particle_tasks, request)
    rollout_s = time.perf_counter() - start
    order = np.argsort(np.concatenate([chunk[0] for chunk in chunks]).astype(np.int64))
    statuses = np.array([s for chunk in chunks for s in chunk[1]], dtype=object)[order]
    post, steps, stepped, starts = (np.concatenate([chunk[k] for chunk in chunks])[order]
                                    for k in range(2, 6))
    ok = statuses == "ok"
    particles = post[ok].reshape(-1, states.shape[1])
    statuses = statuses.tolist()
    refit = None
    if len(particles) >= 2:
        refit = GaussianMixtureBelief.fit(particles, belief.tangent.planar, n_components,
                                          rng=int(rng.integers(2 ** 31)), workers=workers)
    return BeliefStep(belief=refit, particles=particles,
                      elapsed_s=np.array([k * model.dt_s for k in steps[ok].tolist()]),
                      n_drawn=len(states), n_no_event=statuses.count("no_event"),
                      n_rejected_penetration=statuses.count("penetration"),
                      n_rejected_energy=statuses.count("energy"),
                      engine_steps=int(stepped.sum()), engine_runs=(starts, stepped),
                      rollout_s=rollout_s)


#: The belief steps :func:`propagate_belief` offers, the default first.
METHODS = ("particles", "conjugate")


def propagate_belief(model, initial: GaussianMixtureBelief, n_events: int = 3,
                     n_particles: int = 1000, horizon_s: float = 2.0, seed: int = 0,
                     n_workers: int = 1, workers=None, method: str = METHODS[0],
                     **step_options: Any) -> list[BeliefStep]:
    """Chain belief steps over ``n_events`` contact events with a
    :class:`~residualsim.residual.model.ResidualModel`, starting from ``initial``.

    ``method``: "particles" (:func:`stochastic_step`, ``n_particles`` per step) or
    "conjugate" (:func:`residualsim.belief.conjugate.conjugate_step`: sigma points and the
    residual's Gaussians added exactly; ``n_particles`` unused). Stops early when a step
    leaves no belief. ``horizon_s`` bounds the time searched for each event;
    ``step_options`` go to the step function (either step's ``batch_size``: bodies per
    PyBullet world in its rollouts, None automatic, 1 one at a time). ``workers``: running
    :class:`~residualsim.parallel.ShardedWorkers` over slot indices at the model's settings
    to reuse (else ``n_workers`` are started for this call). Seeded: the same seed gives the
    same steps for any number of workers.

    Checked up front, each a ParameterError naming the argument (the checks ``rollout
    --state`` and :class:`~residualsim.belief.simulator.StochasticSimulator` apply):
    ``n_events`` an integer >= 1, ``n_workers`` from 1 to
    :data:`~residualsim.parallel.MAX_WORKERS` (unless ``workers`` are given),
    ``n_particles`` >= 2 (particles; refused too when its
    draws alone would not fit in the memory left), ``horizon_s`` in
    (0, :data:`MAX_HORIZON_S`], ``seed`` an integer >= 0, and every component mean of
    ``initial`` a finite, plausible start state (on the table, not into it, at most 10 m
    above it, 20 m/s, 500 rad/s; :func:`~residualsim.sim.implausible.allow_implausible`
    lets the implausible through with a warning)."""
    import contextlib

    from residualsim.sim.pool import engine_workers

    if method not in METHODS:
        raise ParameterError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    n_events = _check_count("n_events", n_events, 1)
    if workers is None:
        n_workers = check_workers(n_workers)
    if method == "particles":
        n_particles = _check_count("n_particles", n_particles, 2)
    if isinstance(horizon_s, bool) or not isinstance(horizon_s, (int, float, np.number)) \
            or not 0 < horizon_s <= MAX_HORIZON_S:
        raise ParameterError(f"horizon_s must be in (0, {MAX_HORIZON_S:g}] s, got "
                             f"{horizon_s!r}")
    check_seed(seed)
    if not isinstance(initial, GaussianMixtureBelief):
        raise ParameterError(f"initial must be a GaussianMixtureBelief, got "
                             f"{type(initial).__name__}")
    planar = model.policy.n_outputs == 2  # (normal, tangent): a planar contact
    if initial.tangent.planar != planar:
        raise ParameterError(f"a {'planar' if initial.tangent.planar else '3D'} belief cannot "
                             f"run the {'planar' if planar else '3D'} model {model.scene!r}")
    _check_initial(model.layout, initial)
    if method == "particles":
        _check_particle_memory(n_particles, initial.means.shape[-1])
    if method == "conjugate":
        from residualsim.belief.conjugate import conjugate_step

        def step_once(belief):
            return conjugate_step(workers, model, belief, rng, max_steps, **step_options)
    else:
        def step_once(belief):
            return stochastic_step(workers, model, belief, n_particles, rng, max_steps,
                                   **step_options)
    settings = model.settings()
    max_steps = max(1, int(round(horizon_s / settings.dt_s)))
    rng = np.random.default_rng(seed)
    steps: list[BeliefStep] = []
    belief = initial
    slots = list(range(n_workers if workers is None else 1))
    with contextlib.nullcontext(workers) if workers is not None else \
            engine_workers(model.layout, slots, len(slots), settings) as workers:
        for _ in range(int(n_events)):
            step = step_once(belief)
            steps.append(step)
            if step.belief is None:
                break
            belief = step.belief
    return steps
