"""The kernel of the batched first-event loop (:func:`residualsim.sim.batch.first_events`,
driven by ``batch._compiled_loop``): its per-step, per-copy work compiled, numba nopython
code calling Bullet's C API on the batch's own PyBullet world (:mod:`residualsim.sim.capi`).

One call of the kernel (:func:`_kernel`) steps the world, lists its contact points and reads
every active copy's base state through the C API (the calls PyBullet's Python makes, in the
same order), then runs each copy's part of the lone loop's logic on arrays: touching points
(distance <= 0.1 mm or a normal force), the deepest penetration, the new-point memory
(``MEMORY_STEPS`` steps of touched table points, a point new beyond
``new_point_distance_m``), the approach test of an event's new points, the last samples
kept, and the checks every ``CHECK_EVERY`` samples (closed-form flight possible, rest, the
horizon). It keeps stepping while no copy leaves and nothing waits for Python; a copy that
meets its event, rests, reaches its horizon or may fly hands back to Python, which parks it,
admits the next particles and resets copies with PyBullet's Python calls as
:func:`~residualsim.sim.batch._loop` does, in the same order. The floats are the lone
loop's: the same operations in the same order (no fast-math; squares through the C
library's ``pow``, as Python's ``**`` computes them), so steps, statuses, events and states
come out bit for bit as the Python loop's (``tests/test_batch_compiled.py``).

The kernel takes the C functions' addresses as an argument (``fns``) and calls them through
numba intrinsics, one per signature, so that it holds no address and numba caches it on
disk (``cache=True``): compiling took ~4.4 s in every new process.

Whole rollouts (:func:`~residualsim.sim.batch.batched_rollouts`: ``predict --samples
--batch-size``, ``StochasticSimulator.rollout(batch_size=)``) run through the same kernel:
every sample is logged, and a copy whose step touches new points (or every contact step)
goes back to Python, where the lone loop's :class:`~residualsim.sim.corrector.EventCorrector`
corrects it on its copy (the approach test is the corrector's own) and the corrected state
is read back; a body at rest is filled to the horizon there. Lone rollouts
(:mod:`.lone_compiled`) run it with one slot, the engine's own body, in the engine's world;
the calibration's pose loop without the contact listing (``contacts=False``).
"""

from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from residualsim.sim.capi import CONTACT_DOUBLES, STATUS, CompiledPathError, c_functions
from residualsim.sim.contact import MEMORY_STEPS
from residualsim.sim.skips import CHECK_EVERY, REST_CHECKS

__all__ = ["Slots", "run_kernel", "GOING", "EVENT", "CHECK"]

_HISTORY = CHECK_EVERY + 2  # samples kept per copy: the rest check looks 6 back
_POINTS = 16  # touching points of one copy in one step (a box on a plane: 4)
_CONTACTS = 4096  # contact points of one world step
# per-copy integers (columns of the kernel's ``ints``)
_BODY, _INDEX, _STEPPED, _CALM, _RECENT, _HELD, _EXIT, _FLIP, _TOUCH, _LOGGED = range(10)
# exit codes: the copy goes back to Python
# (a whole rollout: CORRECT an event to correct on its copy, REST at rest, to be filled)
_GOING, _EVENT, _DONE, _CHECK, _CORRECT, _REST = 0, 1, 2, 3, 4, 5
GOING, EVENT, DONE, CHECK, CORRECT, REST = _GOING, _EVENT, _DONE, _CHECK, _CORRECT, _REST
_AT16, _AT24, _AT56 = np.uint64(16), np.uint64(24), np.uint64(56)  # byte offsets


# Calls of C functions by address (an unsigned 64-bit integer), one per signature: the
# kernel holds no address, so numba caches it on disk (compiling it took ~4 s a process).
def _c_call(result, params):
    def codegen(context, builder, signature, args):
        function = builder.inttoptr(args[0], ir.FunctionType(result, params).as_pointer())
        value = builder.call(function, list(args[1:]))
        return context.get_dummy_value() if isinstance(result, ir.VoidType) else value
    return codegen


