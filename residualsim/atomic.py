"""File I/O in one place: all-or-nothing writes of output files, checked JSON reads.

:func:`atomic_open` yields a binary file in the destination's directory; on success the
data is flushed to disk and the file renamed over the destination (``os.replace``), on any
error it is removed. Readers never see a half-written file, and a failed write leaves an
existing file untouched. Files get the usual umask permissions; missing parent directories
are created (like ``mkdir -p``) when the file is written, not before.

:func:`check_output` is the one check every writing command runs on its output path before
any computation (see its docstring for the conventions).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from residualsim.errors import DataError, ParameterError

__all__ = ["atomic_open", "atomic_write_text", "read_json", "save_png", "check_output",
           "check_plot_path", "make_parent", "OUTPUT_MARKERS", "RUN_FILE", "held_run",
           "describe_run", "claim_output", "resume_note", "remove_empty"]


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str],
                check: Callable[[Path], None] | None = None) -> Iterator[BinaryIO]:
    """Open ``path`` for binary writing, atomically (missing parent directories are made);
    ``check(temporary)``, when given, is called with the complete file, beside ``path``,
    before it replaces ``path``: an exception from it removes the file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        if check is not None:
            check(temporary)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_open(path) as handle:
        handle.write(text.encode("utf-8"))


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"duplicate key {key!r}")
        seen[key] = value
    return seen


def _int(text: str) -> int:
    """A JSON integer; ValueError past Python's 4300 digits (its own message names a
    setting of the interpreter)."""
    if len(text.lstrip("-")) > 4300:
        raise ValueError(f"not readable JSON (an integer of {len(text)} digits)")
    return int(text)


