"""train/sbc_rules.py: another covariance rule judged on finished SBC rows (issue 50)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("sbc_rules", ROOT / "train" / "sbc_rules.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(path: Path, recorded_scale: float, n: int = 300) -> Path:
    """Rows whose posterior is the Gaussian N(mode, Σ) in the box and whose truth is drawn
    from it (so SBC holds for Σ); ``recorded_scale`` × Σ is what the row says MH sampled."""
    from residualsim.sysid.paramspace import ParamSpace

    names, bounds = ["lateral_friction", "restitution"], {"lateral_friction": [0.1, 0.7],
                                                          "restitution": [0.1, 0.7]}
    space = ParamSpace(names, bounds=bounds, scene="cube")
    config = {"scene": "cube", "params": names, "bounds": bounds}
    rng, draw = np.random.default_rng(0), _script().truncated_gaussian
    sigma = np.array([[0.02 ** 2, 0.5 * 0.02 * 0.05], [0.5 * 0.02 * 0.05, 0.05 ** 2]])
    lines = []
    for index in range(n):
        mode = rng.uniform(0.3, 0.7, size=2)
        truth = draw(mode, sigma, 1, rng)[0]
        replicates = rng.multivariate_normal(mode, sigma, size=10)
        natural = space.from_unit(np.vstack([truth, mode, replicates]))
        lines.append(json.dumps({"index": index, "config": config,
                                 "truth": dict(zip(names, natural[0].tolist())),
                                 "envelope": {
                                     "envelope_mode": natural[1].tolist(),
                                     "information_unit": np.linalg.inv(sigma).tolist(),
                                     "spread_unit": np.zeros((2, 2)).tolist(),
                                     "inflation": 1.0,
                                     "covariance_unit": (recorded_scale * sigma).tolist(),
                                     "bootstrap": {"estimates": natural[2:].tolist()}}}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_right_covariance_gives_uniform_ranks_and_a_wide_one_humps_them(tmp_path):
    script = _script()
    right = script.main([str(_rows(tmp_path / "right.jsonl", 1.0))])
    wide = script.main([str(_rows(tmp_path / "wide.jsonl", 16.0))])
    assert right["with_envelope"] == 300
    for name in ("lateral_friction", "restitution"):
        for rule in ("recorded", "sandwich"):  # both are Σ here
            assert right["rules"][rule][name]["p"] > 0.001
            assert abs(right["rules"][rule][name]["coverage90"] - 0.9) < 0.06
        humped = wide["rules"]["recorded"][name]
        assert humped["p"] < 1e-6 and humped["coverage90"] > 0.98
        hist = humped["histogram"]
        assert hist[2] > hist[0] and hist[2] > hist[-1]
        # the sandwich rule rebuilds Σ from H and J, whatever the row says was sampled
        assert wide["rules"]["sandwich"][name]["p"] > 0.001


def test_truncated_draws_stay_in_the_box_even_for_a_gaussian_far_wider_than_it():
    script = _script()
    rng = np.random.default_rng(1)
    narrow = script.truncated_gaussian(np.array([0.5, 0.5]), np.eye(2) * 1e-4, 500, rng)
    assert np.allclose(narrow.mean(axis=0), 0.5, atol=0.003)
    flat = script.truncated_gaussian(np.array([0.4, 0.4]), np.eye(2) * 1e12, 500, rng)
    assert flat.shape == (500, 2) and flat.min() >= 0 and flat.max() <= 1
    assert abs(flat.mean() - 0.5) < 0.03  # uniform over the box
