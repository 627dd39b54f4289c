"""Hostile own-object inputs through the ``residualsim`` command: a table of what each does.

Each case builds its inputs in a temporary folder (a URDF, a scene file, CSV recordings
written from the bundled synthetic cube tosses, prediction files, paths), runs one command
in-process (:func:`residualsim.cli.main`; the library's cases: one call, a ParameterError
counting as exit 2) and records the exit code and the first line on stderr. A case passes when the command exits with the expected code (2: one clear error),
prints no traceback and, for refusals, names the file or option at fault.

    python train/hostile_inputs.py            # the table, as Markdown, on stdout

``tests/test_hostile_inputs.py`` runs every case.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SYNTHETIC = ROOT / "data" / "samples" / "cube-synthetic"
INERTIA = 'ixx="1e-4" iyy="1e-4" izz="1e-4" ixy="0" ixz="0" iyz="0"'
BOX = '<box size="0.1048 0.1048 0.1048"/>'


def _link(name: str, inertia: str = INERTIA, geometry: str = BOX, mass: str = "0.37") -> str:
    collision = f"<collision><geometry>{geometry}</geometry></collision>" if geometry else ""
    return (f'<link name="{name}"><inertial><mass value="{mass}"/><inertia {inertia}/>'
            f"</inertial>{collision}</link>")


def _joint(name: str, parent: str, child: str, kind: str = "revolute") -> str:
    return (f'<joint name="{name}" type="{kind}"><parent link="{parent}"/>'
            f'<child link="{child}"/><origin xyz="0.1 0 0"/><axis xyz="0 0 1"/>'
            '<limit lower="-1" upper="1" effort="0" velocity="9"/></joint>')


def _robot(*parts: str) -> str:
    return '<?xml version="1.0"?><robot name="thing">' + "".join(parts) + "</robot>"


@dataclass
class Case:
    """One hostile input: ``build(folder)`` writes it and returns the command's arguments;
    ``expect`` is the exit code; ``mentions`` what the one-line message must name
    (``{dir}`` is replaced by the case's folder)."""

    name: str
    build: Callable[[Path], list[str]]
    mentions: str
    expect: int = 2


def _urdf_case(name: str, urdf: str, mentions: str) -> Case:
    def build(folder: Path) -> list[str]:
        (folder / "thing.urdf").write_text(urdf)
        return ["data", "info", str(_csv_set(folder)), "--scene", str(folder / "thing.urdf")]
    return Case(name, build, mentions)


def _mesh_case(name: str, mesh: str, content: bytes, mentions: str) -> Case:
    """A one-link URDF whose collision (and visual) shape is the file ``mesh``."""
    def build(folder: Path) -> list[str]:
        (folder / mesh).write_bytes(content)
        geometry = f'<mesh filename="{mesh}"/>'
        link = _link("a", geometry=geometry).replace(
            "</link>", f"<visual><geometry>{geometry}</geometry></visual></link>")
        (folder / "thing.urdf").write_text(_robot(link))
        return ["data", "info", str(_csv_set(folder)), "--scene", str(folder / "thing.urdf")]
    return Case(name, build, mentions)


_OBJ = b"v 0 0 0\nv 0.1 0 0\nv 0 0.1 0\nv 0 0 0.1\nf 1 2 3\nf 1 2 4\nf 1 3 4\nf 2 3 4\n"
_STL = b"solid".ljust(80) + np.uint32(1).tobytes() + np.array(
    [0, 0, 0, 0, 0, 0, 0.1, 0, 0, 0, 0.1, 0], "<f4").tobytes() + bytes(2)

#: A 0.1 m tetrahedron as COLLADA, in metres (``_DAE.replace(b"0.1", b"100")``: millimetres).
_DAE = (b'<?xml version="1.0"?><COLLADA><asset><unit meter="1"/></asset><library_geometries>'
        b'<geometry id="g"><mesh><source id="s"><float_array id="f">0 0 0 0.1 0 0 0 0.1 0 0 '
        b'0 0.1</float_array></source><vertices id="v"><input semantic="POSITION" '
        b'source="#s"/></vertices><triangles count="4"><input semantic="VERTEX" source="#v" '
        b'offset="0"/><p>0 1 2 0 1 3 0 2 3 1 2 3</p></triangles></mesh></geometry>'
        b'</library_geometries><library_visual_scenes><visual_scene id="vs"><node id="n">'
        b'<instance_geometry url="#g"/></node></visual_scene></library_visual_scenes><scene>'
        b'<instance_visual_scene url="#vs"/></scene></COLLADA>')
#: Ten XML entities of ten references each: 1e9 copies of "ha" from under a kilobyte.
_LAUGHS = ('<?xml version="1.0"?><!DOCTYPE {0} [<!ENTITY a0 "ha">'
           + "".join(f'<!ENTITY a{i} "{f"&a{i - 1};" * 10}">' for i in range(1, 10))
           + "]><{0}>&a9;</{0}>")


def _csv_set(folder: Path, count: int = 2) -> Path:
    """The first ``count`` bundled synthetic cube tosses as CSV with velocities."""
    from residualsim.data import load_trajectories, save_csv_trajectories

    target = folder / "csv"
    if not target.is_dir():
        tosses = dict(list(load_trajectories(SYNTHETIC).items())[:count])
        save_csv_trajectories(target, tosses, with_velocities=True)
    return target


def _edit_csv(folder: Path, edit: Callable[[list[str]], list[str]], every: bool = False
              ) -> Path:
    """A CSV set whose first file (renamed ``bad.csv``), or with ``every`` each file (an
    export that is wrong throughout), is rewritten by ``edit`` (lines in, lines out)."""
    target = _csv_set(folder)
    files = sorted(target.glob("*.csv"))
    for index, path in enumerate(files if every else files[:1]):
        lines = path.read_text().splitlines()
        path.unlink()
        name = path.stem if every else "bad"
        (target / f"{name}.csv").write_text("\n".join(edit(lines)) + "\n")
    return target


def _column(lines: list[str], column: str, change: Callable[[float, int], float]
            ) -> list[str]:
    header = lines[0].split(",")
    index = header.index(column)
    out = [lines[0]]
    for row, line in enumerate(lines[1:]):
        cells = line.split(",")
        cells[index] = repr(change(float(cells[index]), row))
        out.append(",".join(cells))
    return out


def _cube_scene(folder: Path, extra: str = "") -> Path:
    shutil.copy(ROOT / "assets" / "cube.urdf", folder / "cube.urdf")
    scene = folder / "cube.toml"
    scene.write_text(f'urdf = "cube.urdf"\n{extra}')
    return scene


def _info(edit: Callable[[list[str]], list[str]], every: bool = False
          ) -> Callable[[Path], list[str]]:
    def build(folder: Path) -> list[str]:
        return ["data", "info", str(_edit_csv(folder, edit, every)), "--scene",
                str(_cube_scene(folder))]
    return build


def _scaled(columns: str, factor: float) -> Callable[[list[str]], list[str]]:
    def edit(lines: list[str]) -> list[str]:
        for column in columns.split(","):
            lines = _column(lines, column, lambda v, r: factor * v)
        return lines
    return edit


def _prediction(folder: Path, joints: int | None, bad: bool = False) -> list[str]:
    from residualsim.evaluation import TrajectoryPredictions, save_predictions
    from residualsim.data import load_trajectories

    toss = next(iter(load_trajectories(SYNTHETIC).values()))
    n = toss.n_samples
    arrays = dict(joint_positions=[np.zeros((1, n, joints))]) if joints is not None else {}
    pred = TrajectoryPredictions.from_arrays([toss.traj_id], [toss.positions_m[None]],
                                             [toss.quat_wxyz[None]], **arrays)
    path = folder / "p.npz"
    if bad:
        path.write_bytes(b"PK\x03\x04 not really a zip")
    else:
        save_predictions(path, pred)
    return ["score", "--pred", str(path), "--data", str(SYNTHETIC)]


def _model_case(name: str, file: str, edit: Callable[[dict], object], mentions: str) -> Case:
    """The shipped cube model with its ``file`` (model.json or policy.json) changed by
    ``edit`` (the parsed JSON, changed in place), run by ``predict``."""
    def build(folder: Path) -> list[str]:
        model = folder / "model"
        shutil.copytree(ROOT / "data" / "pretrained" / "cube-contactnets", model)
        config = json.loads((model / file).read_text())
        edit(config)
        (model / file).write_text(json.dumps(config))
        return ["predict", "--model", str(model), "--data", str(SYNTHETIC), "--out",
                str(folder / "p.npz")]
    return Case(name, build, mentions)


def _hinge_recordings(folder: Path) -> Path:
    """Cube CSV files relabelled with a joint column the scene does not have."""
    def add_joint(lines: list[str]) -> list[str]:
        return [lines[0] + ",elbow"] + [line + ",0.0" for line in lines[1:]]
    return _edit_csv(folder, add_joint)


def _finished_run(method: str, params: str, run_file: bool = True
                  ) -> Callable[[Path], Path]:
    """A folder holding a finished calibrate run of ``method`` on ``params`` (cube): its
    summary, a posterior and, unless an earlier version wrote it, its run.json."""
    def build(folder: Path) -> Path:
        from residualsim.sysid.calibration_file import SUMMARY_FORMAT

        out = _mkdir(folder / "cal")
        names = params.split(",")
        (out / "summary.json").write_text(json.dumps({
            "format": SUMMARY_FORMAT, "method": method, "scene": "cube", "calibrated": names,
            "params": {name: 0.3 for name in names}, "settings": {"substeps": 10}}))
        (out / "posterior.npz").write_bytes(b"kept")
        if run_file:
            (out / "run.json").write_text(json.dumps({
                "command": "calibrate", "method": method, "params": names, "scene": "cube"}))
        return out
    return build


def _over_run(held: Callable[[Path], Path], *argv: str) -> Callable[[Path], list[str]]:
    """``calibrate`` on two bundled synthetic tosses into the folder ``held`` makes."""
    def build(folder: Path) -> list[str]:
        return ["calibrate", "--data", str(SYNTHETIC), "--split", "all",
                "--max-trajectories", "2", "--budget", "8", "--quiet", *argv, "--out",
                str(held(folder))]
    return build


CASES: list[Case] = [
    # URDF physics and structure (refused before PyBullet sees the file)
    _urdf_case("URDF: two unconnected root links (PyBullet segfaults)",
               _robot(_link("a"), _link("b")), "2 root links"),
    _urdf_case("URDF: ixx = nan", _robot(_link("a", INERTIA.replace('ixx="1e-4"', 'ixx="nan"'))),
               "non-finite entry"),
    _urdf_case("URDF: negative inertia",
               _robot(_link("a", INERTIA.replace('iyy="1e-4"', 'iyy="-1e-4"'))),
               "not positive definite"),
    _urdf_case("URDF: zero inertia", _robot(_link("a", INERTIA.replace("1e-4", "0"))),
               "not positive definite"),
    _urdf_case("URDF: triangle inequality broken",
               _robot(_link("a", INERTIA.replace('izz="1e-4"', 'izz="9e-4"'))),
               "triangle inequality"),
    _urdf_case("URDF: floating joint (PyBullet makes it fixed)",
               _robot(_link("a"), _link("b"), _joint("f", "a", "b", "floating")),
               "type 'floating'"),
    _urdf_case("URDF: unknown joint type",
               _robot(_link("a"), _link("b"), _joint("u", "a", "b", "hinge")), "type 'hinge'"),
    _urdf_case("URDF: kinematic loop",
               _robot(_link("a"), _link("b"), _link("c"), _joint("j1", "a", "b"),
                      _joint("j2", "b", "c"), _joint("j3", "a", "c")), "child of two joints"),
    _urdf_case("URDF: link without a collision shape",
               _robot(_link("a"), _link("b", geometry=""), _joint("j", "a", "b")),
               "no <collision> shape"),
    _urdf_case("URDF: missing mesh file",
               _robot(_link("a", geometry='<mesh filename="meshes/gone.obj"/>')),
               "mesh file 'meshes/gone.obj' not found"),
    _urdf_case("URDF: mesh path is a device",
               _robot(_link("a", geometry='<mesh filename="/dev/null"/>')),
               "'/dev/null' is not a regular file"),
    _urdf_case("URDF: package:// mesh not found",
               _robot(_link("a", geometry='<mesh filename="package://kit/m.obj"/>')),
               "package://"),
    _mesh_case("mesh: OBJ of faces without vertices (PyBullet segfaulted)", "m.obj",
               b"f 1 2 3\n", "names a vertex that does not exist"),
    _mesh_case("mesh: empty OBJ (no shape: fell through the table, exit 0)", "m.obj", b"",
               "has no face"),
    _mesh_case("mesh: OBJ written as UTF-16 (no shape, exit 0)", "m.obj",
               _OBJ.decode().encode("utf-16"), "has no face"),
    _mesh_case("mesh: OBJ vertex nan (rested 9 mm deep, exit 0)", "m.obj",
               _OBJ.replace(b"v 0.1 0 0", b"v nan 0 0"), "not a finite number"),
    _mesh_case("mesh: OBJ in millimetres (a 100 m tetrahedron, exit 0)", "m.obj",
               _OBJ.replace(b"0.1", b"100"), "a mesh in millimetres"),
    _mesh_case("mesh: OBJ vertex 1e300, beyond float32 (no shape, exit 0)", "m.obj",
               _OBJ.replace(b"v 0.1 0 0", b"v 1e300 0 0"), "single precision"),
    _mesh_case("mesh: COLLADA without <asset> (PyBullet segfaulted)", "m.dae",
               b'<?xml version="1.0"?><COLLADA><library_geometries/></COLLADA>', "<asset>"),
    _mesh_case("mesh: COLLADA in millimetres (a 100 m tetrahedron, exit 0)", "m.dae",
               _DAE.replace(b"0.1", b"100"), "a mesh in millimetres"),
    _mesh_case("mesh: COLLADA <unit> without meter (PyBullet segfaulted)", "m.dae",
               _DAE.replace(b' meter="1"', b""), "no meter attribute"),
    _mesh_case("mesh: COLLADA 'billion laughs' (XML entities)", "m.dae",
               _LAUGHS.format("COLLADA").encode(), "m.dae: the COLLADA mesh declares an XML "
               "entity"),
    _urdf_case("URDF: 'billion laughs' (XML entities)", _LAUGHS.format("robot"),
               "declares an XML entity"),
    _mesh_case("mesh: binary STL of 0 triangles (no shape, exit 0)", "m.stl",
               b"x" * 80 + bytes(4), "no triangles"),
    _mesh_case("mesh: binary STL with a nan vertex (fell through the table, exit 0)", "m.stl",
               _STL[:96] + np.float32("nan").tobytes() + _STL[100:], "not a finite number"),
    _urdf_case("URDF: joint <origin xyz> with nan (a scipy traceback)",
               _robot(_link("a"), _link("b"), _joint("j", "a", "b").replace(
                   'origin xyz="0.1 0 0"', 'origin xyz="0.1 nan 0"')), "three finite numbers"),
    _urdf_case("URDF: collision <origin> nan (fell through the table, exit 0)",
               _robot(_link("a").replace("<collision>", '<collision><origin xyz="nan 0 0"/>')),
               "three finite numbers"),
    _urdf_case("URDF: a xacro leftover in an <origin> (read as zeros, exit 0)",
               _robot(_link("a").replace("<inertial>", '<inertial><origin xyz="${x} 0 0"/>')),
               "'${x} 0 0' is not a list of numbers"),
    _urdf_case("URDF: collision <origin> 1e30 m away (fell through the table, exit 0)",
               _robot(_link("a").replace("<collision>", '<collision><origin xyz="1e30 0 0"/>')),
               "--allow-implausible"),
    _urdf_case("URDF: zero mass", _robot(_link("a", mass="0")), "must be finite and positive"),
    _urdf_case("URDF: not XML", "<robot name='x'", "not valid XML"),
    _urdf_case("URDF: joint axis 0 0 0 (was a scipy traceback)",
               _robot(_link("a"), _link("b"), _joint("j", "a", "b").replace(
                   'xyz="0 0 1"', 'xyz="0 0 0"')), "has zero length"),
    _urdf_case("URDF: negative joint damping (the object flew off)",
               _robot(_link("a"), _link("b"), _joint("j", "a", "b").replace(
                   "</joint>", '<dynamics damping="-1"/></joint>')), "must be finite and not "
               "negative"),
    _urdf_case("URDF: joint limits lower > upper",
               _robot(_link("a"), _link("b"), _joint("j", "a", "b").replace(
                   'lower="-1"', 'lower="2"')), "lower 2 rad is above upper 1 rad"),
    _urdf_case("URDF: box size with a zero (the body sank)",
               _robot(_link("a", geometry='<box size="0.1 0 0.1"/>')),
               "must be three finite positive numbers"),
    _urdf_case("URDF: the cube in millimetres (read as a 105 m box, exit 0)",
               _robot(_link("a", geometry='<box size="104.8 104.8 104.8"/>')),
               "a URDF in millimetres"),
    _urdf_case("URDF: a 1e6 kg link (it fell through the table)",
               _robot(_link("a", mass="1e6")), "--allow-implausible"),
    Case("scene file: substeps = 1e9", lambda d: [
        "data", "info", str(_csv_set(d)), "--scene",
        str(_cube_scene(d, "substeps = 1000000000\n"))], "more than 1000"),
    Case("scene file: unknown key", lambda d: [
        "data", "info", str(_csv_set(d)), "--scene", str(_cube_scene(d, "colour = 1\n"))],
        "unknown key"),
    Case("scene file: arrays nested 5000 deep (a RecursionError traceback)", lambda d: [
        "data", "info", str(_csv_set(d)), "--scene",
        str(_cube_scene(d, "x = " + "[" * 5000 + "]" * 5000 + "\n"))], "nested too deeply"),
    Case("--substeps 1e9 on the command line", lambda d: [
        "simulate", "--scene", "cube", "--data", str(SYNTHETIC), "--substeps", "1000000000",
        "--out", str(d / "p.npz")], "more than 1000"),
    # CSV recordings
    Case("CSV: decimal comma", lambda d: [
        "data", "info", str(_edit_csv(d, lambda ls: [ls[0].replace(",", ";")] + [
            line.replace(",", ";").replace(".", ",") for line in ls[1:]])), "--scene",
        str(_cube_scene(d))], "decimal comma"),
    Case("CSV: time going backwards", _info(lambda ls: _column(
        ls, "t", lambda v, r: v if r != 5 else 0.0)), "does not increase"),
    Case("CSV: a NaN cell", _info(lambda ls: ls[:4] + [ls[4].replace(ls[4].split(",")[2], "nan")]
                                  + ls[5:]), "not a finite number"),
    Case("CSV: missing column qz", _info(lambda ls: [",".join(
        c for c in line.split(",")[:7] + line.split(",")[8:]) for line in ls]), "qz"),
    Case("CSV: quaternion far from unit norm", _info(lambda ls: _column(
        ls, "qw", lambda v, r: v + 0.5)), "norm"),
    Case("CSV: an export in millimetres", _info(_scaled("x,y,z,vx,vy,vz", 1000.0), every=True),
         "millimetres"),
    Case("CSV: t times 1e300 with --allow-implausible (a LinAlgError traceback)",
         lambda d: _info(_scaled("t", 1e300), every=True)(d) + ["--allow-implausible"],
         "longer than 1e+06 s"),
    Case("CSV: a cell 1_0 (Python's float reads 10)", _info(lambda ls: ls[:4] + [
        ls[4].replace(ls[4].split(",")[3], "1_0", 1)] + ls[5:]), "'1_0' is not a number"),
    Case("CSV: an export with times in milliseconds", _info(_scaled("t", 1000.0), every=True),
         "millisecond"),
    Case("CSV: one file's times in milliseconds, its flight too short to check (exit 0)",
         _info(_scaled("t", 1000.0)), "times look like milliseconds"),
    Case("CSV: times in nanoseconds since the epoch (accepted at 1.5e-7 Hz, exit 0)",
         _info(lambda ls: _column(ls, "t", lambda v, r: 1.7e18 + 1e9 * v)), "nanoseconds"),
    Case("CSV: velocity columns all zero", _info(lambda ls: _column(_column(_column(
        ls, "vx", lambda v, r: 0.0), "vy", lambda v, r: 0.0), "vz", lambda v, r: 0.0)),
        "velocit"),
    Case("CSV: a header of 100 000 columns (25 s of quadratic checks)",
         _info(lambda ls: [line + ",0" * 100_000 for line in ls]), "duplicate column(s) 0"),
    Case("CSV: empty file", _info(lambda ls: []), "empty"),
    Case("CSV: header only", _info(lambda ls: ls[:1]), "row"),
    Case("CSV: a row with a missing cell", _info(lambda ls: ls[:3] + [
        ",".join(ls[3].split(",")[:-1])] + ls[4:]), "cells"),
    Case("CSV: duplicate column", _info(lambda ls: [ls[0].replace("vx", "vy")] + ls[1:]),
         "duplicate"),
    Case("CSV: a joint the scene does not have", lambda d: [
        "data", "info", str(_hinge_recordings(d)), "--scene", str(_cube_scene(d))], "elbow"),
    # outputs and paths
    Case("--out is the data folder", lambda d: [
        "calibrate", "--scene", "cube", "--data", str(_csv_set(d)), "--params",
        "lateral_friction", "--out", str(_csv_set(d))], "is the --data folder"),
    Case("--out inside the data folder", lambda d: [
        "simulate", "--scene", "cube", "--data", str(_csv_set(d)), "--out",
        str(_csv_set(d) / "p.npz")], "lies inside the --data folder"),
    Case("calibrate --method lsq into a finished MH run (its summary replaced, exit 0)",
         _over_run(_finished_run("mh", "lateral_friction,restitution"), "--method", "lsq"),
         "holds a finished residualsim calibrate run (method mh"),
    Case("calibrate --method nevergrad --resume into a finished MH run (replaced, exit 0)",
         _over_run(_finished_run("mh", "lateral_friction,restitution"), "--method",
                   "nevergrad", "--resume"), "not this run (method nevergrad)"),
    Case("calibrate --method sandwich into an MH run of an earlier version (no run.json)",
         _over_run(_finished_run("mh", "lateral_friction,restitution", run_file=False),
                   "--method", "sandwich"), "(method mh, params lateral_friction,restitution, "
         "scene cube; summary.json)"),
    Case("calibrate --method lsq into a finished sandwich run (replaced, exit 0)",
         _over_run(_finished_run("sandwich", "lateral_friction,restitution"), "--method",
                   "lsq"), "not this run (method lsq)"),
    Case("calibrate contact-only sandwich into a contact + more lsq run (replaced, exit 0)",
         _over_run(_finished_run("lsq", "lateral_friction,restitution,spinning_friction,"
                                 "rolling_friction,contact_stiffness"), "--method",
                   "sandwich", "--params", "contact", "--resume"),
         "not this run (method sandwich, params lateral_friction,restitution,spinning_"),
    Case("calibrate sandwich again without --resume (replaced its own run, exit 0)",
         _over_run(_finished_run("sandwich", "lateral_friction,restitution"), "--method",
                   "sandwich"), "already holds this run"),
    Case("calibrate --method lsq --weighting calibrated (accepted, no effect)", lambda d: [
        "calibrate", "--data", str(SYNTHETIC), "--method", "lsq", "--weighting", "calibrated",
        "--out", str(d / "cal")], "--weighting calibrated applies to --method mh"),
    Case("calibrate --method sandwich --small-sample none (accepted, no effect)", lambda d: [
        "calibrate", "--data", str(SYNTHETIC), "--method", "sandwich", "--small-sample",
        "none", "--out", str(d / "cal")], "--small-sample none applies to --method mh's"),
    Case("bench beliefs --batch-sizes 1,auto without --methods (no batch comparison)",
         lambda d: ["bench", "beliefs", "--data", str(SYNTHETIC), "--batch-sizes", "1,auto"],
         "--batch-sizes applies to the belief steps of --methods"),
    Case("bench beliefs --draws 3,3,, (empty and repeated items accepted)", lambda d: [
        "bench", "beliefs", "--data", str(SYNTHETIC), "--methods", "conjugate", "--draws",
        "3,3,,"], "an empty item in '3,3,,'"),
    Case("CSV: a continuous joint in degrees (blamed on the base: another up axis)",
         lambda d: ["data", "info", str(_continuous_in_degrees(d)), "--scene",
                    str(d / "wheel.urdf")], "the joint angles look like degrees"),
    Case("fit-ground on recordings without rest (the data folder not named)", lambda d: [
        "fit-ground", "--model", str(ROOT / "data" / "pretrained" / "cube-contactnets"),
        "--data", str(SYNTHETIC), "--out", str(d / "fg")], f"{SYNTHETIC} (its training split"),
    Case("data info: eight copies of one toss under other names (not a word, exit 0)",
         lambda d: ["data", "info", str(_copies(d))], "8 recordings repeat another", expect=0),
    Case("data info --scene: the rest 4 mm above the table (counted as flight, not said)",
         lambda d: ["data", "info", str(_raised(d, 0.006)), "--scene", "cube"],
         "sits 3.9 mm above the table", expect=0),
    Case("data info --scene: the real tosses raised 8 mm (refused for quaternion order)",
         lambda d: ["data", "info", str(_raised(d, 0.008)), "--scene", "cube"],
         "sits 5.9 mm above the table", expect=0),
    Case("uncertainty --samples 5000 --max-minutes 0.001 (ran on, no estimate, no cap)",
         lambda d: ["uncertainty", "--data", str(ROOT / "data" / "samples" / "contactnets-cube"),
                    "--split", "all", "--limit", "1", "--samples", "5000", "--max-minutes",
                    "0.001"], "would take about"),
    Case("predict --samples 5000 --max-minutes 0.001 (ran on, no estimate, no cap)",
         lambda d: ["predict", "--model", str(ROOT / "data" / "pretrained" / "cube-contactnets"),
                    "--data", str(ROOT / "data" / "samples" / "contactnets-cube"), "--split",
                    "all", "--limit", "1", "--samples", "5000", "--max-minutes", "0.001",
                    "--out", str(d / "p.npz")], "would take about"),
    Case("rollout --samples 5000 --particles 100000 --max-minutes 0.001 (ran on, no estimate)",
         lambda d: ["rollout", "--toss", "20", "--data",
                    str(ROOT / "data" / "samples" / "contactnets-cube"), "--samples", "5000",
                    "--particles", "100000", "--max-minutes", "0.001", "--out",
                    str(d / "r.npz")], "would take about"),
    Case("check-calibration --datasets 50 --max-minutes 0.001 (150 s with no word, no cap)",
         lambda d: ["check-calibration", "--scene", "cube", "--datasets", "50", "--tosses", "3",
                    "--samples", "20", "--substeps", "2", "--mh-samples", "30", "--burn-in",
                    "10", "--draws", "9", "--bins", "5", "--max-minutes", "0.001", "--out",
                    str(d / "sbc.jsonl")], "a rerun resumes"),
    Case("--out under a file", lambda d: [
        "simulate", "--scene", "cube", "--data", str(SYNTHETIC), "--out",
        str(_touch(d / "file.txt") / "p.npz")], "is a file"),
    Case("--out is an existing directory (a file expected)", lambda d: [
        "simulate", "--scene", "cube", "--data", str(SYNTHETIC), "--out", str(d)],
        "is a directory"),
    Case("score --plot is a directory (a traceback after scoring)", lambda d: _prediction(
        d, None) + ["--plot", str(_mkdir(d / "rel.png"))], "is a directory"),
    Case("score --plot under a file (a traceback after scoring)", lambda d: _prediction(
        d, None) + ["--plot", str(_touch(d / "file.txt") / "rel.png")], "is a file"),
    Case("uncertainty --out is a directory (a traceback after the work)", lambda d: [
        "uncertainty", "--data", str(SYNTHETIC), "--split", "all", "--limit", "1",
        "--samples", "2", "--out", str(_mkdir(d / "u.json"))], "is a directory"),
    Case("prediction: joint_positions of the wrong width", lambda d: _prediction(d, 2),
         "joint"),
    Case("prediction: not a prediction file", lambda d: _prediction(d, None, bad=True),
         "p.npz"),
    Case("prediction: file missing", lambda d: [
        "score", "--pred", str(d / "none.npz"), "--data", str(SYNTHETIC)], "none.npz"),
    Case("--params: unknown name", lambda d: [
        "simulate", "--scene", "cube", "--data", str(SYNTHETIC), "--params", "fricton=0.3",
        "--out", str(d / "p.npz")], "fricton"),
    Case("--params: friction -1", lambda d: [
        "simulate", "--scene", "cube", "--data", str(SYNTHETIC), "--params",
        "lateral_friction=-1", "--out", str(d / "p.npz")], "lateral_friction"),
    Case("--params: a JSON file nested 1e5 deep (a RecursionError traceback)", lambda d: [
        "simulate", "--scene", "cube", "--data", str(SYNTHETIC), "--params",
        str(_write(d / "p.json", "[" * 100_000 + "]" * 100_000)), "--out", str(d / "p.npz")],
        "nested too deeply"),
    Case("--params: a calibration folder without summary", lambda d: [
        "simulate", "--scene", "cube", "--data", str(SYNTHETIC), "--params",
        str(_mkdir(d / "cal")), "--out", str(d / "p.npz")], "without summary.json"),
    Case("--params: 5000 characters (an OSError traceback: file name too long)", lambda d: [
        "simulate", "--scene", "cube", "--data", str(SYNTHETIC), "--params",
        "lateral_friction=0.3," + "x" * 5000, "--out", str(d / "p.npz")], "expected name=value"),
    Case("--params: a device (/dev/null)", lambda d: [
        "simulate", "--scene", "cube", "--data", str(SYNTHETIC), "--params", "/dev/null",
        "--out", str(d / "p.npz")], "/dev/null: not a regular file"),
    Case("rollout --horizon nan", lambda d: [
        "rollout", "--state", "0,0,0.3,1,0,0,0,0.5,0,-0.5,0,5,0", "--horizon", "nan",
        "--out", str(d / "r.npz")], "--horizon"),
    Case("rollout --horizon -1", lambda d: [
        "rollout", "--state", "0,0,0.3,1,0,0,0,0.5,0,-0.5,0,5,0", "--horizon", "-1",
        "--out", str(d / "r.npz")], "--horizon"),
    Case("rollout --state of 12 numbers", lambda d: [
        "rollout", "--state", "0,0,0.3,1,0,0,0,0.5,0,-0.5,0,5", "--out", str(d / "r.npz")],
        "--state"),
    Case("rollout --state with a zero quaternion", lambda d: [
        "rollout", "--state", "0,0,0.3,0,0,0,0,0.5,0,-0.5,0,5,0", "--out", str(d / "r.npz")],
        "quaternion"),
    Case("data folder that does not exist", lambda d: [
        "data", "info", str(d / "nowhere")], "nowhere"),
    Case("data folder mixing .csv and .npz", lambda d: [
        "data", "info", str(_touch(_csv_set(d) / "x.npz").parent)], "mixes data formats"),
    _model_case("model: policy.json hidden width 1e12 (a torch allocation traceback)",
                "policy.json", lambda c: c.update(hidden=[10 ** 12]),
                "weights do not match the architecture"),
    _model_case("model: a guard setting that is text (a traceback mid-rollout)", "model.json",
                lambda c: c["guard"].update(min_approach_mps="x"), "min_approach_mps"),
    _model_case("model: impulse_scale_ns nan (blamed on the predictions)", "policy.json",
                lambda c: c.update(impulse_scale_ns=float("nan")), "policy.json"),
    _model_case("model: feature_std 0 (accepted, exit 0)", "policy.json",
                lambda c: c["feature_std"].__setitem__(0, 0.0), "feature_std"),
    _model_case("model: substeps 2.5 (read as 2, exit 0)", "model.json",
                lambda c: c["settings"].update(substeps=2.5), "substeps 2.5"),
    Case("calibrate contact+body: the guard's 'contact' candidate passed off as the best "
         "contact-only fit", lambda d: lambda: _contact_and_body(d),
         "not compared: a contact-only fit", expect=0),
    Case("calibrate --export-urdf: weak and determined parameters look alike in the file",
         lambda d: lambda: _exported_note(d), "weak, not determined", expect=0),
    # the library's belief API (a call, not a command)
    Case("API: GaussianMixtureBelief.gaussian(state, [0.0] * 12) propagated (LinAlgError)",
         lambda d: lambda: _propagate([0.0] * 12), "1 belief step", expect=0),
    Case("API: propagate_belief(n_workers=0) (accepted, ran one worker)",
         lambda d: lambda: _propagate([0.01] * 12, n_workers=0), "n_workers must be"),
    Case("API: a belief covariance with a negative eigenvalue", lambda d: lambda: _belief(
        -np.eye(12)[None]), "not positive semi-definite"),
    Case("model folder that does not exist", lambda d: [
        "predict", "--model", str(d / "no-model"), "--data", str(SYNTHETIC), "--out",
        str(d / "p.npz")], "no-model"),
]


def _belief(covariances: np.ndarray) -> str:
    from residualsim.belief.propagation import GaussianMixtureBelief
    from residualsim.belief.simulator import toss_state

    state = toss_state([0, 0, 0.3], [1, 0, 0, 0], [0.5, 0, -0.5], [0, 5, 0])
    plain = GaussianMixtureBelief.gaussian(state, [0.01] * 12, planar=False)
    return repr(GaussianMixtureBelief(plain.weights, plain.means, covariances, plain.tangent))


def _propagate(std: list[float], n_workers: int = 1) -> str:
    from residualsim.belief.propagation import GaussianMixtureBelief, propagate_belief
    from residualsim.belief.simulator import toss_state
    from residualsim.residual.model import ResidualModel

    state = toss_state([0, 0, 0.3], [1, 0, 0, 0], [0.5, 0, -0.5], [0, 5, 0])
    belief = GaussianMixtureBelief.gaussian(state, std, planar=False)
    model = ResidualModel.load(ROOT / "data" / "pretrained" / "cube-contactnets")
    steps = propagate_belief(model, belief, n_events=1, n_particles=10, n_workers=n_workers)
    return f"{len(steps)} belief step, {steps[0].summary()['accepted']} particles accepted"


def _contact_and_body(folder: Path) -> str:
    """calibrate --params contact,body on the synthetic cube (a scene file): which
    candidates the held-out guard compared, and what it did not (summary.json)."""
    from residualsim.sysid.calibrate import calibrate

    logging.disable(logging.WARNING)  # its warnings (a short budget) are not the case
    try:
        summary = calibrate(str(_cube_scene(folder)), SYNTHETIC,
                            ["lateral_friction", "restitution", "body"], folder / "cal",
                            method="lsq", budget=12, split="train", plots=False, ground=False)
    finally:
        logging.disable(logging.NOTSET)
    return (f"compared {', '.join(summary['held_out_compared'])}; not compared: "
            f"{summary['held_out_not_compared']}")


def _exported_note(folder: Path) -> str:
    """calibrate --params contact,body --keep-calibrated --export-urdf on the synthetic
    cube: the exported URDF's note on what the data determined, its lines joined."""
    from residualsim.cli import main

    logging.disable(logging.WARNING)  # its warnings (a short budget) are not the case
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(
                io.StringIO()):
            main(["calibrate", "--scene", str(_cube_scene(folder)), "--data", str(SYNTHETIC),
                  "--params", "lateral_friction,body", "--method", "lsq", "--budget", "12",
                  "--no-ground", "--quiet", "--keep-calibrated", "--out",
                  str(folder / "cal"), "--export-urdf", str(folder / "out.urdf")])
    finally:
        logging.disable(logging.NOTSET)
    text = (folder / "out.urdf").read_text()
    if "<!-- residualsim calibrate:" not in text:
        return "the exported URDF says nothing of what was determined"
    note = text.split("<!--", 1)[1].split("-->", 1)[0]
    return " | ".join(line.strip() for line in note.splitlines()[1:3])


def _continuous_in_degrees(folder: Path) -> Path:
    """Two synthetic hinge tosses with the joint made continuous (wheel.urdf) and its angles
    written in degrees, wrapped into (-180, 180]."""
    from residualsim.cli import main

    hinge = ROOT / "assets" / "examples" / "hinge.toml"
    (folder / "wheel.urdf").write_text(hinge.with_suffix(".urdf").read_text().replace(
        'type="revolute"', 'type="continuous"'))
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        main(["data", "synthesize", "--scene", str(hinge), "--count", "2", "--samples", "60",
              "--params", "lateral_friction=0.3", "--out", str(folder / "radians")])
    target = _mkdir(folder / "degrees")
    for path in sorted((folder / "radians").glob("*.csv")):
        lines = _column(path.read_text().splitlines(), "elbow",
                        lambda v, r: float((np.degrees(v) + 180.0) % 360.0 - 180.0))
        (target / path.name).write_text("\n".join(lines) + "\n")
    return target


def _copies(folder: Path) -> Path:
    """Six bundled synthetic tosses as CSV and eight copies of the first under other names."""
    import dataclasses

    from residualsim.data import load_trajectories, save_csv_trajectories

    tosses = dict(list(load_trajectories(SYNTHETIC).items())[:6])
    first = next(iter(tosses.values()))
    copies = {f"copy{i}": dataclasses.replace(first, traj_id=f"copy{i}") for i in range(8)}
    save_csv_trajectories(folder / "copies", {**tosses, **copies}, with_velocities=True)
    return folder / "copies"


def _raised(folder: Path, dz_m: float) -> Path:
    """The bundled real tosses (which rest 2.1 mm into the table) raised by ``dz_m``."""
    import dataclasses

    from residualsim.data import load_trajectories, save_csv_trajectories

    tosses = load_trajectories(ROOT / "data" / "samples" / "contactnets-cube")
    save_csv_trajectories(folder / "raised", {k: dataclasses.replace(
        t, positions_m=t.positions_m + np.array([0.0, 0.0, dz_m])) for k, t in tosses.items()},
        with_velocities=True)
    return folder / "raised"


def _touch(path: Path) -> Path:
    path.write_text("x")
    return path


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _mkdir(path: Path) -> Path:
    path.mkdir(exist_ok=True)
    return path


@dataclass
class Outcome:
    """What one case did: exit code, the first stderr line, whether it passes."""

    case: Case
    code: int
    message: str
    traceback: bool

    @property
    def passed(self) -> bool:
        return (self.code == self.case.expect and not self.traceback
                and self.case.mentions.lower() in self.message.lower())


def _call(function: Callable[[], str]) -> int:
    """Run a library call as the command would: 0 (its result line on stderr), or 2 and
    the ResidualSimError's message; anything else prints its traceback."""
    import traceback

    from residualsim.errors import ResidualSimError

    try:
        print(function(), file=sys.stderr)
        return 0
    except ResidualSimError as exc:
        print(f"residualsim: error: {exc}", file=sys.stderr)
        return 2
    except Exception:  # a traceback: the case fails
        traceback.print_exc()
        return 1


def run_case(case: Case) -> Outcome:
    """Build ``case`` in a fresh temporary folder and run its command in-process (or, for
    the library's cases, its call)."""
    from residualsim.cli import main

    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        argv = case.build(Path(tmp))
        err = io.StringIO()
        warnings = logging.StreamHandler(err)  # the command's warnings, as on stderr
        warnings.setLevel(logging.WARNING)
        logging.getLogger().addHandler(warnings)
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = _call(argv) if callable(argv) else main(argv)
            except SystemExit as exit_:  # argparse refusals
                code = exit_.code if isinstance(exit_.code, int) else 2
            finally:
                logging.getLogger().removeHandler(warnings)
        text = err.getvalue()
    lines = [line for line in text.splitlines() if line.strip()]
    first = next((line for line in lines if line.startswith("residualsim") and "error:" in line),
                 next((line for line in lines if "error" in line.lower()),
                      lines[0] if lines else ""))
    return Outcome(case, code, first.strip(), "Traceback" in text)


def main() -> int:
    outcomes = [run_case(case) for case in CASES]
    print("| # | case | exit | message (first error line) | ok |")
    print("|---|---|---|---|---|")
    for number, outcome in enumerate(outcomes, 1):
        message = outcome.message.replace("|", "\\|")
        if len(message) > 160:
            message = message[:157] + "..."
        print(f"| {number} | {outcome.case.name} | {outcome.code} | {message} | "
              f"{'yes' if outcome.passed else 'NO'} |")
    failed = [o for o in outcomes if not o.passed]
    print(f"\n{len(outcomes) - len(failed)} of {len(outcomes)} cases handled well",
          file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
