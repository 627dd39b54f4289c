"""The 3D cube tosses (model (d)), and other rigid bodies: μ and a Newton restitution e by
MPEC on windows of the recordings around contact events, free flight between them left
out, each window solved on its own and the windows' estimates combined.

Frame and units: world frame, z up, table z = z_t (a fitted table offset per window, see
below), SI units; quaternions w-x-y-z body → world. The cube (side 0.1048 m, 0.37 kg,
uniform, so its inertia m s²/6 is isotropic and the world-frame Euler equation has no
gyroscopic term) has contact candidates at its 8 corners r_c (body frame). Per window of T
samples (period h), the unknowns are positions p_ℓ, quaternions q_ℓ, world velocities v_ℓ
and ω_ℓ, and for each step and candidate corner a normal impulse λ_n, a friction pyramid of
``directions`` (4: ±x, ±y; 8: also the diagonals) impulses β and a slack σ (impulses divided
by m, in m/s):

    p_{ℓ+1} = p_ℓ + h v_{ℓ+1}
    q_{ℓ+1} = normalise(q_ℓ + h/2 (0, ω_{ℓ+1}) ⊗ q_ℓ)
    v_{ℓ+1} - v_ℓ = Σ_c (ẑ λ_n,c + D β_c) + h g
    ω_{ℓ+1} - ω_ℓ = (6 / s²) Σ_c r_c,w × (ẑ λ_n,c + D β_c),   r_c,w = R(q_{ℓ+1}) r_c
    0 <= λ_n,c ⊥ ψ_c(q_{ℓ+1}) >= 0,   ψ_c = (p + r_c,w)_z - z_t        (other pairs)
    0 <= λ_n,c ⊥ u_c,ℓ+1 + e u_c,ℓ >= 0,   u_c = (v + ω × r_c,w)_z     (impact pairs)
    0 <= β_c  ⊥ σ_c 1 + Dᵀ (v_{ℓ+1} + ω_{ℓ+1} × r_c,w) >= 0
    0 <= σ_c  ⊥ μ λ_n,c - 1ᵀ β_c >= 0

**Restitution** is Newton's law at the velocity level (what PyBullet applies: a target
normal velocity -e × the approach velocity of the contact point) on the *impact pairs*:
the steps ℓ at which a corner is in contact (its recorded height below ``contact_m``) and
approaching (its recorded normal velocity below -``approach_mps``). Elsewhere the contact is
plastic and position-level (no penetration). Why not the position-level form
ψ(q_{ℓ+1}) + h e u_ℓ >= 0 of the first version: with a gap ψ_ℓ left at the impact step it
gives u_{ℓ+1} = -e u_ℓ - ψ_ℓ / h, and at h = 6.8 ms a 2 mm gap is 0.3 m/s, as large as the
bounce itself, so e absorbed pose and table errors (it went to its bound 0 on every window).
Poisson's law (on impulses) would not transfer to PyBullet's Newton restitution.

**Windows, solved independently.** Each window (by default the first contact of each toss,
2 samples before to 8 after) is its own NLP with its own μ_i, e_i and table offset z_t,i in
[-5, 5] mm (the recordings' lowest corner rests at about -2 mm and differs by toss): the
joint NLP over all windows shared only (μ, e, z_t), yet its IPOPT iterations grew with the
number of windows (10 tosses 38 s, 30 not finished in 22 min). Windows run over
``n_workers`` processes (:class:`~residualsim.parallel.ShardedWorkers`); each window's solve
depends only on its own samples, so the result does not depend on the worker count. A
window's NLP depends on the data only through parameters (recorded poses, initial
velocities, candidate corners, impact pairs), so each worker compiles one NLP per structure
(samples, candidate corners) and reuses it: building and compiling had cost as much as
solving. IPOPT tolerance 1e-8 on the mm² objective.
Schedule :data:`CUBE_TAUS` = (1e-4, 1e-6), with e held at ``restitution_init`` (0.2) in
the first solve and released in the last (``Program.solve(hold=...)``): from the loose
relaxation the path otherwise fell into e = 0 on windows where a fixed e = 0.15 fits better
(measured: 7 of 12 windows).

**Combination**: μ and e are the weighted medians of the windows' μ_i and e_i. A window's
μ_i is only identified where a contact slides (friction on the cone's edge), its e_i only
where an impact pair carries an impulse, so the weights are that information: for μ the
normal impulse (m/s) carried by contacts that slide faster than 1 cm/s, for e the normal
impulse on impact pairs. Windows that stick throughout or have no impact add nothing. The
median is robust to the windows that stopped in a poor local minimum (the per-window MPEC is
nonconvex). If no window carries weight the plain median is used.

Objective per window: Σ_ℓ ‖p_ℓ - p̄_ℓ‖² + (s/2)² ‖q_ℓ - q̄_ℓ‖² (a quaternion error read as a
corner displacement) + h² (‖v_0 - v̄_0‖² + (s/2)² ‖ω_0 - ω̄_0‖²) (the prior on the initial
state, from the recorded velocities), in mm² so that IPOPT sees an objective of order 10-100
rather than 1e-5. Initial guess: the recorded poses and velocities, λ = β = σ = 0, μ at its
upper bound, e at ``restitution_init`` (clipped to its bounds).

The report gives the worst window's final complementarity violation (max over pairs of
min(a, b)), every window's IPOPT status (a failure raises SolverError naming the window and
the status), and the per-window estimates.

Measured (first 100 tosses of the training split, 2 workers, 2 cores): μ 0.192, e 0.172
(every window Solve_Succeeded, worst violation 9.4e-4, median 2.4e-4; per-window μ_i
quartiles 0.17/0.20/0.25, e_i 0.11/0.17/0.21). Against Metropolis-Hastings on the same
tosses in the same run (``bench mpec --cube-tosses 100``: 2 chains, 1 substep, 4000 steps
projected) 18.4-21.5x faster in wall time over five runs on a shared machine (median 21.0x),
19.7x in CPU time; 93x against MH at the scene's 10 substeps. PyBullet (rigid, 1
substep) on the validation split: 0.0202 m position RMSE at the MPEC estimate, 0.0187 m at
MH's median (μ 0.183, e 0.039), 0.0177 m for the shipped soft-contact engine. Both
parameters share the gap (MPEC μ with MH's e: 0.0193 m; MH's μ with the MPEC e: 0.0190 m):
the MPEC's e is a corner's Newton coefficient in a rigid model, while Bullet at one 6.8 ms
step adds its own penetration recovery to the bounce, so a lower e fits it; the 4-direction
pyramid (|f_x| + |f_y| <= μ λ) needs a larger μ for diagonal sliding (not yet measured with
``directions=8``).

**Other rigid bodies** (``body=``, :mod:`~residualsim.sysid.mpec.body`; ``calibrate
--method mpec --scene FILE`` for a free single-link scene file): the same windows and
program with the body's contact candidates (the convex hull vertices of its URDF collision
shapes) in place of the corners, relative to its centre of mass; the recordings track the
link frame, so each window's poses and velocities are first moved to the centre of mass
(p + R c, v + ω × R c) and the fit is to those. A body whose inertia is not isotropic gets
Euler's equations in its own frame at q_{ℓ+1}, per unit mass (A = I / m, Ω = R_{ℓ+1}ᵀ ω):
A (Ω_{ℓ+1} - Ω_ℓ) + h Ω_{ℓ+1} × (A Ω_{ℓ+1}) = R_{ℓ+1}ᵀ Σ_c r_c,w × (ẑ λ_n,c + D β_c), scaled
by A's mean eigenvalue; the isotropic cube keeps the world-frame form above (no gyroscopic
term), so its program is unchanged. The quaternion weight (s/2)² becomes the square of the
largest candidate coordinate about the centre of mass. Measured on synthetic L-shape tosses
(train/README.md §15): at 200 Hz μ 0.307, e 0.419 for truth 0.3, 0.4.

**Speed**: the windows are dealt to the workers by predicted cost (sample pairs × candidate
corners, largest first, back and forth), since contiguous shards of the file order put 60 %
of the IPOPT iterations on one of two workers. Tried and not kept (each moved the
estimates by more than they saved): IPOPT tolerance 1e-6 on the first (held-e) solve (11 %
fewer iterations, but μ 0.1944, e 0.1759 on 100 tosses and 0.4 mm more held-out error;
1e-7: 39 % more iterations), ``mu_strategy adaptive`` (+40 % iterations), warm-start
``mu_init`` 1e-4 ... 1e-8 and bound pushes, MUMPS orderings and scalings (±3 %), dropping
the rows a_i >= 0 that duplicate the impulses' bounds (20 % cheaper iterations, 25 % more
of them), initial normal impulses from the recorded velocity jumps (+55 % iterations). A
profile of the 30 first windows (one process): IPOPT's own work (mostly the
MUMPS factorisations of the ~700-row KKT systems) ~75 %, CasADi's function evaluations
~9 %, building and compiling the per-structure programs ~12 %, Python the rest.

Not modelled (no counterpart in a rigid complementarity model): contact stiffness and
damping, spinning and rolling friction; edges and faces touch through their corners.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from residualsim.data.contactnets import quaternion_to_matrix
from residualsim.errors import DataError
from residualsim.sysid.mpec.body import CUBE_MASS_KG, CUBE_SIDE_M, RigidBody, cube_body
from residualsim.sysid.mpec.particles import check_bounds
from residualsim.sysid.mpec.relaxation import CompiledProgram, Program

__all__ = ["CUBE_SIDE_M", "CUBE_MASS_KG", "CUBE_TAUS", "contact_windows", "CubeEstimate",
           "WindowEstimate", "identify_tosses", "weighted_median"]

_CUBE = cube_body()
CORNERS = _CUBE.points_m
_GRAVITY = np.array([0.0, 0.0, -9.81])
#: The cube's relaxation schedule (τ), shorter than the default: see the module docstring.
CUBE_TAUS = (1e-4, 1e-6)
#: Objective unit: squared millimetres (IPOPT sees an objective of order 10-100).
_OBJECTIVE_SCALE = 1e6
#: The schedule a window is retried with when IPOPT fails on it under :data:`CUBE_TAUS`.
_RETRY_TAUS = (1e-2, 1e-4, 1e-6)
#: IPOPT's tolerance on the windows (their objective is in mm², of order 10-100).
_TOL = 1e-8
#: A contact slides (so its friction is on the cone's edge and μ_i is identified) above this.
_SLIDING_MPS = 0.01


def _corner_heights(positions: np.ndarray, quat: np.ndarray,
                    points: np.ndarray = CORNERS) -> tuple[np.ndarray, np.ndarray]:
    """Heights (T, N) m above z = 0 of body points (N, 3) given about ``positions``, and
    their world offsets (T, N, 3) (default: the cube's corners about its centre)."""
    offsets = np.einsum("tij,cj->tci", quaternion_to_matrix(quat), points)
    return positions[:, None, 2] + offsets[..., 2], offsets


def contact_windows(trajectory: Any, before: int = 2, after: int = 8, contact_m: float = 0.005,
                    max_events: int = 2, body: RigidBody | None = None
                    ) -> list[tuple[int, int]]:
    """Sample ranges [start, stop) around the first ``max_events`` contact events.

    An event begins at a sample where the recorded lowest contact candidate (of ``body``,
    default the cube; the recording tracks its link frame) is below ``contact_m`` after a
    sample where it was not (or at the first sample). Overlapping windows merge.
    """
    points = (body or _CUBE).points_m
    heights, _ = _corner_heights(trajectory.positions_m, trajectory.quat_wxyz, points)
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
class WindowEstimate:
    """One window's own MPEC: μ_i, e_i, table offset (m), the weights μ_i and e_i carry in
    the combination (normal impulse in m/s while sliding / on impact pairs), the RMS
    position residual (m), the final complementarity violation, IPOPT iterations, wall time
    (s) and the last solve's status."""

    key: str
    start: int
    stop: int
    mu: float
    restitution: float
    table_m: float
    mu_weight: float
    restitution_weight: float
    position_rms_m: float
    violation: float
    iterations: int
    seconds: float
    status: str
    n_pairs: int
    retried: bool = False

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class CubeEstimate:
    """μ, e (the windows' weighted medians), the median fitted table height (m), windows
    used, RMS position residual (m) over all windows, the per-window estimates and the
    report (worst complementarity violation, statuses, wall time)."""

    mu: float
    restitution: float
    table_m: float
    windows: dict[str, list[tuple[int, int]]]
    position_rms_m: float
    report: dict[str, Any]
    per_window: tuple[WindowEstimate, ...] = ()


def weighted_median(values: Sequence[float], weights: Sequence[float]) -> float:
    """The weighted median (the lower one at a tie); the plain median if no weight is > 0."""
    values = np.asarray(values, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    if len(values) == 0:
        raise ValueError("weighted_median of no values")
    if not (weights > 0).any():
        return float(np.median(values))
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cumulative, 0.5 * cumulative[-1])])


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


