"""Synthetic capture sessions (residualsim.sim.sessions) and their writers
(residualsim.data.session_write): the truth is right, and what is written reads back."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import numpy as np
import pytest

from residualsim.data.session_write import (JointMessages, PoseMessages, pack_pose_stamped,
                                            stamps_to_ns, write_pose_bag, write_session_csv)
from residualsim.errors import ParameterError
from residualsim.sim.session_motion import quat_exp, quat_mul, quat_rotate
from residualsim.sim.sessions import EVENT_KINDS, corrupt_session, synthesize_session

ROOT = Path(__file__).resolve().parents[1]
SCENES = {"cube": ROOT / "assets" / "cube.urdf",
          "hinge": ROOT / "assets" / "examples" / "hinge.toml",
          "spinner": ROOT / "tests" / "assets" / "spinner.urdf",
          "slider": ROOT / "tests" / "assets" / "slider.urdf"}
GRAVITY = np.array([0.0, 0.0, -9.81])


@pytest.fixture(scope="module")
def sessions() -> dict:
    """One default session (6 throws, 2 placements, 1 slide) of each object, at an epoch
    start: about 1 s each."""
    return {name: synthesize_session(str(path), seed=3, start_s=1.7e9)
            for name, path in SCENES.items()}


def _fields(session) -> list:
    arrays = [session.times_s, session.joint_positions, session.com_positions_m, session.held]
    arrays += [session.link_positions_m[k] for k in session.link_names]
    arrays += [session.link_quat_wxyz[k] for k in session.link_names]
    return arrays


def test_same_seed_same_session_bit_for_bit():
    first, second, other = (synthesize_session(str(SCENES["hinge"]), n_throws=2, placements=1,
                                               slides=1, seed=seed) for seed in (4, 4, 5))
    for a, b in zip(_fields(first), _fields(second)):
        np.testing.assert_array_equal(a, b)
    assert first.throws == second.throws and first.events == second.events
    assert len(first.times_s) != len(other.times_s) or not np.array_equal(
        first.com_positions_m, other.com_positions_m)


@pytest.mark.parametrize("name", list(SCENES))
def test_timeline_truth_is_consistent(sessions, name):
    session = sessions[name]
    times, held = session.times_s, session.held
    assert times[0] == 1.7e9 and np.allclose(np.diff(times), 1 / 150, atol=1e-6)
    assert set(session.link_positions_m) == set(session.link_names)
    assert session.joint_positions.shape == (len(times), len(session.joint_names))
    kinds = [kind for kind, _, _ in session.events]
    assert set(kinds) <= set(EVENT_KINDS)
    assert (kinds.count("throw"), kinds.count("carry")) == (6, 6)
    assert (kinds.count("placement"), kinds.count("slide")) == (2, 1)
    starts = [start for _, start, _ in session.events]
    ends = [end for _, _, end in session.events]
    assert all(s <= e for s, e in zip(starts, ends))
    assert all(e <= s + 1e-9 for e, s in zip(ends[:-1], starts[1:]))
    assert starts[0] == times[0] and ends[-1] == times[-1]
    for throw in session.throws:
        k = throw.release_index
        assert times[k - 1] < throw.release_time_s <= times[k]
        assert held[k - 1] and not held[k:throw.end_index + 1].any()
        assert throw.end_index == len(times) - 1 or held[throw.end_index + 1]
        assert k < throw.contact_index <= throw.rest_index <= throw.end_index
        flight_s = (throw.contact_index - k) / session.rate_hz
        assert 0.1 < flight_s < 0.6
        assert len(throw.release_joint_rates) == len(session.joint_names)


@pytest.mark.parametrize("name", list(SCENES))
def test_free_flight_follows_gravity(sessions, name):
    """From the release to the first contact the centre of mass is a parabola under g
    (residual < 1e-4 m), and the hand's wind-up before the release is not."""
    session = sessions[name]
    for throw in session.throws:
        samples = np.arange(throw.release_index, throw.contact_index)
        t = session.times_s[samples] - throw.release_time_s
        com = session.com_positions_m[samples]
        ballistic = com - 0.5 * np.outer(t ** 2, GRAVITY)
        design = np.column_stack([np.ones_like(t), t])
        coefficients, *_ = np.linalg.lstsq(design, ballistic, rcond=None)
        assert np.abs(design @ coefficients - ballistic).max() < 1e-4
        if name == "cube":  # base frame at the centre: the release velocity is the hand's
            np.testing.assert_allclose(coefficients[1], throw.release_velocity_mps, atol=0.01)
        before = session.com_positions_m[throw.release_index - 3:throw.release_index]
        acceleration = (before[2] - 2 * before[1] + before[0]) * session.rate_hz ** 2
        assert acceleration[2] > 0  # the hand accelerates it upward, against gravity


