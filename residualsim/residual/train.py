"""Algorithm 2 of the residual-learning paper: train the residual policy with nevergrad.

The loss of policy weights θ is the expected full-trajectory error over the training
recordings and policy samples,

    L(θ) = mean_i mean_s  sqrt( mean_t ‖p_i(t) − p̂_is(t)‖² + w² r_g² angle_is(t)² )   [m]

(a per-recording pose RMSE, positions in metres in the world frame, the geodesic rotation
angle in radians weighted by the radius of gyration r_g and ``rotation_weight`` w), where
p̂_is is rollout s of recording i under Algorithm 1 (:func:`residualsim.sim.rollout.residual_rollout`).
With ``samples=0`` the rollout is the deterministic mean prediction; with S >= 1 samples
every candidate sees the same random numbers (common random numbers), so the loss is a
deterministic function of θ and candidates compare fairly.

Candidates are asked in batches and each batch is evaluated by persistent worker processes
(each holding an engine and a share of the recordings: :class:`~residualsim.parallel.workers.
ShardedWorkers`). Every ``validate_every`` evaluations the best candidate so far is rolled
out (mean mode) on the validation split; the run stops when ``patience`` such checks bring
no improvement, and the candidate with the best validation error is the result. The
training history is checkpointed after every batch (:func:`residualsim.sysid.optimize.minimize`);
``resume`` continues an interrupted run and ends with the same result.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Mapping
import dataclasses
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from residualsim.sim.contact import unpack_features
from residualsim.data.trajectory import Trajectory
from residualsim.errors import DataError, ParameterError
from residualsim.residual.policy import ResidualPolicy, params_sha256
from residualsim.residual.model import ResidualModel
from residualsim.residual.spread import fit_spread
from residualsim.residual.trajectory_loss import TrajectoryLoss, keep_if_better
from residualsim.sim.rollout import (ContactGuard, RolloutRequest, interleave, item_rollouts,
                                     recording_settings, trajectory_items)
from residualsim.sim.scenes import EngineParams, Scene, make_scene, scene_reference
from residualsim.parallel import ShardedWorkers, current_backend
from residualsim.sim.pool import engine_workers

__all__ = ["TrainingConfig", "TrajectoryLoss", "train_residual", "run_training", "params_sha256",
           "engine_event_features", "split_items", "scaled_policy", "keep_if_better"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainingConfig:
    """Settings of one training run (all recorded in the model card).

    ``budget`` loss evaluations; ``samples`` policy samples per recording in the loss (0:
    the mean prediction); ``hidden``/``n_components`` the network; ``sigma`` nevergrad's
    initial mutation scale on θ; ``batch_size`` candidates evaluated together;
    ``rotation_weight`` w in the loss; ``validate_every`` evaluations between validation
    checks and ``patience`` checks without improvement before stopping; ``contact_mode``
    the policy also reads the number of touching points at each event
    (:class:`~residualsim.residual.policy.ResidualPolicy`); ``sustained`` trains, jointly
    with the event policy, a residual through sustained contact of ``sustained_hidden``
    tanh units (:mod:`residualsim.residual.coefficients`: friction coefficients at every
    step that ends in contact). ``objective``: ``"mean"`` the pose RMSE above, or
    ``"energy"`` the energy score of sampled trajectories
    (:mod:`residualsim.residual.energy_loss`; ``samples`` then an even number >= 4, 0 taking
    :data:`~residualsim.residual.energy_loss.ENERGY_SAMPLES`). ``energy_params``: what θ
    holds under the energy objective: ``"all"`` the networks' weights, or ``"spread"`` only
    the head's rows (weights and biases) of the mixture's log-scales and logits, the means
    and hidden layers held at the start's (so are the component means, and the mixture's
    mean too while the start's components share one, as a fresh or the shipped cube
    network's zero); both then end with the state noise's log factor.
    """

    budget: int = 800
    samples: int = 0
    hidden: tuple[int, ...] = (16,)
    n_components: int = 2
    sigma: float = 0.1
    optimizer: str = "CMA"
    batch_size: int = 8
    rotation_weight: float = 1.0
    validate_every: int = 48
    patience: int = 6
    seed: int = 0
    guard: ContactGuard = field(default_factory=ContactGuard)
    contact_mode: bool = False
    sustained: bool = False
    sustained_hidden: int = 6
    objective: str = "mean"
    energy_params: str = "all"

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ParameterError(f"unknown objective {self.objective!r}; choose one of "
                                 f"{', '.join(OBJECTIVES)}")
        if self.energy_params not in ENERGY_PARAMS:
            raise ParameterError(f"unknown energy_params {self.energy_params!r}; choose one "
                                 f"of {', '.join(ENERGY_PARAMS)}")
        if self.energy_params != "all" and (self.objective != "energy" or self.sustained):
            raise ParameterError(f"energy_params {self.energy_params!r} trains the mixture's "
                                 f"spread under the energy objective: it needs objective "
                                 f"'energy' and no sustained part")
        if self.objective == "energy":
            from residualsim.residual.energy_loss import ENERGY_SAMPLES

            if self.samples == 0:
                object.__setattr__(self, "samples", ENERGY_SAMPLES)
            if int(self.samples) != self.samples or self.samples < 4 or self.samples % 2:
                raise ParameterError(f"the energy objective draws antithetic pairs: samples "
                                     f"must be an even integer >= 4, got {self.samples!r}")
        for name in ("budget", "batch_size", "validate_every", "patience", "n_components",
                     "sustained_hidden"):
            value = getattr(self, name)
            if int(value) != value or value < 1:
                raise ParameterError(f"{name} must be an integer >= 1, got {value!r}")
        if int(self.samples) != self.samples or self.samples < 0:
            raise ParameterError(f"samples must be an integer >= 0, got {self.samples!r}")
        if not 0 < self.sigma < math.inf:
            raise ParameterError(f"sigma must be finite and positive, got {self.sigma!r}")
        if not 0 <= self.rotation_weight < math.inf:
            raise ParameterError(f"rotation_weight must be finite and >= 0, got "
                                 f"{self.rotation_weight!r}")
        if any(int(h) != h or h < 1 for h in self.hidden):
            raise ParameterError(f"hidden sizes must be integers >= 1, got {self.hidden!r}")
        size = _network_size(self.hidden, self.n_components)
        if size > MAX_NETWORK_PARAMETERS:
            raise ParameterError(
                f"hidden {tuple(self.hidden)} with {self.n_components} components makes about "
                f"{size} network parameters; the search's covariance grows with their square "
                f"(100000 hidden units asked for 41.9 TiB): at most {MAX_NETWORK_PARAMETERS}")


#: Training objectives: the mean's pose RMSE, or the energy score of sampled trajectories.
OBJECTIVES = ("mean", "energy")
#: What the energy objective trains: every network weight, or the mixture's spread only.
ENERGY_PARAMS = ("all", "spread")

#: Most parameters the residual network may have: CMA adapts a full covariance over them
#: (5000 parameters: 200 MB); the shipped networks have a few hundred.
MAX_NETWORK_PARAMETERS = 5000


def _network_size(hidden: tuple[int, ...], n_components: int) -> int:
    """About how many weights a residual network of these layers has: at most 12 inputs (9
    contact features and the optional ones), 7 outputs per component (weight, 3 means, 3
    scales), a bias per unit."""
    sizes = [12, *(int(h) for h in hidden), 7 * int(n_components)]
    return sum((a + 1) * b for a, b in zip(sizes[:-1], sizes[1:]))


def split_items(scene: str | Scene, train: Mapping[str, Trajectory],
                validation: Mapping[str, Trajectory]) -> list[tuple]:
    """Work items of the training and validation recordings, tagged with their split and
    interleaved so that every worker's shard holds both in proportion."""
    return interleave(trajectory_items(scene, train, "train"),
                      trajectory_items(scene, validation, "validation", start=len(train)))


