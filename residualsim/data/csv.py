"""Plain CSV recordings: a directory of ``<id>.csv`` files, one per recording (id = file stem).
(Past 600 lines on purpose: the whole format, read as one: its schema, the vectorised
parse, and every check that names a file's line.)

Each file has one header row, then one row per sample, comma-separated (cells may be quoted
and padded with spaces; blank lines are skipped; UTF-8, a byte-order mark is tolerated).
The header names are the schema, matched without regard to case (``T,X,...,QW`` reads as
``t,x,...,qw``; a joint column as the scene's joint it matches case-insensitively when only
one does). A separator ending every line (``t,...,qz,``, a common export artefact) leaves
an unnamed last column: dropped when it is empty on every line, refused (naming the line)
when a row holds a value there (two separators ending every line: two such columns).

Free objects (3D, gravity along world -z)
    ``t, x, y, z, qw, qx, qy, qz``: time (s); the base link frame's origin (m, world frame);
    its orientation as a quaternion in **w-x-y-z** order, base -> world. Optional velocity
    columns ``vx, vy, vz`` (m/s, world) and ``wx, wy, wz`` (rad/s, world).
Planar objects (the vertical x-y plane, gravity along -y)
    ``t, x, y, theta`` (s, m, m, rad about +z); optional ``vx, vy, omega`` (m/s, m/s, rad/s).
    Loaded as a planar :class:`~residualsim.data.trajectory.Trajectory` (z = 0, the
    quaternion (cos theta/2, 0, 0, sin theta/2), ``planar=True``).
Joints (either kind)
    Every other column is a joint, named exactly as the URDF's non-fixed joint: its angle
    (rad) or displacement (m). ``<joint>_vel`` is that joint's rate (rad/s or m/s). A joint
    column whose value jumps by more than pi between two samples and whose values span at
    most 2 pi (an angle wrapped into one turn) is unwrapped (:func:`numpy.unwrap`), so
    continuous joints that wrap at +-pi become continuous; the reader does not know the joint
    type, so this applies to every joint column (a prismatic joint never moves pi metres in
    one sample; a column spanning more, e.g. one in degrees, is left as read for the checks
    of :mod:`residualsim.sim.plausibility`). ``metadata["unwrapped_joints"]`` lists them.

Velocities are all recorded (every base velocity column and a ``_vel`` column per joint) or
none are; then they are estimated as :mod:`residualsim.data.velocities` describes (first
contact from the base's acceleration, a free-flight fit for the initial state, smoothed
differences elsewhere). ``metadata["velocities"]`` says ``"recorded"`` or ``"estimated"``
and ``metadata["velocity_estimate"]`` how. Quaternions off unit norm by at most 1e-2 are
normalised (exactly unit ones are kept bit for bit); ``source`` is ``"csv:<path>"``.

Refused, each with a :class:`~residualsim.errors.DataError` naming the file (and the line
and column where there is one): missing required columns, columns of the other kind (``qw``
in a planar file), duplicate or empty column names, a ``_vel`` column without its joint,
some velocity columns without the others, joints other than the scene's (when
``joint_names`` is given), a row with another number of cells, a non-numeric, NaN or
infinite cell, times that do not increase, a quaternion off unit norm, fewer than 3 rows.
"""

from __future__ import annotations

import csv
import io
import logging
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from residualsim.atomic import atomic_open
from residualsim.data.listing import recording_files
from residualsim.data.npz import save_each
from residualsim.data.read_options import QUATERNION_ORDERS, current_reading_options
from residualsim.data.timebase import (UNIFORM_RELATIVE, TimeBase, analyse_times,
                                       common_rate_hz, filled_samples, resample)
from residualsim.data.trajectory import QUATERNION_NORM_TOLERANCE, Trajectory
from residualsim.data.velocities import (CONTACT_ACCELERATION_MPS2, check_recorded_velocities,
                                         estimate_velocities)
from residualsim.errors import DataError, ParameterError

__all__ = [
    "FREE_COLUMNS",
    "PLANAR_COLUMNS",
    "FREE_VELOCITY_COLUMNS",
    "PLANAR_VELOCITY_COLUMNS",
    "JOINT_VELOCITY_SUFFIX",
    "load_csv_trajectory",
    "load_csv_trajectories",
    "save_csv_trajectory",
    "save_csv_trajectories",
    "read_table",
]

