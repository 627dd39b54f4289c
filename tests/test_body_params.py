"""Body and joint parameters (issue 34 §2): consistency by construction, the engine applying
a body, the URDF export round trip, the groups of ``--params``, and recovery of a known
body from synthetic tosses."""

from __future__ import annotations

import dataclasses
import functools
import json
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import numpy as np
import pybullet as pb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from residualsim.errors import ParameterError
from residualsim.sim.engine import Engine
from residualsim.sim.scenes import EngineParams, parse_params
from residualsim.sim.scenes.body import (JointDynamics, LinkInertial, check_inertia,
                                         inertia_matrix, inertia_tuple, link_aabbs, read_body,
                                         write_urdf)
from residualsim.sim.scenes.params import ObjectParams
from residualsim.sysid.bodyspace import body_space, expand_names
from residualsim.sysid.paramspace import ParamSpace

ROOT = Path(__file__).resolve().parents[1]
HINGE = ROOT / "assets" / "examples" / "hinge.toml"
HINGE_URDF = ROOT / "assets" / "examples" / "hinge.urdf"


@pytest.fixture(scope="module")
def hinge_space() -> ParamSpace:
    return ParamSpace(["contact", "body", "joints"], scene=str(HINGE))


@pytest.fixture(scope="module")
def hinge_space_with_mass() -> ParamSpace:
    """Every body name, the mass split (named, not in the group) included: 25 names."""
    return ParamSpace(["contact", "body", "body.arm.mass_ratio", "joints"], scene=str(HINGE))


@functools.lru_cache(maxsize=1)
def _boxes() -> dict:
    return link_aabbs(HINGE_URDF)


# --- consistency by construction ------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=25, max_size=25))
def test_every_point_of_the_space_is_a_physical_body(hinge_space_with_mass, unit):
    space = hinge_space_with_mass
    body = space.engine_params(space.from_unit(np.array(unit))).body
    boxes = _boxes()
    for link in body.links:
        moments = np.linalg.eigvalsh(inertia_matrix(link.inertia))
        assert moments[0] > 0
        assert moments[0] + moments[1] >= moments[2] * (1 - 1e-9)  # triangle inequality
        low, high = boxes[link.name]
        assert np.all(np.asarray(link.com_m) >= low - 1e-12)
        assert np.all(np.asarray(link.com_m) <= high + 1e-12)
    assert body.mass_kg == pytest.approx(read_body(HINGE_URDF).mass_kg, rel=1e-12)
    assert all(j.damping >= 0 and j.friction >= 0 for j in body.joints)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-10.0, 10.0), min_size=3, max_size=3),
       st.lists(st.floats(1e-6, 1e-3), min_size=3, max_size=3))
def test_inertia_from_second_moments_is_consistent_and_read_back(rotvec, moments):
    """I = tr(Σ)1 − Σ for any rotation and positive second moments: positive definite, the
    triangle inequality holds, and :meth:`BodySpace.values` inverts :meth:`BodySpace.body`
    within the default ranges."""
    from scipy.spatial.transform import Rotation

    rot = Rotation.from_rotvec(rotvec).as_matrix()
    s = np.array(moments)
    inertia = rot @ np.diag(s.sum() - s) @ rot.T
    check_inertia([inertia[0, 0], inertia[1, 1], inertia[2, 2], inertia[0, 1], inertia[0, 2],
                   inertia[1, 2]], "test")


def test_values_invert_body_within_the_ranges(hinge_space):
    space = body_space(str(HINGE))
    rng = np.random.default_rng(1)
    for _ in range(20):
        names = [n for n in space.specs if n.startswith("body.")]
        values = {}
        for name in names:
            spec = space.specs[name]
            low, high = spec.low, spec.high
            if ".axes_" in name:
                low, high = -0.3, 0.3
            values[name] = float(np.exp(rng.uniform(np.log(low), np.log(high)))
                                 if spec.log_scale else rng.uniform(low, high))
        body = space.body(values)
        back = space.body(space.values(body))
        for a, b in zip(body.links, back.links):
            np.testing.assert_allclose(a.inertia, b.inertia, rtol=1e-9, atol=1e-15)
            np.testing.assert_allclose(a.com_m, b.com_m)
            assert a.mass_kg == pytest.approx(b.mass_kg)


def test_an_unphysical_inertia_is_refused():
    with pytest.raises(ParameterError, match="triangle inequality"):
        LinkInertial("bad", 1.0, (0, 0, 0), (1.0, 1.0, 3.0, 0, 0, 0))
    with pytest.raises(ParameterError, match="positive definite"):
        LinkInertial("bad", 1.0, (0, 0, 0), (1.0, -1.0, 1.0, 0, 0, 0))
    with pytest.raises(ParameterError, match="damping"):
        JointDynamics("j", damping=-1.0)


