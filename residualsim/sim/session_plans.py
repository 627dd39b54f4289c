"""What the hand does in a synthetic capture session (:mod:`residualsim.sim.sessions`):
the order of the actions, and each throw, placement and slide planned as a path of
:mod:`~residualsim.sim.session_motion` segments and run in a
:class:`~residualsim.sim.session_world.SessionWorld`.

Random choices are rejected and drawn again (at most :data:`ATTEMPTS` times) when the path
would bring the object within :data:`~residualsim.sim.session_world.CLEARANCE_M` of the
table, or a throw's flight (estimated from the lowest point) would fall outside 0.15-0.45 s,
or its wind-up's acceleration at release outside 8-20 m/s^2.
"""

from __future__ import annotations

import math

import numpy as np

from residualsim.errors import SceneError
from residualsim.sim.session_motion import (WINDUP_F1, HandMove, HandWindup, path_at,
                                            quat_conj, quat_exp, quat_log, quat_mul,
                                            random_quat)
from residualsim.sim.session_world import Phase, SessionWorld

__all__ = ["plan_actions", "run_action", "plan_throw", "plan_placement", "plan_slide",
           "ATTEMPTS", "CAP_S"]

GRAVITY_MPS2 = 9.81
#: A free phase ends at most this long after the hand lets go, s.
CAP_S = 4.0
#: Draws of a hand's path before giving up.
ATTEMPTS = 400


