"""Prediction files: what a simulator predicted for recorded trajectories or impacts.

The file format is a stable contract between the tools that write predictions and the
tools that score them (:mod:`residualsim.evaluation.metrics`). It is a plain NumPy ``.npz`` archive,
so a prediction can also be written by hand with :func:`numpy.savez`.

Trajectory predictions
    For each trajectory id (the recording's file stem, e.g. ``"465"`` for ``tosses/465.pt``):

    * ``"<id>/position"``   of shape (S, T, 3): the base link frame's origin (the centre
      of mass for the built-in bodies) in metres, world frame;
    * ``"<id>/quaternion"`` of shape (S, T, 4): orientation base -> world, w-x-y-z order;
    * optionally, for scenes with joints, ``"<id>/joint_positions"`` of shape (S, T, n):
      joint angles (rad) or displacements (m) in the URDF's joint order,

    where T is the recorded length (the prediction is given on the recorded time stamps)
    and S is the number of sampled rollouts (1 for a deterministic prediction). S is the
    same for every trajectory of a file.

Planar impact predictions
    * ``"post_velocity"`` of shape (S, N, 3): post-contact (dx m/s, dy m/s, dtheta rad/s);
    * ``"rows"`` of shape (N,), integers: the upstream row numbers of the N impacts.

Both kinds may carry a ``"meta"`` entry: a JSON object stored as a 0-d unicode array, with
``"format": "residualsim-prediction"``, ``"format_version": 1`` and free extras (scene,
parameters, command line, ...). Readers tolerate its absence. Two extras have a meaning:
``"data"``, the folder of the recordings predicted, and ``"scene"``, a built-in scene's name or
a scene file; paths are absolute or relative to the prediction file's directory
(:func:`save_predictions` rewrites working-directory-relative ones so; :func:`recorded_data`
and :func:`recorded_scene` read them back), so ``residualsim score --pred FILE`` needs no
``--data`` and works from any directory.

Floating arrays are kept in the precision they are given (float32 or float64); other
numeric arrays are converted to float64. Values must be finite and physical: a position
coordinate beyond :data:`MAX_POSITION_M` = 1e3 m, a joint position beyond
:data:`MAX_JOINT_POSITION` = 1e4 (rad or m) or a post-contact velocity component beyond
:data:`MAX_POST_VELOCITY` = 1e3 (m/s or rad/s) is refused, naming the file, key and index
(a diverged rollout, not a prediction to score: its errors would overflow to inf).

The module runs past 600 lines on purpose: it is the whole contract (both kinds of
prediction, their validation and their I/O) in the one file a writer of predictions reads.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from residualsim.data.trajectory import QUATERNION_NORM_TOLERANCE, Trajectory
from residualsim.atomic import atomic_open, path_for_file, path_from_file
from residualsim.errors import PredictionError

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MAX_POSITION_M",
    "MAX_JOINT_POSITION",
    "MAX_POST_VELOCITY",
    "TrajectoryPrediction",
    "TrajectoryPredictions",
    "ImpactPredictions",
    "save_predictions",
    "load_predictions",
    "recorded_data",
    "recorded_scene",
]

#: Value of ``meta["format"]`` in every file residualsim writes.
FORMAT_NAME = "residualsim-prediction"
#: Version of the file layout; readers refuse files with a larger version.
FORMAT_VERSION = 1

#: Largest |coordinate| of a predicted position, m (a table-top scene spans metres).
MAX_POSITION_M = 1e3
#: Largest |joint position| of a prediction, rad or m.
MAX_JOINT_POSITION = 1e4
#: Largest |component| of a predicted post-contact velocity, m/s or rad/s.
MAX_POST_VELOCITY = 1e3

_META_KEY = "meta"
_POSITION = "position"
_QUATERNION = "quaternion"
_JOINTS = "joint_positions"
_POST_VELOCITY = "post_velocity"
_ROWS = "rows"


class TrajectoryPrediction(NamedTuple):
    """The predicted samples of one trajectory.

    Attributes
    ----------
    position : ndarray of shape (S, T, 3)
        Centre-of-mass position in metres, world frame.
    quaternion : ndarray of shape (S, T, 4)
        Orientation body -> world, w-x-y-z order.
    joint_positions : ndarray of shape (S, T, n) or None
        Joint angles (rad) or displacements (m), URDF joint order; None without joints.
    """

    position: np.ndarray
    quaternion: np.ndarray
    joint_positions: np.ndarray | None = None


def _where(source: str) -> str:
    return source or "predictions"


def _float_array(value: Any, where: str, key: str) -> np.ndarray:
    """``value`` as a read-only float32/float64 array, or a PredictionError naming ``key``."""
    try:
        array = np.asarray(value)
    except Exception as exc:  # noqa: BLE001 - any conversion failure is a bad entry
        raise PredictionError(f"{where}: key {key!r} is not a numeric array ({exc})") from exc
    if array.dtype.kind not in "fiu":
        raise PredictionError(
            f"{where}: key {key!r} has dtype {array.dtype}, expected a real numeric array"
        )
    if array.dtype not in (np.float32, np.float64):
        array = array.astype(np.float64)
    else:
        array = array.copy() if array.flags.writeable else array
    array.setflags(write=False)
    return array


def _check_finite(array: np.ndarray, where: str, key: str, bound: float | None = None,
                  unit: str = "") -> None:
    """Refuse a NaN or infinite value, and (given ``bound``) a value beyond +-bound."""
    bad = ~np.isfinite(array)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise PredictionError(f"{where}: key {key!r} has a NaN or infinite value at index {index}")
    if bound is not None and (np.abs(array) > bound).any():
        index = tuple(int(i) for i in np.argwhere(np.abs(array) > bound)[0])
        raise PredictionError(f"{where}: key {key!r} has {float(array[index]):.4g} at index "
                              f"{index}, beyond the physical bound of {bound:g} {unit}")


def _check_shape(array: np.ndarray, width: int, layout: str, where: str, key: str) -> None:
    if array.ndim != 3 or array.shape[2] != width:
        raise PredictionError(f"{where}: key {key!r} has shape {array.shape}, expected {layout}")
    if array.shape[0] < 1 or array.shape[1] < 1:
        raise PredictionError(f"{where}: key {key!r} has shape {array.shape}, which is empty")


def _joint_array(value: Any, position_shape: tuple[int, ...], where: str, key: str
                 ) -> np.ndarray:
    """Joint positions (S, T, n) with the S and T of the position, finite, n >= 1."""
    array = _float_array(value, where, key)
    if array.ndim != 3 or array.shape[:2] != position_shape[:2] or array.shape[2] < 1:
        raise PredictionError(f"{where}: key {key!r} has shape {array.shape}, expected "
                              f"(S, T, n) = ({position_shape[0]}, {position_shape[1]}, n >= 1)")
    _check_finite(array, where, key, MAX_JOINT_POSITION, "rad or m")
    return array


def _normalise_meta(meta: Mapping[str, Any] | None, where: str) -> dict[str, Any]:
    if meta is None:
        return {}
    if not isinstance(meta, Mapping):
        raise PredictionError(f"{where}: meta must be a dict, got {type(meta).__name__}")
    try:
        return json.loads(json.dumps(dict(meta)))
    except (TypeError, ValueError) as exc:
        raise PredictionError(f"{where}: meta is not JSON-serialisable ({exc})") from exc


class TrajectoryPredictions(Mapping[str, TrajectoryPrediction]):
    """Predicted rollouts for a set of trajectories: a read-only mapping id -> prediction.

    Parameters
    ----------
    trajectories : mapping of str -> (position, quaternion) or (position, quaternion, joints)
        For each trajectory id, ``position`` of shape (S, T, 3) in metres, world frame, and
        ``quaternion`` of shape (S, T, 4) in w-x-y-z order; optionally joint positions of
        shape (S, T, n), rad or m, URDF order (None: no joints). S must be the same for every
        trajectory; T may differ between trajectories.
    meta : dict, optional
        JSON-serialisable extras (scene, parameters, command, ...).
    source : str, optional
        Where the predictions came from (a file path); used in error messages.

    Raises
    ------
    PredictionError
        On an empty set, an empty id, a wrong shape, a NaN or infinite value, a position
        beyond :data:`MAX_POSITION_M` (joint beyond :data:`MAX_JOINT_POSITION`), a sample count
        that differs between position and quaternion or between trajectories, or a
        quaternion whose norm is off 1 by more than 1e-2. The message names the key
        (``"<id>/position"`` or ``"<id>/quaternion"``).

    Examples
    --------
    >>> import numpy as np
    >>> positions = np.zeros((120, 3))
    >>> quaternions = np.tile([1.0, 0.0, 0.0, 0.0], (120, 1))
    >>> preds = TrajectoryPredictions.from_arrays(["465"], [positions], [quaternions])
    >>> preds["465"].position.shape
    (1, 120, 3)
    """

    def __init__(
        self,
        trajectories: Mapping[str, tuple[Any, Any]],
        meta: Mapping[str, Any] | None = None,
        *,
        source: str = "",
    ) -> None:
        where = _where(source)
        if not isinstance(trajectories, Mapping):
            raise TypeError(
                f"{where}: trajectories must be a mapping id -> (position, quaternion), "
                f"got {type(trajectories).__name__}"
            )
        if len(trajectories) == 0:
            raise PredictionError(f"{where}: contains no trajectory predictions")
        items: dict[str, TrajectoryPrediction] = {}
        n_samples: int | None = None
        first_key = ""
        for traj_id, pair in trajectories.items():
            if not isinstance(traj_id, str) or not traj_id:
                raise PredictionError(
                    f"{where}: trajectory id must be a non-empty str, got {traj_id!r}"
                )
            try:
                position_value, quaternion_value, *rest = pair
                if len(rest) > 1:
                    raise ValueError("too many arrays")
            except (TypeError, ValueError) as exc:
                raise PredictionError(
                    f"{where}: trajectory {traj_id!r} must be a (position, quaternion) pair "
                    "or a (position, quaternion, joint_positions) triple"
                ) from exc
            position_key = f"{traj_id}/{_POSITION}"
            quaternion_key = f"{traj_id}/{_QUATERNION}"
            position = _float_array(position_value, where, position_key)
            quaternion = _float_array(quaternion_value, where, quaternion_key)
            _check_shape(position, 3, "(S, T, 3)", where, position_key)
            _check_shape(quaternion, 4, "(S, T, 4)", where, quaternion_key)
            if quaternion.shape[:2] != position.shape[:2]:
                raise PredictionError(
                    f"{where}: key {quaternion_key!r} has shape {quaternion.shape} but "
                    f"{position_key!r} has shape {position.shape}; (S, T) must agree"
                )
            _check_finite(position, where, position_key, MAX_POSITION_M, "m")
            _check_finite(quaternion, where, quaternion_key)
            norms = np.hypot.reduce(quaternion, axis=2)  # no overflow on 1e200
            off = np.abs(norms - 1.0) > QUATERNION_NORM_TOLERANCE
            if off.any():
                s, t = (int(i) for i in np.argwhere(off)[0])
                raise PredictionError(
                    f"{where}: key {quaternion_key!r} has norm {norms[s, t]:.4g} at sample {s}, "
                    f"step {t}; expected unit quaternions"
                )
            if n_samples is None:
                n_samples, first_key = position.shape[0], position_key
            elif position.shape[0] != n_samples:
                raise PredictionError(
                    f"{where}: key {position_key!r} has S={position.shape[0]} samples but "
                    f"{first_key!r} has S={n_samples}; every trajectory needs the same S"
                )
            joints = None if not rest or rest[0] is None else _joint_array(
                rest[0], position.shape, where, f"{traj_id}/{_JOINTS}")
            items[traj_id] = TrajectoryPrediction(position, quaternion, joints)
        self._items = items
        self._n_samples = int(n_samples)
        self._meta: dict[str, Any] = _normalise_meta(meta, where)
        self._source = source

    @classmethod
    def from_arrays(
        cls,
        ids: Sequence[str],
        positions: Sequence[Any],
        quaternions: Sequence[Any],
        meta: Mapping[str, Any] | None = None,
        *,
        joint_positions: Sequence[Any] | None = None,
    ) -> TrajectoryPredictions:
        """Build from parallel lists of per-trajectory arrays.

        Parameters
        ----------
        ids : sequence of str
            Trajectory ids (recording file stems), unique.
        positions : sequence of ndarray of shape (S, T, 3) or (T, 3)
            Positions in metres, world frame; a 2-D array is one deterministic sample.
        quaternions : sequence of ndarray of shape (S, T, 4) or (T, 4)
            Orientations in w-x-y-z order, same layout as ``positions``.
        meta : dict, optional
            JSON-serialisable extras.
        joint_positions : sequence of ndarray of shape (S, T, n) or (T, n), optional
            Joint angles (rad) or displacements (m), URDF order, same layout as ``positions``.
        """
        ids = list(ids)
        positions = list(positions)
        quaternions = list(quaternions)
        joints = [None] * len(ids) if joint_positions is None else list(joint_positions)
        if not len(ids) == len(positions) == len(quaternions) == len(joints):
            raise PredictionError(
                f"predictions: got {len(ids)} ids, {len(positions)} position arrays and "
                f"{len(quaternions)} quaternion arrays"
                + ("" if joint_positions is None else f" and {len(joints)} joint arrays")
                + "; they must have the same length"
            )
        if len(set(ids)) != len(ids):
            duplicated = sorted({i for i in ids if ids.count(i) > 1})
            raise PredictionError(f"predictions: duplicated trajectory ids {duplicated}")

        def promote(value: Any) -> Any:
            if value is None:
                return None
            array = np.asarray(value)
            return array[None] if array.ndim == 2 else array

        return cls(
            {i: (promote(p), promote(q), promote(j))
             for i, p, q, j in zip(ids, positions, quaternions, joints)},
            meta,
        )

    @classmethod
    def from_trajectories(
        cls,
        trajectories: Mapping[str, Trajectory | Sequence[Trajectory]],
        meta: Mapping[str, Any] | None = None,
    ) -> TrajectoryPredictions:
        """Build from simulated :class:`Trajectory` objects.

        Parameters
        ----------
        trajectories : mapping of str -> Trajectory or sequence of Trajectory
            For each recorded id, one simulated trajectory (S = 1) or a list of S sampled
            ones, each with the recorded number of steps; their joint positions are kept
            when they have joints.
        meta : dict, optional
            JSON-serialisable extras.
        """
        pairs = {}
        for traj_id, value in trajectories.items():
            samples = [value] if isinstance(value, Trajectory) else list(value)
            if not samples:
                raise PredictionError(f"predictions: trajectory {traj_id!r} has no samples")
            lengths = {t.n_samples for t in samples}
            if len(lengths) != 1:
                raise PredictionError(
                    f"predictions: the samples of trajectory {traj_id!r} have different "
                    f"lengths {sorted(lengths)}"
                )
            pairs[traj_id] = (
                np.stack([t.positions_m for t in samples]),
                np.stack([t.quat_wxyz for t in samples]),
                np.stack([t.joint_positions for t in samples]) if samples[0].n_joints else None,
            )
        return cls(pairs, meta)

    # Mapping's item-wise equality would compare arrays ambiguously: compare by identity.
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __getitem__(self, traj_id: str) -> TrajectoryPrediction:
        return self._items[traj_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return (
            f"TrajectoryPredictions({len(self)} trajectories, S={self.n_samples}"
            + (f", source={self.source!r}" if self.source else "")
            + ")"
        )

    @property
    def meta(self) -> dict[str, Any]:
        """JSON-serialisable extras (scene, parameters, command, ...)."""
        return self._meta

    @property
    def source(self) -> str:
        """The file the predictions were read from, or ``""``."""
        return self._source

    @property
    def ids(self) -> list[str]:
        """Trajectory ids, in insertion (file) order."""
        return list(self._items)

    @property
    def n_samples(self) -> int:
        """Number of sampled rollouts S per trajectory."""
        return self._n_samples

    def save(self, path: str | os.PathLike[str], *, compress: bool = False) -> Path:
        """Write to ``path`` atomically; see :func:`save_predictions`."""
        return save_predictions(path, self, compress=compress)

    def _arrays(self) -> dict[str, np.ndarray]:
        arrays = {}
        for traj_id, prediction in self._items.items():
            arrays[f"{traj_id}/{_POSITION}"] = prediction.position
            arrays[f"{traj_id}/{_QUATERNION}"] = prediction.quaternion
            if prediction.joint_positions is not None:
                arrays[f"{traj_id}/{_JOINTS}"] = prediction.joint_positions
        return arrays


@dataclass(frozen=True, eq=False)
class ImpactPredictions:
    """Predicted post-contact velocities for a set of planar impacts.

    Parameters
    ----------
    post_velocity : ndarray of shape (S, N, 3)
        Post-contact (dx m/s, dy m/s, dtheta rad/s) for S sampled predictions of N impacts.
    rows : ndarray of shape (N,), int
        Upstream row numbers of the impacts (see :class:`~residualsim.data.impacts.PlanarImpacts`),
        unique.
    meta : dict, optional
        JSON-serialisable extras.
    source : str, optional
        Where the predictions came from (a file path); used in error messages.
    """

    post_velocity: np.ndarray
    rows: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)
    source: str = ""

    def __post_init__(self) -> None:
        where = _where(self.source)
        velocity = _float_array(self.post_velocity, where, _POST_VELOCITY)
        if velocity.ndim == 2 and velocity.shape[-1] == 3:
            raise PredictionError(
                f"{where}: key {_POST_VELOCITY!r} has shape {velocity.shape}, expected (S, N, 3);"
                " add a leading axis of length 1 for a deterministic prediction"
            )
        _check_shape(velocity, 3, "(S, N, 3)", where, _POST_VELOCITY)
        _check_finite(velocity, where, _POST_VELOCITY, MAX_POST_VELOCITY, "m/s or rad/s")
        rows = np.asarray(self.rows)
        if rows.ndim != 1:
            raise PredictionError(f"{where}: key {_ROWS!r} has shape {rows.shape}, expected (N,)")
        if rows.dtype.kind == "f" and np.isfinite(rows).all() and (rows == np.round(rows)).all():
            rows = rows.astype(np.int64)
        if rows.dtype.kind not in "iu":
            raise PredictionError(
                f"{where}: key {_ROWS!r} has dtype {rows.dtype}, expected integer row numbers"
            )
        rows = rows.astype(np.int64)
        if rows.shape[0] != velocity.shape[1]:
            raise PredictionError(
                f"{where}: key {_ROWS!r} has {rows.shape[0]} rows but {_POST_VELOCITY!r} has "
                f"N={velocity.shape[1]} impacts"
            )
        unique, counts = np.unique(rows, return_counts=True)
        if (counts > 1).any():
            raise PredictionError(
                f"{where}: key {_ROWS!r} repeats row numbers {unique[counts > 1][:10].tolist()}"
            )
        rows.setflags(write=False)
        object.__setattr__(self, "post_velocity", velocity)
        object.__setattr__(self, "rows", rows)
        object.__setattr__(self, "meta", _normalise_meta(self.meta, where))

    @property
    def n_samples(self) -> int:
        """Number of sampled predictions S."""
        return int(self.post_velocity.shape[0])

    @property
    def n_impacts(self) -> int:
        """Number of impacts N."""
        return int(self.post_velocity.shape[1])

    def save(self, path: str | os.PathLike[str], *, compress: bool = False) -> Path:
        """Write to ``path`` atomically; see :func:`save_predictions`."""
        return save_predictions(path, self, compress=compress)

    def _arrays(self) -> dict[str, np.ndarray]:
        return {_POST_VELOCITY: self.post_velocity, _ROWS: self.rows}


def _write_archive(file: Any, arrays: dict[str, np.ndarray], compress: bool) -> None:
    """Write ``arrays`` as an NPZ archive to the open binary ``file``."""
    (np.savez_compressed if compress else np.savez)(file, **arrays)


def save_predictions(
    path: str | os.PathLike[str],
    predictions: TrajectoryPredictions | ImpactPredictions,
    *,
    compress: bool = False,
) -> Path:
    """Write predictions to an NPZ file, atomically.

    The archive is written to a temporary file in the destination's directory and moved
    over ``path`` with :func:`os.replace`, so readers never see a partial file and a failed
    write leaves an existing file untouched. The file is written to exactly ``path`` (no
    ``.npz`` is appended).

    Parameters
    ----------
    path : str or path-like
        Destination file; its directory must exist.
    predictions : TrajectoryPredictions or ImpactPredictions
        What to write. A ``"meta"`` entry is added with the format name and version and the
        predictions' ``meta`` extras.
    compress : bool, default False
        Use :func:`numpy.savez_compressed` (smaller, slower).

    Returns
    -------
    Path
        The path written.
    """
    if not isinstance(predictions, (TrajectoryPredictions, ImpactPredictions)):
        raise TypeError(
            "predictions must be TrajectoryPredictions or ImpactPredictions, "
            f"got {type(predictions).__name__}"
        )
    path = Path(path)
    directory = path.parent
    if not directory.is_dir():
        raise FileNotFoundError(f"{path}: directory {str(directory)!r} does not exist")
    meta = {**predictions.meta, "format": FORMAT_NAME, "format_version": FORMAT_VERSION}
    for key, is_path in (("data", lambda text: True), ("scene", _is_scene_file)):
        stored = meta.get(key)  # inputs given relative to the working directory travel
        if isinstance(stored, str) and stored and is_path(stored) \
                and not Path(stored).is_absolute() and Path(stored).exists():
            meta[key] = path_for_file(stored, directory)
    arrays = {_META_KEY: np.array(json.dumps(meta))}
    arrays.update(predictions._arrays())
    with atomic_open(path) as file:
        _write_archive(file, arrays, compress)
    return path


def _parse_meta(value: np.ndarray, where: str) -> dict[str, Any]:
    if value.ndim != 0 or value.dtype.kind not in "US":
        raise PredictionError(
            f"{where}: key {_META_KEY!r} must be a 0-d string array holding JSON, got "
            f"dtype {value.dtype} and shape {value.shape}"
        )
    text = value.item()
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    try:
        meta = json.loads(text)
    except ValueError as exc:
        raise PredictionError(f"{where}: key {_META_KEY!r} is not valid JSON ({exc})") from exc
    if not isinstance(meta, dict):
        raise PredictionError(f"{where}: key {_META_KEY!r} must hold a JSON object")
    name = meta.pop("format", FORMAT_NAME)
    if name != FORMAT_NAME:
        raise PredictionError(
            f"{where}: key {_META_KEY!r} says format {name!r}, expected {FORMAT_NAME!r}"
        )
    version = meta.pop("format_version", FORMAT_VERSION)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise PredictionError(f"{where}: key {_META_KEY!r} has format_version {version!r}")
    if version > FORMAT_VERSION:
        raise PredictionError(
            f"{where}: key {_META_KEY!r} has format_version {version}, newer than this reader's "
            f"{FORMAT_VERSION}; upgrade residualsim"
        )
    return meta


def load_predictions(path: str | os.PathLike[str]) -> TrajectoryPredictions | ImpactPredictions:
    """Read and validate a prediction file.

    Parameters
    ----------
    path : str or path-like
        An NPZ file in the layout described in :mod:`residualsim.evaluation.predictions`.

    Returns
    -------
    TrajectoryPredictions or ImpactPredictions
        Depending on the keys found. ``meta`` holds the file's extras without ``format``
        and ``format_version``; a file without a ``"meta"`` entry gives an empty dict.

    Raises
    ------
    PredictionError
        If the file is missing, unreadable or not an NPZ archive, or holds keys of neither
        layout, a position without its quaternion (or the reverse), an array of the wrong
        shape, differing sample counts, NaN or infinite values, or quaternions that are not
        unit. The message names the file and, where there is one, the key.
    """
    path = Path(path)
    where = str(path)
    if not path.is_file():
        raise PredictionError(f"{where}: prediction file not found")
    try:
        archive = np.load(path, allow_pickle=False)
    except Exception as exc:  # noqa: BLE001 - numpy raises many types for a bad file
        raise PredictionError(f"{where}: not a readable NPZ archive ({exc})") from exc
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise PredictionError(f"{where}: is a single .npy array, expected an NPZ archive")
    arrays: dict[str, np.ndarray] = {}
    with archive:
        for key in archive.files:
            try:
                arrays[key] = archive[key]
                arrays[key].setflags(write=False)  # fresh from disk: no defensive copy
            except Exception as exc:  # noqa: BLE001 - corrupt member, pickled object, ...
                raise PredictionError(f"{where}: key {key!r} cannot be read ({exc})") from exc

    meta = _parse_meta(arrays.pop(_META_KEY), where) if _META_KEY in arrays else {}
    if not arrays:
        raise PredictionError(f"{where}: contains no predictions")

    impact_keys = [k for k in arrays if k in (_POST_VELOCITY, _ROWS)]
    trajectory_keys = [k for k in arrays if k not in (_POST_VELOCITY, _ROWS)]
    if impact_keys and trajectory_keys:
        raise PredictionError(
            f"{where}: mixes impact keys {impact_keys} with trajectory key "
            f"{trajectory_keys[0]!r}; a file holds one kind of prediction"
        )
    if impact_keys:
        for key in (_POST_VELOCITY, _ROWS):
            if key not in arrays:
                raise PredictionError(f"{where}: key {key!r} is missing")
        return ImpactPredictions(arrays[_POST_VELOCITY], arrays[_ROWS], meta, source=where)

    pairs: dict[str, dict[str, np.ndarray]] = {}
    for key in trajectory_keys:
        traj_id, _, kind = key.rpartition("/")
        if not traj_id or kind not in (_POSITION, _QUATERNION, _JOINTS):
            raise PredictionError(
                f"{where}: unexpected key {key!r}; expected '<id>/position' and "
                "'<id>/quaternion' (and optionally '<id>/joint_positions'), or "
                "'post_velocity' and 'rows', and optionally 'meta'"
            )
        pairs.setdefault(traj_id, {})[kind] = arrays[key]
    for traj_id, pair in pairs.items():
        for kind, other in ((_POSITION, _QUATERNION), (_QUATERNION, _POSITION),
                            (_JOINTS, _POSITION)):
            if kind in pair and other not in pair:
                raise PredictionError(
                    f"{where}: key {traj_id + '/' + kind!r} has no matching "
                    f"{traj_id + '/' + other!r}"
                )
    return TrajectoryPredictions(
        {i: (p[_POSITION], p[_QUATERNION], p.get(_JOINTS)) for i, p in pairs.items()}, meta,
        source=where
    )


def _is_scene_file(scene: str) -> bool:
    """A scene given as a file (a scene file or a URDF), not a built-in scene name."""
    return scene.endswith((".toml", ".urdf"))


def recorded_data(predictions: TrajectoryPredictions | ImpactPredictions,
                  path: str | os.PathLike[str]) -> Path | None:
    """The recordings' folder a prediction file records in ``meta["data"]``, or None.

    An absolute path is returned as is; a relative one is taken relative to the directory of
    the prediction file at ``path`` (files of older versions stored it relative to the
    working directory: that is tried when the first does not exist). The folder may be gone:
    callers check.
    """
    data = predictions.meta.get("data")
    if not isinstance(data, str) or not data:
        return None
    return path_from_file(data, Path(path).parent)


def recorded_scene(predictions: TrajectoryPredictions | ImpactPredictions,
                   path: str | os.PathLike[str]) -> str | None:
    """The scene a prediction file records in ``meta["scene"]``: a built-in name as is, a
    scene file's path resolved as :func:`recorded_data` resolves the data; None if absent."""
    scene = predictions.meta.get("scene")
    if not isinstance(scene, str) or not scene:
        return None
    return str(path_from_file(scene, Path(path).parent)) if _is_scene_file(scene) else scene
