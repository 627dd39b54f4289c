"""Evaluation: what a prediction is and how it is scored against a recording.

* :mod:`~residualsim.evaluation.predictions`: the prediction-file contract (NPZ; positions m
  and w-x-y-z quaternions in the world frame, or post-impact velocities), load and save.
* :mod:`~residualsim.evaluation.metrics`: position RMSE, rotation error, the published
  peers' metric, impact RMSE; :mod:`~residualsim.evaluation.sample_scores`: the energy
  score, the CRPS, the sample regions of an ensemble and the reliability curve;
  :mod:`~residualsim.evaluation.plots`: the reliability plot;
  :mod:`~residualsim.evaluation.log_scores`: the log score of a Gaussian mixture.

No physics here: calibration and training score their held-out splits with the same
functions the ``score`` command uses.
"""

from __future__ import annotations

from residualsim.evaluation.metrics import (ImpactScore, TrajectoryScore, format_table,
                                           score_impacts, score_trajectories)
from residualsim.evaluation.log_scores import gaussian_mixture_log_score
from residualsim.evaluation.plots import reliability_plot
from residualsim.evaluation.sample_scores import (COVERAGE_LEVELS, RELIABILITY_LEVELS,
                                                 crps_ensemble, energy_score,
                                                 region_membership, reliability_curve)
from residualsim.evaluation.predictions import (FORMAT_NAME, FORMAT_VERSION, ImpactPredictions,
                                               TrajectoryPrediction, TrajectoryPredictions,
                                               load_predictions, recorded_data,
                                               save_predictions)

__all__ = ["TrajectoryPredictions", "ImpactPredictions", "TrajectoryPrediction",
           "load_predictions", "save_predictions", "recorded_data", "FORMAT_NAME", "FORMAT_VERSION",
           "score_trajectories", "score_impacts", "TrajectoryScore", "ImpactScore",
           "format_table", "energy_score", "region_membership", "COVERAGE_LEVELS",
           "RELIABILITY_LEVELS", "crps_ensemble", "reliability_curve", "reliability_plot",
           "gaussian_mixture_log_score"]
