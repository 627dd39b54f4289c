"""Point masses on a floor (the seed's models (a) and (b)): the time-stepping contact model,
an exact forward simulator of it, and its MPEC identification of one friction μ per particle.

Frame and units: 2D, x horizontal, y up (m); the floor is y = 0; velocities m/s; forces N.
Each particle has mass m (kg) and feels a constant applied force λ_app (N, gravity
included, e.g. (5, -9.81 m)). With step h (s), generalised velocity ν = (ν_x, ν_y), normal
force λ_n, friction forces λ_f = (λ_+, λ_-) along ±x and the slack σ (the sliding speed),
one step of the model is

    q_{ℓ+1} = q_ℓ + h ν_{ℓ+1}
    m (ν_{ℓ+1} - ν_ℓ) = h (W_n λ_n + W_f λ_f + λ_app),  W_n = (0, 1), W_f = [[1, -1], [0, 0]]
    0 <= λ_n ⊥ y_{ℓ+1} >= 0
    0 <= λ_f ⊥ σ e + W_fᵀ ν_{ℓ+1} >= 0,   e = (1, 1)
    0 <= σ   ⊥ μ λ_n - eᵀ λ_f >= 0

(forces, not impulses: the impulse over a step is h λ). :func:`lcp_step` solves this
4-variable LCP exactly by enumerating its complementary bases; :func:`particle_step` is the
same solution in closed form (vectorised; the tests check the two agree);
:func:`simulate_particles` rolls it out.

:func:`identify_particles` estimates the states, forces and each particle's μ jointly from
noisy positions y_ℓ = q_ℓ + n_ℓ:

    min ‖x_0 - x̄_0‖² + Σ_ℓ ‖y_ℓ - q_ℓ‖²   s.t. the model above for every step,
    0 <= μ <= 1 (or the given bounds), optionally |n_ℓ,i| <= ε,

with x̄_0 = (y_0, (y_1 - y_0)/h - h λ_app/m) (the velocity that reaches y_1 under the applied
force alone), its velocity part weighted by h so that it reads in metres like the positions
(unweighted, a 0.25 m/s prior error outweighs every position residual at small noise and
biased μ by 5 %), and the initial guess q = y, ν by finite differences,
λ = σ = 0, μ = its upper bound (as in the seed). The bound on the noise is per coordinate
(a box |n_ℓ,i| <= ε, which the seed's uniform noise satisfies, rather than the seed's
‖n_ℓ‖ <= ε, which it can violate by √2).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from residualsim.errors import DataError, ParameterError
from residualsim.sysid.mcmc import as_generator
from residualsim.sysid.mpec.relaxation import DEFAULT_TAUS, Program

__all__ = ["GRAVITY_MPS2", "lcp_step", "particle_step", "simulate_particles",
           "ParticleRecording", "ParticleEstimate", "make_particle_recording",
           "identify_particles", "check_bounds"]

GRAVITY_MPS2 = 9.81


def _lcp_matrices(y: float, v: np.ndarray, force: np.ndarray, mu: float, h: float,
                  mass: float) -> tuple[np.ndarray, np.ndarray]:
    """(M, q) of the step's LCP w = M z + q in z = (λ_n, λ_+, λ_-, σ)."""
    k = h / mass
    vx, vy = v[0] + k * force[0], v[1] + k * force[1]
    matrix = np.array([[h * k, 0.0, 0.0, 0.0],
                       [0.0, k, -k, 1.0],
                       [0.0, -k, k, 1.0],
                       [mu, -1.0, -1.0, 0.0]])
    return matrix, np.array([y + h * vy, vx, -vx, 0.0])


