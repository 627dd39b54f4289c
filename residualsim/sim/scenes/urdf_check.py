"""Check a user's URDF before PyBullet sees it, so a bad file is one clear SceneError.

PyBullet crashes on some malformed URDFs (two unconnected root links: a segmentation fault),
silently changes others (a ``floating`` joint becomes fixed; a negative, zero or
triangle-inequality-violating inertia is zeroed) and reports every load failure as "Cannot
load URDF file." with the cause printed only to its own output. :func:`check_urdf` refuses,
naming the file and the element:

* XML that does not parse, a root element other than ``<robot>``;
* links or joints without a name, duplicate names, a joint naming a link that does not exist;
* anything but one tree: a link that is the child of two joints (a kinematic loop), more
  than one root link (links no joint connects), a joint that is its own parent;
* joint types other than ``revolute``, ``continuous``, ``prismatic`` and ``fixed``
  (``floating``, ``planar``, ``spherical`` and unknown names, each by name);
* a link without ``<inertial>`` or with a mass that is not finite and positive (kg); an
  inertia (kg m², about the centre of mass in the inertial frame) with a non-finite entry,
  that is not positive definite, or whose principal moments break the triangle inequality
  I_a + I_b >= I_c (any rigid body satisfies it; 1e-9 relative slack for rounding);
* a link mass above ``MAX_LINK_MASS_KG`` (1000 kg): implausible rather than impossible, so
  refused unless ``--allow-implausible`` (:mod:`residualsim.sim.implausible`). residualsim's
  scenes are tabletop objects tossed by hand or a robot (the examples weigh 0.18-0.37 kg),
  and PyBullet's contact with the table degrades with mass: the hinge example with a
  1e4 kg base has its base frame 65 mm below the table top, with 1e6 kg 5 m below;
* a ``revolute``, ``continuous`` or ``prismatic`` joint whose ``<axis xyz>`` is not three
  finite numbers or has zero length (the joint would have no direction);
* a ``<limit>`` of a ``revolute`` or ``prismatic`` joint with a non-finite ``lower`` or
  ``upper`` (rad or m), or with ``lower > upper``;
* a joint ``<dynamics>`` ``damping`` (N m s/rad or N s/m) or ``friction`` (N m or N) that is
  negative or not finite (negative damping feeds energy in: the object flies off);
* an ``<origin>`` (of a joint, or of a link's ``<inertial>``, ``<collision>`` or
  ``<visual>``) whose ``xyz`` (m) or ``rpy`` (rad) is not three finite numbers (a xacro
  leftover ``${...}``, two entries: PyBullet read them as zeros; ``nan``: a traceback, or
  no shape) or whose ``xyz`` is farther than ``MAX_OFFSET_M`` (10 m) from the origin of its
  frame, implausible (a 1e30 m offset made the object fall through the table);
* a ``<collision>`` shape with a size that is not finite and positive: a ``box`` ``size``
  entry, a ``sphere``, ``cylinder`` or ``capsule`` ``radius`` or ``length`` (m); a ``mesh``
  ``scale`` entry that is zero or not finite (a negative one mirrors the mesh, as robot
  descriptions do for left and right parts); a shape whose every size is above
  ``MAX_OFFSET_M`` (10 m), most likely millimetres, is implausible. An attribute that is absent is left to
  PyBullet, which names it. ``<visual>`` shapes do not take part in the physics and are
  not checked;
* a link without any ``<collision>`` element: it would pass through the table, since
  residualsim's tables collide with collision shapes only;
* a mesh file that is missing (:func:`~residualsim.sim.scenes.meshes.resolve_mesh`: a
  relative path is relative to the URDF's folder; ``package://NAME/rest`` is searched as
  PyBullet does, then in a ROS package ``NAME`` above the URDF or in ``ROS_PACKAGE_PATH``);
* an STL mesh that is neither a binary STL of the size its count says nor ASCII STL
  (truncated or corrupt: PyBullet crashes on it; :mod:`residualsim.sim.scenes.stl`);
* a mesh (collision or visual) PyBullet would crash on or load as no shape: an OBJ without
  faces or with a face naming a missing vertex, a COLLADA file without ``<asset>`` or mesh
  data, no triangles, a coordinate that is not finite
  (:mod:`residualsim.sim.scenes.mesh_check`); a collision mesh (OBJ, STL, COLLADA) whose
  bounding box, times its ``scale``, is above ``MAX_OFFSET_M`` on every side (a mesh in
  millimetres) is implausible; a COLLADA box is sized as PyBullet places it, its ``<unit>``
  (m) and node transforms applied (:mod:`residualsim.sim.scenes.collada`);
* a URDF or COLLADA file declaring an XML entity (:mod:`residualsim.sim.scenes.xml_guard`).

Units: masses kg, lengths m, inertias kg m².
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import numpy as np

from residualsim.errors import SceneError
from residualsim.sim.implausible import refuse_implausible
from residualsim.sim.scenes.mesh_check import check_mesh
from residualsim.sim.scenes.meshes import PACKAGE_SEARCH, mesh_not_found, resolve_mesh
from residualsim.sim.scenes.stl import pybullet_mesh
from residualsim.sim.scenes.xml_guard import parse_xml

__all__ = ["SUPPORTED_JOINTS", "MAX_LINK_MASS_KG", "MAX_OFFSET_M", "check_urdf"]

#: Joint types residualsim simulates (``continuous`` is a revolute joint without limits).
SUPPORTED_JOINTS = ("revolute", "continuous", "prismatic", "fixed")
_WHY_NOT = {"floating": "PyBullet would silently make it fixed",
            "planar": "PyBullet does not load planar joints",
            "spherical": "not supported by residualsim's joint state"}
#: Relative slack of the triangle inequality and of positive definiteness.
_SLACK = 1e-9
#: Heaviest plausible link (kg), refused above unless ``--allow-implausible`` (module
#: docstring): a tabletop object's link weighs grams to kilograms.
MAX_LINK_MASS_KG = 1000.0
#: Farthest plausible ``<origin xyz>`` (m) of a link's part or a joint, from its frame's
#: origin (refused above unless ``--allow-implausible``): a tabletop object spans centimetres.
MAX_OFFSET_M = 10.0
#: Joint types with a direction (``<axis>``) and those whose ``<limit>`` bounds the motion.
_MOVING = ("revolute", "continuous", "prismatic")
_LIMITED = ("revolute", "prismatic")
#: Size attributes of each URDF geometry (m; ``scale`` dimensionless), each entry > 0.
#: How a COLLADA file states its unit, added to the hint of an implausibly large one.
_DAE_UNIT = ' or <unit meter="0.001"/> in its <asset>'
_SIZES = {"box": ("size",), "sphere": ("radius",), "cylinder": ("radius", "length"),
          "capsule": ("radius", "length"), "mesh": ("scale",)}


def _float(element: ElementTree.Element, key: str, where: str) -> float:
    text = element.get(key)
    try:
        value = float(text) if text is not None else 0.0
    except ValueError:
        raise SceneError(f"{where}: {key}={text!r} is not a number") from None
    return value


def _inertia(link: ElementTree.Element, path: Path, name: str) -> None:
    """SceneError unless the link's mass and inertia are physical (module docstring)."""
    where = f"{path}: link {name!r}"
    inertial = link.find("inertial")
    mass = inertial.find("mass") if inertial is not None else None
    if mass is None:
        raise SceneError(f"{where} has no mass (no <inertial> <mass>): PyBullet would fix a "
                         "massless root link to the world and give another link 1 kg and unit "
                         "inertia")
    value = _float(mass, "value", where)
    if not (math.isfinite(value) and value > 0):
        raise SceneError(f"{where}: mass {mass.get('value')!r} kg must be finite and "
                         "positive")
    if value > MAX_LINK_MASS_KG:
        refuse_implausible(f"{where}: mass {value:.4g} kg is above {MAX_LINK_MASS_KG:g} kg, "
                           "not a tabletop object (PyBullet would let it sink into the table)",
                           SceneError)
    tensor = inertial.find("inertia")
    if tensor is None:
        raise SceneError(f"{where}: <inertial> has no <inertia> (kg m²)")
    keys = ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")
    xx, xy, xz, yy, yz, zz = (_float(tensor, k, where) for k in keys)
    if not all(map(math.isfinite, (xx, xy, xz, yy, yz, zz))):
        raise SceneError(f"{where}: inertia has a non-finite entry "
                         f"({', '.join(f'{k}={tensor.get(k)}' for k in keys)})")
    moments = np.linalg.eigvalsh(np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]]))
    scale = max(abs(moments).max(), np.finfo(float).tiny)
    if moments[0] <= _SLACK * scale:
        raise SceneError(f"{where}: inertia is not positive definite (principal moments "
                         f"{', '.join(f'{m:.4g}' for m in moments)} kg m²); PyBullet would "
                         "zero it and simulate a wrong body")
    if moments[0] + moments[1] < moments[2] * (1 - _SLACK):
        raise SceneError(f"{where}: principal moments {', '.join(f'{m:.4g}' for m in moments)}"
                         " kg m² break the triangle inequality (I1 + I2 >= I3): no rigid body "
                         "has this inertia")


