"""A user's object from URDF, free in 3D: a rigid body or an articulated one, tossed onto a
table (the plane z = 0, gravity -z).

State (13 + 2n,): the BASE LINK frame's position (3, m, world) and orientation (4, w-x-y-z,
base link to world), the velocity of that frame's origin (3, m/s, world), the base's angular
velocity (3, rad/s, world), then the n non-fixed joints' positions (rad or m, URDF order) and
velocities. The base link frame is the URDF's, not PyBullet's (PyBullet places a multibody
base at its centre of mass); the scene converts at every boundary, so recordings of a
tracked link frame need no conversion. Generalised velocity q_dot (6 + n,) = (base-origin
velocity, base angular velocity, joint velocities), all world frame.

Mass matrix and point Jacobians are read off the engine's own velocity kinematics: setting
q_dot to each unit vector in turn and reading every link's centre-of-mass linear and angular
velocity (``getLinkStates``) gives each link's Jacobians J_v, J_w exactly (velocity is linear
in q_dot), so M = sum_k m_k J_vkᵀ J_vk + J_wkᵀ I_k J_wk and J_p = J_vk − [p − c_k]x J_wk on
the link k that holds the point. This sidesteps the frame conventions of PyBullet's
floating-base ``calculateJacobian`` (``PYBULLET_NOTES.md``); a test checks M_c against the
engine's response to a known impulse.

Joints carry no actuation: velocity motors are switched off, except that a URDF joint
friction f becomes a zero-velocity motor with force limit f (PyBullet's usual model of
joint friction); URDF joint damping is applied by PyBullet. Multibody linear and angular
damping are zero. Links do not collide with each other unless the scene file sets
``self_collision = true``.
"""

from __future__ import annotations

import dataclasses
import functools
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import numpy as np
from residualsim.sim.bullet import pb

from residualsim.errors import DataError, SceneError
from residualsim.sim.contact import skew
from residualsim.sim.implausible import implausible_allowed
from residualsim.sim.rotations import as_rotation
from residualsim.sim.scenes.base import EngineSettings, Scene, load_urdf
from residualsim.sim.scenes.body import loadable_urdf
from residualsim.sim.scenes.scene_file import SceneSpec
from residualsim.sim.scenes.urdf_check import check_urdf

__all__ = ["UrdfInfo", "urdf_info", "FreeUrdfScene"]

_SUPPORTED = {pb.JOINT_REVOLUTE: "revolute", pb.JOINT_PRISMATIC: "prismatic",
              pb.JOINT_FIXED: "fixed"}
_BASE = ("x_m", "y_m", "z_m", "qw", "qx", "qy", "qz",
         "vx_mps", "vy_mps", "vz_mps", "wx_radps", "wy_radps", "wz_radps")


@dataclasses.dataclass(frozen=True)
class UrdfInfo:
    """What a URDF holds, read once: total mass (kg), the non-fixed joints (names, PyBullet
    indices, types, friction N or N m), the number of links, the base's inertial offset in
    its link frame (position m, quaternion x-y-z-w as PyBullet gives it), the base inertia
    about its centre of mass in the base link frame (3, 3), and the composite inertia of the
    whole object at zero joint angles about its centre of mass (3, 3), kg m²; ``all_boxes``
    whether every collision shape is a box (Bullet's box contact ignores the collision
    margin)."""

    path: Path
    mass_kg: float
    joint_names: tuple[str, ...]
    joint_indices: tuple[int, ...]
    joint_types: tuple[str, ...]
    joint_friction: tuple[float, ...]
    n_links: int
    base_com_offset_m: tuple[float, float, float]
    base_com_orn_xyzw: tuple[float, float, float, float]
    base_inertia: np.ndarray
    composite_inertia: np.ndarray
    all_boxes: bool = False
    #: The file PyBullet loads: ``path``, or a copy of it whose meshes PyBullet finds
    #: (:func:`~residualsim.sim.scenes.body.loadable_urdf`).
    load_path: Path | None = None
    #: Per non-fixed joint, its ``<limit>`` (lower, upper), rad or m, or None (continuous).
    joint_limits: tuple[tuple[float, float] | None, ...] = ()


