"""A file the reader skips is named in a warning (issue 37: no silence)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from residualsim.data import load_trajectories

ROOT = Path(__file__).resolve().parents[1]
SYNTHETIC = ROOT / "data" / "samples" / "cube-synthetic"


def test_foreign_file_beside_pt_tosses_is_named(tmp_path, caplog):
    copy = tmp_path / "set"
    shutil.copytree(SYNTHETIC, copy)
    (copy / "tosses" / "notes.npz").write_bytes(b"not a toss")
    (copy / "tosses" / ".hidden").write_text("ignored quietly")
    with caplog.at_level(logging.WARNING, logger="residualsim.data"):
        tosses = load_trajectories(copy)
    assert len(tosses) == 8
    warned = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(warned) == 1 and "notes.npz" in warned[0] and ".hidden" not in warned[0]
    assert "not .pt recordings" in warned[0]


def test_clean_folder_loads_without_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="residualsim.data"):
        load_trajectories(SYNTHETIC)
    assert not [r for r in caplog.records if "skipped" in r.getMessage()]


def test_foreign_file_beside_csv_recordings_is_named(tmp_path, caplog):
    from residualsim.data import save_csv_trajectories

    save_csv_trajectories(tmp_path, load_trajectories(SYNTHETIC), with_velocities=True)
    (tmp_path / "notes.txt").write_text("calibration notes")
    with caplog.at_level(logging.WARNING, logger="residualsim.data"):
        assert len(load_trajectories(tmp_path)) == 8
    warned = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(warned) == 1 and "notes.txt" in warned[0]
