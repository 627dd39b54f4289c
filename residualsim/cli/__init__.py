"""residualsim: residual contact learning for PyBullet (calibrate, train, predict, beliefs).

The ``residualsim`` command: thin wrappers over the library, one module per command group.
Every long command ends by printing one JSON line with its figures, for scripts. Errors
that residualsim raises on purpose print ``residualsim: error: ...`` and exit with 2.
The work itself lives in the library (mostly :mod:`residualsim.experiments.jobs`); the
modules here parse arguments and print.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys

from residualsim.cli import (bench, belief, calibrate, data, demo, evaluate, residual,
                             simulate)
from residualsim.errors import ParameterError, ResidualSimError
from residualsim.parallel import parallel_backend

__all__ = ["main", "build_parser"]

#: The command groups, in the order ``residualsim --help`` lists them.
GROUPS = (demo, simulate, data, calibrate, residual, belief, evaluate, bench)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``residualsim`` command."""
    from residualsim import __version__

    parser = argparse.ArgumentParser(prog="residualsim", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"residualsim {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress")
    commands = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.register(commands)
    return parser


def _timeout(args: argparse.Namespace) -> dict:
    timeout = getattr(args, "task_timeout", None)
    return {} if timeout is None else {"task_timeout_s": timeout}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``residualsim`` command; returns the exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        if getattr(args, "address", None) and args.backend != "ray":
            raise ParameterError("--address needs --backend ray")
        implausible = contextlib.nullcontext()
        if getattr(args, "allow_implausible", False):
            from residualsim.sim.recordings import allow_implausible

            implausible = allow_implausible()
        from residualsim.data.read_options import reading_options

        with parallel_backend(getattr(args, "backend", "local"), getattr(args, "address", None),
                              **_timeout(args)), implausible, reading_options(
                getattr(args, "rate_hz", None), getattr(args, "quaternion_order", "wxyz")):
            args.run(args)
    except ResidualSimError as exc:
        print(f"residualsim: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("residualsim: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
