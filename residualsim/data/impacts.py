"""The :class:`PlanarImpacts` type: a set of single planar impacts (pre/post-contact states).

Planar convention (shared with the planar scenes): the vertical x-y plane, x horizontal,
y up, theta the rotation about +z (counter-clockwise seen from +z), gravity along -y.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from residualsim.errors import DataError

__all__ = ["PlanarImpacts"]


@dataclass(frozen=True)
class PlanarImpacts:
    """N planar impacts of one object, each one row.

    Parameters
    ----------
    pre_state : ndarray of shape (N, 6)
        Pre-contact (x m, y m, theta rad, dx m/s, dy m/s, dtheta rad/s).
    post_state : ndarray of shape (N, 6)
        Post-contact state, same layout.
    rows : ndarray of shape (N,), int
        Upstream row numbers (``original_rows.txt``): the ids of the impacts.
    normal_jacobian : ndarray of shape (N, 3)
        Normal row n of the contact Jacobian, (0, 1, r_x) for contact offset (r_x, r_y).
    tangent_jacobian : ndarray of shape (N, 3)
        Tangential row d of the contact Jacobian, (1, 0, -r_y).
    best_impulse : ndarray of shape (N, 2)
        (tangential, normal) linear impulse in N*s that best explains each impact.
    model_impulses : dict of str -> ndarray of shape (N, 2)
        (tangential, normal) impulse predicted by each analytic model, keyed by model name.
    model_post_velocity : dict of str -> ndarray of shape (N, 3)
        Post-contact (dx, dy, dtheta) predicted by each analytic model.
    mass_kg, radius_of_gyration_m : float
        M = mass * diag(1, 1, k^2) in the (x, y, theta) coordinates.
    convention : str
        ``"upstream"`` (as published) or ``"corrected"`` (x-axis handedness fixed);
        see :mod:`residualsim.data.mcube`.
    source : str
        The directory it was read from.
    """

    pre_state: np.ndarray
    post_state: np.ndarray
    rows: np.ndarray
    normal_jacobian: np.ndarray
    tangent_jacobian: np.ndarray
    best_impulse: np.ndarray
    model_impulses: dict[str, np.ndarray] = field(default_factory=dict)
    model_post_velocity: dict[str, np.ndarray] = field(default_factory=dict)
    mass_kg: float = 0.0364
    radius_of_gyration_m: float = 0.0192
    convention: str = "corrected"
    source: str = ""

    def __post_init__(self) -> None:
        where = self.source or "planar impacts"
        n_rows = np.asarray(self.rows).shape[0]
        expected = {
            "pre_state": 6,
            "post_state": 6,
            "normal_jacobian": 3,
            "tangent_jacobian": 3,
            "best_impulse": 2,
        }
        for name, width in expected.items():
            array = np.asarray(getattr(self, name), dtype=np.float64)
            if array.shape != (n_rows, width):
                raise DataError(
                    f"{where}: {name} has shape {array.shape}, expected ({n_rows}, {width})"
                )
            if not np.isfinite(array).all():
                index = int(np.argwhere(~np.isfinite(array))[0][0])
                raise DataError(f"{where}: {name} has a NaN or infinite value in row {index}")
            object.__setattr__(self, name, array)
        object.__setattr__(self, "rows", np.asarray(self.rows, dtype=np.int64))
        if self.convention not in ("upstream", "corrected"):
            raise DataError(f"{where}: convention must be 'upstream' or 'corrected'")

    @property
    def n_impacts(self) -> int:
        """Number of impacts N."""
        return int(self.rows.shape[0])

    @property
    def mass_matrix(self) -> np.ndarray:
        """M = m * diag(1, 1, k^2), shape (3, 3), in (x, y, theta) coordinates."""
        k = self.radius_of_gyration_m
        return self.mass_kg * np.diag([1.0, 1.0, k * k])

    def subset(self, rows) -> PlanarImpacts:
        """The impacts whose upstream row numbers are in ``rows`` (ints or strings), in
        this set's order. Raises DataError naming a row that is not in the set."""
        wanted = {int(r) for r in rows}
        missing = sorted(wanted - set(self.rows.tolist()))
        if missing:
            raise DataError(f"{self.source or 'planar impacts'}: no impact with row "
                            f"{missing[0]}")
        keep = np.isin(self.rows, list(wanted))
        return replace(
            self, pre_state=self.pre_state[keep], post_state=self.post_state[keep],
            rows=self.rows[keep], normal_jacobian=self.normal_jacobian[keep],
            tangent_jacobian=self.tangent_jacobian[keep], best_impulse=self.best_impulse[keep],
            model_impulses={k: v[keep] for k, v in self.model_impulses.items()},
            model_post_velocity={k: v[keep] for k, v in self.model_post_velocity.items()})
