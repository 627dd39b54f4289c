"""Gymnasium environments (registered on ``import residualsim``).

Units and frames throughout: metres, seconds, radians; positions and velocities in the
world frame (z up, table top at z = 0); quaternions are unit, ordered w-x-y-z, body (or
link) to world. Spaces are float32; rewards are plain floats.

``residualsim/CubeToss-v0`` — :class:`CubeTossEnv`, a planner's one-step decision
    A cube is released at a fixed pose (default 0.3 m above the table origin, identity
    orientation) and moves under the shipped residual contact model
    (``data/pretrained/cube-contactnets``, through :class:`~residualsim.belief.simulator.
    StochasticSimulator`) for ``horizon_s`` seconds.

    * observation ``Box((2,))``: the target (x, y) on the table, m world, drawn uniformly in
      [``target_low``, ``target_high``] at reset; unchanged by the step;
    * action ``Box((6,))``: the release velocity (3, m/s world, within [-2, -2, -2] ..
      [2, 2, 1]) and angular velocity (3, rad/s world, within ±10). A NaN, infinite or wrongly
      shaped action raises ParameterError (a ValueError), and so does one beyond the
      bounds, naming the entry and its bound (wrap the environment in gymnasium's
      ``ClipAction`` to have such actions clipped instead);
    * reward: minus the horizontal distance (m) from the cube's final position to the target;
    * every episode is one step: ``terminated=True``, ``truncated=False``;
    * info: ``final_position_m`` (3,), ``distance_m``, ``n_events`` (contact events of the
      rollout) and, when ``belief_particles > 0``, ``beliefs``: one dict per contact event
      (:meth:`~residualsim.belief.propagation.BeliefStep.summary` plus ``mean_state``, the mixture's
      mean cube state (13,): position, quaternion w-x-y-z, velocity, angular velocity).

    ``stochastic=True`` samples the residual (a seed drawn from ``self.np_random``);
    ``stochastic=False`` applies the policy's mean residual, so the outcome depends only on
    the action.

``residualsim/Toss-v0`` — :class:`TossEnv`, the same decision for any free object
    ``gymnasium.make("residualsim/Toss-v0", scene="my_object.toml", model="model/")``: the
    model is one trained on that scene (``residualsim train --scene my_object.toml``). The
    object is released at the base pose above with its joints at ``release_joint_positions``
    (rad or m, URDF order; default 0) at rest; the action sets the base's velocity and
    angular velocity as for the cube; ``final_position_m`` is the base link's.

``residualsim/ArmLoop-v0`` — :class:`ArmLoopEnv`, a 7-DOF KUKA iiwa holding a flexible loop
    (:class:`~residualsim.sim.scenes.arm_loop.ArmLoopScene`: a 12-link spring loop clamped at
    its bottom, its top grasped by the arm's last link). Each step is one 10 ms control
    period: the joint torques F = g(b) + K_p (b_target - b) - K_d ḃ (g the arm's gravity
    torques, LQR gains at 10 rad/s bandwidth) are held over the period's internal steps.

    * action ``Box((7,))``: joint targets b_target as offsets (rad) from the grasp
      configuration, within ±``action_limit_rad`` (0.2); targets are also kept within the
      joint limits; a NaN, infinite or wrongly shaped action raises ParameterError;
    * observation ``Box((21,))``: joint angles (7, rad, within ±π), joint velocities (7, rad/s,
      within ±50), the end-effector (grasp) position (3, m world, within ±2) and orientation
      (4, quaternion w-x-y-z, world);
    * reset: the arm at the grasp configuration, the loop settled for 0.5 s; a target for the
      grasp point is drawn uniformly within ±3 cm per axis of its initial position;
    * reward: minus the distance (m) from the end-effector position to the target;
    * termination: only on divergence (a :class:`~residualsim.errors.SceneError`, a
      PyBullet error, a state outside the observation space, or a loop closure error above
      5 cm), with reward -1, ``info["diverged"] = True`` and the last valid observation;
      truncation after ``max_steps`` steps (2000 = 20 s);
    * info: ``target_m`` (3,), ``closure_error_m`` (the loop's closure drift, m).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from residualsim.belief import env_settings as settings
from residualsim.data.bundled import PRETRAINED_CUBE
from residualsim.errors import ParameterError

if TYPE_CHECKING:
    from residualsim.residual.model import ResidualModel
    from residualsim.sim.scenes.loop_urdf import LoopParameters

__all__ = ["CubeTossEnv", "TossEnv", "ArmLoopEnv", "DEFAULT_CUBE_MODEL"]

#: The shipped cube model.
DEFAULT_CUBE_MODEL = PRETRAINED_CUBE


def _f32(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def _checked_action(action: Any, space: spaces.Box) -> np.ndarray:
    """``action`` as float64; ParameterError (a ValueError) for a bad shape, a NaN, an
    infinity or an entry beyond the space's bounds (compared in the space's float32, as
    ``space.contains`` does, so a float64 bound written in decimal is inside; such an entry
    is then moved onto the float64 bound). Silent clipping hid planners' scaling bugs (an
    action 1e6 times the bound was clipped to it): ``gymnasium.wrappers.ClipAction`` clips
    for those who want it."""
    try:
        array = np.asarray(action, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ParameterError(f"action must be {space.shape[0]} numbers: {exc}") from None
    if array.shape != space.shape:
        raise ParameterError(f"action must have shape {space.shape}, got {array.shape}")
    if not np.isfinite(array).all():
        raise ParameterError(f"action must be finite, got {array.tolist()}")
    with np.errstate(over="ignore"):  # 1e300 becomes inf in float32: still outside
        single = array.astype(space.dtype)
    outside = np.flatnonzero((single < space.low) | (single > space.high))
    if outside.size:
        i = int(outside[0])
        raise ParameterError(
            f"action[{i}] = {array[i]:.6g} is beyond the action space's bounds "
            f"[{float(space.low[i]):g}, {float(space.high[i]):g}]"
            + (f" ({outside.size} entries are)" if outside.size > 1 else "")
            + "; wrap the environment in gymnasium.wrappers.ClipAction to clip actions")
    return np.clip(array, space.low.astype(np.float64), space.high.astype(np.float64))


class CubeTossEnv(gym.Env[np.ndarray, np.ndarray]):
    """Toss a cube so that it comes to rest at a target (see the module docstring).

    Parameters
    ----------
    model : path or ResidualModel, optional
        Default: :data:`DEFAULT_CUBE_MODEL`.
    stochastic : bool
        Sample the residual (True) or use the policy's mean residual (False).
    release_position_m, release_quat_wxyz : the release pose (world).
    horizon_s : seconds simulated per toss.
    target_low, target_high : corners (x, y) m of the target rectangle.
    belief_particles : particles of the per-event beliefs in ``info`` (0: none).
    belief_events : contact events the beliefs follow.
    belief_method : "particles" (default) or "conjugate"
        (:func:`~residualsim.belief.propagation.propagate_belief`); with "conjugate" any
        ``belief_particles`` > 0 just turns the beliefs on.
    belief_batch_size : bodies per PyBullet world in the beliefs' rollouts (None, the
        default: automatic; 1: one at a time; :mod:`residualsim.sim.batch`). The beliefs
        are the same either way, within rounding of the event corrections.
    n_workers : worker processes of the simulator.

    Every argument is checked at construction (:mod:`residualsim.belief.env_settings` lists
    the bounds: a horizon within 60 s, a release point within 100 m of the table origin and
    not into or under the table, ...); a bad one raises one
    :class:`~residualsim.errors.ParameterError` naming it.
    """

    metadata = {"render_modes": []}

    def __init__(self, model: str | Path | ResidualModel | None = None,
                 stochastic: bool = True,
                 release_position_m: tuple[float, float, float] = (0.0, 0.0, 0.3),
                 release_quat_wxyz: tuple[float, float, float, float] = (1.0, 0.0, 0.0, 0.0),
                 horizon_s: float = 1.5,
                 target_low: tuple[float, float] = (-0.3, -0.3),
                 target_high: tuple[float, float] = (0.3, 0.3),
                 belief_particles: int = 32, belief_events: int = 3, n_workers: int = 1,
                 render_mode: str | None = None, belief_method: str = "particles",
                 belief_batch_size: int | None = None) -> None:
        from residualsim.belief.mixture import check_batch_size
        from residualsim.belief.simulator import StochasticSimulator

        if render_mode is not None:
            raise ParameterError(f"render_mode: CubeTossEnv does not render, got "
                                 f"{render_mode!r}")
        particles = settings.integer("belief_particles", belief_particles, 0,
                                     settings.MAX_BELIEF_PARTICLES)
        if particles == 1:
            raise ParameterError("belief_particles must be 0 (no beliefs) or >= 2, got 1")
        if belief_method not in ("particles", "conjugate"):
            raise ParameterError(f"belief_method must be 'particles' or 'conjugate', got "
                                 f"{belief_method!r}")
        if not isinstance(stochastic, (bool, np.bool_)):
            raise ParameterError(f"stochastic must be True or False, got {stochastic!r}")
        self.belief_method = belief_method
        self.belief_batch_size = check_batch_size(belief_batch_size, "belief_batch_size")
        self.render_mode = render_mode
        self.stochastic = bool(stochastic)
        self.horizon_s = settings.finite_number("horizon_s", horizon_s, 0.0,
                                                settings.MAX_HORIZON_S, "s", low_open=True)
        self.release_position_m = settings.finite_vector("release_position_m",
                                                         release_position_m, 3)
        if (np.abs(self.release_position_m[:2]).max() > settings.MAX_HORIZONTAL_M
                or self.release_position_m[2] > settings.MAX_HEIGHT_M):
            raise ParameterError(
                f"release_position_m must have |x|, |y| <= {settings.MAX_HORIZONTAL_M:g} m "
                f"and z <= {settings.MAX_HEIGHT_M:g} m, got "
                f"{self.release_position_m.tolist()}")
        self.release_quat_wxyz = settings.unit_quaternion("release_quat_wxyz",
                                                          release_quat_wxyz)
        self.belief_particles = particles
        self.belief_events = settings.integer("belief_events", belief_events, 1,
                                              settings.MAX_BELIEF_EVENTS)
        workers = settings.integer("n_workers", n_workers, 1, settings.MAX_WORKERS)
        target_low, target_high = settings.check_box(target_low, target_high)
        self.action_space = spaces.Box(low=_f32([-2, -2, -2, -10, -10, -10]),
                                       high=_f32([2, 2, 1, 10, 10, 10]), dtype=np.float32)
        self.observation_space = spaces.Box(low=_f32(target_low), high=_f32(target_high),
                                            dtype=np.float32)
        self.simulator = StochasticSimulator(DEFAULT_CUBE_MODEL if model is None else model,
                                             n_workers=workers, residual=True)
        try:
            self._check_object()
        except BaseException:
            self.close()
            raise
        self._target = self.observation_space.low.copy()

    def _check_object(self) -> None:
        """ParameterError if the object released at rest at the release pose would sink into
        or start under the table (the rule of ``rollout --state``,
        :func:`~residualsim.sim.recordings.check_start_state`); runs once the simulator is
        up (it knows the object)."""
        from residualsim.errors import DataError
        from residualsim.sim.recordings import check_start_state

        try:
            check_start_state(self.simulator.model.layout, self.toss(np.zeros(6)),
                              what="release_position_m")
        except DataError as exc:  # refused as implausible: an argument error here
            raise ParameterError(getattr(exc, "reason", str(exc))) from None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        low, high = self.observation_space.low, self.observation_space.high
        self._target = _f32(self.np_random.uniform(low, high))
        return self._target.copy(), {}

    def toss(self, action: np.ndarray) -> np.ndarray:
        """The cube's initial state (13,) for an action (6,) (assumed valid)."""
        from residualsim.belief.simulator import toss_state

        return toss_state(self.release_position_m, self.release_quat_wxyz, action[:3],
                          action[3:])

    def step(self, action: np.ndarray
             ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.simulator is None:
            raise RuntimeError("the environment is closed")
        state = self.toss(_checked_action(action, self.action_space))
        seed = int(self.np_random.integers(2 ** 31))
        out = self.simulator.rollout(state, self.horizon_s, samples=1, seed=seed,
                                     mean=not self.stochastic)
        final = out.final_positions_m[0]
        distance = float(np.hypot(*(final[:2] - self._target.astype(np.float64))))
        info: dict[str, Any] = {"final_position_m": final.copy(), "distance_m": distance,
                                "n_events": int(out.n_events[0])}
        if self.belief_particles > 0:
            info["beliefs"] = self._beliefs(state)
        return self._target.copy(), -distance, True, False, info

    def _beliefs(self, state: np.ndarray) -> list[dict[str, Any]]:
        steps = self.simulator.beliefs(state, n_events=self.belief_events,
                                       n_particles=self.belief_particles,
                                       seed=int(self.np_random.integers(2 ** 31)),
                                       deterministic_residual=not self.stochastic,
                                       method=self.belief_method,
                                       batch_size=self.belief_batch_size)
        out = []
        for step in steps:
            summary = step.summary()
            if step.belief is not None:
                summary["mean_state"] = step.belief.mean_state().tolist()
            out.append(summary)
        return out

    def close(self) -> None:
        if getattr(self, "simulator", None) is not None:
            self.simulator.close()
            self.simulator = None


class TossEnv(CubeTossEnv):
    """Toss any free object so that it comes to rest at a target (see the module docstring).

    Parameters
    ----------
    scene : str, optional
        The object's scene file (or ``.urdf``); checked against the model's scene.
    model : path or ResidualModel
        A model trained on that scene (required).
    release_joint_positions : sequence of float, optional
        Joint positions at release (rad or m, URDF order), default 0.
    **options
        As :class:`CubeTossEnv` (release pose, horizon, targets, beliefs, workers).
    """

    def __init__(self, scene: str | Path | None = None,
                 model: str | Path | ResidualModel | None = None,
                 release_joint_positions: tuple[float, ...] | None = None,
                 **options: Any) -> None:
        if model is None:
            raise ParameterError("model: residualsim/Toss-v0 needs model=<a model directory "
                                 "trained on the scene> (residualsim train --scene FILE "
                                 "writes one)")
        self._scene_argument, self._joints_argument = scene, release_joint_positions
        super().__init__(model=model, **options)  # then _check_object, below

    def _check_object(self) -> None:
        """The model's scene against ``scene``, the joints, then the release pose."""
        from residualsim.sim.scenes import same_scene

        scene, joints = self._scene_argument, self._joints_argument
        model_scene = self.simulator.model.scene
        if scene is not None and not same_scene(str(scene), model_scene):
            raise ParameterError(f"scene: the model was trained on scene {model_scene!r}, "
                                 f"not {scene!r}")
        layout = self.simulator.model.layout
        if layout.planar:
            raise ParameterError(f"scene: Toss-v0 tosses free objects; {model_scene!r} is "
                                 "planar")
        n_joints = getattr(layout, "n_joints", 0)
        values = np.zeros(n_joints)
        if joints is not None:
            try:
                values = settings.finite_vector("release_joint_positions", joints, n_joints)
            except ParameterError:
                raise ParameterError(
                    f"release_joint_positions must be {n_joints} finite numbers "
                    f"({', '.join(layout.joint_names) or 'no joints'}), got {joints!r}"
                ) from None
        self.release_joint_positions = values
        super()._check_object()

    def toss(self, action: np.ndarray) -> np.ndarray:
        """The object's initial state (13 + 2n,) for an action (6,): joints at rest."""
        return np.r_[super().toss(action), self.release_joint_positions,
                     np.zeros_like(self.release_joint_positions)]


class ArmLoopEnv(gym.Env[np.ndarray, np.ndarray]):
    """Move the grasp point of a clamped flexible loop to a target with a KUKA arm (see the
    module docstring).

    Parameters
    ----------
    kappa : the loop's spring stiffnesses (κ_θ, κ_ψ), N m/rad.
    max_steps : steps (10 ms each) before truncation.
    loop : number of loop links (or a loop URDF path / LoopParameters).
    substeps, solver_iterations : the scene's solver settings (5 internal steps of 2 ms).
    bandwidth_radps : closed-loop bandwidth of the joint controller.
    action_limit_rad : bound of the joint-target offsets.
    target_offset_m : half-width of the target box around the initial grasp point.
    settle_s : seconds the loop settles at reset.

    Every argument is checked at construction (:mod:`residualsim.belief.env_settings` lists
    the bounds: ``settle_s`` within 5 s, ``substeps`` an integer in [1, 50], ...); a bad
    one raises one :class:`~residualsim.errors.ParameterError` naming it.
    """

    metadata = {"render_modes": []}

    #: Observation bounds: angles (rad), velocities (rad/s), position (m).
    ANGLE_BOUND, VELOCITY_BOUND, POSITION_BOUND = math.pi, 50.0, 2.0
    #: A loop whose closure drifts further apart than this (m) has blown up.
    MAX_CLOSURE_ERROR_M = 0.05

    def __init__(self, kappa: tuple[float, float] = (4.45252, 0.96969), max_steps: int = 2000,
                 loop: int | str | Path | LoopParameters = 12, substeps: int = 5,
                 solver_iterations: int = 10,
                 bandwidth_radps: float = 10.0, action_limit_rad: float = 0.2,
                 target_offset_m: float = 0.03, settle_s: float = 0.5,
                 render_mode: str | None = None) -> None:
        from residualsim.sim.bullet import pb

        from residualsim.sim.scenes.arm_loop import ARM_JOINTS, ArmLoopScene, ArmLoopSettings, lqr_gains
        from residualsim.sim.scenes.loop_urdf import LoopParameters

        if render_mode is not None:
            raise ParameterError(f"render_mode: ArmLoopEnv does not render, got "
                                 f"{render_mode!r}")
        self.render_mode = render_mode
        self.kappa = settings.finite_vector("kappa", kappa, 2)
        if not ((self.kappa >= 0).all() and (self.kappa <= settings.MAX_KAPPA).all()):
            raise ParameterError(f"kappa must be two stiffnesses in [0, {settings.MAX_KAPPA:g}]"
                                 f" N m/rad, got {self.kappa.tolist()}")
        self.max_steps = settings.integer("max_steps", max_steps, 1, settings.MAX_STEPS)
        if isinstance(loop, (int, float, np.integer, np.floating)):
            loop = settings.integer("loop", loop, 3, settings.MAX_LOOP_LINKS)
        elif isinstance(loop, LoopParameters):
            settings.integer("loop", loop.n_links, 3, settings.MAX_LOOP_LINKS)
        elif not isinstance(loop, (str, Path)):
            raise ParameterError(f"loop must be a number of links, a loop URDF path or "
                                 f"LoopParameters, got {loop!r}")
        solver = ArmLoopSettings(
            substeps=settings.integer("substeps", substeps, 1, settings.MAX_ARM_SUBSTEPS),
            solver_iterations=settings.integer("solver_iterations", solver_iterations, 1,
                                               settings.MAX_SOLVER_ITERATIONS))
        bandwidth = settings.finite_number("bandwidth_radps", bandwidth_radps, 0.0,
                                           settings.MAX_BANDWIDTH_RADPS, "rad/s", low_open=True)
        action_limit = settings.finite_number("action_limit_rad", action_limit_rad, 0.0,
                                              math.pi, "rad", low_open=True)
        self.target_offset_m = settings.finite_number(
            "target_offset_m", target_offset_m, 0.0, settings.MAX_TARGET_OFFSET_M, "m")
        self.settle_s = settings.finite_number("settle_s", settle_s, 0.0,
                                               settings.MAX_SETTLE_S, "s")
        self.scene = ArmLoopScene(loop=loop, settings=solver)
        self.grasp = self.scene.arm_start.copy()
        self.gains = lqr_gains(self.scene.arm_mass_matrix(self.grasp), bandwidth)
        info = [pb.getJointInfo(self.scene.arm, j, physicsClientId=self.scene.client)
                for j in ARM_JOINTS]
        self.joint_low = np.array([i[8] for i in info])
        self.joint_high = np.array([i[9] for i in info])
        limit = np.full(7, action_limit, dtype=np.float32)
        self.action_space = spaces.Box(low=-limit, high=limit, dtype=np.float32)
        high = _f32([self.ANGLE_BOUND] * 7 + [self.VELOCITY_BOUND] * 7
                    + [self.POSITION_BOUND] * 3 + [1.0] * 4)
        self.observation_space = spaces.Box(low=-high, high=high, dtype=np.float32)
        self.target_m = np.zeros(3)
        self._steps = 0
        self._observation = np.zeros(21, dtype=np.float32)

    def _observe(self) -> np.ndarray:
        from residualsim.sim.bullet import pb

        from residualsim.sim.scenes.arm_loop import EE_LINK

        scene = self.scene
        angles, velocities = scene.arm_state()
        link = pb.getLinkState(scene.arm, EE_LINK, computeForwardKinematics=True,
                               physicsClientId=scene.client)
        x, y, z, w = link[5]
        return np.concatenate([angles, velocities, link[4], [w, x, y, z]])

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if self.scene.client < 0:
            raise RuntimeError("the environment is closed")
        self.scene.regrasp(self.grasp)
        self.scene.settle(self.kappa, self.settle_s)
        self.scene.set_springs(self.kappa)  # the loop's own damping from here on
        self._steps = 0
        state = self._observe()
        self.target_m = state[14:17] + self.np_random.uniform(
            -self.target_offset_m, self.target_offset_m, 3)
        self._observation = _f32(state)
        return self._observation.copy(), {"target_m": self.target_m.copy()}

    def step(self, action: np.ndarray
             ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        from residualsim.sim.bullet import pb

        from residualsim.errors import SceneError
        from residualsim.sim.scenes.arm_loop import ARM_JOINTS

        scene, (kp, kd) = self.scene, self.gains
        if scene.client < 0:
            raise RuntimeError("the environment is closed")
        target = np.clip(self.grasp + _checked_action(action, self.action_space),
                         self.joint_low, self.joint_high)
        self._steps += 1
        truncated = self._steps >= self.max_steps
        try:
            angles, velocities = scene.arm_state()
            forces = (scene.gravity_torques(angles) + kp @ (target - angles)
                      - kd @ velocities).tolist()
            for _ in range(scene.settings.substeps):  # torques are cleared after each step
                pb.setJointMotorControlArray(scene.arm, list(ARM_JOINTS), pb.TORQUE_CONTROL,
                                             forces=forces, physicsClientId=scene.client)
                pb.stepSimulation(physicsClientId=scene.client)
            state = self._observe()
            closure = scene.closure_error_m()
        except (SceneError, pb.error):
            state, closure = np.full(21, np.nan), math.nan
        info: dict[str, Any] = {"target_m": self.target_m.copy(), "closure_error_m": closure}
        observation = _f32(state)
        if not (self.observation_space.contains(observation)
                and closure <= self.MAX_CLOSURE_ERROR_M):  # False for NaN too
            info["diverged"] = True
            return self._observation.copy(), -1.0, True, truncated, info
        self._observation = observation
        reward = -float(np.linalg.norm(state[14:17] - self.target_m))
        return observation.copy(), reward, False, truncated, info

    def close(self) -> None:
        if getattr(self, "scene", None) is not None:
            self.scene.close()
