"""The benches on a user's object (issue 23): ``bench engine`` and ``bench calibration``
take ``--scene NAME|FILE`` and that scene's recordings; ``bench residual`` and ``bench
beliefs`` run a model trained for a scene file. Tiny synthetic sets, so each run takes
seconds; bad input is one error line and exit 2."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import quiet_main


ROOT = Path(__file__).resolve().parents[1]
HINGE = ROOT / "assets" / "examples" / "hinge.toml"
ELL_URDF = ROOT / "assets" / "examples" / "ell.urdf"
TRUTH = "lateral_friction=0.3,restitution=0.2"
BOX = """<?xml version="1.0"?>
<robot name="box"><link name="box">
  <inertial><mass value="0.1"/><inertia ixx="1e-4" iyy="1e-4" izz="1e-4" ixy="0" ixz="0" iyz="0"/>
  </inertial><collision><geometry><box size="0.04 0.04 0.04"/></geometry></collision>
</link></robot>
"""


_main = quiet_main  # (exit code, stdout, stderr)


def _ok(*argv) -> tuple[dict, str]:
    code, out, err = _main(*argv)
    assert code == 0, err
    return json.loads(out.strip().splitlines()[-1]), out


def _refused(*argv) -> str:
    """The one error line of a command that must exit 2 without a traceback."""
    code, out, err = _main(*argv)
    assert code == 2, out + err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("residualsim: error:")]
    assert len(errors) == 1, err
    return errors[0]


def _synthesize(scene, out: Path, count: int) -> Path:
    _ok("data", "synthesize", "--scene", scene, "--count", count, "--samples", 30,
        "--params", TRUTH, "--out", out)
    return out


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


@pytest.fixture(scope="module")
def sets(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bench-scenes")
    (root / "box.urdf").write_text(BOX)
    box = root / "box.toml"
    box.write_text("urdf = 'box.urdf'\nkind = 'planar'\n")
    return {"hinge": _synthesize(HINGE, root / "hinge", 12),
            "few": _synthesize(HINGE, root / "few", 2),
            "ell": _synthesize(ELL_URDF, root / "ell", 3),
            "box_scene": box,
            "box": _synthesize(box, root / "box-data", 3),
            "root": root}


@pytest.fixture(scope="module")
def hinge_model(sets) -> Path:
    out = sets["root"] / "model"
    _ok("train", "--scene", HINGE, "--data", sets["hinge"], "--out", out, "--budget", 8,
        "--batch-size", 8, "--quiet")
    return out


def test_bench_engine_times_a_scene_file_and_its_recordings(sets):
    record, out = _ok("bench", "engine", "--scene", HINGE, "--data", sets["hinge"],
                      "--tosses", 2, "--repeats", 1)
    assert record["command"] == "bench engine"
    assert record["scene"] == str(HINGE) and record["scene_name"] == "hinge"
    assert out.startswith(f"scene hinge ({HINGE})")
    assert set(record["overhead"]) == {"substeps_1", "substeps_10"}  # 1 and the file's 10
    for row in record["overhead"].values():
        assert all(_finite(v) and v > 0 for v in row.values()), row
    workers = record["workers"]
    assert workers["n_trajectories"] == 12 and workers["n_samples"] == 12 * 30
    assert workers["workers_2"]["identical_to_first"] is True
    assert _finite(workers["speedup_2_over_1"]) and workers["speedup_2_over_1"] > 0


def test_bench_engine_on_a_planar_scene_file_skips_workers_without_data(sets, monkeypatch):
    monkeypatch.delenv("RESIDUALSIM_DATA", raising=False)
    record, out = _ok("bench", "engine", "--scene", sets["box_scene"], "--tosses", 2,
                      "--repeats", 1)
    assert record["scene_name"] == "box" and "workers" not in record
    assert "no data given" in record["workers_skipped"]
    assert "worker speed-up skipped" in out
    for row in record["overhead"].values():
        assert all(_finite(v) and v > 0 for v in row.values()), row


def test_bench_calibration_runs_on_scene_files_and_bare_urdfs(sets):
    for scene, data in ((HINGE, sets["hinge"]), (ELL_URDF, sets["ell"]),
                        (sets["box_scene"], sets["box"])):
        record, out = _ok("bench", "calibration", "--scene", scene, "--data", data,
                          "--tosses", 2, "--samples", 5, "--burn-in", 0, "--probe-steps", 2)
        assert record["command"] == "bench calibration" and record["scene"] == str(scene)
        assert out.startswith(f"{scene}: 2 recordings, 1 substep(s), 2 chains, 5 steps:")
        assert record["n_trajectories"] == 2 and record["steps"] == 5
        for key in ("workers_1", "workers_2"):
            assert _finite(record[key]["seconds_per_step"]) and record[key]["seconds_per_step"] > 0
            assert record[key]["identical_to_first"] is True
        for key in ("speedup_2_over_1", "ms_per_trajectory", "step_only_ms_per_trajectory",
                    "share_outside_step"):
            assert _finite(record[key]), key
        assert record["share_outside_step"] < 1


@pytest.mark.parametrize("bench", ["engine", "calibration"])
def test_bench_refuses_recordings_of_another_scene_and_unknown_scenes(sets, bench):
    extra = ("--tosses", 2) + (("--repeats", 1) if bench == "engine" else ("--probe-steps", 1))
    line = _refused("bench", bench, "--scene", HINGE, "--data", sets["ell"], *extra)
    assert "do not match scene 'hinge'" in line
    line = _refused("bench", bench, "--scene", "cube", "--data", sets["hinge"], *extra)
    assert "scene 'cube' is a single rigid body" in line
    line = _refused("bench", bench, "--scene", HINGE, "--data", sets["box"], *extra)
    assert "a planar recording" in line
    assert "unknown scene 'nosuch'" in _refused("bench", bench, "--scene", "nosuch", *extra)
    assert "no such scene file" in _refused("bench", bench, "--scene",
                                            sets["root"] / "missing.toml", *extra)
    assert "no such data directory" in _refused("bench", bench, "--scene", HINGE, "--data",
                                                sets["root"] / "missing", *extra)


def test_bench_calibration_refuses_the_planar_impact_set(mcube_dir):
    line = _refused("bench", "calibration", "--scene", "planar-ellipse", "--data", mcube_dir,
                    "--tosses", 2)
    assert "single impacts" in line


def test_bench_residual_and_beliefs_run_a_model_trained_for_a_scene_file(sets, hinge_model):
    record, _ = _ok("bench", "residual", "--model", hinge_model, "--data", sets["hinge"],
                    "--tosses", 2, "--repeats", 1)
    assert record["scene"] == str(HINGE) and record["n_trajectories"] >= 1
    assert record["substeps"] == 10 and _finite(record["events_per_toss"])
    assert all(_finite(v) and v > 0 for v in record["seconds_per_toss"].values())
    assert _finite(record["mean_over_engine_poses"])
    record, _ = _ok("bench", "beliefs", "--model", hinge_model, "--data", sets["hinge"],
                    "--tosses", 1, "--particles", 4, "--events", 1, "--workers", 1)
    assert record["scene"] == str(HINGE) and record["n_trajectories"] == 1
    assert record["propagated"] == 4
    for key in ("simulated_s", "residual_over_real_time", "engine_over_real_time",
                "residual_over_engine", "rejected_fraction"):
        assert _finite(record[key]), key


@pytest.mark.parametrize("bench", ["residual", "beliefs"])
def test_model_benches_refuse_other_recordings_and_an_empty_split(sets, hinge_model, bench):
    line = _refused("bench", bench, "--model", hinge_model, "--data", sets["ell"])
    assert "do not match scene 'hinge'" in line
    line = _refused("bench", bench, "--model", hinge_model, "--data", sets["few"])
    assert "validation split" in line  # was a ZeroDivisionError traceback (bench beliefs)
