"""The SIAN-like per-step residual baseline (:mod:`residualsim.baselines.sian`) on synthetic tosses."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from residualsim.data.trajectory import Trajectory
from residualsim.sim.engine import Engine
from residualsim.errors import DataError, ParameterError, SceneError
from residualsim.sim.scenes import make_scene
from residualsim.baselines.sian import (N_INPUTS, N_OUTPUTS, SianResidual, apply_tangent,
                              one_step_targets, tangent_difference)
from residualsim.sim.synthesize import sample_toss_states

DT_S = 1.0 / 148.0
SUBSTEPS = 2
MODEL_PARAMS = "lateral_friction=0.2,restitution=0.1"
#: The "real world" of the perturbed-engine test: much more friction than the model.
TRUE_PARAMS = "lateral_friction=0.5,restitution=0.1"


def _settings():
    return dataclasses.replace(make_scene("cube").settings, dt_s=DT_S, substeps=SUBSTEPS)


def _simulate(params: str, states: np.ndarray, n_samples: int, prefix: str
              ) -> dict[str, Trajectory]:
    """Engine rollouts from ``states`` wrapped as trajectories on the recording's clock."""
    out = {}
    with Engine("cube", params, _settings()) as engine:
        for i, state in enumerate(states):
            s = engine.rollout(state, n_samples - 1).states
            out[f"{prefix}{i}"] = Trajectory(
                traj_id=f"{prefix}{i}", times_s=np.arange(n_samples) * DT_S,
                positions_m=s[:, 0:3], quat_wxyz=s[:, 3:7], linear_velocity_mps=s[:, 7:10],
                angular_velocity_world_radps=s[:, 10:13], source="simulated")
    return out


def _sliding_states(n: int, seed: int) -> np.ndarray:
    """A cube dropped flat from a few mm, sliding at 0.8-1.6 m/s in any direction with a
    little spin about z: friction decides where it stops."""
    rng = np.random.default_rng(seed)
    yaw = rng.uniform(-np.pi, np.pi, n)
    speed, heading = rng.uniform(0.8, 1.6, n), rng.uniform(-np.pi, np.pi, n)
    states = np.zeros((n, 13))
    states[:, 2] = 0.0524 + rng.uniform(0.002, 0.01, n)
    states[:, 3], states[:, 6] = np.cos(yaw / 2), np.sin(yaw / 2)
    states[:, 7], states[:, 8] = speed * np.cos(heading), speed * np.sin(heading)
    states[:, 12] = rng.normal(0.0, 1.0, n)
    return states


def _rmse(positions: np.ndarray, traj: Trajectory) -> float:
    return float(np.sqrt(np.mean(np.sum((positions - traj.positions_m) ** 2, axis=1))))


@pytest.fixture(scope="module")
def tumbling() -> dict[str, Trajectory]:
    """Four tosses the model's own engine made: free flight, bounces, tumbling."""
    return _simulate(MODEL_PARAMS, sample_toss_states(4, rng=3), 70, "tumble-")


@pytest.fixture(scope="module")
def sliding() -> dict[str, Trajectory]:
    """16 sliding tosses of the high-friction world: 12 train, 1 validation, 3 test."""
    return _simulate(TRUE_PARAMS, _sliding_states(16, seed=0), 60, "slide-")


@pytest.fixture(scope="module")
def sliding_model(sliding) -> SianResidual:
    ids = list(sliding)
    train = {k: sliding[k] for k in ids[:12]}
    with SianResidual(max_epochs=60) as model:
        yield model.fit(train, params=MODEL_PARAMS, substeps=SUBSTEPS, seed=0)


