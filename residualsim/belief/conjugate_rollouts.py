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
from residualsim.belief.sharing import batched_first_events, lone_share

__all__ = ["EventProbe", "SigmaRequest", "sigma_outcome", "sigma_tasks", "unpack_outcomes"]


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
    claims: Any = None  # WorkClaims over the draws (:mod:`.sharing`), or None
    only: tuple | None = None  # the draws left to run (None: all)


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


def sigma_tasks(engine, slot: int, request: SigmaRequest) -> tuple:
    """Worker function: the outcomes (:func:`sigma_outcome`) of the draws of ``slot``
    (every ``n_slots``-th from it), packed in a few arrays (:func:`unpack_outcomes` gives the
    tuples back: thousands of small arrays cost a quarter of the rollouts' time to send);
    in batched worlds (the draws claimed as copies free up: :mod:`.sharing`) unless
    ``batch_size`` is 1 or the scene or probe needs the lone path."""
    indices = lone_share(engine, slot, request, request.probe)
    if indices is not None:
        return _pack(indices, [sigma_outcome(engine, state, request)
                               for _, state, _ in slot_particles(engine, slot, request)],
                     request.states.shape[1])
    indices, runs = batched_first_events(engine, slot, request, request.probe, None)
    return _batched_outcomes(indices, engine, runs, request)


def _pack(indices: list, outcomes: list, width: int) -> tuple:
    """(indices, statuses, post states (n, width), steps (n,), engine steps (n,), engine
    starts (n, width), events) with events None or, over the draws with one in order:
    (features, M⁻¹Jᵀ, J q̇, J M⁻¹Jᵀ, budgets, touching points per event, normal velocities,
    their changes, floors), the touching points' rows stacked."""
    ok = [o[3] for o in outcomes if o[3] is not None]
    events = None
    if ok:
        events = (*(np.array([e[k] for e in ok]) for k in range(5)),
                  np.array([len(e[5][0]) for e in ok]),
                  *(np.concatenate([e[5][k] for e in ok]) for k in range(3)))
    return (indices, [o[0] for o in outcomes],
            np.array([o[1] for o in outcomes]).reshape(-1, width),
            np.array([o[2] for o in outcomes], dtype=np.int64),
            np.array([o[4] for o in outcomes], dtype=np.int64),
            np.array([o[5] for o in outcomes]).reshape(-1, width), events)


def unpack_outcomes(chunks: list, n: int) -> list:
    """The :func:`sigma_outcome` tuples of draws 0..n-1 from the workers' packed chunks
    (:func:`sigma_tasks`)."""
    out: list = [None] * n
    for indices, statuses, post, steps, stepped, starts, events in chunks:
        described = iter(())
        if events is not None:
            features, jump, velocity, inverse, budget, counts, normal, change, floor = events
            edges = np.cumsum(counts)[:-1]
            described = zip(features, jump, velocity, inverse, budget.tolist(),
                            zip(np.split(normal, edges), np.split(change, edges),
                                np.split(floor, edges)))
        for k, (index, status) in enumerate(zip(indices, statuses)):
            event = next(described) if status == "ok" else None
            out[index] = (status, post[k], int(steps[k]), event, int(stepped[k]), starts[k])
    return out


def _batched_outcomes(indices: list, engine, runs, request: SigmaRequest) -> tuple:
    """:func:`sigma_tasks`' packed outcomes from a batch's first events (``runs``, a
    :class:`~residualsim.sim.batch.FirstEvents` run with the probe): the events'
    descriptions computed for all draws at once."""
    from residualsim.sim.batch_events import normal_rows

    guard = request.guard
    statuses, budgets = event_outcomes(engine.scene, runs, guard,
                                       request.penetration_tolerance_m, budgets=True)
    owners = np.flatnonzero(runs.n_events)
    ok = np.array([statuses[k] == "ok" for k in owners.tolist()], dtype=bool)
    events = None
    if ok.any():
        models = runs.models
        jac, jump = models.jacobian[ok], models.inverse_jt[ok]
        qdot = runs.post_states[owners[ok], 7:13]  # generalised velocity after the step
        touching = [t for t, keep in zip(runs.touching, ok.tolist()) if keep]
        rows, owner = normal_rows(touching, models.centre[ok])
        normal = (rows * qdot[owner]).sum(axis=1)
        events = (models.features[ok], jump, np.einsum("eij,ej->ei", jac, qdot),
                  np.einsum("eij,ejk->eik", jac, jump), budgets[owners[ok]],
                  np.array([len(t) for t in touching]), normal,
                  np.einsum("pi,pik->pk", rows, jump[owner]),
                  np.minimum(0.0, normal) - guard.penetration_tolerance_m / engine.dt_s)
    return (indices, statuses, runs.post_states, runs.samples, runs.engine_steps,
            runs.engine_starts, events)