#: Required columns of a free object's file, in order (quaternion w-x-y-z).
FREE_COLUMNS = ("t", "x", "y", "z", "qw", "qx", "qy", "qz")
#: Required columns of a planar object's file.
PLANAR_COLUMNS = ("t", "x", "y", "theta")
#: Optional base velocity columns of a free object (m/s and rad/s, world frame).
FREE_VELOCITY_COLUMNS = ("vx", "vy", "vz", "wx", "wy", "wz")
#: Optional base velocity columns of a planar object.
PLANAR_VELOCITY_COLUMNS = ("vx", "vy", "omega")
#: A joint's velocity column is its name plus this suffix.
JOINT_VELOCITY_SUFFIX = "_vel"
_RESERVED = frozenset(FREE_COLUMNS + PLANAR_COLUMNS + FREE_VELOCITY_COLUMNS
                      + PLANAR_VELOCITY_COLUMNS)
_MIN_ROWS = 3
log = logging.getLogger(__name__)


_SEPARATORS = {"\t": "tab", ";": "semicolon", ",": "comma", None: "whitespace"}
_DECIMAL_COMMA = re.compile(r"^[-+]?\d*,\d+([eE][-+]?\d+)?$")
#: The characters of plain decimal numbers, separators and blanks.
_PLAIN = b"0123456789eE.+-,;\t "


def _separator(header_line: str) -> str | None:
    """The separator the header line uses: tab, semicolon, comma, else whitespace (None)."""
    for sep in ("\t", ";", ","):
        if sep in header_line:
            return sep
    return None


def _split(line: str, sep: str | None) -> list[str]:
    return line.split() if sep is None else [c.strip() for c in line.split(sep)]


