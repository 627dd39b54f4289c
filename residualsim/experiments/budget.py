"""A sampling count's cost bounded before it is paid (issue 67: bound every count).

:func:`bounded_run` runs ``run(count)`` after a short first measurement: ``run`` on
:data:`~residualsim.parallel.PROBE_COUNT` items, timed, the estimate scaled from it and
refused past ``--max-minutes`` by :func:`residualsim.parallel.require_time` (the one rule;
memory by :func:`residualsim.parallel.require_memory`). ``predict``, ``rollout`` and
``uncertainty`` take their bounds from here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from residualsim.parallel import PROBE_COUNT, require_time

__all__ = ["probe_seconds", "bounded_run"]


def probe_seconds(run: Callable[[int], Any], count: int = PROBE_COUNT) -> float:
    """Seconds ``run(count)`` took (its result dropped)."""
    start = time.perf_counter()
    run(count)
    return time.perf_counter() - start


def bounded_run(run: Callable[[int], Any], count: int, *, option: str, of: str,
                max_minutes: float | None, remedy: str,
                progress: Callable[[float], None] | None = None) -> Any:
    """``run(count)``, refused first (ParameterError naming ``option count``, the estimate
    and the measurement it rests on, ``remedy``) when ``run(PROBE_COUNT)``'s time scaled to
    ``count`` exceeds ``max_minutes`` (None or 0: no limit). ``of`` says what each probe item
    covers ("of the 3 recordings"). Counts at most :data:`PROBE_COUNT` run unmeasured (the
    measurement would cost as much), and so does any count with neither a limit nor
    ``progress`` (a library call: nothing to check or say). ``progress`` gets the estimate
    in seconds."""
    if count > PROBE_COUNT and (max_minutes or progress is not None):
        probe = probe_seconds(run)
        estimate = probe / PROBE_COUNT * count  # an upper bound: workers start in the probe
        require_time(estimate, max_minutes, f"{option} {count}",
                     f"{PROBE_COUNT} {of} took {probe:.3g} s", remedy)
        if progress is not None:
            progress(estimate)
    return run(count)
