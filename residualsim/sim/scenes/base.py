"""The :class:`Scene` interface shared by every scene, and engine settings.

A scene owns the bodies of one simulated set-up inside one PyBullet client: it builds them
from URDF in ``assets/``, knows its state layout and units, sets and gets state, applies the
engine parameters, and answers the model queries contact math needs (mass matrix M and the
Jacobian J of a body point, both in generalised velocity coordinates).
"""

from __future__ import annotations

import copy as _copy

from abc import ABC, abstractmethod
from dataclasses import dataclass
import sys
from pathlib import Path

import numpy as np

from residualsim.errors import ParameterError, SceneError
from residualsim.sim.bullet import captured_c_output, pb
from residualsim.sim.scenes.params import EngineParams

__all__ = ["ASSETS_DIR", "EngineSettings", "Scene", "load_urdf", "cache_dir", "MAX_SUBSTEPS",
           "check_substeps"]



def _assets_dir() -> Path:
    """``$RESIDUALSIM_ASSETS``, else the checkout's ``assets/``, else the installed copy."""
    import os
    import sys

    candidates = [os.environ.get("RESIDUALSIM_ASSETS", ""),
                  str(Path(__file__).resolve().parents[3] / "assets"),
                  str(Path(sys.prefix) / "share" / "residualsim" / "assets")]
    for candidate in filter(None, candidates):
        if (Path(candidate) / "cube.urdf").is_file():
            return Path(candidate)
    return Path(candidates[1])


#: Folder of the URDF files and meshes.
ASSETS_DIR = _assets_dir()


def cache_dir() -> Path:
    """Where generated URDF files go: ``$RESIDUALSIM_CACHE``, else
    ``$XDG_CACHE_HOME/residualsim``, else ``~/.cache/residualsim`` (never the installed
    package, which may be read-only)."""
    import os

    root = os.environ.get("RESIDUALSIM_CACHE") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "residualsim"
    return Path(root)


#: Most internal steps per recorded sample. Bullet costs 6 to 9 µs per internal step of one
#: object, so 1000 substeps at 150 Hz is already ~1 s of computing per simulated second, for
#: each recording and each calibration evaluation; more is refused before anything runs.
MAX_SUBSTEPS = 1000
#: Bullet's cost of one internal step of one object, s (the estimate in refusals).
SUBSTEP_COST_S = 8e-6


def check_substeps(substeps: object, where: str = "") -> int:
    """``substeps`` as an int in [1, MAX_SUBSTEPS], else SceneError (``where`` prefixes the
    message) with the time the request would cost."""
    prefix = f"{where}: " if where else ""
    if isinstance(substeps, bool) or not isinstance(substeps, (int, np.integer, float)) \
            or int(substeps) != substeps or substeps < 1:
        raise SceneError(f"{prefix}substeps must be an integer >= 1, got {substeps!r}")
    if substeps > MAX_SUBSTEPS:
        hours = substeps * 150 * SUBSTEP_COST_S / 3600
        raise SceneError(f"{prefix}substeps {int(substeps)} is more than {MAX_SUBSTEPS}: at 150 "
                         f"Hz it would take about {hours:.3g} h of computing per simulated "
                         f"second ({SUBSTEP_COST_S * 1e6:.0f} µs per internal step)")
    return int(substeps)


@dataclass(frozen=True)
class EngineSettings:
    """Solver settings of a scene.

    ``dt_s`` is the recording period (one :meth:`Engine.step` advances it); each step runs
    ``substeps`` internal steps of ``dt_s / substeps``. ``restitution_velocity_threshold_mps``
    is Bullet's speed below which no bounce is applied (0: restitution applies at any speed).
    ``erp`` sets ERP, contact ERP and friction ERP together (None keeps PyBullet's defaults).
    """

    dt_s: float
    substeps: int = 10
    gravity_mps2: tuple[float, float, float] = (0.0, 0.0, -9.81)
    restitution_velocity_threshold_mps: float = 0.0
    erp: float | None = None
    solver_iterations: int = 50

    def __post_init__(self) -> None:
        if not self.dt_s > 0:
            raise SceneError(f"dt_s must be positive, got {self.dt_s}")
        check_substeps(self.substeps)


