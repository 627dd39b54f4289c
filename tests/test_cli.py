"""The residualsim command, end to end on the bundled samples (and the real sets if present)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from residualsim.cli import main
from residualsim.data import load_tosses
from residualsim.evaluation.predictions import load_predictions

BUNDLED = Path(__file__).resolve().parents[1] / "data" / "samples" / "cube-synthetic"


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_demo_prints_the_table_and_a_json_line(capsys, tmp_path):
    # Few samples and particles (they only feed the coverage columns and the picture; the
    # JSON line's position RMSE is the deterministic residual row's).
    code, out, _ = _run(capsys, "demo", "--out", str(tmp_path), "--samples", "8",
                        "--particles", "40")
    assert code == 0
    assert "position RMSE" in out and "rotation error" in out
    figures = _last_json(out)
    assert figures["n_trajectories"] == 8
    assert 0.01 < figures["position_rmse_m"] < 0.5


def test_simulate_then_score_with_true_parameters(capsys, tmp_path):
    pred = tmp_path / "pred.npz"
    code, out, _ = _run(capsys, "simulate", "--scene", "cube", "--data", str(BUNDLED),
                        "--out", str(pred), "--params", "lateral_friction=0.18,restitution=0.3")
    assert code == 0 and _last_json(out)["count"] == 8
    predictions = load_predictions(pred)
    recorded = load_tosses(BUNDLED)
    for traj_id, traj in recorded.items():
        assert predictions[traj_id].position.shape == (1, traj.n_samples, 3)
        assert predictions[traj_id].quaternion.shape == (1, traj.n_samples, 4)
        np.testing.assert_allclose(predictions[traj_id].position[0, 0], traj.positions_m[0])
    code, out, _ = _run(capsys, "score", "--pred", str(pred), "--data", str(BUNDLED))
    assert code == 0
    assert _last_json(out)["position_rmse_m"] < 0.01


def test_synthesize_writes_a_loadable_set_with_its_truth(capsys, tmp_path):
    out_dir = tmp_path / "synth"
    code, out, _ = _run(capsys, "data", "synthesize", "--params", "lateral_friction=0.4",
                        "--count", "3", "--samples", "40", "--out", str(out_dir), "--seed", "5")
    assert code == 0
    tosses = load_tosses(out_dir)
    assert len(tosses) == 3 and all(t.n_samples == 40 for t in tosses.values())
    truth = json.loads((out_dir / "synthetic.json").read_text())
    assert truth["params"]["lateral_friction"] == 0.4 and truth["seed"] == 5
    # Same seed, same data; an existing output is refused without --force.
    code, _, err = _run(capsys, "data", "synthesize", "--params", "lateral_friction=0.4",
                        "--count", "3", "--samples", "40", "--out", str(out_dir), "--seed", "5")
    assert code == 2 and "already exists" in err
    again = tmp_path / "again"
    _run(capsys, "data", "synthesize", "--params", "lateral_friction=0.4", "--count", "3",
         "--samples", "40", "--out", str(again), "--seed", "5")
    for traj_id, traj in load_tosses(again).items():
        np.testing.assert_array_equal(traj.positions_m, tosses[traj_id].positions_m)


@pytest.mark.parametrize(("flags", "message"), [
    (["--samples", "99999999999"], "3 tosses, 3e+11 samples in all (--count x --samples); "
                                   "at most 1000000"),  # was a MemoryError traceback
    (["--count", "2001", "--samples", "500"], "2001 tosses, 1.0005e+06 samples in all"),
    (["--rate", "1e-3"], "rate_hz (--rate) must be within 10 to 2000 Hz"),  # z reached -1e7 m
    (["--rate", "1e9"], "rate_hz (--rate) must be within 10 to 2000 Hz"),
    (["--rate", "nan"], "got nan"),
    (["--noise-m", "1e200"], "noise_m (--noise-m) must be within 0 to 0.005 m"),
    (["--noise-m", "inf"], "noise_m (--noise-m) must be within 0 to 0.005 m"),
    (["--noise-rad", "0.06"], "noise_rad (--noise-rad) must be within 0 to 0.05 rad"),
])
def test_synthesize_refuses_unphysical_sizes_up_front(capsys, tmp_path, flags, message):
    out_dir = tmp_path / "synth"
    code, _, err = _run(capsys, "data", "synthesize", "--params", "lateral_friction=0.4",
                        "--count", "3", "--out", str(out_dir), *flags)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("residualsim: error: "), err
    assert message in lines[0] and not out_dir.exists()


def test_synthesize_accepts_the_bounds_themselves():
    from residualsim.sim.synthesize import synthesize_tosses

    for rate in (10.0, 2000.0):
        tosses = synthesize_tosses("lateral_friction=0.4", n_tosses=1, n_samples=5,
                                   noise_m=0.005, noise_rad=0.05, rate_hz=rate)
        assert tosses["synthetic-0"].times_s[1] == pytest.approx(1.0 / rate)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "--scene", "sphere", "--data", str(BUNDLED), "--out", "x.npz"],
         "unknown scene 'sphere'"),
        (["simulate", "--data", str(BUNDLED), "--out", "x.npz", "--params",
          "lateral_friction=-0.2"], "lateral_friction must lie in"),
        (["simulate", "--data", "/no/such/dir", "--out", "x.npz"], "/no/such/dir"),
        (["data", "info", "/no/such/dir"], "/no/such/dir"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(capsys, tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    code, _, err = _run(capsys, *argv)
    assert code == 2
    assert message in err
    assert not (tmp_path / "x.npz").exists()


def test_truncated_recording_names_the_file(capsys, tmp_path):
    data = tmp_path / "set"
    shutil.copytree(BUNDLED, data)
    broken = data / "tosses" / "synthetic-3.pt"
    broken.write_bytes(broken.read_bytes()[:500])
    code, _, err = _run(capsys, "simulate", "--data", str(data), "--out",
                        str(tmp_path / "p.npz"))
    assert code == 2 and "synthetic-3.pt" in err
    assert not (tmp_path / "p.npz").exists()


def test_score_refuses_a_prediction_of_the_wrong_length(capsys, tmp_path):
    pred = tmp_path / "pred.npz"
    _run(capsys, "simulate", "--data", str(BUNDLED), "--out", str(pred), "--limit", "2")
    arrays = dict(np.load(pred))
    arrays["synthetic-0/position"] = arrays["synthetic-0/position"][:, :-5]
    arrays["synthetic-0/quaternion"] = arrays["synthetic-0/quaternion"][:, :-5]
    np.savez(tmp_path / "short.npz", **arrays)
    code, _, err = _run(capsys, "score", "--pred", str(tmp_path / "short.npz"),
                        "--data", str(BUNDLED))
    assert code == 2 and "'synthetic-0'" in err


def test_data_info_on_the_real_sets(capsys, shared_data):
    code, out, _ = _run(capsys, "data", "info", str(shared_data / "contactnets-cube"))
    assert code == 0
    info = _last_json(out)
    assert info["count"] == 400 and info["rate_hz"]["median"] == pytest.approx(148.0)
    code, out, _ = _run(capsys, "data", "info", str(shared_data / "planar-impact-ellipse"))
    assert code == 0 and _last_json(out)["count"] == 1300


def test_simulate_planar_impacts_writes_upstream_rows(capsys, tmp_path, shared_data):
    pred = tmp_path / "impacts.npz"
    code, out, _ = _run(capsys, "simulate", "--scene", "planar-ellipse", "--data",
                        str(shared_data / "planar-impact-ellipse"), "--out", str(pred),
                        "--params", "restitution=0.5,lateral_friction=0.3", "--workers", "2")
    assert code == 0
    predictions = load_predictions(pred)
    rows = np.loadtxt(shared_data / "planar-impact-ellipse" / "original_rows.txt", dtype=int)
    np.testing.assert_array_equal(predictions.rows, rows)
    assert predictions.post_velocity.shape == (1, 1300, 3)
    # An impact bounces: the post-contact vertical velocity is upward.
    assert np.median(predictions.post_velocity[0, :, 1]) > 0.3
    code, out, _ = _run(capsys, "score", "--pred", str(pred), "--data",
                        str(shared_data / "planar-impact-ellipse"))
    assert code == 0 and _last_json(out)["velocity_rmse_mps"] < 1.0


@pytest.mark.parametrize("flag", [["--workers", "0"], ["--limit", "-3"], ["--workers", "two"]])
def test_bad_counts_are_usage_errors_not_tracebacks(capsys, flag):
    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", "--data", str(BUNDLED), "--out", "x.npz", *flag])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert flag[0] in err and "Traceback" not in err