# --- names and groups ---------------------------------------------------------------------------
def test_groups_expand_to_documented_names(hinge_space):
    names = hinge_space.names
    assert names[:4] == ["lateral_friction", "restitution", "spinning_friction",
                         "rolling_friction"]
    for link in ("base", "arm"):
        for suffix in ("com_x", "com_y", "com_z", "moment_1", "moment_2", "moment_3",
                       "axes_x", "axes_y", "axes_z"):
            assert f"body.{link}.{suffix}" in names
    # the mass split across a revolute joint is not in the group (it cannot be identified,
    # test_a_point_mass_at_the_hinge_can_sit_on_either_link), but it can be named
    assert not any(name.endswith("mass_ratio") for name in names)
    assert expand_names(["body.arm.mass_ratio"], str(HINGE)) == ["body.arm.mass_ratio"]
    assert names[-2:] == ["joint.elbow.damping", "joint.elbow.friction"]
    assert expand_names(["soft_contact", "lateral_friction"], None) == [
        "contact_stiffness", "contact_damping", "lateral_friction"]
    again = ParamSpace.from_json(json.loads(json.dumps(hinge_space.as_json())))
    assert again == hinge_space and again.names == names


def test_body_names_on_a_built_in_scene_are_one_clear_error():
    with pytest.raises(ParameterError, match="scene file or URDF"):
        ParamSpace(["body"], scene="cube")
    with pytest.raises(ParameterError, match="^body.nope.com_x: the object has no link "
                                             "'nope': its links are base, arm$"):
        ParamSpace(["body.nope.com_x"], scene=str(HINGE))  # issue 51: names what is wrong


def test_the_start_is_the_users_urdf(hinge_space):
    params = hinge_space.engine_params(hinge_space.from_unit(hinge_space.start()))
    nominal = read_body(HINGE_URDF)
    for a, b in zip(params.body.links, nominal.links):
        np.testing.assert_allclose(a.inertia, b.inertia, rtol=1e-9, atol=1e-15)
        np.testing.assert_allclose(a.com_m, b.com_m, atol=1e-15)
        assert a.mass_kg == pytest.approx(b.mass_kg)


# --- the engine applies a body ------------------------------------------------------------------
def _toss():
    from residualsim.sim.synthesize import toss_states

    return toss_states(str(HINGE), 1, 3)[0]


def test_engine_applies_a_body_and_returns_to_the_urdf():
    state = _toss()
    nominal = read_body(HINGE_URDF)
    heavy = dataclasses.replace(nominal, links=tuple(
        dataclasses.replace(l, inertia=tuple(2 * np.asarray(l.inertia))) for l in nominal.links))
    with Engine(str(HINGE)) as engine:
        plain = engine.rollout(state, 60).states
        engine.set_params(ObjectParams(body=nominal))
        np.testing.assert_array_equal(engine.rollout(state, 60).states, plain)
        engine.set_params(ObjectParams(body=heavy))
        assert np.abs(engine.rollout(state, 60).states[:, :3] - plain[:, :3]).max() > 1e-3
        engine.set_params(EngineParams())  # a plain parameter set: the URDF's own body
        np.testing.assert_array_equal(engine.rollout(state, 60).states, plain)


def test_joint_damping_acts():
    """URDF joint damping slows the joint in free flight (no gravity torque on the joint)."""
    nominal = read_body(HINGE_URDF)
    spins = []
    for damping in (0.0, 0.02):
        body = dataclasses.replace(nominal, joints=(JointDynamics("elbow", damping, 0.0),))
        state = np.zeros(15)
        state[2], state[3], state[14] = 0.5, 1.0, 3.0  # high up, joint spinning at 3 rad/s
        with Engine(str(HINGE), ObjectParams(body=body)) as engine:
            states = engine.rollout(state, 20, detect_contacts=False).states
        spins.append(states[-1, 14] - states[-1, 12])  # joint velocity relative to the base
    assert abs(spins[1]) < 0.8 * abs(spins[0])


