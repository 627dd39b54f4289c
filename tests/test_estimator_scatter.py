"""train/estimator_scatter.py: an interval's width against the estimator's scatter (issue 50)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("estimator_scatter",
                                                  ROOT / "train" / "estimator_scatter.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _summaries(sd: float, claimed_sd: float, n: int = 4000) -> list[dict]:
    """Estimates scattered by ``sd`` about the truth 0.3, each with a 90 % interval of half
    width 1.645 ``claimed_sd`` about it."""
    estimates = 0.3 + sd * np.random.default_rng(0).standard_normal(n)
    return [{"median": {"mu": e}, "q05": {"mu": e - 1.645 * claimed_sd},
             "q95": {"mu": e + 1.645 * claimed_sd}} for e in estimates]


@pytest.mark.parametrize("factor", [1.0, 2.0])
def test_rms_z_is_how_many_times_too_narrow_the_intervals_are(factor):
    row = _script().scatter(_summaries(0.01 * factor, 0.01), {"mu": 0.3})["mu"]
    assert row["rms_z"] == pytest.approx(factor, rel=0.05)
    assert row["robust_z"] == pytest.approx(factor, rel=0.08)
    expected_misses = 4000 * 2 * (1 - _normal_cdf(1.645 / factor))
    assert abs(row["misses"] - expected_misses) < 0.15 * expected_misses + 20


def _normal_cdf(x: float) -> float:
    from math import erf, sqrt

    return 0.5 * (1 + erf(x / sqrt(2)))
