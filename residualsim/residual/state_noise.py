"""How uncertain a recording's initial state is, estimated from the free flight that follows.

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
on the recorded state's noise; :func:`residualsim.residual.train.fit_spread` then scales the
residual's spread on top of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from residualsim.data import Trajectory
from residualsim.data.datasets import first_contact_index
from residualsim.data.velocities import fit_free_flight
from residualsim.errors import DataError

#: Gravity used for the free-flight fit, m/s^2 along world -z.
GRAVITY_MPS2 = 9.81


@dataclass(frozen=True)
class StateNoise:
    """Gaussian noise of a free body's recorded initial velocities (world frame).

    ``velocity_std_mps``: per-axis standard deviation of the linear velocity, m/s;
    ``omega_std_radps``: of the angular velocity, rad/s; ``velocity_bias_mps`` and
    ``omega_bias_radps``: the mean of (free-flight fit - recorded), reported for inspection
    and not applied (the standard deviations are root-mean-square values, so they include
    it); ``n_recordings``: how many recordings the estimate rests on.
    """

    velocity_std_mps: tuple[float, float, float]
    omega_std_radps: tuple[float, float, float]
    velocity_bias_mps: tuple[float, float, float] = (0.0, 0.0, 0.0)
    omega_bias_radps: tuple[float, float, float] = (0.0, 0.0, 0.0)
    n_recordings: int = 0

    def __post_init__(self) -> None:
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

    def perturb(self, state: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """A copy of a free-body state (13: position m, quaternion w-x-y-z, velocity m/s,
        angular velocity rad/s, all world frame) with Gaussian noise on the velocities.
        Draws 6 standard normals from ``rng``."""
        state = np.asarray(state, dtype=np.float64)
        if state.shape != (13,):
            raise DataError(f"state noise applies to a free body's 13-number state, got "
                            f"shape {state.shape}")
        noise = rng.standard_normal(6) * np.array([*self.velocity_std_mps,
                                                   *self.omega_std_radps])
        perturbed = state.copy()
        perturbed[7:13] += noise
        return perturbed

    def as_json(self) -> dict[str, Any]:
        return {"velocity_std_mps": list(self.velocity_std_mps),
                "omega_std_radps": list(self.omega_std_radps),
                "velocity_bias_mps": list(self.velocity_bias_mps),
                "omega_bias_radps": list(self.omega_bias_radps),
                "n_recordings": int(self.n_recordings)}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> StateNoise:
        return cls(**{key: (int(v) if key == "n_recordings" else tuple(v))
                      for key, v in dict(value).items()})


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
