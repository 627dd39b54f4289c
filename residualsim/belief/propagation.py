"""Beliefs through contact: a Gaussian-mixture particle filter from event to event.

The beliefs themselves (tangent coordinates, mixtures) are in :mod:`.mixture`.

The *dynamic stochastic step* (:func:`stochastic_step`) goes from the end of one contact
event to the end of the next: draw m particles from the mixture, simulate each with the
engine through free flight to its next contact event, apply a sampled residual impulse
there (:func:`~residualsim.sim.rollout.residual_rollout`), reject particles that penetrate the
table by more than ``penetration_tolerance_m`` or whose total energy rose across the event
beyond the contact guard's limit (:meth:`~residualsim.sim.rollout.ContactGuard.energy_budget_j`,
which allows for rounding: a residual the guard clamped to the limit is kept), and refit
the mixture (scikit-learn :class:`~sklearn.mixture.GaussianMixture`, components chosen by
BIC or fixed). :func:`propagate_belief` chains the steps.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from residualsim.belief.mixture import (PENETRATION_TOLERANCE_M, BeliefStep,
                                        GaussianMixtureBelief, StateTangent, event_outcome,
                                        slot_particles)
from residualsim.errors import ParameterError

__all__ = ["StateTangent", "GaussianMixtureBelief", "BeliefStep", "stochastic_step",
           "propagate_belief", "PENETRATION_TOLERANCE_M", "METHODS", "slot_particles"]


def _to_next_event(engine, state: np.ndarray, max_steps: int, policy, rng, guard,
                   penetration_tolerance_m: float) -> tuple:
    """One particle to the end of its next contact event: (status, post state, steps).
    status: "ok", "no_event", "penetration" or "energy" (:func:`.mixture.event_outcome`)."""
    from residualsim.sim.rollout import residual_rollout

    run = residual_rollout(engine, state, max_steps, policy, rng, guard, stop_after_events=1)
    status, _ = event_outcome(engine, run, guard, penetration_tolerance_m)
    return status, run.states[-1], len(run.states) - 1


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


def _particle_tasks(engine, slot: int, request: _StepRequest) -> list:
    return [(index, _to_next_event(engine, state, request.max_steps, request.policy, rng,
                                   request.guard, request.penetration_tolerance_m))
            for index, state, rng in slot_particles(engine, slot, request)]


def stochastic_step(workers, model, belief: GaussianMixtureBelief, n_particles: int,
                    rng: np.random.Generator, max_steps: int, residual: bool = True,
                    deterministic_residual: bool = False,
                    penetration_tolerance_m: float = PENETRATION_TOLERANCE_M,
                    n_components: int | str = "bic"
                    ) -> BeliefStep:
    """The dynamic stochastic step from ``belief`` (see the module docstring).

    ``workers`` a :class:`~residualsim.parallel.ShardedWorkers` whose items are the slot
    indices ``0..n_workers-1`` at the ``model``'s settings (see :func:`propagate_belief`);
    ``model`` a :class:`~residualsim.residual.policy.ResidualModel` (engine parameters, policy,
    contact guard; ``residual=False``: the engine alone). The residual of particle i is
    drawn from ``default_rng([seed, i])``, ``seed`` drawn from ``rng``
    (``deterministic_residual``: the policy mean). ``max_steps`` recording periods bound
    the search for the next event.
    """
    states = belief.sample(int(n_particles), rng)
    base = int(rng.integers(2 ** 63))
    request = _StepRequest(
        n_slots=len(workers.items), states=states,
        seeds=None if deterministic_residual else [[base, i] for i in range(len(states))],
        params=model.params, policy=model.sampling_policy() if residual else None,
        guard=model.guard, max_steps=int(max_steps),
        penetration_tolerance_m=float(penetration_tolerance_m))
    results = dict(pair for chunk in workers.map(_particle_tasks, request) for pair in chunk)
    outcomes = [results[i] for i in range(len(states))]
    statuses = [status for status, _, _ in outcomes]
    accepted = [(state, steps) for status, state, steps in outcomes if status == "ok"]
    particles = np.array([state for state, _ in accepted]).reshape(-1, states.shape[1])
    refit = None
    if len(particles) >= 2:
        refit = GaussianMixtureBelief.fit(particles, belief.tangent.planar, n_components,
                                          rng=int(rng.integers(2 ** 31)))
    return BeliefStep(belief=refit, particles=particles,
                      elapsed_s=np.array([steps * model.dt_s for _, steps in accepted]),
                      n_drawn=len(states), n_no_event=statuses.count("no_event"),
                      n_rejected_penetration=statuses.count("penetration"),
                      n_rejected_energy=statuses.count("energy"))


#: The belief steps :func:`propagate_belief` offers, the default first.
METHODS = ("particles", "conjugate")


def propagate_belief(model, initial: GaussianMixtureBelief, n_events: int = 3,
                     n_particles: int = 1000, horizon_s: float = 2.0, seed: int = 0,
                     n_workers: int = 1, workers=None, method: str = METHODS[0],
                     **step_options: Any) -> list[BeliefStep]:
    """Chain belief steps over ``n_events`` contact events with a
    :class:`~residualsim.residual.policy.ResidualModel`, starting from ``initial``.

    ``method``: "particles" (:func:`stochastic_step`, ``n_particles`` per step) or
    "conjugate" (:func:`residualsim.belief.conjugate.conjugate_step`: sigma points and the
    residual's Gaussians added exactly; ``n_particles`` unused). Stops early when a step
    leaves no belief. ``horizon_s`` bounds the time searched for each event;
    ``step_options`` go to the step function. ``workers``: running
    :class:`~residualsim.parallel.ShardedWorkers` over slot indices at the model's settings
    to reuse (else ``n_workers`` are started for this call). Seeded: the same seed gives the
    same steps for any number of workers."""
    import contextlib

    from residualsim.sim.pool import engine_workers

    if method not in METHODS:
        raise ParameterError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if int(n_events) < 1 or (method == "particles" and int(n_particles) < 2):
        raise ParameterError(f"need n_events >= 1 and n_particles >= 2, got {n_events} and "
                             f"{n_particles}")
    planar = model.policy.n_outputs == 2  # (normal, tangent): a planar contact
    if initial.tangent.planar != planar:
        raise ParameterError(f"a {'planar' if initial.tangent.planar else '3D'} belief cannot "
                             f"run the {'planar' if planar else '3D'} model {model.scene!r}")
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
    slots = list(range(max(1, int(n_workers))))
    with contextlib.nullcontext(workers) if workers is not None else \
            engine_workers(model.scene, slots, len(slots), settings) as workers:
        for _ in range(int(n_events)):
            step = step_once(belief)
            steps.append(step)
            if step.belief is None:
                break
            belief = step.belief
    return steps
