"""Which parameter combinations a calibration's recordings cannot determine.

A least-squares fit ends with a Jacobian J of the per-sample residuals (metres) over the
parameters (unit coordinates, :class:`~residualsim.sysid.paramspace.ParamSpace`). Scale
each column to unit length, so that no parameter's units or range decide the answer, and
take the singular value decomposition: a right singular vector whose singular value is a
small fraction of the largest is a direction along which the parameters can move together
while the trajectories barely change. Such a direction is reported; the least-squares fit
anchors it at its start (``fit_least_squares(anchor=True)``, a ridge in these same
column-normalised coordinates): the recordings cannot choose a point along it, so the
user's URDF does, and its members' individual values there mean no more than the URDF's.

On an articulated object these directions are structural, not a lack of data: a point mass
at a revolute joint's axis can be booked to either link it joins without changing any
motion (which is why ``body`` keeps the URDF's mass split, :mod:`residualsim.sysid.bodyspace`),
and the two links' second moments along a shared hinge axis enter the dynamics only as their
sum (train/README.md §19 measures both).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["weak_directions", "WEAK_RATIO", "describe"]

#: A direction is weak when its singular value is below this fraction of the largest
#: (column-normalised Jacobian). On the synthetic hinge the structural directions sit at
#: 0.000-0.003 of the largest and the next one at 0.16.
WEAK_RATIO = 0.02
#: Members of a direction listed: those with at least this share of its unit vector.
MEMBER_SHARE = 0.2


def _weak(jacobian: np.ndarray, n_names: int, ratio: float
          ) -> tuple[np.ndarray, list[int], list[tuple[float, np.ndarray]]]:
    """(column norms, indices of the idle columns, [(share, unit vector over the live
    columns in column-normalised coordinates)] of the weak directions, weakest first)."""
    jacobian = np.asarray(jacobian, dtype=np.float64)
    if jacobian.ndim != 2 or jacobian.shape[1] != n_names:
        raise ValueError(f"jacobian of shape {jacobian.shape} for {n_names} names")
    finite = np.where(np.isfinite(jacobian), jacobian, 0.0)
    norms = np.linalg.norm(finite, axis=0)
    idle = [i for i, n in enumerate(norms) if n == 0]
    live = [i for i, n in enumerate(norms) if n > 0]
    weak = []
    if len(live) >= 2:
        _, singular, vt = np.linalg.svd(finite[:, live] / norms[live], full_matrices=False)
        for value, vector in sorted(zip(singular, vt), key=lambda pair: pair[0]):
            if value / singular[0] >= ratio:
                break
            full = np.zeros(n_names)
            full[live] = vector
            weak.append((float(value / singular[0]), full))
    return norms, idle, weak


def weak_directions(jacobian: np.ndarray, names: Sequence[str],
                    ratio: float = WEAK_RATIO) -> list[dict[str, Any]]:
    """The weak directions of ``jacobian`` (rows: residuals; columns: ``names``), weakest
    first: per direction ``ratio`` (its singular value over the largest) and ``members``
    (name -> signed coefficient of the unit direction, those of at least
    :data:`MEMBER_SHARE` in magnitude; the first member, in ``names`` order, positive).
    A parameter that moves no residual at all is a direction of its own with ratio 0."""
    _, idle, weak = _weak(jacobian, len(names), ratio)
    out = [{"ratio": 0.0, "members": {names[i]: 1.0}} for i in idle]
    for share, vector in weak:
        vector = vector * np.sign(vector[np.argmax(np.abs(vector) >= MEMBER_SHARE)])
        out.append({"ratio": share, "members": {
            names[i]: round(float(c), 3) for i, c in enumerate(vector)
            if abs(c) >= MEMBER_SHARE}})
    return out


def describe(direction: dict[str, Any]) -> str:
    """One line for a weak direction: ``+0.71 a - 0.71 b (0.1 % of the strongest)``."""
    terms = " ".join(f"{'+' if c >= 0 else '-'} {abs(c):.2f} {n}"
                     for n, c in direction["members"].items())
    return f"{terms.lstrip('+ ')} ({100 * direction['ratio']:.1f} % of the strongest)"