_I64, _I32, _F64 = ir.IntType(64), ir.IntType(32), ir.DoubleType()
_U64 = types.uint64


@intrinsic
def _call_u64_u64(typingctx, address, a):
    return _U64(_U64, _U64), _c_call(_I64, [_I64])


@intrinsic
def _call_u64_u64_u64(typingctx, address, a, b):
    return _U64(_U64, _U64, _U64), _c_call(_I64, [_I64, _I64])


@intrinsic
def _call_u64_u64x3(typingctx, address, a, b, c):
    return _U64(_U64, _U64, _U64, _U64), _c_call(_I64, [_I64] * 3)


@intrinsic
def _call_u64_u64_i32(typingctx, address, a, b):
    return _U64(_U64, _U64, types.int32), _c_call(_I64, [_I64, _I32])


@intrinsic
def _call_i32_u64(typingctx, address, a):
    return types.int32(_U64, _U64), _c_call(_I32, [_I64])


@intrinsic
def _call_i32_u64x8(typingctx, address, a, b, c, d, e, f, g, h):
    return types.int32(*[_U64] * 9), _c_call(_I32, [_I64] * 8)


@intrinsic
def _call_void_u64_u64(typingctx, address, a, b):
    return types.void(_U64, _U64, _U64), _c_call(ir.VoidType(), [_I64, _I64])


@intrinsic
def _call_f64_f64f64(typingctx, address, a, b):
    return types.float64(_U64, types.float64, types.float64), _c_call(_F64, [_F64, _F64])


@njit(cache=True)
def _close(h, now, then, samples, step_m, step_q):
    m, k = step_m * samples, step_q * samples
    return (abs(h[now, 0] - h[then, 0]) < m and abs(h[now, 1] - h[then, 1]) < m
            and abs(h[now, 2] - h[then, 2]) < m and abs(h[now, 3] - h[then, 3]) < k
            and abs(h[now, 4] - h[then, 4]) < k and abs(h[now, 5] - h[then, 5]) < k
            and abs(h[now, 6] - h[then, 6]) < k)


