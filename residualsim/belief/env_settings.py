"""Checks of the gymnasium environments' constructor arguments (:mod:`residualsim.belief.envs`).

Every check raises one :class:`~residualsim.errors.ParameterError` whose message starts with
the argument's name, before any simulation runs: a NaN, an infinity or a value far outside
what the environment can simulate in reasonable time is refused at construction instead of
hanging or failing obscurely at ``reset``/``step``. The bounds (units as in the module
docstring of :mod:`residualsim.belief.envs`: metres, seconds, radians, world frame, z up,
table top at z = 0):

Cube and object toss (``CubeToss-v0``, ``Toss-v0``)
    * ``horizon_s`` in (0, :data:`MAX_HORIZON_S`] s;
    * ``release_position_m``: finite, |x|, |y| <= :data:`MAX_HORIZONTAL_M` and
      z <= :data:`MAX_HEIGHT_M`, and then, as ``rollout --state``
      (:func:`~residualsim.sim.recordings.check_start_state`, on the object), over the
      table: not beyond its edge (10 m), not more than 10 m above it, not into it;
    * ``release_quat_wxyz``: finite, of norm 1 within
      :data:`~residualsim.data.trajectory.QUATERNION_NORM_TOLERANCE` (normalised);
    * ``target_low``, ``target_high``: finite (x, y), low <= high per axis, within
      ±:data:`MAX_HORIZONTAL_M`;
    * ``belief_particles`` 0 or in [2, :data:`MAX_BELIEF_PARTICLES`], ``belief_events`` in
      [1, :data:`MAX_BELIEF_EVENTS`], ``n_workers`` in [1, :data:`MAX_WORKERS`] (integers).

Arm + loop (``ArmLoop-v0``)
    * ``kappa``: two finite stiffnesses in [0, :data:`MAX_KAPPA`] N m/rad (above ~15 the
      loop diverges, which the environment reports as a termination, not an error);
    * ``max_steps`` an integer >= 1; ``loop`` (as a number of links) in
      [3, :data:`MAX_LOOP_LINKS`];
    * ``substeps`` in [1, :data:`MAX_ARM_SUBSTEPS`], ``solver_iterations`` in
      [1, :data:`MAX_SOLVER_ITERATIONS`] (integers);
    * ``bandwidth_radps`` in (0, :data:`MAX_BANDWIDTH_RADPS`], ``action_limit_rad`` in
      (0, π], ``target_offset_m`` in [0, :data:`MAX_TARGET_OFFSET_M`], ``settle_s`` in
      [0, :data:`MAX_SETTLE_S`].
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from residualsim.errors import ParameterError
from residualsim.parallel import MAX_WORKERS  # the pools' own bound: one home

__all__ = ["finite_number", "integer", "finite_vector", "unit_quaternion", "check_box",
           "MAX_HORIZON_S", "MAX_HORIZONTAL_M", "MAX_HEIGHT_M", "MAX_BELIEF_PARTICLES",
           "MAX_BELIEF_EVENTS", "MAX_WORKERS", "MAX_KAPPA", "MAX_LOOP_LINKS",
           "MAX_ARM_SUBSTEPS", "MAX_SOLVER_ITERATIONS", "MAX_BANDWIDTH_RADPS",
           "MAX_TARGET_OFFSET_M", "MAX_SETTLE_S", "MAX_STEPS"]

#: Longest toss simulated per step, s: a cube toss comes to rest within 2 s; 60 s is 9000
#: steps at 150 Hz, seconds of computing.
MAX_HORIZON_S = 60.0
#: Farthest release point or target from the table origin along x or y, m.
MAX_HORIZONTAL_M = 100.0
#: Highest release point, m (a fall from it lasts under 5 s).
MAX_HEIGHT_M = 100.0
#: Most particles of the per-event beliefs (the 20 000-particle reference of issue 38).
MAX_BELIEF_PARTICLES = 20_000
#: Most contact events the beliefs follow.
MAX_BELIEF_EVENTS = 50
#: Stiffest loop spring accepted, N m/rad: far beyond what the internal step holds, so a
#: divergence can be studied, while finite.
MAX_KAPPA = 1e6
#: Most links of a generated loop (shipped: 12 and 24).
MAX_LOOP_LINKS = 100
#: Most internal steps per 10 ms control period (0.2 ms each: five times finer than the 1 ms
#: the loop needs); with :data:`MAX_SETTLE_S` a reset runs at most 25 000 internal steps
#: (about 13 s on a busy 2-core machine; 100 000 took 54 s; the default reset 0.2 s).
MAX_ARM_SUBSTEPS = 50
#: Most iterations of PyBullet's constraint solver per internal step.
MAX_SOLVER_ITERATIONS = 1000
#: Highest closed-loop bandwidth of the arm's controller, rad/s (the 10 ms zero-order hold
#: is unstable long before).
MAX_BANDWIDTH_RADPS = 1000.0
#: Widest target box (half-width) around the initial grasp point, m (the observation's
#: positions are bounded at ±2 m).
MAX_TARGET_OFFSET_M = 0.5
#: Longest settling of the loop at reset, s (the default 0.5 s brings it to rest).
MAX_SETTLE_S = 5.0
#: Most steps of an episode before truncation (a bound only against nonsense like 1e300).
MAX_STEPS = 10 ** 9


def finite_number(name: str, value: Any, low: float, high: float, unit: str = "",
                  low_open: bool = False) -> float:
    """``value`` as a float in [low, high] (or (low, high] with ``low_open``), else
    ParameterError naming ``name``."""
    if isinstance(value, (bool, np.bool_)):
        raise ParameterError(f"{name} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ParameterError(f"{name} must be a number, got {value!r}") from None
    inside = (number > low if low_open else number >= low) and number <= high
    if not (math.isfinite(number) and inside):
        unit = f" {unit}" if unit else ""
        raise ParameterError(f"{name} must be finite and in {'(' if low_open else '['}"
                             f"{low:g}, {high:g}]{unit}, got {value!r}")
    return number


def integer(name: str, value: Any, low: int, high: int) -> int:
    """``value`` as an int in [low, high] (an integral float is accepted), else
    ParameterError naming ``name``."""
    ok = not isinstance(value, (bool, np.bool_)) and isinstance(
        value, (int, np.integer, float, np.floating))
    if ok and isinstance(value, (float, np.floating)):  # 1e300 and nan are not counts
        ok = math.isfinite(value) and float(value).is_integer()
    if not (ok and low <= value <= high):  # int comparison: no overflow for 10**400
        raise ParameterError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    return int(value)


def finite_vector(name: str, value: Any, size: int, bound: float | None = None,
                  unit: str = "") -> np.ndarray:
    """``value`` as a float array (size,) of finite numbers (each within ±``bound``), else
    ParameterError naming ``name``."""
    try:
        array = np.asarray(value, dtype=float)
    except (TypeError, ValueError, OverflowError):
        raise ParameterError(f"{name} must be {size} numbers, got {value!r}") from None
    if array.shape != (size,):
        raise ParameterError(f"{name} must be {size} numbers, got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ParameterError(f"{name} must be finite, got {array.tolist()}")
    if bound is not None and np.abs(array).max() > bound:
        raise ParameterError(f"{name} must be within ±{bound:g} {unit}, got {array.tolist()}")
    return array


def unit_quaternion(name: str, value: Any) -> np.ndarray:
    """``value`` as a finite quaternion (4,) w-x-y-z of norm 1 within
    ``QUATERNION_NORM_TOLERANCE`` (as for recordings), normalised; else ParameterError."""
    from residualsim.data.trajectory import QUATERNION_NORM_TOLERANCE

    quat = finite_vector(name, value, 4)
    norm = float(np.hypot.reduce(quat))  # no overflow for huge entries
    if abs(norm - 1.0) > QUATERNION_NORM_TOLERANCE:
        raise ParameterError(f"{name}: the quaternion w, x, y, z has norm {norm:.4g}, "
                             f"expected 1 (within {QUATERNION_NORM_TOLERANCE:g})")
    return quat / norm


def check_box(low: Any, high: Any) -> tuple[np.ndarray, np.ndarray]:
    """The target rectangle's corners ``target_low``, ``target_high`` (x, y) m, checked."""
    low = finite_vector("target_low", low, 2, MAX_HORIZONTAL_M, "m")
    high = finite_vector("target_high", high, 2, MAX_HORIZONTAL_M, "m")
    if (low > high).any():
        raise ParameterError(f"target_high must be >= target_low on each axis, got "
                             f"target_low={low.tolist()}, target_high={high.tolist()}")
    return low, high
