"""A sampling count's cost bounded before it is paid (issue 67: bound every count).

:func:`bounded_run` runs ``run(count)`` after a short first measurement: ``run`` on
:data:`~residualsim.parallel.PROBE_COUNT` items, timed, the estimate scaled from it and
refused past ``--max-minutes`` by :func:`residualsim.parallel.require_time` (the one rule;
memory by :func:`residualsim.parallel.require_memory`). ``predict``, ``rollout`` and
``uncertainty`` take their bounds from here; :func:`check_rollout_time` is ``rollout``'s
two counts (sampled rollouts, then belief particles per event) estimated together.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from residualsim.parallel import PROBE_COUNT, require_time

__all__ = ["probe_seconds", "bounded_run", "check_rollout_time", "PROBE_PARTICLES"]

#: Particles of one event's belief step the belief steps' time is estimated from (a step
#: has a fixed part, the mixture's fit, that two particles would multiply by 500).
PROBE_PARTICLES = 50


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


def check_rollout_time(rollout: Callable[[int], Any], beliefs: Callable[[int], Any] | None,
                       samples: int, particles: int, events: int, *,
                       max_minutes: float | None,
                       progress: Callable[[float], None] | None = None) -> float:
    """``rollout``'s estimated seconds (returned, and given to ``progress``), refused past
    ``max_minutes`` naming ``--samples``, ``--particles`` and ``--events``: ``rollout(n)`` (n
    sampled rollouts) timed on :data:`~residualsim.parallel.PROBE_COUNT` and scaled to
    ``samples``; ``beliefs(n)`` (one event's belief step of n particles; None: belief steps
    whose cost does not grow with the particles, conjugate's, not estimated) timed on
    :data:`PROBE_PARTICLES` and scaled to ``particles`` x ``events`` (an upper bound: later
    events follow only the particles still in flight). Each is called once untimed first."""
    rollout(PROBE_COUNT)  # warm-up, untimed: each worker's first call pays a one-off
    if beliefs is not None:  # start (the first belief step ~1.9 s, then 50 particles 0.04 s)
        beliefs(PROBE_COUNT)
    rollout_s = probe_seconds(rollout) / PROBE_COUNT * samples if samples > PROBE_COUNT else 0.0
    belief_s = 0.0
    measured = f"{PROBE_COUNT} rollouts took {rollout_s * PROBE_COUNT / samples:.3g} s" \
        if rollout_s else "the rollouts not measured"
    if beliefs is not None and particles > PROBE_PARTICLES:
        probe = probe_seconds(beliefs, PROBE_PARTICLES)
        belief_s = probe / PROBE_PARTICLES * particles * events
        measured += f", one event of {PROBE_PARTICLES} particles {probe:.3g} s"
    estimate = rollout_s + belief_s
    require_time(estimate, max_minutes, f"--samples {samples} with --particles {particles} x "
                 f"--events {events}", measured, "lower --samples, --particles or --events, "
                 "or shorten --horizon")
    if progress is not None:
        progress(estimate)
    return estimate
