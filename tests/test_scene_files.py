"""Scene files and URDF scenes: a user's object (rigid or articulated, free or planar)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pybullet as pb
import pytest

from residualsim.data import load_trajectories
from residualsim.errors import SceneError
from residualsim.sim.engine import Engine
from residualsim.sim.rollout import residual_rollout, simulate_trajectories
from residualsim.sim.scenes import make_scene, read_scene_file

ROOT = Path(__file__).resolve().parents[1]
HINGE = ROOT / "assets" / "examples" / "hinge.toml"
ELL = ROOT / "assets" / "examples" / "ell.toml"
CUBE_FILE = ROOT / "assets" / "cube.toml"
SAMPLES = ROOT / "data" / "samples" / "contactnets-cube"

BOX = """<?xml version="1.0"?>
<robot name="box"><link name="box">
  <inertial><mass value="0.1"/><inertia ixx="1e-4" iyy="1e-4" izz="1e-4" ixy="0" ixz="0" iyz="0"/>
  </inertial><collision><geometry><box size="0.04 0.04 0.04"/></geometry></collision>
</link></robot>
"""


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, problem", [
    ("urdf = 'box.urdf'\nkind = 'flying'\n", "kind must be one of"),
    ("urdf = 'box.urdf'\nsubsteps = 0\n", "substeps must be an integer"),
    ("urdf = 'box.urdf'\nsubsteps = true\n", "substeps must be an integer"),
    ("urdf = 'box.urdf'\nsubsteps = 1000000000\n", "substeps 1000000000 is more than 1000"),
    ("urdf = 'box.urdf'\ncolour = 'red'\n", "unknown key(s) colour"),
    ("kind = 'free'\n", "needs urdf ="),
    ("urdf = 'missing.urdf'\n", "missing.urdf not found"),
    ("urdf = [\n", "not a valid TOML scene file"),
    ("urdf = 'box.urdf'\nself_collision = 1\n", "self_collision must be true or false"),
])
def test_bad_scene_files_name_the_file_and_the_problem(tmp_path, text, problem):
    _write(tmp_path / "box.urdf", BOX)
    scene_file = _write(tmp_path / "obj.toml", text)
    with pytest.raises(SceneError) as caught:
        make_scene(str(scene_file))
    assert str(scene_file) in str(caught.value) and problem in str(caught.value)


def test_a_scene_file_with_a_byte_order_mark_reads(tmp_path):
    """Windows editors write one; tomllib refused it as 'Invalid statement (line 1)'."""
    _write(tmp_path / "box.urdf", BOX)
    scene_file = tmp_path / "obj.toml"
    scene_file.write_bytes("urdf = 'box.urdf'\nsubsteps = 5\n".encode("utf-8-sig"))
    assert read_scene_file(scene_file).substeps == 5


def test_a_urdf_that_is_a_symlink_loop_is_named(tmp_path):
    """pathlib's resolve raised RuntimeError: a traceback (exit 1)."""
    (tmp_path / "loop.urdf").symlink_to("loop.urdf")
    scene_file = _write(tmp_path / "obj.toml", "urdf = 'loop.urdf'\n")
    with pytest.raises(SceneError, match="'loop.urdf' cannot be resolved") as caught:
        read_scene_file(scene_file)
    assert str(scene_file) in str(caught.value)


def test_unknown_scene_name_lists_the_ways_to_give_one():
    with pytest.raises(SceneError, match="known scenes: cube.*scene file"):
        make_scene("sphere")
    with pytest.raises(SceneError, match="no such scene file"):
        make_scene("nowhere/obj.toml")


@pytest.mark.parametrize("urdf, problem", [
    ("<robot name='x'><link name='a'/></robot>", "no mass"),  # massless base: fixed
    ("not xml at all", "not valid XML"),
    (BOX.replace("</robot>", """<link name="b"><inertial><mass value="0.1"/><inertia ixx="1e-4"
     iyy="1e-4" izz="1e-4" ixy="0" ixz="0" iyz="0"/></inertial></link>
     <joint name="ball" type="spherical"><parent link="box"/><child link="b"/></joint></robot>"""),
     "joint 'ball' has type 'spherical'"),
])
def test_urdfs_a_free_scene_cannot_take_are_refused(tmp_path, urdf, problem):
    path = _write(tmp_path / "thing.urdf", urdf)
    with pytest.raises(SceneError, match=problem) as caught:
        make_scene(str(path))
    assert str(path) in str(caught.value)


