"""The 3D cube tosses (model (d)): μ and a Newton restitution e by MPEC on windows of the
recordings around contact events, free flight between them left out.

Frame and units: world frame, z up, table z = z_t (a fitted table offset, see below), SI
units; quaternions w-x-y-z body → world. The cube (side 0.1048 m, 0.37 kg, uniform, so its
inertia m s²/6 is isotropic and the world-frame Euler equation has no gyroscopic term) has
contact candidates at its 8 corners r_c (body frame). Per window of T samples (period h),
the unknowns are positions p_ℓ, quaternions q_ℓ, world velocities v_ℓ and ω_ℓ, and for each
step and candidate corner a normal impulse λ_n, a friction pyramid of ``directions`` (4:
±x, ±y; 8: also the diagonals) impulses β and a slack σ (impulses divided by m, in m/s):

    p_{ℓ+1} = p_ℓ + h v_{ℓ+1}
    q_{ℓ+1} = normalise(q_ℓ + h/2 (0, ω_{ℓ+1}) ⊗ q_ℓ)
    v_{ℓ+1} - v_ℓ = Σ_c (ẑ λ_n,c + D β_c) + h g
    ω_{ℓ+1} - ω_ℓ = (6 / s²) Σ_c r_c,w × (ẑ λ_n,c + D β_c),   r_c,w = R(q_{ℓ+1}) r_c
    0 <= λ_n,c ⊥ ψ_c(q_{ℓ+1}) + a_c,ℓ h e v_n,c,ℓ >= 0,   ψ_c = (p + r_c,w)_z - z_t
    0 <= β_c  ⊥ σ_c 1 + Dᵀ (v_{ℓ+1} + ω_{ℓ+1} × r_c,w) >= 0
    0 <= σ_c  ⊥ μ λ_n,c - 1ᵀ β_c >= 0

Restitution is Newton's law at the corner (what PyBullet applies: a target normal velocity
-e × the approach velocity): with the corner at the table, ψ(q_{ℓ+1}) >= -h e v_n,ℓ asks it
to leave at e times its approach speed. a_c,ℓ = 1 only where the *recorded* corner
approaches the table (normal velocity below -``approach_mps``) within ``candidate_m`` of it,
so resting and sliding contacts are not pushed up. Only corners whose recorded height comes
within ``candidate_m`` of the table in a window are candidates there (the others cannot
touch it within a few samples); the rest get no contact variables.

Objective: Σ_ℓ ‖p_ℓ - p̄_ℓ‖² + (s/2)² ‖q_ℓ - q̄_ℓ‖² (a quaternion error read as a corner
displacement, metres) + h² (‖v_0 - v̄_0‖² + (s/2)² ‖ω_0 - ω̄_0‖²) (the prior on the initial
state, from the recorded velocities, in metres). The recordings' lowest corner rests at
about -2 mm, so the table height z_t is a nuisance variable in [-5, 5] mm. Initial guess:
the recorded poses and velocities, λ = β = σ = 0, μ and e at their upper bounds.

Not modelled (no counterpart in a rigid complementarity model): contact stiffness and
damping, spinning and rolling friction; edges and faces touch through their corners.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from residualsim.data.contactnets import quaternion_to_matrix
from residualsim.errors import DataError
from residualsim.sysid.mpec.particles import check_bounds
from residualsim.sysid.mpec.relaxation import DEFAULT_TAUS, Program

__all__ = ["CUBE_SIDE_M", "CUBE_MASS_KG", "CUBE_TAUS", "contact_windows", "CubeEstimate", "identify_tosses"]

CUBE_SIDE_M = 0.1048
CUBE_MASS_KG = 0.37
_HALF = CUBE_SIDE_M / 2
CORNERS = np.array(list(itertools.product((-_HALF, _HALF), repeat=3)))
_GRAVITY = np.array([0.0, 0.0, -9.81])
#: The cube's relaxation schedule (τ), shorter than the default: see :func:`identify_tosses`.
CUBE_TAUS = (1e-1, 1e-3, 1e-6)


def _corner_heights(positions: np.ndarray, quat: np.ndarray) -> np.ndarray:
    """Heights (T, 8) m of the corners above z = 0, and their world offsets (T, 8, 3)."""
    offsets = np.einsum("tij,cj->tci", quaternion_to_matrix(quat), CORNERS)
    return positions[:, None, 2] + offsets[..., 2], offsets


def contact_windows(trajectory: Any, before: int = 2, after: int = 8, contact_m: float = 0.005,
                    max_events: int = 2) -> list[tuple[int, int]]:
    """Sample ranges [start, stop) around the first ``max_events`` contact events.

    An event begins at a sample where the recorded lowest corner is below ``contact_m``
    after a sample where it was not (or at the first sample). Overlapping windows merge.
    """
    heights, _ = _corner_heights(trajectory.positions_m, trajectory.quat_wxyz)
    below = heights.min(axis=1) < contact_m
    onsets = [i for i in range(len(below)) if below[i] and (i == 0 or not below[i - 1])]
    windows: list[tuple[int, int]] = []
    for onset in onsets[:max_events]:
        start, stop = max(onset - before, 0), min(onset + after, len(below))
        if windows and start <= windows[-1][1]:
            windows[-1] = (windows[-1][0], stop)
        elif stop - start >= 3:
            windows.append((start, stop))
    return windows


@dataclass(frozen=True)
class CubeEstimate:
    """μ, e, the fitted table height (m), windows used, RMS position residual (m) over the
    windows, and the relaxation's report."""

    mu: float
    restitution: float
    table_m: float
    windows: dict[str, list[tuple[int, int]]]
    position_rms_m: float
    report: dict[str, Any]


