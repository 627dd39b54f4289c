"""residualsim: residual contact learning for PyBullet (calibrate, train, predict, beliefs).

The ``residualsim`` command: thin wrappers over the library (mostly
:mod:`residualsim.experiments.jobs`), one module per command group, that parse and print.
Standard output carries the result only (a table where promised, then one JSON line of
figures); progress, warnings and PyBullet's own prints go to standard error. Errors that
residualsim raises on purpose print ``residualsim: error: ...`` and exit with 2.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading

from residualsim.cli import (bench, belief, calibrate, check_calibration, data, demo, evaluate,
                             ground, report, residual, simulate, spread, twin)
from residualsim.atomic import check_outside_inputs
from residualsim.cli.options import (Parser, interrupted_note, missing_output_folders,
                                     remove_empty)
from residualsim.cli.scene_option import resolve_scene, scene_argument
from residualsim.errors import ParameterError, ResidualSimError
from residualsim.parallel import parallel_backend

__all__ = ["main", "build_parser"]

#: The command groups, in the order ``residualsim --help`` lists them.
GROUPS = (demo, twin, simulate, data, calibrate, check_calibration, residual, spread, ground,
          belief, evaluate, report, bench)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``residualsim`` command."""
    from residualsim import __version__

    parser = Parser(prog="residualsim", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"residualsim {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress")
    commands = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.register(commands)
    return parser


def _timeout(args: argparse.Namespace) -> dict:
    timeout = getattr(args, "task_timeout", None)
    return {} if timeout is None else {"task_timeout_s": timeout}


def _interrupt_once(signum: int, frame: object) -> None:
    """SIGINT handler: the first Ctrl-C stops the work as KeyboardInterrupt (checkpoints stay
    as last written, atomically); a second one, while that unwinds (workers shutting down),
    ends the process at once with one line and no traceback."""
    def again(signum: int, frame: object) -> None:
        os.write(2, b"residualsim: interrupted again, exiting now\n")
        os._exit(130)

    signal.signal(signal.SIGINT, again)
    raise KeyboardInterrupt


@contextlib.contextmanager
def results_only_on_stdout():
    """Point file descriptor 1 at standard error while the command runs (PyBullet's C-level
    warnings, spawned workers' output) and keep Python's ``sys.stdout``, where the command
    prints its result, on the real standard output."""
    try:
        sys.stdout.flush()
        result_fd = os.dup(1)
    except (OSError, ValueError, AttributeError):  # no usable standard output: leave it be
        yield
        return
    original = sys.stdout
    sys.stdout = open(result_fd, "w", buffering=1, encoding=original.encoding or "utf-8",
                      errors=getattr(original, "errors", None) or "strict")
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        if "pybullet" in sys.modules:
            from residualsim.sim.bullet import flush_c_stdio

            flush_c_stdio()  # what C code printed goes out to standard error, not later to 1
        os.dup2(result_fd, 1)
        sys.stdout.close()
        sys.stdout = original


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``residualsim`` command; returns the exit code.

    Run as the command (``argv`` None) standard output carries the result only, see
    :func:`results_only_on_stdout`; a caller passing ``argv`` keeps its own streams.
    """
    if argv is None:
        with results_only_on_stdout():
            return _main(None)
    return _main(argv)


#: ``RESIDUALSIM_TINY=1``: every budget capped, for smoke runs (the README test runs the
#: README's commands so): option -> (cap, value set when the option is absent or None).
TINY_CAPS = {"samples": (4, None), "burn_in": (2, None), "budget": (24, None),
             "particles": (20, None), "validate_every": (8, None), "chains": (2, None),
             "max_trajectories": (3, 3), "max_tosses": (3, 3), "initial_draws": (0, 0),
             "tosses": (3, None), "figures": (2, None), "workers": (1, None)}


def _apply_tiny(args: argparse.Namespace) -> None:
    """Cap the budgets of ``args`` (:data:`TINY_CAPS`) when ``RESIDUALSIM_TINY`` is set."""
    if os.environ.get("RESIDUALSIM_TINY", "") in ("", "0") or args.command == "data":
        return  # data synthesize's --samples is a toss's length, not a budget
    for name, (cap, absent) in TINY_CAPS.items():
        if not hasattr(args, name):
            continue
        value = getattr(args, name)
        if value is None:
            setattr(args, name, absent)
        elif isinstance(value, int) and not isinstance(value, bool):
            setattr(args, name, min(value, cap))
    print("residualsim: RESIDUALSIM_TINY is set: budgets capped (smoke run)", file=sys.stderr)


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    _apply_tiny(args)
    installed = (threading.current_thread() is threading.main_thread()
                 and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    if installed:
        signal.signal(signal.SIGINT, _interrupt_once)
    try:
        return _run(args)
    finally:  # called in-process (tests, scripts): leave Python's own handler behind
        if installed and signal.getsignal(signal.SIGINT) is _interrupt_once:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def _check_outputs_outside_inputs(args: argparse.Namespace) -> None:
    """No output (``--out``, ``--plot``, ``--export-urdf``) may be or lie inside the ``--data``
    folder, be the scene file, or be (or contain) its folder (checked before any work)."""
    inputs = {}
    if isinstance(getattr(args, "data", None), str):
        inputs["--data folder"] = (args.data, True)
    scene = getattr(args, "scene", None)
    if isinstance(scene, str) and scene.endswith((".toml", ".urdf")) and os.path.isfile(scene):
        inputs["scene file"] = (scene, False)
        inputs["scene file's folder"] = (os.path.dirname(os.path.abspath(scene)), False)
    spec = getattr(scene_argument(args), "spec", None)
    if isinstance(scene, str) and scene.endswith(".toml") and spec is not None:
        inputs["scene's own URDF"] = (spec.urdf, False)
    for flag in ("out", "plot", "export_urdf"):
        target = getattr(args, flag, None)
        if isinstance(target, (str, os.PathLike)) and inputs:
            check_outside_inputs(target, inputs, "--" + flag.replace("_", "-"))


def _run(args: argparse.Namespace) -> int:
    """Run the parsed command: exit code 0, 2 for a ResidualSimError (one line on stderr),
    130 when interrupted."""
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    created = missing_output_folders(args)
    try:
        if getattr(args, "address", None) and args.backend != "ray":
            raise ParameterError("--address needs --backend ray")
        resolve_scene(args)
        _check_outputs_outside_inputs(args)
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
        remove_empty(created)
        print(f"residualsim: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"residualsim: interrupted{interrupted_note(args, created)}", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