def _numbers(element: ElementTree.Element, key: str, where: str) -> list[float] | None:
    """The numbers of attribute ``key`` (None when absent); SceneError if one is not a
    number."""
    text = element.get(key)
    if text is None:
        return None
    try:
        return [float(word) for word in text.split()]
    except ValueError:
        raise SceneError(f"{where}: {key}={text!r} is not a list of numbers") from None


def _geometry(link: ElementTree.Element, path: Path, name: str) -> None:
    """SceneError for a collision shape whose size is not finite and positive (a mesh
    scale: finite and non-zero; negative mirrors)."""
    for element in link.findall("collision"):
        for shape in element.findall("geometry/*"):
            where = f"{path}: link {name!r}: <collision> {shape.tag}"
            sizes: list[float] = []
            for key in _SIZES.get(shape.tag, ()):
                values = _numbers(shape, key, where)
                if values is None:
                    continue
                count = 3 if key in ("size", "scale") else 1
                scale = key == "scale"
                if len(values) != count or not all(
                        math.isfinite(v) and (v != 0 if scale else v > 0) for v in values):
                    raise SceneError(f"{where}: {key}={shape.get(key)!r} must be "
                                     f"{'three' if count == 3 else 'one'} finite "
                                     f"{'non-zero' if scale else 'positive'} "
                                     f"number{'s' if count == 3 else ''}"
                                     f"{'' if scale else ' (m)'}")
                if not scale:
                    sizes.extend(values)
            if sizes and min(sizes) > MAX_OFFSET_M:  # a floor may be long, not thick too
                refuse_implausible(f"{where}: every size above {MAX_OFFSET_M:g} m "
                                   f"({', '.join(f'{v:.4g}' for v in sizes)} m): not a tabletop "
                                   "object (a URDF in millimetres? its lengths are metres)",
                                   SceneError)


