"""The first closed-form flights of many particles at once, for :mod:`residualsim.sim.batch`.

:func:`flights` finds where each particle's free flight
(:class:`~residualsim.sim.skips.FreeFlight`) hands over to the engine with numpy (about
12 µs a particle, where stepping the 30-60 flight samples in the world would cost a
body-step of 3-4 µs each), then recomputes that sample with the lone path's own float
operations, so that the handover comes out bit for bit as the lone path's.
"""

from __future__ import annotations

import math

import numpy as np

from residualsim.sim.skips import CHECK_EVERY

__all__ = ["flights", "UNSEEN"]

_HUGE = 1 << 62
#: A raw record that is close to nothing (NaN compares false): a flight sample for the rest
#: check (:func:`flights`).
UNSEEN = ((math.nan,) * 3, (math.nan,) * 4), ((math.nan,) * 3, (math.nan,) * 3)


def flights(flight, raws: list, n_steps: int) -> list:
    """The first check's closed-form flight of each particle from its raw record: None
    when it does not fly, else (samples added, the last up to CHECK_EVERY + 1 of them as
    raw records). The handover sample is found with numpy for all particles, then it and
    the next are checked with :class:`FreeFlight`'s own float operations (the next only
    when numpy's margin is within 1e-9 m), the handover sample recomputed with them; a
    particle whose check disagrees flies sample by sample as the lone path does. The
    samples before the handover stand as :data:`UNSEEN`: only a rest check reads them,
    and no flight sample passes for rest (its position changes by g dt²/2 = 0.2 mm a
    sample at least, the check's limit is 2 mm/s × dt = 0.014 mm)."""
    out: list = [None] * len(raws)
    starting = [k for k, raw in enumerate(raws) if flight.clear(raw[0])]
    if not starting:
        return out
    poses = np.array([(*raws[k][0][0], *raws[k][0][1]) for k in starting])
    velocities = np.array([(*raws[k][1][0], *raws[k][1][1]) for k in starting])
    first_blocked, blocked_by = np.full(len(starting), _HUGE), np.zeros(len(starting))
    chunk, offset = 64, 0
    while offset < n_steps and (first_blocked == _HUGE).any():
        samples = np.arange(offset + 1, min(offset + chunk, n_steps) + 1)
        margin = _clearances(flight, poses, velocities, samples)
        blocked = (margin < 0).any(axis=1) & (first_blocked == _HUGE)
        column = np.argmax(margin[blocked] < 0, axis=1)
        first_blocked[blocked] = samples[column]
        blocked_by[blocked] = margin[blocked, column]
        offset, chunk = samples[-1], chunk * 4
    for row, k in enumerate(starting):
        pose, velocity = raws[k]
        n_flown = int(min(first_blocked[row] - 1, n_steps))
        handover = flight.sample(pose, velocity, n_flown) if n_flown else None
        # numpy's float operations may round otherwise than the scalar ones (about 1e-17 m):
        # the lone path's own check decides where the margin is within 1e-9 m
        agrees = (n_flown == 0 or flight.clear(handover[0])) and (
            n_flown == n_steps or blocked_by[row] < -1e-9
            or not flight.clear(flight.sample(pose, velocity, n_flown + 1)[0]))
        if not agrees:
            records = flight.fly(pose, velocity, n_steps)
            n_flown, tail = len(records), records[-(CHECK_EVERY + 1):]
        elif n_flown:
            tail = [UNSEEN] * min(n_flown - 1, CHECK_EVERY) + [handover]
        if n_flown:
            out[k] = (n_flown, tail)
    return out


def _clearances(flight, poses: np.ndarray, velocities: np.ndarray,
                samples: np.ndarray) -> np.ndarray:
    """(P, J) m by how much particle p at flight sample j is clear of the handover level
    (:meth:`FreeFlight.clear`: clear where >= 0), from base poses (P, 7) (position m,
    quaternion x-y-z-w) and velocities (P, 6) (m/s, rad/s), world frame."""
    c0, c1, c2, e0, e1, e2, level = flight._floats
    h = flight.h
    m = samples.astype(np.float64) * flight.substeps
    t, a = m * h, h * h * m * (m + 1) / 2
    omega = velocities[:, 3:6]
    rate = np.sqrt((omega * omega).sum(axis=1))[:, None]
    half = 0.5 * rate * t
    with np.errstate(invalid="ignore", divide="ignore"):
        s = np.where(rate > 0, np.sin(half) / rate, 0.0)
    c = np.cos(half)
    dx, dy, dz = (omega[:, i:i + 1] * s for i in range(3))
    x, y, z, w = (poses[:, 3 + i:4 + i] for i in range(4))
    qx = c * x + dx * w + dy * z - dz * y
    qy = c * y - dx * z + dy * w + dz * x
    qz = c * z + dx * y - dy * x + dz * w
    qw = c * w - dx * x - dy * y - dz * z
    height = poses[:, 2:3] + t * velocities[:, 2:3] + a * flight._gravity[2]
    r0, r1, r2 = 2 * (qx * qz - qw * qy), 2 * (qy * qz + qw * qx), 1 - 2 * (qx * qx + qy * qy)
    return (height + r0 * c0 + r1 * c1 + r2 * c2 - np.abs(r0) * e0 - np.abs(r1) * e1
            - np.abs(r2) * e2) - level
