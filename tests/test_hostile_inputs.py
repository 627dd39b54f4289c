"""Every hostile own-object input of train/hostile_inputs.py ends in one clear error (exit 2,
the file or option named, no traceback): issue 37's table, run as a test."""

from __future__ import annotations

import pytest

from conftest import load_train_script

HOSTILE = load_train_script("hostile_inputs")


@pytest.mark.parametrize("case", HOSTILE.CASES, ids=[c.name for c in HOSTILE.CASES])
def test_hostile_input_is_one_clear_error(case):
    outcome = HOSTILE.run_case(case)
    assert not outcome.traceback, outcome.message
    assert outcome.code == case.expect, outcome.message
    assert case.mentions.lower() in outcome.message.lower(), outcome.message


def test_there_are_at_least_forty_cases():
    assert len(HOSTILE.CASES) >= 40