def _origins(root: ElementTree.Element, path: Path) -> None:
    """SceneError for an ``<origin>`` that is not three finite numbers, or implausibly far
    (module docstring)."""
    owners = [(f"joint {joint.get('name')!r}", joint) for joint in root.findall("joint")]
    owners += [(f"link {link.get('name')!r}: <{part.tag}>", part)
               for link in root.findall("link") for part in link
               if part.tag in ("inertial", "collision", "visual")]
    for owner, element in owners:
        for origin in element.findall("origin"):
            where = f"{path}: {owner}: <origin>"
            for key, unit in (("xyz", "m"), ("rpy", "rad")):
                values = _numbers(origin, key, where)
                if values is not None and (len(values) != 3 or not all(
                        math.isfinite(v) and abs(v) < 3.4e38 for v in values)):
                    raise SceneError(f"{where}: {key}={origin.get(key)!r} must be three "
                                     f"finite numbers ({unit})")
                if key == "xyz" and values is not None and math.hypot(*values) > MAX_OFFSET_M:
                    refuse_implausible(f"{where}: xyz={origin.get(key)!r} is "
                                       f"{math.hypot(*values):.4g} m from its frame's origin, "
                                       f"above {MAX_OFFSET_M:g} m: not a tabletop object",
                                       SceneError)


def _joint_physics(joint: ElementTree.Element, path: Path, name: str, kind: str) -> None:
    """SceneError for a joint's axis, limits or dynamics no joint can have (module
    docstring)."""
    where = f"{path}: joint {name!r}"
    axis = joint.find("axis")
    if kind in _MOVING and axis is not None:
        values = _numbers(axis, "xyz", where + ": <axis>")
        if values is not None and (len(values) != 3 or not all(map(math.isfinite, values))):
            raise SceneError(f"{where}: <axis xyz={axis.get('xyz')!r}> must be three finite "
                             "numbers")
        if values is not None and math.hypot(*values) == 0:
            raise SceneError(f"{where}: <axis xyz={axis.get('xyz')!r}> has zero length: the "
                             f"{kind} joint has no direction")
    limit = joint.find("limit")
    if kind in _LIMITED and limit is not None:
        bounds = {}
        for key in ("lower", "upper"):
            if limit.get(key) is not None:
                bounds[key] = _float(limit, key, where + ": <limit>")
                if not math.isfinite(bounds[key]):
                    raise SceneError(f"{where}: <limit {key}={limit.get(key)!r}> must be "
                                     "finite")
        if len(bounds) == 2 and bounds["lower"] > bounds["upper"]:
            unit = "m" if kind == "prismatic" else "rad"
            raise SceneError(f"{where}: <limit> lower {bounds['lower']:g} {unit} is above "
                             f"upper {bounds['upper']:g} {unit}")
    dynamics = joint.find("dynamics")
    if dynamics is not None:
        for key in ("damping", "friction"):
            value = _float(dynamics, key, where + ": <dynamics>")
            if not (math.isfinite(value) and value >= 0):
                raise SceneError(f"{where}: <dynamics {key}={dynamics.get(key)!r}> must be "
                                 "finite and not negative")


