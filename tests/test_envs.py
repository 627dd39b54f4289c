"""The gymnasium environments (residualsim.belief.envs): registration, the API checker, and the
behaviour of the cube toss and the arm + loop."""

from __future__ import annotations

import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import residualsim  # noqa: F401  (registers the ids)
from residualsim.belief.envs import DEFAULT_CUBE_MODEL, ArmLoopEnv, CubeTossEnv

CUBE_ID, ARM_ID = "residualsim/CubeToss-v0", "residualsim/ArmLoop-v0"
#: The one warning check_env may give: the actions are in physical units, not [-1, 1].
ALLOWED_WARNING = "recommend using a symmetric and normalized space"


@pytest.fixture(scope="module")
def cube_model():
    """The shipped model, loaded once and shared by the cube environments."""
    from residualsim.residual.policy import ResidualModel

    return ResidualModel.load(DEFAULT_CUBE_MODEL)


@pytest.fixture(scope="module")
def cube(cube_model):
    env = CubeTossEnv(model=cube_model, belief_particles=0)
    yield env
    env.close()


@pytest.fixture(scope="module")
def arm():
    env = ArmLoopEnv()
    yield env
    env.close()


def _check(env: gym.Env) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    unexpected = [str(w.message) for w in caught if ALLOWED_WARNING not in str(w.message)]
    assert not unexpected


def _toss(env: CubeTossEnv, seed: int, action) -> tuple:
    observation, _ = env.reset(seed=seed)
    return (observation, *env.step(np.asarray(action, dtype=np.float32)))


# --- registration ---------------------------------------------------------------------------
def test_ids_are_registered_and_make_builds_both_envs():
    assert gym.spec(CUBE_ID).entry_point == "residualsim.belief.envs:CubeTossEnv"
    assert gym.spec(ARM_ID).entry_point == "residualsim.belief.envs:ArmLoopEnv"
    cube = gym.make(CUBE_ID, belief_particles=0)  # the default model path resolves
    arm = gym.make(ARM_ID)
    try:
        assert isinstance(cube.unwrapped, CubeTossEnv)
        assert isinstance(arm.unwrapped, ArmLoopEnv)
        assert cube.reset(seed=0)[0].shape == (2,)
        assert arm.reset(seed=0)[0].shape == (21,)
    finally:
        cube.close()
        arm.close()


def test_check_env_passes_on_the_cube_toss(cube_model):
    env = gym.make(CUBE_ID, model=cube_model, belief_particles=4)
    try:
        _check(env)
    finally:
        env.close()


def test_check_env_passes_on_the_arm_loop():
    env = gym.make(ARM_ID)
    try:
        _check(env)
    finally:
        env.close()


# --- CubeToss -----------------------------------------------------------------------------
def test_cube_same_seed_gives_the_same_episode(cube):
    action = [0.8, -0.3, -0.5, 1.0, 4.0, -2.0]
    first, second = _toss(cube, 7, action), _toss(cube, 7, action)
    np.testing.assert_array_equal(first[0], second[0])
    np.testing.assert_array_equal(first[1], second[1])
    assert first[2] == second[2]
    np.testing.assert_array_equal(first[5]["final_position_m"], second[5]["final_position_m"])
    assert first[5]["n_events"] == second[5]["n_events"]


def test_cube_different_seeds_give_different_targets(cube):
    targets = [cube.reset(seed=seed)[0] for seed in range(5)]
    assert len({tuple(t) for t in targets}) == 5
    assert all(cube.observation_space.contains(t) for t in targets)


def test_cube_stochastic_outcome_depends_on_the_seed(cube_model):
    env = CubeTossEnv(model=cube_model, belief_particles=0, target_low=(0.1, 0.1),
                      target_high=(0.1, 0.1))  # one target: only the residual varies
    try:
        finals = {tuple(_toss(env, seed, [1.0, 0, 0, 0, 3.0, 0])[5]["final_position_m"])
                  for seed in range(3)}
    finally:
        env.close()
    assert len(finals) == 3


def test_cube_deterministic_mode_ignores_the_seed(cube_model):
    env = CubeTossEnv(model=cube_model, stochastic=False, belief_particles=0,
                      target_low=(0.1, 0.1), target_high=(0.1, 0.1))
    try:
        rewards = {_toss(env, seed, [1.0, 0, 0, 0, 3.0, 0])[2] for seed in range(3)}
    finally:
        env.close()
    assert len(rewards) == 1


def test_cube_drop_lands_below_the_release_and_a_push_moves_it(cube):
    dropped = _toss(cube, 0, np.zeros(6))[5]["final_position_m"]
    assert np.abs(dropped[:2]).max() < 0.05
    pushed = _toss(cube, 0, [1.0, 0, 0, 0, 0, 0])[5]["final_position_m"]
    assert pushed[0] > 0.1


def test_cube_reward_is_minus_the_horizontal_distance_to_the_target(cube):
    target, _, reward, terminated, truncated, info = _toss(cube, 3, [0.5, 0.5, 0, 0, 0, 5])
    expected = np.hypot(*(info["final_position_m"][:2] - target))
    assert reward == pytest.approx(-expected, abs=1e-9)
    assert info["distance_m"] == pytest.approx(expected, abs=1e-9)
    assert terminated and not truncated


@pytest.mark.parametrize("action", [[np.nan, 0, 0, 0, 0, 0], [0.0, 0.0, 0.0],
                                    np.zeros((1, 6)), "abc"])
