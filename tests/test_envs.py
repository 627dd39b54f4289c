"""The gymnasium environments (residualsim.belief.envs): registration, the API checker, and the
behaviour of the cube toss and the arm + loop."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import residualsim  # noqa: F401  (registers the ids)
from residualsim.belief.envs import DEFAULT_CUBE_MODEL, ArmLoopEnv, CubeTossEnv
from residualsim.errors import ParameterError

CUBE_ID, ARM_ID = "residualsim/CubeToss-v0", "residualsim/ArmLoop-v0"
#: The one warning check_env may give: the actions are in physical units, not [-1, 1].
ALLOWED_WARNING = "recommend using a symmetric and normalized space"


@pytest.fixture(scope="module")
def cube_model():
    """The shipped model, loaded once and shared by the cube environments."""
    from residualsim.residual.model import ResidualModel

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


@pytest.mark.parametrize("action", [[np.nan, 0, 0, 0, 0, 0], [0, 0, np.inf, 0, 0, 0],
                                    [0.0, 0.0, 0.0],
                                    np.zeros((1, 6)), "abc"])
def test_cube_rejects_bad_actions(cube, action):
    cube.reset(seed=0)
    with pytest.raises(ParameterError, match="^action must"):
        cube.step(action)


@pytest.mark.parametrize("scale", [2.0, 1e6, 1e9, 1e300])
def test_cube_refuses_actions_beyond_the_bounds_naming_entry_and_bound(cube, scale):
    cube.reset(seed=0)
    action = np.zeros(6)
    action[4] = 10.0 * scale  # the bound is ±10 rad/s: was clipped silently
    with pytest.raises(ParameterError, match=r"^action\[4\] = .* is beyond the action "
                                             r"space's bounds \[-10, 10\]; wrap the "
                                             r"environment in gymnasium.wrappers.ClipAction"):
        cube.step(action)


def test_cube_takes_actions_at_the_bounds_and_clips_through_the_wrapper(cube):
    import gymnasium

    cube.reset(seed=0)
    cube.step(cube.action_space.high.astype(np.float64))  # the float32 bound, as float64
    cube.reset(seed=0)
    cube.step([2.0, -2.0, 1.0, 10.0, -10.0, 0.1])  # decimal bounds: inside in float32
    wrapped = gymnasium.wrappers.ClipAction(cube)
    wrapped.reset(seed=0)
    wrapped.step(np.full(6, 1e6))


def test_arm_refuses_an_action_beyond_its_limit(arm):
    arm.reset(seed=0)
    with pytest.raises(ParameterError, match=r"^action\[0\] = 0.4 is beyond the action "
                                             r"space's bounds \[-0.2, 0.2\]"):
        arm.step(np.r_[0.4, np.zeros(6)])


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("name, value", [
    ("horizon_s", INF), ("horizon_s", NAN), ("horizon_s", 0.0), ("horizon_s", -1.0),
    ("horizon_s", 1e6), ("horizon_s", "long"), ("horizon_s", 10 ** 400),
    ("release_position_m", (1e200, 0.0, 0.3)), ("release_position_m", (0.0, -101.0, 0.3)),
    ("release_position_m", (50.0, 0.0, 0.3)), ("release_position_m", (0.0, 0.0, 50.0)),
    ("release_position_m", (NAN, 0.0, 0.3)), ("release_position_m", (0.0, 0.0, 1e6)),
    ("release_position_m", (0.0, 0.0)), ("release_position_m", "up"),
    ("release_position_m", (10 ** 400, 0, 0.3)),
    ("release_quat_wxyz", (0.0, 0.0, 0.0, 0.0)), ("release_quat_wxyz", (NAN, 0, 0, 1)),
    ("release_quat_wxyz", (2.0, 0.0, 0.0, 0.0)), ("release_quat_wxyz", (1e200, 0, 0, 0)),
    ("target_low", (NAN, 0.0)), ("target_low", (-1e6, 0.0)), ("target_low", (0.0,)),
    ("target_high", (-0.5, 0.3)),  # below target_low's x
    ("target_high", (INF, 0.3)),
    ("belief_particles", 1), ("belief_particles", -1), ("belief_particles", 10 ** 9),
    ("belief_particles", 2.5), ("belief_particles", NAN),
    ("belief_events", 0), ("belief_events", 10 ** 9), ("belief_events", True),
    ("n_workers", 0), ("n_workers", -1), ("n_workers", 10 ** 6),
    ("stochastic", "no"), ("belief_method", "magic"), ("render_mode", "human"),
    ("belief_batch_size", 0), ("belief_batch_size", 2.5),
])
@pytest.mark.filterwarnings("ignore:.*render_mode:UserWarning")  # the bad value
def test_cube_refuses_bad_arguments_at_construction(cube_model, name, value):
    with pytest.raises(ParameterError) as caught:
        gym.make(CUBE_ID, model=cube_model, **{name: value})
    assert str(caught.value).startswith(name), str(caught.value)


@pytest.mark.parametrize("position", [(0.0, 0.0, -5.0), (0.3, 0.2, 0.02)])
def test_cube_refuses_a_release_under_or_into_the_table(cube_model, position):
    """z = -5 m fell to z = -16.8 m through no table; z = 2 cm puts the 10 cm cube 3 cm in."""
    with pytest.raises(ParameterError, match=r"^release_position_m: .* into the table"):
        CubeTossEnv(model=cube_model, belief_particles=0, release_position_m=position)


def test_cube_accepts_arguments_at_their_bounds(cube_model):
    env = CubeTossEnv(model=cube_model, belief_particles=0, horizon_s=0.1,
                      release_position_m=(9.9, -9.9, 0.051),  # resting, at the table's edge
                      release_quat_wxyz=(1.005, 0.0, 0.0, 0.0),  # normalised
                      target_low=(-100.0, 0.2), target_high=(-100.0, 0.2))
    try:
        np.testing.assert_array_equal(env.release_quat_wxyz, [1.0, 0.0, 0.0, 0.0])
        reward = _toss(env, 0, np.zeros(6))[2]
        assert -reward == pytest.approx(np.hypot(109.9, 10.1), abs=0.1)  # it stays put
    finally:
        env.close()


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


@pytest.mark.parametrize("name, value", [
    ("settle_s", 1e9), ("settle_s", NAN), ("settle_s", -0.1), ("settle_s", INF),
    ("substeps", 0), ("substeps", -1), ("substeps", 2.5), ("substeps", 10 ** 6),
    ("substeps", "5"), ("substeps", True), ("substeps", 10 ** 400), ("substeps", NAN),
    ("solver_iterations", 0), ("solver_iterations", 10 ** 9),
    ("target_offset_m", NAN), ("target_offset_m", -0.01), ("target_offset_m", 5.0),
    ("kappa", (NAN, 1.0)), ("kappa", (-1.0, 1.0)), ("kappa", (1.0,)), ("kappa", (1e9, 1.0)),
    ("max_steps", 0), ("max_steps", 1e300), ("max_steps", NAN),
    ("loop", 2), ("loop", 10 ** 6), ("loop", 12.5), ("loop", None),
    ("bandwidth_radps", 0.0), ("bandwidth_radps", INF), ("bandwidth_radps", NAN),
    ("action_limit_rad", 0.0), ("action_limit_rad", NAN), ("action_limit_rad", 10.0),
    ("render_mode", "human"),
])
@pytest.mark.filterwarnings("ignore:.*render_mode:UserWarning")  # the bad value
def test_arm_refuses_bad_arguments_at_construction(name, value):
    with pytest.raises(ParameterError) as caught:
        gym.make(ARM_ID, **{name: value})
    assert str(caught.value).startswith(name), str(caught.value)


def test_arm_accepts_arguments_at_their_bounds():
    env = ArmLoopEnv(settle_s=0.0, substeps=10.0, target_offset_m=0.0, max_steps=1,
                     kappa=(0.0, 0.0), action_limit_rad=math.pi)
    try:
        observation, info = env.reset(seed=0)
        np.testing.assert_allclose(info["target_m"], observation[14:17], atol=1e-6)
        assert env.scene.settings.substeps == 10 and env.step(np.zeros(7))[3]  # truncated
    finally:
        env.close()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_arm_rejects_non_finite_actions_without_stepping(arm, bad):
    arm.reset(seed=0)
    before = arm.scene.arm_state()[0]
    action = np.zeros(7)
    action[3] = bad
    with pytest.raises(ParameterError, match="^action must be finite"):
        arm.step(action)
    np.testing.assert_array_equal(arm.scene.arm_state()[0], before)


@pytest.fixture(scope="module")
def hinge_model(tmp_path_factory):
    """An untrained model of the two-box hinge (the worked example of a linked object)."""
    from residualsim.residual.policy import ResidualPolicy
    from residualsim.residual.model import ResidualModel
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


@pytest.mark.parametrize("position", [(0.0, 0.0, -5.0), (0.0, 0.0, 0.0)])
def test_toss_env_refuses_a_release_of_a_linked_object_under_the_table(hinge_model, position):
    """Every link counts (a URDF scene's contacts are of all its links): wholly under the
    table, or halfway into it."""
    scene, model = hinge_model
    with pytest.raises(ParameterError, match=r"^release_position_m: .* into the table"):
        gym.make("residualsim/Toss-v0", scene=scene, model=str(model), belief_particles=0,
                 release_position_m=position)


@pytest.mark.parametrize("joints", [(np.nan,), (0.1, 0.2), "bent"])
def test_toss_env_refuses_bad_release_joint_positions(hinge_model, joints):
    scene, model = hinge_model
    with pytest.raises(ParameterError, match=r"^release_joint_positions must be 1 finite"):
        gym.make("residualsim/Toss-v0", scene=scene, model=str(model), belief_particles=0,
                 release_joint_positions=joints)


@pytest.mark.parametrize("scale", [2.0, 1e6, 1e9])
def test_toss_env_refuses_actions_beyond_the_bounds_too(hinge_model, scale):
    """Issue 51: actions of 2x, 1e6 and 1e9 the bound were clipped silently; Toss-v0 (any
    object) refuses them as CubeToss-v0 does."""
    scene, model = hinge_model
    env = gym.make("residualsim/Toss-v0", scene=scene, model=str(model), horizon_s=0.5,
                   belief_particles=0)
    try:
        env.reset(seed=0)
        action = np.zeros(6)
        action[0] = float(env.unwrapped.action_space.high[0]) * scale
        with pytest.raises(ParameterError, match=r"^action\[0\] = .* is beyond the action "
                                                 r"space's bounds"):
            env.unwrapped.step(action)
    finally:
        env.close()
