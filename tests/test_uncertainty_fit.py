"""``residualsim train`` fits the state noise and the spread by default (issue 35), on the
bundled synthetic cube tosses (7 training, 1 validation; tiny budgets, 1 substep)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import warnings
from pathlib import Path

import pytest

from residualsim.cli import main
from residualsim.data import load_trajectories
from residualsim.data.splits import split_ids
from residualsim.residual.model import ResidualModel
from residualsim.residual.state_noise import estimate_state_noise
from residualsim.residual.spread import fit_spread
from residualsim.residual.uncertainty_fit import (NOISE_FACTORS, UNCERTAINTY_GRID,
                                                  fit_uncertainty)

BUNDLED = Path(__file__).resolve().parents[1] / "data" / "samples" / "cube-synthetic"
ARGS = ["--data", str(BUNDLED), "--budget", "8", "--batch-size", "8", "--validate-every",
        "8", "--substeps", "1", "--seed", "0", "--max-tosses", "3", "--quiet"]


def _train(out: Path, *extra: str) -> dict:
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = main(["train", *ARGS, "--out", str(out), *extra])
    assert code == 0, stderr.getvalue()
    return json.loads(stdout.getvalue().strip().splitlines()[-1])


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, dict, Path, dict]:
    root = tmp_path_factory.mktemp("uncertainty")
    fitted, plain = root / "fitted", root / "plain"
    return fitted, _train(fitted), plain, _train(plain, "--no-fit-uncertainty")


def test_train_fits_state_noise_on_training_and_spread_on_validation(trained):
    out, line, _, _ = trained
    model = ResidualModel.load(out)
    record = model.info["uncertainty_fit"]
    tosses = load_trajectories(BUNDLED)
    parts = split_ids(list(tosses))
    # the state noise rests on the whole training split (not --max-tosses, not validation)
    expected = estimate_state_noise({k: tosses[k] for k in parts["train"]})
    # ... times the factor chosen on validation (at spread 1), then the spread with it
    factor = record["state_noise_factor"]
    assert model.state_noise == dataclasses.replace(expected, factor=factor)
    assert record["state_noise"] == model.state_noise.as_json()
    noise_rows = {row["state_noise_factor"]: row for row in record["state_noise_rows"]}
    assert sorted(noise_rows) == sorted(NOISE_FACTORS)
    worst_start = [row["reliability_xy_max_deviation"] for row in noise_rows.values()]
    assert noise_rows[factor]["reliability_xy_max_deviation"] == min(worst_start)
    assert line["state_noise_factor"] == factor
    assert record["state_noise_recordings"] == len(parts["train"])
    assert record["validation_recordings"] == len(parts["validation"])
    assert (record["criterion"], record["split"]) == ("reliability", "validation")
    assert [row["spread"] for row in record["rows"]] == list(UNCERTAINTY_GRID)
    worst = {row["spread"]: row["reliability_xy_max_deviation"] for row in record["rows"]}
    assert worst[model.spread] == min(worst.values())
    assert line["spread"] == model.spread and line["state_noise_fitted"] is True
    assert line["validation_coverage_xy_90"] == record["coverage_xy_90"]
    assert not (out / "uncertainty-fit.checkpoint.json").exists()


def test_no_fit_uncertainty_keeps_the_same_policy_without_noise_or_spread(trained):
    fitted, line, plain, plain_line = trained
    model = ResidualModel.load(plain)
    assert model.spread == 1.0 and model.state_noise is None
    assert "uncertainty_fit" not in model.info and "spread" not in plain_line
    assert plain_line["params_sha256"] == line["params_sha256"]


def test_the_fitted_uncertainty_is_more_honest_than_none(trained):
    """On 4 training tosses as the held-out set: the reliability curve of the fitted model
    (state noise + chosen spread) lies closer to the diagonal than exact initial states with
    a collapsed mixture (spread 0), whose samples all coincide."""
    _, _, plain, _ = trained
    model = ResidualModel.load(plain)
    tosses = load_trajectories(BUNDLED)
    ids = split_ids(list(tosses))["train"]
    held = {k: tosses[k] for k in ids[3:7]}
    fitted, record = fit_uncertainty(model, {k: tosses[k] for k in ids}, held, fit_spread,
                                     samples=8, grid=(0.0, 1.0, 4.0))
    _, rows = fit_spread(dataclasses.replace(model, state_noise=None), held, samples=8,
                         grid=(0.0,), criterion="reliability")
    assert record["reliability_xy_max_deviation"] < rows[0]["reliability_xy_max_deviation"]
    assert fitted.spread == record["spread"] and fitted.state_noise is not None


def test_fit_spread_state_noise_keeps_the_chosen_factor(trained, tmp_path):
    """``fit-spread --state-noise`` re-estimates the noise; the width train chose for it on
    validation stays (the estimate on the same training split is the same)."""
    from residualsim.experiments.jobs import fit_spread_job

    out, _, _, _ = trained
    model = ResidualModel.load(out)
    scaled = dataclasses.replace(model, state_noise=dataclasses.replace(model.state_noise,
                                                                        factor=0.25))
    scaled.save(tmp_path / "scaled")
    fit_spread_job(tmp_path / "scaled", str(BUNDLED), out=tmp_path / "refit", tosses=2,
                   samples=2, grid=(1.0,), state_noise=True)
    assert ResidualModel.load(tmp_path / "refit").state_noise == scaled.state_noise
