"""ROS bags as capture sessions: ROS 1 ``.bag`` files, ROS 2 bags (a folder with
``metadata.yaml``, or its ``.db3`` / ``.mcap`` storage file alone), read with ``rosbags``
(pure Python: no ROS installation).

Poses are read from these message types (the pose of the frame a topic tracks, in the
message's ``header.frame_id``, taken as the world):

* ``geometry_msgs/PoseStamped`` (VRPN and NatNet mocap drivers), ``PoseWithCovarianceStamped``,
  ``TransformStamped`` (its ``transform``), ``nav_msgs/Odometry`` (its ``pose.pose``);
* ``tf2_msgs/TFMessage`` on ``/tf``: each transform whose ``child_frame_id`` is named
  (``/tf:FRAME``, or the frame's name alone when no topic has that name).

Joint values come from ``sensor_msgs/JointState`` (``name`` and ``position``). Every stamp is
the message's ``header.stamp`` (the capture time), never the bag's receive time; a topic
whose header stamps are all zero (a driver that never set them) falls back to receive time,
with a warning.

Speed: the fixed-layout pose messages are decoded in bulk with numpy (their pose is the
last 7, or a fixed count of, float64 values of the serialised message, and the stamp sits
at bytes 4-12 in both ROS 1 and CDR encodings); the bulk decoding is checked against
``rosbags``' own deserialiser on each topic's first, middle and last messages, and any
disagreement (or big-endian CDR) falls back to deserialising every message.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from residualsim.data.session import JointStream, PoseStream
from residualsim.errors import DataError

__all__ = ["is_bag", "TopicInfo", "bag_topics", "read_bag_streams", "POSE_TYPES",
           "JOINT_TYPE", "TF_TYPES"]

log = logging.getLogger("residualsim.data")

#: Message types holding one pose, and where it sits: the count of float64 values from the
#: pose's first value to the message's end.
POSE_TYPES = {
    "geometry_msgs/msg/PoseStamped": 7,
    "geometry_msgs/msg/TransformStamped": 7,
    "geometry_msgs/msg/PoseWithCovarianceStamped": 7 + 36,
    "nav_msgs/msg/Odometry": 7 + 36 + 6 + 36,
}
#: TF topics' types (ROS 2 / ROS 1 tf2 and the old tf).
TF_TYPES = ("tf2_msgs/msg/TFMessage", "tf/msg/tfMessage")
JOINT_TYPE = "sensor_msgs/msg/JointState"


def is_bag(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a ROS 1 bag file, a ROS 2 storage file or a ROS 2 bag folder."""
    path = Path(path)
    if path.is_file():
        return path.suffix in (".bag", ".db3", ".mcap")
    return path.is_dir() and (path / "metadata.yaml").is_file()


def _reader(path: Path):
    try:
        from rosbags.highlevel import AnyReader
    except ImportError:  # pragma: no cover - rosbags is a core dependency
        raise DataError(f"{path}: reading ROS bags needs the rosbags package "
                        "(pip install rosbags)") from None
    return AnyReader([path])


def _open(path: Path):
    reader = _reader(path)
    try:
        reader.open()
    except Exception as exc:  # rosbags raises its own types for every broken file
        raise DataError(f"{path}: not a readable ROS bag ({type(exc).__name__}: {exc})") \
            from None
    return reader


@dataclass(frozen=True)
class TopicInfo:
    """A topic of a bag: its message type, count, mean rate (Hz, over the bag's span) and
    what it can give (``"pose"``, ``"tf"``, ``"joints"`` or ``""``)."""

    topic: str
    msgtype: str
    count: int
    rate_hz: float
    holds: str

    def summary(self) -> dict:
        return {"topic": self.topic, "type": self.msgtype, "count": self.count,
                "rate_hz": round(self.rate_hz, 3), "holds": self.holds or None}


def _holds(msgtype: str) -> str:
    if msgtype in POSE_TYPES:
        return "pose"
    if msgtype in TF_TYPES:
        return "tf"
    return "joints" if msgtype == JOINT_TYPE else ""


def _topics(reader) -> list[TopicInfo]:
    span = max(reader.duration * 1e-9, 1e-9)
    counts: dict[str, list] = {}
    for connection in reader.connections:
        entry = counts.setdefault(connection.topic, [connection.msgtype, 0])
        entry[1] += connection.msgcount
    return [TopicInfo(topic, msgtype, count, count / span if count > 1 else 0.0,
                      _holds(msgtype)) for topic, (msgtype, count) in sorted(counts.items())]


