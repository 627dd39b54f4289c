"""MPEC on the cube tosses: contact windows, a small real solve on a bundled toss, and the
refusals (no contact, NaN, bounds)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from residualsim.data import load_trajectories
from residualsim.data.bundled import REAL_SAMPLES
from residualsim.errors import DataError, ParameterError
from residualsim.sysid.mpec.cube import contact_windows, identify_tosses, weighted_median


@pytest.fixture(scope="module")
def toss():
    tosses = load_trajectories(REAL_SAMPLES)
    return tosses[sorted(tosses, key=int)[0]]


def test_windows_surround_the_first_contact(toss):
    windows = contact_windows(toss, before=2, after=8, max_events=1)
    assert len(windows) == 1
    start, stop = windows[0]
    assert stop - start == 10 and start > 0


def test_one_bundled_toss_solves(toss):
    estimate = identify_tosses({"t": toss}, max_events=1, after=6, taus=(1e-1, 1e-3, 1e-6))
    assert 0.0 <= estimate.mu <= 1.0 and 0.0 <= estimate.restitution <= 1.0
    assert estimate.report["solver_status"] in ("Solve_Succeeded", "Solved_To_Acceptable_Level")
    assert estimate.position_rms_m < 0.005  # the fit follows the recorded poses
    assert estimate.report["complementarity_violation"] < 1e-2


def test_refusals(toss):
    flying = dataclasses.replace(toss, positions_m=toss.positions_m + [0.0, 0.0, 1.0])
    with pytest.raises(DataError, match="no contact event"):
        identify_tosses({"t": flying})
    positions = toss.positions_m.copy()
    positions[3, 0] = np.nan
    with pytest.raises(DataError):  # refused by Trajectory itself, or by the MPEC
        identify_tosses({"t": dataclasses.replace(toss, positions_m=positions)})
    with pytest.raises(ParameterError, match="lateral_friction bounds"):
        identify_tosses({"t": toss}, mu_bounds=(0.0, 2.0))


@pytest.fixture(scope="module")
def bundled():
    tosses = load_trajectories(REAL_SAMPLES)
    return {k: tosses[k] for k in sorted(tosses, key=int)}


def test_weighted_median():
    assert weighted_median([3.0, 1.0, 2.0], [1.0, 1.0, 1.0]) == 2.0
    assert weighted_median([0.0, 1.0, 2.0], [0.1, 0.1, 5.0]) == 2.0
    assert weighted_median([0.0, 1.0], [1.0, 1.0]) == 0.0  # the lower one at a tie
    assert weighted_median([0.0, 1.0, 5.0], [0.0, 0.0, 0.0]) == 1.0  # no weight: plain median
    with pytest.raises(ValueError):
        weighted_median([], [])


def test_windows_solve_independently_and_restitution_is_interior(bundled):
    """Each window is its own NLP; on real tosses e does not run to its bound 0 (it did with
    the position-level restitution term) and the result does not depend on the workers."""
    estimate = identify_tosses(bundled)
    per_window = estimate.per_window
    assert len(per_window) == len(bundled) == estimate.report["n_windows"]
    assert estimate.report["solver_status"] == "Solve_Succeeded"
    assert estimate.report["complementarity_violation"] < 5e-3
    assert 0.05 < estimate.mu < 0.5
    assert 0.03 < estimate.restitution < 0.5
    assert sum(w.restitution > 1e-3 for w in per_window) >= len(per_window) // 2
    assert estimate.position_rms_m < 0.004
    two = identify_tosses(dict(list(bundled.items())[:3]), n_workers=2)
    one = identify_tosses(dict(list(bundled.items())[:3]), n_workers=1)
    assert [w.as_json() | {"seconds": 0} for w in one.per_window] == \
        [w.as_json() | {"seconds": 0} for w in two.per_window]
    assert (one.mu, one.restitution) == (two.mu, two.restitution)


def test_calibrate_mpec_refuses_unknown_scenes_and_broken_scene_files(tmp_path):
    """Built-in scenes without an MPEC model are refused by name; a scene file is read (its
    own checks: test_mpec_scene_file.py) before any data."""
    from residualsim.errors import SceneError
    from residualsim.sysid.mpec.calibration import calibrate_mpec

    with pytest.raises(ParameterError, match="supports the scenes cube, planar-ellipse"):
        calibrate_mpec("arm-loop", tmp_path, ["lateral_friction"], tmp_path / "out")
    scene = tmp_path / "thing.toml"
    scene.write_text("urdf = 'thing.urdf'\n")
    with pytest.raises(SceneError, match="thing.urdf not found"):
        calibrate_mpec(str(scene), tmp_path, ["lateral_friction"], tmp_path / "out")


def test_bench_mpec_cube_times_both_on_the_same_tosses():
    from residualsim.experiments.bench_mpec import bench_mpec_cube, format_mpec_report

    cube = bench_mpec_cube(str(REAL_SAMPLES), n_tosses=3, n_workers=1, probe_steps=2)
    assert cube["n_tosses"] == cube["n_windows"] == 3
    assert cube["status"] == "Solve_Succeeded" and 0.0 <= cube["mu"] <= 1.0
    assert cube["mh_projected_seconds"] == pytest.approx(4000 * cube["mh_seconds_per_step"])
    assert cube["speedup_over_mh"] == pytest.approx(cube["mh_projected_seconds"]
                                                    / cube["mpec_seconds"])
    assert cube["mpec_cpu_seconds"] > 0 and cube["mh_cpu_seconds_per_step"] > 0
    assert "MPEC" in format_mpec_report({"single": [], "multi": [], "cube": cube})
