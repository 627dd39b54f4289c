"""A capture session as it arrives: one stream of time-stamped poses per tracked frame (and
maybe one of joint values), each on its own clock; cleaned, then aligned on the base's.

Times are the messages' own stamps (header stamps of a bag; the ``t`` column of a CSV), in
seconds on the session's clock (an epoch time is fine). Positions in metres, world frame (the
capture system's); quaternions w-x-y-z, tracked frame -> world.

Cleaning (:func:`clean_poses`), in this order, each counted in :class:`StreamReport`:

* messages are sorted by stamp (a bag stores them as they arrived, which can be out of
  order); messages with the same stamp as an earlier one are duplicates and dropped;
* lost tracking is a gap, not motion: a pose with a NaN or infinite value, or a quaternion
  of norm below 0.5 (drivers publish zeros when a body is lost) is dropped; so is a pose
  that repeats the previous one bit for bit (a tracker that froze holds its last pose;
  real capture noise never repeats a pose exactly);
* quaternions are normalised and their signs made continuous.

Capture clock (:func:`capture_grid`): a capture system takes its frames on a steady clock,
but the stamps a driver writes jitter (a VRPN or NatNet client stamps on arrival): at 3 m/s,
0.3 ms of jitter moves a pose by 0.9 mm, three times the tracking noise. When the base's
stamps lie on a grid (the period: the median step, refined over whole-period steps; the
grid's offset: a running median over 301 frames, which follows a clock's drift) within a
quarter period RMS (the period then refined as the slope of stamp against frame index
over the whole session), every stream's stamps are put on that grid (a frame's index rounded).
Otherwise (no steady capture clock) the stamps are kept as they are.

Alignment (:func:`align_poses`) samples every other stream at the base's stamps: positions (and
joint values) linearly, rotations by slerp, from the two messages that frame the stamp.
Where those two are more than ``max_gap_s`` apart, or the stamp lies outside the stream,
the sample is missing (NaN): the base sample is then dropped, a gap like the base's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from residualsim.data import quaternions as quat

__all__ = ["PoseStream", "JointStream", "StreamReport", "clean_poses", "clean_joints",
           "align_poses", "align_values", "CaptureGrid", "capture_grid"]


@dataclass(frozen=True)
class PoseStream:
    """One tracked frame's poses: ``stamps_s`` (N,), ``positions_m`` (N, 3) world frame,
    ``quat_wxyz`` (N, 4) frame -> world; ``source`` names where they came from (a topic,
    a TF frame, CSV columns)."""

    source: str
    stamps_s: np.ndarray
    positions_m: np.ndarray
    quat_wxyz: np.ndarray

    def __len__(self) -> int:
        return len(self.stamps_s)


@dataclass(frozen=True)
class JointStream:
    """Joint values by name: ``stamps_s`` (N,), ``positions`` (N, k) rad or m (NaN where a
    message did not name a joint)."""

    source: str
    stamps_s: np.ndarray
    names: tuple[str, ...]
    positions: np.ndarray


@dataclass
class StreamReport:
    """What cleaning a stream dropped, by reason (counts of messages)."""

    source: str
    messages: int = 0
    out_of_order: int = 0
    duplicates: int = 0
    lost: int = 0
    frozen: int = 0
    kept: int = 0
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        return {"source": self.source, "messages": self.messages,
                "out_of_order": self.out_of_order, "duplicates": self.duplicates,
                "lost_tracking": self.lost, "frozen": self.frozen, "kept": self.kept}


def _sorted_unique(stamps: np.ndarray, report: StreamReport) -> np.ndarray:
    """Indices of the messages in stamp order, duplicates (equal stamps) dropped."""
    report.out_of_order = int(np.count_nonzero(np.diff(stamps) < 0))
    order = np.argsort(stamps, kind="stable")
    keep = np.ones(len(order), bool)
    keep[1:] = np.diff(stamps[order]) > 0
    report.duplicates = int(np.count_nonzero(~keep))
    return order[keep]


def clean_poses(stream: PoseStream) -> tuple[PoseStream, StreamReport]:
    """The stream sorted, without duplicates, lost-tracking or frozen poses, quaternions unit
    and sign-continuous (the module docstring has the rules)."""
    report = StreamReport(stream.source, messages=len(stream))
    stamps = np.asarray(stream.stamps_s, np.float64)
    finite_stamps = np.isfinite(stamps)
    index = np.flatnonzero(finite_stamps)
    index = index[_sorted_unique(stamps[index], report)]
    positions = np.asarray(stream.positions_m, np.float64)[index]
    quats = np.asarray(stream.quat_wxyz, np.float64)[index]
    norms = np.linalg.norm(quats, axis=1)
    good = np.isfinite(positions).all(axis=1) & np.isfinite(quats).all(axis=1) & (norms > 0.5)
    report.lost = int(np.count_nonzero(~good)) + int(np.count_nonzero(~finite_stamps))
    index, positions, quats, norms = index[good], positions[good], quats[good], norms[good]
    frozen = np.zeros(len(index), bool)
    if len(index) > 1:
        frozen[1:] = (positions[1:] == positions[:-1]).all(axis=1) & \
            (quats[1:] == quats[:-1]).all(axis=1)
    report.frozen = int(np.count_nonzero(frozen))
    keep = ~frozen
    report.kept = int(np.count_nonzero(keep))
    quats = quat.same_hemisphere(quats[keep] / norms[keep, None])
    return PoseStream(stream.source, stamps[index[keep]], positions[keep], quats), report


def clean_joints(stream: JointStream) -> tuple[JointStream, StreamReport]:
    """The joint stream sorted and without duplicate stamps; NaN values stay (missing)."""
    report = StreamReport(stream.source, messages=len(stream.stamps_s))
    stamps = np.asarray(stream.stamps_s, np.float64)
    index = _sorted_unique(stamps, report)
    report.kept = len(index)
    return JointStream(stream.source, stamps[index], stream.names,
                       np.asarray(stream.positions, np.float64)[index]), report


def _brackets(stamps: np.ndarray, targets: np.ndarray, max_gap_s: float
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each target: the stream sample before it, the fraction to the next, and whether
    both exist and lie at most ``max_gap_s`` apart (an exact hit needs only itself)."""
    after = np.searchsorted(stamps, targets, side="left")
    exact = (after < len(stamps)) & (stamps[np.minimum(after, len(stamps) - 1)] == targets)
    before = np.clip(after - 1, 0, max(len(stamps) - 2, 0))
    before = np.where(exact, np.minimum(after, len(stamps) - 1), before)
    nxt = np.minimum(before + 1, len(stamps) - 1)
    span = stamps[nxt] - stamps[before]
    inside = (after > 0) & (after < len(stamps))
    valid = exact | (inside & (span <= max_gap_s))
    with np.errstate(invalid="ignore", divide="ignore"):
        fraction = np.where(exact | (span <= 0), 0.0, (targets - stamps[before]) / span)
    return before, np.clip(fraction, 0.0, 1.0), valid