def bag_topics(path: str | os.PathLike[str]) -> list[TopicInfo]:
    """Every topic of the bag (from its index: nothing is decoded), sorted by name."""
    reader = _open(Path(path))
    try:
        return _topics(reader)
    finally:
        reader.close()


def tf_frames(path: str | os.PathLike[str], limit: int = 2000) -> list[str]:
    """The child frames of the bag's TF messages (its first ``limit`` messages)."""
    path = Path(path)
    reader = _open(path)
    try:
        connections = [c for c in reader.connections if c.msgtype in TF_TYPES
                       and c.topic != "/tf_static"]
        frames: set[str] = set()
        for n, (connection, _, raw) in enumerate(reader.messages(connections=connections)):
            if n >= limit:
                break
            for transform in reader.deserialize(raw, connection.msgtype).transforms:
                frames.add(transform.child_frame_id)
        return sorted(frames)
    finally:
        reader.close()


def _stamp(message) -> tuple[int, int]:
    """(sec, nanosec) of a message's header stamp."""
    return int(message.header.stamp.sec), int(message.header.stamp.nanosec)


def _pose_of(message) -> tuple[list[float], list[float]]:
    """(x, y, z), (w, x, y, z) of a pose message (any of :data:`POSE_TYPES`)."""
    if hasattr(message, "transform"):
        t, r = message.transform.translation, message.transform.rotation
        return [t.x, t.y, t.z], [r.w, r.x, r.y, r.z]
    pose = message.pose
    while hasattr(pose, "pose"):
        pose = pose.pose
    p, r = pose.position, pose.orientation
    return [p.x, p.y, p.z], [r.w, r.x, r.y, r.z]


def _bulk(raws: list[bytes], tail_values: int) -> tuple[np.ndarray, np.ndarray]:
    """Stamps (N, 2) (sec, nanosec) and the 7 pose values (N, 7) of fixed-layout messages,
    with numpy."""
    lengths = np.fromiter(map(len, raws), dtype=np.int64, count=len(raws))
    buffer = np.frombuffer(b"".join(raws), dtype=np.uint8)
    if len(raws) and (lengths == lengths[0]).all():
        table = buffer.reshape(len(raws), int(lengths[0]))
        stamp = np.ascontiguousarray(table[:, 4:12]).view("<u4")
        start = int(lengths[0]) - 8 * tail_values
        values = np.ascontiguousarray(table[:, start:start + 56]).view("<f8")
    else:
        ends = np.cumsum(lengths)
        starts = ends - lengths
        stamp = buffer[starts[:, None] + np.arange(4, 12)].view("<u4")
        first = ends - 8 * tail_values
        values = np.empty((len(raws), 7))
        for lo in range(0, len(raws), 100_000):  # bounded index arrays
            rows = first[lo:lo + 100_000, None] + np.arange(56)
            values[lo:lo + 100_000] = buffer[rows].view("<f8")
    return stamp.astype(np.int64).reshape(len(raws), 2), values.reshape(len(raws), 7)


