"""The contact-event corrections of many particles at once (numpy), for
:mod:`residualsim.sim.batch`.

:func:`correct_events` is :class:`~residualsim.sim.corrector.EventCorrector` for E
events (one per particle, after the particles stopped): the contact model at the event's points
(M = diag(m I, R I_body Rᵀ) at the post-step pose, J = C [I, −[r]×] with the contact frame
C = (n, t1, t2) world rows and r the point's offset from the centre of mass, M_c =
(J M⁻¹ Jᵀ)⁻¹ kg, v_c = J q̇ m/s before the step), the residual impulse p (N s, contact frame)
drawn per particle, then its share α of the velocity change M⁻¹Jᵀp under the guard's
normal-velocity cap and energy limit. Every operation acts row by row (elementwise
products, sums along the last axis, LAPACK per matrix), so that an event's result does not
depend on which others share the call; the lone corrector's BLAS products round
differently (about 1e-15 relative).

:func:`seeded_draws` draws each particle's residual randomness from
``numpy.random.default_rng(seed)`` as :meth:`NumpyPolicy.sample` does (one uniform, then k
normals), with the generators' seeding done for all seeds at once.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from residualsim.sim.contact import SLIP_TOLERANCE_MPS, largest_steps

__all__ = ["correct_events", "event_models", "EventModels", "normal_rows", "seeded_draws"]


@dataclasses.dataclass(frozen=True)
class EventModels:
    """The contact models of E events (each at its new points' force-weighted mean, the
    post-step pose, the pre-step velocity), as
    :func:`~residualsim.sim.corrector.event_contact_model` builds one: ``mass`` M (E, 6, 6),
    ``jacobian`` J = C [I, −[r]×] (E, 3, 6) with contact frame C rows (n, t1, t2) world,
    ``inverse_jt`` M⁻¹Jᵀ (E, 6, 3), ``features`` (E, n_features) the policy's inputs (M_c's
    upper triangle, v_c, then spin and contact mode as ``policy`` wants them), ``centre``
    (E, 3) m the post-step centres of mass."""

    mass: np.ndarray
    jacobian: np.ndarray
    inverse_jt: np.ndarray
    features: np.ndarray
    centre: np.ndarray


def event_models(scene, pre: np.ndarray, post: np.ndarray, points: list, touching: list,
                 policy) -> EventModels:
    """The contact models (:class:`EventModels`) of E events: ``pre`` and ``post`` (E, 13)
    the states before and after each event's step (scene layout, world frame), ``points[e]``
    the contact tuples the model averages (the new ones), ``touching[e]`` all touching after
    the step (as ``getContactPoints(body, table)`` gives them); ``policy`` says which
    features beyond the 9 it takes (``spin``, ``contact_mode``)."""
    centre, rotation = post[:, 0:3], _rotations(post[:, 3:7])
    mass = np.zeros((len(post), 6, 6))
    mass[:, [0, 1, 2], [0, 1, 2]] = scene.mass_kg
    mass[:, 3:, 3:] = np.einsum("eij,jk,elk->eil", rotation, np.asarray(scene.inertia_body),
                                rotation)
    point, normal = _weighted_points(points)
    offset = point - centre
    qdot_pre = pre[:, 7:13]
    point_velocity = qdot_pre[:, 0:3] + np.cross(qdot_pre[:, 3:6], offset)
    frame = _frames(normal, point_velocity)
    jac = np.concatenate([frame, np.cross(offset[:, None, :], frame)], axis=2)  # C [I, -[r]x]
    inverse_jt = np.linalg.solve(mass, np.swapaxes(jac, 1, 2))
    effective = np.linalg.inv(np.einsum("eij,ejk->eik", jac, inverse_jt))
    rows, cols = np.triu_indices(3)
    features = np.concatenate([effective[:, rows, cols],
                               np.einsum("eij,ej->ei", jac, qdot_pre)], axis=1)
    if getattr(policy, "spin", False):
        features = np.concatenate([features, scene.radius_of_gyration_m * np.einsum(
            "eij,ej->ei", frame, qdot_pre[:, 3:6])], axis=1)
    if getattr(policy, "contact_mode", False):
        features = np.concatenate([features, [[float(len(t))] for t in touching]], axis=1)
    return EventModels(mass, jac, inverse_jt, features, centre)


def correct_events(scene, dt_s: float, pre: np.ndarray, post: np.ndarray, points: list,
                   touching: list, owners: list, policy, seeds, guard
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The event corrector (:class:`~residualsim.sim.corrector.EventCorrector`) for every
    event at once, after the particles stopped: the contact model at the points'
    force-weighted mean (:func:`event_models`), the residual and its limits. Event e is
    particle ``owners[e]``'s: ``pre``, ``post``, ``points`` and ``touching`` as
    :func:`event_models` takes them. Returns the post-event states (E, 13), residual
    applied, and whether the engine's own step had gained energy (E,)."""
    post = post.copy()
    if policy is None:
        return post, np.zeros(len(post), dtype=bool)
    models = event_models(scene, pre, post, points, touching, policy)
    mass, centre = models.mass, models.centre
    impulse = _impulses(policy, models.features, seeds, owners)
    qdot = post[:, 7:13]
    delta = np.einsum("eij,ej->ei", models.inverse_jt, impulse)
    cap = _caps(touching, centre, qdot, delta,
                guard.penetration_tolerance_m / dt_s)
    energy_before, energy_now = _energies(scene, pre), _energies(scene, post)
    kinetic_now = 0.5 * np.einsum("ei,eij,ej->e", qdot, mass, qdot)
    limit = energy_before + guard.energy_tolerance_j - (energy_now - kinetic_now)
    a = 0.5 * np.einsum("ei,eij,ej->e", delta, mass, delta)
    b = np.einsum("ei,eij,ej->e", qdot, mass, delta)
    alpha = largest_steps(a, b, kinetic_now - limit, cap)
    post[:, 7:13] = qdot + alpha[:, None] * delta
    gain = np.array([guard.energy_budget_j(before, now) < 0.0
                     for before, now in zip(energy_before.tolist(), energy_now.tolist())],
                    dtype=bool)
    return post, gain


