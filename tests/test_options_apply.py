"""Issue 67: an option that does not apply is refused, naming what it applies to.

``--weighting`` with lsq, ``--small-sample`` outside calibrated MH and ``bench beliefs
--batch-sizes`` / ``--draws`` without ``--methods`` were accepted and had no effect (so the
README's own headline line printed no batch comparison); ``--draws 3,3,,`` was accepted with
its empty and repeated items. Each is now one error, exit 2, before any work."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from residualsim.cli import main
from residualsim.errors import ParameterError
from residualsim.sysid.calibrate import calibrate
from residualsim.sysid.calibrate_options import check_applicable

ROOT = Path(__file__).resolve().parents[1]
SYNTHETIC = ROOT / "data" / "samples" / "cube-synthetic"


def _refusal(capsys, argv) -> str:
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exit_:  # argparse
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize(("extra", "message"), [
    (["--method", "lsq", "--weighting", "recording"],
     "--weighting recording applies to --method mh (the likelihood it samples), not to "
     "--method lsq"),
    (["--method", "nevergrad", "--weighting", "calibrated"], "not to --method nevergrad"),
    (["--method", "sandwich", "--small-sample", "none"],
     "--small-sample none applies to --method mh's calibrated likelihood"),
    (["--weighting", "recording", "--small-sample", "none"],
     "not to --method mh with --weighting recording"),
    (["--delayed-acceptance", "0.5", "--small-sample", "cr1t"],
     "--small-sample cr1t applies to --method mh's calibrated likelihood"),
    (["--method", "nevergrad", "--rugged-weight", "0.2"], "--rugged-weight 0.2 applies to"),
    (["--noise", "0.001", "--weighting", "calibrated"],
     "--weighting calibrated applies to MH on trajectories with the noise estimated"),
    (["--noise", "0.001", "--small-sample", "none"], "not to --method mh with --noise"),
    (["--method", "lsq", "--delayed-acceptance", "0.5"],
     "--delayed-acceptance 0.5 applies to --method mh, not to --method lsq"),
    (["--optimizer", "CMA"], "--optimizer CMA applies to --method nevergrad, not to --method mh"),
    (["--method", "sandwich", "--checkpoint-every", "5"],
     "--checkpoint-every 5 applies to --method mh or nevergrad, not to --method sandwich"),
    (["--method", "lsq", "--init", "mpec"], "--init mpec applies to --method mh or sandwich"),
    (["--method", "mpec", "--weighting", "calibrated"], "not to --method mpec"),
    (["--scene", "arm-loop", "--weighting", "recording"], "not to --scene arm-loop"),
    (["--method", "mpec", "--guard-against", "cal"],
     "--guard-against cal applies to --method mh, sandwich, nevergrad, lsq"),
], ids=["weighting-lsq", "weighting-nevergrad", "small-sample-sandwich",
        "small-sample-raw-mh", "small-sample-delayed", "rugged-nevergrad",
        "weighting-with-noise", "small-sample-with-noise", "delayed-lsq", "optimizer-mh",
        "checkpoint-sandwich", "init-mpec-lsq", "weighting-mpec", "weighting-arm-loop",
        "guard-against-mpec"])
def test_calibrate_refuses_an_option_of_another_method(capsys, tmp_path, extra, message):
    out = tmp_path / "a" / "cal"
    line = _refusal(capsys, ["calibrate", "--data", SYNTHETIC, "--split", "all", "--quiet",
                             *extra, "--out", out])
    assert line.startswith("residualsim: error:") and message in line, line
    assert "no effect" in line or "drop it" in line
    assert not (tmp_path / "a").exists()  # refused before anything was written


def test_the_library_refuses_them_too(tmp_path):
    with pytest.raises(ParameterError, match="--weighting calibrated applies to --method mh"):
        calibrate("cube", SYNTHETIC, ["restitution"], tmp_path / "cal", method="lsq",
                  weighting="calibrated")
    with pytest.raises(ParameterError, match="--small-sample none applies"):
        calibrate("cube", SYNTHETIC, ["restitution"], tmp_path / "cal", method="sandwich",
                  small_sample="none")
    with pytest.raises(ParameterError, match="not to --method mh on impacts"):
        check_applicable("mh", impacts=True, weighting="calibrated")
    assert not (tmp_path / "cal").exists()
    check_applicable("mh", weighting="calibrated", small_sample="none", rugged_weight=0.1,
                     checkpoint_every=5)  # all of them apply to the default MH


def test_check_calibration_refuses_them_before_its_first_data_set(capsys, tmp_path):
    line = _refusal(capsys, ["check-calibration", "--method", "sandwich", "--small-sample",
                             "none", "--datasets", "1", "--out", tmp_path / "r.jsonl"])
    assert "--small-sample none applies to --method mh's calibrated likelihood" in line
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize(("extra", "message"), [
    (["--batch-sizes", "1,auto"], "--batch-sizes applies to the belief steps of --methods"),
    (["--reference-particles", "50"], "--reference-particles applies to the belief steps"),
    (["--draws", "250"], "--draws applies to the conjugate step"),
    (["--methods", "particles", "--draws", "250"], "--draws applies to the conjugate step"),
    (["--methods", "conjugate", "--draws", "3,3,,"], "draws: an empty item in '3,3,,'"),
    (["--methods", "conjugate", "--draws", "3,3"], "draws: 3 given twice in '3,3'"),
    (["--methods", "conjugate", "--draws", "3,03"], "draws: a value given twice"),
    (["--methods", "particles", "--batch-sizes", "1,,auto"], "batch sizes: an empty item"),
    (["--methods", "particles,particles"], "methods: particles given twice"),
], ids=["batch-sizes", "reference", "draws", "draws-particles", "draws-empty",
        "draws-twice", "draws-same-value", "batch-empty", "methods-twice"])
def test_bench_beliefs_refuses_options_of_steps_it_does_not_run(capsys, extra, message):
    line = _refusal(capsys, ["bench", "beliefs", "--data", SYNTHETIC, *extra])
    assert message in line, line


def _fake_report(methods, batch_sizes, **_) -> dict:
    """The report bench_beliefs would give, its timings made up (no benchmark runs here)."""
    from residualsim.experiments.bench_beliefs import method_label

    rows = {}
    for name in methods:
        for size in batch_sizes or (None,):
            wall = 5.0 if size == 1 else 2.0
            rows[method_label(name, size)] = {
                "over_real_time": wall, "rollouts": 10, "distance_to_reference": 0.3,
                "overhead": wall, "engine_steps": 100, "bare_s": 1.0, "rollout_s": wall,
                "rollout_overhead": wall, "overheads": [wall], "wall_s": wall}
    return {"n_trajectories": 4, "simulated_s": 1.0, "particles": 1000, "workers": 2,
            "residual_over_real_time": 1.0, "engine_over_real_time": 1.0,
            "residual_over_engine": 1.0, "bare_over_real_time": {"5": 0.5},
            "propagated": 1, "accepted": 1, "rejected_penetration": 0, "rejected_energy": 0,
            "rejected_fraction": 0.0, "no_event": 0, "reference_particles": 20000,
            "methods": rows}


def test_the_readme_bench_beliefs_lines_run_what_the_readme_says(capsys, monkeypatch):
    """Each ``bench beliefs`` line of the README's headline table runs the comparison its
    row reports: batch size 1 against automatic batches (and prints the speed-up), or the
    conjugate step against the particles. The bench itself is replaced: only what the
    command asks of it is checked."""
    import residualsim.cli.bench as cli_bench
    import residualsim.experiments.bench_beliefs as bench

    calls = []

    def fake(model, tosses, **kwargs):
        calls.append(kwargs)
        return _fake_report(**kwargs)

    monkeypatch.setattr(bench, "bench_beliefs", fake)
    monkeypatch.setattr(cli_bench, "model_and_tosses", lambda *args: (None, {}))
    readme = (ROOT / "README.md").read_text()
    lines = re.findall(r"`(residualsim bench beliefs [^`]*)`", readme)
    assert len(lines) == 2, lines
    outputs = []
    for line in lines:
        assert main(shlex.split(line)[1:]) == 0
        outputs.append(capsys.readouterr().out)
    batched, conjugate = calls
    assert "particles" in batched["methods"] and batched["batch_sizes"] == (1, None)
    assert "automatic batches 2.50x faster than one at a time" in outputs[0]
    assert batched["methods"] and "overhead" in outputs[0]
    assert conjugate["methods"] == ("particles", "conjugate")
