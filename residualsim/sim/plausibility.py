"""Is a recording in the units and conventions residualsim expects? Checked on its free flight.

Two checks per recording, where the recordings meet the scene (the object's URDF known),
both refused by default and allowed by ``--allow-implausible``
(:func:`residualsim.sim.recordings.allow_implausible`):

1. **Gravity** (:func:`check_gravity`). The whole object's centre of mass (the mass-weighted
   link centres at each recorded pose, so an articulated object's base swinging about it
   does not matter) is fitted with a quadratic in time over the free flight before the first
   contact: the leading samples the object's collision shapes stay clear of the table
   (:func:`~residualsim.sim.recordings.free_flight_samples`, at most 30), shortened to the
   longest leading window a parabola fits (residual rms at most 5 % of the parabola's sag,
   so a bounce inside the window of a recording in the wrong units is cut off); at least
   :data:`MIN_GRAVITY_SAMPLES` samples, or the check is skipped (also when no window is a
   parabola: noise larger than the fall). A recording in contact at its first sample (by
   the shapes: another up axis?) is fitted over its first 30 samples. The fitted acceleration must
   be :data:`G_LOW_MPS2` to :data:`G_HIGH_MPS2` (9.81/3 to 9.81·3 m/s²) and within
   :data:`MAX_TILT_DEG` of straight down (-z in 3D, -y planar). Otherwise the likely cause
   is named: about 1000× g: positions in millimetres; 100×: centimetres; 1e-6×: times in
   milliseconds; gravity along another axis: an export with another up axis (y-up).
2. **Quaternion order** (:func:`check_quaternion_order`, CSV recordings of 3D scenes): the
   pose at rest (the last ``REST_SAMPLES`` positions within 1 mm) should touch the table,
   and no pose should sink far into it. When the columns' order puts the object at rest
   more than :data:`ORDER_GAP_M` off the table while the other order (x-y-z-w values under
   a w-x-y-z header, or back) touches it and sinks nowhere deeper than
   ``WRONG_OBJECT_DEPTH_M``; or, for a recording not at rest, when the poses sink deeper
   than that and the other order's do not: the recording is refused naming the order;
   except where the object at rest lies flat (:func:`rests_flat`: each of four small tilts,
   +-:data:`FLAT_TILT_DEG` about x and y, brings it nearer the table), as on a face of a
   table that is merely offset (the real tosses raised 8 mm rest 5.9 mm above it: they
   were refused for their quaternion order; data info reports such a gap as
   ``rest_gap_m``). Limits: a recording that never comes to rest nor sinks is not tested, and a
   permuted quaternion that happens to put the object on another face flat on the table is
   not detected (nor, by any dynamics, a permuted quaternion of an isotropic body spinning
   steadily).
3. **Joint angles in degrees** (:func:`check_joint_units`, recordings of an articulated
   object, checked first: a joint in degrees swings the links, which the other two checks
   would blame on the base's frame or units). When a revolute joint's recorded angles leave
   its URDF ``<limit>`` by more than :data:`DEGREE_EXCESS_RAD` while the same values read
   as degrees stay within it (:data:`DEGREE_MARGIN_RAD` of slack), the recording is
   refused naming the joint and saying the angles look like degrees (residualsim reads
   radians). Values beyond the limits that are not degrees either are left to the other
   checks. A continuous joint (no limits) has no range that tells degrees apart (in
   radians it may wind any number of turns): when the gravity check fails, it is run again
   with such joints read as degrees, and if the free flight then falls at g the recording is
   refused naming those joints as degrees, not the base's frame or units.
4. **Linear velocity of which point** (:func:`check_velocity_point`, recorded velocities of
   a free URDF object whose base centre of mass is at least :data:`MIN_COM_OFFSET_M` off its
   link frame origin). residualsim's ``vx, vy, vz`` are the link frame origin's; PyBullet's
   ``getBaseVelocity`` gives the base centre of mass's, ω × R c faster (c the URDF's
   ``<inertial><origin>``). Averaged over windows of 50 ms as
   :func:`~residualsim.data.velocities.check_recorded_velocities` does, where ω × R c is
   over :data:`LEVER_MPS`: when subtracting it leaves at most half the median disagreement
   with the poses' differences, and that disagreement exceeds :data:`LEVER_MPS`, the
   recording is refused naming the convention. The 50 % disagreement the reader allows let
   such columns through: on synthetic hinge tosses (2 cm offset) lsq then identified
   contact and body 58 mm off held out, 25 mm with the origin's (train/README.md §22).
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pybullet as pb

from residualsim.data import Trajectory
from residualsim.data.velocities import SlidingWindows
from residualsim.sim.engine import Engine

__all__ = ["gravity_fit", "check_gravity", "check_quaternion_order", "check_joint_units",
           "check_velocity_point", "MIN_COM_OFFSET_M", "LEVER_MPS",
           "DEGREE_EXCESS_RAD", "DEGREE_MARGIN_RAD", "GravityFit",
           "G_LOW_MPS2", "G_HIGH_MPS2", "MAX_TILT_DEG", "MIN_GRAVITY_SAMPLES", "ORDER_GAP_M",
           "rests_flat", "FLAT_TILT_DEG", "level_at", "LEVEL_WINDOW_S", "LEVEL_RANGE_M",
           "rest_offset_m"]

log = logging.getLogger(__name__)

GRAVITY_MPS2 = 9.81
#: Accepted band of the fitted gravity's magnitude, m/s².
G_LOW_MPS2, G_HIGH_MPS2 = GRAVITY_MPS2 / 3, GRAVITY_MPS2 * 3
#: Largest accepted angle between the fitted gravity and straight down, degrees.
MAX_TILT_DEG = 30.0
#: Fewest free-flight samples the gravity fit uses.
MIN_GRAVITY_SAMPLES = 6
#: A parabola fits a window when its residual rms is at most this share of its sag.
FIT_SHARE = 0.05
#: At rest, a gap to the table larger than this (m) under one quaternion order and smaller
#: than a third of it under the other names the other order.
ORDER_GAP_M = 0.005

#: Tilts (degrees, about the world x and y axes through the base) of :func:`rests_flat`.
FLAT_TILT_DEG = 3.0
#: :func:`level_at`: the object is level at a sample (resting or sliding, not in free
#: flight) when its base height varies less than ``LEVEL_RANGE_M`` (m) over the
#: ``LEVEL_WINDOW_S`` seconds after it or before it. Free flight cannot be: over any such
#: window it falls at least g W^2 / 8 = 3.1 mm (symmetric about the top of a throw).
LEVEL_WINDOW_S, LEVEL_RANGE_M = 0.05, 0.0015

#: A recording in contact at its first sample is "on the table" (sliding or resting, not in
#: free flight: gravity is not checked) when its centre of mass stays within this height
#: band (m) and its fitted vertical acceleration is under the next value (m/s²).
LEVEL_M = 0.003
LEVEL_ACCELERATION_MPS2 = 1.0

#: A joint angle this far (rad) beyond the joint's limits is far outside them; read as
#: degrees (divided by 180/pi) it must be within this slack (rad) of them to be taken for
#: degrees.
DEGREE_EXCESS_RAD = 1.0
DEGREE_MARGIN_RAD = 0.1

#: (ratio of the fitted g to 9.81, cause) for magnitudes out of the band.
_CAUSES = ((1000.0, "positions look like millimetres (divide them by 1000)"),
           (100.0, "positions look like centimetres (divide them by 100)"),
           (1e-6, "times look like milliseconds (divide t by 1000)"),
           (1e-3, "positions look like millimetres and times like milliseconds"),
           (1e-4, "positions look like centimetres and times like milliseconds"),
           (0.0254 ** -1, "positions look like inches"))


@dataclasses.dataclass(frozen=True)
class GravityFit:
    """Fitted gravity (3,) m/s² world of the centre of mass over ``samples`` leading
    samples; ``magnitude_mps2`` and ``tilt_deg`` (angle from straight down)."""

    gravity_mps2: np.ndarray
    samples: int

    @property
    def magnitude_mps2(self) -> float:
        return float(np.linalg.norm(self.gravity_mps2))

    def tilt_deg(self, down: np.ndarray) -> float:
        norm = self.magnitude_mps2
        if norm == 0:
            return 180.0
        return float(np.degrees(np.arccos(np.clip(self.gravity_mps2 @ down / norm, -1, 1))))


def _centres_of_mass(engine: Engine, trajectory: Trajectory, n: int) -> np.ndarray:
    """The whole object's centre of mass (n, 3), m world, at the first n recorded poses
    (planar scenes: the recorded base position)."""
    scene = engine.scene
    if scene.planar:
        return np.asarray(trajectory.positions_m[:n], dtype=np.float64)
    body, cid = scene.body, engine.client
    links = range(pb.getNumJoints(body, physicsClientId=cid))
    masses = np.array([pb.getDynamicsInfo(body, link, physicsClientId=cid)[0]
                       for link in (-1, *links)])
    out = []
    for index in range(n):
        engine.reset(scene.state_from_trajectory(trajectory, index))
        centres = [pb.getBasePositionAndOrientation(body, physicsClientId=cid)[0]]
        centres += [pb.getLinkState(body, link, computeForwardKinematics=True,
                                    physicsClientId=cid)[0] for link in links]
        out.append(masses @ np.array(centres) / masses.sum())
    return np.array(out)


def _parabola(times: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, float, float]:
    """(acceleration (3,), residual rms, sag) of a least-squares quadratic in time."""
    t = times - times[0]
    design = np.column_stack([np.ones_like(t), t, t ** 2])
    coefficients, *_ = np.linalg.lstsq(design, values, rcond=None)
    residual = values - design @ coefficients
    acceleration = 2.0 * coefficients[2]
    sag = float(np.linalg.norm(acceleration)) * t[-1] ** 2 / 8.0
    return acceleration, float(np.sqrt(np.mean(residual ** 2))), sag


def gravity_fit(engine: Engine, trajectory: Trajectory, n_free: int,
                max_samples: int = 30) -> GravityFit | None:
    """The gravity the free flight of a recording shows (see the module docstring), from
    its ``n_free`` leading free-flight samples (none: in contact at once, maybe another up
    axis, so the first ``max_samples`` are tried). None when fewer than
    :data:`MIN_GRAVITY_SAMPLES` samples are free or no leading window is a parabola (noise
    larger than the fall: too short to tell)."""
    n = n_free if n_free else min(trajectory.n_samples, max_samples)
    if n < MIN_GRAVITY_SAMPLES:
        return None
    centres = _centres_of_mass(engine, trajectory, n)
    times = np.asarray(trajectory.times_s[:n], dtype=np.float64)
    for w in range(n, MIN_GRAVITY_SAMPLES - 1, -1):
        acceleration, rms, sag = _parabola(times[:w], centres[:w])
        if rms <= FIT_SHARE * sag:
            return GravityFit(gravity_mps2=acceleration, samples=w)
    return None


def _cause(fit: GravityFit, down: np.ndarray, planar: bool) -> str:
    ratio = fit.magnitude_mps2 / GRAVITY_MPS2
    if G_LOW_MPS2 <= fit.magnitude_mps2 <= G_HIGH_MPS2:
        axis = int(np.argmax(np.abs(fit.gravity_mps2)))
        sign = "-" if fit.gravity_mps2[axis] < 0 else "+"
        if axis == int(np.argmax(np.abs(down))) and sign == "+":
            return f"gravity points up: the vertical axis is flipped ({'y' if planar else 'z'} " \
                   "should point up)"
        return (f"gravity is along {sign}{'xyz'[axis]}: an export with another up axis "
                f"({'xyz'[axis]}-up); residualsim's world is {'y' if planar else 'z'} up")
    for factor, text in _CAUSES:
        if ratio > 0 and abs(np.log10(ratio / factor)) < 0.35:
            return text
    return "not the units residualsim reads (metres, seconds)"


def check_gravity(engine: Engine, trajectory: Trajectory, n_free: int, refuse
                  ) -> GravityFit | None:
    """Fit gravity on the free flight (``n_free`` leading samples, see :func:`gravity_fit`)
    and call ``refuse(message)`` when it is out of the band (see the module docstring);
    returns the fit (None when too short)."""
    fit = gravity_fit(engine, trajectory, n_free)
    if fit is None:
        log.info("%s: fewer than %d free-flight samples, gravity not checked",
                 trajectory.traj_id, MIN_GRAVITY_SAMPLES)
        return None
    planar = engine.scene.planar
    down = np.array([0.0, -1.0, 0.0]) if planar else np.array([0.0, 0.0, -1.0])
    if G_LOW_MPS2 <= fit.magnitude_mps2 <= G_HIGH_MPS2 and fit.tilt_deg(down) <= MAX_TILT_DEG:
        return fit
    if not n_free and _on_the_table(engine, trajectory, fit, down):
        log.info("%s: on the table from its first sample and level (sliding or at rest): "
                 "no free flight, gravity not checked", trajectory.traj_id)
        return None
    name = trajectory.source or trajectory.traj_id
    g = fit.gravity_mps2
    if degrees := _continuous_in_degrees(engine, trajectory, n_free, down):
        joints, good = degrees
        refuse(f"{name}: the free flight falls with {fit.magnitude_mps2:.3g} m/s², "
               f"{fit.tilt_deg(down):.0f} deg from {'-y' if planar else '-z'}, with the "
               f"continuous joint{'s' if len(joints) > 1 else ''} "
               f"{', '.join(map(repr, joints))} read as radians, and with "
               f"{good.magnitude_mps2:.3g} m/s², {good.tilt_deg(down):.0f} deg, read as "
               "degrees: the joint angles look like degrees; residualsim reads radians "
               "(multiply them by pi/180)")
        return fit
    refuse(f"{name}: the free flight (samples 0 to {fit.samples - 1}) falls with "
           f"{fit.magnitude_mps2:.3g} m/s² along ({g[0]:.3g}, {g[1]:.3g}, {g[2]:.3g}), "
           f"{fit.magnitude_mps2 / GRAVITY_MPS2:.3g} times g, {fit.tilt_deg(down):.0f} deg from "
           f"{'-y' if planar else '-z'}; expected 9.81 m/s² along {'-y' if planar else '-z'} "
           f"(metres, seconds): {_cause(fit, down, planar)}")
    return fit


def _continuous_in_degrees(engine: Engine, trajectory: Trajectory, n_free: int,
                           down: np.ndarray) -> tuple[list[str], GravityFit] | None:
    """(the joints, the fit) when reading the recording's continuous joints (angular, no
    limits) as degrees makes its free flight fall at g within :data:`MAX_TILT_DEG`; None
    otherwise (or without such joints)."""
    info = getattr(engine.scene, "info", None)
    positions = trajectory.joint_positions
    if info is None or positions is None or not len(positions) or \
            tuple(trajectory.joint_names) != tuple(info.joint_names):
        return None
    columns = [k for k, (kind, limits) in enumerate(zip(info.joint_types, info.joint_limits))
               if kind != "prismatic" and limits is None]
    if not columns:
        return None
    radians = np.array(positions, dtype=np.float64)
    radians[:, columns] = np.radians(radians[:, columns])
    fit = gravity_fit(engine, dataclasses.replace(trajectory, joint_positions=radians), n_free)
    if fit is None or not G_LOW_MPS2 <= fit.magnitude_mps2 <= G_HIGH_MPS2 or \
            fit.tilt_deg(down) > MAX_TILT_DEG:
        return None
    return [info.joint_names[k] for k in columns], fit


def _on_the_table(engine: Engine, trajectory: Trajectory, fit: GravityFit,
                  down: np.ndarray) -> bool:
    """A recording in contact at its first sample whose centre of mass keeps its height
    (within :data:`LEVEL_M`) over the fitted window and whose fitted acceleration has no
    vertical part to speak of (under :data:`LEVEL_ACCELERATION_MPS2`): a body pushed along
    or resting on the table, whose deceleration is friction's, not gravity's. (An export
    with another up axis shows gravity's 9.81 m/s² along a level axis, with the height
    moving: still refused.)"""
    heights = _centres_of_mass(engine, trajectory, fit.samples) @ -down
    vertical = abs(float(fit.gravity_mps2 @ down))
    return float(np.ptp(heights)) <= LEVEL_M and vertical <= LEVEL_ACCELERATION_MPS2


def _other_order(trajectory: Trajectory) -> tuple[Trajectory, str]:
    """The recording with its quaternion columns read in the other order, and that order."""
    order = trajectory.metadata.get("quaternion_order", "wxyz")
    quats = np.asarray(trajectory.quat_wxyz)
    if order == "xyzw":  # read back as w-x-y-z: the columns held (w, x, y, z) after all
        return dataclasses.replace(trajectory, quat_wxyz=quats[:, [1, 2, 3, 0]]), "wxyz"
    return dataclasses.replace(trajectory, quat_wxyz=quats[:, [3, 0, 1, 2]]), "xyzw"


def level_at(trajectory: Trajectory, index: int, up: int = 2) -> bool:
    """Whether the object is level at sample ``index`` (:data:`LEVEL_WINDOW_S`,
    :data:`LEVEL_RANGE_M`, a window wholly recorded; ``up``: the vertical axis, 2 (z), or
    1 (y) in planar scenes): resting or sliding, not in free flight, wherever the table
    is."""
    times = np.asarray(trajectory.times_s)
    heights = np.asarray(trajectory.positions_m)[:, up]
    after = int(np.searchsorted(times, times[index] + LEVEL_WINDOW_S))
    before = int(np.searchsorted(times, times[index] - LEVEL_WINDOW_S, side="right")) - 1
    return any(0 <= lo and hi < trajectory.n_samples
               and float(np.ptp(heights[lo:hi + 1])) < LEVEL_RANGE_M
               for lo, hi in ((index, after), (before, index)))


def rest_offset_m(engine: Engine, trajectory: Trajectory, distance, tolerance_m: float,
                  most_m: float, rest_samples: int = 5) -> float:
    """How far above the table (m) a recording's rest lies, when it ends at rest (its last
    ``rest_samples`` positions within 1 mm) more than ``tolerance_m`` and less than
    ``most_m`` above it (an offset table or frame: the real tosses raised 6 mm rest 3.9 mm
    above it); else 0. The later flights (sysid.flight_segments) are measured from there,
    so such a rest, and the slides and tumbles at its height, are not taken for free
    flight. (The first flight's end, free_flight_samples, keeps the engine's history as it
    was, the initial-state fits bit for bit for any worker count: a rest there is found by
    :func:`level_at`.)"""
    last = np.asarray(trajectory.positions_m)[-rest_samples:]
    if trajectory.n_samples <= rest_samples or np.ptp(last, axis=0).max() >= 1e-3:
        return 0.0
    gap = float(distance(engine, trajectory, trajectory.n_samples - 1, most_m))
    return gap if tolerance_m < gap < most_m else 0.0


def rests_flat(engine: Engine, trajectory: Trajectory, distance, index: int,
               horizon_m: float) -> bool:
    """Whether the pose at ``index`` lies flat (on a face) rather than on an edge or a
    corner: every tilt of :data:`FLAT_TILT_DEG` about the world x and y axes, both ways,
    brings the object nearer the table (``distance`` as :func:`check_quaternion_order`
    takes it). A flat rest above the table is an offset table, not a permuted quaternion."""
    from residualsim.sim.rotations import rotate_by_rotvec

    base = distance(engine, trajectory, index, horizon_m)
    quats = np.asarray(trajectory.quat_wxyz, dtype=float)
    angle = np.radians(FLAT_TILT_DEG)
    for rotvec in ([angle, 0, 0], [-angle, 0, 0], [0, angle, 0], [0, -angle, 0]):
        tilted = quats.copy()
        tilted[index] = rotate_by_rotvec(quats[index], np.array(rotvec, dtype=float))
        if distance(engine, dataclasses.replace(trajectory, quat_wxyz=tilted), index,
                    horizon_m) >= base - 1e-4:
            return False
    return True


def check_quaternion_order(engine: Engine, trajectory: Trajectory, distance, refuse,
                           rest_samples: int = 5, depth_m: float = 0.02) -> None:
    """Refuse (``refuse(message)``) a recording whose quaternion values are in the other
    order (see the module docstring); ``distance(engine, trajectory, index, horizon_m)`` is
    the signed distance (m) of the object to the table at a recorded pose; at rest: the
    last ``rest_samples`` positions within 1 mm; ``depth_m`` the penetration that cannot be
    this object's."""
    if engine.scene.planar or not trajectory.source.startswith("csv:"):
        return  # the other formats define their order
    other, order = _other_order(trajectory)
    last = np.asarray(trajectory.positions_m)[-rest_samples:]
    at_rest = trajectory.n_samples > rest_samples and np.ptp(last, axis=0).max() < 1e-3
    horizon = 4 * depth_m
    step = max(1, trajectory.n_samples // 40)
    indices = range(0, trajectory.n_samples, step)
    read_as = trajectory.metadata.get("quaternion_order", "wxyz")
    sink = -min(distance(engine, other, i, horizon) for i in indices)
    reason = None
    if at_rest:
        given = abs(distance(engine, trajectory, trajectory.n_samples - 1, horizon))
        alternative = abs(distance(engine, other, trajectory.n_samples - 1, horizon))
        if given > ORDER_GAP_M and alternative < min(given / 3, ORDER_GAP_M) \
                and sink < depth_m and not rests_flat(engine, trajectory, distance,
                                                      trajectory.n_samples - 1, horizon):
            reason = (f"at rest the object is {1000 * given:.0f} mm off the table with the "
                      f"columns read as {read_as}, {1000 * alternative:.1f} mm read as "
                      f"{order}")
    else:
        given = -min(distance(engine, trajectory, i, horizon) for i in indices)
        if given > depth_m and sink < min(given / 3, depth_m / 2):
            reason = (f"the poses sink up to {1000 * given:.0f} mm into the table with the "
                      f"columns read as {read_as}, {1000 * max(sink, 0.0):.1f} mm read as "
                      f"{order}")
    if reason:
        name = trajectory.source or trajectory.traj_id
        flag = ("pass --quaternion-order xyzw (quaternion_order='xyzw')" if order == "xyzw"
                else "drop --quaternion-order xyzw (the values are w-x-y-z)")
        refuse(f"{name}: the quaternions look like {'-'.join(order)} order: {reason}; "
               f"{flag}")


def _looks_like_degrees(angles: np.ndarray, limits: tuple[float, float]) -> bool:
    """Whether joint angles (T,) recorded as radians are degrees (module docstring, 3)."""
    low, high = limits
    excess = max(low - float(angles.min()), float(angles.max()) - high)
    as_radians = np.radians(angles)
    return excess > DEGREE_EXCESS_RAD and bool(np.all(
        (as_radians >= low - DEGREE_MARGIN_RAD) & (as_radians <= high + DEGREE_MARGIN_RAD)))


def check_joint_units(scene, trajectory: Trajectory, refuse) -> None:
    """Call ``refuse(message)`` when a revolute joint's recorded angles look like degrees
    (module docstring, 3); scenes without URDF joints are not checked."""
    info = getattr(scene, "info", None)
    positions = trajectory.joint_positions
    if info is None or positions is None or not len(positions) or \
            tuple(trajectory.joint_names) != tuple(info.joint_names):
        return
    for joint, kind, limits, angles in zip(info.joint_names, info.joint_types,
                                           info.joint_limits, np.asarray(positions).T):
        if kind != "revolute" or limits is None or not _looks_like_degrees(angles, limits):
            continue
        name = trajectory.source or trajectory.traj_id
        unwrapped = joint in trajectory.metadata.get("unwrapped_joints", ())
        refuse(f"{name}: joint {joint!r} reads {angles.min():.4g} to {angles.max():.4g}"
               f"{' (unwrapped: steps over pi taken for wraps)' if unwrapped else ''}, far "
               f"beyond its limits [{limits[0]:g}, {limits[1]:g}] rad in {info.path.name}, and "
               f"within them read as degrees ({np.radians(angles.min()):.3g} to "
               f"{np.radians(angles.max()):.3g} rad): the joint angles look like degrees; "
               "residualsim reads radians (multiply them by pi/180)")
        return


#: Base centre-of-mass offsets (m) below this are not told apart from the link origin.
MIN_COM_OFFSET_M = 0.005
#: Window-mean lever-arm speeds |ω × R c| (m/s) that count, and the smallest median
#: disagreement (m/s) refused.
LEVER_MPS = 0.02


def check_velocity_point(scene, trajectory: Trajectory, refuse, window_s: float = 0.05
                         ) -> None:
    """Refuse (``refuse(message)``) recorded linear velocities of the base's centre of mass
    where residualsim reads the link frame origin's (see the module docstring, check 4)."""
    from residualsim.sim.rotations import as_rotation

    info = getattr(scene, "info", None)
    if (scene.planar or info is None or trajectory.metadata.get("velocities") != "recorded"
            or np.linalg.norm(info.base_com_offset_m) < MIN_COM_OFFSET_M):
        return
    windows = SlidingWindows(trajectory.times_s, window_s)
    quats = np.asarray(trajectory.quat_wxyz)
    omega = np.asarray(trajectory.angular_velocity_world_radps)
    lever = windows.mean(np.cross(omega, as_rotation(quats).apply(info.base_com_offset_m)))
    moved = windows.difference(trajectory.positions_m)
    recorded = windows.mean(trajectory.linear_velocity_mps)
    mask = np.linalg.norm(lever, axis=1) > LEVER_MPS
    if mask.sum() < 5:
        return
    as_origin = float(np.median(np.linalg.norm((recorded - moved)[mask], axis=1)))
    as_com = float(np.median(np.linalg.norm((recorded - lever - moved)[mask], axis=1)))
    if as_origin > LEVER_MPS and as_com <= 0.5 * as_origin:
        refuse(f"{trajectory.source or trajectory.traj_id}: the velocity columns vx, vy, vz "
               "look like the velocity of the base's centre of mass (as PyBullet's "
               "getBaseVelocity gives it), not of the base link frame's origin that "
               "residualsim reads: they disagree with the poses' differences by "
               f"{as_origin:.3g} m/s (median), by {as_com:.3g} once w x (R c) is taken off (c = "
               f"{np.round(info.base_com_offset_m, 4).tolist()} m, the URDF's base "
               "<inertial> origin); subtract it, or delete the velocity columns")
