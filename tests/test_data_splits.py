"""Train/validation/test splits: deterministic, stable under growth, disjoint, covering."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from residualsim.data import split_ids
from residualsim.data.splits import split_value
from residualsim.errors import ParameterError

IDS = [str(i) for i in range(400)]


def _owner(split: dict[str, list[str]]) -> dict[str, str]:
    return {i: name for name, ids in split.items() for i in ids}


def test_disjoint_covering_and_in_input_order():
    split = split_ids(IDS)
    assert list(split) == ["train", "validation", "test"]
    together = [i for ids in split.values() for i in ids]
    assert sorted(together, key=int) == IDS and len(set(together)) == len(IDS)
    for ids in split.values():
        assert ids == sorted(ids, key=int)


def test_sizes_follow_fractions_roughly():
    split = split_ids(IDS, fractions=(0.7, 0.15, 0.15))
    sizes = {k: len(v) for k, v in split.items()}
    assert abs(sizes["train"] - 280) < 30 and abs(sizes["validation"] - 60) < 20
    assert abs(sizes["test"] - 60) < 20


def test_deterministic_and_documented_hash():
    assert split_ids(IDS, seed=3) == split_ids(list(IDS), seed=3)
    assert split_ids(IDS, seed=3) != split_ids(IDS, seed=4)
    digest = hashlib.blake2b(b"0:42", digest_size=8).digest()
    assert split_value("42", 0) == int.from_bytes(digest, "big") / 2.0**64
    assert split_ids([42]) == split_ids(["42"])


@settings(max_examples=30, deadline=None)
@given(
    extra=st.lists(st.text(min_size=1, max_size=8), max_size=50, unique=True),
    seed=st.integers(0, 1000),
)
def test_adding_ids_never_moves_existing_ones(extra, seed):
    base = IDS[:60]
    grown = base + [e for e in extra if e not in base]
    before, after = _owner(split_ids(base, seed=seed)), _owner(split_ids(grown, seed=seed))
    assert all(after[i] == before[i] for i in base)
    shuffled = _owner(split_ids(list(reversed(grown)), seed=seed))
    assert shuffled == after  # order of the input does not matter either


def test_zero_fractions_leave_splits_empty():
    split = split_ids(IDS, fractions=(1.0, 0.0, 0.0))
    assert len(split["train"]) == 400 and split["validation"] == split["test"] == []
    split = split_ids(IDS, fractions=(0.0, 0.0, 1.0))
    assert len(split["test"]) == 400


@pytest.mark.parametrize(
    "fractions, message",
    [
        ((0.7, 0.2, 0.2), "sum to 1"),
        ((1.2, -0.1, -0.1), ">= 0"),
        ((0.5, 0.5), "three"),
        ((0.5, float("nan"), 0.5), ">= 0"),
        (("a", "b", "c"), "three numbers"),
    ],
)
def test_bad_fractions(fractions, message):
    with pytest.raises(ParameterError, match=message):
        split_ids(IDS, fractions=fractions)
    with pytest.raises(ValueError):
        split_ids(IDS, fractions=fractions)


def test_bad_seed_and_repeated_ids():
    with pytest.raises(ParameterError, match="seed"):
        split_ids(IDS, seed=1.5)
    with pytest.raises(ParameterError, match="'3'"):
        split_ids(["1", "3", "3"])
