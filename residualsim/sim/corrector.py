"""The residual's correction at a contact event, and the record of a rollout.

:class:`EventCorrector` applies the residual (the residual-learning paper's Algorithm 1) at
the contact events of one rollout and keeps its counts; :func:`event_contact_model` is the
contact model of an event; :class:`ResidualRollout` the record of one rollout, built from
the loop's raw readings by :func:`rollout_record`. Both rollout loops use them: the lone one
(:func:`~residualsim.sim.rollout.residual_rollout`) and the batched one
(:func:`~residualsim.sim.batch.batched_rollouts`), so a batched rollout's events are
corrected with the same float operations as a lone one's.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from residualsim.sim.contact import (ContactModel, contact_model, feature_width,
                                     largest_steps, spin_features)
from residualsim.sim.engine import Engine

__all__ = ["ResidualRollout", "event_contact_model", "EventCorrector", "rollout_record"]


@dataclasses.dataclass(frozen=True)
class ResidualRollout:
    """One rollout of Algorithm 1.

    ``positions_m`` (T, 3) world, ``quat_wxyz`` (T, 4) body to world, ``states`` (T, n)
    scene layout; ``n_events`` contact events (residual applied, possibly clamped);
    ``n_energy_clamped`` / ``n_normal_clamped`` events whose residual was scaled down by the
    energy / normal-velocity limit; ``n_engine_energy_gain`` events where the engine alone
    had already gained energy (the residual was then limited to what does not add more, or
    dropped);
    ``max_penetration_m`` the deepest penetration seen after any step (>= 0);
    ``features`` (E, n_features) and ``impulses`` (E, k) N s the applied residuals, in the
    contact frames ``frames`` (E, k, 3) (rows n, t1[, t2]: world-frame unit vectors, so the
    world-frame impulse is ``frames[e].T @ impulses[e]``); ``touching_counts`` (E,) the
    number of points touching the ground after each event's step (the contact mode: 1 a
    corner, 2 an edge, 3 or more a face); ``contact_models`` (E,) each event's
    :class:`~residualsim.sim.contact.ContactModel` (M, J at the post-step configuration: the
    velocity change of an impulse p is M⁻¹Jᵀp, which the conjugate beliefs add analytically);
    ``engine_steps`` the periods the engine stepped (the others flew in closed form or
    rested), from ``engine_start`` (state, scene layout; None: it never stepped).
    """

    positions_m: np.ndarray
    quat_wxyz: np.ndarray
    states: np.ndarray
    n_events: int
    n_energy_clamped: int
    n_normal_clamped: int
    n_engine_energy_gain: int
    max_penetration_m: float
    features: np.ndarray
    impulses: np.ndarray
    frames: np.ndarray
    touching_counts: np.ndarray
    contact_models: tuple = ()
    engine_steps: int = 0
    engine_start: np.ndarray | None = None


def event_contact_model(engine: Engine, pre_state: np.ndarray, points: list[tuple]
                        ) -> ContactModel:
    """The contact model of an event: at the normal-force-weighted mean of the new contact
    ``points`` (PyBullet contact tuples; equal weights when no force acts yet) and their mean
    normal, with the pre-step velocity of ``pre_state`` (scene layout). On a body of several
    links, only the points of the link pressed hardest count (the features describe one
    contact on one link: still the 9 numbers, whatever the number of links). Every learner
    that pairs recorded events with the rollout's uses this, so their features agree."""
    scene = engine.scene
    links = {p[3] for p in points}
    if len(links) > 1:  # an articulated body: the link pressed hardest carries the event
        link = max(links, key=lambda k: (sum(max(p[9], 0.0) for p in points if p[3] == k),
                                         -k))
        points = [p for p in points if p[3] == link]
    table = np.array([(*p[6], *p[7], max(p[9], 0.0)) for p in points])
    weights = table[:, 6] if table[:, 6].sum() > 0 else np.ones(len(points))
    point = weights @ table[:, 0:3] / weights.sum()
    normal = weights @ table[:, 3:6]
    normal /= np.linalg.norm(normal)
    return contact_model(engine.mass_matrix(), engine.point_jacobian(point, points[0][3]),
                         scene.generalized_velocity_of(pre_state), point, normal,
                         planar=scene.planar)


