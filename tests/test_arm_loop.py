"""The arm + flexible loop: URDF generation, scene geometry and stability, joint recordings,
synthesis, replay and stiffness identification (residualsim.sim.scenes.loop_urdf,
residualsim.sim.scenes.arm_loop, residualsim.data.joint_recording, residualsim.sim.synthesize,
residualsim.sysid.loop_stiffness) and the ``bench identify-loop`` command line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from residualsim.data.joint_recording import (
    JOINT_FORMAT_NAME, JointRecording, load_joint_recording, save_joint_recording)
from residualsim.errors import DataError, ParameterError, SceneError
from residualsim.sysid.loop_stiffness import (LoopReplay, ReplayConfig, RolloutPool, identify_stiffness,
                                  stable_kappa_max)
from residualsim.sim.scenes.arm_loop import (
    CLAMP_HEIGHT_M, GRASP_OFFSET_M, LOOP_X_M, ArmLoopScene, ArmLoopSettings, lqr_gains)
from residualsim.sim.scenes.base import ASSETS_DIR
from residualsim.sim.scenes.loop_urdf import (
    LoopParameters, loop_urdf, loop_vertices, read_loop_parameters)
from residualsim.sim.synthesize import synthesize_arm_loop

#: The paper's 12-link springs (κ_θ, κ_ψ) N m/rad: the truth of every 12-link synthesis here.
TRUTH_12 = np.array([LoopParameters().kappa_theta, LoopParameters().kappa_psi])

# The replay feedback bug (see test_replay_at_truth_reproduces_a_noise_free_recording).


def _rms(residual: np.ndarray) -> float:
    """RMS end-effector error (m) of a (T, 3) residual."""
    return float(np.sqrt(np.mean(np.sum(residual ** 2, axis=-1))))


@pytest.fixture(scope="module")
def clean_recording(tmp_path_factory) -> JointRecording:
    """A noise-free 2 s recording of the 12-link loop at the paper's springs, at the
    replay's own settings (substeps 5): the model that replays it is the one that made it."""
    path = synthesize_arm_loop(tmp_path_factory.mktemp("clean"), n_links=12, substeps=5,
                               angle_noise_rad=0.0, torque_noise_nm=0.0, segment_s=0.2, rng=0)
    return load_joint_recording(path)


@pytest.fixture(scope="module")
def replay(clean_recording):
    model = LoopReplay(clean_recording)
    yield model
    model.close()


@pytest.fixture
def scene():
    with ArmLoopScene(12) as built:
        yield built


# --- 1. the loop URDF ----------------------------------------------------------------------
@pytest.mark.parametrize("n_links", [12, 24])
def test_committed_loop_assets_are_regenerated_exactly(n_links):
    committed = (ASSETS_DIR / f"loop{n_links}.urdf").read_text()
    assert committed == loop_urdf(LoopParameters().rescaled(n_links))
    assert read_loop_parameters(ASSETS_DIR / f"loop{n_links}.urdf") == \
        LoopParameters().rescaled(n_links)


def test_unshipped_loop_assets_go_to_the_user_cache(tmp_path, monkeypatch):
    from residualsim.sim.scenes.arm_loop import loop_asset

    monkeypatch.setenv("RESIDUALSIM_CACHE", str(tmp_path / "cache"))
    assert loop_asset(12) == ASSETS_DIR / "loop12.urdf"  # shipped: used in place
    path = loop_asset(8)
    assert path == tmp_path / "cache" / "loop8.urdf" and not (ASSETS_DIR / "loop8.urdf").exists()
    assert read_loop_parameters(path) == LoopParameters().rescaled(8)
    with pytest.raises(SceneError, match="links >= 3"):
        loop_asset(2)


def test_read_loop_parameters_round_trips_unusual_values(tmp_path):
    params = LoopParameters(n_links=7, radius_m=0.1 + 0.2, mass_kg=1 / 3, tube_radius_m=0.011,
                            kappa_theta=math.pi, kappa_psi=0.0, damping=1e-7,
                            vertex_mass_fraction=0.25, armature_kgm2=0.0)
    path = tmp_path / "odd.urdf"
    path.write_text(loop_urdf(params))
    assert read_loop_parameters(path) == params  # every float written with full precision


