"""Complementarity-constrained identification (MPEC; Berard & Trinkle 2008): states, contact
forces and contact parameters estimated jointly from recordings, with the time-stepping
contact model as constraints and no simulator in the loop (CasADi + IPOPT).

* :mod:`~residualsim.sysid.mpec.relaxation`: the generic Scholtes relaxation driven to zero.
* :mod:`~residualsim.sysid.mpec.particles`: point masses on a floor (exact forward
  simulator, one μ per particle); :mod:`~residualsim.sysid.mpec.particle_filter`: the
  bootstrap particle filter it is compared with.
* :mod:`~residualsim.sysid.mpec.impacts`: single planar impacts (MCube ellipse), μ and a
  Newton restitution e.
* :mod:`~residualsim.sysid.mpec.cube`: 3D tosses of a rigid body (the cube, or a scene
  file's single-link object: :mod:`~residualsim.sysid.mpec.body`), windows around contact
  events, each solved on its own (in parallel) and combined by weighted medians.
* :mod:`~residualsim.sysid.mpec.calibration`: ``calibrate --method mpec`` (the summary
  other stages read).
"""

from __future__ import annotations

from residualsim._lazy import lazy_exports

_EXPORTS = {
    "Program": "residualsim.sysid.mpec.relaxation",
    "RelaxationResult": "residualsim.sysid.mpec.relaxation",
    "SolveRecord": "residualsim.sysid.mpec.relaxation",
    "DEFAULT_TAUS": "residualsim.sysid.mpec.relaxation",
    "lcp_step": "residualsim.sysid.mpec.particles",
    "particle_step": "residualsim.sysid.mpec.particles",
    "simulate_particles": "residualsim.sysid.mpec.particles",
    "ParticleRecording": "residualsim.sysid.mpec.particles",
    "ParticleEstimate": "residualsim.sysid.mpec.particles",
    "make_particle_recording": "residualsim.sysid.mpec.particles",
    "identify_particles": "residualsim.sysid.mpec.particles",
    "filter_mu": "residualsim.sysid.mpec.particle_filter",
    "FilterEstimate": "residualsim.sysid.mpec.particle_filter",
    "ImpactEstimate": "residualsim.sysid.mpec.impacts",
    "identify_impacts": "residualsim.sysid.mpec.impacts",
    "CubeEstimate": "residualsim.sysid.mpec.cube",
    "contact_windows": "residualsim.sysid.mpec.cube",
    "identify_tosses": "residualsim.sysid.mpec.cube",
    "calibrate_mpec": "residualsim.sysid.mpec.calibration",
    "MPEC_FITTED": "residualsim.sysid.mpec.calibration",
    "MPEC_KEPT": "residualsim.sysid.mpec.calibration",
    "MPEC_SCENES": "residualsim.sysid.mpec.calibration",
    "WindowEstimate": "residualsim.sysid.mpec.cube",
    "weighted_median": "residualsim.sysid.mpec.cube",
    "RigidBody": "residualsim.sysid.mpec.body",
    "cube_body": "residualsim.sysid.mpec.body",
    "body_from_scene": "residualsim.sysid.mpec.body",
    "urdf_contact_points": "residualsim.sysid.mpec.body",
}

__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
