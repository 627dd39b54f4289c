"""The body of a user's object: each link's mass, centre of mass and inertia, each joint's
damping and friction, as a URDF states them and as calibration identifies them.

Frames and units: a link's centre of mass ``com_m`` (3,) is in metres in the URDF **link
frame**; its inertia ``inertia`` (ixx, iyy, izz, ixy, ixz, iyz) is in kg m² about the centre
of mass, in link-frame axes (a URDF ``<inertial>`` with an ``rpy`` is rotated into them).
Joint damping is viscous, N m s/rad (N s/m for a prismatic joint); joint friction is
Coulomb, N m (N). The engine applies a :class:`BodyParams` by writing a modified URDF (same
links, joints, collision shapes; only ``<inertial>`` and ``<dynamics>`` replaced) and
reloading the object (:func:`body_urdf`): PyBullet's ``changeDynamics`` can neither move a
link's inertial frame nor set a full inertia tensor. Measured on the hinge (2 loaded cores):
a new body costs about 50 ms (writing and reading its URDF, rebuilding the world; the load
itself about 2 ms), switching back to one already written 10-15 ms; a 70-sample toss at 10
substeps 50-90 ms. Likelihoods therefore evaluate parameter sets with different bodies one
at a time, so each worker reloads once per set, not once per recording.

:class:`~residualsim.sim.scenes.params.ObjectParams` carries a body beside the contact
parameters, so every place that hands parameters to an engine carries the body too.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import hashlib
import math
import os
import shutil
import tempfile
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from residualsim.atomic import atomic_open, atomic_write_text
from residualsim.errors import ParameterError, SceneError
from residualsim.sim.scenes.meshes import meshes_load_as_written, point_meshes

__all__ = ["LinkInertial", "JointDynamics", "BodyParams", "read_body", "write_urdf",
           "urdf_text", "body_urdf", "loadable_urdf", "inertia_matrix", "inertia_tuple",
           "check_inertia", "link_aabbs", "check_body_matches"]


def inertia_matrix(values) -> np.ndarray:
    """(3, 3) symmetric matrix from (ixx, iyy, izz, ixy, ixz, iyz)."""
    ixx, iyy, izz, ixy, ixz, iyz = map(float, values)
    return np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])


def inertia_tuple(matrix: np.ndarray) -> tuple[float, ...]:
    """(ixx, iyy, izz, ixy, ixz, iyz) of a (3, 3) matrix (symmetrised)."""
    m = 0.5 * (np.asarray(matrix, dtype=np.float64) + np.asarray(matrix).T)
    return tuple(float(v) for v in (m[0, 0], m[1, 1], m[2, 2], m[0, 1], m[0, 2], m[1, 2]))


def check_inertia(values, where: str) -> None:
    """ParameterError unless the inertia is positive definite and its principal moments obey
    the triangle inequality (I1 + I2 >= I3 for every order: a physical mass distribution)."""
    moments = np.linalg.eigvalsh(inertia_matrix(values))
    if not np.all(np.isfinite(moments)) or moments[0] <= 0:
        raise ParameterError(f"{where}: inertia is not positive definite (principal moments "
                             f"{moments.tolist()} kg m²)")
    if moments[0] + moments[1] < moments[2] * (1 - 1e-9):
        raise ParameterError(f"{where}: principal moments {moments.tolist()} kg m² break the "
                             "triangle inequality (I1 + I2 >= I3)")


@dataclasses.dataclass(frozen=True)
class LinkInertial:
    """One link's inertial: ``mass_kg``, ``com_m`` (3,) m link frame, ``inertia`` (ixx, iyy,
    izz, ixy, ixz, iyz) kg m² about the centre of mass, link-frame axes."""

    name: str
    mass_kg: float
    com_m: tuple[float, float, float]
    inertia: tuple[float, float, float, float, float, float]

    def __post_init__(self) -> None:
        if not (math.isfinite(self.mass_kg) and self.mass_kg > 0):
            raise ParameterError(f"link {self.name!r}: mass must be > 0 kg, got {self.mass_kg}")
        if len(self.com_m) != 3 or not all(math.isfinite(v) for v in self.com_m):
            raise ParameterError(f"link {self.name!r}: centre of mass must be 3 finite numbers")
        check_inertia(self.inertia, f"link {self.name!r}")

    def principal_moments(self) -> np.ndarray:
        """Principal moments (3,) kg m², ascending."""
        return np.linalg.eigvalsh(inertia_matrix(self.inertia))


@dataclasses.dataclass(frozen=True)
class JointDynamics:
    """One non-fixed joint's losses: viscous ``damping`` (N m s/rad) and Coulomb
    ``friction`` (N m); N s/m and N for a prismatic joint."""

    name: str
    damping: float = 0.0
    friction: float = 0.0

    def __post_init__(self) -> None:
        for label, value in (("damping", self.damping), ("friction", self.friction)):
            if not (math.isfinite(value) and value >= 0):
                raise ParameterError(f"joint {self.name!r}: {label} must be >= 0, got {value}")


@dataclasses.dataclass(frozen=True)
class BodyParams:
    """Every link's inertial and every non-fixed joint's losses, URDF order."""

    links: tuple[LinkInertial, ...]
    joints: tuple[JointDynamics, ...] = ()

    @property
    def mass_kg(self) -> float:
        """Total mass, kg."""
        return float(sum(link.mass_kg for link in self.links))

    def link(self, name: str) -> LinkInertial:
        for link in self.links:
            if link.name == name:
                return link
        raise ParameterError(f"no link {name!r}; links: {', '.join(l.name for l in self.links)}")

    def joint(self, name: str) -> JointDynamics:
        for joint in self.joints:
            if joint.name == name:
                return joint
        raise ParameterError(f"no joint {name!r}; joints: "
                             f"{', '.join(j.name for j in self.joints) or 'none'}")

    def as_json(self) -> dict:
        return {"links": [{"name": l.name, "mass_kg": l.mass_kg, "com_m": list(l.com_m),
                           "inertia": dict(zip(("ixx", "iyy", "izz", "ixy", "ixz", "iyz"),
                                               l.inertia))} for l in self.links],
                "joints": [dataclasses.asdict(j) for j in self.joints]}

    @classmethod
    def from_json(cls, content: Mapping, where: str = "body") -> BodyParams:
        try:
            links = tuple(LinkInertial(
                str(l["name"]), float(l["mass_kg"]), tuple(float(v) for v in l["com_m"]),
                tuple(float(l["inertia"][k]) for k in ("ixx", "iyy", "izz", "ixy", "ixz", "iyz")))
                for l in content["links"])
            joints = tuple(JointDynamics(str(j["name"]), float(j["damping"]),
                                         float(j["friction"])) for j in content["joints"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ParameterError(f"{where}: not a body description ({exc})") from None
        return cls(links, joints)


# --- URDF in and out ------------------------------------------------------------------------
def _rpy_matrix(rpy) -> np.ndarray:
    roll, pitch, yaw = rpy
    cr, sr, cp, sp, cy, sy = (math.cos(roll), math.sin(roll), math.cos(pitch), math.sin(pitch),
                              math.cos(yaw), math.sin(yaw))
    rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    return rz @ ry @ rx


def _floats(text: str | None, n: int, default: float = 0.0) -> list[float]:
    if text is None:
        return [default] * n
    values = [float(v) for v in text.split()]
    if len(values) != n:
        raise ValueError(f"expected {n} numbers, got {text!r}")
    return values


def _parse(path: Path) -> ElementTree.ElementTree:
    """The URDF's XML tree, its comments kept (an export keeps the user's notes)."""
    try:
        parser = ElementTree.XMLParser(target=ElementTree.TreeBuilder(insert_comments=True))
        return ElementTree.parse(path, parser=parser)
    except (ElementTree.ParseError, OSError) as exc:
        raise SceneError(f"{path}: cannot read this URDF ({exc})") from None


def read_body(path: str | os.PathLike[str]) -> BodyParams:
    """The body a URDF states (links in file order, non-fixed joints in file order)."""
    path = Path(path)
    root = _parse(path).getroot()
    links = []
    try:
        for link in root.findall("link"):
            inertial = link.find("inertial")
            if inertial is None:
                raise SceneError(f"{path}: link {link.get('name')!r} has no <inertial>")
            origin = inertial.find("origin")
            xyz = _floats(origin.get("xyz") if origin is not None else None, 3)
            rpy = _floats(origin.get("rpy") if origin is not None else None, 3)
            mass = float(inertial.find("mass").get("value"))
            tensor = inertial.find("inertia")
            values = [float(tensor.get(k, 0.0)) for k in ("ixx", "iyy", "izz", "ixy", "ixz",
                                                          "iyz")]
            rot = _rpy_matrix(rpy)
            links.append(LinkInertial(link.get("name"), mass, tuple(xyz),
                                      inertia_tuple(rot @ inertia_matrix(values) @ rot.T)))
        joints = []
        for joint in root.findall("joint"):
            if joint.get("type") == "fixed":
                continue
            dynamics = joint.find("dynamics")
            damping = float(dynamics.get("damping", 0.0)) if dynamics is not None else 0.0
            friction = float(dynamics.get("friction", 0.0)) if dynamics is not None else 0.0
            joints.append(JointDynamics(joint.get("name"), damping, friction))
    except (AttributeError, TypeError, ValueError) as exc:
        raise SceneError(f"{path}: cannot read the inertials or joint dynamics ({exc})"
                         ) from None
    except ParameterError as exc:
        raise SceneError(f"{path}: {exc}") from None
    return BodyParams(tuple(links), tuple(joints))


def _fmt(value: float) -> str:
    return repr(float(value))


def _set_child(parent: ElementTree.Element, tag: str, **attributes: str) -> None:
    element = parent.find(tag)
    if element is None:
        element = ElementTree.SubElement(parent, tag)
    element.attrib.clear()
    element.attrib.update(attributes)


def _check_same_object(source: Path, root: ElementTree.Element, body: BodyParams) -> None:
    """ParameterError unless ``body`` has exactly the URDF's links and non-fixed joints: a
    body identified for another object (a ``--base`` or calibration of another scene) names
    the mismatch, not one link of the URDF as if it were missing."""
    links = [link.get("name") for link in root.findall("link")]
    joints = [joint.get("name") for joint in root.findall("joint")
              if joint.get("type") != "fixed"]
    theirs = [link.name for link in body.links]
    their_joints = [joint.name for joint in body.joints]
    if sorted(links) == sorted(theirs) and sorted(joints) == sorted(their_joints):
        return
    raise ParameterError(
        f"{source}: the body given (a --base or calibration) was identified for another "
        f"object: its links are {', '.join(theirs)} and joints {', '.join(their_joints) or 'none'}"
        f", this URDF's links are {', '.join(links)} and joints {', '.join(joints) or 'none'} "
        "(use a calibration made for this scene, or name its contact values alone)")


def check_body_matches(source: str | os.PathLike[str], body: BodyParams) -> None:
    """ParameterError unless ``body`` was identified for the URDF ``source`` (the same links
    and non-fixed joints); checked before any work by ``calibrate --base``."""
    source = Path(source).resolve()
    _check_same_object(source, _parse(source).getroot(), body)


def urdf_text(source: str | os.PathLike[str], body: BodyParams | None = None,
              contact: "EngineParams | None" = None,
              written: str | os.PathLike[str] | None = None, note: str | None = None) -> str:
    """The URDF ``source`` with ``body``'s inertials and joint dynamics and, with
    ``contact``, each link's ``<contact>`` coefficients (the effective pair values against a
    rigid table of friction 1, restitution 1). Links, joints, collision and visual shapes are
    unchanged; mesh names are rewritten to resolve from the file ``written`` (None: absolute
    paths; :func:`~residualsim.sim.scenes.meshes.point_meshes`), SceneError naming
    ``source`` and a mesh that cannot be found. ``note``: an XML comment put first in
    ``<robot>`` (any ``--`` written ``- -``), replacing a first comment that begins as it
    does (up to its first colon), so a re-export keeps one (calibrate: what the data
    determined)."""
    source = Path(source).resolve()
    tree = _parse(source)
    root = tree.getroot()
    point_meshes(root, source, None if written is None else Path(written))
    if body is not None:
        _check_same_object(source, root, body)
        by_name = {link.name: link for link in body.links}
        for link in root.findall("link"):
            inertial = by_name.get(link.get("name"))
            if inertial is None:
                raise ParameterError(f"{source}: the body has no link {link.get('name')!r}")
            element = link.find("inertial")
            _set_child(element, "origin", xyz=" ".join(map(_fmt, inertial.com_m)),
                       rpy="0 0 0")
            _set_child(element, "mass", value=_fmt(inertial.mass_kg))
            _set_child(element, "inertia", **dict(zip(
                ("ixx", "iyy", "izz", "ixy", "ixz", "iyz"), map(_fmt, inertial.inertia))))
        joints = {joint.name: joint for joint in body.joints}
        for joint in root.findall("joint"):
            if joint.get("type") == "fixed":
                continue
            dynamics = joints.get(joint.get("name"))
            if dynamics is None:
                raise ParameterError(f"{source}: the body has no joint {joint.get('name')!r}")
            _set_child(joint, "dynamics", damping=_fmt(dynamics.damping),
                       friction=_fmt(dynamics.friction))
    if contact is not None:
        for link in root.findall("link"):
            if link.find("collision") is None:
                continue
            element = link.find("contact")
            if element is not None:
                link.remove(element)
            element = ElementTree.SubElement(link, "contact")
            values = [("lateral_friction", contact.lateral_friction),
                      ("rolling_friction", contact.rolling_friction),
                      ("spinning_friction", contact.spinning_friction),
                      ("restitution", contact.restitution)]
            if contact.soft_contact:
                values += [("stiffness", contact.contact_stiffness),
                           ("damping", contact.contact_damping)]
            for tag, value in values:
                ElementTree.SubElement(element, tag, value=_fmt(value))
    if note is not None:
        first = next(iter(root), None)
        mark = note.split(":")[0].strip()
        if first is not None and first.tag is ElementTree.Comment and mark and \
                (first.text or "").strip().startswith(mark):
            root.remove(first)
        root.insert(0, ElementTree.Comment(note.replace("--", "- -")))
    ElementTree.indent(tree)
    return '<?xml version="1.0"?>\n' + ElementTree.tostring(root, encoding="unicode") + "\n"


def write_urdf(source: str | os.PathLike[str], out: str | os.PathLike[str],
               body: BodyParams | None = None, contact: "EngineParams | None" = None,
               note: str | None = None) -> Path:
    """Write :func:`urdf_text` to ``out`` (mesh names resolving from there), kept only once
    PyBullet has loaded it from there: SceneError naming ``out`` and PyBullet's reason
    otherwise, and nothing written (not even a missing parent folder)."""
    out = Path(out)
    text = urdf_text(source, body, contact, written=out, note=note)
    made = [folder for folder in (out.parent, *out.parent.parents) if not folder.exists()]
    try:
        with atomic_open(out, check=functools.partial(_check_loads, out)) as handle:
            handle.write(text.encode("utf-8"))
    except BaseException:
        for folder in made:  # innermost first
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    return out


def _check_loads(out: Path, written: Path) -> None:
    """SceneError unless PyBullet loads the URDF file ``written`` (``out``'s temporary),
    with PyBullet's reason (its C output)."""
    from residualsim.sim.bullet import captured_c_output, pb

    client = pb.connect(pb.DIRECT)
    try:
        with captured_c_output() as output:
            try:
                pb.loadURDF(str(loadable_urdf(written).resolve()),  # ASCII STL: a copy
                            flags=pb.URDF_USE_INERTIA_FROM_FILE, physicsClientId=client)
                return
            except pb.error as exc:
                failure = str(exc)
    finally:
        pb.disconnect(client)
    reason = ("; ".join(list(dict.fromkeys(output.lines()))[:3]) or failure).replace(
        str(written.resolve()), str(out))
    raise SceneError(f"{out}: the URDF written does not load back in PyBullet ({reason}); "
                     "not written")


_TEMP: list[Path] = []


def _temp_dir() -> Path:
    if not _TEMP or not _TEMP[0].is_dir():
        _TEMP[:] = [Path(tempfile.mkdtemp(prefix="residualsim-body-"))]
        atexit.register(shutil.rmtree, _TEMP[0], True)
    return _TEMP[0]


def body_urdf(source: str | os.PathLike[str], body: BodyParams | None) -> Path:
    """A URDF file with ``body`` applied to ``source`` (None: its own), in a per-process
    temporary folder, named by its content's hash (one file per body; removed at exit); its
    meshes are ``source``'s, by absolute path."""
    text = urdf_text(source, body)
    digest = hashlib.sha256(text.encode()).hexdigest()[:20]
    path = _temp_dir() / f"{Path(source).stem}-{digest}.urdf"
    if not path.is_file():
        atomic_write_text(path, text)
    return path


def loadable_urdf(source: str | os.PathLike[str]) -> Path:
    """``source`` itself when PyBullet finds its meshes, else :func:`body_urdf` of it
    (a ``package://`` mesh found only through a ``package.xml`` or ``ROS_PACKAGE_PATH``)."""
    source = Path(source)
    if meshes_load_as_written(source, _parse(source).getroot()):
        return source
    return body_urdf(source, None)


def link_aabbs(path: str | os.PathLike[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per link name: the (low, high) corners (3,) m of its collision shapes' bounding box,
    in the link frame (from PyBullet at zero joint angles; a box rotated in its link frame
    gets the box around it). A link without collision shapes gets its centre of mass."""
    import pybullet as pb

    body_params = read_body(path)
    client = pb.connect(pb.DIRECT)
    try:
        body = pb.loadURDF(str(loadable_urdf(path)), flags=pb.URDF_USE_INERTIA_FROM_FILE,
                           physicsClientId=client)
        result = {}
        children = {j.find("child").get("link") for j in _parse(Path(path)).getroot()
                    .findall("joint")}
        root = next(l.name for l in body_params.links if l.name not in children)
        names = [root] + [
            pb.getJointInfo(body, k, physicsClientId=client)[12].decode()
            for k in range(pb.getNumJoints(body, physicsClientId=client))]
        for index, name in zip(range(-1, len(names) - 1), names):
            if index == -1:
                com_pos, com_orn = pb.getBasePositionAndOrientation(body, physicsClientId=client)
                info = pb.getDynamicsInfo(body, -1, physicsClientId=client)
                inv = pb.invertTransform(info[3], info[4])
                frame = pb.multiplyTransforms(com_pos, com_orn, *inv)
            else:
                state = pb.getLinkState(body, index, computeForwardKinematics=1,
                                        physicsClientId=client)
                frame = (state[4], state[5])
            if not pb.getCollisionShapeData(body, index, physicsClientId=client):
                com = np.asarray(body_params.link(name).com_m)
                result[name] = (com.copy(), com.copy())
                continue
            low, high = pb.getAABB(body, index, physicsClientId=client)
            corners = np.array([[x, y, z] for x in (low[0], high[0]) for y in (low[1], high[1])
                                for z in (low[2], high[2])])
            rot = np.array(pb.getMatrixFromQuaternion(frame[1])).reshape(3, 3)
            local = (corners - np.asarray(frame[0])) @ rot
            result[name] = (local.min(axis=0), local.max(axis=0))
        return result
    finally:
        pb.disconnect(client)