def test_rescaled_doubles_springs_and_damping_and_keeps_the_ring():
    base = LoopParameters()
    fine = base.rescaled(24)
    assert fine.n_links == 24
    assert fine.kappa_theta == pytest.approx(2 * base.kappa_theta, rel=1e-15)
    assert fine.kappa_psi == pytest.approx(2 * base.kappa_psi, rel=1e-15)
    assert fine.damping == pytest.approx(2 * base.damping, rel=1e-15)
    assert (fine.radius_m, fine.mass_kg, fine.tube_radius_m) == \
        (base.radius_m, base.mass_kg, base.tube_radius_m)
    assert fine.link_length_m == pytest.approx(2 * base.radius_m * math.sin(math.pi / 24))
    back = fine.rescaled(12)
    assert (back.kappa_theta, back.kappa_psi, back.damping) == pytest.approx(
        (base.kappa_theta, base.kappa_psi, base.damping), rel=1e-15)


@pytest.mark.parametrize("changes, word", [
    ({"n_links": 2}, "n_links"),
    ({"n_links": 4.5}, "n_links"),
    ({"kappa_theta": -1.0}, "kappa_theta"),
    ({"kappa_psi": -0.5}, "kappa_psi"),
    ({"kappa_psi": math.nan}, "kappa_psi"),
    ({"damping": -1e-3}, "damping"),
    ({"radius_m": 0.0}, "radius_m"),
])
def test_loop_parameters_reject_invalid_values(changes, word):
    with pytest.raises(SceneError, match=word):
        LoopParameters(**changes)


def test_read_loop_parameters_names_a_foreign_or_missing_urdf(tmp_path):
    cube = ASSETS_DIR / "cube.urdf"
    with pytest.raises(SceneError, match="cube.urdf") as info:
        read_loop_parameters(cube)
    assert "residualsim_loop" in str(info.value)
    with pytest.raises(SceneError, match="nowhere.urdf"):
        read_loop_parameters(tmp_path / "nowhere.urdf")
    with pytest.raises(SceneError, match="nowhere.urdf"):
        ArmLoopScene(tmp_path / "nowhere.urdf")


