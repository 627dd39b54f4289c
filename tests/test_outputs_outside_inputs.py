"""An output never writes into what a command reads (issue 37): refused before any work."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from residualsim.atomic import check_outside_inputs
from residualsim.cli import main
from residualsim.errors import ParameterError

ROOT = Path(__file__).resolve().parents[1]
SYNTHETIC = ROOT / "data" / "samples" / "cube-synthetic"
HINGE = ROOT / "assets" / "examples"


@pytest.fixture()
def data(tmp_path):
    copy = tmp_path / "tosses-set"
    shutil.copytree(SYNTHETIC, copy)
    return copy


@pytest.mark.parametrize("where, relation", [
    (lambda d: d, "is the --data folder"),
    (lambda d: d / "cal", "lies inside the --data folder"),
    (lambda d: d.parent, "contains the --data folder"),
])
def test_calibrate_out_into_its_data_is_refused_before_any_work(data, capsys, where, relation):
    before = sorted(p.name for p in data.rglob("*"))
    code = main(["calibrate", "--scene", "cube", "--data", str(data), "--params",
                 "lateral_friction", "--samples", "20", "--burn-in", "5", "--out",
                 str(where(data))])
    assert code == 2
    err = capsys.readouterr().err
    assert relation in err and str(data) in err and "Traceback" not in err
    assert sorted(p.name for p in data.rglob("*")) == before


def test_prediction_file_inside_the_data_folder_is_refused(data, capsys):
    code = main(["simulate", "--scene", "cube", "--data", str(data), "--out",
                 str(data / "pred.npz")])
    assert code == 2 and "lies inside the --data folder" in capsys.readouterr().err
    assert not (data / "pred.npz").exists()


def test_scene_file_and_its_folder_are_protected_but_outputs_beside_it_are_not(tmp_path):
    scene = tmp_path / "obj.toml"
    scene.write_text("urdf = 'obj.urdf'\n")
    inputs = {"scene file": (scene, False), "scene file's folder": (tmp_path, False)}
    with pytest.raises(ParameterError, match="is the scene file"):
        check_outside_inputs(scene, inputs)
    with pytest.raises(ParameterError, match="contains the scene file"):
        check_outside_inputs(tmp_path, inputs)
    check_outside_inputs(tmp_path / "cal", inputs)  # the README's own layout
    check_outside_inputs(tmp_path / "p.npz", inputs)
