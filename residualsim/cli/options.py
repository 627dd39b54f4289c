"""What every command shares: the parser and help formatter, the scene, seed, worker, split
and recording options, the final JSON line; the value types live in ``argtypes`` (re-exported
here)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from residualsim.cli.argtypes import (bounds_option, count, float_list, kappa_option,
                                      mapping_option, nonnegative_float, rate_hz, seconds,
                                      seed, split_fractions, state_option, worker_count)
from residualsim.atomic import remove_empty  # re-exported: the commands' cleanup
from residualsim.data.splits import SPLITS
from residualsim.parallel import BACKENDS

__all__ = ["SPLITS", "HelpFormatter", "Parser", "add_scene", "add_seed", "count", "float_list",
           "nonnegative_float", "state_option", "kappa_option", "mapping_option",
           "bounds_option", "add_workers", "json_line",
           "add_split_options", "add_selection", "split_options", "add_force",
           "add_allow_implausible", "add_recording_options", "missing_output_folders",
           "remove_empty", "interrupted_note", "add_max_minutes"]


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Each option's help ends with its default, unless the text already states one."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (not action.option_strings or "default" in text or default is None
                or default is False or default == argparse.SUPPRESS):
            return text
        default = ",".join(map(str, default)) if isinstance(default, (list, tuple)) else default
        return f"{text} (default {str(default).replace('%', '%%')})"


class Parser(argparse.ArgumentParser):
    """An argument parser whose sub-commands share :class:`HelpFormatter`."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


#: ``--scene``: where the object is read from.
SCENE_HELP = ("the object: a built-in scene (cube, planar-ellipse, planar-dice) or a scene "
              "file (.toml) or .urdf, read from that path relative to the working directory "
              "(default cube: the ContactNets cube, side 0.1048 m)")


def add_scene(sub: argparse.ArgumentParser, **kwargs) -> None:
    """``--scene`` with the help that says where it is read from and its default."""
    sub.add_argument("--scene", default="cube", help=SCENE_HELP, **kwargs)


def add_seed(sub: argparse.ArgumentParser, what: str = "") -> None:
    """``--seed``: the seed of every random draw (same result for any worker count)."""
    sub.add_argument("--seed", type=seed, default=0,
                     help=(what or "random seed") + "; same seed, same result for any "
                     "worker count (default 0)")


def add_max_minutes(sub: argparse.ArgumentParser, what: str) -> None:
    """``--max-minutes``: the longest ``what`` is estimated to take (from a short first
    measurement) before it is refused (issue 67; the rule: parallel.require_time)."""
    sub.add_argument("--max-minutes", type=nonnegative_float, default=60.0, help="refuse when "
                     f"{what} is estimated, from a short first measurement, to take longer "
                     "than this many minutes (default 60; 0: no limit)")