def _joint_origin(urdf: Path, joint: str) -> np.ndarray:
    element = ElementTree.parse(urdf).getroot().find(f"joint[@name='{joint}']/origin")
    return np.array([float(v) for v in element.get("xyz").split()])


def test_hinge_links_agree_with_the_urdf(sessions):
    """The arm's URDF frame is the base frame times the joint origin times the rotation by
    the joint angle about z, at every sample (held or free)."""
    session = sessions["hinge"]
    base_p, base_q = session.link_positions_m["base"], session.link_quat_wxyz["base"]
    origin = _joint_origin(SCENES["hinge"].with_suffix(".urdf"), "elbow")
    angle = session.joint_positions[:, 0]
    expected_p = base_p + quat_rotate(base_q, np.broadcast_to(origin, base_p.shape))
    expected_q = quat_mul(base_q, quat_exp(np.outer(angle, [0.0, 0.0, 1.0])))
    np.testing.assert_allclose(session.link_positions_m["arm"], expected_p, atol=1e-9)
    dot = np.abs(np.sum(expected_q * session.link_quat_wxyz["arm"], axis=1))
    assert np.all(dot > 1 - 1e-12)
    for quat in session.link_quat_wxyz.values():
        assert np.all(np.sum(quat[1:] * quat[:-1], axis=1) > 0)  # sign continuous


def test_continuous_joint_is_not_wrapped_and_prismatic_stays_in_limits(sessions):
    spin = sessions["spinner"].joint_positions[:, 0]
    assert np.abs(np.diff(spin)).max() < math.pi / 2
    throws = sessions["spinner"].throws
    turns = [np.ptp(spin[t.release_index:t.contact_index]) for t in throws]
    assert max(turns) > math.pi and np.abs(spin).max() > math.pi
    slide = sessions["slider"].joint_positions[:, 0]
    assert np.abs(slide).max() < 0.03 + 1e-3


def test_the_hand_never_takes_the_object_below_the_table(sessions):
    """Every held sample, rebuilt in a separate PyBullet world from the link pose and the
    joints: no point of the object is more than the resting contact's ~0.01 mm below z=0."""
    from residualsim.sim.bullet import pb
    from residualsim.sim.scenes.base import load_urdf

    session = sessions["hinge"]
    client = pb.connect(pb.DIRECT)
    try:
        table = load_urdf(client, "table.urdf", useFixedBase=True)
        body = load_urdf(client, str(SCENES["hinge"].with_suffix(".urdf")),
                         flags=pb.URDF_USE_INERTIA_FROM_FILE)
        offset, orientation = pb.getDynamicsInfo(body, -1, physicsClientId=client)[3:5]
        lowest = np.inf
        for k in np.flatnonzero(session.held)[::2]:
            w, x, y, z = session.link_quat_wxyz["base"][k]
            position, quat = pb.multiplyTransforms(session.link_positions_m["base"][k],
                                                   [x, y, z, w], offset, orientation)
            pb.resetBasePositionAndOrientation(body, position, quat, physicsClientId=client)
            pb.resetJointState(body, 0, session.joint_positions[k, 0], physicsClientId=client)
            points = pb.getClosestPoints(body, table, 0.01, -2, -1, physicsClientId=client)
            lowest = min([lowest] + [p[8] for p in points])
        assert lowest > -1e-4
    finally:
        pb.disconnect(physicsClientId=client)


