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

import hashlib
import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
import dataclasses
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from residualsim.sim.contact import unpack_features
from residualsim.data.trajectory import Trajectory
from residualsim.errors import DataError, ParameterError
from residualsim.residual.policy import ResidualModel, ResidualPolicy
from residualsim.sim.rollout import (ContactGuard, RolloutRequest, interleave, item_rollouts,
                                     recording_settings, residual_errors, trajectory_items)
from residualsim.sim.scenes import EngineParams, make_scene
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
    step that ends in contact).
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

    def __post_init__(self) -> None:
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


#: Most parameters the residual network may have: CMA adapts a full covariance over them
#: (5000 parameters: 200 MB); the shipped networks have a few hundred.
MAX_NETWORK_PARAMETERS = 5000


def _network_size(hidden: tuple[int, ...], n_components: int) -> int:
    """About how many weights a residual network of these layers has: at most 12 inputs (9
    contact features and the optional ones), 7 outputs per component (weight, 3 means, 3
    scales), a bias per unit."""
    sizes = [12, *(int(h) for h in hidden), 7 * int(n_components)]
    return sum((a + 1) * b for a, b in zip(sizes[:-1], sizes[1:]))


def params_sha256(policy: ResidualPolicy) -> str:
    """SHA-256 of the flat parameter vector (float64, little-endian): equal hashes mean
    identical weights."""
    return hashlib.sha256(policy.get_flat().astype("<f8").tobytes()).hexdigest()


class TrajectoryLoss:
    """L(θ) (see module docstring) for batches of candidates, evaluated by workers.

    Parameters
    ----------
    workers : ShardedWorkers
        Built over :func:`residualsim.sim.rollout.trajectory_items` of all recordings used
        (training items tagged ``"train"``, validation items ``"validation"``).
    policy : ResidualPolicy
        Architecture and normalisation; candidates are its flat parameter vectors.
    params : EngineParams
        The engine parameters of every rollout.
    radius_m : float
        The body's radius of gyration r_g.
    """

    def __init__(self, workers: ShardedWorkers, policy: ResidualPolicy, params: EngineParams,
                 radius_m: float, config: TrainingConfig, sustained=None) -> None:
        self.workers, self.policy, self.params = workers, policy, params
        self.radius_m, self.config, self.sustained = radius_m, config, sustained
        self.counts = np.zeros(5)  # events, energy clamps, normal clamps, engine gains, rollouts
        self.deepest_m = 0.0

    def errors(self, thetas: Sequence[np.ndarray] | None, split: str, samples: int | None = None
               ) -> np.ndarray:
        """Per-item rollout errors (n_items, C, S, 7) (see :func:`residual_errors`);
        ``thetas=None`` runs the engine alone."""
        policies: tuple = (None,) if thetas is None else tuple(
            self.rollout_policy(theta) for theta in thetas)
        samples = self.config.samples if samples is None else samples
        request = RolloutRequest(params=self.params, policies=policies, samples=samples,
                                 seed=self.config.seed, guard=self.config.guard, split=split)
        rows = [r for r in self.workers.map(residual_errors, request) if r is not None]
        table = np.array(rows)
        self.counts += [table[..., 2].sum(), table[..., 3].sum(), table[..., 4].sum(),
                        table[..., 5].sum(), table[..., 0].size]
        self.deepest_m = max(self.deepest_m, float(table[..., 6].max(initial=0.0)))
        return table

    def rollout_policy(self, theta: np.ndarray):
        """The policy a candidate θ rolls out: the event policy's weights first, then (with
        a ``sustained`` part) the sustained-contact network's."""
        n_event = self.policy.n_parameters
        event = self.policy.set_flat(theta[:n_event]).numpy()
        if self.sustained is None:
            return event
        from residualsim.residual.coefficients import SustainedPolicy

        return SustainedPolicy(self.sustained.with_flat(theta[n_event:]), event)

    def pose_rmse(self, table: np.ndarray) -> np.ndarray:
        """Per-item, per-candidate, per-sample pose RMSE (n, C, S), metres."""
        weight = self.config.rotation_weight * self.radius_m
        return np.sqrt(table[..., 0] + weight**2 * table[..., 1])

    def __call__(self, thetas: np.ndarray) -> np.ndarray:
        """L(θ) (C,) for candidates (C, n_parameters), metres; NaN for failed rollouts."""
        return self.pose_rmse(self.errors(thetas, "train")).mean(axis=(0, 2))

    def validation(self, theta: np.ndarray | None) -> dict[str, float]:
        """Mean-mode figures on the validation split for one θ (None: engine alone)."""
        table = self.errors(None if theta is None else [theta], "validation", samples=0)
        return {"loss": float(self.pose_rmse(table).mean()),
                "position_rmse_m": float(np.sqrt(table[..., 0]).mean()),
                "rotation_rms_deg": float(np.degrees(np.sqrt(table[..., 1])).mean())}


