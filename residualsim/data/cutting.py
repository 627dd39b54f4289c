"""Throws in a continuous capture: the release, the free flight, the bounces, the rest.

Input: the object's centre of mass (T, 3) m, world frame z up, on its tracked samples (gaps
removed), with the base's orientation and the joint values to tell when it is still. The
centre of mass, not a tracked frame, follows a parabola in free flight (a frame off the
centre of mass circles it while the object spins).

The rules (every threshold is a field of :class:`CutOptions`, a ``data import`` option):

1. **Noise.** The tracking noise sigma (m) is read from the whole session: the median
   absolute second difference of the centre of mass, over sqrt(6), robustly (x 1.4826),
   the median of the three axes; never below 0.02 mm.
2. **Free-flight windows.** Over every window of ``window_s`` (at least 5 samples; at
   most 2 missing samples inside), a parabola is fitted to each axis by least squares.
   The window is in free flight when its acceleration is gravity's (0, 0, -``gravity``)
   within ``accel_tolerance`` m/s^2 (as a vector) and its RMS residual is at most
   5 sigma (0.5 mm at least): a hand carrying the object (acceleration near 0), the table
   (0), a bounce inside the window (a kink: a large upward acceleration) all fail. Reading
   single samples would not do: at 150 Hz, 0.3 mm of noise makes a second difference
   scatter by ~16 m/s^2; over 0.08 s a parabola's acceleration scatters by ~0.4 m/s^2.
3. **Arcs.** The samples of each run of consecutive free-flight windows form an arc. Each arc's own parabola
   (fitted to its inner samples, half a window in from each end) is followed back sample
   by sample while samples lie within 3 sigma (3-D) of it (two misses in a row end the
   walk). The hand's path leaves the parabola as (t_r - t)^2 times half the difference of
   accelerations: fitting that to the samples before the arc gives the release instant
   t_r; the release is the later of the walk's last sample and the first sample half a
   period past t_r (late rather than early: a sample still in the hand is no free
   flight). Forward, the walk alone: the first contact. Arcs that follow one another
   within ``bounce_gap_s`` and fit one parabola (RMS within 3 sigma per axis) are one
   flight that missing or noisy samples had split.
4. **Releases and bounces.** An arc that starts before the current throw has ended, or
   within ``bounce_gap_s`` of the previous arc's end, continues it (a bounce). Any other
   arc is a release, and a throw when its flight lasts ``min_flight_s`` or more and is
   free flight as a whole: one parabola through it accelerates as gravity within
   ``arc_accel_tolerance``, and neither a cubic's jerk nor a quartic's snap is both over
   ``jerk_tolerance`` / ``snap_tolerance`` and over 3.5 standard errors. A hand lowering
   the object fast passes through gravity's acceleration for a tenth of a second (the
   windows pass), but its acceleration keeps changing: on synthetic minimum-jerk carries
   the whole arc is 0.5-3 m/s^2 off gravity, or its snap is 3 500-14 000 m/s^4, where
   throws are within 0.12 m/s^2 and 600 m/s^4. A shorter flight (a hand placement that
   lets go a few millimetres above the table, a slip) or a hand's arc is skipped, and
   listed.
5. **The end.** A throw ends at the first of: ``rest_tail_s`` after the object comes to
   rest (still for ``rest_s``: its centre of mass within ``rest_motion_m`` of the
   window's mean, its base and joints turning less than ``rest_angle_deg``); the last
   sample it moved slower than 0.05 m/s before a hand moves it again: once it has moved
   slower than 0.1 m/s for 0.1 s, its centre of mass faster than ``hand_speed`` m/s for
   0.1 s outside free flight (a body that has nearly stopped does not start again by
   itself; an articulated body tumbling after its landing lifts its centre of mass too,
   but not from a stop); a tracking gap longer than ``max_gap_s``; ``max_throw_s``
   after the release.
6. **Too short.** A throw whose recording lasts less than ``min_throw_s``, whose free
   flight ends in a tracking gap before any contact, or that starts within a window of where
   tracking resumed after a gap (its release unseen) is skipped, and listed.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from residualsim.data import quaternions as quat
from residualsim.errors import ParameterError

__all__ = ["CutOptions", "Segment", "find_throws", "noise_sigma"]


@dataclass(frozen=True)
class CutOptions:
    """Thresholds of :func:`find_throws` (seconds, metres, m/s^2, degrees)."""

    window_s: float = 0.08
    accel_tolerance: float = 3.0
    min_flight_s: float = 0.09
    bounce_gap_s: float = 0.05
    max_gap_s: float = 0.1
    rest_s: float = 0.25
    rest_motion_m: float = 0.002
    rest_angle_deg: float = 1.5
    rest_tail_s: float = 0.2
    hand_speed: float = 0.2
    max_throw_s: float = 8.0
    min_throw_s: float = 0.2
    arc_accel_tolerance: float = 1.0
    jerk_tolerance: float = 20.0
    snap_tolerance: float = 2000.0
    gravity: float = 9.81

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ParameterError(f"--{name.replace('_', '-')} must be a finite number "
                                     f"> 0, got {value!r}")

    def summary(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Segment:
    """A throw (``reason`` None) or a skipped segment (``reason`` says why), as sample
    indices into the tracked samples: ``start`` the release, ``end`` the last sample
    (inclusive), ``contact`` the first contact, ``rest`` the onset of rest (None: none)."""

    start: int
    end: int
    contact: int | None = None
    rest: int | None = None
    reason: str | None = None

    @property
    def is_throw(self) -> bool:
        return self.reason is None


def noise_sigma(com_m: np.ndarray) -> float:
    """The tracking noise (m, per axis), from second differences (rule 1)."""
    if len(com_m) < 3:
        return 2e-5
    second = np.diff(com_m, n=2, axis=0)
    per_axis = 1.4826 * np.median(np.abs(second), axis=0) / math.sqrt(6.0)
    return max(float(np.median(per_axis)), 2e-5)


def _window_fits(times: np.ndarray, com: np.ndarray, width: int, period: float
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every window start: valid (no long gap), acceleration (3,), RMS residual."""
    n = len(times) - width + 1
    if n <= 0:
        return np.zeros(0, bool), np.zeros((0, 3)), np.zeros(0)
    valid = np.empty(n, bool)
    accel = np.empty((n, 3))
    rms = np.empty(n)
    for lo in range(0, n, 50_000):
        hi = min(n, lo + 50_000)
        t = sliding_window_view(times[lo:hi + width - 1], width)
        y = sliding_window_view(com[lo:hi + width - 1], width, axis=0)  # (m, 3, W)
        tau = t - t[:, width // 2: width // 2 + 1]
        design = np.stack([np.ones_like(tau), tau, 0.5 * tau * tau], axis=-1)  # (m, W, 3)
        normal = np.einsum("mwi,mwj->mij", design, design)
        rhs = np.einsum("mwi,maw->mia", design, y)
        coef = np.linalg.solve(normal, rhs)  # (m, 3 params, 3 axes)
        fitted = np.einsum("mwi,mia->maw", design, coef)
        rms[lo:hi] = np.sqrt(np.mean((y - fitted) ** 2, axis=(1, 2)))
        accel[lo:hi] = coef[:, 2, :]
        valid[lo:hi] = (t[:, -1] - t[:, 0]) <= 2.0 * (width - 1) * period  # a few missing
    return valid, accel, rms


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) of each run of True."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    return [(int(a), int(b) - 1) for a, b in zip(edges[::2], edges[1::2])]


