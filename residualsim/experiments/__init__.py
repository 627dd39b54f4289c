"""Experiments: the comparisons a researcher runs before adopting a model.

* :mod:`~residualsim.experiments.learning_curve`: error against the number of training
  recordings, for the residual, the baselines and engine calibration.
* :mod:`~residualsim.experiments.evaluate`: the ``evaluate`` command's tables and curves.
* :mod:`~residualsim.experiments.bench`: benchmarks that print ratios against a baseline
  measured in the same run.
* :mod:`~residualsim.experiments.bench_mpec`: the MPEC identification's seed experiments on
  synthetic particles, against a particle filter.
* :mod:`~residualsim.experiments.demo`: the ``demo`` command on the bundled real tosses.
* :mod:`~residualsim.experiments.uncertainty`: where a model's predictive uncertainty comes
  from: deterministic, initial-state noise only, state noise + residual (``uncertainty``).
"""

from __future__ import annotations

from residualsim._lazy import lazy_exports

_EXPORTS = {
    'bench_engine_overhead': 'residualsim.experiments.bench',
    'bench_workers': 'residualsim.experiments.bench',
    'bench_calibration': 'residualsim.experiments.bench_calibration',
    'bench_residual': 'residualsim.experiments.bench',
    'bench_executors': 'residualsim.experiments.bench',
    'bench_identify_loop': 'residualsim.experiments.bench',
    'bench_beliefs': 'residualsim.experiments.bench_beliefs',
    'bench_engine_job': 'residualsim.experiments.bench',
    'bench_calibration_job': 'residualsim.experiments.bench_calibration',
    'format_engine_report': 'residualsim.experiments.bench',
    'format_calibration_report': 'residualsim.experiments.bench_calibration',
    'bench_mpec': 'residualsim.experiments.bench_mpec',
    'format_mpec_report': 'residualsim.experiments.bench_mpec',
    'evaluate_impacts': 'residualsim.experiments.evaluate',
    'evaluate_impact_scores': 'residualsim.experiments.evaluate',
    'evaluate_curve': 'residualsim.experiments.evaluate',
    'impact_markdown': 'residualsim.experiments.evaluate',
    'CurveConfig': 'residualsim.experiments.learning_curve',
    'SIZES': 'residualsim.experiments.learning_curve',
    'METHODS': 'residualsim.experiments.learning_curve',
    'DEFAULT_METHODS': 'residualsim.experiments.learning_curve',
    'training_subsets': 'residualsim.experiments.learning_curve',
    'position_rmse': 'residualsim.experiments.learning_curve',
    'run_learning_curve': 'residualsim.experiments.learning_curve',
    'summarize': 'residualsim.experiments.learning_curve',
    'curve_table': 'residualsim.experiments.learning_curve',
    'curve_plot': 'residualsim.experiments.learning_curve',
    'run_demo': 'residualsim.experiments.demo',
    'format_demo': 'residualsim.experiments.demo',
    'DemoResult': 'residualsim.experiments.demo',
    'uncertainty_decomposition': 'residualsim.experiments.uncertainty',
    'format_decomposition': 'residualsim.experiments.uncertainty',
    'decomposition_plot': 'residualsim.experiments.uncertainty',
    'decomposition_ratios': 'residualsim.experiments.uncertainty',
    'decomposition_tables': 'residualsim.experiments.uncertainty',
}

__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
