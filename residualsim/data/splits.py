"""Deterministic train/validation/test splits of trajectory or impact ids.

Each id is assigned on its own: ``u = blake2b(f"{seed}:{id}") / 2**64`` is a number in
[0, 1) that depends only on the seed and the id, and the id goes to the first split whose
cumulative fraction exceeds ``u``.  So

* the same ids and seed always give the same split, on every machine and Python version
  (no use of ``hash()`` or of a random generator);
* adding or removing other ids never moves an id to another split, so a model trained on
  an old split is never evaluated on its own training data after the data set grows;
* split sizes are binomial around ``fraction * n`` rather than exact (for 400 ids and
  0.15, about 60 +- 7).  Small sets can get an empty split (8 ids at 0.7/0.15/0.15 may give
  7/1/0): asking for an empty split is an error that states the sizes, and below
  :data:`SMALL_SET` recordings every choice of a split logs the sizes and how to choose them.

Explicit splits: :func:`parse_split_fractions` reads ``"0.6,0.2,0.2"`` (``--split-fractions``);
:func:`split_from_lists` takes id lists, and :func:`load_split_ids` reads them from a JSON
file ``{"train": [...], "validation": [...], "test": [...]}`` (``--split-ids FILE``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from residualsim.errors import DataError, ParameterError

__all__ = ["SPLIT_NAMES", "split_ids", "split_value", "select_recordings", "recording_selector",
           "select_impacts", "SPLITS", "split_recordings",
           "DEFAULT_FRACTIONS", "parse_split_fractions", "split_from_lists", "load_split_ids",
           "SMALL_SET", "split_sizes", "split_rule", "check_split"]

log = logging.getLogger(__name__)

#: Below this many recordings, choosing a split logs the split sizes (a warning).
SMALL_SET = 20

#: How to choose the splits, for messages.
HOW_TO_CHOOSE = ("choose the splits with --split-fractions TRAIN,VAL,TEST or --split-ids FILE "
                 "(fractions= / lists= in Python), or use --split all")

#: The default expected shares of train, validation and test.
DEFAULT_FRACTIONS = (0.7, 0.15, 0.15)

#: Split names, in the order of ``fractions``.
SPLIT_NAMES = ("train", "validation", "test")


def split_value(traj_id: str, seed: int = 0) -> float:
    """The position in [0, 1) of one id under one seed.

    Parameters
    ----------
    traj_id : str
        The id.
    seed : int
        Any integer; different seeds give independent splits.

    Returns
    -------
    float
        ``int(blake2b(f"{seed}:{traj_id}", digest_size=8)) / 2**64``.
    """
    digest = hashlib.blake2b(f"{seed}:{traj_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def _check_fractions(fractions: Sequence[float]) -> tuple[float, float, float]:
    try:
        values = tuple(float(f) for f in fractions)
    except (TypeError, ValueError):
        raise ParameterError(
            f"fractions must be three numbers (train, validation, test), got {fractions!r}"
        ) from None
    if len(values) != len(SPLIT_NAMES):
        raise ParameterError(
            f"fractions must be three numbers (train, validation, test), got {len(values)}"
        )
    if not all(math.isfinite(v) and v >= 0.0 for v in values):
        raise ParameterError(f"fractions must be finite and >= 0, got {values}")
    if abs(sum(values) - 1.0) > 1e-9:
        raise ParameterError(f"fractions must sum to 1, got {values} (sum {sum(values):.6g})")
    return values  # type: ignore[return-value]


def split_ids(
    ids: Iterable[str | int],
    fractions: Sequence[float] = (0.7, 0.15, 0.15),
    seed: int = 0,
) -> dict[str, list[str]]:
    """Split ids into train, validation and test sets.

    Parameters
    ----------
    ids : iterable of str or int
        Distinct ids; ints are converted with ``str``.
    fractions : sequence of 3 floats
        Expected shares of train, validation and test; non-negative, summing to 1.
    seed : int
        Selects one of many independent splits.

    Returns
    -------
    dict with keys ``"train"``, ``"validation"``, ``"test"``
        Lists of ids (str) in input order; disjoint, together all ids.

    Raises
    ------
    ParameterError
        Bad fractions, a non-integer seed or a repeated id.
    """
    cuts = _check_fractions(fractions)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ParameterError(f"seed must be an int, got {seed!r}")
    names = [str(i) for i in ids]
    if len(set(names)) != len(names):
        repeated = next(n for n in names if names.count(n) > 1)
        raise ParameterError(f"ids must be distinct, {repeated!r} appears more than once")
    bounds = [sum(cuts[: k + 1]) for k in range(len(cuts))]
    last_nonempty = max(k for k, f in enumerate(cuts) if f > 0)
    result: dict[str, list[str]] = {name: [] for name in SPLIT_NAMES}
    for name in names:
        value = split_value(name, seed)
        index = next((k for k, bound in enumerate(bounds) if value < bound), last_nonempty)
        result[SPLIT_NAMES[index]].append(name)
    return result


#: What ``--split`` accepts: one of the splits of :func:`split_ids`, or ``"all"``.
SPLITS = ("all", "train", "validation", "test")


def split_sizes(parts: Mapping[str, Sequence[str]]) -> str:
    """``"train 7, validation 1, test 0"``: the sizes of a split, for messages."""
    return ", ".join(f"{name} {len(parts.get(name, ()))}" for name in SPLIT_NAMES)


def check_split(parts: Mapping[str, Sequence[str]], split: str, source: str = "",
                rule: str = "") -> None:
    """Refuse an empty requested split, stating the sizes; below :data:`SMALL_SET`
    recordings, log the sizes (a warning), so a small set never hides its split.

    Parameters
    ----------
    parts : mapping split name -> ids
        The split (:func:`split_ids` or :func:`split_from_lists`).
    split : str
        The split asked for, a key of ``parts``.
    source : str
        The data folder, named in the message.
    rule : str
        How ``parts`` were made (e.g. ``"hash split 0.7/0.15/0.15"``), named in the message.

    Raises
    ------
    DataError
        ``parts[split]`` is empty.
    """
    n = len({i for ids in parts.values() for i in ids})
    where = f"{source}: " if source else ""
    sizes = f"{split_sizes(parts)}" + (f" by the {rule}" if rule else "")
    if not parts.get(split):
        raise DataError(f"{where}the {split} split is empty ({sizes}); {HOW_TO_CHOOSE}")
    if n < SMALL_SET:
        log.warning("%sonly %d recordings in the splits: %s; %s", where, n, sizes,
                    HOW_TO_CHOOSE.replace(", or use --split all", ""))


def split_rule(fractions: Sequence[float] | None, lists: Mapping | None) -> str:
    """How a split is made, for messages: ``"hash split 0.7/0.15/0.15"`` or ``"explicit id
    lists"``."""
    if lists is not None:
        return "explicit id lists"
    return "hash split " + "/".join(f"{f:g}" for f in (fractions or DEFAULT_FRACTIONS))