def urdf_info(path: Path) -> UrdfInfo:
    """Load ``path`` once in a private PyBullet client and read what the scene needs.

    SceneError naming the file when :func:`~residualsim.sim.scenes.urdf_check.check_urdf`
    refuses it (not one tree, an unsupported joint type, an unphysical mass or inertia, an
    impossible joint axis, limit or dynamics, a non-positive collision size, a link without a
    collision shape, a missing mesh; a link above 1000 kg unless ``--allow-implausible``)
    or PyBullet does not load it. Cached per file and state of ``--allow-implausible``.
    """
    return _urdf_info(path, implausible_allowed())


@functools.lru_cache(maxsize=32)
def _urdf_info(path: Path, allowed: bool) -> UrdfInfo:
    check_urdf(path)
    # PyBullet loads a continuous joint as revolute, with the <limit> it ignores
    continuous = {joint.get("name") for joint in ElementTree.parse(path).getroot()
                  .findall("joint") if joint.get("type") == "continuous"}
    load_path = loadable_urdf(path)
    client = _info_client()
    try:
        pb.resetSimulation(physicsClientId=client)
        body = load_urdf(client, str(load_path), basePosition=[0, 0, 1],
                         flags=pb.URDF_USE_INERTIA_FROM_FILE)
        base = pb.getDynamicsInfo(body, -1, physicsClientId=client)
        names, indices, types, friction, limits = [], [], [], [], []
        n_links = pb.getNumJoints(body, physicsClientId=client)
        for index in range(n_links):
            info = pb.getJointInfo(body, index, physicsClientId=client)
            kind = _SUPPORTED.get(info[2])
            if kind is None:
                raise SceneError(f"{path}: joint {info[1].decode()!r} is spherical or planar; "
                                 "supported: revolute, continuous, prismatic, fixed")
            if kind != "fixed":
                names.append(info[1].decode())
                indices.append(index)
                types.append(kind)
                friction.append(float(info[7]))
                limited = info[8] <= info[9] and names[-1] not in continuous
                limits.append((float(info[8]), float(info[9])) if limited
                              else None)  # PyBullet: lower 0, upper -1 without limits
        masses = [base[0]] + [pb.getDynamicsInfo(body, k, physicsClientId=client)[0]
                              for k in range(n_links)]
        composite = _composite_inertia(client, body, n_links)
        shapes = [shape[2] for link in range(-1, n_links)
                  for shape in pb.getCollisionShapeData(body, link, physicsClientId=client)]
        orn = base[4]
        rot = np.array(pb.getMatrixFromQuaternion(orn)).reshape(3, 3)
        return UrdfInfo(path=path, mass_kg=float(sum(masses)), joint_names=tuple(names),
                        joint_indices=tuple(indices), joint_types=tuple(types),
                        joint_friction=tuple(friction), n_links=n_links,
                        base_com_offset_m=tuple(base[3]), base_com_orn_xyzw=tuple(orn),
                        base_inertia=rot @ np.diag(base[2]) @ rot.T,
                        composite_inertia=composite,
                        all_boxes=bool(shapes) and all(k == pb.GEOM_BOX for k in shapes),
                        load_path=load_path, joint_limits=tuple(limits))
    finally:
        pb.resetSimulation(physicsClientId=client)


_INFO_CLIENT: list[int] = []


def _info_client() -> int:
    """One private DIRECT client per process for :func:`urdf_info` (connecting costs about
    0.1 s, and calibrating a body reads a new URDF per candidate)."""
    if not _INFO_CLIENT or not pb.isConnected(physicsClientId=_INFO_CLIENT[0]):
        _INFO_CLIENT[:] = [pb.connect(pb.DIRECT)]
    return _INFO_CLIENT[0]


def _composite_inertia(client: int, body: int, n_links: int) -> np.ndarray:
    """Inertia (3, 3) kg m² of all links at their loaded configuration about the common
    centre of mass, world axes (the base is loaded unrotated)."""
    rows = [(pb.getDynamicsInfo(body, -1, physicsClientId=client),
             *pb.getBasePositionAndOrientation(body, physicsClientId=client))]
    for k in range(n_links):
        state = pb.getLinkState(body, k, computeForwardKinematics=1, physicsClientId=client)
        rows.append((pb.getDynamicsInfo(body, k, physicsClientId=client), state[0], state[1]))
    masses = np.array([info[0] for info, _, _ in rows])
    centres = np.array([centre for _, centre, _ in rows])
    centre = masses @ centres / masses.sum()
    total = np.zeros((3, 3))
    for (info, c, orn), m in zip(rows, masses):
        rot = np.array(pb.getMatrixFromQuaternion(orn)).reshape(3, 3)
        d = np.asarray(c) - centre
        total += rot @ np.diag(info[2]) @ rot.T + m * (d @ d * np.eye(3) - np.outer(d, d))
    return total


