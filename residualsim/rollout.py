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

__all__ = ["SimulatedTrajectory", "simulate_trajectories", "simulation_items", "recording_settings"]


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


def _simulate_one(engine: Engine, item: tuple, params: EngineParams) -> SimulatedTrajectory:
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
            results = pool.map(_simulate_one, params)
    else:
        results = workers.map(_simulate_one, params)
    return {result.traj_id: result for result in results}


def simulation_items(scene: str, trajectories: Mapping[str, Trajectory]) -> list[tuple]:
    """Work items (id, initial state in the scene layout, number of samples) for workers."""
    layout = make_scene(scene)
    return [(traj_id, layout.state_from_trajectory(traj, 0), traj.n_samples)
            for traj_id, traj in trajectories.items()]
