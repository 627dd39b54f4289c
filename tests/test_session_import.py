"""``residualsim data import``: synthetic capture sessions with known truth (PyBullet throws
between a hand's carries, placements and slides; noise, jitter, dropouts, NaN, frozen,
swapped and duplicated messages) written as ROS 1, ROS 2 sqlite3 and MCAP bags and as one
CSV, cut back into throws; and every bad input refused in one line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from residualsim.cli import main
from residualsim.data import load_trajectories
from residualsim.data.csv import read_table
from residualsim.data.session_write import (JointMessages, PoseMessages, write_pose_bag,
                                            write_session_csv)
from residualsim.sim.sessions import corrupt_session, synthesize_session

ROOT = Path(__file__).resolve().parents[1]
HINGE = ROOT / "assets" / "examples" / "hinge.toml"
SCENES = {"cube": ROOT / "assets" / "cube.urdf", "hinge": HINGE,
          "spinner": ROOT / "tests" / "assets" / "spinner.urdf",
          "slider": ROOT / "tests" / "assets" / "slider.urdf"}
CORRUPTION = dict(jitter_s=2e-4, dropout=0.01, nan_runs=2, frozen_runs=2, out_of_order=3,
                  duplicates=3)


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _write(session, streams, path: Path, storage: str) -> tuple[Path, list[str]]:
    """The session as a bag (one PoseStamped topic per link) or one CSV; the --link args."""
    if storage == "csv":
        base = streams[session.link_names[0]]
        others = {link: (m.positions_m, m.quat_wxyz) for link, m in streams.items()
                  if link != session.link_names[0]}
        # one row per base message; the other links' messages share its stamps
        aligned = {link: tuple(np.asarray(v)[:len(base)] for v in pair)
                   for link, pair in others.items()}
        source = write_session_csv(path.with_suffix(".csv"), base.stamps_s, base.positions_m,
                                   base.quat_wxyz, links=aligned)
        return source, []
    target = path.with_suffix(".bag") if storage == "ros1" else path
    source = write_pose_bag(target, {f"/mocap/{link}/pose": m for link, m in streams.items()},
                            storage=storage)
    return source, [a for link in streams for a in ("--link", f"{link}=/mocap/{link}/pose")]


def _index(out: Path) -> list[dict]:
    lines = (out / "index.csv").read_text().splitlines()
    names = lines[0].split(",")
    return [dict(zip(names, line.split(",", len(names) - 1))) for line in lines[1:]]


@pytest.mark.parametrize("name, storage, seed", [
    ("hinge", "ros1", 0), ("spinner", "sqlite3", 1), ("slider", "mcap", 2), ("cube", "csv", 3),
    ("hinge", "mcap", 4)])
def test_every_throw_found_at_its_release_with_its_joint_angles(tmp_path, capsys, name,
                                                                storage, seed):
    session = synthesize_session(str(SCENES[name]), seed=seed, start_s=1.7e9)
    streams = corrupt_session(session, seed=seed, **CORRUPTION)
    if storage == "csv":  # a CSV row holds every link: one stream of stamps, no swaps
        streams = corrupt_session(session, seed=seed, noise_m=3e-4, noise_rad=2e-3)
    source, links = _write(session, streams, tmp_path / "session", storage)
    out = tmp_path / "throws"
    code, stdout, err = _run(capsys, "data", "import", source, "--scene", SCENES[name],
                             "--out", out, *links, "--plot", tmp_path / "cut.png")
    assert code == 0, err
    summary = json.loads(stdout.splitlines()[-1])
    rows = [r for r in _index(out) if r["status"] == "throw"]
    assert summary["throws"] == len(rows) == len(session.throws)  # all found, none false
    for row, truth in zip(rows, session.throws):
        start = int(np.argmin(np.abs(session.times_s - float(row["start_s"]))))
        assert 0 <= start - truth.release_index <= 2, (start, truth.release_index)
        header, table = read_table(out / f"{row['id']}.csv")
        sample = np.clip(np.searchsorted(session.times_s, table[:, 0] + float(row["start_s"])
                                         - 1e-4), 0, len(session.times_s) - 1)
        base = session.link_names[0]
        position_error = np.linalg.norm(table[:, 1:4] - session.link_positions_m[base][sample],
                                        axis=1)
        assert np.median(position_error) < 1e-3
        for k, joint in enumerate(session.joint_names):
            difference = table[:, 8 + k] - session.joint_positions[sample, k]
            if "slider" not in name:  # angles: equal up to whole turns, within 1 degree
                difference = (difference + math.pi) % (2 * math.pi) - math.pi
                assert np.median(np.abs(difference)) < math.radians(1.0)
            else:
                assert np.median(np.abs(difference)) < 1e-3
    recordings = load_trajectories(out)  # an ordinary recordings folder
    assert set(recordings) == {r["id"] for r in rows}
    assert (tmp_path / "cut.png").stat().st_size > 10_000


def test_a_wrapped_continuous_joint_is_unwrapped_within_each_throw(tmp_path, capsys):
    session = synthesize_session(str(SCENES["spinner"]), seed=5, start_s=1.7e9)
    streams = corrupt_session(session, seed=5, noise_m=3e-4, noise_rad=2e-3)
    source, links = _write(session, streams, tmp_path / "s", "ros1")
    code, _, err = _run(capsys, "data", "import", source, "--scene", SCENES["spinner"],
                        "--out", tmp_path / "out", *links)
    assert code == 0, err
    spans = []
    for row in _index(tmp_path / "out"):
        if row["status"] == "throw":
            _, table = read_table(tmp_path / "out" / f"{row['id']}.csv")
            assert np.abs(np.diff(table[:, 8])).max() < 1.0  # no jump of 2 pi
            spans.append(np.ptp(table[:, 8]))
    assert max(spans) > 2 * math.pi  # it did turn past +-pi


def test_joint_angles_from_a_joint_state_topic_and_poses_from_tf(tmp_path, capsys):
    session = synthesize_session(str(HINGE), seed=6, start_s=1.7e9)
    streams = corrupt_session(session, seed=6, noise_m=3e-4, noise_rad=2e-3)
    base = streams["base"]
    joints = JointMessages("/joint_states", base.stamps_s, session.joint_names,
                           session.joint_positions[base.metadata["truth_index"]])
    bag = write_pose_bag(tmp_path / "tf.bag", {"hinge_base": base}, msgtype="tf",
                         joint_state=joints)
    code, stdout, err = _run(capsys, "data", "import", bag, "--scene", HINGE,
                             "--out", tmp_path / "out", "--link", "base=/tf:hinge_base",
                             "--joints", "/joint_states")
    assert code == 0, err
    assert json.loads(stdout.splitlines()[-1])["throws"] == len(session.throws)
    record = json.loads((tmp_path / "out" / "import.json").read_text())
    assert record["joints_from"] == {"elbow": "/joint_states"}


@pytest.mark.parametrize("msgtype", ["TransformStamped", "Odometry"])
def test_other_pose_messages_read_as_pose_stamped(tmp_path, capsys, msgtype):
    session = synthesize_session(str(SCENES["cube"]), seed=7, start_s=1.7e9, n_throws=2)
    streams = corrupt_session(session, seed=7, noise_m=3e-4, noise_rad=2e-3)
    (base,) = streams.values()
    bag = write_pose_bag(tmp_path / "s.bag", {"/cube": base}, msgtype=msgtype)
    code, stdout, err = _run(capsys, "data", "import", bag, "--scene", "cube",
                             "--out", tmp_path / "out", "--link", "cube=/cube")
    assert code == 0, err
    assert json.loads(stdout.splitlines()[-1])["throws"] == 2


@pytest.fixture(scope="module")
def hinge_bag(tmp_path_factory) -> Path:
    """A short hinge session as a ROS 1 bag, with a String topic that holds no pose."""
    session = synthesize_session(str(HINGE), seed=8, start_s=1.7e9, n_throws=2,
                                 placements=0, slides=0)
    streams = corrupt_session(session, seed=8)
    path = tmp_path_factory.mktemp("bags") / "hinge.bag"
    return write_pose_bag(path, {f"/mocap/{link}/pose": m for link, m in streams.items()},
                          extra_topics={"/notes": [(1.7e9 + 1.0, "hello")]})


def test_data_info_lists_a_bags_topics_and_says_which_hold_poses(hinge_bag, capsys):
    code, stdout, _ = _run(capsys, "data", "info", hinge_bag)
    assert code == 0
    record = json.loads(stdout.splitlines()[-1])
    assert record["pose_topics"] == ["/mocap/arm/pose", "/mocap/base/pose"]
    holds = {t["topic"]: t["holds"] for t in record["topics"]}
    assert holds["/notes"] is None
    counts = {t["topic"]: t["count"] for t in record["topics"]}
    assert counts["/mocap/base/pose"] > 1000
    assert "pose topics (--link LINK=TOPIC): /mocap/arm/pose, /mocap/base/pose" in stdout


@pytest.mark.parametrize("links, message", [
    (["base=/mocap/nope"], "no topic '/mocap/nope'; pose topics here: /mocap/arm/pose, "
                           "/mocap/base/pose"),
    (["base=/mocap/base/pose", "elbow=/mocap/arm/pose"], "no link 'elbow'"),
    (["base=/notes"], "holds no pose"),
    (["arm=/mocap/arm/pose"], "--link base=TOPIC is required"),
    (["base=/mocap/base/pose"], "joint elbow: its child link arm is not tracked"),
    (["base=/mocap/arm/pose", "arm=/mocap/base/pose"], "are not held together"),
    (["base/mocap/base/pose"], "expected LINK=TOPIC"),
])
def test_bad_links_are_refused_in_one_line(hinge_bag, tmp_path, capsys, links, message):
    argv = [a for link in links for a in ("--link", link)]
    code, stdout, err = _run(capsys, "data", "import", hinge_bag, "--scene", HINGE,
                             "--out", tmp_path / "out", *argv)
    assert code == 2
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
    assert not any(p.name.startswith(".out") for p in tmp_path.iterdir())  # nothing half


def test_a_bag_with_no_throws_is_refused_and_writes_nothing(tmp_path, capsys):
    stamps = 1.7e9 + np.arange(3000) / 150.0
    rng = np.random.default_rng(0)
    still = PoseMessages(stamps, np.array([0.0, 0.0, 0.0524]) + rng.normal(0, 3e-4, (3000, 3)),
                         np.tile([1.0, 0.0, 0.0, 0.0], (3000, 1)))
    bag = write_pose_bag(tmp_path / "still.bag", {"/cube": still})
    code, _, err = _run(capsys, "data", "import", bag, "--scene", "cube", "--out",
                        tmp_path / "out", "--link", "cube=/cube")
    assert code == 2 and "no throw found" in err and str(bag) in err
    assert not (tmp_path / "out").exists()


def test_an_existing_folder_is_kept_unless_force(hinge_bag, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    links = ["--link", "base=/mocap/base/pose", "--link", "arm=/mocap/arm/pose"]
    code, _, err = _run(capsys, "data", "import", hinge_bag, "--scene", HINGE, "--out", out,
                        *links)
    assert code == 2 and "already exists" in err
    assert (out / "mine.txt").read_text() == "keep"
    code, _, err = _run(capsys, "data", "import", hinge_bag, "--scene", HINGE, "--out",
                        tmp_path / "ok", *links)
    assert code == 0, err
    code, _, err = _run(capsys, "data", "import", hinge_bag, "--scene", HINGE, "--out",
                        tmp_path / "ok", "--force", *links)
    assert code == 0, err


def test_link_options_do_not_apply_to_a_csv(tmp_path, capsys):
    csv = tmp_path / "s.csv"
    csv.write_text("t,x,y,z,qw,qx,qy,qz\n" + "\n".join(
        f"{i / 150},0,0,0.05,1,0,0,0" for i in range(10)) + "\n")
    code, _, err = _run(capsys, "data", "import", csv, "--scene", "cube", "--out",
                        tmp_path / "out", "--link", "base=/x")
    assert code == 2 and "--link and --joints apply to bags" in err


def test_a_csv_column_that_is_no_joint_or_link_is_named(tmp_path, capsys):
    csv = tmp_path / "s.csv"
    csv.write_text("t,x,y,z,qw,qx,qy,qz,elbw\n" + "\n".join(
        f"{i / 150},0,0,0.05,1,0,0,0,0" for i in range(10)) + "\n")
    code, _, err = _run(capsys, "data", "import", csv, "--scene", HINGE, "--out",
                        tmp_path / "out")
    assert code == 2 and "column 'elbw' is neither a joint" in err