def keep_if_better(state: dict, figures: dict, patience: int) -> bool:
    """Early stopping on validation: keep ``figures`` as ``state["chosen"]`` when its
    ``"loss"`` beats the chosen one's, else count a stale check; True (stop) after
    ``patience`` stale checks in a row."""
    chosen = state.get("chosen")
    if chosen is None or figures["loss"] < chosen["loss"] - 1e-9:
        state["chosen"], state["stale"] = figures, 0
    else:
        state["stale"] = state.get("stale", 0) + 1
    return state["stale"] >= patience


def split_items(scene: str, train: Mapping[str, Trajectory],
                validation: Mapping[str, Trajectory]) -> list[tuple]:
    """Work items of the training and validation recordings, tagged with their split and
    interleaved so that every worker's shard holds both in proportion."""
    return interleave(trajectory_items(scene, train, "train"),
                      trajectory_items(scene, validation, "validation", start=len(train)))


def scaled_policy(workers: ShardedWorkers, scene: str, params: EngineParams,
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


def train_residual(scene: str, train: Mapping[str, Trajectory],
                   validation: Mapping[str, Trajectory], out: str | os.PathLike[str], *,
                   params: EngineParams, substeps: int, config: TrainingConfig = TrainingConfig(),
                   n_workers: int = 1, resume: bool = False,
                   checkpoint_every: int | None = None, progress: bool = False,
                   info: Mapping[str, Any] | None = None) -> tuple[ResidualModel, dict]:
    """Train a residual model; write it to ``out`` and return it with its figures.

    Parameters
    ----------
    scene : str
        Scene name (``"cube"``).
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
    layout = make_scene(scene)
    if config.sustained and layout.planar:
        raise ParameterError(f"--sustained needs a 3D scene: {scene!r} is planar (its "
                             "recordings are single impacts)")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    settings = recording_settings(scene, {**train, **validation}, substeps)
    with engine_workers(scene, split_items(scene, train, validation), n_workers,
                        settings) as workers:
        policy = scaled_policy(workers, scene, params, config)
        sustained = None
        if config.sustained:
            from residualsim.residual.coefficients import sustained_start

            sustained = sustained_start(workers, params, config.guard, config.sustained_hidden,
                                        config.seed)
        init = policy.get_flat() if sustained is None else \
            np.concatenate([policy.get_flat(), sustained.get_flat()])
        loss = TrajectoryLoss(workers, policy, params, layout.radius_of_gyration_m, config,
                              sustained)
        engine_figures = loss.validation(None)
        log.info("engine alone on validation: %s", engine_figures)

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

        fingerprint = {"scene": scene, "train": sorted(train), "validation": sorted(validation),
                       "params": params.as_json(), "substeps": substeps,
                       **({"body": params.body.as_json()}
                          if getattr(params, "body", None) is not None else {}),
                       "config": _json_config(config), "n_parameters": len(init),
                       "scaling": [policy.feature_mean.tolist(), policy.feature_std.tolist(),
                                   policy.impulse_scale_ns],
                       **({"sustained_scaling": [sustained.feature_mean.tolist(),
                                                 sustained.feature_std.tolist()]}
                          if sustained is not None else {})}
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
        if chosen is None or chosen["loss"] >= engine_figures["loss"]:
            # Validation at evaluation 0: no candidate beat the engine alone, so keep the
            # starting point (no correction) rather than a policy that only fits training.
            log.info("no candidate beat the engine on validation: keeping no correction")
            chosen = {**engine_figures, "index": -1, "evaluations": 0,
                      "train_loss": float(loss(init[None])[0])}
            theta = init
        else:
            theta = result.candidates[chosen["index"]]
        policy.set_flat(theta[:policy.n_parameters])
        if sustained is not None:  # kept only when a candidate beat the engine
            sustained = None if theta is init else \
                sustained.with_flat(theta[policy.n_parameters:])
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
    }
    model = ResidualModel(scene=scene, policy=policy, params=params, dt_s=settings.dt_s,
                          substeps=settings.substeps, guard=config.guard, sustained=sustained,
                          info={**dict(info or {}), "config": _json_config(config),
                                "n_train": len(train), "n_validation": len(validation),
                                "figures": figures,
                                "validation_checks": result.state.get("checks", [])})
    model.save(out)
    return model, figures


def _json_config(config: TrainingConfig) -> dict[str, Any]:
    content = asdict(config)
    content["hidden"] = list(config.hidden)
    if not config.sustained:  # as before the sustained part existed (resumable checkpoints)
        del content["sustained"], content["sustained_hidden"]
    return content


def run_training(scene: str, data: str | os.PathLike[str], out: str | os.PathLike[str], *,
                 calibration: str | os.PathLike[str] | None = None, substeps: int | None = None,
                 max_trajectories: int | None = None, config: TrainingConfig = TrainingConfig(),
                 n_workers: int = 1, resume: bool = False,
                 checkpoint_every: int | None = None, progress: bool = False,
                 command: str | None = None,
                 fractions: tuple[float, float, float] | None = None,
                 split_lists: dict | None = None,
                 fit_uncertainty: bool = True, observation_noise: bool = False
                 ) -> dict[str, Any]:
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
    fit_ground`). An empty validation split trains on all, early stopping off. Without
    ``calibration``: the default engine at the scene's substeps. Returns the figures.
    """
    from residualsim.sysid.calibrate import calibration_rate_hz, load_calibration
    from residualsim.data import load_trajectories
    from residualsim.data.splits import DEFAULT_FRACTIONS, check_split, split_recordings, split_rule
    from residualsim.sim.recordings import prepare_recordings

    data = Path(data)
    trajectories = load_trajectories(data, rate_hz=calibration_rate_hz(calibration))
    if not trajectories:
        raise DataError(f"{data}: no recordings found")
    layout = make_scene(scene)
    if {t.planar for t in trajectories.values()} != {layout.planar}:
        raise DataError(f"{data}: recordings do not match the "
                        f"{'planar' if layout.planar else '3D'} scene {scene!r}")
    trajectories = prepare_recordings(scene, trajectories)
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
    if calibration is not None:
        calibrated = load_calibration(calibration)
        from residualsim.sim.scenes.scene_file import same_scene

        if not same_scene(calibrated.scene, scene):
            raise DataError(f"{calibration}: calibrated for scene {calibrated.scene!r}, not "
                            f"{scene!r}")
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
    model, figures = train_residual(scene, train, validation, out, params=params,
                                    substeps=substeps, config=config, n_workers=n_workers,
                                    resume=resume, checkpoint_every=checkpoint_every,
                                    progress=progress, info=provenance)
    if observation_noise:
        from residualsim.residual.observation_noise import fit_ground

        model, found = fit_ground(model, {k: trajectories[k] for k in parts["train"]}, n_workers)
        figures.update(table_height_m=found.table_height_m,
                       observation_noise=model.observation_noise.as_json())
        model.save(out)
    if fit_uncertainty:
        from residualsim.residual.uncertainty_fit import fit_uncertainty as fit

        checkpoint = Path(out) / "uncertainty-fit.checkpoint.json"
        model, record = fit(model, {k: trajectories[k] for k in parts["train"]}, validation
                            or train, fit_spread, seed=config.seed, n_workers=n_workers,
                            checkpoint=checkpoint)
        figures.update(spread=record["spread"], state_noise_factor=record["state_noise_factor"],
                       state_noise_fitted=record["state_noise"] is not None,
                       validation_coverage_xy_50=record["coverage_xy_50"],
                       validation_coverage_xy_90=record["coverage_xy_90"])
        model.save(out)
        checkpoint.unlink(missing_ok=True)
    return figures


#: Spreads tried by :func:`fit_spread` (factors on the mixture's scales).
SPREAD_GRID = (1.0, 2.0, 4.0, 8.0, 16.0)
#: How :func:`fit_spread` picks a spread from the grid.
SPREAD_CRITERIA = ("energy", "coverage", "reliability")


def fit_spread(model: ResidualModel, train: Mapping[str, Trajectory], samples: int = 32,
               grid: Sequence[float] = SPREAD_GRID, seed: int = 0, n_workers: int = 1,
               criterion: str = "energy", checkpoint: str | os.PathLike[str] | None = None
               ) -> tuple[float, list[dict[str, Any]]]:
    """Choose the model's sampling spread on training recordings.

    Training (Algorithm 2) scores the policy's *mean*, which leaves the mixture's scales
    uncalibrated (the shipped cube model's samples covered the recorded final position of
    no validation toss). For every factor in ``grid`` this rolls out ``samples`` stochastic
    predictions of each training recording and scores their final positions, then picks a
    factor by ``criterion``:

    * ``"energy"``: the lowest mean energy score (a proper scoring rule: lowest for the
      calibrated spread, penalising both over- and under-confidence, but weighing sharpness
      as well as calibration);
    * ``"coverage"``: the smallest miscalibration of the sample regions on the table plane,
      |c50 - 0.5| + |c90 - 0.9| with c50, c90 the fractions of recorded final x-y positions
      inside the 50 % and 90 % sample regions (what a planner relying on the regions needs;
      ties go to the lower energy score);
    * ``"reliability"``: the smallest largest distance of the final x-y reliability curve
      (coverage of the 10 %, ..., 90 % regions) from the diagonal, the check of every level
      rather than two (ties go to the lower energy score).

    Returns (spread, one row per factor: spread, energy score m, coverages, miscalibration,
    RMSE m).

    ``checkpoint``: a JSON file rewritten atomically after each factor. A rerun with the
    same model, recordings, samples and seed reuses the rows it holds (an interrupted fit
    loses at most one factor); one written for anything else is ignored.
    """
    import json

    from residualsim.atomic import atomic_write_text, read_json
    from residualsim.evaluation.metrics import score_trajectories
    from residualsim.sim.rollout import predict_trajectories

    if int(samples) != samples or samples < 2:
        raise ParameterError(f"fit_spread needs samples >= 2, got {samples!r}")
    if not grid or any(not (g >= 0 and np.isfinite(g)) for g in grid):
        raise ParameterError(f"spreads must be finite and >= 0, got {list(grid)}")
    if criterion not in SPREAD_CRITERIA:
        raise ParameterError(f"unknown spread criterion {criterion!r}; choose one of "
                             f"{', '.join(SPREAD_CRITERIA)}")
    fingerprint = hashlib.sha256(json.dumps({
        "weights": params_sha256(model.policy), "params": model.params.as_json(),
        "guard": asdict(model.guard), "substeps": model.substeps,
        "state_noise": None if model.state_noise is None else model.state_noise.as_json(),
        "ids": sorted(train), "samples": int(samples), "seed": int(seed)},
        sort_keys=True, default=str).encode()).hexdigest()
    done: dict[float, dict[str, Any]] = {}
    if checkpoint is not None and Path(checkpoint).is_file():
        saved = read_json(Path(checkpoint))
        if isinstance(saved, dict) and saved.get("fingerprint") == fingerprint:
            done = {float(row["spread"]): row for row in saved.get("rows", [])}
            log.info("%s: reusing %d finished spreads", checkpoint, len(done))
    rows = []
    for spread in grid:
        if float(spread) in done:
            rows.append(done[float(spread)])
            continue
        candidate = dataclasses.replace(model, spread=float(spread))
        predictions, _ = predict_trajectories(candidate, train, samples=int(samples),
                                              seed=seed, n_workers=n_workers)
        score = score_trajectories(predictions, train).aggregate()
        rows.append({"spread": float(spread), "energy_score_m": score["energy_score_m"],
                     "coverage_50": score["coverage_50"], "coverage_90": score["coverage_90"],
                     "coverage_xy_50": score["coverage_xy_50"],
                     "coverage_xy_90": score["coverage_xy_90"],
                     "miscalibration_xy": abs(score["coverage_xy_50"] - 0.5)
                     + abs(score["coverage_xy_90"] - 0.9),
                     "reliability_xy": score["reliability_final_xy"],
                     "reliability_xy_max_deviation":
                         score["reliability_max_deviation"]["final_xy"],
                     "position_rmse_m": score["position_rmse_m"]})
        log.info("spread %g: energy score %.4f m, x-y coverage %.3f / %.3f", spread,
                 score["energy_score_m"], score["coverage_xy_50"], score["coverage_xy_90"])
        if checkpoint is not None:
            done[float(spread)] = rows[-1]
            atomic_write_text(Path(checkpoint), json.dumps(
                {"fingerprint": fingerprint, "rows": list(done.values())}))
    from residualsim.residual.uncertainty_fit import rank_key

    best = min(rows, key=rank_key(criterion))
    return best["spread"], rows
