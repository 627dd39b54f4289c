"""Trajectory likelihoods of engine parameters, evaluated in persistent worker processes.

The error of one recording under parameters θ is its mean squared configuration error

    e_i(θ) = mean_t ( ‖p_sim(t) − p_rec(t)‖² + r_g² · angle(R_sim(t), R_rec(t))² )   [m²]

over its samples after the first (the shared initial state), with p the body position
(metres, world frame), angle the geodesic rotation angle (radians) and r_g the body's radius
of gyration (metres), so that angles weigh like lengths: in the plane this is the error of
q = (x, y, r_g θ). For planar *impacts* (one contact each) it is the squared error of the
post-contact velocity (dx, dy, r_g dθ) [m²/s²].

Errors along one recording are strongly correlated (a wrong bounce shifts everything after
it), so each recording counts as *one* observation. With the noise scale σ given (a
tolerance: metres, or m/s for impacts),

    log L(θ) = −Σ_i e_i(θ) / (2σ²)

(the residual-learning paper's likelihood from the mean squared error). ``rotation_weight``
w (default 1) multiplies the angle term, r_g² → w·r_g², for a calibration that should
favour the rotation over the position (train/README.md §18). Estimated (the
default), each recording i gets its own unknown scale σ_i, integrated out under the
scale-free prior p(σ_i) ∝ 1/σ_i, which gives

    log L(θ) = −½ Σ_i ν_i log e_i(θ)

(both up to a constant), ν_i the number of effectively independent residuals recording i
holds: 1 (each recording one observation) until :meth:`~_Likelihood.set_reference` measures
it from the recording's residuals at a pilot fit (:mod:`residualsim.sysid.weighting`; fixed
afterwards, so MH samples one fixed target). ``calibrate --method mh`` does that by
default (``--weighting effective``): with ν_i = 1 simulation-based calibration found the
posterior far too wide (train/README.md §20). Why per recording: contact is chaotic, and from a noisy initial
state a few recordings end up centimetres off whatever θ is, while most fit to millimetres.
A pooled σ lets those few dominate and, on synthetic tosses with 1 mm / 5 mrad noise, put
the true parameters 25 log-units below the mode (a posterior narrower than the real
uncertainty); per-recording scales weigh every recording's *relative* fit equally and had
the truth at the mode. A rollout that fails (NaN) has e_i = inf and log L = −inf.

**Uncertain initial states** (``initial_draws`` = K > 0). A recording of poses only has its
initial state *fitted* to its free flight (:mod:`residualsim.sim.recordings`), with a
Gaussian uncertainty from that fit. Contact amplifies it: on synthetic hinge tosses with
0.5 mm / 0.5° noise, neighbouring θ 0.0025 apart differed by up to 5 log-units, MH mixed
badly (R-hat 1.1) and its 90 % interval missed the true restitution. With K > 0 each such
recording's likelihood is averaged over K initial states x_k drawn once from that
uncertainty (seeded; the same draws for every θ, so log L stays a deterministic function
of θ and MH is exact for it):

    L_i(θ) = (1/K) Σ_k e_ik(θ)^(−ν_i/2)   (σ_i integrated out)   or
    L_i(θ) = (1/K) Σ_k exp(−e_ik(θ) / 2σ²)   (σ given),

a Monte Carlo estimate of ∫ p(recording | θ, x0) p(x0) dx0. :meth:`errors` returns the
*effective* error of each recording, the e with the same likelihood (the power mean of
order −ν_i/2 of the e_ik, or its σ-given counterpart), so everything downstream is unchanged.
Recordings whose velocities were recorded (no fitted state) are rolled out once. It costs
K rollouts per such recording.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from residualsim.data.impacts import PlanarImpacts
from residualsim.data.trajectory import Trajectory
from residualsim.sim.engine import Engine
from residualsim.sim.recordings import fit_starts, initial_state_draws, rollout_residuals
from residualsim.sim.rotations import geodesic_angle
from residualsim.errors import DataError, ParameterError
from residualsim.sim.lone_compiled import pose_rollout
from residualsim.sim.rollout import impact_settings, recording_settings, simulate_impact
from residualsim.sim.scenes import EngineParams, EngineSettings, make_scene
from residualsim.sim.scenes.params import body_of
from residualsim.sim.pool import engine_workers

__all__ = ["TrajectoryLikelihood", "ImpactLikelihood", "StagedLikelihood", "ERROR_FLOOR"]

#: Smallest per-recording error used in the log (a 10 µm fit counts as perfect), m² or m²/s².
ERROR_FLOOR = 1e-10


def trajectory_errors(engine: Engine, item: tuple, batch: Sequence[EngineParams]) -> np.ndarray:
    """Worker function: e_i (see module doc) of one recording for each parameter set.

    ``item`` is ``(initial_state, positions (T-1, 3), quat_wxyz (T-1, 4), r_g)`` with the
    recorded poses after the first sample; an object with joints adds ``(joints (T-1, n),
    scale (n,))``, the recorded joint positions and the length (m per rad, or 1 for a
    prismatic joint) that makes each joint's error a distance.
    """
    initial_state, positions, quat, radius, *joint_item = item
    errors = np.empty(len(batch))
    for k, params in enumerate(batch):
        if engine.params != params:
            engine.set_params(params)
        if joint_item:
            states = engine.rollout(initial_state, len(positions), detect_contacts=False).states
            sim_positions, sim_quat, _, _ = engine.scene.rigid_motion(states)
        else:
            sim_positions, sim_quat = pose_rollout(engine, initial_state, len(positions))
        squared = np.sum((sim_positions[1:] - positions) ** 2, axis=1)
        squared += (radius * geodesic_angle(sim_quat[1:], quat)) ** 2
        if joint_item:
            joints, scale = joint_item
            sim_joints = engine.scene.joint_positions(states)[1:]
            squared += np.sum(((sim_joints - joints) * scale) ** 2, axis=1)
        error = float(np.mean(squared))
        errors[k] = error if math.isfinite(error) else math.inf
    return errors


def trajectory_residuals(engine: Engine, item: tuple, batch: Sequence[EngineParams]
                         ) -> np.ndarray:
    """Worker function: the residual vector of one recording for each parameter set, shape
    (len(batch), (T-1) * (6 + n_joints)): per sample the position error (3, m, world), r_g
    times the rotation vector from recorded to simulated orientation (3, m, world; its norm
    is r_g·angle, and signed components give Gauss-Newton a smooth model where the angle
    has a kink at zero) and each joint's error times its scale (m); the squares of one row
    sum to (T-1)·e_i (see :func:`trajectory_errors`). A failed rollout gives a row of 1 m."""
    initial_state, *recorded = item
    rows = []
    for params in batch:
        if engine.params != params:
            engine.set_params(params)
        rows.append(rollout_residuals(engine, initial_state, *recorded))
    return np.array(rows)


def impact_errors(engine: Engine, item: tuple, batch: Sequence[EngineParams]) -> np.ndarray:
    """Worker function: squared post-velocity error of one impact for each parameter set.

    ``item`` is ``(row, pre_state (6,), post_velocity (3,), r_g)``.
    """
    row, pre_state, post_velocity, radius = item
    scale = np.array([1.0, 1.0, radius])
    errors = np.empty(len(batch))
    for k, params in enumerate(batch):
        velocity = simulate_impact(engine, (row, pre_state), params)
        error = float(np.sum(((velocity - post_velocity) * scale) ** 2))
        errors[k] = error if math.isfinite(error) else math.inf
    return errors


def _several_bodies(batch: Sequence[EngineParams]) -> bool:
    """Whether the parameter sets carry different bodies (an engine reloads its object for
    each: evaluated one set at a time, a worker reloads once per set, not once per item)."""
    return len(batch) > 1 and len({body_of(params) for params in batch}) > 1


class _Likelihood:
    """Shared part: worker pool, noise model, log-likelihood from per-item errors."""

    #: Configuration dimension d of one item (for the reported noise estimate).
    dims: int = 1
    _function = staticmethod(trajectory_errors)

    def __init__(self, scene: str, items: list, settings: EngineSettings,
                 noise: float | None, n_workers: int, ids: list[str],
                 group_sizes: Sequence[int] | None = None) -> None:
        if not items:
            raise DataError("no recordings to calibrate on")
        if noise is not None and not (math.isfinite(noise) and noise > 0):
            raise ParameterError(f"noise scale must be a positive number, got {noise}")
        self.scene = scene
        self.settings = settings
        self.noise = noise
        self.ids = ids
        self.n_items = len(ids)
        #: Rollouts per recording (initial-state draws, see the module doc).
        self.group_sizes = np.ones(len(items), int) if group_sizes is None else \
            np.asarray(group_sizes, dtype=int)
        self._pool = engine_workers(scene, items, n_workers, settings)
        self.n_workers = self._pool.n_workers
        #: Number of rollouts run so far (items × parameter sets).
        self.n_rollouts = 0
        #: Weight ν_i of each recording (effective independent residuals; 1 until
        #: :meth:`set_reference`), and the parameters it was measured at.
        self.nu = np.ones(self.n_items)
        self.reference: EngineParams | None = None

    def errors(self, batch: Sequence[EngineParams]) -> np.ndarray:
        """Per-item errors e_i, shape (len(batch), n_items), in the items' order (effective
        errors over initial-state draws, see the module doc)."""
        batch = list(batch)
        if _several_bodies(batch):  # one at a time: each worker reloads a body once, not per item
            return np.concatenate([self.errors([params]) for params in batch])
        per_item = self._pool.map(self._function, batch)
        n_rollouts = int(self.group_sizes.sum())
        self.n_rollouts += len(batch) * n_rollouts
        raw = np.asarray(per_item, dtype=np.float64).reshape(n_rollouts, len(batch)).T
        if n_rollouts == self.n_items:
            return raw
        starts = np.concatenate([[0], np.cumsum(self.group_sizes)[:-1]])
        return np.stack([self._effective_error(raw[:, a:a + k], nu)
                         for a, k, nu in zip(starts, self.group_sizes, self.nu)], axis=1)

    def residuals(self, batch: Sequence[EngineParams]) -> np.ndarray:
        """Per-sample residuals of every rollout (trajectories only), shape (len(batch), m):
        each item's :func:`trajectory_residuals` side by side, every initial-state draw
        of a recording included."""
        if self._function is not trajectory_errors:
            raise ParameterError("per-sample residuals are for trajectories")
        batch = list(batch)
        if _several_bodies(batch):
            return np.concatenate([self.residuals([params]) for params in batch])
        per_item = self._pool.map(trajectory_residuals, batch)
        self.n_rollouts += len(batch) * int(self.group_sizes.sum())
        return np.concatenate([np.asarray(rows, dtype=np.float64) for rows in per_item],
                              axis=1)

    def set_reference(self, params: EngineParams) -> np.ndarray:
        """Fix each recording's weight ν_i (:mod:`residualsim.sysid.weighting`) from its
        residuals under ``params`` (a pilot fit), the mean over its initial-state draws;
        returns ν (n_items,). Only with the noise scale estimated (the default); see also
        :meth:`scale_weights`."""
        from residualsim.sysid.weighting import effective_count, signed_residuals

        if self._function is not trajectory_errors:
            raise ParameterError("effective residual weights are for trajectories")
        if self.noise is not None:
            raise ParameterError("effective residual weights need the noise scale estimated "
                                 "(no --noise)")
        rows = [r[0] for r in self._pool.map(signed_residuals, [params])]
        self.n_rollouts += int(self.group_sizes.sum())
        counts = np.array([effective_count(r) for r in rows])
        starts = np.concatenate([[0], np.cumsum(self.group_sizes)[:-1]])
        self.nu = np.array([counts[a:a + k].mean() for a, k in zip(starts, self.group_sizes)])
        self.reference = params
        return self.nu

    def reset_weights(self) -> None:
        """Every ν_i back to 1 (each recording one observation, as before
        :meth:`set_reference`)."""
        self.nu, self.reference = np.ones(self.n_items), None

    def scale_weights(self, factor: float) -> None:
        """Multiply every ν_i by ``factor`` > 0 (the magnitude adjustment of
        :func:`~residualsim.sysid.weighting.magnitude_adjustment`)."""
        if not (math.isfinite(factor) and factor > 0):
            raise ParameterError(f"weight factor must be a number > 0, got {factor}")
        self.nu = self.nu * float(factor)

    def _effective_error(self, draws: np.ndarray, nu: float = 1.0) -> np.ndarray:
        """The one error (len(batch),) with the likelihood of the mean over ``draws``
        (len(batch), K) of each draw's likelihood (see the module doc); ``nu``: the
        recording's weight ν_i."""
        if draws.shape[1] == 1:
            return draws[:, 0]
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            if self.noise is None:  # power mean of order -ν/2, in logs (ν may be large)
                logs = -0.5 * nu * np.log(np.maximum(draws, ERROR_FLOOR))
                top = np.max(logs, axis=1, keepdims=True)
                log_mean = top[:, 0] + np.log(np.mean(np.exp(logs - top), axis=1))
                return np.exp(-2.0 / nu * log_mean)
            two_var = 2.0 * self.noise ** 2
            low = np.min(draws, axis=1, keepdims=True)
            mean = np.mean(np.exp(-(draws - low) / two_var), axis=1)
            return low[:, 0] - two_var * np.log(mean)

    def log_likelihood_from_errors(self, errors: np.ndarray) -> np.ndarray:
        """log L (up to a constant) from errors (..., n_items); see the module doc."""
        errors = np.asarray(errors, dtype=np.float64)
        total = np.sum(errors, axis=-1)
        if self.noise is not None:
            value = -total / (2.0 * self.noise**2)
        else:
            with np.errstate(invalid="ignore", over="ignore"):
                value = -0.5 * np.sum(self.nu * np.log(np.maximum(errors, ERROR_FLOOR)),
                                      axis=-1)
        return np.where(np.isfinite(total), value, -np.inf)

    def __call__(self, batch: Sequence[EngineParams]) -> np.ndarray:
        """log L for each parameter set in ``batch``, shape (len(batch),)."""
        return self.log_likelihood_from_errors(self.errors(batch))

    def noise_estimate(self, errors: np.ndarray) -> float:
        """σ̂ = sqrt(Σ e_i / (n d)) for one row of errors: the noise scale they imply."""
        return float(np.sqrt(np.sum(errors) / (self.n_items * self.dims)))

    @property
    def restarts(self) -> int:
        """Dead workers replaced so far (their rollouts were re-run)."""
        return self._pool.restarts

    def close(self) -> None:
        self._pool.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TrajectoryLikelihood(_Likelihood):
    """Likelihood of engine parameters given recorded trajectories (any scene).

    Parameters
    ----------
    scene : str
        Scene name, e.g. ``"cube"``.
    trajectories : mapping of id -> Trajectory
        Recordings; their common sample period is the engine step.
    substeps : int, optional
        Internal steps per sample (default: the scene's).
    noise_m : float, optional
        Observation noise scale σ in metres; default: estimated (integrated out).
    n_workers : int
        Worker processes, each holding a contiguous share of the recordings.
    initial_draws : int
        K initial states drawn per recording whose initial state was fitted (0: the fitted
        state only); see the module doc.
    seed : int
        Seed of those draws (recording i uses the stream ``[seed, i]``).
    rotation_weight : float
        w > 0 multiplying the squared-angle term of e_i (r_g² → w·r_g²); joint errors keep
        their own scale.
    horizons : sequence of int, optional
        Per recording, compare only this many samples after the first (at least 1): e.g.
        the free flight before the first contact (``calibrate --method lsq``'s body stage).
    fit_recorded : bool
        Also treat the first pose of a recording with recorded velocities as uncertain: fit
        it (pose and joint positions, velocities kept) to the free flight as
        :func:`~residualsim.sim.recordings.fit_initial_state` does, and average over its
        uncertainty with the ``initial_draws`` (see the module doc).
    """

    _function = staticmethod(trajectory_errors)

    def __init__(self, scene: str, trajectories: Mapping[str, Trajectory],
                 substeps: int | None = None, noise_m: float | None = None,
                 n_workers: int = 1, initial_draws: int = 0, seed: int = 0,
                 rotation_weight: float = 1.0, horizons: Sequence[int] | None = None,
                 fit_recorded: bool = False, start_params: EngineParams | None = None) -> None:
        if horizons is not None and len(horizons) != len(trajectories):
            raise ParameterError(f"{len(horizons)} horizons for {len(trajectories)} recordings")
        if int(initial_draws) != initial_draws or initial_draws < 0:
            raise ParameterError(f"initial_draws must be an integer >= 0, got {initial_draws}")
        if not (math.isfinite(rotation_weight) and rotation_weight > 0):
            raise ParameterError(f"rotation_weight must be a number > 0, got {rotation_weight}")
        self.rotation_weight = float(rotation_weight)
        layout = make_scene(scene)
        self.dims = 3 if layout.planar else 4
        settings = recording_settings(scene, trajectories, substeps)
        self._recorded = dict(trajectories)
        if fit_recorded or start_params is not None:  # pose-only ones: again at its body
            trajectories = fit_starts(scene, trajectories, settings, start_params, n_workers,
                                      estimated=start_params is not None,
                                      recorded=fit_recorded)
        self.fit_recorded = bool(fit_recorded)
        self._options = {"substeps": settings.substeps, "noise_m": noise_m,
                         "n_workers": n_workers, "initial_draws": initial_draws, "seed": seed,
                         "rotation_weight": rotation_weight, "fit_recorded": fit_recorded,
                         "start_params": start_params}
        #: The recordings as rolled out (first poses fitted with ``fit_recorded``).
        self.trajectories = dict(trajectories)
        radius = layout.radius_of_gyration_m
        n_joints = getattr(layout, "n_joints", 0)
        if n_joints:
            self.dims += n_joints
            scale = np.array([radius if kind == "revolute" else 1.0
                              for kind in layout.info.joint_types])
        items, sizes = [], []
        for index, traj in enumerate(trajectories.values()):
            if traj.n_samples < 2:
                raise DataError(f"{traj.source or traj.traj_id}: needs at least 2 samples")
            states = np.array([layout.state_from_trajectory(traj, i)
                               for i in range(traj.n_samples)])
            if horizons is not None:  # compare the first samples only (e.g. free flight)
                states = states[:max(2, int(horizons[index]) + 1)]
            positions, quat, _, _ = layout.rigid_motion(states)
            starts = [states[0]]
            if initial_draws and "initial_state_covariance" in traj.metadata:
                starts = initial_state_draws(layout, traj, int(initial_draws),
                                             np.random.default_rng([seed, index]))
            for start in starts:
                item = (start, positions[1:], quat[1:], radius * math.sqrt(rotation_weight))
                if n_joints:
                    item += (layout.joint_positions(states)[1:], scale)
                items.append(item)
            sizes.append(len(starts))
        self.initial_draws = int(initial_draws) if max(sizes) > 1 else 0
        super().__init__(scene, items, settings, noise_m, n_workers, list(trajectories),
                         sizes)

    def like(self, trajectories: Mapping[str, Trajectory]) -> "TrajectoryLikelihood":
        """The same likelihood (scene, substeps, noise, workers, start handling) on other
        ``trajectories``, e.g. a bootstrap replicate's; open it with ``with``."""
        return TrajectoryLikelihood(self.scene, trajectories, **self._options)

    def refit_starts(self, params: EngineParams) -> None:
        """Fit the recordings' first states again with the engine at ``params`` (its body
        and joints: a start fitted with the URDF's is biased for another, and pulls a body
        calibration toward the URDF's values) and restart the workers on them: the poses of
        those with recorded velocities with ``fit_recorded``, pose and velocities of those
        whose velocities were estimated from poses (as read, with the URDF's body). ν back
        to 1, the rollout count kept. Nothing when there is neither."""
        if not self.fit_recorded and not any(
                t.metadata.get("velocities") == "estimated" for t in self._recorded.values()):
            return
        rollouts = self.n_rollouts
        self.close()
        self.__init__(self.scene, self._recorded, **{**self._options, "start_params": params})
        self.n_rollouts += rollouts


