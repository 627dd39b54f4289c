"""Work shared out as it is done: numbers 0..n-1 taken by whichever local worker asks first.

A belief step splits its particles between the workers; split in advance (every k-th to
worker k), one worker may finish while the other still has a tenth of the step to go
(particles differ: a long slide costs ten times a bounce). :class:`WorkClaims` lets the
workers take the particles as they free up instead, in runs that shrink as the work runs
out (guided self-scheduling: a run is the remaining work over twice the workers, at least
``smallest``), so that they end within about one particle's run of each other.

The counter is a file opened for appending: POSIX writes an ``O_APPEND`` write at the end of
the file and moves the end in one step, so each worker's write of ``m`` bytes claims the
``m`` numbers before the file's new end, which ``lseek`` tells it, and no two writes claim
the same number. No lock and no shared memory to hand to the workers when they start: the
payload carries the file's path. Only processes on one machine share it: a pool on several
machines (Ray) splits its work in advance.
"""

from __future__ import annotations

import math
import os
import tempfile

__all__ = ["WorkClaims"]


class WorkClaims:
    """Numbers ``0..total-1`` handed out once each, in runs (see the module docstring).

    Made by the parent (a context manager: the file goes at the exit), sent to the workers
    in a payload (it pickles as its path), where :meth:`take` gives the next run. A worker
    that dies takes its runs with it: the parent checks which numbers came back."""

    def __init__(self, total: int, n_workers: int, smallest: int = 4) -> None:
        self.total, self.n_workers, self.smallest = int(total), max(1, int(n_workers)), \
            max(1, int(smallest))
        handle, self.path = tempfile.mkstemp(prefix="residualsim-claims-")
        os.close(handle)
        self._fd: int | None = None
        self._seen = 0  # the file's end at this process's last claim

    def take(self) -> range:
        """The next run of numbers for this process (empty once all are taken)."""
        if self._seen >= self.total:
            return range(0)
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        # what is left now (the file's end), not at this process's last claim: sized from
        # that, a worker busy while the others took most of the work claimed a run as if
        # they had taken none (78 particles late in a belief step, train/README.md §10)
        left = self.total - os.fstat(self._fd).st_size
        if left <= 0:
            self._seen = self.total
            return range(0)
        size = max(self.smallest, math.ceil(left / (2 * self.n_workers)))
        os.write(self._fd, b"\0" * size)
        end = os.lseek(self._fd, 0, os.SEEK_CUR)
        self._seen = end
        return range(min(end - size, self.total), min(end, self.total))

    def __getstate__(self) -> dict:
        return {"total": self.total, "n_workers": self.n_workers, "smallest": self.smallest,
                "path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._fd, self._seen = None, 0

    def close(self) -> None:
        """Close this process's handle; the maker's removes the file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> WorkClaims:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
