"""Contact events segmented from recorded 3D trajectories (the ContactNets cube tosses), and
the impulse that best explains each: the data the Gaussian-process baseline
(:mod:`residualsim.baselines.event_gp`) learns from, and a view of where and how hard a recording
touched the table.

Events, in two stages
---------------------
1. **Recorded contact runs** (:func:`contact_runs`): sample k is a contact sample when the
   recorded generalised velocity q̇ = (v, ω) (world frame) changed from sample k − 1 by more
   than free flight explains, measured in the kinetic-energy metric per unit mass,

       jump = ‖q̇_k − q̇_{k−1} − (g Δt, 0)‖_M / √m = √(‖Δv − g Δt‖² + Δωᵀ I Δω / m)   (m/s).

   Measured on the 285 training tosses of the ContactNets set: in flight (lowest corner more
   than 15 mm above the table; 3,664 sample pairs) the jump is at most 0.038 m/s (99th
   percentile 0.029); resting on the table it is g Δt = 0.066 m/s (the table holds the
   cube up; over the last 20 samples of every toss: median 0.067, 99th percentile 0.075,
   99.9th 0.092); sliding friction adds μ g Δt ≈ 0.012 m/s per sample; impacts jump by 0.2
   to 1.1 m/s. :data:`JUMP_THRESHOLD_MPS` = 0.1 m/s keeps the impacts and drops flight,
   sliding and resting (5.0 runs per toss). The recorded velocities are backward
   differences of the tracked positions, so an impact between two samples shows in two
   velocities: a run takes in the sample just before and just after it when their jumps
   exceed :data:`JUMP_EDGE_MPS` = 0.045 m/s (above every flight jump). A run [s, e] has
   pre-contact sample s − 1 and post-contact sample e; a run that reaches the last sample
   (contact still going on) is dropped.

2. **Matching with the engine** (:func:`segment_events`): the calibrated engine is run from
   the *recorded* state at s − 1 over the run plus :data:`EXTRA_STEPS` samples (never into
   the next recorded run), detecting events exactly as Algorithm 1 does
   (:func:`~residualsim.sim.rollout.residual_rollout`: a step after which the body touches the
   table at a point more than ``guard.new_point_distance_m`` from the points touched in the
   previous steps, with the contact point approaching faster than ``guard.min_approach_mps``
   before the step; the event point is the normal-force-weighted mean of the new points, M
   and J_p are taken after the step and q̇ before it, as ``EventCorrector`` does). So the
   features x = (M_c upper triangle, v_c) and the contact frame (n, t1, t2) of each training
   event are those at which a rollout later queries the policy; a test checks that they
   agree to the bit with what ``residual_rollout`` reports. Running the engine from the
   recorded state (rather than trusting the recorded timing alone) gives the point, the
   normal and the frame the policy will see, and p_e on the very same window.

   * Table height: the ContactNets cube rests 1.9 mm *below* z = 0 (median over the
     training tosses, 1.2 to 2.5 mm; tracking offset and rounded corners), where the
     engine's stiff soft contact would turn the overlap into a large impulse. Each
     recording ending at rest is therefore moved up by its own resting depth
     (:func:`table_offset`) when that exceeds :data:`TABLE_OFFSET_TOLERANCE_M` = 0.5 mm
     (the engine's own cube rests within 0.12 mm of its table, so engine-made tosses stay
     untouched), and a start state still penetrating by more than
     :data:`LIFT_TOLERANCE_M` (tracking noise) is lifted out of the table.
   * A recorded run where the engine fires no event is skipped (no residual would be
     applied there either: the engine's cube does not touch, only grazes, or, with rigid
     contact, bounces within one step's substeps and leaves no contact point behind).
   * Engine events that begin after the recorded run are ignored. When the engine fires
     several events in one recorded run (a tumbling cube landing on one corner, then the
     next), the run is split at the engine's later event steps, so every engine event —
     every place a rollout applies a residual — gets its own window. The last window ends
     at the later of the recorded run's end and the end of the engine's impact (the
     steps after its last event whose jump exceeds the threshold).

Per event, over its window of samples [a, b] (both recorded and engine, Δt each), the
velocity changes without gravity are Δ_rec = q̇_rec(b) − q̇_rec(a) − (g (b − a) Δt, 0) and
Δ_eng likewise from the engine's states, and with J (3, 6) the event's contact Jacobian
(rows n, t1, t2) and M the mass matrix (as at the rollout's event):

* p* = argmin over the cone {p_n ≥ 0, ‖(p_t1, p_t2)‖ ≤ μ p_n} of ‖M⁻¹Jᵀp − Δ_rec‖_M
  (:func:`best_impulse_3d`, μ the engine's calibrated lateral friction);
* p_e = the same argmin for Δ_eng: the engine's impulse, in the same frame and read the
  same way. The residual is then exactly zero when the recording is the engine's (a test
  checks it), which the unconstrained projection M_c J Δ_eng of the planar baseline
  (:func:`~residualsim.residual.impact.best_impulses`) does not give in 3D: a soft,
  multi-point engine contact projects outside the cone (by > 20 % of the impulse for one
  event in ten on engine-made tosses), which a residual would then learn to "correct".
  ``ContactEvent.impulse_contact`` is not used: it is the linear momentum change in the
  frame of the contact run's averaged point, not in the frame where the residual acts.

Best impulse, exactly: with H = J M⁻¹ Jᵀ (SPD) and c = J Δ the objective is pᵀHp − 2pᵀc. The
minimum is the unconstrained one H⁻¹c when it lies in the cone; otherwise it is at the
apex (optimal iff c_n + μ‖c_t‖ ≤ 0) or on the cone's surface p = s (1, μ cos θ, μ sin θ),
s ≥ 0, where for fixed θ the best s is (d·c)₊ / dᵀHd, leaving a smooth 1-D problem in θ:
a 720-point grid then a bounded Brent refinement around the best grid point. The
candidate with the lowest objective wins (tests compare with SLSQP and brute force).

Units: impulses N s in the contact frame (n, t1, t2); velocities m/s and rad/s, world frame;
features as :func:`~residualsim.sim.contact.contact_features` (kg, m/s).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from residualsim.sim.bullet import pb

from residualsim.sim.contact import ContactModel
from residualsim.data.trajectory import Trajectory
from residualsim.sim.contact import MEMORY_STEPS, far_from, is_touching
from residualsim.sim.engine import Engine
from residualsim.errors import DataError, ParameterError, SceneError
from residualsim.sim.rollout import ContactGuard, event_contact_model

__all__ = ["JUMP_THRESHOLD_MPS", "JUMP_EDGE_MPS", "EXTRA_STEPS", "MIN_SAMPLES",
           "REST_SPEED_MPS", "REST_SAMPLES", "TABLE_OFFSET_TOLERANCE_M", "LIFT_TOLERANCE_M",
           "RecordedEvent", "velocity_jumps", "contact_runs", "table_offset",
           "segment_events", "best_impulse_3d"]

#: A recorded sample is a contact sample when its velocity jump (kinetic-energy metric per
#: unit mass, gravity removed) exceeds this, m/s (ContactNets: free flight at most
#: 0.038 m/s, resting g Δt = 0.066 m/s plus noise, impacts 0.2 to 1.1 m/s).
JUMP_THRESHOLD_MPS = 0.1
#: A run of contact samples takes in the sample just before and just after it when their
#: jumps exceed this, m/s (above every free-flight jump): the recorded velocities are
#: backward differences of positions, which spread an impact over two samples.
JUMP_EDGE_MPS = 0.045
#: Samples the engine may run past the end of a recorded contact run (a softer or later
#: engine contact), never into the next run.
EXTRA_STEPS = 3
#: A recording that ends at rest (median speed |v| + r_g |ω| below this over its last
#: REST_SAMPLES samples, m/s; the ContactNets tosses at rest show up to 0.05 m/s and
#: 0.5 rad/s of differentiation noise) shows where its table is.
REST_SPEED_MPS = 0.1
REST_SAMPLES = 10
#: A recording's table farther than this from the engine's (m) is moved to z = 0 before the
#: engine starts from recorded states (the engine's own cube rests within 0.12 mm).
TABLE_OFFSET_TOLERANCE_M = 5e-4
#: A recorded start state penetrating the engine's table deeper than this (m) is lifted out
#: (a stiff contact would turn tracking noise into large impulses).
LIFT_TOLERANCE_M = 5e-4
#: Shortest trajectory accepted (a pre-contact, a contact and a post-contact sample).
MIN_SAMPLES = 3
_GRID = np.linspace(0.0, 2.0 * np.pi, 720, endpoint=False)


@dataclasses.dataclass(frozen=True)
class RecordedEvent:
    """One recorded contact event matched with the engine's event.

    Attributes
    ----------
    traj_id : str
        The trajectory it came from.
    start_index : int
        Recorded sample the engine was started from (the run's pre-contact sample).
    start_state : ndarray (13,)
        The state it was started from: the recorded one, moved to the engine's table
        (:func:`table_offset`) and lifted out of it when penetrating.
    pre_index, post_index : int
        Recorded sample indices a and b of the window: the velocity change is from a to b.
    event_index : int
        Recorded index of the engine's event step (the first sample after contact began,
        a < event_index <= b).
    features : ndarray (9,)
        Contact features x at the engine's event (upper triangle of M_c kg, v_c m/s).
    frame : ndarray (3, 3)
        Contact frame rows (n, t1, t2), world.
    point_world : ndarray (3,)
        The event's contact point, m, world.
    jacobian : ndarray (3, 6)
        Contact Jacobian J = frame · J_p.
    mass_matrix : ndarray (6, 6)
        M at the event.
    recorded_change, engine_change : ndarray (6,)
        Δq̇ over the window without gravity: recorded, and engine run from the recorded
        state at a (m/s, rad/s, world).
    best_impulse : ndarray (3,)
        p*, N s, contact frame (in the friction cone).
    engine_impulse : ndarray (3,)
        p_e, the same fit to Δ_eng, N s, contact frame (in the friction cone).
    """

    traj_id: str
    start_index: int
    start_state: np.ndarray
    pre_index: int
    post_index: int
    event_index: int
    features: np.ndarray
    frame: np.ndarray
    point_world: np.ndarray
    jacobian: np.ndarray
    mass_matrix: np.ndarray
    recorded_change: np.ndarray
    engine_change: np.ndarray
    best_impulse: np.ndarray
    engine_impulse: np.ndarray

    @property
    def residual(self) -> np.ndarray:
        """The regression target p* − p_e (3,), N s, contact frame."""
        return self.best_impulse - self.engine_impulse


# --- recorded data ------------------------------------------------------------------------------
def _name(trajectory: Any) -> str:
    traj_id = str(getattr(trajectory, "traj_id", "?"))
    source = str(getattr(trajectory, "source", "") or "")
    if source and traj_id in source:
        return source
    return f"trajectory {traj_id!r}" + (f" ({source})" if source else "")


def _checked(trajectory: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """(times, linear velocity, angular velocity, quaternions, Δt) of a usable 3D trajectory."""
    where = _name(trajectory)
    if getattr(trajectory, "planar", False):
        raise SceneError(f"{where}: a planar trajectory; contact events are segmented from 3D tosses only")
    try:
        arrays = [np.asarray(getattr(trajectory, name), dtype=np.float64) for name in
                  ("times_s", "linear_velocity_mps", "angular_velocity_world_radps",
                   "quat_wxyz", "positions_m")]
    except (AttributeError, TypeError, ValueError) as exc:
        raise DataError(f"{where}: not a trajectory ({exc})") from None
    times, velocity, omega, quat, positions = arrays
    n = len(times)
    if n < MIN_SAMPLES:
        raise DataError(f"{where}: {n} samples, event segmentation needs at least {MIN_SAMPLES}")
    for label, array, width in (("linear velocity", velocity, 3), ("angular velocity", omega, 3),
                                ("quaternion", quat, 4), ("position", positions, 3)):
        if array.shape != (n, width):
            raise DataError(f"{where}: {label} has shape {array.shape}, expected ({n}, {width})")
    for label, array in (("times", times), ("linear velocity", velocity),
                         ("angular velocity", omega), ("quaternion", quat),
                         ("position", positions)):
        bad = ~np.isfinite(array)
        if bad.any():
            raise DataError(f"{where}: {label} has a NaN or infinite value at sample "
                            f"{int(np.argwhere(bad)[0][0])}")
    steps = np.diff(times)
    if (steps <= 0).any() or np.ptp(steps) > 1e-6 * steps.mean():
        raise DataError(f"{where}: samples are not evenly spaced in time")
    return times, velocity, omega, quat, float(steps.mean())


def velocity_jumps(trajectory: Trajectory, mass_kg: float = 0.37,
                   inertia_body: np.ndarray | None = None,
                   gravity_mps2: Sequence[float] = (0.0, 0.0, -9.81)) -> np.ndarray:
    """Recorded velocity change beyond free flight, per sample: (T − 1,) m/s.

    Entry k − 1 is ‖q̇_k − q̇_{k−1} − (g Δt, 0)‖_M / √m = √(‖Δv − gΔt‖² + Δωᵀ I Δω / m), with
    I the world-frame inertia at sample k − 1 (q̇ = (v, ω), world frame).

    Parameters
    ----------
    trajectory : Trajectory
        A 3D trajectory (velocities m/s and rad/s, world frame).
    mass_kg : float
        Body mass (the cube: 0.37 kg).
    inertia_body : ndarray (3, 3), optional
        Inertia about the centre, body frame, kg m²; default the ContactNets cube's.
    gravity_mps2 : sequence of 3 floats
        World gravity, m/s².
    """
    from residualsim.sim.scenes.cube import CubeScene

    _, velocity, omega, quat, dt = _checked(trajectory)
    inertia = CubeScene.inertia_body if inertia_body is None else inertia_body
    return _jumps(velocity, omega, quat, dt, mass_kg, inertia, gravity_mps2)


def _jumps(velocity: np.ndarray, omega: np.ndarray, quat: np.ndarray, dt: float,
           mass_kg: float, inertia_body: np.ndarray, gravity_mps2: Sequence[float]
           ) -> np.ndarray:
    from residualsim.sim.scenes.base import quat_wxyz_to_matrix

    linear = np.diff(velocity, axis=0) - np.asarray(gravity_mps2, dtype=np.float64) * dt
    angular = np.diff(omega, axis=0)
    rotations = np.array([quat_wxyz_to_matrix(q / np.linalg.norm(q)) for q in quat[:-1]])
    world = np.einsum("tij,jk,tlk->til", rotations, np.asarray(inertia_body, float), rotations)
    spin = np.einsum("ti,tij,tj->t", angular, world, angular) / float(mass_kg)
    return np.sqrt(np.sum(linear**2, axis=1) + np.maximum(spin, 0.0))


def contact_runs(trajectory: Trajectory, threshold_mps: float = JUMP_THRESHOLD_MPS,
                 edge_mps: float = JUMP_EDGE_MPS, **jump_options: Any
                 ) -> list[tuple[int, int]]:
    """Recorded contact runs [(s, e), ...] of a 3D recording.

    Sample k is a contact sample when jump k − 1 of :func:`velocity_jumps` (the change from
    sample k − 1 to k) exceeds ``threshold_mps``; consecutive contact samples form a run,
    which then takes in the sample just before and the one just after it when their jumps
    exceed ``edge_mps`` (an impact between two samples shows in two backward-difference
    velocities); runs that then touch are merged. The pre-contact sample is s − 1 (s ≥ 1),
    the post-contact sample e. Runs that reach the last sample (contact still going on when
    the recording ends) are left out.

    Parameters
    ----------
    trajectory : Trajectory
        A 3D recording.
    threshold_mps : float
        Jump threshold, m/s (default :data:`JUMP_THRESHOLD_MPS`).
    edge_mps : float
        Lower threshold of the samples next to a run, m/s (default :data:`JUMP_EDGE_MPS`);
        ``edge_mps >= threshold_mps`` switches the extension off.
    **jump_options
        Passed to :func:`velocity_jumps` (mass, inertia, gravity).
    """
    for label, value in (("threshold_mps", threshold_mps), ("edge_mps", edge_mps)):
        if not (math.isfinite(value) and value > 0):
            raise ParameterError(f"{label} must be a positive number, got {value}")
    jumps = velocity_jumps(trajectory, **jump_options)
    above = np.concatenate([[False], jumps > threshold_mps])  # by sample index
    edge = np.concatenate([[False], jumps > edge_mps])
    core: list[list[int]] = []
    for index in np.flatnonzero(above).tolist():
        if core and core[-1][1] == index - 1:
            core[-1][1] = index
        else:
            core.append([index, index])
    runs: list[list[int]] = []
    for start, end in core:
        if start - 1 >= 1 and edge[start - 1]:
            start -= 1
        if end + 1 < len(edge) and edge[end + 1]:
            end += 1
        if runs and runs[-1][1] >= start - 1:
            runs[-1][1] = max(runs[-1][1], end)
        else:
            runs.append([start, end])
    last = len(jumps)
    return [(s, e) for s, e in runs if e < last]


# --- the best impulse ---------------------------------------------------------------------------
def best_impulse_3d(mass_matrix: np.ndarray, jacobian: np.ndarray, velocity_change: np.ndarray,
                    friction: float) -> np.ndarray:
    """p* (3,): the friction-cone impulse whose velocity change best explains a change.

    Minimises ‖M⁻¹Jᵀp − Δq̇‖_M over {p_n ≥ 0, ‖(p_t1, p_t2)‖ ≤ μ p_n} exactly (see the module
    docstring: interior optimum, apex, or the best point of the cone's surface).

    Parameters
    ----------
    mass_matrix : ndarray (nv, nv)
        Generalised mass matrix M (cube: diag(m I3, I_world)).
    jacobian : ndarray (3, nv)
        Contact Jacobian, rows (n, t1, t2).
    velocity_change : ndarray (nv,)
        The generalised velocity change to explain, gravity removed (m/s, rad/s, world).
    friction : float
        μ ≥ 0.

    Returns
    -------
    ndarray (3,)
        p* in N s, contact frame (n, t1, t2).
    """
    friction = float(friction)
    if not (math.isfinite(friction) and friction >= 0):
        raise ParameterError(f"friction must be a finite number >= 0, got {friction}")
    mass = np.asarray(mass_matrix, dtype=np.float64)
    jac = np.asarray(jacobian, dtype=np.float64)
    change = np.asarray(velocity_change, dtype=np.float64)
    if jac.shape[0] != 3 or mass.shape != (jac.shape[1],) * 2 or change.shape != (jac.shape[1],):
        raise ParameterError(f"need M (nv, nv), J (3, nv), Δq̇ (nv,); got {mass.shape}, "
                             f"{jac.shape}, {change.shape}")
    if not (np.isfinite(mass).all() and np.isfinite(jac).all() and np.isfinite(change).all()):
        raise ParameterError("best_impulse_3d: M, J and Δq̇ must be finite")
    hessian = jac @ np.linalg.solve(mass, jac.T)  # objective pᵀHp − 2pᵀc
    hessian = 0.5 * (hessian + hessian.T)
    target = jac @ change

    def objective(p: np.ndarray) -> float:
        return float(p @ hessian @ p - 2.0 * p @ target)

    free = np.linalg.solve(hessian, target)
    if free[0] >= 0 and np.hypot(free[1], free[2]) <= friction * free[0]:
        return free
    candidates = [np.zeros(3)]
    if target[0] + friction * np.hypot(target[1], target[2]) > 0:  # apex not optimal
        candidates.append(_best_on_surface(hessian, target, friction))
    return min(candidates, key=objective)


def _best_on_surface(hessian: np.ndarray, target: np.ndarray, friction: float) -> np.ndarray:
    """The best point s d(θ), d = (1, μ cos θ, μ sin θ), s ≥ 0, of the cone's surface."""
    from scipy.optimize import minimize_scalar

    def directions(theta: np.ndarray) -> np.ndarray:
        theta = np.atleast_1d(theta)
        return np.column_stack([np.ones_like(theta), friction * np.cos(theta),
                                friction * np.sin(theta)])

    def value(theta: np.ndarray) -> np.ndarray:  # min over s of the objective, at θ
        d = directions(theta)
        along = np.maximum(d @ target, 0.0)
        return -along**2 / np.einsum("ni,ij,nj->n", d, hessian, d)

    grid = value(_GRID)
    best = int(np.argmin(grid))
    step = _GRID[1] - _GRID[0]
    refined = minimize_scalar(lambda t: float(value(t)[0]),
                              bounds=(_GRID[best] - step, _GRID[best] + step), method="bounded",
                              options={"xatol": 1e-12})
    theta = float(refined.x) if refined.fun <= grid[best] else float(_GRID[best])
    d = directions(theta)[0]
    return max(0.0, float(d @ target)) / float(d @ hessian @ d) * d


# --- engine matching ----------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _EngineEvent:
    step: int  # steps after the window's first state
    model: ContactModel


def _engine_window(engine: Engine, initial_state: np.ndarray, n_steps: int,
                   guard: ContactGuard) -> tuple[np.ndarray, list[_EngineEvent], np.ndarray]:
    """The engine from ``initial_state`` for ``n_steps``: states (n + 1, 13), the events
    Algorithm 1 would fire on the way, and per index the velocity jump of the step into it
    (as :func:`velocity_jumps`, m/s; 0 at index 0)."""
    scene, cid = engine.scene, engine.client
    engine.reset(initial_state)
    read, step, get_contacts = scene.read_raw, pb.stepSimulation, pb.getContactPoints
    body, static, link = scene.body, scene.static_body, scene.link
    spacing2 = guard.new_point_distance_m ** 2
    raws = [read()]
    recent: list[list[tuple]] = []
    events: list[_EngineEvent] = []
    for index in range(1, n_steps + 1):
        step(physicsClientId=cid)
        raw = read()
        touching = [p for p in get_contacts(body, static, link, -1, physicsClientId=cid)
                    if is_touching(p)]
        if touching:
            fresh = [p for p in touching if far_from(p[6], recent, spacing2)]
            if fresh:
                model = event_contact_model(engine, scene.raw_to_states([raws[-1]])[0], fresh)
                if model.velocity[0] <= -guard.min_approach_mps:
                    events.append(_EngineEvent(index, model))
            recent.append([p[6] for p in touching])
            del recent[:-MEMORY_STEPS]
        elif recent:
            recent = []
        raws.append(raw)
    states = scene.raw_to_states(raws)
    _, quat, velocity, omega = scene.rigid_motion(states)
    jumps = np.concatenate([[0.0], _jumps(velocity, omega, quat, engine.dt_s, scene.mass_kg,
                                          scene.inertia_body, scene.settings.gravity_mps2)])
    return states, events, jumps


def _signed_distance(engine: Engine, state: np.ndarray) -> float:
    """Distance (m) between the body in ``state`` and the table, negative when penetrating
    (+inf beyond 5 cm)."""
    scene = engine.scene
    engine.reset(state)
    points = pb.getClosestPoints(scene.body, scene.static_body, 0.05, scene.link, -1,
                                 physicsClientId=engine.client)
    return min((p[8] for p in points), default=math.inf)


def _up(engine: Engine) -> np.ndarray:
    gravity = np.asarray(engine.scene.settings.gravity_mps2, dtype=np.float64)
    return -gravity / np.linalg.norm(gravity)


def table_offset(trajectory: Trajectory, engine: Engine) -> float:
    """Height (m) of the recording's table in the engine's world: the median distance
    between the body and the engine's table over the last :data:`REST_SAMPLES` samples
    when the recording ends at rest (median speed |v| + r_g |ω| over them below
    :data:`REST_SPEED_MPS`, r_g the radius of gyration), else 0.

    Negative when the recorded body rests below z = 0 (the ContactNets cube: −1.9 mm median
    over the training tosses, from −2.5 to −1.2 mm, 5th to 95th percentile; the engine's
    own cube rests within 0.12 mm of the table).
    """
    _, velocity, omega, _, _ = _checked(trajectory)
    n = len(velocity)
    tail = slice(max(0, n - REST_SAMPLES), n)
    radius = math.sqrt(float(np.trace(engine.scene.inertia_body)) / 3.0 / engine.scene.mass_kg)
    speed = np.linalg.norm(velocity[tail], axis=1) + radius * np.linalg.norm(omega[tail], axis=1)
    if np.median(speed) >= REST_SPEED_MPS:
        return 0.0
    scene = engine.scene
    heights = [_signed_distance(engine, scene.state_from_trajectory(trajectory, k))
               for k in range(*tail.indices(n))]
    heights = [h for h in heights if math.isfinite(h)]
    return float(np.median(heights)) if heights else 0.0


def _start_state(engine: Engine, state: np.ndarray, offset_m: float) -> tuple[np.ndarray, bool]:
    """The recorded state the engine starts from: moved up by −``offset_m`` (the recorded
    table to z = 0), then lifted out of the table when it still penetrates by more than
    :data:`LIFT_TOLERANCE_M`. Returns (state, lifted)."""
    start = np.array(state, dtype=np.float64)
    start[0:3] -= offset_m * _up(engine)
    depth = -_signed_distance(engine, start)
    if depth <= LIFT_TOLERANCE_M:
        return start, False
    start[0:3] += depth * _up(engine)
    return start, True


def _generalised_velocity(states: np.ndarray) -> np.ndarray:
    return np.asarray(states)[..., 7:13]


def segment_events(trajectory: Trajectory, engine: Engine, *, friction: float | None = None,
                   threshold_mps: float = JUMP_THRESHOLD_MPS, edge_mps: float = JUMP_EDGE_MPS,
                   guard: ContactGuard = ContactGuard(),
                   counts: dict[str, int] | None = None) -> list[RecordedEvent]:
    """The recorded contact events of one toss, matched with the engine's events.

    See the module docstring: recorded contact runs (:func:`contact_runs`), the engine run
    from each run's recorded pre-contact state with Algorithm 1's event detection, one event
    per engine event, p* (:func:`best_impulse_3d`) and p_e on each window.

    Parameters
    ----------
    trajectory : Trajectory
        A 3D cube recording at the engine's rate (positions m, velocities m/s and rad/s,
        world frame).
    engine : Engine
        The (calibrated) cube engine, its ``dt_s`` equal to the recording's sample period.
    friction : float, optional
        μ of the cone of p*; default the engine's lateral friction.
    threshold_mps, edge_mps : float
        Recorded jump thresholds of :func:`contact_runs`, m/s.
    guard : ContactGuard
        Event definition (use the rollouts' guard).
    counts : dict, optional
        Updated with ``runs`` (recorded contact runs), ``events`` (events returned),
        ``no_engine_event`` (runs without an engine event), ``lifted`` (runs whose
        recorded pre-contact state penetrated the engine's table by more than
        :data:`LIFT_TOLERANCE_M` and was lifted out) and ``shifted`` (1 when the
        recording's table was moved to z = 0, see :func:`table_offset`).

    Returns
    -------
    list of RecordedEvent
        In time order.
    """
    friction = engine.params.lateral_friction if friction is None else float(friction)
    if not (math.isfinite(friction) and friction >= 0):
        raise ParameterError(f"friction must be a finite number >= 0, got {friction}")
    where = _name(trajectory)
    _, _, _, _, dt = _checked(trajectory)
    if abs(dt - engine.dt_s) > 1e-6 * engine.dt_s:
        raise DataError(f"{where}: sampled at {1 / dt:.3f} Hz but the engine steps at "
                        f"{1 / engine.dt_s:.3f} Hz (build it with recording_settings)")
    scene = engine.scene
    gravity = np.concatenate([np.asarray(scene.settings.gravity_mps2, dtype=np.float64),
                              np.zeros(3)])
    recorded = np.array([scene.state_from_trajectory(trajectory, k)
                         for k in range(len(trajectory.times_s))])
    qdot = _generalised_velocity(recorded)
    runs = contact_runs(trajectory, threshold_mps, edge_mps,
                        mass_kg=scene.mass_kg, inertia_body=scene.inertia_body,
                        gravity_mps2=scene.settings.gravity_mps2)
    offset = table_offset(trajectory, engine)
    if abs(offset) <= TABLE_OFFSET_TOLERANCE_M:
        offset = 0.0
    tally = {"runs": len(runs), "events": 0, "no_engine_event": 0, "lifted": 0,
             "shifted": int(offset != 0.0)}
    out: list[RecordedEvent] = []
    last = len(recorded) - 1
    for r, (start, end) in enumerate(runs):
        pre = start - 1
        limit = runs[r + 1][0] - 1 if r + 1 < len(runs) else last
        horizon = min(limit, end + EXTRA_STEPS) - pre
        start_state, lifted = _start_state(engine, recorded[pre], offset)
        tally["lifted"] += lifted
        states, events, jumps = _engine_window(engine, start_state, horizon, guard)
        events = [e for e in events if e.step <= end - pre]  # began within the recorded run
        if not events:
            tally["no_engine_event"] += 1
            continue
        close = events[-1].step  # the engine's impact goes on while it jumps as much
        while close < horizon and jumps[close + 1] > threshold_mps:
            close += 1
        bounds = [0] + [e.step - 1 for e in events[1:]] + [max(end - pre, close)]
        engine_qdot = _generalised_velocity(states)
        for j, event in enumerate(events):
            a, b = bounds[j], bounds[j + 1]
            drift = gravity * (b - a) * dt
            rec_change = qdot[pre + b] - qdot[pre + a] - drift
            eng_change = engine_qdot[b] - engine_qdot[a] - drift
            model = event.model
            best = best_impulse_3d(model.mass_matrix, model.jacobian, rec_change, friction)
            engine_impulse = best_impulse_3d(model.mass_matrix, model.jacobian, eng_change,
                                             friction)
            out.append(RecordedEvent(
                traj_id=str(trajectory.traj_id), start_index=pre, start_state=start_state,
                pre_index=pre + a, post_index=pre + b,
                event_index=pre + event.step, features=model.features, frame=model.frame,
                point_world=model.point_world, jacobian=model.jacobian,
                mass_matrix=model.mass_matrix, recorded_change=rec_change,
                engine_change=eng_change, best_impulse=best, engine_impulse=engine_impulse))
            tally["events"] += 1
    if counts is not None:
        for key, value in tally.items():
            counts[key] = counts.get(key, 0) + value
    return out
