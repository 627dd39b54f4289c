"""PyBullet, imported once without its "pybullet build time" banner.

PyBullet's C code prints its build time when the module loads (to standard error in the
wheels in use, to standard output in some builds, where the C library flushes it at exit
after a command's result). Every module of residualsim takes PyBullet from here
(``from residualsim.sim.bullet import pb``), so the first import, in the main process and
in every spawned worker, runs with file descriptors 1 and 2 pointed at ``/dev/null`` and
the C buffers flushed before they are restored.
"""

from __future__ import annotations

import ctypes
import os
import sys
from types import ModuleType

__all__ = ["pb", "quiet_import", "flush_c_stdio"]


def flush_c_stdio() -> None:
    """Flush the C library's stdio buffers (what C code printed but has not yet written)."""
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):  # no C library to flush (not on Linux/macOS)
        pass


def quiet_import() -> ModuleType:
    """Import :mod:`pybullet` with the C-level standard output silenced while it loads."""
    if "pybullet" in sys.modules:
        return sys.modules["pybullet"]
    try:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        saved = {fd: os.dup(fd) for fd in (1, 2)}
    except (OSError, ValueError, AttributeError):  # no usable fd 1 or 2 (closed streams)
        import pybullet

        return pybullet
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in saved:
            os.dup2(devnull, fd)
        import pybullet

        flush_c_stdio()
    finally:
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
        os.close(devnull)
    return pybullet


pb = quiet_import()
