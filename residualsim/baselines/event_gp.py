"""Gaussian-process residual on per-event optimal impulses, for the 3D cube tosses.

The authors' earlier method, as a baseline for the mixture-density residual of
:mod:`residualsim.residual.policy`: for each recorded contact event (segmented by
:mod:`residualsim.baselines.recorded_events`), the impulse p* that best
explains the recorded velocity change subject to p_n ≥ 0 and ‖p_t‖ ≤ μ p_n; the residual
target is p* − p_e (p_e: the calibrated engine's impulse on the same event), regressed on
the event's contact features x with scikit-learn. :class:`EventGPResidual` then serves as a
residual policy of :func:`~residualsim.sim.rollout.residual_rollout` (``mean``/``sample``),
exactly like a :class:`~residualsim.residual.policy.NumpyPolicy`. The planar counterpart, on the
MCube single impacts, is :class:`~residualsim.residual.impact.GPImpactResidual`.

GP: scikit-learn ``GaussianProcessRegressor`` on the standardised features, kernel
C · RBF(anisotropic, 9 length scales) + white noise, ``normalize_y``, hyperparameters by
marginal likelihood with seeded restarts, BLAS limited to one thread. Fitting is O(N³)
with an (N, N, 11) gradient tensor per likelihood evaluation, so the hyperparameters are
fitted on a seeded subset of at most ``hyper_events`` events (default 400) and the final
GP, with those hyperparameters fixed, conditions on at most ``max_events`` events (default
1500, a seeded subset when more were found). One GP with shared hyperparameters models
the three contact-frame outputs (scikit-learn's multi-output GP; ``normalize_y`` scales
each output separately). The predictive standard deviation includes the white noise, so
:meth:`EventGPResidual.sample` draws a plausible event residual, not only the latent mean.

Limits: a residual applied at an event's first step is partly undone by the engine's
remaining contact steps (soft contact) or scaled down by the rollout's guard; and the
targets are per event, not per trajectory, so a better event prediction need not give a
better trajectory (see the project notes for measured figures).

Units: impulses N s in the contact frame (n, t1, t2); velocities m/s and rad/s, world frame;
features as :func:`~residualsim.sim.contact.contact_features` (kg, m/s).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from residualsim.data.trajectory import Trajectory
from residualsim.sim.engine import Engine
from residualsim.errors import DataError, ParameterError
from residualsim.baselines.recorded_events import JUMP_THRESHOLD_MPS, RecordedEvent, _checked, segment_events
from residualsim.sim.rollout import ContactGuard, recording_settings

__all__ = ["EventGPResidual"]


# --- the GP residual policy ---------------------------------------------------------------------
class EventGPResidual:
    """GP residual policy on per-event optimal impulses (see the module docstring).

    Build with :meth:`fit`; then ``residual_rollout(engine, state, n, policy=gp)`` queries
    :meth:`mean` (deterministic mode) or :meth:`sample` at each contact event.

    Attributes (after fitting)
    --------------------------
    events : list of RecordedEvent
        Every event found (including those left out of the GP by the cap).
    friction : float
        μ of the cone of p*.
    info : dict
        Counts, the number of events used, fit seconds, the fitted kernel.
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed = int(seed)
        self.events: list[RecordedEvent] = []
        self.friction = float("nan")
        self.info: dict[str, Any] = {}
        self._model: Any = None
        self._centre = self._scale = None

    @classmethod
    def fit(cls, trajectories: Mapping[str, Trajectory], *, params: Any, substeps: int,
            seed: int = 0, guard: ContactGuard = ContactGuard(), friction: float | None = None,
            threshold_mps: float = JUMP_THRESHOLD_MPS, max_events: int = 1500,
            hyper_events: int = 400, restarts: int = 2) -> EventGPResidual:
        """Segment the recorded events, compute p* − p_e and fit the GP.

        Parameters
        ----------
        trajectories : mapping of id -> Trajectory
            3D cube recordings at one rate (the training tosses).
        params : EngineParams, mapping or str
            The calibrated engine parameters (e.g. ``ResidualModel.load(...).params``).
        substeps : int
            Engine substeps per sample (the calibration's).
        seed : int
            Seeds the event subsets and the optimizer's restarts.
        guard : ContactGuard
            Event definition, as in the rollouts that will use the policy.
        friction : float, optional
            μ of the cone of p*; default ``params.lateral_friction``.
        threshold_mps : float
            Recorded jump threshold, m/s.
        max_events : int
            Most events the GP conditions on (a seeded subset beyond).
        hyper_events : int
            Most events the hyperparameters are fitted on (a seeded subset beyond).
        restarts : int
            Optimizer restarts (seeded) of the marginal likelihood.

        Raises
        ------
        DataError
            No trajectories, a bad trajectory (named), or no event found.
        ParameterError
            Negative friction, or bad caps.
        """
        from residualsim.sim.scenes import parse_params

        started, cpu = time.perf_counter(), time.process_time()
        if not trajectories:
            raise DataError("no trajectories to fit the event GP on")
        if int(max_events) < 2 or int(hyper_events) < 2:
            raise ParameterError(f"max_events and hyper_events must be >= 2, got "
                                 f"{max_events} and {hyper_events}")
        params = parse_params(params)
        friction = params.lateral_friction if friction is None else float(friction)
        if not (math.isfinite(friction) and friction >= 0):
            raise ParameterError(f"friction must be a finite number >= 0, got {friction}")
        for traj in trajectories.values():
            _checked(traj)
        settings = recording_settings("cube", trajectories, int(substeps))
        counts: dict[str, int] = {}
        events: list[RecordedEvent] = []
        with Engine("cube", params, settings) as engine:
            for traj in trajectories.values():
                events += segment_events(traj, engine, friction=friction,
                                         threshold_mps=threshold_mps, guard=guard,
                                         counts=counts)
        segmented = time.perf_counter()
        if not events:
            raise DataError(f"no contact events found in the {len(trajectories)} "
                            f"trajectories ({counts.get('runs', 0)} recorded contact runs, "
                            f"{counts.get('no_engine_event', 0)} without an engine event)")
        gp = cls(seed)
        gp.friction, gp.events = friction, events
        features = np.array([e.features for e in events])
        targets = np.array([e.residual for e in events])
        gp._fit_gp(features, targets, int(max_events), int(hyper_events), int(restarts))
        gp.info.update(counts, n_trajectories=len(trajectories), n_events=len(events),
                       segment_seconds=segmented - started,
                       gp_seconds=time.perf_counter() - segmented,
                       seconds=time.perf_counter() - started,
                       cpu_seconds=time.process_time() - cpu)
        return gp

    def _fit_gp(self, features: np.ndarray, targets: np.ndarray, max_events: int,
                hyper_events: int, restarts: int) -> None:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1):  # small matrices: threads only contend
            self._fit_gp_1(features, targets, max_events, hyper_events, restarts)

    def _fit_gp_1(self, features: np.ndarray, targets: np.ndarray, max_events: int,
                  hyper_events: int, restarts: int) -> None:
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

        rng = np.random.default_rng(self.seed)
        order = rng.permutation(len(features))
        used = np.sort(order[:max_events])
        tuned = np.sort(order[:min(hyper_events, max_events)])
        self._centre = features[used].mean(axis=0)
        self._scale = np.maximum(features[used].std(axis=0), 1e-9)
        inputs = (features - self._centre) / self._scale
        kernel = ConstantKernel(1.0, (1e-3, 1e3)) * \
            RBF(np.ones(features.shape[1]), (1e-2, 1e3)) + WhiteKernel(0.1, (1e-6, 1e1))
        with warnings.catch_warnings():  # an irrelevant feature's length scale hits its bound
            warnings.simplefilter("ignore", ConvergenceWarning)
            tuner = GaussianProcessRegressor(kernel, normalize_y=True,
                                             n_restarts_optimizer=restarts,
                                             random_state=self.seed)
            tuner.fit(inputs[tuned], targets[tuned])
            if len(used) == len(tuned):
                self._model = tuner
            else:
                self._model = GaussianProcessRegressor(tuner.kernel_, normalize_y=True,
                                                       optimizer=None)
                self._model.fit(inputs[used], targets[used])
        self.info.update(n_used=int(len(used)), n_tuned=int(len(tuned)),
                         kernel=str(self._model.kernel_),
                         log_marginal_likelihood=float(tuner.log_marginal_likelihood_value_))

    # --- the policy interface -----------------------------------------------------------------
    def _require(self) -> None:
        if self._model is None:
            raise ParameterError("fit the event GP (EventGPResidual.fit) before predicting")

    def predict(self, features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Predictive mean and standard deviation of the residual, each (N, 3) N s.

        ``features`` (N, 9) or (9,) contact features (kg, m/s); contact frame (n, t1, t2).
        """
        self._require()
        x = np.atleast_2d(np.asarray(features, dtype=np.float64))
        if x.shape[1] != len(self._centre):
            raise ParameterError(f"expected {len(self._centre)} contact features, "
                                 f"got {x.shape[1]}")
        mean, std = self._model.predict((x - self._centre) / self._scale, return_std=True)
        mean = np.asarray(mean).reshape(len(x), -1)
        std = np.asarray(std).reshape(len(x), -1)
        return mean, std

    def mean(self, features: np.ndarray) -> np.ndarray:
        """GP predictive mean of p_res (3,), N s, contact frame (n, t1, t2)."""
        return self.predict(features)[0][0]

    def sample(self, features: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """A draw p_res (3,) from the per-output predictive normal, N s, contact frame.

        Consumes exactly three standard normals from ``rng``.
        """
        mean, std = self.predict(features)
        return mean[0] + std[0] * rng.standard_normal(mean.shape[1])