# --- URDF export ---------------------------------------------------------------------------------
def _loaded(path: Path) -> dict:
    """What makes the object: link and joint names, joint types, joint axes and collision
    shapes (type, size, pose) in the world frame at zero joint angles (PyBullet reports them
    in each link's inertial frame, which the identified inertia turns)."""
    client = pb.connect(pb.DIRECT)
    try:
        body = pb.loadURDF(str(path), flags=pb.URDF_USE_INERTIA_FROM_FILE,
                           physicsClientId=client)
        n = pb.getNumJoints(body, physicsClientId=client)
        joints = [pb.getJointInfo(body, k, physicsClientId=client) for k in range(n)]
        frames = [pb.getBasePositionAndOrientation(body, physicsClientId=client)] + [
            pb.getLinkState(body, k, computeForwardKinematics=1, physicsClientId=client)[:2]
            for k in range(n)]

        def rot(quat):
            return np.array(pb.getMatrixFromQuaternion(quat)).reshape(3, 3)

        shapes = []
        for k, (pos, orn) in zip(range(-1, n), frames):
            for shape in pb.getCollisionShapeData(body, k, physicsClientId=client):
                world_pos, world_orn = pb.multiplyTransforms(pos, orn, shape[5], shape[6])
                shapes.append((k, shape[2], tuple(np.round(shape[3], 9)),
                               tuple(np.round(world_pos, 6)),
                               tuple(np.round(rot(world_orn).ravel(), 6))))
        axes = [tuple(np.round(rot(frames[k + 1][1]) @ np.asarray(j[13]), 6))
                for k, j in enumerate(joints)]
        dynamics = pb.getDynamicsInfo(body, 0, physicsClientId=client)
        return {"links": [j[12].decode() for j in joints],
                "joints": [(j[1].decode(), j[2], axis, j[6]) for j, axis in zip(joints, axes)],
                "shapes": shapes, "lateral_friction": dynamics[1], "restitution": dynamics[5]}
    finally:
        pb.disconnect(client)


def test_exported_urdf_is_the_same_object_with_the_identified_values(tmp_path,
                                                                      hinge_space_with_mass):
    hinge_space = hinge_space_with_mass
    rng = np.random.default_rng(0)
    params = hinge_space.engine_params(hinge_space.from_unit(rng.uniform(size=25)))
    out = write_urdf(HINGE_URDF, tmp_path / "out" / "identified.urdf", body=params.body,
                     contact=params)
    original, exported = _loaded(HINGE_URDF), _loaded(out)
    assert exported["links"] == original["links"]
    assert [j[:3] for j in exported["joints"]] == [j[:3] for j in original["joints"]]
    assert exported["shapes"] == original["shapes"]
    assert exported["joints"][0][3] == pytest.approx(params.body.joints[0].damping)
    assert exported["lateral_friction"] == pytest.approx(params.lateral_friction)
    assert exported["restitution"] == pytest.approx(params.restitution)
    back = read_body(out)  # plain XML reading gives the identified body back
    for a, b in zip(back.links, params.body.links):
        np.testing.assert_allclose(a.inertia, b.inertia, rtol=1e-12)
        np.testing.assert_allclose(a.com_m, b.com_m, rtol=1e-12)
        assert a.mass_kg == pytest.approx(b.mass_kg, rel=1e-12)
    root = ElementTree.parse(out).getroot()
    contact = root.find("link/contact")
    assert float(contact.find("lateral_friction").get("value")) == pytest.approx(
        params.lateral_friction)
    assert {e.tag for e in contact} == {"lateral_friction", "rolling_friction",
                                        "spinning_friction", "restitution"}


def test_a_mesh_path_stays_valid_in_the_export(tmp_path):
    source = tmp_path / "src" / "obj.urdf"
    source.parent.mkdir()
    (source.parent / "meshes").mkdir()
    (source.parent / "meshes" / "m.obj").write_text("v 0 0 0\n")
    text = HINGE_URDF.read_text().replace(
        '<visual><origin xyz="0.02 0 0"/><geometry><box size="0.12 0.06 0.04"/>',
        '<visual><origin xyz="0.02 0 0"/><geometry><mesh filename="meshes/m.obj"/>')
    source.write_text(text)
    out = write_urdf(source, tmp_path / "elsewhere" / "o.urdf", body=read_body(source))
    mesh = ElementTree.parse(out).getroot().find(".//mesh").get("filename")
    assert (out.parent / mesh).resolve() == (source.parent / "meshes" / "m.obj").resolve()


