"""The arm + flexible loop scene: a 7-DOF KUKA iiwa holding the top of a clamped spring loop.

World frame: z up, gravity along -z, table top at z = 0. The arm (``kuka_iiwa/model.urdf``
from ``pybullet_data``) stands at the origin; the loop (:mod:`.loop_urdf`) stands upright in
the world y-z plane at x = :data:`LOOP_X_M`, clamped at its bottom vertex
:data:`CLAMP_HEIGHT_M` above the table. Two fixed constraints close the kinematic chain: the
last loop link onto the clamp, and the loop link ending at the top vertex onto the arm's last
link (the grasp). The arm never collides (its collision masks are zero); loop links collide
with the table, where the residual machinery's contact features apply.

Engine pitfalls handled here (``PYBULLET_NOTES.md``): inertias come from the URDF
(``URDF_USE_INERTIA_FROM_FILE``), PyBullet's joint damping, linear and angular damping and
velocity motors are zeroed, constraint frames are given relative to each link's centre of
mass, and the loop's springs (τ = -κ q - c q̇ on every joint) and the arm's torques are
applied explicitly at every internal step of ``dt_s / substeps`` (1 ms by default: stable up
to κ ≈ 15 N m/rad; 2 ms is not).

Arm joint angles ``b`` (7,) are in radians, torques in N m, positions in metres (world).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from residualsim.sim.bullet import pb
import pybullet_data

from residualsim.errors import SceneError
from residualsim.sim.scenes.base import ASSETS_DIR, cache_dir, check_substeps
from residualsim.sim.scenes.loop_urdf import LoopParameters, loop_urdf, read_loop_parameters

__all__ = ["ArmLoopScene", "ArmLoopRun", "lqr_gains", "ArmLoopSettings", "LOOP_X_M", "CLAMP_HEIGHT_M", "ARM_JOINTS",
           "EE_LINK", "loop_asset"]

#: x of the loop's plane, metres (world).
LOOP_X_M = 0.6
#: Height of the clamped bottom vertex above the table, metres.
CLAMP_HEIGHT_M = 0.03
#: The arm's revolute joints and its last link (the one holding the loop).
ARM_JOINTS = tuple(range(7))
EE_LINK = 6
#: Where the arm's last link frame sits above the grasped top vertex at the start, metres.
GRASP_OFFSET_M = 0.06
_ARM_URDF = "kuka_iiwa/model.urdf"


@dataclass(frozen=True)
class ArmLoopSettings:
    """Solver settings: ``dt_s`` the recording period (100 Hz), ``substeps`` internal steps
    per period, ``solver_iterations`` of PyBullet's constraint solver. Checked at
    construction (SceneError): ``dt_s`` finite and > 0, ``substeps`` an integer in
    [1, ``MAX_SUBSTEPS``], ``solver_iterations`` an integer >= 1."""

    dt_s: float = 0.01
    substeps: int = 10
    solver_iterations: int = 50
    gravity_mps2: tuple[float, float, float] = (0.0, 0.0, -9.81)

    def __post_init__(self) -> None:
        check_substeps(self.substeps, "ArmLoopSettings")  # 0 divided dt_s by zero
        if not (isinstance(self.dt_s, (int, float, np.floating)) and math.isfinite(self.dt_s)
                and self.dt_s > 0):
            raise SceneError(f"ArmLoopSettings: dt_s must be a finite number of seconds > 0, "
                             f"got {self.dt_s!r}")
        iterations = self.solver_iterations
        if isinstance(iterations, bool) or not isinstance(
                iterations, (int, np.integer, float, np.floating)) \
                or not math.isfinite(iterations) or int(iterations) != iterations \
                or iterations < 1:
            raise SceneError(f"ArmLoopSettings: solver_iterations must be an integer >= 1, "
                             f"got {iterations!r}")

    @property
    def step_s(self) -> float:
        """Internal step, seconds."""
        return self.dt_s / self.substeps


def loop_asset(n_links: int) -> Path:
    """Path of the loop URDF with ``n_links`` links and the default parameters:
    ``assets/loop<n>.urdf`` when shipped (12 and 24), otherwise generated once into the
    user cache (``$RESIDUALSIM_CACHE``, else ``$XDG_CACHE_HOME/residualsim``, else
    ``~/.cache/residualsim``), never into the installed package, which may be read-only."""
    if int(n_links) != n_links or n_links < 3:
        raise SceneError(f"a loop needs an integer number of links >= 3, got {n_links!r}")
    shipped = ASSETS_DIR / f"loop{n_links}.urdf"
    if shipped.is_file():
        return shipped
    path = cache_dir() / f"loop{n_links}.urdf"
    if not path.is_file():
        from residualsim.atomic import atomic_write_text

        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, loop_urdf(LoopParameters().rescaled(n_links)))
    return path


def lqr_gains(mass_matrix: np.ndarray, bandwidth_radps: float
              ) -> tuple[np.ndarray, np.ndarray]:
    """Feedback gains (K_p, K_d) for the arm from an LQR on its linearisation.

    The arm near a configuration is M ë = u (gravity and the loop are fed forward or
    treated as disturbances). With state (e, ė), cost ∫ ω⁴ eᵀ M e + uᵀ M⁻¹ u dt (errors
    weighted by the arm's inertia, torques by its inverse, so that every joint gets the
    same closed-loop bandwidth ω = ``bandwidth_radps``), the Riccati solution gives
    K = [ω² M, √2 ω M]: a critically-damped-like (ζ = 0.71) response at ω on every mode.
    Returns K_p (7, 7) N m/rad and K_d (7, 7) N m s/rad.
    """
    from scipy.linalg import solve_continuous_are

    mass = np.asarray(mass_matrix, dtype=float)
    n = len(mass)
    w = float(bandwidth_radps)
    if not (math.isfinite(w) and w > 0):
        raise SceneError(f"bandwidth must be positive (rad/s), got {bandwidth_radps}")
    a = np.block([[np.zeros((n, n)), np.eye(n)], [np.zeros((n, 2 * n))]])
    b = np.vstack([np.zeros((n, n)), np.linalg.inv(mass)])
    q = np.block([[w ** 4 * mass, np.zeros((n, n))], [np.zeros((n, 2 * n))]])
    r_inv = mass  # R = M^-1
    p = solve_continuous_are(a, b, q, np.linalg.inv(mass))
    gain = r_inv @ b.T @ p
    return gain[:, :n], gain[:, n:]


def _pose_inverse(pos, orn):
    return pb.invertTransform(pos, orn)


@dataclass(frozen=True)
class ArmLoopRun:
    """Result of :meth:`ArmLoopScene.drive`: arm ``angles`` (T, 7) rad at the samples, the
    mean applied arm ``torques`` (T-1, 7) N m over each period, and the loop's closure error
    (m) at the end."""

    angles: np.ndarray
    torques: np.ndarray
    closure_error_m: float


class ArmLoopScene:
    """One PyBullet world holding the arm, the loop and the table.

    Parameters
    ----------
    loop : LoopParameters, int or path
        The loop: parameters, a number of links (``assets/loop<n>.urdf``), or a loop URDF.
    settings : ArmLoopSettings, optional
    arm_start : array (7,), optional
        Arm joint angles (rad) at which the grasp is made; default: the inverse-kinematics
        solution that puts the last link :data:`GRASP_OFFSET_M` above the top vertex,
        pointing down.
    """

    name = "arm-loop"

    def __init__(self, loop: LoopParameters | int | str | Path = 12,
                 settings: ArmLoopSettings | None = None,
                 arm_start: np.ndarray | None = None) -> None:
        if isinstance(loop, LoopParameters):
            self.loop_params, self._urdf_text = loop, loop_urdf(loop)
            self.loop_path = None
        else:
            path = loop_asset(int(loop)) if isinstance(loop, int) else Path(loop)
            if not path.is_file():
                raise SceneError(f"{path}: loop URDF not found")
            self.loop_params, self._urdf_text = read_loop_parameters(path), None
            self.loop_path = path
        self.settings = settings or ArmLoopSettings()
        self.client = pb.connect(pb.DIRECT)
        self._arm_start = None if arm_start is None else np.asarray(arm_start, float)
        try:
            self._build()
        except BaseException:
            pb.disconnect(self.client)
            raise
        self.kappa = np.array([self.loop_params.kappa_theta, self.loop_params.kappa_psi])
        self.damping = self.loop_params.damping

    # --- construction ---------------------------------------------------------------------
    def _build(self) -> None:
        cid, s = self.client, self.settings
        pb.setGravity(*s.gravity_mps2, physicsClientId=cid)
        pb.setPhysicsEngineParameter(fixedTimeStep=s.step_s, numSubSteps=1,
                                     numSolverIterations=s.solver_iterations,
                                     physicsClientId=cid)
        if pb.loadPlugin("pdControlPlugin", physicsClientId=cid) < 0:
            raise SceneError("PyBullet's pdControlPlugin is not available in this build")
        self.table = pb.loadURDF(str(ASSETS_DIR / "table.urdf"), useFixedBase=True,
                                 physicsClientId=cid)
        flags = pb.URDF_USE_INERTIA_FROM_FILE
        self.arm = pb.loadURDF(str(Path(pybullet_data.getDataPath()) / _ARM_URDF),
                               useFixedBase=True, flags=flags, physicsClientId=cid)
        loop_file = self.loop_path
        if loop_file is None:
            import tempfile

            with tempfile.NamedTemporaryFile("w", suffix=".urdf", delete=False) as handle:
                handle.write(self._urdf_text)
            loop_file = Path(handle.name)
        try:
            self.loop = pb.loadURDF(
                str(loop_file), [LOOP_X_M, 0.0, CLAMP_HEIGHT_M],
                pb.getQuaternionFromEuler([0.0, 0.0, math.pi / 2]), useFixedBase=True,
                flags=flags, physicsClientId=cid)
        except pb.error as exc:
            raise SceneError(f"{loop_file}: PyBullet could not load this loop ({exc})") from None
        finally:
            if self.loop_path is None:
                loop_file.unlink()
        n = self.loop_params.n_links
        self.loop_joints = list(range(2 * n))
        self.n_loop_joints = 2 * n
        for body, joints in ((self.arm, ARM_JOINTS), (self.loop, self.loop_joints)):
            for link in [-1, *joints]:
                pb.changeDynamics(body, link, linearDamping=0.0, angularDamping=0.0,
                                  jointDamping=0.0, physicsClientId=cid)
            pb.setJointMotorControlArray(body, list(joints), pb.VELOCITY_CONTROL,
                                         forces=[0.0] * len(joints), physicsClientId=cid)
        for link in [-1, *ARM_JOINTS]:  # the arm touches nothing
            pb.setCollisionFilterGroupMask(self.arm, link, 0, 0, physicsClientId=cid)
        # Close the chain at the clamp: the far end of link n onto the clamp vertex.
        self.last_link = 2 * n - 1
        self.top_link = 2 * (n // 2) - 1  # link n/2 ends at the top vertex
        length = self.loop_params.link_length_m
        self.closure = self._fixed_constraint(self.loop, self.last_link, (length, 0, 0),
                                              self.loop, -1)
        self.arm_start = (self._arm_start if self._arm_start is not None
                          else self.grasp_configuration())
        self.set_arm(self.arm_start)
        self.grasp = self._fixed_constraint(self.loop, self.top_link, (length, 0, 0),
                                            self.arm, EE_LINK)
        self._initial_state = pb.saveState(physicsClientId=cid)

    def _link_frame(self, body: int, link: int):
        """World pose of a link's URDF frame (the base's for link -1)."""
        cid = self.client
        if link == -1:
            return pb.getBasePositionAndOrientation(body, physicsClientId=cid)
        state = pb.getLinkState(body, link, computeForwardKinematics=True, physicsClientId=cid)
        return state[4], state[5]

    def _com_frame(self, body: int, link: int):
        cid = self.client
        if link == -1:
            return pb.getBasePositionAndOrientation(body, physicsClientId=cid)
        state = pb.getLinkState(body, link, computeForwardKinematics=True, physicsClientId=cid)
        return state[0], state[1]

    def _fixed_constraint(self, parent: int, parent_link: int, point_in_link, child: int,
                          child_link: int) -> int:
        """A fixed constraint holding the current relative pose, at a point given in the
        parent link's URDF frame (frames converted to centre-of-mass frames, as PyBullet
        wants)."""
        cid = self.client
        link_pos, link_orn = self._link_frame(parent, parent_link)
        point_world, frame_orn = pb.multiplyTransforms(link_pos, link_orn, point_in_link,
                                                       [0, 0, 0, 1])
        pcom = _pose_inverse(*self._com_frame(parent, parent_link))
        ccom = _pose_inverse(*self._com_frame(child, child_link))
        p_pos, p_orn = pb.multiplyTransforms(*pcom, point_world, frame_orn)
        c_pos, c_orn = pb.multiplyTransforms(*ccom, point_world, frame_orn)
        constraint = pb.createConstraint(
            parent, parent_link, child, child_link, pb.JOINT_FIXED, [0, 0, 0], p_pos, c_pos,
            parentFrameOrientation=p_orn, childFrameOrientation=c_orn, physicsClientId=cid)
        pb.changeConstraint(constraint, maxForce=1e6, physicsClientId=cid)
        return constraint

    def grasp_configuration(self) -> np.ndarray:
        """Arm angles (7,) rad putting the last link above the loop's top vertex, pointing
        down (inverse kinematics from a bent elbow)."""
        cid = self.client
        top = self.vertex_world(self.loop_params.n_links // 2)
        target = top + np.array([0.0, 0.0, GRASP_OFFSET_M])
        down = pb.getQuaternionFromEuler([math.pi, 0.0, 0.0])
        self.set_arm(np.array([0.0, 0.6, 0.0, -1.4, 0.0, 1.1, 0.0]))
        for _ in range(20):
            solution = pb.calculateInverseKinematics(
                self.arm, EE_LINK, target, down, maxNumIterations=200,
                residualThreshold=1e-9, physicsClientId=cid)
            self.set_arm(np.array(solution[:7]))
        return np.array(solution[:7])

    def regrasp(self, angles: np.ndarray) -> None:
        """Back to the built world with the arm at ``angles`` (7,) rad and the grasp remade at
        that pose (the loop at its rest n-gon): how a replay starts from measured angles."""
        self.reset()
        pb.removeConstraint(self.grasp, physicsClientId=self.client)
        self.set_arm(np.asarray(angles, dtype=float))
        self.grasp = self._fixed_constraint(self.loop, self.top_link,
                                            (self.loop_params.link_length_m, 0, 0), self.arm,
                                            EE_LINK)

    def vertex_world(self, k: int) -> np.ndarray:
        """World position (3,) m of loop vertex k (0 = clamp) at the current configuration."""
        if k == 0:
            return np.array(pb.getBasePositionAndOrientation(self.loop,
                                                             physicsClientId=self.client)[0])
        pos, orn = self._link_frame(self.loop, 2 * k - 1)
        return np.array(pb.multiplyTransforms(pos, orn, (self.loop_params.link_length_m, 0, 0),
                                              [0, 0, 0, 1])[0])

    # --- state -----------------------------------------------------------------------------
    def set_arm(self, angles: np.ndarray, velocities: np.ndarray | None = None) -> None:
        """Put the arm at joint angles (7,) rad and velocities (7,) rad/s (default 0)."""
        velocities = np.zeros(7) if velocities is None else velocities
        for joint in ARM_JOINTS:
            pb.resetJointState(self.arm, joint, float(angles[joint]), float(velocities[joint]),
                               physicsClientId=self.client)

    def arm_state(self) -> tuple[np.ndarray, np.ndarray]:
        """Arm joint angles (7,) rad and velocities (7,) rad/s."""
        states = pb.getJointStates(self.arm, ARM_JOINTS, physicsClientId=self.client)
        return (np.array([s[0] for s in states]), np.array([s[1] for s in states]))

    def loop_state(self) -> tuple[np.ndarray, np.ndarray]:
        """Loop joint angles (2n,) rad and velocities (2n,) rad/s, θ_1, ψ_1, θ_2, ..."""
        states = pb.getJointStates(self.loop, self.loop_joints, physicsClientId=self.client)
        return (np.array([s[0] for s in states]), np.array([s[1] for s in states]))

    def ee_position(self) -> np.ndarray:
        """World position (3,) m of the arm's last link frame."""
        return np.array(self._link_frame(self.arm, EE_LINK)[0])

    def reset(self) -> None:
        """Back to the freshly built world (arm at :attr:`arm_start`, loop at rest n-gon)."""
        pb.restoreState(self._initial_state, physicsClientId=self.client)

    def closure_error_m(self) -> float:
        """Distance (m) between the loop's last vertex and the clamp: the closure drift."""
        return float(np.linalg.norm(self.vertex_world(self.loop_params.n_links)
                                    - self.vertex_world(0)))

    def arm_mass_matrix(self, angles: np.ndarray) -> np.ndarray:
        """The arm's joint-space mass matrix (7, 7), kg m^2, at ``angles`` (loop excluded)."""
        return np.array(pb.calculateMassMatrix(self.arm, [float(a) for a in angles],
                                               physicsClientId=self.client))

    def gravity_torques(self, angles: np.ndarray) -> np.ndarray:
        """Arm torques (7,) N m holding ``angles`` still against gravity (loop excluded)."""
        zeros = [0.0] * 7
        return np.array(pb.calculateInverseDynamics(self.arm, [float(a) for a in angles],
                                                    zeros, zeros, physicsClientId=self.client))

    def forward_kinematics(self, angles: np.ndarray) -> np.ndarray:
        """Last-link positions (T, 3) m world for arm angles (T, 7); leaves the arm as it
        was."""
        saved = self.arm_state()
        out = np.empty((len(angles), 3))
        for t, row in enumerate(np.asarray(angles, dtype=float)):
            self.set_arm(row)
            out[t] = self.ee_position()
        self.set_arm(*saved)
        return out

    # --- stepping ---------------------------------------------------------------------------
    def set_springs(self, kappa: np.ndarray, damping: float | None = None) -> None:
        """Loop joint torques τ = -κ q - c q̇ (κ_θ on θ joints, κ_ψ on ψ joints, N m/rad;
        ``damping`` c N m s/rad, default the loop's), computed at every internal step by
        PyBullet's explicit PD plugin (bit-identical to applying them from Python, without
        a Python call per internal step; the plugin runs once per ``stepSimulation`` call,
        so the world steps one internal step per call)."""
        kappa = np.asarray(kappa, dtype=float)
        if kappa.shape != (2,) or not (np.isfinite(kappa).all() and (kappa >= 0).all()):
            raise SceneError(f"kappa must be two finite stiffnesses >= 0 (N m/rad), got "
                             f"{kappa.tolist()}")
        damping = self.damping if damping is None else float(damping)
        n = self.n_loop_joints
        pb.setJointMotorControlArray(
            self.loop, self.loop_joints, pb.PD_CONTROL, targetPositions=[0.0] * n,
            targetVelocities=[0.0] * n,
            positionGains=np.tile(kappa, n // 2).tolist(), velocityGains=[damping] * n,
            forces=[1e9] * n, physicsClientId=self.client)

    def settle(self, kappa: np.ndarray, duration_s: float = 1.0,
               damping: float = 0.01) -> None:
        """Hold the arm still where it is and let the loop come to rest under gravity and its
        springs (``damping`` N m s/rad, stronger than the loop's own, to settle fast)."""
        if not (isinstance(duration_s, (int, float, np.floating)) and math.isfinite(duration_s)
                and duration_s >= 0):
            raise SceneError(f"settle: duration_s must be a finite number of seconds >= 0, "
                             f"got {duration_s!r}")
        cid = self.client
        angles, _ = self.arm_state()
        self.set_springs(kappa, damping)
        for _ in range(int(round(duration_s / self.settings.step_s))):
            pb.stepSimulation(physicsClientId=cid)
            self.set_arm(angles)  # a kinematic hold, after every internal step

    def drive(self, kappa: np.ndarray, feedforward: np.ndarray, reference: np.ndarray,
              gains: tuple[np.ndarray, np.ndarray], damping: float | None = None
              ) -> ArmLoopRun:
        """Drive the arm from the current state through ``len(feedforward)`` periods.

        A digital controller at the recording rate: in period k (sample k to k+1) the arm's
        joint torques are held at

            F_k = feedforward[k] - K_p (b_k - reference[k]) - K_d (ḃ_k - ḃ_ref,k),

        with b_k the arm's angles at sample k and the velocities as a controller that reads
        only angles has them, by backward differences: ḃ_k = (b_k - b_k-1) / dt_s and
        ḃ_ref,k = (reference[k] - reference[k-1]) / dt_s (both 0 at k = 0). A replay that
        follows its reference exactly therefore gets exactly the feed-forward torque. The loop's springs use ``kappa`` (κ_θ, κ_ψ)
        N m/rad and ``damping`` (default: the loop's) N m s/rad.

        Parameters
        ----------
        feedforward : array (T-1, 7)
            N m, held over each period (zero-order hold).
        reference : array (T, 7)
            rad, reference arm angles at the samples.
        gains : (K_p (7, 7) N m/rad, K_d (7, 7) N m s/rad)
        """
        cid, substeps = self.client, self.settings.substeps
        feedforward = np.asarray(feedforward, dtype=float)
        reference = np.asarray(reference, dtype=float)
        if reference.shape != (len(feedforward) + 1, 7) or feedforward.shape[1:] != (7,):
            raise SceneError(f"drive needs feedforward (T-1, 7) and reference (T, 7), got "
                             f"{feedforward.shape} and {reference.shape}")
        kp, kd = (np.asarray(g, dtype=float) for g in gains)
        self.set_springs(kappa, damping)
        arm, joints = self.arm, list(ARM_JOINTS)
        get_states, set_torques = pb.getJointStates, pb.setJointMotorControlArray
        step, torque_mode = pb.stepSimulation, pb.TORQUE_CONTROL
        n_periods = len(feedforward)
        angles = np.empty((n_periods + 1, 7))
        applied = np.empty((n_periods, 7))
        dt = self.settings.dt_s
        velocity_ref = np.vstack([np.zeros(7), np.diff(reference[:-1], axis=0) / dt])
        # One affine map per period: F = c_k - K_p b_k - K_d ḃ_k.
        offsets = feedforward + reference[:-1] @ kp.T + velocity_ref @ kd.T
        previous = None
        for k in range(n_periods):
            states = get_states(arm, joints, physicsClientId=cid)
            b = np.fromiter((s[0] for s in states), float, 7)
            bdot = np.zeros(7) if previous is None else (b - previous) / dt
            previous = angles[k] = b
            applied[k] = torque = offsets[k] - kp @ b - kd @ bdot
            forces = torque.tolist()
            for _ in range(substeps):  # PyBullet clears joint torques after every step
                set_torques(arm, joints, torque_mode, forces=forces, physicsClientId=cid)
                step(physicsClientId=cid)
            if not np.isfinite(b).all() or np.abs(b).max() > 10.0:
                raise SceneError(f"the arm-loop simulation diverged at period {k} "
                                 f"(kappa={np.round(kappa, 6).tolist()})")
        angles[-1] = self.arm_state()[0]
        return ArmLoopRun(angles=angles, torques=applied, closure_error_m=self.closure_error_m())

    def close(self) -> None:
        """Disconnect the PyBullet client."""
        if self.client >= 0:
            pb.disconnect(self.client)
            self.client = -1

    def __enter__(self) -> ArmLoopScene:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
