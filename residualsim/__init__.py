"""residualsim: residual contact learning for PyBullet.

The package is laid out in wings, one per concept, importing only downward (checked by
``lint-imports``): ``data`` (recordings) → ``evaluation`` (prediction files, metrics) →
``parallel`` (the executor) → ``sim`` (PyBullet scenes, engine, contact math, rollouts) →
``sysid`` (calibration) → ``residual`` (the contact learner) → ``belief`` (beliefs, planner
API, gymnasium) → ``baselines`` → ``experiments`` → ``cli``.

The main names are importable from here (loaded on first use, so ``import residualsim``
stays light). Importing the package registers its gymnasium environments
(``residualsim/CubeToss-v0``, ``residualsim/Toss-v0``, ``residualsim/ArmLoop-v0``; see
:mod:`residualsim.belief.envs`), without importing them.
"""

from __future__ import annotations

from residualsim._lazy import lazy_exports

__version__ = "0.2.0"

_EXPORTS = {
    # data
    "Trajectory": "residualsim.data",
    "PlanarImpacts": "residualsim.data",
    "load_trajectories": "residualsim.data",
    "load_impacts": "residualsim.data",
    "split_ids": "residualsim.data",
    # evaluation
    "TrajectoryPredictions": "residualsim.evaluation",
    "ImpactPredictions": "residualsim.evaluation",
    "load_predictions": "residualsim.evaluation",
    "save_predictions": "residualsim.evaluation",
    "score_trajectories": "residualsim.evaluation",
    "score_impacts": "residualsim.evaluation",
    # parallel
    "parallel_backend": "residualsim.parallel",
    "ShardedWorkers": "residualsim.parallel",
    # sim
    "Engine": "residualsim.sim.engine",
    "ContactEvent": "residualsim.sim.engine",
    "EngineParams": "residualsim.sim.scenes",
    "EngineSettings": "residualsim.sim.scenes",
    "make_scene": "residualsim.sim.scenes",
    "simulate_trajectories": "residualsim.sim.rollout",
    "simulate_impacts": "residualsim.sim.rollout",
    "predict_trajectories": "residualsim.sim.rollout",
    "synthesize_tosses": "residualsim.sim.synthesize",
    # sysid
    "calibrate": "residualsim.sysid.calibrate",
    "load_calibration": "residualsim.sysid.calibration_file",
    "identify_stiffness": "residualsim.sysid.loop_stiffness",
    # residual
    "ResidualPolicy": "residualsim.residual.policy",
    "ResidualModel": "residualsim.residual.model",
    "run_training": "residualsim.residual.train",
    # belief
    "StochasticSimulator": "residualsim.belief.simulator",
    "SampledRollouts": "residualsim.belief.simulator",
    "toss_state": "residualsim.belief.simulator",
    "GaussianMixtureBelief": "residualsim.belief.propagation",
    "propagate_belief": "residualsim.belief.propagation",
    # errors
    "ResidualSimError": "residualsim.errors",
}

__all__ = ["__version__", *_EXPORTS]


def _register_environments() -> None:
    try:
        from gymnasium.envs.registration import register, registry
    except ImportError:  # gymnasium is a dependency, but the physics work without it
        return
    for env_id, entry_point in (("residualsim/CubeToss-v0", "residualsim.belief.envs:CubeTossEnv"),
                                ("residualsim/Toss-v0", "residualsim.belief.envs:TossEnv"),
                                ("residualsim/ArmLoop-v0", "residualsim.belief.envs:ArmLoopEnv")):
        if env_id not in registry:
            register(id=env_id, entry_point=entry_point)


_register_environments()


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
