"""MPEC on planar impacts: recovery of μ and e on synthetic impacts, degenerate input, and
``calibrate --method mpec`` writing a calibration that ``load_calibration`` reads."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from residualsim.data.impacts import PlanarImpacts
from residualsim.errors import DataError, ParameterError
from residualsim.sysid.mpec.impacts import identify_impacts

K = 0.0192354
MASS = 0.0364


def synthetic_impacts(mu: float, e: float, count: int = 30, noise: float = 0.0,
                      rng: int = 0, convention: str = "corrected") -> PlanarImpacts:
    """Impacts under the centre (r_x = 0, so normal and tangent decouple) by the exact law."""
    rng = np.random.default_rng(rng)
    r_y = -0.025
    normal = np.tile([0.0, 1.0, 0.0], (count, 1))
    tangent = np.tile([1.0, 0.0, -r_y], (count, 1))
    # mostly sliding (if every impact sticks, μ is only bounded from below); a few stick
    sliding = rng.choice([-1.0, 1.0], count) * rng.uniform(1.0, 6.0, count)
    pre = np.column_stack([sliding, rng.uniform(-3, -2, count), rng.uniform(-10, 10, count)])
    inv_mass = np.array([1.0, 1.0, 1.0 / K ** 2]) / MASS
    p_n = MASS * (1 + e) * -pre[:, 1]
    slip = np.sum(tangent * pre, axis=1)
    tangent_mass = 1.0 / (tangent ** 2 @ inv_mass)
    p_t = -np.sign(slip) * np.minimum(np.abs(slip) * tangent_mass, mu * p_n)
    post = pre + inv_mass * (normal * p_n[:, None] + tangent * p_t[:, None])
    post += rng.uniform(-noise, noise, post.shape)
    zeros = np.zeros((count, 3))
    return PlanarImpacts(pre_state=np.hstack([zeros, pre]), post_state=np.hstack([zeros, post]),
                         rows=np.arange(count), normal_jacobian=normal,
                         tangent_jacobian=tangent, best_impulse=np.zeros((count, 2)),
                         mass_kg=MASS, radius_of_gyration_m=K, convention=convention)


def test_recovers_friction_and_restitution():
    estimate = identify_impacts(synthetic_impacts(0.2, 0.6))
    assert estimate.mu == pytest.approx(0.2, abs=1e-3)
    assert estimate.restitution == pytest.approx(0.6, abs=1e-3)
    assert estimate.report["solver_status"] == "Solve_Succeeded"
    assert estimate.report["complementarity_violation"] < 1e-4
    noisy = identify_impacts(synthetic_impacts(0.3, 0.5, count=60, noise=0.01, rng=1))
    assert noisy.mu == pytest.approx(0.3, abs=0.01)
    assert noisy.restitution == pytest.approx(0.5, abs=0.01)


def test_degenerate_impacts_are_refused():
    with pytest.raises(DataError, match="corrected"):
        identify_impacts(synthetic_impacts(0.2, 0.6, convention="upstream"))
    leaving = synthetic_impacts(0.2, 0.6)
    leaving.pre_state[:, 4] *= -1  # every pre-velocity leaves the floor
    with pytest.raises(DataError, match="no impact approaches"):
        identify_impacts(leaving)
    with pytest.raises(ParameterError, match="restitution bounds"):
        identify_impacts(synthetic_impacts(0.2, 0.6), restitution_bounds=(0.0, 1.2))


def test_real_planar_impacts(mcube_dir):
    from residualsim.data import load_impacts, split_ids

    impacts = load_impacts(mcube_dir, convention="corrected")
    train = impacts.subset(split_ids(impacts.rows.tolist(), seed=0)["train"][:60])
    estimate = identify_impacts(train)
    # the shipped MH calibration (200 training impacts, engine in the loop): 0.177, 0.594
    assert 0.1 < estimate.mu < 0.3 and 0.45 < estimate.restitution < 0.7
    assert estimate.report["solver_seconds"] < 30


def test_calibrate_cli_writes_a_calibration(mcube_dir, tmp_path):
    from residualsim.sysid.calibration_file import load_calibration

    out = tmp_path / "cal"
    result = subprocess.run(
        [sys.executable, "-m", "residualsim", "calibrate", "--method", "mpec", "--scene",
         "planar-ellipse", "--params", "lateral_friction,restitution", "--data",
         str(mcube_dir), "--max-trajectories", "40", "--out", str(out)],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    line = json.loads(result.stdout.strip().splitlines()[-1])
    assert line["method"] == "mpec" and line["solver_status"] == "Solve_Succeeded"
    assert {"params", "seconds", "complementarity_violation", "settings"} <= set(line)
    calibration = load_calibration(out)
    assert calibration.scene == "planar-ellipse" and calibration.substeps == 10
    assert calibration.params.lateral_friction == pytest.approx(line["best"]["lateral_friction"])
    assert calibration.params.contact_stiffness == float("inf")


def test_mpec_refuses_parameters_without_a_counterpart(mcube_dir, tmp_path):
    from residualsim.sysid.mpec.calibration import calibrate_mpec

    with pytest.raises(ParameterError, match="spinning_friction"):
        calibrate_mpec("planar-ellipse", mcube_dir, ["lateral_friction", "spinning_friction"],
                       tmp_path)
