"""The training loss of the mean objective (Algorithm 2 of the residual-learning paper).

L(θ) = mean_i mean_s sqrt( mean_t ‖p_i(t) − p̂_is(t)‖² + w² r_g² angle_is(t)² )   [m]:
the per-recording pose RMSE of the rollouts of candidate θ (positions in metres in the
world frame, the geodesic rotation angle in radians weighted by the radius of gyration r_g
and ``rotation_weight`` w), evaluated by persistent workers
(:class:`~residualsim.parallel.workers.ShardedWorkers`) over the recordings' items. The
distribution objective, the energy score of sampled trajectories, is
:class:`~residualsim.residual.energy_loss.EnergyLoss`, built on this one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from residualsim.parallel import ShardedWorkers
from residualsim.residual.policy import ResidualPolicy
from residualsim.sim.rollout import RolloutRequest, residual_errors
from residualsim.sim.scenes import EngineParams

__all__ = ["TrajectoryLoss", "keep_if_better"]


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
    config : TrainingConfig
        Its ``samples``, ``seed``, ``guard`` and ``rotation_weight``.
    sustained : CoefficientResidual, optional
        The sustained-contact part, whose weights follow the event policy's in θ.
    """

    def __init__(self, workers: ShardedWorkers, policy: ResidualPolicy, params: EngineParams,
                 radius_m: float, config, sustained=None) -> None:
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

    def start(self, weights: np.ndarray) -> np.ndarray:
        """θ of the starting point from the networks' starting weights (here the same)."""
        return weights

    def weights(self, theta: np.ndarray) -> np.ndarray:
        """The networks' weights in θ (here all of it)."""
        return theta

    def trained_state_noise(self, theta: np.ndarray):
        """The state noise θ samples with: none is trained by this loss."""
        return None

    def reference(self, start: np.ndarray, engine: dict[str, float]) -> dict[str, float]:
        """Validation figures a candidate must beat to be kept: the starting point's, which
        for the mean objective are the engine's (a fresh policy's mean is no correction)."""
        return engine

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