def read_json(path: str | os.PathLike[str], missing: str | None = None,
              error: type[Exception] = DataError, unique_keys: bool = False) -> Any:
    """Parse a JSON file; ``error`` names the file when it is missing (message ``missing``,
    default "<path>: file not found"), not a regular file (a FIFO or device would block or
    read as empty) or not readable JSON (nested too deeply for the reader, an integer of
    more than 4300 digits; with ``unique_keys``, also a duplicate key in an object, which
    plain JSON parsing resolves silently: the last wins)."""
    path = Path(path)
    try:
        if path.exists() and not path.is_file():
            raise error(f"{path}: not a regular file")
        text = path.read_text()
        hook = _unique_keys if unique_keys else None
        try:
            return json.loads(text, object_pairs_hook=hook, parse_int=_int)
        except ValueError as exc:
            if not isinstance(exc, json.JSONDecodeError):  # a duplicate key, a huge integer
                raise error(f"{path}: {exc}") from None
            raise
        except RecursionError:  # json nests a call per array or object
            raise error(f"{path}: not readable JSON (arrays or objects nested too deeply)"
                        ) from None
    except FileNotFoundError:
        raise error(missing or f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(f"{path}: not readable JSON ({exc})") from None


def save_png(figure: Any, path: str | os.PathLike[str]) -> None:
    """Write a matplotlib ``figure`` to ``path`` as PNG (110 dpi), atomically, and close it."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    with atomic_open(path) as handle:
        handle.write(buffer.getvalue())


#: Files that mark a directory as the output of one command (``residualsim <command>``): no
#: other command writes into such a directory (:func:`check_output`).
OUTPUT_MARKERS: dict[str, tuple[str, ...]] = {
    "calibrate": ("summary.json", "posterior.npz", "nevergrad-checkpoint.npz"),
    "train": ("model.json", "policy.npz"),
    "evaluate": ("curve.jsonl", "curve-config.json", "curve-summary.json"),
    "data synthesize": ("synthetic.json",),
    "data import": ("import.json",),
}
#: A command's finished result inside its own output directory.
_RESULTS = {"calibrate": "summary.json", "train": "model.json",
            "data synthesize": "synthetic.json"}


#: The file naming the run an output directory holds (``command``, ``method``, ``params``,
#: ``scene``): written when the run starts writing (:func:`claim_output`) and compared by
#: :func:`check_output`, so that no other run (another method, parameter space, scene or
#: command) replaces or mixes with the one there.
RUN_FILE = "run.json"
#: What tells two runs apart; a key that one side lacks (a folder of an earlier version) is
#: not compared.
_IDENTITY = ("command", "method", "params", "scene")
#: Files of a calibrate run written before run.json existed, by the method that writes them.
_LEGACY_FILES = {"posterior.npz": "mh", "nevergrad-checkpoint.npz": "nevergrad",
                 "sandwich-checkpoint.json": "sandwich"}


def _run_file(directory: Path) -> dict | None:
    """The parsed run.json of ``directory`` (None without one)."""
    path = directory / RUN_FILE
    if not path.is_file():
        return None
    run = read_json(path, error=ParameterError)
    if not isinstance(run, dict):
        raise ParameterError(f"{path}: not a run description (a JSON object expected)")
    return run


def _legacy_run(directory: Path, names: set[str]) -> dict | None:
    """What a calibrate folder of an earlier version (no run.json) holds: its summary's
    method, calibrated names and scene, or the method its checkpoints belong to."""
    summary = None
    if "summary.json" in names:
        with contextlib.suppress(OSError, ValueError, RecursionError):
            summary = json.loads((directory / "summary.json").read_text())
    if isinstance(summary, dict) and "method" in summary:
        scene = summary.get("scene")
        if isinstance(scene, str) and scene.endswith((".toml", ".urdf")):
            scene = os.path.abspath(path_from_file(scene, directory))
        params = summary.get("calibrated")
        return {"command": "calibrate", "method": summary["method"],
                "params": params if isinstance(params, list) else None, "scene": scene,
                "from": "summary.json", "finished": True}
    for name, method in _LEGACY_FILES.items():
        if name in names:
            return {"command": "calibrate", "method": method, "from": name, "finished": False}
    return None


def held_run(directory: str | os.PathLike[str]) -> dict | None:
    """The run ``directory`` holds, as its :data:`RUN_FILE` describes it plus ``from`` (the
    file that says) and ``finished`` (its result is there), or for a calibrate folder of an
    earlier version what its summary or checkpoints say; None when it holds none (a run.json
    alone: a run stopped before it wrote anything)."""
    directory = Path(directory)
    if not directory.is_dir():
        return None
    names = {entry.name for entry in directory.iterdir()}
    run = _run_file(directory)
    if run is None:
        return _legacy_run(directory, names)
    if names <= {RUN_FILE}:
        return None
    result = _RESULTS.get(str(run.get("command")))
    finished = bool(result) and result in names
    return {**run, "from": result if finished else RUN_FILE, "finished": finished}


def _shown(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        items = [str(v) for v in value]
        return ",".join(items[:6]) + (f",... ({len(items)} in all)" if len(items) > 6 else "")
    return str(value)


def describe_run(run: Mapping[str, Any]) -> str:
    """One line naming a run (:func:`held_run`): "a finished residualsim calibrate run
    (method mh, params lateral_friction,restitution, scene cube; summary.json)"."""
    state = "finished" if run.get("finished") else "unfinished"
    details = ", ".join(f"{key} {_shown(run[key])}" for key in _IDENTITY[1:]
                        if run.get(key) not in (None, "", []))
    where = f"; {run['from']}" if run.get("from") else ""
    return f"a{'n' if state[0] == 'u' else ''} {state} residualsim {run.get('command', '?')} " \
           f"run ({details}{where})"


def _same(key: str, value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value)
    if key == "scene" and isinstance(value, str) and value.endswith((".toml", ".urdf")):
        return os.path.realpath(value)
    return value


def _check_run(path: Path, run: Mapping[str, Any], resume: bool, flag: str) -> None:
    """Refuse ``path`` when it holds another run than ``run``, or this one without
    ``resume``."""
    held = held_run(path)
    if held is None:
        return
    differs = [key for key in _IDENTITY if held.get(key) is not None
               and run.get(key) is not None and _same(key, held[key]) != _same(key, run[key])]
    if differs:
        this = ", ".join(f"{key} {_shown(run[key])}" for key in differs)
        raise ParameterError(f"{flag} {path}: holds {describe_run(held)}, not this run "
                             f"({this}); choose another directory")
    if not resume:
        raise ParameterError(f"{flag} {path}: already holds this run, {describe_run(held)}:"
                             " --resume continues it from its checkpoints, or choose another "
                             "directory")


def claim_output(path: str | os.PathLike[str], run: Mapping[str, Any], *,
                 resume: bool = False, flag: str = "--out") -> Path:
    """Where a run starts writing: check ``path`` for ``run`` (:func:`check_output`), make
    the directory and record the run there (:data:`RUN_FILE`, kept when resuming)."""
    path = check_output(path, kind="dir", command=str(run["command"]), run=run,
                        resume=resume, flag=flag)
    path.mkdir(parents=True, exist_ok=True)
    if not (path / RUN_FILE).exists():
        atomic_write_text(path / RUN_FILE, json.dumps(dict(run), indent=1) + "\n")
    return path


def remove_empty(folders: list[Path]) -> list[Path]:
    """Remove each of ``folders`` (deepest first) that is now an empty directory: what a
    refused command created on its way (``calibrate --out a/b/c`` refused after making
    a/b/c; a :data:`RUN_FILE` alone counts as empty: a run refused before it wrote
    anything); a folder holding anything else is kept. Returns the folders removed."""
    removed = []
    for folder in folders:
        try:
            if folder.is_dir() and not folder.is_symlink():
                if {entry.name for entry in folder.iterdir()} == {RUN_FILE}:
                    (folder / RUN_FILE).unlink()
                if not any(folder.iterdir()):
                    folder.rmdir()
                    removed.append(folder)
        except OSError:
            pass
    return removed


def resume_note(path: str | os.PathLike[str]) -> str:
    """What ``--resume`` continues in ``path``: the run there, or nothing yet."""
    held = held_run(path)
    if held is None:
        return f"--resume: {path} holds no run yet: starting a new one"
    return f"--resume: continuing {describe_run(held)} in {path}"


def make_parent(path: str | os.PathLike[str]) -> Path:
    """Create the missing parent directories of ``path`` (after :func:`check_output`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _owners(directory: Path) -> dict[str, str]:
    """{command: marker file} of the commands whose output ``directory`` holds."""
    found = {}
    run = held_run(directory) if (directory / RUN_FILE).is_file() else None
    if run is not None and run.get("command"):
        found[str(run["command"])] = RUN_FILE
    for command, names in OUTPUT_MARKERS.items():
        for name in names:
            if (directory / name).exists():
                found[command] = name
                break
    return found


def _check_writable(directory: Path, path: Path, flag: str) -> None:
    problem = None
    if not os.access(directory, os.W_OK | os.X_OK):
        problem = "permission denied"
    else:
        try:  # os.access does not know read-only file systems (or root's limits)
            with tempfile.TemporaryFile(dir=directory):
                pass
        except OSError as exc:
            problem = exc.strerror or str(exc)
    if problem:
        where = "" if directory == path else f" (in {directory})"
        raise ParameterError(f"{flag} {path}: cannot write here{where}: {problem}")


def check_output(path: str | os.PathLike[str], *, kind: str = "file", command: str = "",
                 flag: str = "--out", force: bool = False, resume: bool = False,
                 fresh: bool = False, run: Mapping[str, Any] | None = None,
                 replace_hint: str = "pass --force to replace it") -> Path:
    """Check an output path before any computation; return it as a :class:`Path`.

    ``replace_hint``: what the refusal of an existing file tells the user to do (a command
    without ``--force`` says what instead).

    The conventions every ``residualsim`` command follows (ParameterError naming the path
    and the problem otherwise):

    * a missing parent directory is fine: it is created (``mkdir -p``) when the output is
      written; an existing ancestor that is a file, or a place that cannot be written (no
      permission, a read-only file system), is an error;
    * ``kind="file"`` (a result file: ``.npz``, ``.png``): an existing directory or
      non-regular file (a FIFO, ``/dev/null``) there is an error, and an existing file is
      replaced only with ``force`` (``--force``); another command's marker file
      (:data:`OUTPUT_MARKERS`) is never replaced;
    * ``kind="dir"`` (an output directory of ``command``): an existing file there is an
      error; a directory holding another command's output (its summary, model or
      checkpoint files, :data:`OUTPUT_MARKERS`) is refused, even with ``force``; with
      ``fresh`` (the directory is replaced as a whole) an existing one is refused unless
      ``force``, and with ``force`` only when empty or holding ``command``'s own output;
      without ``fresh``, a finished ``train`` result is refused unless ``resume`` or ``force``
      (the other commands' own checkpoints already refuse a rerun without ``--resume``);
    * ``run`` (a run description, :data:`RUN_FILE`): a directory holding another run
      (another method, parameter space, scene or command, :func:`held_run`) is refused,
      even with ``resume``, naming what it holds; one holding this run is refused unless
      ``resume`` (which continues it: :func:`resume_note` names it).
    """
    text = os.fspath(path)
    if not str(text).strip():
        raise ParameterError(f"{flag}: an empty path")
    path = Path(text)
    ancestor = path if (path.exists() or path.is_symlink()) else path.parent
    while not (ancestor.exists() or ancestor.is_symlink()) and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if ancestor != path:
        if not ancestor.is_dir():
            raise ParameterError(f"{flag} {path}: {ancestor} is a file, not a directory")
        _check_writable(ancestor, path, flag)
        return path
    if kind == "file":
        if path.is_dir():
            raise ParameterError(f"{flag} {path}: is a directory; {flag} names a file")
        if not path.is_file():
            raise ParameterError(f"{flag} {path}: exists and is not a regular file")
        owners = _owners(path.parent)
        for owner, marker in owners.items():
            if path.name in OUTPUT_MARKERS[owner] or path.name == RUN_FILE:
                raise ParameterError(f"{flag} {path}: is the output of residualsim {owner}; "
                                     "choose another path")
        if not force:
            raise ParameterError(f"{flag} {path}: already exists ({replace_hint})")
        _check_writable(path.parent, path, flag)
        return path
    if not path.is_dir():
        raise ParameterError(f"{flag} {path}: exists and is not a directory; {flag} names a "
                             "directory")
    owners = _owners(path)
    for owner, marker in owners.items():
        if owner != command:
            raise ParameterError(f"{flag} {path}: holds the output of residualsim {owner} "
                                 f"({marker}); choose another directory")
    if run is not None:
        _check_run(path, run, resume, flag)
    if fresh and not force:
        raise ParameterError(f"{flag} {path}: already exists (pass --force to replace it)")
    if fresh and force and not owners and any(path.iterdir()):
        raise ParameterError(f"{flag} {path}: holds files that are not residualsim {command} "
                             "output; --force replaces only such a directory, choose another")
    result = _RESULTS.get(command)
    if (command == "train" and result and (path / result).exists() and not resume
            and not force and not (path / "checkpoint.npz").exists()):
        raise ParameterError(f"{flag} {path}: already holds a trained model ({result}); "
                             "choose another directory")
    _check_writable(path, path, flag)
    return path


def check_outside_inputs(path: str | os.PathLike[str],
                         inputs: dict[str, tuple[str | os.PathLike[str], bool]],
                         flag: str = "--out") -> None:
    """Refuse an output that would write into what a command reads.

    ``inputs`` maps a description (``"--data folder"``) to ``(path, enclosing)``: a file or
    folder being read, and whether an output anywhere inside it is refused (a data folder:
    a checkpoint written there stops it from loading) or only the path itself (a scene
    file's folder, where other outputs are welcome). ParameterError when ``path`` is an
    input, lies inside an enclosing one, or, as a directory output (no file suffix),
    contains one.
    """
    out = Path(os.path.abspath(os.fspath(path)))
    directory_output = not out.suffix
    for what, (source, enclosing) in inputs.items():
        source = Path(os.path.abspath(os.fspath(source)))
        inside = out == source or (enclosing and source in out.parents)
        contains = directory_output and out in source.parents
        if inside or contains:
            relation = "is" if out == source else "lies inside" if inside else "contains"
            raise ParameterError(f"{flag} {path}: {relation} the {what} {source}, which this "
                                 "command reads; write its output elsewhere")


def path_for_file(path: str | os.PathLike[str], directory: str | os.PathLike[str]) -> str:
    """How a file written in ``directory`` stores ``path`` (an input it was made from):
    relative to that directory (POSIX separators), so the pair can move together and be read
    from any working directory; :func:`path_from_file` reads it back."""
    return Path(os.path.relpath(Path(path).resolve(), Path(directory).resolve())).as_posix()


def path_from_file(stored: str, directory: str | os.PathLike[str]) -> Path:
    """The path a file in ``directory`` stored (:func:`path_for_file`): absolute as is,
    relative taken from ``directory``; files of older versions stored it relative to the
    working directory, which is tried when the first does not exist."""
    path = Path(stored)
    if path.is_absolute():
        return path
    beside = Path(directory) / path
    return path if not beside.exists() and path.exists() else beside


def check_plot_path(plot: str | os.PathLike[str], flag: str = "--plot",
                    **others: str | os.PathLike[str] | None) -> Path:
    """Check a plot's path before any computation: a ``.png`` (the plots are PNG), and not
    the same file as any of the command's ``others`` (flag name → path: its inputs and other
    outputs; ``score --pred p.npz --plot p.npz`` replaced the predictions by the plot).
    ParameterError naming the flags otherwise."""
    path = Path(os.fspath(plot))
    if path.suffix.lower() != ".png":
        raise ParameterError(f"{flag} {path}: the plot is a PNG; name it *.png")
    for name, other in others.items():
        if other is not None and Path(os.fspath(other)).resolve() == path.resolve():
            raise ParameterError(f"{flag} {path}: the same file as --{name.replace('_', '-')}")
    return path
