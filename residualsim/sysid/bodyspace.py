"""Body and joint parameters of a user's object as calibration moves them, physically
consistent by construction.

Names (``<link>`` and ``<joint>`` as in the URDF; README "Calibrate the body"):

=================================  =========  ================================================
name                               unit       meaning, default search range
=================================  =========  ================================================
``body.<link>.com_x|com_y|com_z``  m          centre of mass in the link frame; inside the
                                              link's collision box (its AABB, link frame)
``body.<link>.moment_1|2|3``       kg m²      principal second moments of mass s_i about the
                                              centre of mass; URDF value × [1/4, 4], log scale
``body.<link>.axes_x|axes_y|axes_z`` rad      rotation vector turning the URDF's principal
                                              axes; [-π/4, π/4]
``body.<link>.mass_ratio``         -          the link's mass over the root link's (every link
                                              but the root); URDF value × [1/3, 3], log scale;
                                              in group ``body`` only for the child of a
                                              prismatic joint (see below)
``joint.<joint>.damping``          N m s/rad  viscous joint damping (N s/m prismatic);
                                              [0, 20 s⁻¹ × I_axis]
``joint.<joint>.friction``         N m        Coulomb joint friction (N prismatic);
                                              [0, 50 s⁻² × I_axis]
=================================  =========  ================================================

I_axis is the child link's inertia about the joint axis (kg m²; its mass, kg, for a
prismatic joint), so the ranges scale with the object. Groups: ``body`` (every ``body.*``
name), ``joints`` (every ``joint.*`` name), ``contact`` (the rigid-contact coefficients:
lateral, spinning and rolling friction, restitution), ``soft_contact`` (contact stiffness
and damping: choosing soft contact is a model choice, so it is asked for by name) and
``solver`` (the solver parameters the scene's engine honours, :func:`solver_group`).

**Consistency.** A link's rotational inertia is I = tr(Σ)·1 − Σ with Σ = R diag(s) Rᵀ its
second-moment matrix: for any s_i > 0 the inertia is positive definite and its principal
moments I_1 = s_2 + s_3, I_2 = s_1 + s_3, I_3 = s_1 + s_2 obey the triangle inequality
(the pseudo-inertia is positive definite; Wensing et al. 2017, Rucker & Wensing 2022). R is
the URDF's principal axes turned by ``axes``. **The total mass is not calibrated**: poses
alone cannot observe it (gravity and contact forces both scale with it), so the URDF's total
is kept and only the ratios between links move. **Nor is the mass split across a revolute
joint** (or a fixed one): a point mass on the joint's axis sits at the same place in both
links' frames whatever the joint does, so booking it to one link or the other changes no
motion, while the links' centres of mass and moments move with it (30 g of the hinge
example's 180 g arm moves its centre of mass 9 mm and changes the joint's motion by
0.04 mrad; tests/test_body_params.py). Group ``body`` therefore keeps those ratios at the
URDF's; they can still be named.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy.spatial.transform import Rotation

from residualsim.errors import ParameterError
from residualsim.sim.scenes import SOLVER_PARAMS, ParamSpec, make_scene
from residualsim.sim.scenes.body import (BodyParams, JointDynamics, LinkInertial, inertia_tuple,
                                         link_aabbs, read_body)

__all__ = ["BodySpace", "body_space", "GROUPS", "CONTACT_GROUP", "SOFT_CONTACT_GROUP",
           "default_budget", "resolve_method", "expand_names", "is_body_name",
           "inertia_scale_direction",
           "names_body", "solver_group"]

CONTACT_GROUP = ("lateral_friction", "restitution", "spinning_friction", "rolling_friction")
SOFT_CONTACT_GROUP = ("contact_stiffness", "contact_damping")
GROUPS = ("contact", "soft_contact", "solver", "body", "joints")
_MOMENT_RANGE, _MASS_RANGE, _AXES_RAD = 4.0, 3.0, math.pi / 4
_DAMPING_RATE, _FRICTION_RATE = 20.0, 50.0


def is_body_name(name: str) -> bool:
    """Whether a parameter name is a body or joint parameter (``body.*``, ``joint.*``)."""
    return name.startswith(("body.", "joint."))


def names_body(names: Sequence[str]) -> bool:
    """Whether calibration ``names`` hold body or joint parameters or their groups."""
    return any(n.strip() in ("body", "joints") or is_body_name(n.strip()) for n in names)


def resolve_method(method: str | None, names: Sequence[str]) -> str:
    """``calibrate``'s method: ``lsq`` when none is named and ``names`` hold body or joint
    parameters (or their groups ``body``, ``joints``), else ``mh``.

    Only ``lsq`` fits the body in stages (free flight, then contact, then the weak
    directions) with each pose-only recording's initial state solved beside the body; on
    pose-only recordings nevergrad over body, joints and contact together returned a body
    predicting held-out recordings 1.745x worse than PyBullet's defaults, lsq 0.887x (issue
    48; train/README.md §22). ``nevergrad`` named with body or joint names is therefore
    refused (:class:`ParameterError` naming ``--method lsq``); ``mh`` takes them, its pilot
    being that staged fit (:func:`~residualsim.sysid.calibrate.calibrate`; issue 50); the
    library's :func:`~residualsim.sysid.calibrate.calibrate` takes nevergrad too, for
    studies.
    """
    body = names_body(names)
    if method is None:
        return "lsq" if body else "mh"
    if body and method == "nevergrad":
        raise ParameterError(
            "--method nevergrad is refused for body or joint parameters: it searches them "
            "together with the contact, which on pose-only recordings found bodies worse "
            "than PyBullet's defaults; use --method lsq (the default with body or joint "
            "names), which stages free flight -> contact -> weak directions, or mh, which "
            "samples about that fit (train/README.md §22)")
    return method


#: ``calibrate --budget`` when none is given, and for ``lsq`` with body or joint names:
#: its body stage on free flight needs more parameter sets (100 pose-only synthetic hinge
#: tosses, 20 body and joint names: 200 spent in the body stage, held out 0.86x the
#: defaults' error; 300: 0.73x; 600: converged at 530, 0.59x, in 61 s; train/README §22).
DEFAULT_BUDGET, BODY_LSQ_BUDGET = 200, 600


def default_budget(method: str, names: Sequence[str]) -> int:
    """``calibrate``'s ``--budget`` when none is given: :data:`BODY_LSQ_BUDGET` for ``lsq``
    with body or joint names (or their groups) and for the staged least-squares pilot of
    them of ``mh`` and ``sandwich``, else :data:`DEFAULT_BUDGET`."""
    return BODY_LSQ_BUDGET if method in ("lsq", "mh", "sandwich") and names_body(names) \
        else DEFAULT_BUDGET


@dataclasses.dataclass(frozen=True)
class _LinkFrame:
    """A link's nominal principal frame: ``rotation`` (3, 3) columns the principal axes in
    the link frame (a proper rotation) and ``moments`` (3,) the second moments s_i."""

    rotation: np.ndarray
    moments: np.ndarray


def _principal(link: LinkInertial) -> _LinkFrame:
    from residualsim.sim.scenes.body import inertia_matrix

    eigenvalues, vectors = np.linalg.eigh(inertia_matrix(link.inertia))
    if np.linalg.det(vectors) < 0:
        vectors[:, 0] = -vectors[:, 0]
    moments = 0.5 * eigenvalues.sum() - eigenvalues
    floor = 1e-3 * moments.max()
    return _LinkFrame(vectors, np.maximum(moments, floor))


class BodySpace:
    """The body and joint parameters of one scene's object (see the module doc).

    ``specs`` maps every name to its :class:`ParamSpec` (default: the URDF's value; low/high:
    the default search range). :meth:`body` turns values for some names (the rest at the
    URDF's) into a :class:`BodyParams`.
    """

    def __init__(self, urdf: str | Path) -> None:
        self.urdf = Path(urdf)
        self.nominal = read_body(self.urdf)
        root = ElementTree.parse(self.urdf).getroot()
        children = {j.find("child").get("link") for j in root.findall("joint")}
        #: links whose mass ratio the motion cannot reveal (see the module doc): every child
        #: of a joint that is not prismatic
        self.hidden_mass = {j.find("child").get("link") for j in root.findall("joint")
                            if j.get("type") != "prismatic"}
        self.root = next(l.name for l in self.nominal.links if l.name not in children)
        self._frames = {l.name: _principal(l) for l in self.nominal.links}
        boxes = link_aabbs(self.urdf)
        specs: dict[str, ParamSpec] = {}
        for link in self.nominal.links:
            low, high = boxes[link.name]
            for k, axis in enumerate("xyz"):
                lo, hi = float(low[k]), float(high[k])
                value = float(link.com_m[k])
                if hi - lo < 1e-6:  # a flat or missing box: allow 1 mm either side
                    lo, hi = min(lo, value) - 1e-3, max(hi, value) + 1e-3
                specs[f"body.{link.name}.com_{axis}"] = ParamSpec(
                    f"body.{link.name}.com_{axis}", value, lo, hi, "m",
                    f"centre of mass of {link.name}, link frame {axis}")
            for k, moment in enumerate(self._frames[link.name].moments, start=1):
                specs[f"body.{link.name}.moment_{k}"] = ParamSpec(
                    f"body.{link.name}.moment_{k}", float(moment), float(moment) / _MOMENT_RANGE,
                    float(moment) * _MOMENT_RANGE, "kg m^2",
                    f"principal second moment of mass {k} of {link.name}", log_scale=True)
            for axis in "xyz":
                specs[f"body.{link.name}.axes_{axis}"] = ParamSpec(
                    f"body.{link.name}.axes_{axis}", 0.0, -_AXES_RAD, _AXES_RAD, "rad",
                    f"turn of {link.name}'s principal axes about link-frame {axis}")
            if link.name != self.root:
                ratio = link.mass_kg / self.nominal.link(self.root).mass_kg
                specs[f"body.{link.name}.mass_ratio"] = ParamSpec(
                    f"body.{link.name}.mass_ratio", ratio, ratio / _MASS_RANGE,
                    ratio * _MASS_RANGE, "-", f"mass of {link.name} over {self.root}'s",
                    log_scale=True)
        for joint, inertia in zip(self.nominal.joints, _axis_inertias(root, self.nominal)):
            for label, rate, unit in (("damping", _DAMPING_RATE, "N m s/rad"),
                                      ("friction", _FRICTION_RATE, "N m")):
                name = f"joint.{joint.name}.{label}"
                value = getattr(joint, label)
                specs[name] = ParamSpec(name, value, 0.0, max(rate * inertia, 2 * value), unit,
                                        f"{label} of joint {joint.name}")
        self.specs = specs

    def unknown_reason(self, name: str) -> str:
        """Why ``name`` (a ``body.*`` or ``joint.*`` name not in :attr:`specs`) is not a
        parameter of this object: no such link or joint (listing the object's), the root
        link's mass ratio, or no such quantity (listing the valid ones)."""
        links = [link.name for link in self.nominal.links]
        joints = [joint.name for joint in self.nominal.joints]
        parts = name.split(".")
        kind = parts[0]
        if len(parts) != 3 or kind not in ("body", "joint"):
            return (f"{name!r} is not of the form body.<link>.<quantity> or "
                    "joint.<joint>.<quantity>")
        _, owner, quantity = parts
        if kind == "body" and owner not in links:
            return f"the object has no link {owner!r}: its links are {', '.join(links)}"
        if kind == "joint" and owner not in joints:
            return (f"the object has no joint {owner!r}: its non-fixed joints are "
                    f"{', '.join(joints) or 'none'}")
        if kind == "body" and quantity == "mass_ratio" and owner == self.root:
            return (f"{owner!r} is the root link: its mass ratio is 1 by definition (the "
                    "other links' masses are ratios to it, and the total mass is kept from "
                    "the URDF because poses cannot observe it)")
        valid = sorted({n.split(".")[2] for n in self.specs if n.startswith(f"{kind}.{owner}.")})
        return f"{owner!r} has no parameter {quantity!r}: its parameters are {', '.join(valid)}"

    def group(self, group: str) -> list[str]:
        """The names of group ``body`` or ``joints``."""
        prefix = {"body": "body.", "joints": "joint."}[group]
        return [name for name in self.specs if name.startswith(prefix)
                and not (name.endswith(".mass_ratio")
                         and name.split(".")[1] in self.hidden_mass)]

    def body(self, values: Mapping[str, float]) -> BodyParams:
        """The body with ``values`` (name -> natural value) set, every other name at the
        URDF's value (the URDF's own inertia exactly, for a link none of whose names is
        given). ParameterError for an unknown name."""
        unknown = sorted(set(values) - set(self.specs))
        if unknown:
            raise ParameterError(f"unknown body parameter(s) {', '.join(unknown)}; known: "
                                 f"{', '.join(self.specs)}")

        def value(name: str) -> float:
            return float(values[name]) if name in values else self.specs[name].default

        weights = {l.name: 1.0 if l.name == self.root else value(f"body.{l.name}.mass_ratio")
                   for l in self.nominal.links}
        total, scale = self.nominal.mass_kg, sum(weights.values())
        links = []
        for link in self.nominal.links:
            prefix = f"body.{link.name}."
            com = tuple(value(prefix + f"com_{a}") for a in "xyz")
            inertia = link.inertia
            if any(prefix + f"{k}" in values for k in ("moment_1", "moment_2", "moment_3",
                                                       "axes_x", "axes_y", "axes_z")):
                frame = self._frames[link.name]
                s = np.array([value(prefix + f"moment_{k}") for k in (1, 2, 3)])
                turn = Rotation.from_rotvec([value(prefix + f"axes_{a}") for a in "xyz"])
                rot = frame.rotation @ turn.as_matrix()
                inertia = inertia_tuple(rot @ np.diag(s.sum() - s) @ rot.T)
            links.append(LinkInertial(link.name, total * weights[link.name] / scale, com,
                                      inertia))
        joints = tuple(JointDynamics(j.name, value(f"joint.{j.name}.damping"),
                                     value(f"joint.{j.name}.friction"))
                       for j in self.nominal.joints)
        return BodyParams(tuple(links), joints)

    def values(self, body: BodyParams) -> dict[str, float]:
        """Natural values of every name for ``body`` (the inverse of :meth:`body`, with the
        principal axes taken nearest the URDF's)."""
        from residualsim.sim.scenes.body import inertia_matrix

        out: dict[str, float] = {}
        root_mass = body.link(self.root).mass_kg
        for link in body.links:
            prefix = f"body.{link.name}."
            for k, axis in enumerate("xyz"):
                out[prefix + f"com_{axis}"] = link.com_m[k]
            frame = self._frames[link.name]
            local = frame.rotation.T @ inertia_matrix(link.inertia) @ frame.rotation
            eigenvalues, vectors = np.linalg.eigh(local)
            order = [int(np.argmax(np.abs(vectors[i]))) for i in range(3)]
            if sorted(order) != [0, 1, 2]:
                order = [0, 1, 2]
            vectors = vectors[:, order] * np.sign(vectors[[0, 1, 2], order])
            if np.linalg.det(vectors) < 0:
                vectors[:, 2] = -vectors[:, 2]
            lam = eigenvalues[order]
            moments = 0.5 * lam.sum() - lam
            for k in range(3):
                out[prefix + f"moment_{k + 1}"] = float(moments[k])
            for axis, v in zip("xyz", Rotation.from_matrix(vectors).as_rotvec()):
                out[prefix + f"axes_{axis}"] = float(v)
            if link.name != self.root:
                out[prefix + "mass_ratio"] = link.mass_kg / root_mass
        for joint in body.joints:
            out[f"joint.{joint.name}.damping"] = joint.damping
            out[f"joint.{joint.name}.friction"] = joint.friction
        return out


def _axis_inertias(root: ElementTree.Element, body: BodyParams) -> list[float]:
    """Per non-fixed joint (body order): the child link's inertia about the joint axis
    (kg m²), or its mass (kg) for a prismatic joint."""
    from residualsim.sim.scenes.body import inertia_matrix

    joints = {j.get("name"): j for j in root.findall("joint")}
    result = []
    for dynamics in body.joints:
        element = joints[dynamics.name]
        child = body.link(element.find("child").get("link"))
        if element.get("type") == "prismatic":
            result.append(child.mass_kg)
            continue
        axis_el = element.find("axis")
        axis = np.array([float(v) for v in (axis_el.get("xyz") if axis_el is not None
                                            else "1 0 0").split()])
        axis /= np.linalg.norm(axis)
        arm = np.cross(axis, np.asarray(child.com_m))
        result.append(float(axis @ inertia_matrix(child.inertia) @ axis
                            + child.mass_kg * arm @ arm))
    return result


@functools.lru_cache(maxsize=8)
def _cached(urdf: Path, mtime: float) -> BodySpace:
    return BodySpace(urdf)


def body_space(scene: str) -> BodySpace:
    """The :class:`BodySpace` of a scene (a free object from a scene file or URDF);
    ParameterError for a built-in or planar scene."""
    layout = make_scene(scene)
    spec = getattr(layout, "spec", None)
    if spec is None or layout.planar:
        raise ParameterError(f"scene {layout.name!r} has no body or joint parameters to "
                             "calibrate: they need a free object from a scene file or URDF")
    return _cached(spec.urdf, spec.urdf.stat().st_mtime)


def inertia_scale_direction(space: Any, scene: str) -> np.ndarray | None:
    """The direction in ``space``'s unit coordinates (d,) along which a single-link
    object's three second moments scale together, or None (an articulated object, whose
    links' masses do not scale with them, or fewer than three moments among the names).
    Torque-free flight cannot determine it (:func:`~residualsim.sysid.identifiability.
    without_inertia_scale`)."""
    if getattr(make_scene(scene), "n_joints", 0):
        return None
    index = [i for i, name in enumerate(space.names)
             if name.startswith("body.") and name.rpartition(".")[2] in
             ("moment_1", "moment_2", "moment_3")]
    if len(index) != 3:
        return None
    natural = space.from_unit(space.start())
    direction = np.zeros(len(space.names))
    for i in index:  # d z_i / d log(scale) at the start
        p = space.parameters[i]
        direction[i] = 1.0 / math.log(p.high / p.low) if p.log_scale else \
            natural[i] / (p.high - p.low)
    return direction


def solver_group(scene: str, soft: bool = False) -> list[str]:
    """The ``solver`` group of a scene: the :data:`~residualsim.sim.scenes.SOLVER_PARAMS` its
    engine honours (not in the scene's ``ignored_params``), without ``contact_erp`` when
    contact is ``soft`` (a finite stiffness sets the contact's ERP) and without the
    split-impulse threshold where split impulse is ignored."""
    ignored = make_scene(scene).ignored_params
    return [spec.name for spec in SOLVER_PARAMS
            if spec.name not in ignored and not (spec.name == "contact_erp" and soft)
            and not (spec.name == "split_impulse_penetration_threshold"
                     and "split_impulse" in ignored)]


def expand_names(names: Sequence[str], scene: str | None, soft_base: bool = False
                 ) -> list[str]:
    """Parameter names with the groups (``contact``, ``soft_contact``, ``solver``, ``body``,
    ``joints``) replaced by their members, in order, without repeats. ``soft_base``: the
    parameters not calibrated select soft contact (so ``solver`` leaves out the contact
    ERP, as it does when the contact stiffness is calibrated)."""
    names = [str(n).strip() for n in names]
    out: list[str] = []
    for name in names:
        if name == "contact":
            members = list(CONTACT_GROUP)
        elif name == "soft_contact":
            members = list(SOFT_CONTACT_GROUP)
        elif name == "solver":
            if scene is None:
                raise ParameterError("the 'solver' group needs a scene")
            soft = soft_base or bool({"soft_contact", "contact_stiffness"} & set(names))
            members = [m for m in solver_group(scene, soft) if m not in names]
        elif name in ("body", "joints"):
            if scene is None:
                raise ParameterError(f"the {name!r} group needs a scene")
            members = body_space(scene).group(name)
            if not members:
                raise ParameterError(f"scene {scene!r} has no {name} parameters (no "
                                     "non-fixed joints)" if name == "joints" else
                                     f"scene {scene!r} has no body parameters")
        else:
            members = [name]
        out.extend(m for m in members if m not in out)
    return out
