"""Planar bodies in a vertical dropping arena: the MCube ellipse and a square PLA dice.

World frame: x horizontal, y up, gravity along -y, floor top at y = 0; the body moves in the
x-y plane on two prismatic joints (x, y) and one revolute joint (theta, about +z, counter-
clockwise seen from +z), so the generalised coordinates are exactly q = (x m, y m, theta rad)
and M = diag(m, m, m k^2) (plus 2e-6 kg of massless-in-practice slider links).

State (6,): (x m, y m, theta rad, dx m/s, dy m/s, dtheta rad/s).

Engine settings follow ``PYBULLET_NOTES.md``: Bullet applies restitution only when the
shapes already overlap at the step that detects contact, and the default error reduction
then adds a spurious upward velocity, so ERP = contact ERP = friction ERP = 0, a convex
shape shrunk by Bullet's 1 mm collision margin, and impacts started 0.1 mm inside the floor
(:data:`IMPACT_START_OVERLAP_M`). The price of ERP = 0 is that resting penetration is not
corrected, which matters only for long resting phases.
"""

from __future__ import annotations

import math

import numpy as np
from residualsim.sim.bullet import pb

from residualsim.errors import SceneError
from residualsim.sim.scenes.base import EngineSettings, Scene, load_urdf

__all__ = [
    "PlanarScene",
    "PlanarEllipseScene",
    "PlanarDiceScene",
    "ellipse_prism_obj",
    "IMPACT_START_OVERLAP_M",
    "COLLISION_MARGIN_M",
]

#: Bullet's collision margin for convex meshes loaded from URDF (metres).
COLLISION_MARGIN_M = 0.001
#: Planar impacts start this far inside the floor so restitution is applied (see notes).
IMPACT_START_OVERLAP_M = 1e-4
_X, _Y, _THETA = 0, 1, 2


def ellipse_prism_obj(semi_major_m: float, semi_minor_m: float, half_thickness_m: float,
                      margin_m: float = COLLISION_MARGIN_M, n_vertices: int = 96) -> str:
    """Wavefront OBJ text of an elliptic prism (axis along z) shrunk by the collision margin.

    The convex hull of this prism inflated by ``margin_m`` (what Bullet collides with) is the
    ellipse with the given semi-axes to within 0.05 mm.
    """
    a, b, h = semi_major_m - margin_m, semi_minor_m - margin_m, half_thickness_m - margin_m
    angles = np.linspace(0.0, 2.0 * math.pi, n_vertices, endpoint=False)
    lines = [f"# elliptic prism a={semi_major_m} b={semi_minor_m} shrunk by margin {margin_m}"]
    for z in (-h, h):
        lines += [f"v {a * math.cos(t):.7f} {b * math.sin(t):.7f} {z:.7f}" for t in angles]
    n = n_vertices
    lines.append("f " + " ".join(str(i + 1) for i in reversed(range(n))))
    lines.append("f " + " ".join(str(n + i + 1) for i in range(n)))
    for i in range(n):
        j = (i + 1) % n
        lines.append(f"f {i + 1} {j + 1} {n + j + 1} {n + i + 1}")
    return "\n".join(lines) + "\n"


