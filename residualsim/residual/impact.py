"""Residual contact models for single planar impacts (the MCube ellipse set), and baselines.

Each impact is a one-contact trajectory. The calibrated engine resolves it
(:func:`~residualsim.sim.rollout.simulate_impacts`: post-contact velocity v_e), and the residual
is added after the engine resolved the contact, as Algorithm 1's velocity-space correction:

    v = v_e + α M⁻¹ Jᵀ p_res,    p_res ~ π(p | x),

with x = (M_c, v_c) the impact's 5 contact features (pre-contact, from its Jacobian rows n
and d), optionally followed by the spin feature k ω (n × t)·z (m/s,
:func:`~residualsim.sim.contact.spin_features`: the shipped model uses it, see its card), p = (p_n, p_t) N s in the contact frame (normal, then the tangent along the
pre-contact slip), and α ∈ [0, 1] the largest step that keeps the kinetic energy at most the
pre-contact one and the contact point's normal velocity at least min(0, engine's) — the
contact guard of :mod:`residualsim.sim.rollout`, in closed form for one event. Because the
correction follows the engine's event, v_e is simulated once and training (nevergrad over
the policy's flat parameters, loss = RMSE of (dx, dy, k dθ) of the mean prediction) needs
no further simulation.

Baselines on the same features:

* the *best single impulse* p* per impact: argmin over the friction cone {p_n ≥ 0,
  |p_t| ≤ μ p_n} of the M-weighted error of v_pre + M⁻¹Jᵀp (what any impulse model could
  reach at best);
* a *Gaussian-process residual* (the authors' earlier method): regress p* − p_e (p_e the
  engine's impulse, M_c J (v_e − v_pre)) on x with scikit-learn and add it to v_e.

All velocities are (dx m/s, dy m/s, dθ rad/s) in the corrected convention of
:mod:`residualsim.data.mcube` (x right, y up, θ counter-clockwise).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import numpy as np

from residualsim.sim.contact import contact_model, spin_features
from residualsim.data.impacts import PlanarImpacts
from residualsim.errors import ParameterError

__all__ = ["ImpactContacts", "impact_contacts", "best_impulses", "guarded_correction",
           "impact_rmse", "GPImpactResidual", "policy_post_velocity", "train_impact_residual",
           "fit_impact_residual_supervised",
           "predict_impacts", "impact_table", "handedness_consistent_models", "split_index",
           "GP_BASELINES", "fit_gp_baselines"]


@dataclasses.dataclass(frozen=True)
class ImpactContacts:
    """Contact quantities of N impacts: ``features`` (N, 5), or (N, 6) with ``spin``,
    ``jacobians`` (N, 2, 3) rows (normal, tangent) in (x, y, θ) coordinates,
    ``mass_matrix`` (3, 3), ``pre_velocity`` (N, 3) and ``radius_of_gyration_m`` k."""

    features: np.ndarray
    jacobians: np.ndarray
    mass_matrix: np.ndarray
    pre_velocity: np.ndarray
    radius_of_gyration_m: float
    spin: bool = False

    def velocity_changes(self, impulses: np.ndarray) -> np.ndarray:
        """M⁻¹ Jᵀ p (N, 3) for contact-frame impulses p (N, 2) N s."""
        generalised = np.einsum("nkv,nk->nv", self.jacobians, impulses)
        return np.linalg.solve(self.mass_matrix, generalised.T).T

    def subset(self, index: np.ndarray) -> ImpactContacts:
        """The contacts of the impacts at ``index`` (positions or a boolean mask)."""
        return _subset(self, index)

    def impulses_of(self, velocity_change: np.ndarray) -> np.ndarray:
        """The contact-frame impulse (N, 2) whose M⁻¹Jᵀp best explains a velocity change
        (N, 3), in the M metric: M_c J Δv."""
        inverse_mass = np.linalg.inv(self.mass_matrix)
        inertia = np.linalg.inv(np.einsum("nkv,vw,njw->nkj", self.jacobians, inverse_mass,
                                          self.jacobians))
        return np.einsum("nkj,njv,nv->nk", inertia, self.jacobians, velocity_change)


def impact_contacts(impacts: PlanarImpacts, spin: bool = False) -> ImpactContacts:
    """Features and Jacobians of every impact from its pre-state and its Jacobian rows
    (contact point (r_x, r_y) from the centre: n = (0, 1, r_x), d = (1, 0, −r_y)); with
    ``spin``, each feature row ends with the spin feature."""
    mass = impacts.mass_matrix
    k = impacts.radius_of_gyration_m
    features, jacobians = [], []
    for pre, n_row, d_row in zip(impacts.pre_state, impacts.normal_jacobian,
                                 impacts.tangent_jacobian):
        point_jacobian = np.stack([d_row, n_row, np.zeros(3)])  # world x, y, z rows
        model = contact_model(mass, point_jacobian, pre[3:6], np.zeros(3),
                              np.array([0.0, 1.0, 0.0]), planar=True)
        row = model.features
        if spin:
            row = np.concatenate([row, spin_features(model.frame, pre[5], k)])
        features.append(row)
        jacobians.append(model.jacobian)
    return ImpactContacts(np.array(features), np.array(jacobians), mass,
                          impacts.pre_state[:, 3:6].copy(), k, spin=spin)


def best_impulses(contacts: ImpactContacts, post_velocity: np.ndarray, friction: float
                  ) -> np.ndarray:
    """p* (N, 2): the impulse in the friction cone whose velocity change best explains
    ``post_velocity`` (M-weighted least squares; exact: the interior optimum or the best
    point on one of the cone's two edges)."""
    if friction < 0:
        raise ParameterError(f"friction must be >= 0, got {friction}")
    inverse_mass = np.linalg.inv(contacts.mass_matrix)
    out = np.zeros((len(post_velocity), 2))
    for i, (jac, pre, post) in enumerate(zip(contacts.jacobians, contacts.pre_velocity,
                                             post_velocity)):
        hessian = jac @ inverse_mass @ jac.T  # objective pᵀHp − 2pᵀg
        gradient = jac @ (post - pre)
        candidates = [np.zeros(2)]
        free = np.linalg.solve(hessian, gradient)
        if free[0] >= 0 and abs(free[1]) <= friction * free[0]:
            candidates.append(free)
        for edge in (np.array([1.0, friction]), np.array([1.0, -friction])):
            candidates.append(max(0.0, edge @ gradient / (edge @ hessian @ edge)) * edge)
        out[i] = min(candidates, key=lambda p: p @ hessian @ p - 2 * p @ gradient)
    return out


def guarded_correction(contacts: ImpactContacts, engine_post: np.ndarray,
                       impulses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """v_e + α M⁻¹Jᵀp with the largest α in [0, 1] that keeps the kinetic energy at most
    the pre-contact one and the normal velocity of the contact point at least
    min(0, engine's). Returns (post velocities (N, 3), α (N,)); vectorised over impacts."""
    from residualsim.sim.contact import largest_steps

    delta = contacts.velocity_changes(impulses)
    mass = contacts.mass_matrix
    normal_rows = contacts.jacobians[:, 0]
    normal_now = np.einsum("nv,nv->n", normal_rows, engine_post)
    normal_change = np.einsum("nv,nv->n", normal_rows, delta)
    floor = np.minimum(0.0, normal_now)
    pushed = normal_now + normal_change < floor
    with np.errstate(divide="ignore", invalid="ignore"):
        cap = np.where(pushed, np.maximum(0.0, (floor - normal_now) / normal_change), 1.0)
    kinetic_pre = 0.5 * np.einsum("nv,vw,nw->n", contacts.pre_velocity, mass,
                                  contacts.pre_velocity)
    kinetic_now = 0.5 * np.einsum("nv,vw,nw->n", engine_post, mass, engine_post)
    alphas = largest_steps(0.5 * np.einsum("nv,vw,nw->n", delta, mass, delta),
                           np.einsum("nv,vw,nw->n", engine_post, mass, delta),
                           kinetic_now - kinetic_pre, cap)
    return engine_post + alphas[:, None] * delta, alphas


def impact_rmse(predicted: np.ndarray, recorded: np.ndarray, radius_of_gyration_m: float
                ) -> float:
    """RMSE (m/s) of (dx, dy, k dθ) over impacts (and samples: predicted (..., N, 3))."""
    scale = np.array([1.0, 1.0, radius_of_gyration_m])
    error = (np.asarray(predicted) - recorded) * scale
    return float(np.sqrt(np.mean(np.sum(error ** 2, axis=-1))))


class GPImpactResidual:
    """Gaussian-process residual on per-impact optimal impulses (scikit-learn).

    ``fit`` regresses p* − p_e (N, 2) on the standardised features with an anisotropic RBF
    plus white-noise kernel (hyperparameters by marginal likelihood, seeded restarts);
    ``predict`` returns v_e + M⁻¹Jᵀ r̂ (N, 3), guarded like the residual model.
    """

    def __init__(self, friction: float, seed: int = 0) -> None:
        self.friction, self.seed = float(friction), int(seed)
        self._model: Any = None

    def fit(self, contacts: ImpactContacts, engine_post: np.ndarray,
            recorded_post: np.ndarray) -> GPImpactResidual:
        import warnings

        from sklearn.exceptions import ConvergenceWarning
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

        target = best_impulses(contacts, recorded_post, self.friction) - \
            contacts.impulses_of(engine_post - contacts.pre_velocity)
        self._centre = contacts.features.mean(axis=0)
        self._scale = np.maximum(contacts.features.std(axis=0), 1e-9)
        kernel = ConstantKernel(1.0) * RBF(np.ones(contacts.features.shape[1])) + \
            WhiteKernel(0.1)
        self._model = GaussianProcessRegressor(kernel, normalize_y=True, n_restarts_optimizer=2,
                                               random_state=self.seed)
        with warnings.catch_warnings():  # an irrelevant feature's length scale hits its bound
            warnings.simplefilter("ignore", ConvergenceWarning)
            self._model.fit((contacts.features - self._centre) / self._scale, target)
        return self

    def predict(self, contacts: ImpactContacts, engine_post: np.ndarray) -> np.ndarray:
        if self._model is None:
            raise ParameterError("fit the GP residual before predicting")
        residual = self._model.predict((contacts.features - self._centre) / self._scale)
        return guarded_correction(contacts, engine_post, residual)[0]

    def predict_impulse(self, contacts: ImpactContacts) -> tuple[np.ndarray, np.ndarray]:
        """The GP's predictive mean and standard deviation of the residual impulse, each
        (N, 2) N s in the contact frame (normal, tangent): independent normals per output,
        the standard deviation including the fitted white noise (a new impact's residual,
        not only the latent mean)."""
        if self._model is None:
            raise ParameterError("fit the GP residual before predicting")
        mean, std = self._model.predict((contacts.features - self._centre) / self._scale,
                                        return_std=True)
        return np.asarray(mean).reshape(-1, 2), np.asarray(std).reshape(-1, 2)


def _subset(contacts: ImpactContacts, index: np.ndarray) -> ImpactContacts:
    return dataclasses.replace(contacts, features=contacts.features[index],
                               jacobians=contacts.jacobians[index],
                               pre_velocity=contacts.pre_velocity[index])


def policy_post_velocity(policy, contacts: ImpactContacts, engine_post: np.ndarray,
                         samples: int = 0, seed: int = 0) -> np.ndarray:
    """Post-contact velocities (S, N, 3) with a NumpyPolicy's residual: S = 1 with the mean
    (``samples=0``), else S draws (impact i, sample s: ``default_rng([seed, i, s])``)."""
    rows = []
    for s in range(max(1, samples)):
        if samples == 0:
            impulses = policy.mean(contacts.features)
        else:
            impulses = np.array([policy.sample(x, np.random.default_rng([seed, i, s]))
                                 for i, x in enumerate(contacts.features)])
        rows.append(guarded_correction(contacts, engine_post, impulses)[0])
    return np.stack(rows)


def train_impact_residual(contacts: ImpactContacts, engine_post: np.ndarray,
                          recorded_post: np.ndarray, train: np.ndarray,
                          validation: np.ndarray, friction: float, *, budget: int = 3000,
                          sigma: float = 0.1, hidden: tuple[int, ...] = (6,),
                          n_components: int = 2, batch_size: int = 8, seed: int = 0,
                          validate_every: int = 200, patience: int = 20,
                          checkpoint=None, resume: bool = False, progress: bool = False,
                          start: Any = None) -> tuple[Any, dict[str, Any]]:
    """Algorithm 2 on impacts: nevergrad (CMA) over the policy's flat parameters, loss = RMSE
    of (dx, dy, k dθ) of the mean prediction on the ``train`` impacts (indices), the
    candidate kept by validation RMSE checked every ``validate_every`` evaluations, stopping
    after ``patience`` checks without improvement. Feature scaling and the impulse unit come
    from the training impacts' best-impulse residuals p* − p_e. ``start``: a policy to start
    from (its scaling, size and weights) instead of 'no correction'; it competes with CMA's
    candidates on validation (``chosen_evaluation`` -1: kept). Returns (ResidualPolicy,
    figures)."""
    import time

    from residualsim.sysid.optimize import minimize
    from residualsim.residual.policy import ResidualPolicy

    started = time.perf_counter()
    k = contacts.radius_of_gyration_m
    fit, check = _subset(contacts, train), _subset(contacts, validation)
    targets = best_impulses(fit, recorded_post[train], friction) - \
        fit.impulses_of(engine_post[train] - fit.pre_velocity)
    if start is not None:  # e.g. fit_impact_residual_supervised's policy: CMA refines it
        policy = start
        hidden, n_components = policy.hidden, policy.n_components
    else:
        policy = ResidualPolicy.for_scene(True, spin=contacts.spin, n_components=n_components,
                                          hidden=hidden, seed=seed
                                          ).fit_scaling(fit.features, targets)

    def rmse(theta: np.ndarray, part: ImpactContacts, index: np.ndarray) -> float:
        policy.set_flat(theta)
        post = policy_post_velocity(policy.numpy(), part, engine_post[index])
        return impact_rmse(post, recorded_post[index], k)

    def loss(candidates: np.ndarray) -> np.ndarray:
        return np.array([rmse(theta, fit, train) for theta in candidates])

    def after_batch(result) -> bool:
        state = result.state
        if result.evaluations < state.get("next_check", validate_every):
            return False
        state["next_check"] = result.evaluations + validate_every
        best = result.best_index
        value = rmse(result.candidates[best], check, validation)
        chosen = state.get("chosen", kept_start)
        if chosen is None or value < chosen["validation_rmse_mps"] - 1e-9:
            state["chosen"], state["stale"] = {"index": best, "validation_rmse_mps": value}, 0
        else:
            state["stale"] = state.get("stale", 0) + 1
        return state["stale"] >= patience

    init = policy.get_flat()
    # A given start competes too (index -1): CMA's first candidates are perturbations of it.
    kept_start = None if start is None else {"index": -1, "validation_rmse_mps":
                                             rmse(init, check, validation)}
    fingerprint = {"train": np.asarray(train).tolist(), "validation":
                   np.asarray(validation).tolist(), "friction": friction, "hidden": list(hidden),
                   "n_components": n_components, "sigma": sigma, "seed": seed,
                   "spin": contacts.spin, "start": None if start is None else
                   hashlib.sha256(np.asarray(init, dtype=np.float64).tobytes()).hexdigest()}
    result = minimize(loss, init, budget=budget, sigma=sigma, batch_size=batch_size,
                      seed=seed, checkpoint=checkpoint, resume=resume,
                      fingerprint=fingerprint, after_batch=after_batch, progress=progress,
                      desc="train impacts")
    chosen = result.state.get("chosen", kept_start) or {
        "index": result.best_index, "validation_rmse_mps": rmse(result.best, check, validation)}
    theta = init if chosen["index"] < 0 else result.candidates[chosen["index"]]
    train_rmse = rmse(theta, fit, train) if chosen["index"] < 0 else \
        float(result.losses[chosen["index"]])
    policy.set_flat(theta)
    figures = {"train_rmse_mps": train_rmse,
               "validation_rmse_mps": float(chosen["validation_rmse_mps"]),
               "engine_validation_rmse_mps": impact_rmse(engine_post[validation],
                                                         recorded_post[validation], k),
               "evaluations": result.evaluations, "chosen_evaluation": int(chosen["index"]),
               "stopped_early": result.stopped_early, "n_parameters": policy.n_parameters,
               "seconds": time.perf_counter() - started}
    return policy, figures


def fit_impact_residual_supervised(contacts: ImpactContacts, engine_post: np.ndarray,
                                   recorded_post: np.ndarray, train: np.ndarray,
                                   validation: np.ndarray, friction: float, *,
                                   hidden: tuple[int, ...] = (10,), n_components: int = 2,
                                   epochs: int = 3000, learning_rate: float = 3e-3,
                                   weight_decay: float = 1e-4, validate_every: int = 25,
                                   seed: int = 0) -> tuple[Any, dict[str, Any]]:
    """Supervised fit where the target exists: maximise the mixture's likelihood of each
    training impact's best-impulse residual p* − p_e (N s, contact frame; the target the
    GP regresses) with Adam, full batch, ``weight_decay`` on every weight. Every
    ``validate_every`` epochs the mean prediction's RMSE of (dx, dy, k dθ) on the
    ``validation`` impacts is checked and the best weights are kept. Deterministic for a
    seed (CPU). Returns (ResidualPolicy, figures), the policy usable alone or as the start of
    :func:`train_impact_residual` (``start=``)."""
    import time

    import torch

    from residualsim.residual.policy import ResidualPolicy

    started = time.perf_counter()
    k = contacts.radius_of_gyration_m
    fit, check = _subset(contacts, train), _subset(contacts, validation)
    targets = best_impulses(fit, recorded_post[train], friction) - \
        fit.impulses_of(engine_post[train] - fit.pre_velocity)
    policy = ResidualPolicy.for_scene(True, spin=contacts.spin, n_components=n_components,
                                      hidden=hidden, seed=seed
                                      ).fit_scaling(fit.features, targets)
    value = torch.tensor(targets, dtype=torch.float32)
    history, best = [], (np.inf, policy.get_flat(), 0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        optimiser = torch.optim.Adam(policy.network.parameters(), lr=learning_rate,
                                     weight_decay=weight_decay)
        for epoch in range(1, epochs + 1):
            optimiser.zero_grad()
            loss = -policy.distribution(fit.features).log_prob(value).mean()
            loss.backward()
            optimiser.step()
            if epoch % validate_every == 0 or epoch == epochs:
                post = policy_post_velocity(policy.numpy(), check, engine_post[validation])
                rmse = impact_rmse(post, recorded_post[validation], k)
                history.append((epoch, loss.item(), rmse))
                if rmse < best[0] - 1e-12:
                    best = (rmse, policy.get_flat(), epoch)
    policy.set_flat(best[1])
    train_post = policy_post_velocity(policy.numpy(), fit, engine_post[train])
    figures = {"train_rmse_mps": impact_rmse(train_post, recorded_post[train], k),
               "validation_rmse_mps": best[0], "chosen_epoch": best[2], "epochs": epochs,
               "final_nll": history[-1][1], "history": history,
               "n_parameters": policy.n_parameters, "seconds": time.perf_counter() - started}
    return policy, figures


def predict_impacts(model, impacts: PlanarImpacts, samples: int = 0, seed: int = 0,
                    n_workers: int = 1, residual: bool = True):
    """Predictions of an impact :class:`~residualsim.residual.model.ResidualModel` for ``impacts``
    (read in the corrected convention): the model's engine resolves each impact, its policy
    adds the guarded residual (mean with ``samples=0``; ``residual=False``: the engine
    alone). Returns :class:`~residualsim.evaluation.predictions.ImpactPredictions` with
    ``post_velocity`` (S, N, 3) in the upstream files' x-axis convention."""
    from residualsim.evaluation.predictions import ImpactPredictions
    from residualsim.sim.rollout import simulate_impacts

    if impacts.convention != "corrected":
        raise ParameterError("predict_impacts needs impacts read with convention='corrected'")
    engine_post = simulate_impacts(model.layout, impacts, model.params, n_workers,
                                   model.substeps)
    if residual:
        post = policy_post_velocity(model.sampling_policy(),
                                    impact_contacts(impacts, spin=model.policy.spin),
                                    engine_post, samples=int(samples), seed=seed)
    else:
        post = engine_post[None]
    post = post.copy()
    post[..., 0] *= -1.0  # back to the upstream files' x-axis convention
    return ImpactPredictions(post_velocity=post, rows=impacts.rows,
                             meta={"scene": model.scene, "params": model.params.as_json(),
                                   "substeps": model.substeps, "residual": bool(residual),
                                   "samples": int(samples), "seed": int(seed),
                                   "convention": "upstream"})


def handedness_consistent_models(impacts: PlanarImpacts) -> dict[str, np.ndarray]:
    """The six analytic models' post velocities (N, 3) with their stored impulses applied in
    the corrected frame with a consistent handedness (v_i + M⁻¹(nᵀp_n + dᵀp_t), p_t as
    published): the stored predictions carry the published frame's mirrored friction torque
    (see :mod:`residualsim.data.mcube`)."""
    out = {}
    for name, impulse in impacts.model_impulses.items():
        generalised = impacts.normal_jacobian * impulse[:, 1:2] - \
            impacts.tangent_jacobian * impulse[:, 0:1]  # corrected p_t is −published
        out[name] = impacts.pre_state[:, 3:6] + np.linalg.solve(impacts.mass_matrix,
                                                                generalised.T).T
    return out


def split_index(impacts: PlanarImpacts, split: dict[str, list[str]]) -> dict[str, np.ndarray]:
    """Positions (into ``impacts``) of each split's impacts, by the impacts' row ids."""
    return {name: np.array([i for i, r in enumerate(impacts.rows) if str(r) in set(ids)],
                           dtype=int) for name, ids in split.items()}


#: The GP baselines of :func:`impact_table`, by row name: whether each takes the spin feature.
GP_BASELINES = {"GP residual on the engine": False,
                "GP residual on the engine, + spin feature": True}


def fit_gp_baselines(impacts: PlanarImpacts, engine_post: np.ndarray, train: np.ndarray,
                     friction: float, seed: int = 0) -> dict[str, GPImpactResidual]:
    """The GP residuals of :data:`GP_BASELINES` fitted on the ``train`` impacts (positions),
    by row name."""
    recorded = impacts.post_state[:, 3:6]
    out = {}
    for name, spin in GP_BASELINES.items():
        contacts = impact_contacts(impacts, spin=spin)
        out[name] = GPImpactResidual(friction, seed).fit(_subset(contacts, train),
                                                         engine_post[train], recorded[train])
    return out


def impact_table(model, impacts: PlanarImpacts, split: dict[str, list[str]],
                 n_workers: int = 1, seed: int = 0, *, engine_post: np.ndarray | None = None,
                 gps: dict[str, GPImpactResidual] | None = None) -> list[dict[str, Any]]:
    """RMSE (m/s) of (dx, dy, k dθ) on the validation and test impacts of every model: the
    calibrated engine, the six analytic models (as stored, and handedness-consistent), the
    best single impulse (in the calibrated friction cone, and the data set's own
    ``p_data``), the GP residual (fitted on the training impacts) and the residual model's
    mean. One row per model: ``{"model", "validation", "test"}`` (and components).
    ``engine_post`` (N, 3) and ``gps`` (:func:`fit_gp_baselines`): reuse ones already
    computed for the same model, impacts and split."""
    from residualsim.sim.rollout import simulate_impacts

    index = split_index(impacts, split)
    k = impacts.radius_of_gyration_m
    recorded = impacts.post_state[:, 3:6]
    contacts = impact_contacts(impacts)
    engine = simulate_impacts(model.layout, impacts, model.params, n_workers, model.substeps) \
        if engine_post is None else engine_post
    friction = model.params.lateral_friction
    predictions: dict[str, np.ndarray] = {"calibrated engine": engine}
    for name, velocity in impacts.model_post_velocity.items():
        predictions[f"{name} (as stored)"] = velocity
    for name, velocity in handedness_consistent_models(impacts).items():
        predictions[f"{name} (handedness-consistent)"] = velocity
    predictions[f"best single impulse, μ = {friction:.3f}"] = contacts.pre_velocity + \
        contacts.velocity_changes(best_impulses(contacts, recorded, friction))
    p_data = np.column_stack([impacts.best_impulse[:, 1], impacts.best_impulse[:, 0]])
    generalised = impacts.normal_jacobian * p_data[:, :1] + impacts.tangent_jacobian * \
        p_data[:, 1:]
    predictions["best single impulse, p_data"] = contacts.pre_velocity + np.linalg.solve(
        impacts.mass_matrix, generalised.T).T
    if gps is None:
        gps = fit_gp_baselines(impacts, engine, index["train"], friction, seed)
    spinning = impact_contacts(impacts, spin=True)
    for name, spin in GP_BASELINES.items():
        predictions[name] = gps[name].predict(spinning if spin else contacts, engine)
    mdn_contacts = spinning if model.policy.spin else contacts
    predictions["residual MDN (mean)"] = policy_post_velocity(model.sampling_policy(),
                                                              mdn_contacts, engine)[0]
    rows = []
    scale = np.array([1.0, 1.0, k])
    for name, velocity in predictions.items():
        row: dict[str, Any] = {"model": name}
        for part in ("validation", "test"):
            i = index[part]
            row[part] = impact_rmse(velocity[i], recorded[i], k)
            error = (velocity[i] - recorded[i]) * scale
            row[f"{part}_components"] = np.sqrt(np.mean(error ** 2, axis=0)).tolist()
        rows.append(row)
    return rows
