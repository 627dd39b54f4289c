"""Tests of the prediction file format: round trips, validation, atomic writes."""

from __future__ import annotations

import json
import os
import warnings
import zipfile

import numpy as np
import pytest

import residualsim.evaluation.predictions as predictions_module
from residualsim.data.trajectory import Trajectory
from residualsim.errors import PredictionError
from residualsim.evaluation.predictions import (
    FORMAT_NAME,
    FORMAT_VERSION,
    ImpactPredictions,
    TrajectoryPredictions,
    load_predictions,
    save_predictions,
)


def unit_quaternions(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    q = rng.normal(size=(*shape, 4))
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def make_predictions(
    rng: np.random.Generator, lengths: dict[str, int], n_samples: int = 3, dtype=np.float64
) -> TrajectoryPredictions:
    ids = list(lengths)
    positions = [rng.normal(size=(n_samples, t, 3)).astype(dtype) for t in lengths.values()]
    quaternions = [unit_quaternions(rng, (n_samples, t)).astype(dtype) for t in lengths.values()]
    return TrajectoryPredictions.from_arrays(ids, positions, quaternions, meta={"scene": "cube"})


def make_impact_predictions(rng: np.random.Generator, n: int = 5, s: int = 2) -> ImpactPredictions:
    return ImpactPredictions(
        rng.normal(size=(s, n, 3)), rng.permutation(100)[:n], meta={"params": {"mu": 0.3}}
    )


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_trajectory_round_trip_is_exact(tmp_path, dtype):
    rng = np.random.default_rng(1)
    predictions = make_predictions(rng, {"465": 7, "12": 4, "a/b": 5}, n_samples=3, dtype=dtype)
    path = save_predictions(tmp_path / "preds.npz", predictions)
    assert path == tmp_path / "preds.npz"
    loaded = load_predictions(path)
    assert isinstance(loaded, TrajectoryPredictions)
    assert loaded.ids == ["465", "12", "a/b"]
    assert loaded.n_samples == 3
    assert loaded.meta == {"scene": "cube"}
    for traj_id in predictions:
        for name in ("position", "quaternion"):
            original = getattr(predictions[traj_id], name)
            read = getattr(loaded[traj_id], name)
            assert read.dtype == dtype
            np.testing.assert_array_equal(read, original)
    assert str(path) in repr(loaded)


def test_impact_round_trip_is_exact(tmp_path):
    predictions = make_impact_predictions(np.random.default_rng(2))
    path = save_predictions(tmp_path / "impacts.npz", predictions)
    loaded = load_predictions(path)
    assert isinstance(loaded, ImpactPredictions)
    np.testing.assert_array_equal(loaded.post_velocity, predictions.post_velocity)
    np.testing.assert_array_equal(loaded.rows, predictions.rows)
    assert loaded.rows.dtype == np.int64
    assert loaded.meta == {"params": {"mu": 0.3}}
    assert (loaded.n_samples, loaded.n_impacts) == (2, 5)


def test_meta_entry_is_a_json_string(tmp_path):
    path = make_predictions(np.random.default_rng(3), {"1": 3}).save(tmp_path / "p.npz")
    with np.load(path, allow_pickle=False) as archive:
        assert sorted(archive.files) == ["1/position", "1/quaternion", "meta"]
        meta = archive["meta"]
        assert meta.ndim == 0 and meta.dtype.kind == "U"
        decoded = json.loads(meta.item())
    assert decoded == {"scene": "cube", "format": FORMAT_NAME, "format_version": FORMAT_VERSION}


def test_hand_written_file_without_meta_loads(tmp_path):
    rng = np.random.default_rng(4)
    path = tmp_path / "hand.npz"
    position = rng.normal(size=(1, 6, 3))
    quaternion = unit_quaternions(rng, (1, 6))
    np.savez(path, **{"7/position": position, "7/quaternion": quaternion})
    loaded = load_predictions(path)
    assert loaded.meta == {}
    np.testing.assert_array_equal(loaded["7"].position, position)

    impacts = tmp_path / "hand_impacts.npz"
    np.savez(impacts, post_velocity=np.zeros((1, 2, 3)), rows=np.array([4.0, 9.0]))
    loaded = load_predictions(impacts)
    assert loaded.meta == {} and loaded.rows.tolist() == [4, 9]


def test_writes_exactly_to_the_given_name_and_leaves_no_temporary(tmp_path):
    predictions = make_predictions(np.random.default_rng(5), {"1": 3})
    path = save_predictions(tmp_path / "predictions.out", predictions)
    assert sorted(os.listdir(tmp_path)) == ["predictions.out"]
    assert load_predictions(path).ids == ["1"]
    save_predictions(str(tmp_path / "predictions.out"), predictions)  # overwrite, str path
    assert sorted(os.listdir(tmp_path)) == ["predictions.out"]
    save_predictions(tmp_path / "p.npz", predictions, compress=True)
    assert sorted(os.listdir(tmp_path)) == ["p.npz", "predictions.out"]
    assert load_predictions(tmp_path / "p.npz").ids == ["1"]


def _failing_writer(file, arrays, compress):
    file.write(b"PK\x03\x04 partial archive")
    raise OSError("disk full")


def test_failed_write_leaves_existing_file_unchanged(tmp_path, monkeypatch):
    rng = np.random.default_rng(6)
    path = save_predictions(tmp_path / "p.npz", make_predictions(rng, {"1": 3}))
    before = path.read_bytes()
    monkeypatch.setattr(predictions_module, "_write_archive", _failing_writer)
    with pytest.raises(OSError, match="disk full"):
        save_predictions(path, make_predictions(rng, {"2": 4}))
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["p.npz"]
    assert load_predictions(path).ids == ["1"]


def test_failed_write_creates_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(predictions_module, "_write_archive", _failing_writer)
    with pytest.raises(OSError):
        save_predictions(tmp_path / "new.npz", make_impact_predictions(np.random.default_rng(7)))
    assert os.listdir(tmp_path) == []


def test_save_rejects_missing_directory_and_wrong_type(tmp_path):
    predictions = make_predictions(np.random.default_rng(8), {"1": 3})
    with pytest.raises(FileNotFoundError, match="does not exist"):
        save_predictions(tmp_path / "nope" / "p.npz", predictions)
    with pytest.raises(TypeError, match="TrajectoryPredictions"):
        save_predictions(tmp_path / "p.npz", {"1": (np.zeros((1, 3, 3)), np.zeros((1, 3, 4)))})


# --------------------------------------------------------------------------- construction


def test_mapping_interface_and_helpers():
    rng = np.random.default_rng(9)
    position = rng.normal(size=(5, 3))
    quaternion = unit_quaternions(rng, (5,))
    predictions = TrajectoryPredictions.from_arrays(["x"], [position], [quaternion])
    assert len(predictions) == 1 and list(predictions) == ["x"] and "x" in predictions
    assert predictions["x"].position.shape == (1, 5, 3)
    assert predictions["x"].quaternion.shape == (1, 5, 4)
    assert predictions.n_samples == 1 and predictions.meta == {}
    # Stored arrays are read-only copies: the caller's arrays stay writable and independent.
    position[0, 0] = 99.0
    assert predictions["x"].position[0, 0, 0] != 99.0
    assert not predictions["x"].position.flags.writeable
    with pytest.raises(PredictionError, match="duplicated trajectory ids"):
        TrajectoryPredictions.from_arrays(["a", "a"], [position] * 2, [quaternion] * 2)
    with pytest.raises(PredictionError, match="same length"):
        TrajectoryPredictions.from_arrays(["a"], [position] * 2, [quaternion])


def test_from_trajectories():
    rng = np.random.default_rng(10)

    def trajectory(t):
        return Trajectory(
            "x", np.arange(t) * 0.1, rng.normal(size=(t, 3)), unit_quaternions(rng, (t,)),
            np.zeros((t, 3)), np.zeros((t, 3)),
        )

    one, two, three = trajectory(4), trajectory(4), trajectory(4)
    predictions = TrajectoryPredictions.from_trajectories({"a": [one, two], "b": [three, one]})
    assert predictions.n_samples == 2
    np.testing.assert_array_equal(predictions["a"].position[1], two.positions_m)
    np.testing.assert_array_equal(predictions["b"].quaternion[0], three.quat_wxyz)
    single = TrajectoryPredictions.from_trajectories({"a": one}, meta={"k": 1})
    assert single.n_samples == 1 and single.meta == {"k": 1}
    with pytest.raises(PredictionError, match="different lengths"):
        TrajectoryPredictions.from_trajectories({"a": [one, trajectory(5)]})


def test_meta_must_be_json():
    rng = np.random.default_rng(11)
    with pytest.raises(PredictionError, match="JSON"):
        TrajectoryPredictions.from_arrays(
            ["a"], [np.zeros((3, 3))], [unit_quaternions(rng, (3,))], meta={"f": object()}
        )
    with pytest.raises(PredictionError, match="JSON"):
        ImpactPredictions(np.zeros((1, 2, 3)), [1, 2], meta={"rng": rng})


# --------------------------------------------------------------------------- bad files


def _good_position(s=2, t=4):
    return np.zeros((s, t, 3))


def _good_quaternion(s=2, t=4):
    q = np.zeros((s, t, 4))
    q[..., 0] = 1.0
    return q


def _with(array, index, value):
    array = array.copy()
    array[index] = value
    return array


BAD_ARCHIVES = {
    "unknown_key": ({"foo": np.zeros(3)}, "'foo'"),
    "unknown_suffix": ({"1/velocity": np.zeros((1, 2, 3))}, "'1/velocity'"),
    "position_without_quaternion": ({"1/position": _good_position()}, "'1/position'"),
    "quaternion_without_position": ({"1/quaternion": _good_quaternion()}, "'1/quaternion'"),
    "position_ndim": (
        {"1/position": np.zeros((4, 3)), "1/quaternion": _good_quaternion()}, "'1/position'"
    ),
    "position_last_dim": (
        {"1/position": np.zeros((2, 4, 2)), "1/quaternion": _good_quaternion()}, "'1/position'"
    ),
    "quaternion_last_dim": (
        {"1/position": _good_position(), "1/quaternion": np.zeros((2, 4, 3))}, "'1/quaternion'"
    ),
    "sample_count_mismatch": (
        {"1/position": _good_position(s=3), "1/quaternion": _good_quaternion(s=2)},
        "'1/quaternion'",
    ),
    "length_mismatch": (
        {"1/position": _good_position(t=5), "1/quaternion": _good_quaternion(t=4)},
        "'1/quaternion'",
    ),
    "samples_differ_between_trajectories": (
        {
            "1/position": _good_position(s=2),
            "1/quaternion": _good_quaternion(s=2),
            "2/position": _good_position(s=3),
            "2/quaternion": _good_quaternion(s=3),
        },
        "'2/position'",
    ),
    "nan_position": (
        {
            "1/position": _with(_good_position(), (1, 2, 0), np.nan),
            "1/quaternion": _good_quaternion(),
        },
        "'1/position'",
    ),
    "inf_quaternion": (
        {
            "1/position": _good_position(),
            "1/quaternion": _with(_good_quaternion(), (0, 1, 2), np.inf),
        },
        "'1/quaternion'",
    ),
    "quaternion_not_unit": (
        {
            "1/position": _good_position(),
            "1/quaternion": _with(_good_quaternion(), (1, 3, 0), 0.5),
        },
        "'1/quaternion'",
    ),
    "huge_position": (  # a diverged rollout: its RMSE would overflow to inf
        {"1/position": _with(_good_position(), (1, 2, 0), 1e200),
         "1/quaternion": _good_quaternion()},
        "'1/position' has 1e+200 at index (1, 2, 0), beyond the physical bound of 1000 m",
    ),
    "huge_quaternion": (
        {"1/position": _good_position(),
         "1/quaternion": _with(_good_quaternion(), (0, 1, 2), 1e200)},
        "'1/quaternion' has norm 1e+200",
    ),
    "string_array": (
        {"1/position": np.full((2, 4, 3), "x"), "1/quaternion": _good_quaternion()}, "'1/position'"
    ),
    "mixed_kinds": (
        {
            "post_velocity": np.zeros((1, 2, 3)),
            "rows": np.arange(2),
            "1/position": _good_position(),
            "1/quaternion": _good_quaternion(),
        },
        "'1/",
    ),
    "velocity_without_rows": ({"post_velocity": np.zeros((1, 2, 3))}, "'rows'"),
    "rows_without_velocity": ({"rows": np.arange(2)}, "'post_velocity'"),
    "velocity_ndim": ({"post_velocity": np.zeros((2, 3)), "rows": np.arange(2)}, "'post_velocity'"),
    "velocity_last_dim": (
        {"post_velocity": np.zeros((1, 2, 2)), "rows": np.arange(2)}, "'post_velocity'"
    ),
    "velocity_nan": (
        {"post_velocity": _with(np.zeros((1, 2, 3)), (0, 1, 2), np.nan), "rows": np.arange(2)},
        "'post_velocity'",
    ),
    "velocity_huge": (
        {"post_velocity": _with(np.zeros((1, 2, 3)), (0, 0, 1), -1e5), "rows": np.arange(2)},
        "'post_velocity' has -1e+05 at index (0, 0, 1)",
    ),
    "rows_length": ({"post_velocity": np.zeros((1, 2, 3)), "rows": np.arange(3)}, "'rows'"),
    "rows_fractional": (
        {"post_velocity": np.zeros((1, 2, 3)), "rows": np.array([1.0, 2.5])}, "'rows'"
    ),
    "rows_repeated": ({"post_velocity": np.zeros((1, 2, 3)), "rows": np.array([3, 3])}, "'rows'"),
    "meta_not_json": (
        {"meta": np.array("{not json"), "rows": np.arange(1), "post_velocity": np.zeros((1, 1, 3))},
        "'meta'",
    ),
    "meta_not_a_string": (
        {"meta": np.zeros(2), "rows": np.arange(1), "post_velocity": np.zeros((1, 1, 3))}, "'meta'"
    ),
    "meta_other_format": (
        {
            "meta": np.array(json.dumps({"format": "something-else"})),
            "rows": np.arange(1),
            "post_velocity": np.zeros((1, 1, 3)),
        },
        "'meta'",
    ),
    "meta_newer_version": (
        {
            "meta": np.array(json.dumps({"format": FORMAT_NAME, "format_version": 2})),
            "rows": np.arange(1),
            "post_velocity": np.zeros((1, 1, 3)),
        },
        "'meta' has format_version 2",
    ),
    "only_meta": ({"meta": np.array(json.dumps({}))}, "no predictions"),
    "empty_archive": ({}, "no predictions"),
}


@pytest.mark.parametrize("case", sorted(BAD_ARCHIVES))
def test_bad_archive_raises_naming_file_and_key(tmp_path, case):
    arrays, fragment = BAD_ARCHIVES[case]
    path = tmp_path / f"{case}.npz"
    np.savez(path, **arrays)
    with pytest.raises(PredictionError) as info:
        load_predictions(path)
    message = str(info.value)
    assert str(path) in message
    assert fragment in message


def test_huge_values_are_refused_without_a_numpy_warning(tmp_path):
    """1e200 is named as such (no overflow RuntimeWarning on the way); 999 m still loads."""
    from residualsim.cli import main

    path = tmp_path / "p.npz"
    np.savez(path, **{"1/position": _with(_good_position(), (0, 0, 2), 999.0),
                      "1/quaternion": _good_quaternion()})
    assert load_predictions(path)["1"].position[0, 0, 2] == 999.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for key, value in (("1/position", 1e200), ("1/quaternion", 1e200)):
            arrays = {"1/position": _good_position(), "1/quaternion": _good_quaternion()}
            arrays[key] = _with(arrays[key], (0, 0, 0), value)
            np.savez(path, **arrays)
            with pytest.raises(PredictionError, match=f"{key}' has"):
                load_predictions(path)
        assert main(["score", "--pred", str(path)]) == 2


def test_object_array_is_refused_without_unpickling(tmp_path):
    path = tmp_path / "pickled.npz"
    objects = np.empty(2, dtype=object)
    objects[:] = [{"a": 1}, None]
    np.savez(path, post_velocity=np.zeros((1, 2, 3)), rows=objects)
    with pytest.raises(PredictionError, match=r"pickled\.npz.*'rows'"):
        load_predictions(path)


def test_missing_file(tmp_path):
    path = tmp_path / "absent.npz"
    with pytest.raises(PredictionError, match=r"absent\.npz.*not found"):
        load_predictions(path)


def test_garbage_file(tmp_path):
    path = tmp_path / "garbage.npz"
    path.write_bytes(b"this is not a zip archive at all" * 10)
    with pytest.raises(PredictionError, match=r"garbage\.npz"):
        load_predictions(path)


def test_truncated_archive(tmp_path):
    path = save_predictions(
        tmp_path / "truncated.npz", make_predictions(np.random.default_rng(12), {"1": 50, "2": 50})
    )
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(PredictionError, match=r"truncated\.npz"):
        load_predictions(path)


def test_corrupt_member(tmp_path):
    rng = np.random.default_rng(13)
    path = tmp_path / "corrupt.npz"
    # Store uncompressed, then flip bytes inside the first member's data: the CRC fails.
    np.savez(
        path, **{"1/position": rng.normal(size=(1, 40, 3)), "1/quaternion": _good_quaternion(1, 40)}
    )
    with zipfile.ZipFile(path) as archive:
        info = archive.infolist()[0]
    data = bytearray(path.read_bytes())
    start = info.header_offset + 30 + len(info.filename) + len(info.extra) + 200
    data[start : start + 16] = bytes(16)
    path.write_bytes(bytes(data))
    with pytest.raises(PredictionError, match=r"corrupt\.npz.*'1/position'"):
        load_predictions(path)


def test_single_npy_file_is_not_an_archive(tmp_path):
    path = tmp_path / "single.npy"
    np.save(path, np.zeros((1, 3, 3)))
    with pytest.raises(PredictionError, match=r"single\.npy.*NPZ"):
        load_predictions(path)


def test_constructor_errors_name_the_key():
    rng = np.random.default_rng(14)
    with pytest.raises(PredictionError, match="'x/quaternion'.*norm"):
        TrajectoryPredictions({"x": (np.zeros((1, 3, 3)), 2.0 * unit_quaternions(rng, (1, 3)))})
    with pytest.raises(PredictionError, match="no trajectory predictions"):
        TrajectoryPredictions({})
    with pytest.raises(PredictionError, match="non-empty"):
        TrajectoryPredictions({"": (np.zeros((1, 3, 3)), unit_quaternions(rng, (1, 3)))})
    with pytest.raises(PredictionError, match="'post_velocity'.*leading axis"):
        ImpactPredictions(np.zeros((4, 3)), np.arange(4))
