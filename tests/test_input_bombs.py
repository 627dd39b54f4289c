"""Inputs built to exhaust a reader (found by adversarial testing, issue 37's follow-up): a
JSON parameter file or TOML scene file nested thousands deep (a RecursionError traceback),
a JSON integer of thousands of digits (Python's own message about an interpreter setting),
a CSV header of 100 000 columns (25 s of quadratic checks), a cell or a scene value of
megabytes (repeated whole in the message). Each is one short error naming the file."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from residualsim.atomic import read_json
from residualsim.data import load_csv_trajectory
from residualsim.errors import DataError, ParameterError, SceneError
from residualsim.sim.scenes.params import parse_params
from residualsim.sim.scenes.scene_file import read_scene_file

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("text,message", [
    ("[" * 100_000 + "]" * 100_000, "arrays or objects nested too deeply"),
    ('{"a":' * 100_000 + "1" + "}" * 100_000, "arrays or objects nested too deeply"),
    ('{"lateral_friction": 1' + "0" * 5000 + "}", "an integer of 5001 digits"),
])
@pytest.mark.parametrize("unique_keys", [False, True])
def test_a_json_bomb_is_one_error_naming_the_file(tmp_path, text, message, unique_keys):
    (tmp_path / "p.json").write_text(text)
    with pytest.raises(DataError, match=rf"p\.json: not readable JSON \({message}"):
        read_json(tmp_path / "p.json", unique_keys=unique_keys)


def test_a_parameter_file_with_a_bad_body_names_the_file_once(tmp_path):
    path = tmp_path / "p.json"
    path.write_text('{"params": {"lateral_friction": 0.3}, "body": {"mass": NaN}}')
    with pytest.raises(ParameterError) as refused:
        parse_params(str(path))
    assert str(refused.value).count("p.json") == 1, str(refused.value)


@pytest.mark.parametrize("extra,message", [
    ("x = " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
    ("x = " + "{a=" * 5000 + "1" + "}" * 5000 + "\n", "nested too deeply"),
    ("substeps = [" + "1," * 100_000 + "]\n", r"got \[1, 1, .{1,60}$"),
    ("".join(f"k{i} = 1\n" for i in range(1000)), "unknown key.* and 995 more"),
])
def test_a_toml_bomb_is_one_short_error_naming_the_file(tmp_path, extra, message):
    shutil.copy(ROOT / "assets" / "cube.urdf", tmp_path / "cube.urdf")
    (tmp_path / "s.toml").write_text(f'urdf = "cube.urdf"\n{extra}')
    with pytest.raises(SceneError, match=message) as refused:
        read_scene_file(tmp_path / "s.toml")
    assert "s.toml" in str(refused.value) and len(str(refused.value)) < 400


def _csv(tmp_path, edit) -> Path:
    lines = ["t,x,y,z,qw,qx,qy,qz"] + [f"{0.01 * i:.2f},0,0,{1 - 0.01 * i:.2f},1,0,0,0"
                                       for i in range(30)]
    path = tmp_path / "bad.csv"
    path.write_text("\n".join(edit(lines)) + "\n")
    return path


def test_a_csv_header_of_100000_columns_is_refused_at_once(tmp_path):
    path = _csv(tmp_path, lambda lines: [line + ",0" * 100_000 for line in lines])
    start = time.perf_counter()
    with pytest.raises(DataError, match=r"bad\.csv: duplicate column\(s\) 0$"):
        load_csv_trajectory(path)
    assert time.perf_counter() - start < 5


@pytest.mark.parametrize("cell,message", [("1" * 100_000, "is not a finite number"),
                                          ("x" * 100_000, "is not a number")])
def test_a_huge_cell_is_cut_in_the_message(tmp_path, cell, message):
    path = _csv(tmp_path, lambda lines: lines[:4] + [lines[4].replace(",0,", f",{cell},", 1)]
                + lines[5:])
    with pytest.raises(DataError, match=rf"bad\.csv: line 5, column 'x': '[1x]{{37}}\.\.\.' "
                                        rf"{message}"):
        load_csv_trajectory(path)
