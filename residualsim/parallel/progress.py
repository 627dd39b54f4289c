"""Progress of long work on standard error: a bar on a terminal, plain lines elsewhere.

A bar redrawn with carriage returns is what a person at a terminal wants; in a log file (a
cluster job, ``nohup``, ``2> log``) it is one ever-growing line, and tqdm's default hides
it altogether there. :func:`progress_bar` returns tqdm's bar when standard error is a
terminal and otherwise a :class:`PlainProgress`: a line ``[stage] done/total unit,
elapsed s, about s left (postfix)`` at most every :data:`EVERY_S` seconds and once at the
end, so a calibration whose standard error goes to a file says what it is doing (issue 67:
MH's 14-minute bootstrap and the body stages printed nothing there).
"""

from __future__ import annotations

import sys
import time
from typing import Any

__all__ = ["progress_bar", "PlainProgress", "EVERY_S", "stage_line"]

#: Seconds between two plain progress lines, at least.
EVERY_S = 10.0


class PlainProgress:
    """What tqdm's bars are asked for (``update``, ``set_postfix``, ``set_postfix_str``,
    ``close``, a context manager), as plain lines on standard error (module docstring)."""

    def __init__(self, total: int | None, desc: str = "", unit: str = "it",
                 initial: int = 0, every_s: float = EVERY_S) -> None:
        self.total, self.desc, self.unit, self.n = total, desc, unit, int(initial)
        self.every_s, self._initial, self._postfix = every_s, int(initial), ""
        self._started = self._last = time.perf_counter()
        self._closed = False

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def update(self, n: int = 1) -> None:
        self.n += int(n)
        if time.perf_counter() - self._last >= self.every_s:
            self._print()

    def set_postfix(self, **values: Any) -> None:
        self._postfix = ", ".join(f"{k} {v}" for k, v in values.items())

    def set_postfix_str(self, text: str) -> None:
        self._postfix = str(text)

    def close(self) -> None:
        if not self._closed and self.n > self._initial:
            self._print()
        self._closed = True

    def _print(self) -> None:
        now = time.perf_counter()
        self._last = now
        elapsed = now - self._started
        of = f"/{self.total}" if self.total else ""
        done = self.n - self._initial
        left = ""
        if self.total and done > 0 and self.n < self.total:
            left = f", about {elapsed / done * (self.total - self.n):.0f} s left"
        postfix = f" ({self._postfix})" if self._postfix else ""
        print(f"[{self.desc or 'progress'}] {self.n}{of} {self.unit}, {elapsed:.0f} s"
              f"{left}{postfix}", file=sys.stderr, flush=True)


def stage_line(stage: str, text: str, start: float | None = None) -> None:
    """One plain progress line on standard error, ``[stage] N s: text`` (N: seconds since
    ``start``, a :func:`time.perf_counter` reading; without it ``[stage] text``), for work
    done in a few long steps (a sampled row, a data set, a time estimate)."""
    since = "" if start is None else f" {time.perf_counter() - start:.0f} s:"
    print(f"[{stage}]{since} {text}", file=sys.stderr, flush=True)


def _terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed
        return False


def progress_bar(total: int | None = None, desc: str = "", unit: str = "it",
                 initial: int = 0, disable: bool | None = False, **options: Any) -> Any:
    """tqdm's bar on a terminal, :class:`PlainProgress` lines elsewhere; ``disable`` True:
    nothing (None: tqdm's rule, nothing off a terminal). ``options`` go to tqdm."""
    from tqdm.auto import tqdm

    if disable or (disable is None and not _terminal()):
        return tqdm(total=total, disable=True)
    if _terminal():
        return tqdm(total=total, desc=desc, unit=unit, initial=initial, **options)
    return PlainProgress(total, desc, unit, initial)
