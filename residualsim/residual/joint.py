"""Engine parameters and residual policy fitted together (joint inference).

The residual-learning paper notes that the optimisation of Algorithm 2 holds as well for the
engine's parameters. :func:`train_joint` runs one nevergrad search over the concatenation
(z, θ): z the engine parameters of a :class:`~residualsim.sysid.paramspace.ParamSpace` in unit
coordinates (folded back into [0, 1] by reflection), θ the policy's weights, with the loss of
:mod:`residualsim.residual.train` (per-recording pose RMSE of the mean prediction, metres).
It starts where calibration starts (z = 0.5) with no correction (θ from
:func:`~residualsim.residual.train.scaled_policy`); every ``validate_every``
evaluations the best candidate is scored on the validation split and the best validation loss
is the result (early stopping after ``patience`` checks without improvement). Each candidate
has its own engine parameters, so each is one call to the workers.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from residualsim.data.trajectory import Trajectory
from residualsim.errors import DataError
from residualsim.residual.model import ResidualModel
from residualsim.residual.train import (TrainingConfig, TrajectoryLoss, keep_if_better,
                                        scaled_policy, split_items)
from residualsim.sim.pool import engine_workers
from residualsim.sim.rollout import recording_settings
from residualsim.sim.scenes import make_scene
from residualsim.sysid.paramspace import ParamSpace

__all__ = ["train_joint"]


def train_joint(scene: str, train: Mapping[str, Trajectory],
                validation: Mapping[str, Trajectory], space: ParamSpace, *, substeps: int,
                config: TrainingConfig = TrainingConfig(), n_workers: int = 1
                ) -> tuple[ResidualModel, dict[str, Any]]:
    """Fit ``space``'s engine parameters and a residual policy together on ``train``.

    The policy's feature scaling comes from the engine's events at the start point (the
    centre of ``space``). Returns the model (engine parameters and policy; not saved) and
    its figures: validation position RMSE (m) and rotation RMS (deg) of the chosen candidate,
    the start's validation position RMSE, the chosen engine parameters, evaluations
    (``chosen_evaluation`` 0: the start was kept).
    """
    from residualsim.sysid.optimize import minimize

    started = time.perf_counter()
    if not train or not validation:
        raise DataError("joint fitting needs training and validation recordings")
    layout = make_scene(scene)
    settings = recording_settings(scene, {**train, **validation}, substeps)
    d = space.ndim

    def split(vector: np.ndarray):
        z = space.reflect(np.asarray(vector[:d]))
        return space.engine_params(space.from_unit(z)), np.asarray(vector[d:])

    with engine_workers(scene, split_items(scene, train, validation), n_workers,
                        settings) as workers:
        start_params = space.engine_params(space.from_unit(np.full(d, 0.5)))
        policy = scaled_policy(workers, scene, start_params, config)
        init = np.concatenate([np.full(d, 0.5), policy.get_flat()])

        def loss_of(vector: np.ndarray) -> TrajectoryLoss:
            params, _ = split(vector)
            return TrajectoryLoss(workers, policy, params, layout.radius_of_gyration_m, config)

        def loss(candidates: np.ndarray) -> np.ndarray:
            return np.array([loss_of(v)([split(v)[1]])[0] for v in candidates])

        def validate(vector: np.ndarray) -> dict:
            return loss_of(vector).validation(split(vector)[1])

        start_figures = validate(init)

        def after_batch(result) -> bool:
            state = result.state
            if result.evaluations < state.get("next_check", config.validate_every):
                return False
            state["next_check"] = result.evaluations + config.validate_every
            figures = {**validate(result.candidates[result.best_index]),
                       "index": result.best_index}
            return keep_if_better(state, figures, config.patience)

        result = minimize(loss, init, budget=config.budget, sigma=config.sigma,
                          optimizer=config.optimizer, batch_size=config.batch_size,
                          seed=config.seed, after_batch=after_batch, desc="joint")
        chosen = result.state.get("chosen")
        if chosen is None or chosen["loss"] >= start_figures["loss"]:
            chosen, vector = {**start_figures, "index": -1}, init
        else:
            vector = result.candidates[chosen["index"]]
        params, theta = split(vector)
        policy.set_flat(theta)
    figures = {"validation_rmse_m": chosen["position_rmse_m"],
               "validation_rotation_deg": chosen["rotation_rms_deg"],
               "start_validation_rmse_m": start_figures["position_rmse_m"],
               "params": params.as_json(), "evaluations": result.evaluations,
               "chosen_evaluation": int(chosen["index"]) + 1,
               "stopped_early": result.stopped_early,
               "seconds": time.perf_counter() - started}
    model = ResidualModel(scene=scene, policy=policy, params=params, dt_s=settings.dt_s,
                          substeps=settings.substeps, guard=config.guard,
                          info={"kind": "joint", "figures": figures, "n_train": len(train)})
    return model, figures