def _read_rows(path: Path) -> tuple[list[str], list[int], list[list[str]], str | None]:
    """The header, each sample row's line number and cells (stripped), and the separator.

    Blank lines and ``#`` comment lines are skipped anywhere (before the header too)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not a readable UTF-8 text file ({exc})") from None
    raw_lines = text.splitlines()
    if (raw_lines and "#" not in text and "" not in raw_lines
            and not any(map(str.isspace, raw_lines))):  # nothing to skip: no list of pairs
        first, numbers, lines = raw_lines[0], range(2, len(raw_lines) + 1), raw_lines[1:]
    else:
        kept = [(i + 1, line) for i, line in enumerate(raw_lines)
                if line.strip() and not line.lstrip().startswith("#")]
        if not kept:
            raise DataError(f"{path}: empty file, expected a header row and samples")
        first, numbers, lines = kept[0][1], [n for n, _ in kept[1:]], [l for _, l in kept[1:]]
    sep = _separator(first)
    if '"' in text:
        header, numbers, rows = _read_quoted(path, raw_lines, sep)
    else:
        header, rows = _split(first, sep), _LazyRows(lines, sep)
    while True:  # one unnamed empty column per separator ending every line (",," too)
        width = len(header)
        header, rows = _trailing_separator(path, header, numbers, rows, sep)
        if len(header) == width:
            break
    if len(rows) < _MIN_ROWS:
        raise DataError(f"{path}: {len(rows)} sample row(s), a recording needs at least "
                        f"{_MIN_ROWS}")
    return header, numbers, rows, sep


def _trailing_separator(path: Path, header: list[str], numbers, rows, sep: str | None
                        ) -> tuple[list[str], Any]:
    """Drop an unnamed last column that is empty on every row (an export that ends every
    line with a separator, ``t,...,qz,``); refuse it, naming the line, when a row holds a
    value there. Other headers are returned as they are."""
    if sep is None or len(header) < 2 or header[-1] != "":
        return header, rows
    width = len(header)
    if isinstance(rows, _LazyRows):
        blank = " " if sep == "\t" else None
        stripped = [line.rstrip(blank) for line in rows.lines]
        ends = [line.endswith(sep) for line in stripped]
        if all(ends):
            return header[:-1], _LazyRows([line[:-1] for line in stripped], sep)
        first = ends.index(False)
        cells = rows[first]
    else:
        full = [i for i, r in enumerate(rows) if len(r) != width or r[-1] != ""]
        if not full:
            return header[:-1], [r[:-1] for r in rows]
        first, cells = full[0], rows[full[0]]
    if len(cells) == width and cells[-1] != "":
        raise DataError(f"{path}: line {numbers[first]}: column {width} has no name in the "
                        f"header but holds {cells[-1]!r}; name it, or delete the column (an "
                        "unnamed last column is accepted only when empty on every line)")
    return header, rows  # a row of another length: refused, with its line, further on


class _LazyRows:
    """Sample lines split on demand: :func:`_to_table` converts them all at once (one split
    of the joined text, one conversion per column) and splits single lines only to name a
    bad one."""

    def __init__(self, lines: list[str], sep: str | None) -> None:
        self.lines, self.sep = lines, sep

    def __len__(self) -> int:
        return len(self.lines)

    def __getitem__(self, index: int) -> list[str]:
        return _split(self.lines[index], self.sep)

    def lengths(self) -> np.ndarray:
        if self.sep is None:
            counts = (len(line.split()) for line in self.lines)
        else:
            counts = (line.count(self.sep) + 1 for line in self.lines)
        return np.fromiter(counts, dtype=np.int64, count=len(self.lines))

    def table(self, width: int) -> np.ndarray | None:
        """Every cell as a (rows, width) float64 table, parsed in C by one
        :func:`numpy.fromstring` of the joined text (the lengths checked first); None when
        a cell holds anything but digits, signs, points and exponents (the caller then
        converts column by column and names a bad cell): ``nan``, ``inf`` and what only
        Python's ``float`` reads take that path (where ``1_000``, which Python reads as 1000,
        is refused), so the two agree."""
        sep = self.sep or " "
        text = sep.join(self.lines)
        if text.encode("utf-8").translate(None, _PLAIN):
            return None
        try:
            values = np.fromstring(text, dtype=np.float64, sep=sep)
        except ValueError:  # an empty or malformed cell
            return None
        if values.size != len(self.lines) * width:
            return None
        return values.reshape(len(self.lines), width)


def _read_quoted(path: Path, raw_lines: list[str], sep: str | None
                 ) -> tuple[list[str], list[int], list[list[str]]]:
    """Rows of a file with quoted cells, through :mod:`csv` (comment lines blanked, so the
    line numbers stay the file's)."""
    text = "\n".join("" if line.lstrip().startswith("#") else line for line in raw_lines)
    reader = csv.reader(io.StringIO(text), delimiter=sep or " ", skipinitialspace=True)
    rows: list[tuple[int, list[str]]] = []
    try:
        start = 1
        for cells in reader:
            if any("\n" in c or "\r" in c for c in cells):
                raise DataError(f"{path}: line {start}: a quoted cell is not closed")
            cells = [c.strip() for c in cells]
            if sep is None:
                cells = [c for c in cells if c]
            if any(cells):
                rows.append((reader.line_num, cells))
            start = reader.line_num + 1
    except csv.Error as exc:
        raise DataError(f"{path}: line {reader.line_num}: malformed CSV ({exc})") from None
    return rows[0][1], [n for n, _ in rows[1:]], [c for _, c in rows[1:]]


def _shown(cell: str) -> str:
    """``repr(cell)``, cut to 40 characters (a cell may be a whole megabyte)."""
    return repr(cell if len(cell) <= 40 else cell[:37] + "...")


def _repeated(names: list[str]) -> list[str]:
    """The names that occur more than once, sorted (in one pass: a header may be long)."""
    return sorted(name for name, count in Counter(names).items() if count > 1)


def _decimal_comma(path: Path, line: int, name: str, cell: str) -> DataError:
    return DataError(f"{path}: line {line}, column {name!r}: {_shown(cell)} has a decimal "
                     "comma; "
                     "write numbers with a decimal point (0.5, not 0,5)")


def _to_table(path: Path, header: list[str], numbers: list[int], rows: list[list[str]],
              sep: str | None) -> np.ndarray:
    """The rows as a (rows, columns) float64 table; checks row lengths and every cell.

    Vectorised: one conversion per column; the per-cell loop runs only to name a bad cell."""
    width = len(header)
    if isinstance(rows, _LazyRows):
        lengths = rows.lengths()
    else:
        lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    bad = np.flatnonzero(lengths != width)
    if bad.size:
        i = int(bad[0])
        hint = ""
        if sep == "," and lengths[i] > width and any(
                _DECIMAL_COMMA.match(f"{a},{b}") for a, b in zip(rows[i], rows[i][1:])):
            hint = (" (decimal commas? write numbers with a decimal point, 0.5 not 0,5, or "
                    "separate the columns with semicolons)")
        raise DataError(f"{path}: line {numbers[i]} has {lengths[i]} cells, the header "
                        f"{width}{hint}")
    if isinstance(rows, _LazyRows):
        fast = rows.table(width)
        if fast is not None:
            _check_finite(path, header, numbers, rows, fast)
            return fast
        rows = [rows[i] for i in range(len(rows))]
    table = np.empty((len(rows), width))
    for j, name in enumerate(header):
        cells = [r[j] for r in rows]
        try:
            if any("_" in cell for cell in cells):  # Python reads 1_0 as 10; no export does
                raise ValueError
            table[:, j] = np.array(cells, dtype=np.float64)
        except ValueError:
            for i, cell in enumerate(cells):
                try:
                    if "_" in cell:
                        raise ValueError
                    float(cell)
                except ValueError:
                    if _DECIMAL_COMMA.match(cell):
                        raise _decimal_comma(path, numbers[i], name, cell) from None
                    raise DataError(f"{path}: line {numbers[i]}, column {name!r}: "
                                    f"{_shown(cell)} is not a number") from None
            table[:, j] = [float(c) for c in cells]
    _check_finite(path, header, numbers, rows, table)
    return table


def _check_finite(path: Path, header: list[str], numbers: list[int], rows,
                  table: np.ndarray) -> None:
    finite = np.isfinite(table)
    if not finite.all():
        i, j = (int(k) for k in np.argwhere(~finite)[0])
        raise DataError(f"{path}: line {numbers[i]}, column {header[j]!r}: {_shown(rows[i][j])} is "
                        "not a finite number")


def read_table(path: str | os.PathLike[str], missing_ok: bool = False
               ) -> tuple[list[str], np.ndarray]:
    """A CSV file's header (names as written) and its cells as a (rows, columns) float64
    table, read as recordings are (separators, comments, BOM, quoting; module docstring).
    With ``missing_ok`` an empty cell or ``nan`` reads as NaN (lost tracking in a capture
    session) instead of being refused."""
    path = Path(path)
    header, numbers, rows, sep = _read_rows(path)
    if not missing_ok:
        return header, _to_table(path, header, numbers, rows, sep)
    fast = rows.table(len(header)) if isinstance(rows, _LazyRows) else None
    if fast is not None:
        return header, fast
    rows = [rows[i] for i in range(len(rows))]
    filled = [[cell if cell else "nan" for cell in row] for row in rows]
    width = len(header)
    lengths = [len(row) for row in filled]
    bad = [i for i, n in enumerate(lengths) if n != width]
    if bad:
        raise DataError(f"{path}: line {numbers[bad[0]]} has {lengths[bad[0]]} cells, the "
                        f"header {width}")
    table = np.empty((len(filled), width))
    for j, name in enumerate(header):
        try:
            table[:, j] = np.array([row[j] for row in filled], dtype=np.float64)
        except ValueError:
            for i, row in enumerate(filled):
                try:
                    float(row[j])
                except ValueError:
                    raise DataError(f"{path}: line {numbers[i]}, column {name!r}: "
                                    f"{_shown(row[j])} is not a number") from None
    return header, table


def _canonical_header(path: Path, header: list[str],
                      joint_names: Sequence[str] | None) -> list[str]:
    """The header with names matched without regard to case: a reserved column (``T``,
    ``QW``) in lower case; a joint column (and its ``_vel`` column) spelled as the one scene
    joint it matches case-insensitively, when no other joint matches it too and it is not
    already a joint's exact name; the ``_VEL`` suffix of a file's own joint as ``_vel``."""
    known = list(joint_names or ())
    names = set(header)
    out = []
    for name in header:
        if name in _RESERVED or name in known:
            out.append(name)
            continue
        if name.lower() in _RESERVED:
            out.append(name.lower())
            continue
        suffix = JOINT_VELOCITY_SUFFIX if name.lower().endswith(JOINT_VELOCITY_SUFFIX) else ""
        stem = name[: len(name) - len(suffix)]
        match = [j for j in known if j.lower() == stem.lower()]
        if suffix and stem in known:
            out.append(stem + suffix)
        elif len(match) == 1 and match[0] + suffix not in names:
            out.append(match[0] + suffix)
        elif suffix and joint_names is None and stem in names:
            out.append(stem + suffix)
        else:
            out.append(name)
    repeated = _repeated(out)
    if repeated and not set(repeated) & set(_repeated(header)):
        raise DataError(f"{path}: duplicate column(s) {', '.join(repeated)} (column names "
                        "are matched without regard to case)")
    return out


def _schema(path: Path, header: list[str], planar: bool | None,
            joint_names: Sequence[str] | None) -> tuple[bool, list[str], bool]:
    """(planar, joint names in the order to store, velocities recorded) from the header."""
    if "" in header:
        raise DataError(f"{path}: column {header.index('') + 1} has no name in the header; "
                        "name it, or delete the column")
    repeated = _repeated(header)
    if repeated:
        raise DataError(f"{path}: duplicate column(s) {', '.join(repeated)}")
    if planar is None:
        planar = "theta" in header and "qw" not in header
    required, velocity = ((PLANAR_COLUMNS, PLANAR_VELOCITY_COLUMNS) if planar
                          else (FREE_COLUMNS, FREE_VELOCITY_COLUMNS))
    kind = "planar" if planar else "free"
    missing = [c for c in required if c not in header]
    other = FREE_COLUMNS if planar else PLANAR_COLUMNS
    if missing and all(c in header for c in other):
        raise DataError(f"{path}: a {'free' if planar else 'planar'} recording "
                        f"({', '.join(other)}) but the scene is {kind}")
    if missing:
        raise DataError(f"{path}: missing column(s) {', '.join(missing)}; a {kind} recording "
                        f"needs {', '.join(required)}")
    known = set(joint_names or ())
    foreign = [c for c in header if c in _RESERVED and c not in required + velocity]
    if foreign:
        raise DataError(f"{path}: column(s) {', '.join(foreign)} do not belong in a {kind} "
                        f"recording ({', '.join(required)})")
    rest = [c for c in header if c not in _RESERVED]
    rates = [c for c in rest if c.endswith(JOINT_VELOCITY_SUFFIX) and c not in known
             and (joint_names is not None or c[: -len(JOINT_VELOCITY_SUFFIX)] in rest)]
    joints = [c for c in rest if c not in rates]
    orphans = [c for c in joints if c.endswith(JOINT_VELOCITY_SUFFIX) and c not in known]
    if orphans or any(r[: -len(JOINT_VELOCITY_SUFFIX)] not in joints for r in rates):
        bad = orphans or [r for r in rates if r[: -len(JOINT_VELOCITY_SUFFIX)] not in joints]
        raise DataError(f"{path}: velocity column {bad[0]!r} has no joint column "
                        f"{bad[0][: -len(JOINT_VELOCITY_SUFFIX)]!r}")
    if joint_names is not None:
        expected = list(joint_names)
        if sorted(joints) != sorted(expected):
            lacking = [j for j in expected if j not in joints]
            extra = [j for j in joints if j not in expected]
            raise DataError(
                f"{path}: the joint columns do not match the scene's joints {expected}"
                + (f"; missing {lacking}" if lacking else "")
                + (f"; unknown column(s) {extra}" if extra else ""))
        joints = expected
    wanted = list(velocity) + [j + JOINT_VELOCITY_SUFFIX for j in joints]
    present = [c for c in wanted if c in header]
    if present and len(present) != len(wanted):
        raise DataError(f"{path}: velocity columns are all given or none; missing "
                        f"{', '.join(c for c in wanted if c not in header)}")
    return planar, joints, bool(present)


@dataclass
class _Raw:
    """One file as read, on its own time stamps (before any resampling)."""

    path: Path
    planar: bool
    joints: list[str]
    times: np.ndarray
    positions: np.ndarray
    quats: np.ndarray
    joint_positions: np.ndarray
    unwrapped: list[str]
    velocities: tuple[np.ndarray, np.ndarray, np.ndarray] | None
    base: TimeBase
    quaternion_order: str


def _parse(path: Path, planar: bool | None, joint_names: Sequence[str] | None,
           quaternion_order: str) -> _Raw:
    """Read, check and unwrap one file on its own time stamps."""
    header, numbers, rows, sep = _read_rows(path)
    header = _canonical_header(path, header, joint_names)
    planar, joints, recorded = _schema(path, header, planar, joint_names)
    table = _to_table(path, header, numbers, rows, sep)
    column = {name: table[:, header.index(name)] for name in header}
    times = column["t"]
    steps = np.diff(times)
    if (steps <= 0).any():
        row = int(np.argmax(steps <= 0)) + 1
        raise DataError(f"{path}: line {numbers[row]}: t = {float(times[row])!r} does not "
                        f"increase (previous {float(times[row - 1])!r}, line "
                        f"{numbers[row - 1]}); time stamps must increase")
    n = len(times)
    if planar:
        theta = column["theta"]
        positions = np.column_stack([column["x"], column["y"], np.zeros(n)])
        quats = np.column_stack([np.cos(theta / 2), np.zeros(n), np.zeros(n),
                                 np.sin(theta / 2)])
    else:
        positions = np.column_stack([column[c] for c in ("x", "y", "z")])
        names = ("qw", "qx", "qy", "qz")
        if quaternion_order == "xyzw":  # the columns named qw, qx, qy, qz hold x, y, z, w
            names = ("qz", "qw", "qx", "qy")
        quats = np.column_stack([column[c] for c in names])
        norms = np.linalg.norm(quats, axis=1)
        off = np.abs(norms - 1.0) > QUATERNION_NORM_TOLERANCE
        if off.any():
            row = int(np.argmax(off))
            raise DataError(f"{path}: line {numbers[row]}: quaternion (qw, qx, qy, qz) has "
                            f"norm {norms[row]:.4g}, expected 1 (within "
                            f"{QUATERNION_NORM_TOLERANCE})")
        exact = np.abs(norms - 1.0)[:, None] <= 1e-12
        quats = np.where(exact, quats, quats / norms[:, None])
    raw_joints = np.column_stack([column[j] for j in joints]) if joints else np.zeros((n, 0))
    joint_positions = raw_joints.copy()
    for k in range(len(joints)):  # a wrapped angle in radians spans 2 pi at most
        if np.ptp(raw_joints[:, k]) <= 2 * np.pi * (1 + 1e-9):
            joint_positions[:, k] = np.unwrap(raw_joints[:, k])
    unwrapped = [j for k, j in enumerate(joints)
                 if not np.array_equal(joint_positions[:, k], raw_joints[:, k])]
    velocities = None
    if recorded:
        if planar:
            linear = np.column_stack([column["vx"], column["vy"], np.zeros(n)])
            angular = np.column_stack([np.zeros(n), np.zeros(n), column["omega"]])
            names = ("vx, vy", "omega")
        else:
            linear = np.column_stack([column[c] for c in ("vx", "vy", "vz")])
            angular = np.column_stack([column[c] for c in ("wx", "wy", "wz")])
            names = ("vx, vy, vz", "wx, wy, wz")
        rates = np.column_stack([column[j + JOINT_VELOCITY_SUFFIX] for j in joints]) \
            if joints else np.zeros((n, 0))
        velocities = (linear, angular, rates)
        check_recorded_velocities(path, times, positions, quats, joint_positions, joints,
                                  velocities, names)
    return _Raw(path=path, planar=planar, joints=joints, times=times, positions=positions,
                quats=quats, joint_positions=joint_positions, unwrapped=unwrapped,
                velocities=velocities, base=analyse_times(times, str(path), numbers),
                quaternion_order=quaternion_order)


def _build(raw: _Raw, rate_hz: float | None, com_offset_base_m: np.ndarray | None,
           contact_threshold_mps2: float) -> Trajectory:
    """The Trajectory of a parsed file, resampled when it is not uniform or not at
    ``rate_hz`` (None: its own nominal rate)."""
    base, path = raw.base, raw.path
    period = base.period_s if rate_hz is None else 1.0 / rate_hz
    if not 0.1 < period / base.period_s < 10.0:  # ten times off: units (ms?), not a rate
        log.warning("%s: recorded at %.6g Hz, not resampled to %.6g Hz (time stamps in "
                    "other units?)", path, base.rate_hz, 1.0 / period)
        period = base.period_s
    same_rate = abs(period - base.period_s) <= UNIFORM_RELATIVE * base.period_s
    times, positions, quats = raw.times, raw.positions, raw.quats
    joint_positions, velocities = raw.joint_positions, raw.velocities
    metadata: dict[str, Any] = {"velocities": "recorded" if velocities else "estimated"}
    if raw.unwrapped:
        metadata["unwrapped_joints"] = raw.unwrapped
    if raw.quaternion_order != "wxyz":
        metadata["quaternion_order"] = raw.quaternion_order
    if not (base.uniform and same_rate):
        columns = {"positions": positions, "quats": quats, "joints": joint_positions}
        if velocities:
            columns.update(linear=velocities[0], angular=velocities[1], rates=velocities[2])
        times, out = resample(times, period, columns, quaternion="quats", source=str(path))
        if len(times) < _MIN_ROWS:
            raise DataError(f"{path}: {len(times)} sample(s) at {1 / period:.6g} Hz, a "
                            f"recording needs at least {_MIN_ROWS}")
        positions, quats, joint_positions = out["positions"], out["quats"], out["joints"]
        if velocities:
            velocities = (out["linear"], out["angular"], out["rates"])
        metadata["time_base"] = base.summary(resampled_hz=1.0 / period)
        metadata["time_base"]["filled_samples"] = filled_samples(raw.times, times)
        warning = base.jitter_warning(str(path))
        if warning:
            log.warning("%s", warning)
        for index, periods, t in base.long_gaps():
            log.warning("%s: %d samples missing after sample %d (t = %.4f s from the start): "
                        "interpolated across the gap", path, periods - 1, index, t)
    if velocities:
        linear, angular, rates = velocities
    else:
        estimate = estimate_velocities(times, positions, quats, joint_positions,
                                       planar=raw.planar, threshold_mps2=contact_threshold_mps2,
                                       com_offset_base_m=com_offset_base_m)
        linear, angular = estimate.linear_velocity_mps, estimate.angular_velocity_world_radps
        rates = estimate.joint_velocities
        if raw.planar:  # keep the planar convention exact: no z motion, rotation about +z only
            linear[:, 2] = 0.0
            angular[:, :2] = 0.0
        metadata["velocity_estimate"] = estimate.summary()
    return Trajectory(traj_id=path.stem, times_s=times, positions_m=positions, quat_wxyz=quats,
                      linear_velocity_mps=linear, angular_velocity_world_radps=angular,
                      planar=raw.planar, source=f"csv:{path}", metadata=metadata,
                      joint_names=tuple(raw.joints), joint_positions=joint_positions,
                      joint_velocities=rates)


def _options(quaternion_order: str | None) -> str:
    order = quaternion_order or current_reading_options().quaternion_order
    if order not in QUATERNION_ORDERS:
        raise ParameterError(f"quaternion_order must be one of {', '.join(QUATERNION_ORDERS)}, "
                             f"got {order!r}")
    return order


def load_csv_trajectory(
    path: str | os.PathLike[str], *, planar: bool | None = None,
    joint_names: Sequence[str] | None = None, com_offset_base_m: np.ndarray | None = None,
    contact_threshold_mps2: float = CONTACT_ACCELERATION_MPS2, rate_hz: float | None = None,
    quaternion_order: str | None = None,
) -> Trajectory:
    """Read one CSV recording (format and time base in the module docstring).

    Parameters
    ----------
    path : path-like
        A ``.csv`` file; its stem becomes ``traj_id``.
    planar : bool, optional
        The scene's kind: True for planar columns, False for free ones; None infers it
        from the header (planar when it has ``theta`` and no ``qw``).
    joint_names : sequence of str, optional
        The scene's non-fixed joints in URDF order: the file must have exactly these joint
        columns, stored in this order. None takes the file's joint columns in file order.
    com_offset_base_m : ndarray of shape (3,), optional
        Centre of mass in the base link's frame, m, for the free-flight fit when velocities
        are estimated (see :func:`residualsim.data.velocities.fit_free_flight`).
    contact_threshold_mps2 : float
        The first-contact criterion's threshold, m/s².
    rate_hz : float, optional
        Resample to this rate (Hz); the explicit rate of :func:`reading_options` (the
        CLI's ``--rate-hz``) wins over it. None: the file's own nominal rate.
    quaternion_order : {"wxyz", "xyzw"}, optional
        Order of the values in the columns ``qw, qx, qy, qz``; None: that of
        :func:`reading_options` (default ``"wxyz"``).

    Returns
    -------
    Trajectory

    Raises
    ------
    DataError
        Any problem listed in the module docstring; the message starts with the path.
    """
    raw = _parse(Path(path), planar, joint_names, _options(quaternion_order))
    rate = current_reading_options().rate_hz or rate_hz
    return _build(raw, rate, com_offset_base_m, contact_threshold_mps2)


def load_csv_trajectories(directory: str | os.PathLike[str], *, rate_hz: float | None = None,
                          quaternion_order: str | None = None, planar: bool | None = None,
                          joint_names: Sequence[str] | None = None,
                          com_offset_base_m: np.ndarray | None = None,
                          contact_threshold_mps2: float = CONTACT_ACCELERATION_MPS2,
                          ) -> dict[str, Trajectory]:
    """Read every ``*.csv`` recording of a directory, ordered by numeric id then name.

    Parameters
    ----------
    directory : path-like
        A directory of ``<id>.csv`` files.
    rate_hz : float, optional
        The rate (Hz) to resample every file to, e.g. a model's; the explicit rate of
        :func:`reading_options` (``--rate-hz``) wins over it. None: files that share a
        nominal rate keep it, a folder of several rates is resampled to its most common one.
    quaternion_order, planar, joint_names, com_offset_base_m, contact_threshold_mps2
        As for :func:`load_csv_trajectory`.

    Returns
    -------
    dict of str -> Trajectory
        Keyed by file stem. All files are read before anything is returned: one bad file
        raises, naming it.

    Raises
    ------
    DataError
        Missing directory, no ``.csv`` file, or a bad file.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise DataError(f"{directory}: no such directory")
    files = recording_files(directory, ".csv")
    if not files:
        raise DataError(f"{directory}: no .csv recordings found")
    order = _options(quaternion_order)
    raws = [_parse(p, planar, joint_names, order) for p in files]
    rate = current_reading_options().rate_hz or rate_hz or common_rate_hz(
        [raw.base for raw in raws])
    return {raw.path.stem: _build(raw, rate, com_offset_base_m, contact_threshold_mps2)
            for raw in raws}


def _number(value: float) -> str:
    return repr(float(value))  # the shortest text that reads back to the same float64


def save_csv_trajectory(path: str | os.PathLike[str], traj: Trajectory, *,
                        with_velocities: bool = False) -> None:
    """Write one trajectory as a CSV recording, atomically (format in the module docstring).

    Parameters
    ----------
    path : path-like
        Destination ending in ``.csv``; its directory must exist.
    traj : Trajectory
        Planar trajectories get the planar columns (theta from
        :meth:`~residualsim.data.trajectory.Trajectory.planar_configuration`), others the
        free ones (quaternion w-x-y-z); joints follow in ``traj.joint_names`` order.
    with_velocities : bool, default False
        Also write the velocity columns (base, then ``<joint>_vel``); without them a reader
        estimates the velocities.

    Raises
    ------
    ParameterError
        ``path`` does not end in ``.csv``.
    DataError
        Not a Trajectory, a joint name that is a reserved column name or holds a comma,
        quote or line break, or a missing directory.
    """
    path = Path(path)
    if path.suffix != ".csv":
        raise ParameterError(f"{path}: CSV recordings must end in .csv")
    if not isinstance(traj, Trajectory):
        raise DataError(f"{path}: expected a Trajectory, got {type(traj).__name__}")
    bad = [j for j in traj.joint_names if j in _RESERVED or any(c in j for c in ',"\r\n')
           or j != j.strip()]
    if bad:
        raise DataError(f"{path}: joint name {bad[0]!r} cannot be a CSV column (reserved, or "
                        "holds a comma, quote, line break or outer spaces)")
    if not path.parent.is_dir():
        raise DataError(f"{path}: directory {path.parent} does not exist")
    names = list(traj.joint_names)
    if traj.planar:
        header = list(PLANAR_COLUMNS)
        columns = [traj.times_s, *traj.planar_configuration().T]
        velocity = [traj.linear_velocity_mps[:, 0], traj.linear_velocity_mps[:, 1],
                    traj.angular_velocity_world_radps[:, 2]]
        velocity_names = list(PLANAR_VELOCITY_COLUMNS)
    else:
        header = list(FREE_COLUMNS)
        columns = [traj.times_s, *traj.positions_m.T, *traj.quat_wxyz.T]
        velocity = [*traj.linear_velocity_mps.T, *traj.angular_velocity_world_radps.T]
        velocity_names = list(FREE_VELOCITY_COLUMNS)
    header += names
    columns += list(traj.joint_positions.T)
    if with_velocities:
        header += velocity_names + [j + JOINT_VELOCITY_SUFFIX for j in names]
        columns += velocity + list(traj.joint_velocities.T)
    table = np.column_stack(columns)
    lines = [",".join(header)] + [",".join(_number(v) for v in row) for row in table]
    with atomic_open(path) as handle:
        handle.write(("\n".join(lines) + "\n").encode("utf-8"))


def save_csv_trajectories(
    directory: str | os.PathLike[str],
    trajs: Mapping[str, Trajectory] | Iterable[Trajectory], *, with_velocities: bool = False,
) -> list[Path]:
    """Write several trajectories as ``<directory>/<id>.csv`` (the directory is created) and
    return the paths written, in input order. ``trajs``: a mapping id -> Trajectory or
    Trajectories (their ``traj_id``); ``with_velocities``: see :func:`save_csv_trajectory`.
    A ParameterError when an id is not usable as a file name or appears twice (checked
    before anything is written), a DataError when a trajectory cannot be written."""
    return save_each(directory, trajs, ".csv", lambda path, traj: save_csv_trajectory(
        path, traj, with_velocities=with_velocities))
