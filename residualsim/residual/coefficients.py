"""A residual through sustained contact: state-dependent contact coefficients (issue 35).

The event residual (:mod:`.policy`) adds an impulse at contact *events* only; while a body
slides, rolls or tumbles on a face, edge or corner it does not act, and an impulse there is
mostly clamped by the contact guard (train/README §18). This residual acts at *every* step
that ends in contact, through the engine: from the same body-invariant contact features as
the event residual (M_c = (J M⁻¹ Jᵀ)⁻¹, kg, and v_c, m/s, contact frame: 9 numbers; then the
number of touching points), a small tanh network gives multipliers on the body's lateral,
spinning and rolling friction coefficients for the next step,

    μ_next = μ_engine · exp(b · tanh(out)),   b = ``log_bound`` (default ln 3),

so every correction is a friction coefficient the engine itself resolves: it stays inside
the friction cone, cannot make the body sink and cannot add energy, and no guard discards
it. With the head at zero (how a network starts) the multipliers are 1 and the rollout is
the engine's. The coefficients in force are the engine's own again at the start and end of
every rollout (:func:`residualsim.sim.rollout.residual_rollout`).

:class:`SustainedPolicy` carries it next to an event policy (or none), so the rollout,
training and prediction code pass it where a policy goes.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from residualsim.errors import ParameterError

__all__ = ["CoefficientResidual", "SustainedPolicy", "COEFFICIENTS", "contact_step_features",
           "sustained_start"]

#: The coefficients the network scales, in the order of its outputs (PyBullet's names).
COEFFICIENTS = ("lateralFriction", "spinningFriction", "rollingFriction")


@dataclasses.dataclass(frozen=True)
class CoefficientResidual:
    """Multipliers on the contact coefficients from contact features (module docstring).

    ``layers`` (W (out, in), b (out,)) pairs: tanh hidden layers, then a linear head with
    one output per coefficient of :data:`COEFFICIENTS`; ``feature_mean``/``feature_std``
    standardise the inputs (9 contact features, then the number of touching points);
    ``log_bound`` b bounds each multiplier to [e^-b, e^b].
    """

    layers: tuple
    feature_mean: np.ndarray
    feature_std: np.ndarray
    log_bound: float = math.log(3.0)

    @classmethod
    def zeros(cls, feature_mean: np.ndarray, feature_std: np.ndarray, hidden: int = 8,
              log_bound: float = math.log(3.0), seed: int = 0) -> CoefficientResidual:
        """A network whose head is zero (every multiplier 1) and whose hidden layer is drawn
        from N(0, 1/n_in) with ``seed``."""
        n_in = len(feature_mean)
        rng = np.random.default_rng(seed)
        first = (rng.standard_normal((hidden, n_in)) / math.sqrt(n_in), np.zeros(hidden))
        head = (np.zeros((len(COEFFICIENTS), hidden)), np.zeros(len(COEFFICIENTS)))
        return cls((first, head), np.asarray(feature_mean, float),
                   np.maximum(np.asarray(feature_std, float), 1e-9), float(log_bound))

    @property
    def n_parameters(self) -> int:
        return sum(w.size + b.size for w, b in self.layers)

    def get_flat(self) -> np.ndarray:
        return np.concatenate([np.concatenate([w.ravel(), b]) for w, b in self.layers])

    def with_flat(self, theta: np.ndarray) -> CoefficientResidual:
        """The same network with the weights ``theta`` (the order of :meth:`get_flat`)."""
        theta = np.asarray(theta, dtype=float)
        if theta.shape != (self.n_parameters,) or not np.isfinite(theta).all():
            raise ParameterError(f"a coefficient residual takes {self.n_parameters} finite "
                                 f"weights, got shape {theta.shape}")
        layers, at = [], 0
        for w, b in self.layers:
            layers.append((theta[at:at + w.size].reshape(w.shape),
                           theta[at + w.size:at + w.size + b.size]))
            at += w.size + b.size
        return dataclasses.replace(self, layers=tuple(layers))

    def multipliers(self, features: np.ndarray) -> np.ndarray:
        """Multipliers (..., 3) on :data:`COEFFICIENTS` for features (..., 10)."""
        h = (np.asarray(features, dtype=float) - self.feature_mean) / self.feature_std
        for weight, bias in self.layers[:-1]:
            h = np.tanh(h @ weight.T + bias)
        weight, bias = self.layers[-1]
        return np.exp(self.log_bound * np.tanh(h @ weight.T + bias))

    def apply(self, engine, features: np.ndarray) -> None:
        """Set the coefficients of the engine's contact links for the next step: the
        engine's own (``engine.params``) times :meth:`multipliers` of ``features``."""
        import pybullet as pb

        scale = self.multipliers(features)
        params, scene = engine.params, engine.scene
        base = (params.lateral_friction, params.spinning_friction, params.rolling_friction)
        values = {name: float(b * s) for name, b, s in zip(COEFFICIENTS, base, scale)}
        for link in scene.contact_links():
            pb.changeDynamics(scene.body, link, physicsClientId=engine.client, **values)

    def as_json(self) -> dict[str, Any]:
        return {"layers": [[w.tolist(), b.tolist()] for w, b in self.layers],
                "feature_mean": self.feature_mean.tolist(),
                "feature_std": self.feature_std.tolist(), "log_bound": self.log_bound,
                "coefficients": list(COEFFICIENTS)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CoefficientResidual:
        """The network of :meth:`as_json`; ValueError when its shapes do not chain from 10
        features to 3 outputs or a number is not finite."""
        layers = tuple((np.asarray(w, float), np.asarray(b, float)) for w, b in data["layers"])
        mean, std = np.asarray(data["feature_mean"], float), np.asarray(data["feature_std"], float)
        width = mean.shape
        for w, b in layers:
            if w.ndim != 2 or (w.shape[1],) != width or b.shape != (w.shape[0],):
                raise ValueError("sustained-contact network layers do not chain")
            width = b.shape
        finite = all(np.isfinite(a).all() for pair in layers for a in pair)
        if not layers or width != (len(COEFFICIENTS),) or std.shape != mean.shape or \
                not finite or not (std > 0).all() or not np.isfinite(mean).all():
            raise ValueError(f"a sustained-contact network maps {mean.shape} features to "
                             f"{len(COEFFICIENTS)} finite multipliers")
        return cls(layers, mean, std, float(data["log_bound"]))


class _Recorder:
    """Coefficients that change nothing and keep the features they are shown."""

    def __init__(self) -> None:
        self.seen: list[np.ndarray] = []

    def apply(self, engine, features: np.ndarray) -> None:
        self.seen.append(features)


def contact_step_features(engine, item: tuple, request) -> np.ndarray | None:
    """Worker function: the features (n, 10) of every step of the engine's own rollout of
    ``item`` that ends in contact (M_c's upper triangle, kg, and v_c, m/s, in the contact
    frame, normal first; then the number of touching points) (a :class:`~residualsim.sim.rollout.RolloutRequest`'s
    params, guard and split), or None outside the request's split."""
    from residualsim.sim.rollout import residual_rollout

    if request.split is not None and item[1] != request.split:
        return None
    if engine.params != request.params:
        engine.set_params(request.params)
    recorder = _Recorder()
    residual_rollout(engine, item[3], len(item[4]) - 1, SustainedPolicy(recorder), None,
                     request.guard)
    return np.array(recorder.seen).reshape(-1, 10)


def sustained_start(workers, params, guard, hidden: int, seed: int) -> CoefficientResidual:
    """A coefficient residual at 'no correction' whose input scaling comes from the
    engine's own contact steps on the training items of ``workers``."""
    from residualsim.sim.rollout import RolloutRequest

    request = RolloutRequest(params=params, policies=(), guard=guard, split="train")
    rows = [r for r in workers.map(contact_step_features, request) if r is not None]
    seen = np.vstack(rows) if rows else np.empty((0, 10))
    if len(seen) < 2:
        raise ParameterError("the engine's rollouts of the training recordings end fewer than "
                             "2 steps in contact: no sustained contact to learn from")
    return CoefficientResidual.zeros(seen.mean(axis=0), seen.std(axis=0), hidden, seed=seed)


@dataclasses.dataclass(frozen=True)
class SustainedPolicy:
    """An event policy (a :class:`~residualsim.residual.policy.NumpyPolicy`, or None: no
    event impulse) with a :class:`CoefficientResidual` acting at every contact step."""

    coefficients: CoefficientResidual
    impulses: Any = None
    n_outputs: int = 3

    @property
    def spin(self) -> bool:
        return bool(getattr(self.impulses, "spin", False))

    @property
    def contact_mode(self) -> bool:
        return bool(getattr(self.impulses, "contact_mode", False))

    def mean(self, features: np.ndarray) -> np.ndarray:
        if self.impulses is None:
            return np.zeros(self.n_outputs)
        return self.impulses.mean(features)

    def sample(self, features: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if self.impulses is None:
            return np.zeros(self.n_outputs)
        return self.impulses.sample(features, rng)
