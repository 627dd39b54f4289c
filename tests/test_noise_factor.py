"""The width of the start, chosen on validation (issue 35): ``train``'s uncertainty fit picks
a factor on the estimated state noise (``StateNoise.factor``), the model file keeps it (old
files load with 1), and every sampler draws with it.

Synthetic cube free flights, released 1 m above the table so that nothing touches within
the recording: the final position is then linear in the initial velocity and the residual
never acts, so the right factor is known: the validation split's recorded velocities carry
twice (or half) the noise of the training split's, on which the noise is estimated."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from residualsim.data import Trajectory
from residualsim.errors import DataError
from residualsim.residual.policy import ResidualPolicy
from residualsim.residual.model import ResidualModel
from residualsim.residual.state_noise import StateNoise, estimate_state_noise
from residualsim.residual.spread import fit_spread
from residualsim.residual.uncertainty_fit import NOISE_FACTORS, fit_uncertainty
from residualsim.sim.rollout import ContactGuard, predict_trajectories
from residualsim.sim.scenes import EngineParams, make_scene
from residualsim.sim.synthesize import synthesize_tosses

RATE_HZ = 148.0
HALF_WIDTH_M = make_scene("cube").side_m / 2
#: Noise of the training split's recorded initial velocity (m/s) and angular velocity
#: (rad/s), per world axis.
SIGMA_V, SIGMA_W = 0.08, 0.8


def _starts(n: int, rng: np.random.Generator) -> dict[str, Trajectory]:
    """First samples (the rest is overwritten by the simulation) of ``n`` cube tosses 1 m
    above the table, 25 samples long (0.17 s: the cube falls about 15 cm)."""
    out = {}
    for k in range(n):
        quat = rng.normal(size=4)
        velocity, omega = rng.normal(0.0, 0.5, 3), rng.normal(0.0, 3.0, 3)
        out[f"synthetic-{k}"] = Trajectory(
            traj_id=f"synthetic-{k}", times_s=np.arange(25) / RATE_HZ,
            positions_m=np.tile([0.0, 0.0, 1.0], (25, 1)) + rng.normal(0, 0.1, 3),
            quat_wxyz=np.tile(quat / np.linalg.norm(quat), (25, 1)),
            linear_velocity_mps=np.tile(velocity, (25, 1)),
            angular_velocity_world_radps=np.tile(omega, (25, 1)))
    return out


def _recorded(tosses: dict[str, Trajectory], scale: float, rng: np.random.Generator
              ) -> dict[str, Trajectory]:
    """``tosses`` whose first velocities are off by N(0, scale x (SIGMA_V, SIGMA_W)), with
    the cube's half-width (the closed-form noise estimate reads it)."""
    out = {}
    for key, traj in tosses.items():
        linear = traj.linear_velocity_mps.copy()
        angular = traj.angular_velocity_world_radps.copy()
        linear[0] += rng.normal(0.0, scale * SIGMA_V, 3)
        angular[0] += rng.normal(0.0, scale * SIGMA_W, 3)
        out[key] = dataclasses.replace(traj, linear_velocity_mps=linear,
                                       angular_velocity_world_radps=angular,
                                       metadata={"half_width_m": HALF_WIDTH_M})
    return out


@pytest.fixture(scope="module")
def flights():
    truth = EngineParams()
    rng = np.random.default_rng(3)
    exact = synthesize_tosses(truth, like=_starts(56, rng), rng=0)
    keys = list(exact)
    model = ResidualModel(scene="cube", policy=ResidualPolicy.for_scene(False, hidden=(4,)),
                          params=truth, dt_s=1.0 / RATE_HZ,
                          substeps=make_scene("cube").settings.substeps, guard=ContactGuard())
    train = _recorded({k: exact[k] for k in keys[:24]}, 1.0, rng)
    return model, train, {k: exact[k] for k in keys[24:]}, rng


@pytest.mark.parametrize("scale, expected", [(2.0, 2.0), (0.5, 0.5)])
def test_the_factor_follows_the_true_start_noise(flights, scale, expected):
    """The estimate (training split) is about SIGMA; the validation starts are off by
    ``scale`` x SIGMA: the chosen factor is ``scale``, and with it the validation coverage
    is closer to nominal than with the estimate as it is (factor 1)."""
    model, train, exact_validation, rng = flights
    validation = _recorded(exact_validation, scale, np.random.default_rng(int(scale * 10)))
    fitted, record = fit_uncertainty(model, train, validation, fit_spread, samples=16,
                                     grid=(1.0,))
    estimate = estimate_state_noise(train)
    assert np.allclose(estimate.velocity_std_mps, SIGMA_V, rtol=0.4)  # the estimate is ~SIGMA
    assert fitted.state_noise == dataclasses.replace(estimate, factor=expected)
    assert record["state_noise_factor"] == expected == record["state_noise"]["factor"]
    rows = {row["state_noise_factor"]: row for row in record["state_noise_rows"]}
    assert sorted(rows) == sorted(NOISE_FACTORS)
    worst = {f: row["reliability_xy_max_deviation"] for f, row in rows.items()}
    assert worst[expected] == min(worst.values()) and worst[expected] < worst[1.0] - 0.15
    # the spread pass reuses the row at factor `expected`, spread 1
    assert record["rows"] == [{k: v for k, v in rows[expected].items()
                               if k != "state_noise_factor"}]


