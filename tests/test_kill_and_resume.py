"""Hard kills (SIGKILL of the whole process group) and resumes of the real CLI.

``tests/test_train_cli.py`` interrupts training in-process (KeyboardInterrupt from the loss)
and ``tests/test_calibration_cli.py`` resumes a *finished* MH run; neither kills a process.
Here ``python -m residualsim`` runs in a subprocess in its own session; once its checkpoint
holds some history but the run is not finished, the process group (the command and its
spawned workers) gets SIGKILL: no ``finally``, no atexit, no flush. Resuming must still end
exactly where an uninterrupted run ends.

Timing on the 2-core test machine (bundled synthetic tosses, 3-4 tosses, 1 substep): a
``train`` run spends ~10 s starting (imports, spawned workers, the engine's own validation)
and then ~0.2 s per batch of 8 evaluations; it is killed after its second checkpoint (16 of
64 evaluations), ~1.2 s before its end, against a polling period of 10 ms. An MH step costs
~15 ms; the sampler is killed at its first checkpoint after burn-in (step 52 of 150), ~1.4 s
before its end. A run that ends before it could be killed fails with a message saying so.

Also: a corrupt or foreign ``checkpoint.npz`` is refused by ``train --resume`` with exit 2
and is left byte-identical. (``tests/test_train_cli.py`` covers a checkpoint with other
settings, ``--components``, without checking the file; ``tests/test_optimize.py`` covers
garbage bytes only at the library level.) So are an empty and a truncated checkpoint.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from residualsim.sysid.posterior import Posterior

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "data" / "samples" / "cube-synthetic"
TIMEOUT_S = 300.0
POLL_S = 0.01

BATCH = 8
TRAIN_BUDGET = 64
TRAIN_ARGS = ["train", "--data", str(BUNDLED), "--budget", str(TRAIN_BUDGET),
              "--batch-size", str(BATCH), "--validate-every", "8", "--substeps", "1",
              "--seed", "0", "--max-tosses", "3", "--checkpoint-every", str(BATCH), "--quiet"]

MH_SAMPLES, MH_BURN_IN, MH_EVERY = 100, 50, 2
MH_ARGS = ["calibrate", "--method", "mh", "--data", str(BUNDLED), "--split", "all",
           "--max-trajectories", "4", "--samples", str(MH_SAMPLES), "--burn-in", str(MH_BURN_IN),
           "--chains", "2", "--checkpoint-every", str(MH_EVERY), "--seed", "0", "--no-plots",
           "--quiet", "--workers", "2"]


# --- helpers ------------------------------------------------------------------------------------
def _command(args: list, out: Path) -> list[str]:
    return [sys.executable, "-m", "residualsim", *map(str, args), "--out", str(out)]


def _env() -> dict[str, str]:
    """This checkout first on the path of the subprocess."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else "")}


def _run(args: list, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(_command(args, out), env=_env(), cwd=ROOT, capture_output=True,
                          text=True, timeout=TIMEOUT_S)


def _last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def _run_ok(args: list, out: Path) -> dict:
    done = _run(args, out)
    assert done.returncode == 0, done.stderr
    return _last_json(done.stdout)


def _train_history(path: Path) -> int:
    """Evaluations in a training checkpoint (and a check that it is a complete one)."""
    with np.load(path, allow_pickle=False) as archive:
        header = json.loads(str(archive["header"]))
        candidates, losses = archive["candidates"], archive["losses"]
    assert "fingerprint" in header and "state" in header
    assert candidates.ndim == 2 and len(candidates) == len(losses)
    return len(losses)


def _mh_steps(path: Path) -> int:
    """Steps in a Metropolis-Hastings checkpoint (and a check that it is a complete one)."""
    with np.load(path, allow_pickle=False) as archive:
        header = json.loads(str(archive["header"]))
        history = archive["history_z"]
        accepted = archive["accepted"]
    assert header["format"] == "residualsim.mh-checkpoint/1"
    assert history.shape[:2] == accepted.shape
    return history.shape[1]


def _live_members(pgid: int) -> list[int]:
    """Pids of the group's processes that are not zombies (Linux /proc; [] elsewhere).

    Zombies are left out: orphaned workers are reaped by PID 1, which in some containers
    never reaps, and a zombie runs nothing.
    """
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):  # the process ended meanwhile
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # state, ppid, pgrp, ...
            members.append(int(stat.parent.name))
    return members