# --- 2. geometry at rest -------------------------------------------------------------------
@pytest.mark.parametrize("n_links", [12, 24])
def test_rest_geometry_is_the_closed_upright_polygon(n_links):
    with ArmLoopScene(n_links) as built:
        params = built.loop_params
        assert params == LoopParameters().rescaled(n_links)
        assert built.closure_error_m() < 1e-6
        top = built.vertex_world(n_links // 2)
        np.testing.assert_allclose(top, [LOOP_X_M, 0.0, CLAMP_HEIGHT_M + 2 * params.radius_m],
                                   atol=1e-6)
        # The loop's base frame is turned +90° about z: base x -> world y, base z -> world z.
        local = loop_vertices(params)
        assert np.abs(local[:, 1]).max() == 0.0
        expected = np.column_stack([np.full(n_links, LOOP_X_M), local[:, 0],
                                    CLAMP_HEIGHT_M + local[:, 2]])
        measured = np.array([built.vertex_world(k) for k in range(n_links)])
        np.testing.assert_allclose(measured, expected, atol=1e-6)
        # The arm's last link is above the grasped top vertex.
        np.testing.assert_allclose(built.ee_position(), top + [0, 0, GRASP_OFFSET_M],
                                   atol=1e-4)


def test_loop_vertices_form_a_regular_polygon_on_the_clamp():
    params = LoopParameters(n_links=9, radius_m=0.2)
    vertices = loop_vertices(params)
    np.testing.assert_allclose(vertices[0], 0.0, atol=1e-15)
    centre = np.array([0.0, 0.0, params.radius_m])
    np.testing.assert_allclose(np.linalg.norm(vertices - centre, axis=1), params.radius_m)
    sides = np.linalg.norm(np.roll(vertices, -1, axis=0) - vertices, axis=1)
    np.testing.assert_allclose(sides, params.link_length_m)


# --- 3. stability and springs --------------------------------------------------------------
def test_holding_the_arm_still_keeps_the_loop_closed(scene):
    kappa = TRUTH_12
    scene.settle(kappa, 1.0)
    hold = scene.arm_state()[0]
    n = 201  # 2 s at 100 Hz
    reference = np.tile(hold, (n, 1))
    feedforward = np.tile(scene.gravity_torques(hold), (n - 1, 1))
    gains = lqr_gains(scene.arm_mass_matrix(hold), 30.0)
    run = scene.drive(kappa, feedforward, reference, gains)
    assert run.angles.shape == (n, 7) and run.torques.shape == (n - 1, 7)
    assert np.isfinite(run.angles).all() and np.isfinite(run.torques).all()
    assert np.isfinite(scene.loop_state()[0]).all()
    assert run.closure_error_m < 1e-3
    assert np.abs(run.angles - hold).max() < 0.02  # rad: the arm is held, not drifting


@pytest.mark.parametrize("field, value", [
    ("substeps", 0), ("substeps", -1), ("substeps", 2.5), ("dt_s", 0.0), ("dt_s", math.nan),
    ("dt_s", math.inf), ("solver_iterations", 0), ("solver_iterations", math.nan)])
def test_settings_refuse_what_would_divide_by_zero_or_run_no_physics(field, value):
    """substeps=0 divided dt_s by zero in step_s; substeps=-1 ran no internal step at all."""
    with pytest.raises(SceneError, match=f"ArmLoopSettings: {field} must be"):
        ArmLoopSettings(**{field: value})


@pytest.mark.parametrize("duration", [math.nan, math.inf, -1.0])
def test_settle_refuses_a_duration_that_is_not_finite_and_non_negative(scene, duration):
    with pytest.raises(SceneError, match="settle: duration_s must be"):
        scene.settle(TRUTH_12, duration)


def test_springs_act_and_stiffer_springs_sag_less(scene):
    angles = {}
    for kappa in ((1.0, 1.0), (10.0, 10.0)):
        scene.reset()
        scene.settle(np.array(kappa), 1.0)
        angles[kappa] = scene.loop_state()[0]
        assert scene.closure_error_m() < 1e-3
    soft, stiff = np.abs(angles[1.0, 1.0]).max(), np.abs(angles[10.0, 10.0]).max()
    assert soft > 1e-3  # rad: gravity visibly bends the soft loop
    assert not np.allclose(angles[1.0, 1.0], angles[10.0, 10.0], atol=1e-5)
    assert stiff < 0.2 * soft  # linear springs: ten times stiffer, about ten times less


def test_set_springs_rejects_bad_stiffness(scene):
    for bad in ([1.0, -1.0], [math.inf, 1.0], [1.0, 2.0, 3.0]):
        with pytest.raises(SceneError, match="kappa"):
            scene.set_springs(np.array(bad))


# --- 4. LQR gains --------------------------------------------------------------------------
@pytest.mark.parametrize("bandwidth", [0.5, 10.0, 40.0])
def test_lqr_gains_match_the_closed_form(bandwidth):
    rng = np.random.default_rng(11)
    a = rng.normal(size=(7, 7))
    mass = a @ a.T + 0.3 * np.eye(7)  # symmetric positive definite
    kp, kd = lqr_gains(mass, bandwidth)
    np.testing.assert_allclose(kp, bandwidth ** 2 * mass, rtol=1e-8,
                               atol=1e-10 * bandwidth ** 2)
    np.testing.assert_allclose(kd, math.sqrt(2) * bandwidth * mass, rtol=1e-8,
                               atol=1e-10 * bandwidth)


@pytest.mark.parametrize("bandwidth", [0.0, -5.0, math.nan, math.inf])
def test_lqr_gains_reject_a_bad_bandwidth(bandwidth):
    with pytest.raises(SceneError, match="bandwidth"):
        lqr_gains(np.eye(7), bandwidth)


# --- 5. joint recordings -------------------------------------------------------------------
def _recording(n: int = 6, rec_id: str = "rec") -> JointRecording:
    rng = np.random.default_rng(4)
    return JointRecording(rec_id=rec_id, times_s=0.01 * np.arange(n),
                          joint_angles_rad=rng.normal(size=(n, 7)),
                          joint_torques_nm=rng.normal(size=(n - 1, 7)),
                          joint_names=tuple(f"j{i}" for i in range(7)), source="unit test",
                          metadata={"kappa_truth_12": [4.5, 1.0], "note": "ü", "seed": 3})


def test_joint_recording_round_trips(tmp_path):
    original = _recording()
    path = save_joint_recording(original, tmp_path / "sub")
    assert path == tmp_path / "sub" / "rec.npz"
    loaded = load_joint_recording(path)
    assert loaded.rec_id == "rec"
    for name in ("times_s", "joint_angles_rad", "joint_torques_nm"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(original, name))
    assert loaded.metadata == original.metadata
    assert loaded.joint_names == original.joint_names
    assert loaded.scene == "arm-loop"
    assert loaded.source == str(path)  # a loaded recording names its file
    assert loaded.dt_s == pytest.approx(0.01) and loaded.n_samples == 6
    # a directory holding exactly one recording loads too
    assert load_joint_recording(tmp_path / "sub").rec_id == "rec"


def _write_raw(path: Path, times, angles, torques) -> None:
    meta = {"format": JOINT_FORMAT_NAME, "format_version": 1, "scene": "arm-loop",
            "joint_names": [], "source": "", "metadata": {}}
    np.savez(path, times_s=times, joint_angles_rad=angles, joint_torques_nm=torques,
             meta=np.array(json.dumps(meta)))


def _nan_angles(path: Path) -> None:
    angles = np.zeros((5, 7))
    angles[3, 2] = np.nan
    _write_raw(path, 0.01 * np.arange(5), angles, np.zeros((4, 7)))


def _torques_per_sample(path: Path) -> None:
    _write_raw(path, 0.01 * np.arange(5), np.zeros((5, 7)), np.zeros((5, 7)))


def _non_uniform_times(path: Path) -> None:
    _write_raw(path, np.array([0.0, 0.01, 0.02, 0.04, 0.05]), np.zeros((5, 7)),
               np.zeros((4, 7)))


def _foreign_npz(path: Path) -> None:
    np.savez(path, positions=np.zeros((5, 3)))


def _truncated(path: Path) -> None:
    save_joint_recording(_recording(50, rec_id=path.stem), path.parent)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("damage, words", [
    (_nan_angles, "joint_angles_rad has a NaN"),
    (_torques_per_sample, "one row per period"),
    (_non_uniform_times, "not uniformly spaced"),
    (_foreign_npz, "not a residualsim joint recording"),
    (_truncated, "not a readable .npz"),
])
def test_bad_joint_recordings_raise_data_error_naming_the_file(tmp_path, damage, words):
    path = tmp_path / "damaged-take7.npz"
    damage(path)
    with pytest.raises(DataError) as info:
        load_joint_recording(path)
    assert "damaged-take7.npz" in str(info.value)
    assert words in str(info.value)


# --- 6. replay of a noise-free recording ---------------------------------------------------
def test_synthesized_recording_is_what_the_brief_says(clean_recording):
    rec = clean_recording
    assert rec.n_samples == 201 and rec.duration_s == pytest.approx(2.0)
    assert rec.metadata["kappa_truth_12"] == TRUTH_12.tolist()
    assert rec.metadata["closure_error_m"] < 1e-3
    assert len(rec.joint_names) == 7


@pytest.mark.slow
def test_the_full_motion_stays_closed_and_clear_of_the_table(tmp_path, monkeypatch):
    """The shipped 20 s motion sits just below the model's ceiling (larger bends break
    the closure and push links through the table): 12-link loop at the replay's substeps,
    closure < 1 mm and no loop-table contact (checked every 10 internal steps)."""
    import pybullet

    original, gaps = pybullet.stepSimulation, []

    def stepping(*args, **kwargs):
        original(*args, **kwargs)
        if len(gaps) % 10 == 0:
            client = kwargs.get("physicsClientId", 0)
            loop, table = pybullet.getNumBodies(physicsClientId=client) - 1, 0
            points = pybullet.getClosestPoints(loop, table, 0.2, physicsClientId=client)
            gaps.append(min((p[8] for p in points), default=0.2))
        else:
            gaps.append(np.inf)

    monkeypatch.setattr(pybullet, "stepSimulation", stepping)
    rec = load_joint_recording(synthesize_arm_loop(
        tmp_path / "full", n_links=12, substeps=5, angle_noise_rad=0.0, torque_noise_nm=0.0))
    monkeypatch.undo()
    assert rec.duration_s == pytest.approx(20.0)
    assert rec.metadata["closure_error_m"] < 1e-3  # measured: 0.3 mm
    assert len(gaps) > 10_000 and min(gaps) > 0.0  # m; measured: 9 mm, at the clamp


def test_replay_without_feedback_reproduces_the_recording(clean_recording):
    """With the replay's feedback switched off, the model applies exactly the recorded
    torques from the recorded start: it must retrace the recording (the regrasp, settling
    and stepping are those of the synthesis)."""
    model = LoopReplay(clean_recording)
    try:
        model.gains = (np.zeros((7, 7)), np.zeros((7, 7)))
        assert _rms(model.residuals(TRUTH_12)) < 1e-6  # m
    finally:
        model.close()


def test_replay_at_truth_reproduces_a_noise_free_recording(replay):
    assert _rms(replay.residuals(TRUTH_12)) < 0.5e-3  # m


def test_replay_residuals_grow_away_from_truth(replay):
    at_truth = _rms(replay.residuals(TRUTH_12))
    doubled = _rms(replay.residuals(2 * TRUTH_12))
    assert math.isfinite(at_truth)
    assert doubled > 3 * at_truth
    # the same call twice gives the same numbers (every replay restarts the world)
    np.testing.assert_array_equal(replay.residuals(TRUTH_12), replay.residuals(TRUTH_12))


# --- 7. determinism of the synthesis -------------------------------------------------------
def test_synthesis_is_deterministic_per_seed(tmp_path, clean_recording):
    def make(seed: int, name: str) -> JointRecording:
        return load_joint_recording(synthesize_arm_loop(
            tmp_path / name, n_links=12, substeps=5, segment_s=0.2, rng=seed))

    first, again, other = make(1, "a"), make(1, "b"), make(2, "c")
    for name in ("joint_angles_rad", "joint_torques_nm", "times_s"):
        np.testing.assert_array_equal(getattr(first, name), getattr(again, name))
    assert first.metadata == again.metadata and first.metadata["seed"] == 1
    assert not np.array_equal(first.joint_angles_rad, other.joint_angles_rad)
    assert not np.array_equal(first.joint_torques_nm, other.joint_torques_nm)
    # Only the noise differs: its size is the documented default (2e-4 rad, 0.02 N m).
    angle_noise = first.joint_angles_rad - clean_recording.joint_angles_rad
    torque_noise = first.joint_torques_nm - clean_recording.joint_torques_nm
    assert np.std(angle_noise) == pytest.approx(2e-4, rel=0.15)
    assert np.std(torque_noise) == pytest.approx(0.02, rel=0.15)
    assert np.std(first.joint_angles_rad - other.joint_angles_rad) == \
        pytest.approx(math.sqrt(2) * 2e-4, rel=0.15)


# --- 8. identification ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def lsq_from_3_3(clean_recording):
    return identify_stiffness(clean_recording, "lsq", (3.0, 3.0), n_workers=1)


@pytest.mark.slow
def test_lsq_identifies_kappa_theta_and_lowers_the_error(lsq_from_3_3, replay):
    result = lsq_from_3_3
    assert result.method == "lsq" and result.rollouts > 2
    assert result.kappa[0] == pytest.approx(TRUTH_12[0], rel=0.05)  # measured: -2.1 %
    seed_rms = result.history[0]["rms_mm"] / 1000
    assert result.history[0]["kappa"] == pytest.approx([3.0, 3.0])
    assert result.rms_m < 0.8 * seed_rms  # measured 1.40 mm from 2.09 mm
    # a least-squares optimum: no worse than the truth
    assert result.rms_m <= _rms(replay.residuals(TRUTH_12)) + 1e-6


@pytest.mark.slow
def test_lsq_identifies_kappa_psi(lsq_from_3_3):
    assert lsq_from_3_3.kappa[1] == pytest.approx(TRUTH_12[1], rel=0.05)


@pytest.mark.parametrize("method, seed, word", [
    ("newton", (5.0, 5.0), "unknown identification method"),
    ("lsq", (0.05, 5.0), "seed kappa"),
    ("lsq", (5.0, 31.0), "seed kappa"),
    ("lsq", (5.0,), "seed kappa"),
    ("lsq", (math.nan, 5.0), "seed kappa"),
])
def test_identify_rejects_bad_methods_and_seeds(clean_recording, method, seed, word):
    with pytest.raises(ParameterError, match=word):
        identify_stiffness(clean_recording, method, seed)


def test_search_box_must_stay_inside_the_stable_stiffness(clean_recording):
    assert stable_kappa_max(ReplayConfig(), 0.01) == pytest.approx(10.0)
    assert stable_kappa_max(ReplayConfig(substeps=10), 0.01) == pytest.approx(40.0)
    with pytest.raises(ParameterError, match="stable only to about 10 at 5 substeps"):
        identify_stiffness(clean_recording, "lsq", (5.0, 5.0), kappa_bounds=(0.1, 20.0))
    with pytest.raises(ParameterError, match="0 < low < high"):
        identify_stiffness(clean_recording, "lsq", (5.0, 5.0), kappa_bounds=(2.0, 1.0))


@pytest.mark.slow
def test_the_stability_limit_is_real(clean_recording):
    """Why the box stops at 10: at 2 ms steps the explicit springs of κ = 15 blow the replay
    up, 1 ms steps hold it, and κ = 10 is fine at 2 ms."""
    stiff = (15.0, 15.0)
    coarse, fine = LoopReplay(clean_recording), LoopReplay(clean_recording,
                                                           ReplayConfig(substeps=10))
    try:
        inside = _rms(coarse.residuals((10.0, 10.0)))
        blown = coarse.residuals(stiff)
        held = _rms(fine.residuals(stiff))
    finally:
        coarse.close()
        fine.close()
    # measured: blown 0.49 m; held 0.020 m and inside 0.015 m (the error of a wrong κ)
    assert not np.isfinite(blown).all() or _rms(blown) > 0.1
    assert held < 0.03 and inside < 0.03


# --- 9. parallel rollouts ------------------------------------------------------------------
def test_rollout_pool_results_do_not_depend_on_the_worker_count(clean_recording):
    tasks = [(TRUTH_12, 0.0, None), (2 * TRUTH_12, 0.0, None), (2 * TRUTH_12, 1.0, None),
             (TRUTH_12, 0.0, np.full(7, 1e-3))]
    with RolloutPool(clean_recording, n_workers=1) as pool:
        serial = pool.residuals(tasks)
        assert pool.rollouts == 4
    with RolloutPool(clean_recording, n_workers=2) as pool:
        parallel = pool.residuals(tasks)
    rms = [_rms(r) for r in serial]
    assert len(set(rms)) == 4  # four different tasks, four different answers
    assert rms[2] < rms[1]  # the observer pulls the replay towards the measurement
    for a, b in zip(serial, parallel):
        assert a.shape == (clean_recording.n_samples, 3)
        np.testing.assert_array_equal(a, b)  # bit-identical


# --- 10. command line ----------------------------------------------------------------------
def test_bench_identify_loop_needs_two_seed_numbers(capsys):
    from residualsim.cli import main

    with pytest.raises(SystemExit) as info:
        main(["bench", "identify-loop", "--seed-kappa", "5"])
    assert info.value.code == 2
    assert "expected two numbers" in capsys.readouterr().err


# --- 11. checkpoint and resume ---------------------------------------------------------------
@pytest.mark.slow
def test_identification_resumes_from_its_rollout_cache(clean_recording, tmp_path):
    cache = tmp_path / "rollouts"
    first = identify_stiffness(clean_recording, "gradient", (3.0, 3.0), max_rollouts=14,
                               cache_dir=cache)
    files = sorted(cache.glob("*.npy"))
    assert len(files) == first.rollouts > 4  # (the final check re-reads the last iterate)
    # the same call again: every rollout read back, nothing computed, the same answer
    again = identify_stiffness(clean_recording, "gradient", (3.0, 3.0), max_rollouts=14,
                               cache_dir=cache)
    assert again.rollouts == 0 and again.reused == first.rollouts + first.reused
    np.testing.assert_array_equal(again.kappa, first.kappa)
    assert again.history == first.history
    # an interruption: the last rollouts never finished; resuming recomputes only them
    for path in sorted(files, key=lambda p: p.stat().st_mtime_ns)[-3:]:
        path.unlink()
    resumed = identify_stiffness(clean_recording, "gradient", (3.0, 3.0), max_rollouts=14,
                                 cache_dir=cache)
    assert resumed.rollouts == 3
    np.testing.assert_array_equal(resumed.kappa, first.kappa)
    # another configuration does not reuse these rollouts: it computes and adds its own
    before = len(list(cache.glob("*.npy")))
    other = identify_stiffness(clean_recording, "gradient", (3.0, 3.0), max_rollouts=4,
                               cache_dir=cache, config=ReplayConfig(solver_iterations=11))
    assert other.rollouts >= 4
    assert len(list(cache.glob("*.npy"))) == before + other.rollouts


def test_calibrate_arm_loop_refuses_to_mix_runs_without_resume(clean_recording, tmp_path,
                                                                capsys):
    from residualsim.cli import main

    path = save_joint_recording(clean_recording, tmp_path / "rec")
    out = tmp_path / "out"
    command = ["calibrate", "--scene", "arm-loop", "--data", str(path), "--method", "gradient",
               "--seed-kappa", "3,3", "--out", str(out), "--quiet"]
    (out / "rollouts").mkdir(parents=True)
    (out / "rollouts" / "earlier.npy").write_bytes(b"")
    assert main(command) == 2
    assert "rollouts of an earlier run exist" in capsys.readouterr().err
