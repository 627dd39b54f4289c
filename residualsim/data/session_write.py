"""Writers of capture sessions: pose streams as ROS 1/2 bags, and one long CSV.

A motion-capture session is one continuous recording: each tracked link's pose (its URDF
link frame, world frame, metres, quaternion **w-x-y-z** link -> world) on its own topic.
These writers produce such files from arrays, for tests and benchmarks of the session
reader (e.g. from :func:`residualsim.sim.sessions.corrupt_session`).

:func:`write_pose_bag`
    A ROS 1 bag (``.bag``, rosbag 2.0) or a ROS 2 bag folder (sqlite3 or mcap storage,
    bag format version 9) of ``geometry_msgs/PoseStamped``, ``geometry_msgs/
    TransformStamped``, ``nav_msgs/Odometry`` or ``tf2_msgs/TFMessage`` (``/tf``) messages,
    optionally with a ``sensor_msgs/JointState`` topic and ``std_msgs/String`` topics.
    PoseStamped messages are packed with numpy (checked byte for byte against rosbags'
    typestore serialisation in the tests), about 3-4 µs per message written; the other
    types go through the typestore.
:func:`write_session_csv`
    One CSV in residualsim's recording format: ``t,x,y,z,qw,qx,qy,qz``, one column per
    joint, then seven columns per extra link (``<link>.x`` ... ``<link>.qz``); NaN is an
    empty cell (lost tracking).

Time stamps are float seconds on the session clock (e.g. Unix epoch, ~1.7e9 s); they are
turned into whole nanoseconds through their integer and fractional parts (``stamp * 1e9``
in float64 would be off by up to 128 ns at epoch sizes). Both writers are atomic: the file
or folder is built beside its destination and renamed into place when complete.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from residualsim.atomic import atomic_open
from residualsim.errors import DataError, ParameterError

__all__ = ["PoseMessages", "JointMessages", "write_pose_bag", "write_session_csv",
           "pack_pose_stamped", "stamps_to_ns", "STORAGES", "MSGTYPES"]

#: Storage of :func:`write_pose_bag`: a ROS 1 ``.bag`` file, or a ROS 2 bag folder.
STORAGES = ("ros1", "sqlite3", "mcap")
#: Message types of :func:`write_pose_bag`.
MSGTYPES = ("PoseStamped", "TransformStamped", "Odometry", "tf")

_TYPENAMES = {"PoseStamped": "geometry_msgs/msg/PoseStamped",
              "TransformStamped": "geometry_msgs/msg/TransformStamped",
              "Odometry": "nav_msgs/msg/Odometry",
              "tf": "tf2_msgs/msg/TFMessage"}
_NS_PER_S = 1_000_000_000


@dataclasses.dataclass(frozen=True)
class PoseMessages:
    """One pose stream: N messages in the order of their header stamps.

    stamps_s : ndarray of shape (N,)
        Header stamps, s, session clock (e.g. Unix epoch).
    positions_m : ndarray of shape (N, 3)
        Link frame origin, m, world frame (NaN: lost tracking).
    quat_wxyz : ndarray of shape (N, 4)
        Orientation, w-x-y-z, link -> world.
    receive_s : ndarray of shape (N,) or None
        When each message was received, s (the bag's timestamp, and the order messages are
        written in); None: the header stamps.
    metadata : mapping
        Free-form facts about the stream (e.g. where :func:`corrupt_session
        <residualsim.sim.sessions.corrupt_session>` put its corruptions); not written.
    """

    stamps_s: np.ndarray
    positions_m: np.ndarray
    quat_wxyz: np.ndarray
    receive_s: np.ndarray | None = None
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        stamps = np.asarray(self.stamps_s, dtype=np.float64).reshape(-1)
        n = len(stamps)
        positions = np.asarray(self.positions_m, dtype=np.float64)
        quat = np.asarray(self.quat_wxyz, dtype=np.float64)
        if positions.shape != (n, 3) or quat.shape != (n, 4):
            raise ParameterError(f"PoseMessages: {n} stamps need positions_m of shape ({n}, 3) "
                                 f"and quat_wxyz of shape ({n}, 4), got {positions.shape} and "
                                 f"{quat.shape}")
        object.__setattr__(self, "stamps_s", stamps)
        object.__setattr__(self, "positions_m", positions)
        object.__setattr__(self, "quat_wxyz", quat)
        if self.receive_s is not None:
            receive = np.asarray(self.receive_s, dtype=np.float64).reshape(-1)
            if receive.shape != (n,):
                raise ParameterError(f"PoseMessages: receive_s must have shape ({n},), got "
                                     f"{receive.shape}")
            object.__setattr__(self, "receive_s", receive)

    def __len__(self) -> int:
        return len(self.stamps_s)

    @property
    def receive_times_s(self) -> np.ndarray:
        """``receive_s``, or the header stamps when it is None."""
        return self.stamps_s if self.receive_s is None else self.receive_s


@dataclasses.dataclass(frozen=True)
class JointMessages:
    """Joint angles as ``sensor_msgs/JointState`` messages on ``topic``: ``stamps_s`` (N,)
    header stamps, s; ``names`` the k joints; ``positions`` (N, k), rad or m; ``receive_s``
    (N,) or None (the stamps)."""

    topic: str
    stamps_s: np.ndarray
    names: tuple[str, ...]
    positions: np.ndarray
    receive_s: np.ndarray | None = None

    def __post_init__(self) -> None:
        stamps = np.asarray(self.stamps_s, dtype=np.float64).reshape(-1)
        names = tuple(str(name) for name in self.names)
        positions = np.asarray(self.positions, dtype=np.float64).reshape(len(stamps), -1) \
            if len(stamps) else np.zeros((0, len(names)))
        if positions.shape != (len(stamps), len(names)):
            raise ParameterError(f"JointMessages: positions must have shape ({len(stamps)}, "
                                 f"{len(names)}), got {positions.shape}")
        object.__setattr__(self, "stamps_s", stamps)
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "positions", positions)
        if self.receive_s is not None:
            object.__setattr__(self, "receive_s",
                               np.asarray(self.receive_s, dtype=np.float64).reshape(-1))


# --- time ---------------------------------------------------------------------------------
def stamps_to_ns(stamps_s: np.ndarray, what: str = "stamps") -> tuple[np.ndarray, np.ndarray,
                                                                        np.ndarray]:
    """(sec, nanosec, total ns) int64 arrays of float seconds ``stamps_s`` (N,), rounded to
    the nearest nanosecond through the integer and fractional parts (exact for any float64
    stamp; ``stamps * 1e9`` is not above ~9e6 s). ParameterError for a negative or
    non-finite stamp (a bag's times are unsigned)."""
    stamps = np.asarray(stamps_s, dtype=np.float64).reshape(-1)
    bad = ~np.isfinite(stamps) | (stamps < 0)
    if bad.any():
        index = int(np.flatnonzero(bad)[0])
        raise ParameterError(f"{what}: must be finite and >= 0 s (a bag's times are unsigned), "
                             f"got {stamps[index]!r} at message {index}")
    sec = np.floor(stamps)
    nanosec = np.rint((stamps - sec) * 1e9).astype(np.int64)  # stamps - sec is exact
    sec = sec.astype(np.int64)
    carry = nanosec >= _NS_PER_S
    sec[carry] += 1
    nanosec[carry] -= _NS_PER_S
    return sec, nanosec, sec * _NS_PER_S + nanosec


# --- PoseStamped packed with numpy ------------------------------------------------------------
def _pose_dtype(frame: bytes, ros1: bool) -> np.dtype:
    """Structured dtype of one serialised PoseStamped (ROS 1 or little-endian CDR)."""
    names, formats, offsets = [], [], []

    def add(name: str, fmt: Any, offset: int) -> None:
        names.append(name)
        formats.append(fmt)
        offsets.append(offset)

    length = len(frame)
    if ros1:  # uint32 seq, time (uint32 sec, uint32 nsec), string, 7 float64, no alignment
        add("seq", "<u4", 0)
        add("sec", "<u4", 4)
        add("nanosec", "<u4", 8)
        add("length", "<u4", 12)
        text_at, text_size, pose_at = 16, length, 16 + length
    else:  # encapsulation header, int32 sec, uint32 nanosec, string (with NUL), pad to 8
        add("encapsulation", "<u4", 0)
        add("sec", "<i4", 4)
        add("nanosec", "<u4", 8)
        add("length", "<u4", 12)
        text_at, text_size = 16, length + 1
        end = 12 + text_size  # offsets after the 4-byte encapsulation header
        pose_at = 4 + (end + 7) // 8 * 8
    if text_size:
        add("text", f"S{text_size}", text_at)
    add("pose", ("<f8", (7,)), pose_at)
    return np.dtype({"names": names, "formats": formats, "offsets": offsets,
                     "itemsize": pose_at + 56})


def pack_pose_stamped(stamps_s: np.ndarray, positions_m: np.ndarray, quat_wxyz: np.ndarray,
                      frame_id: str = "world", *, ros1: bool, first_seq: int = 0
                      ) -> np.ndarray:
    """Serialised ``geometry_msgs/PoseStamped`` messages, (N, size) uint8, one row each:
    ROS 1 (header ``seq`` = ``first_seq`` + row) or CDR little-endian (ROS 2), the same
    bytes rosbags' ``serialize_ros1`` / ``serialize_cdr`` give."""
    frame = frame_id.encode("utf-8")
    dtype = _pose_dtype(frame, ros1)
    sec, nanosec, _ = stamps_to_ns(stamps_s)
    if not ros1 and sec.size and sec.max() > np.iinfo(np.int32).max:
        raise ParameterError("stamps: beyond a ROS 2 time's int32 seconds")
    if ros1 and sec.size and sec.max() > np.iinfo(np.uint32).max:
        raise ParameterError("stamps: beyond a ROS 1 time's uint32 seconds")
    rows = np.zeros(len(sec), dtype=dtype)
    if ros1:
        rows["seq"] = (first_seq + np.arange(len(sec))) % (1 << 32)
        rows["length"] = len(frame)
    else:
        rows["encapsulation"] = 0x0100  # bytes 00 01 00 00: CDR, little endian
        rows["length"] = len(frame) + 1
    rows["sec"] = sec
    rows["nanosec"] = nanosec
    if "text" in dtype.names:
        rows["text"] = frame + (b"" if ros1 else b"\0")
    quat = np.asarray(quat_wxyz, dtype=np.float64)
    rows["pose"] = np.column_stack([np.asarray(positions_m, dtype=np.float64),
                                    quat[:, 1:4], quat[:, 0]])
    return rows.view(np.uint8).reshape(len(rows), dtype.itemsize)


# --- other messages through the typestore ---------------------------------------------------
class _Messages:
    """Builds messages of one typestore (ROS 1 Noetic or ROS 2 Humble)."""

    def __init__(self, ros1: bool) -> None:
        from rosbags.typesys import Stores, get_typestore

        self.ros1 = ros1
        self.store = get_typestore(Stores.ROS1_NOETIC if ros1 else Stores.ROS2_HUMBLE)
        if "tf2_msgs/msg/TFMessage" not in self.store.types:  # not in rosbags' Noetic store
            from rosbags.typesys import get_types_from_msg

            self.store.register(get_types_from_msg(
                "geometry_msgs/TransformStamped[] transforms", "tf2_msgs/msg/TFMessage"))
        self.types = self.store.types
        self.serialize = self.store.serialize_ros1 if ros1 else self.store.serialize_cdr

    def header(self, sec: int, nanosec: int, frame_id: str, seq: int) -> Any:
        time = self.types["builtin_interfaces/msg/Time"](sec=int(sec), nanosec=int(nanosec))
        extra = {"seq": seq % (1 << 32)} if self.ros1 else {}
        return self.types["std_msgs/msg/Header"](stamp=time, frame_id=frame_id, **extra)

    def pose(self, pose: np.ndarray) -> Any:
        t = self.types
        return t["geometry_msgs/msg/Pose"](
            position=t["geometry_msgs/msg/Point"](x=pose[0], y=pose[1], z=pose[2]),
            orientation=t["geometry_msgs/msg/Quaternion"](x=pose[3], y=pose[4], z=pose[5],
                                                          w=pose[6]))

    def transform(self, header: Any, child: str, pose: np.ndarray) -> Any:
        t = self.types
        return t["geometry_msgs/msg/TransformStamped"](
            header=header, child_frame_id=child,
            transform=t["geometry_msgs/msg/Transform"](
                translation=t["geometry_msgs/msg/Vector3"](x=pose[0], y=pose[1], z=pose[2]),
                rotation=t["geometry_msgs/msg/Quaternion"](x=pose[3], y=pose[4], z=pose[5],
                                                           w=pose[6])))

    def message(self, msgtype: str, header: Any, child: str, pose: np.ndarray) -> Any:
        t = self.types
        if msgtype == "PoseStamped":
            return t["geometry_msgs/msg/PoseStamped"](header=header, pose=self.pose(pose))
        if msgtype == "TransformStamped":
            return self.transform(header, child, pose)
        if msgtype == "tf":
            return t["tf2_msgs/msg/TFMessage"](transforms=[self.transform(header, child, pose)])
        vector = t["geometry_msgs/msg/Vector3"]
        return t["nav_msgs/msg/Odometry"](
            header=header, child_frame_id=child,
            pose=t["geometry_msgs/msg/PoseWithCovariance"](pose=self.pose(pose),
                                                           covariance=np.zeros(36)),
            twist=t["geometry_msgs/msg/TwistWithCovariance"](
                twist=t["geometry_msgs/msg/Twist"](linear=vector(x=0.0, y=0.0, z=0.0),
                                                   angular=vector(x=0.0, y=0.0, z=0.0)),
                covariance=np.zeros(36)))

    def joint_state(self, header: Any, names: Sequence[str], positions: np.ndarray) -> Any:
        empty = np.zeros(0)
        return self.types["sensor_msgs/msg/JointState"](
            header=header, name=list(names), position=np.asarray(positions, dtype=np.float64),
            velocity=empty, effort=empty)

    def string(self, text: str) -> Any:
        return self.types["std_msgs/msg/String"](data=text)


def _child_frame(topic: str) -> str:
    return topic.rstrip("/").rsplit("/", 1)[-1] or topic


class _Source:
    """One topic's messages: payloads by index, their bag times (ns) and the connection."""

    def __init__(self, topic: str, typename: str, receive_ns: np.ndarray, payload) -> None:
        self.topic, self.typename = topic, typename
        self.receive_ns = receive_ns
        self.payload = payload
        self.connection: Any = None


def _pose_sources(streams: Mapping[str, PoseMessages], msgtype: str, frame_id: str,
                  messages: _Messages) -> list[_Source]:
    sources = []
    typename = _TYPENAMES[msgtype]
    for key, stream in streams.items():
        if not isinstance(stream, PoseMessages):
            raise ParameterError(f"streams[{key!r}]: expected PoseMessages, got "
                                 f"{type(stream).__name__}")
        _, _, receive_ns = stamps_to_ns(stream.receive_times_s, f"{key}: receive_s")
        topic = "/tf" if msgtype == "tf" else key
        if msgtype == "PoseStamped":
            rows = pack_pose_stamped(stream.stamps_s, stream.positions_m, stream.quat_wxyz,
                                     frame_id, ros1=messages.ros1)
            data, size = rows.tobytes(), rows.shape[1]

            def payload(i: int, data: bytes = data, size: int = size) -> bytes:
                return data[i * size:(i + 1) * size]
        else:
            sec, nanosec, _ = stamps_to_ns(stream.stamps_s, f"{key}: stamps")
            poses = np.column_stack([stream.positions_m, stream.quat_wxyz[:, 1:4],
                                     stream.quat_wxyz[:, 0]]).tolist()
            child = key if msgtype == "tf" else _child_frame(key)

            def payload(i: int, sec=sec, nanosec=nanosec, poses=poses, child=child) -> bytes:
                header = messages.header(sec[i], nanosec[i], frame_id, i)
                return bytes(messages.serialize(
                    messages.message(msgtype, header, child, poses[i]), typename))
        sources.append(_Source(topic, typename, receive_ns, payload))
    return sources


def _extra_sources(joint_state: JointMessages | None, extra_topics, frame_id: str,
                   messages: _Messages) -> list[_Source]:
    sources = []
    if joint_state is not None:
        js = joint_state
        sec, nanosec, _ = stamps_to_ns(js.stamps_s, f"{js.topic}: stamps")
        receive = js.stamps_s if js.receive_s is None else js.receive_s
        _, _, receive_ns = stamps_to_ns(receive, f"{js.topic}: receive_s")

        def joints(i: int) -> bytes:
            header = messages.header(sec[i], nanosec[i], frame_id, i)
            return bytes(messages.serialize(
                messages.joint_state(header, js.names, js.positions[i]),
                "sensor_msgs/msg/JointState"))
        sources.append(_Source(js.topic, "sensor_msgs/msg/JointState", receive_ns, joints))
    for topic, items in (extra_topics or {}).items():
        items = list(items)
        stamps = np.array([float(stamp) for stamp, _ in items], dtype=np.float64)
        texts = [str(text) for _, text in items]
        _, _, receive_ns = stamps_to_ns(stamps, f"{topic}: stamps")

        def text(i: int, texts: list[str] = texts) -> bytes:
            return bytes(messages.serialize(messages.string(texts[i]), "std_msgs/msg/String"))
        sources.append(_Source(topic, "std_msgs/msg/String", receive_ns, text))
    return sources


def _write_messages(writer: Any, sources: list[_Source]) -> None:
    """Write every source's messages in the order of their bag times (ties: sources in
    order, then messages in order)."""
    counts = [len(source.receive_ns) for source in sources]
    if not sum(counts):
        return
    times = np.concatenate([source.receive_ns for source in sources])
    which = np.repeat(np.arange(len(sources)), counts)
    index = np.concatenate([np.arange(n) for n in counts])
    order = np.lexsort((index, which, times))
    write = writer.write
    connections = [source.connection for source in sources]
    payloads = [source.payload for source in sources]
    for t, s, i in zip(times[order].tolist(), which[order].tolist(), index[order].tolist()):
        write(connections[s], t, payloads[s](i))


def _temporary_sibling(path: Path) -> Path:
    return path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"


def _open_writer(path: Path, storage: str) -> Any:
    """An open rosbags writer of ``storage`` creating ``path``."""
    if storage == "ros1":
        from rosbags.rosbag1 import Writer

        writer = Writer(path)
    else:
        from rosbags.rosbag2 import StoragePlugin, Writer

        plugin = StoragePlugin.SQLITE3 if storage == "sqlite3" else StoragePlugin.MCAP
        writer = Writer(path, version=9, storage_plugin=plugin)
    writer.open()
    return writer


def write_pose_bag(path: str | os.PathLike[str], streams: Mapping[str, PoseMessages], *,
                   storage: str = "ros1", msgtype: str = "PoseStamped",
                   frame_id: str = "world", joint_state: JointMessages | None = None,
                   extra_topics: Mapping[str, Sequence[tuple[float, str]]] | None = None,
                   overwrite: bool = False) -> Path:
    """Write pose streams as a ROS bag, atomically; return its path.

    Parameters
    ----------
    path : path-like
        A ``.bag`` file (``storage="ros1"``) or a bag folder (``"sqlite3"``, ``"mcap"``;
        ROS 2 bag format 9, its data file ``<folder name>.db3`` / ``.mcap``).
    streams : mapping of str -> PoseMessages
        Topic -> poses (for ``msgtype="tf"``: child frame id -> poses, all on ``/tf``).
        Header stamps are ``stamps_s``; each message's bag time is ``receive_s`` (default
        the stamps), and messages are written in that order.
    msgtype : str
        ``"PoseStamped"`` (geometry_msgs), ``"TransformStamped"`` (``child_frame_id`` the
        topic's last path element), ``"Odometry"`` (nav_msgs; pose filled, twist and
        covariances zero, ``child_frame_id`` as for TransformStamped) or ``"tf"``
        (tf2_msgs/TFMessage on ``/tf``, one transform per message, ``child_frame_id`` the
        stream key).
    frame_id : str
        Every header's ``frame_id`` (the world frame).
    joint_state : JointMessages, optional
        Also written, as ``sensor_msgs/JointState``.
    extra_topics : mapping of str -> list of (stamp_s, text), optional
        Topics of ``std_msgs/String`` messages (a topic that holds no pose).
    overwrite : bool
        Replace an existing ``path`` (default: ParameterError).

    Raises
    ------
    ParameterError
        An unknown storage or message type, streams of the wrong shape, a negative stamp,
        an existing ``path`` without ``overwrite``.
    """
    if storage not in STORAGES:
        raise ParameterError(f"storage must be one of {', '.join(STORAGES)}, got {storage!r}")
    if msgtype not in MSGTYPES:
        raise ParameterError(f"msgtype must be one of {', '.join(MSGTYPES)}, got {msgtype!r}")
    path = Path(path)
    if (path.exists() or path.is_symlink()) and not overwrite:
        raise ParameterError(f"{path}: already exists (pass overwrite=True to replace it)")
    ros1 = storage == "ros1"
    messages = _Messages(ros1)
    sources = _pose_sources(streams, msgtype, frame_id, messages)
    sources += _extra_sources(joint_state, extra_topics, frame_id, messages)
    path.parent.mkdir(parents=True, exist_ok=True)
    workspace = _temporary_sibling(path)
    workspace.mkdir()
    try:
        built = workspace / path.name
        writer = _open_writer(built, storage)
        try:
            connections: dict[str, Any] = {}
            for source in sources:
                if source.topic not in connections:
                    if ros1:
                        msgdef, md5sum = messages.store.generate_msgdef(source.typename)
                        connections[source.topic] = writer.add_connection(
                            source.topic, source.typename, msgdef=msgdef, md5sum=md5sum)
                    else:
                        connections[source.topic] = writer.add_connection(
                            source.topic, source.typename, typestore=messages.store)
                source.connection = connections[source.topic]
            _write_messages(writer, sources)
        except BaseException:
            writer.abort()
            raise
        writer.close()
        if path.is_dir() and not path.is_symlink():
            old = _temporary_sibling(path)
            os.replace(path, old)
            os.replace(built, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(built, path)
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
    return path


# --- CSV ----------------------------------------------------------------------------------------
def _cells(values: np.ndarray) -> list[list[str]]:
    """Text cells (N, k) of floats: repr (the shortest text that reads back the same
    float64), NaN as an empty cell."""
    return [["" if v != v else repr(v) for v in row] for row in values.tolist()]


def write_session_csv(path: str | os.PathLike[str], times_s: np.ndarray,
                      positions_m: np.ndarray, quat_wxyz: np.ndarray, *,
                      joint_names: Sequence[str] = (), joint_positions: np.ndarray | None = None,
                      links: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None) -> Path:
    """Write a whole session as one CSV recording, atomically; return its path.

    Columns: ``t,x,y,z,qw,qx,qy,qz`` (s; the base link frame's origin, m, world; its
    orientation w-x-y-z, base -> world), one column per joint named as the joint (rad or
    m), then for each ``links`` entry (link name -> positions (N, 3) m world, quaternions
    (N, 4) w-x-y-z link -> world) ``<link>.x,<link>.y,<link>.z,<link>.qw,<link>.qx,
    <link>.qy,<link>.qz``. Numbers as ``repr(float)``; NaN as an empty cell.

    Raises
    ------
    ParameterError
        Arrays of mismatched shapes, or a column name holding a comma, quote or line break.
    """
    times = np.asarray(times_s, dtype=np.float64).reshape(-1)
    n = len(times)
    blocks = [times[:, None], np.asarray(positions_m, dtype=np.float64),
              np.asarray(quat_wxyz, dtype=np.float64)]
    if blocks[1].shape != (n, 3) or blocks[2].shape != (n, 4):
        raise ParameterError(f"{n} times need positions_m ({n}, 3) and quat_wxyz ({n}, 4), got "
                             f"{blocks[1].shape} and {blocks[2].shape}")
    header = ["t", "x", "y", "z", "qw", "qx", "qy", "qz"]
    joint_names = [str(name) for name in joint_names]
    if joint_names:
        joints = np.asarray(joint_positions, dtype=np.float64).reshape(n, -1) \
            if joint_positions is not None else None
        if joints is None or joints.shape != (n, len(joint_names)):
            raise ParameterError(f"joint_positions must have shape ({n}, {len(joint_names)})")
        blocks.append(joints)
        header += joint_names
    for name, (link_positions, link_quat) in (links or {}).items():
        link_positions = np.asarray(link_positions, dtype=np.float64)
        link_quat = np.asarray(link_quat, dtype=np.float64)
        if link_positions.shape != (n, 3) or link_quat.shape != (n, 4):
            raise ParameterError(f"links[{name!r}]: positions ({n}, 3) and quaternions ({n}, 4) "
                                 f"expected, got {link_positions.shape} and {link_quat.shape}")
        blocks += [link_positions, link_quat]
        header += [f"{name}.{axis}" for axis in ("x", "y", "z", "qw", "qx", "qy", "qz")]
    for name in header:
        if not name or any(c in name for c in ',"\n\r'):
            raise ParameterError(f"column name {name!r}: empty, or holds a comma, quote or "
                                 "line break")
    if len(set(header)) != len(header):
        raise DataError(f"{path}: duplicate column names in {header}")
    table = np.hstack(blocks) if n else np.zeros((0, len(header)))
    path = Path(path)
    with atomic_open(path) as handle:
        handle.write((",".join(header) + "\n").encode("utf-8"))
        chunk = 20_000
        for start in range(0, n, chunk):
            rows = _cells(table[start:start + chunk])
            handle.write(("\n".join(",".join(row) for row in rows) + "\n").encode("utf-8"))
    return path
