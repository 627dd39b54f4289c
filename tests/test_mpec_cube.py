"""MPEC on the cube tosses: contact windows, a small real solve on a bundled toss, and the
refusals (no contact, NaN, bounds)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from residualsim.data import load_trajectories
from residualsim.data.bundled import REAL_SAMPLES
from residualsim.errors import DataError, ParameterError
from residualsim.sysid.mpec.cube import contact_windows, identify_tosses


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
