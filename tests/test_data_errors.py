"""Every loader refuses bad input with a DataError naming the file and the problem."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import scipy.io
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from residualsim.data import (
    detect_format,
    load_impacts,
    load_toss,
    load_tosses,
    load_trajectories,
    load_trajectory,
    save_trajectory,
)
from residualsim.data import npz
from residualsim.data.contactnets import toss_from_array
from residualsim.errors import DataError

# --- ContactNets .pt ----------------------------------------------------------------------


def _save(path, value) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(value, path)


def test_truncated_real_file(contactnets_dir, tmp_path):
    data = (contactnets_dir / "tosses" / "8.pt").read_bytes()
    target = tmp_path / "tosses" / "8.pt"
    target.parent.mkdir()
    target.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"8\.pt: .*truncated or corrupt"):
        load_toss(target)
    with pytest.raises(DataError, match=r"8\.pt"):
        load_tosses(tmp_path)


@pytest.mark.parametrize("content", [b"", b"not a torch file at all", b"PK\x03\x04garbage"])
def test_corrupt_files(tmp_path, content):
    (tmp_path / "4.pt").write_bytes(content)
    with pytest.raises(DataError, match=r"4\.pt: not a readable torch file"):
        load_toss(tmp_path / "4.pt")


@pytest.mark.parametrize(
    "column, sample, group",
    [(1, 0, "0:3 (position)"), (5, 17, "3:7 (quaternion)"), (8, 3, "7:10 (linear velocity)"),
     (12, 39, "10:13 (angular velocity)"), (15, 9, "13:19 (control input)")],
)
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_values_name_group_and_sample(tmp_path, make_toss, column, sample, group, bad):
    array = make_toss(40)
    array[0, sample, column] = bad
    _save(tmp_path / "21.pt", torch.from_numpy(array))
    with pytest.raises(DataError) as info:
        load_toss(tmp_path / "21.pt")
    message = str(info.value)
    assert "21.pt" in message and group in message and f"at sample {sample}" in message


@pytest.mark.parametrize(
    "shape",
    [(1, 40, 18), (40, 19), (2, 40, 19), (1, 40, 19, 1), (19,), ()],
)
def test_wrong_shapes(tmp_path, shape):
    _save(tmp_path / "6.pt", torch.ones(shape, dtype=torch.float64))
    with pytest.raises(DataError, match=r"6\.pt: has shape .*expected \(1, T, 19\)"):
        load_toss(tmp_path / "6.pt")


def test_too_short_bad_quaternion_and_not_a_tensor(tmp_path, make_toss):
    _save(tmp_path / "1.pt", torch.from_numpy(make_toss(1)))
    with pytest.raises(DataError, match=r"1\.pt: has 1 sample"):
        load_toss(tmp_path / "1.pt")
    array = make_toss(10)
    array[0, 4, 3:7] *= 0.5
    _save(tmp_path / "2.pt", torch.from_numpy(array))
    with pytest.raises(DataError, match=r"2\.pt: columns 3:7 \(quaternion\) have norm 0.5 at sample 4"):
        load_toss(tmp_path / "2.pt")
    _save(tmp_path / "3.pt", {"states": torch.zeros(3)})
    with pytest.raises(DataError, match=r"3\.pt: contains a dict, expected a tensor"):
        load_toss(tmp_path / "3.pt")
    _save(tmp_path / "5.pt", torch.ones((1, 5, 19), dtype=torch.bool))
    with pytest.raises(DataError, match=r"5\.pt: .*expected float64"):
        load_toss(tmp_path / "5.pt")


def test_missing_paths(tmp_path):
    with pytest.raises(DataError, match=r"gone\.pt: no such file"):
        load_toss(tmp_path / "gone.pt")
    with pytest.raises(DataError, match="absent: no such directory"):
        load_tosses(tmp_path / "absent")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cells=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 18)), min_size=1, max_size=5),
    value=st.sampled_from([np.nan, np.inf, -np.inf]),
)
def test_property_non_finite_anywhere_raises_data_error(make_toss, cells, value):
    array = make_toss(12, seed=5)
    for sample, column in cells:
        array[0, sample, column] = value
    first = min(cells)
    with pytest.raises(DataError, match=rf"^toss\.pt: .* at sample {first[0]}$"):
        toss_from_array(array, "toss", "toss.pt")


@settings(max_examples=150, deadline=None)
@given(
    shape=st.lists(st.integers(0, 25), min_size=0, max_size=4).map(tuple),
    seed=st.integers(0, 2**32 - 1),
    dtype=st.sampled_from(["float64", "float32", "int64", "bool", "complex128", "object"]),
)
def test_property_wrong_shapes_and_types_raise_only_data_error(shape, seed, dtype):
    array = np.random.default_rng(seed).normal(size=shape).astype(dtype)
    valid = len(shape) == 3 and shape[0] == 1 and shape[2] == 19 and shape[1] >= 2
    try:
        traj = toss_from_array(array, "t", "t.pt")
    except DataError as exc:
        assert str(exc).startswith("t.pt: ")
    else:  # only a well-shaped numeric array with unit quaternions can get through
        assert valid and dtype in ("float64", "float32", "int64")
        assert np.allclose(np.linalg.norm(traj.quat_wxyz, axis=1), 1.0)


@settings(max_examples=60, deadline=None)
@given(
    junk=st.one_of(st.none(), st.integers(), st.text(), st.lists(st.floats()),
                   st.dictionaries(st.text(), st.floats())),
)
def test_property_non_arrays_raise_data_error(junk):
    with pytest.raises(DataError, match=r"^x\.pt: contains a"):
        toss_from_array(junk, "x", "x.pt")


# --- npz ----------------------------------------------------------------------------------


def _write_npz(path, meta=None, **overrides):
    t = np.arange(5) / 100.0
    arrays = {
        "times_s": t,
        "positions_m": np.zeros((5, 3)),
        "quat_wxyz": np.tile([1.0, 0, 0, 0], (5, 1)),
        "linear_velocity_mps": np.zeros((5, 3)),
        "angular_velocity_world_radps": np.zeros((5, 3)),
    }
    arrays.update(overrides)
    if meta is None:
        meta = {"format": "residualsim-trajectory", "format_version": 1, "planar": False,
                "source": "s", "metadata": {}}
    if not isinstance(meta, np.ndarray):
        meta = np.array(json.dumps(meta))
    np.savez(path, meta=meta, **{k: v for k, v in arrays.items() if v is not None})


def test_npz_helper_writes_a_valid_file(tmp_path):
    _write_npz(tmp_path / "ok.npz")
    assert load_trajectory(tmp_path / "ok.npz").n_samples == 5


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"times_s": np.array([0.0, 0.1, 0.1, 0.2, 0.3])}, "times do not increase at sample 2"),
        ({"times_s": np.array([0.0, 0.2, 0.1, 0.3, 0.4])}, "times do not increase at sample 2"),
        ({"positions_m": np.full((5, 3), np.nan)}, "positions_m has a NaN"),
        ({"positions_m": np.zeros((5, 2))}, r"positions_m has shape \(5, 2\)"),
        ({"quat_wxyz": np.tile([0.5, 0, 0, 0], (5, 1))}, "quaternion at sample 0 has norm 0.5"),
        ({"linear_velocity_mps": np.zeros((4, 3))}, "4 samples"),
        ({"angular_velocity_world_radps": None}, "missing array"),
        ({"times_s": np.array(["a"] * 5)}, "dtype"),
    ],
)
def test_npz_bad_arrays(tmp_path, overrides, message):
    _write_npz(tmp_path / "bad7.npz", **overrides)
    with pytest.raises(DataError, match=rf"bad7\.npz: .*{message}"):
        load_trajectory(tmp_path / "bad7.npz")
    with pytest.raises(DataError, match=r"bad7\.npz"):
        load_trajectories(tmp_path)


@pytest.mark.parametrize(
    "meta, message",
    [
        ({"format": "other-tool"}, "format is 'other-tool'"),
        ({"format": "residualsim-trajectory", "format_version": 2}, "format_version 2"),
        ({"format": "residualsim-trajectory"}, "format_version None"),
        (np.array("{not json"), "not valid JSON"),
        (np.array([1.0, 2.0]), "not a JSON string"),
        ({"format": "residualsim-trajectory", "format_version": 1, "metadata": [1]}, "malformed"),
    ],
)
def test_npz_foreign_meta(tmp_path, meta, message):
    _write_npz(tmp_path / "m.npz", meta=meta)
    with pytest.raises(DataError, match=rf"m\.npz: .*{message}"):
        load_trajectory(tmp_path / "m.npz")


def test_npz_foreign_truncated_and_missing(tmp_path):
    np.savez(tmp_path / "foreign.npz", x=np.zeros(3))
    with pytest.raises(DataError, match=r"foreign\.npz: not a residualsim trajectory file"):
        load_trajectory(tmp_path / "foreign.npz")
    np.save(tmp_path / "bare.npy", np.zeros(3))
    shutil.move(tmp_path / "bare.npy", tmp_path / "bare.npz")
    with pytest.raises(DataError, match=r"bare\.npz: not a residualsim trajectory file"):
        load_trajectory(tmp_path / "bare.npz")
    _write_npz(tmp_path / "whole.npz")
    data = (tmp_path / "whole.npz").read_bytes()
    (tmp_path / "half.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"half\.npz: .*truncated or corrupt"):
        load_trajectory(tmp_path / "half.npz")
    np.savez(tmp_path / "pickled.npz", meta=np.array([{"a": 1}], dtype=object))
    with pytest.raises(DataError, match=r"pickled\.npz"):
        load_trajectory(tmp_path / "pickled.npz")
    with pytest.raises(DataError, match=r"none\.npz: no such file"):
        load_trajectory(tmp_path / "none.npz")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="empty: no .npz"):
        npz.load_trajectories(tmp_path / "empty")
    with pytest.raises(DataError, match="empty: not a recognised data set"):
        load_trajectories(tmp_path / "empty")


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(["times_s", "positions_m", "quat_wxyz", "linear_velocity_mps"]),
    index=st.integers(0, 4),
    value=st.sampled_from([np.nan, np.inf, -np.inf]),
)
def test_property_npz_non_finite_raises_data_error(tmp_path_factory, name, index, value):
    directory = tmp_path_factory.mktemp("npz")
    good = {
        "times_s": np.arange(5) / 100.0,
        "positions_m": np.zeros((5, 3)),
        "quat_wxyz": np.tile([1.0, 0, 0, 0], (5, 1)),
        "linear_velocity_mps": np.zeros((5, 3)),
    }
    array = good[name].copy()
    array.reshape(5, -1)[index, 0] = value
    _write_npz(directory / "h.npz", **{name: array})
    with pytest.raises(DataError, match=r"h\.npz: "):
        load_trajectory(directory / "h.npz")


def test_save_refuses_non_trajectory(tmp_path):
    with pytest.raises(DataError, match="expected a Trajectory"):
        save_trajectory(tmp_path / "x.npz", {"times_s": [0, 1]})


# --- MCube .mat ---------------------------------------------------------------------------


def test_mcube_missing_files(tmp_path, make_mcube):
    with pytest.raises(DataError, match="nothing: no such directory"):
        load_impacts(tmp_path / "nothing")
    for name in ("data_ellipse.mat", "p_true_data.mat", "p_models.mat", "v_models.mat",
                 "original_rows.txt"):
        directory = tmp_path / name.split(".")[0]
        make_mcube(directory)
        (directory / name).unlink()
        with pytest.raises(DataError, match=rf"{name}: no such file"):
            load_impacts(directory)


def test_mcube_wrong_shapes_and_counts(tmp_path, make_mcube):
    arrays = make_mcube(tmp_path, n_rows=6)
    scipy.io.savemat(tmp_path / "p_models.mat", {"p_models": arrays["p_models"][:, :11]})
    with pytest.raises(DataError, match=r"p_models\.mat: p_models has shape \(6, 11\)"):
        load_impacts(tmp_path)
    scipy.io.savemat(tmp_path / "p_models.mat", {"p_models": arrays["p_models"][:5]})
    with pytest.raises(DataError, match=r"p_models\.mat: p_models has 5 rows but"):
        load_impacts(tmp_path)
    scipy.io.savemat(tmp_path / "p_models.mat", {"p_models": arrays["p_models"]})
    (tmp_path / "original_rows.txt").write_text("1\n2\n3\n")
    with pytest.raises(DataError, match=r"original_rows\.txt: row numbers has 3 rows"):
        load_impacts(tmp_path)
    (tmp_path / "original_rows.txt").write_text("1\n2\nx\n")
    with pytest.raises(DataError, match=r"original_rows\.txt: entry 3"):
        load_impacts(tmp_path)
    scipy.io.savemat(tmp_path / "v_models.mat", {"other": arrays["v_models"]})
    with pytest.raises(DataError, match=r"v_models\.mat: no variable 'v_models'"):
        load_impacts(tmp_path)


def test_mcube_nan_jacobian_and_corrupt(tmp_path, make_mcube):
    arrays = make_mcube(tmp_path, n_rows=6)
    data = {k: arrays[k].copy() for k in ("states_i", "states_f", "n", "d")}
    data["states_i"][3, 4] = np.nan
    scipy.io.savemat(tmp_path / "data_ellipse.mat", {"data": data})
    with pytest.raises(DataError, match=r"data_ellipse\.mat: data\.states_i has nan at row 3"):
        load_impacts(tmp_path)
    data["states_i"][3, 4] = 0.0
    data["n"][2, 1] = 0.5
    scipy.io.savemat(tmp_path / "data_ellipse.mat", {"data": data})
    with pytest.raises(DataError, match=r"data_ellipse\.mat: Jacobian rows"):
        load_impacts(tmp_path)
    scipy.io.savemat(tmp_path / "data_ellipse.mat", {"data": np.zeros(3)})
    with pytest.raises(DataError, match=r"data_ellipse\.mat: no struct"):
        load_impacts(tmp_path)
    (tmp_path / "p_true_data.mat").write_bytes(b"MATLAB 5.0 but truncated")
    make_data = {k: arrays[k] for k in ("states_i", "states_f", "n", "d")}
    scipy.io.savemat(tmp_path / "data_ellipse.mat", {"data": make_data})
    with pytest.raises(DataError, match=r"p_true_data\.mat: not a readable MATLAB file"):
        load_impacts(tmp_path)


def test_mcube_truncated_real_file(mcube_dir, tmp_path):
    for name in ("p_true_data.mat", "p_models.mat", "v_models.mat", "original_rows.txt"):
        shutil.copy(mcube_dir / name, tmp_path / name)
    data = (mcube_dir / "data_ellipse.mat").read_bytes()
    (tmp_path / "data_ellipse.mat").write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"data_ellipse\.mat"):
        load_impacts(tmp_path)


# --- format detection ---------------------------------------------------------------------


def test_detect_format_refuses_unknown(tmp_path):
    with pytest.raises(DataError, match="no such file or directory"):
        detect_format(tmp_path / "missing")
    with pytest.raises(DataError, match="not a recognised data set"):
        detect_format(tmp_path)
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(DataError, match=r"notes\.txt: not a \.pt or \.npz file"):
        detect_format(tmp_path / "notes.txt")


def test_a_training_script_reports_bad_data_in_one_line_with_exit_2(tmp_path):
    """train/ scripts end through residualsim.errors.run_script: a bad --data path is one
    line naming the script and the path, exit status 2, no traceback, nothing written."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "train" / "planar_supervised.py"
    missing, out = tmp_path / "missing", tmp_path / "out"
    run = subprocess.run([sys.executable, str(script), "--data", str(missing), "--out",
                          str(out)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    lines = [line for line in run.stderr.splitlines() if "pybullet build time" not in line]
    assert lines == [f"planar_supervised.py: error: {missing}: no such directory"]
    assert "Traceback" not in run.stderr and not out.exists()