def test_corrupt_session_puts_corruptions_where_it_says(sessions):
    session = sessions["hinge"]
    streams = corrupt_session(session, dropout=0.02, nan_runs=3, frozen_runs=2,
                              out_of_order=3, duplicates=2, seed=1)
    assert set(streams) == {"base", "arm"}
    protected = set()
    for throw in session.throws:
        protected |= set(range(throw.release_index, throw.release_index + 5))
    releases = {throw.release_index for throw in session.throws}
    for link, stream in streams.items():
        meta = stream.metadata
        index = meta["truth_index"]
        np.testing.assert_array_equal(stream.stamps_s, session.times_s[index])  # no jitter
        assert not releases & set(meta["dropped"].tolist())
        assert len(meta["nan_runs"]) == 3 and len(meta["frozen_runs"]) == 2
        assert len(meta["out_of_order"]) == 3 and len(meta["duplicates"]) == 2
        for start, stop in meta["nan_runs"]:
            assert not protected & set(range(start, stop)) and 2 <= stop - start <= 6
            rows = np.isin(index, np.arange(start, stop))
            assert np.isnan(stream.positions_m[rows]).all()
        for start, stop in meta["frozen_runs"]:
            assert not protected & set(range(start - 1, stop)) and 3 <= stop - start <= 8
            rows = np.flatnonzero(np.isin(index, np.arange(start - 1, stop)))
            assert len(rows) == stop - start + 1  # none dropped
            assert (stream.positions_m[rows] == stream.positions_m[rows[0]]).all()
            assert len(set(stream.stamps_s[rows].tolist())) == len(rows)
        for i in meta["out_of_order"]:
            (a,), (b,) = np.flatnonzero(index == i), np.flatnonzero(index == i + 1)
            assert stream.receive_s[a] > stream.receive_s[b]
            assert stream.stamps_s[a] < stream.stamps_s[b]
        for i in meta["duplicates"]:
            rows = np.flatnonzero(index == i)
            assert len(rows) == 2
            np.testing.assert_array_equal(stream.positions_m[rows[0]], stream.positions_m[rows[1]])
        clean = ~np.isin(index, [i for s, e in meta["nan_runs"] + meta["frozen_runs"]
                                 for i in range(s, e)])
        error = stream.positions_m[clean] - session.link_positions_m[link][index[clean]]
        assert 2e-4 < error.std() < 4e-4  # the default 0.3 mm noise


# --- writers ----------------------------------------------------------------------------------
def _typestore(ros1: bool):
    from rosbags.typesys import Stores, get_typestore

    return get_typestore(Stores.ROS1_NOETIC if ros1 else Stores.ROS2_HUMBLE)


