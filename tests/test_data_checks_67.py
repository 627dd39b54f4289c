"""Issue 67: data checks in seconds and metres, not in samples.

Eight byte-identical copies of one toss passed ``data info`` and ``calibrate`` without a
word; a file where the object lies still the whole time got a ``body_flight`` entry; a rest
6 mm above the table was counted as free flight and not reported; at 1 kHz the first-contact
summary said "later than 0.3 s or never" for contacts at 0.25 s (its window was 30
samples)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import quiet_main

from residualsim.data import load_trajectories, save_csv_trajectories
from residualsim.data.duplicates import NEAR_M, duplicate_groups
from residualsim.experiments.data_info import describe_for_scene

ROOT = Path(__file__).resolve().parents[1]
SYNTHETIC = ROOT / "data" / "samples" / "cube-synthetic"
REAL = ROOT / "data" / "samples" / "contactnets-cube"
ELL = ROOT / "assets" / "examples" / "ell.toml"


def _copies(tmp_path: Path, shift_m: float = 0.0) -> Path:
    """Six synthetic tosses and eight copies of the first under other names (each
    ``shift_m`` further in x than the last)."""
    tosses = load_trajectories(SYNTHETIC)
    first = next(iter(tosses.values()))
    copies = {}
    for i in range(8):
        moved = first.positions_m + np.array([shift_m * (i + 1), 0.0, 0.0])
        copies[f"copy{i}"] = dataclasses.replace(first, traj_id=f"copy{i}",
                                                 positions_m=moved)
    out = tmp_path / "copies"
    save_csv_trajectories(out, {**dict(list(tosses.items())[:6]), **copies},
                          with_velocities=True)
    return out


def test_data_info_names_copies_and_near_copies(tmp_path, caplog):
    folder = _copies(tmp_path)
    code, out, err = quiet_main("data", "info", folder)
    assert code == 0, err
    info = json.loads(out.strip().splitlines()[-1])
    [group] = info["duplicates"]["groups"]
    assert group == ["copy0", "copy1", "copy2", "copy3", "copy4", "copy5", "copy6",
                     "copy7", "synthetic-0"]
    assert "8 recordings repeat another" in info["duplicates"]["note"]
    assert "8 recordings repeat another" in caplog.text  # a warning too (standard error)
    near = load_trajectories(_copies(tmp_path / "near", shift_m=NEAR_M / 20))
    assert len(duplicate_groups(near)[0]) == 9  # 0.05 mm apart each: still copies
    apart = load_trajectories(_copies(tmp_path / "apart", shift_m=1e-3))
    assert duplicate_groups(apart) == []  # 1 mm apart: other throws


def test_calibrate_warns_of_copies_before_it_runs_and_records_it(tmp_path, caplog):
    folder = _copies(tmp_path)
    code, out, err = quiet_main("calibrate", "--data", folder, "--method", "lsq", "--budget",
                                "8", "--no-ground", "--quiet", "--out", tmp_path / "cal")
    assert code == 0, err
    assert "8 recordings repeat another" in caplog.text
    summary = json.loads((tmp_path / "cal" / "summary.json").read_text())
    assert any("8 recordings repeat another" in w for w in summary["warnings"])


def _shifted(tmp_path: Path, dz_m: float) -> Path:
    tosses = load_trajectories(REAL)
    out = tmp_path / f"shifted{dz_m}"
    save_csv_trajectories(out, {k: dataclasses.replace(
        t, positions_m=t.positions_m + np.array([0.0, 0.0, dz_m])) for k, t in tosses.items()},
        with_velocities=True)
    return out


def test_the_rest_height_is_measured_against_the_table_and_reported(tmp_path):
    real = describe_for_scene(_shifted(tmp_path, 0.0), "cube")
    assert real["rest_gap_m"]["count"] == 8
    assert -0.003 < real["rest_gap_m"]["median"] < -0.001  # 2.1 mm into it (README §24)
    assert "rest_note" not in real
    high = describe_for_scene(_shifted(tmp_path, 0.006), "cube")
    assert high["rest_gap_m"]["median"] == pytest.approx(real["rest_gap_m"]["median"] + 0.006,
                                                         abs=2e-4)
    assert "sits 3.9 mm above the table at z = 0" in high["rest_note"]
    assert "rest and slides are not taken for free flight" in high["rest_note"]
    assert all(f["rest_gap_mm"] is not None for f in high["files"])


def test_first_contacts_are_looked_for_over_seconds_not_samples(tmp_path):
    code, _, err = quiet_main("data", "synthesize", "--scene", ELL, "--count", "2",
                              "--samples", "600", "--rate", "1000", "--params",
                              "lateral_friction=0.3,restitution=0.4", "--out", tmp_path / "khz")
    assert code == 0, err
    info = describe_for_scene(tmp_path / "khz", str(ELL))
    first = info["first_contact_on_shapes_s"]
    assert first["count"] == 2 and first["later_than_0.3_s_or_never"] == 0, first
    assert 0.03 < first["min"] <= first["max"] < 0.3  # past 30 samples, within 0.3 s
    assert all(f["flight_samples"] > 30 for f in info["files"])


def test_a_file_without_free_flight_is_listed_as_such(tmp_path):
    from residualsim.sim.recordings import load_recordings
    from residualsim.sysid.flight_info import flight_identifiability, format_flight_report

    code, _, err = quiet_main("data", "synthesize", "--scene", ELL, "--count", "2",
                              "--params", "lateral_friction=0.3,restitution=0.4",
                              "--out", tmp_path / "ell")
    assert code == 0, err
    tosses = load_trajectories(tmp_path / "ell")
    toss = next(iter(tosses.values()))
    n = toss.n_samples
    still = dataclasses.replace(  # lying where the first toss ends, the whole time
        toss, traj_id="still", positions_m=np.repeat(toss.positions_m[-1:], n, axis=0),
        quat_wxyz=np.repeat(toss.quat_wxyz[-1:], n, axis=0),
        linear_velocity_mps=np.zeros((n, 3)), angular_velocity_world_radps=np.zeros((n, 3)))
    save_csv_trajectories(tmp_path / "with-still", {**tosses, "still": still},
                          with_velocities=True)
    recordings = load_recordings(tmp_path / "with-still", str(ELL))
    report = flight_identifiability(str(ELL), recordings)
    assert [f["id"] for f in report["files"]] == list(tosses)
    assert report["no_free_flight"] == [{"id": "still", "why": "still the whole time"}]
    assert "still: no free flight (still the whole time): not compared" in \
        format_flight_report(report)