def select_recordings(trajectories: dict, split: str = "all", limit: int | None = None, *,
                      fractions: Sequence[float] = DEFAULT_FRACTIONS,
                      lists: Mapping[str, Sequence[str]] | None = None,
                      source: str = "") -> dict:
    """The recordings of ``split`` (``"all"`` or a key of :func:`split_ids`), in their order,
    then only the first ``limit``. ``fractions`` are :func:`split_ids`'s (seed 0); ``lists``,
    when given, are explicit id lists (:func:`split_from_lists`) used instead. An empty
    ``split`` is a DataError naming ``source`` and stating the sizes (:func:`check_split`)."""
    if split != "all":
        if lists is not None:
            parts = split_from_lists(list(trajectories), **lists)
        else:
            parts = split_ids(list(trajectories), fractions=fractions)
        check_split(parts, split, source, split_rule(fractions, lists))
        trajectories = {k: trajectories[k] for k in parts[split]}
    if limit is not None:
        trajectories = dict(list(trajectories.items())[:limit])
    return trajectories


def recording_selector(split: str = "all", limit: int | None = None, *,
                       fractions: Sequence[float] | None = None,
                       lists: Mapping[str, Sequence[str]] | None = None, source: str = ""
                       ) -> Callable[[dict], dict]:
    """:func:`select_recordings` with these arguments (``fractions`` None: the default
    ones), as a function of the recordings: what
    :func:`~residualsim.sim.recordings.load_recordings` takes as ``select``, so only the
    recordings asked for are checked and fitted."""
    return functools.partial(select_recordings, split=split, limit=limit,
                             fractions=fractions or DEFAULT_FRACTIONS, lists=lists,
                             source=source)


def select_impacts(impacts, split: str = "all", limit: int | None = None):
    """The :class:`~residualsim.data.PlanarImpacts` of ``split`` (by upstream row number),
    then only the first ``limit``."""
    if split != "all":
        parts = split_ids(impacts.rows.tolist())
        check_split(parts, split, rule=split_rule(None, None))
        impacts = impacts.subset(parts[split])
    if limit is not None:
        impacts = impacts.subset(impacts.rows[:limit])
    return impacts


def parse_split_fractions(text: str) -> tuple[float, float, float]:
    """Fractions of train, validation and test from ``"0.6,0.2,0.2"`` (``--split-fractions``).

    Parameters
    ----------
    text : str
        Three comma-separated numbers, each >= 0, summing to 1 (within 1e-6; they are then
        rescaled to sum to exactly 1, so ``"0.33,0.33,0.34"`` and thirds both work).

    Returns
    -------
    tuple of 3 floats

    Raises
    ------
    ParameterError
        Not three numbers, a negative or non-finite one, or a sum other than 1.
    """
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) != len(SPLIT_NAMES):
        raise ParameterError(f"split fractions must be three comma-separated numbers "
                             f"(train,validation,test), got {text!r}")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise ParameterError(f"split fractions must be numbers, got {text!r}") from None
    if not all(math.isfinite(v) and v >= 0.0 for v in values):
        raise ParameterError(f"split fractions must be finite and >= 0, got {text!r}")
    if abs(sum(values) - 1.0) > 1e-6:
        raise ParameterError(f"split fractions must sum to 1, got {text!r} "
                             f"(sum {sum(values):.6g})")
    total = sum(values)
    return _check_fractions([v / total for v in values])


