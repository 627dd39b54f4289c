"""Gaussian-mixture beliefs over a body's state, and the result of one belief step.

A belief over a body's state is a Gaussian mixture p(s) = Σ_k w_k N(s | μ_k, Σ_k) over
*tangent coordinates* (:class:`StateTangent`), because a mixture over raw quaternions is
not a distribution over rotations:

* cube (13-number state): position (3, m, world), rotation vector φ (3, rad, world frame)
  with R = exp([φ]×) R_ref about the belief's reference orientation R_ref, velocity (3,
  m/s, world), angular velocity (3, rad/s, world): 12 numbers;
* an object with n joints (13 + 2n numbers): those 12, then the joint positions and
  velocities (rad or m, rad/s or m/s) as they are: 12 + 2n numbers;
* planar scenes (x, z, θ, ẋ, ż, θ̇): the state itself (θ is already a tangent coordinate).

:class:`BeliefStep` is what one belief step returns, whichever the method
(:mod:`.propagation`, :mod:`.conjugate`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from residualsim.errors import ParameterError
from residualsim.parallel import ShardedWorkers, paused_gc
from residualsim.sim.rotations import as_quat_wxyz, as_rotation, quat_relative_rotvec, rotate_by_rotvec

__all__ = ["StateTangent", "GaussianMixtureBelief", "BeliefStep", "slot_particles",
           "event_outcome", "event_outcomes", "check_batch_size",
           "PENETRATION_TOLERANCE_M", "COVARIANCE_FLOOR"]


#: Default rejection depth (m). The calibrated soft contact itself lets the cube sink: 1.22 mm
#: at the deepest over the validation tosses with the engine alone (1.27 mm with the shipped
#: residual; see its model card), so the tolerance sits just above the engine's own.
PENETRATION_TOLERANCE_M = 0.002


@dataclasses.dataclass(frozen=True)
class StateTangent:
    """Map between a scene's states and the tangent coordinates beliefs live in.

    ``planar`` scenes use the state unchanged; 3D states use the rotation vector about
    ``reference_wxyz`` (unit quaternion w-x-y-z, body to world) and keep an object's
    ``n_joints`` joint positions and velocities as they are, see the module docstring.
    """

    planar: bool
    reference_wxyz: tuple[float, float, float, float] = (1.0, 0.0, 0.0, 0.0)
    n_joints: int = 0

    @property
    def size(self) -> int:
        """Number of tangent coordinates (6 planar, 12 + 2n in 3D)."""
        return 6 if self.planar else 12 + 2 * self.n_joints

    @classmethod
    def around(cls, states: np.ndarray, planar: bool) -> StateTangent:
        """Tangent coordinates about the mean orientation of ``states`` (n, state size)."""
        states = np.atleast_2d(np.asarray(states, dtype=float))
        width = states.shape[1] if states.ndim == 2 else 0
        fits = width == 6 if planar else width >= 13 and (width - 13) % 2 == 0
        if states.ndim != 2 or not fits or not np.isfinite(states).all():
            raise ParameterError(f"{'planar' if planar else '3D'} states must be finite rows "
                                 f"of {6 if planar else '13 (+ 2 per joint)'} numbers, got "
                                 f"shape {states.shape}")
        if planar:
            return cls(True)
        mean = as_rotation(states[:, 3:7]).mean()
        return cls(False, tuple(float(v) for v in as_quat_wxyz(mean)[0]), (width - 13) // 2)

    def to_tangent(self, states: np.ndarray) -> np.ndarray:
        """(n, state size) scene states -> (n, size) tangent coordinates."""
        states = np.atleast_2d(np.asarray(states, dtype=float))
        if self.planar:
            return states.copy()
        relative = quat_relative_rotvec(states[:, 3:7], np.array(self.reference_wxyz))
        return np.column_stack([states[:, 0:3], relative, states[:, 7:]])

    def from_tangent(self, tangent: np.ndarray) -> np.ndarray:
        """(n, size) tangent coordinates -> (n, state size) scene states."""
        tangent = np.atleast_2d(np.asarray(tangent, dtype=float))
        if self.planar:
            return tangent.copy()
        quat = rotate_by_rotvec(np.array(self.reference_wxyz), tangent[:, 3:6])
        quat *= np.where(quat[:, :1] < 0, -1.0, 1.0)  # w >= 0: one sign per rotation
        return np.column_stack([tangent[:, 0:3], quat, tangent[:, 6:]])


#: A singular belief covariance (Cholesky fails) is raised to this smallest eigenvalue, or
#: 1e-12 of its largest where that is more (tangent units squared: 1e-18 is (1 nm)², (1
#: nrad)²...): a point mass becomes a Gaussian of that width, and particles can be drawn.
COVARIANCE_FLOOR = 1e-18


def _floored(covariances: np.ndarray) -> np.ndarray | None:
    """``covariances`` (K, d, d) with each singular one raised to the floor
    (:data:`COVARIANCE_FLOOR`); None when every one is positive definite already (left
    as given). ParameterError for a non-finite, asymmetric or indefinite one."""
    if not np.isfinite(covariances).all():
        raise ParameterError("belief covariances must be finite")
    size = float(np.max(np.abs(covariances), initial=0.0))
    if np.max(np.abs(covariances - np.swapaxes(covariances, 1, 2)), initial=0.0) > 1e-6 * size:
        raise ParameterError("belief covariances must be symmetric")
    out = None
    for k, covariance in enumerate(covariances):
        try:
            np.linalg.cholesky(covariance)
            continue
        except np.linalg.LinAlgError:
            pass
        eigenvalues = np.linalg.eigvalsh(covariance)
        largest = max(float(eigenvalues[-1]), 0.0)
        if eigenvalues[0] < -1e-9 * largest or (largest == 0 and eigenvalues[0] < 0):
            raise ParameterError(f"belief covariance {k} is not positive semi-definite "
                                 f"(smallest eigenvalue {eigenvalues[0]:.3g})")
        floor = max(COVARIANCE_FLOOR, 1e-12 * largest)
        out = covariances.copy() if out is None else out
        out[k] = covariance + (floor - eigenvalues[0]) * np.eye(len(covariance))
    return out


@dataclasses.dataclass(frozen=True)
class GaussianMixtureBelief:
    """p(s) = Σ_k w_k N(s | μ_k, Σ_k) in the tangent coordinates of ``tangent``.

    ``weights`` (K,), ``means`` (K, d), ``covariances`` (K, d, d); d = ``tangent.size``.
    A covariance must be finite, symmetric and positive semi-definite (ParameterError
    otherwise); a singular one (a zero standard deviation, a degenerate direction) is
    raised to :data:`COVARIANCE_FLOOR` so that it can be sampled and propagated.
    """

    weights: np.ndarray
    means: np.ndarray
    covariances: np.ndarray
    tangent: StateTangent

    def __post_init__(self) -> None:
        if np.ndim(self.means) != 2:
            raise ParameterError(f"belief means must be a (K, d) matrix, got shape "
                                 f"{np.shape(self.means)}")
        k, d = np.shape(self.means)
        if d != self.tangent.size or np.shape(self.weights) != (k,) or \
                np.shape(self.covariances) != (k, d, d):
            raise ParameterError(f"a belief needs weights (K,), means (K, {self.tangent.size}) "
                                 f"and covariances (K, d, d); got {np.shape(self.weights)}, "
                                 f"{np.shape(self.means)}, {np.shape(self.covariances)}")
        if not math.isclose(float(np.sum(self.weights)), 1.0, abs_tol=1e-6) or \
                np.min(self.weights) < 0:
            raise ParameterError(f"belief weights must be >= 0 and sum to 1, got "
                                 f"{np.asarray(self.weights).tolist()}")
        floored = _floored(np.asarray(self.covariances, dtype=float))
        if floored is not None:
            object.__setattr__(self, "covariances", floored)

    @classmethod
    def gaussian(cls, state: np.ndarray, std: Sequence[float] | np.ndarray, planar: bool
                 ) -> GaussianMixtureBelief:
        """One Gaussian about ``state`` with independent tangent standard deviations ``std``
        (d,) (3D: m, rad, m/s, rad/s in the order of the module docstring); a zero ``std``
        (a state known exactly) gets the floor of :data:`COVARIANCE_FLOOR`."""
        tangent = StateTangent.around(state, planar)
        std = np.asarray(std, dtype=float)
        if std.shape != (tangent.size,) or not np.isfinite(std).all() or (std < 0).any():
            raise ParameterError(f"std must be {tangent.size} numbers >= 0, got "
                                 f"{std.tolist()}")
        return cls(np.ones(1), tangent.to_tangent(state), np.diag(std ** 2)[None], tangent)

    @classmethod
    def fit(cls, states: np.ndarray, planar: bool, n_components: int | str = "bic",
            max_components: int = 4, rng: int = 0, workers: ShardedWorkers | None = None
            ) -> GaussianMixtureBelief:
        """Fit a mixture to particles ``states`` (n, state size): ``n_components`` fixed, or
        ``"bic"``: the best of 1..``max_components`` by the Bayesian information criterion.
        Coordinates are standardised for the fit (metres and rad/s differ by orders of
        magnitude); a small floor keeps the covariances of resting particles positive.
        ``workers``: a :class:`~residualsim.parallel.ShardedWorkers` over slot indices (a
        belief step's engine workers) that fits the BIC candidates side by side
        (:func:`_share_candidates`; the same mixture as fitting them here: each candidate
        is seeded alone)."""
        states = np.atleast_2d(np.asarray(states, dtype=float))
        tangent = StateTangent.around(states, planar)
        points = tangent.to_tangent(states)
        if len(points) < 2:
            raise ParameterError(f"a mixture needs at least 2 particles, got {len(points)}")
        centre, scale = points.mean(axis=0), np.maximum(points.std(axis=0), 1e-6)
        unit = (points - centre) / scale
        if n_components == "bic":
            candidates = list(range(1, max(1, min(max_components, len(points) // 10)) + 1))
        elif isinstance(n_components, int) and n_components >= 1:
            candidates = [min(n_components, len(points))]
        else:
            raise ParameterError(f"n_components must be an integer >= 1 or 'bic', got "
                                 f"{n_components!r}")
        if workers is None or len(candidates) == 1 or len(workers.items) == 1:
            fits = [_fit_candidate(unit, k, rng) for k in candidates]
        else:
            groups = _share_candidates(candidates, len(workers.items))
            done = dict(pair for slot in workers.map(_fit_slot, (unit, groups, rng))
                        for pair in slot)
            fits = [done[k] for k in candidates]
        if not any(math.isfinite(fit[3]) for fit in fits):  # scikit-learn raised it so too
            raise ValueError(f"no mixture of {', '.join(map(str, candidates))} components fits "
                             f"these {len(points)} particles: a covariance is not positive "
                             "definite (collapsed or non-finite particles)")
        weights, means, covariances, _ = min(  # the first of ties; a NaN BIC never wins
            fits, key=lambda fit: fit[3] if math.isfinite(fit[3]) else math.inf)
        return cls(weights / weights.sum(), means * scale + centre,
                   covariances * np.outer(scale, scale)[None], tangent)

    @property
    def n_components(self) -> int:
        return len(self.weights)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` states (n, state size) drawn from the mixture."""
        counts = rng.multinomial(n, self.weights)
        points = [rng.multivariate_normal(mean, cov, size=c, method="cholesky")
                  for mean, cov, c in zip(self.means, self.covariances, counts) if c]
        points = np.vstack(points)[rng.permutation(n)]
        return self.tangent.from_tangent(points)

    def mean_state(self) -> np.ndarray:
        """The mixture's mean, as a state (state size,)."""
        return self.tangent.from_tangent(self.weights @ self.means)[0]

    def as_json(self) -> dict[str, Any]:
        return {"weights": self.weights.tolist(), "means": self.means.tolist(),
                "covariances": self.covariances.tolist(), "planar": self.tangent.planar,
                "reference_wxyz": list(self.tangent.reference_wxyz)}


_REG_COVAR = 1e-6  # added to the refit's covariance diagonals (standardised units²)


def _fit_candidate(unit: np.ndarray, k: int, rng: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """A full-covariance mixture of ``k`` components on standardised points ``unit``
    (n, d), as scikit-learn's ``GaussianMixture(k, reg_covar=1e-6, random_state=rng)``
    fits one: scikit-learn's k-means labels as the start (one component: the points' own
    moments, which EM leaves as they are), EM on the points
    (:func:`.reduction.em_refine`, 1e-6 on the covariances' diagonals, stopping when the
    mean log-likelihood gains less than 1e-3, at most 100 iterations) and the BIC
    (:func:`.reduction.mixture_bic`). Returns weights (k,) heaviest first, means (k, d),
    covariances (k, d, d) (fewer components when k-means finds fewer distinct clusters)
    and the BIC; NaN when a covariance is not positive definite.
    Why not ``GaussianMixture`` itself: it spent ~0.75 ms an EM iteration here (1000
    particles, 12 coordinates, 4 components) in input checks and per-component SciPy
    calls, the stacked EM ~0.3 ms (train/README.md §10, "Batched particle steps")."""
    from sklearn.cluster import KMeans

    from residualsim.belief.reduction import em_refine, mixture_bic

    with _one_blas_thread(), paused_gc():
        uniform = np.full(len(unit), 1.0 / len(unit))
        ridge = _REG_COVAR * np.eye(unit.shape[1])
        if k == 1:  # one cluster: its moments are the fit, EM from them changes nothing
            labels = np.zeros(len(unit), dtype=np.int64)
        else:
            labels = KMeans(n_clusters=k, n_init=1,
                            random_state=np.random.RandomState(rng)).fit(unit).labels_
        clusters = [unit[labels == c] for c in np.unique(labels)]
        start = (np.array([len(c) for c in clusters]) / len(unit),
                 np.array([c.mean(axis=0) for c in clusters]),
                 np.array([np.cov(c.T, bias=True).reshape(ridge.shape) + ridge
                           for c in clusters]))
        try:
            fit = start if k == 1 else em_refine(uniform, unit, None, start, iterations=100,
                                                 floor=_REG_COVAR, tolerance=1e-3)
            return (*fit, mixture_bic(fit, uniform, unit, len(unit)))
        except np.linalg.LinAlgError:
            return start[0], start[1], np.full(start[2].shape, np.nan), math.nan


def _share_candidates(candidates: list[int], n_slots: int) -> list[list[int]]:
    """The BIC candidates (component counts) per worker slot, the largest first, each to the
    least loaded slot, a fit of k components counted k - 1 (one component needs neither
    k-means nor EM): 4 + 1 and 3 + 2 on two workers."""
    groups: list[list[int]] = [[] for _ in range(n_slots)]
    loads = [0] * n_slots
    for k in sorted(candidates, reverse=True):
        slot = loads.index(min(loads))
        groups[slot].append(k)
        loads[slot] += k - 1
    return groups


def _fit_slot(_engine, slot: int, payload) -> list:
    """A worker's share of :meth:`GaussianMixtureBelief.fit`'s candidates: payload (unit
    points, the candidates of each slot, seed) → [(k, its fit)]."""
    unit, groups, rng = payload
    return [(k, _fit_candidate(unit, k, rng)) for k in groups[slot]]


_CONTROLLER: list = []  # threadpoolctl's controller, built once: ~3 ms to list the libraries


def _one_blas_thread():
    """BLAS limited to one thread: the fit's matrices are small, and on a busy 2-core
    machine a second thread only contends (a 1000-particle BIC fit took 4.8 s with BLAS's
    own threads and 0.16 s with one). The thread-pool libraries are listed once per
    process (after scikit-learn loaded its own), not at every fit."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # scikit-learn depends on it; keep going without the limit
        import contextlib

        return contextlib.nullcontext()
    if not _CONTROLLER:
        _CONTROLLER.append(ThreadpoolController())
    return _CONTROLLER[0].limit(limits=1)


@dataclasses.dataclass(frozen=True)
class BeliefStep:
    """One dynamic stochastic step.

    ``belief`` the mixture refitted to the accepted particles (None when fewer than 2 were
    accepted); ``particles`` (m_acc, state size) the accepted post-event states;
    ``elapsed_s`` (m_acc,) each accepted particle's time from the start of the step to the
    end of its event; ``n_drawn``, ``n_no_event`` particles that met no contact event within
    the horizon (they are at rest or still flying; kept out of the refit),
    ``n_rejected_penetration`` and ``n_rejected_energy``; ``rejected_fraction`` of the
    particles that met an event.

    ``method`` "particles" or "conjugate" (:mod:`residualsim.belief.conjugate`): there the
    counts are over sigma points (``n_drawn``: engine rollouts), ``particles`` are the
    accepted sigma points' post-event states with the mean residual, and
    ``rejected_mass`` is the removed probability mass over the mass that met an event
    (what ``rejected_fraction`` then reports).

    What the engine did, for benchmarks (``bench beliefs``): ``engine_steps`` the
    recording periods PyBullet stepped, summed over the drawn particles (the rest flew in
    closed form or rested; a batched world step counts once per particle in it);
    ``engine_runs`` (starts (n_drawn, state size), steps (n_drawn,)): where each particle's
    stepping began (NaN: it never stepped) and how many periods; ``rollout_s`` the wall
    time of the step's rollouts (the workers' map call), s.
    """

    belief: GaussianMixtureBelief | None
    particles: np.ndarray
    elapsed_s: np.ndarray
    n_drawn: int
    n_no_event: int
    n_rejected_penetration: int
    n_rejected_energy: int
    method: str = "particles"
    rejected_mass: float | None = None
    engine_steps: int = 0
    engine_runs: tuple | None = None
    rollout_s: float = 0.0

    @property
    def rejected_fraction(self) -> float:
        if self.rejected_mass is not None:
            return self.rejected_mass
        met = self.n_drawn - self.n_no_event
        return (self.n_rejected_penetration + self.n_rejected_energy) / met if met else 0.0

    def summary(self) -> dict[str, Any]:
        return {"method": self.method, "drawn": self.n_drawn,
                "accepted": len(self.particles),
                "no_event": self.n_no_event,
                "rejected_penetration": self.n_rejected_penetration,
                "rejected_energy": self.n_rejected_energy,
                "rejected_fraction": self.rejected_fraction,
                "components": 0 if self.belief is None else self.belief.n_components}


def check_batch_size(batch_size, name: str = "batch_size") -> int | None:
    """``batch_size`` (bodies per PyBullet world in a belief step's rollouts) as None or an
    int >= 1, else a ParameterError naming it as ``name``."""
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(
            batch_size, (int, np.integer)) or batch_size < 1):
        raise ParameterError(f"{name} must be None or an integer >= 1, got {batch_size!r}")
    return None if batch_size is None else int(batch_size)


def slot_particles(engine, slot: int, request) -> Iterator[tuple[int, np.ndarray, Any]]:
    """The particles worker ``slot`` runs: (index, initial state, random generator or None)
    for every ``request.n_slots``-th state from ``slot`` (:func:`.sharing.slot_indices`), with
    the engine set to ``request.params`` first. ``request.seeds[i]`` seeds particle i (None:
    deterministic)."""
    from residualsim.belief.sharing import slot_indices

    if engine.params != request.params:
        engine.set_params(request.params)
    for index in slot_indices(slot, request):
        rng = None if request.seeds is None else np.random.default_rng(request.seeds[index])
        yield index, request.states[index], rng


def event_outcome(engine, run, guard, penetration_tolerance_m: float) -> tuple[str, float]:
    """Whether a rollout stopped after its first contact event (``run``, a
    :class:`~residualsim.sim.rollout.ResidualRollout` on ``engine``'s scene) is feasible:
    (status, energy budget J). status "no_event" (it met none), "penetration" (it sank
    deeper than ``penetration_tolerance_m``, m), "energy" (its total energy rose across the
    event step beyond the contact ``guard``'s limit, by the guard's own rule
    :meth:`~residualsim.sim.rollout.ContactGuard.energy_budget_j`, or its engine step had
    already gained energy) or "ok"; the budget is what a residual may still add after the
    step (J, >= 0 when "ok"). Both belief steps judge their rollouts by this, so a
    rollout the guard clamped to its energy limit is kept by either."""
    if run.n_events == 0:
        return "no_event", 0.0
    if run.max_penetration_m > penetration_tolerance_m:
        return "penetration", 0.0
    before, after = engine.scene.energy(run.states[[-2, -1]])
    budget = guard.energy_budget_j(before, after)
    if run.n_engine_energy_gain or budget < 0.0:
        return "energy", budget
    return "ok", budget


def event_outcomes(scene, runs, guard, penetration_tolerance_m: float,
                   budgets: bool = False) -> list[str] | tuple[list[str], np.ndarray]:
    """:func:`event_outcome`'s status for each particle of a batch
    (:class:`~residualsim.sim.batch.FirstEvents` on ``scene``), energies of all particles
    at once; ``budgets``: also each particle's energy budget (n,) J, as
    :func:`event_outcome` gives it (0 where it met no event or sank too deep)."""
    energies = scene.energy(np.concatenate([runs.pre_states, runs.post_states]))
    before, after = np.split(energies, 2)
    statuses, left = [], np.zeros(len(before))
    for k, (events, deepest, gain, start, end) in enumerate(zip(
            runs.n_events.tolist(), runs.max_penetration_m.tolist(),
            runs.engine_gain.tolist(), before.tolist(), after.tolist())):
        if events == 0:
            statuses.append("no_event")
        elif deepest > penetration_tolerance_m:
            statuses.append("penetration")
        else:
            left[k] = guard.energy_budget_j(start, end)
            statuses.append("energy" if gain or left[k] < 0.0 else "ok")
    return (statuses, left) if budgets else statuses