def json_line(record: dict) -> None:
    """Print ``record`` as one JSON line (non-finite floats as null or text), for scripts."""
    def clean(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None if math.isnan(value) else str(value)
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        return value
    print(json.dumps(clean(record), sort_keys=False))


def add_allow_implausible(sub: argparse.ArgumentParser) -> None:
    """``--allow-implausible``: accept recordings, states and URDFs that fail the plausibility
    checks (:mod:`residualsim.sim.implausible` lists them) with a warning instead of
    refusing them; with the options of how recordings are read
    (:func:`add_recording_options`), as every command that takes it reads recordings."""
    sub.add_argument("--allow-implausible", action="store_true",
                     help="accept recordings whose free flight does not fall at 9.81 m/s² "
                          "along -z (units, up axis), whose quaternions look like the other "
                          "order, sampled below 10 Hz, faster than 20 m/s between samples "
                          "(or 500 rad/s), hand-given states under or off the table, more "
                          "than 10 m above it or that fast, joint angles that look like "
                          "degrees (beyond a joint's limits; a continuous joint's: when read "
                          "as degrees the flight falls at g), and URDF links above 1000 kg or "
                          "parts 10 m off, with a warning (default: refuse them)")
    add_recording_options(sub)


def add_recording_options(sub: argparse.ArgumentParser) -> None:
    """``--rate-hz`` and ``--quaternion-order``: how CSV recordings are read
    (:mod:`residualsim.data.read_options`; the CLI enters them around the command)."""
    sub.add_argument("--rate-hz", type=rate_hz, metavar="HZ",
                     help="resample CSV recordings to this rate (default: a model's or "
                          "calibration's rate where one is given, else the folder's most "
                          "common rate; uniform files at that rate are read as they are)")
    sub.add_argument("--quaternion-order", choices=("wxyz", "xyzw"), default="wxyz",
                     help="order of the VALUES in the columns qw,qx,qy,qz: xyzw for exports "
                          "that write x-y-z-w under a w-x-y-z header (default wxyz; columns "
                          "are otherwise read by name)")


def add_envelope_options(sub: argparse.ArgumentParser, passed_on: bool = False) -> None:
    """``--small-sample``, ``--covariance`` and ``--bootstrap``: how calibrate widens its
    envelope (:mod:`residualsim.sysid.calibrated`, :mod:`residualsim.sysid.bootstrap`);
    ``passed_on``: check-calibration's, passed on to calibrate, each defaulting to its own."""
    def option(flag: str, default, text: str, **kwargs) -> None:
        own = f"calibrate's {flag}: " if passed_on else ""
        text = text.replace("(default ", "(default calibrate's, " if passed_on else "(default ")
        sub.add_argument(flag, default=None if passed_on else default, help=own + text,
                         **kwargs)

    option("--small-sample", None, "mh, --weighting calibrated only: few-recordings widening "
           "(default cr1t: t, recordings - d dof)", choices=("cr1t", "none"))
    option("--covariance", None, "the sandwich's or calibrated MH's (default bootstrap for MH "
           "on trajectories, noise estimated, else sandwich; bootstrap: --bootstrap refits of "
           "data simulated at the estimate with the recordings' pose noise, seeing the first "
           "poses' error the sandwich misses; MH keeps the sandwich's where wider, as it sees "
           "model mismatch: train/README.md section 20.5)",
           choices=("sandwich", "bootstrap"))
    option("--bootstrap", None, "--covariance bootstrap: refits, each a sandwich fit (default "
           "10)", type=count(2), metavar="B")


def add_force(sub: argparse.ArgumentParser) -> None:
    """``--force``: replace an existing result file (otherwise refused before any work)."""
    sub.add_argument("--force", action="store_true",
                     help="replace an existing output file (default: refuse)")


def add_workers(sub: argparse.ArgumentParser) -> None:
    """``--workers``, ``--backend`` and ``--address`` (see :func:`residualsim.parallel_backend`)."""
    sub.add_argument("--workers", type=worker_count, default=1,
                     help="workers: processes, or Ray actors with --backend ray (default 1)")
    sub.add_argument("--backend", choices=BACKENDS, default="local",
                     help="where workers run: local processes or Ray actors (default local)")
    sub.add_argument("--address", help="Ray cluster to join with --backend ray: auto or "
                     "HOST:PORT (default: start a local Ray)")
    sub.add_argument("--task-timeout", type=seconds, metavar="SECONDS",
                     help="a worker that does not answer within this many seconds is taken "
                          "for hung, killed and its shard re-run (default: no limit)")


def add_split_options(sub: argparse.ArgumentParser) -> None:
    """``--split-fractions`` and ``--split-ids``: how the recordings are split."""
    group = sub.add_mutually_exclusive_group()
    group.add_argument("--split-fractions", type=split_fractions, metavar="TRAIN,VAL,TEST",
                       help="shares of the hash split (default 0.7,0.15,0.15)")
    group.add_argument("--split-ids", metavar="FILE",
                       help='explicit split: a JSON file {"train": [...], "validation": '
                            '[...], "test": [...]} of recording ids (default: the hash '
                            'split of --split-fractions)')


def add_selection(sub: argparse.ArgumentParser) -> None:
    """``--split``, ``--limit`` and the split options: which recordings a command runs on."""
    sub.add_argument("--split", choices=SPLITS, default="all",
                     help="which split of the recordings (default all)")
    sub.add_argument("--limit", type=count(1),
                     help="only the first N recordings of the split (default: all)")
    add_split_options(sub)


def split_options(args: argparse.Namespace) -> dict:
    """``fractions`` and ``lists`` keyword arguments from the split options."""
    from residualsim.data.splits import load_split_ids

    lists = load_split_ids(args.split_ids) if getattr(args, "split_ids", None) else None
    return {"fractions": getattr(args, "split_fractions", None), "lists": lists}


def missing_output_folders(args: argparse.Namespace) -> list[Path]:
    """The output paths (``--out``, ``--plot``, ``--export-urdf``) and their ancestors that
    do not exist yet, deepest first: a refused or interrupted command removes those it left
    empty."""
    missing: list[Path] = []
    for flag in ("out", "plot", "export_urdf"):
        value = getattr(args, flag, None)
        if not value:
            continue
        path = Path(value)
        while not (path.exists() or path.is_symlink()) and path != path.parent:
            missing.append(path)
            path = path.parent
    return sorted(set(missing), key=lambda p: len(p.parts), reverse=True)


def interrupted_note(args: argparse.Namespace, created: list[Path]) -> str:
    """After Ctrl-C: remove the output folders the command created and left empty (issue 51:
    ``calibrate`` interrupted before its first checkpoint left an empty ``--out``), and say
    what is left: nothing, or an ``--out`` holding what was saved and, for a command with
    ``--resume``, that the same command with it continues from there."""
    removed = remove_empty(created)
    out = getattr(args, "out", None)
    if out and Path(out) in removed:
        return f" before anything was saved: {out} removed (it was empty)"
    if out and Path(out) in created and not Path(out).exists():
        return f" before anything was saved in {out}"
    if out and Path(out).is_dir() and any(Path(out).iterdir()) and hasattr(args, "resume"):
        return (f"; {out} keeps what was saved up to the last checkpoint: the same command "
                "with --resume continues from there")
    return ""