def _rotations(quat_wxyz: np.ndarray) -> np.ndarray:
    """(E, 3, 3) body to world from quaternions (E, 4) w-x-y-z, with the float operations of
    :func:`~residualsim.sim.scenes.base.quat_wxyz_to_matrix` for one quaternion."""
    w, x, y, z = quat_wxyz.T
    scale = 2.0 / (w * w + x * x + y * y + z * z)
    xx, yy, zz = scale * x * x, scale * y * y, scale * z * z
    xy, xz, yz = scale * x * y, scale * x * z, scale * y * z
    wx, wy, wz = scale * w * x, scale * w * y, scale * w * z
    return np.stack([np.stack([1.0 - yy - zz, xy - wz, xz + wy], -1),
                     np.stack([xy + wz, 1.0 - xx - zz, yz - wx], -1),
                     np.stack([xz - wy, yz + wx, 1.0 - xx - yy], -1)], -2)


def _weighted_points(groups: list) -> tuple[np.ndarray, np.ndarray]:
    """Per event, the normal-force-weighted mean contact point (E, 3) m (equal weights when
    no force acts) and the unit mean normal (E, 3), as
    :func:`~residualsim.sim.corrector.event_contact_model` takes them (world frame)."""
    table = np.array([(*q[6], *q[7], max(q[9], 0.0)) for group in groups for q in group])
    starts = np.cumsum([0] + [len(group) for group in groups])[:-1]
    forces = np.add.reduceat(table[:, 6], starts)
    counts = np.diff(np.append(starts, len(table)))
    weights = np.where(np.repeat(forces > 0, counts), table[:, 6], 1.0)
    point = np.add.reduceat(weights[:, None] * table[:, 0:3], starts) / \
        np.add.reduceat(weights, starts)[:, None]
    normal = np.add.reduceat(weights[:, None] * table[:, 3:6], starts)
    return point, normal / np.linalg.norm(normal, axis=1, keepdims=True)


