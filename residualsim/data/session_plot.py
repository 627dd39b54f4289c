"""The picture of a cut session: height (and joint values) over time, throws and skipped
segments marked, so the cutting can be checked at a glance (``data import --plot``)."""

from __future__ import annotations

import os

import numpy as np

from residualsim.atomic import save_png

__all__ = ["plot_session"]

#: Samples drawn per curve at most (a one-hour session is thinned by min/max per bin).
_MAX_POINTS = 20_000


def _thinned(times: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Min and max of each bin, so spikes and throws stay visible in a long session."""
    if len(times) <= _MAX_POINTS:
        return times, values
    bins = _MAX_POINTS // 2
    edges = np.linspace(0, len(times), bins + 1).astype(int)
    keep = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        if hi > lo:
            chunk = values[lo:hi]
            keep += sorted({lo + int(np.argmin(chunk)), lo + int(np.argmax(chunk))})
    keep = np.array(keep)
    return times[keep], values[keep]


def plot_session(session, segments, ids: dict[int, str], path: str | os.PathLike[str]) -> None:
    """Draw the session (a :class:`~residualsim.data.session_import.TrackedSession`) and
    its segments (:class:`~residualsim.data.cutting.Segment`; ``ids`` index -> throw id)
    to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    times = session.times_s - session.times_s[0]
    joints = session.tree.moving_joints
    rows = 2 if joints else 1
    figure, axes = plt.subplots(rows, 1, figsize=(14, 3.2 * rows), sharex=True, squeeze=False)
    height = axes[0, 0]
    height.plot(*_thinned(times, session.com_m[:, 2]), lw=0.6, color="k")
    height.set_ylabel("centre of mass z (m)")
    for k, segment in enumerate(segments):
        for axis in axes[:, 0]:
            axis.axvspan(times[segment.start], times[segment.end],
                         color="tab:green" if segment.is_throw else "tab:orange",
                         alpha=0.25 if segment.is_throw else 0.35, lw=0)
        if segment.is_throw:
            height.annotate(ids[k].rsplit("-", 1)[-1], (times[segment.start], 1.0),
                            xycoords=("data", "axes fraction"), fontsize=7,
                            va="bottom", rotation=90)
    if joints:
        for k, joint in enumerate(joints):
            values = session.joint_values[:, k]
            if joint.type != "prismatic":
                values = np.degrees(values)
            axes[1, 0].plot(*_thinned(times, values), lw=0.6, label=joint.name)
        unit = "deg" if any(j.type != "prismatic" for j in joints) else "m"
        axes[1, 0].set_ylabel(f"joint values ({unit}; prismatic in m)")
        axes[1, 0].legend(loc="upper right", fontsize=7)
    axes[-1, 0].set_xlabel(f"time since the session's first sample (s); "
                           f"{sum(s.is_throw for s in segments)} throws (green), "
                           f"{sum(not s.is_throw for s in segments)} skipped (orange)")
    figure.suptitle(f"{session.source.name}: {len(times)} tracked samples over "
                    f"{times[-1]:.0f} s", fontsize=10)
    save_png(figure, path)
