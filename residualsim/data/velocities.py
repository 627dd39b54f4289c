"""Velocities of a recording that holds poses only: first contact, free-flight fit, smoothing.

A motion-capture recording gives times, the base link's pose and joint positions; a rollout
needs velocities too. :func:`estimate_velocities` estimates them in three steps.

1. **First contact** (:func:`first_contact_by_acceleration`). The base's acceleration at each
   sample is the second derivative of a quadratic fitted by least squares to the positions in
   a window of :data:`ACCELERATION_WINDOW_S` = 60 ms around it (an odd number of samples, at
   least 5, on the recorded time stamps). The first contact is the first sample whose
   acceleration differs from gravity (9.81 m/s² along world -z; along -y for a planar body)
   by more than :data:`CONTACT_ACCELERATION_MPS2` = 7 m/s² (Euclidean norm). Why 7: the
   acceleration's noise for 0.5 mm tracker noise is about 0.7 m/s² per axis at 250 Hz and
   1.1 m/s² at 100 Hz (more than 6 standard deviations below 7), a body resting on the
   ground departs from gravity by 9.81 m/s², and an impact of 0.5 m/s spread over the
   window by about 15 m/s². The window is centred on the sample, so the index found is up
   to half a window (30 ms) EARLY: every sample before it is in free flight. Only the base
   is tested; joint motion is not.
2. **Initial state** (:func:`fit_free_flight`), from the samples before the first contact
   that lie within :data:`MAX_FIT_S` = 0.1 s of the first sample, when there are at least
   :data:`MIN_FIT_SAMPLES` = 4 of them, by least squares: the base position as a parabola
   with known gravity (fitting p0 and v0 only); the orientation as a rotation at constant
   world angular velocity omega (the slope of a line a + omega t fitted to the rotation
   vectors of q(t) ⊗ q(0)⁻¹); each joint as a quadratic in t. The fitted motion gives the
   velocities at every fitted sample, not only the first.
3. **Elsewhere** (and everywhere when the free flight is too short): smoothed central
   differences, the first derivative of a local quadratic fitted on the recorded time stamps
   in a window of :data:`SMOOTHING_WINDOW_S` = 30 ms around each sample (at least 5
   samples; a Savitzky-Golay filter that tolerates uneven sampling; shifted inward at the
   ends). The angular velocity is the derivative at the centre of the rotation vectors of
   q(t_j) ⊗ q(t_k)⁻¹, world frame; a window must turn by less than π (|omega| < 100 rad/s).
   Velocity jumps at impacts are smeared over the window.

Limits, stated: the parabola is exact for the centre of mass. For the built-in bodies the
base frame is the centre of mass; for another body pass ``com_offset_base_m`` (the centre of
mass in the base link's frame) and the fit follows p + R c instead and returns the frame's
velocity; without it the centripetal acceleration of an offset frame biases v0 by about
|omega|² |c| × 50 ms. Constant world omega is exact for a body with isotropic inertia or
spinning about a principal axis and an approximation over 0.1 s otherwise. Quaternions are
w-x-y-z, base -> world, throughout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from residualsim.errors import DataError

__all__ = [
    "check_recorded_velocities",
    "SlidingWindows",
    "GRAVITY_MPS2",
    "CONTACT_ACCELERATION_MPS2",
    "ACCELERATION_WINDOW_S",
    "SMOOTHING_WINDOW_S",
    "MAX_FIT_S",
    "MIN_FIT_SAMPLES",
    "VelocityEstimate",
    "relative_rotvecs",
    "white_noise_level",
    "smoothed_derivative",
    "smoothed_angular_velocity",
    "base_accelerations",
    "first_contact_by_acceleration",
    "fit_free_flight",
    "estimate_velocities",
]

#: Gravity, m/s², along world -z (free bodies) or -y (planar bodies).
GRAVITY_MPS2 = 9.81
#: A sample is in contact when its acceleration departs from gravity by more than this, m/s².
CONTACT_ACCELERATION_MPS2 = 7.0
#: Width of the window the acceleration is fitted in, s.
ACCELERATION_WINDOW_S = 0.06
#: Width of the window of the smoothed differences, s.
SMOOTHING_WINDOW_S = 0.03
#: The free-flight fit uses at most the samples this close to the first one, s.
MAX_FIT_S = 0.1
#: Fewer free-flight samples than this: no fit, smoothed differences at sample 0 too.
MIN_FIT_SAMPLES = 4


@dataclass(frozen=True)
class VelocityEstimate:
    """Estimated velocities of a recording of T samples and n joints.

    Attributes
    ----------
    linear_velocity_mps : ndarray of shape (T, 3)
        Velocity of the base frame's origin, m/s, world frame.
    angular_velocity_world_radps : ndarray of shape (T, 3)
        The base's angular velocity, rad/s, world frame.
    joint_velocities : ndarray of shape (T, n)
        rad/s or m/s.
    first_contact : int or None
        The first sample counted as contact (None: free flight throughout).
    fit_samples : int
        Samples fitted as free flight (0: smoothed differences everywhere).
    """

    linear_velocity_mps: np.ndarray
    angular_velocity_world_radps: np.ndarray
    joint_velocities: np.ndarray
    first_contact: int | None
    fit_samples: int

    def summary(self) -> dict[str, object]:
        """JSON-serialisable description of how the velocities were obtained."""
        return {"method": "free-flight fit, then smoothed differences" if self.fit_samples
                else "smoothed differences",
                "first_contact_index": self.first_contact, "fit_samples": self.fit_samples}


def relative_rotvecs(target_wxyz: np.ndarray, reference_wxyz: np.ndarray) -> np.ndarray:
    """Rotation vectors (..., 3), rad, world frame, of ``target ⊗ reference⁻¹`` for unit
    quaternions (..., 4) w-x-y-z (broadcast): the shortest rotation from reference to target."""
    a, b = np.broadcast_arrays(np.asarray(target_wxyz, np.float64),
                               np.asarray(reference_wxyz, np.float64))
    a = a / np.linalg.norm(a, axis=-1, keepdims=True)
    b = b / np.linalg.norm(b, axis=-1, keepdims=True)
    # a ⊗ b* in numpy (scipy's Rotation took 8 s for 10^7 pairs): w = a_w b_w + a_v·b_v,
    # v = b_w a_v - a_w b_v - a_v × b_v; then the rotation vector of the shorter arc.
    w = np.einsum("...i,...i->...", a, b)
    v = b[..., :1] * a[..., 1:] - a[..., :1] * b[..., 1:] - np.cross(a[..., 1:], b[..., 1:])
    v = np.where(w[..., None] < 0, -v, v)
    sine = np.linalg.norm(v, axis=-1)
    angle = 2.0 * np.arctan2(sine, np.abs(w))
    small = angle <= 1e-3  # the series of angle / sin(angle / 2), as scipy's as_rotvec
    scale = np.where(small, 2.0 + angle ** 2 / 12 + 7 * angle ** 4 / 2880,
                     angle / np.where(small, 1.0, np.sin(angle / 2)))
    return scale[..., None] * v


def _width(times_s: np.ndarray, window_s: float) -> int:
    """An odd sample count covering ``window_s`` at the median period, >= 5, <= T (odd)."""
    period = float(np.median(np.diff(times_s)))
    width = max(5, int(round(window_s / period)) | 1)
    n = len(times_s)
    return min(width, n if n % 2 else n - 1)


#: Centre samples fitted per block: a block's windows are held at once, so a long recording
#: needs memory for FIT_BLOCK windows, not all (issue 51: the velocities of a 10^6-sample
#: file held 1.15 GB of windows; the fits are the same to the bit).
FIT_BLOCK = 65536


def _windowed_fits(times_s: np.ndarray, width: int, windows_of, coefficient: int
                   ) -> np.ndarray:
    """Coefficient ``coefficient`` (T, d) of :func:`_local_fits` for every sample, fitted
    block by block (:data:`FIT_BLOCK` centre samples) in one time unit, the largest
    |t_j - t_k| of all windows (a window's extremes are its ends: the stamps increase).
    ``windows_of(index, rows)`` gives the values (B, W, d) at the window indices (B, W) of
    the centre samples ``rows`` (a slice)."""
    n = len(times_s)
    # each sample's window starts here: centred, shifted inward at the ends
    first = np.clip(np.arange(n) - width // 2, 0, n - width)
    scale = float(max(np.max(times_s[first + width - 1] - times_s),
                      np.max(times_s - times_s[first]))) or 1.0
    parts = []
    for start in range(0, n, FIT_BLOCK):
        rows = slice(start, start + FIT_BLOCK)
        index = first[rows, None] + np.arange(width)[None, :]
        parts.append(_local_fits(times_s, windows_of(index, rows), index, rows=rows,
                                 scale=scale)[:, coefficient, :])
    return np.concatenate(parts, axis=0)


def _local_fits(times_s: np.ndarray, values: np.ndarray, index: np.ndarray,
                order: int = 2, *, rows: slice = slice(None), scale: float | None = None
                ) -> np.ndarray:
    """Least-squares polynomial coefficients (B, order + 1, d) in (t - t_k) of ``values``
    (B, W, d) sampled at ``times_s[index]``, one fit per centre sample k of
    ``times_s[rows]``; ``scale`` (s, default the largest offset) is the unit of t - t_k."""
    offsets = times_s[index] - times_s[rows, None]  # (B, W)
    if scale is None:
        scale = float(np.max(np.abs(offsets))) or 1.0
    u = offsets / scale
    if order == 2:
        coefficients = _quadratic_fits(u, values)
    else:
        design = u[..., None] ** np.arange(order + 1)  # (B, W, order + 1)
        coefficients = np.linalg.pinv(design) @ values  # (B, order + 1, d)
    with np.errstate(over="ignore"):  # a scale of 1e200 s: refused by the rate check
        return coefficients / (scale ** np.arange(order + 1))[None, :, None]


def _quadratic_fits(u: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Coefficients (T, 3, d) of the least-squares quadratics in ``u`` (T, W), |u| <= 1, of
    ``values`` (T, W, d): the 3x3 normal equations solved in closed form, elementwise over
    the windows (a pseudo-inverse per window, one SVD each, took 26 s for 10^6 samples).
    Windows hold >= 5 distinct times, so the equations are regular and well conditioned."""
    u2 = u * u
    m1, m2, m3, m4 = u.sum(1), u2.sum(1), (u2 * u).sum(1), (u2 * u2).sum(1)
    m0 = np.full_like(m1, u.shape[1])
    b0 = values.sum(1)
    b1 = np.einsum("tw,twd->td", u, values)
    b2 = np.einsum("tw,twd->td", u2, values)
    a, b, c = m2 * m4 - m3 * m3, m2 * m3 - m1 * m4, m1 * m3 - m2 * m2  # adjugate of
    d, e, f = m0 * m4 - m2 * m2, m1 * m2 - m0 * m3, m0 * m2 - m1 * m1  # [[m0 m1 m2] ...]
    det = (m0 * a + m1 * b + m2 * c)[:, None]
    rows = [(a, b, c), (b, d, e), (c, e, f)]
    return np.stack([(p[:, None] * b0 + q[:, None] * b1 + r[:, None] * b2) / det
                     for p, q, r in rows], axis=1)


def smoothed_derivative(times_s: np.ndarray, values: np.ndarray,
                        window_s: float = SMOOTHING_WINDOW_S) -> np.ndarray:
    """First time derivative (T, d) of ``values`` (T, d): the slope at each sample of a
    quadratic fitted in a window of ``window_s`` around it (see the module docstring)."""
    times_s = np.asarray(times_s, np.float64)
    values = np.asarray(values, np.float64).reshape(len(times_s), -1)
    if values.shape[1] == 0:
        return values.copy()
    return _windowed_fits(times_s, _width(times_s, window_s),
                          lambda index, rows: values[index], 1)


def smoothed_angular_velocity(times_s: np.ndarray, quat_wxyz: np.ndarray,
                              window_s: float = SMOOTHING_WINDOW_S) -> np.ndarray:
    """Angular velocity (T, 3), rad/s, world frame, of orientations (T, 4) w-x-y-z base ->
    world: the slope at each sample of a quadratic fitted to the rotation vectors of
    q(t_j) ⊗ q(t_k)⁻¹ over a window of ``window_s`` around it."""
    times_s = np.asarray(times_s, np.float64)
    quat_wxyz = np.asarray(quat_wxyz, np.float64)

    def rotvecs(index: np.ndarray, rows: slice) -> np.ndarray:  # (B, W, 3)
        return relative_rotvecs(quat_wxyz[index], quat_wxyz[rows, None, :])

    return _windowed_fits(times_s, _width(times_s, window_s), rotvecs, 1)


def base_accelerations(times_s: np.ndarray, positions_m: np.ndarray,
                       window_s: float = ACCELERATION_WINDOW_S) -> np.ndarray:
    """Acceleration (T, 3), m/s², world frame: twice the quadratic coefficient of a local
    least-squares fit of the positions (T, 3) in a window of ``window_s`` around each sample."""
    times_s = np.asarray(times_s, np.float64)
    positions = np.asarray(positions_m, np.float64)
    return 2.0 * _windowed_fits(times_s, _width(times_s, window_s),
                                lambda index, rows: positions[index], 2)


def _gravity(gravity_axis: int, gravity_mps2: float) -> np.ndarray:
    vector = np.zeros(3)
    vector[gravity_axis] = -gravity_mps2
    return vector


def first_contact_by_acceleration(
    times_s: np.ndarray, positions_m: np.ndarray, *, gravity_axis: int = 2,
    threshold_mps2: float = CONTACT_ACCELERATION_MPS2,
    window_s: float = ACCELERATION_WINDOW_S, gravity_mps2: float = GRAVITY_MPS2,
) -> int | None:
    """The first sample whose base acceleration departs from gravity by more than
    ``threshold_mps2`` (m/s², norm), or None; up to half a window early (module docstring).

    Parameters
    ----------
    times_s : ndarray of shape (T,)
        Seconds, increasing; T >= 3.
    positions_m : ndarray of shape (T, 3)
        Base position (or centre of mass), m, world frame.
    gravity_axis : int
        2 for a free body (gravity along world -z), 1 for a planar body (-y).
    threshold_mps2, window_s, gravity_mps2 : float
        The criterion's threshold (m/s²), the fit window (s) and gravity's magnitude (m/s²).
    """
    acceleration = base_accelerations(times_s, positions_m, window_s)
    deviation = np.linalg.norm(acceleration - _gravity(gravity_axis, gravity_mps2), axis=1)
    hits = np.flatnonzero(deviation > threshold_mps2)
    return int(hits[0]) if hits.size else None


def fit_free_flight(
    times_s: np.ndarray, positions_m: np.ndarray, quat_wxyz: np.ndarray, *,
    gravity_axis: int = 2, gravity_mps2: float = GRAVITY_MPS2,
    com_offset_base_m: np.ndarray | None = None, omega_intercept: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Initial velocities fitted by least squares to samples in free flight (all given).

    Parameters
    ----------
    times_s : ndarray of shape (N,)
        Seconds; the fit gives the velocities at ``times_s[0]``.
    positions_m : ndarray of shape (N, 3)
        Base frame origin, m, world frame.
    quat_wxyz : ndarray of shape (N, 4)
        Base orientation, w-x-y-z, base -> world.
    gravity_axis, gravity_mps2 : int, float
        Gravity is ``gravity_mps2`` (m/s²) along minus world axis ``gravity_axis``.
    com_offset_base_m : ndarray of shape (3,), optional
        The centre of mass in the base frame, m: the parabola is fitted to p + R(t) c.
    omega_intercept : bool, default True
        Fit the rotation vectors as a + omega t (a absorbs the noise of the first
        quaternion, which a line through the origin turns into a bias of omega); False
        fits omega t through the origin, as :mod:`residualsim.residual.state_noise` always
        has (kept so that its published estimates reproduce).

    Returns
    -------
    velocity_mps : ndarray of shape (3,)
        Velocity of the base frame's origin at the first sample, m/s, world frame: the slope
        of the parabola with known gravity (p0 and v0 fitted).
    omega_world_radps : ndarray of shape (3,)
        Constant angular velocity, rad/s, world frame: the least-squares slope of the
        rotation vectors of q(t) ⊗ q(0)⁻¹ against t.
    """
    times_s = np.asarray(times_s, np.float64)
    n = len(times_s)
    t = times_s - times_s[0]
    heights = np.array(positions_m, dtype=np.float64)
    if com_offset_base_m is not None:
        from scipy.spatial.transform import Rotation

        rotations = Rotation.from_quat(np.asarray(quat_wxyz, np.float64)[:, [1, 2, 3, 0]])
        offsets = rotations.apply(np.asarray(com_offset_base_m, np.float64))  # (N, 3) world
        heights += offsets
    heights[:, gravity_axis] += 0.5 * gravity_mps2 * t**2  # remove gravity: straight line left
    design = np.stack([np.ones(n), t], axis=1)
    velocity = np.linalg.lstsq(design, heights, rcond=None)[0][1]
    increments = relative_rotvecs(quat_wxyz, np.asarray(quat_wxyz)[0])
    if omega_intercept:
        omega = np.linalg.lstsq(design, increments, rcond=None)[0][1]
    else:
        omega = (t[1:, None] * increments[1:]).sum(axis=0) / np.sum(t[1:] ** 2)
    if com_offset_base_m is not None:
        velocity = velocity - np.cross(omega, offsets[0])
    return velocity, omega


def estimate_velocities(
    times_s: np.ndarray, positions_m: np.ndarray, quat_wxyz: np.ndarray,
    joint_positions: np.ndarray | None = None, *, planar: bool = False,
    threshold_mps2: float = CONTACT_ACCELERATION_MPS2, max_fit_s: float = MAX_FIT_S,
    min_fit_samples: int = MIN_FIT_SAMPLES, window_s: float = SMOOTHING_WINDOW_S,
    com_offset_base_m: np.ndarray | None = None,
) -> VelocityEstimate:
    """Velocities of a poses-only recording, by the method of the module docstring.

    Parameters
    ----------
    times_s : ndarray of shape (T,)
        Seconds, strictly increasing, T >= 3.
    positions_m : ndarray of shape (T, 3)
        Base frame origin, m, world frame.
    quat_wxyz : ndarray of shape (T, 4)
        Base orientation, unit, w-x-y-z, base -> world.
    joint_positions : ndarray of shape (T, n), optional
        rad or m, already unwrapped.
    planar : bool
        Gravity along -y (a planar body in the x-y plane) instead of -z.
    threshold_mps2, max_fit_s, min_fit_samples, window_s
        See :data:`CONTACT_ACCELERATION_MPS2`, :data:`MAX_FIT_S`, :data:`MIN_FIT_SAMPLES`,
        :data:`SMOOTHING_WINDOW_S`.
    com_offset_base_m : ndarray of shape (3,), optional
        Centre of mass in the base frame, m (see :func:`fit_free_flight`); the contact test
        then follows the centre of mass too.
    """
    times_s = np.asarray(times_s, np.float64)
    positions = np.asarray(positions_m, np.float64)
    quats = np.asarray(quat_wxyz, np.float64)
    joints = np.zeros((len(times_s), 0)) if joint_positions is None else np.asarray(
        joint_positions, np.float64).reshape(len(times_s), -1)
    axis = 1 if planar else 2
    centre = positions
    if com_offset_base_m is not None:
        from scipy.spatial.transform import Rotation

        centre = positions + Rotation.from_quat(quats[:, [1, 2, 3, 0]]).apply(
            np.asarray(com_offset_base_m, np.float64))
    first = first_contact_by_acceleration(times_s, centre, gravity_axis=axis,
                                          threshold_mps2=threshold_mps2)
    linear = smoothed_derivative(times_s, positions, window_s)
    angular = smoothed_angular_velocity(times_s, quats, window_s)
    joint_rates = smoothed_derivative(times_s, joints, window_s)
    free = len(times_s) if first is None else first
    n_fit = min(free, int(np.searchsorted(times_s - times_s[0], max_fit_s, side="right")))
    if n_fit < max(min_fit_samples, 3):
        return VelocityEstimate(linear, angular, joint_rates, first, 0)
    t = times_s[:n_fit] - times_s[0]
    velocity, omega = fit_free_flight(times_s[:n_fit], positions[:n_fit], quats[:n_fit],
                                      gravity_axis=axis, com_offset_base_m=com_offset_base_m)
    gravity = _gravity(axis, GRAVITY_MPS2)
    linear[:n_fit] = velocity + t[:, None] * gravity
    if com_offset_base_m is not None:  # the frame's velocity: v_com(t) - omega x R(t) c
        offsets = centre[:n_fit] - positions[:n_fit]
        linear[:n_fit] = (velocity + np.cross(omega, offsets[0])) + t[:, None] * gravity \
            - np.cross(omega, offsets)
    angular[:n_fit] = omega
    if joints.shape[1]:
        design = np.stack([np.ones(n_fit), t, t**2], axis=1)
        coefficients = np.linalg.lstsq(design, joints[:n_fit], rcond=None)[0]  # (3, n)
        joint_rates[:n_fit] = coefficients[1] + 2.0 * t[:, None] * coefficients[2]
    return VelocityEstimate(linear, angular, joint_rates, first, n_fit)


#: A recorded velocity is checked against the poses' differences where the object moves
#: faster than these (m/s, rad/s; joints: rad/s or m/s).
MOVING_MPS, SPINNING_RADPS = 0.05, 0.5
#: Refused when the median disagreement exceeds this fraction of the median difference speed
#: plus :data:`NOISE_ALLOWANCE` times what the poses' own noise puts into their differences.
VELOCITY_DISAGREEMENT = 0.5
#: How many times the poses' noise floor (:func:`difference_noise`) a disagreement may add.
NOISE_ALLOWANCE = 2.0
#: The poses' differences are taken over windows of about this length (s): a window of one
#: sample turns 1 mm of tracking noise at 148 Hz into 0.2 m/s of "speed" at rest.
VELOCITY_WINDOW_S = 0.05
#: A step between two samples whose recorded velocity changes by more than this fraction of
#: its mean magnitude there is an impact: the trapezoid mean of velocities sampled either
#: side of it is not the displacement over the window (a hinge's links chattering against
#: each other: 30 rad/s at one sample, -12 at the next), so windows holding one are left
#: out of the comparison. Free flight changes a velocity by g dt (a 0.2 m/s toss at 148 Hz:
#: a third of it); a velocity in the wrong unit or frame keeps its smooth stretches.
IMPACT_JUMP = 0.5


def difference_noise(values: np.ndarray, durations: np.ndarray) -> float:
    """What the noise of sampled ``values`` (n, d) alone puts into the norm of their
    differences over windows of ``durations`` (s): sqrt(2 Σ σ_k²) / median duration, in the
    values' units per second, with σ_k each column's white-noise level read off its third
    differences (variance 20 σ², blind to any motion of constant acceleration such as free
    flight; :func:`white_noise_level`)."""
    values = np.asarray(values, dtype=float)
    if len(values) < 8 or not len(durations):
        return 0.0
    sigma = white_noise_level(values)
    return float(np.sqrt(2.0 * np.sum(sigma ** 2)) / np.median(durations))


def white_noise_level(values: np.ndarray) -> np.ndarray:
    """Per column, the level σ (the values' units) of white noise on sampled ``values``
    (n >= 4, d), read off their third differences: variance 20 σ², blind to any motion of
    constant acceleration such as free flight; a robust spread (1.4826 × the median
    absolute deviation), so that impacts do not count."""
    third = np.diff(np.asarray(values, dtype=float), n=3, axis=0)
    spread = 1.4826 * np.median(np.abs(third - np.median(third, axis=0)), axis=0)
    return spread / np.sqrt(20.0)


class SlidingWindows:
    """Windows of about ``window_s`` (s) sliding one sample at a time over sample times
    ``times`` (s): window k runs from sample ``start[k]`` to ``end[k]``, ``duration[k]``
    seconds (a column). :meth:`difference` is a signal's change over each window divided by
    its duration (from poses: a velocity), :meth:`mean` a signal's trapezoid mean over it
    (of recorded velocities: the same quantity, so the two compare)."""

    def __init__(self, times: np.ndarray, window_s: float) -> None:
        self.times = np.asarray(times, dtype=float)
        n = len(self.times)
        width = int(np.clip(round(window_s / np.median(np.diff(self.times))), 1, n - 1))
        self.start, self.end = np.arange(n - width), np.arange(width, n)
        self.duration = (self.times[self.end] - self.times[self.start])[:, None]

    def difference(self, values: np.ndarray) -> np.ndarray:
        """(values[end] - values[start]) / duration, per window (rows) and column."""
        values = np.asarray(values, dtype=float)
        return (values[self.end] - values[self.start]) / self.duration

    def mean(self, values: np.ndarray) -> np.ndarray:
        """The trapezoid mean of ``values`` (n, d) over each window: (windows, d)."""
        values = np.asarray(values, dtype=float)
        steps = 0.5 * (values[1:] + values[:-1]) * np.diff(self.times)[:, None]
        integral = np.vstack([np.zeros((1, values.shape[1])), np.cumsum(steps, axis=0)])
        return (integral[self.end] - integral[self.start]) / self.duration


def _smooth_windows(windows: SlidingWindows, velocities: np.ndarray) -> np.ndarray:
    """Per window (bool): no impact (:data:`IMPACT_JUMP`) between its samples."""
    velocities = np.asarray(velocities, dtype=float)
    jumps = np.linalg.norm(np.diff(velocities, axis=0), axis=1)
    sizes = np.linalg.norm(velocities, axis=1)
    impact = jumps > IMPACT_JUMP * 0.5 * (sizes[1:] + sizes[:-1])
    counted = np.concatenate([[0], np.cumsum(impact)])
    return counted[windows.end] == counted[windows.start]


def check_recorded_velocities(path: Path, times: np.ndarray, positions: np.ndarray,
                              quats: np.ndarray, joint_positions: np.ndarray,
                              joints: Sequence[str],
                              velocities: tuple[np.ndarray, np.ndarray, np.ndarray],
                              names: Sequence[str]) -> None:
    """Refuse recorded velocity columns (``names``: how the file calls the linear and the
    angular ones; joints' are ``<joint>_vel``) that are all zero, or disagree by far with the poses,
    where the object moves (see :data:`VELOCITY_DISAGREEMENT`).

    Both sides are averaged over the same windows of :data:`VELOCITY_WINDOW_S`: the poses'
    displacement over a window divided by its duration, against the trapezoid mean of the
    recorded velocity over it. Averaging keeps tracking noise from passing for motion;
    windows holding an impact (:data:`IMPACT_JUMP`) are left out, as velocities sampled
    either side of one do not integrate to the displacement.
    """
    linear, angular, rates = velocities
    windows = SlidingWindows(times, VELOCITY_WINDOW_S)
    start, end = windows.start, windows.end
    checks = [(names[0], windows.mean(linear), windows.difference(positions), MOVING_MPS),
              (names[1], windows.mean(angular),
               relative_rotvecs(quats[end], quats[start]) / windows.duration, SPINNING_RADPS)]
    if joints:
        joint_rates = windows.difference(joint_positions)
        recorded_rates = windows.mean(rates)
        checks += [(j + "_vel", recorded_rates[:, [k]], joint_rates[:, [k]],
                    SPINNING_RADPS) for k, j in enumerate(joints)]
    increments = relative_rotvecs(quats[1:], quats[:-1])
    floors = [difference_noise(positions, windows.duration),
              difference_noise(np.cumsum(increments, axis=0), windows.duration)]
    floors += [difference_noise(joint_positions[:, [k]], windows.duration)
               for k in range(len(joints))]
    hint = ("; delete the velocity columns and residualsim estimates the velocities from the "
            "poses")
    recorded_columns = {names[0]: linear, names[1]: angular}
    raw = [linear, angular] + [rates[:, [k]] for k in range(len(joints))]
    for (what, recorded, estimate, moving), floor, samples in zip(checks, floors, raw):
        speed = np.linalg.norm(estimate, axis=1)
        mask = (speed > max(moving, NOISE_ALLOWANCE * floor)) & \
            _smooth_windows(windows, samples)  # moving beyond what noise makes of rest
        if mask.sum() < 3:
            continue
        if not recorded_columns.get(what, recorded).any():
            raise DataError(f"{path}: the velocity columns {what} are all zero while the poses "
                            f"move (up to {speed.max():.3g} per second){hint}")
        error = np.median(np.linalg.norm(recorded[mask] - estimate[mask], axis=1))
        scale = np.median(speed[mask])
        if error > VELOCITY_DISAGREEMENT * scale + NOISE_ALLOWANCE * floor:
            raise DataError(f"{path}: the velocity columns {what} disagree with the poses' "
                            f"differences (median difference {error:.3g}, median speed "
                            f"{scale:.3g}, the poses' noise {floor:.2g}, same units per "
                            "second, over windows of "
                            f"{1000 * float(np.median(windows.duration)):.0f} ms){hint}")
