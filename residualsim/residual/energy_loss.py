"""The distribution objective: train the residual on the energy score of sampled trajectories.

``train --objective energy`` (issue 47) judges a candidate θ as a stochastic simulator:
for every training recording i it rolls out S sampled trajectories (each from the recorded
start with velocities drawn from the state noise, then a residual impulse drawn from the
mixture at every contact event, then the recordings' pose noise added to the positions,
when the model has one) and scores them against the recording with the energy score along
the trajectory,

    L(θ) = mean_i mean_t ES( {z_is(t)}_s , z_i(t) )   [m],   t = 1 .. T_i - 1,

where z = :func:`~residualsim.evaluation.sample_scores.pose_points` embeds a pose
(position m, world frame; rotation weighted by the radius of gyration r_g and
``rotation_weight``) in R^12 so that distances are pose distances in metres. The energy
score is a proper scoring rule: it is lowest in expectation for the distribution the
recordings come from, so it trains the mixture's means, scales and weights together, and
the spread is learned where contact makes it instead of one scalar fitted afterwards.

θ is the networks' weights followed, when there is state noise, by the log of its factor
(the width of the start, trained with the rest); with ``energy_params="spread"`` (``train
--energy-params spread``) only the head's rows (weights and biases) of the mixture's
log-scales and logits, the means and hidden layers held at the start's (``free``).
Sample-efficient by construction:

* **Common random numbers**: sample s of item i draws from the same stream for every
  candidate (:func:`sample_stream`), so L is a deterministic function of θ.
* **Antithetic pairs**: samples 2j and 2j + 1 share a stream, the second with every normal
  negated and every uniform u taken as 1 - u (:class:`Antithetic`), which lowers the
  variance of the accuracy term; the spread term uses only independent pairs
  (:func:`~residualsim.evaluation.sample_scores.antithetic_energy_score`, the fair form,
  unbiased for the distribution's energy score).
* **Coarse to fine**: training uses ``config.samples`` (default :data:`ENERGY_SAMPLES`),
  the validation checks that choose the result :data:`VALIDATION_SAMPLES`.

Validation figures hold the sampled energy score (``loss``) and, for the record, the
mean-mode pose errors (``position_rmse_m``, ``rotation_rms_deg``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from residualsim.evaluation.sample_scores import antithetic_energy_score, pose_points
from residualsim.residual.trajectory_loss import TrajectoryLoss
from residualsim.sim.rollout import ContactGuard, residual_rollout
from residualsim.sim.scenes import EngineParams

__all__ = ["ENERGY_SAMPLES", "VALIDATION_SAMPLES", "FACTOR_BOUNDS", "Antithetic",
           "sample_stream", "EnergyRequest", "energy_scores", "EnergyLoss"]

#: Sampled trajectories per recording and candidate in training (four antithetic pairs).
ENERGY_SAMPLES = 8
#: Sampled trajectories per recording in the validation checks.
VALIDATION_SAMPLES = 16
#: The trained state-noise factor is kept within these bounds (θ holds its log).
FACTOR_BOUNDS = (0.05, 20.0)


class Antithetic:
    """A generator's antithetic twin: the same stream with every standard normal negated
    and every uniform u in [0, 1) returned as 1 - u (in (0, 1]). Offers what the samplers
    draw with: ``random``, ``standard_normal`` and ``normal``."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng

    def random(self, size=None):
        return 1.0 - self._rng.random(size)

    def standard_normal(self, size=None):
        return -self._rng.standard_normal(size)

    def normal(self, loc=0.0, scale=1.0, size=None):
        return np.asarray(loc) - np.asarray(scale) * self._rng.standard_normal(size)


