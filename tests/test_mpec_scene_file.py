"""MPEC on a scene file's object: contact candidates from the URDF, the general rigid-body
window model, refusals (articulated, planar, rounded), and a small synthetic calibration
with known truth end to end through the command line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from residualsim.cli import main
from residualsim.errors import ParameterError
from residualsim.sysid.mpec.body import body_from_scene, cube_body, urdf_contact_points

ASSETS = Path(__file__).resolve().parents[1] / "assets"
ELL = ASSETS / "examples" / "ell.toml"


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_ell_candidates_are_its_outer_box_corners():
    """The L's two boxes have 16 corners; the convex hull keeps the 10 on its outline (the
    inner corner of the L and the corners where the boxes meet can never touch a plane
    first)."""
    body = body_from_scene(ELL)
    box_a = {(x, y, z) for x in (0.0, 0.1) for y in (0.0, 0.03) for z in (-0.015, 0.015)}
    box_b = {(x, y, z) for x in (0.0, 0.03) for y in (0.03, 0.1) for z in (-0.015, 0.015)}
    outline = {(0.0, 0.0), (0.1, 0.0), (0.1, 0.03), (0.03, 0.1), (0.0, 0.1)}
    expected = {(x, y, z) for x, y in outline for z in (-0.015, 0.015)}
    got = {tuple(np.round(p, 9)) for p in body.points_m}
    assert got == expected and got <= box_a | box_b
    np.testing.assert_allclose(body.com_m, [0.03559, 0.03559, 0.0])
    assert body.mass_kg == pytest.approx(0.25)
    assert not body.isotropic  # the L's inertia has a product term: gyroscopic dynamics


def test_cube_scene_file_matches_the_builtin_cube():
    from_file, builtin = body_from_scene(ASSETS / "cube.toml"), cube_body()
    assert {tuple(p) for p in np.round(from_file.points_m, 9)} == \
        {tuple(p) for p in np.round(builtin.points_m, 9)}
    assert from_file.isotropic and builtin.isotropic
    # the URDF rounds the inertia to 6 digits
    np.testing.assert_allclose(from_file.inertia_kgm2, builtin.inertia_kgm2, rtol=1e-4)


def test_mesh_candidates_are_hull_vertices(tmp_path):
    (tmp_path / "tetra.obj").write_text(
        "v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nv 0.1 0.1 0.1\nf 1 2 3\nf 1 2 4\nf 1 3 4\nf 2 3 4\n")
    (tmp_path / "tetra.urdf").write_text(
        '<robot name="t"><link name="t"><inertial><mass value="1"/><inertia ixx="1" iyy="1" '
        'izz="1" ixy="0" ixz="0" iyz="0"/></inertial><collision><origin xyz="0 0 0.5"/>'
        '<geometry><mesh filename="tetra.obj" scale="0.1 0.1 0.1"/></geometry></collision>'
        '</link></robot>')
    points = urdf_contact_points(tmp_path / "tetra.urdf")
    np.testing.assert_allclose(points, [[0, 0, 0.5], [0, 0, 0.6], [0, 0.1, 0.5],
                                        [0.1, 0, 0.5]], atol=1e-12)


@pytest.mark.parametrize("shape", ['<sphere radius="0.05"/>',
                                   '<cylinder radius="0.05" length="0.1"/>'])
def test_rounded_shapes_are_refused(tmp_path, shape):
    urdf = tmp_path / "round.urdf"
    urdf.write_text(f'<robot name="r"><link name="r"><inertial><mass value="1"/><inertia '
                    f'ixx="1" iyy="1" izz="1" ixy="0" ixz="0" iyz="0"/></inertial><collision>'
                    f'<geometry>{shape}</geometry></collision></link></robot>')
    with pytest.raises(ParameterError, match="round.urdf.*not supported by --method mpec"):
        body_from_scene(urdf)


def test_articulated_and_planar_scene_files_exit_2(capsys, tmp_path):
    hinge = ASSETS / "examples" / "hinge.toml"
    data = tmp_path / "data"  # an --out inside --data is refused first
    data.mkdir()
    code, out, err = _run(capsys, "calibrate", "--method", "mpec", "--scene", hinge,
                          "--data", data, "--out", tmp_path / "out")
    assert code == 2
    assert "hinge.toml" in err and "2 links (joints: elbow)" in err
    assert "Traceback" not in err and not (tmp_path / "out" / "summary.json").exists()
    planar = tmp_path / "flat.toml"
    planar.write_text(f'urdf = "{ASSETS / "examples" / "ell.urdf"}"\nkind = "planar"\n')
    code, out, err = _run(capsys, "calibrate", "--method", "mpec", "--scene", planar,
                          "--data", data, "--out", tmp_path / "out")
    assert code == 2 and "flat.toml" in err and "kind 'planar'" in err
    assert "Traceback" not in err


@pytest.mark.slow
def test_ell_synthetic_calibration_recovers_friction(capsys, tmp_path):
    """8 synthetic L tosses at 200 Hz (PyBullet at 10 substeps, mu 0.3, e 0.4; CSV poses
    only, the initial states fitted): the MPEC's mu within 0.1 of the truth and e within
    0.15. The tolerance is the model gap on few windows: the rigid one-step model against
    PyBullet's contact, 0.307 / 0.419 on 47 such tosses, 0.284 / 0.469 at 100 Hz
    (train/README.md §15)."""
    data = tmp_path / "ell"
    code, _, err = _run(capsys, "data", "synthesize", "--scene", ELL, "--params",
                        "lateral_friction=0.3,restitution=0.4", "--count", "8", "--samples",
                        "120", "--rate", "200", "--seed", "3", "--out", data)
    assert code == 0, err
    code, out, err = _run(capsys, "calibrate", "--method", "mpec", "--scene", ELL, "--data",
                          data, "--split", "all", "--params", "lateral_friction,restitution",
                          "--out", tmp_path / "cal")
    assert code == 0, err
    summary = json.loads((tmp_path / "cal" / "summary.json").read_text())
    assert summary["solver_status"] == "Solve_Succeeded"
    assert abs(summary["best"]["lateral_friction"] - 0.3) < 0.1
    assert abs(summary["best"]["restitution"] - 0.4) < 0.15
    assert summary["mpec_position_rms_m"] < 0.01
