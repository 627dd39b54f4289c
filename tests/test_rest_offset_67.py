"""Issue 67: a rest above the table is not free flight, and an offset table is not blamed
on the quaternion order.

The bundled real tosses rest 2.1 mm into the table; raised 6 mm they rest 3.9 mm above
it, and their rests, slides and tumbles at that height were taken for later free flights
(9 segments in 8 tosses for the body stage, none when not raised); raised 8 mm,
``data info`` refused a file for its quaternion order. Contact is now measured from a
recording's own rest (sim.plausibility.rest_offset_m), a level height near the table is
contact (level_at), and a rest lying flat is an offset table, not a permuted quaternion
(rests_flat)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from conftest import quiet_main

from residualsim.data import load_trajectories, save_csv_trajectories

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "data" / "samples" / "contactnets-cube"


def _raised(tmp_path: Path, dz_m: float) -> Path:
    out = tmp_path / f"raised{dz_m}"
    save_csv_trajectories(out, {k: dataclasses.replace(
        t, positions_m=t.positions_m + np.array([0.0, 0.0, dz_m]))
        for k, t in load_trajectories(REAL).items()}, with_velocities=True)
    return out


def _flights(path) -> dict:
    from residualsim.sim.engine import Engine
    from residualsim.sim.recordings import free_flight_samples, load_recordings
    from residualsim.sysid.flight_segments import later_flights

    with Engine("cube") as engine:
        return {k: (free_flight_samples(engine, r), later_flights(engine, r))
                for k, r in load_recordings(path, "cube").items()}


@pytest.mark.parametrize("dz_m", [0.006, 0.008])
def test_a_rest_above_the_table_is_not_free_flight(tmp_path, dz_m):
    real, raised = _flights(REAL), _flights(_raised(tmp_path, dz_m))
    assert all(flights == [] for _, flights in real.values())
    assert all(flights == [] for _, flights in raised.values()), raised
    assert all(abs(raised[k][0] - real[k][0]) <= 1 for k in real)  # the first flights


def test_an_object_lying_still_above_the_table_has_no_free_flight(tmp_path):
    from residualsim.sim.engine import Engine
    from residualsim.sim.recordings import free_flight_samples

    toss = load_trajectories(REAL)["8"]
    still = dataclasses.replace(toss, positions_m=np.tile(toss.positions_m[-1] + [0, 0, 0.006],
                                                          (toss.n_samples, 1)),
                                quat_wxyz=np.tile(toss.quat_wxyz[-1], (toss.n_samples, 1)))
    with Engine("cube") as engine:
        assert free_flight_samples(engine, still) == 0  # was: all of it (30)


def test_an_offset_table_is_not_blamed_on_the_quaternion_order(tmp_path):
    import json

    code, out, err = quiet_main("data", "info", _raised(tmp_path, 0.008), "--scene", "cube")
    assert code == 0, err  # was: "the quaternions look like x-y-z-w order" (exit 2)
    info = json.loads(out.strip().splitlines()[-1])
    assert "quaternion" not in err and "sits 5.9 mm above the table" in info["rest_note"]


def test_a_permuted_quaternion_is_still_refused(tmp_path):
    """The same tosses with x-y-z-w values under the w-x-y-z header: the rest is not flat."""
    tosses = load_trajectories(REAL)
    save_csv_trajectories(tmp_path / "xyzw", {k: dataclasses.replace(
        t, quat_wxyz=np.asarray(t.quat_wxyz)[:, [1, 2, 3, 0]]) for k, t in tosses.items()},
        with_velocities=False)
    code, _, err = quiet_main("data", "info", tmp_path / "xyzw", "--scene", "cube")
    assert code == 2 and "look like x-y-z-w order" in err.strip().splitlines()[-1], err
