"""Reader for the MCube planar impact set of an elliptic disc (Fazeli, Rodriguez et al.).

Files (MATLAB, one row per impact, same row order): ``data_ellipse.mat`` struct ``data``
with ``states_i`` / ``states_f`` (N, 6) pre/post-contact (x m, y m, theta rad, dx m/s,
dy m/s, dtheta rad/s), ``n`` and ``d`` (N, 3) contact Jacobian rows; ``p_true_data.mat``
``p_data`` (N, 2); ``p_models.mat`` ``p_models`` (N, 12); ``v_models.mat`` ``v_models``
(N, 18); ``original_rows.txt`` the upstream row numbers.  The GP feature files and
``w_true_data.mat`` are not read.

Layout, verified on the 1300 published rows (script kept out of the repository; the test
``tests/test_data_mcube.py`` re-checks every number below on the real files):

* ``n = (0, 1, r_x)`` and ``d = (1, 0, -r_y)`` in every row, with the contact point at
  (r_x, r_y) from the centre: r_x in [-10, 10] mm, r_y in [-35, -25] mm.  r_x equals the
  lowest point of the ellipse (semi-axes 35 and 25 mm) turned by +theta to a median of
  0.21 mm (-theta: 12.6 mm), so theta and r_x share one right-handed frame.
* ``p_data`` columns are (tangential, normal) impulse, N s.
* ``p_models`` holds six (tangential, normal) pairs, columns (2j, 2j+1) for model j of
  :data:`MODEL_NAMES`; ``v_models`` holds six (dx, dy, dtheta) blocks, columns 3j:3j+3.
  As published, ``v_models = v_i + M^-1 (n^T p_n + d^T p_t)`` to float precision (largest
  error 3e-14 rad/s, 0 in dx and dy) for every model, with no gravity term and
  M = m diag(1, 1, k^2), k^2 = 3.7e-4 m^2 exactly (k = 0.019235 m: upstream rounded
  0.0192^2 = 3.6864e-4 up).
  With k = 0.0192 the dtheta error is 0.13 to 0.19 rad/s (median).
* ``w_true_data`` W = (m dx_f - m dx_i, m dy_f - m dy_i, m k^2 dtheta change minus the
  torque of the linear impulse), computed in the published frame.

Handedness.  A rigid body hit at (r_x, r_y) by an impulse (P_x, P_y) obeys
``m dv = P`` and ``m k^2 dw = r_x P_y - r_y P_x``, hence
``k^2 dw = r_x dv_y - r_y dv_x``.  As published the median absolute error of this identity
is 0.0285 m^2/s (90th percentile 0.0506) against a median |k^2 dw| of 0.0090: it fails.
With dv_x negated it is 0.0021 m^2/s (90th percentile 0.0049).  Negating (dtheta, r_x)
instead fits equally well (it is the same fix seen in a mirror), negating r_x alone or
dtheta alone does not (0.018, 0.048).  So the recorded x velocities have the opposite
handedness to (theta, r_x).  ``p_data`` was evidently fitted in the consistent frame: its
tangential column matches +m dv_x after the flip (median error 2.9e-3 N s) but -m dv_x
as published (3.2e-2 N s, against a median |p_t| of 1.5e-2), and it satisfies the torque
row exactly.  The six published models were computed in the published frame.

Conventions (``convention=``):

``"corrected"`` (default)
    A right-handed frame matching the planar scenes (x right, y up, theta counter-clockwise
    about +z): x and dx of both pre and post states are negated; n, d, theta, dtheta and
    ``p_data`` are kept (they already live in this frame); each model's tangential impulse
    and predicted dx are negated, which maps the published predictions into the same
    coordinates (an isometry, so their errors against the measured post-state are the same
    numbers in both conventions).  Then the measured data satisfy ``M dv = n^T p_n + d^T p_t``
    with ``p_data`` to medians (2.9e-3 N s, 6.3e-3 N s, 1.4e-7 N m s; as published
    3.2e-2 in x) and the rigid-body identity to 0.0021 m^2/s.  The models satisfy the x
    and y rows exactly but their torque row reads ``m k^2 dw = r_x p_n + r_y p_t``: they
    were given the mirrored sliding velocity, so their friction torque has the wrong sign.
    Kept for reference; to compare models fairly, run them on the corrected pre-states.
``"upstream"``
    Every array exactly as published.  The models satisfy
    ``v = v_i + M^-1 (n^T p_n + d^T p_t)``; the measurements and ``p_data`` do not (dx).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from residualsim.errors import DataError, ParameterError
from residualsim.data.impacts import PlanarImpacts

__all__ = [
    "MODEL_NAMES",
    "CONVENTIONS",
    "MASS_KG",
    "K_SQUARED_M2",
    "RADIUS_OF_GYRATION_M",
    "NOMINAL_RADIUS_OF_GYRATION_M",
    "SEMI_AXES_M",
    "SAMPLE_RATE_HZ",
    "SAMPLE_PERIOD_S",
    "REQUIRED_FILES",
    "load_impacts",
    "rigid_body_residual",
]

#: The six analytic models of ``p_models`` / ``v_models``, in column order.
MODEL_NAMES = (
    "drumwright_shell",
    "anitescu_potra_poisson",
    "anitescu_potra_newton",
    "mirtich",
    "wang_mason",
    "whittaker",
)
#: Accepted values of ``convention``.
CONVENTIONS = ("corrected", "upstream")
#: Mass of the disc, kg.
MASS_KG = 0.0364
#: k^2 used by every published derived quantity, m^2.
K_SQUARED_M2 = 3.7e-4
#: sqrt(K_SQUARED_M2) = 0.0192354 m, the radius of gyration loaded impacts carry.
RADIUS_OF_GYRATION_M = math.sqrt(K_SQUARED_M2)
#: The radius of gyration stated in the upstream README, m.
NOMINAL_RADIUS_OF_GYRATION_M = 0.0192
#: Ellipse semi-axes (a, b), m.
SEMI_AXES_M = (0.035, 0.025)
#: Tracker rate, Hz, and period, s.
SAMPLE_RATE_HZ = 250.0
SAMPLE_PERIOD_S = 1.0 / 250.0
#: The files :func:`load_impacts` reads.
REQUIRED_FILES = (
    "data_ellipse.mat",
    "p_true_data.mat",
    "p_models.mat",
    "v_models.mat",
    "original_rows.txt",
)


def _loadmat(path: Path) -> dict[str, Any]:
    import scipy.io

    if not path.is_file():
        raise DataError(f"{path}: no such file")
    try:
        return scipy.io.loadmat(path)
    except Exception as exc:  # scipy raises ValueError, TypeError, OSError... on bad files
        raise DataError(
            f"{path}: not a readable MATLAB file, truncated or corrupt "
            f"({type(exc).__name__}: {str(exc)[:200]})"
        ) from None


def _matrix(path: Path, value: Any, name: str, width: int) -> np.ndarray:
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "fiu":
        raise DataError(f"{path}: {name} is not a numeric matrix")
    if value.ndim != 2 or value.shape[1] != width:
        raise DataError(f"{path}: {name} has shape {value.shape}, expected (N, {width})")
    array = value.astype(np.float64)
    bad = ~np.isfinite(array)
    if bad.any():
        row, column = (int(i) for i in np.argwhere(bad)[0])
        raise DataError(f"{path}: {name} has {array[row, column]} at row {row}, column {column}")
    return array


def _variable(path: Path, contents: dict[str, Any], name: str, width: int) -> np.ndarray:
    if name not in contents:
        raise DataError(f"{path}: no variable {name!r}")
    return _matrix(path, contents[name], name, width)


def _struct_fields(path: Path) -> dict[str, np.ndarray]:
    contents = _loadmat(path)
    struct = contents.get("data")
    if (
        not isinstance(struct, np.ndarray)
        or struct.dtype.names is None
        or struct.size != 1
    ):
        raise DataError(f"{path}: no struct variable 'data'")
    widths = {"states_i": 6, "states_f": 6, "n": 3, "d": 3}
    fields = {}
    for name, width in widths.items():
        if name not in struct.dtype.names:
            raise DataError(f"{path}: struct 'data' has no field {name!r}")
        fields[name] = _matrix(path, struct[name].flat[0], f"data.{name}", width)
    return fields


def _read_rows(path: Path) -> np.ndarray:
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    try:
        lines = path.read_text().split()
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot be read ({exc})") from None
    rows = []
    for number, token in enumerate(lines, start=1):
        if not token.lstrip("-").isdigit():
            raise DataError(f"{path}: entry {number} is {token[:20]!r}, expected an integer")
        rows.append(int(token))
    if not rows:
        raise DataError(f"{path}: no row numbers")
    result = np.asarray(rows, dtype=np.int64)
    if len(np.unique(result)) != len(result):
        raise DataError(f"{path}: row numbers repeat")
    return result


def load_impacts(path: str | os.PathLike[str], convention: str = "corrected") -> PlanarImpacts:
    """Read the planar ellipse impact set.

    Parameters
    ----------
    path : path-like
        The directory holding :data:`REQUIRED_FILES`.
    convention : {"corrected", "upstream"}
        ``"corrected"``: right-handed (x right, y up, theta counter-clockwise), the x sign
        fixed as described in this module's docstring.  ``"upstream"``: as published.

    Returns
    -------
    PlanarImpacts
        N = 1300 impacts for the published set; states in m, rad, m/s, rad/s in the
        vertical x-y plane; impulses in N s as (tangential, normal); ``rows`` from
        ``original_rows.txt``; ``mass_kg`` 0.0364 and ``radius_of_gyration_m``
        sqrt(3.7e-4) (the value behind the published impulses and model predictions).

    Raises
    ------
    ParameterError
        Unknown ``convention``.
    DataError
        Missing or unreadable file, missing variable, wrong shape, NaN/inf, Jacobian rows not
        of the form (0, 1, r_x) / (1, 0, -r_y), or row counts that disagree between files;
        the message names the file.
    """
    if convention not in CONVENTIONS:
        raise ParameterError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
    directory = Path(path)
    if not directory.is_dir():
        raise DataError(f"{directory}: no such directory")
    data_path = directory / "data_ellipse.mat"
    fields = _struct_fields(data_path)
    p_path, pm_path, vm_path = (directory / f for f in REQUIRED_FILES[1:4])
    best = _variable(p_path, _loadmat(p_path), "p_data", 2)
    p_models = _variable(pm_path, _loadmat(pm_path), "p_models", 2 * len(MODEL_NAMES))
    v_models = _variable(vm_path, _loadmat(vm_path), "v_models", 3 * len(MODEL_NAMES))
    rows_path = directory / "original_rows.txt"
    rows = _read_rows(rows_path)

    n_rows = fields["states_i"].shape[0]
    counts = [(data_path, f"data.{k}", v.shape[0]) for k, v in fields.items()]
    counts += [(p_path, "p_data", best.shape[0]), (pm_path, "p_models", p_models.shape[0])]
    counts += [(vm_path, "v_models", v_models.shape[0]), (rows_path, "row numbers", len(rows))]
    for file_path, name, count in counts:
        if count != n_rows:
            raise DataError(
                f"{file_path}: {name} has {count} rows but {data_path.name} data.states_i "
                f"has {n_rows}"
            )
    normal, tangent = fields["n"], fields["d"]
    if not (np.all(normal[:, :2] == (0.0, 1.0)) and np.all(tangent[:, :2] == (1.0, 0.0))):
        raise DataError(
            f"{data_path}: Jacobian rows are not of the form n = (0, 1, r_x), d = (1, 0, -r_y)"
        )

    pre, post = fields["states_i"].copy(), fields["states_f"].copy()
    model_impulses = {m: p_models[:, 2 * j : 2 * j + 2].copy() for j, m in enumerate(MODEL_NAMES)}
    model_velocity = {m: v_models[:, 3 * j : 3 * j + 3].copy() for j, m in enumerate(MODEL_NAMES)}
    if convention == "corrected":
        for state in (pre, post):
            state[:, [0, 3]] *= -1.0
        for name in MODEL_NAMES:
            model_impulses[name][:, 0] *= -1.0
            model_velocity[name][:, 0] *= -1.0
    return PlanarImpacts(
        pre_state=pre,
        post_state=post,
        rows=rows,
        normal_jacobian=normal,
        tangent_jacobian=tangent,
        best_impulse=best,
        model_impulses=model_impulses,
        model_post_velocity=model_velocity,
        mass_kg=MASS_KG,
        radius_of_gyration_m=RADIUS_OF_GYRATION_M,
        convention=convention,
        source=str(directory),
    )


def rigid_body_residual(impacts: PlanarImpacts) -> np.ndarray:
    """Per-impact error of the rigid-body identity ``k^2 dw = r_x dv_y - r_y dv_x``.

    Parameters
    ----------
    impacts : PlanarImpacts
        Uses the measured pre/post velocities, the Jacobian rows (r_x = n[2],
        r_y = -d[2]) and ``radius_of_gyration_m``.

    Returns
    -------
    ndarray of shape (N,)
        ``k^2 dw - (r_x dv_y - r_y dv_x)`` in m^2/s; near 0 in a consistent frame.
    """
    delta = impacts.post_state[:, 3:6] - impacts.pre_state[:, 3:6]
    r_x = impacts.normal_jacobian[:, 2]
    r_y = -impacts.tangent_jacobian[:, 2]
    k2 = impacts.radius_of_gyration_m**2
    return k2 * delta[:, 2] - (r_x * delta[:, 1] - r_y * delta[:, 0])
