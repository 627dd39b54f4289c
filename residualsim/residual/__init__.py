"""The residual contact learner.

* :mod:`~residualsim.residual.policy`: the mixture-density policy (torch definition, numpy
  evaluation, flat θ) and model directories (:class:`ResidualModel`).
* :mod:`~residualsim.residual.train`: Algorithm 2, gradient-free training on full-trajectory
  error.
* :mod:`~residualsim.residual.state_noise`: initial-state noise of recordings.
* :mod:`~residualsim.residual.impact`: the single-impact residual (planar impacts);
  :mod:`~residualsim.residual.impact_scores`: its predictive distributions and scores.
* :mod:`~residualsim.residual.joint`: engine parameters and residual fitted together.
"""

from __future__ import annotations

from residualsim._lazy import lazy_exports

_EXPORTS = {
    'ImpactContacts': 'residualsim.residual.impact',
    'impact_contacts': 'residualsim.residual.impact',
    'best_impulses': 'residualsim.residual.impact',
    'guarded_correction': 'residualsim.residual.impact',
    'impact_rmse': 'residualsim.residual.impact',
    'GPImpactResidual': 'residualsim.residual.impact',
    'policy_post_velocity': 'residualsim.residual.impact',
    'train_impact_residual': 'residualsim.residual.impact',
    'fit_impact_residual_supervised': 'residualsim.residual.impact',
    'train_joint': 'residualsim.residual.joint',
    'predict_impacts': 'residualsim.residual.impact',
    'impact_table': 'residualsim.residual.impact',
    'handedness_consistent_models': 'residualsim.residual.impact',
    'fit_gp_baselines': 'residualsim.residual.impact',
    'ImpulseMixture': 'residualsim.residual.impact_scores',
    'impact_distribution_table': 'residualsim.residual.impact_scores',
    'fit_impact_spread': 'residualsim.residual.impact_scores',
    'ResidualPolicy': 'residualsim.residual.policy',
    'ResidualModel': 'residualsim.residual.model',
    'NumpyPolicy': 'residualsim.residual.policy',
    'MixtureDensityNetwork': 'residualsim.residual.policy',
    'LOG_SCALE_BOUNDS': 'residualsim.residual.policy',
    'TrainingConfig': 'residualsim.residual.train',
    'TrajectoryLoss': 'residualsim.residual.train',
    'train_residual': 'residualsim.residual.train',
    'run_training': 'residualsim.residual.train',
    'params_sha256': 'residualsim.residual.policy',
}

__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