def sample_stream(seed: int, index: int, sample: int, *extra: int):
    """The random stream of sample ``sample`` of item ``index``: pair ``sample // 2``'s
    generator ``default_rng([seed, index, sample // 2, *extra])``, antithetic for odd
    samples."""
    rng = np.random.default_rng([int(seed), int(index), int(sample) // 2, *extra])
    return Antithetic(rng) if sample % 2 else rng


@dataclasses.dataclass(frozen=True)
class EnergyRequest:
    """What workers roll out and score for each of their items.

    ``policies`` one NumpyPolicy (or None: the engine alone) per candidate and
    ``state_noises`` one StateNoise (or None) per candidate; ``samples`` S (even, >= 4);
    ``observation_noise`` an ObservationNoise or None; ``radius_m`` r_g and
    ``rotation_weight`` w of the pose embedding; ``split`` restricts the items.
    """

    params: EngineParams
    policies: tuple
    state_noises: tuple
    samples: int
    radius_m: float
    rotation_weight: float = 1.0
    seed: int = 0
    guard: ContactGuard = ContactGuard()
    split: str | None = None
    observation_noise: Any = None
    planar: bool = False


def energy_scores(engine, item: tuple, request: EnergyRequest) -> np.ndarray | None:
    """Worker function: (C candidates, 7) per item: the energy score along the trajectory
    (m, pose points), that of the final position (m), then summed over the samples: events,
    energy clamps, normal clamps, engine energy gains, and the deepest penetration (m).
    None for an item outside the request's split."""
    index, split, _, initial_state, positions, quat = item
    if request.split is not None and split != request.split:
        return None
    if engine.params != request.params:
        engine.set_params(request.params)
    n_steps = len(positions) - 1
    truth = pose_points(positions[1:], quat[1:], request.radius_m, request.rotation_weight)
    rows = []
    for policy, noise in zip(request.policies, request.state_noises):
        points, finals, stats = [], [], np.zeros(5)
        for s in range(request.samples):
            rng = sample_stream(request.seed, index, s)
            start = initial_state if noise is None else noise.perturb(initial_state, rng)
            run = residual_rollout(engine, start, n_steps, policy, rng, request.guard)
            moved = run.positions_m
            if request.observation_noise is not None:
                moved = request.observation_noise.apply(
                    moved, sample_stream(request.seed, index, s, 1), request.planar)
            points.append(pose_points(moved[1:], run.quat_wxyz[1:], request.radius_m,
                                      request.rotation_weight))
            finals.append(moved[-1])
            stats += (run.n_events, run.n_energy_clamped, run.n_normal_clamped,
                      run.n_engine_energy_gain, 0.0)
            stats[4] = max(stats[4], run.max_penetration_m)
        along = antithetic_energy_score(np.stack(points, axis=1), truth).mean()
        final = antithetic_energy_score(np.stack(finals)[None], positions[-1][None])[0]
        rows.append((along, final, *stats))
    return np.array(rows, dtype=np.float64)


class EnergyLoss(TrajectoryLoss):
    """L(θ) of the module docstring for batches of candidates, evaluated by workers.

    As :class:`~residualsim.residual.trajectory_loss.TrajectoryLoss`, plus
    ``state_noise`` (a StateNoise whose factor θ's last entry trains, as its log; None:
    samples start from the recorded states and θ is the weights alone),
    ``observation_noise`` (an ObservationNoise added to every sample, or None),
    ``planar`` (the scene's, for the observation noise) and ``free`` (positions in the
    networks' weight vector that θ holds, e.g. the head's scale and logit rows of
    :meth:`~residualsim.residual.policy.ResidualPolicy.flat_indices`; the others stay at
    the start's values; None: all of them).
    """

    def __init__(self, workers, policy, params, radius_m: float, config, sustained=None, *,
                 state_noise=None, observation_noise=None, planar: bool = False,
                 free: np.ndarray | None = None) -> None:
        super().__init__(workers, policy, params, radius_m, config, sustained)
        self.state_noise, self.observation_noise = state_noise, observation_noise
        self.planar = bool(planar)
        self.free = None if free is None else np.asarray(free, dtype=int)
        self._held: np.ndarray | None = None

    def start(self, weights: np.ndarray) -> np.ndarray:
        """θ at the start: the starting weights (those in ``free``; the rest are held at
        these values), then log factor 0 (the estimate's width)."""
        if self.free is not None:
            self._held = np.array(weights, dtype=np.float64)
            weights = self._held[self.free]
        return weights if self.state_noise is None else np.append(weights, 0.0)

    def weights(self, theta: np.ndarray) -> np.ndarray:
        """The networks' full weight vector of θ."""
        trained = theta if self.state_noise is None else theta[:-1]
        if self.free is None:
            return trained
        if self._held is None:
            raise RuntimeError("EnergyLoss.start() sets the held weights before weights()")
        full = self._held.copy()
        full[self.free] = trained
        return full

    def trained_state_noise(self, theta: np.ndarray | None):
        """The state noise with the factor θ holds (clipped to :data:`FACTOR_BOUNDS`); the
        estimate at factor 1 for ``theta=None`` (the engine alone)."""
        if self.state_noise is None:
            return None
        factor = 1.0 if theta is None else float(np.clip(
            math.exp(min(float(theta[-1]), 50.0)), *FACTOR_BOUNDS))
        return dataclasses.replace(self.state_noise, factor=factor)

    def rollout_policy(self, theta: np.ndarray):
        return super().rollout_policy(self.weights(theta))

    def scores(self, thetas: Sequence[np.ndarray] | None, split: str, samples: int
               ) -> np.ndarray:
        """Per-item scores (n_items, C, 7) (see :func:`energy_scores`); ``thetas=None``:
        the engine alone, with the state noise at the estimate's width."""
        if thetas is None:
            policies, noises = (None,), (self.trained_state_noise(None),)
        else:
            policies = tuple(self.rollout_policy(theta) for theta in thetas)
            noises = tuple(self.trained_state_noise(theta) for theta in thetas)
        request = EnergyRequest(
            params=self.params, policies=policies, state_noises=noises, samples=samples,
            radius_m=self.radius_m, rotation_weight=self.config.rotation_weight,
            seed=self.config.seed, guard=self.config.guard, split=split,
            observation_noise=self.observation_noise, planar=self.planar)
        table = np.array([r for r in self.workers.map(energy_scores, request)
                          if r is not None])
        self.counts += [*table[..., 2:6].sum(axis=(0, 1)), table.shape[0] * table.shape[1]
                        * samples]
        self.deepest_m = max(self.deepest_m, float(table[..., 6].max(initial=0.0)))
        return table

    def __call__(self, thetas: np.ndarray) -> np.ndarray:
        """L(θ) (C,) for candidates (C, n_parameters), metres."""
        return self.scores(thetas, "train", self.config.samples)[..., 0].mean(axis=0)

    def validation(self, theta: np.ndarray | None) -> dict[str, float]:
        """Validation figures of one θ (None: the engine alone with the state noise):
        ``loss`` the sampled energy score along the trajectory (m),
        ``final_energy_score_m`` that of the final position, and the mean-mode
        ``position_rmse_m`` and ``rotation_rms_deg``."""
        table = self.scores(None if theta is None else [theta], "validation",
                            VALIDATION_SAMPLES)
        figures = super().validation(theta)
        mean_mode = {k: figures[k] for k in ("position_rmse_m", "rotation_rms_deg")}
        return {"loss": float(table[..., 0].mean()),
                "final_energy_score_m": float(table[..., 1].mean()), **mean_mode}

    def reference(self, start: np.ndarray, engine: dict[str, float]) -> dict[str, float]:
        """The starting point's validation figures (the engine's mean, the fresh mixture's
        initial scales, the estimated state noise)."""
        return self.validation(start)


def energy_start(scene: str, params: EngineParams, substeps: int, train: dict, guard,
                 observation_noise: bool, n_workers: int = 1) -> tuple[EngineParams, dict, dict]:
    """What the energy objective needs before training, from the training recordings:
    (engine parameters, with the table height when ``observation_noise``; the keyword
    arguments ``state_noise`` and ``observation_noise`` of
    :func:`~residualsim.residual.train.train_residual`; a record for the model's info).

    The state noise is :func:`~residualsim.residual.uncertainty_fit.training_state_noise`'s
    estimate (its factor then trained); with ``observation_noise`` the table height and
    pose noise come from the recordings' rest phases
    (:func:`~residualsim.residual.observation_noise.estimate_observation_noise`), both
    with the engine alone (a fresh policy, which corrects nothing)."""
    from residualsim.residual.observation_noise import estimate_observation_noise
    from residualsim.residual.policy import ResidualPolicy
    from residualsim.residual.model import ResidualModel
    from residualsim.residual.uncertainty_fit import training_state_noise
    from residualsim.sim.rollout import recording_settings
    from residualsim.sim.scenes import make_scene

    settings = recording_settings(scene, train, substeps)
    engine = ResidualModel(scene=scene, policy=ResidualPolicy.for_scene(make_scene(scene).planar),
                           params=params, dt_s=settings.dt_s, substeps=settings.substeps,
                           guard=guard)
    record: dict[str, Any] = {}
    observed = None
    if observation_noise:
        found, observed = estimate_observation_noise(engine, train, n_workers)
        params = params.replace(table_height_m=found.table_height_m)
        engine = dataclasses.replace(engine, params=params)
        record["ground"] = {**found.as_json(), "recordings": len(train)}
    noise, estimate, reason = training_state_noise(engine, train, n_workers)
    record.update(state_noise_estimate=estimate, state_noise_missing_because=reason)
    return params, {"state_noise": noise, "observation_noise": observed}, record
