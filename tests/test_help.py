"""Help and errors where a newcomer looks: every option explains itself and its default;
ids that are not found come with the nearest ones."""

from __future__ import annotations

import argparse

import pytest

from residualsim.cli import build_parser, main
from residualsim.data.bundled import SYNTHETIC_SAMPLES
from residualsim.data.ids import nearest_ids


def _options(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, path + (name,))
        elif action.option_strings and not isinstance(
                action, (argparse._HelpAction, argparse._VersionAction)):
            yield " ".join(path), parser, action


def test_every_option_has_help_that_states_its_default():
    missing = []
    for command, parser, action in _options(build_parser()):
        text = parser.formatter_class(command)._get_help_string(action) if action.help else ""
        if not text:
            missing.append(f"{command} {action.option_strings[-1]}: no help")
        elif (not action.required and action.default is not False
                and "default" not in text and "required" not in text):
            missing.append(f"{command} {action.option_strings[-1]}: no default in {text!r}")
    assert not missing, "\n".join(missing)


def test_scene_help_says_where_it_is_read_from_and_the_default(capsys):
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "relative to the working directory" in text and "(default cube" in text


def test_synthesize_help_shows_params_for_scene_files_and_the_noise_default(capsys):
    with pytest.raises(SystemExit):
        main(["data", "synthesize", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "required for the cube and for scene files" in text
    assert "rad, per axis" in text and "(default 0.0)" in text


def test_nearest_ids_find_a_prefixed_id():
    known = [f"synthetic-{i}" for i in range(1, 16)]
    assert nearest_ids("3", known)[:2] == ["synthetic-3", "synthetic-13"]
    assert nearest_ids("synthtic-7", known)[0] == "synthetic-7"
    assert nearest_ids("zzz", ["a", "b"]) == ["a", "b"]


def test_rollout_of_an_unknown_toss_lists_the_nearest_ids(tmp_path, capsys):
    code = main(["rollout", "--toss", "3", "--data", str(SYNTHETIC_SAMPLES),
                 "--out", str(tmp_path / "r.npz")])
    err = capsys.readouterr().err
    assert code == 2
    assert "no toss '3'" in err and "nearest: synthetic-3" in err
    assert not (tmp_path / "r.npz").exists()
