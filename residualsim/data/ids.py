"""Recording ids in messages: the nearest known ids to one that was not found."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["nearest_ids", "unknown_id"]


def nearest_ids(given: str, known: Iterable[str | int], n: int = 5) -> list[str]:
    """Up to ``n`` known ids nearest to ``given``: those containing it (shortest first, so
    ``"3"`` finds ``"synthetic-3"`` before ``"synthetic-13"``), then the closest spellings
    (:func:`difflib.get_close_matches`), else the first ``n`` known ids."""
    known = [str(k) for k in known]
    given = str(given)
    containing = sorted((k for k in known if given and given in k), key=len)
    close = difflib.get_close_matches(given, known, n=n, cutoff=0.4)
    return list(dict.fromkeys(containing + close))[:n] or known[:n]


def unknown_id(kind: str, given: str, known: Iterable[str | int], where: str = "") -> str:
    """The message for an id that is not among ``known``: ``"no toss '3' in DIR (8
    recordings); nearest: synthetic-3, synthetic-13"``."""
    known = [str(k) for k in known]
    place = f" in {where}" if where else ""
    return (f"no {kind} {given!r}{place} ({len(known)} recordings); nearest: "
            + ", ".join(nearest_ids(given, known)))