def test_the_factor_pass_checkpoints_are_removed_and_reruns_agree(flights, tmp_path):
    model, train, exact_validation, _ = flights
    validation = _recorded(dict(list(exact_validation.items())[:8]), 2.0,
                           np.random.default_rng(20))
    records = [fit_uncertainty(model, train, validation, fit_spread, samples=4, grid=(1.0, 2.0),
                               checkpoint=tmp_path / "fit.json")[1] for _ in range(2)]
    assert records[0] == records[1]  # the second reused the spread pass's checkpoint
    # the factor pass's checkpoints are removed; the spread pass's is the caller's (train's)
    assert [p.name for p in tmp_path.iterdir()] == ["fit.json"]


def test_the_factor_travels_in_model_json_and_old_files_load(flights, tmp_path):
    model, train, _, _ = flights
    noise = estimate_state_noise(train)
    scaled = dataclasses.replace(model, state_noise=dataclasses.replace(noise, factor=0.5))
    scaled.save(tmp_path / "new")
    assert ResidualModel.load(tmp_path / "new").state_noise == scaled.state_noise
    # a file written before the factor existed: no "factor" key, loads with 1, writes as it was
    dataclasses.replace(model, state_noise=noise).save(tmp_path / "old")
    header = json.loads((tmp_path / "old" / "model.json").read_text())
    assert "factor" not in header["state_noise"]
    loaded = ResidualModel.load(tmp_path / "old").state_noise
    assert loaded.factor == 1.0 and loaded.as_json() == header["state_noise"]
    header["state_noise"]["factor"] = -1
    (tmp_path / "old" / "model.json").write_text(json.dumps(header))
    with pytest.raises(DataError, match=r"model\.json.*factor"):
        ResidualModel.load(tmp_path / "old")


def test_every_sampler_draws_the_noise_times_its_factor(flights):
    """Noise with factor 2 draws exactly what noise twice as large with factor 1 draws:
    ``perturb``, ``predict_trajectories`` (predict --samples, fit-spread, uncertainty; with
    any worker count), the beliefs' ``StochasticSimulator`` and a belief's default initial
    spread."""
    from residualsim.belief.simulator import StochasticSimulator, default_initial_std

    model, train, _, _ = flights
    noise = StateNoise((0.01, 0.02, 0.03), (0.1, 0.2, 0.3), factor=2.0)
    doubled = StateNoise((0.02, 0.04, 0.06), (0.2, 0.4, 0.6))
    state = np.r_[0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, np.zeros(6)]
    a, b = (n.perturb(state, np.random.default_rng(1)) for n in (noise, doubled))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, StateNoise(noise.velocity_std_mps, noise.omega_std_radps)
                              .perturb(state, np.random.default_rng(1)))
    models = [dataclasses.replace(model, state_noise=n) for n in (noise, doubled)]
    some = dict(list(train.items())[:3])
    first, second, two_workers = (predict_trajectories(m, some, samples=4, seed=5,
                                                       n_workers=workers)[0]
                                  for m, workers in ((models[0], 1), (models[1], 1),
                                                     (models[0], 2)))
    for key in some:  # the same for any worker count, too
        np.testing.assert_array_equal(first[key].position, second[key].position)
        np.testing.assert_array_equal(first[key].position, two_workers[key].position)
    np.testing.assert_array_equal(*(default_initial_std(m) for m in models))
    runs = []
    for m in models:
        with StochasticSimulator(m) as simulator:
            runs.append(simulator.rollout(state, 0.05, samples=4, seed=2, state_noise=True))
    np.testing.assert_array_equal(runs[0].initial_states, runs[1].initial_states)
    np.testing.assert_array_equal(runs[0].positions_m, runs[1].positions_m)


def test_factors_must_be_finite_and_not_negative(flights):
    from residualsim.errors import ParameterError

    model, train, exact_validation, _ = flights
    for factors in ((), (0.5, -1.0), (float("nan"),)):
        with pytest.raises(ParameterError, match="state-noise factors"):
            fit_uncertainty(model, train, exact_validation, fit_spread, noise_factors=factors)
