"""Error types raised by residualsim.

Every error the package raises on purpose derives from :class:`ResidualSimError`, and
also from the matching built-in exception, so ``except ValueError`` keeps working for
callers that do not know about residualsim.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "ResidualSimError",
    "DataError",
    "ParameterError",
    "SceneError",
    "PredictionError",
    "SolverError",
    "run_script",
]


class ResidualSimError(Exception):
    """Base class of every error residualsim raises deliberately."""


class DataError(ResidualSimError, ValueError):
    """A recording or data set is missing, truncated or malformed.

    The message always names the offending file and the problem, for example
    ``tosses/12.pt: column 3:7 (quaternion) has norm 0.41 at sample 17, expected 1``.
    """


class ParameterError(ResidualSimError, ValueError):
    """An engine parameter is unknown, not a finite number, or outside its valid range."""


class SceneError(ResidualSimError, ValueError):
    """An unknown scene, a missing or invalid URDF, or a state of the wrong layout."""


class PredictionError(ResidualSimError, ValueError):
    """A prediction file does not match the recorded data it is scored against."""


class SolverError(ResidualSimError, RuntimeError):
    """A numerical solver (IPOPT, in the MPEC identification) did not return a solution.

    ``status`` holds the solver's own return status (e.g. ``Infeasible_Problem_Detected``),
    which the message names too; ``solves`` the record of the solves run so far.
    """

    def __init__(self, message: str, status: str = "", solves: list | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.solves = list(solves or [])


def run_script(main: Callable[[], int | None]) -> None:
    """Run a script's ``main`` and exit with its status; a :class:`ResidualSimError` (bad
    data, parameters, scene) becomes one line on stderr naming the script and exit status 2,
    as the ``residualsim`` command does, instead of a traceback."""
    try:
        status = main()
    except ResidualSimError as exc:
        print(f"{Path(sys.argv[0]).name}: error: {exc}", file=sys.stderr)
        sys.exit(2)
    sys.exit(status or 0)
