"""The rigid body an MPEC identifies from tosses: mass, inertia, centre of mass and the
contact candidates (body-fixed points that can touch the table), for the built-in cube and
for a scene file's single-link object.

Frames: the body's LINK frame (the URDF's link frame; recordings track it), lengths in m.
``com_m`` is the centre of mass in that frame, ``inertia_kgm2`` the inertia about the centre
of mass in the link frame's axes (a rotated ``<inertial>`` is turned into them), ``points_m``
the candidates in the link frame. :attr:`RigidBody.points_com_m` are the candidates relative
to the centre of mass, what the dynamics use.

**Contact candidates from a URDF**: the vertices of the convex hull of every collision
shape of the link, because a body resting on or striking a plane touches it first at a
vertex of its convex hull (points inside the hull, such as the inner corner of an L, never
do). Shapes: a ``<box>`` gives its 8 corners (after the collision ``<origin>``); a
``<mesh>`` (``.obj`` or ``.stl``, with its ``scale``) gives its vertices. A ``<sphere>``,
``<cylinder>`` or ``<capsule>`` is refused: the point of a rounded shape that touches the
plane moves over its surface, and the model has fixed points only (sampling the surface
would make the friction and restitution of one point depend on the sampling).

Refused with ParameterError naming the file (before any data is read): a planar scene file
(the planar MPEC is the impacts' own model, for the built-in planar-ellipse only), an
articulated or multi-link URDF (the window model is one rigid body), rounded shapes, a
mesh that is not there or not OBJ/STL, and no collision shape at all.
"""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from residualsim.errors import ParameterError

__all__ = ["RigidBody", "cube_body", "body_from_scene", "urdf_contact_points",
           "CUBE_SIDE_M", "CUBE_MASS_KG"]

CUBE_SIDE_M = 0.1048
CUBE_MASS_KG = 0.37


@dataclass(frozen=True)
class RigidBody:
    """See the module docstring: name, mass (kg), centre of mass (3,) m and inertia (3, 3)
    kg m² in the link frame, contact candidates (N, 3) m in the link frame."""

    name: str
    mass_kg: float
    com_m: np.ndarray
    inertia_kgm2: np.ndarray
    points_m: np.ndarray

    @property
    def points_com_m(self) -> np.ndarray:
        """Candidates relative to the centre of mass (link axes)."""
        return self.points_m - self.com_m

    @property
    def isotropic(self) -> bool:
        """Inertia a multiple of the identity (no gyroscopic term, as for the cube)."""
        inertia = self.inertia_kgm2
        return bool(np.allclose(inertia, inertia[0, 0] * np.eye(3), rtol=1e-9, atol=0.0))

    @property
    def ratio_m2(self) -> np.ndarray:
        """Inertia over mass (3, 3), m²: what the impulse-per-mass dynamics use."""
        return self.inertia_kgm2 / self.mass_kg

    @property
    def scale_m(self) -> float:
        """A length that turns a quaternion error into a displacement: the largest
        coordinate of a candidate about the centre of mass (the cube's half side)."""
        return float(np.max(np.abs(self.points_com_m)))


def cube_body() -> RigidBody:
    """The ContactNets cube: side 0.1048 m, 0.37 kg, uniform, candidates its 8 corners."""
    half = CUBE_SIDE_M / 2
    return RigidBody(name="cube", mass_kg=CUBE_MASS_KG, com_m=np.zeros(3),
                     inertia_kgm2=CUBE_MASS_KG * CUBE_SIDE_M ** 2 / 6 * np.eye(3),
                     points_m=np.array(list(itertools.product((-half, half), repeat=3))))


