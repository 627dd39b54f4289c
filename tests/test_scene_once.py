"""A command resolves its ``--scene`` once and hands the object down (issue 66).

Resolving a scene file reads the TOML and parses its URDF; before this, one ``train`` read
the hinge's scene file 49 times and one ``calibrate`` 17 (every stage, worker and engine
resolved the name again). Counted here through ``read_scene_file``, the one reader.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import residualsim.sim.scenes as scenes
from residualsim.cli import main
from residualsim.sim.engine import Engine
from residualsim.sim.scenes import make_scene, scene_reference

HINGE = "assets/examples/hinge.toml"


@pytest.fixture
def reads(monkeypatch):
    """The calls of ``read_scene_file`` (the registry's use of it) during the test."""
    calls: list[str] = []
    original = scenes.read_scene_file

    def counted(path, *args, **kwargs):
        calls.append(str(path))
        return original(path, *args, **kwargs)

    monkeypatch.setattr(scenes, "read_scene_file", counted)
    return calls


@pytest.fixture(scope="module")
def hinge_data(tmp_path_factory):
    out = tmp_path_factory.mktemp("hinge") / "rec"
    assert main(["data", "synthesize", "--scene", HINGE, "--count", "6", "--samples", "40",
                 "--seed", "3", "--params", "lateral_friction=0.3,restitution=0.4",
                 "--out", str(out)]) == 0
    return out


def test_calibrate_and_train_read_the_scene_file_once(hinge_data, tmp_path, reads):
    cal = tmp_path / "cal"
    assert main(["calibrate", "--scene", HINGE, "--data", str(hinge_data), "--method", "lsq",
                 "--budget", "8", "--split", "all", "--no-plots", "--out", str(cal)]) == 0
    assert reads == [HINGE]
    reads.clear()
    assert main(["train", "--scene", HINGE, "--data", str(hinge_data), "--calibration",
                 str(cal), "--budget", "2", "--no-fit-uncertainty", "--quiet",
                 "--out", str(tmp_path / "model")]) == 0
    assert reads == [HINGE]


def test_simulate_and_data_info_read_the_scene_file_once(hinge_data, tmp_path, reads):
    assert main(["simulate", "--scene", HINGE, "--data", str(hinge_data),
                 "--out", str(tmp_path / "p.npz")]) == 0
    assert reads == [HINGE]
    reads.clear()
    assert main(["data", "info", str(hinge_data), "--scene", HINGE]) == 0
    assert reads == [HINGE]


def test_engines_build_their_own_copy_of_one_scene():
    """Two engines of one resolved scene are two worlds; the object handed in stays unbuilt
    (so it pickles to workers) and is not read again."""
    scene = make_scene(HINGE)
    with Engine(scene) as first, Engine(scene) as second:
        assert first.scene is not scene and second.scene is not first.scene
        assert scene.client == -1 and first.scene.client != second.scene.client
        state = first.scene.get_state()
        moved = state.copy()
        moved[2] += 0.5
        first.scene.set_state(moved)
        assert np.allclose(first.scene.get_state()[2], state[2] + 0.5)
        assert np.allclose(second.scene.get_state()[2], state[2])
    assert scene_reference(scene) == str(Path(HINGE).resolve())  # what files record
    assert make_scene(scene) is scene


def test_settings_on_a_resolved_scene_give_a_copy():
    scene = make_scene("cube")
    faster = make_scene(scene, scene.settings.__class__(dt_s=0.005, substeps=3))
    assert faster is not scene and faster.settings.substeps == 3
    assert scene.settings.substeps != 3
