"""The Gamma test of train/planar_noise_floor.py recovers a known noise level."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.mark.parametrize("noise", [0.05, 0.2])
def test_the_gamma_test_finds_the_noise_of_a_smooth_map(noise, train_script):
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(3000, 3))
    smooth = _smooth(x)
    y = smooth + rng.normal(0, noise / np.sqrt(3), size=smooth.shape)  # RMS of the 3-vector
    found = train_script("planar_noise_floor").gamma_test(x, y, x, y, neighbours=10)
    assert found["rmse_floor"] == pytest.approx(noise, rel=0.1)
    assert found["nearest_neighbour_rmse_floor"] > found["rmse_floor"]


def _smooth(x):
    return np.column_stack([np.sin(2 * x[:, 0]) + x[:, 1] ** 2, x[:, 2] * x[:, 0],
                            np.cos(x[:, 1])])


def test_against_a_noise_free_reference_set_the_intercept_is_half_the_noise(train_script):
    rng = np.random.default_rng(1)
    noise = 0.2
    x, reference = rng.uniform(-1, 1, size=(2, 3000, 3))
    y = _smooth(x) + rng.normal(0, noise / np.sqrt(3), size=(3000, 3))
    cross = train_script("planar_noise_floor").gamma_test(x, y, reference, _smooth(reference),
                                                          neighbours=10, same_set=False)
    assert cross["noise_variance"] == pytest.approx(noise ** 2 / 2, rel=0.2)


def test_the_inputs_do_not_see_a_half_turn(train_script):
    module = train_script("planar_noise_floor")
    state = np.array([[0.3, 0.1, 0.4, 1.0, -2.0, 3.0]])
    turned = state + [0.0, 0.0, np.pi, 0.0, 0.0, 0.0]
    assert module.pre_impact_inputs(turned, 0.05) == pytest.approx(
        module.pre_impact_inputs(state, 0.05))
    assert module.pre_impact_inputs(state, 0.05)[0, 4] == pytest.approx(0.15)


def test_a_bad_report_path_is_refused_before_any_work(tmp_path, train_script):
    from residualsim.errors import ParameterError

    (tmp_path / "a-file").write_text("x")
    with pytest.raises(ParameterError, match="is a file, not a directory"):
        train_script("planar_noise_floor").main(["--data", str(tmp_path / "no-such-data"),
                                                 "--out", str(tmp_path / "a-file" / "r.json")])