def joint_release(world: SessionWorld, rng: np.random.Generator, j0: np.ndarray,
                   duration_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Joint angles at the wind-up's start and at release, and the rates at release: the
    angle at release within 1 rad (or half the range) of ``j0``, so the carry moves the
    joints slowly."""
    n = world.n_joints
    j_start, j_release, rates = np.zeros(n), np.zeros(n), np.zeros(n)
    span = duration_s * WINDUP_F1
    for k in range(n):
        limits = world.joint_limits[k]
        if world.prismatic[k]:
            rate = rng.uniform(-0.15, 0.15)
        elif world.continuous[k]:
            rate = rng.choice([-1.0, 1.0]) * rng.uniform(8.0, 15.0)
        else:
            rate = rng.uniform(-4.0, 4.0)
        if limits is None:
            j_start[k] = j0[k] + rng.uniform(-1.0, 1.0)
            j_release[k] = j_start[k] + rate * span
        else:
            low, high = limits
            margin, reach = 0.1 * (high - low), min(1.0, 0.5 * (high - low))
            near = min(max(j0[k], low + margin), high - margin)  # within 1 rad of now
            j_release[k] = rng.uniform(max(low + margin, near - reach),
                                       min(high - margin, near + reach))
            j_start[k] = min(max(j_release[k] - rate * span, low + 0.02 * (high - low)),
                             high - 0.02 * (high - low))
            rate = (j_release[k] - j_start[k]) / span
        rates[k] = rate
    return j_start, j_release, rates


def toward_origin(rng: np.random.Generator, xy: np.ndarray, spread: float) -> float:
    """A heading (rad) from ``xy`` roughly toward the origin (random when near it)."""
    if np.hypot(*xy) < 0.2:
        return float(rng.uniform(-math.pi, math.pi))
    return float(math.atan2(-xy[1], -xy[0]) + rng.uniform(-spread, spread))


def plan_throw(world: SessionWorld, pick_s: float, p0, q0, j0):
    """Sample a carry and wind-up (rejecting paths that would touch the table, flights
    outside 0.15-0.45 s, wind-up accelerations outside 8-20 m/s^2)."""
    rng = world.rng
    for _ in range(ATTEMPTS):
        carry = rng.uniform(0.5, 1.5)
        release_m, fraction, release_s = world.release_at(pick_s,
                                                          carry + rng.uniform(0.2, 0.35))
        windup = release_s - (pick_s + carry)
        p_release = np.array([p0[0] + rng.uniform(-0.15, 0.15),
                              p0[1] + rng.uniform(-0.15, 0.15), rng.uniform(0.15, 0.5)])
        q_release = random_quat(rng)
        j_start, j_release, rates = joint_release(world, rng, j0, windup)
        world.set_pose(p_release, q_release, j_release)
        low = world.clearance_m(2.0)
        # the vertical speed that lands the lowest point after the flight time wanted, then
        # a horizontal speed that makes the wind-up's acceleration at release 8-20 m/s^2
        flight = rng.uniform(0.15, 0.45)
        speed_z = (0.5 * GRAVITY_MPS2 * flight ** 2 - low) / flight
        slowest = max(0.3, math.sqrt(max((8.0 * windup / 1.5) ** 2 - speed_z ** 2, 0.0)))
        fastest = min(1.5, math.sqrt(max((20.0 * windup / 1.5) ** 2 - speed_z ** 2, 0.0)))
        if low < 0.02 or speed_z < 0.3 or slowest > fastest:
            continue
        speed_h = rng.uniform(slowest, fastest)
        heading = toward_origin(rng, p0[:2], 0.8)
        dv = np.array([speed_h * math.cos(heading), speed_h * math.sin(heading), speed_z])
        axis = rng.normal(size=3)
        omega = axis / np.linalg.norm(axis) * rng.uniform(1.0, 10.0)
        span = windup * WINDUP_F1
        p_start = p_release - dv * span
        q_start = quat_mul(quat_exp(-omega * span), q_release)
        lift = np.array([0.0, 0.0, rng.uniform(0.05, 0.1)])
        lift_end = pick_s + rng.uniform(0.25, 0.35) * carry
        turn = quat_log(quat_mul(q_start, quat_conj(q0)))
        segments = [HandMove(pick_s, lift_end, p0, p0 + lift, q0, np.zeros(3), j0, j0),
                    HandMove(lift_end, pick_s + carry, p0 + lift, p_start, q0, turn, j0, j_start),
                    HandWindup(pick_s + carry, windup, p_start, dv, q_start, omega, j_start,
                            rates)]
        if not world.path_clear(segments, lift_end, release_s):
            continue
        return segments, release_m, fraction, release_s, (p_release, q_release, j_release, dv,
                                                         omega, rates)
    raise SceneError(f"{world.scene.name}: found no throw that keeps the object clear of the "
                     f"table in {ATTEMPTS} tries (is the object larger than ~0.4 m?)")


def plan_placement(world: SessionWorld, pick_s: float, p0, q0, j0, drop_m: float):
    rng = world.rng
    for _ in range(ATTEMPTS):
        duration = rng.uniform(0.7, 1.5)
        release_m, fraction, release_s = world.release_at(pick_s, duration)
        heading = toward_origin(rng, p0[:2], 1.2)
        distance = rng.uniform(0.1, 0.35)
        target = p0 + np.array([distance * math.cos(heading), distance * math.sin(heading), 0])
        turn = np.array([0.0, 0.0, rng.uniform(-math.pi, math.pi)])
        lift = np.array([0.0, 0.0, rng.uniform(0.05, 0.12)])
        lift_end = pick_s + 0.25 * (release_s - pick_s)
        move_end = pick_s + 0.7 * (release_s - pick_s)
        q1 = quat_mul(quat_exp(turn), q0)
        segments = [HandMove(pick_s, lift_end, p0, p0 + lift, q0, np.zeros(3), j0, j0),
                    HandMove(lift_end, move_end, p0 + lift, target + lift, q0, turn, j0, j0),
                    HandMove(move_end, release_s, target + lift,
                          target + np.array([0.0, 0.0, drop_m]), q1, np.zeros(3), j0, j0)]
        if world.path_clear(segments, lift_end, move_end):
            return segments, release_m, fraction, release_s
    raise SceneError(f"{world.scene.name}: found no placement clear of the table")


def plan_slide(world: SessionWorld, pick_s: float, p0, q0, j0):
    rng = world.rng
    duration = rng.uniform(0.5, 1.2)
    release_m, fraction, release_s = world.release_at(pick_s, duration)
    heading = toward_origin(rng, p0[:2], 1.5)
    distance = rng.uniform(0.05, 0.2)
    target = p0 + np.array([distance * math.cos(heading), distance * math.sin(heading), 0.0])
    turn = np.array([0.0, 0.0, rng.uniform(-0.5, 0.5)])
    return [HandMove(pick_s, release_s, p0, target, q0, turn, j0, j0)], release_m, fraction, \
        release_s


def plan_actions(rng: np.random.Generator, n_throws: int, placements: int, slides: int
          ) -> list[tuple[str, float]]:
    """The actions in order: ("throw", 0), ("placement", drop m), ("slide", 0)."""
    extras = [("placement", float(rng.uniform(0.002, 0.008)) if p % 2 == 0 else 0.0)
              for p in range(placements)] + [("slide", 0.0)] * slides
    order = rng.permutation(len(extras))
    gaps = (rng.integers(1, n_throws, size=len(extras)) if n_throws >= 2
            else np.zeros(len(extras), dtype=int))
    plan: list[tuple[str, float]] = []
    for gap in range(n_throws + 1):
        plan += [extras[i] for i in order if gaps[i] == gap]
        if gap < n_throws:
            plan.append(("throw", 0.0))
    return plan


def run_action(world: SessionWorld, kind: str, drop_m: float) -> None:
    rng = world.rng
    pick_s = world.advance_to_pick()
    p0, q0, j0 = world.pose()
    if kind == "throw":
        segments, release_m, fraction, release_s, release = plan_throw(world, pick_s, p0, q0,
                                                                         j0)
        p_release, q_release, j_release, dv, omega, rates = release
    elif kind == "placement":
        segments, release_m, fraction, release_s = plan_placement(world, pick_s, p0, q0, j0,
                                                                   drop_m)
    else:
        segments, release_m, fraction, release_s = plan_slide(world, pick_s, p0, q0, j0)
    world.hand_phase(segments, release_m)
    first_free = len(world.rows)
    if kind == "throw":
        world.set_pose(p_release, q_release, j_release, dv, omega, rates, clear_contacts=True)
    else:
        position, quat, joints = path_at(segments, release_s)
        world.set_pose(position, quat, joints, clear_contacts=True)
    phase = Phase(kind, pick_s, release_s, first_free)
    if kind == "throw":
        phase.release_velocity, phase.release_omega = tuple(dv.tolist()), tuple(omega.tolist())
        phase.release_rates = tuple(rates.tolist())
    phase.stop, phase.contact = world.free_phase(
        release_m, fraction, touching=kind == "slide" or (kind == "placement" and not drop_m),
        hold_s=rng.uniform(0.5, 1.0), cap_s=CAP_S)
    world.phases.append(phase)
