"""Issue 67: an output folder holding another run is refused, in every method and command.

``calibrate`` into a folder holding a finished run of another method (nevergrad, lsq or
sandwich over MH; lsq over sandwich) or of another parameter space (contact-only over
contact + body) exited 0 and replaced its summary, with or without ``--resume``. One guard
(:func:`residualsim.atomic.check_output` with a run description, recorded in ``run.json``)
refuses it before any work, naming what the folder holds; ``--resume`` names the run it
continues."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from residualsim.atomic import RUN_FILE, check_output, held_run
from residualsim.cli import main
from residualsim.errors import ParameterError
from residualsim.sysid.calibrate import calibrate
from residualsim.sysid.calibration_file import load_calibration

ROOT = Path(__file__).resolve().parents[1]
SYNTHETIC = ROOT / "data" / "samples" / "cube-synthetic"
ELL = ROOT / "assets" / "examples" / "ell.toml"
#: A few seconds a run: 3 tosses, 4 MH draws, a budget of 8 (MH: the raw likelihood, RAW).
QUICK = ["--data", str(SYNTHETIC), "--split", "all", "--max-trajectories", "3", "--samples",
         "4", "--burn-in", "2", "--start-points", "2", "--no-plots", "--quiet", "--budget",
         "8"]
RAW = ["--weighting", "recording"]


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Finished calibrate runs: mh and sandwich on the cube, lsq on contact + body of the
    L-shaped example."""
    root = tmp_path_factory.mktemp("runs")
    folders = {}
    for method in ("mh", "sandwich"):
        folders[method] = root / method
        assert main(["calibrate", *QUICK, *(RAW if method == "mh" else []), "--method",
                     method, "--out", str(folders[method])]) == 0
    tosses = root / "ell-csv"
    assert main(["data", "synthesize", "--scene", str(ELL), "--count", "6", "--noise-m",
                 "0.0005", "--params", "lateral_friction=0.3,restitution=0.4", "--out",
                 str(tosses)]) == 0
    folders["ell-data"] = tosses
    folders["lsq-body"] = root / "lsq-body"
    assert main(["calibrate", "--scene", str(ELL), "--data", str(tosses), "--split", "all",
                 "--params", "contact,body", "--budget", "30", "--quiet", "--no-plots",
                 "--out", str(folders["lsq-body"])]) == 0
    return folders


@pytest.fixture
def copy(runs, tmp_path):
    def make(name: str) -> Path:
        return Path(shutil.copytree(runs[name], tmp_path / name))
    return make


@pytest.mark.parametrize("method", ["nevergrad", "lsq", "sandwich"])
@pytest.mark.parametrize("resume", [False, True])
def test_another_method_over_a_finished_mh_run_is_refused(copy, capsys, method, resume):
    folder = copy("mh")
    before = _snapshot(folder)
    code, out, err = _run(capsys, "calibrate", *QUICK, "--method", method,
                          *(["--resume"] if resume else []), "--out", folder)
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("residualsim: error: --out") and str(folder) in line
    assert "finished residualsim calibrate run (method mh" in line
    assert f"not this run (method {method})" in line
    assert _snapshot(folder) == before  # nothing written, nothing replaced
    assert load_calibration(folder).summary["method"] == "mh"


def test_lsq_over_a_sandwich_run_is_refused(copy, capsys):
    folder = copy("sandwich")
    before = _snapshot(folder)
    code, _, err = _run(capsys, "calibrate", *QUICK, "--method", "lsq", "--out", folder)
    assert code == 2 and "(method sandwich" in err and "not this run (method lsq)" in err
    assert _snapshot(folder) == before


def test_a_second_sandwich_run_needs_resume(copy, capsys):
    """The sandwich replaced its own finished run without --resume (its checkpoint did not
    refuse): now the guard does, and --resume continues it, naming it."""
    folder = copy("sandwich")
    before = _snapshot(folder)
    code, _, err = _run(capsys, "calibrate", *QUICK, "--method", "sandwich", "--out", folder)
    assert code == 2 and "already holds this run" in err and "--resume" in err
    assert _snapshot(folder) == before
    code, _, err = _run(capsys, "calibrate", *QUICK, "--method", "sandwich", "--resume",
                        "--out", folder)
    assert code == 0, err
    assert (f"--resume: continuing a finished residualsim calibrate run (method sandwich, "
            f"params lateral_friction,restitution, scene cube; summary.json) in {folder}"
            in err)