def _agrees(reader, msgtype: str, raws: list[bytes], stamps, values) -> bool:
    """Whether the bulk decoding matches rosbags' deserialiser on a few messages."""
    for i in sorted({0, len(raws) // 2, len(raws) - 1}):
        if len(raws[i]) > 1 and reader.is2 and raws[i][1] != 1:
            return False  # big-endian CDR
        message = reader.deserialize(raws[i], msgtype)
        position, orientation = _pose_of(message)
        expected = np.array(position + orientation[1:] + orientation[:1])
        if _stamp(message) != tuple(stamps[i]) or not np.array_equal(
                expected, values[i], equal_nan=True):
            return False
    return True


def _decode(reader, msgtype: str, raws: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(sec, nanosec) stamps (N, 2) and (x, y, z, qx, qy, qz, qw) values (N, 7) of pose
    messages: in bulk, or one by one where the bulk decoding does not agree."""
    stamps, values = _bulk(raws, POSE_TYPES[msgtype])
    if not _agrees(reader, msgtype, raws, stamps, values):
        decoded = [reader.deserialize(raw, msgtype) for raw in raws]
        stamps = np.array([_stamp(m) for m in decoded], np.int64).reshape(-1, 2)
        poses = [_pose_of(m) for m in decoded]
        values = np.array([p + q[1:] + q[:1] for p, q in poses])
    return stamps, values


class _PoseCollector:
    """A pose topic's messages as they are read, decoded every :data:`_CHUNK` messages so
    that the raw bytes of a long session are never all held at once."""

    def __init__(self, reader, topic: str, msgtype: str) -> None:
        self.reader, self.topic, self.msgtype = reader, topic, msgtype
        self.raws: list[bytes] = []
        self.receive: list[int] = []
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, raw: bytes, receive_ns: int) -> None:
        self.raws.append(raw)
        self.receive.append(receive_ns)
        if len(self.raws) >= _CHUNK:
            self.flush()

    def flush(self) -> None:
        if self.raws:
            stamps, values = _decode(self.reader, self.msgtype, self.raws)
            self.parts.append((stamps, values, np.array(self.receive, np.int64)))
            self.raws, self.receive = [], []

    def stream(self) -> _Stamped:
        self.flush()
        if not self.parts:
            return _Stamped(self.topic, np.zeros((0, 2), np.int64), np.zeros((0, 3)),
                            np.zeros((0, 4)))
        stamps, values, receive = (np.concatenate(p) for p in zip(*self.parts))
        self.parts = []
        return _with_stamps(self.topic, stamps, receive, values[:, :3],
                            values[:, [6, 3, 4, 5]])


#: Messages decoded at a time (their raw bytes, ~100 B each, then freed).
_CHUNK = 65536


@dataclass(frozen=True)
class _Stamped:
    """A pose stream with integer (sec, nanosec) stamps (N, 2), before the session's origin
    is taken off (float seconds since 1970 keep only ~0.2 us)."""

    source: str
    stamps: np.ndarray
    positions: np.ndarray
    values: np.ndarray

    def relative_to(self, origin_sec: int) -> PoseStream:
        seconds = (self.stamps[:, 0] - origin_sec).astype(np.float64) + self.stamps[:, 1] * 1e-9
        return PoseStream(self.source, seconds, self.positions, self.values)


def _with_stamps(source: str, stamps: np.ndarray, receive_ns, positions, quats) -> _Stamped:
    if len(stamps) and not stamps.any():
        log.warning("%s: every header stamp is zero; using the bag's receive times "
                    "(their delays are in the data)", source)
        receive = np.asarray(receive_ns, np.int64)
        stamps = np.column_stack([receive // 10**9, receive % 10**9])
    return _Stamped(source, stamps, positions, quats)


@dataclass(frozen=True)
class _Request:
    """What to read for one link: a topic, or a TF child frame (``frame`` not None)."""

    topic: str
    frame: str | None = None


def _resolve(path: Path, spec: str, topics: dict[str, TopicInfo], tf_topic: str | None
             ) -> _Request:
    """A ``--link`` value as a topic or a TF child frame; DataError naming the file when it
    is neither or holds no pose."""
    pose_topics = sorted(t for t, info in topics.items() if info.holds in ("pose", "tf"))
    if spec in topics:
        info = topics[spec]
        if info.holds == "pose":
            return _Request(spec)
        if info.holds == "tf":
            raise DataError(f"{path}: topic {spec} is TF ({info.msgtype}); name the frame as "
                            f"{spec}:FRAME (its frames: {', '.join(tf_frames(path)[:12])})")
        raise DataError(f"{path}: topic {spec} is {info.msgtype}, which holds no pose (poses "
                        "come from PoseStamped, PoseWithCovarianceStamped, TransformStamped, "
                        f"Odometry or TF); pose topics here: {', '.join(pose_topics) or 'none'}")
    topic, _, frame = spec.rpartition(":")
    if topic in topics and topics[topic].holds == "tf" and frame:
        return _Request(topic, frame)
    if tf_topic is not None and spec in tf_frames(path, limit=10**9):
        return _Request(tf_topic, spec)
    raise DataError(f"{path}: no topic {spec!r}; pose topics here: "
                    f"{', '.join(pose_topics) or 'none'}")


def read_bag_streams(path: str | os.PathLike[str], links: dict[str, str],
                     joint_topic: str | None = None
                     ) -> tuple[dict[str, PoseStream], JointStream | None, int]:
    """Read each link's poses (``links``: link -> topic, ``/tf:FRAME`` or a TF frame) and,
    with ``joint_topic``, the joint values, in one pass over the bag. The streams come as
    stored (arrival order, duplicates and lost tracking included): clean them with
    :func:`~residualsim.data.session.clean_poses`. Their stamps are seconds since the
    returned origin (whole seconds on the stamps' clock: the earliest stamp's second)."""
    path = Path(path)
    reader = _open(path)
    try:
        topics = {info.topic: info for info in _topics(reader)}
        tf_topic = next((t for t, info in topics.items() if info.holds == "tf"
                         and t != "/tf_static"), None)
        requests = {link: _resolve(path, spec, topics, tf_topic) for link, spec in links.items()}
        if joint_topic is not None:
            if joint_topic not in topics:
                joints = sorted(t for t, i in topics.items() if i.holds == "joints")
                raise DataError(f"{path}: no topic {joint_topic!r}; JointState topics here: "
                                f"{', '.join(joints) or 'none'}")
            if topics[joint_topic].holds != "joints":
                raise DataError(f"{path}: topic {joint_topic} is "
                                f"{topics[joint_topic].msgtype}, not sensor_msgs/JointState")
        wanted = {r.topic for r in requests.values()} | ({joint_topic} if joint_topic else set())
        connections = [c for c in reader.connections if c.topic in wanted]
        types = {c.topic: c.msgtype for c in connections}
        pose_topics = {r.topic for r in requests.values() if r.frame is None}
        collectors = {t: _PoseCollector(reader, t, types[t]) for t in pose_topics if t in types}
        raws: dict[str, list[bytes]] = {t: [] for t in wanted if t not in collectors}
        receive: dict[str, list[int]] = {t: [] for t in raws}
        adders = {}
        for c in connections:
            if c.topic in collectors:
                adders[id(c)] = collectors[c.topic].add
            else:
                adders[id(c)] = (lambda add_raw, add_time: lambda raw, when: (
                    add_raw(raw), add_time(when)))(raws[c.topic].append,
                                                   receive[c.topic].append)
        for connection, timestamp, raw in reader.messages(connections=connections):
            adders[id(connection)](raw, timestamp)
        streams = {}
        for link, request in requests.items():
            if request.frame is None:
                streams[link] = collectors[request.topic].stream() if request.topic in \
                    collectors else _PoseCollector(reader, request.topic, "").stream()
            else:
                streams[link] = _tf_stream(reader, request, types[request.topic],
                                           raws[request.topic], receive[request.topic])
        firsts = [int(s.stamps[:, 0].min()) for s in streams.values() if len(s.stamps)]
        origin = min(firsts) if firsts else 0
        joints = None
        if joint_topic is not None:
            joints = _joint_stream(reader, joint_topic, raws[joint_topic], origin)
        return {link: s.relative_to(origin) for link, s in streams.items()}, joints, origin
    finally:
        reader.close()


def _tf_stream(reader, request: _Request, msgtype: str, raws: list[bytes],
               receive_ns: list[int]) -> _Stamped:
    stamps, values, received = [], [], []
    for raw, when in zip(raws, receive_ns):
        for transform in reader.deserialize(raw, msgtype).transforms:
            if transform.child_frame_id == request.frame:
                position, orientation = _pose_of(transform)
                stamps.append(_stamp(transform))
                values.append(position + orientation)
                received.append(when)
    source = f"{request.topic}:{request.frame}"
    if not stamps:
        return _Stamped(source, np.zeros((0, 2), np.int64), np.zeros((0, 3)), np.zeros((0, 4)))
    table = np.array(values, np.float64)
    return _with_stamps(source, np.array(stamps, np.int64), received, table[:, :3],
                        table[:, 3:])


def _joint_stream(reader, topic: str, raws: list[bytes], origin_sec: int) -> JointStream:
    stamps, rows, names = [], [], {}
    for raw in raws:
        message = reader.deserialize(raw, JOINT_TYPE)
        sec, nanosec = _stamp(message)
        stamps.append((sec - origin_sec) + nanosec * 1e-9)
        row = {}
        for name, value in zip(message.name, np.asarray(message.position, np.float64)):
            names.setdefault(name, len(names))
            row[name] = float(value)
        rows.append(row)
    ordered = tuple(names)
    table = np.full((len(rows), len(ordered)), np.nan)
    for i, row in enumerate(rows):
        for name, value in row.items():
            table[i, names[name]] = value
    return JointStream(topic, np.array(stamps, np.float64), ordered, table)
