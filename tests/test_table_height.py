"""``table_height_m``: the engine moves the static body along the up axis, the parameter
round-trips without touching older files, and the rest phases recover a known table height."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from residualsim.errors import DataError, ParameterError
from residualsim.sim.engine import Engine
from residualsim.sim.scenes import EngineParams, parse_params
from residualsim.sim.synthesize import synthesize_tosses
from residualsim.sysid.ground import estimate_table_height
from residualsim.sysid.paramspace import ParamSpace

ELL = str(Path(__file__).resolve().parents[1] / "assets" / "examples" / "ell.toml")
ROOT = Path(__file__).resolve().parents[1]


def _drop(engine: Engine, height_m: float = 0.0) -> np.ndarray:
    """Final centre position (3,) m of a tilted drop from 0.25 m above the scene's table."""
    state = np.zeros(engine.scene.state_size)
    state[2], state[3:7] = 0.25 + height_m, [0.96, 0.2, 0.1, 0.05]
    state[3:7] /= np.linalg.norm(state[3:7])
    state[7], state[11] = 0.3, 2.0
    result = engine.rollout(state, 300)
    return engine.scene.rigid_motion(result.states)[0][-1]


@pytest.mark.parametrize("scene", ["cube", ELL])
def test_table_height_moves_the_rest_by_exactly_the_offset_and_none_restores(scene):
    with Engine(scene, EngineParams()) as engine:
        rest = _drop(engine)
        assert rest[2] > 0.005  # it came to rest on the table, not below
        for height in (0.003, -0.002):
            engine.set_params(EngineParams(table_height_m=height))
            moved = _drop(engine, height)
            np.testing.assert_allclose(moved - rest, [0.0, 0.0, height], atol=1e-9)
        engine.set_params(EngineParams())  # unset: the scene's own table, bit for bit
        np.testing.assert_array_equal(_drop(engine), rest)
        engine.set_params(EngineParams(table_height_m=0.0))
        np.testing.assert_array_equal(_drop(engine), rest)
    with Engine(scene, EngineParams(table_height_m=0.003)) as fresh:  # built there
        np.testing.assert_allclose(_drop(fresh, 0.003) - rest, [0, 0, 0.003], atol=1e-9)


def test_json_round_trip_and_older_params_unchanged(tmp_path):
    plain = parse_params("lateral_friction=0.2,restitution=0.3")
    assert "table_height_m" not in plain.as_json()
    assert plain.table_height_m is None and plain.table_offset_m == 0.0
    old = {"lateral_friction": 0.2, "restitution": 0.3, "spinning_friction": 0.0,
           "rolling_friction": 0.0, "contact_stiffness": "inf", "contact_damping": 0.0}
    assert plain.as_json() == old  # what every earlier params file holds
    shifted = plain.replace(table_height_m=-0.0012)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(shifted.as_json()))
    assert parse_params(path) == shifted and parse_params(path).table_height_m == -0.0012
    with pytest.raises(ParameterError, match="table_height_m must lie in"):
        EngineParams(table_height_m=0.2)


def test_shipped_model_params_hash_is_unchanged():
    from residualsim.residual.model import ResidualModel

    model = ResidualModel.load(ROOT / "data" / "pretrained" / "cube-contactnets")
    stored = json.loads((ROOT / "data/pretrained/cube-contactnets/model.json").read_text())
    assert model.params.as_json() == stored["params"]
    text = json.dumps(model.params.as_json(), sort_keys=True)
    assert hashlib.sha256(text.encode()).hexdigest() == hashlib.sha256(json.dumps(
        stored["params"], sort_keys=True).encode()).hexdigest()


def test_calibration_space_takes_table_height_with_its_searched_range():
    space = ParamSpace(["contact", "table_height_m"], scene="cube")
    parameter = space.parameters[space.names.index("table_height_m")]
    assert (parameter.low, parameter.high) == (-0.005, 0.005)
    params = space.engine_params(space.from_unit(np.full(space.ndim, 1.0)))
    assert params.table_height_m == pytest.approx(0.005)


def test_arm_loop_refuses_table_height(capsys, tmp_path, monkeypatch):
    from residualsim.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["calibrate", "--scene", "arm-loop", "--params", "table_height_m",
                 "--out", "unused-out"]) == 2
    assert "table_height_m has no effect in scene 'arm-loop'" in capsys.readouterr().err
    assert not Path("unused-out").exists()


def test_rest_phases_recover_a_known_table_height():
    truth = EngineParams(lateral_friction=0.3, restitution=0.2, table_height_m=-0.0011)
    tosses = synthesize_tosses(truth, n_tosses=8, n_samples=180, rng=3)
    found = estimate_table_height("cube", tosses, truth.replace(table_height_m=0.0))
    assert found.n_used >= 5
    assert found.table_height_m == pytest.approx(-0.0011, abs=2e-6)
    assert found.spread_m < 1e-5 and found.jitter_std_m < 1e-6  # noise-free recordings
    again = estimate_table_height("cube", tosses, truth)  # already at the truth
    assert again.offset_m == pytest.approx(0.0, abs=2e-6)
    assert again.table_height_m == pytest.approx(-0.0011, abs=2e-6)


def test_recordings_not_at_rest_are_refused_by_name():
    truth = EngineParams(lateral_friction=0.3)
    tosses = synthesize_tosses(truth, n_tosses=2, n_samples=12, rng=1)  # still flying
    with pytest.raises(DataError, match="0 of 2 recordings end at rest"):
        estimate_table_height("cube", tosses, truth)


@pytest.fixture(scope="module")
def lowered_set(tmp_path_factory) -> Path:
    """Noise-free tosses made with the table 1.1 mm low (1 substep, long enough to rest)."""
    from residualsim.cli import main

    out = tmp_path_factory.mktemp("ground") / "tosses"
    assert main(["data", "synthesize", "--params", "lateral_friction=0.3,restitution=0.2,"
                 "table_height_m=-0.0011", "--count", "8", "--samples", "180",
                 "--substeps", "1", "--seed", "3", "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("extra", [[], ["--no-ground"]])
def test_calibrate_sets_the_table_height_after_its_search(lowered_set, tmp_path, capsys,
                                                          extra):
    from residualsim.cli import main

    out = tmp_path / "cal"
    assert main(["calibrate", "--data", str(lowered_set), "--method", "lsq", "--budget", "4",
                 "--substeps", "1", "--split", "all", "--params", "lateral_friction",
                 "--bounds", "lateral_friction=0.29:0.31", "--base", "restitution=0.2",
                 "--quiet", "--out", str(out), *extra]) == 0
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    summary = json.loads((out / "summary.json").read_text())
    if extra:
        assert "table_height_m" not in summary["params"] and "ground" not in summary
    else:
        assert summary["params"]["table_height_m"] == pytest.approx(-0.0011, abs=2e-5)
        assert record["ground"]["n_used"] >= 5
        assert record["ground"]["table_height_m"] == summary["params"]["table_height_m"]
