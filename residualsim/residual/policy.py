"""The residual contact policy π(p_res | x, θ): a small mixture-density network.

Input: the invariant contact features x = (upper triangle of M_c, v_c) of
:mod:`residualsim.sim.contact` (9 numbers in 3D, 5 in the plane; kg and m/s), standardised with
the training set's mean and spread; with ``spin=True`` the body's spin in the contact frame
(:func:`residualsim.sim.contact.spin_features`: 3 more numbers in 3D, 1 in the plane, m/s) is
appended to x, and with ``contact_mode=True`` then the contact mode, the number of points
touching the ground after the event's step (1 a corner, 2 an edge, 3 or more a face; whether
the contact slides is already in v_c's tangential part). Output: a mixture of K Gaussians
with diagonal scales over the residual impulse in the contact frame (normal, tangent 1[,
tangent 2]), in units of ``impulse_scale_ns`` (N s), so the network works on numbers of
order one:

    p_res = impulse_scale_ns · y,   y ~ Σ_k w_k N(μ_k, diag(σ_k²)).

The network is defined (and differentiable) in torch; :meth:`ResidualPolicy.numpy` extracts
its weights once into a :class:`NumpyPolicy` that evaluates one contact in a few
microseconds (a torch call costs about 25 µs), which rollouts use at each contact event.
Nevergrad sees the weights as one flat float64 vector (:meth:`get_flat`/:meth:`set_flat`).

A freshly built policy predicts *no* correction (the output means are zero), so training
starts from the calibrated engine.
"""

from __future__ import annotations

import hashlib
import json
import math
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from residualsim.atomic import atomic_open, atomic_write_text, read_json
from residualsim.errors import DataError, ParameterError
from residualsim.sim.contact import feature_width

__all__ = ["ResidualPolicy", "NumpyPolicy", "MixtureDensityNetwork",
           "LOG_SCALE_BOUNDS", "params_sha256"]

#: Bounds of the log standard deviation of each component, in units of the impulse scale.
LOG_SCALE_BOUNDS = (-7.0, 1.0)
#: Initial component standard deviation (units of the impulse scale).
INITIAL_SCALE = 0.05
_FORMAT = "residualsim.policy/1"


class MixtureDensityNetwork(torch.nn.Module):
    """x (N, n_features) standardised → (logits (N, K), means (N, K, k), log σ (N, K, k)).

    One tanh hidden layer per entry of ``hidden``; the head is linear.
    """

    def __init__(self, n_features: int, n_outputs: int, n_components: int,
                 hidden: Sequence[int]) -> None:
        super().__init__()
        self.n_features, self.n_outputs, self.n_components = n_features, n_outputs, n_components
        layers: list[torch.nn.Module] = []
        width = n_features
        for size in hidden:
            layers += [torch.nn.Linear(width, size), torch.nn.Tanh()]
            width = size
        self.body = torch.nn.Sequential(*layers)
        self.head = torch.nn.Linear(width, n_components * (1 + 2 * n_outputs))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out = self.head(self.body(x))
        k, d = self.n_components, self.n_outputs
        logits = out[:, :k]
        means = out[:, k:k + k * d].reshape(-1, k, d)
        log_scales = out[:, k + k * d:].reshape(-1, k, d).clamp(*LOG_SCALE_BOUNDS)
        return logits, means, log_scales


