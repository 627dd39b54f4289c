"""PyBullet, imported once without its "pybullet build time" banner.

PyBullet's C code prints its build time when the module loads (to standard error in the
wheels in use, to standard output in some builds, where the C library flushes it at exit
after a command's result). Every module of residualsim takes PyBullet from here
(``from residualsim.sim.bullet import pb``), so the first import, in the main process and
in every spawned worker, runs with file descriptors 1 and 2 pointed at ``/dev/null`` and
the C buffers flushed before they are restored. :func:`captured_c_output` catches what
PyBullet prints later (a load failure's reason, warnings), so that a caller can put it into
one error message or pass it on to stderr.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from types import ModuleType

__all__ = ["pb", "quiet_import", "flush_c_stdio", "CapturedOutput", "captured_c_output"]

#: PyBullet's source-location prefix of each message (``b3Error[file.cpp,121]:``).
_PREFIX = re.compile(r"b3(?:Error|Warning|Printf)\[[^\]]*\]:\s*")


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


class CapturedOutput:
    """The text PyBullet wrote inside :func:`captured_c_output`; ``text`` is filled when the
    block ends."""

    def __init__(self) -> None:
        self.text = ""

    def lines(self) -> list[str]:
        """The messages written, one per line, without PyBullet's source-location prefixes
        and its build-time banner."""
        text = _PREFIX.sub("\n", self.text)
        return [line.strip() for line in text.splitlines()
                if line.strip() and not line.startswith("pybullet build time")]


@contextlib.contextmanager
def captured_c_output() -> Iterator[CapturedOutput]:
    """Catch what C code writes to descriptors 1 and 2 inside the block (see module)."""
    captured = CapturedOutput()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    flush_c_stdio()
    try:
        saved = (os.dup(1), os.dup(2))
    except OSError:  # no descriptors to redirect (an embedded interpreter): capture nothing
        yield captured
        return
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield captured
        finally:
            flush_c_stdio()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            sink.seek(0)
            captured.text = sink.read().decode("utf-8", "replace")


pb = quiet_import()
