"""Nevergrad ask/tell in batches with exact-resume checkpoints (residualsim.sysid.optimize)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from residualsim.errors import DataError, ParameterError
from residualsim.sysid.optimize import FAILED_LOSS, minimize

pytestmark = pytest.mark.filterwarnings("ignore:orphanated injected solution")  # cma

TARGET = np.array([0.3, -0.2, 0.5])
INIT = np.zeros(3)
KW = dict(budget=24, batch_size=4, sigma=0.3, seed=1)


def quadratic(z: np.ndarray) -> np.ndarray:
    return np.sum((np.asarray(z) - TARGET) ** 2, axis=1)


class Loss:
    """Counts its calls and candidates; raises after ``fail_after`` calls; NaN for the
    candidates of the calls listed in ``nan_calls`` (first candidate only)."""

    def __init__(self, fail_after: int | None = None, nan_calls: tuple = ()) -> None:
        self.calls, self.seen, self.fail_after, self.nan_calls = 0, [], fail_after, nan_calls

    def __call__(self, z: np.ndarray) -> np.ndarray:
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise _Interrupted(f"interrupted after {self.calls} batches")
        values = quadratic(z)
        if self.calls in self.nan_calls:
            values[0] = np.nan
        self.calls += 1
        self.seen.append(np.array(z))
        return values


class _Interrupted(Exception):
    pass


@pytest.fixture(scope="module")
def reference():
    """An uninterrupted run without a checkpoint."""
    return minimize(Loss(), INIT, **KW)


def test_quadratic_improves_on_the_start():
    result = minimize(quadratic, INIT, budget=40, batch_size=4, sigma=0.3, seed=0)
    start = float(quadratic(INIT[None])[0])
    assert result.evaluations == 40 and result.candidates.shape == (40, 3)
    assert result.best_loss < 0.25 * start
    assert result.best_loss == result.losses.min()
    np.testing.assert_array_equal(result.best, result.candidates[np.argmin(result.losses)])
    np.testing.assert_allclose(quadratic(result.candidates), result.losses)
    assert result.failed == 0 and not result.stopped_early


def test_bounds_are_respected():
    result = minimize(quadratic, np.full(3, 0.05), budget=16, batch_size=4, sigma=0.5,
                      lower=0.0, upper=0.1, seed=0)
    assert result.candidates.min() >= 0.0 and result.candidates.max() <= 0.1


def test_same_seed_same_history_other_seed_differs(reference):
    again = minimize(Loss(), INIT, **KW)
    np.testing.assert_array_equal(again.candidates, reference.candidates)
    np.testing.assert_array_equal(again.losses, reference.losses)
    other = minimize(Loss(), INIT, **{**KW, "seed": 2})
    assert not np.array_equal(other.candidates, reference.candidates)


def test_loss_is_called_once_per_batch_with_the_batch():
    loss = Loss()
    result = minimize(loss, INIT, budget=10, batch_size=4, sigma=0.3, seed=0)
    assert loss.calls == 3 and [len(z) for z in loss.seen] == [4, 4, 2]
    np.testing.assert_array_equal(np.concatenate(loss.seen), result.candidates)
    assert result.evaluations == 10


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"budget": 0}, "budget"), ({"batch_size": 0}, "batch_size"), ({"budget": 2.5}, "budget"),
    ({"optimizer": "NoSuchOptimizer"}, "unknown nevergrad optimizer")])
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ParameterError, match=message):
        minimize(quadratic, INIT, **{**KW, **kwargs})


def test_checkpoint_holds_the_history(tmp_path, reference):
    path = tmp_path / "ck.npz"
    result = minimize(Loss(), INIT, **KW, checkpoint=path, fingerprint={"problem": "q"})
    np.testing.assert_array_equal(result.candidates, reference.candidates)
    with np.load(path) as archive:
        np.testing.assert_array_equal(archive["candidates"], reference.candidates)
        np.testing.assert_array_equal(archive["losses"], reference.losses)
        header = json.loads(str(archive["header"]))
    assert header["fingerprint"]["problem"] == "q" and header["fingerprint"]["seed"] == 1


def _interrupted_run(path: Path, fail_after: int, **extra) -> Loss:
    loss = Loss(fail_after=fail_after, **extra)
    with pytest.raises(_Interrupted):
        minimize(loss, INIT, **KW, checkpoint=path, fingerprint={"problem": "q"})
    return loss


def test_resume_after_an_interruption_gives_the_uninterrupted_history(tmp_path, reference):
    path = tmp_path / "ck.npz"
    _interrupted_run(path, fail_after=3)
    with np.load(path) as archive:
        assert len(archive["losses"]) == 12  # three batches were saved
    loss = Loss()
    resumed = minimize(loss, INIT, **KW, checkpoint=path, resume=True,
                       fingerprint={"problem": "q"})
    np.testing.assert_array_equal(resumed.candidates, reference.candidates)
    np.testing.assert_array_equal(resumed.losses, reference.losses)
    # the three saved batches were replayed, not evaluated again
    assert loss.calls == 3
    np.testing.assert_array_equal(np.concatenate(loss.seen), reference.candidates[12:])
    with np.load(path) as archive:
        np.testing.assert_array_equal(archive["candidates"], reference.candidates)


def test_resume_of_a_finished_run_evaluates_nothing(tmp_path, reference):
    path = tmp_path / "ck.npz"
    minimize(Loss(), INIT, **KW, checkpoint=path)
    loss = Loss()
    again = minimize(loss, INIT, **KW, checkpoint=path, resume=True)
    assert loss.calls == 0
    np.testing.assert_array_equal(again.losses, reference.losses)


def test_resume_without_a_checkpoint_starts_fresh(tmp_path, reference):
    result = minimize(Loss(), INIT, **KW, checkpoint=tmp_path / "new.npz", resume=True)
    np.testing.assert_array_equal(result.candidates, reference.candidates)


def test_existing_checkpoint_without_resume_is_refused(tmp_path):
    path = tmp_path / "ck.npz"
    _interrupted_run(path, fail_after=2)
    before = path.read_bytes()
    loss = Loss()
    with pytest.raises(DataError, match="checkpoint") as info:
        minimize(loss, INIT, **KW, checkpoint=path, fingerprint={"problem": "q"})
    assert str(path) in str(info.value)
    assert loss.calls == 0 and path.read_bytes() == before


@pytest.mark.parametrize(("change", "differs"), [
    ({"fingerprint": {"problem": "other"}}, "problem"),
    ({"seed": 5}, "seed"), ({"batch_size": 3}, "batch_size"), ({"sigma": 0.2}, "sigma")])
def test_checkpoint_of_another_problem_is_refused(tmp_path, change, differs):
    path = tmp_path / "ck.npz"
    _interrupted_run(path, fail_after=2)
    loss = Loss()
    settings = {**KW, "fingerprint": {"problem": "q"}, **change}
    with pytest.raises(DataError, match="another run") as info:
        minimize(loss, INIT, **settings, checkpoint=path, resume=True)
    assert differs in str(info.value) and str(path) in str(info.value)
    assert loss.calls == 0


def test_damaged_checkpoint_is_refused(tmp_path):
    path = tmp_path / "ck.npz"
    path.write_bytes(b"not an archive")
    with pytest.raises(DataError, match="ck.npz"):
        minimize(Loss(), INIT, **KW, checkpoint=path, resume=True)


def test_a_history_that_does_not_replay_is_refused(tmp_path):
    path = tmp_path / "ck.npz"
    _interrupted_run(path, fail_after=2)
    with np.load(path) as archive:
        arrays = {k: archive[k] for k in archive.files}
    arrays["candidates"] = arrays["candidates"] + 0.01
    np.savez(path, **arrays)
    with pytest.raises(DataError, match="does not replay"):
        minimize(Loss(), INIT, **KW, checkpoint=path, resume=True, fingerprint={"problem": "q"})


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_failed_evaluations_are_counted_and_told_a_large_loss(bad):
    def loss(z):
        values = quadratic(z)
        values[::3] = bad
        return values

    result = minimize(loss, INIT, budget=12, batch_size=4, sigma=0.3, seed=0)
    assert result.failed == 6
    assert np.sum(result.losses == FAILED_LOSS) == 6
    assert np.isfinite(result.losses).all()
    assert result.best_loss < FAILED_LOSS


def test_failed_count_survives_a_resume(tmp_path):
    full = minimize(Loss(nan_calls=(0, 4)), INIT, **KW)
    assert full.failed == 2
    path = tmp_path / "ck.npz"
    _interrupted_run(path, fail_after=3, nan_calls=(0, 4))
    resumed = minimize(Loss(nan_calls=(1,)), INIT, **KW, checkpoint=path, resume=True,
                       fingerprint={"problem": "q"})
    np.testing.assert_array_equal(resumed.losses, full.losses)  # the same history...
    assert resumed.failed == full.failed  # ...and the same count


def _stop_after(n_batches: int):
    calls = []

    def after_batch(result) -> bool:
        calls.append(result.evaluations)
        result.state["seen"] = result.state.get("seen", 0) + 1
        result.state["best"] = float(result.best_loss)
        return len(calls) >= n_batches

    return after_batch, calls


def test_after_batch_stops_early_and_its_state_is_restored(tmp_path):
    path = tmp_path / "ck.npz"
    after_batch, calls = _stop_after(3)
    loss = Loss()
    result = minimize(loss, INIT, **KW, checkpoint=path, after_batch=after_batch)
    assert result.stopped_early and result.evaluations == 12
    assert calls == [4, 8, 12] and loss.calls == 3
    assert result.state["seen"] == 3 and result.state["stopped_early"] is True
    with np.load(path) as archive:
        header = json.loads(str(archive["header"]))
        assert len(archive["losses"]) == 12
    assert header["state"]["seen"] == 3 and header["state"]["best"] == result.best_loss

    # Resuming replays without calling the loss or the callback, and stops at the same point.
    loss_again, (after_again, calls_again) = Loss(), _stop_after(1)
    resumed = minimize(loss_again, INIT, **KW, checkpoint=path, resume=True,
                       after_batch=after_again)
    assert loss_again.calls == 0 and calls_again == []
    assert resumed.stopped_early and resumed.evaluations == 12
    assert resumed.state == result.state
    np.testing.assert_array_equal(resumed.candidates, result.candidates)


def test_state_is_restored_when_resuming_an_interrupted_run(tmp_path, reference):
    path = tmp_path / "ck.npz"
    after_batch, _ = _stop_after(100)
    loss = Loss(fail_after=2)
    with pytest.raises(_Interrupted):
        minimize(loss, INIT, **KW, checkpoint=path, after_batch=after_batch)
    after_again, calls_again = _stop_after(100)
    resumed = minimize(Loss(), INIT, **KW, checkpoint=path, resume=True,
                       after_batch=after_again)
    # the callback ran for the 4 new batches only and continued the restored count
    assert calls_again == [12, 16, 20, 24]
    assert resumed.state["seen"] == 6 and not resumed.stopped_early
    np.testing.assert_array_equal(resumed.losses, reference.losses)