def test_contact_only_sandwich_over_a_contact_and_body_lsq_run_is_refused(runs, copy,
                                                                           capsys):
    folder = copy("lsq-body")
    before = _snapshot(folder)
    code, _, err = _run(capsys, "calibrate", "--scene", ELL, "--data", runs["ell-data"],
                        "--split", "all", "--params", "contact", "--method", "sandwich",
                        "--quiet", "--no-plots", "--resume", "--out", folder)
    assert code == 2, err
    assert "(method lsq, params lateral_friction,restitution,spinning_friction," in err
    assert "body.ell.com_x" in err and "(13 in all)" in err
    assert ("not this run (method sandwich, params lateral_friction,restitution,"
            "spinning_friction,rolling_friction)") in err
    assert _snapshot(folder) == before


def test_another_parameter_space_of_the_same_method_is_refused(copy, capsys):
    folder = copy("mh")
    code, _, err = _run(capsys, "calibrate", *QUICK, *RAW, "--params", "restitution",
                        "--resume", "--out", folder)
    assert code == 2 and "not this run (params restitution)" in err


def test_the_library_call_is_guarded_too(copy):
    folder = copy("mh")
    with pytest.raises(ParameterError, match=r"out .*holds a finished residualsim calibrate "
                       r"run \(method mh.*not this run \(method lsq\)"):
        calibrate("cube", SYNTHETIC, ["lateral_friction", "restitution"], folder,
                  method="lsq", split="all", max_items=3, budget=8, resume=True)


def test_resume_on_an_empty_folder_says_it_starts_a_new_run(tmp_path, capsys):
    folder = tmp_path / "new"
    code, _, err = _run(capsys, "calibrate", *QUICK, "--method", "lsq", "--resume", "--out",
                        folder)
    assert code == 0, err
    assert f"--resume: {folder} holds no run yet: starting a new one" in err
    run = json.loads((folder / RUN_FILE).read_text())
    assert run == {"command": "calibrate", "method": "lsq",
                   "params": ["lateral_friction", "restitution"], "scene": "cube"}


def test_folders_of_earlier_versions_are_read_from_their_summary_or_checkpoints(copy,
                                                                                 tmp_path):
    folder = copy("mh")
    (folder / RUN_FILE).unlink()  # as written before run.json existed
    assert held_run(folder)["from"] == "summary.json"
    run = {"command": "calibrate", "method": "nevergrad",
           "params": ["lateral_friction", "restitution"], "scene": "cube"}
    with pytest.raises(ParameterError, match=r"method mh.*summary.json\), not this run "
                       r"\(method nevergrad\)"):
        check_output(folder, kind="dir", command="calibrate", run=run, resume=True)
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "sandwich-checkpoint.json").write_text("{}")
    with pytest.raises(ParameterError, match=r"an unfinished residualsim calibrate run "
                       r"\(method sandwich; sandwich-checkpoint.json\)"):
        check_output(unfinished, kind="dir", command="calibrate", run=run, resume=True)


def test_another_command_reads_the_run_file(copy):
    folder = copy("mh")
    (folder / "summary.json").unlink()
    (folder / "posterior.npz").unlink()  # an interrupted MH run: checkpoint and run.json
    with pytest.raises(ParameterError, match="holds the output of residualsim calibrate "
                       r"\(run.json\)"):
        check_output(folder, kind="dir", command="train", resume=True)
    with pytest.raises(ParameterError, match="is the output of residualsim calibrate"):
        check_output(folder / RUN_FILE, force=True)


def test_a_refused_run_leaves_no_run_file_behind(tmp_path, capsys):
    """A run refused after it claimed its folder (sandwich with --noise: refused once the
    data are read) leaves no folder: a run.json alone counts as empty."""
    folder = tmp_path / "a" / "b"
    code, _, err = _run(capsys, "calibrate", *QUICK, "--method", "sandwich", "--noise",
                        "0.001", "--out", folder)
    assert code == 2 and "sandwich" in err
    assert not (tmp_path / "a").exists()
