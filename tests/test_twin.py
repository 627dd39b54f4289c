"""``residualsim twin``: one command from recordings to a twin that every consumer loads, the
same summary after a kill and ``--resume``, too few recordings refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from residualsim.cli import main
from residualsim.experiments.twin import STATE_FILE, SUMMARY_FILE, run_twin

ROOT = Path(__file__).resolve().parents[1]
ELL = ROOT / "assets" / "examples" / "ell.toml"
#: Smoke budgets: the stages run, their figures are not the point here.
CAPS = {"contact": 8, "body": 40, "train": 2, "fit_recordings": 3, "samples": 3}


@pytest.fixture(scope="module")
def recordings(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("twin") / "rec"
    code = main(["data", "synthesize", "--scene", str(ELL), "--count", "50", "--samples", "40",
                 "--noise-m", "0.0005", "--params", "lateral_friction=0.3,restitution=0.4",
                 "--out", str(out)])
    assert code == 0
    return out


@pytest.fixture(scope="module")
def twin(recordings, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("twin") / "twin"
    summary = run_twin(recordings, str(ELL), out, minutes=1.0, caps=CAPS)
    return out, summary


def test_the_twin_is_judged_on_the_test_split_and_says_what_earned_its_place(twin):
    out, summary = twin
    assert json.loads((out / SUMMARY_FILE).read_text()) == json.loads(json.dumps(summary))
    test = summary["test"]
    assert test["recordings"] == summary["check"]["splits"]["test"] >= 5
    errors = test["errors"]
    assert set(errors) == {"default_engine", "calibrated_engine", "twin_mean"}
    assert all(e["n_trajectories"] == test["recordings"] for e in errors.values())
    rows = test["energy_score_rows"]
    assert list(rows)[0] == "deterministic" and len(rows) == 3
    assert 0.0 <= rows["state noise + residual"]["coverage_xy_90"] <= 1.0
    words = " ".join(summary["verdict"])
    assert "calibration:" in words and "residual:" in words and "spread:" in words
    assert summary["budgets"]["contact"] <= CAPS["contact"]  # what each stage was given
    assert summary["engine_parameter_draws"].startswith("not drawn: least squares")
    assert (out / "report.html").stat().st_size > 10_000


def test_every_consumer_loads_the_twin(twin, recordings):
    import gymnasium
    import pybullet

    from residualsim import StochasticSimulator, toss_state

    out, _ = twin
    with StochasticSimulator(out, n_workers=1) as sim:
        toss = toss_state(position_m=[0, 0, 0.3], quat_wxyz=[1, 0, 0, 0],
                          velocity_mps=[0.5, 0, -0.5], omega_radps=[0, 3, 0])
        rollout = sim.rollout(toss, horizon_s=0.6, samples=2, seed=0)
        assert np.isfinite(rollout.final_positions_m).all()
    env = gymnasium.make("residualsim/Toss-v0", model=str(out))
    env.reset(seed=0)
    client = pybullet.connect(pybullet.DIRECT)
    try:
        assert pybullet.loadURDF(str(out / "twin.urdf"), physicsClientId=client) >= 0
    finally:
        pybullet.disconnect(client)
    assert main(["predict", "--model", str(out), "--data", str(recordings), "--split", "test",
                 "--out", str(out.parent / "p.npz")]) == 0


def test_a_killed_run_resumed_gives_the_same_summary(twin, recordings, tmp_path):
    out, summary = twin
    copy = tmp_path / "twin"
    shutil.copytree(out, copy)
    state = json.loads((copy / STATE_FILE).read_text())
    for stage in ("judge", "report"):  # killed after training
        del state["stages"][stage]
    (copy / STATE_FILE).write_text(json.dumps(state))
    (copy / SUMMARY_FILE).unlink()
    with pytest.raises(ValueError, match="--resume"):
        run_twin(recordings, str(ELL), copy, minutes=1.0, caps=CAPS)
    resumed = run_twin(recordings, str(ELL), copy, minutes=1.0, caps=CAPS, resume=True)
    assert resumed == summary
    with pytest.raises(ValueError, match="other settings"):
        run_twin(recordings, str(ELL), copy, minutes=2.0, caps=CAPS, resume=True)


def test_too_few_recordings_are_refused_in_one_line(recordings, tmp_path, capsys):
    few = tmp_path / "few"
    few.mkdir()
    for path in sorted(recordings.glob("*.csv"))[:12]:
        shutil.copy(path, few / path.name)
    code = main(["twin", str(few), "--scene", str(ELL), "--out", str(tmp_path / "t")])
    err = capsys.readouterr().err
    assert code == 2 and "a twin needs at least 3 validation recordings" in err
    assert "record more" in err and len(err.strip().splitlines()) <= 2
    assert not (tmp_path / "t").exists()


def test_the_body_is_kept_only_where_the_guard_chose_it(tmp_path):
    """--body: the body stage's held-out guard scores the contact stage's fit too; the twin
    keeps whichever it chose and says why (issue 66: a body kept only where it beats, on
    validation, the contact fitted alone with the URDF's body)."""
    from residualsim.experiments.twin import _kept

    figures = {"calibrated": {"position_rmse_m": 0.0826}, "contact": {"position_rmse_m": 0.08},
               "contact_fit": {"position_rmse_m": 0.0779}, "default": {"position_rmse_m": 0.1}}
    path, words = _kept({"held_out_choice": "contact_fit", "validation": figures}, tmp_path)
    assert path == tmp_path / "contact" and "contact fitted alone" in words
    assert "contact_fit 0.0779 m" in words
    path, words = _kept({"held_out_choice": "calibrated", "validation": figures}, tmp_path)
    assert path == tmp_path / "body" and words.startswith("the identified body is kept")
    path, words = _kept({"held_out_choice": "contact", "validation": figures}, tmp_path)
    assert path == tmp_path / "body" and words.startswith("the URDF's body is kept")