def scaled_policy(workers: ShardedWorkers, scene: str | Scene, params: EngineParams,
                  config: TrainingConfig) -> ResidualPolicy:
    """A new policy (``config``'s size and seed, 'no correction') whose feature scaling and
    impulse unit come from the engine's own events on the training items (impulses M_c v_c,
    N s, contact frame). Raises DataError with fewer than 2 events."""
    policy = ResidualPolicy.for_scene(make_scene(scene).planar,
                                      contact_mode=config.contact_mode,
                                      n_components=config.n_components,
                                      hidden=config.hidden, seed=config.seed)
    features = engine_event_features(workers, params, config.guard, config.contact_mode)
    if len(features) < 2:
        raise DataError("the engine found fewer than 2 contact events on the training "
                        "recordings: nothing to learn from")
    inertia, velocity = unpack_features(features[:, :-1] if config.contact_mode else features)
    return policy.fit_scaling(features, np.einsum("nij,nj->ni", inertia, velocity))


def engine_event_features(workers: ShardedWorkers, params: EngineParams,
                          guard: ContactGuard, contact_mode: bool = False) -> np.ndarray:
    """Contact features (E, n_features) of the engine's own events on the training items:
    per event M_c (kg, upper triangle) and v_c (m/s), contact frame (normal first), as
    :func:`residualsim.sim.contact.contact_features` packs them; with ``contact_mode``
    followed by the number of points touching after the event's step."""
    request = RolloutRequest(params=params, policies=(None,), guard=guard, split="train")
    rows = [r for r in workers.map(_event_features_one, request) if r is not None]
    if not rows:
        return np.empty((0, 0))
    features = np.concatenate([r[0] for r in rows])
    if contact_mode:
        features = np.column_stack([features, np.concatenate([r[1] for r in rows])])
    return features


