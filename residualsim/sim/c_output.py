"""PyBullet's own C-level output, caught so it never lands on stdout.

PyBullet prints warnings and load errors with C ``printf``, on file descriptor 1 (stdout),
past Python's ``sys.stdout``. :func:`captured_c_output` points descriptors 1 and 2 at a
temporary file for the length of a ``with`` block and hands back what was written, so that a
caller can put PyBullet's reason for a failure into one error message and pass its warnings
on to stderr. Single-threaded use only (descriptors are per process).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import sys
import tempfile
from collections.abc import Iterator

__all__ = ["CapturedOutput", "captured_c_output"]

#: PyBullet's source-location prefix of each message (``b3Error[file.cpp,121]:``).
_PREFIX = re.compile(r"b3(?:Error|Warning|Printf)\[[^\]]*\]:\s*")


def _flush_c_streams() -> None:
    """Flush C stdio buffers, so text printed before (after) a redirection goes where it was
    meant to go rather than into (out of) the capture."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).fflush(None)


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
    _flush_c_streams()
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
            _flush_c_streams()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            sink.seek(0)
            captured.text = sink.read().decode("utf-8", "replace")