def test_a_bare_urdf_is_a_free_scene_with_defaults(tmp_path):
    path = _write(tmp_path / "box.urdf", BOX)
    spec = read_scene_file(path)
    assert (spec.name, spec.kind, spec.substeps, spec.self_collision) == ("box", "free", 10, False)
    scene = make_scene(str(path))
    assert scene.state_size == 13 and scene.mass_kg == pytest.approx(0.1)


def test_hinge_state_round_trips_through_the_engine_despite_its_offset_centre():
    scene = make_scene(str(HINGE))
    assert scene.joint_names == ("elbow",) and scene.state_size == 15
    assert scene.info.base_com_offset_m == pytest.approx((0.02, 0.0, 0.0))
    rng = np.random.default_rng(3)
    with Engine(str(HINGE)) as engine:
        for _ in range(5):
            quat = rng.normal(size=4)
            state = np.concatenate([[0.1, -0.2, 0.5], quat / np.linalg.norm(quat),
                                    rng.normal(size=6), [0.4, -1.5]])
            engine.reset(state)
            got = engine.state()
            got[3:7] *= np.sign(got[3:7] @ state[3:7])  # q and -q are the same orientation
            np.testing.assert_allclose(got, state, atol=1e-12)
            np.testing.assert_allclose(engine.scene.generalized_velocity(),
                                       np.concatenate([state[7:13], state[14:]]), atol=1e-12)


@pytest.mark.parametrize("scene_file, links", [(HINGE, (-1, 0)), (ELL, (-1,))])
def test_contact_inertia_matches_the_engines_response_to_an_impulse(scene_file, links):
    """M⁻¹ J_pᵀ p from the scene equals the velocity change PyBullet itself gives a force F
    applied for one step of 1 ms at a point (gravity off, far from the table)."""
    layout = make_scene(str(scene_file))
    settings = dataclasses.replace(layout.settings, dt_s=1e-3, substeps=1,
                                   gravity_mps2=(0.0, 0.0, 0.0))
    rng = np.random.default_rng(0)
    with Engine(str(scene_file), settings=settings) as engine:
        scene, cid = engine.scene, engine.client
        for _ in range(3):
            quat = rng.normal(size=4)
            state = np.concatenate([[0, 0, 5.0], quat / np.linalg.norm(quat),
                                    0.1 * rng.normal(size=6),
                                    [0.7, 0.0][:2 * scene.n_joints] if scene.n_joints else []])
            for link in links:
                engine.reset(state)
                centre = (pb.getBasePositionAndOrientation(scene.body, physicsClientId=cid)[0]
                          if link == -1 else pb.getLinkState(scene.body, link,
                                                             physicsClientId=cid)[0])
                point = np.asarray(centre) + 0.03 * rng.normal(size=3)
                force = 10.0 * rng.normal(size=3)
                predicted = np.linalg.solve(engine.mass_matrix(), engine.point_jacobian(
                    point, link).T @ (force * settings.dt_s))
                before = scene.generalized_velocity()
                pb.applyExternalForce(scene.body, link, force.tolist(), point.tolist(),
                                      pb.WORLD_FRAME, physicsClientId=cid)
                engine.step()
                pushed = scene.generalized_velocity() - before
                engine.reset(state)
                engine.step()
                drift = scene.generalized_velocity() - before
                np.testing.assert_allclose(pushed - drift, predicted,
                                           rtol=1e-4, atol=1e-4 * np.abs(predicted).max())


def test_the_cube_as_a_scene_file_simulates_exactly_like_the_built_in_cube():
    tosses = load_trajectories(SAMPLES)
    params = dict(lateral_friction=0.18, restitution=0.125)
    built_in = simulate_trajectories("cube", tosses, params)
    from_file = simulate_trajectories(str(CUBE_FILE), tosses, params)
    for toss_id in tosses:
        np.testing.assert_array_equal(from_file[toss_id].positions_m,
                                      built_in[toss_id].positions_m)
        np.testing.assert_array_equal(from_file[toss_id].quat_wxyz, built_in[toss_id].quat_wxyz)


