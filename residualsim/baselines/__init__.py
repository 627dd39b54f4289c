"""Baselines the residual learner is compared with (not on the product path).

* :mod:`~residualsim.baselines.recorded_events`: contact events segmented from recordings.
* :mod:`~residualsim.baselines.event_gp`: a Gaussian process on recorded events.
* :mod:`~residualsim.baselines.sian`: a SIAN-like residual.
"""

from __future__ import annotations

from residualsim._lazy import lazy_exports

_EXPORTS = {
    'EventGPResidual': 'residualsim.baselines.event_gp',
    'JUMP_THRESHOLD_MPS': 'residualsim.baselines.recorded_events',
    'JUMP_EDGE_MPS': 'residualsim.baselines.recorded_events',
    'EXTRA_STEPS': 'residualsim.baselines.recorded_events',
    'MIN_SAMPLES': 'residualsim.baselines.recorded_events',
    'REST_SPEED_MPS': 'residualsim.baselines.recorded_events',
    'REST_SAMPLES': 'residualsim.baselines.recorded_events',
    'TABLE_OFFSET_TOLERANCE_M': 'residualsim.baselines.recorded_events',
    'LIFT_TOLERANCE_M': 'residualsim.baselines.recorded_events',
    'RecordedEvent': 'residualsim.baselines.recorded_events',
    'velocity_jumps': 'residualsim.baselines.recorded_events',
    'contact_runs': 'residualsim.baselines.recorded_events',
    'table_offset': 'residualsim.baselines.recorded_events',
    'segment_events': 'residualsim.baselines.recorded_events',
    'best_impulse_3d': 'residualsim.baselines.recorded_events',
    'SianResidual': 'residualsim.baselines.sian',
    'one_step_targets': 'residualsim.baselines.sian',
    'state_features': 'residualsim.baselines.sian',
    'tangent_difference': 'residualsim.baselines.sian',
    'apply_tangent': 'residualsim.baselines.sian',
    'N_STATE_FEATURES': 'residualsim.baselines.sian',
    'N_INPUTS': 'residualsim.baselines.sian',
    'N_OUTPUTS': 'residualsim.baselines.sian',
    'MIN_TRAINING_PAIRS': 'residualsim.baselines.sian',
    'OUTPUT_RESOLUTION': 'residualsim.baselines.sian',
}

__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
