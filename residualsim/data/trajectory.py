"""The :class:`Trajectory` type: one recorded or simulated motion of a free rigid body or of
an articulated object (a floating base link with revolute, continuous or prismatic joints).

Conventions (the same for every scene, so every tool reads every trajectory alike):

* ``times_s``            (T,)   seconds, strictly increasing.
* ``positions_m``        (T, 3) origin of the BASE LINK's frame (its URDF link frame),
  metres, world frame.
* ``quat_wxyz``          (T, 4) orientation of the base link's frame, base -> world, unit
  quaternion in w-x-y-z order.
* ``linear_velocity_mps`` (T, 3) velocity of that frame's origin, m/s, world frame.
* ``angular_velocity_world_radps`` (T, 3) the base's angular velocity, rad/s, WORLD frame
  (importers of body-frame recordings convert on load).
* ``joint_names``        (n,)   the non-fixed joints, in URDF order (empty for a rigid body).
* ``joint_positions``    (T, n) joint angles (rad; revolute/continuous) or displacements (m;
  prismatic); ``joint_velocities`` (T, n) their rates, rad/s or m/s.

For the built-in bodies (the cube, the planar ellipse and dice) the URDF link frame sits at
the centre of mass, so the base pose is the centre of mass's, as it always was.

The 3D table scenes have gravity along -z and the table top at z = 0. Planar scenes live in
the vertical x-y plane of their world (x horizontal, y up, gravity along -y, floor at y = 0)
and store z = 0 and a rotation about +z, so that a planar trajectory is also a valid 3D one;
:meth:`Trajectory.planar_configuration` returns (x, y, theta).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from residualsim.errors import DataError

__all__ = ["Trajectory"]

#: Largest accepted deviation of a quaternion's norm from 1.
QUATERNION_NORM_TOLERANCE = 1e-2


@dataclass(frozen=True)
class Trajectory:
    """One trajectory of a rigid or articulated body; arrays are float64, validated on
    creation and stored as read-only copies.

    Parameters
    ----------
    traj_id : str
        Identifier, the file stem of the recording (``"465"`` for ``tosses/465.pt``).
    times_s : ndarray of shape (T,)
        Sample times in seconds, strictly increasing.
    positions_m : ndarray of shape (T, 3)
        Position of the base link frame's origin in metres, world frame (the centre of mass
        for the built-in bodies).
    quat_wxyz : ndarray of shape (T, 4)
        Orientation (base link to world) as unit quaternions, w-x-y-z order.
    linear_velocity_mps : ndarray of shape (T, 3)
        Velocity of the base link frame's origin in m/s, world frame.
    angular_velocity_world_radps : ndarray of shape (T, 3)
        Angular velocity of the base link in rad/s, world frame.
    planar : bool
        True for a body moving in the world x-y plane (z = 0, rotation about +z only).
    source : str
        Where it came from, e.g. ``"contactnets:/path/tosses/465.pt"`` or ``"simulated"``.
    metadata : dict
        Free-form JSON-serialisable extras (object name, rate, ...).
    joint_names : tuple of str, default ()
        Names of the non-fixed joints exactly as in the URDF, in URDF order; distinct.
    joint_positions : ndarray of shape (T, n), optional
        Joint angles in rad (revolute, continuous) or displacements in m (prismatic);
        default an empty (T, 0) array.
    joint_velocities : ndarray of shape (T, n), optional
        Joint rates in rad/s or m/s; default an empty (T, 0) array.
    """

    traj_id: str
    times_s: np.ndarray
    positions_m: np.ndarray
    quat_wxyz: np.ndarray
    linear_velocity_mps: np.ndarray
    angular_velocity_world_radps: np.ndarray
    planar: bool = False
    source: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    joint_names: tuple[str, ...] = ()
    joint_positions: np.ndarray | None = None
    joint_velocities: np.ndarray | None = None

    def __post_init__(self) -> None:
        where = self.source or f"trajectory {self.traj_id!r}"
        arrays = {
            "times_s": (self.times_s, (None,)),
            "positions_m": (self.positions_m, (None, 3)),
            "quat_wxyz": (self.quat_wxyz, (None, 4)),
            "linear_velocity_mps": (self.linear_velocity_mps, (None, 3)),
            "angular_velocity_world_radps": (self.angular_velocity_world_radps, (None, 3)),
        }
        n_samples = None
        for name, (value, shape) in arrays.items():
            try:  # a copy: never freeze the caller's array
                array = np.array(value, dtype=np.float64)
            except (TypeError, ValueError) as exc:
                raise DataError(f"{where}: {name} is not numeric ({exc})") from None
            if array.ndim != len(shape) or any(
                want is not None and got != want for got, want in zip(array.shape, shape)
            ):
                expected = "(T,)" if len(shape) == 1 else f"(T, {shape[1]})"
                raise DataError(f"{where}: {name} has shape {array.shape}, expected {expected}")
            if n_samples is None:
                n_samples = array.shape[0]
            elif array.shape[0] != n_samples:
                raise DataError(
                    f"{where}: {name} has {array.shape[0]} samples but times_s has {n_samples}"
                )
            bad = ~np.isfinite(array)
            if bad.any():
                index = int(np.argwhere(bad)[0][0])
                raise DataError(f"{where}: {name} has a NaN or infinite value at sample {index}")
            array.setflags(write=False)
            object.__setattr__(self, name, array)
        if n_samples < 2:
            raise DataError(f"{where}: a trajectory needs at least 2 samples, got {n_samples}")
        steps = np.diff(self.times_s)
        if (steps <= 0).any():
            index = int(np.argmax(steps <= 0)) + 1
            raise DataError(f"{where}: times do not increase at sample {index}")
        norms = np.linalg.norm(self.quat_wxyz, axis=1)
        off = np.abs(norms - 1.0) > QUATERNION_NORM_TOLERANCE
        if off.any():
            index = int(np.argmax(off))
            raise DataError(
                f"{where}: quaternion at sample {index} has norm {norms[index]:.4g}, expected 1"
            )
        self._check_joints(where, n_samples)

    def _check_joints(self, where: str, n_samples: int) -> None:
        """Validate and freeze ``joint_names``, ``joint_positions`` and ``joint_velocities``."""
        names = self.joint_names
        if isinstance(names, str) or not all(isinstance(n, str) and n for n in names):
            raise DataError(f"{where}: joint_names must be a sequence of non-empty str, "
                            f"got {names!r}")
        names = tuple(names)
        if len(set(names)) != len(names):
            repeated = next(n for n in names if names.count(n) > 1)
            raise DataError(f"{where}: joint {repeated!r} is named more than once")
        object.__setattr__(self, "joint_names", names)
        for name in ("joint_positions", "joint_velocities"):
            value = getattr(self, name)
            if value is None or (not names and np.shape(value)[1:] == (0,)):
                # no joints: (T, 0), also after dataclasses.replace changed T
                value = np.zeros((n_samples, 0))
            try:
                array = np.array(value, dtype=np.float64)
            except (TypeError, ValueError) as exc:
                raise DataError(f"{where}: {name} is not numeric ({exc})") from None
            if array.shape != (n_samples, len(names)):
                raise DataError(f"{where}: {name} has shape {array.shape}, expected "
                                f"({n_samples}, {len(names)}) for {len(names)} joint(s)")
            bad = ~np.isfinite(array)
            if bad.any():
                index, column = (int(i) for i in np.argwhere(bad)[0])
                raise DataError(f"{where}: {name} has a NaN or infinite value at sample "
                                f"{index} (joint {names[column]!r})")
            array.setflags(write=False)
            object.__setattr__(self, name, array)

    @property
    def n_joints(self) -> int:
        """Number of non-fixed joints n (0 for a rigid body)."""
        return len(self.joint_names)

    @property
    def n_samples(self) -> int:
        """Number of samples T."""
        return int(self.times_s.shape[0])

    @property
    def duration_s(self) -> float:
        """Time from the first to the last sample, seconds."""
        return float(self.times_s[-1] - self.times_s[0])

    @property
    def rate_hz(self) -> float:
        """Mean sample rate in Hz."""
        return (self.n_samples - 1) / self.duration_s

    def planar_configuration(self) -> np.ndarray:
        """(x m, y m, theta rad) of shape (T, 3) for a planar body; theta about +z, unwrapped."""
        w, z = self.quat_wxyz[:, 0], self.quat_wxyz[:, 3]
        theta = np.unwrap(2.0 * np.arctan2(z, w))
        return np.column_stack([self.positions_m[:, 0], self.positions_m[:, 1], theta])

    def state_at(self, index: int) -> np.ndarray:
        """Full state of the base at one sample as a flat (13,) array (joints: see
        :meth:`joint_state_at`).

        Layout: position (3, m, world), quaternion (4, w-x-y-z), linear velocity (3, m/s,
        world), angular velocity (3, rad/s, world).
        """
        return np.concatenate(
            [
                self.positions_m[index],
                self.quat_wxyz[index],
                self.linear_velocity_mps[index],
                self.angular_velocity_world_radps[index],
            ]
        )

    def joint_state_at(self, index: int) -> np.ndarray:
        """Joint state at one sample as a flat (2n,) array: the n joint positions (rad or m)
        then the n joint velocities (rad/s or m/s), both in ``joint_names`` order."""
        return np.concatenate([self.joint_positions[index], self.joint_velocities[index]])