def _origin(element) -> tuple[np.ndarray, np.ndarray]:
    """Translation (3,) and rotation (3, 3) of an ``<origin xyz rpy>`` (URDF: fixed-axis
    roll, pitch, yaw, i.e. R = Rz(yaw) Ry(pitch) Rx(roll))."""
    origin = element.find("origin") if element is not None else None
    xyz = np.zeros(3)
    rpy = np.zeros(3)
    if origin is not None:
        xyz = np.array([float(v) for v in origin.get("xyz", "0 0 0").split()])
        rpy = np.array([float(v) for v in origin.get("rpy", "0 0 0").split()])
    cr, sr, cp, sp, cy, sy = (math.cos(rpy[0]), math.sin(rpy[0]), math.cos(rpy[1]),
                              math.sin(rpy[1]), math.cos(rpy[2]), math.sin(rpy[2]))
    rot = np.array([[cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
                    [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
                    [-sp, cp * sr, cp * cr]])
    return xyz, rot


def _mesh_vertices(path: Path, where: str) -> np.ndarray:
    """Vertices (N, 3) of an OBJ or STL (ASCII or binary) mesh file."""
    if not path.is_file():
        raise ParameterError(f"{where}: mesh {path} not found")
    suffix = path.suffix.lower()
    if suffix == ".obj":
        from residualsim.sim.scenes.mesh_check import obj_vertices

        vertices = obj_vertices(path)
    elif suffix == ".stl":
        from residualsim.sim.scenes.stl import read_stl

        vertices = read_stl(path)[0].reshape(-1, 3)
    else:
        raise ParameterError(f"{where}: mesh {path.name} is not .obj or .stl; the MPEC reads "
                             "its contact candidates from OBJ or STL vertices")
    if not len(vertices) or not np.isfinite(vertices).all():
        raise ParameterError(f"{where}: mesh {path} has no finite vertices")
    return vertices


def urdf_contact_points(urdf: str | os.PathLike[str]) -> np.ndarray:
    """Contact candidates (N, 3) m in the link frame of a single-link URDF: the vertices of
    the convex hull of its collision shapes (see the module docstring)."""
    import xml.etree.ElementTree as ElementTree

    from scipy.spatial import ConvexHull, QhullError

    from residualsim.sim.scenes.meshes import resolve_mesh

    urdf = Path(urdf)
    root = ElementTree.parse(urdf).getroot()
    points = []
    for collision in root.iter("collision"):
        xyz, rot = _origin(collision)
        geometry = collision.find("geometry")
        shape = geometry[0] if geometry is not None and len(geometry) else None
        if shape is None:
            continue
        if shape.tag == "box":
            half = np.array([float(v) for v in shape.get("size").split()]) / 2
            local = np.array(list(itertools.product(*[(-h, h) for h in half])))
        elif shape.tag == "mesh":
            filename = shape.get("filename", "")
            found = resolve_mesh(filename, urdf) if filename else None
            if found is None:
                raise ParameterError(f"{urdf}: mesh {filename!r} not found")
            scale = np.array([float(v) for v in shape.get("scale", "1 1 1").split()])
            local = _mesh_vertices(found, str(urdf)) * scale
        else:
            raise ParameterError(
                f"{urdf}: collision shape <{shape.tag}> is not supported by --method mpec: "
                "its contact candidates are fixed points (box corners, mesh vertices), and "
                "the point of a rounded shape that touches the table moves over its surface; "
                "use a box or a mesh, or calibrate with --method mh or nevergrad")
        points.append(local @ rot.T + xyz)
    if not points:
        raise ParameterError(f"{urdf}: no <collision> shape: nothing can touch the table")
    points = np.unique(np.round(np.concatenate(points), 12), axis=0)
    try:
        hull = ConvexHull(points)
    except (QhullError, ValueError) as exc:
        raise ParameterError(f"{urdf}: the collision shapes are flat or degenerate (no 3D "
                             f"convex hull: {str(exc).splitlines()[0]})") from None
    return points[np.sort(hull.vertices)]


def body_from_scene(scene: str | os.PathLike[str]) -> RigidBody:
    """The :class:`RigidBody` of a free, single-link scene file (``.toml`` or ``.urdf``):
    mass, centre of mass and inertia as PyBullet reads them from the URDF, candidates from
    :func:`urdf_contact_points`. ParameterError naming the file for what the MPEC cannot
    model (see the module docstring); SceneError for a scene file that does not load."""
    from residualsim.sim.scenes.scene_file import read_scene_file
    from residualsim.sim.scenes.urdf_scene import urdf_info

    spec = read_scene_file(scene)
    where = spec.source or spec.urdf
    if spec.kind != "free":
        raise ParameterError(f"{where}: kind {spec.kind!r}: --method mpec fits free 3D "
                             "rigid bodies from scene files (planar impacts: --scene "
                             "planar-ellipse); calibrate this scene with --method mh or "
                             "nevergrad")
    info = urdf_info(spec.urdf)
    if info.n_links:
        joints = ", ".join(info.joint_names) or "fixed joints only"
        raise ParameterError(f"{where}: {spec.urdf.name} has {info.n_links + 1} links "
                             f"(joints: {joints}); --method mpec models one rigid link: "
                             "calibrate an articulated object with --method mh or nevergrad")
    return RigidBody(name=spec.name, mass_kg=info.mass_kg,
                     com_m=np.asarray(info.base_com_offset_m, dtype=np.float64),
                     inertia_kgm2=np.asarray(info.base_inertia, dtype=np.float64),
                     points_m=urdf_contact_points(spec.urdf))
