"""Single planar impacts (the MCube ellipse; model (c)): μ and a Newton restitution e by MPEC.

Coordinates: the planar scenes' right-handed frame (x right, y up, θ counter-clockwise;
:mod:`residualsim.data.mcube`, ``convention="corrected"``), generalised velocity
v = (dx m/s, dy m/s, dθ rad/s), M = m diag(1, 1, k²). Each impact i has one contact with
Jacobian rows n_i (normal) and d_i (tangential) from the files. With pre- and post-contact
velocities u_i, w_i and impulses (N s) p_n, p_+ and p_- along n and ±d, the impact law is

    M (w_i - u_i) = n_iᵀ p_n + d_iᵀ (p_+ - p_-)
    0 <= p_n ⊥ n_i·w_i + e n_i·u_i >= 0          (Newton restitution)
    0 <= p_±  ⊥ σ_i ± d_i·w_i >= 0                 (maximum dissipation, 2-sided friction)
    0 <= σ_i  ⊥ μ p_n - p_+ - p_- >= 0

with μ and e shared by all impacts; gravity's impulse over the contact is left out, as in
the published analytic models. The MPEC estimates u, w, the impulses, μ and e jointly:

    min Σ_i ‖S (u_i - ū_i)‖² + ‖S (w_i - w̄_i)‖²,   S = diag(1, 1, k),

(ū, w̄ the recorded velocities; S makes the error read as (dx, dy, k dθ), the metric the
engine is scored on), 0 <= μ, e <= 1 or tighter bounds. Impulses are solved for divided by
m (in m/s) so every pair has velocity units. Initial guess: u = ū, w = w̄, p = σ = 0, μ
and e at their upper bounds.

Why Newton: PyBullet (the engine the estimate is for) applies restitution as a target
normal velocity -e × the approach velocity of the contact point, which is Newton's law at
the contact (PYBULLET_NOTES: on this scene the engine's post/pre normal velocity ratio
equals its restitution parameter at any substep count). Poisson's law, on the impulses,
gives a different e whenever friction changes the normal impulse, and would not transfer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from residualsim.errors import DataError
from residualsim.sysid.mpec.particles import check_bounds
from residualsim.sysid.mpec.relaxation import DEFAULT_TAUS, Program

__all__ = ["ImpactEstimate", "identify_impacts"]


@dataclass(frozen=True)
class ImpactEstimate:
    """μ, e, estimated pre/post velocities (N, 3), impulses (N, 3) = (p_n, p_t, σ) in N s,
    N s and m/s, the RMS of (dx, dy, k dθ) post-velocity residuals (m/s), the report."""

    mu: float
    restitution: float
    pre_velocity: np.ndarray
    post_velocity: np.ndarray
    impulses: np.ndarray
    post_rms_mps: float
    report: dict[str, Any]


def identify_impacts(impacts: Any, *, mu_bounds: Sequence[float] = (0.0, 1.0),
                     restitution_bounds: Sequence[float] = (0.0, 1.0),
                     taus: Sequence[float] = DEFAULT_TAUS) -> ImpactEstimate:
    """μ and e of a :class:`~residualsim.data.PlanarImpacts` set by MPEC (see the module).

    Raises DataError for the upstream convention, an empty or non-finite set, or a set in
    which no impact approaches the floor; ParameterError for bounds outside [0, 1];
    SolverError when IPOPT fails.
    """
    if getattr(impacts, "convention", None) != "corrected":
        raise DataError(f"{getattr(impacts, 'source', 'impacts')}: identify impacts in the "
                        f"'corrected' convention (load_impacts(path, convention='corrected'))")
    mu_low, mu_high = check_bounds("lateral_friction", mu_bounds)
    e_low, e_high = check_bounds("restitution", restitution_bounds)
    pre = np.asarray(impacts.pre_state, dtype=np.float64)[:, 3:]
    post = np.asarray(impacts.post_state, dtype=np.float64)[:, 3:]
    normal = np.asarray(impacts.normal_jacobian, dtype=np.float64)
    tangent = np.asarray(impacts.tangent_jacobian, dtype=np.float64)
    where = impacts.source or "planar impacts"
    if len(pre) == 0:
        raise DataError(f"{where}: no impacts to identify from")
    for name, array in (("velocities", np.hstack([pre, post])),
                        ("Jacobian rows", np.hstack([normal, tangent]))):
        if not np.isfinite(array).all():
            raise DataError(f"{where}: {name} hold NaN or infinite values")
    approach = np.einsum("ij,ij->i", normal, pre)
    if not (approach < 0).any():
        raise DataError(f"{where}: no impact approaches the floor (n·v >= 0 in every row): "
                        f"there is no contact to identify from")
    k = float(impacts.radius_of_gyration_m)
    inv_mass = np.array([1.0, 1.0, 1.0 / k ** 2])  # M⁻¹ m, per coordinate
    scale = np.array([1.0, 1.0, k])
    count = len(pre)
    prog = Program()
    u = prog.var("pre", (count, 3), init=pre)
    w = prog.var("post", (count, 3), init=post)
    p_n = prog.var("p_n", count, 0.0, np.inf)  # impulses / m, m/s
    p_t = prog.var("p_t", (count, 2), 0.0, np.inf)
    sigma = prog.var("sigma", count, 0.0, np.inf)
    mu = prog.var("mu", 1, mu_low, mu_high, init=mu_high)  # (1,): broadcasts
    e = prog.var("restitution", 1, e_low, e_high, init=e_high)
    impulse = normal * p_n[:, None] + tangent * (p_t[:, 0] - p_t[:, 1])[:, None]
    prog.constrain(w - u - inv_mass * impulse)
    normal_w = np.sum(normal * w, axis=1)
    tangent_w = np.sum(tangent * w, axis=1)
    prog.complement(p_n, normal_w + e * np.sum(normal * u, axis=1))
    prog.complement(p_t[:, 0], sigma + tangent_w)
    prog.complement(p_t[:, 1], sigma - tangent_w)
    prog.complement(sigma, mu * p_n - p_t[:, 0] - p_t[:, 1])
    prog.minimize(np.sum(((u - pre) * scale) ** 2) + np.sum(((w - post) * scale) ** 2))
    result = prog.solve(taus)
    values = result.values
    mass = float(impacts.mass_kg)
    impulses = np.column_stack([mass * values["p_n"], mass * (values["p_t"][:, 0]
                                - values["p_t"][:, 1]), values["sigma"]])
    if impulses[:, 0].max() <= 1e-12:
        raise DataError(f"{where}: the estimate has no normal impulse: no contact to "
                        f"identify friction and restitution from")
    residual = (values["post"] - post) * scale
    return ImpactEstimate(mu=float(values["mu"][0]), restitution=float(values["restitution"][0]),
                          pre_velocity=values["pre"], post_velocity=values["post"],
                          impulses=impulses,
                          post_rms_mps=float(np.sqrt(np.mean(np.sum(residual ** 2, axis=1)))),
                          report=result.report())
