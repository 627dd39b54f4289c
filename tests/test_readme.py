"""The README cannot drift: every ``bash`` block of README.md runs, in order, and exits 0.

How they run (the substitutions a reader does not see):

* in a fresh temporary folder holding links to the checkout's ``data/``, ``assets/`` and
  ``train/`` (the README's commands are written from the repository root);
* ``residualsim`` is this checkout's ``python -m residualsim``;
* ``RESIDUALSIM_TINY=1`` caps every budget (samples, burn-in, evaluations, particles,
  recordings: ``residualsim.cli.TINY_CAPS``), so the commands are smoke runs;
* ``$RESIDUALSIM_DATA`` is a temporary folder whose ``contactnets-cube/tosses`` holds the 8
  bundled real tosses plus 12 synthetic cube tosses with known truth (ids ``synthetic-N``),
  so the README's validation and test splits are not empty; a block's own ``export
  RESIDUALSIM_DATA=...`` line is dropped.

A block right after ``<!-- readme-test: not run (why) -->`` is skipped: the install line
(.ci/run runs it) and the development commands (the suite itself).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from residualsim.data.bundled import REAL_SAMPLES

ROOT = Path(__file__).resolve().parents[1]
NOT_RUN = "<!-- readme-test: not run"


def readme_blocks(text: str) -> tuple[list[str], list[str]]:
    """(blocks to run, blocks marked not run) of the README's ```bash blocks."""
    run, skipped = [], []
    for match in re.finditer(r"^```bash\n(.*?)^```", text, flags=re.S | re.M):
        before = text[:match.start()].rstrip().splitlines()
        (skipped if before and before[-1].startswith(NOT_RUN) else run).append(match.group(1))
    return run, skipped


def _environment(tmp: Path) -> dict[str, str]:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "residualsim"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m residualsim "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESIDUALSIM_")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(ROOT),
               RESIDUALSIM_TINY="1", RESIDUALSIM_DATA=str(tmp / "shared"))
    return env


def _data(tmp: Path, env: dict[str, str]) -> None:
    tosses = tmp / "shared" / "contactnets-cube" / "tosses"
    tosses.mkdir(parents=True)
    for toss in (REAL_SAMPLES / "tosses").iterdir():
        shutil.copy(toss, tosses / toss.name)
    subprocess.run(["residualsim", "data", "synthesize", "--count", "12", "--out",
                    str(tmp / "synthetic"), "--params", "lateral_friction=0.3,restitution=0.4"],
                   env=env, check=True, capture_output=True, timeout=300)
    for toss in (tmp / "synthetic" / "tosses").iterdir():
        shutil.copy(toss, tosses / toss.name)


def test_the_readme_marks_what_it_does_not_run():
    run, skipped = readme_blocks((ROOT / "README.md").read_text())
    assert len(skipped) == 2 and "pip install" in skipped[0] and "pytest" in skipped[1]
    assert len(run) >= 6 and all("residualsim " in block for block in run)


@pytest.mark.slow
def test_every_readme_command_runs(tmp_path):
    env = _environment(tmp_path)
    _data(tmp_path, env)
    work = tmp_path / "work"
    work.mkdir()
    for name in ("data", "assets", "train"):
        (work / name).symlink_to(ROOT / name)
    run, _ = readme_blocks((ROOT / "README.md").read_text())
    for block in run:
        script = "\n".join(line for line in block.splitlines()
                           if not line.startswith("export RESIDUALSIM_DATA="))
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=work, env=env,
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f"README block failed:\n{block}\n{result.stderr[-3000:]}"


def test_every_readme_mh_calibration_says_how_long_it_takes():
    """Issue 51: the own-object ``calibrate`` line ran the default 4000-step MH (about half an
    hour on one worker) with no duration given. An MH calibration (no ``--method``) is
    followed by a comment line naming its duration."""
    run, _ = readme_blocks((ROOT / "README.md").read_text())
    commands = 0
    for block in run:
        lines = block.splitlines()
        for i, line in enumerate(lines):
            if not line.startswith("residualsim calibrate"):
                continue
            end = i
            while lines[end].endswith("\\"):
                end += 1
            command = " ".join(lines[i:end + 1])
            if "--method" in command:
                continue
            commands += 1
            note = lines[end + 1] if end + 1 < len(lines) else ""
            assert note.startswith("#") and re.search(r"~\d+ (min|h)\b", note), command
    assert commands >= 2
