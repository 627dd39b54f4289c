"""The conjugate belief step: Gaussian-mixture beliefs through contact without particles.

The residual-learning paper propagates beliefs with a hybrid particle / Bayes filter, using
"the conjugacy between the normal distributions predicted by the residual learner and the
Gaussian mixture". One step, from the end of one contact event to the end of the next, per
component N(μ_k, Σ_k) of the belief (tangent coordinates, :mod:`.mixture`; d of them):

1. **Points.** By default (``draws`` = n, :data:`DRAWS` = 250) n draws from the belief
   (:func:`stratified_draws`: counts per component by systematic resampling, within a
   component a scrambled Sobol sequence through the normal's quantiles, moved to the
   component's mean and covariance exactly, ``match_moments``), weight 1/n_k in their
   component: Rao-Blackwellised particles, whose residual noise needs no rollout.
   ``draws=None``: **sigma points** (:func:`sigma_points`) instead, 2d points μ_k ± √(d + κ)
   × the columns of √Σ_k turned by a fixed random rotation (``sigma_rotations`` sets of them,
   default 1), weights 1 / (2d) each; κ = ``sigma_kappa`` > 0 adds μ_k with weight
   κ / (d + κ): the spherical cubature rule, exact mean and covariance for any linear map,
   but 24 deterministic points per component miss the rare branches of a contact (a cube
   that bounces once more before its event): energy distance summed over 3 contacts, 4
   validation tosses, 3000-particle reference, 0.90 against 0.50 with 150 draws.
2. **Flight and the event, deterministically.** Each point is rolled out by the engine
   (no residual) to the end of its next contact event (:mod:`.conjugate_rollouts`: many
   copies per PyBullet world as the particle step's, or ``residual_rollout(...,
   stop_after_events=1)`` one at a time): y_i, the post-step state, and the event's contact
   model, M and J (free bodies and articulated objects alike: J acts on the generalised
   velocity).
3. **The residual, exactly.** The residual policy's output at that event is a Gaussian
   mixture over the impulse p (contact frame, N s): Σ_j w_ij N(m_ij, S_ij). An impulse
   changes the generalised velocity linearly, Δq̇ = M⁻¹Jᵀp, so given the point the
   post-contact state is y_i + D_i p (D_i: M⁻¹Jᵀ placed at the velocity coordinates).
4. **Feasibility.** Points whose rollout sank deeper than ``penetration_tolerance_m`` or
   whose energy rose across the event (the engine's own step) carry no mass, judged as the
   particle step judges its particles (:func:`~residualsim.belief.mixture.event_outcome`,
   the contact guard's energy rule with its rounding allowance); their share of
   the mass that met an event is the step's ``rejected_fraction``, as the particle step
   reports rejected particles. The residual impulse must not raise the energy nor push a
   touching point's normal velocity below the contact guard's floor
   (:class:`~residualsim.sim.rollout.ContactGuard`): ``feasibility="clamp"`` (default)
   scales each impulse draw by the guard's α, as a sampled residual is scaled in a
   rollout; ``"truncate"`` removes the scaled ones instead (reported as removed). Points
   that meet no event (at rest, still flying at the horizon) are left out, as the particle
   step leaves such particles out of its refit.
5. **Reduction** to at most ``max_components`` (K, default 4). ``reduction="samples"``
   (default): each point carries ``impulse_samples`` (8) impulse draws, y_i + D_i α p
   (a matrix product each, not a rollout), and weighted EM from a k-means start fits the
   mixture to them (:func:`~residualsim.belief.reduction.em_refine`), the particle step's
   refit on 8 states per rollout. The guard's scaling skews the post-contact velocities
   (skewness 0.2-0.5 after the first contact of a training toss); a Gaussian per point
   cannot carry that, and the next contact depends on it (energy distance at the second
   contact 0.21-0.23 from such a belief, 0.09-0.10 from the samples', with 1000 draws).
   ``reduction="kernels"`` (and always with sigma points): the Gaussian kernel of each
   (i, j), y_i + D_i m_ij with covariance D_i S_ij D_iᵀ (:func:`component_kernels`; the
   guard's clamping moment-matched from ``feasibility_draws`` antithetic draws per point as
   a control variate on the exact moments), merged into one per point, reduced by
   Runnalls' rule and refined by ``em_iterations`` of EM on the kernels themselves.
   ``max_components=None``: no reduction, one Gaussian per accepted draw (the moments of
   its impulse samples, or its merged kernels): the Rao-Blackwellised particle filter's
   belief, ``draws`` components. ``em_iterations=0`` with "samples": the k-means clusters'
   moments without EM. Why K = 4 stays the default: more components are further from a
   3000-particle reference, against its mixture fit and against its particles alike
   (training tosses, energy distance summed over 3 contacts, seed means: K = 4 0.38, 16
   0.44, 64 by k-means 0.43, none 0.49; train/README §10, fifth round): the next step
   draws about 60 moment-matched points per component from K = 4, one plain point per
   component from an unreduced belief. ``refit`` chooses how the samples are fitted
   (:data:`REFITS`: K by BIC, or the particle step's scikit-learn refit on a weighted
   resample): no closer than the weighted EM with K = 4 (sixth round).

Rollouts per step: ``draws`` (250), or with sigma points 2d per component and rotation set
(24 for the cube, d = 12), instead of one per particle. All randomness comes from the
step's generator in the calling process, so the step is seeded and independent of the
worker count.
"""

