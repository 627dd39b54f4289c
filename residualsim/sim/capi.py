"""Bullet's C API under PyBullet's own worlds, for the compiled rollout loop.

The ``pybullet`` extension module exports Bullet's C API (the ``b3…`` functions of
``examples/SharedMemory/PhysicsClientC_API.h``). This module loads it with ctypes and finds
the C handle of a PyBullet client (``physicsClientId``): PyBullet keeps its clients' handles in
a static table (``sPhysicsClients1`` of ``pybullet.c``), which is not exported but is named in
the module's ELF symbol table; its address is that entry's value plus the module's load base
(an exported function's address less its own entry). The compiled loop
(:mod:`residualsim.sim.batch_compiled`) then calls the same C functions PyBullet's Python
calls make (``b3InitStepSimulationCommand``, ``b3RequestActualStateCommandInit``,
``b3InitRequestContactPointInformation`` …) on the same world, in the same order: the engine
sees the same calls, so the results are bit for bit those of the Python loop, while the
world is built and changed (loading, parameters, resets, events) by PyBullet's Python API
as everywhere else.

:func:`compiled_reason` says why the compiled path cannot or must not run (None: it can):
``RESIDUALSIM_COMPILED=0`` forces it off, ``1`` forces it on (then an unreachable C API is an
error, not a fallback), ``auto`` runs it where it can and otherwise warns once per process,
on one line saying why, and runs the Python loop; unset, :data:`DEFAULT` applies (off in
this version: a process's first compiled rollout costs ~1 s, numba's import and the cached
kernel, and lone rollouts gain 2-6 % of CPU time, so ``predict`` over 30 tosses with 2
workers took as long either way; train/README.md §10).
:func:`client_handle` checks a handle before any C call uses it (non-null, accepting
commands, holding as many bodies as PyBullet's Python says, a state read equal to
PyBullet's), so that a bad client id or a changed module is a :class:`CompiledPathError`,
never a crash.
"""

from __future__ import annotations

import ctypes
import logging
import os
import struct

import numpy as np

from residualsim.errors import ResidualSimError
from residualsim.sim.bullet import pb

__all__ = ["CompiledPathError", "compiled_reason", "compiled_wanted", "client_handle",
           "c_functions", "CONTACT_DOUBLES", "STATUS"]

log = logging.getLogger(__name__)

#: The environment variable that forces the compiled path off (0) or on (1).
SWITCH = "RESIDUALSIM_COMPILED"
#: The switch's value when unset: "0" (off), "1" or "auto".
DEFAULT = "0"
#: ``struct b3ContactPointData`` in doubles (176 bytes: five ints, padding, 19 doubles);
#: fields as doubles at: 3 position on A, 6 on B, 9 normal on B, 12 distance, 13 normal
#: force, 14 / 15 lateral friction 1 / 2, 16 / 19 their directions; ints 1, 2 bodies A, B.
CONTACT_DOUBLES = 22
#: Status types (``EnumSharedMemoryServerStatus``) the loop expects, checked against the
#: module at the first handle (:func:`client_handle`).
STATUS = {"step": 26, "state": 21, "contacts": 39}


class CompiledPathError(ResidualSimError, RuntimeError):
    """The compiled loop cannot use Bullet's C API here (the reason is the message)."""


_FUNCTIONS: dict = {}
_REASON: list = []  # the process's one finding: [reason or None]
_WARNED: list = []
_CHECKED: dict = {}  # client id -> handle already checked


def compiled_wanted() -> bool | None:
    """``RESIDUALSIM_COMPILED``: True (1: forced on), False (0: forced off) or None (``auto``:
    on where reachable; unset: :data:`DEFAULT`)."""
    value = os.environ.get(SWITCH, "").strip().lower()
    if value == "":
        return None if DEFAULT == "auto" else DEFAULT == "1"
    if value not in ("0", "1", "auto"):
        raise CompiledPathError(f"{SWITCH} must be 0, 1 or auto, got {value!r}")
    return None if value == "auto" else value == "1"


def compiled_reason() -> str | None:
    """Why the compiled loop does not run in this process (None: it runs). Forced on
    (``RESIDUALSIM_COMPILED=1``) and unreachable raises :class:`CompiledPathError`;
    ``auto`` and unreachable warns once (one line) and gives the reason."""
    wanted = compiled_wanted()
    if wanted is False:
        return f"{SWITCH}=0" if os.environ.get(SWITCH, "").strip() else \
            f"off by default ({SWITCH}=1 or auto turns it on)"
    reason = _reachable()
    if reason is None:
        return None
    if wanted:
        raise CompiledPathError(f"{SWITCH}=1 but the compiled loop cannot run: {reason}")
    warn_fallback(reason)
    return reason


def warn_fallback(reason: str) -> None:
    """One warning line per process when the compiled loop was wanted but cannot run."""
    if not _WARNED:
        _WARNED.append(reason)
        log.warning("compiled rollout loop unavailable, running the Python loop: %s", reason)


def _reachable() -> str | None:
    if not _REASON:
        try:
            import numba  # noqa: F401
        except ImportError:
            _REASON.append("numba is not installed")
        else:
            try:
                c_functions()
                _REASON.append(None)
            except CompiledPathError as err:
                _REASON.append(str(err))
    return _REASON[0]


