"""The space calibration searches: named engine parameters with bounds and priors.

Samplers and optimisers move in *unit coordinates* z in [0, 1]^d: each parameter is mapped
linearly (or logarithmically, for ``log_scale`` parameters such as a contact stiffness) from
its bounds onto [0, 1]. A proposal scale of 0.05 therefore means 5 % of each parameter's
range, whatever its units. Priors are stated in natural units; :meth:`ParamSpace.log_prior`
returns the log density *in unit coordinates* (the Jacobian of the map included), which is
what a random walk on z needs.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from residualsim.errors import ParameterError
from residualsim.sim.scenes.params import (ENGINE_PARAMS, GROUND_PARAMS, SOLVER_PARAMS,
                                           SPRING_PARAMS, EngineParams, ParamSpec)

__all__ = ["Uniform", "LogUniform", "Normal", "Prior", "Parameter", "ParamSpace",
           "CALIBRATION_BOUNDS", "parse_prior", "calibration_run"]

_SPECS = {spec.name: spec for spec in ENGINE_PARAMS + SOLVER_PARAMS + GROUND_PARAMS
          + SPRING_PARAMS}
_ENGINE_NAMES = frozenset(spec.name for spec in ENGINE_PARAMS + SOLVER_PARAMS + GROUND_PARAMS)

#: Default search bounds where the valid range is unbounded or too wide to search usefully.
CALIBRATION_BOUNDS: dict[str, tuple[float, float]] = {
    "lateral_friction": (0.0, 1.0),
    "contact_stiffness": (1e3, 1e7),
    "contact_damping": (0.0, 1e3),
    "solver_iterations": (5.0, 200.0),
    "restitution_velocity_threshold": (0.0, 1.0),
    "collision_margin": (0.0, 0.01),
    "contact_processing_threshold": (0.0, 0.02),
    "split_impulse_penetration_threshold": (-0.05, 0.0),
    "table_height_m": (-0.005, 0.005),  # a capture frame off by millimetres, not 5 cm
    "kappa_theta": (0.1, 30.0),
    "kappa_psi": (0.1, 30.0),
}


@dataclass(frozen=True)
class Uniform:
    """Flat prior in natural units over the bounds."""

    def log_density(self, x: np.ndarray) -> np.ndarray:
        return np.zeros_like(x)

    def describe(self) -> str:
        return "uniform"


@dataclass(frozen=True)
class LogUniform:
    """Flat prior in log units over the bounds (scale-free; needs low > 0)."""

    def log_density(self, x: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return -np.log(x)

    def describe(self) -> str:
        return "loguniform"


@dataclass(frozen=True)
class Normal:
    """Gaussian prior N(mean, std²) in natural units, truncated to the bounds."""

    mean: float
    std: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.mean) and math.isfinite(self.std) and self.std > 0):
            raise ParameterError(f"normal prior needs a finite mean and std > 0, got "
                                 f"mean={self.mean}, std={self.std}")

    def log_density(self, x: np.ndarray) -> np.ndarray:
        return -0.5 * ((x - self.mean) / self.std) ** 2

    def describe(self) -> str:
        return f"normal:{self.mean!r}:{self.std!r}"  # repr: exact round trip


Prior = Uniform | LogUniform | Normal


def parse_prior(text: str) -> Prior:
    """A prior from ``uniform``, ``loguniform`` or ``normal:MEAN:STD``."""
    kind, *args = text.strip().lower().split(":")
    try:
        if kind == "uniform" and not args:
            return Uniform()
        if kind == "loguniform" and not args:
            return LogUniform()
        if kind == "normal" and len(args) == 2:
            return Normal(float(args[0]), float(args[1]))
    except ValueError:
        pass
    raise ParameterError(f"cannot read prior {text!r}: expected uniform, loguniform or "
                         "normal:MEAN:STD")


@dataclass(frozen=True)
class Parameter:
    """One calibrated engine parameter: its bounds (natural units), scale and prior."""

    name: str
    low: float
    high: float
    log_scale: bool
    prior: Prior
    #: The spec of a body or joint parameter (its scene's; engine parameters: None).
    spec: ParamSpec | None = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        spec = self.spec or _SPECS.get(self.name)
        if spec is None:
            raise ParameterError(f"unknown engine parameter {self.name!r}; known: "
                                 f"{', '.join(_SPECS)}")
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            raise ParameterError(f"{self.name}: bounds must be finite, got "
                                 f"[{self.low}, {self.high}]")
        if not self.low < self.high:
            raise ParameterError(f"{self.name}: lower bound {self.low} must be below the "
                                 f"upper bound {self.high}")
        if self.spec is not None and ".com_" not in self.name and ".axes_" not in self.name:
            if self.low < 0:  # moments, mass ratios, joint losses: any range >= 0
                raise ParameterError(f"{self.name}: bounds [{self.low}, {self.high}] must "
                                     f"be >= 0 {spec.unit}")
        elif self.low < spec.low or self.high > spec.high:
            raise ParameterError(f"{self.name}: bounds [{self.low}, {self.high}] leave the "
                                 f"valid range [{spec.low}, {spec.high}] {spec.unit}")
        if (self.log_scale or isinstance(self.prior, LogUniform)) and self.low <= 0:
            raise ParameterError(f"{self.name}: a log-scale parameter needs a lower bound "
                                 f"> 0, got {self.low}")

    @property
    def unit(self) -> str:
        return (self.spec or _SPECS[self.name]).unit

    def as_json(self) -> dict:
        return {"name": self.name, "low": self.low, "high": self.high,
                "log_scale": self.log_scale, "prior": self.prior.describe(), "unit": self.unit}


class ParamSpace:
    """Named engine parameters to calibrate, with bounds and priors.

    Parameters
    ----------
    names : sequence of str
        Engine parameter names (see :data:`residualsim.sim.scenes.ENGINE_PARAMS` and
        :data:`~residualsim.sim.scenes.SOLVER_PARAMS`) and groups.
    bounds : mapping of name -> (low, high), optional
        Search bounds in natural units; default the parameter's valid range (or
        :data:`CALIBRATION_BOUNDS` where that range is unbounded).
    priors : mapping of name -> Prior or str, optional
        Default: uniform in natural units, log-uniform for log-scale parameters.
    base : EngineParams, optional
        Values of the parameters that are not calibrated (default: engine defaults).
    scene : str, optional
        The scene, needed for the groups ``solver``, ``body`` and ``joints`` and for body
        and joint names (:mod:`residualsim.sysid.bodyspace`); groups are expanded in place.
    """

    def __init__(self, names: Sequence[str], bounds: Mapping[str, Sequence[float]] | None = None,
                 priors: Mapping[str, Prior | str] | None = None,
                 base: EngineParams | None = None, scene: str | None = None) -> None:
        from residualsim.sysid.bodyspace import body_space, expand_names, is_body_name

        names = [str(n).strip() for n in names]
        if names and all(names) and len(set(names)) == len(names):
            names = expand_names(names, scene, soft_base=base is not None and base.soft_contact)
        self.scene = scene if any(is_body_name(n) for n in names) else None
        if self.scene is None and any(is_body_name(n) for n in names):
            raise ParameterError("body and joint parameters need a scene")
        self.body_space = body_space(self.scene) if self.scene is not None else None
        specs = dict(_SPECS)
        if self.body_space is not None:
            specs.update(self.body_space.specs)
        if not names or not all(names):
            raise ParameterError("give at least one parameter name to calibrate")
        if len(set(names)) != len(names):
            raise ParameterError(f"parameter names repeat: {', '.join(names)}")
        bounds, priors = dict(bounds or {}), dict(priors or {})
        for extra in sorted((set(bounds) | set(priors)) - set(names)):
            raise ParameterError(f"bounds or prior given for {extra!r}, which is not "
                                 f"calibrated ({', '.join(names)})")
        parameters = []
        for name in names:
            spec = specs.get(name)
            if spec is None and self.body_space is not None and name.startswith(
                    ("body.", "joint.")):
                raise ParameterError(f"{name}: {self.body_space.unknown_reason(name)}")
            if spec is None:
                known = ", ".join([*_SPECS, "contact", "soft_contact", "solver", "body",
                                   "joints"])
                raise ParameterError(f"unknown engine parameter {name!r}; known: {known}, "
                                     "and for an object from a scene file or URDF "
                                     "body.<link>.* and joint.<joint>.* (README)")
            low, high = bounds.get(name, CALIBRATION_BOUNDS.get(name, (spec.low, spec.high)))
            prior = priors.get(name) or (LogUniform() if spec.log_scale else Uniform())
            if isinstance(prior, str):
                try:
                    prior = parse_prior(prior)
                except ParameterError as exc:
                    raise ParameterError(f"{name}: {exc}") from None
            parameters.append(Parameter(name, float(low), float(high), spec.log_scale, prior,
                                        spec if is_body_name(name) else None))
        self.parameters: tuple[Parameter, ...] = tuple(parameters)
        self.base = base or EngineParams()
        # a combination the engine ignores (contact_damping without a finite stiffness,
        # ...) is refused now, not at the first evaluation
        self.base.replace(**{p.name: p.low + 0.5 * (p.high - p.low) for p in parameters
                             if p.name in _ENGINE_NAMES})
        self._low = np.array([p.low for p in parameters])
        self._high = np.array([p.high for p in parameters])
        self._log = np.array([p.log_scale for p in parameters])

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.parameters]

    @property
    def ndim(self) -> int:
        return len(self.parameters)

    # --- coordinates ------------------------------------------------------------------------
    def from_unit(self, z: np.ndarray) -> np.ndarray:
        """Natural values (..., d) from unit coordinates (..., d)."""
        z = np.asarray(z, dtype=np.float64)
        linear = self._low + z * (self._high - self._low)
        with np.errstate(divide="ignore"):
            low, high = np.log(np.where(self._log, self._low, 1.0)), np.log(
                np.where(self._log, self._high, 1.0))
        return np.where(self._log, np.exp(low + z * (high - low)), linear)

    def to_unit(self, x: np.ndarray) -> np.ndarray:
        """Unit coordinates (..., d) from natural values (..., d)."""
        x = np.asarray(x, dtype=np.float64)
        linear = (x - self._low) / (self._high - self._low)
        safe = np.where(self._log, x, 1.0)
        low, high = np.where(self._log, self._low, 1.0), np.where(self._log, self._high, 2.0)
        logged = np.log(safe / low) / np.log(high / low)
        return np.where(self._log, logged, linear)

    @staticmethod
    def reflect(z: np.ndarray) -> np.ndarray:
        """Fold unit coordinates back into [0, 1] (mirror at the walls): keeps a symmetric
        random walk symmetric at the bounds."""
        folded = np.mod(np.asarray(z, dtype=np.float64), 2.0)
        return np.where(folded > 1.0, 2.0 - folded, folded)

    def log_prior(self, z: np.ndarray) -> np.ndarray:
        """Log prior density in unit coordinates, shape z.shape[:-1]; -inf outside [0, 1]."""
        z = np.asarray(z, dtype=np.float64)
        x = self.from_unit(z)
        total = np.zeros(z.shape[:-1])
        for i, parameter in enumerate(self.parameters):
            # density in z = density in x times |dx/dz|
            if parameter.log_scale:
                jacobian = np.log(x[..., i]) + math.log(math.log(parameter.high / parameter.low))
            else:
                jacobian = np.full(z.shape[:-1], math.log(parameter.high - parameter.low))
            total = total + parameter.prior.log_density(x[..., i]) + jacobian
        inside = np.all((z >= 0.0) & (z <= 1.0), axis=-1)
        return np.where(inside, total, -np.inf)

    def engine_params(self, x: Sequence[float]) -> EngineParams:
        """Full engine parameters: ``base`` with the calibrated values set to ``x``; with
        body or joint names, an :class:`~residualsim.sim.scenes.body.ObjectParams` whose
        body has them (the rest at the URDF's values)."""
        values = dict(zip(self.names, map(float, x)))
        if self.body_space is None:
            return self.base.replace(**values)
        from residualsim.sim.scenes.params import ObjectParams
        from residualsim.sysid.bodyspace import is_body_name

        body = {k: v for k, v in values.items() if is_body_name(k)}
        contact = self.base.replace(**{k: v for k, v in values.items() if not is_body_name(k)})
        return ObjectParams.of(contact, self.body_space.body(body))

    def start(self) -> np.ndarray:
        """Unit coordinates to start a point estimate from: the middle of each engine
        parameter's range, the URDF's value of each body and joint parameter."""
        x = self.from_unit(np.full(self.ndim, 0.5))
        for i, parameter in enumerate(self.parameters):
            if parameter.spec is not None:
                x[i] = np.clip(parameter.spec.default, parameter.low, parameter.high)
        z = self.to_unit(x)
        return z

    # --- persistence --------------------------------------------------------------------------
    def as_json(self) -> dict:
        content = {"parameters": [p.as_json() for p in self.parameters],
                   "base": self.base.as_json()}
        if self.scene is not None:
            content["scene"] = self.scene
        return content

    @classmethod
    def from_json(cls, content: Mapping) -> ParamSpace:
        try:
            parameters = content["parameters"]
            return cls([p["name"] for p in parameters],
                       bounds={p["name"]: (p["low"], p["high"]) for p in parameters},
                       priors={p["name"]: p["prior"] for p in parameters},
                       base=EngineParams(**{k: float(v) for k, v in content["base"].items()}),
                       scene=content.get("scene"))
        except (KeyError, TypeError) as exc:
            raise ParameterError(f"not a parameter-space description ({exc})") from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ParamSpace) and self.as_json() == other.as_json()

    def __repr__(self) -> str:
        inner = ", ".join(f"{p.name} in [{p.low:g}, {p.high:g}] ({p.prior.describe()})"
                          for p in self.parameters)
        return f"ParamSpace({inner})"


def calibration_run(scene: str, names: Sequence[str], method: str,
                    base: EngineParams | Mapping[str, float] | str | None = None
                    ) -> dict[str, Any]:
    """What tells calibrate runs apart in an output directory
    (:data:`residualsim.atomic.RUN_FILE`): the method, the calibrated names (groups
    expanded, as :class:`ParamSpace` has them; the arm + loop: its two stiffnesses) and the
    scene (a scene file by its absolute path)."""
    from residualsim.sim.scenes import is_scene_path, parse_params

    if scene == "arm-loop":
        params = ["kappa_theta", "kappa_psi"]
    else:
        base = None if base is None else parse_params(base)
        params = list(ParamSpace(names, base=base, scene=scene).names)
    return {"command": "calibrate", "method": method, "params": params,
            "scene": os.path.abspath(scene) if is_scene_path(scene) else scene}
