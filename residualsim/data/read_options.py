"""How recordings are read, set once for a whole command: ``--rate-hz`` and
``--quaternion-order`` (the CLI enters :func:`reading_options` around every command).

* ``rate_hz``: resample every CSV recording to this rate (Hz). It wins over a model's or a
  calibration's rate and over a folder's most common rate (:mod:`residualsim.data.timebase`).
* ``quaternion_order``: ``"wxyz"`` (default) or ``"xyzw"``: the values in the columns named
  ``qw, qx, qy, qz`` are x, y, z, w (an export that writes x-y-z-w under a w-x-y-z
  header). Named columns are always read by name; this reinterprets the four values.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator
from dataclasses import dataclass

from residualsim.errors import ParameterError

__all__ = ["ReadOptions", "reading_options", "current_reading_options", "QUATERNION_ORDERS"]

#: The accepted quaternion orders of the four ``q*`` columns' values.
QUATERNION_ORDERS = ("wxyz", "xyzw")


@dataclass(frozen=True)
class ReadOptions:
    """``rate_hz`` (None: no explicit rate) and ``quaternion_order`` (see the module)."""

    rate_hz: float | None = None
    quaternion_order: str = "wxyz"

    def __post_init__(self) -> None:
        if self.rate_hz is not None and not (math.isfinite(self.rate_hz) and self.rate_hz > 0):
            raise ParameterError(f"--rate-hz must be a finite number > 0, got {self.rate_hz}")
        if self.quaternion_order not in QUATERNION_ORDERS:
            raise ParameterError(f"--quaternion-order must be one of "
                                 f"{', '.join(QUATERNION_ORDERS)}, got "
                                 f"{self.quaternion_order!r}")


_current: contextvars.ContextVar[ReadOptions] = contextvars.ContextVar(
    "residualsim_reading_options", default=ReadOptions())


@contextlib.contextmanager
def reading_options(rate_hz: float | None = None,
                    quaternion_order: str = "wxyz") -> Iterator[ReadOptions]:
    """Inside the ``with`` block, recordings are read with these options."""
    token = _current.set(ReadOptions(rate_hz, quaternion_order))
    try:
        yield _current.get()
    finally:
        _current.reset(token)


def current_reading_options() -> ReadOptions:
    """The options in force (defaults outside :func:`reading_options`)."""
    return _current.get()