@dataclass(frozen=True)
class NumpyPolicy:
    """The policy's weights as float64 numpy arrays, for per-contact evaluation.

    ``layers`` are (W (out, in), b (out,)) pairs of the tanh body followed by the head.
    ``spread`` multiplies the components' scales when sampling (see
    :attr:`ResidualModel.spread`); the mean is unaffected. ``spin``, ``contact_mode``: the
    features end with the spin features, then the contact mode (see :class:`ResidualPolicy`).
    """

    layers: tuple[tuple[np.ndarray, np.ndarray], ...]
    feature_mean: np.ndarray
    feature_std: np.ndarray
    impulse_scale_ns: float
    n_components: int
    n_outputs: int
    spread: float = 1.0
    spin: bool = False
    contact_mode: bool = False

    def components(self, features: np.ndarray, rowwise: bool = False
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Mixture of one contact (features (n,)) or of N contacts (features (N, n)):
        weights (..., K), means (..., K, k) and std (..., K, k) in N s. ``rowwise``: each
        row on its own (products summed along the last axis, not a BLAS matrix product,
        whose rounding may depend on N), so that a row's result does not depend on the
        others (the batched rollouts, :mod:`residualsim.sim.batch`, rely on it)."""
        def affine(h: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
            return ((h[..., None, :] * weight).sum(axis=-1) if rowwise else h @ weight.T) + bias

        h = (np.asarray(features, dtype=np.float64) - self.feature_mean) / self.feature_std
        for weight, bias in self.layers[:-1]:
            h = np.tanh(affine(h, weight, bias))
        out = affine(h, *self.layers[-1])
        k, d = self.n_components, self.n_outputs
        logits = out[..., :k] - out[..., :k].max(axis=-1, keepdims=True)
        weights = np.exp(logits)
        weights /= weights.sum(axis=-1, keepdims=True)
        batch = out.shape[:-1]
        means = out[..., k:k + k * d].reshape(*batch, k, d) * self.impulse_scale_ns
        scales = np.exp(np.clip(out[..., k + k * d:].reshape(*batch, k, d), *LOG_SCALE_BOUNDS))
        return weights, means, scales * self.impulse_scale_ns

    def mean(self, features: np.ndarray) -> np.ndarray:
        """Mean residual impulse Σ_k w_k μ_k, N s, contact frame: (k,) for one contact's
        features (n,), (N, k) for N contacts' (N, n)."""
        weights, means, _ = self.components(features)
        return np.einsum("...k,...kd->...d", weights, means)

    def sample(self, features: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One residual impulse (k,) N s drawn from the mixture.

        Always consumes exactly one uniform and k normals from ``rng`` (so candidates that
        share a generator seed share their random numbers).
        """
        weights, means, scales = self.components(features)
        u, z = rng.random(), rng.standard_normal(self.n_outputs)
        index = min(int(np.searchsorted(np.cumsum(weights), u * weights.sum())),
                    self.n_components - 1)
        return means[index] + self.spread * scales[index] * z


def _weight_shapes(config: Any) -> dict[str, tuple[int, ...]] | None:
    """The shapes of the :class:`MixtureDensityNetwork` weights a policy configuration
    describes (computed, not allocated); None when it cannot be read (from_config names
    why)."""
    try:
        width, shapes = int(config["n_features"]), {}
        for index, size in enumerate(int(h) for h in config["hidden"]):
            shapes[f"body.{2 * index}.weight"] = (size, width)
            shapes[f"body.{2 * index}.bias"] = (size,)
            width = size
        head = int(config["n_components"]) * (1 + 2 * int(config["n_outputs"]))
    except (KeyError, TypeError, ValueError):
        return None
    return {**shapes, "head.weight": (head, width), "head.bias": (head,)}


class ResidualPolicy:
    """Mixture-density residual contact policy (see module docstring).

    Parameters
    ----------
    n_features : int
        9 for 3D contacts, 5 for planar ones (plus 3 or 1 with ``spin``, plus 1 with
        ``contact_mode``).
    n_outputs : int
        Impulse components: 3 in 3D (normal, tangent 1, tangent 2), 2 in the plane.
    n_components : int
        Mixture components K >= 1.
    hidden : sequence of int
        Hidden layer widths (tanh).
    seed : int
        Seed of the initial weights.
    spin : bool
        The features after the contact features are the spin features (the rollout appends
        them at events).
    contact_mode : bool
        The last feature is the number of points touching after the event's step.
    """

    def __init__(self, n_features: int = 9, n_outputs: int = 3, n_components: int = 2,
                 hidden: Sequence[int] = (16,), seed: int = 0, spin: bool = False,
                 contact_mode: bool = False) -> None:
        for name, value, low in (("n_features", n_features, 1), ("n_outputs", n_outputs, 1),
                                 ("n_components", n_components, 1)):
            if int(value) != value or value < low:
                raise ParameterError(f"{name} must be an integer >= {low}, got {value!r}")
        hidden = tuple(int(h) for h in hidden)
        if any(h < 1 for h in hidden):
            raise ParameterError(f"hidden widths must be >= 1, got {hidden}")
        self.n_features, self.n_outputs = int(n_features), int(n_outputs)
        self.n_components, self.hidden, self.seed = int(n_components), hidden, int(seed)
        self.spin, self.contact_mode = bool(spin), bool(contact_mode)
        if self.spin or self.contact_mode:
            width = feature_width(self.n_outputs == 2, self.spin, self.contact_mode)
            if self.n_outputs not in (2, 3) or self.n_features != width:
                raise ParameterError(
                    f"a policy with {n_outputs} outputs, spin {self.spin} and contact mode "
                    f"{self.contact_mode} has {width} features, got {n_features}")
        generator = torch.Generator().manual_seed(self.seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(2**31 - 1, (1,), generator=generator)))
            self.network = MixtureDensityNetwork(self.n_features, self.n_outputs,
                                                 self.n_components, hidden).float()
        self._zero_output()
        self.feature_mean = np.zeros(self.n_features)
        self.feature_std = np.ones(self.n_features)
        self.impulse_scale_ns = 1.0

    @classmethod
    def for_scene(cls, planar: bool, spin: bool = False, contact_mode: bool = False,
                  **kwargs: Any) -> ResidualPolicy:
        """A policy sized for 3D (9 features, 3 outputs) or planar (5, 2) contacts, plus the
        spin features (3 or 1) with ``spin`` and the contact mode (1) with ``contact_mode``."""
        return cls(n_features=feature_width(planar, spin, contact_mode),
                   n_outputs=2 if planar else 3, spin=spin, contact_mode=contact_mode, **kwargs)

    def _zero_output(self) -> None:
        """Start from 'no correction': zero head weights, equal weights, σ = INITIAL_SCALE."""
        head, k, d = self.network.head, self.n_components, self.n_outputs
        with torch.no_grad():
            head.weight.zero_()
            head.bias.zero_()
            head.bias[k + k * d:] = math.log(INITIAL_SCALE)

    # --- normalisation -----------------------------------------------------------------------
    def fit_scaling(self, features: np.ndarray, impulses: np.ndarray) -> ResidualPolicy:
        """Set the feature standardisation and the impulse unit from contact events.

        ``features`` (N, n_features) are contact features of the engine's events on the
        training data, ``impulses`` (N, n_outputs) N s their engine impulses (contact
        frame); the impulse unit is their root-mean-square norm.
        """
        features = np.asarray(features, dtype=np.float64)
        impulses = np.asarray(impulses, dtype=np.float64)
        if features.ndim != 2 or features.shape[1] != self.n_features or len(features) < 2:
            raise DataError(f"need at least 2 contact feature rows of width {self.n_features}, "
                            f"got shape {features.shape}")
        if not (np.isfinite(features).all() and np.isfinite(impulses).all()):
            raise DataError("contact features or impulses contain NaN or inf")
        self.feature_mean = features.mean(axis=0)
        spread = features.std(axis=0)
        self.feature_std = np.where(spread > 1e-9, spread, 1.0)
        scale = float(np.sqrt(np.mean(np.sum(impulses**2, axis=1))))
        self.impulse_scale_ns = scale if scale > 0 else 1.0
        return self

    # --- flat parameter vector ------------------------------------------------------------------
    @property
    def n_parameters(self) -> int:
        """Number of network weights θ."""
        return sum(p.numel() for p in self.network.parameters())

    def get_flat(self) -> np.ndarray:
        """θ as a float64 vector (a copy)."""
        vector = torch.nn.utils.parameters_to_vector(self.network.parameters())
        return vector.detach().numpy().astype(np.float64)

    def set_flat(self, theta: np.ndarray) -> ResidualPolicy:
        """Set θ from a flat vector of exactly :attr:`n_parameters` finite numbers."""
        theta = np.asarray(theta)
        if theta.shape != (self.n_parameters,):
            raise ParameterError(f"flat parameter vector must have shape ({self.n_parameters},)"
                                 f", got {theta.shape}")
        if not np.isfinite(theta).all():
            raise ParameterError("flat parameter vector contains NaN or inf")
        # Copy into float32: vector_to_parameters would alias a tensor made from the array
        # and turn the model float64 if handed nevergrad's float64 values.
        vector = torch.tensor(theta, dtype=torch.float32)
        torch.nn.utils.vector_to_parameters(vector.clone(), self.network.parameters())
        return self

    def flat_indices(self, outputs: Sequence[str]) -> np.ndarray:
        """Positions in θ (:meth:`get_flat`) of the head's rows, weights and biases, that
        make ``outputs``: any of ``"logits"`` (mixture weights), ``"means"`` and
        ``"scales"`` (log standard deviations). The hidden layers feed every output, so
        they are never among them."""
        k, d = self.n_components, self.n_outputs
        rows = {"logits": range(k), "means": range(k, k + k * d),
                "scales": range(k + k * d, k + 2 * k * d)}
        unknown = set(outputs) - set(rows)
        if unknown:
            raise ParameterError(f"unknown head outputs {sorted(unknown)}; choose from "
                                 f"{', '.join(rows)}")
        chosen = np.array(sorted(r for name in outputs for r in rows[name]), dtype=int)
        offset, found = 0, []
        for name, tensor in self.network.named_parameters():
            if name == "head.weight":
                width = tensor.shape[1]
                found.append(offset + chosen[:, None] * width + np.arange(width))
            elif name == "head.bias":
                found.append(offset + chosen[:, None])
            offset += tensor.numel()
        return np.sort(np.concatenate([f.ravel() for f in found]))

    def fold_spread(self, spread: float) -> ResidualPolicy:
        """Multiply every component's scale by ``spread`` (> 0) in the weights themselves
        (log(spread) added to the scale rows' biases), as a model samples with its spread
        (the same while the log-scales stay inside :data:`LOG_SCALE_BOUNDS`); the means and
        weights are unchanged. Returns self."""
        if not (math.isfinite(spread) and spread > 0):
            raise ParameterError(f"a spread folded into the scales must be > 0, got {spread}")
        k, d = self.n_components, self.n_outputs
        with torch.no_grad():
            self.network.head.bias[k + k * d:] += math.log(spread)
        return self

    # --- evaluation ----------------------------------------------------------------------------
    def _standardise(self, features: np.ndarray) -> torch.Tensor:
        x = np.atleast_2d(np.asarray(features, dtype=np.float64))
        if x.shape[1] != self.n_features:
            raise ParameterError(f"features must have {self.n_features} columns, got {x.shape}")
        return torch.tensor((x - self.feature_mean) / self.feature_std, dtype=torch.float32)

    def distribution(self, features: np.ndarray) -> torch.distributions.Distribution:
        """The mixture over p_res (N s, contact frame) for features (N, n_features)."""
        logits, means, log_scales = self.network(self._standardise(features))
        scale = self.impulse_scale_ns
        component = torch.distributions.Independent(
            torch.distributions.Normal(means * scale, log_scales.exp() * scale), 1)
        return torch.distributions.MixtureSameFamily(
            torch.distributions.Categorical(logits=logits), component)

    def mean(self, features: np.ndarray) -> np.ndarray:
        """Mean residual impulses (N, n_outputs), N s, contact frame."""
        with torch.no_grad():
            return self.distribution(features).mean.numpy().astype(np.float64)

    def sample(self, features: np.ndarray, rng: int | np.random.Generator | None = None
               ) -> np.ndarray:
        """One residual impulse per row of features: (N, n_outputs), N s, contact frame."""
        generator = np.random.default_rng(rng)
        fast = self.numpy()
        return np.array([fast.sample(x, generator) for x in np.atleast_2d(features)])

    def log_prob(self, features: np.ndarray, impulses: np.ndarray) -> np.ndarray:
        """log π(p_res | x) (N,) for impulses (N, n_outputs) in N s (density per (N s)^k)."""
        with torch.no_grad():
            value = torch.tensor(np.atleast_2d(impulses), dtype=torch.float32)
            return self.distribution(features).log_prob(value).numpy().astype(np.float64)

    def numpy(self, spread: float = 1.0) -> NumpyPolicy:
        """The weights extracted once for fast per-contact evaluation (float64), sampling
        with the components' scales times ``spread``."""
        linear = [m for m in self.network.modules() if isinstance(m, torch.nn.Linear)]
        layers = tuple((m.weight.detach().numpy().astype(np.float64),
                        m.bias.detach().numpy().astype(np.float64)) for m in linear)
        return NumpyPolicy(layers=layers, feature_mean=self.feature_mean.copy(),
                           feature_std=self.feature_std.copy(),
                           impulse_scale_ns=float(self.impulse_scale_ns),
                           n_components=self.n_components, n_outputs=self.n_outputs,
                           spread=float(spread), spin=self.spin,
                           contact_mode=self.contact_mode)

    # --- persistence ---------------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """Architecture and normalisation as strict JSON."""
        return {"format": _FORMAT, "n_features": self.n_features, "n_outputs": self.n_outputs,
                "n_components": self.n_components, "hidden": list(self.hidden),
                "seed": self.seed, "spin": self.spin,
                "contact_mode": self.contact_mode, "n_parameters": self.n_parameters,
                "feature_mean": self.feature_mean.tolist(),
                "feature_std": self.feature_std.tolist(),
                "impulse_scale_ns": self.impulse_scale_ns}

    def save(self, directory: str | Path) -> None:
        """Write ``policy.json`` (architecture, normalisation) and ``policy.npz`` (weights)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        arrays = {k: v.detach().numpy() for k, v in self.network.state_dict().items()}
        with atomic_open(directory / "policy.npz") as handle:
            np.savez(handle, **arrays)
        atomic_write_text(directory / "policy.json", json.dumps(self.config(), indent=2))

    @classmethod
    def from_config(cls, config: Mapping[str, Any], where: str = "policy") -> ResidualPolicy:
        """Rebuild an (untrained) policy with the architecture and normalisation of a config."""
        if not isinstance(config, Mapping) or config.get("format") != _FORMAT:
            found = config.get("format") if isinstance(config, Mapping) else type(config).__name__
            raise DataError(f"{where}: not a residualsim policy (format {found!r}, expected "
                            f"{_FORMAT!r})")
        try:
            policy = cls(config["n_features"], config["n_outputs"], config["n_components"],
                         config["hidden"], config.get("seed", 0), bool(config.get("spin", False)),
                         bool(config.get("contact_mode", False)))
            policy.feature_mean = np.asarray(config["feature_mean"], dtype=np.float64)
            policy.feature_std = np.asarray(config["feature_std"], dtype=np.float64)
            policy.impulse_scale_ns = float(config["impulse_scale_ns"])
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{where}: malformed policy configuration ({exc!r})") from None
        if policy.feature_mean.shape != (policy.n_features,) or \
                policy.feature_std.shape != (policy.n_features,):
            raise DataError(f"{where}: feature normalisation does not match n_features")
        if not (np.isfinite(policy.feature_mean).all() and np.isfinite(policy.feature_std).all()
                and (policy.feature_std > 0).all()):
            raise DataError(f"{where}: feature_mean must be finite and feature_std finite and "
                            "> 0 (a model writes no other)")
        if not 0 < policy.impulse_scale_ns < np.inf:
            raise DataError(f"{where}: impulse_scale_ns {policy.impulse_scale_ns!r} must be "
                            "finite and > 0 (N s)")
        return policy

    @classmethod
    def load(cls, directory: str | Path) -> ResidualPolicy:
        """Read a policy written by :meth:`save`."""
        directory = Path(directory)
        config = read_json(directory / "policy.json",
                           missing=f"{directory}: no policy.json (not a residualsim model)")
        damaged = f"{directory / 'policy.npz'}: weights do not match the architecture or " \
                  "the file is damaged"
        try:
            with np.load(directory / "policy.npz", allow_pickle=False) as archive:
                arrays = {k: archive[k] for k in archive.files}
        except FileNotFoundError:
            raise DataError(f"{directory}: no policy.npz (weights missing)") from None
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise DataError(f"{damaged} ({exc})") from None
        # before the network is built: a damaged policy.json could ask for terabytes
        expected = _weight_shapes(config)
        found = {k: tuple(v.shape) for k, v in arrays.items()}
        if expected is not None and expected != found:
            raise DataError(f"{damaged} (policy.json asks for {expected}, policy.npz holds "
                            f"{found})")
        policy = cls.from_config(config, where=str(directory / "policy.json"))
        try:
            policy.network.load_state_dict({k: torch.tensor(v) for k, v in arrays.items()})
        except (ValueError, RuntimeError, KeyError) as exc:
            raise DataError(f"{damaged} ({exc})") from None
        if not np.isfinite(policy.get_flat()).all():
            raise DataError(f"{directory / 'policy.npz'}: weights contain NaN or inf")
        return policy


def params_sha256(policy: ResidualPolicy) -> str:
    """SHA-256 of the flat parameter vector (float64, little-endian): equal hashes mean
    identical weights."""
    return hashlib.sha256(policy.get_flat().astype("<f8").tobytes()).hexdigest()
