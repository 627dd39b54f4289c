"""The ContactNets cube: a 3D free rigid body tossed onto a table (the plane z = 0).

State (13,): position (3, m, world), orientation quaternion (4, w-x-y-z, body to world),
linear velocity (3, m/s, world), angular velocity (3, rad/s, world). Gravity is -z.
Generalised velocity q_dot (6,) = (linear velocity world, angular velocity world).
"""

from __future__ import annotations

import numpy as np
from residualsim.sim.bullet import pb

from residualsim.sim.contact import free_body_mass_matrix, free_body_point_jacobian
from residualsim.sim.scenes.base import EngineSettings, Scene, load_urdf, quat_wxyz_to_matrix

__all__ = ["CubeScene", "CUBE_SIDE_M", "CUBE_MASS_KG"]

CUBE_SIDE_M = 0.1048
CUBE_MASS_KG = 0.37


class CubeScene(Scene):
    """The ContactNets cube (side 0.1048 m, 0.37 kg, uniform inertia) on a table at z = 0.

    Default settings: the recording rate 148 Hz with 10 substeps (restitution in Bullet
    depends on the substep count: calibrate at the count you run), restitution velocity
    threshold 0, PyBullet's default ERP.
    """

    name = "cube"
    planar = False
    state_names = ("x_m", "y_m", "z_m", "qw", "qx", "qy", "qz",
                   "vx_mps", "vy_mps", "vz_mps", "wx_radps", "wy_radps", "wz_radps")
    mass_kg = CUBE_MASS_KG
    inertia_body = np.eye(3) * CUBE_MASS_KG * CUBE_SIDE_M**2 / 6.0
    side_m = CUBE_SIDE_M
    settings = EngineSettings(dt_s=1.0 / 148.0, substeps=10, gravity_mps2=(0.0, 0.0, -9.81))
    urdf = "cube.urdf"
    #: Measured (tests/test_solver_params.py): a box on the table plane leaves trajectories
    #: bit-identical under these, besides the multibody's split impulse and joint ERP.
    ignored_params = {
        **Scene.ignored_params,
        "collision_margin": "Bullet's box-on-plane contact ignores the margin of a box",
        "contact_processing_threshold": "Bullet's box-on-plane contact ignores it (measured: "
                                        "identical trajectories)",
    }

    def build(self, client: int) -> None:
        self.client = client
        self.static_body = load_urdf(client, "table.urdf", useFixedBase=True)
        self.body = load_urdf(client, self.urdf, basePosition=[0, 0, 1],
                              flags=pb.URDF_USE_INERTIA_FROM_FILE)
        self.link = -1
        # Multibodies get linear and angular damping 0.04 by default: a free body has none.
        pb.changeDynamics(self.body, -1, linearDamping=0.0, angularDamping=0.0,
                          physicsClientId=client)
        self.use_body(self.body)

    def use_body(self, body: int) -> None:
        """Make ``body`` (another copy of the cube in this scene's world, as the batched
        rollouts of :mod:`residualsim.sim.batch` load them) the one this scene reads, sets
        and describes."""
        cid = self.client
        get_pose, get_velocity = pb.getBasePositionAndOrientation, pb.getBaseVelocity
        self.body = body
        self._read = lambda: (get_pose(body, physicsClientId=cid),
                              get_velocity(body, physicsClientId=cid))
        self._read_pose = lambda: get_pose(body, physicsClientId=cid)

    def set_state(self, state: np.ndarray) -> None:
        # A contiguous copy: the quaternion's norm (a BLAS dot) rounds differently for a
        # strided row (one of an F-ordered array), and a state must not set differently
        # by where it was stored (the batched rollouts rely on it).
        s = np.array(state, dtype=np.float64)
        if s.shape != (13,):
            from residualsim.errors import SceneError
            raise SceneError(f"cube state must have shape (13,), got {s.shape}")
        w, x, y, z = s[3:7] / np.linalg.norm(s[3:7])
        pb.resetBasePositionAndOrientation(self.body, s[0:3].tolist(), [x, y, z, w],
                                           physicsClientId=self.client)
        pb.resetBaseVelocity(self.body, s[7:10].tolist(), s[10:13].tolist(),
                             physicsClientId=self.client)

    def read_raw(self) -> object:
        return self._read()

    def raw_to_states(self, raws: list) -> np.ndarray:
        flat = np.array([(*pose[0], *pose[1], *vel[0], *vel[1]) for pose, vel in raws],
                        dtype=np.float64).reshape(-1, 13)
        # PyBullet gives x-y-z-w; reorder the quaternion to w-x-y-z.
        return flat[:, [0, 1, 2, 6, 3, 4, 5, 7, 8, 9, 10, 11, 12]]

    def read_pose_raw(self) -> object:
        return self._read_pose()

    def raw_to_poses(self, raws: list) -> tuple[np.ndarray, np.ndarray]:
        flat = np.array([(*position, *quat) for position, quat in raws],
                        dtype=np.float64).reshape(-1, 7)
        return flat[:, 0:3], flat[:, [6, 3, 4, 5]]

    def get_state(self) -> np.ndarray:
        return self.raw_to_states([self.read_raw()])[0]

    def state_from_trajectory(self, trajectory, index: int = 0) -> np.ndarray:
        self.check_recording(trajectory)
        return trajectory.state_at(index)

    def rigid_motion(self, states: np.ndarray) -> tuple[np.ndarray, ...]:
        s = np.atleast_2d(states)
        return s[:, 0:3], s[:, 3:7], s[:, 7:10], s[:, 10:13]

    def generalized_velocity(self) -> np.ndarray:
        lin, ang = pb.getBaseVelocity(self.body, physicsClientId=self.client)
        return np.array([*lin, *ang])

    def generalized_velocity_of(self, state: np.ndarray) -> np.ndarray:
        return np.asarray(state, dtype=np.float64)[7:13].copy()

    def set_generalized_velocity(self, qdot: np.ndarray) -> None:
        qdot = np.asarray(qdot, dtype=np.float64)
        pb.resetBaseVelocity(self.body, qdot[0:3].tolist(), qdot[3:6].tolist(),
                             physicsClientId=self.client)

    def _rotation(self) -> np.ndarray:
        _, (x, y, z, w) = pb.getBasePositionAndOrientation(self.body, physicsClientId=self.client)
        return quat_wxyz_to_matrix(np.array([w, x, y, z]))

    def mass_matrix(self) -> np.ndarray:
        rot = self._rotation()
        return free_body_mass_matrix(self.mass_kg, rot @ self.inertia_body @ rot.T)

    def point_jacobian(self, point_world: np.ndarray, link: int | None = None) -> np.ndarray:
        centre, _ = pb.getBasePositionAndOrientation(self.body, physicsClientId=self.client)
        return free_body_point_jacobian(np.asarray(point_world) - np.asarray(centre))