def load_urdf(client: int, filename: str, **kwargs: object) -> int:
    """Load ``assets/<filename>`` (or an absolute path) into ``client``; SceneError if it fails,
    with PyBullet's own reason (its C output, which otherwise goes to stdout); its warnings
    are passed on to stderr."""
    path = Path(filename)
    if not path.is_absolute():
        path = ASSETS_DIR / path
    if not path.is_file():
        raise SceneError(f"{path}: URDF file not found")
    with captured_c_output() as output:
        try:
            body = pb.loadURDF(str(path), physicsClientId=client, **kwargs)
        except pb.error as exc:
            body = None
            failure = str(exc)
    if body is None:
        cause = "; ".join(list(dict.fromkeys(output.lines()))[:3]) or failure
        raise SceneError(f"{path}: PyBullet could not load this URDF: {cause}")
    if output.text:  # PyBullet's warnings belong on stderr, never with a command's result
        sys.stderr.write(output.text)
    return body


def quat_wxyz_to_matrix(quat_wxyz: np.ndarray) -> np.ndarray:
    """Rotation matrices (..., 3, 3), body to world, from quaternions (..., 4) in w-x-y-z."""
    q = np.asarray(quat_wxyz, dtype=np.float64)
    if q.shape == (4,):  # one quaternion, as at every contact event: plain floats are ~10x faster
        return _one_rotation(*q.tolist())
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    w, x, y, z = np.moveaxis(q, -1, 0)
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
            np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
            np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
        ],
        -2,
    )


def _one_rotation(w: float, x: float, y: float, z: float) -> np.ndarray:
    """:func:`quat_wxyz_to_matrix` of one quaternion, in Python floats."""
    scale = 2.0 / (w * w + x * x + y * y + z * z)
    xx, yy, zz = scale * x * x, scale * y * y, scale * z * z
    xy, xz, yz = scale * x * y, scale * x * z, scale * y * z
    wx, wy, wz = scale * w * x, scale * w * y, scale * w * z
    return np.array([[1.0 - yy - zz, xy - wz, xz + wy],
                     [xy + wz, 1.0 - xx - zz, yz - wx],
                     [xz - wy, yz + wx, 1.0 - xx - yy]])