def _group_gone(pgid: int, timeout_s: float = 10.0) -> bool:
    """True once no live process of the group is left."""
    deadline = time.monotonic() + timeout_s
    while _live_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _kill_mid_run(args: list, out: Path, progress, total: int, at_least: int) -> int:
    """Start the command in its own session, SIGKILL its process group as soon as
    ``out/checkpoint.npz`` holds ``at_least <= progress(path) < total``; return the progress
    in the checkpoint left behind.

    The checkpoint is written to a temporary file and renamed over the destination, so a
    file that exists is complete: reading it is not retried, a read error fails the test.
    """
    checkpoint = out / "checkpoint.npz"
    process = subprocess.Popen(_command(args, out), env=_env(), cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True)
    pgid = os.getpgid(process.pid)
    seen = 0
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            if process.poll() is not None:
                stdout, stderr = process.communicate()
                pytest.fail(f"{args[0]} ended (exit {process.returncode}) before it could be "
                            f"killed; last checkpoint progress {seen} of {total}: raise the "
                            f"budget so the run lasts longer.\nstderr:\n{stderr.decode()}")
            if checkpoint.exists():
                seen = progress(checkpoint)
                if seen >= total:
                    pytest.fail(f"{checkpoint} is already complete ({seen} of {total}) before "
                                "the kill: raise the budget so the run lasts longer")
                if seen >= at_least:
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"no checkpoint after {TIMEOUT_S} s: the run hangs")
            time.sleep(POLL_S)
        os.killpg(pgid, signal.SIGKILL)
        process.communicate(timeout=TIMEOUT_S)
    finally:
        if process.returncode is None:  # a failure above: do not leave the run behind
            os.killpg(pgid, signal.SIGKILL)
            process.communicate(timeout=TIMEOUT_S)
    assert process.returncode == -signal.SIGKILL
    assert _group_gone(pgid), f"processes of group {pgid} survived SIGKILL"
    return progress(checkpoint)


# --- training ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> tuple[Path, dict]:
    """(output directory, final JSON) of the uninterrupted training run, 2 workers."""
    out = tmp_path_factory.mktemp("uninterrupted") / "model"
    return out, _run_ok([*TRAIN_ARGS, "--workers", "2"], out)


def test_sigkilled_training_resumes_to_the_uninterrupted_result(uninterrupted, tmp_path):
    _, full = uninterrupted
    assert full["evaluations"] == TRAIN_BUDGET and not full["stopped_early"]
    assert full["worker_restarts"] == 0
    out = tmp_path / "killed"
    args = [*TRAIN_ARGS, "--workers", "2"]

    # after the second checkpoint (a validation check and its state are in it), with
    # 6 batches (~1.2 s) to go
    saved = _kill_mid_run(args, out, _train_history, TRAIN_BUDGET, at_least=2 * BATCH)
    # a valid checkpoint of whole checkpoint intervals: at most one interval is lost
    assert 2 * BATCH <= saved < TRAIN_BUDGET
    assert saved % BATCH == 0, saved
    assert not (out / "model.json").exists()  # the model is written at the end only

    resumed = _run_ok([*args, "--resume"], out)
    assert resumed["params_sha256"] == full["params_sha256"]
    assert resumed["evaluations"] == full["evaluations"] == TRAIN_BUDGET
    assert resumed["best_loss"] == full["best_loss"]
    assert resumed["validation_rmse_m"] == full["validation_rmse_m"]
    assert resumed["chosen_evaluation"] == full["chosen_evaluation"]
    assert resumed["worker_restarts"] == 0
    # the checkpointed batches were replayed, not evaluated again
    assert resumed["rollouts"] < full["rollouts"]
    assert _train_history(out / "checkpoint.npz") == TRAIN_BUDGET
    model = json.loads((out / "model.json").read_text())
    assert model["info"]["figures"]["params_sha256"] == full["params_sha256"]


