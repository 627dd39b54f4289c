"""Engine parameters that calibration tunes: names, units, valid ranges, defaults.

Convention (see train/README.md, "Scenes and engine settings"): Bullet combines each contact coefficient across
the two bodies in contact (lateral friction and restitution multiply; spinning and rolling
friction combine as s_a*f_b + s_b*f_a; stiffness combines in series and damping adds). Every
scene gives its static body (table, floor) friction 1, restitution 1, spinning and rolling
friction 0 and, for soft contact, an effectively infinite stiffness and zero damping, so the
values below are the *effective pair values* of the contact, not per-body values.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from residualsim.atomic import read_json
from residualsim.errors import ParameterError
from residualsim.sim.scenes.body import BodyParams

__all__ = ["ParamSpec", "ENGINE_PARAMS", "SOLVER_PARAMS", "GROUND_PARAMS", "SPRING_PARAMS",
           "EngineParams",
           "ObjectParams", "body_of", "parse_params"]


@dataclass(frozen=True)
class ParamSpec:
    """One tunable engine parameter.

    ``low``/``high`` bound the valid range (inclusive); ``log_scale`` says calibration should
    move it in log space. ``default`` is PyBullet's own effective value out of the box.
    """

    name: str
    default: float
    low: float
    high: float
    unit: str
    description: str
    log_scale: bool = False


ENGINE_PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec("lateral_friction", 0.25, 0.0, 2.0, "-",
              "Coulomb friction coefficient mu (PyBullet default 0.5 x 0.5 = 0.25)"),
    ParamSpec("restitution", 0.0, 0.0, 1.0, "-",
              "coefficient of restitution (post/pre normal velocity ratio)"),
    ParamSpec("spinning_friction", 0.0, 0.0, 0.5, "m",
              "torsional friction about the contact normal"),
    ParamSpec("rolling_friction", 0.0, 0.0, 0.5, "m",
              "rolling resistance"),
    ParamSpec("contact_stiffness", math.inf, 1e2, math.inf, "N/m",
              "soft-contact stiffness; inf selects PyBullet's rigid (LCP) contact", log_scale=True),
    ParamSpec("contact_damping", 0.0, 0.0, 1e4, "N s/m",
              "soft-contact damping; ignored for rigid contact"),
)

#: The ``solver`` group: PyBullet solver and collision settings, calibratable like the contact
#: parameters. Unset (None) keeps the scene's :class:`~residualsim.sim.scenes.base.EngineSettings`
#: and PyBullet's own values; ``default`` is PyBullet's value. Flags (split impulse, friction
#: anchor) are on from 0.5, iterations are rounded. A scene refuses those its engine ignores
#: (:meth:`~residualsim.sim.scenes.base.Scene.check_params`); the table in README.md says why
#: each matters, train/README.md §19.1 how they were measured.
SOLVER_PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec("contact_erp", 0.2, 0.0, 1.0, "-",
              "share of the contact penetration removed per internal step (rigid contact; "
              "soft contact derives it from stiffness and damping)"),
    ParamSpec("erp", 0.2, 0.0, 1.0, "-",
              "share of a joint-constraint error removed per internal step (objects with "
              "joints)"),
    ParamSpec("solver_iterations", 50.0, 1.0, 1000.0, "iterations",
              "projected Gauss-Seidel sweeps per internal step (rounded); few leave "
              "contact and friction forces unconverged", log_scale=True),
    ParamSpec("collision_margin", 0.001, 0.0, 0.02, "m",
              "collision shell around convex meshes (rounds their edges and corners)"),
    ParamSpec("contact_processing_threshold", 0.0, 0.0, 0.1, "m",
              "contacts closer than this enter the solver (speculative contacts)"),
    ParamSpec("split_impulse", 0.0, 0.0, 1.0, "on/off",
              "penetration recovery kept out of the velocities (on from 0.5)"),
    ParamSpec("split_impulse_penetration_threshold", -0.04, -0.1, 0.0, "m",
              "penetration deeper than this is recovered by split impulse (needs "
              "split_impulse on)"),
    ParamSpec("restitution_velocity_threshold", 0.2, 0.0, 2.0, "m/s",
              "approach speed below which no bounce is applied"),
    ParamSpec("friction_anchor", 0.0, 0.0, 1.0, "on/off",
              "friction anchors: a sticking contact point is held in place instead of "
              "creeping (on from 0.5)"),
)

#: Solver parameters that are settings, not quantities: the engine rounds iterations and
#: reads the flags as on from 0.5, so EngineParams holds the value the engine uses (a search
#: that proposes 35.556 iterations or a friction anchor of 0.422 reports 36 and 0).
_SETTINGS_SNAP = {"solver_iterations": lambda v: float(round(v)),
                  "split_impulse": lambda v: 1.0 if v >= 0.5 else 0.0,
                  "friction_anchor": lambda v: 1.0 if v >= 0.5 else 0.0}

#: Where the static body (table, floor) is: ``table_height_m``, metres along the world's up
#: axis (minus gravity: z in 3-D scenes, y in the planar arena), the height of its contact
#: surface relative to where the scene puts it (the cube's table top at z = 0). Unset (None)
#: is the scene's own place, as 0 is. Valid range +-5 cm (a misplaced capture frame, not a
#: different set-up); calibration searches +-5 mm (:data:`~residualsim.sysid.paramspace.CALIBRATION_BOUNDS`;
#: the real cube rests 1.1 mm below the simulated one), and
#: :func:`residualsim.sysid.ground.estimate_table_height` finds it in closed form from the
#: recordings' rest phases.
GROUND_PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec("table_height_m", 0.0, -0.05, 0.05, "m",
              "height of the table/floor surface along the up axis, relative to the scene's"),
)

#: Stiffnesses of the arm + loop scene's joint springs, identified by
#: :mod:`residualsim.sysid.loop_stiffness` through the same :class:`~residualsim.sysid.paramspace.ParamSpace`
#: (they are not contact parameters, so :class:`EngineParams` does not hold them).
SPRING_PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec("kappa_theta", 4.45252, 1e-3, 1e3, "N m/rad",
              "stiffness of every θ (twist) joint of the loop", log_scale=True),
    ParamSpec("kappa_psi", 0.96969, 1e-3, 1e3, "N m/rad",
              "stiffness of every ψ (bending) joint of the loop", log_scale=True),
)

_OPTIONAL = SOLVER_PARAMS + GROUND_PARAMS
_SPECS = {spec.name: spec for spec in ENGINE_PARAMS + _OPTIONAL}


@dataclass(frozen=True)
class EngineParams:
    """Effective contact parameters of a scene; validated on creation.

    Units: friction and restitution dimensionless, spinning and rolling friction in metres
    (Bullet's convention), stiffness N/m, damping N*s/m. The :data:`SOLVER_PARAMS` are None
    (the scene's settings) unless set; so is ``table_height_m`` (m along the up axis, None:
    the scene's own table, :data:`GROUND_PARAMS`). Combinations the engine would ignore are refused:
    contact damping without a finite stiffness, contact ERP with soft contact, a split-impulse
    threshold without split impulse.
    """

    lateral_friction: float = 0.25
    restitution: float = 0.0
    spinning_friction: float = 0.0
    rolling_friction: float = 0.0
    contact_stiffness: float = math.inf
    contact_damping: float = 0.0
    contact_erp: float | None = None
    erp: float | None = None
    solver_iterations: float | None = None
    collision_margin: float | None = None
    contact_processing_threshold: float | None = None
    split_impulse: float | None = None
    split_impulse_penetration_threshold: float | None = None
    restitution_velocity_threshold: float | None = None
    friction_anchor: float | None = None
    table_height_m: float | None = None

    def __post_init__(self) -> None:
        for spec in ENGINE_PARAMS + _OPTIONAL:
            value = getattr(self, spec.name)
            if value is None and spec in _OPTIONAL:
                continue
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise ParameterError(f"{spec.name} must be a number, got {value!r}") from None
            if math.isnan(value) or (math.isinf(value) and spec.high != math.inf):
                raise ParameterError(f"{spec.name} must be finite, got {value}")
            if not spec.low <= value <= spec.high:
                raise ParameterError(
                    f"{spec.name} must lie in [{spec.low}, {spec.high}] {spec.unit}, got {value}"
                )
            if spec.name in _SETTINGS_SNAP:  # the value the engine uses, not the search's
                value = _SETTINGS_SNAP[spec.name](value)
            object.__setattr__(self, spec.name, value)
        self._check_mode()

    def _check_mode(self) -> None:
        """ParameterError for a parameter the engine would ignore in this contact mode."""
        if self.contact_damping > 0 and not self.soft_contact:
            raise ParameterError(
                f"contact_damping = {self.contact_damping:g} N s/m needs a finite "
                "contact_stiffness: rigid contact ignores damping")
        if self.contact_erp is not None and self.soft_contact:
            raise ParameterError(
                "contact_erp is ignored with soft contact (a finite contact_stiffness sets "
                "the contact's ERP from stiffness and damping): drop one of the two")
        if self.split_impulse_penetration_threshold is not None and not self.flag(
                "split_impulse"):
            raise ParameterError("split_impulse_penetration_threshold needs split_impulse = 1 "
                                 "(without split impulse the engine ignores it)")

    def flag(self, name: str) -> bool:
        """An on/off solver parameter (``split_impulse``, ``friction_anchor``): on from 0.5."""
        value = getattr(self, name)
        return value is not None and value >= 0.5

    def solver_values(self) -> dict[str, float]:
        """The solver parameters that are set (name to value)."""
        return {spec.name: getattr(self, spec.name) for spec in SOLVER_PARAMS
                if getattr(self, spec.name) is not None}

    @property
    def table_offset_m(self) -> float:
        """``table_height_m`` as a number: 0.0 when unset (the scene's own table), metres."""
        return 0.0 if self.table_height_m is None else float(self.table_height_m)

    @property
    def soft_contact(self) -> bool:
        """True when a finite contact stiffness selects Bullet's soft contact."""
        return math.isfinite(self.contact_stiffness)

    def replace(self, **changes: float) -> EngineParams:
        """A copy with some parameters changed (validated). A switch of contact mode drops
        what the new mode ignores unless it is among ``changes``: the damping when a change
        makes contact rigid, the contact ERP when it makes contact soft."""
        unknown = sorted(set(changes) - set(_SPECS))
        if unknown:
            raise ParameterError(
                f"unknown engine parameter(s) {', '.join(unknown)}; known: {', '.join(_SPECS)}"
            )
        values = {**self.as_dict(), **changes}
        if "contact_stiffness" in changes:
            try:
                rigid = not math.isfinite(float(values["contact_stiffness"]))
            except (TypeError, ValueError):  # EngineParams names the bad value
                rigid = False
            if rigid and "contact_damping" not in changes:
                values["contact_damping"] = 0.0
            if not rigid and "contact_erp" not in changes:
                values.pop("contact_erp", None)
        return EngineParams(**values)

    def as_dict(self) -> dict[str, float]:
        """Plain dict of parameter name to value (solver parameters and the table height
        only where set: an unset one is left out, so older parameter files read the same)."""
        ground = {} if self.table_height_m is None else {"table_height_m": self.table_height_m}
        return {**{spec.name: getattr(self, spec.name) for spec in ENGINE_PARAMS},
                **self.solver_values(), **ground}

    def as_json(self) -> dict[str, float | str]:
        """Like :meth:`as_dict` but strict-JSON safe: an infinite value becomes ``"inf"``."""
        return {k: (v if math.isfinite(v) else "inf") for k, v in self.as_dict().items()}


@dataclass(frozen=True)
class ObjectParams(EngineParams):
    """Contact parameters plus the object's ``body`` (None: the URDF's own). An engine given
    these reloads its object with the body (:class:`~residualsim.sim.engine.Engine`)."""

    body: BodyParams | None = None

    def replace(self, **changes: float) -> ObjectParams:
        plain = EngineParams.replace(self, **changes)
        return ObjectParams(**plain.as_dict(), body=self.body)

    @classmethod
    def of(cls, params: EngineParams, body: BodyParams | None) -> EngineParams:
        """``params`` with ``body`` (a plain EngineParams when body is None)."""
        contact = params.as_dict()  # the contact and the set solver parameters
        return EngineParams(**contact) if body is None else cls(**contact, body=body)


def body_of(params: EngineParams) -> BodyParams | None:
    """The body an engine parameter set carries (None: the URDF's own)."""
    return getattr(params, "body", None)


def _path_kind(path: Path) -> str | None:
    """"dir", "file", "other" (a device, a pipe) or None (nothing there, or text that cannot
    name a file: too long, a NUL byte), so that name=value text is never an OS error."""
    try:
        if not path.exists():
            return None
        return "dir" if path.is_dir() else "file" if path.is_file() else "other"
    except (OSError, ValueError):
        return None


def parse_params(source: str | Path | Mapping[str, float] | EngineParams | None,
                 base: EngineParams | None = None) -> EngineParams:
    """Engine parameters from a ``k=v,...`` string, a JSON file, a mapping or None.

    A JSON file may hold the mapping itself or a ``{"params": {...}}`` or
    ``{"median": {...}}`` object (a calibration summary); a directory holding a
    ``summary.json`` (a calibration output) is read through that file. A summary with a
    ``"body"`` (a calibration of the body and joints) gives an
    :class:`~residualsim.sim.scenes.body.ObjectParams` carrying it. Values not given keep ``base``
    (default: :class:`EngineParams` defaults).
    """
    base = base or EngineParams()
    if source is None:
        return base
    if isinstance(source, EngineParams):
        return source
    if isinstance(source, Mapping):
        return base.replace(**{str(k): v for k, v in source.items()})
    text = str(source).strip()
    path = Path(text)
    kind = _path_kind(path)
    if kind == "dir" and (path / "summary.json").is_file():  # a calibration directory
        path, kind = path / "summary.json", "file"
        text = str(path)
    elif kind == "dir":
        raise ParameterError(f"{path}: a folder without summary.json, so not a calibration "
                             "(give name=value pairs, a JSON file or a calibrate --out folder)")
    if kind == "other":
        raise ParameterError(f"{path}: not a regular file (a device or pipe), so not a "
                             "parameter file (give name=value pairs, a JSON file or a calibrate "
                             "--out folder)")
    if text.endswith(".json") or kind == "file":
        content = read_json(path, missing=f"{path}: parameter file not found",
                            error=ParameterError, unique_keys=True)
        body = content.get("body") if isinstance(content, dict) else None
        if isinstance(content, dict):
            for key in ("params", "median"):
                if isinstance(content.get(key), dict):
                    content = content[key]
                    break
        if not isinstance(content, dict):
            raise ParameterError(f"{path}: expected a JSON object of parameter values")
        unknown = sorted(set(content) - set(_SPECS))
        if unknown:  # a summary without "params", a model.json: say what the file lacks
            raise ParameterError(f"{path}: not engine parameters: unknown name(s) "
                                 f"{', '.join(map(repr, unknown[:5]))}; give a JSON object of "
                                 f"parameter values, or a calibration summary with a \"params\" "
                                 f"object (known names: {', '.join(_SPECS)})")
        for name, value in content.items():  # JSON true is not friction 1.0
            if isinstance(value, bool) or not (isinstance(value, (int, float)) or value in (
                    "inf", "Infinity")):
                raise ParameterError(f"{path}: {name} must be a number, got "
                                     f"{json.dumps(value)}")
        try:
            params = base.replace(**content)
            if isinstance(body, dict):  # a calibration of the body too
                params = ObjectParams.of(params, BodyParams.from_json(body, str(path)))
            return params
        except ParameterError as exc:
            if str(exc).startswith(f"{path}:"):  # the body's own message names the file
                raise
            raise ParameterError(f"{path}: {exc}") from None
    changes: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep:
            cut = f"{item[:60]!r}..." if len(item) > 60 else repr(item)
            raise ParameterError(f"expected name=value in parameter list, got {cut}")
        if name.strip() in changes:
            raise ParameterError(f"{name.strip()} is given twice in the parameter list "
                                 f"{text!r}")
        try:
            changes[name.strip()] = float(value)
        except ValueError:
            raise ParameterError(f"{name.strip()}: {value!r} is not a number") from None
    return base.replace(**changes)