class Scene(ABC):
    """A single rigid body in contact with a static body (table or floor).

    Subclasses set the class attributes and implement the state and model hooks. After
    :meth:`build`, ``client``, ``body`` (the moving body's id), ``link`` (its link index,
    -1 for a free base) and ``static_body`` are set.
    """

    #: Registry name, e.g. ``"cube"``.
    name: str = ""
    #: True for bodies moving in the world x-y plane.
    planar: bool = False
    #: Names of the state entries, with units, in order.
    state_names: tuple[str, ...] = ()
    #: Mass in kg and body-frame inertia about the centre of mass in kg m^2, shape (3, 3).
    mass_kg: float = 0.0
    inertia_body: np.ndarray = np.zeros((3, 3))
    #: Default solver settings.
    settings: EngineSettings = EngineSettings(dt_s=0.01)
    #: Solver parameters (:data:`~residualsim.sim.scenes.params.SOLVER_PARAMS`) this scene's
    #: engine ignores, with the reason: :meth:`check_params` refuses them. PyBullet loads a
    #: URDF as a multibody, whose solver has no split impulse; ``erp`` acts on joints only.
    ignored_params: dict[str, str] = {
        "split_impulse": "PyBullet's multibody solver has no split impulse",
        "split_impulse_penetration_threshold": "PyBullet's multibody solver has no split "
                                               "impulse",
        "erp": "a single rigid body has no joint constraints",
    }

    def __init__(self, settings: EngineSettings | None = None) -> None:
        if settings is not None:
            self.settings = settings
        self.client: int = -1
        self.body: int = -1
        self.link: int = -1
        self.static_body: int = -1

    # --- construction -------------------------------------------------------------------
    def unbuilt(self, settings: EngineSettings | None = None) -> "Scene":
        """A copy of this scene before :meth:`build`, sharing its description (URDF, mass,
        inertia, joints: nothing is read again), with ``settings`` when given. Every
        :class:`~residualsim.sim.engine.Engine` builds its own copy, so one resolved scene
        serves any number of engines (and pickles to workers as a description)."""
        copy = _copy.copy(self)
        for name in ("_read", "_read_pose"):  # build's readers of its own world
            copy.__dict__.pop(name, None)
        if "_kinematics_cache" in copy.__dict__:
            copy._kinematics_cache = None
        Scene.__init__(copy, settings if settings is not None else self.settings)
        return copy

    @abstractmethod
    def build(self, client: int) -> None:
        """Load the bodies into ``client`` and zero PyBullet's default damping and motors."""

    def contact_links(self) -> list[int]:
        """PyBullet link indices of the moving body that touch the world (default: ``link``)."""
        return [self.link]

    def check_params(self, params: EngineParams) -> None:
        """ParameterError naming a set solver parameter (or table height) this scene's
        engine ignores."""
        names = list(params.solver_values())
        if params.table_height_m is not None:
            names.append("table_height_m")
        for name in names:
            if name in self.ignored_params:
                raise ParameterError(f"{name} has no effect in scene {self.name!r}: "
                                     f"{self.ignored_params[name]}")

    def engine_options(self, params: EngineParams) -> dict[str, float]:
        """``setPhysicsEngineParameter`` options of the set solver parameters (they override
        :attr:`settings`)."""
        options: dict[str, float] = {}
        if params.contact_erp is not None:
            options["contactERP"] = params.contact_erp
        if params.erp is not None:
            options["erp"] = params.erp
        if params.solver_iterations is not None:
            options["numSolverIterations"] = int(round(params.solver_iterations))
        if params.split_impulse is not None:
            options["useSplitImpulse"] = int(params.flag("split_impulse"))
        if params.split_impulse_penetration_threshold is not None:
            options["splitImpulsePenetrationThreshold"] = \
                params.split_impulse_penetration_threshold
        if params.restitution_velocity_threshold is not None:
            options["restitutionVelocityThreshold"] = params.restitution_velocity_threshold
        return options

    def apply_params(self, params: EngineParams) -> None:
        """Give the bodies the effective contact parameters (see :mod:`.params`) and the set
        per-body solver parameters (collision margin, contact processing threshold, friction
        anchor); the engine-wide ones are :meth:`engine_options`."""
        cid = self.client
        per_body: dict[str, float] = {}
        if params.collision_margin is not None:
            per_body["collisionMargin"] = params.collision_margin
        if params.contact_processing_threshold is not None:
            per_body["contactProcessingThreshold"] = params.contact_processing_threshold
        if params.friction_anchor is not None:
            per_body["frictionAnchor"] = int(params.flag("friction_anchor"))
        for link in self.contact_links() if per_body else ():
            pb.changeDynamics(self.body, link, physicsClientId=cid, **per_body)
        pb.changeDynamics(self.static_body, -1, lateralFriction=1.0, restitution=1.0,
                          spinningFriction=0.0, rollingFriction=0.0, physicsClientId=cid)
        for link in self.contact_links():
            pb.changeDynamics(self.body, link, lateralFriction=params.lateral_friction,
                              restitution=params.restitution,
                              spinningFriction=params.spinning_friction,
                              rollingFriction=params.rolling_friction, physicsClientId=cid)
            if params.soft_contact:
                pb.changeDynamics(self.body, link, contactStiffness=params.contact_stiffness,
                                  contactDamping=params.contact_damping, physicsClientId=cid)
        if params.soft_contact:
            # Series stiffness with 1e12 N/m and zero added damping: the body's values rule.
            pb.changeDynamics(self.static_body, -1, contactStiffness=1e12, contactDamping=0.0,
                              physicsClientId=cid)

    @property
    def up_axis(self) -> np.ndarray:
        """Unit vector (3,) of the world's up axis (against gravity): z in 3-D scenes, y in
        the planar arena; ``table_height_m`` moves the static body along it."""
        gravity = np.asarray(self.settings.gravity_mps2, dtype=np.float64)
        return -gravity / np.linalg.norm(gravity)

    # --- state ----------------------------------------------------------------------------
    @property
    def state_size(self) -> int:
        """Length of the flat state vector."""
        return len(self.state_names)

    @abstractmethod
    def set_state(self, state: np.ndarray) -> None:
        """Set position and velocity from a flat state (layout: :attr:`state_names`)."""

    @abstractmethod
    def get_state(self) -> np.ndarray:
        """The current flat state (layout: :attr:`state_names`)."""

    @abstractmethod
    def read_raw(self) -> object:
        """The current state as PyBullet returns it, as cheaply as possible (hot loop)."""

    @abstractmethod
    def raw_to_states(self, raws: list) -> np.ndarray:
        """Stack :meth:`read_raw` results into states of shape (T, state_size)."""

    def read_pose_raw(self) -> object:
        """The current pose as PyBullet returns it (hot loop); default: :meth:`read_raw`."""
        return self.read_raw()

    def raw_to_poses(self, raws: list) -> tuple[np.ndarray, np.ndarray]:
        """Positions (T, 3) m world and quaternions (T, 4) w-x-y-z from :meth:`read_pose_raw`
        results."""
        positions, quat, _, _ = self.rigid_motion(self.raw_to_states(raws))
        return positions, quat

    def check_recording(self, trajectory) -> None:
        """DataError naming the recording when it cannot be this scene's: a planar recording
        for a 3D scene or the reverse, or joints a single body does not have."""
        from residualsim.errors import DataError

        where = trajectory.source or trajectory.traj_id
        if trajectory.planar != self.planar:
            fits = "a planar scene (e.g. planar-ellipse, or a scene file with kind = " \
                   "\"planar\")" if trajectory.planar else "a 3D scene (e.g. cube, or a " \
                   "scene file with kind = \"free\")"
            raise DataError(f"{where}: a {'planar' if trajectory.planar else '3D'} recording, "
                            f"but scene {self.name!r} is {'planar' if self.planar else '3D'}; "
                            f"it needs {fits}")
        joints = tuple(getattr(trajectory, "joint_names", ()))
        if joints:
            raise DataError(f"{where}: joints {list(joints)}, but scene {self.name!r} is a "
                            "single rigid body; give the object's scene file")

    @abstractmethod
    def state_from_trajectory(self, trajectory, index: int = 0) -> np.ndarray:
        """The flat state of a :class:`~residualsim.data.Trajectory` at one sample."""

    @abstractmethod
    def rigid_motion(self, states: np.ndarray) -> tuple[np.ndarray, ...]:
        """3D motion of the body for states (T, state_size).

        Returns positions (T, 3) m world, quaternions (T, 4) w-x-y-z body to world, linear
        velocity (T, 3) m/s world and angular velocity (T, 3) rad/s world.
        """

    # --- model queries (generalised coordinates) -------------------------------------------
    @abstractmethod
    def generalized_velocity(self) -> np.ndarray:
        """Current generalised velocity q_dot (nv,)."""

    @abstractmethod
    def generalized_velocity_of(self, state: np.ndarray) -> np.ndarray:
        """q_dot (nv,) held in a state (scene layout), without touching the world."""

    @abstractmethod
    def set_generalized_velocity(self, qdot: np.ndarray) -> None:
        """Set the generalised velocity q_dot (nv,), keeping the configuration."""

    @abstractmethod
    def mass_matrix(self) -> np.ndarray:
        """Generalised mass matrix M (nv, nv) at the current configuration."""

    @abstractmethod
    def point_jacobian(self, point_world: np.ndarray, link: int | None = None) -> np.ndarray:
        """J (3, nv): world-frame velocity of the body point now at ``point_world`` = J q_dot.

        ``link``: the PyBullet link index holding the point, for bodies of several links
        (a contact tuple's ``linkIndexA``); single bodies ignore it."""

    # --- derived ----------------------------------------------------------------------------
    def com_velocity(self, states: np.ndarray) -> np.ndarray:
        """Velocity (T, 3) m/s world of the body's centre of mass, for states (T, n)."""
        return self.rigid_motion(np.atleast_2d(states))[2]

    def energy(self, states: np.ndarray) -> np.ndarray:
        """Total mechanical energy in joules (kinetic + gravitational, zero at height 0).

        ``states`` is (state_size,) or (T, state_size); returns a float or (T,).
        """
        states = np.asarray(states, dtype=np.float64)
        single = states.ndim == 1
        pos, quat, vel, omega = self.rigid_motion(np.atleast_2d(states))
        if single:  # the contact guard's case, once per event: skip the batched einsums
            omega_body = omega[0] @ quat_wxyz_to_matrix(quat[0])
            velocity = vel[0]
            return float(0.5 * self.mass_kg * velocity @ velocity
                         + 0.5 * omega_body @ self.inertia_body @ omega_body
                         - self.mass_kg * pos[0] @ np.asarray(self.settings.gravity_mps2))
        rot = quat_wxyz_to_matrix(quat)
        omega_body = np.einsum("tji,tj->ti", rot, omega)
        kinetic = 0.5 * self.mass_kg * np.einsum("ti,ti->t", vel, vel)
        kinetic += 0.5 * np.einsum("ti,ij,tj->t", omega_body, self.inertia_body, omega_body)
        potential = -self.mass_kg * pos @ np.asarray(self.settings.gravity_mps2)
        return kinetic + potential

    @property
    def radius_of_gyration_m(self) -> float:
        """sqrt(I / m) in metres: the length that makes an angle weigh like a distance
        (I about the plane normal for planar scenes, the mean principal moment in 3D)."""
        inertia = np.asarray(self.inertia_body)
        moment = inertia[2, 2] if self.planar else np.trace(inertia) / 3.0
        return float(np.sqrt(moment / self.mass_kg))

    def describe_state(self) -> str:
        """One line naming the state entries and their units."""
        return f"{self.name}: state = ({', '.join(self.state_names)})"