class PlanarScene(Scene):
    """A rigid body on planar joints above a floor; subclasses give URDF, mass and shape."""

    planar = True
    state_names = ("x_m", "y_m", "theta_rad", "dx_mps", "dy_mps", "dtheta_radps")
    urdf = ""
    settings = EngineSettings(dt_s=1.0 / 250.0, substeps=10, gravity_mps2=(0.0, -9.81, 0.0),
                              erp=0.0)
    ignored_params = {**Scene.ignored_params,
                      "erp": "the planar joints keep the scene's ERP 0 (they hold the body in "
                             "its plane)"}

    def build(self, client: int) -> None:
        self.client = client
        self.static_body = load_urdf(client, "planar_floor.urdf", useFixedBase=True)
        self.body = load_urdf(client, self.urdf, useFixedBase=True,
                              flags=pb.URDF_USE_INERTIA_FROM_FILE)
        self.link = _THETA
        if pb.getNumJoints(self.body, physicsClientId=client) != 3:
            raise SceneError(f"{self.urdf}: expected 3 joints (x, y, theta)")
        for link in (-1, _X, _Y, _THETA):
            pb.changeDynamics(self.body, link, linearDamping=0.0, angularDamping=0.0,
                              jointDamping=0.0, physicsClientId=client)
        # Joints carry velocity motors by default; switch them off.
        pb.setJointMotorControlArray(self.body, [_X, _Y, _THETA], pb.VELOCITY_CONTROL,
                                     forces=[0.0, 0.0, 0.0], physicsClientId=client)
        body, cid, joints = self.body, client, [_X, _Y, _THETA]
        get_states = pb.getJointStates
        self._read = lambda: get_states(body, joints, physicsClientId=cid)

    def set_state(self, state: np.ndarray) -> None:
        s = np.asarray(state, dtype=np.float64)
        if s.shape != (6,):
            raise SceneError(f"{self.name} state must have shape (6,), got {s.shape}")
        for joint in (_X, _Y, _THETA):
            pb.resetJointState(self.body, joint, s[joint], s[3 + joint],
                               physicsClientId=self.client)

    def read_raw(self) -> object:
        return self._read()

    def raw_to_states(self, raws: list) -> np.ndarray:
        flat = np.array([[j[0] for j in raw] + [j[1] for j in raw] for raw in raws],
                        dtype=np.float64)
        return flat.reshape(-1, 6)

    def get_state(self) -> np.ndarray:
        return self.raw_to_states([self.read_raw()])[0]

    def state_from_trajectory(self, trajectory, index: int = 0) -> np.ndarray:
        self.check_recording(trajectory)
        x, y, theta = trajectory.planar_configuration()[index]
        vx, vy = trajectory.linear_velocity_mps[index, :2]
        return np.array([x, y, theta, vx, vy, trajectory.angular_velocity_world_radps[index, 2]])

    def rigid_motion(self, states: np.ndarray) -> tuple[np.ndarray, ...]:
        s = np.atleast_2d(states)
        zeros = np.zeros(len(s))
        positions = np.column_stack([s[:, 0], s[:, 1], zeros])
        half = 0.5 * s[:, 2]
        quat = np.column_stack([np.cos(half), zeros, zeros, np.sin(half)])
        velocity = np.column_stack([s[:, 3], s[:, 4], zeros])
        omega = np.column_stack([zeros, zeros, s[:, 5]])
        return positions, quat, velocity, omega

    def generalized_velocity(self) -> np.ndarray:
        return np.array([j[1] for j in self._read()])

    def generalized_velocity_of(self, state: np.ndarray) -> np.ndarray:
        return np.asarray(state, dtype=np.float64)[3:6].copy()

    def set_generalized_velocity(self, qdot: np.ndarray) -> None:
        for joint, (position, _, _, _) in zip((_X, _Y, _THETA), self._read()):
            pb.resetJointState(self.body, joint, position, float(qdot[joint]),
                               physicsClientId=self.client)

    def _positions(self) -> list[float]:
        return [j[0] for j in self._read()]

    def mass_matrix(self) -> np.ndarray:
        return np.array(pb.calculateMassMatrix(self.body, self._positions(),
                                               physicsClientId=self.client))

    def point_jacobian(self, point_world: np.ndarray, link: int | None = None) -> np.ndarray:
        link_state = pb.getLinkState(self.body, _THETA, physicsClientId=self.client)
        com_world, com_orn = link_state[0], link_state[1]
        inv_pos, inv_orn = pb.invertTransform(com_world, com_orn)
        local, _ = pb.multiplyTransforms(inv_pos, inv_orn, list(point_world), [0, 0, 0, 1])
        zeros = [0.0] * 3
        linear, _ = pb.calculateJacobian(self.body, _THETA, list(local), self._positions(),
                                         zeros, zeros, physicsClientId=self.client)
        return np.array(linear)

    def resting_height(self, theta_rad: float) -> float:
        """Height (m) of the centre above the floor when the body touches it at angle theta."""
        raise NotImplementedError


class PlanarEllipseScene(PlanarScene):
    """MCube elliptic PLA disc: semi-axes 35 mm and 25 mm, 36.4 g, radius of gyration 19.2 mm."""

    name = "planar-ellipse"
    urdf = "planar_ellipse.urdf"
    semi_major_m = 0.035
    semi_minor_m = 0.025
    mass_kg = 0.0364
    inertia_body = np.diag([1.0e-5, 1.0e-5, 0.0364 * 0.0192**2])

    def resting_height(self, theta_rad: float) -> float:
        a, b = self.semi_major_m, self.semi_minor_m
        return math.sqrt((a * math.sin(theta_rad)) ** 2 + (b * math.cos(theta_rad)) ** 2)


class PlanarDiceScene(PlanarScene):
    """A square planar dice of PLA, 49 g (the residual-learning paper's object).

    The paper gives the mass only. We assume a solid PLA cube (density 1.24 g/cm^3): side
    (49 / 1.24)^(1/3) cm = 34.06 mm, planar inertia m s^2 / 6, radius of gyration
    s / sqrt(6) = 13.9 mm. These are honest guesses, not measured figures.
    """

    name = "planar-dice"
    urdf = "planar_dice.urdf"
    side_m = 0.03406
    mass_kg = 0.049
    inertia_body = np.eye(3) * 0.049 * 0.03406**2 / 6.0

    def resting_height(self, theta_rad: float) -> float:
        half = self.side_m / 2.0
        return half * (abs(math.cos(theta_rad)) + abs(math.sin(theta_rad)))
