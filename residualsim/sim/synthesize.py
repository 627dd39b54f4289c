"""Synthetic "recordings" with known ground truth, for any scene.

The engine is run with known parameters from the initial states of a real set (``like``)
or from sampled toss states, observation noise is added, and the result is written like a
real set: the cube as ContactNets ``tosses/<id>.pt``, any other object (a scene file) as
plain CSV poses (``<id>.csv``, no velocities: as a motion-capture user has them), with
``synthetic.json`` beside it holding the truth (parameters, settings, noise, seed). Every
tool can then be checked on data whose answer is known. Positions get Gaussian noise of
``noise_m`` per axis, orientations a random rotation whose rotation vector has
``noise_rad`` per axis, revolute joints ``noise_rad`` and prismatic joints ``noise_m``;
velocities are kept as simulated (the CSV files leave them out).

Bounds, refused up front with a :class:`~residualsim.errors.ParameterError` (exit 2):
sampled tosses at :data:`RATE_RANGE_HZ` = 10 to 2000 Hz (a capture system's range, video to
fast motion capture: at 1e-3 Hz one sample is 1000 s of fall, z reached -1e7 m); at most
:data:`MAX_TOTAL_SAMPLES` = 1 000 000 samples in a set (tosses x samples per toss: the
rollout records and arrays in memory stay below a few hundred MB); noise finite and at most
:data:`MAX_NOISE_M` = 5 mm and :data:`MAX_NOISE_RAD` = 0.05 rad (mocap is 0.1-1 mm; above
these poses sink more than 20 mm into the table, which the loaders' plausibility check
refuses, so the set would not be read back).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from residualsim.data.contactnets import SAMPLE_PERIOD_S, write_toss
from residualsim.data.csv import save_csv_trajectories
from residualsim.data.trajectory import Trajectory
from residualsim.errors import DataError, ParameterError
from residualsim.sim.rotations import rotate_by_rotvec
from residualsim.sim.rollout import simulate_one, recording_settings, simulation_items
from residualsim.sim.scenes import make_scene, parse_params
from residualsim.sim.pool import engine_workers

__all__ = ["sample_toss_states", "sample_scene_states", "toss_states", "synthesize_tosses",
           "write_toss_set", "observed_recording", "synthesize_arm_loop", "arm_loop_reference",
           "ARM_LOOP_WAYPOINTS", "RATE_RANGE_HZ", "MAX_TOTAL_SAMPLES", "MAX_NOISE_M",
           "MAX_NOISE_RAD"]

#: Sample rates of sampled tosses, Hz (lowest, highest).
RATE_RANGE_HZ = (10.0, 2000.0)
#: Samples in one synthesized set (tosses x samples per toss).
MAX_TOTAL_SAMPLES = 1_000_000
#: Largest position noise (std per axis), m.
MAX_NOISE_M = 0.005
#: Largest orientation noise (std per rotation-vector axis), rad.
MAX_NOISE_RAD = 0.05


def _as_rng(rng: int | np.random.Generator | None) -> np.random.Generator:
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def sample_toss_states(n_tosses: int, rng: int | np.random.Generator | None = None
                       ) -> np.ndarray:
    """Plausible hand-toss initial states (n, 13) for the cube scene, in free flight.

    Centre 0.15-0.35 m above the table, uniformly random orientation, horizontal speed
    N(0, 0.6 m/s) per axis, vertical U(-1, 0.5) m/s, angular velocity N(0, 4 rad/s) per axis.
    """
    rng = _as_rng(rng)
    quat = rng.normal(size=(n_tosses, 4))
    quat /= np.linalg.norm(quat, axis=1, keepdims=True)
    quat *= np.sign(quat[:, :1] + 1e-300)
    return np.column_stack([
        rng.uniform(-0.1, 0.1, size=(n_tosses, 2)), rng.uniform(0.15, 0.35, n_tosses),
        quat,
        rng.normal(0.0, 0.6, size=(n_tosses, 2)), rng.uniform(-1.0, 0.5, n_tosses),
        rng.normal(0.0, 4.0, size=(n_tosses, 3)),
    ])


def sample_scene_states(scene, n_tosses: int, rng: int | np.random.Generator | None = None
                        ) -> np.ndarray:
    """Hand-toss initial states (n, state size) for any scene, in free flight.

    Free objects: the base as :func:`sample_toss_states`, then each joint at U(-0.8, 0.8)
    (rad or m/10 for a prismatic joint) moving at N(0, 2) rad/s (or m/s / 10). Planar
    objects: x U(-0.1, 0.1) m, y U(0.15, 0.35) m, theta U(-pi, pi), velocities N(0, 0.6)
    m/s horizontally, U(-1, 0.5) m/s vertically, N(0, 4) rad/s.
    """
    rng = _as_rng(rng)
    layout = make_scene(scene)
    if layout.planar:
        return np.column_stack([
            rng.uniform(-0.1, 0.1, n_tosses), rng.uniform(0.15, 0.35, n_tosses),
            rng.uniform(-np.pi, np.pi, n_tosses), rng.normal(0.0, 0.6, n_tosses),
            rng.uniform(-1.0, 0.5, n_tosses), rng.normal(0.0, 4.0, n_tosses)])
    base = sample_toss_states(n_tosses, rng)
    n_joints = getattr(layout, "n_joints", 0)
    if not n_joints:
        return base
    unit = np.array([1.0 if kind == "revolute" else 0.1 for kind in layout.info.joint_types])
    return np.column_stack([base, rng.uniform(-0.8, 0.8, (n_tosses, n_joints)) * unit,
                            rng.normal(0.0, 2.0, (n_tosses, n_joints)) * unit])


def toss_states(scene: str, n_tosses: int, rng: int | np.random.Generator | None = None
                ) -> np.ndarray:
    """The initial states ``data synthesize`` samples for ``scene``: the cube's
    :func:`sample_toss_states`, another scene's :func:`sample_scene_states` lifted clear of
    the table."""
    if scene == "cube":
        return sample_toss_states(n_tosses, rng)
    return _clear_of_the_table(scene, sample_scene_states(scene, n_tosses, rng))


def _clear_of_the_table(scene: str, states: np.ndarray, clearance_m: float = 0.01
                        ) -> np.ndarray:
    """``states`` with each one lifted (z, or y in the plane) until the object is at least
    ``clearance_m`` above the table: a large or unfolded object sampled at the cube's
    heights can start inside it."""
    from residualsim.sim.bullet import pb

    from residualsim.sim.engine import Engine

    lifted = np.array(states, dtype=float)
    with Engine(scene) as engine:
        scene_, up = engine.scene, 1 if engine.scene.planar else 2
        for state in lifted:
            engine.reset(state)
            near = pb.getClosestPoints(scene_.body, scene_.static_body, clearance_m,
                                       scene_.link, -1, physicsClientId=engine.client)
            if near:
                state[up] += clearance_m - min(p[8] for p in near)
    return lifted


def observed_recording(layout, traj_id: str, states: np.ndarray, dt_s: float, noise_m: float,
                       noise_rad: float, rng: np.random.Generator) -> Trajectory:
    """A noisy recording of simulated ``states`` (T, state size) of scene ``layout`` at
    ``dt_s`` s: Gaussian noise of ``noise_m`` m per position axis (world frame) and
    ``noise_rad`` rad per rotation-vector axis (and per joint, by its kind), from ``rng``;
    velocities are the simulated ones (world frame), quaternions w-x-y-z."""
    n = len(states)
    positions, quat, velocity, omega = layout.rigid_motion(states)
    if layout.planar:  # noise in the plane: x, y and theta
        positions = positions + np.column_stack([rng.normal(0.0, noise_m, (n, 2)), np.zeros(n)])
        quat = rotate_by_rotvec(quat, np.column_stack([np.zeros((n, 2)),
                                                       rng.normal(0.0, noise_rad, n)]))
    else:
        positions = positions + rng.normal(0.0, noise_m, size=(n, 3))
        quat = rotate_by_rotvec(quat, rng.normal(0.0, noise_rad, size=(n, 3)))
    joints: dict = {}
    if getattr(layout, "n_joints", 0):
        scale = np.array([noise_rad if kind == "revolute" else noise_m
                          for kind in layout.info.joint_types])
        joints = dict(joint_names=layout.joint_names,
                      joint_positions=layout.joint_positions(states)
                      + rng.normal(size=(n, layout.n_joints)) * scale,
                      joint_velocities=states[:, 13 + layout.n_joints:])
    return Trajectory(traj_id=traj_id, times_s=np.arange(n) * dt_s, positions_m=positions,
                      quat_wxyz=quat / np.linalg.norm(quat, axis=1, keepdims=True),
                      linear_velocity_mps=velocity, angular_velocity_world_radps=omega,
                      planar=layout.planar, source="synthetic", **joints)


def _check_total(n_tosses: int, total: int) -> None:
    if total > MAX_TOTAL_SAMPLES:
        raise ParameterError(f"{n_tosses} tosses, {total:g} samples in all (--count x "
                             f"--samples); at most {MAX_TOTAL_SAMPLES} in a synthesized set")


def synthesize_tosses(params, like: Mapping[str, Trajectory] | None = None,
                      n_tosses: int = 8, n_samples: int = 110, noise_m: float = 0.0,
                      noise_rad: float = 0.0, rng: int | np.random.Generator | None = 0,
                      n_workers: int = 1, substeps: int | None = None, scene: str = "cube",
                      rate_hz: float | None = None) -> dict[str, Trajectory]:
    """Simulate tosses of ``scene`` (the cube by default, or a scene file) with known
    parameters and add observation noise.

    Parameters
    ----------
    params : EngineParams, mapping or ``k=v`` string
        The ground-truth effective contact parameters.
    like : mapping of id -> Trajectory, optional
        Start from these recordings' first samples, over their lengths, keeping their ids.
        Otherwise ``n_tosses`` sampled states of ``n_samples`` samples, ids ``"synthetic-0"``,
        ``"synthetic-1"``... (never mistaken for a real recording).
    noise_m, noise_rad : float
        Standard deviations of the position (m) and orientation (rad) noise, at most
        :data:`MAX_NOISE_M` and :data:`MAX_NOISE_RAD`.
    rng : int, Generator or None
        Seed of the initial states and the noise.
    substeps : int, optional
        Engine substeps per sample (default: the scene's); part of the truth, since
        restitution and friction act differently at different substep counts.
    scene : str
        A built-in scene name or a scene file.
    rate_hz : float, optional
        Sample rate of sampled tosses (default: the cube's 148 Hz, another scene's own),
        within :data:`RATE_RANGE_HZ`; at most :data:`MAX_TOTAL_SAMPLES` samples in all.

    Raises
    ------
    ParameterError
        A value outside the bounds of the module docstring, before anything is simulated.
    """
    for name, value, bound, unit in (("noise_m (--noise-m)", noise_m, MAX_NOISE_M, "m"),
                                     ("noise_rad (--noise-rad)", noise_rad, MAX_NOISE_RAD, "rad")):
        if not 0.0 <= value <= bound:
            raise ParameterError(f"{name} must be within 0 to {bound:g} {unit} (a pose noise "
                                 f"the recordings' checks accept), got {value:g}")
    rng = _as_rng(rng)
    params = parse_params(params)
    layout = make_scene(scene)
    if like is not None:
        items = simulation_items(scene, like)
        _check_total(len(items), sum(n for _, _, n in items))
        settings = recording_settings(scene, like, substeps)
    else:
        if n_tosses < 1 or n_samples < 2:
            raise ParameterError("need n_tosses >= 1 and n_samples >= 2")
        low, high = RATE_RANGE_HZ
        if rate_hz is not None and not low <= rate_hz <= high:
            raise ParameterError(f"rate_hz (--rate) must be within {low:g} to {high:g} Hz (a "
                                 f"capture system's rate), got {rate_hz:g}")
        _check_total(n_tosses, n_tosses * n_samples)
        states = toss_states(scene, n_tosses, rng)
        items = [(f"synthetic-{i}", state, n_samples) for i, state in enumerate(states)]
        dt_s = 1.0 / rate_hz if rate_hz else (SAMPLE_PERIOD_S if scene == "cube" else
                                              layout.settings.dt_s)
        settings = dataclasses.replace(layout.settings, dt_s=dt_s)
        if substeps is not None:
            settings = dataclasses.replace(settings, substeps=substeps)
    with engine_workers(scene, items, n_workers, settings) as pool:
        results = pool.map(simulate_one, params)
    return {result.traj_id: observed_recording(layout, result.traj_id, result.states,
                                               settings.dt_s, noise_m, noise_rad, rng)
            for result in results}


def write_toss_set(out_dir: str | Path, tosses: Mapping[str, Trajectory], truth: dict,
                   overwrite: bool = False, csv: bool = False) -> Path:
    """Write ``out_dir/tosses/<id>.pt`` (or, with ``csv``, ``out_dir/<id>.csv`` poses without
    velocities) and ``out_dir/synthetic.json``, all or nothing.

    The set is built in a temporary sibling directory and renamed into place, so an
    interrupted run leaves no half-written set. An existing ``out_dir`` is an error unless
    ``overwrite``.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not overwrite:
        raise DataError(f"{out_dir}: already exists (pass overwrite / --force to replace it)")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        if csv:
            save_csv_trajectories(staging, tosses, with_velocities=False)
        else:
            (staging / "tosses").mkdir()
            for traj_id, traj in tosses.items():
                write_toss(staging / "tosses" / f"{traj_id}.pt", traj)
        (staging / "synthetic.json").write_text(json.dumps(truth, indent=2) + "\n")
        staging.chmod(0o755)  # mkdtemp makes it private
        if out_dir.exists():
            shutil.rmtree(out_dir)
        staging.rename(out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out_dir


# --- the arm + loop scene -----------------------------------------------------------------
#: End-effector waypoints of the synthetic arm motion, relative to the grasp pose:
#: (dx, dy, dz m, yaw rad about the vertical), one every ``segment_s``: hold, stretch up
#: 4 cm, bend in the loop's plane both ways (±6 cm, lifted 2 cm), twice, then bend out of
#: the plane while twisting both ways (±3 cm, ±0.2 rad), a mixture, back to the start.
#: In-plane bending is what the ψ springs resist, so it fills most of the 20 s; larger
#: excursions (±7 cm with a 5 cm stretch) break the loop's closure in this model.
ARM_LOOP_WAYPOINTS = ((0, 0, 0, 0), (0, 0, 0.04, 0), (0, 0.06, 0.02, 0), (0, -0.06, 0.02, 0),
                      (0, 0, 0.04, 0), (0, 0.06, 0.02, 0), (0, -0.06, 0.02, 0),
                      (0.03, 0, 0, 0.2), (-0.03, 0, 0.01, -0.2), (0.02, 0.04, 0.02, 0.12),
                      (0, 0, 0, 0))


def arm_loop_reference(scene, segment_s: float = 2.0) -> np.ndarray:
    """Arm angles (T, 7) rad through :data:`ARM_LOOP_WAYPOINTS` at the scene's rate:
    inverse kinematics at each waypoint, minimum-jerk interpolation in joint space."""
    import math

    from residualsim.sim.bullet import pb

    from residualsim.sim.scenes.arm_loop import EE_LINK

    start = scene.arm_state()[0]
    top = scene.ee_position()
    keyframes = [start]
    for dx, dy, dz, yaw in ARM_LOOP_WAYPOINTS[1:]:
        target = (top + [dx, dy, dz]).tolist()
        orientation = pb.getQuaternionFromEuler([math.pi, 0.0, yaw])
        scene.set_arm(keyframes[-1])
        for _ in range(10):
            solution = pb.calculateInverseKinematics(
                scene.arm, EE_LINK, target, orientation, maxNumIterations=200,
                residualThreshold=1e-9, physicsClientId=scene.client)
            scene.set_arm(np.array(solution[:7]))
        keyframes.append(np.array(solution[:7]))
    scene.set_arm(start)
    per_segment = int(round(segment_s / scene.settings.dt_s))
    tau = np.arange(per_segment) / per_segment
    blend = (10 * tau ** 3 - 15 * tau ** 4 + 6 * tau ** 5)[:, None]
    pieces = [a + blend * (b - a) for a, b in zip(keyframes[:-1], keyframes[1:])]
    return np.vstack(pieces + [keyframes[-1][None, :]])


def synthesize_arm_loop(out_dir: str | Path, *, n_links: int = 24, kappa12=None,
                        angle_noise_rad: float = 2e-4, torque_noise_nm: float = 0.02,
                        offset_rad: float = 0.0, substeps: int = 10,
                        bandwidth_radps: float = 30.0, segment_s: float = 2.0,
                        rng: int | None = 0, rec_id: str = "arm-loop") -> Path:
    """Record an arm motion stretching, bending and twisting a loop; returns the file.

    The motion passes :data:`ARM_LOOP_WAYPOINTS` every ``segment_s`` (2 s: 20 s in all).

    The generating loop has ``n_links`` links with the springs of the same continuous ring
    as the 12-link loop with ``kappa12`` = (κ_θ, κ_ψ) N m/rad (default: the paper's
    [4.45252, 0.96969]; κ scales with n, :meth:`LoopParameters.rescaled`), so a 24-link
    recording carries model error for a 12-link identification and a 12-link one none. The
    arm tracks :func:`arm_loop_reference` with an LQR PD controller at 100 Hz plus gravity
    feed-forward; the torques it applies are recorded (the mean over each period, N m) with
    Gaussian noise ``torque_noise_nm``, the angles with noise ``angle_noise_rad`` and a
    constant zero offset per joint drawn from N(0, ``offset_rad``). The truth is written in
    the recording's metadata.
    """
    from residualsim.data.joint_recording import JointRecording, save_joint_recording
    from residualsim.sim.scenes.arm_loop import ArmLoopScene, ArmLoopSettings, lqr_gains
    from residualsim.sim.scenes.loop_urdf import LoopParameters

    generator = _as_rng(rng)
    base = LoopParameters()
    if kappa12 is not None:
        kappa12 = np.asarray(kappa12, dtype=float)
        base = dataclasses.replace(base, kappa_theta=float(kappa12[0]),
                                   kappa_psi=float(kappa12[1]))
    loop = base.rescaled(n_links)
    with ArmLoopScene(loop, ArmLoopSettings(substeps=substeps, solver_iterations=10)) as scene:
        reference = arm_loop_reference(scene, segment_s)
        kappa = np.array([loop.kappa_theta, loop.kappa_psi])
        scene.settle(kappa, 0.5)
        gains = lqr_gains(scene.arm_mass_matrix(reference[0]), bandwidth_radps)
        feedforward = np.array([scene.gravity_torques(r) for r in reference[:-1]])
        run = scene.drive(kappa, feedforward, reference, gains)
        closure = run.closure_error_m
    offsets = generator.normal(0.0, offset_rad, 7) if offset_rad > 0 else np.zeros(7)
    angles = run.angles + offsets + generator.normal(0.0, angle_noise_rad, run.angles.shape)
    torques = run.torques + generator.normal(0.0, torque_noise_nm, run.torques.shape)
    times = np.arange(len(angles)) * scene.settings.dt_s
    metadata = {"synthetic": True, "generator_n_links": n_links,
                "kappa_truth_12": [base.kappa_theta, base.kappa_psi],
                "kappa_generator": kappa.tolist(), "angle_noise_rad": angle_noise_rad,
                "torque_noise_nm": torque_noise_nm, "offsets_rad": offsets.tolist(),
                "substeps": substeps, "bandwidth_radps": bandwidth_radps, "seed": rng,
                "closure_error_m": closure}
    recording = JointRecording(rec_id=rec_id, times_s=times, joint_angles_rad=angles,
                               joint_torques_nm=torques, scene="arm-loop",
                               joint_names=tuple(f"lbr_iiwa_joint_{i + 1}" for i in range(7)),
                               source=f"synthetic arm-loop ({n_links}-link generator)",
                               metadata=metadata)
    return save_joint_recording(recording, out_dir)