class EventCorrector:
    """Applies the residual at contact events of one rollout and keeps the counts
    (``guard`` a :class:`~residualsim.sim.rollout.ContactGuard`; ``rng`` None: the policy's
    mean)."""

    def __init__(self, engine: Engine, policy, rng: np.random.Generator | None,
                 guard) -> None:
        self.engine, self.policy, self.rng, self.guard = engine, policy, rng, guard
        self.features: list[np.ndarray] = []
        self.impulses: list[np.ndarray] = []
        self.frames: list[np.ndarray] = []
        self.touching_counts: list[int] = []
        self.models: list[ContactModel] = []
        self.energy_clamped = self.normal_clamped = self.engine_gain = 0

    def __call__(self, pre_state: np.ndarray, points: list[tuple], touching: list[tuple]
                 ) -> bool:
        """Correct the velocity after a step that began an event at the new ``points``
        (``touching``: all points touching now); True when the step is an event."""
        engine, scene = self.engine, self.engine.scene
        model = event_contact_model(engine, pre_state, points)
        mass = model.mass_matrix
        if model.velocity[0] > -self.guard.min_approach_mps and \
                not self.guard.every_contact_step:
            return False
        features = model.features
        if getattr(self.policy, "spin", False):
            omega = scene.rigid_motion(pre_state[None])[3][0]
            features = np.concatenate([features, spin_features(
                model.frame, omega, scene.radius_of_gyration_m)])
        if getattr(self.policy, "contact_mode", False):
            features = np.append(features, float(len(touching)))
        self.touching_counts.append(len(touching))
        self.models.append(model)
        self.features.append(features)
        self.frames.append(model.frame)
        if self.policy is None or getattr(self.policy, "observes_only", False):
            # engine alone, or a probe that only records events: count and describe the
            # event, apply nothing (so no guard to check)
            self.impulses.append(np.zeros(len(model.velocity)))
            return True
        if self.rng is None:
            impulse = self.policy.mean(features)
        else:
            impulse = self.policy.sample(features, self.rng)
        qdot = scene.generalized_velocity()
        delta = model.velocity_change(impulse)
        # No touching point's normal velocity may be pushed below min(0, engine's).
        cap = 1.0
        for p in touching:
            row = np.asarray(p[7]) @ engine.point_jacobian(np.asarray(p[6]), p[3])
            normal_now, normal_change = float(row @ qdot), float(row @ delta)
            floor = min(0.0, normal_now) - self.guard.penetration_tolerance_m / engine.dt_s
            if normal_now + cap * normal_change < floor:
                cap = max(0.0, (floor - normal_now) / normal_change)
        if cap < 1.0:
            self.normal_clamped += 1
        # Total energy must not exceed the pre-step energy.
        energy_before, energy_now = scene.energy(pre_state), scene.energy(engine.state())
        kinetic_now = 0.5 * qdot @ mass @ qdot
        limit = energy_before + self.guard.energy_tolerance_j - (energy_now - kinetic_now)
        a = 0.5 * delta @ mass @ delta
        b = qdot @ mass @ delta
        c = kinetic_now - limit
        engine_gain = self.guard.energy_budget_j(energy_before, energy_now) < 0.0
        self.engine_gain += engine_gain
        alpha = float(largest_steps(a, b, c, cap))
        if alpha < cap and not engine_gain:
            self.energy_clamped += 1
        scene.set_generalized_velocity(qdot + alpha * delta)
        self.impulses.append(alpha * np.asarray(impulse))
        return True


def rollout_record(scene, raws: list, policy, correct: EventCorrector, deepest: float,
                   stepped: int, start) -> ResidualRollout:
    """The :class:`ResidualRollout` of a loop that read ``raws`` (:meth:`Scene.read_raw`
    records, one per sample, world frame), corrected its events with ``correct`` for
    ``policy``, saw ``deepest`` m of penetration and stepped the engine ``stepped`` periods
    from the raw record ``start`` (None: never)."""
    states = scene.raw_to_states(raws)
    positions, quat, _, _ = scene.rigid_motion(states)
    width = 2 if scene.planar else 3
    n_features = feature_width(scene.planar, getattr(policy, "spin", False),
                               getattr(policy, "contact_mode", False))
    return ResidualRollout(
        positions_m=positions, quat_wxyz=quat, states=states, n_events=len(correct.touching_counts),
        n_energy_clamped=correct.energy_clamped, n_normal_clamped=correct.normal_clamped,
        n_engine_energy_gain=correct.engine_gain, max_penetration_m=float(deepest),
        features=np.array(correct.features).reshape(-1, n_features),
        impulses=np.array(correct.impulses).reshape(-1, width),
        frames=np.array(correct.frames).reshape(-1, width, 3),
        touching_counts=np.array(correct.touching_counts, dtype=np.int64),
        contact_models=tuple(correct.models), engine_steps=stepped,
        engine_start=None if start is None else scene.raw_to_states([start])[0])
