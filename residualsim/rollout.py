"""Rollouts of the engine from recorded initial states, batched over worker processes.

This is the residual-free case of the residual-learning paper's Algorithm 1: each recorded
trajectory is replayed from its first sample with the (calibrated) engine over the recorded
number of samples, at the recording rate. Results come back in the order given, identical
for any number of workers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from .data.trajectory import Trajectory
from .engine import Engine
from .errors import DataError
from .scenes import EngineParams, EngineSettings, make_scene, parse_params
from .workers import ShardedWorkers

__all__ = ["SimulatedTrajectory", "simulate_one", "simulate_trajectories", "simulation_items",
           "recording_settings", "simulate_impact", "simulate_impacts",
           "impact_settings"]


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

    Raises DataError when the recordings do not share one (uniform) rate.
    """
    base = make_scene(scene).settings
    periods = []
    for traj in trajectories.values():
        steps = np.diff(traj.times_s)
        if np.ptp(steps) > 1e-6 * steps.mean():
            raise DataError(f"{traj.source or traj.traj_id}: samples are not evenly spaced")
        periods.append(steps.mean())
    if not periods:
        raise DataError("no recordings to simulate")
    if np.ptp(periods) > 1e-6 * np.mean(periods):
        raise DataError(f"recordings have different rates ({1 / max(periods):.3f} to "
                        f"{1 / min(periods):.3f} Hz): simulate them separately")
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
        with ShardedWorkers(scene, simulation_items(scene, trajectories), n_workers,
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
    from .scenes.planar import IMPACT_START_OVERLAP_M

    _, pre_state = item
    if engine.params != params:
        engine.set_params(params)
    x, _, theta, dx, dy, dtheta = pre_state
    height = engine.scene.resting_height(theta) - IMPACT_START_OVERLAP_M
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
    :mod:`residualsim.scenes.planar`) and runs until its contact event ends (at most
    :data:`IMPACT_MAX_STEPS` periods); gravity's share over that time is removed, as in
    the analytic models' impulsive predictions. ``impacts`` must be in the ``"corrected"``
    (right-handed) convention of the scenes; the result is in the same convention.
    """
    if impacts.convention != "corrected":
        raise DataError(f"{impacts.source}: simulate impacts in the 'corrected' convention")
    params = parse_params(params)
    items = list(zip(impacts.rows.tolist(), impacts.pre_state))
    with ShardedWorkers(scene, items, n_workers, impact_settings(scene, substeps)) as pool:
        return np.array(pool.map(simulate_impact, params)).reshape(-1, 3)
