"""Single planar impacts judged as distributions: samples, energy score and log score.

Every impulse model of :mod:`residualsim.residual.impact` predicts the post-impact velocity
as the calibrated engine's v_e plus a residual impulse p (N s, contact frame: normal,
tangent) mapped to velocity linearly, v = v_e + M⁻¹Jᵀp, then guarded (α ≤ 1, see
:func:`~residualsim.residual.impact.guarded_correction`). Its predictive distribution is an
:class:`ImpulseMixture`, a Gaussian mixture over p:

* the GP baseline (:class:`~residualsim.residual.impact.GPImpactResidual`): one component,
  the GP's predictive mean and per-output variance (white noise included);
* the residual MDN: its mixture, the component scales times a spread factor (training
  scores only the mean, so the scales are not trained: :func:`fit_impact_spread` chooses a
  factor on the training impacts by the energy score);
* the MDN's mean plus a Gaussian impulse noise whose covariance is that of the training
  impacts' errors p* − p_e − mean (:func:`residual_covariance`; no tuning).

Scores are on u = (dx, dy, k dθ) in m/s (k the radius of gyration, m, so all three are m/s;
corrected axis convention). **Energy score**: S seeded samples of p, each guarded like the
product's predictions; impact i draws from ``default_rng([seed, crc32(row id)])``, so its
samples do not depend on which other impacts are scored. The deterministic engine is S = 1
(its score is its error's norm). **Log score** (−log density of the recorded u, units
log((m/s)⁻³)): the mixture mapped through the linear map B = diag(1, 1, k) M⁻¹Jᵀ (3 × 2) is a
Gaussian mixture in u with covariances B C Bᵀ of rank 2: every impulse model's prediction
lies on the plane u_e + range(B), and the recorded velocity is off it (the part of
u_rec − u_e along the plane's unit normal n: 0.106 m/s RMS on the training impacts, the
engine's own velocity change being off the plane by 0.073 m/s RMS). That direction is given
an observation noise σ⊥² n nᵀ with σ⊥ the RMS of n·(u_rec − u_e) over the *training*
impacts (:func:`off_plane_std`), the same for every model on the same engine; the log score
is then the exact density of the unguarded mixture (the guard binds for under 1 % of the
samples at the spreads used, reported as ``*_guarded_fraction``). Undefined (None) for the
deterministic engine.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from residualsim.errors import ParameterError
from residualsim.evaluation.log_scores import gaussian_mixture_log_score
from residualsim.evaluation.sample_scores import energy_score
from residualsim.residual.impact import (GP_BASELINES, GPImpactResidual, ImpactContacts,
                                         best_impulses, guarded_correction, impact_contacts,
                                         impact_rmse, split_index)

__all__ = ["ImpulseMixture", "SPREAD_GRID", "gp_mixture", "policy_mixture",
           "residual_covariance", "velocity_map", "off_plane_normals", "off_plane_std",
           "velocity_mixture", "sample_post_velocity", "fit_impact_spread",
           "impact_distribution_table"]

#: Spread factors :func:`fit_impact_spread` tries on the MDN's component scales.
SPREAD_GRID = (1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0)


@dataclasses.dataclass(frozen=True)
class ImpulseMixture:
    """A Gaussian mixture over the residual impulse of N impacts: ``weights`` (N, K),
    ``means`` (N, K, 2) N s and ``covariances`` (N, K, 2, 2) N² s², contact frame
    (normal, tangent)."""

    weights: np.ndarray
    means: np.ndarray
    covariances: np.ndarray

    def mean(self) -> np.ndarray:
        """Σ_k w_k μ_k (N, 2), N s."""
        return np.einsum("nk,nkd->nd", self.weights, self.means)

    def sample(self, rows: Sequence[Any], samples: int, seed: int = 0) -> np.ndarray:
        """(S, N, 2) draws, impact i from ``default_rng([seed, crc32(str(rows[i]))])``: S
        uniforms (the component), then (S, 2) standard normals."""
        if int(samples) < 1:
            raise ParameterError(f"samples must be >= 1, got {samples}")
        factors = np.linalg.cholesky(self.covariances)
        cumulative = np.cumsum(self.weights, axis=1)
        out = np.empty((int(samples), len(self.weights), 2))
        for i, row in enumerate(rows):
            rng = np.random.default_rng([int(seed), zlib.crc32(str(row).encode())])
            u, z = rng.random(int(samples)), rng.standard_normal((int(samples), 2))
            comp = np.minimum(np.searchsorted(cumulative[i], u * cumulative[i, -1]),
                              self.weights.shape[1] - 1)
            out[:, i] = self.means[i, comp] + np.einsum("sij,sj->si", factors[i, comp], z)
        return out


def gp_mixture(gp: GPImpactResidual, contacts: ImpactContacts) -> ImpulseMixture:
    """The GP's predictive distribution of the residual impulse: one component, mean and
    diagonal variance per output (N s)."""
    mean, std = gp.predict_impulse(contacts)
    covariance = np.zeros((len(mean), 1, 2, 2))
    covariance[:, 0, [0, 1], [0, 1]] = std ** 2
    return ImpulseMixture(np.ones((len(mean), 1)), mean[:, None], covariance)


def policy_mixture(policy, contacts: ImpactContacts, spread: float | None = None
                   ) -> ImpulseMixture:
    """A :class:`~residualsim.residual.policy.NumpyPolicy`'s mixture for every impact, its
    component standard deviations times ``spread`` (default: the policy's own)."""
    spread = policy.spread if spread is None else float(spread)
    if not (np.isfinite(spread) and spread > 0):
        raise ParameterError(f"spread must be a finite number > 0, got {spread}")
    weights, means, stds = policy.components(contacts.features)
    covariance = np.zeros(stds.shape + (2,))
    covariance[..., [0, 1], [0, 1]] = (spread * stds) ** 2
    return ImpulseMixture(weights, means, covariance)


def residual_covariance(mean_impulse: np.ndarray, contacts: ImpactContacts,
                        engine_post: np.ndarray, recorded_post: np.ndarray, friction: float
                        ) -> np.ndarray:
    """Covariance (2, 2), N² s², of p* − p_e − mean over the given impacts (the training
    ones): the spread of the best-impulse residual about a model's mean."""
    target = best_impulses(contacts, recorded_post, friction) - \
        contacts.impulses_of(engine_post - contacts.pre_velocity)
    return np.cov((target - mean_impulse).T)


def velocity_map(contacts: ImpactContacts) -> np.ndarray:
    """B = diag(1, 1, k) M⁻¹Jᵀ (N, 3, 2): the change of (dx, dy, k dθ), m/s, per N s of
    contact-frame impulse."""
    scale = np.array([1.0, 1.0, contacts.radius_of_gyration_m])
    unit = np.eye(2)
    columns = [contacts.velocity_changes(np.tile(e, (len(contacts.features), 1))) for e in unit]
    return scale[None, :, None] * np.stack(columns, axis=-1)


def off_plane_normals(contacts: ImpactContacts) -> np.ndarray:
    """Unit normals (N, 3) of each impact's plane range(B) in (dx, dy, k dθ)."""
    mapped = velocity_map(contacts)
    normal = np.cross(mapped[:, :, 0], mapped[:, :, 1])
    return normal / np.linalg.norm(normal, axis=1, keepdims=True)


def off_plane_std(contacts: ImpactContacts, engine_post: np.ndarray,
                  recorded_post: np.ndarray) -> float:
    """σ⊥, m/s: RMS over the given impacts (the training ones) of n·(u_rec − u_e), the part
    of the recorded post-impact velocity no residual impulse can reach."""
    scale = np.array([1.0, 1.0, contacts.radius_of_gyration_m])
    off = np.einsum("nv,nv->n", off_plane_normals(contacts),
                    (recorded_post - engine_post) * scale)
    return float(np.sqrt(np.mean(off ** 2)))


def velocity_mixture(mixture: ImpulseMixture, contacts: ImpactContacts,
                     engine_post: np.ndarray, off_plane_std_mps: float
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The unguarded predictive mixture of u = (dx, dy, k dθ), m/s: (weights (N, K), means
    (N, K, 3), covariances (N, K, 3, 3)) = (w, u_e + B μ, B C Bᵀ + σ⊥² n nᵀ)."""
    if not (np.isfinite(off_plane_std_mps) and off_plane_std_mps > 0):
        raise ParameterError(f"off_plane_std_mps must be > 0, got {off_plane_std_mps}")
    scale = np.array([1.0, 1.0, contacts.radius_of_gyration_m])
    mapped = velocity_map(contacts)
    means = (engine_post * scale)[:, None] + np.einsum("nvd,nkd->nkv", mapped, mixture.means)
    normal = off_plane_normals(contacts)
    covariances = np.einsum("nvd,nkde,nwe->nkvw", mapped, mixture.covariances, mapped) + \
        off_plane_std_mps ** 2 * np.einsum("nv,nw->nvw", normal, normal)[:, None]
    return mixture.weights, means, covariances


def sample_post_velocity(mixture: ImpulseMixture, contacts: ImpactContacts,
                         engine_post: np.ndarray, rows: Sequence[Any], samples: int,
                         seed: int = 0) -> tuple[np.ndarray, float]:
    """S guarded post-impact velocities (S, N, 3), (dx m/s, dy m/s, dθ rad/s), and the
    fraction of samples the guard shortened (α < 1)."""
    impulses = mixture.sample(rows, samples, seed)
    post, guarded = [], []
    for draw in impulses:
        velocity, alpha = guarded_correction(contacts, engine_post, draw)
        post.append(velocity)
        guarded.append(alpha < 1.0 - 1e-9)
    return np.stack(post), float(np.mean(guarded))


def _energy(post: np.ndarray, recorded: np.ndarray, k: float) -> float:
    scale = np.array([1.0, 1.0, k])
    return float(energy_score(np.swapaxes(post, 0, 1) * scale, recorded * scale).mean())


def fit_impact_spread(policy, contacts: ImpactContacts, engine_post: np.ndarray,
                      recorded_post: np.ndarray, rows: Sequence[Any], samples: int = 64,
                      grid: Sequence[float] = SPREAD_GRID, seed: int = 0
                      ) -> tuple[float, list[dict[str, float]]]:
    """The factor on the MDN's component scales with the lowest mean energy score (m/s) of
    (dx, dy, k dθ) over the given impacts (the training ones; seeded, no checkpoint: a
    fit takes about a second). Returns (spread, one row per factor)."""
    if not grid or any(not (np.isfinite(g) and g > 0) for g in grid):
        raise ParameterError(f"spreads must be finite and > 0, got {list(grid)}")
    table = []
    for spread in grid:
        post, _ = sample_post_velocity(policy_mixture(policy, contacts, spread), contacts,
                                       engine_post, rows, samples, seed)
        table.append({"spread": float(spread), "energy_score_mps":
                      _energy(post, recorded_post, contacts.radius_of_gyration_m)})
    best = min(table, key=lambda r: r["energy_score_mps"])
    return best["spread"], table


def impact_distribution_table(model, impacts, split: dict[str, list[str]], engine_post:
                              np.ndarray, gps: dict[str, GPImpactResidual], samples: int = 64,
                              seed: int = 0, parts: Sequence[str] = ("validation", "test")
                              ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """RMSE of the mean, energy score (S samples) and log score of (dx, dy, k dθ) on each
    of ``parts`` for the calibrated engine (S = 1), the GP baselines (``gps``, from
    :func:`~residualsim.residual.impact.fit_gp_baselines`) and the residual MDN (its own
    spread, a spread fitted on the training impacts, and its mean plus the training
    residual covariance). Everything fitted here uses the training impacts only.

    Returns (rows ``{"model", "<part>_rmse_mps", "<part>_energy_score_mps",
    "<part>_log_score", "<part>_guarded_fraction"}``, info: samples, seed, σ⊥, the spread
    fit's rows).
    """
    if int(samples) < 1:
        raise ParameterError(f"samples must be >= 1, got {samples}")
    index = split_index(impacts, split)
    unknown = [p for p in parts if p not in index]
    if unknown:
        raise ParameterError(f"unknown split part(s) {unknown}; the split has {list(index)}")
    k = impacts.radius_of_gyration_m
    recorded = impacts.post_state[:, 3:6]
    plain, spinning = impact_contacts(impacts), impact_contacts(impacts, spin=True)
    train = index["train"]
    sigma = off_plane_std(plain.subset(train), engine_post[train], recorded[train])
    policy = model.sampling_policy()
    mdn_contacts = spinning if model.policy.spin else plain
    spread, spread_rows = fit_impact_spread(
        policy, mdn_contacts.subset(train), engine_post[train], recorded[train],
        impacts.rows[train], samples, seed=seed)
    mdn_mean = policy.mean(mdn_contacts.features)
    covariance = residual_covariance(mdn_mean[train], plain.subset(train), engine_post[train],
                                     recorded[train], model.params.lateral_friction)
    mixtures: dict[str, tuple[ImpulseMixture, ImpactContacts]] = {
        name: (gp_mixture(gps[name], spinning if spin else plain), plain)
        for name, spin in GP_BASELINES.items()}
    mixtures[f"residual MDN (spread {policy.spread:g}, the model's)"] = (
        policy_mixture(policy, mdn_contacts), plain)
    mixtures[f"residual MDN (spread {spread:g}, fitted on train)"] = (
        policy_mixture(policy, mdn_contacts, spread), plain)
    mixtures["residual MDN mean + training residual covariance"] = (ImpulseMixture(
        np.ones((len(mdn_mean), 1)), mdn_mean[:, None],
        np.broadcast_to(covariance, (len(mdn_mean), 1, 2, 2)).copy()), plain)
    rows = [{"model": "calibrated engine", "samples": 1}]
    for part in parts:
        i = index[part]
        rows[0].update({f"{part}_rmse_mps": impact_rmse(engine_post[i], recorded[i], k),
                        f"{part}_energy_score_mps": _energy(engine_post[i][None],
                                                            recorded[i], k),
                        f"{part}_log_score": None, f"{part}_guarded_fraction": 0.0})
    scale = np.array([1.0, 1.0, k])
    for name, (mixture, contacts) in mixtures.items():
        row: dict[str, Any] = {"model": name, "samples": int(samples)}
        for part in parts:
            i = index[part]
            part_mixture = ImpulseMixture(mixture.weights[i], mixture.means[i],
                                          mixture.covariances[i])
            part_contacts = contacts.subset(i)
            mean_post = guarded_correction(part_contacts, engine_post[i], part_mixture.mean())[0]
            post, guarded = sample_post_velocity(part_mixture, part_contacts, engine_post[i],
                                                 impacts.rows[i], samples, seed)
            log_score = gaussian_mixture_log_score(
                recorded[i] * scale, *velocity_mixture(part_mixture, part_contacts,
                                                       engine_post[i], sigma))
            row.update({f"{part}_rmse_mps": impact_rmse(mean_post, recorded[i], k),
                        f"{part}_energy_score_mps": _energy(post, recorded[i], k),
                        f"{part}_log_score": float(log_score.mean()),
                        f"{part}_guarded_fraction": guarded})
        rows.append(row)
    info = {"samples": int(samples), "seed": int(seed), "off_plane_std_mps": sigma,
            "spread_fit": spread_rows, "fitted_spread": spread,
            "residual_covariance_ns2": covariance.tolist(), "parts": list(parts)}
    return rows, info
