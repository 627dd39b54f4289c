"""One PyBullet world for one scene: parameters, stepping, contact events, corrections.

An :class:`Engine` owns one ``DIRECT`` client (PyBullet clients are not thread-safe: use
one engine per process, and worker processes for parallelism; see :mod:`.workers`). The
world is built once and reused: :meth:`Engine.reset` puts the body in a new state and
clears cached contacts, which gives results bit-identical to a freshly built world.

Time: one :meth:`Engine.step` advances the scene's recording period ``dt_s`` in
``substeps`` internal steps. Rollout index k is the state after k steps (index 0 = the
initial state), matching the recorded sample index.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from residualsim.sim.bullet import pb

from residualsim.errors import ParameterError
from residualsim.sim.scenes.body import body_urdf
from residualsim.sim.scenes.params import body_of
from residualsim.sim.contact import ContactModel, contact_frame, contact_model, is_touching
from residualsim.sim.scenes import EngineParams, EngineSettings, Scene, make_scene, parse_params
from residualsim.sim.skips import CHECK_EVERY, FreeFlight, RestDetector

__all__ = ["Engine", "ContactEvent", "Rollout", "ContactPoint"]

#: A step whose linear velocity change differs from gravity's by more than this (m/s) had
#: a contact impulse (free flight differs by ~1e-15).
VELOCITY_JUMP_MPS = 1e-7
_FAR_AWAY_M = 1.0e3


@dataclass(frozen=True)
class ContactPoint:
    """One contact point between the moving body and the static body, world frame.

    ``position_world`` (3,) m on the static body's surface; ``normal_world`` (3,) unit,
    from the static body into the moving body; ``distance_m`` signed (negative =
    penetration); ``normal_force_n`` and ``friction_force_n`` (2,) along
    ``friction_dirs_world`` (2, 3) are the forces ON THE MOVING BODY (N) during the last
    internal substep (PyBullet reports friction as the force on the other body; the sign
    is flipped here).
    """

    position_world: np.ndarray
    normal_world: np.ndarray
    distance_m: float
    normal_force_n: float
    friction_force_n: np.ndarray
    friction_dirs_world: np.ndarray


@dataclass(frozen=True)
class ContactEvent:
    """A run of consecutive steps with contact between the body and the static body.

    ``start_index``/``end_index`` are the first and last rollout indices in contact; the
    pre-contact state is at ``start_index - 1`` and the post-contact state at
    ``end_index``. ``point_world`` (3,) m is the normal-force-weighted mean contact point,
    ``normal_world`` (3,) the mean normal, ``frame`` the contact frame rows (n, t1, t2) or
    (n, t) (t1 along the pre-contact slip of that point). ``impulse_world`` (3,) N s is the
    engine's total contact impulse over the event (normal plus friction forces times dt,
    summed over every internal substep), obtained exactly from the momentum balance
    m (v_post - v_pre) - m g duration; ``impulse_contact`` is it in ``frame``.
    ``ongoing`` is True when the rollout ended in contact.
    """

    start_index: int
    end_index: int
    point_world: np.ndarray
    normal_world: np.ndarray
    frame: np.ndarray
    impulse_world: np.ndarray
    impulse_contact: np.ndarray
    duration_s: float
    ongoing: bool


@dataclass(frozen=True)
class Rollout:
    """A simulated trajectory: ``states`` (T, state_size) in the scene's layout, ``events``."""

    states: np.ndarray
    events: tuple[ContactEvent, ...]
    dt_s: float

    @property
    def times_s(self) -> np.ndarray:
        """(T,) seconds from the initial state."""
        return np.arange(len(self.states)) * self.dt_s


