"""The initial-state noise model: free-flight fits, the noise estimate and its sampling."""

import dataclasses
import json

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from residualsim.data import Trajectory
from residualsim.errors import DataError
from residualsim.residual.state_noise import (GRAVITY_MPS2, StateNoise, estimate_state_noise,
                                     free_flight_velocities)

HALF_WIDTH_M = 0.05


def _flight(velocity, omega, recorded_velocity=None, recorded_omega=None, height_m=0.6,
            n_samples=30, rate_hz=148.0, traj_id="t"):
    """An exact free flight (parabola, constant world angular velocity) whose first sample
    reports ``recorded_*`` velocities (default: the true ones)."""
    t = np.arange(n_samples) / rate_hz
    velocity, omega = np.asarray(velocity, float), np.asarray(omega, float)
    positions = np.array([0.1, -0.2, height_m]) + t[:, None] * velocity
    positions[:, 2] -= 0.5 * GRAVITY_MPS2 * t**2
    start = Rotation.from_rotvec([0.3, -0.5, 1.0])
    quat_xyzw = (Rotation.from_rotvec(t[:, None] * omega) * start).as_quat()
    linear = np.tile(velocity, (n_samples, 1))
    linear[:, 2] -= GRAVITY_MPS2 * t
    angular = np.tile(omega, (n_samples, 1))
    if recorded_velocity is not None:
        linear[0] = recorded_velocity
    if recorded_omega is not None:
        angular[0] = recorded_omega
    return Trajectory(traj_id=traj_id, times_s=t, positions_m=positions,
                      quat_wxyz=quat_xyzw[:, [3, 0, 1, 2]], linear_velocity_mps=linear,
                      angular_velocity_world_radps=angular,
                      metadata={"half_width_m": HALF_WIDTH_M})


def test_free_flight_fit_recovers_the_initial_velocities():
    traj = _flight([0.8, -0.3, 0.5], [2.0, -4.0, 1.5])
    velocity, omega = free_flight_velocities(traj, HALF_WIDTH_M)
    np.testing.assert_allclose(velocity, [0.8, -0.3, 0.5], atol=1e-9)
    np.testing.assert_allclose(omega, [2.0, -4.0, 1.5], atol=1e-9)


def test_no_free_flight_gives_none():
    # released 3 cm above the table: the lowest corner touches at once
    assert free_flight_velocities(_flight([0, 0, 0], [0, 0, 0], height_m=0.03),
                                  HALF_WIDTH_M) is None


def test_estimate_is_the_rms_of_fit_minus_recorded():
    rng = np.random.default_rng(1)
    errors_v = rng.normal([0.0, 0.0, -0.02], [0.01, 0.02, 0.005], size=(40, 3))
    errors_w = rng.normal(0.0, [0.1, 0.2, 0.3], size=(40, 3))
    trajs = {}
    for k in range(40):
        v, w = rng.normal(0, 1, 3), rng.normal(0, 3, 3)
        trajs[str(k)] = _flight(v, w, recorded_velocity=v - errors_v[k],
                                recorded_omega=w - errors_w[k], traj_id=str(k))
    noise = estimate_state_noise(trajs)
    assert noise.n_recordings == 40
    np.testing.assert_allclose(noise.velocity_std_mps, np.sqrt(np.mean(errors_v**2, axis=0)),
                               rtol=1e-6)
    np.testing.assert_allclose(noise.omega_std_radps, np.sqrt(np.mean(errors_w**2, axis=0)),
                               rtol=1e-6)
    np.testing.assert_allclose(noise.velocity_bias_mps, errors_v.mean(axis=0), atol=1e-8)


def test_estimate_needs_a_free_flight():
    with pytest.raises(DataError, match="free flight"):
        estimate_state_noise({"a": _flight([0, 0, 0], [0, 0, 0], height_m=0.03)})


def test_perturb_draws_the_stated_noise_on_the_velocities_only():
    noise = StateNoise(velocity_std_mps=(0.01, 0.02, 0.03), omega_std_radps=(0.1, 0.2, 0.3))
    state = np.r_[[0.1, 0.2, 0.3], [1.0, 0, 0, 0], [0.5, 0.0, -1.0], [0.0, 3.0, 0.0]]
    draws = np.array([noise.perturb(state, np.random.default_rng([7, k])) for k in range(4000)])
    np.testing.assert_array_equal(draws[:, :7], np.tile(state[:7], (4000, 1)))
    np.testing.assert_allclose(draws[:, 7:].std(axis=0), [0.01, 0.02, 0.03, 0.1, 0.2, 0.3],
                               rtol=0.05)
    again = noise.perturb(state, np.random.default_rng([7, 0]))
    np.testing.assert_array_equal(again, draws[0])  # same stream, same draw
    with pytest.raises(DataError, match="13-number"):
        noise.perturb(state[:6], np.random.default_rng(0))


def test_bad_noise_is_refused_and_json_round_trips():
    with pytest.raises(DataError, match="velocity_std_mps"):
        StateNoise(velocity_std_mps=(0.01, -0.02, 0.03), omega_std_radps=(0.1, 0.2, 0.3))
    with pytest.raises(DataError, match="omega_std_radps"):
        StateNoise(velocity_std_mps=(0.01, 0.02, 0.03), omega_std_radps=(0.1, np.nan, 0.3))
    noise = StateNoise((0.01, 0.02, 0.03), (0.1, 0.2, 0.3), (0.0, 0.0, -0.02), n_recordings=5)
    assert StateNoise.from_json(json.loads(json.dumps(noise.as_json()))) == noise
    assert dataclasses.replace(noise, n_recordings=6) != noise


def test_a_model_s_state_noise_sets_the_default_initial_belief_velocities():
    from residualsim.belief.simulator import INITIAL_STD, default_initial_std

    from residualsim.sim.scenes import make_scene

    class _Model:  # what default_initial_std reads of a ResidualModel
        scene, layout, state_noise = "cube", make_scene("cube"), None

    model = _Model()
    np.testing.assert_array_equal(default_initial_std(model), INITIAL_STD)
    model.state_noise = StateNoise((0.01, 0.02, 0.03), (0.1, 0.2, 0.3))
    std = default_initial_std(model)
    np.testing.assert_array_equal(std[:6], INITIAL_STD[:6])  # pose noise unchanged
    np.testing.assert_array_equal(std[6:], [0.01, 0.02, 0.03, 0.1, 0.2, 0.3])
    assert INITIAL_STD[6] == 0.02  # the module default is not modified