# --- recovery of a known body (small, fast) ----------------------------------------------------
def test_lsq_recovers_a_known_body_from_synthetic_tosses(tmp_path):
    """Tosses made with a true URDF (hinge damping 0.005, arm's centre of mass 6 mm off the
    user's) and calibrated from the user's (no damping): least squares recovers both."""
    from residualsim.data.csv import save_csv_trajectories
    from residualsim.sim.synthesize import synthesize_tosses
    from residualsim.sysid.calibrate import calibrate
    from residualsim.sysid.calibration_file import load_calibration

    nominal = read_body(HINGE_URDF)
    user = dataclasses.replace(nominal, joints=(JointDynamics("elbow", 0.0, 0.0),))
    arm = user.link("arm")
    truth = dataclasses.replace(user, links=(user.links[0], dataclasses.replace(
        arm, com_m=(arm.com_m[0], 0.006, 0.0))), joints=(JointDynamics("elbow", 0.005, 0.0),))
    scenes = {}
    for label, body in (("user", user), ("true", truth)):
        write_urdf(HINGE_URDF, tmp_path / f"{label}.urdf", body=body)
        (tmp_path / f"{label}.toml").write_text(f'name = "hinge"\nurdf = "{label}.urdf"\n')
        scenes[label] = str(tmp_path / f"{label}.toml")
    tosses = synthesize_tosses({"lateral_friction": 0.3, "restitution": 0.4}, n_tosses=6,
                               n_samples=40, rng=0, scene=scenes["true"], rate_hz=100.0)
    save_csv_trajectories(tmp_path / "data", tosses, with_velocities=True)
    summary = calibrate(scenes["user"], tmp_path / "data", ["joint.elbow.damping",
                                                            "body.arm.com_y"],
                        tmp_path / "cal", method="lsq", budget=40, split="all",
                        bounds={"joint.elbow.damping": (0.0, 0.02)}, plots=False,
                        export_urdf=tmp_path / "identified.urdf")
    body = load_calibration(tmp_path / "cal").params.body
    assert body.joint("elbow").damping == pytest.approx(0.005, rel=0.2)
    assert body.link("arm").com_m[1] == pytest.approx(0.006, abs=0.002)
    assert summary["body"]["joints"][0]["damping"] == body.joint("elbow").damping
    # --params CAL carries the body into every command
    assert parse_params(str(tmp_path / "cal")).body == body
    assert read_body(tmp_path / "identified.urdf").joint("elbow").damping == pytest.approx(
        body.joint("elbow").damping)


def test_body_travels_with_a_model(tmp_path):
    from residualsim.residual.policy import ResidualPolicy
    from residualsim.residual.model import ResidualModel
    from residualsim.sim.rollout import ContactGuard

    body = dataclasses.replace(read_body(HINGE_URDF),
                               joints=(JointDynamics("elbow", 0.004, 0.001),))
    policy = ResidualPolicy(n_features=9, hidden=(4,), n_components=1)
    model = ResidualModel(scene=str(HINGE), policy=policy,
                          params=ObjectParams(lateral_friction=0.3, body=body), dt_s=0.01,
                          substeps=10, guard=ContactGuard())
    model.save(tmp_path / "model")
    again = ResidualModel.load(tmp_path / "model")
    assert isinstance(again.params, ObjectParams) and again.params.body == body
    assert again.params.lateral_friction == 0.3


def test_calibrate_cli_refuses_body_of_a_built_in_scene(tmp_path, capsys):
    from residualsim.cli import main

    code = main(["calibrate", "--scene", "cube", "--data", str(ROOT / "data" / "samples" /
                                                            "contactnets-cube"),
                 "--params", "contact,body", "--method", "lsq", "--out", str(tmp_path / "c")])
    assert code == 2
    assert "scene file or URDF" in capsys.readouterr().err


def test_lsq_fits_the_body_on_free_flight_then_the_contact(tmp_path):
    """Body names with contact names: lsq fits the body on free flight (up to 20 ms before
    the first contact), then the contact from screened starts; with nothing weak in the
    flight there is no third stage."""
    from residualsim.data.csv import save_csv_trajectories
    from residualsim.sim.synthesize import synthesize_tosses
    from residualsim.sysid.calibrate import calibrate

    tosses = synthesize_tosses({"lateral_friction": 0.3}, n_tosses=3, n_samples=40, rng=2,
                               scene=str(HINGE), rate_hz=100.0)
    save_csv_trajectories(tmp_path / "data", tosses, with_velocities=True)
    summary = calibrate(str(HINGE), tmp_path / "data", ["lateral_friction",
                                                        "joint.elbow.damping"],
                        tmp_path / "cal", method="lsq", budget=6, split="all", plots=False)
    stages = {row["stage"]: row for row in summary["lsq_stages"]}
    assert list(stages) == ["body", "contact"]
    assert stages["body"]["names"] == ["joint.elbow.damping"]
    assert stages["contact"]["names"] == ["lateral_friction"]
    assert stages["contact"]["samples"] > stages["body"]["samples"]
    assert summary["evaluations"] == sum(row["evaluations"] for row in stages.values())
    from residualsim.sim.engine import Engine
    from residualsim.sim.recordings import free_flight_samples, load_recordings

    read = load_recordings(tmp_path / "data", str(HINGE))
    with Engine(str(HINGE)) as engine:  # the body stage stops 20 ms (2 samples) short
        flight = [free_flight_samples(engine, t) for t in read.values()]
    assert stages["body"]["samples"] == sum(max(3, n - 2) for n in flight)
    assert stages["contact"]["screened_starts"] >= 2 + 32
    assert not any("without velocities" in w for w in summary["warnings"])


