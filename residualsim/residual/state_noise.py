"""How uncertain a recording's initial state is, estimated from the free flight that follows.

Two estimates, both from the training recordings' free flight before the first contact:
:func:`estimate_state_noise` (cube recordings, closed form, below) and
:func:`estimate_rollout_state_noise` (any free object, articulated ones included: the
engine's own rollout fit, :func:`residualsim.sim.recordings.fit_initial_state`).

A rollout starts from a recording's first sample, but that sample's velocities are estimates
from a tracker, not measurements. Between release and the first contact a tossed body is in
free flight, where the motion is known in closed form: the centre follows a parabola
(gravity along world -z) and a cube, whose inertia is isotropic, keeps a constant angular
velocity in the world frame, so R(t) = exp(t [omega]) R(0). Fitting that motion to the
samples before the first contact gives a second estimate of the initial velocities; the
spread of (fitted - recorded) over many recordings is the noise of the recorded initial
state.

Stochastic predictions draw each sample's initial velocities from a Gaussian with these
standard deviations around the recorded ones (:meth:`StateNoise.perturb`), so the sample
cloud carries the state-estimation uncertainty as well as the residual's. The fitted values
include the fit's own error (pose noise over about 12 samples), so they are an upper bound
on the recorded state's noise; :func:`residualsim.residual.spread.fit_spread` then scales the
residual's spread on top of them.

Any other free object (a URDF or scene file, with joints or without) has no closed-form
free flight: a base link of an articulated body is not ballistic, nor is a rigid body's
angular velocity constant unless its inertia is isotropic. There the calibrated engine
(the model's parameters, identified body included) fits each training recording's initial
state to its free flight by rollout (:func:`~residualsim.sim.recordings.fit_initial_state`,
Levenberg-Marquardt), and the noise is built from d = fitted - started velocities (base
linear m/s and angular rad/s, world frame, then each joint's velocity, rad/s or m/s) and
the fit's own variance c (the diagonal of its covariance s^2 (J^T J)^-1):

* a recording with **recorded** velocities started from them; they and the fit see
  independent errors, so E[d^2] = (recorded noise)^2 + c and the estimate is
  mean(d^2) - mean(c), floored at 0 (the fit's own error subtracted: not an upper bound);
* a **pose-only** recording (``metadata["initial_state"]`` is
  :data:`~residualsim.sim.recordings.FITTED_START`) started
  from the fit made when it was read (PyBullet's defaults with the user's body); that start
  shares the poses, and so the error, of the refit, and differs from it by what the
  calibrated body changes: the estimate is mean(d^2) + mean(c).

The standard deviations are the square roots per component; recordings with under
``MIN_FREE_SAMPLES`` free-flight samples are skipped.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from residualsim.data import Trajectory
from residualsim.data.datasets import first_contact_index
from residualsim.data.velocities import fit_free_flight
from residualsim.errors import DataError

log = logging.getLogger(__name__)

#: Gravity used for the free-flight fit, m/s^2 along world -z.
GRAVITY_MPS2 = 9.81


@dataclass(frozen=True)
class StateNoise:
    """Gaussian noise of a free body's recorded initial velocities (world frame).

    ``velocity_std_mps``: per-axis standard deviation of the linear velocity, m/s;
    ``omega_std_radps``: of the angular velocity, rad/s; ``velocity_bias_mps`` and
    ``omega_bias_radps``: the mean of (free-flight fit - recorded), reported for inspection
    and not applied (the standard deviations are root-mean-square values, so they include
    it); ``n_recordings``: how many recordings the estimate rests on;
    ``joint_velocity_std`` and ``joint_velocity_bias``: the same per joint of an articulated
    object (rad/s, or m/s for a prismatic joint), in the scene's joint order; empty for a
    single body (and in model files written before joints were estimated);
    ``factor``: the width samples are drawn with, a factor on every standard deviation
    (chosen on validation by ``train``'s uncertainty fit,
    :func:`~residualsim.residual.uncertainty_fit.fit_uncertainty`; 1 in model files
    written before it was chosen). The standard deviations stay the estimate; every
    sampler draws with :meth:`sample_std`.
    """

    velocity_std_mps: tuple[float, float, float]
    omega_std_radps: tuple[float, float, float]
    velocity_bias_mps: tuple[float, float, float] = (0.0, 0.0, 0.0)
    omega_bias_radps: tuple[float, float, float] = (0.0, 0.0, 0.0)
    n_recordings: int = 0
    joint_velocity_std: tuple[float, ...] = ()
    joint_velocity_bias: tuple[float, ...] = ()
    factor: float = 1.0

    def __post_init__(self) -> None:
        factor = float(self.factor)
        if not (np.isfinite(factor) and factor >= 0):
            raise DataError(f"state noise: factor must be a finite number >= 0, got "
                            f"{self.factor!r}")
        object.__setattr__(self, "factor", factor)
        for name in ("velocity_std_mps", "omega_std_radps", "velocity_bias_mps",
                     "omega_bias_radps"):
            value = np.asarray(getattr(self, name), dtype=np.float64)
            if value.shape != (3,) or not np.all(np.isfinite(value)):
                raise DataError(f"state noise: {name} must be 3 finite numbers, got "
                                f"{getattr(self, name)!r}")
            if name.endswith("std_mps") or name.endswith("std_radps"):
                if np.any(value < 0):
                    raise DataError(f"state noise: {name} must be >= 0, got {value.tolist()}")
            object.__setattr__(self, name, tuple(float(v) for v in value))
        for name in ("joint_velocity_std", "joint_velocity_bias"):
            value = np.asarray(getattr(self, name), dtype=np.float64).ravel()
            if not np.all(np.isfinite(value)) or (name.endswith("std") and np.any(value < 0)):
                raise DataError(f"state noise: {name} must be finite numbers"
                                f"{' >= 0' if name.endswith('std') else ''}, got "
                                f"{getattr(self, name)!r}")
            object.__setattr__(self, name, tuple(float(v) for v in value))
        if self.joint_velocity_bias and len(self.joint_velocity_bias) != len(
                self.joint_velocity_std):
            raise DataError("state noise: joint_velocity_bias needs one number per joint of "
                            "joint_velocity_std")

    def sample_std(self) -> np.ndarray:
        """The standard deviations samples are drawn with: ``factor`` times base velocity
        (3, m/s), angular velocity (3, rad/s, both world frame), then each joint's velocity
        (rad/s or m/s; none without a joint estimate)."""
        std = np.array([*self.velocity_std_mps, *self.omega_std_radps,
                        *self.joint_velocity_std])
        return std if self.factor == 1.0 else std * self.factor

    def perturb(self, state: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """A copy of a free object's state with Gaussian noise on its velocities.

        ``state``: 13 + 2 n numbers: base position m, quaternion w-x-y-z, velocity m/s,
        angular velocity rad/s (all world frame), then n joint positions and n joint
        velocities (rad or m, rad/s or m/s). Draws 6 standard normals from ``rng`` for the
        base, then one per joint when ``joint_velocity_std`` is set (its length must be n),
        times :meth:`sample_std`; without a joint estimate the joints are kept (a model
        written before joints were estimated).
        """
        state = np.asarray(state, dtype=np.float64)
        extra = state.shape[0] - 13 if state.ndim == 1 else -1
        if extra < 0 or extra % 2:
            raise DataError(f"state noise applies to a free object's state of 13 + 2 x "
                            f"joints numbers (13-number for a single body), got shape "
                            f"{state.shape}")
        n_joints = extra // 2
        if self.joint_velocity_std and len(self.joint_velocity_std) != n_joints:
            raise DataError(f"state noise for {len(self.joint_velocity_std)} joints, but the "
                            f"state has {n_joints}")
        std = self.sample_std()
        perturbed = state.copy()
        perturbed[7:13] += rng.standard_normal(6) * std[:6]
        if self.joint_velocity_std:
            perturbed[13 + n_joints:] += rng.standard_normal(n_joints) * std[6:]
        return perturbed

    def as_json(self) -> dict[str, Any]:
        out = {"velocity_std_mps": list(self.velocity_std_mps),
               "omega_std_radps": list(self.omega_std_radps),
               "velocity_bias_mps": list(self.velocity_bias_mps),
               "omega_bias_radps": list(self.omega_bias_radps),
               "n_recordings": int(self.n_recordings)}
        if self.joint_velocity_std:  # a single body's JSON stays as it was
            out.update(joint_velocity_std=list(self.joint_velocity_std),
                       joint_velocity_bias=list(self.joint_velocity_bias))
        if self.factor != 1.0:  # files without a chosen factor stay as they were
            out["factor"] = self.factor
        return out

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> StateNoise:
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(dict(value)) - fields)
        if unknown:
            raise DataError(f"state noise: unknown field(s) {unknown}")
        cast = {"n_recordings": int, "factor": float}
        return cls(**{key: cast.get(key, tuple)(v) for key, v in dict(value).items()})


def free_flight_velocities(traj: Trajectory, half_width_m: float, max_samples: int = 12,
                           min_samples: int = 4) -> tuple[np.ndarray, np.ndarray] | None:
    """Initial linear (m/s) and angular (rad/s) velocity, world frame, fitted by least
    squares to a cube's samples before its first contact (at most ``max_samples``).

    The linear velocity is the slope of a parabola with gravity ``GRAVITY_MPS2`` through
    the centre positions; the angular velocity the slope, through the origin, of the
    rotation vectors of R(t) R(0)^T (:func:`residualsim.data.velocities.fit_free_flight`
    with ``omega_intercept=False``, so the published estimates reproduce). None when fewer
    than ``min_samples`` samples precede the first contact (no free flight to fit).
    """
    first = first_contact_index(traj, half_width_m)
    n = min(max_samples, traj.n_samples if first is None else first)
    if n < min_samples:
        return None
    return fit_free_flight(traj.times_s[:n], traj.positions_m[:n], traj.quat_wxyz[:n],
                           gravity_mps2=GRAVITY_MPS2, omega_intercept=False)


def estimate_state_noise(trajectories: Mapping[str, Trajectory], max_samples: int = 12
                         ) -> StateNoise:
    """The initial-velocity noise of cube recordings: the root mean square, per world axis,
    of the free-flight fit minus the recorded first-sample velocities.

    Use training recordings only. Recordings without ``metadata["half_width_m"]``, planar
    ones and those with under 4 samples of free flight are skipped; a DataError when none
    is left.
    """
    linear, angular = [], []
    for traj_id, traj in trajectories.items():
        half_width = traj.metadata.get("half_width_m")
        if traj.planar or not isinstance(half_width, (int, float)):
            continue
        fitted = free_flight_velocities(traj, float(half_width), max_samples)
        if fitted is None:
            continue
        linear.append(fitted[0] - traj.linear_velocity_mps[0])
        angular.append(fitted[1] - traj.angular_velocity_world_radps[0])
    if not linear:
        raise DataError("no cube recording with free flight before its first contact to "
                        "estimate the initial-state noise from")
    linear, angular = np.array(linear), np.array(angular)
    return StateNoise(velocity_std_mps=tuple(np.sqrt(np.mean(linear**2, axis=0))),
                      omega_std_radps=tuple(np.sqrt(np.mean(angular**2, axis=0))),
                      velocity_bias_mps=tuple(linear.mean(axis=0)),
                      omega_bias_radps=tuple(angular.mean(axis=0)),
                      n_recordings=len(linear))


def estimate_rollout_state_noise(scene: str, params: Any,
                                 trajectories: Mapping[str, Trajectory], *,
                                 substeps: int | None = None, n_workers: int = 1
                                 ) -> StateNoise:
    """The initial-velocity noise of any free object's recordings, from the engine's
    free-flight fit (see the module docstring): base linear (m/s) and angular (rad/s)
    velocity per world axis, and each joint's velocity.

    ``scene``: the scene name or file; ``params``: the calibrated engine's parameters (an
    :class:`~residualsim.sim.scenes.EngineParams` or ObjectParams with the identified body);
    ``trajectories``: the training recordings as read by
    :func:`~residualsim.sim.recordings.prepare_recordings` (pose-only ones with their start
    fitted). The fits run on ``n_workers`` engine workers; the fit is deterministic, so the
    result does not depend on the worker count. A DataError for a planar scene and when no
    recording has ``MIN_FREE_SAMPLES`` samples of free flight.
    """
    from residualsim.sim.pool import engine_workers
    from residualsim.sim.rollout import recording_settings
    from residualsim.sim.scenes import make_scene

    layout = make_scene(scene)
    if layout.planar:
        raise DataError(f"scene {scene!r} is planar: the state noise is estimated for free "
                        "objects only")
    if not trajectories:
        raise DataError("no recordings to estimate the initial-state noise from")
    settings = recording_settings(scene, trajectories, substeps)
    items = list(trajectories.values())
    with engine_workers(scene, items, n_workers, settings) as workers:
        rows = [row for row in workers.map(_velocity_offset, (scene, settings, params))
                if row is not None]
    if not rows:
        raise DataError("no recording with free flight before its first contact to "
                        "estimate the initial-state noise from")
    offsets = np.array([row[0] for row in rows])
    variances = np.array([row[1] for row in rows])
    sign = np.array([1.0 if row[2] else -1.0 for row in rows])[:, None]
    std = np.sqrt(np.maximum(0.0, np.mean(offsets ** 2 + sign * variances, axis=0)))
    bias = offsets.mean(axis=0)
    log.info("state noise from the engine's free-flight fit of %d of %d recordings "
             "(%d pose-only)", len(rows), len(trajectories), int(np.sum(sign > 0)))
    return StateNoise(velocity_std_mps=tuple(std[0:3]), omega_std_radps=tuple(std[3:6]),
                      velocity_bias_mps=tuple(bias[0:3]), omega_bias_radps=tuple(bias[3:6]),
                      n_recordings=len(rows), joint_velocity_std=tuple(std[6:]),
                      joint_velocity_bias=tuple(bias[6:]))


def _velocity_offset(_, trajectory: Trajectory, payload: tuple
                     ) -> tuple[np.ndarray, np.ndarray, bool] | None:
    """Worker function: (fitted - started velocities (6 + n), the fit's variances of them
    (6 + n), whether the start was itself fitted from the poses), or None without free
    flight. Velocities: base m/s and rad/s (world frame), then joints; 12 significant
    digits.

    ``payload``: (scene, engine settings, parameters). Each recording is fitted on an engine
    of its own (about 0.1 s to build): PyBullet keeps solver state from one rollout to the
    next, which moved a fit in its last digits, and so the estimate with the worker count."""
    from residualsim.sim.engine import Engine
    from residualsim.sim.recordings import FITTED_START, fit_initial_state

    scene_name, settings, params = payload
    with Engine(scene_name, params, settings) as engine:
        fitted = fit_initial_state(engine, trajectory)
        if fitted is trajectory:  # too few free-flight samples: nothing fitted
            return None
        scene = engine.scene
        start = scene.state_from_trajectory(trajectory, 0)
        refit = scene.state_from_trajectory(fitted, 0)
    n_joints = getattr(scene, "n_joints", 0)
    velocity = np.r_[7:13, 13 + n_joints:13 + 2 * n_joints]  # in the state
    unknown = np.r_[6:12, 12 + n_joints:12 + 2 * n_joints]  # in the fit's unknowns
    variance = np.diag(np.asarray(fitted.metadata["initial_state_covariance"]))[unknown]
    shared = trajectory.metadata.get("initial_state") == FITTED_START
    return _significant(refit[velocity] - start[velocity]), _significant(variance), shared


def _significant(values: np.ndarray, digits: int = 12) -> np.ndarray:
    """``values`` rounded to ``digits`` significant digits: the fit's covariance goes
    through LAPACK, whose last bits depend on memory alignment, which differs from process
    to process; rounded, the estimate is the same for any worker count."""
    return np.array([float(f"{v:.{digits}g}") for v in np.asarray(values, dtype=np.float64)])
