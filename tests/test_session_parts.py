"""The parts of ``data import``: URDF kinematics, stream clean-up and alignment, the throw
cutter on hand-made centre-of-mass paths with known releases."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from residualsim.data import quaternions as quat
from residualsim.data.cutting import CutOptions, find_throws, noise_sigma
from residualsim.data.kinematics import read_kinematics
from residualsim.data.session import PoseStream, align_poses, clean_poses
from residualsim.errors import DataError

ROOT = Path(__file__).resolve().parents[1]
HINGE = ROOT / "assets" / "examples" / "hinge.urdf"
SPINNER = ROOT / "tests" / "assets" / "spinner.urdf"
SLIDER = ROOT / "tests" / "assets" / "slider.urdf"


def _random_poses(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 3)), quat.normalise(rng.normal(size=(n, 4)))


@pytest.mark.parametrize("urdf", [HINGE, SPINNER, SLIDER])
def test_joint_values_come_back_from_the_links_they_place(urdf):
    tree = read_kinematics(urdf)
    (joint,) = tree.moving_joints
    base_m, base_wxyz = _random_poses(50, 1)
    if joint.type == "prismatic":
        values = np.linspace(-0.03, 0.03, 50)
    else:
        values = np.linspace(-3.0, 3.0, 50)
    poses = tree.link_poses(base_m, base_wxyz, values[:, None])
    reading = tree.joint_from_links(joint, poses[joint.parent], poses[joint.child])
    np.testing.assert_allclose(reading.values, values, atol=1e-9)
    assert reading.drift_m.max() < 1e-9 and reading.off_axis_rad.max() < 1e-6


def test_link_frames_agree_with_pybullet():
    import pybullet

    tree = read_kinematics(HINGE)
    base_m, base_wxyz = np.array([[0.1, -0.2, 0.3]]), quat.normalise(np.array([[0.9, 0.1, -0.3, 0.2]]))
    poses = tree.link_poses(base_m, base_wxyz, np.array([[0.7]]))
    client = pybullet.connect(pybullet.DIRECT)
    try:
        body = pybullet.loadURDF(str(HINGE), physicsClientId=client)
        local_m, local_xyzw = pybullet.getDynamicsInfo(body, -1, physicsClientId=client)[3:5]
        inertial_m = base_m[0] + quat.rotate(base_wxyz[0], np.array(local_m))
        inertial = quat.multiply(base_wxyz[0], np.array([local_xyzw[3], *local_xyzw[:3]]))
        pybullet.resetBasePositionAndOrientation(body, inertial_m, [*inertial[1:], inertial[0]],
                                                 physicsClientId=client)
        pybullet.resetJointState(body, 0, 0.7, physicsClientId=client)
        state = pybullet.getLinkState(body, 0, computeForwardKinematics=True,
                                      physicsClientId=client)
    finally:
        pybullet.disconnect(client)
    np.testing.assert_allclose(state[4], poses["arm"][0][0], atol=1e-6)
    xyzw = np.array(state[5])
    assert abs(abs(np.dot([xyzw[3], *xyzw[:3]], poses["arm"][1][0])) - 1.0) < 1e-6


def test_a_urdf_without_one_root_is_refused(tmp_path):
    bad = tmp_path / "two.urdf"
    bad.write_text('<robot name="r"><link name="a"/><link name="b"/></robot>')
    with pytest.raises(DataError, match="one root link"):
        read_kinematics(bad)


def test_cleaning_sorts_and_drops_duplicates_lost_and_frozen_poses():
    stamps = np.array([0.0, 0.02, 0.01, 0.03, 0.03, 0.04, 0.05, 0.06, 0.07])
    positions = np.arange(27, dtype=float).reshape(9, 3)
    quats = np.tile([1.0, 0.0, 0.0, 0.0], (9, 1))
    positions[5] = np.nan  # lost tracking
    quats[6] = 0.0  # a driver's zero quaternion
    positions[8] = positions[7]  # frozen
    stream, report = clean_poses(PoseStream("t", stamps, positions, quats))
    assert report.out_of_order == 1 and report.duplicates == 1
    assert report.lost == 2 and report.frozen == 1
    np.testing.assert_array_equal(stream.stamps_s, [0.0, 0.01, 0.02, 0.03, 0.06])
    np.testing.assert_array_equal(stream.positions_m[:, 0], [0, 6, 3, 9, 21])


def test_alignment_slerps_between_framing_messages_and_leaves_gaps_missing():
    q0 = np.array([1.0, 0.0, 0.0, 0.0])
    q1 = quat.from_axis_angle(np.array([0.0, 0.0, 1.0]), 1.0)
    stream = PoseStream("s", np.array([0.0, 0.1, 1.0, 1.1]), np.array(
        [[0.0, 0, 0], [1.0, 0, 0], [2.0, 0, 0], [3.0, 0, 0]]), np.array([q0, q1, q1, q1]))
    positions, quats = align_poses(stream, np.array([0.05, 0.5, 1.1, 1.2]), max_gap_s=0.2)
    np.testing.assert_allclose(positions[0], [0.5, 0, 0])
    assert math.isclose(quat.angle_of(quats[0]), 0.5, abs_tol=1e-12)
    assert np.isnan(positions[1]).all() and np.isnan(positions[3]).all()  # a gap, outside
    np.testing.assert_allclose(positions[2], [3.0, 0, 0])


def _hand_session(rate_hz: float, seed: int, noise_m: float = 3e-4):
    """Rests, carries, a wind-up accelerating at 12 m/s^2 up and 6 forward, releases
    between samples, flights to the table, a placement let go 1.5 cm above it (a 0.055 s
    fall), a slide by hand."""
    rng = np.random.default_rng(seed)
    dt, g, h = 1.0 / rate_hz, 9.81, 0.05
    times, path, releases = [], [], []
    t, p = 0.0, np.array([0.0, 0.0, h])

    def hold(duration, position):
        nonlocal t
        for _ in range(int(duration * rate_hz)):
            times.append(t)
            path.append(position.copy())
            t += dt

    def move(duration, target):
        nonlocal t, p
        start, n = p.copy(), int(duration * rate_hz)
        for i in range(n):
            times.append(t)
            path.append(start + (target - start) * (1 - math.cos(math.pi * i / n)) / 2)
            t += dt
        p = target.copy()

    for k in range(4):
        hold(0.8, p)
        move(0.7, np.array([0.1 * k, 0.0, 0.25 + 0.05 * k]))
        accel, start, t0 = np.array([6.0, 2.0 * (k - 1), 12.0]), p.copy(), t
        while t - t0 < 0.23:
            times.append(t)
            path.append(start + 0.5 * accel * (t - t0) ** 2)
            t += dt
        release = t0 + 0.23
        releases.append(release)
        p_r, v_r = start + 0.5 * accel * 0.23 ** 2, accel * 0.23
        while True:  # flight, then one bounce with restitution 0.3, then rest
            q = p_r + v_r * (t - release) + np.array([0, 0, -0.5 * g * (t - release) ** 2])
            if q[2] <= h:
                break
            times.append(t)
            path.append(q)
            t += dt
        p = q.copy()
        p[2] = h
        hold(1.2, p)
        if k == 1:  # a placement: carried up, let go 1.5 cm above the table
            move(0.6, p + np.array([0.05, 0.0, 0.10]))
            move(0.5, p + np.array([0.0, 0.0, -0.085]))
            drop = p.copy()
            t_drop = t
            while drop[2] > h:
                drop = p - np.array([0, 0, 0.5 * g * (t - t_drop) ** 2])
                times.append(t)
                path.append(np.maximum(drop, [-9, -9, h]))
                t += dt
            p = path[-1].copy()
            hold(0.8, p)
        if k == 2:  # a slide by hand
            move(0.8, p + np.array([0.2, 0.05, 0.0]))
    times = np.array(times)
    com = np.array(path) + rng.normal(0.0, noise_m, (len(times), 3))
    return times, com, np.array(releases)


@pytest.mark.parametrize("rate_hz, seed", [(150.0, 0), (240.0, 1), (100.0, 2)])
def test_every_throw_is_found_within_two_samples_of_its_release(rate_hz, seed):
    times, com, releases = _hand_session(rate_hz, seed)
    quats = np.tile([1.0, 0.0, 0.0, 0.0], (len(times), 1))
    segments, facts = find_throws(times, com, quats, np.zeros((len(times), 0)))
    throws = [s for s in segments if s.is_throw]
    assert len(throws) == len(releases)
    truth = np.searchsorted(times, releases)  # the first sample in free flight
    for segment, first in zip(throws, truth):
        assert abs(segment.start - first) <= 2, (segment.start, first)
        assert segment.rest is not None and segment.end > segment.rest
    skipped = [s for s in segments if not s.is_throw]  # the placement, where seen as flight
    assert len(skipped) <= 1 and all("min-flight-s" in s.reason for s in skipped)
    assert facts["noise_m"] == pytest.approx(3e-4, rel=0.3)


def test_a_tracking_gap_in_flight_is_a_skipped_segment_not_a_throw():
    times, com, releases = _hand_session(150.0, 3)
    first = int(np.searchsorted(times, releases[0]))
    keep = np.ones(len(times), bool)
    keep[first + 20:first + 80] = False  # tracking lost for 0.4 s in the first flight
    times, com = times[keep], com[keep]
    quats = np.tile([1.0, 0.0, 0.0, 0.0], (len(times), 1))
    segments, _ = find_throws(times, com, quats, np.zeros((len(times), 0)))
    assert sum(s.is_throw for s in segments) == len(releases) - 1
    assert any(not s.is_throw and "tracking lost" in s.reason for s in segments)


def test_noise_is_read_from_second_differences():
    rng = np.random.default_rng(0)
    still = np.zeros((5000, 3)) + rng.normal(0.0, 5e-4, (5000, 3))
    assert noise_sigma(still) == pytest.approx(5e-4, rel=0.05)


def test_thresholds_must_be_positive():
    with pytest.raises(ValueError, match="--window-s"):
        CutOptions(window_s=0.0)