@pytest.mark.parametrize("ros1", [True, False])
@pytest.mark.parametrize("frame", ["world", "", "map", "mocap_origin"])
def test_pose_stamped_packing_equals_the_typestore_byte_for_byte(ros1, frame):
    store = _typestore(ros1)
    types = store.types
    rng = np.random.default_rng(0)
    stamps = np.array([0.0, 1.5, 1.7e9 + 0.123456789, 1.7e9 + 0.9999999999, 2e9])
    positions = rng.normal(size=(5, 3))
    positions[1] = np.nan
    quat = rng.normal(size=(5, 4))
    rows = pack_pose_stamped(stamps, positions, quat, frame, ros1=ros1, first_seq=41)
    sec, nanosec, _ = stamps_to_ns(stamps)
    for i in range(5):
        extra = {"seq": 41 + i} if ros1 else {}
        header = types["std_msgs/msg/Header"](
            stamp=types["builtin_interfaces/msg/Time"](sec=int(sec[i]), nanosec=int(nanosec[i])),
            frame_id=frame, **extra)
        pose = types["geometry_msgs/msg/Pose"](
            position=types["geometry_msgs/msg/Point"](*positions[i]),
            orientation=types["geometry_msgs/msg/Quaternion"](x=quat[i, 1], y=quat[i, 2],
                                                              z=quat[i, 3], w=quat[i, 0]))
        message = types["geometry_msgs/msg/PoseStamped"](header=header, pose=pose)
        serialize = store.serialize_ros1 if ros1 else store.serialize_cdr
        assert bytes(serialize(message, "geometry_msgs/msg/PoseStamped")) == rows[i].tobytes()


def test_stamps_become_exact_nanoseconds():
    from decimal import Decimal

    stamps = np.array([1.7e9 + 0.1, 1.7e9 + 1 / 3, 1700000000.9999999, 0.5, 12.000000001])
    sec, nanosec, total = stamps_to_ns(stamps)
    for stamp, s, n, t in zip(stamps, sec, nanosec, total):
        exact = int((Decimal(float(stamp)) * 10 ** 9).to_integral_value())
        assert t == exact and s * 10 ** 9 + n == exact and 0 <= n < 10 ** 9
    with pytest.raises(ParameterError):
        stamps_to_ns(np.array([-0.5]))


def _read_poses(path: Path) -> dict:
    """topic -> (bag times ns, header ns, poses (N, 7) x y z qw qx qy qz) in bag order."""
    from rosbags.highlevel import AnyReader

    found: dict = {}
    with AnyReader([path]) as reader:
        for connection, timestamp, raw in reader.messages():
            message = reader.deserialize(raw, connection.msgtype)
            if connection.msgtype.endswith("TFMessage"):
                items = [(t.child_frame_id, t.header, t.transform.translation,
                          t.transform.rotation) for t in message.transforms]
            elif connection.msgtype.endswith("TransformStamped"):
                items = [(connection.topic, message.header, message.transform.translation,
                          message.transform.rotation)]
            elif connection.msgtype.endswith(("PoseStamped", "Odometry")):
                pose = message.pose.pose if connection.msgtype.endswith("Odometry") \
                    else message.pose
                items = [(connection.topic, message.header, pose.position, pose.orientation)]
            else:
                items = [(connection.topic, None, None, message)]
            for key, header, p, q in items:
                times, stamps, poses = found.setdefault(key, ([], [], []))
                times.append(timestamp)
                if header is None:
                    poses.append(q)
                    continue
                stamps.append(header.stamp.sec * 10 ** 9 + header.stamp.nanosec)
                poses.append([p.x, p.y, p.z, q.w, q.x, q.y, q.z])
    return found


def _expected(stream: PoseMessages) -> tuple:
    order = np.argsort(stream.receive_times_s, kind="stable")
    return (stamps_to_ns(stream.receive_times_s)[2][order], stamps_to_ns(stream.stamps_s)[2][order],
            np.column_stack([stream.positions_m, stream.quat_wxyz])[order])


@pytest.fixture(scope="module")
def streams(sessions) -> dict:
    corrupted = corrupt_session(sessions["hinge"], jitter_s=1e-4, dropout=0.01, nan_runs=2,
                                out_of_order=2, duplicates=1, seed=2)
    return {f"/mocap/{link}/pose": stream for link, stream in corrupted.items()}


