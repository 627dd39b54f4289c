"""Deterministic train/validation/test splits of trajectory or impact ids.

Each id is assigned on its own: ``u = blake2b(f"{seed}:{id}") / 2**64`` is a number in
[0, 1) that depends only on the seed and the id, and the id goes to the first split whose
cumulative fraction exceeds ``u``.  So

* the same ids and seed always give the same split, on every machine and Python version
  (no use of ``hash()`` or of a random generator);
* adding or removing other ids never moves an id to another split, so a model trained on
  an old split is never evaluated on its own training data after the data set grows;
* split sizes are binomial around ``fraction * n`` rather than exact (for 400 ids and
  0.15, about 60 +- 7).  Small sets can get an empty split; pick another seed if so.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence

from residualsim.errors import ParameterError

__all__ = ["SPLIT_NAMES", "split_ids", "split_value", "select_recordings", "select_impacts", "SPLITS"]

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


def select_recordings(trajectories: dict, split: str = "all", limit: int | None = None) -> dict:
    """The recordings of ``split`` (``"all"`` or a key of :func:`split_ids`), in their order,
    then only the first ``limit``."""
    if split != "all":
        keep = split_ids(list(trajectories))[split]
        trajectories = {k: trajectories[k] for k in keep}
    if limit is not None:
        trajectories = dict(list(trajectories.items())[:limit])
    return trajectories


def select_impacts(impacts, split: str = "all", limit: int | None = None):
    """The :class:`~residualsim.data.PlanarImpacts` of ``split`` (by upstream row number),
    then only the first ``limit``."""
    if split != "all":
        impacts = impacts.subset(split_ids(impacts.rows.tolist())[split])
    if limit is not None:
        impacts = impacts.subset(impacts.rows[:limit])
    return impacts
