"""A SIAN-like baseline: a general learned residual that corrects the state at every step.

This is the "simulator-augmented" baseline of the learning-curve comparison: where the
project's residual (:mod:`residualsim.sim.rollout`, :mod:`residualsim.residual.policy`) corrects the
engine only at contact events, with an impulse in the contact frame, this one corrects the
whole state after *every* engine step, with a small feed-forward network trained by
gradient descent on one-step errors. It knows nothing about contacts.

(Over 600 lines on purpose: one baseline, read as a whole — its definition below, the
features, the one-step training and the rollout — off the product path; split, it would
scatter a comparison nobody extends.)

Model (cube scene, state = position m, quaternion w-x-y-z, linear velocity m/s, angular
velocity rad/s, all world frame; see :mod:`residualsim.sim.scenes.cube`)::

    ŝ_{k+1} = E(s_k)                        one step of the calibrated engine (dt_s)
    r_k     = f_θ(φ(s_k), φ(ŝ_{k+1}) − φ(s_k))
    s_{k+1} = ŝ_{k+1} ⊞ r_k

* ``φ(s)`` (16): height z (m), the rotation matrix body→world (9, row-major: a continuous
  orientation encoding), linear velocity (3, m/s, world) and angular velocity (3, rad/s,
  world). The horizontal position is left out (the table is uniform), so the model is
  invariant to horizontal translation. The second block is the engine's own one-step
  change of φ: it carries everything the engine predicts (a contact shows up as a jump
  of the velocities) and is better conditioned after standardisation than ``φ(ŝ)`` itself.
  Inputs are standardised with the training mean and standard deviation.
* ``r`` (12): a tangent-space correction, ``⊞`` adds Δposition (3, m, world), composes the
  rotation ``exp(Δθ) ⊗ q`` on the left (Δθ a world-frame rotation vector, rad), adds
  Δlinear velocity (3, m/s, world) and Δangular velocity (3, rad/s, world); the
  quaternion is renormalised. Outputs are scaled by the training targets' root mean
  square per component (not centred), and the output layer starts at zero, so an
  untrained model *is* the calibrated engine and early stopping starts from it.
* ``f_θ``: an MLP (default 2 × 64, tanh), torch, Adam with weight decay, minibatches;
  early stopping on the one-step loss of validation trajectories when given (the best
  epoch's weights are kept), else a fixed number of epochs. Everything is seeded: one seed
  gives bit-identical weights and rollouts (training runs on one torch thread inside a
  forked torch RNG, so the caller's global RNG and thread count are left alone).

Targets (teacher forcing): for each training trajectory and sample t < T − 1 the engine is
put in the recorded state s_t and stepped once; ``r_t = s_{t+1} ⊟ ŝ_{t+1}`` is the
correction that would have reproduced the recording (Δθ the rotation vector of
``q_rec ⊗ q_pred⁻¹``, shortest rotation).

**Warm stepping.** Bullet keeps a persistent contact manifold between steps (up to four
points accumulated over successive steps). :meth:`Engine.reset` clears it, so stepping from
a freshly reset state differs from a continuing simulation by up to several millimetres
(per-step velocity differences of ~5e-3 m/s seen on real tosses). Both the targets and the
rollout therefore walk along the trajectory and *set* each state without clearing the
cache (``scene.set_state``), exactly as a continuing simulation would: with a zero
correction the SIAN rollout reproduces :meth:`Engine.rollout` to ~1e-11, and on data
simulated by the engine itself the one-step targets are zero to round-off.

Model selection. With validation trajectories, ``selection="one_step"`` (default) keeps the
epoch of lowest validation one-step loss (classic early stopping); ``selection="rollout"``
keeps, among checkpoints at epochs 0 (the engine alone), 1, 2, 4, 8, ... and the best
one-step epoch, the one whose closed-loop validation rollouts have the lowest mean position
RMSE, so the result is never worse than the engine on the validation trajectories.

What was found on the real ContactNets tosses (148 Hz, the calibrated soft-contact engine of
``data/pretrained/cube-contactnets``, the first 20 tosses of the training split, early
stopping on 30 validation tosses). One-step training works as such (the validation one-step
loss falls to a quarter of the engine's), but the closed-loop rollouts are 4-5x *worse* than
the engine alone: mean position RMSE over the 63 validation tosses 0.073 to 0.094 m (seeds
0-2) against 0.0177 m, and ``selection="rollout"`` picks epoch 0. The cause: teacher forcing
resets a stiff contact engine to recorded states that are inconsistent with its geometry
(the real cube rests 1.1 mm lower than the simulated one, with small orientation noise), so
at rest the targets are dominated by cancelling the engine's reaction to that noise (RMS
0.16 m/s and 1.2 rad/s per step against 0.01 m/s, 0.06 rad/s in free flight). In closed loop
the learned corrections then fight the engine: the cube never settles (0.5-3 rad/s left at
the end) and the error grows steadily after the first bounce. Tried and not helping (on that
data): leaving out the engine-change inputs, correcting velocities only, strong weight
decay, GNS-style input-noise injection, DAgger-style refits on closed-loop windows of 4, 10
and full length (the only multi-step training available without a differentiable engine:
much worse, the pull-back targets grow with the drift), more data (150 tosses), and
shrinking the correction (3 % of it: within noise of the engine). On clean synthetic data
with a systematic engine error (friction off by 0.3 on sliding tosses) the same model cuts
the engine's rollout error several-fold (see ``tests/test_sian.py``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from residualsim.data.trajectory import Trajectory
from residualsim.sim.engine import Engine
from residualsim.errors import DataError, ParameterError, SceneError
from residualsim.sim.rotations import quat_relative_rotvec, rotate_by_rotvec
from residualsim.sim.scenes import EngineParams, EngineSettings, Scene, make_scene, parse_params
from residualsim.sim.scenes.base import quat_wxyz_to_matrix

__all__ = ["SianResidual", "one_step_targets", "state_features", "tangent_difference",
           "apply_tangent", "N_STATE_FEATURES", "N_INPUTS", "N_OUTPUTS", "MIN_TRAINING_PAIRS",
           "OUTPUT_RESOLUTION"]

#: Features of one state: z, rotation matrix (9), linear velocity (3), angular velocity (3).
N_STATE_FEATURES = 16
#: Network inputs: φ(s_t) and the engine's change φ(ŝ_{t+1}) − φ(s_t).
N_INPUTS = 2 * N_STATE_FEATURES
#: Tangent correction: Δposition, rotation vector, Δlinear velocity, Δangular velocity.
N_OUTPUTS = 12
#: Fewest one-step pairs a fit accepts.
MIN_TRAINING_PAIRS = 8
#: Output components whose training RMS is below this (m, rad, m/s or rad/s) stay zero.
OUTPUT_RESOLUTION = 1e-9
_ACTIVATIONS = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}


# --- state encodings ----------------------------------------------------------------------------
def state_features(states: np.ndarray) -> np.ndarray:
    """Per-state network features φ(s) of cube states.

    Parameters
    ----------
    states : ndarray of shape (N, 13) or (13,)
        Cube states: position m, quaternion w-x-y-z body→world, linear velocity m/s,
        angular velocity rad/s, all world frame.

    Returns
    -------
    ndarray of shape (N, 16) or (16,)
        Height z (m), rotation matrix body→world (9, row-major), linear velocity (3, m/s,
        world), angular velocity (3, rad/s, world).
    """
    s = np.asarray(states, dtype=np.float64)
    flat = np.atleast_2d(s)
    rotation = quat_wxyz_to_matrix(flat[:, 3:7]).reshape(-1, 9)
    out = np.concatenate([flat[:, 2:3], rotation, flat[:, 7:13]], axis=1)
    return out[0] if s.ndim == 1 else out


def _inputs(states: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """Network inputs (N, 32) from states s_t (N, 13) and engine predictions ŝ_{t+1}."""
    now = state_features(np.atleast_2d(states))
    return np.concatenate([now, state_features(np.atleast_2d(predicted)) - now], axis=1)


def tangent_difference(target: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """The correction r (N, 12) with ``predicted ⊞ r == target`` (see :func:`apply_tangent`).

    Parameters
    ----------
    target, predicted : ndarray of shape (N, 13) or (13,)
        Cube states (world frame, quaternions w-x-y-z).

    Returns
    -------
    ndarray of shape (N, 12) or (12,)
        Δposition (3, m), rotation vector of ``q_target ⊗ q_predicted⁻¹`` (3, rad, world
        frame, the shortest rotation), Δlinear velocity (3, m/s) and Δangular velocity
        (3, rad/s).
    """
    single = np.ndim(target) == 1 and np.ndim(predicted) == 1
    a = np.atleast_2d(np.asarray(target, dtype=np.float64))
    b = np.atleast_2d(np.asarray(predicted, dtype=np.float64))
    rotation = quat_relative_rotvec(a[:, 3:7], b[:, 3:7])
    out = np.concatenate([a[:, 0:3] - b[:, 0:3], rotation, a[:, 7:13] - b[:, 7:13]], axis=1)
    return out[0] if single else out


def apply_tangent(predicted: np.ndarray, residual: np.ndarray) -> np.ndarray:
    """``predicted ⊞ residual``: add a tangent correction to cube states.

    Parameters
    ----------
    predicted : ndarray of shape (N, 13) or (13,)
        Cube states (world frame, quaternions w-x-y-z).
    residual : ndarray of shape (N, 12) or (12,)
        Δposition m, rotation vector rad (world frame, composed on the left:
        ``q' = exp(Δθ) ⊗ q``), Δlinear velocity m/s, Δangular velocity rad/s.

    Returns
    -------
    ndarray like ``predicted``
        The corrected states, unit quaternions.
    """
    single = np.ndim(predicted) == 1
    s = np.atleast_2d(np.asarray(predicted, dtype=np.float64)).copy()
    r = np.atleast_2d(np.asarray(residual, dtype=np.float64))
    quat = rotate_by_rotvec(s[:, 3:7], r[:, 3:6])
    s[:, 0:3] += r[:, 0:3]
    s[:, 3:7] = quat
    s[:, 7:13] += r[:, 6:12]
    return s[0] if single else s


# --- data and engine helpers --------------------------------------------------------------------
def _check_scene(scene: str | Scene) -> Scene:
    layout = make_scene(scene)
    if layout.planar or layout.state_size != 13:
        raise SceneError(f"the SIAN baseline needs a free 3D body (13-number state like the "
                         f"cube), not scene {layout.name!r}")
    return layout


def _check_trajectories(trajectories: Mapping[str, Trajectory] | None, what: str
                        ) -> dict[str, Trajectory]:
    if trajectories is None or not isinstance(trajectories, Mapping):
        raise DataError(f"{what}: expected a mapping of id -> Trajectory, got "
                        f"{type(trajectories).__name__}")
    if not trajectories:
        raise DataError(f"{what}: no trajectories given")
    out = {}
    for traj_id, traj in trajectories.items():
        if not isinstance(traj, Trajectory):
            raise DataError(f"{what}: {traj_id!r} is a {type(traj).__name__}, not a Trajectory")
        if traj.planar:
            raise DataError(f"{what}: {traj_id!r} is a planar trajectory; the SIAN baseline "
                            "runs 3D (cube) trajectories")
        if traj.n_samples < 2:  # Trajectory refuses these; kept for duck-typed subclasses
            raise DataError(f"{what}: {traj_id!r} has {traj.n_samples} sample(s), need >= 2")
        out[str(traj_id)] = traj
    return out


def _period_s(traj: Trajectory) -> float:
    steps = np.diff(traj.times_s)
    if np.ptp(steps) > 1e-6 * steps.mean():
        raise DataError(f"{traj.source or traj.traj_id}: samples are not evenly spaced")
    return float(steps.mean())


def _settings(layout: Scene, trajectories: Mapping[str, Trajectory], substeps: int
              ) -> EngineSettings:
    """The scene's settings at the trajectories' common sample period and ``substeps``
    (as :func:`residualsim.sim.rollout.recording_settings`, for a Scene object too)."""
    if isinstance(substeps, bool) or int(substeps) != substeps or substeps < 1:
        raise ParameterError(f"substeps must be an integer >= 1, got {substeps!r}")
    periods = [_period_s(traj) for traj in trajectories.values()]
    if np.ptp(periods) > 1e-6 * np.mean(periods):
        raise DataError(f"trajectories have different rates ({1 / max(periods):.3f} to "
                        f"{1 / min(periods):.3f} Hz): fit them separately")
    return dataclasses.replace(layout.settings, dt_s=float(np.mean(periods)),
                               substeps=int(substeps))


def _teacher_pairs(engine: Engine, traj: Trajectory) -> tuple[np.ndarray, np.ndarray]:
    """Inputs (T-1, 32) and targets (T-1, 12) of one trajectory, warm stepping."""
    scene = engine.scene
    recorded = np.stack([scene.state_from_trajectory(traj, t) for t in range(traj.n_samples)])
    predicted = np.empty((traj.n_samples - 1, recorded.shape[1]))
    engine.reset(recorded[0])
    for t in range(traj.n_samples - 1):
        if t:
            scene.set_state(recorded[t])  # keep the contact manifold, like a continuing run
        engine.step(1)
        predicted[t] = engine.state()
    return (_inputs(recorded[:-1], predicted),
            tangent_difference(recorded[1:], predicted))


def one_step_targets(scene: str | Scene, trajectories: Mapping[str, Trajectory], params,
                     substeps: int) -> tuple[np.ndarray, np.ndarray]:
    """Teacher-forced one-step inputs and targets of the SIAN residual.

    For every trajectory and sample t < T − 1, the engine is put in the recorded state s_t
    (warm: the contact cache of the previous step is kept) and stepped once, giving ŝ_{t+1}.

    Parameters
    ----------
    scene : str or Scene
        A free 3D body scene (``"cube"``).
    trajectories : mapping of id -> Trajectory
        Recordings at one common, uniform sample period (the engine's step ``dt_s``).
    params : EngineParams, mapping, ``k=v`` string or None
        Engine contact parameters.
    substeps : int
        Internal engine steps per sample.

    Returns
    -------
    inputs : ndarray of shape (N, 32)
        φ(s_t) and φ(ŝ_{t+1}) − φ(s_t) (see :func:`state_features`), N = Σ (T − 1), in
        trajectory order then time order.
    targets : ndarray of shape (N, 12)
        ``s_{t+1} ⊟ ŝ_{t+1}`` (see :func:`tangent_difference`): m, rad, m/s, rad/s, world.

    Raises
    ------
    DataError
        No trajectories, a non-Trajectory value, planar data, uneven or mixed rates.
    ParameterError
        Bad ``substeps`` or engine parameters.
    """
    layout = _check_scene(scene)
    trajectories = _check_trajectories(trajectories, "one_step_targets")
    settings = _settings(layout, trajectories, substeps)
    with Engine(type(layout)(settings), parse_params(params), settings) as engine:
        pairs = [_teacher_pairs(engine, traj) for traj in trajectories.values()]
    return (np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs]))


def _check_positive_int(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ParameterError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_nonnegative(name: str, value: Any, positive: bool = False) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        raise ParameterError(f"{name} must be finite and {'> 0' if positive else '>= 0'}, "
                             f"got {value!r}")
    return number


# --- the model ----------------------------------------------------------------------------------
class SianResidual:
    """A per-step learned state correction on top of the calibrated engine (SIAN-like).

    Parameters
    ----------
    scene : str
        A free 3D body scene; ``"cube"``.
    hidden : sequence of int
        Hidden layer widths of the MLP.
    activation : {"tanh", "relu"}
        Hidden activation.
    learning_rate : float
        Adam step size.
    weight_decay : float
        Adam's L2 weight decay.
    batch_size : int
        Minibatch size (one-step pairs).
    max_epochs : int
        Epochs without validation data; the cap with it.
    patience : int
        With validation data: stop after this many epochs without a lower validation
        one-step loss.
    selection : {"one_step", "rollout"}
        Which weights :meth:`fit` keeps when validation data are given. ``"one_step"``
        (default): the epoch with the lowest validation one-step loss (classic early
        stopping). ``"rollout"``: among checkpoints at epochs 0 (the untrained network, i.e.
        the engine alone), 1, 2, 4, 8, ... and the best one-step epoch, the one whose
        closed-loop rollouts of the validation trajectories have the lowest mean position
        RMSE (each checkpoint costs one rollout of every validation trajectory).

    Attributes (after :meth:`fit`)
    -------------------------------
    params_ : EngineParams
    settings_ : EngineSettings
        The engine's settings (``dt_s`` the training recordings' period).
    history_ : dict
        ``train_loss`` and ``validation_loss`` per epoch (mean squared scaled one-step
        error; validation empty without validation data), ``best_epoch`` (the epoch whose
        weights were kept; 0 = untrained), ``rollout_rmse_m`` (epoch -> mean validation
        rollout position RMSE, m; ``selection="rollout"`` only), ``n_pairs``,
        ``n_validation_pairs``.

    Notes
    -----
    One PyBullet engine per instance, built lazily at the first fit or rollout; call
    :meth:`close` (or use the instance as a context manager) to free it. Not thread-safe.
    """

    def __init__(self, scene: str = "cube", *, hidden: Sequence[int] = (64, 64),
                 activation: str = "tanh", learning_rate: float = 1e-3,
                 weight_decay: float = 1e-4, batch_size: int = 128, max_epochs: int = 300,
                 patience: int = 25, selection: str = "one_step") -> None:
        self.layout = _check_scene(scene)
        self.scene = self.layout.name
        if isinstance(hidden, (str, bytes)) or not isinstance(hidden, Sequence) or not hidden:
            raise ParameterError(f"hidden must be a non-empty sequence of widths, "
                                 f"got {hidden!r}")
        self.hidden = tuple(_check_positive_int("hidden width", h) for h in hidden)
        if activation not in _ACTIVATIONS:
            raise ParameterError(f"activation must be one of {sorted(_ACTIVATIONS)}, "
                                 f"got {activation!r}")
        self.activation = activation
        self.learning_rate = _check_nonnegative("learning_rate", learning_rate, positive=True)
        self.weight_decay = _check_nonnegative("weight_decay", weight_decay)
        self.batch_size = _check_positive_int("batch_size", batch_size)
        self.max_epochs = _check_positive_int("max_epochs", max_epochs)
        self.patience = _check_positive_int("patience", patience)
        if selection not in ("one_step", "rollout"):
            raise ParameterError(f"selection must be 'one_step' or 'rollout', got {selection!r}")
        self.selection = selection
        self.params_: EngineParams | None = None
        self.settings_: EngineSettings | None = None
        self.history_: dict[str, Any] = {}
        self._engine: Engine | None = None
        self._engine_key: tuple | None = None
        self._layers: list[tuple[np.ndarray, np.ndarray]] = []
        self._x_mean = self._x_scale = self._y_scale = None

    # --- engine ---------------------------------------------------------------------------
    def _get_engine(self) -> Engine:
        key = (self.params_, self.settings_)
        if self._engine is None or self._engine.client < 0 or self._engine_key != key:
            self.close()
            self._engine = Engine(type(self.layout)(self.settings_), self.params_,
                                  self.settings_)
            self._engine_key = key
        return self._engine

    def close(self) -> None:
        """Disconnect the engine (a later call that needs it builds a new one)."""
        if self._engine is not None:
            self._engine.close()
            self._engine = None

    def __enter__(self) -> SianResidual:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    # --- network --------------------------------------------------------------------------
    def _network(self) -> torch.nn.Sequential:
        layers: list[torch.nn.Module] = []
        width = N_INPUTS
        for size in self.hidden:
            layers += [torch.nn.Linear(width, size), _ACTIVATIONS[self.activation]()]
            width = size
        last = torch.nn.Linear(width, N_OUTPUTS)
        torch.nn.init.zeros_(last.weight)  # an untrained network is the engine alone
        torch.nn.init.zeros_(last.bias)
        layers.append(last)
        return torch.nn.Sequential(*layers).double()

    @property
    def fitted(self) -> bool:
        """True once :meth:`fit` has run."""
        return bool(self._layers)

    def predict_residual(self, inputs: np.ndarray) -> np.ndarray:
        """The correction r (N, 12) (m, rad, m/s, rad/s, world) for network inputs (N, 32)
        as :func:`one_step_targets` builds them."""
        self._require_fitted()
        x = (np.atleast_2d(np.asarray(inputs, dtype=np.float64)) - self._x_mean) / self._x_scale
        for weight, bias in self._layers[:-1]:
            x = x @ weight + bias
            x = np.tanh(x) if self.activation == "tanh" else np.maximum(x, 0.0)
        weight, bias = self._layers[-1]
        return (x @ weight + bias) * self._y_scale

    def _require_fitted(self) -> None:
        if not self._layers:
            raise ParameterError("this SianResidual has no trained network: call fit first")

    # --- training -------------------------------------------------------------------------
    def fit(self, trajectories: Mapping[str, Trajectory], *, params, substeps: int,
            validation: Mapping[str, Trajectory] | None = None, seed: int = 0
            ) -> SianResidual:
        """Train the correction network on teacher-forced one-step errors of the engine.

        Parameters
        ----------
        trajectories : mapping of id -> Trajectory
            Training recordings (3D, one common uniform sample period = the engine step).
        params : EngineParams, mapping, ``k=v`` string or None
            The (calibrated) engine's contact parameters.
        substeps : int
            Internal engine steps per sample.
        validation : mapping of id -> Trajectory, optional
            Early-stopping recordings (same rate); without them ``max_epochs`` epochs run.
        seed : int
            Seeds the weights and the minibatch order: one seed, one result.

        Returns
        -------
        SianResidual
            ``self``.

        Raises
        ------
        DataError
            No trajectories, fewer than :data:`MIN_TRAINING_PAIRS` one-step pairs, planar
            or unevenly sampled data, validation at another rate.
        ParameterError
            Bad ``substeps``, ``seed`` or engine parameters; ``selection="rollout"``
            without validation data.
        """
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise ParameterError(f"seed must be an int, got {seed!r}")
        train = _check_trajectories(trajectories, "fit")
        valid = None if validation is None else _check_trajectories(validation,
                                                                    "fit validation")
        if self.selection == "rollout" and valid is None:
            raise ParameterError("selection='rollout' needs validation trajectories")
        settings = _settings(self.layout, train, substeps)
        if valid is not None:
            period = _settings(self.layout, valid, substeps).dt_s
            if abs(period - settings.dt_s) > 1e-6 * settings.dt_s:
                raise DataError(f"fit validation: sample period {period:.6g} s differs from "
                                f"the training data's {settings.dt_s:.6g} s")
        n_pairs = sum(t.n_samples - 1 for t in train.values())
        if n_pairs < MIN_TRAINING_PAIRS:
            raise DataError(f"fit: the trajectories are too short: {n_pairs} one-step pairs, "
                            f"need >= {MIN_TRAINING_PAIRS}")
        self.params_, self.settings_ = parse_params(params), settings
        self._layers = []
        engine = self._get_engine()
        x, y = self._pairs(engine, train.values())
        xv, yv = (None, None) if valid is None else self._pairs(engine, valid.values())
        # Standardise inputs (mean, std); scale outputs by their RMS, not centred, so that
        # a zero network output is the engine alone. A component the training data never
        # needed corrected (RMS below OUTPUT_RESOLUTION) is pinned to zero: Adam's steps do
        # not shrink with the gradient, so it would otherwise learn a jitter of the order
        # of the learning rate.
        self._x_mean = x.mean(axis=0)
        spread = x.std(axis=0)
        self._x_scale = np.where(spread > 1e-9, spread, 1.0)
        rms = np.sqrt(np.mean(y**2, axis=0))
        self._y_scale = np.where(rms > OUTPUT_RESOLUTION, rms, 0.0)

        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # tiny network: one thread is fastest and deterministic
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(seed))
                net = self._network()
                generator = torch.Generator().manual_seed(int(seed))
                history = self._train(net, x, y, xv, yv, generator, valid)
        finally:
            torch.set_num_threads(threads)
        history.update(n_pairs=int(len(x)), n_validation_pairs=0 if xv is None else len(xv))
        self.history_ = history
        return self

    def _pairs(self, engine: Engine, trajectories) -> tuple[np.ndarray, np.ndarray]:
        pairs = [_teacher_pairs(engine, traj) for traj in trajectories]
        return np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])

    def _validation_rmse(self, net: torch.nn.Sequential, valid: Mapping[str, Trajectory]
                         ) -> float:
        self._store(net)
        errors = []
        for traj in valid.values():
            positions = self.rollout_states(traj)[:, 0:3]
            errors.append(np.sqrt(np.mean(np.sum((positions - traj.positions_m) ** 2, 1))))
        return float(np.mean(errors))

    def _train(self, net: torch.nn.Sequential, x: np.ndarray, y: np.ndarray,
               xv: np.ndarray | None, yv: np.ndarray | None, generator: torch.Generator,
               valid: Mapping[str, Trajectory] | None) -> dict[str, Any]:
        xs = torch.as_tensor((x - self._x_mean) / self._x_scale)
        ys = torch.as_tensor(y / np.where(self._y_scale > 0, self._y_scale, 1.0))
        optimiser = torch.optim.Adam(net.parameters(), lr=self.learning_rate,
                                     weight_decay=self.weight_decay)

        def snapshot() -> list[torch.Tensor]:
            return [p.detach().clone() for p in net.parameters()]

        def validation_loss() -> float:
            with torch.no_grad():
                return float(torch.mean((net(xvs) - yvs) ** 2))

        train_loss: list[float] = []
        valid_loss: list[float] = []
        rollout_rmse: dict[int, float] = {}
        by_rollout = self.selection == "rollout"
        if xv is not None:
            xvs = torch.as_tensor((xv - self._x_mean) / self._x_scale)
            yvs = torch.as_tensor(yv / np.where(self._y_scale > 0, self._y_scale, 1.0))
            best = (validation_loss(), 0, snapshot())
            if by_rollout:
                rollout_rmse[0] = self._validation_rmse(net, valid)
                chosen = (rollout_rmse[0], 0, snapshot())
        for epoch in range(1, self.max_epochs + 1):
            order = torch.randperm(len(xs), generator=generator)
            total = 0.0
            for start in range(0, len(xs), self.batch_size):
                batch = order[start:start + self.batch_size]
                loss = torch.mean((net(xs[batch]) - ys[batch]) ** 2)
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
                total += loss.item() * len(batch)
            train_loss.append(total / len(xs))
            if xv is None:
                continue
            valid_loss.append(validation_loss())
            if valid_loss[-1] < best[0]:
                best = (valid_loss[-1], epoch, snapshot())
            if by_rollout and epoch & (epoch - 1) == 0:  # powers of two
                rollout_rmse[epoch] = self._validation_rmse(net, valid)
                if rollout_rmse[epoch] < chosen[0]:
                    chosen = (rollout_rmse[epoch], epoch, snapshot())
            if epoch - best[1] >= self.patience:
                break
        kept = len(train_loss)
        if xv is not None:
            if by_rollout and best[1] not in rollout_rmse:
                with torch.no_grad():
                    for parameter, value in zip(net.parameters(), best[2]):
                        parameter.copy_(value)
                rollout_rmse[best[1]] = self._validation_rmse(net, valid)
                if rollout_rmse[best[1]] < chosen[0]:
                    chosen = (rollout_rmse[best[1]], best[1], best[2])
            _, kept, weights = chosen if by_rollout else best
            with torch.no_grad():
                for parameter, value in zip(net.parameters(), weights):
                    parameter.copy_(value)
        self._store(net)
        return {"train_loss": train_loss, "validation_loss": valid_loss,
                "best_epoch": kept, "rollout_rmse_m": dict(sorted(rollout_rmse.items()))}

    def _store(self, net: torch.nn.Sequential) -> None:
        linears = [m for m in net if isinstance(m, torch.nn.Linear)]
        self._layers = [(m.weight.detach().numpy().T.copy(), m.bias.detach().numpy().copy())
                        for m in linears]

    # --- prediction -----------------------------------------------------------------------
    def rollout_states(self, trajectory: Trajectory) -> np.ndarray:
        """Closed-loop states (T, 13) from the recording's first sample over its length.

        Each step the engine advances the current state by one period (warm: keeping its
        contact cache, as a continuing simulation), then the network's correction is added
        (:func:`apply_tangent`). Row k is the state at the recording's time stamp k.
        """
        self._require_fitted()
        (traj,) = _check_trajectories({getattr(trajectory, "traj_id", "?"): trajectory},
                                      "rollout").values()
        period = _period_s(traj)
        if abs(period - self.settings_.dt_s) > 1e-6 * self.settings_.dt_s:
            raise DataError(f"{traj.source or traj.traj_id}: sample period {period:.6g} s, "
                            f"but the model was fitted at {self.settings_.dt_s:.6g} s")
        engine = self._get_engine()
        scene = engine.scene
        state = scene.state_from_trajectory(traj, 0)
        states = np.empty((traj.n_samples, len(state)))
        states[0] = state
        engine.reset(state)
        for k in range(1, traj.n_samples):
            if k > 1:
                scene.set_state(state)
            engine.step(1)
            predicted = engine.state()
            state = apply_tangent(predicted, self.predict_residual(_inputs(state, predicted))[0])
            states[k] = state
        return states

    def rollout(self, trajectory: Trajectory) -> tuple[np.ndarray, np.ndarray]:
        """Predict one trajectory from its first recorded sample over its recorded length.

        Returns
        -------
        positions : ndarray of shape (T, 3)
            Centre-of-mass positions, m, world frame, on the recording's time stamps.
        quats : ndarray of shape (T, 4)
            Orientations body→world, unit quaternions w-x-y-z.

        Raises
        ------
        ParameterError
            The model was not fitted.
        DataError
            Not a 3D Trajectory, or sampled at another period than the training data.
        """
        states = self.rollout_states(trajectory)
        return states[:, 0:3].copy(), states[:, 3:7].copy()

    def predict(self, trajectories: Mapping[str, Trajectory]
                ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """:meth:`rollout` of every trajectory: id -> (positions (T, 3) m world,
        quats (T, 4) w-x-y-z), in the given order."""
        self._require_fitted()
        return {traj_id: self.rollout(traj)
                for traj_id, traj in _check_trajectories(trajectories, "predict").items()}
