"""The conjugate step's rollouts: each draw to the end of its next contact event, engine
alone, with the event's contact model (:mod:`.conjugate`, step 2).

A worker runs its draws in batched worlds (:func:`~residualsim.sim.batch.first_events`,
up to ``batch_size`` copies of the body stepped by one ``stepSimulation``), as the particle
step runs its particles, with :class:`EventProbe` as the policy: nothing is applied at the
event, and the events' contact models come back computed for all draws at once
(:func:`~residualsim.sim.batch_events.event_models`). ``batch_size`` 1, and the scenes the
batch does not support (planar and articulated bodies, scene files, sustained-contact
residuals, hidden-impact guards), take the lone path: one
``residual_rollout(..., stop_after_events=1)`` per draw (:func:`sigma_outcome`).

Both give each draw the same run: status, steps, engine steps and the post-event state bit
for bit (the probe applies nothing, so no correction rounds differently), and the event's
description (features, M⁻¹Jᵀ, J q̇, J M⁻¹Jᵀ, the energy budget, the touching points' normal
velocities, their change per unit impulse and floors) within the rounding of numpy's row
by row arithmetic against the lone path's BLAS products (about 1e-15 relative; the tests
hold 1e-9).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from residualsim.belief.mixture import event_outcome, event_outcomes, slot_particles

__all__ = ["EventProbe", "SigmaRequest", "sigma_outcome", "sigma_tasks"]


class EventProbe:
    """Stands in for the residual policy in the draws' rollouts: the rollout records each
    event's features (spin and contact mode as the policy wants them) and contact model and
    applies nothing (``observes_only``: no guard work for a zero impulse; the step judges
    the engine's own energy change by :func:`~.mixture.event_outcome`)."""

    observes_only = True

    def __init__(self, n_outputs: int, spin: bool, contact_mode: bool) -> None:
        self.n_outputs, self.spin, self.contact_mode = n_outputs, spin, contact_mode

    def mean(self, features: np.ndarray) -> np.ndarray:
        return np.zeros(self.n_outputs)


@dataclasses.dataclass(frozen=True)
class SigmaRequest:
    """What each worker needs to roll its draws out (``batch_size``: copies per world,
    None automatic, 1 one draw at a time)."""

    n_slots: int
    states: np.ndarray
    params: Any  # EngineParams
    probe: Any  # EventProbe, or a SustainedPolicy around one
    guard: Any
    max_steps: int
    penetration_tolerance_m: float
    seeds: None = None
    batch_size: int | None = None


def sigma_outcome(engine, state: np.ndarray, request: SigmaRequest) -> tuple:
    """One draw to the end of its next event without residual, alone: (status, post state,
    steps, event, engine steps, engine start) with event = (features, M⁻¹Jᵀ (nv, k),
    contact velocity after the step J q̇ (k,) m/s, J M⁻¹ Jᵀ (k, k), energy budget J,
    (normal velocity (n,) m/s, its change per unit impulse (n, k), floor (n,) m/s) of the n
    touching points) or None; engine start NaN where the engine never stepped."""
    from residualsim.sim.rollout import residual_rollout

    run = residual_rollout(engine, state, request.max_steps, request.probe, None,
                           request.guard, stop_after_events=1)
    steps = len(run.states) - 1
    status, budget = event_outcome(engine, run, request.guard, request.penetration_tolerance_m)
    stepped = (run.engine_steps, np.full(len(state), np.nan) if run.engine_start is None
               else run.engine_start)  # for the beliefs bench's bare loop
    if status != "ok":
        return status, run.states[-1], steps, None, *stepped
    scene = engine.scene
    model = run.contact_models[-1]
    jump = np.linalg.solve(model.mass_matrix, model.jacobian.T)
    qdot = scene.generalized_velocity_of(run.states[-1])
    rows = _touching_normal_rows(engine, request.guard)
    normal = rows @ qdot  # every touching point's normal velocity now, m/s
    floors = np.minimum(0.0, normal) - request.guard.penetration_tolerance_m / engine.dt_s
    return "ok", run.states[-1], steps, (run.features[-1], jump, model.jacobian @ qdot,
                                         model.jacobian @ jump, float(budget),
                                         (normal, rows @ jump, floors)), *stepped


def _touching_normal_rows(engine, guard) -> np.ndarray:
    """(n, nv): the normal rows n_pᵀ J_p of the points the contact guard checks after an
    event step (the engine at the post-step state): the touching points, or at an impact
    hidden inside the step the nearest corner(s), as the rollout's corrector takes them."""
    from residualsim.sim.bullet import pb
    from residualsim.sim.contact import is_touching

    scene, cid = engine.scene, engine.client
    points = [p for p in pb.getContactPoints(scene.body, scene.static_body, scene.link, -1,
                                             physicsClientId=cid) if is_touching(p)]
    if not points:
        near = pb.getClosestPoints(scene.body, scene.static_body, guard.new_point_distance_m,
                                   scene.link, -1, physicsClientId=cid)
        closest = min((p[8] for p in near), default=0.0)
        points = [p for p in near if p[8] <= closest + 1e-3]
    rows = [np.asarray(p[7]) @ engine.point_jacobian(np.asarray(p[6]), p[3]) for p in points]
    return np.array(rows).reshape(len(rows), -1)


def sigma_tasks(engine, slot: int, request: SigmaRequest) -> list:
    """Worker function: [(index, :func:`sigma_outcome`'s tuple)] for the draws of ``slot``
    (every ``n_slots``-th from it), in batched worlds unless ``batch_size`` is 1 or the
    scene or probe needs the lone path."""
    from residualsim.sim.batch import batch_unsupported, first_events

    indices = list(range(slot, len(request.states), request.n_slots))
    if not indices or request.batch_size == 1 or batch_unsupported(
            engine.scene, request.probe, request.guard) is not None:
        return [(index, sigma_outcome(engine, state, request))
                for index, state, _ in slot_particles(engine, slot, request)]
    if engine.params != request.params:
        engine.set_params(request.params)
    runs = first_events(engine, request.states[indices], request.max_steps, request.probe,
                        None, request.guard, request.batch_size)
    return list(zip(indices, _batched_outcomes(engine, runs, request)))


def _batched_outcomes(engine, runs, request: SigmaRequest) -> list:
    """:func:`sigma_outcome`'s tuples from a batch's first events (``runs``, a
    :class:`~residualsim.sim.batch.FirstEvents` run with the probe): the events'
    descriptions computed for all draws at once."""
    from residualsim.sim.batch_events import normal_rows

    guard = request.guard
    statuses, budgets = event_outcomes(engine.scene, runs, guard,
                                       request.penetration_tolerance_m, budgets=True)
    owners = np.flatnonzero(runs.n_events)
    events: dict = {}
    if len(owners):
        models = runs.models
        jac, jump = models.jacobian, models.inverse_jt
        qdot = runs.post_states[owners, 7:13]  # generalised velocity after the step
        velocity = np.einsum("eij,ej->ei", jac, qdot)
        inverse_inertia = np.einsum("eij,ejk->eik", jac, jump)
        rows, owner = normal_rows(runs.touching, models.centre)
        normal = (rows * qdot[owner]).sum(axis=1)
        change = np.einsum("pi,pik->pk", rows, jump[owner])
        floors = np.minimum(0.0, normal) - guard.penetration_tolerance_m / engine.dt_s
        for e, k in enumerate(owners.tolist()):
            if statuses[k] == "ok":
                mine = owner == e
                events[k] = (models.features[e], jump[e], velocity[e], inverse_inertia[e],
                             float(budgets[k]), (normal[mine], change[mine], floors[mine]))
    return [(status, runs.post_states[k], int(runs.samples[k]), events.get(k),
             int(runs.engine_steps[k]), runs.engine_starts[k])
            for k, status in enumerate(statuses)]