def _parabola(times: np.ndarray, com: np.ndarray, first: int, last: int):
    """The least-squares parabola of the arc's samples, as a function of time, and the
    RMS of its residuals per axis (m)."""
    t0 = times[first]
    tau = times[first:last + 1] - t0
    design = np.column_stack([np.ones_like(tau), tau, 0.5 * tau * tau])
    coef, *_ = np.linalg.lstsq(design, com[first:last + 1], rcond=None)
    residual = com[first:last + 1] - design @ coef
    spread = float(1.4826 * np.median(np.abs(residual))) if len(tau) > 3 else 0.0

    def at(index: int) -> np.ndarray:
        s = times[index] - t0
        return coef[0] + coef[1] * s + 0.5 * coef[2] * s * s
    return at, spread


def _polynomial(tau: np.ndarray, values: np.ndarray, degree: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares polynomial coefficients (degree + 1, 3) in powers of ``tau`` over k!
    (so coefficient k is the k-th derivative at tau = 0), and their standard errors."""
    design = np.column_stack([tau ** k / math.factorial(k) for k in range(degree + 1)])
    coef, *_ = np.linalg.lstsq(design, values, rcond=None)
    residual = values - design @ coef
    variance = float(np.sum(residual ** 2)) / max(3 * (len(tau) - degree - 1), 1)
    scale = np.sqrt(np.diag(np.linalg.inv(design.T @ design)) * variance)
    return coef, scale


def hand_signs(times: np.ndarray, com: np.ndarray, first: int, last: int,
               options: CutOptions) -> str | None:
    """Why the samples ``first``..``last`` are not a free flight (rule 4), or None: the
    acceleration of one parabola through them is not gravity's, or a cubic's jerk or a
    quartic's snap is both large and significant (over 3.5 standard errors; 3-D norms)."""
    tau = times[first:last + 1] - 0.5 * (times[first] + times[last])
    values = com[first:last + 1]
    if len(tau) < 8:
        return None
    gravity = np.array([0.0, 0.0, -options.gravity])
    quadratic, _ = _polynomial(tau, values, 2)
    off = float(np.linalg.norm(quadratic[2] - gravity))
    if off > options.arc_accel_tolerance:
        return (f"its acceleration is {off:.2f} m/s^2 from gravity's over the whole "
                f"{times[last] - times[first]:.3f} s (--arc-accel-tolerance "
                f"{options.arc_accel_tolerance:g}): a hand moving it")
    for degree, limit, name, flag in ((3, options.jerk_tolerance, "jerk", "m/s^3"),
                                      (4, options.snap_tolerance, "snap", "m/s^4")):
        coef, error = _polynomial(tau, values, degree)
        size = float(np.linalg.norm(coef[degree]))
        if size > limit and size > 3.5 * math.sqrt(3.0) * float(error[degree]):
            return (f"its acceleration changes over the {times[last] - times[first]:.3f} s "
                    f"({name} {size:.0f} {flag} > --{name}-tolerance {limit:g}): a hand "
                    "moving it")
    return None


def _walk(times, com, at, edge, stop, step, tolerance_m) -> int:
    """From ``edge`` (in flight) step by ``step`` towards ``stop`` while samples lie within
    ``tolerance_m`` of the parabola ``at``; two failures in a row end the walk (one noisy
    sample does not). Returns the last sample accepted."""
    accepted, failures, index = edge, 0, edge
    while failures < 2 and index + step != stop + step:
        index += step
        if (index - stop) * step > 0:
            break
        if np.linalg.norm(com[index] - at(index)) <= tolerance_m:
            accepted, failures = index, 0
        else:
            failures += 1
    return accepted


def _onset(times, com, at, edge, lo, width, period) -> float:
    """The release instant (s) where the hand's path leaves the flight parabola ``at``: the
    samples before ``edge`` fitted as d(t) = a (t_r - t)^2 / 2 for t < t_r (a free; the
    hand's acceleration minus gravity's), t_r on a grid of a quarter period."""
    first = max(lo, edge - width)
    if edge - first < 3:
        return float(times[first])
    sample_times = times[first:edge + 1]
    deviation = com[first:edge + 1] - np.array([at(i) for i in range(first, edge + 1)])
    grid = np.arange(sample_times[0], sample_times[-1] + 1e-12, period / 4.0)
    lead = np.clip(grid[:, None] - sample_times[None, :], 0.0, None)  # (G, n)
    basis = 0.5 * lead * lead
    norm = np.einsum("gn,gn->g", basis, basis)
    gain = np.einsum("gn,na->ga", basis, deviation) / np.where(norm > 0, norm, 1.0)[:, None]
    rss = ((deviation[None] - basis[:, :, None] * gain[:, None, :]) ** 2).sum(axis=(1, 2))
    return float(grid[int(np.argmin(rss))])


def _extend(times, com, first, last, lo, hi, width, period, sigma) -> tuple[int, int]:
    """Rule 3: the arc's release and first contact, from its samples ``first``..``last``
    (covered by free-flight windows) within the tracked run ``lo``..``hi``."""
    margin = max(0, min(width // 2, (last - first + 1 - 8) // 2))  # keep 8 in the core
    core_first, core_last = first + margin, last - margin
    at, spread = _parabola(times, com, core_first, core_last)
    tolerance = 3.0 * max(sigma, spread)
    start = _walk(times, com, at, core_first, lo, -1, tolerance)
    release = _onset(times, com, at, core_first, lo, width, period)
    onset = int(np.searchsorted(times, release + 0.5 * period))
    start = max(start, min(onset, core_first))
    end = _walk(times, com, at, core_last, hi, +1, tolerance)
    return start, end


def _merged(times, com, arcs, run_of, sigma, options) -> list[tuple[int, int]]:
    """Arcs of one flight joined: where an arc starts within ``bounce_gap_s`` of the
    previous one's end in the same tracked run and one parabola holds both (its RMS
    residual within 3 sigma; a bounce between them leaves a kink), a few missing or noisy
    samples had split the flight."""
    joined: list[tuple[int, int]] = []
    for start, end in arcs:
        if joined:
            first, last = joined[-1]
            if run_of[first] == run_of[start] and \
                    times[start] - times[last] <= options.bounce_gap_s:
                tau = times[first:end + 1] - times[first]
                design = np.column_stack([np.ones_like(tau), tau, 0.5 * tau * tau])
                coef, *_ = np.linalg.lstsq(design, com[first:end + 1], rcond=None)
                residual = com[first:end + 1] - design @ coef
                if np.sqrt(np.mean(np.sum(residual ** 2, axis=1))) <= 3.0 * sigma * np.sqrt(3):
                    joined[-1] = (first, max(last, end))
                    continue
        joined.append((start, end))
    return joined


def _still_from(com, quats, joints, lo, hi, width, options) -> int | None:
    """The first index in [lo, hi - width + 1] where the next ``width`` samples are still."""
    if hi - lo + 1 < width:
        return None
    c = sliding_window_view(com[lo:hi + 1], width, axis=0)  # (m, 3, W)
    spread = np.abs(c - c.mean(axis=2, keepdims=True)).max(axis=(1, 2))
    still = spread <= options.rest_motion_m
    q = quats[lo:hi + 1]
    limit = math.radians(options.rest_angle_deg)
    turned = quat.angle_of(quat.multiply(quat.conjugate(q[:-width + 1 or None]),
                                         q[width - 1:]))
    still &= turned <= limit
    if joints.shape[1]:
        j = sliding_window_view(joints[lo:hi + 1], width, axis=0)
        still &= (j.max(axis=2) - j.min(axis=2)).max(axis=1) <= limit
    hits = np.flatnonzero(still)
    return int(lo + hits[0]) if hits.size else None


def find_throws(times_s: np.ndarray, com_m: np.ndarray, quat_wxyz: np.ndarray,
                joint_values: np.ndarray, options: CutOptions = CutOptions()
                ) -> tuple[list[Segment], dict]:
    """The throws and skipped segments of a session's tracked samples (module docstring),
    in time order, and facts about the cut (period, noise, window, arcs found)."""
    times = np.asarray(times_s, np.float64)
    com = np.asarray(com_m, np.float64)
    quats = np.asarray(quat_wxyz, np.float64)
    joints = np.asarray(joint_values, np.float64).reshape(len(times), -1)
    steps = np.diff(times)
    period = float(np.median(steps)) if len(steps) else 1.0
    sigma = noise_sigma(com)
    width = max(5, int(round(options.window_s / period)))
    valid, accel, rms = _window_fits(times, com, width, period)
    gravity = np.array([0.0, 0.0, -options.gravity])
    free = valid & (np.linalg.norm(accel - gravity, axis=1) <= options.accel_tolerance) \
        & (rms <= max(5.0 * sigma, 5e-4))
    breaks = np.concatenate([[0], np.flatnonzero(steps > options.max_gap_s) + 1, [len(times)]])
    run_of = np.searchsorted(breaks, np.arange(len(times)), side="right") - 1
    arcs = []
    for first, last in _runs(free):  # each run of free windows is one arc (a bounce between
        last = min(last + width - 1, breaks[run_of[first] + 1] - 1)  # two: two runs)
        run = run_of[first]
        arcs.append(_extend(times, com, first, last, breaks[run], breaks[run + 1] - 1,
                            width, period, sigma))
    arcs = _merged(times, com, arcs, run_of, sigma, options)
    hands = [hand_signs(times, com, start, end, options) for start, end in arcs]
    in_flight = np.zeros(len(times), bool)  # free flight: the arcs no hand moved
    for (start, end), hand in zip(arcs, hands):
        if hand is None:
            in_flight[start:end + 1] = True
    segments: list[Segment] = []
    busy_until = -1  # the last sample of the latest throw or skipped segment
    for k, (start, contact) in enumerate(arcs):
        if start <= busy_until or (k and run_of[arcs[k - 1][1]] == run_of[start] and
                                   times[start] - times[arcs[k - 1][1]] <= options.bounce_gap_s):
            continue  # a bounce
        flight = times[contact] - times[start]
        run_end = breaks[run_of[start] + 1] - 1
        hand = hands[k]
        if contact > run_end - width and run_end + 1 < len(times):
            segment = Segment(start, contact, reason=(
                "tracking lost during the free flight, before any contact"))
        elif breaks[run_of[start]] > 0 and start - breaks[run_of[start]] < width:
            segment = Segment(start, contact, reason=(
                "tracking resumed in free flight: the release was not seen"))
        elif flight < options.min_flight_s:
            segment = Segment(start, contact, reason=(
                f"free flight of {flight:.3f} s, shorter than --min-flight-s "
                f"{options.min_flight_s:g} (a hand letting go just above the table?)"))
        elif hand is not None:
            segment = Segment(start, contact, reason=f"not a free flight: {hand}")
        else:
            limit = min(run_end, int(np.searchsorted(times, times[start] + options.max_throw_s))
                        - 1)
            segment = _throw_end(times, com, quats, joints, in_flight, start, contact, limit,
                                 period, options)
        segments.append(segment)
        busy_until = segment.end
    facts = {"period_s": period, "rate_hz": 1.0 / period, "noise_m": sigma,
             "window_samples": width, "arcs": len(arcs), "tracking_gaps": len(breaks) - 2}
    return segments, facts


#: How long (s) the object must stay lifted off the table outside free flight for a hand
#: to hold it (the start and end of a bounce, between the free-flight windows, are
#: shorter), and how long it must first move slower than :data:`_SLOW_MPS` (m/s).
_HELD_S = 0.1
_SLOW_MPS = 0.1


def _speeds(times, com, lo, hi) -> np.ndarray:
    """The centre of mass's speed (m/s) at samples lo + 2 .. hi - 2 (differences over 4)."""
    span = com[lo + 4:hi + 1] - com[lo:hi - 3]
    return np.linalg.norm(span, axis=1) / (times[lo + 4:hi + 1] - times[lo:hi - 3])


def _slow_from(times, com, lo, hi, width) -> int | None:
    """The first sample in [lo, hi] from which the centre of mass moves slower than
    :data:`_SLOW_MPS` for ``width`` samples."""
    if hi - lo < width + 4:
        return None
    for first, last in _runs(_speeds(times, com, lo, hi) < _SLOW_MPS):
        if last - first + 1 >= width:
            return lo + first + 2
    return None


def _throw_end(times, com, quats, joints, in_flight, start, contact, limit, period,
               options) -> Segment:
    """Rule 5 and 6 for one release."""
    rest_width = max(3, int(round(options.rest_s / period)))
    rest = _still_from(com, quats, joints, contact, limit, rest_width, options)
    end = limit
    if rest is not None:
        end = min(limit, rest + min(rest_width - 1, int(round(options.rest_tail_s / period))))
    held = max(2, int(round(_HELD_S / period)))  # samples of a hold, and of a slow spell
    slow = _slow_from(times, com, contact, end, held)
    if slow is not None and end - slow > 4:  # a hand moves what has come (nearly) to a stop
        speed = _speeds(times, com, slow - 2, end)  # at slow .. end - 2
        moving = (speed > options.hand_speed) & ~in_flight[slow:end - 1]
        sustained = [first for first, last in _runs(moving) if last - first + 1 >= held]
        if sustained:  # back to the last slow sample before it: the hand's first move
            still = np.flatnonzero(speed[:sustained[0]] < _SLOW_MPS / 2)
            end = slow + int(still[-1]) if still.size else slow
            rest = rest if rest is not None and rest <= end else None
    if times[end] - times[start] < options.min_throw_s:
        return Segment(start, end, contact, rest, reason=(
            f"{times[end] - times[start]:.3f} s from the release to its end, shorter than "
            f"--min-throw-s {options.min_throw_s:g}"))
    return Segment(start, end, contact, rest)