from __future__ import annotations

import functools
import time

import numpy as np

from residualsim.belief.mixture import (PENETRATION_TOLERANCE_M, BeliefStep,
                                        GaussianMixtureBelief, StateTangent, check_batch_size)
from residualsim.belief.conjugate_rollouts import (EventProbe, SigmaRequest, sigma_tasks,
                                                   unpack_outcomes)
from residualsim.belief.draws import sigma_points, stratified_draws
from residualsim.belief.reduction import (em_refine, kmeans_start, merge_per_point,
                                          mixture_bic, per_draw_moments, positive_definite,
                                          runnalls_reduce, systematic_resample,
                                          variance_floor)
from residualsim.belief.sharing import map_shared
from residualsim.errors import ParameterError

__all__ = ["sigma_points", "conjugate_step", "component_kernels", "silverman_bandwidth",
           "velocity_coordinates",
           "MAX_COMPONENTS", "FEASIBILITY_DRAWS", "DRAWS", "IMPULSE_SAMPLES",
           "EM_ITERATIONS", "stratified_draws", "REFITS", "REFIT_SAMPLES"]

#: Default bound on the number of mixture components after each conjugate step.
MAX_COMPONENTS = 4
#: Default number of impulse draws per point for the contact guard's clamping.
FEASIBILITY_DRAWS = 128
#: Default engine rollouts per step: that many draws from the belief (randomised QMC), each
#: carrying its residual Gaussian exactly (Rao-Blackwellised particles); None: sigma points.
#: 250 keeps the step within a quarter of the 1000-particle filter's time (0.22-0.23 on a
#: quiet machine, seventh round); at its rollouts
#: (1000 draws) the step is closer to a 3000-particle reference than the particles (0.29
#: against 0.33 summed over 3 contacts on training tosses; 250 draws 0.39: train/README
#: §10, sixth round).
DRAWS = 250
#: Default impulse draws each rollout carries in the "samples" reduction (antithetic pairs).
#: 8 are as close to a 3000-particle reference as 32 (0.380 against 0.385 summed over 3
#: contacts, 8 seeds on training tosses) and the fit on a quarter of the samples takes the
#: step from 0.31 to 0.23 of the particle filter's time (train/README §10, seventh round).
IMPULSE_SAMPLES = 8
#: Default EM iterations refining Runnalls' reduction on the kernels (0: Runnalls alone).
EM_ITERATIONS = 100
#: Default number of states the "bic" and "resample" refits count as data: the particle
#: step's refit sees that many particles.
REFIT_SAMPLES = 1000
#: How the "samples" reduction fits its mixture: "em" weighted EM with K components,
#: "bic" the same for 1..K chosen by BIC, "resample" / "resample-k" the particle step's
#: refit (:meth:`GaussianMixtureBelief.fit`, BIC over 1..K / K fixed) on a weighted resample.
REFITS = ("em", "bic", "resample", "resample-k")
#: EM stops when the expected log-likelihood per unit mass gains less than this (nats):
#: scikit-learn's ``GaussianMixture`` default, which the particle step's refit uses.
EM_TOLERANCE = 1e-3