class ImpactLikelihood(_Likelihood):
    """Likelihood of planar-scene parameters given recorded impacts (post-contact velocity).

    ``impacts`` must be in the ``"corrected"`` convention; ``noise`` is in m/s (of
    (dx, dy, r_g dθ)); default estimated.
    """

    dims = 3
    _function = staticmethod(impact_errors)

    def __init__(self, scene: str, impacts: PlanarImpacts, substeps: int | None = None,
                 noise_mps: float | None = None, n_workers: int = 1) -> None:
        if impacts.convention != "corrected":
            raise DataError(f"{impacts.source}: calibrate on impacts in the 'corrected' "
                            "convention")
        layout = make_scene(scene)
        if not layout.planar:
            raise DataError(f"{impacts.source}: planar impacts need a planar scene, "
                            f"not {scene!r}")
        radius = layout.radius_of_gyration_m
        items = [(int(row), pre, post[3:6], radius) for row, pre, post
                 in zip(impacts.rows, impacts.pre_state, impacts.post_state)]
        super().__init__(scene, items, impact_settings(scene, substeps), noise_mps,
                         n_workers, [str(int(r)) for r in impacts.rows])


class StagedLikelihood:
    """A trajectory likelihood in two stages for delayed-acceptance Metropolis-Hastings.

    The recordings are split (seeded) into a screen of ``fraction`` of them and the rest,
    each on its own workers. log L = log L_screen + log L_rest (the per-recording terms of
    the module doc add up), and the first stage is log L_screen × Σν / Σν_screen (n /
    n_screen with ν = 1), the screen's estimate of the whole set's log-likelihood;
    :meth:`screen` gives the
    :class:`~residualsim.sysid.mcmc.Screen` over natural parameter values. Otherwise it
    answers like one :class:`TrajectoryLikelihood` over all recordings (``errors`` in the
    order screen, rest).
    """

    def __init__(self, scene: str, trajectories: Mapping[str, Trajectory], fraction: float,
                 seed: int = 0, **options) -> None:
        if not 0.0 < fraction < 1.0:
            raise ParameterError(f"delayed-acceptance fraction must lie in (0, 1), got "
                                 f"{fraction}")
        ids = list(trajectories)
        if len(ids) < 2:
            raise DataError("delayed acceptance needs at least 2 recordings")
        count = min(len(ids) - 1, max(1, round(fraction * len(ids))))
        order = np.random.default_rng([seed, 1]).permutation(len(ids))
        chosen = set(order[:count].tolist())
        first = {k: trajectories[k] for i, k in enumerate(ids) if i in chosen}
        rest = {k: trajectories[k] for i, k in enumerate(ids) if i not in chosen}
        self.first = TrajectoryLikelihood(scene, first, seed=seed, **options)
        self.rest = TrajectoryLikelihood(scene, rest, seed=seed, **options)
        self.fraction = count / len(ids)
        self.ids = self.first.ids + self.rest.ids
        self.n_items = len(self.ids)
        self.settings, self.noise = self.first.settings, self.first.noise
        self.dims = self.first.dims
        self.n_workers = self.first.n_workers
        self.initial_draws = max(self.first.initial_draws, self.rest.initial_draws)

    def __call__(self, batch: Sequence[EngineParams]) -> np.ndarray:
        batch = list(batch)
        return self.first(batch) + self.rest(batch)

    def set_reference(self, params: EngineParams) -> np.ndarray:
        """ν of every recording (both stages; see :meth:`TrajectoryLikelihood.set_reference`),
        in the order screen, rest."""
        return np.concatenate([self.first.set_reference(params),
                               self.rest.set_reference(params)])

    def scale_weights(self, factor: float) -> None:
        self.first.scale_weights(factor)
        self.rest.scale_weights(factor)

    def reset_weights(self) -> None:
        self.first.reset_weights()
        self.rest.reset_weights()

    def refit_starts(self, params: EngineParams) -> None:
        """Both stages' :meth:`TrajectoryLikelihood.refit_starts`."""
        self.first.refit_starts(params)
        self.rest.refit_starts(params)

    @property
    def nu(self) -> np.ndarray:
        return np.concatenate([self.first.nu, self.rest.nu])

    def errors(self, batch: Sequence[EngineParams]) -> np.ndarray:
        batch = list(batch)
        return np.concatenate([self.first.errors(batch), self.rest.errors(batch)], axis=1)

    def noise_estimate(self, errors: np.ndarray) -> float:
        return float(np.sqrt(np.sum(errors) / (self.n_items * self.dims)))

    def screen(self, to_params):
        """The two stages over natural values x (n, d); ``to_params`` maps a row of x to
        EngineParams."""
        from residualsim.sysid.mcmc import Screen

        weight = float(np.sum(self.nu) / np.sum(self.first.nu))  # the screen's share

        def first(x: np.ndarray):
            values = self.first([to_params(row) for row in x])
            return values * weight, values

        def complete(x: np.ndarray, values: np.ndarray) -> np.ndarray:
            return values + self.rest([to_params(row) for row in x])

        return Screen(first, complete)

    @property
    def n_rollouts(self) -> int:
        return self.first.n_rollouts + self.rest.n_rollouts

    @property
    def restarts(self) -> int:
        return self.first.restarts + self.rest.restarts

    def close(self) -> None:
        self.first.close()
        self.rest.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