def test_tangent_difference_matches_scipy_and_inverts_apply():
    rng = np.random.default_rng(0)
    target, predicted = rng.normal(size=(50, 13)), rng.normal(size=(50, 13))
    for states in (target, predicted):
        states[:, 3:7] /= np.linalg.norm(states[:, 3:7], axis=1, keepdims=True)
    predicted[:25, 3:7] *= -1.0  # q and -q are one orientation
    residual = tangent_difference(target, predicted)
    assert residual.shape == (50, N_OUTPUTS)
    # scipy orders quaternions x-y-z-w; ours are w-x-y-z.
    expected = (Rotation.from_quat(target[:, [4, 5, 6, 3]])
                * Rotation.from_quat(predicted[:, [4, 5, 6, 3]]).inv()).as_rotvec()
    np.testing.assert_allclose(residual[:, 3:6], expected, atol=1e-12)
    assert np.all(np.linalg.norm(residual[:, 3:6], axis=1) <= np.pi + 1e-12)
    rebuilt = apply_tangent(predicted, residual)
    same = [0, 1, 2, 7, 8, 9, 10, 11, 12]
    np.testing.assert_allclose(rebuilt[:, same], target[:, same], atol=1e-12)
    sign = np.sign(np.sum(rebuilt[:, 3:7] * target[:, 3:7], axis=1))[:, None]
    np.testing.assert_allclose(rebuilt[:, 3:7], sign * target[:, 3:7], atol=1e-12)
    # single states work too, and a zero correction changes nothing
    np.testing.assert_allclose(apply_tangent(target[0], np.zeros(12)), target[0], atol=1e-15)


def test_one_step_targets_vanish_on_the_engines_own_data(tumbling):
    inputs, targets = one_step_targets("cube", tumbling, MODEL_PARAMS, SUBSTEPS)
    n_pairs = sum(t.n_samples - 1 for t in tumbling.values())
    assert inputs.shape == (n_pairs, N_INPUTS)
    assert targets.shape == (n_pairs, N_OUTPUTS)
    assert np.isfinite(inputs).all()
    # the engine explains itself: warm stepping reproduces a continuing simulation
    assert np.abs(targets).max() < 1e-9
    # ... and the tosses do contain contacts (the engine's velocity changes are not just
    # gravity), so this is not a free-flight-only check
    velocity_change = inputs[:, 16 + 10:16 + 13]
    assert np.abs(velocity_change[:, :2]).max() > 0.1


def test_fit_on_engine_data_rolls_out_like_the_engine(tumbling):
    with SianResidual(max_epochs=3) as model:
        model.fit(tumbling, params=MODEL_PARAMS, substeps=SUBSTEPS, seed=0)
        traj = next(iter(tumbling.values()))
        positions, quats = model.rollout(traj)
    assert positions.shape == (traj.n_samples, 3) and quats.shape == (traj.n_samples, 4)
    np.testing.assert_allclose(np.linalg.norm(quats, axis=1), 1.0, atol=1e-12)
    # targets below the output resolution are never corrected: the engine's own rollout
    np.testing.assert_array_equal(model.predict_residual(np.ones((2, N_INPUTS))), 0.0)
    np.testing.assert_allclose(positions, traj.positions_m, atol=1e-9)
    np.testing.assert_allclose(np.abs(np.sum(quats * traj.quat_wxyz, axis=1)), 1.0, atol=1e-9)


def test_sian_beats_the_unperturbed_engine_on_held_out_tosses(sliding, sliding_model):
    test = {k: sliding[k] for k in list(sliding)[13:]}
    predictions = sliding_model.predict(test)
    assert list(predictions) == list(test)
    with Engine("cube", MODEL_PARAMS, _settings()) as engine:
        engine_rmse = np.mean([_rmse(engine.rollout(t.state_at(0), t.n_samples - 1)
                                     .states[:, 0:3], t) for t in test.values()])
    sian_rmse = np.mean([_rmse(predictions[k][0], t) for k, t in test.items()])
    assert engine_rmse > 0.05  # the low-friction engine slides far too long
    assert sian_rmse < 0.5 * engine_rmse, (sian_rmse, engine_rmse)