def _meshes(link: ElementTree.Element, path: Path, name: str) -> None:
    collision = {id(mesh) for mesh in link.findall("collision/geometry/mesh")}
    for mesh in link.iter("mesh"):
        filename = mesh.get("filename")
        if not filename:
            raise SceneError(f"{path}: link {name!r}: a <mesh> without a filename")
        found = resolve_mesh(filename, path)
        if found is None:
            hint = f" ({PACKAGE_SEARCH})" if filename.startswith("package://") else ""
            raise SceneError(f"{path}: link {name!r}: mesh file {filename!r} "
                             f"{mesh_not_found(filename, path)}{hint}")
        try:
            extents = check_mesh(found)  # PyBullet crashes on some broken meshes, drops others
            pybullet_mesh(found)  # an ASCII STL: its binary copy, written here
        except SceneError as exc:
            raise SceneError(f"{path}: link {name!r}: mesh {filename!r}: {exc}") from None
        scale = _numbers(mesh, "scale", f"{path}: link {name!r}: <mesh>")
        if id(mesh) in collision and extents is not None and len(scale or [1, 1, 1]) == 3:
            size = extents * np.abs(scale or [1.0, 1.0, 1.0])
            if size.min() > MAX_OFFSET_M:
                refuse_implausible(f"{path}: link {name!r}: mesh {filename!r} spans "
                                   f"{', '.join(f'{v:.4g}' for v in size)} m, every side above "
                                   f"{MAX_OFFSET_M:g} m: not a tabletop object (a mesh in "
                                   "millimetres? give <mesh scale=\"0.001 0.001 0.001\">"
                                   f"{_DAE_UNIT if found.suffix.lower() == '.dae' else ''})",
                                   SceneError)


def _tree(root: ElementTree.Element, path: Path, links: list[str]) -> None:
    """SceneError unless the joints join the links into one tree."""
    parent_of: dict[str, str] = {}
    for joint in root.findall("joint"):
        name = joint.get("name")
        if not name:
            raise SceneError(f"{path}: a <joint> has no name")
        kind = joint.get("type")
        if kind not in SUPPORTED_JOINTS:
            why = _WHY_NOT.get(kind or "", "unknown joint type")
            raise SceneError(f"{path}: joint {name!r} has type {kind!r} ({why}); supported: "
                             f"{', '.join(SUPPORTED_JOINTS)}")
        _joint_physics(joint, path, name, kind)
        ends = []
        for end in ("parent", "child"):
            element = joint.find(end)
            link = element.get("link") if element is not None else None
            if link not in links:
                raise SceneError(f"{path}: joint {name!r}: {end} link {link!r} is not a "
                                 "<link> of this file")
            ends.append(link)
        parent, child = ends
        if parent == child:
            raise SceneError(f"{path}: joint {name!r} joins link {child!r} to itself")
        if child in parent_of:
            raise SceneError(f"{path}: link {child!r} is the child of two joints (a "
                             "kinematic loop); a URDF must be a tree")
        parent_of[child] = parent
    roots = [link for link in links if link not in parent_of]
    if len(roots) != 1:
        listed = ", ".join(repr(r) for r in roots) or "none: every link has a parent (a loop)"
        raise SceneError(f"{path}: {len(roots)} root links ({listed}); a URDF object must be "
                         "one tree of links with one root")


def check_urdf(path: str | Path) -> None:
    """Refuse a URDF residualsim cannot simulate faithfully (see the module docstring).

    Raises
    ------
    SceneError
        Naming the file and the offending link, joint or mesh.
    """
    path = Path(path)
    root = parse_xml(path, "URDF")
    if root.tag != "robot":
        raise SceneError(f"{path}: the root element is <{root.tag}>, a URDF's is <robot>")
    elements = root.findall("link")
    if not elements:
        raise SceneError(f"{path}: no <link> element")
    names = [link.get("name") or "" for link in elements]
    if "" in names:
        raise SceneError(f"{path}: a <link> has no name")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise SceneError(f"{path}: link name(s) {', '.join(map(repr, repeated))} used twice")
    joints = [j.get("name") for j in root.findall("joint") if j.get("name")]
    repeated = sorted({n for n in joints if joints.count(n) > 1})
    if repeated:
        raise SceneError(f"{path}: joint name(s) {', '.join(map(repr, repeated))} used twice")
    _tree(root, path, names)
    _origins(root, path)
    for link, name in zip(elements, names):
        _inertia(link, path, name)
        if link.find("collision") is None:
            raise SceneError(f"{path}: link {name!r} has no <collision> shape, so it would "
                             "pass through the table; give it one (a <visual> does not collide)")
        _geometry(link, path, name)
        _meshes(link, path, name)