def test_cube_rejects_bad_actions(cube, action):
    cube.reset(seed=0)
    with pytest.raises(ValueError):
        cube.step(action)


def test_cube_beliefs_in_info(cube_model):
    env = CubeTossEnv(model=cube_model, belief_particles=4, belief_events=2)
    try:
        info = _toss(env, 0, [0.5, 0, 0, 0, 2.0, 0])[5]
    finally:
        env.close()
    beliefs = info["beliefs"]
    assert isinstance(beliefs, list) and 1 <= len(beliefs) <= 2
    assert all(step["drawn"] == 4 for step in beliefs)
    assert len(beliefs[0]["mean_state"]) == 13


# --- ArmLoop ------------------------------------------------------------------------------
def test_arm_observation(arm):
    observation, info = arm.reset(seed=0)
    assert observation.shape == (21,) and observation.dtype == np.float32
    assert np.isfinite(observation).all() and arm.observation_space.contains(observation)
    np.testing.assert_allclose(observation[:7], arm.grasp, atol=1e-6)
    np.testing.assert_allclose(observation[14:17], arm.scene.ee_position(), atol=1e-6)
    # the last link points down: a half turn about x, (w, x, y, z) = ±(0, 1, 0, 0)
    assert abs(observation[18]) == pytest.approx(1.0, abs=1e-4)


def test_arm_zero_action_holds_the_grasp(arm):
    arm.reset(seed=0)
    for _ in range(50):
        observation, _, terminated, _, info = arm.step(np.zeros(7, dtype=np.float32))
        assert not terminated
    assert np.abs(observation[:7] - arm.grasp).max() < 0.05
    assert info["closure_error_m"] < 1e-3


def test_arm_joint_target_is_followed(arm):
    arm.reset(seed=0)
    action = np.zeros(7, dtype=np.float32)
    action[0] = 0.1
    for _ in range(100):
        observation = arm.step(action)[0]
    assert abs(observation[0] - (arm.grasp[0] + 0.1)) < 0.03


def test_arm_reward_is_minus_the_distance_to_the_target(arm):
    arm.reset(seed=4)
    observation, reward, _, _, info = arm.step(arm.action_space.sample())
    expected = np.linalg.norm(observation[14:17].astype(float) - info["target_m"])
    assert reward == pytest.approx(-expected, abs=1e-6)


def test_arm_target_is_seeded_and_near_the_grasp_point(arm):
    first, second, other = (arm.reset(seed=s) for s in (5, 5, 6))
    np.testing.assert_array_equal(first[1]["target_m"], second[1]["target_m"])
    assert not np.array_equal(first[1]["target_m"], other[1]["target_m"])
    assert np.abs(first[1]["target_m"] - first[0][14:17]).max() <= 0.03


def test_arm_truncates_after_max_steps():
    env = ArmLoopEnv(max_steps=3)
    try:
        env.reset(seed=0)
        flags = [env.step(np.zeros(7, dtype=np.float32))[3] for _ in range(3)]
    finally:
        env.close()
    assert flags == [False, False, True]


def test_arm_divergence_terminates_with_reward_minus_one():
    env = ArmLoopEnv(kappa=(1e3, 1e3))  # far beyond what 2 ms steps hold
    try:
        env.reset(seed=0)
        for _ in range(20):
            _, reward, terminated, _, info = env.step(np.zeros(7, dtype=np.float32))
            if terminated:
                break
    finally:
        env.close()
    assert terminated and reward == -1.0 and info["diverged"] is True


@pytest.fixture(scope="module")
def hinge_model(tmp_path_factory):
    """An untrained model of the two-box hinge (the worked example of a linked object)."""
    from residualsim.residual.policy import ResidualModel, ResidualPolicy
    from residualsim.sim.rollout import ContactGuard
    from residualsim.sim.scenes import EngineParams

    scene = str(Path(__file__).resolve().parents[1] / "assets" / "examples" / "hinge.toml")
    model = ResidualModel(scene=scene, policy=ResidualPolicy(hidden=(4,), seed=0),
                          params=EngineParams(lateral_friction=0.3, restitution=0.4),
                          dt_s=1 / 240, substeps=10, guard=ContactGuard())
    return scene, model.save(tmp_path_factory.mktemp("hinge") / "model")


def test_toss_env_takes_any_object_and_passes_the_api_checker(hinge_model):
    scene, model = hinge_model
    env = gym.make("residualsim/Toss-v0", scene=scene, model=str(model), horizon_s=0.5,
                   belief_particles=8, release_joint_positions=(0.5,))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_env(env.unwrapped)
        assert all(ALLOWED_WARNING in str(w.message) for w in caught)
        obs, _ = env.reset(seed=3)
        _, reward, terminated, truncated, info = env.step(
            np.array([0.5, 0.0, -0.5, 0.0, 3.0, 0.0], dtype=np.float32))
        assert terminated and not truncated and reward == -info["distance_m"]
        assert info["n_events"] >= 1 and len(info["beliefs"]) >= 1
        assert len(info["beliefs"][0]["mean_state"]) == 15  # base 13 + elbow angle and rate
        assert info["final_position_m"][2] < 0.1  # down on the table
    finally:
        env.close()


def test_toss_env_refuses_a_model_of_another_scene(hinge_model):
    _, model = hinge_model
    with pytest.raises(ValueError, match="trained on scene"):
        gym.make("residualsim/Toss-v0", scene="cube", model=str(model))
    with pytest.raises(ValueError, match="needs model="):
        gym.make("residualsim/Toss-v0", scene="cube")