def _event_features_one(engine, item: tuple, request: RolloutRequest
                        ) -> tuple[np.ndarray, np.ndarray] | None:
    """Worker function: the features and touching counts of the engine's events on one
    recording."""
    runs = item_rollouts(engine, item, request)
    return None if runs is None else (runs[0][0].features, runs[0][0].touching_counts)


def train_residual(scene: str | Scene, train: Mapping[str, Trajectory],
                   validation: Mapping[str, Trajectory], out: str | os.PathLike[str], *,
                   params: EngineParams, substeps: int, config: TrainingConfig = TrainingConfig(),
                   n_workers: int = 1, resume: bool = False,
                   checkpoint_every: int | None = None, progress: bool = False,
                   info: Mapping[str, Any] | None = None, state_noise: Any = None,
                   observation_noise: Any = None, start_policy: ResidualPolicy | None = None
                   ) -> tuple[ResidualModel, dict]:
    """Train a residual model; write it to ``out`` and return it with its figures.

    Parameters
    ----------
    scene : str or Scene
        The scene (``"cube"``, a scene file, or the resolved object, handed on as is).
    train, validation : mapping of id -> Trajectory
        Training and validation recordings (one rate).
    out : path
        Model directory; ``checkpoint.npz`` inside it holds the training history.
    params : EngineParams
        The (calibrated) engine parameters, fixed during training.
    substeps : int
        Engine substeps per recorded sample (those the parameters were calibrated at).
    n_workers : int
        Workers evaluating candidates (on the backend of
        :func:`residualsim.parallel.workers.parallel_backend`); the result does not depend on it.
    resume : bool
        Continue ``out/checkpoint.npz`` (ends with the same weights as an uninterrupted run).
    checkpoint_every : int, optional
        Evaluations between checkpoint writes (default: after every batch).
    state_noise, observation_noise : StateNoise, ObservationNoise, optional
        With ``config.objective == "energy"``: the samples' start noise (its factor is
        trained with the weights) and pose noise; the model keeps both. Ignored by the mean
        objective.
    start_policy : ResidualPolicy, optional
        Start from this network (its weights, feature scaling and impulse unit; of
        ``config``'s size) instead of a fresh one scaled on the engine's events.
    """
    from residualsim.sysid.optimize import minimize

    started = time.perf_counter()
    if not train:
        raise DataError("no training recordings")
    if not validation:  # a handful of recordings: train on all, no early stopping
        log.warning("no validation recordings: early stopping is off, and candidates are "
                    "judged on the training recordings (figures marked validation_on=train)")
        validation = dict(train)
        config = dataclasses.replace(config, patience=10 ** 9)
        info = {**dict(info or {}), "validation_on": "train"}
    scene = layout = make_scene(scene)
    if config.sustained and layout.planar:
        raise ParameterError(f"--sustained needs a 3D scene: {scene_reference(scene)!r} is "
                             "planar (its "
                             "recordings are single impacts)")
    start_hash = None if start_policy is None else _check_start(start_policy, config,
                                                                layout.planar)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    settings = recording_settings(scene, {**train, **validation}, substeps)
    with engine_workers(scene, split_items(scene, train, validation), n_workers,
                        settings) as workers:
        policy = start_policy or scaled_policy(workers, scene, params, config)
        sustained = None
        if config.sustained:
            from residualsim.residual.coefficients import sustained_start

            sustained = sustained_start(workers, params, config.guard, config.sustained_hidden,
                                        config.seed)
        init = policy.get_flat() if sustained is None else \
            np.concatenate([policy.get_flat(), sustained.get_flat()])
        if config.objective == "energy":
            from residualsim.residual.energy_loss import EnergyLoss

            free = (policy.flat_indices(("logits", "scales"))
                    if config.energy_params == "spread" else None)
            loss = EnergyLoss(workers, policy, params, layout.radius_of_gyration_m, config,
                              sustained, state_noise=state_noise,
                              observation_noise=observation_noise, planar=layout.planar,
                              free=free)
        else:
            loss = TrajectoryLoss(workers, policy, params, layout.radius_of_gyration_m, config,
                                  sustained)
        init = loss.start(init)
        engine_figures = loss.validation(None)
        log.info("engine alone on validation: %s", engine_figures)
        reference = loss.reference(init, engine_figures)

        session = {"before": None}

        def after_batch(result) -> bool:
            state = result.state
            if session["before"] is None:  # wall time of earlier sessions (resume)
                session["before"] = float(state.get("seconds", 0.0))
            state["seconds"] = session["before"] + time.perf_counter() - started
            if result.evaluations < state.get("next_check", config.validate_every):
                return False
            state["next_check"] = result.evaluations + config.validate_every
            best = result.best_index
            checks = state.setdefault("checks", [])
            if checks and checks[-1]["index"] == best:
                figures = dict(checks[-1])
            else:
                figures = loss.validation(result.candidates[best])
            figures.update(index=best, evaluations=result.evaluations,
                           train_loss=float(result.losses[best]))
            checks.append(figures)
            return keep_if_better(state, figures, config.patience)

        fingerprint = {"scene": scene_reference(scene), "train": sorted(train), "validation": sorted(validation),
                       "params": params.as_json(), "substeps": substeps,
                       **({"body": params.body.as_json()}
                          if getattr(params, "body", None) is not None else {}),
                       "config": _json_config(config), "n_parameters": len(init),
                       "scaling": [policy.feature_mean.tolist(), policy.feature_std.tolist(),
                                   policy.impulse_scale_ns],
                       **({"sustained_scaling": [sustained.feature_mean.tolist(),
                                                 sustained.feature_std.tolist()]}
                          if sustained is not None else {}),
                       **({"noise": [None if n is None else n.as_json()
                                     for n in (state_noise, observation_noise)]}
                          if config.objective == "energy" else {}),
                       **({"start_sha256": start_hash} if start_hash is not None else {})}
        result = minimize(loss, init, budget=config.budget, sigma=config.sigma,
                          optimizer=config.optimizer, batch_size=config.batch_size,
                          seed=config.seed, checkpoint=out / "checkpoint.npz", resume=resume,
                          checkpoint_every=checkpoint_every, fingerprint=fingerprint,
                          after_batch=after_batch, progress=progress, desc="train")
        chosen = result.state.get("chosen")
        validated = {check["index"] for check in result.state.get("checks", [])}
        if result.best_index not in validated and not result.stopped_early:
            # The last candidates came after the last check: give the best a fair chance.
            last = {**loss.validation(result.best), "index": result.best_index,
                    "evaluations": result.evaluations, "train_loss": result.best_loss}
            if chosen is None or last["loss"] < chosen["loss"]:
                chosen = last
        if chosen is None or chosen["loss"] >= reference["loss"]:
            # Validation at evaluation 0: no candidate beat the starting point (the engine
            # alone, for the mean objective), so keep it rather than a policy that only
            # fits training.
            log.info("no candidate beat the starting point on validation: keeping it")
            chosen = {**reference, "index": -1, "evaluations": 0,
                      "train_loss": float(loss(init[None])[0])}
            theta = init
        else:
            theta = result.candidates[chosen["index"]]
        state_noise = loss.trained_state_noise(theta)
        weights = loss.weights(theta)
        policy.set_flat(weights[:policy.n_parameters])
        if sustained is not None:  # kept only when a candidate beat the engine
            sustained = None if chosen["index"] == -1 else \
                sustained.with_flat(weights[policy.n_parameters:])
        counts, deepest = loss.counts.copy(), loss.deepest_m
        restarts = workers.restarts
    earlier = session["before"]
    if earlier is None:  # nothing new ran: every batch was replayed from the checkpoint
        earlier = float(result.state.get("seconds", 0.0))
    seconds = earlier + time.perf_counter() - started
    figures = {
        "best_loss": float(chosen["train_loss"]),
        "validation_rmse_m": float(chosen["position_rmse_m"]),
        "validation_rotation_deg": float(chosen["rotation_rms_deg"]),
        "engine_validation_rmse_m": engine_figures["position_rmse_m"],
        "engine_validation_rotation_deg": engine_figures["rotation_rms_deg"],
        "improvement": 1.0 - chosen["position_rmse_m"] / engine_figures["position_rmse_m"],
        "evaluations": result.evaluations, "chosen_evaluation": int(chosen["index"]) + 1,
        "stopped_early": result.stopped_early, "failed": result.failed,
        "seconds": seconds, "n_parameters": len(init),
        "sustained": sustained is not None,
        "params_sha256": params_sha256(policy),
        "rollouts": int(counts[4]), "events": int(counts[0]),
        "energy_clamped": int(counts[1]), "normal_clamped": int(counts[2]),
        "engine_energy_gains": int(counts[3]), "max_penetration_m": deepest,
        "worker_restarts": restarts, "workers": n_workers, "backend": current_backend().name,
        "objective": config.objective,
    }
    if config.objective == "energy":
        figures.update(validation_energy_score_m=chosen["loss"],
                       validation_final_energy_score_m=chosen["final_energy_score_m"],
                       start_validation_energy_score_m=reference["loss"],
                       engine_validation_energy_score_m=engine_figures["loss"],
                       state_noise_factor=None if state_noise is None else state_noise.factor)
    model = ResidualModel(scene=scene, policy=policy, params=params, dt_s=settings.dt_s,
                          substeps=settings.substeps, guard=config.guard, sustained=sustained,
                          state_noise=state_noise if config.objective == "energy" else None,
                          observation_noise=(observation_noise if config.objective == "energy"
                                             else None),
                          info={**dict(info or {}), "config": _json_config(config),
                                "n_train": len(train), "n_validation": len(validation),
                                "figures": figures,
                                "validation_checks": result.state.get("checks", [])})
    model.save(out)
    return model, figures


