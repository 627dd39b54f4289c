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

On an articulated object some are structural, not a lack of data: a point mass at a
revolute joint's axis can be booked to either link it joins without changing any motion
(which is why ``body`` keeps the URDF's mass split, :mod:`residualsim.sysid.bodyspace`), and
the two links' second moments along a shared hinge axis enter the dynamics only as their
sum (train/README.md §19 measures both). Others are weak only in free flight, such as a
single body's inertia scale; ``lsq``'s third stage searches the free flight's weak
directions on the first contact (:class:`WeakSubspace`), and train/README.md §19 measures
what it finds there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["weak_directions", "weak_basis", "WeakSubspace", "WEAK_RATIO", "describe",
           "without_inertia_scale", "INERTIA_SCALE_NOTE"]

#: A direction is weak when its singular value is below this fraction of the largest
#: (column-normalised Jacobian). On the synthetic hinge the structural directions sit at
#: 0.000-0.003 of the largest and the next one at 0.16.
WEAK_RATIO = 0.02
#: Members of a direction listed: those with at least this share of its unit vector.
MEMBER_SHARE = 0.2


def _weak(jacobian: np.ndarray, n_names: int, ratio: float, norms: np.ndarray | None = None,
          reference: float | None = None
          ) -> tuple[np.ndarray, list[int], list[tuple[float, np.ndarray]]]:
    """(column norms, indices of the idle columns, [(share, unit vector over the live
    columns in column-normalised coordinates)] of the weak directions, weakest first).
    ``norms``: the column scales (default the Jacobian's own column norms); ``reference``:
    the singular value shares are of (default the largest)."""
    jacobian = np.asarray(jacobian, dtype=np.float64)
    if jacobian.ndim != 2 or jacobian.shape[1] != n_names:
        raise ValueError(f"jacobian of shape {jacobian.shape} for {n_names} names")
    finite = np.where(np.isfinite(jacobian), jacobian, 0.0)
    norms = np.linalg.norm(finite, axis=0) if norms is None else np.asarray(norms, float)
    idle = [i for i, n in enumerate(norms) if n == 0]
    live = [i for i, n in enumerate(norms) if n > 0]
    weak = []
    if len(live) >= 2:  # every right singular vector: fewer rows than columns leave a null
        _, singular, vt = np.linalg.svd(finite[:, live] / norms[live], full_matrices=True)
        singular = np.concatenate([singular, np.zeros(len(vt) - len(singular))])  # space
        top = singular[0] if reference is None else reference
        for value, vector in sorted(zip(singular, vt), key=lambda pair: pair[0]):
            if value / top >= ratio:
                break
            full = np.zeros(n_names)
            full[live] = vector
            weak.append((float(value / top), full))
    return norms, idle, weak


def weak_directions(jacobian: np.ndarray, names: Sequence[str],
                    ratio: float = WEAK_RATIO, norms: np.ndarray | None = None,
                    reference: float | None = None, scale: np.ndarray | None = None
                    ) -> list[dict[str, Any]]:
    """The weak directions of ``jacobian`` (rows: residuals; columns: ``names``), weakest
    first: per direction ``ratio`` (its singular value over the largest) and ``members``
    (name -> signed coefficient of the unit direction, those of at least
    :data:`MEMBER_SHARE` in magnitude; the first member, in ``names`` order, positive).
    A parameter that moves no residual at all is a direction of its own with ratio 0.
    ``norms``: the columns' scales (default their own norms); ``reference``: the singular
    value the ratios are of (default the largest). A Jacobian with the initial states'
    share projected out takes both from the Jacobian before the projection, so that what
    the states absorb shows as weak (:mod:`residualsim.sysid.flight_info`). ``scale``: a
    single body's inertia-scale direction in unit coordinates (:func:`without_inertia_scale`):
    the weak direction along it gets the ``note`` :data:`INERTIA_SCALE_NOTE`."""
    norms, idle, weak = _weak(jacobian, len(names), ratio, norms, reference)
    out = [{"ratio": 0.0, "members": {names[i]: 1.0}} for i in idle]
    for share, vector in weak:
        vector = vector * np.sign(vector[np.argmax(np.abs(vector) >= MEMBER_SHARE)])
        out.append({"ratio": share, "members": {
            names[i]: round(float(c), 3) for i, c in enumerate(vector)
            if abs(c) >= MEMBER_SHARE}})
        unit = np.divide(vector, norms, out=np.zeros(len(names)), where=norms > 0)
        if scale is not None and np.linalg.norm(unit) and abs(
                unit @ scale) > 0.9 * np.linalg.norm(unit) * np.linalg.norm(scale):
            out[-1]["note"] = INERTIA_SCALE_NOTE
    return out


def describe(direction: dict[str, Any]) -> str:
    """One line for a weak direction: ``+0.71 a - 0.71 b (0.1 % of the strongest)``, and
    its ``note`` when it has one (the inertia scale: :func:`without_inertia_scale`)."""
    terms = " ".join(f"{'+' if c >= 0 else '-'} {abs(c):.2f} {n}"
                     for n, c in direction["members"].items())
    note = f": {direction['note']}" if direction.get("note") else ""
    return f"{terms.lstrip('+ ')} ({100 * direction['ratio']:.1f} % of the strongest){note}"


#: What a single body's inertia-scale direction is called in reports.
INERTIA_SCALE_NOTE = ("the inertia scale, which torque-free flight cannot see (it sees the "
                      "moments' ratios only)")


def without_inertia_scale(jacobian: np.ndarray, scale: np.ndarray | None) -> np.ndarray:
    """``jacobian`` (rows, d; unit coordinates) with its response along ``scale`` (d,),
    the direction that scales a single body's second moments together, removed: torque-free
    flight cannot respond to it (Euler's equations are unchanged when the inertia tensor is
    scaled), so what a finite-difference Jacobian shows there is noise or the samples'
    sparseness (at 25 Hz it passed as determined, issue 67). None: unchanged."""
    if scale is None:
        return jacobian
    jacobian = np.nan_to_num(np.asarray(jacobian, dtype=np.float64))
    unit = scale / np.linalg.norm(scale)
    return jacobian - np.outer(jacobian @ unit, unit)
    unit = scale / np.linalg.norm(scale)
    norms = np.asarray(norms, dtype=np.float64)
    for direction in weak:
        vector = np.array([direction["members"].get(n, 0.0) for n in names])
        vector = np.divide(vector, norms, out=np.zeros(len(names)), where=norms > 0)
        if np.linalg.norm(vector) and abs(vector @ unit) / np.linalg.norm(vector) > 0.9:
            direction["note"] = INERTIA_SCALE_NOTE
    return weak


def weak_basis(jacobian: np.ndarray, n_names: int, ratio: float = WEAK_RATIO) -> np.ndarray:
    """(k, n_names): the weak directions of ``jacobian`` in the parameters' unit coordinates
    (the order of :func:`weak_directions`), each scaled so that its largest component is 1:
    a step of 1 along a row moves one parameter across its whole range."""
    norms, idle, weak = _weak(jacobian, n_names, ratio)
    rows = [np.eye(n_names)[i] for i in idle]
    for _, vector in weak:
        unit = np.divide(vector, norms, out=np.zeros(n_names), where=norms > 0)
        rows.append(unit / np.max(np.abs(unit)))
    return np.array(rows, dtype=np.float64).reshape(-1, n_names)


class WeakSubspace:
    """The parameters of ``space`` held at ``origin`` (unit coordinates) except along the
    rows of ``basis`` (:func:`weak_basis`): a search space of ``len(basis)`` coordinates.

    Unit coordinates z in [0, 1]^k stand for steps α = z − ½ along the rows, so the start
    (z = ½) is ``origin``; :meth:`from_unit` returns ``space``'s natural values of
    origin + α · basis (clipped to its box). ``labels`` name the directions (for reports).
    It offers what :func:`residualsim.sysid.lsq.fit_least_squares` uses of a space.
    """

    def __init__(self, space: Any, origin: np.ndarray, basis: np.ndarray,
                 labels: Sequence[str]) -> None:
        self.space, self.origin = space, np.asarray(origin, dtype=np.float64)
        self.basis, self.names = np.atleast_2d(np.asarray(basis, dtype=np.float64)), list(labels)

    @property
    def ndim(self) -> int:
        return len(self.basis)

    def start(self) -> np.ndarray:
        return np.full(self.ndim, 0.5)

    def from_unit(self, z: np.ndarray) -> np.ndarray:
        z = np.asarray(z, dtype=np.float64)
        moved = np.clip(self.origin + (np.atleast_2d(z) - 0.5) @ self.basis, 0.0, 1.0)
        values = self.space.from_unit(moved)
        return values[0] if z.ndim == 1 else values

    def as_json(self) -> dict[str, Any]:
        return {"space": self.space.as_json(), "origin": self.origin.tolist(),
                "basis": self.basis.tolist(), "labels": self.names}
