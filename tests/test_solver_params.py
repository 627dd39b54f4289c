"""The ``solver`` parameter group: PyBullet solver and collision settings as calibratable
engine parameters, refused where the scene's engine ignores them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pybullet as pb
import pytest

from residualsim.errors import ParameterError
from residualsim.sim.engine import Engine
from residualsim.sim.scenes import SOLVER_PARAMS, EngineParams, make_scene, parse_params
from residualsim.sysid.bodyspace import expand_names
from residualsim.sysid.paramspace import ParamSpace

RIGID = {"lateral_friction": 0.2, "restitution": 0.1}
SOFT = {**RIGID, "contact_stiffness": 1e4, "contact_damping": 30.0}


def _toss() -> np.ndarray:
    state = np.array([0, 0, 0.2, 0.9, 0.3, 0.2, 0.1, 1.0, 0.3, -1.0, 3.0, -5.0, 2.0])
    state[3:7] /= np.linalg.norm(state[3:7])
    return state


def _positions(engine: Engine, steps: int = 90) -> np.ndarray:
    """Centre positions (steps, 3) m of a tumbling, sliding toss of the cube."""
    engine.reset(_toss())
    out = []
    for _ in range(steps):
        engine.step()
        out.append(engine.state()[:3].copy())
    return np.array(out)


def _run(params: dict, raw_engine: dict | None = None, raw_body: dict | None = None
         ) -> np.ndarray:
    with Engine("cube", params) as engine:
        if raw_engine:
            pb.setPhysicsEngineParameter(physicsClientId=engine.client, **raw_engine)
        if raw_body:
            for body in (engine.scene.body, engine.scene.static_body):
                pb.changeDynamics(body, -1, physicsClientId=engine.client, **raw_body)
        return _positions(engine)


@pytest.mark.parametrize("base, change", [
    (RIGID, {"contact_erp": 0.8}),
    (RIGID, {"solver_iterations": 4}),
    (RIGID, {"restitution_velocity_threshold": 0.5}),
    (RIGID, {"friction_anchor": 1}),
    (SOFT, {"solver_iterations": 4}),
    (SOFT, {"friction_anchor": 1}),
])
def test_each_honoured_solver_parameter_moves_the_cube(base, change):
    moved = np.abs(_run({**base, **change}) - _run(base)).max()
    assert moved > 1e-5, f"{change} left the trajectory unchanged ({moved} m)"


@pytest.mark.parametrize("name, value, raw_engine, raw_body", [
    ("collision_margin", 0.01, None, {"collisionMargin": 0.01}),
    ("contact_processing_threshold", 0.05, None, {"contactProcessingThreshold": 0.05}),
    ("split_impulse", 1.0, {"useSplitImpulse": 1}, None),
    ("erp", 0.8, {"erp": 0.8}, None),
])
def test_ignored_solver_parameters_are_refused_and_really_ignored(name, value, raw_engine,
                                                                  raw_body):
    # the measurement behind the refusal: set behind residualsim's back, nothing changes
    np.testing.assert_array_equal(_run(RIGID, raw_engine, raw_body), _run(RIGID))
    with pytest.raises(ParameterError, match=f"{name} has no effect in scene 'cube'"):
        Engine("cube", {**RIGID, name: value})


def test_soft_contact_ignores_contact_erp_and_it_is_refused():
    np.testing.assert_array_equal(_run(SOFT, {"contactERP": 0.8}), _run(SOFT))
    with pytest.raises(ParameterError, match="contact_erp is ignored with soft contact"):
        EngineParams(**SOFT, contact_erp=0.5)


def test_combinations_the_engine_ignores_are_refused():
    with pytest.raises(ParameterError, match="needs a finite contact_stiffness"):
        EngineParams(contact_damping=10.0)
    with pytest.raises(ParameterError, match="needs split_impulse = 1"):
        EngineParams(split_impulse_penetration_threshold=-0.01)
    with pytest.raises(ParameterError, match=r"solver_iterations must lie in \[1.0, 1000.0\]"):
        EngineParams(solver_iterations=0)


def test_set_to_the_scenes_own_values_changes_nothing():
    # the cube runs 50 iterations and threshold 0 (EngineSettings): setting them is a no-op
    np.testing.assert_array_equal(
        _run({**RIGID, "solver_iterations": 50, "restitution_velocity_threshold": 0.0}),
        _run(RIGID))


def test_set_params_changes_and_unsets_solver_parameters_like_a_fresh_engine():
    with Engine("cube", RIGID) as engine:
        engine.set_params({"friction_anchor": 1, "solver_iterations": 7})
        np.testing.assert_array_equal(
            _positions(engine), _run({**RIGID, "friction_anchor": 1, "solver_iterations": 7}))
        engine.set_params(EngineParams(**RIGID))
        np.testing.assert_array_equal(_positions(engine), _run(RIGID))


def test_json_keeps_only_the_set_solver_parameters(tmp_path):
    assert set(EngineParams().as_json()) == {"lateral_friction", "restitution",
                                             "spinning_friction", "rolling_friction",
                                             "contact_stiffness", "contact_damping"}
    params = EngineParams(**RIGID, friction_anchor=1.0, solver_iterations=20.0)
    path = tmp_path / "params.json"
    path.write_text(json.dumps({"params": params.as_json()}))
    assert parse_params(path) == params
    assert parse_params("friction_anchor=1,solver_iterations=20,lateral_friction=0.2,"
                        "restitution=0.1") == params


def test_the_solver_group_expands_to_what_the_scene_honours():
    cube = make_scene("cube")
    assert expand_names(["lateral_friction", "solver"], "cube") == [
        "lateral_friction", "contact_erp", "solver_iterations",
        "restitution_velocity_threshold", "friction_anchor"]
    for names in (["solver", "soft_contact"], ["contact_stiffness", "contact_damping", "solver"]):
        soft = expand_names(names, "cube")
        assert "contact_erp" not in soft and "solver_iterations" in soft
    assert "contact_erp" not in expand_names(["solver"], "cube", soft_base=True)
    assert expand_names(["solver_iterations", "solver"], "cube").count("solver_iterations") == 1
    with pytest.raises(ParameterError, match="'solver' group needs a scene"):
        ParamSpace(["solver"])
    assert {spec.name for spec in SOLVER_PARAMS} - set(cube.ignored_params) == {
        "contact_erp", "solver_iterations", "restitution_velocity_threshold", "friction_anchor"}


def test_a_calibration_space_the_engine_would_ignore_is_refused_up_front():
    with pytest.raises(ParameterError, match="needs a finite contact_stiffness"):
        ParamSpace(["contact_damping"])
    space = ParamSpace(["contact_stiffness", "contact_damping", "solver_iterations"])
    assert space.parameters[2].log_scale and (space.parameters[2].low,
                                              space.parameters[2].high) == (5.0, 200.0)


def test_a_switch_of_contact_mode_drops_what_the_new_mode_ignores():
    assert EngineParams(**SOFT).replace(contact_stiffness=float("inf")).contact_damping == 0.0
    rigid = EngineParams(**RIGID, contact_erp=0.3)
    assert rigid.replace(contact_stiffness=1e4, contact_damping=5.0).contact_erp is None
    with pytest.raises(ParameterError, match="needs a finite contact_stiffness"):
        EngineParams(**SOFT).replace(contact_stiffness=float("inf"), contact_damping=5.0)


def test_calibrate_refuses_an_ignored_parameter_before_any_work(tmp_path, capsys):
    from residualsim.cli import main

    data = Path(__file__).resolve().parents[1] / "data" / "samples" / "cube-synthetic"
    out = tmp_path / "cal"
    code = main(["calibrate", "--scene", "cube", "--data", str(data), "--params",
                 "lateral_friction,collision_margin", "--method", "nevergrad", "--out",
                 str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "collision_margin has no effect in scene 'cube'" in err
    assert "Traceback" not in err and not (out / "summary.json").exists()


def test_calibrate_help_shows_the_solver_group_and_base(capsys):
    from residualsim.cli import main

    with pytest.raises(SystemExit):
        main(["calibrate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "solver (contact_erp, solver_iterations, friction_anchor" in text
    assert "--base BASE" in text


def test_base_is_refused_where_it_would_be_ignored(tmp_path, capsys):
    from residualsim.cli import main

    data = Path(__file__).resolve().parents[1] / "data" / "samples" / "cube-synthetic"
    code = main(["calibrate", "--scene", "cube", "--data", str(data), "--method", "mpec",
                 "--base", "friction_anchor=1", "--out", str(tmp_path / "cal")])
    assert code == 2 and "--base applies to" in capsys.readouterr().err


def test_shipped_params_read_and_write_unchanged():
    # unset solver parameters add nothing: a shipped model's params JSON round-trips exactly
    model = Path(__file__).resolve().parents[1] / "data" / "pretrained" / "cube-contactnets"
    stored = json.loads((model / "model.json").read_text())["params"]
    params = parse_params(model / "model.json")
    assert params.solver_values() == {} and params.as_json() == stored


def test_an_object_with_a_body_keeps_its_solver_parameters():
    from residualsim.sim.scenes import ObjectParams
    from residualsim.sim.scenes.params import body_of

    params = EngineParams(**RIGID, friction_anchor=1.0)
    carried = ObjectParams.of(params, body=None)
    assert carried == params and body_of(carried) is None
    assert ObjectParams(**params.as_dict()).replace(solver_iterations=9).solver_values() == {
        "friction_anchor": 1.0, "solver_iterations": 9.0}


@pytest.mark.parametrize("name, given, held", [
    ("solver_iterations", 35.556, 36.0), ("solver_iterations", 12.4, 12.0),
    ("friction_anchor", 0.422, 0.0), ("friction_anchor", 0.5, 1.0),
    ("split_impulse", 0.93, 1.0),
])
def test_settings_hold_the_value_the_engine_uses(name, given, held):
    """Iterations are rounded and switches read as on from 0.5 by the engine, so a searched
    35.556 iterations is reported as the 36 the engine ran."""
    params = EngineParams(**{name: given})
    assert getattr(params, name) == held
    assert EngineParams(**params.as_dict()) == params


def test_collision_margin_is_refused_for_an_object_of_boxes_only(tmp_path):
    from residualsim.sim.scenes import make_scene

    box = ('<?xml version="1.0"?><robot name="box"><link name="box"><inertial>'
           '<mass value="0.1"/><inertia ixx="1e-4" iyy="1e-4" izz="1e-4" ixy="0" ixz="0" '
           'iyz="0"/></inertial><collision><geometry>{}</geometry></collision></link></robot>')
    (tmp_path / "box.urdf").write_text(box.format('<box size="0.04 0.04 0.04"/>'))
    (tmp_path / "ball.urdf").write_text(box.format('<sphere radius="0.02"/>'))
    for name in ("box", "ball"):
        (tmp_path / f"{name}.toml").write_text(f"urdf = '{name}.urdf'\n")
    boxes = make_scene(str(tmp_path / "box.toml"))
    with pytest.raises(ParameterError, match="collision_margin has no effect.*box"):
        boxes.check_params(EngineParams(collision_margin=0.002))
    make_scene(str(tmp_path / "ball.toml")).check_params(EngineParams(collision_margin=0.002))