def align_poses(stream: PoseStream, targets_s: np.ndarray, max_gap_s: float
                ) -> tuple[np.ndarray, np.ndarray]:
    """The stream's pose at each target stamp (M,): positions (M, 3) interpolated linearly,
    quaternions (M, 4) by slerp; NaN where it was not tracked (see the module docstring)."""
    if len(stream) == 0:
        return np.full((len(targets_s), 3), np.nan), np.full((len(targets_s), 4), np.nan)
    before, fraction, valid = _brackets(stream.stamps_s, targets_s, max_gap_s)
    nxt = np.minimum(before + 1, len(stream) - 1)
    p0, p1 = stream.positions_m[before], stream.positions_m[nxt]
    positions = p0 + fraction[:, None] * (p1 - p0)
    quats = quat.slerp(stream.quat_wxyz[before], stream.quat_wxyz[nxt], fraction)
    positions[~valid] = np.nan
    quats[~valid] = np.nan
    return positions, quats


def align_values(stamps_s: np.ndarray, values: np.ndarray, targets_s: np.ndarray,
                 max_gap_s: float) -> np.ndarray:
    """Values (N, k) at the target stamps, linearly; NaN where not framed within
    ``max_gap_s`` or where either framing value is NaN."""
    values = np.asarray(values, np.float64).reshape(len(stamps_s), -1)
    if len(stamps_s) == 0:
        return np.full((len(targets_s), values.shape[1]), np.nan)
    before, fraction, valid = _brackets(np.asarray(stamps_s, np.float64), targets_s, max_gap_s)
    nxt = np.minimum(before + 1, len(stamps_s) - 1)
    out = values[before] + fraction[:, None] * (values[nxt] - values[before])
    out[~valid] = np.nan
    return out


@dataclass(frozen=True)
class CaptureGrid:
    """The capture clock under a stream's stamps: ``period_s``, and the grid's offset (s)
    as a function of time (``offset_at``); ``jitter_s`` the RMS of the stamps' distance
    to the grid. ``snap`` puts stamps (of any stream of the session) on the grid."""

    period_s: float
    anchor_times_s: np.ndarray
    anchor_offsets_s: np.ndarray
    jitter_s: float

    def offset_at(self, stamps_s: np.ndarray) -> np.ndarray:
        return np.interp(stamps_s, self.anchor_times_s, self.anchor_offsets_s)

    def snap(self, stamps_s: np.ndarray) -> np.ndarray:
        offsets = self.offset_at(stamps_s)
        return offsets + self.period_s * np.round((stamps_s - offsets) / self.period_s)

    def summary(self) -> dict:
        return {"period_s": self.period_s, "rate_hz": 1.0 / self.period_s,
                "jitter_ms": self.jitter_s * 1e3}


def capture_grid(stamps_s: np.ndarray, window: int = 301) -> CaptureGrid | None:
    """The steady capture clock under sorted stamps (module docstring), or None when the
    stamps do not lie on one within a quarter period RMS (or are too few)."""
    from scipy.ndimage import median_filter

    stamps = np.asarray(stamps_s, np.float64)
    steps = np.diff(stamps)
    if len(steps) < 10:
        return None
    period = float(np.median(steps))
    whole = np.round(steps / period)
    usable = (whole >= 1) & (np.abs(steps / period - whole) < 0.3)
    if not usable.any() or period <= 0:
        return None
    period = float(np.median(steps[usable] / whole[usable]))
    index = np.concatenate([[0.0], np.cumsum(np.maximum(np.round(steps / period), 1.0))])
    period = float(np.polyfit(index, stamps - stamps[0], 1)[0])  # over the whole session
    offsets = stamps - period * index
    smooth = median_filter(offsets, size=min(window, len(offsets) | 1), mode="nearest")
    residual = offsets - smooth
    jitter = float(np.sqrt(np.mean(residual ** 2)))
    if jitter > 0.25 * period:
        return None
    # anchors: the smoothed offset, expressed as the offset of the frame grid at each stamp
    return CaptureGrid(period, stamps, smooth, jitter)