def _times(items: Sequence[Any], factor: Any) -> np.ndarray:
    """Elementwise ``items * factor`` for a symbolic scalar factor (numpy would try to turn
    the SX factor into an array)."""
    return np.array([item * factor for item in items], dtype=object)


def _rotate_back(q: Sequence[Any], r: Sequence[Any]) -> np.ndarray:
    """R(q)ᵀ r (world to body axes)."""
    w, x, y, z = q
    return _rotate([w, -x, -y, -z], np.asarray(r, dtype=object))


def _angular_residual(body: RigidBody, q_next: Sequence[Any], w_now: Sequence[Any],
                      w_next: Sequence[Any], torque: np.ndarray, h: Any) -> np.ndarray:
    """The angular momentum balance over a step, per unit mass (see the module docstring),
    in rad/s: for an isotropic body (the cube) ω₊ - ω - (m / I) τ in the world frame; else
    in the body frame at q₊, Ā (Ω₊ - Ω) + h Ω₊ × (Ā Ω₊) - R₊ᵀ τ / a with A = I / m, a its
    mean eigenvalue, Ā = A / a (Euler's equations, implicit in Ω₊)."""
    if body.isotropic:
        ratio = 1.0 / body.ratio_m2[0, 0]  # m / I
        return np.asarray(w_next, dtype=object) - w_now - ratio * torque
    ratio = body.ratio_m2
    scale = float(np.trace(ratio) / 3)
    shape = ratio / scale
    big = _rotate_back(q_next, w_next)
    small = _rotate_back(q_next, w_now)
    momentum = shape @ big
    return (shape @ (big - small) + _times(np.cross(big, momentum), h)
            - _rotate_back(q_next, torque) / scale)


