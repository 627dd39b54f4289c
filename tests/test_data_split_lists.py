"""Explicit splits: fractions from text, id lists, and the --split-ids JSON file."""

from __future__ import annotations

import json

import pytest

from residualsim.data import load_split_ids, parse_split_fractions, split_from_lists
from residualsim.data.splits import select_recordings, split_ids
from residualsim.errors import DataError, ParameterError

IDS = [str(i) for i in range(10)]


def test_parse_split_fractions():
    assert parse_split_fractions("0.6,0.2,0.2") == pytest.approx((0.6, 0.2, 0.2))
    assert sum(parse_split_fractions(" 0.33, 0.33 ,0.34")) == 1.0
    assert parse_split_fractions("1,0,0") == (1.0, 0.0, 0.0)
    fractions = parse_split_fractions("0.6,0.2,0.2")
    assert split_ids(IDS, fractions=fractions) == split_ids(IDS, fractions=(0.6, 0.2, 0.2))


@pytest.mark.parametrize("text, message", [
    ("0.6,0.4", "three comma-separated numbers"),
    ("0.6,a,0.2", "must be numbers"),
    ("0.6,-0.1,0.5", "finite and >= 0"),
    ("nan,0.5,0.5", "finite and >= 0"),
    ("0.6,0.2,0.3", "must sum to 1"),
])
def test_bad_split_fractions(text, message):
    with pytest.raises(ParameterError, match=message):
        parse_split_fractions(text)


def test_split_from_lists_keeps_the_data_order_and_leaves_unlisted_ids_out():
    split = split_from_lists(IDS, train=[3, "1", "2"], validation=["0"], test=())
    assert split == {"train": ["1", "2", "3"], "validation": ["0"], "test": []}
    chosen = select_recordings({i: i for i in IDS}, "train", lists={"train": ["5", "4"]})
    assert list(chosen) == ["4", "5"]
    thirds = select_recordings({i: i for i in IDS}, "test", fractions=(0.0, 0.0, 1.0))
    assert list(thirds) == IDS


@pytest.mark.parametrize("lists, message", [
    ({"train": ["1", "11"]}, r"1 listed id\(s\) are not among the recordings: 11"),
    ({"train": ["1"], "test": ["1"]}, "id '1' is listed in 'train' and 'test'"),
    ({"validation": ["2", "2"]}, "id '2' is listed in 'validation' twice"),
    ({"train": "123"}, "must be a list of ids"),
])
def test_bad_lists(lists, message):
    with pytest.raises(ParameterError, match=message):
        split_from_lists(IDS, **lists)


def test_split_ids_file(tmp_path):
    path = tmp_path / "split.json"
    path.write_text(json.dumps({"train": ["2", 1], "test": ["9"]}))
    assert load_split_ids(path) == {"train": ["2", "1"], "validation": [], "test": ["9"]}
    assert load_split_ids(path, IDS) == {"train": ["1", "2"], "validation": [], "test": ["9"]}
    with pytest.raises(DataError, match=r"split\.json: 1 listed id\(s\) are not among"):
        load_split_ids(path, IDS[:5])


@pytest.mark.parametrize("content, message", [
    ("{not json", "not readable JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"train": [], "valid": []}', r"unknown key\(s\) \['valid'\]"),
    ('{"train": [1.5]}', "'train' must be a list of ids"),
    ('{"train": ["1"], "test": ["1"]}', "listed in 'train' and 'test'"),
])
def test_bad_split_ids_files(tmp_path, content, message):
    path = tmp_path / "s.json"
    path.write_text(content)
    with pytest.raises(DataError, match=rf"s\.json: .*{message}"):
        load_split_ids(path, IDS)
    with pytest.raises(DataError, match=r"missing\.json: no such split file"):
        load_split_ids(tmp_path / "missing.json")
