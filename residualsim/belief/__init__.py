"""Beliefs through contact, and the planner API.

* :mod:`~residualsim.belief.mixture`: Gaussian-mixture beliefs over tangent coordinates.
* :mod:`~residualsim.belief.propagation`: beliefs from contact to contact, the particle step
  (particles rejected when they penetrate or gain energy).
* :mod:`~residualsim.belief.conjugate`: the conjugate step (sigma points, the residual's
  Gaussians added exactly), with :mod:`~residualsim.belief.reduction` (Runnalls' merging)
  and :mod:`~residualsim.belief.conjugate_rollouts` (its rollouts, in batched worlds).
* :mod:`~residualsim.belief.distance`: the energy distance between two beliefs.
* :mod:`~residualsim.belief.simulator`: :class:`StochasticSimulator`, sampled rollouts.
* :mod:`~residualsim.belief.envs`: gymnasium environments (``residualsim/CubeToss-v0``,
  ``residualsim/ArmLoop-v0``).
* :mod:`~residualsim.belief.plot`: the belief picture (particle clouds after each contact).
"""

from __future__ import annotations

from residualsim._lazy import lazy_exports

_EXPORTS = {
    'belief_plot': 'residualsim.belief.plot',
    'EVENT_COLOURS': 'residualsim.belief.plot',
    'CubeTossEnv': 'residualsim.belief.envs',
    'TossEnv': 'residualsim.belief.envs',
    'ArmLoopEnv': 'residualsim.belief.envs',
    'DEFAULT_CUBE_MODEL': 'residualsim.belief.envs',
    'StateTangent': 'residualsim.belief.mixture',
    'GaussianMixtureBelief': 'residualsim.belief.mixture',
    'BeliefStep': 'residualsim.belief.mixture',
    'PENETRATION_TOLERANCE_M': 'residualsim.belief.mixture',
    'stochastic_step': 'residualsim.belief.propagation',
    'propagate_belief': 'residualsim.belief.propagation',
    'conjugate_step': 'residualsim.belief.conjugate',
    'runnalls_reduce': 'residualsim.belief.reduction',
    'belief_distance': 'residualsim.belief.distance',
    'StochasticSimulator': 'residualsim.belief.simulator',
    'SampledRollouts': 'residualsim.belief.simulator',
    'toss_state': 'residualsim.belief.simulator',
    'INITIAL_STD': 'residualsim.belief.simulator',
    'default_initial_std': 'residualsim.belief.simulator',
}

__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