def _elf_symbols(path: str, names: list) -> dict:
    """Values of ``names`` in the ELF symbol table (.symtab, local symbols too) of a 64-bit
    little-endian shared object; names it lacks are left out."""
    with open(path, "rb") as handle:
        data = handle.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise CompiledPathError(f"{path} is not a 64-bit little-endian ELF module")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
                for i in range(shnum)]
    entry = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"),
                      ("value", "<u8"), ("size", "<u8")])
    out: dict = {}
    for section in sections:
        if section[1] != 2:  # SHT_SYMTAB
            continue
        strings = sections[section[6]]
        text = data[strings[4]:strings[4] + strings[5]]
        table = np.frombuffer(data, entry, count=section[5] // 24, offset=section[4])
        for name in names:
            at = text.find(b"\0" + name.encode() + b"\0")
            if at >= 0:
                hit = np.flatnonzero(table["name"] == at + 1)
                if len(hit):
                    out[name] = int(table["value"][hit[0]])
    return out


def c_functions() -> dict:
    """The C functions the loop calls (ctypes, argument types set: every handle and pointer
    an unsigned 64-bit integer) and the address of PyBullet's client table
    (``"clients"``). Raises :class:`CompiledPathError` naming what is missing."""
    if _FUNCTIONS:
        return _FUNCTIONS
    path = pb.__file__
    try:
        lib = ctypes.CDLL(path)
    except OSError as err:
        raise CompiledPathError(f"cannot load {path} with ctypes: {err}") from None
    u64, i32 = ctypes.c_uint64, ctypes.c_int
    signatures = {  # name: (result, arguments), from PhysicsClientC_API.h
        "b3CanSubmitCommand": (i32, [u64]),
        "b3GetNumBodies": (i32, [u64]),
        "b3InitStepSimulationCommand": (u64, [u64]),
        "b3SubmitClientCommandAndWaitStatus": (u64, [u64, u64]),
        "b3GetStatusType": (i32, [u64]),
        "b3RequestActualStateCommandInit": (u64, [u64, i32]),
        "b3GetStatusActualState": (i32, [u64] * 8),
        "b3InitRequestContactPointInformation": (u64, [u64]),
        "b3GetContactPointInformation": (None, [u64, u64]),
    }
    found = {}
    for name, (result, arguments) in signatures.items():
        try:
            function = getattr(lib, name)
        except AttributeError:
            raise CompiledPathError(f"{path} exports no {name} (a build without Bullet's "
                                    "C API)") from None
        function.restype, function.argtypes = result, arguments
        found[name] = function
    symbols = _elf_symbols(path, ["sPhysicsClients1", "b3ConnectPhysicsDirect"])
    if len(symbols) != 2:
        raise CompiledPathError(f"{path} has no symbol table entry for PyBullet's client "
                                "table (a stripped build)")
    base = ctypes.cast(lib.b3ConnectPhysicsDirect, ctypes.c_void_p).value \
        - symbols["b3ConnectPhysicsDirect"]
    found["clients"] = base + symbols["sPhysicsClients1"]
    libc = ctypes.CDLL(None)
    found["memcpy"] = libc.memcpy
    found["memcpy"].restype, found["memcpy"].argtypes = u64, [u64, u64, u64]
    _FUNCTIONS.update(found)
    return _FUNCTIONS


def client_handle(client: int, body: int) -> int:
    """The C handle (an address) of PyBullet client ``client``, checked: in PyBullet's table,
    non-null, accepting commands, with as many bodies as ``pybullet.getNumBodies`` says, and
    ``body``'s base state read through it equal to PyBullet's own reads. Raises
    :class:`CompiledPathError` naming the failed check."""
    functions = c_functions()
    if not isinstance(client, int) or not 0 <= client < 1024:
        raise CompiledPathError(f"physics client id must be an int in [0, 1024), got {client!r}")
    handle = ctypes.c_uint64.from_address(functions["clients"] + 8 * client).value
    if handle == 0:
        raise CompiledPathError(f"physics client {client} is not connected")
    if not functions["b3CanSubmitCommand"](handle):
        raise CompiledPathError(f"physics client {client} accepts no commands")
    count = pb.getNumBodies(physicsClientId=client)
    if functions["b3GetNumBodies"](handle) != count:
        raise CompiledPathError(f"physics client {client}: the C handle holds another world "
                                "than PyBullet's (body counts differ)")
    if _CHECKED.get(client) != (handle, count):
        values = np.zeros(13)
        status = read_state(handle, body, values)
        if status != STATUS["state"]:
            raise CompiledPathError(f"physics client {client}: a state read gave status "
                                    f"{status}, expected {STATUS['state']} (another pybullet "
                                    "build)")
        pose = pb.getBasePositionAndOrientation(body, physicsClientId=client)
        velocity = pb.getBaseVelocity(body, physicsClientId=client)
        if not np.array_equal(values, [*pose[0], *pose[1], *velocity[0], *velocity[1]],
                              equal_nan=True):  # a body set to NaN reads NaN both ways
            raise CompiledPathError(f"physics client {client}: the C API read body {body}'s "
                                    "state otherwise than PyBullet")
        _CHECKED[client] = (handle, count)
    return handle


def read_state(handle: int, body: int, out: np.ndarray) -> int:
    """``body``'s base pose and velocity ((x, y, z), (qx, qy, qz, qw), v, ω; world frame)
    into ``out`` (13,) through the C API, from Python (a check, not the loop); the status
    type of the request."""
    f = c_functions()
    status = f["b3SubmitClientCommandAndWaitStatus"](
        handle, f["b3RequestActualStateCommandInit"](handle, int(body)))
    kind = f["b3GetStatusType"](status)
    if kind != STATUS["state"]:
        return kind
    pointers = (ctypes.c_uint64 * 2)()
    address = ctypes.addressof(pointers)
    f["b3GetStatusActualState"](status, 0, 0, 0, 0, address, address + 8, 0)
    if not pointers[0] or not pointers[1]:
        return -1
    out[0:7] = np.ctypeslib.as_array((ctypes.c_double * 7).from_address(pointers[0]))
    out[7:13] = np.ctypeslib.as_array((ctypes.c_double * 6).from_address(pointers[1]))
    return kind
