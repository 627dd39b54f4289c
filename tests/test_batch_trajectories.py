"""Batched whole-trajectory rollouts (residualsim.sim.batch.batched_rollouts) against the
lone path, on the shipped cube models and the bundled ContactNets tosses.

The claim under test: a recording's stochastic samples rolled out as copies of the cube in
one PyBullet world, every contact event corrected as it happens by the lone path's own
corrector, are the lone rollouts (``residual_rollout`` with ``default_rng([seed, k, s])``)
bit for bit: tolerance 0 on states, positions, quaternions, event, clamp and engine-gain
counts, penetration, features, impulses and engine steps, for any batch size and any
number of workers. So ``predict --batch-size`` changes no prediction (and no prediction
hash).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from residualsim.errors import ParameterError
from residualsim.residual.model import ResidualModel
from residualsim.sim import batch
from residualsim.sim.engine import Engine
from residualsim.sim.recordings import load_recordings
from residualsim.sim.rollout import (ContactGuard, RolloutRequest, item_rollouts,
                                     predict_trajectories, recording_settings,
                                     trajectory_items)

ROOT = Path(__file__).resolve().parents[1]
TOSSES = ROOT / "data" / "samples" / "contactnets-cube"
MODELS = ("cube-contactnets-5substep", "cube-contactnets")
FIELDS = ("positions_m", "quat_wxyz", "states", "n_events", "n_energy_clamped",
          "n_normal_clamped", "n_engine_energy_gain", "max_penetration_m", "features",
          "impulses", "frames", "touching_counts", "engine_steps", "engine_start")


@pytest.fixture(scope="module", autouse=True)
def _one_blas_thread():
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        yield


@pytest.fixture(scope="module", params=MODELS)
def model(request) -> ResidualModel:
    return ResidualModel.load(ROOT / "data" / "pretrained" / request.param)


def _tosses(model, count: int) -> dict:
    recordings = load_recordings(TOSSES, model.scene, 1.0 / model.dt_s, model.params)
    return dict(list(recordings.items())[:count])


def _assert_same(lone, batched) -> None:
    assert len(lone) == len(batched)
    for s, (a, b) in enumerate(zip(lone, batched)):
        for field in FIELDS:
            x, y = getattr(a, field), getattr(b, field)
            if x is None or y is None:
                assert x is None and y is None, (s, field)
            else:
                np.testing.assert_array_equal(x, y, err_msg=f"sample {s}: {field}")


def test_batched_samples_are_the_lone_rollouts(model):
    """Three tosses x 7 samples (state noise and residual draws from each sample's own
    stream) at batch sizes 3 (copies reused: a queue of particles) and automatic."""
    tosses = _tosses(model, 3)
    items = trajectory_items(model.scene, tosses)
    settings = recording_settings(model.scene, tosses, model.substeps)
    request = RolloutRequest(params=model.params, policies=(model.sampling_policy(),),
                             samples=7, seed=5, guard=model.guard,
                             state_noise=model.state_noise, batch_size=1)
    events = clamps = flights = 0
    with Engine(model.scene, model.params, settings) as engine:
        for item in items:
            lone = item_rollouts(engine, item, request)[0]
            for size in (3, None):
                batched = item_rollouts(engine, item, dataclasses.replace(
                    request, batch_size=size))[0]
                _assert_same(lone, batched)
            n_steps = len(item[4]) - 1
            events += sum(r.n_events for r in lone)
            clamps += sum(r.n_energy_clamped + r.n_normal_clamped for r in lone)
            flights += sum(r.engine_steps < n_steps for r in lone)
    assert events >= 3 * 7 * 2  # several events per rollout: bounces, tumbles, slides
    assert clamps > 0 and flights == 3 * 7  # clamped residuals; every toss flew in part


def test_the_engine_alone_and_the_mean_batch_alike(model):
    """No residual (policy None) and the policy's mean (no streams) in one batch: the
    same as alone, bit for bit."""
    tosses = _tosses(model, 2)
    settings = recording_settings(model.scene, tosses, model.substeps)
    item = trajectory_items(model.scene, tosses)[1]
    starts = np.array([item[3]] * 3)
    starts[1:, 7] += [0.05, -0.05]  # m/s along x
    n_steps = len(item[4]) - 1
    from residualsim.sim.rollout import residual_rollout

    with Engine(model.scene, model.params, settings) as engine:
        for policy in (None, model.sampling_policy()):
            lone = [residual_rollout(engine, s, n_steps, policy, None, model.guard)
                    for s in starts]
            _assert_same(lone, batch.batched_rollouts(engine, starts, n_steps, policy, None,
                                                      model.guard, 2))


def test_predictions_do_not_depend_on_batch_size_or_workers():
    model = ResidualModel.load(ROOT / "data" / "pretrained" / MODELS[0])
    tosses = _tosses(model, 4)
    runs = {(workers, size): predict_trajectories(model, tosses, samples=6, seed=2,
                                                  n_workers=workers, batch_size=size)
            for workers, size in ((1, 1), (2, None), (1, 4))}
    (first, summary), *others = runs.values()
    assert summary["events"] > 0 and first.n_samples == 6
    arrays = first._arrays()  # what a prediction file holds (and its hash covers)
    for predictions, other_summary in others:
        assert other_summary == summary
        other = predictions._arrays()
        assert sorted(other) == sorted(arrays)
        for key, values in arrays.items():
            if key != "meta":
                np.testing.assert_array_equal(other[key], values, err_msg=key)


def test_unsupported_guards_take_the_lone_path():
    model = ResidualModel.load(ROOT / "data" / "pretrained" / MODELS[0])
    hidden = dataclasses.replace(model, guard=ContactGuard(hidden_impact_mps=0.5))
    tosses = _tosses(model, 2)
    a, b = (predict_trajectories(hidden, tosses, samples=3, seed=1, batch_size=size)[0]
            for size in (None, 1))
    for key, values in a._arrays().items():
        if key != "meta":
            np.testing.assert_array_equal(b._arrays()[key], values, err_msg=key)
    with Engine(model.scene, model.params, model.settings()) as engine, \
            pytest.raises(ValueError, match="hidden-impact"):
        batch.batched_rollouts(engine, np.zeros((2, 13)), 5, None, None, hidden.guard)


@pytest.mark.parametrize("size", [0, -2, 1.5, True, "auto"])
def test_batch_size_must_be_none_or_a_positive_integer(size):
    model = ResidualModel.load(ROOT / "data" / "pretrained" / MODELS[0])
    with pytest.raises(ParameterError, match="batch_size"):
        predict_trajectories(model, _tosses(model, 1), samples=2, batch_size=size)


def test_the_command_line_batch_size():
    import argparse

    from residualsim.cli.argtypes import batch_size

    assert batch_size("auto") is None and batch_size("16") == 16
    for text in ("0", "1,2", "many"):
        with pytest.raises(argparse.ArgumentTypeError):
            batch_size(text)