def test_lsq_searches_what_free_flight_leaves_weak_on_the_first_contact(tmp_path):
    """The two links' moments along the hinge axis enter free flight as their sum: the
    third stage moves the body along that one direction only, on free flight plus the first
    contact, and keeps everything else where the first two stages put it."""
    from residualsim.data.csv import save_csv_trajectories
    from residualsim.sim.synthesize import synthesize_tosses
    from residualsim.sysid.calibrate import calibrate

    tosses = synthesize_tosses({"lateral_friction": 0.3}, n_tosses=3, n_samples=40, rng=2,
                               scene=str(HINGE), rate_hz=100.0)
    save_csv_trajectories(tmp_path / "data", tosses, with_velocities=True)
    names = ["lateral_friction", "body.base.moment_3", "body.arm.moment_3"]
    summary = calibrate(str(HINGE), tmp_path / "data", names, tmp_path / "cal",
                        method="lsq", budget=12, split="all", plots=False)
    stages = {row["stage"]: row for row in summary["lsq_stages"]}
    assert list(stages) == ["body", "contact", "impact"]
    (direction,) = stages["impact"]["directions"]
    assert set(direction["members"]) == {"body.base.moment_3", "body.arm.moment_3"}
    assert stages["impact"]["samples"] == stages["contact"]["samples"]
    assert any("free flight does not determine" in w for w in summary["warnings"])
    history = json.loads((tmp_path / "cal" / "history.json").read_text())
    order = [row["name"] for row in summary["space"]["parameters"]]
    before = next(row["x"] for row in history if row["stage"] == "impact")
    moved = [np.subtract(row["x"], before) for row in history if row["stage"] == "impact"]
    assert all(step[order.index("lateral_friction")] == 0 for step in moved)  # held
    m_base, m_arm = (np.array([step[order.index(n)] for step in moved]) for n in names[1:])
    together = (m_base != 0) | (m_arm != 0)
    assert together.any() and np.all((m_base[together] != 0) & (m_arm[together] != 0))


def test_least_squares_fits_parameters_and_each_recordings_offset_together():
    """A linear model r_i = A_i θ + B_i s_i − y_i whose recordings each have their own
    unknown offset s_i: the joint solve (dense θ block, block-diagonal offsets) recovers
    θ and every s_i; holding the offsets at zero biases θ."""
    from residualsim.sysid.joint_states import StateBlock
    from residualsim.sysid.lsq import fit_least_squares
    from residualsim.sysid.paramspace import ParamSpace

    rng = np.random.default_rng(3)
    space = ParamSpace(["lateral_friction", "restitution"])
    n_items, k, rows = 5, 3, 12
    a = rng.normal(size=(n_items, rows, 2))
    b = rng.normal(size=(n_items, rows, k))
    theta = np.array([0.37, 0.61])
    truth = rng.normal(scale=0.2, size=(n_items, k))
    y = np.einsum("irj,j->ir", a, theta) + np.einsum("irk,ik->ir", b, truth)
    y *= 1e-3  # millimetre residuals: inside the Cauchy loss's quadratic part
    a, b = a * 1e-3, b * 1e-3

    def residuals(x, offsets=None):
        offsets = np.zeros((len(x), n_items, k)) if offsets is None else offsets
        return np.stack([(np.einsum("irj,j->ir", a, xx) + np.einsum("irk,ik->ir", b, o)
                          - y).ravel() for xx, o in zip(x, offsets)])

    block = StateBlock(tuple((i, i * rows, (i + 1) * rows) for i in range(n_items)), k,
                       np.full(k, 1e-4), np.full(k, 0.1))
    found = fit_least_squares(residuals, space, budget=60, step=0.01, n_items=n_items,
                              states=block)
    assert found["x"] == pytest.approx(theta, abs=1e-4)
    assert found["offsets"] == pytest.approx(truth, abs=1e-4)
    fixed = fit_least_squares(residuals, space, budget=60, step=0.01, n_items=n_items)
    assert np.max(np.abs(np.array(fixed["x"]) - theta)) > 1e-2
    assert found["loss"] < 1e-3 * fixed["loss"]


