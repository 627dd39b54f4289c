"""The planner API: batched stochastic rollouts and beliefs of a residual model.

::

    from residualsim import StochasticSimulator, toss_state

    with StochasticSimulator("data/pretrained/cube-contactnets", n_workers=2) as sim:
        state = toss_state([0, 0, 0.3], [1, 0, 0, 0], velocity_mps=[0.8, 0, -0.5],
                           omega_radps=[0, 4, 0])
        out = sim.rollout(state, horizon_s=1.5, samples=64, seed=0)
        out.positions_m.shape        # (64, T, 3)
        beliefs = sim.beliefs(state, n_events=3, n_particles=1000, seed=0)

The cube scene has no actuator: a planner's action is the toss itself, i.e. the initial
state (:func:`toss_state`). One call batches every sample over the worker processes;
sample s uses ``numpy.random.default_rng([seed, s])``, so results do not depend on the
number of workers.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from residualsim.belief.propagation import (MAX_HORIZON_S, BeliefStep, GaussianMixtureBelief,
                                            propagate_belief, slot_particles)
from residualsim.belief.mixture import check_batch_size
from residualsim.belief.propagation import check_seed as _check_seed, check_workers
from residualsim.errors import ParameterError

__all__ = ["StochasticSimulator", "SampledRollouts", "toss_state", "INITIAL_STD",
           "default_initial_std", "MAX_HORIZON_S"]

#: Random stream of the initial states drawn from a belief (no sample index reaches it).
_INITIAL_STREAM = 2 ** 32 - 1

#: Default initial-state uncertainty (tangent standard deviations, see
#: :mod:`residualsim.belief.propagation`) used when a planner gives a bare state to :meth:`beliefs`:
#: 1 mm, 0.01 rad, 0.02 m/s, 0.2 rad/s — the order of the ContactNets pose noise and of
#: finite-difference velocities at 148 Hz.
INITIAL_STD = np.r_[[1e-3] * 3, [0.01] * 3, [0.02] * 3, [0.2] * 3]


def default_initial_std(model) -> np.ndarray:
    """The initial-state uncertainty a belief starts from when only a state is given:
    :data:`INITIAL_STD`, with the velocity and angular-velocity entries replaced by the
    model's estimated recording noise (:attr:`ResidualModel.state_noise`, m/s and rad/s
    per world axis, and per joint when it has a joint estimate; times its chosen
    ``factor``, as every sampler draws it: ``StateNoise.sample_std``) when it has one."""
    std = INITIAL_STD.copy()
    noise = getattr(model, "state_noise", None)
    sample_std = None if noise is None else noise.sample_std()
    if noise is not None and not _planar(model.layout):
        std[6:12] = sample_std[:6]
    n_joints = getattr(model.layout, "n_joints", 0)
    if n_joints:  # joints: 0.01 rad (or m) and 0.1 rad/s (or m/s), or the estimated noise
        joint_std = [] if sample_std is None else sample_std[6:]
        velocity = joint_std if len(joint_std) == n_joints else [0.1] * n_joints
        std = np.r_[std, [0.01] * n_joints, velocity]
    return std


def recorded_start_beliefs(model, trajectories) -> list:
    """One Gaussian belief per recording (a mapping of id -> Trajectory), centred on its
    first recorded state (the scene's layout: position m and velocities m/s, rad/s in the
    world frame, quaternion w-x-y-z body to world) with :func:`default_initial_std` (3-D
    scenes): what the belief benchmarks and studies start from."""
    from residualsim.belief.mixture import GaussianMixtureBelief

    scene, std = model.layout, default_initial_std(model)
    return [GaussianMixtureBelief.gaussian(scene.state_from_trajectory(toss, 0), std,
                                           planar=False)
            for toss in trajectories.values()]


def toss_state(position_m, quat_wxyz, velocity_mps, omega_radps) -> np.ndarray:
    """A cube state (13,): position m world, unit quaternion w-x-y-z body to world
    (normalised here), velocity m/s world, angular velocity rad/s world."""
    parts = [np.asarray(v, dtype=float).ravel() for v in
             (position_m, quat_wxyz, velocity_mps, omega_radps)]
    if [len(p) for p in parts] != [3, 4, 3, 3] or not all(np.isfinite(p).all() for p in parts):
        raise ParameterError("a toss needs finite position (3), quaternion (4), velocity (3) "
                             "and angular velocity (3)")
    norm = np.linalg.norm(parts[1])
    if norm < 1e-9:
        raise ParameterError("the toss quaternion is zero")
    parts[1] = parts[1] / norm
    return np.concatenate(parts)


@dataclasses.dataclass(frozen=True)
class SampledRollouts:
    """S rollouts over T = horizon samples + 1.

    ``states`` (S, T, n) scene layout; ``positions_m`` (S, T, 3) world; ``quat_wxyz``
    (S, T, 4) body to world; ``times_s`` (T,); ``initial_states`` (S, n);
    ``n_events``, ``n_energy_clamped``, ``n_normal_clamped`` (S,) per rollout;
    ``max_penetration_m`` (S,).
    """

    states: np.ndarray
    positions_m: np.ndarray
    quat_wxyz: np.ndarray
    times_s: np.ndarray
    initial_states: np.ndarray
    n_events: np.ndarray
    n_energy_clamped: np.ndarray
    n_normal_clamped: np.ndarray
    max_penetration_m: np.ndarray

    @property
    def final_positions_m(self) -> np.ndarray:
        """(S, 3) positions at the horizon, m world."""
        return self.positions_m[:, -1]


@dataclasses.dataclass(frozen=True)
class _RolloutRequest:
    n_slots: int
    states: np.ndarray
    seeds: list | None
    n_steps: int
    params: Any
    policy: Any
    guard: Any
    batch_size: int | None = 1


def _rollout_tasks(engine, slot: int, request: _RolloutRequest) -> list:
    """The slot's samples, alone or as copies in one world (``request.batch_size``; the
    same rollouts bit for bit, :func:`~residualsim.sim.batch.batched_rollouts`)."""
    from residualsim.sim.batch import batch_unsupported, batched_rollouts
    from residualsim.sim.rollout import residual_rollout

    mine = list(slot_particles(engine, slot, request))
    if request.batch_size == 1 or len(mine) < 2 or batch_unsupported(
            engine.scene, request.policy, request.guard):
        runs = [residual_rollout(engine, state, request.n_steps, request.policy, rng,
                                 request.guard) for _, state, rng in mine]
    else:
        runs = batched_rollouts(engine, np.array([state for _, state, _ in mine]),
                                request.n_steps, request.policy,
                                None if request.seeds is None else [rng for _, _, rng in mine],
                                request.guard, request.batch_size)
    return [(index, run.states, (run.n_events, run.n_energy_clamped, run.n_normal_clamped,
                                 run.max_penetration_m))
            for (index, _, _), run in zip(mine, runs)]


class StochasticSimulator:
    """Batched rollouts and beliefs of a :class:`~residualsim.residual.model.ResidualModel`.

    Parameters
    ----------
    model : ResidualModel or path
        A model directory (e.g. ``data/pretrained/cube-contactnets``) or a loaded model.
    n_workers : int
        Worker processes (each with its own PyBullet world), started once; 1 to
        :data:`~residualsim.parallel.MAX_WORKERS` (ParameterError otherwise).
    residual : bool
        False: the model's calibrated engine alone (the baseline a planner compares with).
    """

    def __init__(self, model, n_workers: int = 1, residual: bool = True) -> None:
        from residualsim.residual.model import ResidualModel
        from residualsim.sim.pool import engine_workers

        self.model = model if isinstance(model, ResidualModel) else \
            ResidualModel.load(Path(model))
        self.residual = bool(residual)
        self.settings = self.model.settings()
        self._policy = self.model.sampling_policy() if self.residual else None
        self._slots = list(range(check_workers(n_workers)))
        self._workers = engine_workers(self.model.layout, self._slots, len(self._slots),
                                       self.settings)

    def _check_start(self, initial, what: str = "initial state") -> None:
        """A hand-given start state or belief (every component mean) is checked as
        ``rollout --state`` checks one (:func:`~residualsim.sim.recordings.check_start_state`:
        finite, on the table and not into it or wholly under it, not too high or fast):
        ``rollout`` checked only the bounds, and ran a state 1 m under the table, or a belief
        with no check at all (found auditing issue 51). In the process's checking engine,
        kept open: well under a millisecond a check."""
        from residualsim.belief.propagation import _check_initial
        from residualsim.sim.recordings import check_start_state

        if isinstance(initial, GaussianMixtureBelief):
            _check_initial(self.model.layout, initial, name="initial belief")
        else:
            check_start_state(self.model.layout, np.asarray(initial, dtype=float), what)

    @property
    def dt_s(self) -> float:
        """Sample period of the rollouts (s): the model's recording period."""
        return self.model.dt_s

    def rollout(self, initial, horizon_s: float, samples: int = 64, seed: int = 0,
                mean: bool = False, state_noise: bool = False,
                batch_size: int | None = 1) -> SampledRollouts:
        """``samples`` rollouts over ``horizon_s`` seconds.

        ``initial`` a state (n,) — every sample starts there — or a
        :class:`~residualsim.belief.propagation.GaussianMixtureBelief`, from which the initial states
        are drawn (``default_rng([seed, 2**32 - 1])``). ``mean=True``: the policy's mean
        residual (deterministic given the initial state) instead of samples.
        ``state_noise=True`` with a state that comes from a recording: each sample's
        initial velocities are drawn from the model's
        :attr:`~residualsim.residual.model.ResidualModel.state_noise` (the tracker's noise, as
        ``predict --samples`` does; same stream as a belief's draws); ignored when the
        model has none. ``batch_size``: copies of the body a worker steps in one PyBullet
        world (None automatic; cube scenes, else one at a time): the same rollouts bit for
        bit; default 1, one at a time, as ``predict`` (whole rollouts gained no speed from
        batching there: train/README.md §10).
        """
        if int(samples) != samples or samples < 1:
            raise ParameterError(f"samples must be an integer >= 1, got {samples!r}")
        if not 0 < horizon_s <= MAX_HORIZON_S:
            raise ParameterError(f"horizon_s must be in (0, {MAX_HORIZON_S:g}] s, got "
                                 f"{horizon_s!r}")
        _check_seed(seed)
        batch_size = check_batch_size(batch_size)
        _check_rollout_memory(self.model.layout, int(samples),
                              max(1, int(round(horizon_s / self.dt_s))))
        states = self._initial_states(initial, int(samples), seed)
        noise = self.model.state_noise if state_noise else None
        if noise is not None and not isinstance(initial, GaussianMixtureBelief):
            rng = np.random.default_rng([int(seed), _INITIAL_STREAM])
            states = np.array([noise.perturb(state, rng) for state in states])
        n_steps = max(1, int(round(horizon_s / self.dt_s)))
        request = _RolloutRequest(
            n_slots=len(self._slots), states=states,
            seeds=None if mean else [[int(seed), s] for s in range(len(states))],
            n_steps=n_steps, params=self.model.params, policy=self._policy,
            guard=self.model.guard, batch_size=batch_size)
        rows = sorted((row for chunk in self._workers.map(_rollout_tasks, request)
                       for row in chunk), key=lambda row: row[0])
        trajectories = np.stack([row[1] for row in rows])
        stats = np.array([row[2] for row in rows], dtype=float)
        positions, quat, _, _ = _rigid_motion(self.model.layout, trajectories)
        return SampledRollouts(
            states=trajectories, positions_m=positions, quat_wxyz=quat,
            times_s=np.arange(n_steps + 1) * self.dt_s, initial_states=states,
            n_events=stats[:, 0].astype(int), n_energy_clamped=stats[:, 1].astype(int),
            n_normal_clamped=stats[:, 2].astype(int), max_penetration_m=stats[:, 3])

    def beliefs(self, initial, n_events: int = 3, n_particles: int = 1000, seed: int = 0,
                initial_std: np.ndarray | None = None, **options: Any) -> list[BeliefStep]:
        """Per-contact beliefs (:func:`~residualsim.belief.propagation.propagate_belief`) from a belief
        or from a state with ``initial_std`` (default :func:`default_initial_std`).
        ``options`` go to ``propagate_belief``: ``method="conjugate"`` for the conjugate step
        (:mod:`residualsim.belief.conjugate`), its ``max_components`` etc."""
        _check_seed(seed)
        if not isinstance(initial, GaussianMixtureBelief):
            self._check_start(initial)
            std = default_initial_std(self.model) if initial_std is None else initial_std
            initial = GaussianMixtureBelief.gaussian(np.asarray(initial, float), std,
                                                     planar=_planar(self.model.layout))
        return propagate_belief(self.model, initial, n_events=n_events,
                                n_particles=n_particles, seed=seed,
                                workers=self._workers, residual=self.residual, **options)

    def _initial_states(self, initial, samples: int, seed: int) -> np.ndarray:
        self._check_start(initial)
        if isinstance(initial, GaussianMixtureBelief):
            rng = np.random.default_rng([int(seed), _INITIAL_STREAM])
            return initial.sample(samples, rng)
        return np.tile(np.asarray(initial, dtype=float), (samples, 1))

    def close(self) -> None:
        self._workers.close()

    def __enter__(self) -> StochasticSimulator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_rollout_memory(scene: str, samples: int, n_steps: int) -> None:
    """A ParameterError naming ``samples`` when the rollouts' states alone (``samples`` x
    ``n_steps`` + 1, float64, with positions and quaternions) would not fit in the memory
    left: 10^9 samples raised numpy's bare MemoryError (found auditing issue 51)."""
    from residualsim.parallel import require_memory
    from residualsim.sim.scenes import make_scene

    require_memory(samples * (n_steps + 1) * (make_scene(scene).state_size + 7) * 8,
                   lambda gib: f"samples = {samples} x {n_steps + 1} steps need at least "
                               f"{gib:.3g} GiB", "lower samples or horizon_s")


def _planar(scene: str) -> bool:
    from residualsim.sim.scenes import make_scene

    return make_scene(scene).planar


def _rigid_motion(scene: str, trajectories: np.ndarray):
    """Positions and quaternions of (S, T, n) states."""
    from residualsim.sim.scenes import make_scene

    s, t, n = trajectories.shape
    parts = make_scene(scene).rigid_motion(trajectories.reshape(s * t, n))
    return tuple(np.asarray(p).reshape(s, t, -1) for p in parts)
