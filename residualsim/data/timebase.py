"""The time base of a recording as it comes: nominal rate, jitter, dropped frames, resampling.

A capture system's time stamps only increase: they jitter (±0.3 ms written to 4 decimals),
skip frames (occlusions), start at a Unix-epoch time, and differ in rate between files. The
whole stack (likelihoods, MCMC, residual training, metrics, prediction files) compares
simulation sample i with recording sample i on ONE uniform grid, so a recording that is not
uniform is RESAMPLED onto one at load (one code path for everything downstream; the
simulation runs at a fixed step anyway). :func:`analyse_times` estimates the grid,
:func:`resample` interpolates onto it.

Nominal period (robust to jitter and gaps): within ±10 % of the median step, the period
whose grid the first 64 stamps' phases agree with best; then each stamp's whole-period
index on the grid (k = difference of consecutive indices >= 2: dropped frames) and the
least-squares slope of stamp vs index, on a window doubling to the whole file; the rate is
snapped to the nearest whole Hz when within :data:`SNAP_RELATIVE` = 0.2 % of it. Rounding
each step to whole periods and dividing the span by their count (as before issue 51) read
±3 ms of stamp jitter at 100 Hz as 100.204 Hz: jittered steps of 1.5 periods counted as
dropped frames. Where no frame dropped fits the stamps as well (the least-squares line of
stamp vs sample number, its RMS residual no larger than the grid's with the gaps found),
that is the reading: jitter of 40 % of the period (±4 ms at 100 Hz) otherwise read half of
the files at 101 to 108 Hz with invented drops. Jitter whose RMS (of the steps' deviations
from whole periods) exceeds :data:`JITTER_WARN_SHARE` = 10 % of the period is warned about when the file is read
(``metadata["time_base"]["jitter_share"]``, ``data info``'s ``jitter_pct``): resampling
trusts every stamp, so a frame taken on time but stamped 3 ms late is moved by 3 ms of its
motion (9 mm at 3 m/s), which shifts the first contact and biases the fitted gravity; a
steady capture clock should not jitter that much (export the capture's frame times). A file is UNIFORM when
its steps differ by at most :data:`UNIFORM_RELATIVE` = 1e-6 of their mean (the rule
simulation has always used); a uniform file at the wanted rate is loaded bit for bit as it
is, times not shifted.

Resampling (anything else): the grid starts at the first time stamp and is shifted to start
at t = 0 (the offset is kept in ``metadata["time_base"]["offset_s"]``); it ends at the
last stamp or up to :data:`END_SLACK` = 5 % of a period after it (a jittered last stamp). Positions, joints and recorded velocities are interpolated linearly,
quaternions by slerp (shortest arc, the sign kept on the input's hemisphere). Linear, not
cubic: the error of linear interpolation in free flight is at most g·dt²/8 (0.12 mm at
100 Hz, 0.09 mm at 120 Hz, below the tracking noise), and a cubic overshoots at impacts
(train/README.md §21 has the measurement). Gaps longer than :data:`LONG_GAP_PERIODS` = 3
nominal periods are reported (metadata, a warning on the log, ``data info``): across one,
the recording is a straight line between the two samples that frame it, and the grid
samples farther than half a period from every stamp are listed in
``metadata["time_base"]["filled_samples"]`` (the initial-state fit leaves them out).

Refused, with a :class:`~residualsim.errors.DataError` before anything is allocated for the
grid: a gap of more than :data:`MAX_GAP_MISSING` = 20 missing samples that also lasts more
than :data:`MAX_GAP_S` = 5 s (the message names the lines around it): a tracker that lost
the object for seconds recorded no contact there, and a 1e7 s step is a corrupt stamp.
Shorter holes (dropped frames, an occlusion of a second) are interpolated and reported as
above: one such hole must not make a real capture's whole folder unreadable, though a
straight line across 0.2 s of free flight is already off by up to g·(0.2 s)²/8 = 49 mm
(``data info`` lists them). Also refused: a grid of more than :data:`MAX_SAMPLES` =
2 000 000 samples (33 min at 1 kHz, 5.6 h at 100 Hz; a recording of contacts, not a day's
log). Split such a recording at the gap, or fix its time stamps.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from residualsim.errors import DataError

__all__ = ["TimeBase", "analyse_times", "resample", "common_rate_hz", "filled_samples",
           "UNIFORM_RELATIVE", "SNAP_RELATIVE", "LONG_GAP_PERIODS", "MAX_GAP_MISSING",
           "MAX_GAP_S", "MAX_SAMPLES", "JITTER_WARN_SHARE"]

log = logging.getLogger(__name__)

#: Steps within this fraction of their mean make a file uniform (loaded as it is).
UNIFORM_RELATIVE = 1e-6
#: A nominal rate within this fraction of a whole number of Hz is snapped to it.
SNAP_RELATIVE = 2e-3
#: Gaps spanning more than this many nominal periods are reported.
LONG_GAP_PERIODS = 3
#: A gap is refused when it misses more than this many samples...
MAX_GAP_MISSING = 20
#: ...and lasts more than this, s.
MAX_GAP_S = 5.0
#: Step jitter (RMS) above this share of the period is warned about.
JITTER_WARN_SHARE = 0.10
#: A resampled grid may hold at most this many samples.
MAX_SAMPLES = 2_000_000
#: The grid's last sample may lie this many periods past the last stamp (a jittered last
#: stamp a little early still ends the grid where the recording ends; the value there is
#: the last stamp's).
END_SLACK = 0.05


@dataclass(frozen=True)
class TimeBase:
    """What the time stamps of one file say (seconds, the file's own clock).

    ``period_s`` the nominal sample period (snapped); ``uniform`` True when the steps are
    equal within :data:`UNIFORM_RELATIVE`; ``jitter_s`` the standard deviation of the steps'
    deviations from whole nominal periods; ``gaps`` one ``(sample index before it, periods
    spanned, time s from the start)`` per step of two or more periods; ``offset_s`` the
    first time stamp.
    """

    period_s: float
    uniform: bool
    jitter_s: float
    offset_s: float
    gaps: list[tuple[int, int, float]] = field(default_factory=list)

    @property
    def rate_hz(self) -> float:
        """Nominal rate, Hz."""
        return 1.0 / self.period_s

    @property
    def jitter_share(self) -> float:
        """``jitter_s`` as a share of the period (0.1: 10 %)."""
        return self.jitter_s / self.period_s

    def jitter_warning(self, source: str) -> str | None:
        """The warning for jitter above :data:`JITTER_WARN_SHARE` of the period, else None."""
        if self.jitter_share <= JITTER_WARN_SHARE:
            return None
        return (f"{source}: time stamps jitter by {1000 * self.jitter_s:.3g} ms RMS, "
                f"{100 * self.jitter_share:.0f} % of the {1000 * self.period_s:.4g} ms period "
                f"(over {100 * JITTER_WARN_SHARE:.0f} %): resampling onto the "
                f"{self.rate_hz:.6g} Hz grid trusts every stamp, so a frame stamped off its "
                "capture time is moved along its motion (3 ms at 3 m/s: 9 mm), which can "
                "shift the first contact and bias the fitted gravity; export the capture "
                "system's frame times if it has them")

    def long_gaps(self) -> list[tuple[int, int, float]]:
        """The gaps spanning more than :data:`LONG_GAP_PERIODS` periods."""
        return [g for g in self.gaps if g[1] > LONG_GAP_PERIODS]

    def summary(self, resampled_hz: float | None = None) -> dict[str, Any]:
        """JSON-serialisable facts for ``metadata["time_base"]``."""
        return {"recorded_rate_hz": self.rate_hz, "uniform": self.uniform,
                "jitter_s": self.jitter_s, "jitter_share": self.jitter_share,
                "offset_s": self.offset_s,
                "dropped_samples": int(sum(k - 1 for _, k, _ in self.gaps)),
                "long_gaps": [{"after_sample": i, "periods": k, "t_s": t}
                              for i, k, t in self.long_gaps()],
                "resampled_hz": resampled_hz}


def _snap(period: float) -> float:
    rate = 1.0 / period
    whole = round(rate)
    if whole >= 1 and abs(rate - whole) <= SNAP_RELATIVE * rate:
        return 1.0 / whole
    return period


def analyse_times(times_s: np.ndarray, source: str = "times",
                  lines: list[int] | None = None) -> TimeBase:
    """The nominal grid of strictly increasing time stamps (s); see the module docstring.

    ``source`` (a file) and ``lines`` (each stamp's line in it) name a refused gap; a
    :class:`~residualsim.errors.DataError` for a gap over the bounds of the module docstring.
    """
    times = np.asarray(times_s, dtype=np.float64)
    steps = np.diff(times)
    mean = float(steps.mean())
    if np.ptp(steps) <= UNIFORM_RELATIVE * mean:
        return TimeBase(period_s=mean, uniform=True, jitter_s=0.0, offset_s=float(times[0]))
    relative = times - times[0]
    period, intercept = _fitted_period(relative, float(np.median(steps)))
    period = _snap(period)
    for _ in range(2):
        index, intercept = _grid_index(relative, period, intercept)
    steady = _steady_period(relative, index, period, intercept)
    if steady is not None:  # no frame dropped fits the stamps as well: heavy jitter only
        period, index = steady, np.arange(len(relative), dtype=np.float64)
    periods = np.diff(index)
    _refuse_long_gaps(times, steps, periods, period, source, lines)
    periods = periods.astype(int)
    jitter = float(np.std(steps - periods * period))
    gaps = [(int(i), int(periods[i]), float(relative[i])) for i in np.flatnonzero(periods >= 2)]
    return TimeBase(period_s=period, uniform=False, jitter_s=jitter, offset_s=float(times[0]),
                    gaps=gaps)


def _steady_period(relative: np.ndarray, index: np.ndarray, period: float, intercept: float
                   ) -> float | None:
    """The period of the stamps read as one per period, no frame dropped (the least-squares
    line of stamp vs sample number, snapped), when that line's RMS residual is at most the
    grid's with the gaps found; else None. Whole-period indices cannot tell heavy jitter
    from dropped frames (±4 ms at 100 Hz: steps of 2 to 18 ms, half of 40 files read at 101
    to 108 Hz with frames "dropped"); the stamps' residuals can: a dropped frame shifts
    every later stamp by a period off the no-drop line (a real drop near the middle of a
    file raises its RMS residual by 1.3 times or more at ±4 ms), while a grid fitted to
    jitter by inventing drops fits it no better than the no-drop line (0.85 times or
    more)."""
    if not np.any(np.diff(index) > 1):
        return None
    count = np.arange(len(relative), dtype=np.float64)
    centred = count - count.mean()
    slope = float(centred @ (relative - relative.mean())) / float(centred @ centred)
    line = relative - (relative.mean() + slope * centred)
    grid = relative - (intercept + index * period)
    if float(line @ line) > float(grid @ grid):
        return None
    return _snap(slope)


def _grid_index(relative: np.ndarray, period: float, intercept: float
                ) -> tuple[np.ndarray, float]:
    """Each stamp's whole-period index on the grid ``intercept + k period`` (kept strictly
    increasing), and the grid's least-squares intercept refitted with that period."""
    index = np.round((relative - intercept) / period)
    shift = index - np.arange(len(index))  # strictly increasing <=> shift non-decreasing
    index = np.maximum.accumulate(shift) + np.arange(len(index))
    return index, float(np.mean(relative - index * period))


def _fitted_period(relative: np.ndarray, period: float) -> tuple[float, float]:
    """The least-squares slope of stamp vs whole-period index, fitted on a window that
    doubles from 64 stamps to all (each window's period places the next one's indices):
    unlike whole-span over counted periods, stamp jitter of a sizeable share of the period
    does not turn into miscounted periods (±3 ms at 100 Hz read 100.204 Hz that way).
    Returns (period s, the grid's intercept s from the first stamp)."""
    size = min(len(relative), 64)
    # Start: within ±10 % of the median step, the period whose grid the first 64 stamps'
    # phases agree with best (dropped frames do not disturb phases; jitter only blurs them).
    candidates = period * np.linspace(0.9, 1.1, 401)
    phases = np.exp(2j * np.pi * relative[None, :size] / candidates[:, None]).mean(axis=1)
    best = int(np.argmax(np.abs(phases)))
    period = float(candidates[best])
    intercept = float(np.angle(phases[best])) * period / (2 * np.pi)
    while True:
        part = relative[:size]
        for _ in range(3):
            index, _ = _grid_index(part, period, intercept)
            centred = index - index.mean()
            denominator = float(centred @ centred)
            if denominator <= 0.0:
                break
            period = float(centred @ (part - part.mean())) / denominator
            intercept = float(part.mean() - period * index.mean())
        if size == len(relative):
            return period, intercept
        size = min(len(relative), 2 * size)


def _refuse_long_gaps(times: np.ndarray, steps: np.ndarray, periods: np.ndarray, period: float,
                      source: str, lines: list[int] | None) -> None:
    long = np.flatnonzero((periods - 1 > MAX_GAP_MISSING) & (steps > MAX_GAP_S))
    if not long.size:
        return
    i = int(long[0])
    where = (lambda k: f"line {lines[k]}") if lines is not None else (lambda k: f"sample {k}")
    raise DataError(
        f"{source}: {where(i + 1)}: t = {float(times[i + 1])!r} comes {float(steps[i]):.4g} s "
        f"after {where(i)} (t = {float(times[i])!r}), {float(periods[i] - 1):.4g} samples "
        f"missing at {1.0 / period:.6g} Hz; a gap of over {MAX_GAP_MISSING} samples and "
        f"{MAX_GAP_S} s is not interpolated (split the recording there or fix its time stamps)")


def common_rate_hz(bases: list[TimeBase]) -> float | None:
    """The rate every file of a folder is resampled to when they differ (the most common
    nominal rate, the higher on a tie); None when they already share one."""
    periods = np.array([b.period_s for b in bases])
    if not len(periods) or np.ptp(periods) <= UNIFORM_RELATIVE * periods.mean():
        return None
    rates = np.round(1.0 / periods, 6)
    values, counts = np.unique(rates, return_counts=True)
    best = values[counts == counts.max()].max()
    return float(best)


def _slerp(rel_times: np.ndarray, quat_wxyz: np.ndarray, grid: np.ndarray) -> np.ndarray:
    from scipy.spatial.transform import Rotation, Slerp

    rotations = Rotation.from_quat(quat_wxyz[:, [1, 2, 3, 0]])
    out = Slerp(rel_times, rotations)(grid).as_quat()[:, [3, 0, 1, 2]]
    before = np.clip(np.searchsorted(rel_times, grid, side="right") - 1, 0, len(rel_times) - 1)
    flip = np.einsum("ij,ij->i", out, quat_wxyz[before]) < 0
    out[flip] *= -1.0
    return out


def resample(times_s: np.ndarray, period_s: float, columns: dict[str, np.ndarray],
             quaternion: str | None = None, source: str = "times"
             ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Resample onto a uniform grid of ``period_s`` from the first time stamp.

    Parameters
    ----------
    times_s : ndarray (T,)
        Strictly increasing time stamps, s.
    period_s : float
        Grid step, s.
    columns : dict of name -> ndarray (T,) or (T, k)
        Values at the time stamps, interpolated linearly (positions m, joints rad or m,
        velocities), except ``columns[quaternion]`` (T, 4) w-x-y-z, by slerp.
    source : str
        The file, named when the grid would exceed :data:`MAX_SAMPLES` (a DataError, raised
        before it is allocated).

    Returns
    -------
    (grid times (N,) from 0 s, dict of the resampled columns)
    """
    rel = np.asarray(times_s, dtype=np.float64) - float(times_s[0])
    n = np.floor(rel[-1] / period_s + END_SLACK) + 1
    if not n <= MAX_SAMPLES:
        raise DataError(f"{source}: the time stamps span {rel[-1]:.4g} s, {n:.4g} samples at "
                        f"{1.0 / period_s:.6g} Hz; at most {MAX_SAMPLES} are resampled "
                        "(split the recording or fix its time stamps)")
    n = int(n)
    grid = np.arange(n) * period_s
    grid[-1] = min(grid[-1], rel[-1])  # never extrapolate past the last stamp by rounding
    out: dict[str, np.ndarray] = {}
    for name, values in columns.items():
        values = np.asarray(values, dtype=np.float64)
        if name == quaternion:
            out[name] = _slerp(rel, values, grid)
        elif values.ndim == 1:
            out[name] = np.interp(grid, rel, values)
        else:
            out[name] = np.column_stack([np.interp(grid, rel, values[:, k])
                                         for k in range(values.shape[1])]) \
                if values.shape[1] else np.zeros((n, 0))
    grid = np.arange(n) * period_s
    return grid, out


def filled_samples(times_s: np.ndarray, grid_s: np.ndarray) -> list[int]:
    """Indices of the grid samples (times from 0) farther than half a grid period from every
    recorded stamp: filled in across a gap, not measured (the initial-state fit skips them)."""
    rel = np.asarray(times_s, dtype=np.float64) - float(times_s[0])
    if len(grid_s) < 2:
        return []
    period = float(grid_s[1] - grid_s[0])
    right = np.clip(np.searchsorted(rel, grid_s), 0, len(rel) - 1)
    left = np.clip(right - 1, 0, len(rel) - 1)
    nearest = np.minimum(np.abs(rel[right] - grid_s), np.abs(rel[left] - grid_s))
    return [int(i) for i in np.flatnonzero(nearest > 0.5 * period)]