def _check_start(policy: ResidualPolicy, config: TrainingConfig, planar: bool) -> str:
    """The SHA-256 of a starting network's weights, after checking it has ``config``'s
    size and the scene's contact features."""
    from residualsim.sim.contact import feature_width

    found = (tuple(policy.hidden), policy.n_components, policy.contact_mode)
    wanted = (tuple(config.hidden), config.n_components, config.contact_mode)
    if found != wanted or policy.spin or \
            policy.n_features != feature_width(planar, False, config.contact_mode):
        raise ParameterError(
            f"the starting network has hidden {list(found[0])}, {found[1]} components, "
            f"contact mode {found[2]}, spin {policy.spin} and {policy.n_features} features: "
            f"train with the same --hidden, --components and --contact-mode (asked: hidden "
            f"{list(wanted[0])}, {wanted[1]} components, contact mode {wanted[2]}) on a "
            f"{'planar' if planar else '3D'} scene")
    return params_sha256(policy)


def _json_config(config: TrainingConfig) -> dict[str, Any]:
    content = asdict(config)
    content["hidden"] = list(config.hidden)
    if not config.sustained:  # as before the sustained part existed (resumable checkpoints)
        del content["sustained"], content["sustained_hidden"]
    if config.objective == "mean":  # likewise for the objective
        del content["objective"]
    if config.energy_params == "all":  # and for what the energy objective trains
        del content["energy_params"]
    return content