class Engine:
    """PyBullet world for one scene.

    Parameters
    ----------
    scene : str or Scene
        Scene name (``"cube"``, ``"planar-ellipse"``, ``"planar-dice"``) or a Scene object.
    params : EngineParams, mapping, str or None
        Effective contact parameters (see :func:`residualsim.sim.scenes.parse_params`).
    settings : EngineSettings, optional
        Solver settings; default the scene's own.
    """

    def __init__(self, scene: str | Scene = "cube", params=None,
                 settings: EngineSettings | None = None) -> None:
        self.scene = self._nominal_scene = make_scene(scene).unbuilt(settings)
        self._params = parse_params(params)
        self.scene.check_params(self._params)  # before connecting: nothing to leak
        self.client = pb.connect(pb.DIRECT)
        self._body = None
        self._build()

    # --- world ----------------------------------------------------------------------------
    def _build(self) -> None:
        self._use_body(body_of(self._params))
        cid, settings = self.client, self.scene.settings
        pb.resetSimulation(physicsClientId=cid)
        pb.setGravity(*settings.gravity_mps2, physicsClientId=cid)
        # fixedTimeStep is the whole recording period; each stepSimulation runs
        # numSubSteps internal steps of fixedTimeStep / numSubSteps.
        options = dict(
            fixedTimeStep=settings.dt_s,
            numSubSteps=settings.substeps,
            numSolverIterations=settings.solver_iterations,
            restitutionVelocityThreshold=settings.restitution_velocity_threshold_mps,
            deterministicOverlappingPairs=1,
        )
        if settings.erp is not None:
            options.update(erp=settings.erp, contactERP=settings.erp, frictionERP=settings.erp)
        options.update(self.scene.engine_options(self._params))
        pb.setPhysicsEngineParameter(physicsClientId=cid, **options)
        self.scene.build(cid)
        static = self.scene.static_body
        self._static_pose = pb.getBasePositionAndOrientation(static, physicsClientId=cid)
        self._table_m = 0.0  # where the static body is now, m along the up axis
        self.scene.apply_params(self._params)
        self._soft = self._params.soft_contact
        self._flight: FreeFlight | None | bool = False  # built on first use
        self._place_table()

    def _place_table(self) -> None:
        """Move the static body to ``table_height_m`` (m along the scene's up axis) from the
        pose the scene built it at; unset or 0 puts it back there exactly. The closed-form
        flight reads the table top, so it is rebuilt on next use after a move."""
        height = self._params.table_offset_m
        if height == self._table_m:
            return
        position, orientation = self._static_pose
        moved = (np.asarray(position, dtype=np.float64) + height * self.scene.up_axis
                 if height else position)
        pb.resetBasePositionAndOrientation(self.scene.static_body, list(moved), orientation,
                                           physicsClientId=self.client)
        self._table_m = height
        self._flight = False

    def _use_body(self, body) -> None:
        """Make ``self.scene`` the nominal scene with ``body`` (None: the URDF's own); a
        body needs a scene built from a URDF (:mod:`residualsim.sim.scenes.body`)."""
        if body == self._body:
            return
        nominal = self._nominal_scene
        if body is None:
            self.scene = nominal
        else:
            spec = getattr(nominal, "spec", None)
            if spec is None or nominal.planar:
                raise ParameterError(f"scene {nominal.name!r} takes no body parameters: they "
                                     "need a free object from a scene file or URDF")
            path = body_urdf(spec.urdf, body)
            self.scene = type(nominal)(dataclasses.replace(spec, urdf=path),
                                       settings=nominal.settings)
        self._body = body

    @property
    def params(self) -> EngineParams:
        """The effective contact parameters in force."""
        return self._params

    @property
    def dt_s(self) -> float:
        """Recording period: the time one :meth:`step` advances, seconds."""
        return self.scene.settings.dt_s

    def set_params(self, params) -> None:
        """Set contact parameters (EngineParams, mapping, ``k=v`` string or JSON file); an
        :class:`~residualsim.sim.scenes.ObjectParams` with a body reloads the object with it
        (a plain EngineParams: the URDF's own body)."""
        params = parse_params(params, base=self._params)
        if body_of(params) is not None and (getattr(self._nominal_scene, "spec", None) is None
                                            or self._nominal_scene.planar):
            raise ParameterError(f"scene {self._nominal_scene.name!r} takes no body "
                                 "parameters: they need a free object from a scene file or "
                                 "URDF")
        self.scene.check_params(params)
        solver_changed = params.solver_values() != self._params.solver_values()
        self._params = params
        if body_of(params) != self._body:
            self._build()  # a new body: reload the object from its modified URDF
        elif (self._soft and not params.soft_contact) or solver_changed:
            # Bullet cannot switch a body back from soft to rigid contact, and unsetting a
            # solver parameter means PyBullet's own value again: rebuild.
            self._build()
        else:
            self.scene.apply_params(params)
            self._soft = params.soft_contact
            self._place_table()

    def close(self) -> None:
        """Disconnect the PyBullet client."""
        if self.client >= 0:
            pb.disconnect(physicsClientId=self.client)
            self.client = -1

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: pybullet may be gone already
            pass

    # --- state and stepping ---------------------------------------------------------------
    def reset(self, state: np.ndarray) -> None:
        """Put the body in ``state`` (scene layout) and forget cached contacts."""
        far = np.zeros(self.scene.state_size)
        if self.scene.planar:
            far[1] = _FAR_AWAY_M
        else:
            far[2], far[3] = _FAR_AWAY_M, 1.0
        self.scene.set_state(far)
        pb.performCollisionDetection(physicsClientId=self.client)
        self.scene.set_state(state)

    def state(self) -> np.ndarray:
        """The current state (scene layout)."""
        return self.scene.get_state()

    def step(self, n_steps: int = 1) -> None:
        """Advance ``n_steps`` recording periods."""
        cid = self.client
        for _ in range(n_steps):
            pb.stepSimulation(physicsClientId=cid)

    def free_flight(self, skips: bool = True) -> FreeFlight | None:
        """The closed-form free flight of this engine's body, or None where it is not exact
        or ``skips`` is False (see :mod:`residualsim.sim.skips`)."""
        if not skips:
            return None
        if self._flight is False:
            self._flight = FreeFlight(self) if FreeFlight.supports(self.scene) else None
        return self._flight

    def rest_detector(self, skips: bool = True) -> RestDetector | None:
        """A fresh rest detector for one rollout, or None where rest is not read off the
        base pose or ``skips`` is False."""
        return RestDetector(self.dt_s) if skips and RestDetector.supports(self.scene) else None

    def fly(self, flight: FreeFlight, raws: list, remaining: int) -> int:
        """Append closed-form samples to ``raws`` (records of :meth:`Scene.read_raw`) while
        the body is clear of the table, at most ``remaining``; leave the engine in the last
        one's state. Returns how many were added."""
        last = raws[-1]
        flown = flight.fly(last[0], last[1], remaining)
        if flown:
            extra = tuple(last[2:])
            raws.extend(record + extra for record in flown)
            self.reset(self.scene.raw_to_states(raws[-1:])[0])
        return len(flown)


    def skip_ahead(self, flight: FreeFlight | None, rest: RestDetector | None, raws: list,
                   remaining: int, poses_only: bool = False) -> tuple[int, bool]:
        """At a check sample of a rollout loop (every ``CHECK_EVERY``): extend ``raws``
        (records of :meth:`Scene.read_raw`, or of :meth:`Scene.read_pose_raw` with
        ``poses_only``) by a closed-form flight, or fill them to the end when the body is
        at rest. Returns (samples added, at rest)."""
        def pose(record):
            return record if poses_only else record[0]

        if flight is not None and flight.clear(pose(raws[-1])):
            if poses_only:
                full = [self.scene.read_raw()]
                added = self.fly(flight, full, remaining)
                raws.extend(record[0] for record in full[1:])
            else:
                added = self.fly(flight, raws, remaining)
            if added:
                return added, False
        if rest is not None and len(raws) > CHECK_EVERY and rest.at_rest(
                pose(raws[-1]), pose(raws[-2]), pose(raws[-1 - CHECK_EVERY])):
            raws.extend([raws[-1]] * remaining)
            return remaining, True
        return 0, False

    def rollout(self, initial_state: np.ndarray, n_steps: int,
                detect_contacts: bool = True, skips: bool = True) -> Rollout:
        """Reset to ``initial_state`` and simulate ``n_steps`` periods.

        Returns the states (n_steps + 1, state_size), index 0 the initial state, and the
        contact events found on the way. ``skips``: free flight in closed form and rest
        filled in (:mod:`residualsim.sim.skips`; exact to the tolerances stated there).
        """
        scene, cid = self.scene, self.client
        flight = self.free_flight(skips)  # before the reset: its first build moves the body
        self.reset(initial_state)
        read, step, get_contacts = scene.read_raw, pb.stepSimulation, pb.getContactPoints
        body, static, link = scene.body, scene.static_body, scene.link
        rest = self.rest_detector(skips)
        raws = [read()]
        contacts: list[tuple[int, tuple]] = []
        index, points = 0, ()
        while index < n_steps:
            if index % CHECK_EVERY == 0:
                added, resting = self.skip_ahead(flight, rest, raws, n_steps - index)
                if resting and points:
                    contacts.extend((k, points) for k in range(index + 1, n_steps + 1))
                if resting:
                    break
                if added:
                    index += added
                    continue
            step(physicsClientId=cid)
            raws.append(read())
            index += 1
            if detect_contacts:
                points = get_contacts(body, static, link, -1, physicsClientId=cid)
                if points:
                    contacts.append((index, points))
        states = scene.raw_to_states(raws)
        events = self._events(states, contacts) if detect_contacts else ()
        return Rollout(states=states, events=events, dt_s=self.dt_s)

    def rollout_poses(self, initial_state: np.ndarray, n_steps: int, skips: bool = True
                      ) -> tuple[np.ndarray, np.ndarray]:
        """Reset to ``initial_state`` and simulate ``n_steps`` periods, reading poses only.

        The lean loop calibration runs (about 25 % cheaper than :meth:`rollout`). Returns
        positions (n_steps + 1, 3) m world and quaternions (n_steps + 1, 4) w-x-y-z body to
        world, index 0 the initial pose. ``skips`` as in :meth:`rollout`.
        """
        scene, cid = self.scene, self.client
        flight = self.free_flight(skips)
        self.reset(initial_state)
        read, step = scene.read_pose_raw, pb.stepSimulation
        rest = self.rest_detector(skips)
        raws = [read()]
        index = 0
        while index < n_steps:
            if index % CHECK_EVERY == 0:
                added, resting = self.skip_ahead(flight, rest, raws, n_steps - index,
                                                 poses_only=True)
                if resting:
                    break
                if added:
                    index += added
                    continue
            step(physicsClientId=cid)
            raws.append(read())
            index += 1
        return scene.raw_to_poses(raws)

    # --- contacts -------------------------------------------------------------------------
    def contact_points(self) -> list[ContactPoint]:
        """Contact points (distance <= 0.1 mm or a force acting) after the last step."""
        scene = self.scene
        raw = pb.getContactPoints(scene.body, scene.static_body, scene.link, -1,
                                  physicsClientId=self.client)
        return [_contact_point(p) for p in raw if is_touching(p)]

    def in_contact(self) -> bool:
        """True when the body touches the static body."""
        return bool(self.contact_points())

    def penetration_depth(self) -> float:
        """Largest penetration of the body into the static body now, metres (>= 0)."""
        scene = self.scene
        points = pb.getClosestPoints(scene.body, scene.static_body, 0.01, scene.link, -1,
                                     physicsClientId=self.client)
        if not points:
            return 0.0
        return max(0.0, -min(p[8] for p in points))

    def total_energy(self) -> float:
        """Kinetic plus gravitational energy of the body now, joules (zero at height 0)."""
        return float(self.scene.energy(self.state()))

    def _events(self, states: np.ndarray, contacts: list[tuple[int, tuple]]
                ) -> tuple[ContactEvent, ...]:
        """Group contact steps into events.

        A step is in contact when PyBullet reports a touching point after it, or when the
        centre-of-mass velocity jumped away from free flight during it (a bounce can begin
        and end inside one step's substeps, leaving no point behind; bodies of several links
        use the reported points only, their centre-of-mass velocity costing a kinematics
        query per step). Geometry then comes from the
        nearest manifold points reported just before or after that step.
        """
        steps: set[int] = set()
        if not getattr(self.scene, "n_joints", 0):  # too costly per step for linked bodies
            velocity = self.scene.com_velocity(states)  # the centre of mass is ballistic
            gravity_step = np.asarray(self.scene.settings.gravity_mps2) * self.dt_s
            jump = np.linalg.norm(np.diff(velocity, axis=0) - gravity_step, axis=1)
            steps.update((np.flatnonzero(jump > VELOCITY_JUMP_MPS) + 1).tolist())
        reported = dict(contacts)
        touching = {k: [p for p in pts if is_touching(p)] for k, pts in contacts}
        steps.update(k for k, pts in touching.items() if pts)
        runs: list[list[int]] = []
        for index in sorted(steps):
            if runs and runs[-1][-1] == index - 1:
                runs[-1].append(index)
            else:
                runs.append([index])
        return tuple(self._event(states, run, touching, reported) for run in runs)

    def _event(self, states: np.ndarray, run: list[int], touching: dict, reported: dict
               ) -> ContactEvent:
        scene = self.scene
        start, end = run[0], run[-1]
        points = [p for k in run for p in touching.get(k, [])]
        if not points:  # contact within the substeps: the nearest reported manifold points
            nearby = reported.get(start) or reported.get(start - 1) or reported.get(end + 1)
            nearby = list(nearby or [])
            if nearby:
                closest = min(p[8] for p in nearby)
                points = [p for p in nearby if p[8] <= closest + 1e-3]
        centre, _, velocity, omega = scene.rigid_motion(states[[start - 1, end]])
        duration = (end - start + 1) * self.dt_s
        gravity = np.asarray(scene.settings.gravity_mps2)
        com_velocity = scene.com_velocity(states[[start - 1, end]])
        impulse = scene.mass_kg * (com_velocity[1] - com_velocity[0] - gravity * duration)
        if points:
            table = np.array([(*p[6], *p[7], p[9]) for p in points])
            weights = np.maximum(table[:, 6], 0.0)
            if weights.sum() <= 0:
                weights = np.ones(len(points))
            point = weights @ table[:, 0:3] / weights.sum()
            normal = weights @ table[:, 3:6]
            normal /= np.linalg.norm(normal)
        else:  # no geometry reported at all: below the centre, along -gravity
            normal = -gravity / np.linalg.norm(gravity)
            point = centre[0] - normal * (centre[0] @ normal)
        (wx, wy, wz), (rx, ry, rz) = omega[0], point - centre[0]
        point_velocity = velocity[0] + np.array([wy * rz - wz * ry, wz * rx - wx * rz,
                                                 wx * ry - wy * rx])
        frame = contact_frame(normal, point_velocity, planar=scene.planar)
        return ContactEvent(start_index=start, end_index=end, point_world=point,
                            normal_world=normal, frame=frame, impulse_world=impulse,
                            impulse_contact=frame @ impulse, duration_s=duration,
                            ongoing=end == len(states) - 1)

    # --- model queries and corrections -------------------------------------------------------
    def mass_matrix(self) -> np.ndarray:
        """Generalised mass matrix M (nv, nv) now (see the scene for the coordinates)."""
        return self.scene.mass_matrix()

    def point_jacobian(self, point_world: np.ndarray, link: int | None = None) -> np.ndarray:
        """J_p (3, nv): world velocity of the body point now at ``point_world`` (m), on
        ``link`` (PyBullet index; only bodies of several links need it)."""
        return self.scene.point_jacobian(np.asarray(point_world, dtype=np.float64), link)

    def contact_model(self, point_world: np.ndarray, normal_world: np.ndarray) -> ContactModel:
        """Contact quantities (J, M_c, v_c, features) at a point with a given normal, now."""
        point = np.asarray(point_world, dtype=np.float64)
        return contact_model(self.mass_matrix(), self.point_jacobian(point),
                             self.scene.generalized_velocity(), point, normal_world,
                             planar=self.scene.planar)

    def operational_space_inertia(self, point_world: np.ndarray,
                                  normal_world: np.ndarray) -> np.ndarray:
        """Effective (operational-space) inertia M_c at a point, in its contact frame, kg."""
        return self.contact_model(point_world, normal_world).effective_inertia

    def apply_impulse(self, point_world: np.ndarray, impulse_world: np.ndarray) -> np.ndarray:
        """Apply an impulse (3,) N s, world frame, at a body point as q_dot += M^-1 J_p^T p.

        Returns the velocity change dq_dot (nv,).
        """
        jac = self.point_jacobian(point_world)
        delta = np.linalg.solve(self.mass_matrix(), jac.T @ np.asarray(impulse_world, float))
        self.scene.set_generalized_velocity(self.scene.generalized_velocity() + delta)
        return delta

    def apply_contact_impulse(self, model: ContactModel, impulse_contact: np.ndarray
                              ) -> np.ndarray:
        """Apply an impulse given in a contact frame (k,) N s at ``model.point_world``."""
        return self.apply_impulse(model.point_world, model.impulse_to_world(impulse_contact))


def _contact_point(point: tuple) -> ContactPoint:
    return ContactPoint(
        position_world=np.array(point[6]), normal_world=np.array(point[7]),
        distance_m=float(point[8]), normal_force_n=float(point[9]),
        friction_force_n=-np.array([point[10], point[12]]),
        friction_dirs_world=np.array([point[11], point[13]]),
    )