@njit(cache=True)
def _kernel_impl(fns, handle, cfg, flags, ints, deepest, hist, log, recent, recent_n, touch,
                 order, counts, left, slot_of, contacts, scratch, max_steps):
    """Steps taken (>= 1), or < 0: -1 step, -2 contact listing, -3 state read failed,
    -4 too many contact points in the world, -5 too many touching points of a copy.
    ``order[:counts[0]]`` the active slots in the loop's order; the slots that go back
    to Python are ``left[:counts[1]]`` (in that order), and those that end (event,
    rest, horizon) leave ``order``."""
    n_active = counts[0]
    counts[1] = 0
    table, n_steps, has_flight, has_rest, every = flags[0], flags[1], flags[2], flags[3], \
        flags[4]
    step_done, state_done, contacts_done = flags[5], flags[6], flags[7]
    memory, every_n, rest_checks = flags[8], flags[9], flags[10]
    history = hist.shape[1] - 1
    whole, listing = flags[11], flags[12]
    spacing2, approach, step_m, step_q = cfg[0], cfg[1], cfg[2], cfg[3]
    c0, c1, c2, e0, e1, e2, level = cfg[4], cfg[5], cfg[6], cfg[7], cfg[8], cfg[9], cfg[10]
    words = scratch.view(np.int32)
    rows = contacts.view(np.int32)
    latest = np.empty(13)
    steps = 0
    while steps < max_steps:
        steps += 1
        status = _call_u64_u64_u64(fns[1], handle, _call_u64_u64(fns[0], handle))
        if _call_i32_u64(fns[2], status) != step_done:
            return -1
        n_points = 0
        if listing != 0:  # a pose rollout lists no contacts (reads change nothing)
            status = _call_u64_u64_u64(fns[1], handle, _call_u64_u64(fns[5], handle))
            if _call_i32_u64(fns[2], status) != contacts_done:
                return -2
            _call_void_u64_u64(fns[6], handle, scratch.ctypes.data)
            n_points = words[0]
        if n_points > contacts.shape[0]:
            return -4
        if n_points > 0:
            _call_u64_u64x3(fns[7], contacts.ctypes.data, scratch[1], n_points * 176)
        for j in range(n_active):
            ints[order[j], _TOUCH] = 0
        for c in range(n_points):
            if contacts[c, 12] <= 1e-4 or contacts[c, 13] > 0.0:
                a, b = rows[c, 1], rows[c, 2]
                flip = a == table
                owner = b if flip else a
                if owner < 0 or owner >= slot_of.shape[0]:
                    continue
                s = slot_of[owner]
                if s < 0:
                    continue
                k = ints[s, _TOUCH]
                if k >= _POINTS:
                    return -5
                if k == 0:
                    ints[s, _FLIP] = 1 if flip else 0
                touch[s, k] = c
                ints[s, _TOUCH] = k + 1
        for j in range(n_active):  # every copy's state read together, after the step
            s = order[j]
            status = _call_u64_u64_u64(fns[1], handle,
                                        _call_u64_u64_i32(fns[3], handle, ints[s, _BODY]))
            if _call_i32_u64(fns[2], status) != state_done:
                return -3
            _call_i32_u64x8(fns[4], status, 0, 0, 0, 0, scratch.ctypes.data + _AT16,
                            scratch.ctypes.data + _AT24, 0)
            if scratch[2] == 0 or scratch[3] == 0:
                return -3
            _call_u64_u64x3(fns[7], hist[s, history].ctypes.data, scratch[2], 56)  # past the kept
            _call_u64_u64x3(fns[7], hist[s, history].ctypes.data + _AT56, scratch[3], 48)
        leaving = 0
        for j in range(n_active):
            s = order[j]
            for i in range(13):
                latest[i] = hist[s, history, i]
            ints[s, _INDEX] += 1
            ints[s, _STEPPED] += 1
            index = ints[s, _INDEX]
            event = False
            k = ints[s, _TOUCH]
            if k > 0:
                on = 3 if ints[s, _FLIP] == 1 else 6  # the point on the table
                lowest = contacts[touch[s, 0], 12]
                for i in range(1, k):
                    if contacts[touch[s, i], 12] < lowest:
                        lowest = contacts[touch[s, i], 12]
                if -lowest > deepest[s]:
                    deepest[s] = -lowest
                n_recent = ints[s, _RECENT]
                n_fresh = 0
                forced = False
                for i in range(k):
                    c = touch[s, i]
                    new = True
                    if n_recent > 0:
                        x, y, z = contacts[c, on], contacts[c, on + 1], contacts[c, on + 2]
                        for r in range(n_recent):
                            for q in range(recent_n[s, r]):
                                d = _call_f64_f64f64(fns[8], x - recent[s, r, q, 0], 2.0) \
                                    + _call_f64_f64f64(fns[8], y - recent[s, r, q, 1], 2.0) \
                                    + _call_f64_f64f64(fns[8], z - recent[s, r, q, 2], 2.0)
                                if d <= spacing2:
                                    new = False
                                    break
                            if not new:
                                break
                    touch[s, _POINTS + i] = 1 if new else 0
                    if new:
                        n_fresh += 1
                        if contacts[c, 13] > 0.0:
                            forced = True
                if n_fresh > 0 and whole == 0:  # the new points' approach before the step
                    px = py = pz = nx = ny = nz = total = 0.0
                    for i in range(k):
                        if touch[s, _POINTS + i] == 0:
                            continue
                        c = touch[s, i]
                        weight = 1.0
                        if forced:
                            weight = 0.0 if 0.0 > contacts[c, 13] else contacts[c, 13]
                        px, py, pz = px + weight * contacts[c, on], \
                            py + weight * contacts[c, on + 1], pz + weight * contacts[c, on + 2]
                        nx, ny, nz = nx + weight * contacts[c, 9], \
                            ny + weight * contacts[c, 10], nz + weight * contacts[c, 11]
                        total = total + weight
                    rx, ry, rz = px / total - latest[0], py / total - latest[1], \
                        pz / total - latest[2]
                    last = history - 1
                    vx, vy, vz = hist[s, last, 7], hist[s, last, 8], hist[s, last, 9]
                    wx, wy, wz = hist[s, last, 10], hist[s, last, 11], hist[s, last, 12]
                    speed = (nx * (vx + wy * rz - wz * ry) + ny * (vy + wz * rx - wx * rz)
                             + nz * (vz + wx * ry - wy * rx)) / np.sqrt(nx * nx + ny * ny
                                                                        + nz * nz)
                    signed = -speed if on == 3 else speed
                    event = not signed > -approach
                if every != 0 or (whole != 0 and n_fresh > 0):
                    event = True  # a whole rollout's corrector makes its own event test
                # the touched table points join the memory (the oldest step leaves)
                if n_recent == memory:
                    for r in range(memory - 1):
                        recent_n[s, r] = recent_n[s, r + 1]
                        for q in range(recent_n[s, r]):
                            for i in range(3):
                                recent[s, r, q, i] = recent[s, r + 1, q, i]
                    n_recent -= 1
                for i in range(k):
                    c = touch[s, i]
                    for a in range(3):
                        recent[s, n_recent, i, a] = contacts[c, on + a]
                recent_n[s, n_recent] = k
                ints[s, _RECENT] = n_recent + 1
            else:
                ints[s, _RECENT] = 0
            for r in range(history - 1):  # the new sample joins the kept ones
                for i in range(13):
                    hist[s, r, i] = hist[s, r + 1, i]
            for i in range(13):
                hist[s, history - 1, i] = latest[i]
            if ints[s, _HELD] < history:
                ints[s, _HELD] += 1
            if whole != 0:  # a whole rollout records every sample
                for i in range(13):
                    log[s, ints[s, _LOGGED], i] = latest[i]
                ints[s, _LOGGED] += 1
            code = _GOING
            if event:
                code = _CORRECT if whole != 0 else _EVENT
            elif index % every_n == 0 or index >= n_steps:
                if index >= n_steps:
                    code = _DONE
                else:
                    now = history - 1
                    z = latest[2]
                    x, y, qz, w = latest[3], latest[4], latest[5], latest[6]
                    r0, r1, r2 = 2 * (x * qz - w * y), 2 * (y * qz + w * x), \
                        1 - 2 * (x * x + y * y)
                    if has_flight != 0 and (z + r0 * c0 + r1 * c1 + r2 * c2 - abs(r0) * e0
                                            - abs(r1) * e1 - abs(r2) * e2 >= level):
                        code = _CHECK  # it may fly: Python's own check
                    elif has_rest != 0 and index >= every_n:
                        calm = _close(hist[s], now, now - 1, 1, step_m, step_q) and _close(
                            hist[s], now, now - every_n, every_n, step_m, step_q)
                        ints[s, _CALM] = ints[s, _CALM] + 1 if calm else 0
                        if ints[s, _CALM] >= rest_checks:
                            if whole != 0:
                                code = _REST  # Python fills its samples to the horizon
                            else:
                                ints[s, _INDEX] = n_steps
                                code = _DONE
            ints[s, _EXIT] = code
            if code != _GOING:
                leaving += 1
        if leaving:
            kept = 0
            for j in range(n_active):
                s = order[j]
                code = ints[s, _EXIT]
                if code != _GOING:
                    left[counts[1]] = s
                    counts[1] += 1
                if code == _GOING or code == _CHECK or code == _CORRECT:
                    order[kept] = s
                    kept += 1
            counts[0] = kept
            return steps
    return steps