def run_training(scene: str | Scene, data: str | os.PathLike[str], out: str | os.PathLike[str], *,
                 calibration: str | os.PathLike[str] | None = None, substeps: int | None = None,
                 max_trajectories: int | None = None, config: TrainingConfig = TrainingConfig(),
                 n_workers: int = 1, resume: bool = False,
                 checkpoint_every: int | None = None, progress: bool = False,
                 command: str | None = None,
                 fractions: tuple[float, float, float] | None = None,
                 split_lists: dict | None = None,
                 fit_uncertainty: bool = True, observation_noise: bool = False,
                 init: str | os.PathLike[str] | None = None,
                 uncertainty_recordings: int | None = None) -> dict[str, Any]:
    """The training job: recordings → splits → (calibrated) engine → :func:`train_residual`
    → (``fit_uncertainty``, default) the state noise and the spread
    (:func:`residualsim.residual.uncertainty_fit.fit_uncertainty`: state noise from the
    training split's free flights, a factor on it and the spread by the reliability
    criterion on validation).

    Trains on the training split (its first ``max_trajectories`` recordings if given) and
    stops early on the validation split (see :mod:`residualsim.data.splits`: the hash split
    with ``fractions``, default 0.7/0.15/0.15, or the explicit ``split_lists``); the test
    split is never read. ``observation_noise``: first set the table height and pose noise
    from the training split's rest phases (:func:`~residualsim.residual.observation_noise.
    fit_ground`). With ``config.objective == "energy"`` the state noise (and, with
    ``observation_noise``, the table and pose noise) are estimated before training, the
    start's width is trained with the weights and no spread is fitted afterwards; the
    figures then give the validation coverage at 32 samples. An empty validation split
    trains on all, early stopping off. Without
    ``calibration``: the default engine at the scene's substeps. ``init``: a model directory
    whose network (weights, feature scaling, impulse unit; its spread folded into the
    scales) is the start instead of a fresh one, and whose contact guard replaces
    ``config.guard``; the engine, state noise and pose noise are still those above.
    ``uncertainty_recordings``: the state noise is estimated from the first N training
    recordings only (default all; each costs an engine refit of its initial state).
    Returns the figures.
    """
    from residualsim.sysid.calibration_file import calibration_rate_hz, load_calibration
    from residualsim.data import load_trajectories
    from residualsim.data.splits import DEFAULT_FRACTIONS, check_split, split_recordings, split_rule
    from residualsim.sim.recordings import prepare_recordings

    scene = layout = make_scene(scene)  # resolved once; every stage below takes the object
    data = Path(data)
    trajectories = load_trajectories(data, rate_hz=calibration_rate_hz(calibration))
    if not trajectories:
        raise DataError(f"{data}: no recordings found")
    if {t.planar for t in trajectories.values()} != {layout.planar}:
        raise DataError(f"{data}: recordings do not match the "
                        f"{'planar' if layout.planar else '3D'} scene "
                        f"{scene_reference(scene)!r}")
    calibrated = load_calibration(calibration) if calibration is not None else None
    if calibrated is not None:
        from residualsim.sim.scenes import same_scene

        if not same_scene(calibrated.scene, scene):
            raise DataError(f"{calibration}: calibrated for scene {calibrated.scene!r}, not "
                            f"{scene_reference(scene)!r}")
    # pose-only starts fitted with the calibrated body, which rolls them out
    trajectories = prepare_recordings(scene, trajectories,
                                      calibrated.params if calibrated else None)
    parts = split_recordings(list(trajectories), fractions, split_lists)
    check_split(parts, "train", str(data), split_rule(fractions, split_lists))
    train_ids = parts["train"][:max_trajectories] if max_trajectories else parts["train"]
    train = {k: trajectories[k] for k in train_ids}
    validation = {k: trajectories[k] for k in parts["validation"]}
    provenance: dict[str, Any] = {"data": str(data), "command": command,
                                  "split": ("explicit id lists" if split_lists else
                                            f"hash split (residualsim.data.splits), seed 0, "
                                            f"fractions {list(fractions or DEFAULT_FRACTIONS)}"),
                                  "train_ids": train_ids}
    if calibrated is not None:
        params = calibrated.params
        if substeps is not None and substeps != calibrated.substeps:
            raise ParameterError(
                f"{calibration} was calibrated at {calibrated.substeps} substeps, not "
                f"--substeps {substeps}: contact parameters do not transfer across substep "
                f"counts (the model would penetrate or bounce differently); omit --substeps "
                f"to train at {calibrated.substeps}, or recalibrate with --substeps {substeps}")
        substeps = substeps or calibrated.substeps
        provenance["calibration"] = str(calibration)
    else:
        params = EngineParams()
        substeps = substeps or layout.settings.substeps
    start_policy = None
    if init is not None:  # the start's network, and the contact guard it was made under
        start_policy, guard = _start_network(init, scene, substeps)
        config = dataclasses.replace(config, guard=guard)
        provenance["init"] = str(init)
    noises: dict[str, Any] = {}
    if config.objective == "energy":  # the noises are part of what is trained
        from residualsim.residual.energy_loss import energy_start

        params, noises, provenance["energy_start"] = energy_start(
            scene, params, substeps, {k: trajectories[k] for k in parts["train"]},
            config.guard, observation_noise, n_workers)
    model, figures = train_residual(scene, train, validation, out, params=params,
                                    substeps=substeps, config=config, n_workers=n_workers,
                                    resume=resume, checkpoint_every=checkpoint_every,
                                    progress=progress, info=provenance,
                                    start_policy=start_policy, **noises)
    if config.objective == "energy":
        # spread and start width were trained: only record how the regions cover
        _, rows = fit_spread(model, validation or train, samples=32, grid=(1.0,),
                             seed=config.seed, n_workers=n_workers, criterion="reliability")
        figures.update(validation_coverage_xy_50=rows[0]["coverage_xy_50"],
                       validation_coverage_xy_90=rows[0]["coverage_xy_90"],
                       validation_coverage_50=rows[0]["coverage_50"],
                       validation_coverage_90=rows[0]["coverage_90"])
        model = dataclasses.replace(model, info={**model.info, "figures": figures})
        model.save(out)
        return figures
    if observation_noise:
        from residualsim.residual.observation_noise import fit_ground

        model, found = fit_ground(model, {k: trajectories[k] for k in parts["train"]}, n_workers)
        figures.update(table_height_m=found.table_height_m,
                       observation_noise=model.observation_noise.as_json())
        model.save(out)
    if fit_uncertainty:
        from residualsim.residual.uncertainty_fit import fit_uncertainty as fit

        checkpoint = Path(out) / "uncertainty-fit.checkpoint.json"
        noise_ids = parts["train"][:uncertainty_recordings] if uncertainty_recordings \
            else parts["train"]
        model, record = fit(model, {k: trajectories[k] for k in noise_ids}, validation
                            or train, fit_spread, seed=config.seed, n_workers=n_workers,
                            checkpoint=checkpoint)
        figures.update(spread=record["spread"], state_noise_factor=record["state_noise_factor"],
                       state_noise_fitted=record["state_noise"] is not None,
                       validation_coverage_xy_50=record["coverage_xy_50"],
                       validation_coverage_xy_90=record["coverage_xy_90"])
        model.save(out)
        checkpoint.unlink(missing_ok=True)
    return figures


def _start_network(init: str | os.PathLike[str], scene: str | Scene, substeps: int
                   ) -> tuple[ResidualPolicy, ContactGuard]:
    """The network of the model directory ``init`` with its spread folded into the scales,
    and its contact guard, for a run on ``scene`` at ``substeps`` (a DataError if the model
    is for another scene, substep count or has a sustained-contact part, which a start does
    not carry)."""
    from residualsim.sim.scenes import same_scene

    model = ResidualModel.load(init)
    if not same_scene(model.scene, scene) or model.substeps != substeps:
        raise DataError(f"{init}: a model of scene {model.scene!r} at {model.substeps} "
                        f"substeps cannot start training on {scene_reference(scene)!r} at "
                        f"{substeps}")
    if model.sustained is not None:
        raise DataError(f"{init}: its sustained-contact part cannot be a start (only the "
                        f"event network is)")
    policy = model.policy.fold_spread(model.spread) if model.spread != 1.0 else model.policy
    return policy, model.guard