def test_pose_only_tosses_have_their_initial_states_fitted_with_the_body(tmp_path):
    """Pose-only tosses: lsq's body stage fits every recording's initial state with the
    body (reported per stage) and moves those states, which the summary's fit uses."""
    from residualsim.data.csv import save_csv_trajectories
    from residualsim.sim.synthesize import synthesize_tosses
    from residualsim.sysid.calibrate import calibrate

    tosses = synthesize_tosses({"lateral_friction": 0.3}, n_tosses=3, n_samples=40, rng=4,
                               scene=str(HINGE), rate_hz=100.0, noise_m=1e-4)
    save_csv_trajectories(tmp_path / "data", tosses, with_velocities=False)
    summary = calibrate(str(HINGE), tmp_path / "data", ["joint.elbow.damping"],
                        tmp_path / "cal", method="lsq", budget=40, split="all", plots=False)
    (stage,) = summary["lsq_stages"]
    assert stage["initial_states"] == 3 + stage["flight_segments"]  # later flights' too
    assert stage["evaluations"] > 19  # one Jacobian: 1 + 1 damping + 14 offsets... and steps
    with_velocities = calibrate(str(HINGE), _with_velocities(tmp_path, tosses),
                                ["joint.elbow.damping"], tmp_path / "cal2", method="lsq",
                                budget=40, split="all", plots=False)
    assert "initial_states" not in with_velocities["lsq_stages"][0]


def _with_velocities(tmp_path, tosses):
    from residualsim.data.csv import save_csv_trajectories

    save_csv_trajectories(tmp_path / "data-v", tosses, with_velocities=True)
    return tmp_path / "data-v"


@pytest.mark.parametrize("method", ["mh", "nevergrad"])
def test_every_method_takes_body_names(tmp_path, method):
    """MH samples a posterior over a joint's damping and a link's mass ratio; nevergrad
    searches them; both write the body into the summary."""
    from residualsim.data.csv import save_csv_trajectories
    from residualsim.sim.synthesize import synthesize_tosses
    from residualsim.sysid.calibrate import calibrate

    tosses = synthesize_tosses({"lateral_friction": 0.3}, n_tosses=3, n_samples=25, rng=1,
                               scene=str(HINGE), rate_hz=100.0)
    save_csv_trajectories(tmp_path / "data", tosses, with_velocities=True)
    names = ["joint.elbow.damping", "body.arm.mass_ratio"]
    summary = calibrate(str(HINGE), tmp_path / "data", names, tmp_path / "cal", method=method,
                        samples=3, burn_in=1, chains=1, budget=8, split="all",
                        plots=False)
    assert summary["calibrated"] == names
    assert summary["body"]["joints"][0]["name"] == "elbow"
    assert summary["total_mass_kg"]["value"] == pytest.approx(0.48)
    if method == "mh":
        assert set(summary["median"]) == set(names)


def test_calibrate_cli_exports_the_identified_urdf(tmp_path, capsys):
    from residualsim.cli import main
    from residualsim.data.csv import save_csv_trajectories
    from residualsim.sim.synthesize import synthesize_tosses

    save_csv_trajectories(tmp_path / "data", synthesize_tosses(
        {"lateral_friction": 0.3}, n_tosses=2, n_samples=20, rng=2, scene=str(HINGE),
        rate_hz=100.0), with_velocities=True)
    common = ["calibrate", "--scene", str(HINGE), "--data", str(tmp_path / "data"),
              "--params", "joints", "--method", "lsq", "--budget", "4", "--split", "all",
              "--no-plots", "--quiet"]
    assert main([*common, "--out", str(tmp_path / "bad"), "--export-urdf",
                 str(tmp_path / "x.txt")]) == 2
    assert "name a .urdf file" in capsys.readouterr().err
    assert main([*common, "--out", str(tmp_path / "cal"), "--export-urdf",
                 str(tmp_path / "x.urdf")]) == 0
    assert _loaded(tmp_path / "x.urdf")["links"] == _loaded(HINGE_URDF)["links"]
    summary = json.loads((tmp_path / "cal" / "summary.json").read_text())
    assert read_body(tmp_path / "x.urdf").joints[0].damping == pytest.approx(
        summary["body"]["joints"][0]["damping"])


def test_contact_stage_candidate_starts_cover_friction_and_restitution_only():
    """The candidate starts of a contact stage: the current values, the scene's own and
    Sobol points spread over friction and restitution, the other coefficients at the
    scene's own values (spinning or rolling friction of centimetres stops any tumble)."""
    from residualsim.sysid.lsq import SCREENED_STARTS, _contact_starts
    from residualsim.sysid.paramspace import ParamSpace

    space = ParamSpace(["contact"], scene=str(HINGE))
    current = space.start()
    own = space.to_unit(np.array([getattr(space.base, n) for n in space.names]))
    rows = _contact_starts(space, current, seed=0)
    assert len(rows) == SCREENED_STARTS + 2
    assert any(np.allclose(r, current) for r in rows) and any(np.allclose(r, own) for r in rows)
    primary = [space.names.index(n) for n in ("lateral_friction", "restitution")]
    others = [i for i in range(space.ndim) if i not in primary]
    spread = [r for r in rows if not np.allclose(r, current)]
    assert all(np.allclose(r[others], own[others]) for r in spread)
    assert np.ptp(np.array(spread)[:, primary], axis=0).min() > 0.8  # covers the ranges
    assert np.array_equal(rows, _contact_starts(space, current, seed=0))
    assert not np.array_equal(rows, _contact_starts(space, current, seed=1))


