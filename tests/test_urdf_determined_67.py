"""Issue 67: an exported URDF records which of its parameters were determined.

``calibrate --export-urdf`` wrote the same-looking numbers whether the data pinned them or
left them where they started: its first comment now says which set the file holds, which
names the free flight determined, which were weak (with the weak directions), the 90 %
intervals of a posterior, and what no method judged (residualsim.sysid.determined)."""

from __future__ import annotations

import shutil
from pathlib import Path
from xml.etree import ElementTree

from residualsim.sysid.determined import urdf_note

ROOT = Path(__file__).resolve().parents[1]
SYNTHETIC = ROOT / "data" / "samples" / "cube-synthetic"
BODY = ["body.cube.com_x", "body.cube.moment_1", "body.cube.moment_2", "body.cube.axes_x"]
LSQ = {"method": "lsq", "calibrated": ["lateral_friction", *BODY], "lsq_stages": [
    {"stage": "body", "names": BODY, "weak_directions": [
        {"ratio": 0.0, "members": {"body.cube.axes_x": 1.0}},
        {"ratio": 1e-16, "members": {"body.cube.moment_1": 0.7, "body.cube.moment_2": 0.7},
         "note": "the inertia scale"}]},
    {"stage": "contact", "names": ["lateral_friction"]}]}


def _comment(path: Path) -> list[str]:
    parser = ElementTree.XMLParser(target=ElementTree.TreeBuilder(insert_comments=True))
    root = ElementTree.parse(path, parser=parser).getroot()
    return [c.text for c in root if c.tag is ElementTree.Comment]


def test_the_note_names_determined_weak_and_unjudged_parameters():
    note = urdf_note(LSQ)
    assert "this file holds the calibrated set" in note
    assert "determined by the free flight (lsq's body stage): body.cube.com_x\n" in note
    assert "weak, not determined by the free flight" in note
    assert "body.cube.moment_1, body.cube.moment_2, body.cube.axes_x" in note
    assert "weak direction: 0.70 body.cube.moment_1 + 0.70 body.cube.moment_2" in note
    assert "not judged by this method (fitted, how well determined unknown): " \
        "lateral_friction" in note and "--" not in note


def test_the_guards_contact_set_lists_the_body_as_not_written():
    note = urdf_note({**LSQ, "held_out_choice": "contact"})
    assert "the held-out guard's 'contact' set" in note and "weak" not in note
    assert "calibrated but not in this file (the URDF's own values): " + ", ".join(BODY) \
        in note


def test_a_posterior_gives_its_intervals():
    note = urdf_note({"method": "mh", "calibrated": ["lateral_friction", "restitution"],
                      "q05": {"lateral_friction": 0.21, "restitution": 0.3},
                      "q95": {"lateral_friction": 0.27, "restitution": 0.61}})
    assert "90 % intervals (the posterior's): lateral_friction 0.21..0.27, restitution " \
        "0.3..0.61" in note and "not judged" not in note


def test_a_re_export_keeps_one_note_and_pybullet_loads_it(tmp_path):
    from residualsim.sim.scenes.body import write_urdf

    shutil.copy(ROOT / "assets" / "cube.urdf", tmp_path / "cube.urdf")
    first = write_urdf(tmp_path / "cube.urdf", tmp_path / "a.urdf", note=urdf_note(LSQ))
    again = write_urdf(first, tmp_path / "b.urdf", note=urdf_note({**LSQ, "method": "x--y"}))
    notes = [c for c in _comment(again) if "residualsim calibrate:" in c]
    assert len(notes) == 1 and "method x- -y" in notes[0]


def test_calibrate_export_urdf_records_what_was_determined(tmp_path):
    from residualsim.sysid.calibrate import calibrate

    shutil.copy(ROOT / "assets" / "cube.urdf", tmp_path / "cube.urdf")
    (tmp_path / "cube.toml").write_text('urdf = "cube.urdf"\n')
    calibrate(str(tmp_path / "cube.toml"), SYNTHETIC, ["lateral_friction", "body"],
              tmp_path / "cal", method="lsq", budget=12, split="train", plots=False,
              ground=False, keep_calibrated=True, export_urdf=tmp_path / "out.urdf")
    note = _comment(tmp_path / "out.urdf")[0]
    assert note.startswith(" residualsim calibrate: method lsq; this file holds the "
                           "calibrated set"), note
    assert "weak, not determined by the free flight" in note and "body.cube.axes_x" in note
    assert "the inertia scale" in note  # torque-free flight cannot see it
    assert "not judged by this method" in note and "lateral_friction" in note