# --- calibration (Metropolis-Hastings) ------------------------------------------------------------
def test_sigkilled_mh_calibration_resumes_to_the_same_draws(tmp_path):
    total = MH_SAMPLES + MH_BURN_IN
    full = _run_ok(MH_ARGS, tmp_path / "full")
    out = tmp_path / "killed"

    # in the sampling phase (adapted step size and kept draws in the checkpoint), with
    # ~98 steps (~1.4 s) to go
    saved = _kill_mid_run(MH_ARGS, out, _mh_steps, total, at_least=MH_BURN_IN + 1)
    assert MH_BURN_IN < saved < total and saved % MH_EVERY == 0, saved
    assert not (out / "posterior.npz").exists() and not (out / "summary.json").exists()

    resumed = _run_ok([*MH_ARGS, "--resume"], out)
    a = Posterior.load(tmp_path / "full" / "posterior.npz")
    b = Posterior.load(out / "posterior.npz")
    assert a.samples.shape == (2, MH_SAMPLES, 2)
    np.testing.assert_array_equal(b.samples, a.samples)
    np.testing.assert_array_equal(b.warmup, a.warmup)
    np.testing.assert_array_equal(b.log_likelihood, a.log_likelihood)
    np.testing.assert_array_equal(b.log_prior, a.log_prior)
    np.testing.assert_array_equal(b.acceptance, a.acceptance)
    assert b.meta["evaluations"] == a.meta["evaluations"]
    assert b.meta["final_scale"] == a.meta["final_scale"]
    for key in ("median", "q05", "q95", "acceptance", "evaluations", "params"):
        assert resumed[key] == full[key], key
    assert _mh_steps(out / "checkpoint.npz") == total


# --- refused checkpoints ------------------------------------------------------------------------
# These run ``residualsim.cli.main`` in this process (like tests/test_train_cli.py): a refusal
# comes ~0.1 s into the run once the modules are imported, against ~6 s for a subprocess.
def _corrupt(source: Path) -> bytes:
    """Seeded random bytes that are neither a zip nor a .npy file."""
    content = np.random.default_rng(7).bytes(4096)
    assert not content.startswith((b"PK", b"\x93NUMPY"))
    return content


REFUSALS = {
    # case: (checkpoint content made from the uninterrupted run's checkpoint, extra arguments,
    #        what the error must say besides the checkpoint's path)
    "corrupt": (_corrupt, [], ["not a readable optimisation checkpoint"]),
    "foreign-seed": (lambda source: source.read_bytes(), ["--seed", "1"],
                     ["checkpoint belongs to another run (config, seed differ)"]),
    "empty": (lambda source: b"", [], ["not a readable optimisation checkpoint"]),
    "truncated": (lambda source: source.read_bytes()[: source.stat().st_size // 2], [],
                  ["not a readable optimisation checkpoint"]),
}
@pytest.mark.parametrize("case", ["corrupt", "foreign-seed", "empty", "truncated"])
def test_damaged_or_foreign_checkpoint_is_refused_and_left_alone(uninterrupted, tmp_path,
                                                                 capsys, case):
    from residualsim.cli import main

    model, _ = uninterrupted
    content, extra, phrases = REFUSALS[case]
    out = tmp_path / "model"
    out.mkdir()
    checkpoint = out / "checkpoint.npz"
    checkpoint.write_bytes(content(model / "checkpoint.npz"))
    before = checkpoint.read_bytes()
    args = [*TRAIN_ARGS, "--workers", "1", "--resume", "--out", str(out)]
    if extra:  # e.g. --seed 1 in place of --seed 0
        index = args.index(extra[0])
        args[index:index + 2] = extra
    try:
        code = main(args)
    finally:
        assert checkpoint.read_bytes() == before  # untouched, whatever the outcome
    stdout, stderr = capsys.readouterr()
    assert code == 2, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("residualsim: error:")]
    assert len(errors) == 1, stderr
    assert str(checkpoint) in errors[0]
    for phrase in phrases:
        assert phrase in errors[0], (phrase, errors[0])
    assert stdout.strip() == ""  # no JSON line: nothing was trained
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.npz"]