def test_the_simplex_search_reaches_a_v_shaped_minimum():
    """A loss that falls linearly to its minimum and rises linearly after (as chaotic
    contact makes it across recordings): Nelder-Mead reaches the minimum."""
    from residualsim.sysid.lsq import fit_least_squares
    from residualsim.sysid.paramspace import ParamSpace

    space = ParamSpace(["lateral_friction", "restitution"])
    target = np.array([0.3, 0.4])
    scale = np.array([space.parameters[0].high, space.parameters[1].high])

    def residuals(x):
        return 0.01 * np.sqrt(np.abs(np.atleast_2d(x) - target) / scale)

    found = fit_least_squares(residuals, space, budget=150, simplex=True)
    assert found["x"] == pytest.approx(target, abs=5e-3)
    assert found["evaluations"] <= 150


def _point_mass_moved(body, link_from: str, link_to: str, mass_kg: float,
                      at_from: np.ndarray, at_to: np.ndarray):
    """``body`` with a point mass (kg) taken from ``link_from`` at ``at_from`` (its link
    frame, m) and added to ``link_to`` at ``at_to`` (its frame): masses, centres of mass and
    inertias updated exactly (second moments about each link frame's origin)."""
    links = []
    for link in body.links:
        sign, at = {link_from: (-1.0, at_from), link_to: (1.0, at_to)}.get(link.name,
                                                                          (0.0, 0.0))
        inertia = inertia_matrix(link.inertia)
        com = np.asarray(link.com_m)
        second = 0.5 * np.trace(inertia) * np.eye(3) - inertia + link.mass_kg * np.outer(com,
                                                                                      com)
        mass = link.mass_kg + sign * mass_kg
        first = link.mass_kg * com + sign * mass_kg * np.asarray(at, float)
        second = second + sign * mass_kg * np.outer(at, at)
        com = first / mass
        second = second - mass * np.outer(com, com)
        links.append(LinkInertial(link.name, mass, tuple(com),
                                  inertia_tuple(np.trace(second) * np.eye(3) - second)))
    return dataclasses.replace(body, links=tuple(links))


def test_a_point_mass_at_the_hinge_can_sit_on_either_link():
    """Why ``body`` keeps the URDF's mass split: 30 g (a sixth of the arm) moved from the
    base to the arm at the elbow's axis changes the arm's centre of mass by 9 mm and its
    moments by up to 20 %, and the joint's motion by less than 0.1 mrad; the same mass moved
    1 cm off the axis changes it by over 5 mrad."""
    body = read_body(HINGE_URDF)
    hinge_in_base = np.array([0.08, 0.0, 0.0])  # the elbow's origin in the base frame
    state = np.zeros(15)
    state[2], state[3] = 0.5, 1.0
    state[7:13] = [0.3, 0.0, 1.0, 2.0, -3.0, 5.0]
    state[14] = -4.0
    runs = []
    for moved in (body, _point_mass_moved(body, "base", "arm", 0.03, hinge_in_base, np.zeros(3)),
                  _point_mass_moved(body, "base", "arm", 0.03, hinge_in_base + [0.01, 0, 0],
                                    np.array([0.01, 0.0, 0.0]))):
        with Engine(str(HINGE), ObjectParams(body=moved)) as engine:
            runs.append(engine.rollout(state, 10, detect_contacts=False).states)
    on_axis = _point_mass_moved(body, "base", "arm", 0.03, hinge_in_base, np.zeros(3))
    assert np.linalg.norm(np.subtract(on_axis.link("arm").com_m,
                                      body.link("arm").com_m)) > 0.008
    assert np.max(np.abs(runs[1][:, 13] - runs[0][:, 13])) < 1e-4
    assert np.max(np.abs(runs[1][:, :3] - runs[0][:, :3])) < 1e-4
    assert np.max(np.abs(runs[2][:, 13] - runs[0][:, 13])) > 5e-3


def test_weak_directions_name_what_the_recordings_cannot_separate():
    from residualsim.sysid.identifiability import describe, weak_directions

    rng = np.random.default_rng(0)
    base = rng.standard_normal((200, 3))
    jacobian = np.column_stack([base, 2.0 * base[:, 2], np.zeros(200)])
    names = ["a", "b", "c", "c_twice", "idle"]
    weak = weak_directions(jacobian, names)
    assert [w["members"] for w in weak] == [{"idle": 1.0},
                                            {"c": 0.707, "c_twice": -0.707}]
    assert weak[1]["ratio"] < 1e-6
    assert "c_twice" in describe(weak[1])
    assert weak_directions(base, names[:3]) == []