def lcp_step(q: Sequence[float], v: Sequence[float], force: Sequence[float], mu: float,
             h: float, mass: float = 1.0, tol: float = 1e-10
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One step of one particle by solving its LCP exactly (enumerating complementary bases).

    Returns (q_next (2,) m, v_next (2,) m/s, z = (λ_n, λ_+, λ_-, σ) in N, N, N, m/s).
    Raises ValueError if no basis gives a solution (cannot happen for μ >= 0, h, m > 0).
    """
    q, v, force = (np.asarray(a, dtype=np.float64) for a in (q, v, force))
    matrix, offset = _lcp_matrices(q[1], v, force, mu, h, mass)
    scale = tol * max(1.0, float(np.abs(offset).max()))
    for size in range(5):
        for active in itertools.combinations(range(4), size):
            z = np.zeros(4)
            if active:
                idx = list(active)
                z[idx] = np.linalg.lstsq(matrix[np.ix_(idx, idx)], -offset[idx], rcond=None)[0]
            w = matrix @ z + offset
            if active and np.abs(w[list(active)]).max() > scale:
                continue  # the basis' system has no exact solution
            if z.min() >= -scale and w.min() >= -scale:
                v_next = v + h / mass * (np.array([z[1] - z[2], z[0]]) + force)
                return q + h * v_next, v_next, np.maximum(z, 0.0)
    raise ValueError("the step's LCP has no solution")


def particle_step(q: np.ndarray, v: np.ndarray, force: np.ndarray, mu: np.ndarray, h: float,
                  mass: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The LCP's solution in closed form for many particles at once.

    ``q``, ``v``, ``force`` of shape (..., 2); ``mu`` broadcastable to (...). Returns
    (q_next, v_next, λ_n) with λ_n of shape (...) in N. The normal force makes y_{ℓ+1} = 0
    when the free motion would cross the floor; friction then stops or slows the tangential
    velocity by at most h μ λ_n / m (sticking if that suffices).
    """
    k = h / mass
    vx_free = v[..., 0] + k * force[..., 0]
    vy_free = v[..., 1] + k * force[..., 1]
    y_free = q[..., 1] + h * vy_free
    lam_n = np.where(y_free < 0.0, -y_free / (h * k), 0.0)
    vy = vy_free + k * lam_n
    vx = np.sign(vx_free) * np.maximum(np.abs(vx_free) - k * mu * lam_n, 0.0)
    v_next = np.stack([vx, vy], axis=-1)
    return q + h * v_next, v_next, lam_n


def simulate_particles(mu: Sequence[float], q0: np.ndarray, v0: np.ndarray, force: np.ndarray,
                       h: float, n_steps: int, mass: float = 1.0
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Roll P particles out for ``n_steps``: positions and velocities (P, n_steps + 1, 2)."""
    mu = np.asarray(mu, dtype=np.float64).reshape(-1)
    q = np.broadcast_to(np.asarray(q0, dtype=np.float64), (len(mu), 2)).copy()
    v = np.broadcast_to(np.asarray(v0, dtype=np.float64), (len(mu), 2)).copy()
    f = np.broadcast_to(np.asarray(force, dtype=np.float64), (len(mu), 2))
    qs, vs = [q], [v]
    for _ in range(n_steps):
        q, v, _ = particle_step(q, v, f, mu, h, mass)
        qs.append(q)
        vs.append(v)
    return np.stack(qs, axis=1), np.stack(vs, axis=1)


@dataclass(frozen=True)
class ParticleRecording:
    """Noisy positions of P particles: ``observed`` (P, N + 1, 2) m, with the truth beside.

    ``force`` (P, 2) N, ``h`` s, ``mass`` kg, ``noise`` the half-width ε of the uniform
    observation noise (m), ``mu`` the true friction coefficients (P,) (NaN if unknown).
    """

    observed: np.ndarray
    force: np.ndarray
    h: float
    mass: float
    noise: float
    mu: np.ndarray
    positions: np.ndarray | None = None


def make_particle_recording(mu: Sequence[float], q0: np.ndarray, force: np.ndarray,
                            h: float = 0.05, n_steps: int = 100, noise: float = 0.0,
                            mass: float = 1.0, v0: np.ndarray | None = None,
                            rng: int | np.random.Generator | None = None) -> ParticleRecording:
    """Simulate P particles and add uniform noise in [-noise, noise] to every coordinate."""
    mu = np.asarray(mu, dtype=np.float64).reshape(-1)
    q0 = np.broadcast_to(np.asarray(q0, dtype=np.float64), (len(mu), 2))
    v0 = np.zeros((len(mu), 2)) if v0 is None else v0
    force = np.broadcast_to(np.asarray(force, dtype=np.float64), (len(mu), 2)).copy()
    positions, _ = simulate_particles(mu, q0, v0, force, h, n_steps, mass)
    rng = as_generator(rng)
    observed = positions + rng.uniform(-noise, noise, positions.shape)
    return ParticleRecording(observed, force, h, mass, float(noise), mu, positions)


@dataclass(frozen=True)
class ParticleEstimate:
    """μ per particle (P,), estimated positions (P, N + 1, 2) m, velocities, normal forces
    (P, N) N, and the relaxation's report (violation, IPOPT status, iterations, times)."""

    mu: np.ndarray
    positions: np.ndarray
    velocities: np.ndarray
    normal_force: np.ndarray
    report: dict[str, Any]


def check_bounds(name: str, bounds: Sequence[float]) -> tuple[float, float]:
    """(low, high) within [0, 1] with low <= high, else ParameterError."""
    low, high = (float(b) for b in bounds)
    if not (np.isfinite(low) and np.isfinite(high) and 0.0 <= low <= high <= 1.0):
        raise ParameterError(f"{name} bounds must satisfy 0 <= low <= high <= 1, got "
                             f"({low}, {high})")
    return low, high


def identify_particles(recording: ParticleRecording, *, mu_bounds: Sequence[float] = (0.0, 1.0),
                       noise_bound: float | None = None, taus: Sequence[float] = DEFAULT_TAUS,
                       joint: bool = False) -> ParticleEstimate:
    """Estimate each particle's μ (and states, forces) by the MPEC; see the module docstring.

    ``noise_bound``: ε of the per-coordinate box |y - q| <= ε (None: no bound). The
    particles share no variable, so the problem separates: by default each particle is
    solved on its own (the same optimum; IPOPT's iterations grew with the joint size, 10
    particles took 63 s jointly against about 1 s each). ``joint=True`` solves one NLP, as
    the seed does. Raises DataError on non-finite or too short observations and when no
    particle touches the floor in the estimate (μ is then not identifiable); SolverError on
    an IPOPT failure.
    """
    y = np.asarray(recording.observed, dtype=np.float64)
    if y.ndim != 3 or y.shape[2] != 2 or y.shape[1] < 3:
        raise DataError(f"observations must have shape (P, N + 1 >= 3, 2), got {y.shape}")
    if not np.isfinite(y).all():
        raise DataError("observations hold NaN or infinite values")
    check_bounds("mu", mu_bounds)
    if joint or len(y) == 1:
        return _identify(recording, mu_bounds, noise_bound, taus)
    force = np.broadcast_to(np.asarray(recording.force, dtype=np.float64), (len(y), 2))
    parts = [_identify(ParticleRecording(y[i:i + 1], force[i:i + 1], recording.h,
                                         recording.mass, recording.noise, recording.mu[i:i + 1]),
                       mu_bounds, noise_bound, taus) for i in range(len(y))]
    reports = [part.report for part in parts]
    report = {**reports[-1],
              "complementarity_violation": max(r["complementarity_violation"] for r in reports),
              "complementarity_product_max": max(r["complementarity_product_max"]
                                                 for r in reports),
              "solver_status": [r["solver_status"] for r in reports],
              "iterations": sum(r["iterations"] for r in reports),
              "solver_seconds": sum(r["solver_seconds"] for r in reports),
              "objective": sum(r["objective"] for r in reports),
              "solves": [r["solves"] for r in reports], "decomposed": True}
    return ParticleEstimate(*(np.concatenate([getattr(p, k) for p in parts]) for k in
                              ("mu", "positions", "velocities", "normal_force")), report)


def _identify(recording: ParticleRecording, mu_bounds: Sequence[float],
              noise_bound: float | None, taus: Sequence[float]) -> ParticleEstimate:
    y = np.asarray(recording.observed, dtype=np.float64)
    low, high = check_bounds("mu", mu_bounds)
    n_particles, n_samples, _ = y.shape
    n, h, m = n_samples - 1, float(recording.h), float(recording.mass)
    force = np.broadcast_to(np.asarray(recording.force, dtype=np.float64), (n_particles, 2))
    v_guess = np.concatenate([np.diff(y, axis=1) / h, np.diff(y, axis=1)[:, -1:] / h], axis=1)
    box = np.inf if noise_bound is None else float(noise_bound)
    prog = Program()
    q = prog.var("q", y.shape, y - box, y + box, init=y)
    v = prog.var("v", y.shape, init=v_guess)
    lam_n = prog.var("lam_n", (n_particles, n), 0.0, np.inf)
    lam_f = prog.var("lam_f", (n_particles, n, 2), 0.0, np.inf)
    sigma = prog.var("sigma", (n_particles, n), 0.0, np.inf)
    mu = prog.var("mu", n_particles, low, high, init=high)
    v_next = v[:, 1:]
    prog.constrain(q[:, 1:] - q[:, :-1] - h * v_next)
    prog.constrain(m * (v_next[..., 0] - v[:, :-1, 0])
                   - h * (lam_f[..., 0] - lam_f[..., 1] + force[:, None, 0]))
    prog.constrain(m * (v_next[..., 1] - v[:, :-1, 1]) - h * (lam_n + force[:, None, 1]))
    prog.complement(lam_n, q[:, 1:, 1])
    prog.complement(lam_f[..., 0], sigma + v_next[..., 0])
    prog.complement(lam_f[..., 1], sigma - v_next[..., 0])
    prog.complement(sigma, mu[:, None] * lam_n - lam_f[..., 0] - lam_f[..., 1])
    # x̄_0: the first observation and the velocity that reaches the second one under the
    # applied force alone; the velocity term is weighted by h (metres, like the positions)
    v_prior = v_guess[:, 0] - h * force / m
    prior = np.concatenate([y[:, 0], h * v_prior], axis=1)
    state0 = np.concatenate([q[:, 0], h * v[:, 0]], axis=1)
    prog.minimize(np.sum((state0 - prior) ** 2) + np.sum((y - q) ** 2))
    result = prog.solve(taus)
    normal = result.values["lam_n"]
    if normal.sum(axis=1).max() * h <= 1e-9 * m * GRAVITY_MPS2:
        raise DataError("no particle touches the floor in the recording: friction is not "
                        "identifiable without contact")
    return ParticleEstimate(mu=result.values["mu"], positions=result.values["q"],
                            velocities=result.values["v"], normal_force=normal,
                            report=result.report())
