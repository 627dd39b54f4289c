"""System identification: engine parameters from recorded trajectories.

* :mod:`~residualsim.sysid.paramspace`: which parameters, bounds, priors, transforms.
* :mod:`~residualsim.sysid.likelihood`: trajectory and impact likelihoods over workers;
  :mod:`~residualsim.sysid.weighting`: how much each trajectory weighs (effective
  independent residuals ν_i, pilot fit).
* :mod:`~residualsim.sysid.mcmc`, :mod:`~residualsim.sysid.posterior`: Metropolis-Hastings
  and its posterior (R-hat, ESS); :mod:`~residualsim.sysid.plots`: corner and trace plots.
* :mod:`~residualsim.sysid.optimize`: nevergrad point estimates.
* :mod:`~residualsim.sysid.flight_info`: how well each recording's free flight determines
  an object's body and joints (``data info --body``).
* :mod:`~residualsim.sysid.calibrate`: the ``calibrate`` workflow (output directory, resume);
  :mod:`~residualsim.sysid.sbc`: its simulation-based calibration (``check-calibration``).
* :mod:`~residualsim.sysid.loop_stiffness`: the arm + loop stiffness (least squares,
  gradient, homotopy, posterior).
* :mod:`~residualsim.sysid.mpec`: complementarity-constrained identification (MPEC): contact
  parameters, states and forces jointly from recordings, no simulator in the loop.
"""

from __future__ import annotations

from residualsim._lazy import lazy_exports

_EXPORTS = {
    'calibrate': 'residualsim.sysid.calibrate',
    'simulation_based_calibration': 'residualsim.sysid.sbc',
    'point_estimate': 'residualsim.sysid.optimize',
    'Calibration': 'residualsim.sysid.calibration_file',
    'load_calibration': 'residualsim.sysid.calibration_file',
    'is_calibration': 'residualsim.sysid.calibration_file',
    'SUMMARY_FORMAT': 'residualsim.sysid.calibration_file',
    'CUBE_CALIBRATED': 'residualsim.sysid.calibrate',
    'CUBE_CALIBRATION_BOUNDS': 'residualsim.sysid.calibrate',
    'TrajectoryLikelihood': 'residualsim.sysid.likelihood',
    'ImpactLikelihood': 'residualsim.sysid.likelihood',
    'ERROR_FLOOR': 'residualsim.sysid.likelihood',
    'effective_count': 'residualsim.sysid.weighting',
    'pilot_reference': 'residualsim.sysid.weighting',
    'ReplayConfig': 'residualsim.sysid.loop_stiffness',
    'LoopReplay': 'residualsim.sysid.loop_stiffness',
    'RolloutPool': 'residualsim.sysid.loop_stiffness',
    'Identification': 'residualsim.sysid.loop_stiffness',
    'identify_stiffness': 'residualsim.sysid.loop_stiffness',
    'METHODS': 'residualsim.sysid.loop_stiffness',
    'HOMOTOPY_LAMBDAS': 'residualsim.sysid.loop_stiffness',
    'KAPPA_BOUNDS': 'residualsim.sysid.loop_stiffness',
    'stable_kappa_max': 'residualsim.sysid.loop_stiffness',
    'MetropolisHastings': 'residualsim.sysid.mcmc',
    'CHECKPOINT_FORMAT': 'residualsim.sysid.mcmc',
    'as_generator': 'residualsim.sysid.mcmc',
    'check_fingerprint': 'residualsim.sysid.mcmc',
    'minimize': 'residualsim.sysid.optimize',
    'OptimizationResult': 'residualsim.sysid.optimize',
    'FAILED_LOSS': 'residualsim.sysid.optimize',
    'Uniform': 'residualsim.sysid.paramspace',
    'LogUniform': 'residualsim.sysid.paramspace',
    'Normal': 'residualsim.sysid.paramspace',
    'Prior': 'residualsim.sysid.paramspace',
    'Parameter': 'residualsim.sysid.paramspace',
    'ParamSpace': 'residualsim.sysid.paramspace',
    'CALIBRATION_BOUNDS': 'residualsim.sysid.paramspace',
    'parse_prior': 'residualsim.sysid.paramspace',
    'corner_plot': 'residualsim.sysid.plots',
    'trace_plot': 'residualsim.sysid.plots',
    'Posterior': 'residualsim.sysid.posterior',
    'POSTERIOR_FORMAT': 'residualsim.sysid.posterior',
    'identify_particles': 'residualsim.sysid.mpec',
    'make_particle_recording': 'residualsim.sysid.mpec',
    'filter_mu': 'residualsim.sysid.mpec',
    'identify_impacts': 'residualsim.sysid.mpec',
    'identify_tosses': 'residualsim.sysid.mpec',
    'calibrate_mpec': 'residualsim.sysid.mpec',
}

__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
