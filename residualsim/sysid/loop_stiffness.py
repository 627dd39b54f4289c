"""Identify the loop's spring stiffnesses κ = (κ_θ, κ_ψ) from an arm's joint recording.

A recording (:class:`~residualsim.data.JointRecording`) holds the arm's measured angles
b_meas and torques T_meas. The model (:class:`LoopReplay`) rebuilds the grasp at the first
measured pose, lets the loop settle under gravity with stiffness κ (the loop's initial
condition follows from κ), then replays the torques with feedback

    F = T_meas - (K + λ K_obs) (b - b_meas)      (and the matching velocity terms)

where K is the replay's LQR feedback (:func:`~residualsim.sim.scenes.arm_loop.lqr_gains`,
bandwidth ``bandwidth_radps``) and λ K_obs an *observer* that pulls the simulation towards
the measured coordinates (bandwidth ``observer_bandwidth_radps``). The residual is the
end-effector position error FK(b) - FK(b_meas) (metres, world frame) at every sample.

Methods (all evaluate rollouts through :class:`~residualsim.parallel.ShardedWorkers`, so
finite differences run in parallel):

* ``lsq``: least squares in log κ at λ = 0 (:func:`scipy.optimize.least_squares`, trust
  region, forward-difference Jacobian whose columns run in parallel);
* ``gradient``: steepest descent on the cost J = mean |e|² (cm²) in κ with Armijo steps
  (α = β = 0.4, the paper's), finite-difference gradients;
* ``homotopy``: Luo et al.'s method: least squares at λ = 1, then λ lowered in steps of 0.2
  to 0, each solve warm-started from the last; optionally the 7 joint-angle sensor zero
  offsets are estimated with κ (``estimate_offsets``);
* ``mh``: a Metropolis-Hastings posterior over κ (:class:`~residualsim.sysid.mcmc.MetropolisHastings`)
  with a Gaussian likelihood of the end-effector error sampled at 10 Hz.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from residualsim.atomic import atomic_open
from residualsim.data.joint_recording import JointRecording
from residualsim.errors import ParameterError, SceneError
from residualsim.parallel import ShardedWorkers

__all__ = ["ReplayConfig", "LoopReplay", "RolloutPool", "Identification", "identify_stiffness",
           "METHODS", "HOMOTOPY_LAMBDAS", "KAPPA_BOUNDS", "stable_kappa_max"]

log = logging.getLogger(__name__)

METHODS = ("lsq", "gradient", "homotopy", "mh")
#: λ schedule of the homotopy method (Luo et al.: from 1 to 0 in steps of 0.2).
HOMOTOPY_LAMBDAS = (1.0, 0.8, 0.6, 0.4, 0.2, 0.0)
#: Search box of κ (N m/rad) for every method: two orders of magnitude, and the default
#: 12-link model is stable over all of it (see :func:`stable_kappa_max`).
KAPPA_BOUNDS = (0.1, 10.0)
#: The homotopy's intermediate solves (λ > 0) only carry the estimate to the next λ, so they
#: stop early: at a relative step of 1 % in log κ or after this many cost evaluations (each
#: with its two Jacobian columns). Measured from [5, 5]: the λ = 1 cost is a plateau
#: (1.60-1.69 mm RMS over κ_θ in [5, 10]) on which a full solve spends 60 rollouts drifting
#: to the bound, while λ = 0.8 lands within 10 % of the optimum from there in 3 iterations.
#: A stage that spends its 3 evaluations costs 7 rollouts (no Jacobian at its last point,
#: see :func:`_least_squares`); from [5, 5] the stages λ = 1 ... 0 take 5, 4, 7, 7, 7, 7.
WAYPOINT_XTOL, WAYPOINT_EVALUATIONS = 1e-2, 3
#: The final λ = 0 solve (and ``lsq``'s only one) stops at a step below this in log κ
#: (relative): 1e-3 is 0.1 % of κ, a tenth of the 1 % target. From [5, 5] it ends the
#: homotopy 2 iterations (4 rollouts: 41 -> 37) earlier than 1e-4 did, 0.004 % from that
#: result (-0.10 %, -0.17 % from the truth either way); lsq 23 -> 19 rollouts, the same κ.
#: The 20-seed study (train/loop_seed_study.py) still reaches κ* from 20 of 20 seeds
#: (largest distance 0.12 %, 36-54 rollouts).
FINAL_XTOL = 1e-3


@dataclass(frozen=True)
class ReplayConfig:
    """How the identified model replays a recording.

    ``n_links`` of the model loop; ``substeps`` internal steps per recorded period and
    ``solver_iterations`` (closure drift stays below 0.1 mm over 20 s at these settings);
    ``bandwidth_radps`` of the replay feedback K and ``observer_bandwidth_radps`` of the
    homotopy observer K_obs (both LQR, see :func:`lqr_gains`); ``settle_s`` seconds of
    settling before the replay.
    """

    n_links: int = 12
    substeps: int = 5
    solver_iterations: int = 10
    bandwidth_radps: float = 10.0
    observer_bandwidth_radps: float = 40.0
    settle_s: float = 0.5


class LoopReplay:
    """The model of one recording: an :class:`ArmLoopScene` that replays its torques."""

    def __init__(self, recording: JointRecording, config: ReplayConfig = ReplayConfig()
                 ) -> None:
        from residualsim.sim.scenes.arm_loop import ArmLoopScene, ArmLoopSettings, lqr_gains

        if recording.joint_angles_rad.shape[1] != 7:
            raise SceneError(f"{recording.source or recording.rec_id}: the arm-loop scene "
                             f"needs 7 arm joints, the recording has "
                             f"{recording.joint_angles_rad.shape[1]}")
        self.recording, self.config = recording, config
        settings = ArmLoopSettings(dt_s=recording.dt_s, substeps=config.substeps,
                                   solver_iterations=config.solver_iterations)
        self.measured = recording.joint_angles_rad
        self.scene = ArmLoopScene(config.n_links, settings, arm_start=self.measured[0])
        mass = self.scene.arm_mass_matrix(self.measured[0])
        self.gains = lqr_gains(mass, config.bandwidth_radps)
        self.observer = lqr_gains(mass, config.observer_bandwidth_radps)
        self._measured_ee: dict[bytes, np.ndarray] = {}

    def measured_ee(self, offsets: np.ndarray) -> np.ndarray:
        """FK of the offset-corrected measured angles, (T, 3) m world (cached)."""
        key = offsets.tobytes()
        if key not in self._measured_ee:
            self._measured_ee = {key: self.scene.forward_kinematics(self.measured - offsets)}
        return self._measured_ee[key]

    def residuals(self, kappa: Sequence[float], lam: float = 0.0,
                  offsets: Sequence[float] | None = None) -> np.ndarray:
        """End-effector position errors (T, 3) m of the replay with stiffness ``kappa``,
        observer weight ``lam`` and sensor zero offsets (7,) rad (measured = true + offset).
        A diverged simulation gives an array of NaN."""
        offsets = np.zeros(7) if offsets is None else np.asarray(offsets, dtype=float)
        reference = self.measured - offsets
        scene = self.scene
        kp, kd = (g + lam * o for g, o in zip(self.gains, self.observer))
        try:
            scene.regrasp(reference[0])
            scene.settle(kappa, self.config.settle_s)
            run = scene.drive(kappa, self.recording.joint_torques_nm, reference, (kp, kd))
        except SceneError:
            return np.full((len(reference), 3), np.nan)
        return scene.forward_kinematics(run.angles) - self.measured_ee(offsets)

    def close(self) -> None:
        self.scene.close()


def _replay_tasks(replay: LoopReplay, slot: int, payload: tuple[int, list]) -> list:
    n_slots, tasks = payload
    return [(index, replay.residuals(*task)) for index, task in enumerate(tasks)
            if index % n_slots == slot]


class RolloutPool:
    """Workers each holding a :class:`LoopReplay` of the same recording; counts rollouts.

    With ``cache_dir``, every finished rollout is also written there (one ``.npy`` per task,
    atomically, named by a hash of the recording, the replay configuration and the task) and
    read back instead of recomputed. Every method is deterministic given its rollouts, so a
    run interrupted and started again with the same cache replays its finished work from
    disk and continues where it stopped (``calibrate --scene arm-loop --resume``).
    """

    def __init__(self, recording: JointRecording, config: ReplayConfig = ReplayConfig(),
                 n_workers: int = 1, cache_dir: str | Path | None = None) -> None:
        self.n_workers = int(n_workers)
        self.rollouts = 0  #: rollouts computed by this pool
        self.reused = 0  #: rollouts read back from the cache
        factory = functools.partial(LoopReplay, recording, config)
        self._workers = ShardedWorkers(factory, list(range(self.n_workers)), self.n_workers)
        self._cache = Path(cache_dir) if cache_dir is not None else None
        if self._cache is not None:
            self._cache.mkdir(parents=True, exist_ok=True)
            digest = hashlib.sha256()
            for array in (recording.times_s, recording.joint_angles_rad,
                          recording.joint_torques_nm):
                digest.update(np.ascontiguousarray(array, dtype=np.float64).tobytes())
            digest.update(json.dumps(asdict(config), sort_keys=True).encode())
            self._prefix = digest.hexdigest()

    @property
    def evaluations(self) -> int:
        """Rollouts asked for so far, computed or reused (what budgets count)."""
        return self.rollouts + self.reused

    def _cache_path(self, task: tuple) -> Path:
        kappa, lam, offsets = task
        digest = hashlib.sha256(self._prefix.encode())
        for part in (kappa, [lam], np.zeros(0) if offsets is None else offsets):
            digest.update(np.asarray(part, dtype=np.float64).tobytes())
            digest.update(b"|")
        return self._cache / f"{digest.hexdigest()[:32]}.npy"

    def residuals(self, tasks: Sequence[tuple]) -> list[np.ndarray]:
        """Residuals of every ``(kappa, lam, offsets)`` task, computed in parallel."""
        tasks = [tuple(task) for task in tasks]
        found: dict[int, np.ndarray] = {}
        if self._cache is not None:
            for index, task in enumerate(tasks):
                path = self._cache_path(task)
                if path.is_file():
                    found[index] = np.load(path)
        todo = [i for i in range(len(tasks)) if i not in found]
        if todo:
            results = self._workers.map(_replay_tasks, (self.n_workers,
                                                        [tasks[i] for i in todo]))
            for local, residual in (pair for slot in results for pair in slot):
                found[todo[local]] = residual
                if self._cache is not None:
                    with atomic_open(self._cache_path(tasks[todo[local]])) as handle:
                        np.save(handle, residual)
        self.rollouts += len(todo)
        self.reused += len(tasks) - len(todo)
        return [found[i] for i in range(len(tasks))]

    def close(self) -> None:
        self._workers.close()

    def __enter__(self) -> RolloutPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Identification:
    """Result of :func:`identify_stiffness`: κ (N m/rad), the final RMS end-effector error
    (m), the sensor offsets (rad, if estimated), rollouts, wall time and the iterates."""

    method: str
    kappa: np.ndarray
    rms_m: float
    rollouts: int
    wall_s: float
    reused: int = 0
    offsets: np.ndarray | None = None
    iterations: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    posterior: Any = None

    def as_json(self) -> dict[str, Any]:
        out = {"method": self.method, "kappa": [float(k) for k in self.kappa],
               "rms_mm": 1000 * self.rms_m, "rollouts": self.rollouts, "reused": self.reused,
               "wall_s": round(self.wall_s, 2), "iterations": self.iterations}
        if self.offsets is not None:
            out["offsets_rad"] = [float(o) for o in self.offsets]
        return out


def stable_kappa_max(config: ReplayConfig, dt_s: float) -> float:
    """The largest stiffness (N m/rad) at which the model loop stays stable at the internal
    step ``dt_s / config.substeps``.

    The loop's springs are explicit (a torque computed from the last step's angles), so the
    stiff end of the search box is limited by the step: ω = √(κ/I) must stay below about
    1/step. Measured on the 12-link model at 2 ms: stable at κ = 10 N m/rad, diverged at
    κ = 15 (the cost then jumps by metres between neighbouring κ). The limit scales with
    1/step² and, for other link counts, with the link inertia I ∝ n⁻³ (an extrapolation).
    """
    step_s = dt_s / config.substeps
    return 10.0 * (0.002 / step_s) ** 2 * (12 / config.n_links) ** 3


class _Iterates(list):
    """The iterates of a method; each is also passed to ``callback`` (the progress report)
    with the rollouts computed and reused so far."""

    def __init__(self, callback: Callable[[dict], None] | None, pool: RolloutPool) -> None:
        super().__init__()
        self.callback, self.pool = callback, pool

    def append(self, row: dict[str, Any]) -> None:
        super().append(row)
        if self.callback is not None:
            self.callback({**row, "rollouts": self.pool.rollouts, "reused": self.pool.reused})


def _rms(residual: np.ndarray) -> float:
    value = float(np.sqrt(np.mean(np.sum(residual ** 2, axis=-1))))
    return value if math.isfinite(value) else math.inf


def _check_seed(seed: Sequence[float], bounds: tuple[float, float]) -> np.ndarray:
    seed = np.asarray(seed, dtype=float)
    low, high = bounds
    if seed.shape != (2,) or not np.isfinite(seed).all() or (seed < low).any() or \
            (seed > high).any():
        raise ParameterError(f"seed kappa must be two stiffnesses in [{low}, {high}] N m/rad, "
                             f"got {seed.tolist()}")
    return seed


class _Stopped(Exception):
    """Raised by :func:`_least_squares`' Jacobian at a point where scipy is certain to stop
    without using it."""

    def __init__(self, x: np.ndarray) -> None:
        super().__init__()
        self.x = x


def _least_squares(pool: RolloutPool, x0: np.ndarray, lam: float, n_offsets: int,
                   history: list, max_iterations: int, bounds: tuple[float, float],
                   xtol: float = 1e-4) -> tuple[np.ndarray, np.ndarray]:
    """Trust-region least squares over x = (log κ_θ, log κ_ψ, offsets...) at observer λ;
    Jacobian columns by forward differences, evaluated in parallel. Stops when a step
    changes x by less than ``xtol`` (relative), the cost by less than 1e-5 (relative) or
    after ``max_iterations`` cost evaluations. Returns x and the residuals (T, 3) m there.

    scipy takes the Jacobian at every accepted point before it tests whether to stop, so a
    solve ending on an accepted step would pay for two rollouts it never uses. The Jacobian
    therefore checks scipy's own stopping rules first (the evaluation budget spent, or this
    step below ``xtol``) and ends the solve there instead; the iterates and the result are
    the same as without the check. (The cost-change test needs scipy's predicted reduction
    and is left to scipy.)"""
    from scipy.optimize import least_squares

    cache: dict[bytes, np.ndarray] = {}
    raw: dict[bytes, np.ndarray] = {}
    state: dict[str, Any] = {"nfev": 0, "x": None}  # scipy's evaluations; last Jacobian's x

    def unpack(x: np.ndarray) -> tuple:
        offsets = x[2:] if n_offsets else None
        return (np.exp(x[:2]), lam, offsets)

    def flat(residual: np.ndarray) -> np.ndarray:  # a diverged rollout: a large finite cost
        residual = residual.ravel()
        return np.where(np.isfinite(residual), residual, 1.0)

    def evaluate(x: np.ndarray) -> np.ndarray:
        key = x.tobytes()
        if key not in cache:
            raw[key] = pool.residuals([unpack(x)])[0]
            cache[key] = flat(raw[key])
            history.append({"lambda": lam, "kappa": np.exp(x[:2]).tolist(),
                            "rms_mm": 1000 * _rms(cache[key].reshape(-1, 3))})
        return cache[key]

    def fun(x: np.ndarray) -> np.ndarray:
        state["nfev"] += 1
        return evaluate(x)

    def jac(x: np.ndarray) -> np.ndarray:
        previous, state["x"] = state["x"], x.copy()
        if previous is not None and (
                state["nfev"] >= max_iterations or  # scipy: nfev == max_nfev
                np.linalg.norm(x - previous) < 0.999 * xtol * (xtol + np.linalg.norm(previous))):
            raise _Stopped(x.copy())
        steps = np.where(np.arange(len(x)) < 2, 1e-3, 1e-5)  # log κ; offsets in rad
        base = evaluate(x)
        perturbed = [x + step * np.eye(len(x))[i] for i, step in enumerate(steps)]
        columns = pool.residuals([unpack(p) for p in perturbed])
        return np.column_stack([(flat(c) - base) / s for c, s in zip(columns, steps)])

    low = [math.log(bounds[0])] * 2 + [-0.05] * n_offsets
    high = [math.log(bounds[1])] * 2 + [0.05] * n_offsets
    x0 = np.clip(x0, np.array(low) + 1e-9, np.array(high) - 1e-9)
    try:
        x = least_squares(fun, x0, jac=jac, bounds=(low, high), method="trf",
                          x_scale=[1.0, 1.0] + [1e-3] * n_offsets, xtol=xtol, ftol=1e-5,
                          max_nfev=max_iterations).x
    except _Stopped as stopped:
        x = stopped.x
    evaluate(x)  # scipy returns an evaluated point: no rollout
    return x, raw[x.tobytes()]


def _gradient_descent(pool: RolloutPool, kappa0: np.ndarray, history: list,
                      max_rollouts: int, bounds: tuple[float, float], alpha: float = 0.4, beta: float = 0.4,
                      tolerance: float = 1e-6) -> np.ndarray:
    """Steepest descent on J(κ) = mean |e|² in cm² with Armijo backtracking (s = 1, β, β²...),
    two trial steps evaluated at once; stops when a step no longer lowers J by
    ``tolerance`` relative or the rollout budget is spent."""
    def cost(residual: np.ndarray) -> float:
        value = float(np.mean(np.sum((100 * residual) ** 2, axis=-1)))
        return value if math.isfinite(value) else math.inf

    low, high = bounds
    kappa = kappa0.copy()
    value = cost(pool.residuals([(kappa, 0.0, None)])[0])
    history.append({"kappa": kappa.tolist(), "cost_cm2": value})
    h = 1e-3
    while pool.evaluations < max_rollouts:
        probes = [kappa + h * kappa[i] * np.eye(2)[i] for i in range(2)]
        grad = np.array([(cost(r) - value) / (h * kappa[i]) for i, r in
                         enumerate(pool.residuals([(p, 0.0, None) for p in probes]))])
        if not np.isfinite(grad).all() or not grad.any():
            break
        step, accepted = 1.0, None
        while accepted is None and step > 1e-8 and pool.evaluations < max_rollouts:
            trials = [np.clip(kappa - s * grad, low, high) for s in (step, step * beta)]
            values = [cost(r) for r in pool.residuals([(t, 0.0, None) for t in trials])]
            for s, trial, trial_value in zip((step, step * beta), trials, values):
                if trial_value <= value - alpha * s * float(grad @ grad):
                    accepted = (trial, trial_value)
                    break
            step *= beta * beta
        if accepted is None:
            break
        improvement = (value - accepted[1]) / max(value, 1e-300)
        kappa, value = accepted
        history.append({"kappa": kappa.tolist(), "cost_cm2": value})
        if improvement < tolerance:
            break
    return kappa


def identify_stiffness(recording: JointRecording, method: str = "homotopy",
                       seed_kappa: Sequence[float] = (5.0, 5.0), *,
                       config: ReplayConfig = ReplayConfig(), n_workers: int = 1,
                       estimate_offsets: bool = False, max_rollouts: int = 120,
                       lambdas: Sequence[float] = HOMOTOPY_LAMBDAS,
                       mh_samples: int = 200, mh_burn_in: int = 100, rng: int = 0,
                       kappa_bounds: tuple[float, float] = KAPPA_BOUNDS,
                       cache_dir: str | Path | None = None, xtol: float = FINAL_XTOL,
                       progress: Callable[[dict], None] | None = None) -> Identification:
    """Identify (κ_θ, κ_ψ) N m/rad of the loop from ``recording`` with ``method`` (see the
    module docstring), starting from ``seed_kappa``, searching inside ``kappa_bounds``
    (whose upper end must keep the model stable: :func:`stable_kappa_max`).
    ``max_rollouts`` bounds the gradient method (and each least-squares solve:
    ``max_rollouts`` function evaluations); ``xtol``: the final least-squares solve stops at
    a relative step in log κ below it. ``cache_dir``: keep every rollout there, so the
    same call after an interruption resumes without recomputing (see :class:`RolloutPool`);
    ``rollouts`` then counts the rollouts computed by this call, ``reused`` those read back.
    """
    if method not in METHODS:
        raise ParameterError(f"unknown identification method {method!r}; choose one of "
                             f"{', '.join(METHODS)}")
    bounds = (float(kappa_bounds[0]), float(kappa_bounds[1]))
    if not 0 < bounds[0] < bounds[1]:
        raise ParameterError(f"kappa bounds must satisfy 0 < low < high, got {bounds}")
    limit = stable_kappa_max(config, recording.dt_s)
    if bounds[1] > limit * (1 + 1e-9):
        raise ParameterError(
            f"kappa bounds reach {bounds[1]:g} N m/rad but the {config.n_links}-link model is "
            f"stable only to about {limit:.3g} at {config.substeps} substeps; raise substeps "
            f"(the limit grows with substeps squared) or lower the bound")
    seed = _check_seed(seed_kappa, bounds)
    start = time.perf_counter()
    offsets = None
    posterior = None
    final: np.ndarray | None = None  # the residual at the estimate, at λ = 0
    with RolloutPool(recording, config, n_workers, cache_dir) as pool:
        history = _Iterates(progress, pool)
        if method == "gradient":
            kappa = _gradient_descent(pool, seed, history, max_rollouts, bounds)
        elif method == "mh":
            kappa, posterior = _posterior(pool, seed, mh_samples, mh_burn_in, rng, config,
                                          recording, bounds)
        else:
            n_offsets = 7 if estimate_offsets else 0
            x = np.concatenate([np.log(seed), np.zeros(n_offsets)])
            schedule = list(lambdas) if method == "homotopy" else [0.0]
            for lam in schedule:
                waypoint = lam > 0
                x, final = _least_squares(pool, x, lam, n_offsets, history,
                                          WAYPOINT_EVALUATIONS if waypoint else max_rollouts,
                                          bounds, xtol=WAYPOINT_XTOL if waypoint else xtol)
            kappa = np.exp(x[:2])
            offsets = x[2:] if n_offsets else None
            if schedule[-1] != 0:  # the last solve's residual is not the one reported
                final = None
        if final is None:
            final = pool.residuals([(kappa, 0.0, offsets)])[0]
        return Identification(method=method, kappa=np.asarray(kappa), rms_m=_rms(final),
                              rollouts=pool.rollouts, reused=pool.reused,
                              wall_s=time.perf_counter() - start,
                              offsets=offsets, iterations=len(history),
                              history=list(history),
                              posterior=posterior)


def _posterior(pool: RolloutPool, seed: np.ndarray, n_samples: int, burn_in: int, rng: int,
               config: ReplayConfig, recording: JointRecording,
               bounds: tuple[float, float]):
    """MH over (κ_θ, κ_ψ): log L = -Σ |e_k|² / (2 σ²) over the end-effector errors at 10 Hz,
    σ the RMS error at the least-squares estimate (so the width reflects how well the
    model fits, model error included). Returns (posterior median, Posterior)."""
    from residualsim.sysid.mcmc import MetropolisHastings
    from residualsim.sysid.paramspace import ParamSpace

    estimate = np.exp(_least_squares(pool, np.log(seed), 0.0, 0, [], 40, bounds)[0])
    stride = max(1, int(round(0.1 / recording.dt_s)))
    sigma = max(_rms(pool.residuals([(estimate, 0.0, None)])[0]), 1e-6)

    def log_likelihood(x: np.ndarray) -> np.ndarray:
        residuals = pool.residuals([(row, 0.0, None) for row in np.atleast_2d(x)])
        out = [-0.5 * float(np.sum(r[::stride] ** 2)) / sigma ** 2 for r in residuals]
        return np.array([v if math.isfinite(v) else -np.inf for v in out])

    space = ParamSpace(["kappa_theta", "kappa_psi"],
                       bounds={"kappa_theta": bounds, "kappa_psi": bounds})
    sampler = MetropolisHastings(log_likelihood, space, n_chains=2, proposal_scale=0.02,
                                 rng=rng)
    initial = np.tile(np.clip(estimate, *bounds), (2, 1))
    posterior = sampler.run(n_samples, burn_in, initial=initial,
                            meta={"sigma_m": sigma, "stride": stride,
                                  "config": asdict(config)})
    return np.median(posterior.samples.reshape(-1, 2), axis=0), posterior