class FreeUrdfScene(Scene):
    """A free object from a scene file (see the module docstring for state and frames)."""

    planar = False
    #: The table scenes' default solver settings; ``dt_s`` is replaced by the recordings' rate.
    settings = EngineSettings(dt_s=0.01, substeps=10, gravity_mps2=(0.0, 0.0, -9.81))

    def __init__(self, spec: SceneSpec, settings: EngineSettings | None = None) -> None:
        if spec.kind != "free":
            raise SceneError(f"{spec.source}: kind {spec.kind!r} is not a free scene")
        self.spec = spec
        self.info = info = urdf_info(spec.urdf)
        self.name = spec.name
        self.joint_names = info.joint_names
        self.n_joints = len(info.joint_names)
        self.state_names = _BASE + info.joint_names + tuple(f"{j}_vel" for j in info.joint_names)
        self.mass_kg = info.mass_kg
        self.inertia_body = info.base_inertia if not self.n_joints else info.composite_inertia
        offset = np.asarray(info.base_com_offset_m)
        orn = np.asarray(info.base_com_orn_xyzw)
        self._offset = None if not offset.any() and np.allclose(orn, [0, 0, 0, 1]) else \
            (offset, np.array([orn[3], *orn[:3]]))
        self.settings = dataclasses.replace(FreeUrdfScene.settings, substeps=spec.substeps)
        ignored = dict(Scene.ignored_params)
        if self.n_joints:  # joint limits are constraints that ERP corrects
            del ignored["erp"]
        if info.all_boxes:
            ignored["collision_margin"] = ("every collision shape of this object is a box, and "
                                           "Bullet's box contact ignores the margin (measured "
                                           "on the cube: identical trajectories)")
        self.ignored_params = ignored
        super().__init__(settings)
        self._kinematics_cache: tuple | None = None

    # --- construction -------------------------------------------------------------------
    def build(self, client: int) -> None:
        self.client = client
        self.static_body = load_urdf(client, "table.urdf", useFixedBase=True)
        flags = pb.URDF_USE_INERTIA_FROM_FILE
        if self.spec.self_collision:
            flags |= pb.URDF_USE_SELF_COLLISION | pb.URDF_USE_SELF_COLLISION_EXCLUDE_PARENT
        self.body = load_urdf(client, str(self.info.load_path), basePosition=[0, 0, 1],
                              flags=flags)
        self.link = -2  # contacts of every link
        pb.changeDynamics(self.body, -1, linearDamping=0.0, angularDamping=0.0,
                          physicsClientId=client)
        joints = list(self.info.joint_indices)
        if joints:
            pb.setJointMotorControlArray(self.body, joints, pb.VELOCITY_CONTROL,
                                         targetVelocities=[0.0] * len(joints),
                                         forces=list(self.info.joint_friction),
                                         physicsClientId=client)
        body, cid = self.body, client
        pose, velocity, joint_states = (pb.getBasePositionAndOrientation, pb.getBaseVelocity,
                                        pb.getJointStates)
        self._read = lambda: (pose(body, physicsClientId=cid), velocity(body, physicsClientId=cid),
                              joint_states(body, joints, physicsClientId=cid) if joints else ())
        self._read_pose = lambda: pose(body, physicsClientId=cid)

    def contact_links(self) -> list[int]:
        """The base (-1) and every link: each gets the engine's contact parameters."""
        return [-1, *range(self.info.n_links)]

    # --- frames: PyBullet's base centre of mass <-> the URDF base link frame ---------------
    def _link_from_com(self, pos, quat, vel=None, omega=None):
        """Base link frame pose (and origin velocity) from the centre-of-mass frame's;
        arrays (T, 3) and (T, 4) w-x-y-z."""
        if self._offset is None:
            return pos, quat, vel
        offset, inertial = self._offset
        link_quat = _hamilton(quat, inertial * np.array([1.0, -1.0, -1.0, -1.0]))
        arm = as_rotation(link_quat).apply(offset)
        return pos - arm, link_quat, None if vel is None else vel - np.cross(omega, arm)

    def _com_from_link(self, pos, quat, vel=None, omega=None):
        """Centre-of-mass frame pose (and velocity) from the base link frame's; one sample."""
        if self._offset is None:
            return pos, quat, vel
        offset, inertial = self._offset
        arm = as_rotation(quat).apply(offset)[0]
        com_quat = _hamilton(np.asarray(quat)[None], inertial)[0]
        return pos + arm, com_quat, None if vel is None else vel + np.cross(omega, arm)

    # --- state ----------------------------------------------------------------------------
    def set_state(self, state: np.ndarray) -> None:
        s = np.asarray(state, dtype=np.float64)
        if s.shape != (self.state_size,):
            raise SceneError(f"{self.name} state must have shape ({self.state_size},), "
                             f"got {s.shape}")
        quat = s[3:7] / np.linalg.norm(s[3:7])
        pos, com_quat, vel = self._com_from_link(s[0:3], quat, s[7:10], s[10:13])
        w, x, y, z = com_quat
        pb.resetBasePositionAndOrientation(self.body, list(pos), [x, y, z, w],
                                           physicsClientId=self.client)
        pb.resetBaseVelocity(self.body, list(vel), s[10:13].tolist(),
                             physicsClientId=self.client)
        n = self.n_joints
        for k, joint in enumerate(self.info.joint_indices):
            pb.resetJointState(self.body, joint, float(s[13 + k]), float(s[13 + n + k]),
                               physicsClientId=self.client)
        self._kinematics_cache = None

    def read_raw(self) -> object:
        return self._read()

    def raw_to_states(self, raws: list) -> np.ndarray:
        base = np.array([(*p[0], p[1][3], *p[1][:3], *v[0], *v[1]) for p, v, _ in raws],
                        dtype=np.float64).reshape(-1, 13)
        pos, quat, vel = self._link_from_com(base[:, 0:3], base[:, 3:7], base[:, 7:10],
                                             base[:, 10:13])
        joints = np.array([[j[0] for j in js] + [j[1] for j in js] for _, _, js in raws],
                          dtype=np.float64).reshape(len(raws), 2 * self.n_joints)
        return np.column_stack([pos, quat, vel, base[:, 10:13], joints])

    def read_pose_raw(self) -> object:
        return self._read_pose()

    def raw_to_poses(self, raws: list) -> tuple[np.ndarray, np.ndarray]:
        flat = np.array([(*p, w, x, y, z) for p, (x, y, z, w) in raws],
                        dtype=np.float64).reshape(-1, 7)
        pos, quat, _ = self._link_from_com(flat[:, 0:3], flat[:, 3:7])
        return pos, quat

    def get_state(self) -> np.ndarray:
        return self.raw_to_states([self.read_raw()])[0]

    def check_recording(self, trajectory) -> None:
        """DataError naming the recording when it does not fit this object: planar, or
        other joints than the URDF's non-fixed joints (names and order)."""
        where = trajectory.source or trajectory.traj_id
        if trajectory.planar:
            raise DataError(f"{where}: a planar recording, but scene {self.name!r} is free "
                            "(3D); use a scene file with kind = \"planar\"")
        names = tuple(getattr(trajectory, "joint_names", ()))
        if names != self.joint_names:
            raise DataError(f"{where}: joints {list(names)} do not match scene "
                            f"{self.name!r} ({self.spec.urdf.name}: {list(self.joint_names)})")

    def state_from_trajectory(self, trajectory, index: int = 0) -> np.ndarray:
        self.check_recording(trajectory)
        joints = trajectory.joint_state_at(index) if self.n_joints else np.zeros(0)
        return np.concatenate([trajectory.state_at(index), joints])

    def rigid_motion(self, states: np.ndarray) -> tuple[np.ndarray, ...]:
        s = np.atleast_2d(states)
        return s[:, 0:3], s[:, 3:7], s[:, 7:10], s[:, 10:13]

    def joint_positions(self, states: np.ndarray) -> np.ndarray:
        """Joint positions (T, n), rad or m, URDF order."""
        return np.atleast_2d(states)[:, 13:13 + self.n_joints]

    # --- generalised velocity -------------------------------------------------------------
    def generalized_velocity(self) -> np.ndarray:
        return self.generalized_velocity_of(self.get_state())

    def generalized_velocity_of(self, state: np.ndarray) -> np.ndarray:
        s = np.asarray(state, dtype=np.float64)
        return np.concatenate([s[7:13], s[13 + self.n_joints:]])

    def set_generalized_velocity(self, qdot: np.ndarray) -> None:
        qdot = np.asarray(qdot, dtype=np.float64)
        pos, orn = pb.getBasePositionAndOrientation(self.body, physicsClientId=self.client)
        link_pos, link_quat, _ = self._link_from_com(np.array([pos]),
                                                     np.array([[orn[3], *orn[:3]]]))
        _, _, vel = self._com_from_link(link_pos[0], link_quat[0], qdot[0:3], qdot[3:6])
        pb.resetBaseVelocity(self.body, list(vel), qdot[3:6].tolist(),
                             physicsClientId=self.client)
        for k, joint in enumerate(self.info.joint_indices):
            position = pb.getJointState(self.body, joint, physicsClientId=self.client)[0]
            pb.resetJointState(self.body, joint, position, float(qdot[6 + k]),
                               physicsClientId=self.client)

    # --- model queries from the engine's velocity kinematics ---------------------------------
    def _kinematics(self) -> tuple:
        """Per link (base first): mass (L,), centre (L, 3) world, inertia (L, 3, 3) world,
        J_v (L, 3, nv) and J_w (L, 3, nv), at the current configuration (cached until the
        world moves)."""
        key = (pb.getBasePositionAndOrientation(self.body, physicsClientId=self.client),
               tuple(pb.getJointState(self.body, j, physicsClientId=self.client)[0]
                     for j in self.info.joint_indices))
        if self._kinematics_cache is not None and self._kinematics_cache[0] == key:
            return self._kinematics_cache[1]
        nv, links = 6 + self.n_joints, list(range(self.info.n_links))
        saved = self.generalized_velocity()
        jv = np.zeros((1 + len(links), 3, nv))
        jw = np.zeros((1 + len(links), 3, nv))
        for i in range(nv):
            unit = np.zeros(nv)
            unit[i] = 1.0
            self.set_generalized_velocity(unit)
            jv[0, :, i], jw[0, :, i] = pb.getBaseVelocity(self.body, physicsClientId=self.client)
            for row, state in enumerate(self._link_states(links, velocity=True), start=1):
                jv[row, :, i], jw[row, :, i] = state[6], state[7]
        self.set_generalized_velocity(saved)
        base_pos, base_orn = key[0]
        frames = [(base_pos, base_orn)] + [(s[0], s[1]) for s in self._link_states(links)]
        dynamics = [pb.getDynamicsInfo(self.body, k, physicsClientId=self.client)
                    for k in [-1] + links]
        masses = np.array([d[0] for d in dynamics])
        inertia = np.array([_world_inertia(orn, d[2]) for (_, orn), d in zip(frames, dynamics)])
        result = (masses, np.array([c for c, _ in frames]), inertia, jv, jw)
        self._kinematics_cache = (key, result)
        return result

    def _link_states(self, links: list[int], velocity: bool = False) -> list:
        if not links:
            return []
        return pb.getLinkStates(self.body, links, computeLinkVelocity=int(velocity),
                                computeForwardKinematics=1, physicsClientId=self.client)

    def _rigid_pose(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A rigid object (no joints): base link origin (3,) m, the arm from it to the centre
        of mass (3,) m and the inertia about the centre (3, 3) kg m², world frame."""
        pos, orn = pb.getBasePositionAndOrientation(self.body, physicsClientId=self.client)
        link_pos, link_quat, _ = self._link_from_com(np.array([pos]),
                                                     np.array([[orn[3], *orn[:3]]]))
        rot = as_rotation(link_quat).as_matrix()[0]
        return link_pos[0], np.asarray(pos) - link_pos[0], rot @ self.info.base_inertia @ rot.T

    def mass_matrix(self) -> np.ndarray:
        if not self.n_joints:  # closed form: q_dot = (v of the link origin, omega)
            _, arm, inertia = self._rigid_pose()
            cross = skew(arm)
            matrix = np.zeros((6, 6))
            matrix[:3, :3] = self.mass_kg * np.eye(3)
            matrix[:3, 3:] = -self.mass_kg * cross
            matrix[3:, :3] = self.mass_kg * cross
            matrix[3:, 3:] = inertia - self.mass_kg * cross @ cross
            return matrix
        masses, _, inertia, jv, jw = self._kinematics()
        return (np.einsum("l,lai,laj->ij", masses, jv, jv)
                + np.einsum("lai,lab,lbj->ij", jw, inertia, jw))

    def point_jacobian(self, point_world: np.ndarray, link: int | None = None) -> np.ndarray:
        """J (3, nv) of the point now at ``point_world`` (m, world) on ``link`` (PyBullet
        index, -1 the base; None: the link whose centre is nearest)."""
        point = np.asarray(point_world, dtype=np.float64)
        if not self.n_joints:
            origin, _, _ = self._rigid_pose()
            return np.hstack([np.eye(3), -skew(point - origin)])
        _, centres, _, jv, jw = self._kinematics()
        row = (int(np.argmin(np.linalg.norm(centres - point, axis=1))) if link is None
               else link + 1)
        return jv[row] - skew(point - centres[row]) @ jw[row]

    # --- derived ----------------------------------------------------------------------------
    def energy(self, states: np.ndarray) -> np.ndarray:
        """Kinetic plus gravitational energy (J, zero at height 0) of states (n,) or (T, n):
        ½ q_dotᵀ M q_dot − Σ m_k g·c_k; with joints evaluated in the world (restored after)."""
        states = np.asarray(states, dtype=np.float64)
        single = states.ndim == 1
        if not self.n_joints:
            values = self._rigid_energy(np.atleast_2d(states))
            return float(values[0]) if single else values
        saved = self.get_state()
        gravity = np.asarray(self.settings.gravity_mps2)
        values = []
        for state in np.atleast_2d(states):
            self.set_state(state)
            masses, centres, _, _, _ = self._kinematics()
            qdot = self.generalized_velocity_of(state)
            values.append(0.5 * qdot @ self.mass_matrix() @ qdot - masses @ centres @ gravity)
        self.set_state(saved)
        return float(values[0]) if single else np.array(values)

    def _rigid_energy(self, states: np.ndarray) -> np.ndarray:
        pos, quat, vel, omega = self.rigid_motion(states)
        rot = as_rotation(quat)
        arm = rot.apply(np.asarray(self.info.base_com_offset_m))
        com_vel = vel + np.cross(omega, arm)
        inertia = np.einsum("tij,jk,tlk->til", rot.as_matrix(), self.info.base_inertia,
                            rot.as_matrix())
        kinetic = 0.5 * self.mass_kg * np.einsum("ti,ti->t", com_vel, com_vel)
        kinetic += 0.5 * np.einsum("ti,tij,tj->t", omega, inertia, omega)
        return kinetic - self.mass_kg * (pos + arm) @ np.asarray(self.settings.gravity_mps2)

    def com_velocity(self, states: np.ndarray) -> np.ndarray:
        """Velocity (T, 3) m/s world of the whole object's centre of mass."""
        states = np.atleast_2d(np.asarray(states, dtype=np.float64))
        if not self.n_joints:
            _, quat, vel, omega = self.rigid_motion(states)
            arm = as_rotation(quat).apply(np.asarray(self.info.base_com_offset_m))
            return vel + np.cross(omega, arm)
        saved = self.get_state()
        result = []
        for state in states:
            self.set_state(state)
            masses, _, _, jv, _ = self._kinematics()
            result.append(np.einsum("l,lai,i->a", masses, jv,
                                    self.generalized_velocity_of(state)) / masses.sum())
        self.set_state(saved)
        return np.array(result)


def _hamilton(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a ⊗ b for quaternions (T, 4) and (4,) w-x-y-z, keeping a's sign (no canonical w >= 0,
    so a recorded quaternion comes back as it went in)."""
    w1, x1, y1, z1 = np.moveaxis(np.atleast_2d(a), -1, 0)
    w2, x2, y2, z2 = b
    return np.stack([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2],
                    axis=-1)


def _world_inertia(orn_xyzw, diagonal) -> np.ndarray:
    rot = np.array(pb.getMatrixFromQuaternion(orn_xyzw)).reshape(3, 3)
    return rot @ np.diag(diagonal) @ rot.T