@pytest.mark.parametrize("storage", ["ros1", "sqlite3", "mcap"])
def test_pose_bags_read_back_with_the_same_stamps_and_poses(tmp_path, sessions, streams,
                                                            storage):
    session = sessions["hinge"]
    joints = JointMessages("/joint_states", session.times_s, session.joint_names,
                           session.joint_positions)
    path = tmp_path / ("session.bag" if storage == "ros1" else "session")
    written = write_pose_bag(path, streams, storage=storage, joint_state=joints,
                             extra_topics={"/operator/notes": [(1.7e9 + 2.0, "throw 1")]})
    assert written == path and [p.name for p in tmp_path.iterdir()] == [path.name]
    found = _read_poses(path)
    for topic, stream in streams.items():
        times, stamps, poses = found[topic]
        expected_times, expected_stamps, expected_poses = _expected(stream)
        np.testing.assert_array_equal(times, expected_times)
        np.testing.assert_array_equal(stamps, expected_stamps)
        np.testing.assert_array_equal(np.array(poses), expected_poses)  # NaN included
    assert len(found["/joint_states"][2]) == len(session.times_s)
    assert found["/operator/notes"][2][0].data == "throw 1"
    with pytest.raises(ParameterError, match="already exists"):
        write_pose_bag(path, streams, storage=storage)


@pytest.mark.parametrize("msgtype", ["TransformStamped", "Odometry", "tf"])
@pytest.mark.parametrize("storage", ["ros1", "mcap"])
def test_other_message_types_read_back(tmp_path, msgtype, storage):
    rng = np.random.default_rng(1)
    n = 20
    quat = rng.normal(size=(n, 4))
    quat /= np.linalg.norm(quat, axis=1, keepdims=True)
    base = PoseMessages(1.7e9 + np.arange(n) / 240, rng.normal(size=(n, 3)), quat)
    arm = PoseMessages(1.7e9 + np.arange(n) / 240 + 1e-4, rng.normal(size=(n, 3)), quat)
    keys = ("base", "arm") if msgtype == "tf" else ("/mocap/base", "/mocap/arm")
    path = tmp_path / ("s.bag" if storage == "ros1" else "s")
    write_pose_bag(path, dict(zip(keys, (base, arm))), storage=storage, msgtype=msgtype)
    found = _read_poses(path)
    for key, stream in zip(keys, (base, arm)):
        times, stamps, poses = found[key]
        np.testing.assert_array_equal(stamps, stamps_to_ns(stream.stamps_s)[2])
        np.testing.assert_array_equal(np.array(poses),
                                      np.column_stack([stream.positions_m, stream.quat_wxyz]))


def test_session_csv_writes_nan_as_empty_cells(tmp_path, sessions):
    session = sessions["hinge"]
    n = 50
    positions = session.link_positions_m["base"][:n].copy()
    positions[3:6] = np.nan
    arm_quat = session.link_quat_wxyz["arm"][:n].copy()
    arm_quat[10] = np.nan
    path = write_session_csv(tmp_path / "session.csv", session.times_s[:n], positions,
                             session.link_quat_wxyz["base"][:n],
                             joint_names=session.joint_names,
                             joint_positions=session.joint_positions[:n],
                             links={"arm": (session.link_positions_m["arm"][:n], arm_quat)})
    lines = path.read_text().splitlines()
    assert lines[0] == ("t,x,y,z,qw,qx,qy,qz,elbow,arm.x,arm.y,arm.z,arm.qw,arm.qx,arm.qy,"
                        "arm.qz")
    assert len(lines) == n + 1
    cells = [line.split(",") for line in lines[1:]]
    assert all(len(row) == 16 for row in cells)
    assert cells[4][1:4] == ["", "", ""] and cells[4][4] != ""
    assert cells[10][12:16] == ["", "", "", ""]
    table = np.array([[float(c) if c else np.nan for c in row] for row in cells])
    np.testing.assert_array_equal(table[:, 0], session.times_s[:n])  # repr: exact
    np.testing.assert_array_equal(table[:, 1:4], positions)
    np.testing.assert_array_equal(table[:, 8], session.joint_positions[:n, 0])
    assert [p.name for p in tmp_path.iterdir()] == ["session.csv"]
