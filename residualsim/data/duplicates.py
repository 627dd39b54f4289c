"""Recordings that repeat one another: copies under other names, exact or nearly so.

Eight byte-identical copies of one toss under different names passed ``data info`` and
``calibrate`` without a word, and the hash split put copies in the training and validation
splits alike: the held-out guard then scored copies of what the search fitted (issue 67).
:func:`duplicate_groups` finds them: two recordings repeat one another when they have the
same number of samples, kind and joints, their times from their first sample agree within
:data:`NEAR_S`, and at every sample their positions agree within :data:`NEAR_M`, their
attitudes within :data:`NEAR_RAD` and their joints within :data:`NEAR_M` / :data:`NEAR_RAD`.
Two real throws are never that close: a tracker's noise alone moves poses by more.

Cost: recordings are compared only within groups of the same length, each against the rest
of its group at once (numpy): 400 recordings of 90 samples, all of one length, in ~0.1 s.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from residualsim.data.trajectory import Trajectory

__all__ = ["duplicate_groups", "duplicates_note", "NEAR_M", "NEAR_RAD", "NEAR_S"]

#: Positions (m) and joint values (m or rad) within this are the same pose.
NEAR_M = 1e-4
#: Attitudes within this angle (rad) are the same.
NEAR_RAD = 1e-3
#: Times from the first sample within this (s) are the same.
NEAR_S = 1e-6


def _same_as(first: int, times: np.ndarray, positions: np.ndarray, quats: np.ndarray,
             joints: np.ndarray) -> np.ndarray:
    """Which recordings after ``first`` (indices into the stacked arrays) repeat it."""
    rest = slice(first + 1, None)
    same = np.all(np.abs(times[rest] - times[first]) <= NEAR_S, axis=1)
    same &= np.all(np.abs(positions[rest] - positions[first]) <= NEAR_M, axis=(1, 2))
    dots = np.abs(np.einsum("msk,sk->ms", quats[rest], quats[first]))
    same &= np.all(dots >= np.cos(NEAR_RAD / 2), axis=1)
    if joints.shape[-1]:
        same &= np.all(np.abs(joints[rest] - joints[first]) <= NEAR_M, axis=(1, 2))
    return first + 1 + np.flatnonzero(same)


def duplicate_groups(trajectories: Mapping[str, Trajectory]) -> list[list[str]]:
    """The groups of recordings (ids, in the mapping's order; groups by their first id)
    that repeat one another (module docstring); empty when none do."""
    buckets: dict[tuple, list[str]] = {}
    for key, traj in trajectories.items():
        buckets.setdefault((traj.n_samples, traj.planar, tuple(traj.joint_names)),
                           []).append(key)
    groups = []
    for keys in buckets.values():
        if len(keys) < 2:
            continue
        trajs = [trajectories[k] for k in keys]
        times = np.stack([t.times_s - t.times_s[0] for t in trajs])
        positions = np.stack([t.positions_m for t in trajs])
        quats = np.stack([t.quat_wxyz for t in trajs])
        joints = np.stack([np.asarray(t.joint_positions) if t.n_joints else
                           np.zeros((t.n_samples, 0)) for t in trajs])
        taken: set[int] = set()
        for first in range(len(keys) - 1):
            if first in taken:
                continue
            same = [j for j in _same_as(first, times, positions, quats, joints)
                    if j not in taken]
            if same:
                taken.update(same)
                groups.append([keys[first], *(keys[j] for j in same)])
    order = {key: index for index, key in enumerate(trajectories)}
    return sorted(groups, key=lambda group: order[group[0]])


def duplicates_note(groups: list[list[str]], parts: Mapping[str, set[str]] | None = None
                    ) -> str:
    """One line naming the copies (the first groups) and, given the split's ``parts``
    (name -> ids), the splits a group spans."""
    shown = []
    for group in groups[:5]:
        text = ", ".join(group[:4]) + (f" (+{len(group) - 4} more)" if len(group) > 4 else "")
        spans = [name for name, ids in (parts or {}).items() if ids & set(group)]
        shown.append(f"[{text}]" + (f" in {' and '.join(spans)}" if len(spans) > 1 else ""))
    more = f" and {len(groups) - 5} more groups" if len(groups) > 5 else ""
    return (f"{sum(len(g) - 1 for g in groups)} recordings repeat another (same samples, "
            f"poses within {1e3 * NEAR_M:g} mm and {NEAR_RAD:g} rad): "
            f"{'; '.join(shown)}{more}; copies in the training and held-out splits make "
            "the held-out figures those of the fitted recordings: remove the copies")
