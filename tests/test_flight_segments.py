"""The free flights between bounces that lsq's body stage fits beside the first flights
(issue 48; residualsim/sysid/flight_segments.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from residualsim.sysid.flight_segments import (LEAD_SAMPLES, MIN_SEGMENT_SAMPLES, SEGMENT_KEY,
                                               flight_segments, later_flights, segment_of)

HINGE = Path(__file__).resolve().parents[1] / "assets" / "examples" / "hinge.toml"


@pytest.fixture(scope="module")
def hinge_tosses(tmp_path_factory):
    """(truth with velocities, the same read back as poses only with fitted starts, their
    folder): 6 hinge tosses, 70 samples at 100 Hz, 0.1 mm noise."""
    from residualsim.data.csv import save_csv_trajectories
    from residualsim.sim.recordings import load_recordings
    from residualsim.sim.synthesize import synthesize_tosses

    truth = synthesize_tosses({"lateral_friction": 0.3, "restitution": 0.5}, n_tosses=6,
                              n_samples=70, rng=3, scene=str(HINGE), rate_hz=100.0,
                              noise_m=1e-4)
    folder = tmp_path_factory.mktemp("segments") / "poses"
    save_csv_trajectories(folder, truth, with_velocities=False)
    return truth, load_recordings(folder, str(HINGE)), folder


def _distance(engine, trajectory, index):
    from residualsim.sim.bullet import pb

    engine.reset(engine.scene.state_from_trajectory(trajectory, index))
    near = pb.getClosestPoints(engine.scene.body, engine.scene.static_body, 1.0,
                               engine.scene.link, -1, physicsClientId=engine.client)
    return min(p[8] for p in near)


def test_later_flights_lie_after_the_first_contact_away_from_the_table(hinge_tosses):
    from residualsim.sim.engine import Engine
    from residualsim.sim.recordings import CONTACT_TOLERANCE_M, free_flight_samples

    truth, _, _ = hinge_tosses
    found = 0
    with Engine(str(HINGE)) as engine:
        for trajectory in truth.values():
            first_contact = free_flight_samples(engine, trajectory)
            flights = later_flights(engine, trajectory)
            for first, end in flights:
                found += 1
                assert first >= first_contact + 1 + LEAD_SAMPLES
                assert end - first >= MIN_SEGMENT_SAMPLES
                assert all(_distance(engine, trajectory, i) > CONTACT_TOLERANCE_M
                           for i in range(first - LEAD_SAMPLES, end))
                # a contact (or the end) closes it, and one opens it
                assert end == trajectory.n_samples or \
                    _distance(engine, trajectory, end) <= CONTACT_TOLERANCE_M or \
                    _distance(engine, trajectory, end) < min(
                        _distance(engine, trajectory, end - 1),
                        _distance(engine, trajectory, end + 1))
            assert [f for f, _ in flights] == sorted(f for f, _ in flights)
    assert found >= 2  # the synthetic tosses do bounce and fly again


def test_a_segment_is_its_samples_as_a_recording_of_their_own(hinge_tosses):
    truth, _, _ = hinge_tosses
    trajectory = next(iter(truth.values()))
    trajectory = dataclasses.replace(trajectory, metadata={
        "velocities": "estimated", "recorded_first_state": [0.0] * 15,
        "time_base": {"filled_samples": [3, 12, 15, 40]}})
    segment = segment_of(trajectory, 12, 30, 2)
    assert segment.traj_id == trajectory.traj_id + SEGMENT_KEY + "2"
    assert segment.n_samples == 18 and segment.times_s[0] == 0.0
    np.testing.assert_array_equal(segment.positions_m, trajectory.positions_m[12:30])
    np.testing.assert_array_equal(segment.joint_positions, trajectory.joint_positions[12:30])
    np.testing.assert_allclose(segment.times_s, trajectory.times_s[12:30] - 0.12, atol=1e-12)
    assert segment.metadata["time_base"]["filled_samples"] == [0, 3]
    assert "recorded_first_state" not in segment.metadata  # a fit starts from its own data
    assert segment.metadata["velocities"] == "estimated"


def test_pose_only_segments_start_from_states_fitted_to_their_flight(hinge_tosses):
    """Each pose-only segment's first state (velocities estimated from noisy poses) is
    fitted to its flight: close to the true state at that sample; the same for 1 or 2
    workers."""
    from residualsim.sim.rollout import recording_settings
    from residualsim.sim.scenes import EngineParams

    truth, poses, _ = hinge_tosses
    settings = recording_settings(str(HINGE), poses)
    one = flight_segments(str(HINGE), poses, settings, EngineParams(), n_workers=1)
    two = flight_segments(str(HINGE), poses, settings, EngineParams(), n_workers=2)
    assert list(one) == list(two) and len(one) >= 2
    for key, segment in one.items():
        parent, _, number = key.partition(SEGMENT_KEY)
        assert number.isdigit()
        np.testing.assert_array_equal(segment.linear_velocity_mps,
                                      two[key].linear_velocity_mps)
        first = segment.metadata["flight_segment"]["first_sample"]
        assert segment.metadata["initial_state"].startswith("fitted by rollout")
        np.testing.assert_allclose(segment.linear_velocity_mps[0],
                                   truth[parent].linear_velocity_mps[first], atol=0.03)
        np.testing.assert_allclose(segment.angular_velocity_world_radps[0],
                                   truth[parent].angular_velocity_world_radps[first], atol=0.3)
        np.testing.assert_allclose(segment.joint_velocities[0],
                                   truth[parent].joint_velocities[first], atol=0.3)


def test_the_body_stage_fits_the_segments_the_same_for_any_worker_count(hinge_tosses,
                                                                         tmp_path):
    """lsq on pose-only tosses: the body stage solves the first flights' and the later
    flights' starts (counted in its summary) and finds the same damping with 1 or 2
    workers."""
    from residualsim.sysid.calibrate import calibrate

    _, poses, folder = hinge_tosses
    found = [calibrate(str(HINGE), folder, ["joint.elbow.damping"], tmp_path / f"cal{n}",
                       method="lsq", budget=20, split="all", plots=False, ground=False,
                       n_workers=n) for n in (1, 2)]
    (stage,) = found[0]["lsq_stages"]
    assert stage["flight_segments"] >= 2
    assert stage["initial_states"] == len(poses) + stage["flight_segments"]
    assert found[0]["best"] == found[1]["best"]
    assert found[0]["lsq_stages"] == found[1]["lsq_stages"]