def test_same_seed_same_predictions(sliding, sliding_model):
    ids = list(sliding)
    train, test = {k: sliding[k] for k in ids[:12]}, sliding[ids[-1]]
    with SianResidual(max_epochs=60) as again, SianResidual(max_epochs=60) as other:
        again.fit(train, params=MODEL_PARAMS, substeps=SUBSTEPS, seed=0)
        other.fit(train, params=MODEL_PARAMS, substeps=SUBSTEPS, seed=1)
        first, second = sliding_model.rollout(test), again.rollout(test)
        np.testing.assert_array_equal(first[0], second[0])
        np.testing.assert_array_equal(first[1], second[1])
        assert not np.array_equal(first[0], other.rollout(test)[0])


def test_early_stopping_and_rollout_selection(sliding):
    ids = list(sliding)
    train, valid = {k: sliding[k] for k in ids[:6]}, {ids[12]: sliding[ids[12]]}
    with SianResidual(max_epochs=8, patience=100, selection="rollout") as model:
        model.fit(train, params=MODEL_PARAMS, substeps=SUBSTEPS, validation=valid, seed=0)
        history = model.history_
        assert len(history["validation_loss"]) == 8
        checked = history["rollout_rmse_m"]
        assert {0, 1, 2, 4, 8} <= set(checked)
        assert history["best_epoch"] == min(checked, key=checked.get)
        kept = _rmse(model.rollout(valid[ids[12]])[0], valid[ids[12]])
        assert kept == pytest.approx(checked[history["best_epoch"]], rel=1e-9)
    with SianResidual(max_epochs=300, patience=2) as model:
        model.fit(train, params=MODEL_PARAMS, substeps=SUBSTEPS, validation=valid, seed=0)
        losses = model.history_["validation_loss"]
        best = model.history_["best_epoch"]
        assert len(losses) == best + 2 < 300  # stopped `patience` epochs after the best
        if best:
            assert losses[best - 1] == min(losses)


def test_bad_inputs_raise_clear_errors(tumbling, sliding_model):
    params = dict(params=MODEL_PARAMS, substeps=SUBSTEPS)
    traj = next(iter(tumbling.values()))
    with pytest.raises(DataError, match="no trajectories"):
        SianResidual().fit({}, **params)
    with pytest.raises(DataError, match="no trajectories"):
        one_step_targets("cube", {}, MODEL_PARAMS, SUBSTEPS)
    short = dataclasses.replace(traj, times_s=traj.times_s[:3], positions_m=traj.positions_m[:3],
                                quat_wxyz=traj.quat_wxyz[:3],
                                linear_velocity_mps=traj.linear_velocity_mps[:3],
                                angular_velocity_world_radps=traj.angular_velocity_world_radps[:3])
    with pytest.raises(DataError, match="too short"):
        SianResidual().fit({"short": short}, **params)
    with pytest.raises(DataError, match="not a Trajectory"):
        SianResidual().fit({"x": np.zeros((10, 13))}, **params)
    slow = dataclasses.replace(traj, times_s=traj.times_s * 2.0)
    with pytest.raises(DataError, match="period"):
        sliding_model.rollout(slow)
    with pytest.raises(DataError, match="sample period"):
        SianResidual().fit(tumbling, validation={"slow": slow}, **params)
    for bad in (dict(hidden=()), dict(hidden=(64, 0)), dict(activation="sigmoid"),
                dict(learning_rate=0.0), dict(learning_rate=float("nan")),
                dict(weight_decay=-1.0), dict(batch_size=0), dict(max_epochs=1.5),
                dict(patience=0), dict(selection="loss")):
        with pytest.raises(ParameterError):
            SianResidual(**bad)
    with pytest.raises(ParameterError, match="substeps"):
        SianResidual().fit(tumbling, params=MODEL_PARAMS, substeps=0)
    with pytest.raises(ParameterError, match="seed"):
        SianResidual().fit(tumbling, seed=0.5, **params)
    with pytest.raises(ParameterError, match="validation"):
        SianResidual(selection="rollout").fit(tumbling, **params)
    with pytest.raises(ParameterError, match="fit first"):
        SianResidual().rollout(traj)
    with pytest.raises(SceneError):
        SianResidual("planar-ellipse")
