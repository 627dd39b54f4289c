"""The per-phase split of the cube's errors (train/rotation_phases.py) on the bundled tosses."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from residualsim.data import load_trajectories

ROOT = Path(__file__).resolve().parents[1]




def _tilted(quat_wxyz: np.ndarray, angle_rad: float) -> np.ndarray:
    """Each orientation turned by angle_rad about the world z axis (w-x-y-z)."""
    half = angle_rad / 2
    w, x, y, z = np.moveaxis(quat_wxyz, -1, 0)
    c, s = np.cos(half), np.sin(half)
    return np.stack([c * w - s * z, c * x - s * y, c * y + s * x, c * z + s * w], axis=-1)


def test_a_constant_offset_splits_by_phase_length_and_the_shares_add_up(train_script):
    trajectories = load_trajectories(ROOT / "data" / "samples" / "cube-synthetic")
    offset_m, angle = 0.01, np.radians(5.0)
    predictions = {
        k: SimpleNamespace(position=(t.positions_m + [offset_m, 0, 0])[None],
                           quaternion=_tilted(t.quat_wxyz, angle)[None])
        for k, t in trajectories.items()}
    table = train_script("rotation_phases").phase_table(predictions, trajectories,
                                                        impact_samples=10)
    width = 2 * 0.0524
    assert table["position_error_pct_width"] == pytest.approx(100 * offset_m / width)
    assert table["rotation_error_deg"] == pytest.approx(5.0, abs=1e-6)
    for name, unit in (("position", "pct_width"), ("rotation", "deg")):
        shares = table[f"{name}_share_{unit}"]
        assert sum(shares.values()) == pytest.approx(table[f"{name}_error_{unit}"], abs=1e-2)
        assert list(table[f"{name}_at_{unit}"].values()) == pytest.approx(
            [table[f"{name}_error_{unit}"]] * 4, abs=1e-2)
    # a constant error's shares are the phases' shares of the samples: flight is the part
    # before the first contact, so the fractions follow the recordings' own timing
    assert all(v >= 0 for v in table["position_share_pct_width"].values())
    ratio = np.array(list(table["position_share_pct_width"].values())) / (100 * offset_m / width)
    assert ratio == pytest.approx(np.array(list(table["rotation_share_deg"].values())) / 5.0,
                                  abs=1e-3)


def test_the_error_grows_in_the_phase_where_the_prediction_departs(train_script):
    trajectories = load_trajectories(ROOT / "data" / "samples" / "cube-synthetic")
    first = train_script("rotation_phases").first_contact_index
    predictions = {}
    for k, t in trajectories.items():
        start = first(t, 0.0524) or 0
        position = t.positions_m.copy()
        position[start:, 2] += 0.02  # wrong only from the first contact on
        predictions[k] = SimpleNamespace(position=position[None], quaternion=t.quat_wxyz[None])
    table = train_script("rotation_phases").phase_table(predictions, trajectories,
                                                        impact_samples=10)
    assert table["position_share_pct_width"]["flight"] == 0
    assert table["position_at_pct_width"]["first contact"] == pytest.approx(100 * 0.02 / 0.1048,
                                                                            abs=0.01)
    assert table["rotation_error_deg"] == pytest.approx(0, abs=1e-6)
