"""Free flights between bounces: more of each recording for the body stage of
``calibrate --method lsq``.

The ``body`` stage (:mod:`residualsim.sysid.lsq`) fits inertia, centres of mass and joint
losses on free flight, where the motion is smooth in them. A recording's first flight (the
samples before its first contact) is short: on the synthetic hinge, 15 samples per toss on
average (at most 30 are used), while a toss bounces and flies again two or three times
before it settles. :func:`flight_segments` finds those later flights and returns each as a
recording of its own, which the body stage fits beside the first flights.

**Where a later flight is.** Geometrically, on the recorded poses, as the first flight's
end is found (:func:`~residualsim.sim.recordings.free_flight_samples`): at every sample the
object is placed at its recorded pose and its distance to the table measured (PyBullet's
closest points between the URDF's collision shapes and the table). A sample is in contact
when that distance is at most :data:`~residualsim.sim.recordings.CONTACT_TOLERANCE_M`
(2 mm, four times the tracking noise), or when it is a local minimum of the distance below
:data:`~residualsim.sim.recordings.BOUNCE_DISTANCE_M` (a fast bounce between two samples).
A later flight is a run of samples between two contacts (or a contact and the recording's
end), less :data:`LEAD_SAMPLES` after the contact (the pose just after a bounce is within
millimetres of the table, where a body that swings a little differently touches it again).
The body stage's horizon then leaves :data:`~residualsim.sysid.lsq.FLIGHT_MARGIN_S` out
before the next contact, as for the first flight, and a run shorter than
:data:`MIN_SEGMENT_SAMPLES` is dropped. The test needs no dynamics, so it does not depend
on the parameters being fitted (the engine's rollout would: a wrong body bounces
elsewhere), and it holds on real recordings as on synthetic ones. Rest and sliding are
contact (every sample within 2 mm), so neither is ever taken for flight; nor is a rest
or a slide or tumble above the table (an offset table or frame), which was: distances
are measured from the recording's rest when it ends at rest above the table
(:func:`~residualsim.sim.plausibility.rest_offset_m`), and a sample whose height is level
within :data:`~residualsim.sim.recordings.BOUNCE_DISTANCE_M` of the table is contact
(:func:`~residualsim.sim.plausibility.level_at`).

**Initial states.** A later flight's first state is unknown as a recording's first one is:
for a recording of poses only, its velocities were estimated from the poses (finite
differences, noisy); they are fitted to the segment's flight as a pose-only recording's
first state is when it is read (:func:`~residualsim.sim.recordings.fit_starts`, with the
body the stage starts from), and the stage then solves each segment's state offset beside
the body (variable projection, :mod:`residualsim.sysid.joint_states`), exactly as for the
first flights. A recording with recorded velocities starts each segment from its recorded
state at that sample, as its first flight starts from the recorded first state.

Every step is per recording and deterministic, so the segments, and the fit, do not depend
on the number of workers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from residualsim.data.trajectory import Trajectory
from residualsim.sim.bullet import pb
from residualsim.sim.engine import Engine
from residualsim.sim.plausibility import level_at, rest_offset_m
from residualsim.sim.recordings import (BOUNCE_DISTANCE_M, CONTACT_TOLERANCE_M,
                                        MAX_FREE_SAMPLES, fit_starts, table_distance_m)
from residualsim.sim.scenes import EngineParams, EngineSettings

__all__ = ["flight_segments", "later_flights", "segment_of", "LEAD_SAMPLES",
           "MIN_SEGMENT_SAMPLES", "SEGMENT_KEY"]

#: Samples left out after a contact before a later flight starts.
LEAD_SAMPLES = 1
#: Fewest samples of a later flight worth fitting: with 12 state unknowns (plus 2 per
#: joint) solved per segment, fewer samples leave the body little to see.
MIN_SEGMENT_SAMPLES = 8
#: Id of a recording's n-th later flight (n from 1): ``f"{id}{SEGMENT_KEY}{n}"``.
SEGMENT_KEY = "#flight"


def _distances(engine: Engine, trajectory: Trajectory) -> np.ndarray:
    """Distance (m) of the object at each recorded pose to the table (up to
    BOUNCE_DISTANCE_M; farther is reported as that)."""
    scene = engine.scene
    out = np.full(trajectory.n_samples, BOUNCE_DISTANCE_M)
    for index in range(trajectory.n_samples):
        engine.reset(scene.state_from_trajectory(trajectory, index))
        near = pb.getClosestPoints(scene.body, scene.static_body, BOUNCE_DISTANCE_M,
                                   scene.link, -1, physicsClientId=engine.client)
        out[index] = min((p[8] for p in near), default=BOUNCE_DISTANCE_M)
    return out


def later_flights(engine: Engine, trajectory: Trajectory) -> list[tuple[int, int]]:
    """The module doc's later flights of ``trajectory`` as (first, end) sample indices
    (end exclusive: the next contact's sample or the recording's end), in time order; at
    most :data:`~residualsim.sim.recordings.MAX_FREE_SAMPLES` each."""
    distance = _distances(engine, trajectory) - rest_offset_m(  # from a rest above the table
        engine, trajectory, table_distance_m, CONTACT_TOLERANCE_M, BOUNCE_DISTANCE_M)
    contact = distance <= CONTACT_TOLERANCE_M
    inner = distance[1:-1]
    contact[1:-1] |= (inner < BOUNCE_DISTANCE_M) & (distance[:-2] > inner) & (inner < distance[2:])
    contact |= (distance < BOUNCE_DISTANCE_M) & np.array(  # resting or sliding above it
        [level_at(trajectory, i, 2 - engine.scene.planar) for i in range(len(distance))],
        dtype=bool)
    touched = np.flatnonzero(contact)
    if not len(touched):
        return []
    flights, index = [], int(touched[0])
    while index < len(contact):
        if contact[index]:
            index += 1
            continue
        end = index
        while end < len(contact) and not contact[end]:
            end += 1
        first = index + LEAD_SAMPLES
        if end - first >= MIN_SEGMENT_SAMPLES:
            flights.append((first, min(end, first + MAX_FREE_SAMPLES)))
        index = end
    return flights


def segment_of(trajectory: Trajectory, first: int, end: int, number: int) -> Trajectory:
    """Samples ``first:end`` of ``trajectory`` as a recording of their own, id
    ``<id>#flight<number>``, times from 0; its metadata keeps only what a rollout and a
    start fit read (velocities recorded or estimated, the resampled samples shifted)."""
    cut = slice(first, end)
    metadata = {"velocities": trajectory.metadata.get("velocities", "recorded"),
                "flight_segment": {"of": trajectory.traj_id, "first_sample": first}}
    base = trajectory.metadata.get("time_base")
    if isinstance(base, Mapping) and base.get("filled_samples"):
        metadata["time_base"] = {"filled_samples": [i - first for i in base["filled_samples"]
                                                    if first <= i < end]}
    joints = {} if trajectory.joint_positions is None else {
        "joint_positions": trajectory.joint_positions[cut],
        "joint_velocities": (None if trajectory.joint_velocities is None
                             else trajectory.joint_velocities[cut])}
    return dataclasses.replace(
        trajectory, traj_id=f"{trajectory.traj_id}{SEGMENT_KEY}{number}",
        times_s=trajectory.times_s[cut] - trajectory.times_s[first],
        positions_m=trajectory.positions_m[cut], quat_wxyz=trajectory.quat_wxyz[cut],
        linear_velocity_mps=trajectory.linear_velocity_mps[cut],
        angular_velocity_world_radps=trajectory.angular_velocity_world_radps[cut],
        metadata=metadata, **joints)


def flight_segments(scene: str, trajectories: Mapping[str, Trajectory],
                    settings: EngineSettings, params: EngineParams, n_workers: int = 1
                    ) -> dict[str, Trajectory]:
    """Every later flight of ``trajectories`` (module doc) as a recording keyed
    ``<id>#flight<n>``, in the recordings' order; pose-only ones with their first state
    fitted to the segment's flight with the engine at ``params`` (its body)."""
    segments: dict[str, Trajectory] = {}
    with Engine(scene, settings=settings) as engine:
        engine.set_params(params)
        for key, trajectory in trajectories.items():
            for number, (first, end) in enumerate(later_flights(engine, trajectory), 1):
                segments[f"{key}{SEGMENT_KEY}{number}"] = segment_of(trajectory, first, end,
                                                                      number)
    return fit_starts(scene, segments, settings, params, n_workers, estimated=True,
                      recorded=False)
