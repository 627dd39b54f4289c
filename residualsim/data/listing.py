"""The recording files of a folder, and a word about every other file the reader skips."""

from __future__ import annotations

import logging
from pathlib import Path

__all__ = ["id_key", "recording_files"]

log = logging.getLogger("residualsim.data")

#: Files that live beside recordings by design and are skipped without a word: the truth of a
#: synthesized set (``residualsim data synthesize``), the index and record of a cut session
#: (``residualsim data import``) and a data set's own documentation.
COMPANIONS = ("synthetic.json", "index.csv", "import.json", "README", "LICENSE")


def id_key(path: Path) -> tuple:
    """Sort key: numeric stems first in numeric order, then the others by name."""
    return (0, int(path.stem), "") if path.stem.isdigit() else (1, 0, path.stem)


def recording_files(directory: Path, suffix: str) -> list[Path]:
    """The ``*<suffix>`` files of ``directory`` in id order (:func:`id_key`). Every other
    visible file there but the :data:`COMPANIONS` is skipped with one warning on stderr
    naming them, so a recording saved in another format is never dropped without a word."""
    files, skipped = [], []
    for path in directory.iterdir():
        if path.name.startswith(".") or path.name.startswith(COMPANIONS):
            continue
        (files if path.is_file() and path.suffix == suffix else skipped).append(path)
    if skipped:
        names = sorted(p.name + ("/" if p.is_dir() else "") for p in skipped)
        listed = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        log.warning("%s: skipped %d file(s) that are not %s recordings: %s", directory,
                    len(names), suffix, listed)
    return sorted(files, key=id_key)