def _one_thread(function):
    """Run ``function`` with BLAS limited to one thread: its matrices are small (d = 12),
    and on a busy machine BLAS threads only contend (5-6x slower measured)."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1):
            return function(*args, **kwargs)
    return wrapper


def velocity_coordinates(tangent: StateTangent) -> np.ndarray:
    """Indices of the generalised velocity q̇ (in the scene's order) among the tangent
    coordinates: planar 3..5; 3D 6..11 (m/s, rad/s, world) then the joint velocities."""
    if tangent.planar:
        return np.arange(3, 6)
    n = tangent.n_joints
    return np.r_[np.arange(6, 12), np.arange(12 + n, 12 + 2 * n)]


def silverman_bandwidth(n_points: int, d: int) -> float:
    """Silverman's rule for a Gaussian kernel over n points in d dimensions,
    (4 / ((d + 2) n))^(1 / (d + 4)), capped below 1."""
    return float(min(0.99, (4.0 / ((d + 2) * max(int(n_points), 1))) ** (1.0 / (d + 4))))


def component_kernels(weights: np.ndarray, outcomes: np.ndarray, jumps: np.ndarray,
                      mix: np.ndarray, impulse_means: np.ndarray,
                      impulse_covariances: np.ndarray, feasible: np.ndarray | None = None,
                      bandwidth: float = 0.0, with_points: bool = False) -> list[tuple]:
    """The post-contact Gaussians of one belief component: one kernel per sigma point and
    residual component j, [(mass, mean (d,), covariance (d, d))].

    Over n sigma points: ``weights`` W_i (n,); ``outcomes`` y_i (n, d) post-event states
    without the residual (tangent coordinates); ``jumps`` D_i (n, d, k) the change of the
    tangent coordinates per unit impulse (N s, contact frame); ``mix`` w_ij (n, J) the
    residual's component weights at each point's event, ``impulse_means`` m_ij (n, J, k) and
    ``impulse_covariances`` S_ij (n, J, k, k) its means and covariances (N s); ``feasible``
    ρ_ij (n, J) the kept fractions (default 1). Kernel (i, j) has mass W_i w_ij ρ_ij, mean
    c̄_j + a (c_ij − c̄_j) with c_ij = y_i + D_i m_ij and c̄_j their weighted mean, and
    covariance h² Σ_j + D_i S_ij D_iᵀ, Σ_j the weighted spread of the c_ij, h = ``bandwidth``
    and a = √(1 − h²) (Liu and West's shrinkage): per j the kernels' mean and covariance
    are exactly the moment match Σ ω (c_ij, spread + D_i S_ij D_iᵀ) / Σ ω, which for a
    linear flight and an impulse mean affine in the state is the closed form; h > 0 lets
    the mixture keep the shape (several modes) of the sigma points' outcomes.
    ``with_points``: each kernel also carries its point's index i (a 4th element)."""
    if not 0.0 <= bandwidth < 1.0:
        raise ParameterError(f"kernel bandwidth must be in [0, 1), got {bandwidth!r}")
    n, j_count = np.shape(mix)
    rho = np.ones((n, j_count)) if feasible is None else np.asarray(feasible, float)
    shrink = np.sqrt(1.0 - bandwidth ** 2)
    out = []
    for j in range(j_count):
        omega = weights * mix[:, j] * rho[:, j]
        mass = float(omega.sum())
        if mass <= 0:
            continue
        share = omega / mass
        centres = outcomes + np.einsum("ndk,nk->nd", jumps, impulse_means[:, j])
        mean = share @ centres
        spread = centres - mean
        scatter = np.einsum("n,nd,ne->de", share, spread, spread)
        residual = np.einsum("ndk,nkl,nel->nde", jumps, impulse_covariances[:, j], jumps)
        for i in np.flatnonzero(omega > 0):
            covariance = bandwidth ** 2 * scatter + residual[i]
            kernel = (float(omega[i]), mean + shrink * spread[i],
                      0.5 * (covariance + covariance.T))
            out.append(kernel + (int(i),) if with_points else kernel)
    return out


def _guarded_impulses(means: np.ndarray, std: np.ndarray, draws: np.ndarray, event: tuple,
                      feasibility: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The residual impulse at one event under the contact guard's limits, per residual
    component j: (kept fraction ρ_j (J,), mean (J, k), covariance (J, k, k)), N s.

    ``draws`` (m, k) standard normals give m impulses p = m_j + s_j z per component.
    "clamp": each is scaled by the largest α in [0, 1] that neither raises the energy nor
    pushes the contact's normal velocity below the floor (as the contact guard scales a
    sampled residual), and the Gaussian is moment-matched to the scaled impulses (ρ = 1).
    "truncate": the infeasible impulses are removed: ρ_j their kept share, the moments
    those of the Gaussian itself."""
    kept, mean, covariance = _guarded_batch(means[None], std[None], draws[None], [event],
                                            feasibility)
    return kept[0], mean[0], covariance[0]


def _guarded_batch(means: np.ndarray, std: np.ndarray, draws: np.ndarray, events: list,
                   feasibility: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_guarded_impulses` for n events at once (one array pass, not n): ``means``
    and ``std`` (n, J, k), ``draws`` (n, m, k); returns kept fractions (n, J), means
    (n, J, k) and covariances (n, J, k, k)."""
    impulses, alpha = _guard_scales(means, std, draws, events)
    n, j_count, k = means.shape
    exact = np.einsum("njk,kl->njkl", std ** 2, np.eye(k))
    if feasibility == "truncate":
        return (alpha >= 1.0).mean(axis=2), means, exact
    clamped = (alpha < 1.0).any(axis=2)  # (n, J): where the guard acts at all
    if not clamped.any():
        return np.ones((n, j_count)), means, exact
    scaled = alpha[..., None] * impulses
    mean = means + (scaled - impulses).mean(axis=2)
    values, vectors = np.linalg.eigh(exact + _scatter(scaled) - _scatter(impulses))
    covariance = np.einsum("njkl,njl,njml->njkm", vectors, np.clip(values, 0.0, None),
                           vectors)
    keep = ~clamped
    mean[keep], covariance[keep] = means[keep], exact[keep]
    return np.ones((n, j_count)), mean, covariance


def _guard_scales(means: np.ndarray, std: np.ndarray, draws: np.ndarray, events: list
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The impulses p = m_j + s_j z (n, J, m, k), N s, from ``draws`` z (n, m, k) at n
    events, and the contact guard's scale α (n, J, m) for each (:func:`_guard_alpha`)."""
    impulses = means[:, :, None, :] + std[:, :, None, :] * draws[:, None]  # (n, J, m, k)
    n, j_count, m, k = impulses.shape
    alpha = _guard_alpha(impulses.reshape(n, j_count * m, k), events)
    return impulses, alpha.reshape(n, j_count, m)


def _guard_alpha(impulses: np.ndarray, events: list) -> np.ndarray:
    """The contact guard's scale α (n, m) of impulses (n, m, k), N s, at n events: the
    largest in [0, 1] that neither raises the energy nor pushes a touching point's normal
    velocity below its floor, as a rollout scales a sampled residual. The events' touching
    points are padded with rows that never cap."""
    from residualsim.sim.contact import largest_steps

    n, _, k = impulses.shape
    velocity = np.array([e[2] for e in events])  # (n, k)
    inverse_inertia = np.array([e[3] for e in events])  # (n, k, k)
    budget = np.array([e[4] for e in events])  # (n,)
    rows = max(len(e[5][0]) for e in events)
    now, floors = np.zeros((n, rows)), np.full((n, rows), -np.inf)
    gain = np.zeros((n, rows, k))
    for i, (_, _, _, _, _, (normal, change, floor)) in enumerate(events):
        now[i, :len(normal)], gain[i, :len(normal)], floors[i, :len(normal)] = \
            normal, change, floor
    change = np.einsum("nmk,nlk->nml", impulses, inverse_inertia)
    a = 0.5 * np.einsum("nmk,nmk->nm", impulses, change)
    b = np.einsum("nmk,nk->nm", impulses, velocity)
    push = np.einsum("nmk,npk->nmp", impulses, gain)  # each touching point's normal
    with np.errstate(divide="ignore", invalid="ignore"):
        limit = np.where(now[:, None] + push < floors[:, None],
                         np.clip((floors - now)[:, None] / push, 0.0, 1.0), 1.0)
    return largest_steps(a, b, -budget[:, None], limit.min(axis=2))


def _scatter(samples: np.ndarray) -> np.ndarray:
    """Sample covariances (..., k, k) of samples (..., m, k)."""
    spread = samples - samples.mean(axis=-2, keepdims=True)
    return np.einsum("...mk,...ml->...kl", spread, spread) / samples.shape[-2]


def conjugate_step(workers, model, belief: GaussianMixtureBelief, rng: np.random.Generator,
                   max_steps: int, residual: bool = True, deterministic_residual: bool = False,
                   penetration_tolerance_m: float = PENETRATION_TOLERANCE_M,
                   max_components: int | None = MAX_COMPONENTS,
                   sigma_kappa: float = 0.0, feasibility_draws: int = FEASIBILITY_DRAWS,
                   feasibility: str = "clamp", sigma_rotations: int = 1,
                   kernel_bandwidth: float | None = None, draws: int | None = DRAWS,
                   em_iterations: int = EM_ITERATIONS, reduction: str = "samples",
                   impulse_samples: int = IMPULSE_SAMPLES, match_moments: bool = True,
                   refit: str = "em", refit_samples: int = REFIT_SAMPLES,
                   batch_size: int | None = None) -> BeliefStep:
    """The conjugate step from ``belief`` to the end of the next contact event (module
    docstring); arguments as :func:`~residualsim.belief.propagation.stochastic_step`, plus
    ``max_components`` K (None: no reduction, one Gaussian per draw), ``draws`` (None:
    sigma points), ``match_moments`` (the draws of a component carry its mean and
    covariance exactly when it has more than d + 1 of them), ``reduction`` ("samples":
    ``impulse_samples`` guard-scaled impulse draws per rollout fitted by EM; "kernels": the
    Gaussian kernels merged and refined by EM, always with sigma points), ``sigma_kappa``
    κ, ``sigma_rotations``, ``kernel_bandwidth`` h (None: 0 with draws, Silverman's rule for
    the sigma points of a component), ``em_iterations`` (0 with "samples": the k-means
    start's clusters), ``refit`` (with "samples": "em" the weighted EM above, K fixed;
    "bic" the same for 1..K, the least BIC counting the samples as ``refit_samples`` data;
    "resample" / "resample-k" a systematic resample of ``refit_samples`` states refitted
    as the particle step refits, BIC over 1..K / K fixed; none closer than "em", train/README
    §10 sixth round), ``feasibility`` and ``feasibility_draws``; ``batch_size`` copies of
    the body per PyBullet world in the rollouts (:mod:`.conjugate_rollouts`; None
    automatic, 1 one draw at a time: the same statuses and post-event states, the events'
    descriptions within rounding). The returned step's ``particles`` are the accepted points'
    post-event states with the residual's mean added; its counts are over points (one
    engine rollout each) and its ``rejected_fraction`` is the removed probability mass."""
    batch_size = check_batch_size(batch_size)
    if feasibility not in ("clamp", "truncate"):
        raise ParameterError(f"feasibility must be 'clamp' or 'truncate', got {feasibility!r}")
    if refit not in REFITS:
        raise ParameterError(f"refit must be one of {', '.join(REFITS)}, got {refit!r}")
    if int(refit_samples) < 2:
        raise ParameterError(f"refit_samples must be >= 2, got {refit_samples!r}")
    if reduction not in ("samples", "kernels"):
        raise ParameterError(f"reduction must be 'samples' or 'kernels', got {reduction!r}")
    if max_components is not None and int(max_components) < 1:
        raise ParameterError(f"max_components must be >= 1 or None, got {max_components!r}")
    max_components = None if max_components is None else int(max_components)
    if int(feasibility_draws) < 1 or int(em_iterations) < 0 or \
            (draws is not None and int(draws) < 1) or int(impulse_samples) < 1:
        raise ParameterError(f"feasibility_draws, draws and impulse_samples must be >= 1 and "
                             f"em_iterations >= 0, got "
                             f"{feasibility_draws!r}, {draws!r}, {impulse_samples!r} and "
                             f"{em_iterations!r}")
    policy = model.sampling_policy()
    coefficients = getattr(policy, "coefficients", None)  # acts in the engine's rollouts
    if coefficients is not None:
        policy = policy.impulses
    probe = EventProbe(policy.n_outputs, policy.spin, policy.contact_mode)
    if coefficients is not None:
        from residualsim.residual.coefficients import SustainedPolicy

        probe = SustainedPolicy(coefficients, probe)
    planar = belief.tangent.planar
    groups = [sigma_points(mu, cov, sigma_kappa, sigma_rotations) for mu, cov in
              zip(belief.means, belief.covariances)] if draws is None else \
        stratified_draws(belief, int(draws), rng, match_moments)
    points = np.vstack([p for p, _ in groups])
    owner = np.concatenate([np.full(len(p), k) for k, (p, _) in enumerate(groups)])
    point_weights = np.concatenate([w for _, w in groups])
    states = belief.tangent.from_tangent(points)
    request = SigmaRequest(
        n_slots=len(workers.items), states=states, params=model.params,
        probe=probe,
        guard=model.guard, max_steps=int(max_steps),
        penetration_tolerance_m=float(penetration_tolerance_m), batch_size=batch_size)
    start = time.perf_counter()
    outcomes = unpack_outcomes(map_shared(workers, sigma_tasks, request), len(states))
    stepped = dict(engine_steps=sum(o[4] for o in outcomes), rollout_s=time.perf_counter() -
                   start, engine_runs=(np.array([o[5] for o in outcomes]),
                                       np.array([o[4] for o in outcomes])))
    statuses = np.array([o[0] for o in outcomes])
    mass = belief.weights[owner] * point_weights  # each sigma point's share of the belief
    accepted = np.flatnonzero(statuses == "ok")
    met_mass = float(mass[statuses != "no_event"].sum())
    counts = dict(n_drawn=len(states), n_no_event=int((statuses == "no_event").sum()),
                  n_rejected_penetration=int((statuses == "penetration").sum()),
                  n_rejected_energy=int((statuses == "energy").sum()), **stepped)
    if len(accepted) == 0:
        return BeliefStep(belief=None, particles=np.empty((0, states.shape[1])),
                          elapsed_s=np.empty(0), rejected_mass=1.0 if met_mass else 0.0,
                          method="conjugate", **counts)
    post = np.array([outcomes[i][1] for i in accepted])
    tangent = StateTangent.around(post, planar)
    y = tangent.to_tangent(post)
    events = [outcomes[i][3] for i in accepted]
    rows = velocity_coordinates(tangent)
    jumps = np.zeros((len(accepted), tangent.size, policy.n_outputs))
    jumps[:, rows, :] = np.array([event[1] for event in events])
    mix, means, std = _residual_mixtures(policy, events, residual, deterministic_residual)
    # Each point its own antithetic draws (their mean exactly zero): the draws' errors
    # average out over the points instead of shifting every point's impulse alike.
    half = rng.standard_normal((len(events), (max(int(feasibility_draws),
                                                   int(impulse_samples)) + 1) // 2,
                                policy.n_outputs))
    if reduction == "samples" and draws is not None:
        return _sampled_step(belief, owner[accepted], point_weights[accepted], y, jumps, mix,
                             means, std, half, events, feasibility, int(impulse_samples),
                             max_components, int(em_iterations), rng, tangent,
                             met_mass, refit, int(refit_samples), dict(elapsed_s=np.array(
                                 [outcomes[i][2] * model.dt_s for i in accepted]), **counts))
    feasible, means, covariances = _guarded_batch(
        means, std, np.concatenate([half, -half], axis=1), events, feasibility)
    parts = []
    for k in range(belief.n_components):
        mine = owner[accepted] == k
        if not mine.any():
            continue
        h = float(kernel_bandwidth) if kernel_bandwidth is not None else 0.0 \
            if draws is not None else silverman_bandwidth(int(mine.sum()), tangent.size)
        index = np.flatnonzero(mine)
        for part_mass, mean, cov, i in component_kernels(
                point_weights[accepted][mine], y[mine], jumps[mine], mix[mine],
                means[mine], covariances[mine], feasible[mine], h, with_points=True):
            if part_mass > 0:
                parts.append((belief.weights[k] * part_mass, mean, cov, index[i]))
    kept_mass = sum(p[0] for p in parts)
    rejected = 1.0 - kept_mass / met_mass if met_mass > 0 else 0.0
    centres = y + np.einsum("ndk,nk->nd", jumps, np.einsum("nj,njk->nk", mix, means))
    common = dict(particles=tangent.from_tangent(centres),
                  elapsed_s=np.array([outcomes[i][2] * model.dt_s for i in accepted]),
                  rejected_mass=float(np.clip(rejected, 0.0, 1.0)), method="conjugate",
                  **counts)
    if kept_mass <= 0:
        return BeliefStep(belief=None, **common)
    return _reduced_step(parts, max_components, int(em_iterations), tangent, common)


@_one_thread
def _reduced_step(parts: list, max_components: int | None, em_iterations: int, tangent,
                  common: dict) -> BeliefStep:
    """The kernels ``parts`` [(mass, mean, covariance, point)] reduced to at most
    ``max_components`` (module docstring, step 5)."""
    kernels = (np.array([p[0] for p in parts]), np.array([p[1] for p in parts]),
               np.array([p[2] for p in parts]))
    # Runnalls' merging starts from one kernel per point (O(n²) pairs: per kernel it was
    # half the step's time); EM then refines on every kernel.
    per_point = merge_per_point(kernels, np.array([p[3] for p in parts]))
    if max_components is None:  # one Gaussian per point, no reduction
        weights, mixture_means, covariances = per_point
        return BeliefStep(belief=GaussianMixtureBelief(
            weights / weights.sum(), mixture_means,
            positive_definite(weights, mixture_means, covariances), tangent), **common)
    weights, mixture_means, covariances = runnalls_reduce(*per_point, max_components)
    covariances = positive_definite(weights, mixture_means, covariances)
    if em_iterations:
        weights, mixture_means, covariances = em_refine(
            *kernels, (weights, mixture_means, covariances), em_iterations,
            floor=variance_floor(*kernels), tolerance=EM_TOLERANCE)
    return BeliefStep(belief=GaussianMixtureBelief(weights, mixture_means, covariances,
                                                   tangent), **common)


@_one_thread
def _sampled_step(belief, owner, point_weights, y, jumps, mix, means, std, half, events,
                  feasibility: str, r: int, max_components: int | None, em_iterations: int,
                  rng, tangent, met_mass: float, refit: str, refit_samples: int,
                  common: dict) -> BeliefStep:
    """``reduction="samples"``: each accepted point carries ``r`` impulse draws (antithetic
    pairs; residual components by systematic selection on their weights), scaled by the
    contact guard as in a rollout (``"truncate"``: the scaled ones removed); the
    post-contact state is linear in the impulse, y_i + D_i α p, so they cost a matrix
    product, not a rollout. The weighted states (mass W_i / r) are fitted by weighted EM
    from a k-means start: the particle step's refit, on r samples per rollout."""
    z = np.concatenate([half[:, :(r + 1) // 2], -half[:, :(r + 1) // 2]], axis=1)
    n, m = z.shape[:2]
    # Draw s of point i takes residual component j by systematic selection on w_ij.
    edges = np.cumsum(mix, axis=1)
    ticks = (np.arange(m)[None] + rng.uniform(size=(n, 1))) / m * edges[:, -1:]
    pick = np.minimum((ticks[:, :, None] >= edges[:, None, :]).sum(axis=2), mix.shape[1] - 1)
    rows = np.arange(n)[:, None]
    impulses = means[rows, pick] + std[rows, pick] * z  # (n, m, k)
    alpha = _guard_alpha(impulses, events)
    kept = np.ones(alpha.shape) if feasibility == "clamp" else (alpha >= 1.0).astype(float)
    states = y[:, None, :] + np.einsum("ndk,nmk->nmd", jumps, alpha[..., None] * impulses)
    mass = (belief.weights[owner] * point_weights)[:, None] * kept / m
    states, mass = states.reshape(-1, y.shape[1]), mass.ravel()
    keep = mass > 0
    states, mass = states[keep], mass[keep]
    kept_mass = float(mass.sum())
    rejected = 1.0 - kept_mass / met_mass if met_mass > 0 else 0.0
    centres = y + np.einsum("ndk,nk->nd", jumps, np.einsum("nj,njk->nk", mix, means))
    common = dict(particles=tangent.from_tangent(centres),
                  rejected_mass=float(np.clip(rejected, 0.0, 1.0)), method="conjugate",
                  **common)
    if kept_mass <= 0 or len(states) < 2:
        return BeliefStep(belief=None, **common)
    kernels = (mass / kept_mass, states, None)  # weighted points
    floor = variance_floor(*kernels)
    if max_components is None:  # one Gaussian per draw: its own samples' moments
        weights, mixture_means, covariances = per_draw_moments(
            kernels[0], states, np.repeat(np.arange(n), m)[keep], floor)
        return BeliefStep(belief=GaussianMixtureBelief(weights, mixture_means, covariances,
                                                       tangent), **common)
    if refit in ("resample", "resample-k"):  # the particle step's own refit
        chosen = systematic_resample(kernels[0], refit_samples, rng)
        return BeliefStep(belief=GaussianMixtureBelief.fit(
            tangent.from_tangent(states[chosen]), tangent.planar,
            "bic" if refit == "resample" else max_components, max_components,
            rng=int(rng.integers(2 ** 31))), **common)
    seed = int(rng.integers(2 ** 31))
    fits = []
    for k in (range(1, max_components + 1) if refit == "bic" else [max_components]):
        start = kmeans_start(kernels, k, seed)
        start = (start[0], start[1], start[2] + np.diag(floor)[None])
        if em_iterations == 0:  # the k-means clusters' moments, no EM
            fits.append(start)
        else:
            fits.append(em_refine(kernels[0], kernels[1], None, start, em_iterations,
                                  floor=floor, tolerance=EM_TOLERANCE))
    weights, mixture_means, covariances = fits[0] if len(fits) == 1 else \
        min(fits, key=lambda fit: mixture_bic(fit, kernels[0], states, refit_samples))
    return BeliefStep(belief=GaussianMixtureBelief(weights, mixture_means, covariances,
                                                   tangent), **common)


def _residual_mixtures(policy, events: list, residual: bool, deterministic: bool
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per accepted sigma point, the residual impulse's mixture: weights (n, J), means
    (n, J, k) and standard deviations (n, J, k), N s, contact frame (the model's spread
    applied). Engine alone: one zero impulse; ``deterministic``: the policy's mean."""
    n, k = len(events), policy.n_outputs
    if not residual:
        return np.ones((n, 1)), np.zeros((n, 1, k)), np.zeros((n, 1, k))
    features = np.array([event[0] for event in events])
    if deterministic:
        return np.ones((n, 1)), policy.mean(features)[:, None, :], np.zeros((n, 1, k))
    weights, means, scales = policy.components(features)
    return weights, means, policy.spread * scales