def split_from_lists(ids: Iterable[str | int], train: Sequence[str | int] = (),
                     validation: Sequence[str | int] = (), test: Sequence[str | int] = ()
                     ) -> dict[str, list[str]]:
    """An explicit split: the ids of each list, in the order of ``ids``.

    Parameters
    ----------
    ids : iterable of str or int
        The recordings' ids (ints converted with ``str``).
    train, validation, test : sequence of str or int
        The ids of each split. Ids in no list belong to no split (only to ``"all"``).

    Returns
    -------
    dict with keys ``"train"``, ``"validation"``, ``"test"``

    Raises
    ------
    ParameterError
        An id listed that is not among ``ids``, an id in two lists (or twice in one).
    """
    known = [str(i) for i in ids]
    lists = {"train": train, "validation": validation, "test": test}
    owner: dict[str, str] = {}
    for name, members in lists.items():
        if isinstance(members, (str, bytes)) or not isinstance(members, Iterable):
            raise ParameterError(f"split {name!r} must be a list of ids, got {members!r}")
        for member in members:
            key = str(member)
            if key in owner:
                raise ParameterError(f"id {key!r} is listed in {owner[key]!r}"
                                     + (" twice" if owner[key] == name else f" and {name!r}"))
            owner[key] = name
    unknown = sorted(set(owner) - set(known))
    if unknown:
        from residualsim.data.ids import nearest_ids

        shown = ", ".join(unknown[:10]) + (" ..." if len(unknown) > 10 else "")
        raise ParameterError(f"{len(unknown)} listed id(s) are not among the recordings: {shown}"
                             f" (nearest to {unknown[0]!r}: "
                             f"{', '.join(nearest_ids(unknown[0], known))})")
    return {name: [i for i in known if owner.get(i) == name] for name in SPLIT_NAMES}


def load_split_ids(path: str | os.PathLike[str], ids: Iterable[str | int] | None = None
                   ) -> dict[str, list[str]]:
    """Read an explicit split from a JSON file ``{"train": [...], "validation": [...],
    "test": [...]}`` (``--split-ids FILE``; a missing key is an empty split).

    Parameters
    ----------
    path : path-like
        The JSON file.
    ids : iterable of str or int, optional
        The recordings' ids: when given, the lists are checked against them
        (:func:`split_from_lists`) and returned in their order.

    Returns
    -------
    dict with keys ``"train"``, ``"validation"``, ``"test"``
        Lists of str ids.

    Raises
    ------
    DataError
        The file is missing or not JSON, has another structure or an unknown key, or its
        lists do not fit ``ids``; the message starts with the path.
    """
    path = Path(path)
    if path.exists() and not path.is_file():  # a FIFO would block, a device read as empty
        raise DataError(f"{path}: not a regular file")
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{path}: no such split file") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(content, dict):
        raise DataError(f"{path}: expected a JSON object with keys {list(SPLIT_NAMES)}, got "
                        f"{type(content).__name__}")
    extra = sorted(set(content) - set(SPLIT_NAMES))
    if extra:
        raise DataError(f"{path}: unknown key(s) {extra}; expected {list(SPLIT_NAMES)}")
    lists = {}
    for name in SPLIT_NAMES:
        members = content.get(name, [])
        if not isinstance(members, list) or not all(
                isinstance(m, (str, int)) and not isinstance(m, bool) for m in members):
            raise DataError(f"{path}: {name!r} must be a list of ids (strings or integers)")
        lists[name] = [str(m) for m in members]
    try:
        everything = [i for members in lists.values() for i in members]
        return split_from_lists(everything if ids is None else ids, **lists)
    except ParameterError as exc:
        raise DataError(f"{path}: {exc}") from None


def split_recordings(ids: Iterable[str | int],
                     fractions: Sequence[float] | None = None,
                     lists: Mapping[str, Sequence[str | int]] | None = None
                     ) -> dict[str, list[str]]:
    """The train / validation / test ids of one call's choice: explicit ``lists``
    (:func:`split_from_lists`) when given, else the hash split with ``fractions`` (default
    :data:`DEFAULT_FRACTIONS`, seed 0)."""
    ids = [str(i) for i in ids]
    if lists is not None:
        return split_from_lists(ids, **lists)
    return split_ids(ids, fractions=DEFAULT_FRACTIONS if fractions is None else fractions)