def _quat_mul(a: Sequence[Any], b: Sequence[Any]) -> list[Any]:
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return [w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2]


def _rotate(q: Sequence[Any], r: np.ndarray) -> np.ndarray:
    w, x, y, z = q
    rows = [[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]]
    return np.array([sum(row[j] * r[j] for j in range(3)) for row in rows], dtype=object)


def _pyramid(directions: int) -> np.ndarray:
    if directions not in (4, 8):
        raise ValueError(f"directions must be 4 or 8, got {directions}")
    angles = np.arange(directions) * 2 * np.pi / directions
    return np.column_stack([np.cos(angles), np.sin(angles), np.zeros(directions)])


def _add_window(prog: Program, name: str, trajectory: Any, start: int, stop: int,
                mu: Any, e: Any, table: Any, pyramid: np.ndarray, candidate_m: float,
                approach_mps: float) -> tuple[Any, np.ndarray]:
    import casadi as ca

    h = float(np.mean(np.diff(trajectory.times_s)))
    pos = trajectory.positions_m[start:stop]
    quat = trajectory.quat_wxyz[start:stop].copy()
    for i in range(1, len(quat)):  # one sign along the window
        if quat[i] @ quat[i - 1] < 0:
            quat[i] = -quat[i]
    vel = trajectory.linear_velocity_mps[start:stop]
    omega = trajectory.angular_velocity_world_radps[start:stop]
    heights, offsets = _corner_heights(pos, quat)
    corner_speed = vel[:, None, 2] + np.cross(omega[:, None, :], offsets)[..., 2]
    candidates = np.flatnonzero(heights.min(axis=0) < candidate_m)
    count, n_dir = len(pos), len(pyramid)
    p = prog.var(f"{name}.p", (count, 3), init=pos)
    q = prog.var(f"{name}.q", (count, 4), init=quat)
    v = prog.var(f"{name}.v", (count, 3), init=vel)
    w = prog.var(f"{name}.w", (count, 3), init=omega)
    n_c = len(candidates)
    lam = prog.var(f"{name}.lam_n", (count - 1, n_c), 0.0, np.inf)
    beta = prog.var(f"{name}.beta", (count - 1, n_c, n_dir), 0.0, np.inf)
    sigma = prog.var(f"{name}.sigma", (count - 1, n_c), 0.0, np.inf)
    ratio = 6.0 / CUBE_SIDE_M ** 2  # m / I
    for step in range(count - 1):
        nxt = step + 1
        prog.constrain(p[nxt] - p[step] - h * v[nxt])
        raw = np.array(q[step], dtype=object) + 0.5 * h * np.array(
            _quat_mul([0, *w[nxt]], q[step]), dtype=object)
        norm = ca.sqrt(sum(item * item for item in raw))
        prog.constrain(q[nxt] - np.array([item / norm for item in raw], dtype=object))
        force, torque = np.zeros(3, dtype=object), np.zeros(3, dtype=object)
        for slot, corner in enumerate(candidates):
            r_next = _rotate(q[nxt], CORNERS[corner])
            f = np.array([0, 0, lam[step, slot]], dtype=object) + pyramid.T @ beta[step, slot]
            force = force + f
            torque = torque + np.cross(r_next, f)
            gap = p[nxt][2] + r_next[2] - table
            approach = (corner_speed[step, corner] < -approach_mps
                        and heights[step, corner] < candidate_m)
            if approach:
                r_now = _rotate(q[step], CORNERS[corner])
                gap = gap + h * e * (v[step][2] + np.cross(w[step], r_now)[2])
            prog.complement(lam[step, slot], gap)
            point_velocity = v[nxt] + np.cross(w[nxt], r_next)
            slack = sigma[step, slot]
            prog.complement(beta[step, slot], [slack + item for item in pyramid @ point_velocity])
            prog.complement(sigma[step, slot], mu * lam[step, slot] - np.sum(beta[step, slot]))
        prog.constrain(v[nxt] - v[step] - force - h * _GRAVITY)
        prog.constrain(w[nxt] - w[step] - ratio * torque)
    half2 = _HALF ** 2
    prog.minimize(np.sum((p - pos) ** 2) + half2 * np.sum((q - quat) ** 2)
                  + h * h * (np.sum((v[0] - vel[0]) ** 2) + half2 * np.sum((w[0] - omega[0]) ** 2)))
    return p, pos


