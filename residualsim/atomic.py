"""All-or-nothing file writes: the one place residualsim writes output files.

:func:`atomic_open` yields a binary file in the destination's directory; on success the
data is flushed to disk and the file renamed over the destination (``os.replace``), on any
error it is removed. Readers never see a half-written file, and a failed write leaves an
existing file untouched. Files get the usual umask permissions.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["atomic_open", "atomic_write_text"]


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Open ``path`` for binary writing, atomically (its directory must exist)."""
    path = Path(path)
    temporary = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_open(path) as handle:
        handle.write(text.encode("utf-8"))