def _window_template(count: int, n_candidates: int, directions: int,
                     mu_bounds: Sequence[float], restitution_bounds: Sequence[float],
                     body: RigidBody | None = None) -> CompiledProgram:
    """The compiled NLP of every window of ``count`` samples with ``n_candidates`` contact
    candidates of ``body`` (default the cube; its own μ, e and table offset; the recorded
    centre-of-mass poses, initial velocities, candidate offsets and impact pairs are
    parameters); see the module docstring."""
    import casadi as ca

    body = body or _CUBE

    pyramid = _pyramid(directions)
    prog = Program()
    h = prog.param("h", 1)[0]
    pos = prog.param("positions", (count, 3))
    quat = prog.param("quat", (count, 4))
    vel0, omega0 = prog.param("velocity0", 3), prog.param("omega0", 3)
    corners = prog.param("corners", (n_candidates, 3))
    impact = prog.param("impact", (count - 1, n_candidates))  # 1: Newton, 0: plastic
    mu = prog.var("mu", 1, *mu_bounds, init=mu_bounds[1])[0]
    e = prog.var("restitution", 1, *restitution_bounds)[0]
    table = prog.var("table", 1, -0.005, 0.005, init=0.0)[0]
    n_dir = len(pyramid)
    p = prog.var("p", (count, 3))
    q = prog.var("q", (count, 4))
    v = prog.var("v", (count, 3))
    w = prog.var("w", (count, 3))
    lam = prog.var("lam_n", (count - 1, n_candidates), 0.0, np.inf)
    beta = prog.var("beta", (count - 1, n_candidates, n_dir), 0.0, np.inf)
    sigma = prog.var("sigma", (count - 1, n_candidates), 0.0, np.inf)
    for step in range(count - 1):
        nxt = step + 1
        prog.constrain(p[nxt] - p[step] - _times(v[nxt], h))
        raw = np.array(q[step], dtype=object) + _times(_quat_mul([0, *w[nxt]], q[step]),
                                                       0.5 * h)
        norm = ca.sqrt(sum(item * item for item in raw))
        prog.constrain(q[nxt] - np.array([item / norm for item in raw], dtype=object))
        force, torque = np.zeros(3, dtype=object), np.zeros(3, dtype=object)
        for slot in range(n_candidates):
            r_next = _rotate(q[nxt], corners[slot])
            f = np.array([0, 0, lam[step, slot]], dtype=object) + pyramid.T @ beta[step, slot]
            force = force + f
            torque = torque + np.cross(r_next, f)
            r_now = _rotate(q[step], corners[slot])
            newton = (v[nxt][2] + np.cross(w[nxt], r_next)[2]
                      + e * (v[step][2] + np.cross(w[step], r_now)[2]))
            plastic = p[nxt][2] + r_next[2] - table
            flag = impact[step, slot]
            prog.complement(lam[step, slot], flag * newton + (1 - flag) * plastic)
            point_velocity = v[nxt] + np.cross(w[nxt], r_next)
            slack = sigma[step, slot]
            prog.complement(beta[step, slot], [slack + item for item in pyramid @ point_velocity])
            prog.complement(sigma[step, slot], mu * lam[step, slot] - np.sum(beta[step, slot]))
        prog.constrain(v[nxt] - v[step] - force - np.array([0.0, 0.0, _GRAVITY[2] * h], dtype=object))
        prog.constrain(_angular_residual(body, q[nxt], w[step], w[nxt], torque, h))
    half2 = body.scale_m ** 2
    prog.minimize(_OBJECTIVE_SCALE * (
        np.sum((p - pos) ** 2) + half2 * np.sum((q - quat) ** 2)
        + h * h * (np.sum((v[0] - vel0) ** 2) + half2 * np.sum((w[0] - omega0) ** 2))))
    return prog.compile(tol=_TOL)


