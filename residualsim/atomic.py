"""File I/O in one place: all-or-nothing writes of output files, checked JSON reads.

:func:`atomic_open` yields a binary file in the destination's directory; on success the
data is flushed to disk and the file renamed over the destination (``os.replace``), on any
error it is removed. Readers never see a half-written file, and a failed write leaves an
existing file untouched. Files get the usual umask permissions.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from residualsim.errors import DataError

__all__ = ["atomic_open", "atomic_write_text", "read_json", "save_png"]


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


def read_json(path: str | os.PathLike[str], missing: str | None = None,
              error: type[Exception] = DataError) -> Any:
    """Parse a JSON file; ``error`` names the file when it is missing (message ``missing``,
    default "<path>: file not found") or not readable JSON."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise error(missing or f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(f"{path}: not readable JSON ({exc})") from None


def save_png(figure: Any, path: str | os.PathLike[str]) -> None:
    """Write a matplotlib ``figure`` to ``path`` as PNG (110 dpi), atomically, and close it."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    with atomic_open(path) as handle:
        handle.write(buffer.getvalue())
