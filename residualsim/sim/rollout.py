"""Rollouts from recorded initial states (the residual-learning paper's Algorithm 1).

Each recorded trajectory is replayed from its first sample with the (calibrated) engine over
the recorded number of samples, at the recording rate. :func:`residual_rollout` adds the
learned correction: at each contact event it computes the contact features x = (M_c, v_c),
draws p_res from the policy (or takes its mean) and adds M⁻¹Jᵀp_res to the velocity the
engine resolved, within physical limits (:class:`ContactGuard`). Batches are spread over
worker processes, identical for any number of workers. The corrector and the record are
:mod:`.corrector`'s, shared with the batched loop (:mod:`.batch`) and the compiled one
(:mod:`.lone_compiled`, ``RESIDUALSIM_COMPILED``): the same rollouts bit for bit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
from residualsim.sim.bullet import pb

from residualsim.data.trajectory import Trajectory
from residualsim.sim.contact import MEMORY_STEPS, far_from, is_touching
from residualsim.sim.corrector import (EventCorrector, ResidualRollout, event_contact_model,
                                       rollout_record)
from residualsim.sim.skips import CHECK_EVERY
from residualsim.sim.engine import Engine
from residualsim.sim.guard import ENERGY_ROUNDING, ContactGuard
from residualsim.sim.lone_compiled import compiled_applies, compiled_rollout
from residualsim.errors import DataError, ParameterError
from residualsim.sim.scenes import EngineParams, EngineSettings, make_scene, parse_params
from residualsim.parallel import ShardedWorkers
from residualsim.sim.pool import engine_workers

__all__ = ["SimulatedTrajectory", "simulate_one", "simulate_trajectories", "simulation_items",
           "recording_settings", "simulate_impact", "simulate_impacts", "impact_settings",
           "ContactGuard", "ResidualRollout", "residual_rollout", "RolloutRequest",
           "trajectory_items", "item_rollouts", "interleave", "residual_errors",
           "predict_trajectories", "residual_trajectories", "velocity_jump", "ENERGY_ROUNDING",
           "event_contact_model"]



@dataclasses.dataclass(frozen=True)
class SimulatedTrajectory:
    """One simulated trajectory on the recorded time stamps.

    ``positions_m`` (T, 3) world, ``quat_wxyz`` (T, 4) body to world, ``states`` (T, n) in
    the scene's layout, ``n_events`` the number of contact events the engine went through.
    """

    traj_id: str
    positions_m: np.ndarray
    quat_wxyz: np.ndarray
    states: np.ndarray
    n_events: int


def recording_settings(scene: str, trajectories: Mapping[str, Trajectory],
                       substeps: int | None = None) -> EngineSettings:
    """The scene's solver settings with ``dt_s`` set to the recordings' sample period.

    Raises DataError when the recordings do not share one (uniform) rate (CSV recordings
    are resampled at load, :mod:`residualsim.data.timebase`; other formats must be)."""
    base = make_scene(scene).settings
    periods = []
    for traj in trajectories.values():
        steps = np.diff(traj.times_s)
        if np.ptp(steps) > 1e-6 * steps.mean():
            worst = int(np.argmax(np.abs(steps - np.median(steps))))
            raise DataError(f"{traj.source or traj.traj_id}: samples are not evenly spaced "
                            f"(step {steps[worst]:.6g} s after sample {worst}, median "
                            f"{np.median(steps):.6g} s); export it as CSV to have it "
                            "resampled at load")
        periods.append(steps.mean())
    if not periods:
        raise DataError("no recordings to simulate")
    if np.ptp(periods) > 1e-6 * np.mean(periods):
        raise DataError(f"recordings have different rates ({1 / max(periods):.3f} to "
                        f"{1 / min(periods):.3f} Hz): simulate them separately, or resample "
                        "CSV recordings to one with --rate-hz")
    changes: dict = {"dt_s": float(np.mean(periods))}
    if substeps is not None:
        changes["substeps"] = substeps
    return dataclasses.replace(base, **changes)


def simulate_one(engine: Engine, item: tuple, params: EngineParams) -> SimulatedTrajectory:
    """Worker function: one item of :func:`simulation_items` rolled out with ``params``."""
    traj_id, initial_state, n_samples = item
    if engine.params != params:
        engine.set_params(params)
    result = engine.rollout(initial_state, n_samples - 1)
    positions, quat, _, _ = engine.scene.rigid_motion(result.states)
    return SimulatedTrajectory(traj_id=traj_id, positions_m=positions, quat_wxyz=quat,
                               states=result.states, n_events=len(result.events))


def simulate_trajectories(scene: str, trajectories: Mapping[str, Trajectory],
                          params=None, n_workers: int = 1, substeps: int | None = None,
                          workers: ShardedWorkers | None = None
                          ) -> dict[str, SimulatedTrajectory]:
    """Simulate the engine from each recording's first sample over its recorded length.

    Parameters
    ----------
    scene : str
        Scene name, e.g. ``"cube"``.
    trajectories : mapping of id -> Trajectory
        Recordings; their common sample period becomes the step ``dt_s``.
    params : EngineParams, mapping, ``k=v`` string, JSON path or None
        Effective contact parameters (default: the engine's defaults).
    n_workers : int
        Worker processes (ignored when ``workers`` is given).
    substeps : int, optional
        Internal steps per sample (default: the scene's).
    workers : ShardedWorkers, optional
        An existing pool built over :func:`simulation_items` of the same recordings, to
        reuse across calls (calibration does this).

    Returns
    -------
    dict of id -> SimulatedTrajectory, in the order of ``trajectories``.
    """
    params = parse_params(params)
    if workers is None:
        settings = recording_settings(scene, trajectories, substeps)
        with engine_workers(scene, simulation_items(scene, trajectories), n_workers,
                            settings) as pool:
            results = pool.map(simulate_one, params)
    else:
        results = workers.map(simulate_one, params)
    return {result.traj_id: result for result in results}


def simulation_items(scene: str, trajectories: Mapping[str, Trajectory]) -> list[tuple]:
    """Work items (id, initial state in the scene layout, number of samples) for workers."""
    layout = make_scene(scene)
    return [(traj_id, layout.state_from_trajectory(traj, 0), traj.n_samples)
            for traj_id, traj in trajectories.items()]


#: Longest simulated contact of a planar impact, in recording periods (4 ms each).
IMPACT_MAX_STEPS = 10


def simulate_impact(engine: Engine, item: tuple, params: EngineParams) -> np.ndarray:
    """Worker function: post-contact velocity (3,) of one impact item ``(row, pre_state)``
    (see :func:`simulate_impacts`)."""
    from residualsim.sim.scenes.planar import IMPACT_START_OVERLAP_M

    _, pre_state = item
    if engine.params != params:
        engine.set_params(params)
    x, _, theta, dx, dy, dtheta = pre_state
    height = (engine.scene.resting_height(theta) - IMPACT_START_OVERLAP_M
              + params.table_offset_m)  # the floor's top is at table_height_m (y up)
    result = engine.rollout(np.array([x, height, theta, dx, dy, dtheta]), IMPACT_MAX_STEPS)
    if not result.events:
        return np.asarray(pre_state[3:6], dtype=np.float64)
    end = result.events[0].end_index
    velocity = result.states[end, 3:6].copy()
    # Remove what gravity added since the start: the impulsive post-contact velocity.
    velocity[:2] -= np.asarray(engine.scene.settings.gravity_mps2[:2]) * end * engine.dt_s
    return velocity


def impact_settings(scene: str, substeps: int | None = None) -> EngineSettings:
    """The planar scene's solver settings, optionally with another substep count."""
    settings = make_scene(scene).settings
    return settings if substeps is None else dataclasses.replace(settings, substeps=substeps)


def simulate_impacts(scene: str, impacts, params=None, n_workers: int = 1,
                     substeps: int | None = None) -> np.ndarray:
    """Post-contact velocities (N, 3) (dx m/s, dy m/s, dtheta rad/s) of planar impacts.

    Each impact starts from its pre-contact state placed at contact (the centre at the
    resting height for its angle, 0.1 mm into the floor: see
    :mod:`residualsim.sim.scenes.planar`) and runs until its contact event ends (at most
    :data:`IMPACT_MAX_STEPS` periods); gravity's share over that time is removed, as in
    the analytic models' impulsive predictions. ``impacts`` must be in the ``"corrected"``
    (right-handed) convention of the scenes; the result is in the same convention.
    """
    if impacts.convention != "corrected":
        raise DataError(f"{impacts.source}: simulate impacts in the 'corrected' convention")
    params = parse_params(params)
    items = list(zip(impacts.rows.tolist(), impacts.pre_state))
    with engine_workers(scene, items, n_workers, impact_settings(scene, substeps)) as pool:
        return np.array(pool.map(simulate_impact, params)).reshape(-1, 3)


# --- Algorithm 1 with the residual ---------------------------------------------------------------
def velocity_jump(engine: Engine, raw_before, raw_after) -> float:
    """How much the body's linear velocity (m/s, world frame) changed over one step beyond
    gravity's change: ‖v_after − v_before − g dt‖, from two raw scene readings. Large with
    no touching point after the step: an impact that began and ended inside the step."""
    scene = engine.scene
    velocity = scene.rigid_motion(scene.raw_to_states([raw_before, raw_after]))[2]
    gravity_step = np.asarray(scene.settings.gravity_mps2) * engine.dt_s
    return float(np.linalg.norm(velocity[1] - velocity[0] - gravity_step))


def residual_rollout(engine: Engine, initial_state: np.ndarray, n_steps: int, policy=None,
                     rng: np.random.Generator | None = None,
                     guard: ContactGuard = ContactGuard(),
                     stop_after_events: int | None = None, skips: bool = True
                     ) -> ResidualRollout:
    """Algorithm 1: simulate ``n_steps`` periods from ``initial_state`` with the residual.

    Parameters
    ----------
    engine : Engine
        The (calibrated) engine; its world is reset to ``initial_state``.
    initial_state : ndarray
        Scene layout (cube: position m, quaternion w-x-y-z, velocity m/s, angular velocity
        rad/s, all world frame).
    n_steps : int
        Recording periods to simulate; the result has ``n_steps + 1`` samples.
    policy : NumpyPolicy or None
        The residual policy (:meth:`ResidualPolicy.numpy`); None: the engine alone through
        the same loop (events still detected and counted).
    rng : numpy Generator or None
        None: the policy's mean. A generator: one sample of p_res per event.
    guard : ContactGuard
        Event definition and physical limits.
    stop_after_events : int or None
        Stop right after the step of this many contact events (its residual applied): a
        shorter result, ending at the post-event state (how the belief step goes on).
    skips : bool
        Free flight in closed form and rest filled in (:mod:`residualsim.sim.skips`).

    A policy with a ``coefficients`` part (a
    :class:`~residualsim.residual.coefficients.SustainedPolicy`) also sets the contact
    coefficients after every step that ends in contact, from that step's contact features
    at the touching points, and its ``impulses`` part (or none) acts at the events; the
    engine's own coefficients are back in force when the rollout returns.
    """
    coefficients = getattr(policy, "coefficients", None)
    if coefficients is not None:
        policy = policy.impulses
        try:
            return _rollout(engine, initial_state, n_steps, policy, rng, guard,
                            stop_after_events, skips, coefficients)
        finally:
            engine.scene.apply_params(engine.params)
    if compiled_applies(engine.scene, policy, guard):  # the same rollout, stepped in C
        return compiled_rollout(engine, initial_state, n_steps, policy, rng, guard,
                                stop_after_events, skips)
    return _rollout(engine, initial_state, n_steps, policy, rng, guard, stop_after_events,
                    skips, None)


def _sustained_features(engine: Engine, raw, touching: list[tuple]) -> np.ndarray:
    """The contact features at the ``touching`` points now (velocity from ``raw``), then
    the number of touching points."""
    state = engine.scene.raw_to_states([raw])[0]
    return np.append(event_contact_model(engine, state, touching).features, len(touching))


def _rollout(engine: Engine, initial_state: np.ndarray, n_steps: int, policy, rng, guard,
             stop_after_events: int | None, skips: bool, coefficients) -> ResidualRollout:
    """:func:`residual_rollout`'s loop; ``coefficients`` None or a coefficient residual."""
    if coefficients is not None:
        engine.scene.apply_params(engine.params)
    scene, cid = engine.scene, engine.client
    flight, rest = engine.free_flight(skips), engine.rest_detector(skips)
    engine.reset(initial_state)
    read, step, get_contacts = scene.read_raw, pb.stepSimulation, pb.getContactPoints
    body, static, link = scene.body, scene.static_body, scene.link
    correct = EventCorrector(engine, policy, rng, guard)
    raws = [read()]
    recent: list[list[tuple]] = []  # touched points of the last MEMORY_STEPS contact steps
    events, deepest = 0, 0.0
    spacing2 = guard.new_point_distance_m ** 2
    every_step = guard.every_contact_step
    hidden = guard.hidden_impact_mps
    index, scaled, stepped, start = 0, False, 0, None
    while index < n_steps:
        if index % CHECK_EVERY == 0:
            added, resting = engine.skip_ahead(flight, rest, raws, n_steps - index)
            if resting:
                break
            if added:
                index += added
                recent = []
                if scaled:
                    scene.apply_params(engine.params)
                    scaled = False
                continue
        start = raws[-1] if start is None else start
        step(physicsClientId=cid)
        index, stepped = index + 1, stepped + 1
        raw = read()
        touching = [p for p in get_contacts(body, static, link, -1, physicsClientId=cid)
                    if is_touching(p)]
        if touching:
            deepest = max(deepest, -min(p[8] for p in touching))
            fresh = [p for p in touching if far_from(p[6], recent, spacing2)]
            if fresh or every_step:
                if correct(scene.raw_to_states([raws[-1]])[0], fresh or touching, touching):
                    events += 1
                    if policy is not None:
                        raw = read()
            recent.append([p[6] for p in touching])
            del recent[:-MEMORY_STEPS]
            if coefficients is not None:
                coefficients.apply(engine, _sustained_features(engine, raw, touching))
                scaled = True
        else:
            recent = []
            if scaled:  # contact ended: the next touch meets the engine's own coefficients
                scene.apply_params(engine.params)
                scaled = False
            if hidden is not None and velocity_jump(engine, raws[-1], raw) > hidden:
                pre = scene.raw_to_states([raws[-1]])
                near = pb.getClosestPoints(body, static, guard.new_point_distance_m,
                                           link, -1, physicsClientId=cid)
                closest = min((p[8] for p in near), default=0.0)
                near = [p for p in near if p[8] <= closest + 1e-3]  # the nearest corner(s)
                if near and correct(pre[0], near, near):
                    events += 1
                    if policy is not None:
                        raw = read()
        raws.append(raw)
        if stop_after_events is not None and events >= stop_after_events:
            break
    return rollout_record(scene, raws, policy, correct, deepest, stepped, start)


# --- batches of residual rollouts over worker processes -------------------------------------------
@dataclasses.dataclass(frozen=True)
class RolloutRequest:
    """What workers roll out for each of their items.

    ``policies`` one NumpyPolicy (or None: engine alone) per candidate; ``samples`` policy
    samples per item (0: one deterministic rollout with the policy mean); sample s of item
    i draws from ``numpy.random.default_rng([seed, i, s])``, the same stream for every
    candidate (common random numbers); ``split`` restricts the rollout to items of that
    split (the others return None); ``state_noise`` (a
    :class:`~residualsim.residual.state_noise.StateNoise` or None) perturbs each stochastic
    sample's initial velocities, drawn first from the sample's stream. ``batch_size``: the
    stochastic samples of an item go through
    :func:`~residualsim.sim.batch.batched_rollouts` with up to this many copies of the body
    in one world (None: :data:`~residualsim.sim.batch.AUTO_BATCH`); 1 (the default) rolls
    each out alone. Either gives the same rollouts; scenes and policies the batch does not
    support (:func:`~residualsim.sim.batch.batch_unsupported`) always go alone.
    """

    params: EngineParams
    policies: tuple
    samples: int = 0
    seed: int = 0
    guard: ContactGuard = ContactGuard()
    split: str | None = None
    state_noise: Any = None
    batch_size: int | None = 1


def trajectory_items(scene: str, trajectories: Mapping[str, Trajectory],
                     split: str | None = None, start: int = 0) -> list[tuple]:
    """Work items ``(index, split, id, initial state, positions (T, 3), quat_wxyz (T, 4))``.

    ``index`` (from ``start``) seeds the item's random streams, so keep it stable.
    """
    layout = make_scene(scene)
    return [(start + k, split, traj_id, layout.state_from_trajectory(traj, 0),
             traj.positions_m, traj.quat_wxyz)
            for k, (traj_id, traj) in enumerate(trajectories.items())]


def interleave(*groups: list) -> list:
    """Merge lists so that every contiguous shard holds each list in proportion."""
    keyed = [((rank + 0.5) / len(group), g, item) for g, group in enumerate(groups)
             for rank, item in enumerate(group)]
    return [item for _, _, item in sorted(keyed, key=lambda entry: entry[:2])]


def item_rollouts(engine: Engine, item: tuple, request: RolloutRequest
              ) -> list[list[ResidualRollout]] | None:
    """Rollouts of one item: per candidate, per sample (None when outside the split)."""
    index, split, _, initial_state, positions, _ = item
    if request.split is not None and split != request.split:
        return None
    if engine.params != request.params:
        engine.set_params(request.params)
    n_steps = len(positions) - 1
    runs = []
    for policy in request.policies:
        if request.samples == 0 or policy is None:
            runs.append([residual_rollout(engine, initial_state, n_steps, policy, None,
                                          request.guard)])
        else:
            runs.append(_sample_rollouts(engine, initial_state, n_steps, policy, request,
                                         index))
    return runs


def _sample_rollouts(engine: Engine, initial_state: np.ndarray, n_steps: int, policy,
                     request: RolloutRequest, index: int) -> list[ResidualRollout]:
    """The item's stochastic rollouts: sample s starts from the initial state perturbed by
    the request's state noise (if any), then draws its residuals, all from
    ``default_rng([seed, index, s])``; alone or in one batch (``request.batch_size``)."""
    from residualsim.sim.batch import batch_unsupported, batched_rollouts

    rngs = [np.random.default_rng([request.seed, index, s]) for s in range(request.samples)]
    noise = request.state_noise
    starts = [initial_state if noise is None else noise.perturb(initial_state, rng)
              for rng in rngs]
    if request.batch_size == 1 or len(starts) == 1 or batch_unsupported(
            engine.scene, policy, request.guard):
        return [residual_rollout(engine, start, n_steps, policy, rng, request.guard)
                for start, rng in zip(starts, rngs)]
    return batched_rollouts(engine, np.array(starts), n_steps, policy, rngs, request.guard,
                            request.batch_size)


def residual_errors(engine: Engine, item: tuple, request: RolloutRequest) -> np.ndarray | None:
    """Worker function: errors of an item, (C candidates, S samples, 7).

    Columns: mean squared position error (m²) and mean squared rotation angle (rad²) over
    the samples after the first; events; energy clamps; normal clamps; engine energy
    gains; deepest penetration (m).
    """
    from residualsim.sim.rotations import geodesic_angle

    _, _, _, _, positions, quat = item
    rows = []
    generated = item_rollouts(engine, item, request)
    if generated is None:
        return None
    for runs in generated:
        per_sample = []
        for run in runs:
            squared = np.sum((run.positions_m[1:] - positions[1:]) ** 2, axis=1)
            angle = geodesic_angle(run.quat_wxyz[1:], quat[1:])
            per_sample.append((np.mean(squared), np.mean(angle**2), run.n_events,
                               run.n_energy_clamped, run.n_normal_clamped,
                               run.n_engine_energy_gain, run.max_penetration_m))
        rows.append(per_sample)
    return np.array(rows, dtype=np.float64)


def residual_trajectories(engine: Engine, item: tuple, request: RolloutRequest):
    """Worker function: the rollouts of an item's first candidate as (positions (S, T, 3),
    quat_wxyz (S, T, 4), stats (S, 5): events, energy clamps, normal clamps, engine energy
    gains, deepest penetration m, joint positions (S, T, n) or None for a single body)."""
    generated = item_rollouts(engine, item, request)
    if generated is None:
        return None
    runs = generated[0]
    stats = np.array([(r.n_events, r.n_energy_clamped, r.n_normal_clamped,
                       r.n_engine_energy_gain, r.max_penetration_m) for r in runs], float)
    joints = (np.stack([engine.scene.joint_positions(r.states) for r in runs])
              if getattr(engine.scene, "n_joints", 0) else None)
    return (np.stack([r.positions_m for r in runs]), np.stack([r.quat_wxyz for r in runs]),
            stats, joints)


def predict_trajectories(model, trajectories: Mapping[str, Trajectory], samples: int = 0,
                         seed: int = 0, n_workers: int = 1, residual: bool = True,
                         guard: ContactGuard | None = None, policy: Any = None,
                         batch_size: int | None = 1):
    """Predictions of a :class:`~residualsim.residual.model.ResidualModel` for recordings.

    Rolls out each recording from its first sample over its recorded length with the
    model's engine and policy: ``samples=0`` the deterministic mean prediction (S = 1), S >= 1
    stochastic samples (sample s of the k-th recording uses ``default_rng([seed, k, s])``,
    and starts from the recorded state perturbed by the model's ``state_noise``, if any);
    ``residual=False`` the model's engine alone; ``policy`` replaces the model's
    ``sampling_policy()`` (an object with ``mean(features)`` and ``sample(features, rng)``,
    e.g. one whose samples are its mean: state noise only). A model with an
    ``observation_noise`` adds the recordings' pose noise to each stochastic sample's
    positions, from ``default_rng([seed, k, s, 1])``
    (:mod:`residualsim.residual.observation_noise`). ``batch_size``: as
    :class:`RolloutRequest`'s (the same predictions, bit for bit). Returns
    (TrajectoryPredictions, stats) with stats summing the event, clamp and penetration
    counts of every rollout.
    """
    from residualsim.evaluation.predictions import TrajectoryPredictions

    if int(samples) != samples or samples < 0:
        raise DataError(f"samples must be an integer >= 0, got {samples!r}")
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(
            batch_size, (int, np.integer)) or batch_size < 1):
        raise ParameterError(f"batch_size must be None or an integer >= 1, got {batch_size!r}")
    if not trajectories:
        raise DataError("no recordings to predict")
    settings = recording_settings(model.layout, trajectories, model.substeps)
    if abs(settings.dt_s - model.dt_s) > 1e-6 * model.dt_s:
        raise DataError(f"recordings at {1 / settings.dt_s:.3f} Hz, but the model was trained "
                        f"at {1 / model.dt_s:.3f} Hz")
    if residual and policy is None:
        policy = model.sampling_policy()
    elif not residual:
        policy = None
    request = RolloutRequest(params=model.params, policies=(policy,), samples=int(samples),
                             seed=int(seed), guard=guard or model.guard,
                             state_noise=model.state_noise if residual else None,
                             batch_size=None if batch_size is None else int(batch_size))
    items = trajectory_items(model.layout, trajectories)
    with engine_workers(model.layout, items, n_workers, settings) as workers:
        results = workers.map(residual_trajectories, request)
    stats = np.concatenate([r[2] for r in results])
    observed = getattr(model, "observation_noise", None)
    if observed is not None and residual and samples >= 1:
        # the recordings' pose noise, from its own stream per (recording k, sample s): in
        # the parent, so the result is the same for any number of workers
        planar = model.layout.planar
        results = [(np.stack([observed.apply(r[0][s], np.random.default_rng(
                        [int(seed), k, s, 1]), planar) for s in range(len(r[0]))]), *r[1:])
                   for k, r in enumerate(results)]
    predictions = TrajectoryPredictions(
        {traj_id: (r[0], r[1]) if r[3] is None else (r[0], r[1], r[3])
         for traj_id, r in zip(trajectories, results)},
        meta={"scene": model.scene, "params": model.params.as_json(),
              "substeps": model.substeps, "dt_s": settings.dt_s, "residual": bool(residual),
              "samples": int(samples) if residual else 0, "seed": int(seed)})
    summary = {"rollouts": len(stats), "events": int(stats[:, 0].sum()),
               "energy_clamped": int(stats[:, 1].sum()), "normal_clamped": int(stats[:, 2].sum()),
               "engine_energy_gains": int(stats[:, 3].sum()),
               "max_penetration_m": float(stats[:, 4].max())}
    return predictions, summary