def test_weak_basis_moves_only_where_the_jacobian_is_blind():
    """In unit coordinates a weak direction is one the Jacobian maps to zero, scaled to a
    largest step of 1; the subspace search starts at the origin and moves only along it."""
    from residualsim.sysid.identifiability import WeakSubspace, weak_basis

    rng = np.random.default_rng(1)
    base = rng.standard_normal((100, 2))
    jacobian = np.column_stack([base, 0.5 * base[:, 1], np.zeros(100)])  # c = b / 2 in effect
    basis = weak_basis(jacobian, 4)
    assert basis.shape == (2, 4)
    np.testing.assert_allclose(basis[0], [0, 0, 0, 1])  # the idle one first
    np.testing.assert_allclose(np.abs(jacobian @ basis[1]), 0, atol=1e-9)
    assert np.max(np.abs(basis[1])) == pytest.approx(1.0) and basis[1][0] == pytest.approx(0)
    space = ParamSpace(["body.base.moment_1", "body.base.moment_2", "body.base.moment_3",
                        "body.arm.com_y"], scene=str(HINGE))
    origin = np.array([0.3, 0.4, 0.5, 0.6])
    sub = WeakSubspace(space, origin, basis[1:], ["b and c"])
    np.testing.assert_allclose(space.to_unit(sub.from_unit(sub.start())), origin)
    moved = space.to_unit(sub.from_unit(np.array([[0.6], [0.4]])))
    np.testing.assert_allclose(moved - origin, [0.1 * basis[1], -0.1 * basis[1]], atol=1e-12)
    assert sub.ndim == 1 and sub.names == ["b and c"]


def test_lsq_reports_the_second_moments_along_the_hinge_as_one_combination(tmp_path):
    """The two links' second moments along the elbow's axis enter the motion only as their
    sum: lsq names that direction (summary and warning) instead of pretending to split it."""
    from residualsim.data.csv import save_csv_trajectories
    from residualsim.sim.synthesize import synthesize_tosses
    from residualsim.sysid.calibrate import calibrate

    tosses = synthesize_tosses({"lateral_friction": 0.3}, n_tosses=3, n_samples=30, rng=4,
                               scene=str(HINGE), rate_hz=100.0)
    save_csv_trajectories(tmp_path / "data", tosses, with_velocities=True)
    names = ["body.base.moment_3", "body.arm.moment_3", "body.arm.com_y"]
    summary = calibrate(str(HINGE), tmp_path / "data", names, tmp_path / "cal", method="lsq",
                        budget=12, split="all", plots=False)
    (stage,) = summary["lsq_stages"]
    weak = stage["weak_directions"]
    assert len(weak) == 1 and set(weak[0]["members"]) == {"body.base.moment_3",
                                                          "body.arm.moment_3"}
    assert np.prod(list(weak[0]["members"].values())) < 0  # opposite signs: a split
    assert any("body.arm.moment_3" in w and "does not determine" in w
               for w in summary["warnings"])


def test_the_anchor_keeps_what_the_data_cannot_see_at_the_start():
    """Residuals that see moment_3 of base and arm only through u0 + 3 u1 (unit
    coordinates) and com_y on its own: the anchored fit meets the data and, along the
    valley u0 + 3 u1 = c, stops at the point nearest the start in column-normalised
    coordinates (y = D u, D = (1, 3)): Δu0 = 3 Δu1. Unanchored, the trust region's path
    decides (Δu0 = Δu1 here)."""
    from residualsim.sysid.lsq import fit_least_squares

    space = ParamSpace(["body.base.moment_3", "body.arm.moment_3", "body.arm.com_y"],
                       scene=str(HINGE))
    coefficients = np.random.default_rng(0).standard_normal((60, 2)) * 0.002
    target = np.array([2.5, 0.62])

    def residuals(x):
        u = space.to_unit(np.atleast_2d(x))
        return np.column_stack([u[:, 0] + 3 * u[:, 1], u[:, 2]]) @ coefficients.T \
            - target @ coefficients.T

    start = space.start()
    ratios = {}
    for anchor in (True, False):
        fit = space.to_unit(np.array(fit_least_squares(residuals, space, budget=300,
                                                        anchor=anchor)["x"]))
        assert fit[0] + 3 * fit[1] == pytest.approx(2.5, abs=1e-3)
        assert fit[2] == pytest.approx(0.62, abs=1e-3)
        ratios[anchor] = (fit[0] - start[0]) / (fit[1] - start[1])
    assert ratios[True] == pytest.approx(3.0, rel=0.05)
    assert abs(ratios[False] - 3.0) > 1.0  # without the anchor the valley point is arbitrary