def _frames(normal: np.ndarray, point_velocity: np.ndarray) -> np.ndarray:
    """(E, 3, 3) contact frames, rows (n, t1, t2) world (:func:`.contact.contact_frame`)."""
    n = normal / np.linalg.norm(normal, axis=1, keepdims=True)
    slip = point_velocity - (point_velocity * n).sum(axis=1, keepdims=True) * n
    speed = np.linalg.norm(slip, axis=1, keepdims=True)
    axis = np.eye(3)[np.argmin(np.abs(n), axis=1)]
    fallback = axis - (axis * n).sum(axis=1, keepdims=True) * n
    fallback /= np.linalg.norm(fallback, axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        t1 = np.where(speed > SLIP_TOLERANCE_MPS, slip / speed, fallback)
    return np.stack([n, t1, np.cross(n, t1)], axis=1)


def _impulses(policy, features: np.ndarray, seeds, owners: list) -> np.ndarray:
    """Residual impulses (E, k) N s, contact frame: the policy's mean (``seeds`` None) or a
    draw from ``default_rng(seeds[owner])`` per event, one uniform and k normals as
    :meth:`NumpyPolicy.sample` draws them."""
    if not hasattr(policy, "layers"):  # another policy: its own calls, event by event
        if seeds is None:
            return np.array([policy.mean(f) for f in features])
        return np.array([policy.sample(f, np.random.default_rng(seeds[i]))
                         for f, i in zip(features, owners)])
    weights, means, scales = policy.components(features, rowwise=True)
    if seeds is None:
        return (weights[:, :, None] * means).sum(axis=1)
    u, z = seeded_draws([seeds[i] for i in owners], policy.n_outputs)
    cumulative = np.cumsum(weights, axis=1)
    pick = np.minimum((cumulative < (u * weights.sum(axis=1))[:, None]).sum(axis=1),
                      policy.n_components - 1)
    rows = np.arange(len(features))
    return means[rows, pick] + policy.spread * scales[rows, pick] * z


def normal_rows(groups: list, centre: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every touching point's normal row n_pᵀ J_p = (n, r × n) (P, 6) of E events (``groups[e]``
    the contact tuples of event e, the body as A; ``centre`` (E, 3) m the centres of mass),
    and the event each row belongs to (P,), in the groups' order."""
    table = np.array([(*q[6], *q[7]) for group in groups for q in group])
    owner = np.repeat(np.arange(len(groups)), [len(group) for group in groups])
    normal = table[:, 3:6]
    return np.concatenate([normal, np.cross(table[:, 0:3] - centre[owner], normal)],
                          axis=1), owner


def _caps(groups: list, centre: np.ndarray, qdot: np.ndarray, delta: np.ndarray,
          sink_mps: float) -> np.ndarray:
    """Per event the largest share in [0, 1] of the correction ``delta`` (E, 6) that pushes
    no touching point's normal velocity below min(0, now) − ``sink_mps`` (m/s; the guard's
    penetration tolerance over dt), point by point in the lone corrector's order."""
    rows, owner = normal_rows(groups, centre)
    now = (rows * qdot[owner]).sum(axis=1)
    change = (rows * delta[owner]).sum(axis=1)
    floor = np.minimum(0.0, now) - sink_mps
    caps = np.ones(len(groups))
    for i in np.flatnonzero(now + change < floor).tolist():  # cap <= 1 only shrinks
        e = owner[i]
        if now[i] + caps[e] * change[i] < floor[i]:
            caps[e] = max(0.0, (floor[i] - now[i]) / change[i])
    return caps


def _energies(scene, states: np.ndarray) -> np.ndarray:
    """Kinetic plus gravitational energy (E,) J of states (E, 13), row by row as
    :meth:`Scene.energy` computes one state."""
    rotation = _rotations(states[:, 3:7])
    omega_body = (states[:, 10:13, None] * rotation).sum(axis=1)
    spin = (omega_body[:, :, None] * np.asarray(scene.inertia_body)[None]).sum(axis=1)
    velocity = states[:, 7:10]
    gravity = np.asarray(scene.settings.gravity_mps2)
    return (0.5 * scene.mass_kg * (velocity * velocity).sum(axis=1)
            + 0.5 * (spin * omega_body).sum(axis=1)
            - scene.mass_kg * (states[:, 0:3] * gravity).sum(axis=1))


# numpy's SeedSequence (pool of 4 words) and PCG64 seeding, as numpy/random/bit_generator.pyx
# and pcg64.c define them: numpy's own test suite pins their output, and so do ours
# (tests/test_batch_rollout.py compares with default_rng draw for draw).
_MASK32 = 0xFFFFFFFF
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R = 0xCA01F9DD, 0x4973F715
_PCG_MULT = (2549297995355413924 << 64) + 4865540595714422341
_MASK128 = (1 << 128) - 1


def seeded_draws(seeds: list, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per seed, ``numpy.random.default_rng(seed).random()`` then ``.standard_normal(k)``:
    uniforms (E,) and normals (E, k). Seeds that are lists of integers >= 0 (the particle
    step's ``[seed, i]``) are seeded together; any other goes through ``default_rng``."""
    words = [_entropy(seed) for seed in seeds]
    states: list = [None] * len(seeds)
    for length in {len(w) for w in words if w is not None}:
        rows = [i for i, w in enumerate(words) if w is not None and len(w) == length]
        for i, state in zip(rows, _pcg_states(np.array([words[i] for i in rows],
                                                       dtype=np.uint64))):
            states[i] = state
    bits = np.random.PCG64()
    generator = np.random.Generator(bits)
    u, z = np.empty(len(seeds)), np.empty((len(seeds), k))
    for i, (seed, state) in enumerate(zip(seeds, states)):
        if state is None:
            rng = np.random.default_rng(seed)
        else:
            bits.state = {"bit_generator": "PCG64", "state": {"state": state[0], "inc": state[1]},
                          "has_uint32": 0, "uinteger": 0}
            rng = generator
        u[i], z[i] = rng.random(), rng.standard_normal(k)
    return u, z


def _entropy(seed) -> list | None:
    """SeedSequence's entropy words (32 bits each, little end first) of a list of ints >= 0,
    or None for any other seed."""
    if not isinstance(seed, (list, tuple)) or not seed or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in seed):
        return None
    out = []
    for value in seed:
        out.append(value & _MASK32)
        value >>= 32
        while value:
            out.append(value & _MASK32)
            value >>= 32
    return out


def _pcg_states(entropy: np.ndarray) -> list:
    """PCG64 (state, increment) of SeedSequence(entropy row) for rows (E, L) of 32-bit words
    (held in uint64, reduced mod 2^32 after every product)."""
    def hashmix(value, const):
        value = ((value ^ const) * ((const * _MULT_A) & _MASK32)) & _MASK32
        return value ^ (value >> 16), (const * _MULT_A) & _MASK32

    def mix(x, y):
        value = (_MIX_L * x - _MIX_R * y) & _MASK32
        return value ^ (value >> 16)

    n, length = entropy.shape
    const, pool = _INIT_A, []
    for i in range(4):
        value, const = hashmix(entropy[:, i] if i < length else np.zeros(n, np.uint64), const)
        pool.append(value)
    for source in range(4):
        for target in range(4):
            if source != target:
                value, const = hashmix(pool[source], const)
                pool[target] = mix(pool[target], value)
    for source in range(4, length):
        for target in range(4):
            value, const = hashmix(entropy[:, source], const)
            pool[target] = mix(pool[target], value)
    const, state_words = _INIT_B, []
    for i in range(8):
        value = ((pool[i % 4] ^ const) * ((const * _MULT_B) & _MASK32)) & _MASK32
        const = (const * _MULT_B) & _MASK32
        state_words.append((value ^ (value >> 16)).tolist())
    out = []
    for w in zip(*state_words):
        seed, sequence = (w[0] | w[1] << 32) << 64 | w[2] | w[3] << 32, \
            (w[4] | w[5] << 32) << 64 | w[6] | w[7] << 32
        inc = ((sequence << 1) | 1) & _MASK128
        state = ((inc + seed) * _PCG_MULT + inc) & _MASK128
        out.append((state, inc))
    return out