def identify_tosses(trajectories: Mapping[str, Any], *, mu_bounds: Sequence[float] = (0.0, 1.0),
                    restitution_bounds: Sequence[float] = (0.0, 1.0), before: int = 2,
                    after: int = 8, max_events: int = 1, contact_m: float = 0.005,
                    candidate_m: float = 0.02, approach_mps: float = 0.1, directions: int = 4,
                    taus: Sequence[float] = CUBE_TAUS) -> CubeEstimate:
    """μ and e of the cube from recorded tosses by MPEC (see the module docstring).

    Defaults: one window per toss (its first contact, 2 samples before to 8 after) and the
    shorter schedule :data:`CUBE_TAUS`: on 10 training tosses the last of three solves
    already took 1660 of 2490 IPOPT iterations (38 s in all).

    Raises DataError for non-finite recordings or when no recording has a contact event;
    ParameterError for bounds outside [0, 1]; SolverError when IPOPT fails.
    """
    mu_low, mu_high = check_bounds("lateral_friction", mu_bounds)
    e_low, e_high = check_bounds("restitution", restitution_bounds)
    pyramid = _pyramid(directions)
    windows: dict[str, list[tuple[int, int]]] = {}
    for key, trajectory in trajectories.items():
        for array in (trajectory.positions_m, trajectory.quat_wxyz,
                      trajectory.linear_velocity_mps, trajectory.angular_velocity_world_radps):
            if not np.isfinite(array).all():
                raise DataError(f"{trajectory.source or key}: NaN or infinite values")
        found = contact_windows(trajectory, before, after, contact_m, max_events)
        if found:
            windows[key] = found
    if not windows:
        raise DataError(f"no contact event (a corner below {contact_m} m) in any of the "
                        f"{len(trajectories)} recordings: nothing to identify from")
    prog = Program()
    mu = prog.var("mu", 1, mu_low, mu_high, init=mu_high)[0]
    e = prog.var("restitution", 1, e_low, e_high, init=e_high)[0]
    table = prog.var("table", 1, -0.005, 0.005, init=0.0)[0]
    fitted = []
    for key, ranges in windows.items():
        for index, (start, stop) in enumerate(ranges):
            fitted.append(_add_window(prog, f"{key}.{index}", trajectories[key], start, stop,
                                      mu, e, table, pyramid, candidate_m, approach_mps))
    result = prog.solve(taus)
    values = result.values
    squared = [np.sum((values[f"{key}.{i}.p"] - trajectories[key].positions_m[a:b]) ** 2, axis=1)
               for key, ranges in windows.items() for i, (a, b) in enumerate(ranges)]
    report = {**result.report(), "n_windows": sum(len(r) for r in windows.values()),
              "n_recordings_with_contact": len(windows), "n_recordings": len(trajectories),
              "n_pairs": prog.n_pairs, "directions": directions}
    return CubeEstimate(mu=float(values["mu"][0]), restitution=float(values["restitution"][0]),
                        table_m=float(values["table"][0]), windows=windows,
                        position_rms_m=float(np.sqrt(np.mean(np.concatenate(squared)))),
                        report=report)