_ADDRESSES: list = []


def _addresses() -> np.ndarray:
    """The C functions' addresses in the kernel's order (its ``fns``)."""
    if not _ADDRESSES:
        f = c_functions()
        names = ["b3InitStepSimulationCommand", "b3SubmitClientCommandAndWaitStatus",
                 "b3GetStatusType", "b3RequestActualStateCommandInit", "b3GetStatusActualState",
                 "b3InitRequestContactPointInformation", "b3GetContactPointInformation",
                 "memcpy"]
        libm_pow = ctypes.CDLL(None).pow  # what Python's float ** calls
        _ADDRESSES.append(np.array([ctypes.cast(f[name], ctypes.c_void_p).value
                                    for name in names]
                                   + [ctypes.cast(libm_pow, ctypes.c_void_p).value], np.uint64))
    return _ADDRESSES[0]


_ERRORS = {-1: "a world step failed", -2: "the contact listing failed",
           -3: "a base state read failed",
           -5: f"more than {_POINTS} touching points of one copy in one step"}


class Slots:
    """The kernel's arrays for ``size`` copies of the world (one slot per copy)."""

    def __init__(self, bodies: list, static_body: int, dt_s: float, flight, rest: bool,
                 n_steps: int, guard, whole: bool = False, contacts: bool = True) -> None:
        """Slots for the copies ``bodies`` (PyBullet body ids) stepping against
        ``static_body`` at ``dt_s`` s a sample, with the closed-form ``flight`` (a
        :class:`~residualsim.sim.skips.FreeFlight` or None) and rest detection (``rest``),
        to ``n_steps`` samples; ``whole``: every sample logged, events corrected in Python;
        ``contacts`` False: no contact listing, no events (the engine's pose loop)."""
        size = len(bodies)
        self.bodies = list(bodies)
        self.slot = {body: s for s, body in enumerate(self.bodies)}
        self.slot_of = np.full(max(self.bodies + [static_body]) + 1, -1, np.int64)
        for body, s in self.slot.items():
            self.slot_of[body] = s
        self.ints = np.zeros((size, 10), np.int64)
        self.whole = whole
        self.log = np.zeros((size, n_steps + 2 if whole else 1, 13))  # a whole run's samples
        self.ints[:, _BODY] = self.bodies
        self.deepest = np.zeros(size)
        self.hist = np.full((size, _HISTORY + 1, 13), np.nan)
        self.recent = np.zeros((size, MEMORY_STEPS, _POINTS, 3))
        self.recent_n = np.zeros((size, MEMORY_STEPS), np.int64)
        self.touch = np.zeros((size, 2 * _POINTS), np.int64)
        self.order = np.zeros(size, np.int64)  # active slots, in the loop's order
        self.counts = np.zeros(2, np.int64)  # active slots; slots gone back to Python
        self.left = np.zeros(size, np.int64)
        self.particle: list = [None] * size
        self.contacts = np.zeros((_CONTACTS, CONTACT_DOUBLES))
        self.scratch = np.zeros(4, np.uint64)
        self.exits = self.ints[:, _EXIT]  # a view: the kernel writes, Python clears
        floats = flight._floats if flight is not None else (0.0,) * 7
        from residualsim.sim.skips import REST_SPEED_MPS, REST_SPIN_RADPS

        self.cfg = np.array([guard.new_point_distance_m ** 2, guard.min_approach_mps,
                             REST_SPEED_MPS * dt_s, 0.5 * REST_SPIN_RADPS * dt_s, *floats])
        self.flags = np.array([static_body, n_steps, flight is not None, rest,
                               guard.every_contact_step, STATUS["step"], STATUS["state"],
                               STATUS["contacts"], MEMORY_STEPS, CHECK_EVERY, REST_CHECKS,
                               whole, contacts],
                              np.int64)

    def horizon(self, n_steps: int) -> None:
        """Run the slots' particles to ``n_steps`` samples from now on (a whole run's log
        grown to hold them)."""
        self.flags[1] = n_steps
        if self.whole and self.log.shape[1] < n_steps + 2:
            self.log = np.zeros((len(self.bodies), n_steps + 2, 13))

    @property
    def n_active(self) -> int:
        return int(self.counts[0])

    def activate(self, p) -> None:
        """Particle ``p`` (placed on its copy ``p.body``) loaded and last in the order."""
        self.load(p)
        s = self.slot[p.body]
        self.particle[s] = p
        self.order[self.counts[0]] = s
        self.counts[0] += 1

    def drop(self, s: int) -> None:
        """Slot ``s`` out of the order (the rest keep theirs)."""
        n = int(self.counts[0])
        at = int(np.flatnonzero(self.order[:n] == s)[0])
        self.order[at:n - 1] = self.order[at + 1:n].copy()
        self.counts[0] = n - 1

    def load(self, p) -> None:
        """Particle ``p`` (placed on its copy ``p.body``) into its slot."""
        s = self.slot[p.body]
        kept = p.raws[-_HISTORY:]
        self.hist[s, _HISTORY - len(kept):_HISTORY] = [
            (*pose[0], *pose[1], *velocity[0], *velocity[1]) for pose, velocity in kept]
        self.ints[s, _INDEX:_RECENT + 1] = (p.index, p.stepped,
                                            p.rest.calm if p.rest is not None else 0,
                                            len(p.recent))
        self.ints[s, _HELD], self.ints[s, _LOGGED] = len(kept), 0
        for r, points in enumerate(p.recent):
            self.recent_n[s, r] = len(points)
            self.recent[s, r, :len(points)] = points
        self.deepest[s] = p.deepest

    def unload(self, p, finished: bool) -> None:
        """The slot's loop state back into particle ``p``: a ``finished`` particle needs only
        its counts, penetration and last two samples (:func:`~.batch._results`), one that
        goes on in Python also its last samples kept, rest count and new-point memory."""
        s = self.slot[p.body]
        row = self.ints[s].tolist()
        p.index, p.stepped, p.deepest = row[_INDEX], row[_STEPPED], float(self.deepest[s])
        if self.whole:  # every sample since the copy was loaded
            p.raws.extend([((tuple(r[0:3]), tuple(r[3:7])), (tuple(r[7:10]), tuple(r[10:13])))
                           for r in self.log[s, :row[_LOGGED]].tolist()])
            self.ints[s, _LOGGED] = 0
        else:
            held = min(row[_HELD], 2) if finished else row[_HELD]
            p.raws = [((tuple(r[0:3]), tuple(r[3:7])), (tuple(r[7:10]), tuple(r[10:13])))
                      for r in self.hist[s, _HISTORY - held:_HISTORY].tolist()]
        if finished:
            return
        if p.rest is not None:
            p.rest.calm = row[_CALM]
        p.recent = [[tuple(q) for q in self.recent[s, r, :self.recent_n[s, r]].tolist()]
                    for r in range(row[_RECENT])]

    def event_points(self, s: int) -> tuple[list, list, bool]:
        """The event's new points and all touching points of slot ``s`` as contact tuples
        (``getContactPoints``' order of fields, the world's listing order), and whether the
        table is body A."""
        k = int(self.ints[s, _TOUCH])
        mine, fresh = [], []
        words = self.contacts.view(np.int32)
        for i in range(k):
            c = int(self.touch[s, i])
            r = self.contacts[c].tolist()
            w = words[c, :5].tolist()
            point = (w[0], w[1], w[2], w[3], w[4], tuple(r[3:6]), tuple(r[6:9]),
                     tuple(r[9:12]), r[12], r[13], r[14], tuple(r[16:19]), r[15],
                     tuple(r[19:22]))
            mine.append(point)
            if self.touch[s, _POINTS + i]:
                fresh.append(point)
        return fresh, mine, bool(self.ints[s, _FLIP])


def run_kernel(handle: int, slots: Slots, longest: int, client: int) -> list:
    """Step the world with the active slots' particles until some go back to Python, or
    ``longest`` steps; those slots in order (their exit codes in ``slots.exits``). Raises
    :class:`CompiledPathError` naming a failed C call."""
    taken = _kernel_impl(_addresses(), handle, slots.cfg, slots.flags, slots.ints,
                         slots.deepest, slots.hist, slots.log, slots.recent, slots.recent_n,
                         slots.touch,
                         slots.order, slots.counts, slots.left, slots.slot_of, slots.contacts,
                         slots.scratch, longest)
    if taken < 0:
        reason = f"more than {len(slots.contacts)} contact points in one world step" \
            if taken == -4 else _ERRORS.get(taken, f"error {taken}")
        raise CompiledPathError(f"compiled loop, physics client {client}: {reason}")
    return slots.left[:slots.counts[1]].tolist()