def _window_data(window: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """A window's parameters, initial guess and impact pairs (see the module docstring)."""
    pos, quat = window["positions_m"], window["quat_wxyz"].copy()
    for i in range(1, len(quat)):  # one sign along the window
        if quat[i] @ quat[i - 1] < 0:
            quat[i] = -quat[i]
    vel, omega = window["velocity_mps"], window["omega_radps"]
    points = settings["body"].points_com_m
    heights, offsets = _corner_heights(pos, quat, points)
    corner_speed = vel[:, None, 2] + np.cross(omega[:, None, :], offsets)[..., 2]
    candidates = np.flatnonzero(heights.min(axis=0) < settings["candidate_m"])
    impact = ((heights[:-1, candidates] < settings["contact_m"])
              & (corner_speed[:-1, candidates] < -settings["approach_mps"]))
    e_init = float(np.clip(settings["restitution_init"], *settings["restitution_bounds"]))
    return {"params": {"h": window["h"], "positions": pos, "quat": quat, "velocity0": vel[0],
                       "omega0": omega[0], "corners": points[candidates],
                       "impact": impact.astype(np.float64)},
            "init": {"p": pos, "q": quat, "v": vel, "w": omega, "restitution": e_init},
            "impact": impact, "n_candidates": len(candidates)}


class _WindowSolver:
    """What each worker holds: the settings and the compiled window NLPs, one per structure
    (samples, candidate corners), built on first use."""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.settings = dict(settings)
        self.templates: dict[tuple[int, int], CompiledProgram] = {}

    def template(self, count: int, n_candidates: int) -> CompiledProgram:
        key = (count, n_candidates)
        if key not in self.templates:
            s = self.settings
            self.templates[key] = _window_template(count, n_candidates, s["directions"],
                                                   s["mu_bounds"], s["restitution_bounds"],
                                                   s["body"])
        return self.templates[key]

    def close(self) -> None:
        self.templates.clear()


class _SolverFactory:
    """Picklable factory of :class:`_WindowSolver` for the workers."""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.settings = dict(settings)

    def __call__(self) -> _WindowSolver:
        return _WindowSolver(self.settings)


def _solve_window(state: _WindowSolver, window: Mapping[str, Any], payload: Any) -> Any:
    """One window's MPEC (a worker's item function): a WindowEstimate, or the SolverError's
    status and message (raised in the parent with the window named)."""
    from residualsim.errors import SolverError

    settings = state.settings
    started = time.perf_counter()
    data = _window_data(window, settings)
    program = state.template(len(window["positions_m"]), data["n_candidates"])
    retried = False
    solve = dict(params=data["params"], init=data["init"], hold=("restitution",))
    try:
        result = program.solve(settings["taus"], **solve)
    except SolverError as first:
        retried = True  # once more from the recorded states, a gentler schedule
        try:
            result = program.solve(_RETRY_TAUS, **solve)
        except SolverError as error:
            return {"status": error.status, "message": f"{first}; retried with tau "
                    f"{', '.join(f'{t:g}' for t in _RETRY_TAUS)}: {error}"}
    values = result.values
    lam, sigma = values["lam_n"], values["sigma"]
    residual = np.sum((values["p"] - window["positions_m"]) ** 2, axis=1)
    return WindowEstimate(
        key=window["key"], start=window["start"], stop=window["stop"],
        mu=float(values["mu"][0]), restitution=float(values["restitution"][0]),
        table_m=float(values["table"][0]),
        mu_weight=float(np.sum(lam[sigma > _SLIDING_MPS])),
        restitution_weight=float(np.sum(lam[data["impact"]])),
        position_rms_m=float(np.sqrt(np.mean(residual))),
        violation=result.complementarity_violation, iterations=result.iterations,
        seconds=time.perf_counter() - started, status=result.status,
        n_pairs=program.n_pairs, retried=retried)


def _window_cost(window: Mapping[str, Any], settings: Mapping[str, Any]) -> float:
    """A window's predicted solve time (relative): its sample pairs times candidate corners
    (IPOPT's time per window grew about linearly with them: 0.25, 0.48, 0.66, 1.3 s for 1-4
    corners on the real tosses)."""
    heights, _ = _corner_heights(window["positions_m"], window["quat_wxyz"],
                                 settings["body"].points_com_m)
    return float((len(heights) - 1) * np.sum(heights.min(axis=0) < settings["candidate_m"]))


def _balanced_order(costs: Sequence[float], n_workers: int) -> list[int]:
    """An order of the items whose contiguous equal-count shards (what
    :class:`~residualsim.parallel.ShardedWorkers` gives each worker) carry similar costs:
    the items by decreasing cost dealt to the shards back and forth. The windows of the
    first 100 training tosses in file order put 60 % of the IPOPT iterations on one of two
    workers."""
    count = len(costs)
    n_shards = max(1, min(int(n_workers), count))
    bounds = np.linspace(0, count, n_shards + 1).round().astype(int)
    sizes = np.diff(bounds)
    shards: list[list[int]] = [[] for _ in range(n_shards)]
    lap = list(range(n_shards))
    turn = 0
    for index in np.argsort(-np.asarray(costs, dtype=np.float64), kind="stable").tolist():
        while True:
            shard = (lap if turn % (2 * n_shards) < n_shards else lap[::-1])[turn % n_shards]
            turn += 1
            if len(shards[shard]) < sizes[shard]:
                break
        shards[shard].append(index)
    return [index for shard in shards for index in sorted(shard)]


def identify_tosses(trajectories: Mapping[str, Any], *, mu_bounds: Sequence[float] = (0.0, 1.0),
                    restitution_bounds: Sequence[float] = (0.0, 1.0), before: int = 2,
                    after: int = 8, max_events: int = 1, contact_m: float = 0.005,
                    candidate_m: float = 0.02, approach_mps: float = 0.1, directions: int = 4,
                    taus: Sequence[float] = CUBE_TAUS, restitution_init: float = 0.2,
                    n_workers: int = 1, max_failed_fraction: float = 0.1,
                    body: RigidBody | None = None) -> CubeEstimate:
    """μ and e of a rigid body (default the cube) from recorded tosses by MPEC (see the
    module docstring). ``body`` (:mod:`~residualsim.sysid.mpec.body`) gives the contact
    candidates, centre of mass and inertia; the recordings track its link frame, and each
    window's poses and velocities are moved to its centre of mass before the solve.

    Defaults: one window per toss (its first contact, 2 samples before to 8 after), each
    solved on its own over ``n_workers`` processes (the result does not depend on their
    number), the schedule :data:`CUBE_TAUS` with e held at ``restitution_init`` until the
    last solve, μ and e the windows' weighted medians.

    A window on which IPOPT fails is retried once with the schedule (1e-2, 1e-4, 1e-6); if
    it fails again it is left out of the medians and listed, with IPOPT's status, in
    ``report["failed_windows"]`` (and counted in ``report["solver_status"]``).

    Raises DataError for non-finite recordings or when no recording has a contact event;
    ParameterError for bounds outside [0, 1]; SolverError (naming the first failed window
    and IPOPT's status) when IPOPT fails on more than ``max_failed_fraction`` of the
    windows, or on all of them.
    """
    from residualsim.errors import SolverError
    from residualsim.parallel import ShardedWorkers

    started = time.perf_counter()
    mu_low, mu_high = check_bounds("lateral_friction", mu_bounds)
    e_low, e_high = check_bounds("restitution", restitution_bounds)
    _pyramid(directions)  # checked before any work
    if not taus or any(not (t > 0) for t in taus):
        raise ValueError(f"taus must be positive numbers, got {list(taus)}")
    body = body or _CUBE
    windows: dict[str, list[tuple[int, int]]] = {}
    items = []
    for key, trajectory in trajectories.items():
        for array in (trajectory.positions_m, trajectory.quat_wxyz,
                      trajectory.linear_velocity_mps, trajectory.angular_velocity_world_radps):
            if not np.isfinite(array).all():
                raise DataError(f"{trajectory.source or key}: NaN or infinite values")
        found = contact_windows(trajectory, before, after, contact_m, max_events, body)
        if found:
            windows[key] = found
        h = float(np.mean(np.diff(trajectory.times_s)))
        positions, velocity = trajectory.positions_m, trajectory.linear_velocity_mps
        omega = trajectory.angular_velocity_world_radps
        if body.com_m.any():  # link frame -> centre of mass
            arm = np.einsum("tij,j->ti", quaternion_to_matrix(trajectory.quat_wxyz), body.com_m)
            positions, velocity = positions + arm, velocity + np.cross(omega, arm)
        for start, stop in found:
            items.append({"key": str(key), "start": int(start), "stop": int(stop), "h": h,
                          "positions_m": positions[start:stop],
                          "quat_wxyz": trajectory.quat_wxyz[start:stop],
                          "velocity_mps": velocity[start:stop],
                          "omega_radps": omega[start:stop]})
    if not windows:
        raise DataError(f"no contact event (a contact candidate of {body.name} below "
                        f"{contact_m} m) in any of the {len(trajectories)} recordings: nothing "
                        "to identify from")
    settings = {"body": body, "mu_bounds": (mu_low, mu_high),
                "restitution_bounds": (e_low, e_high),
                "restitution_init": restitution_init, "directions": directions,
                "candidate_m": candidate_m, "contact_m": contact_m,
                "approach_mps": approach_mps, "taus": tuple(float(t) for t in taus)}
    order = _balanced_order([_window_cost(item, settings) for item in items], n_workers)
    with ShardedWorkers(_SolverFactory(settings), [items[i] for i in order],
                        n_workers) as workers:
        shuffled = workers.map(_solve_window)
    results: list[Any] = [None] * len(items)
    for index, result in zip(order, shuffled):
        results[index] = result
    failed = [{"key": item["key"], "window": [item["start"], item["stop"]],
               "status": result["status"], "message": result["message"]}
              for item, result in zip(items, results) if isinstance(result, dict)]
    if len(failed) > max_failed_fraction * len(items) or len(failed) == len(items):
        first = failed[0]
        raise SolverError(f"IPOPT failed on {len(failed)} of {len(items)} windows (more than "
                          f"{max_failed_fraction:.0%}); the first, {first['key']}"
                          f"[{first['window'][0]}:{first['window'][1]}]: {first['message']}",
                          status=first["status"])
    per_window: tuple[WindowEstimate, ...] = tuple(r for r in results
                                                   if not isinstance(r, dict))
    mu = weighted_median([r.mu for r in per_window], [r.mu_weight for r in per_window])
    e = weighted_median([r.restitution for r in per_window],
                        [r.restitution_weight for r in per_window])
    counts = [r.stop - r.start for r in per_window]
    rms = float(np.sqrt(np.sum([c * r.position_rms_m ** 2 for c, r in zip(counts, per_window)])
                        / np.sum(counts)))
    statuses: dict[str, int] = {}
    for status in [r.status for r in per_window] + [f["status"] for f in failed]:
        statuses[status] = statuses.get(status, 0) + 1
    worst = max(per_window, key=lambda r: r.violation)
    report = {
        "complementarity_violation": worst.violation,
        "violation_measure": "max over windows and pairs of min(a, b)",
        "complementarity_violation_median": float(np.median([r.violation for r in per_window])),
        "solver_status": ("Solve_Succeeded" if set(statuses) == {"Solve_Succeeded"}
                          else ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items()))),
        "solver_statuses": statuses, "failed_windows": failed,
        "retried_windows": int(sum(r.retried for r in per_window)), "iterations": int(sum(r.iterations for r in per_window)),
        "solver_seconds": float(sum(r.seconds for r in per_window)),
        "wall_seconds": time.perf_counter() - started, "n_workers": int(n_workers),
        "solves": [r.as_json() for r in per_window], "taus": list(settings["taus"]),
        "combination": "weighted median (mu: normal impulse while sliding; e: on impact pairs)",
        "mu_weight_total": float(sum(r.mu_weight for r in per_window)),
        "restitution_weight_total": float(sum(r.restitution_weight for r in per_window)),
        "n_windows": len(per_window), "n_recordings_with_contact": len(windows),
        "n_recordings": len(trajectories), "n_pairs": int(sum(r.n_pairs for r in per_window)),
        "directions": directions}
    return CubeEstimate(mu=mu, restitution=e,
                        table_m=float(np.median([r.table_m for r in per_window])),
                        windows=windows, position_rms_m=rms, report=report,
                        per_window=per_window)
