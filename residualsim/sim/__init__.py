"""Physics: PyBullet scenes from URDF, the engine, contact-frame math and rollouts.

* :mod:`~residualsim.sim.scenes`: the simulated set-ups (cube, planar bodies, arm + loop).
* :mod:`~residualsim.sim.engine`: one DIRECT client, parameters, stepping, contact events.
* :mod:`~residualsim.sim.contact`: contact frames, J, M_c = (J M⁻¹ Jᵀ)⁻¹, v_c, features.
* :mod:`~residualsim.sim.rotations`: w-x-y-z quaternion helpers.
* :mod:`~residualsim.sim.rollout`: single rollouts and the paper's Algorithm 1 (residual
  impulse at each contact event), and their batches over worker pools.
* :mod:`~residualsim.sim.batch`: particles to their first contact event with many copies of
  the body in one world (one step call, one contact query, numpy events).
* :mod:`~residualsim.sim.capi` and :mod:`~residualsim.sim.batch_compiled`: that loop's
  per-copy work compiled (numba over Bullet's C API, ``RESIDUALSIM_COMPILED``).
* :mod:`~residualsim.sim.pool`: worker pools holding one engine each.
* :mod:`~residualsim.sim.synthesize`: synthetic recordings with known truth.
"""

from __future__ import annotations

from residualsim._lazy import lazy_exports

_EXPORTS = {
    'SLIP_TOLERANCE_MPS': 'residualsim.sim.contact',
    'skew': 'residualsim.sim.contact',
    'free_body_mass_matrix': 'residualsim.sim.contact',
    'free_body_point_jacobian': 'residualsim.sim.contact',
    'contact_frame': 'residualsim.sim.contact',
    'ContactModel': 'residualsim.sim.contact',
    'contact_model': 'residualsim.sim.contact',
    'effective_inertia': 'residualsim.sim.contact',
    'contact_features': 'residualsim.sim.contact',
    'unpack_features': 'residualsim.sim.contact',
    'spin_features': 'residualsim.sim.contact',
    'velocity_change': 'residualsim.sim.contact',
    'in_friction_cone': 'residualsim.sim.contact',
    'project_to_friction_cone': 'residualsim.sim.contact',
    'Engine': 'residualsim.sim.engine',
    'ContactEvent': 'residualsim.sim.engine',
    'Rollout': 'residualsim.sim.engine',
    'ContactPoint': 'residualsim.sim.engine',
    'FirstEvents': 'residualsim.sim.batch',
    'first_events': 'residualsim.sim.batch',
    'batched_rollouts': 'residualsim.sim.batch',
    'batch_unsupported': 'residualsim.sim.batch',
    'EngineFactory': 'residualsim.sim.pool',
    'engine_workers': 'residualsim.sim.pool',
    'SimulatedTrajectory': 'residualsim.sim.rollout',
    'simulate_one': 'residualsim.sim.rollout',
    'simulate_trajectories': 'residualsim.sim.rollout',
    'simulation_items': 'residualsim.sim.rollout',
    'recording_settings': 'residualsim.sim.rollout',
    'simulate_impact': 'residualsim.sim.rollout',
    'simulate_impacts': 'residualsim.sim.rollout',
    'impact_settings': 'residualsim.sim.rollout',
    'ContactGuard': 'residualsim.sim.guard',
    'ResidualRollout': 'residualsim.sim.corrector',
    'EventCorrector': 'residualsim.sim.corrector',
    'residual_rollout': 'residualsim.sim.rollout',
    'RolloutRequest': 'residualsim.sim.rollout',
    'trajectory_items': 'residualsim.sim.rollout',
    'item_rollouts': 'residualsim.sim.rollout',
    'interleave': 'residualsim.sim.rollout',
    'residual_errors': 'residualsim.sim.rollout',
    'predict_trajectories': 'residualsim.sim.rollout',
    'residual_trajectories': 'residualsim.sim.rollout',
    'as_rotation': 'residualsim.sim.rotations',
    'as_quat_wxyz': 'residualsim.sim.rotations',
    'quat_multiply': 'residualsim.sim.rotations',
    'quat_relative_rotvec': 'residualsim.sim.rotations',
    'rotvec_to_quat': 'residualsim.sim.rotations',
    'rotate_by_rotvec': 'residualsim.sim.rotations',
    'geodesic_angle': 'residualsim.sim.rotations',
    'sample_toss_states': 'residualsim.sim.synthesize',
    'synthesize_tosses': 'residualsim.sim.synthesize',
    'write_toss_set': 'residualsim.sim.synthesize',
    'synthesize_arm_loop': 'residualsim.sim.synthesize',
    'arm_loop_reference': 'residualsim.sim.synthesize',
    'ARM_LOOP_WAYPOINTS': 'residualsim.sim.synthesize',
    'SCENES': 'residualsim.sim.scenes',
    'make_scene': 'residualsim.sim.scenes',
    'Scene': 'residualsim.sim.scenes',
    'EngineSettings': 'residualsim.sim.scenes',
    'EngineParams': 'residualsim.sim.scenes',
    'ParamSpec': 'residualsim.sim.scenes',
    'ENGINE_PARAMS': 'residualsim.sim.scenes',
    'parse_params': 'residualsim.sim.scenes',
    'CubeScene': 'residualsim.sim.scenes',
    'PlanarScene': 'residualsim.sim.scenes',
    'PlanarEllipseScene': 'residualsim.sim.scenes',
    'PlanarDiceScene': 'residualsim.sim.scenes',
    'ASSETS_DIR': 'residualsim.sim.scenes',
}

__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