def test_hinge_contact_events_have_nine_features_and_conserve_the_guard():
    """The residual-learning paper's features at a contact of an articulated body are the
    same 9 numbers as for a single body; a random policy never adds energy."""

    class RandomPolicy:
        spin = False

        def sample(self, features, rng):
            return rng.normal(size=3) * 0.05

        def mean(self, features):
            return np.zeros(3)

    state = np.array([0, 0, 0.3, 1, 0, 0, 0, 0.4, 0.1, -0.5, 2.0, -3.0, 1.0, 0.5, 4.0])
    with Engine(str(HINGE), settings=dataclasses.replace(
            make_scene(str(HINGE)).settings, dt_s=1 / 148)) as engine:
        run = residual_rollout(engine, state, 150, RandomPolicy(), np.random.default_rng(1))
        energy = engine.scene.energy(run.states)
    assert run.n_events >= 2
    assert run.features.shape == (run.n_events, 9)
    assert run.impulses.shape == (run.n_events, 3)
    assert run.states.shape == (151, 15)
    assert energy[-1] < energy[0]
    assert run.max_penetration_m < 0.005


def test_a_planar_scene_file_drops_a_box_onto_the_floor(tmp_path):
    _write(tmp_path / "box.urdf", BOX)
    scene_file = _write(tmp_path / "box.toml", "urdf = 'box.urdf'\nkind = 'planar'\n")
    scene = make_scene(str(scene_file))
    assert scene.planar and scene.state_size == 6 and scene.mass_kg == pytest.approx(0.1)
    with Engine(str(scene_file), settings=dataclasses.replace(scene.settings,
                                                              dt_s=0.004)) as engine:
        run = engine.rollout(np.array([0.0, 0.1, 0.3, 0.2, 0.0, 1.0]), 400)
    x, y, theta = run.states[-1, :3]
    assert y == pytest.approx(0.02, abs=1.5e-3)  # at rest on a face, half the 4 cm side up
    assert abs(run.states[-1, 3:]).max() < 1e-2
    assert len(run.events) >= 1


def test_a_planar_scene_takes_a_single_rigid_link(tmp_path):
    hinge = (ROOT / "assets" / "examples" / "hinge.urdf").read_text()
    _write(tmp_path / "hinge.urdf", hinge)
    scene_file = _write(tmp_path / "h.toml", "urdf = 'hinge.urdf'\nkind = 'planar'\n")
    with pytest.raises(SceneError, match="single rigid link"):
        make_scene(str(scene_file))


def test_the_cube_tosses_as_csv_give_the_same_figures(tmp_path):
    """The cube workflow expressed as a user's object: a scene file and CSV recordings with
    the recorded velocities reproduce the built-in scene on the ContactNets files exactly;
    as poses only (velocities estimated, initial state fitted by rollout) they stay close."""
    from residualsim.data.csv import save_csv_trajectories
    from residualsim.evaluation import TrajectoryPredictions, score_trajectories
    from residualsim.sim.recordings import load_recordings

    tosses = load_trajectories(SAMPLES)
    params = dict(lateral_friction=0.18, restitution=0.125)

    def figures(scene, recordings):
        runs = simulate_trajectories(scene, recordings, params)
        predictions = TrajectoryPredictions(
            {k: (r.positions_m[None], r.quat_wxyz[None]) for k, r in runs.items()})
        return score_trajectories(predictions, tosses).aggregate()

    built_in = figures("cube", tosses)
    save_csv_trajectories(tmp_path / "v", tosses, with_velocities=True)
    save_csv_trajectories(tmp_path / "p", tosses, with_velocities=False)
    with_velocities = figures(str(CUBE_FILE), load_recordings(tmp_path / "v", str(CUBE_FILE)))
    poses_only = figures(str(CUBE_FILE), load_recordings(tmp_path / "p", str(CUBE_FILE)))
    for key in ("position_rmse_m", "rotation_error_deg", "final_error_m"):
        assert with_velocities[key] == pytest.approx(built_in[key], rel=1e-9)
    assert poses_only["position_rmse_m"] == pytest.approx(built_in["position_rmse_m"], rel=0.3)
