"""The ``--allow-implausible`` switch: plausibility limits refused by default, accepted with
a warning inside :func:`allow_implausible`.

A plausibility limit is a bound no real input of residualsim's (a tabletop object tossed
by hand or a robot) comes near, but that is not impossible in itself: a recording faster
than 20 m/s (:mod:`residualsim.sim.recordings`), free flight not falling at 9.81 m/s²
(:mod:`residualsim.sim.plausibility`) or sampled below 10 Hz, a URDF link heavier than
1000 kg or an ``<origin>`` 10 m off (:mod:`residualsim.sim.scenes.urdf_check`). Impossible inputs (a negative size, an
inverted joint limit) stay hard errors. This module is the switch's one home, below the
scenes and the recordings that both consult it; worker processes get it from
:class:`residualsim.sim.pool.EngineFactory`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from residualsim.errors import ResidualSimError

__all__ = ["allow_implausible", "implausible_allowed", "refuse_implausible"]

log = logging.getLogger(__name__)

_allowed = False


@contextlib.contextmanager
def allow_implausible(allow: bool = True) -> Iterator[None]:
    """Inside the ``with`` block, implausible recordings, states and URDFs are accepted
    (with a warning) instead of refused (the CLI's ``--allow-implausible``)."""
    global _allowed
    previous, _allowed = _allowed, bool(allow)
    try:
        yield
    finally:
        _allowed = previous


def implausible_allowed() -> bool:
    """True inside :func:`allow_implausible`."""
    return _allowed


def refuse_implausible(message: str, error: type[ResidualSimError],
                       logger: logging.Logger = log) -> None:
    """Raise ``error`` with ``message`` and the hint to pass ``--allow-implausible`` (the
    bare ``message`` kept as the exception's ``reason``, for callers that are not the
    command line); inside :func:`allow_implausible`, log ``message`` as a warning on
    ``logger`` instead."""
    if _allowed:
        logger.warning("%s (accepted: --allow-implausible)", message)
        return
    exc = error(f"{message}; pass --allow-implausible if it is right")
    exc.reason = message
    raise exc
