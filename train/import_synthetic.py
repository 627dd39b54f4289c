"""``data import`` on synthetic capture sessions with known truth (issue 65): how many throws
are found, how many false ones, where each starts against its release, and how far its
base pose and joint angles are from the truth.

Each session (:func:`residualsim.sim.sessions.synthesize_session`): PyBullet throws of the
object released between samples from a hand's wind-up, between minimum-jerk carries,
placements (some let go a few mm above the table) and slides by hand; then capture noise
(0.3 mm, 2 mrad), 0.2 ms of stamp jitter, 1 % dropped messages and runs of them, NaN and
frozen poses, swapped and duplicated messages, written as a bag of per-link PoseStamped.

    python train/import_synthetic.py --seeds 5 --storage ros1 [--rate 150]

Prints a table per object and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import tempfile
from pathlib import Path

import numpy as np

from residualsim.data.csv import read_table
from residualsim.data.kinematics import read_kinematics
from residualsim.data.session_import import import_session
from residualsim.data.session_write import write_pose_bag
from residualsim.sim.scenes import read_scene_file
from residualsim.sim.sessions import corrupt_session, synthesize_session

ROOT = Path(__file__).resolve().parents[1]
SCENES = {"cube": ROOT / "assets" / "cube.urdf", "hinge": ROOT / "assets" / "examples" /
          "hinge.toml", "spinner": ROOT / "tests" / "assets" / "spinner.urdf",
          "slider": ROOT / "tests" / "assets" / "slider.urdf"}


def _one(scene: Path, seed: int, storage: str, rate_hz: float, work: Path) -> dict:
    session = synthesize_session(str(scene), seed=seed, start_s=1.7e9, rate_hz=rate_hz)
    streams = corrupt_session(session, jitter_s=2e-4, dropout=0.01, nan_runs=2, frozen_runs=2,
                              out_of_order=3, duplicates=3, seed=seed)
    bag = work / ("s.bag" if storage == "ros1" else "s")
    write_pose_bag(bag, {f"/m/{link}": m for link, m in streams.items()}, storage=storage,
                   overwrite=True)
    tree = read_kinematics(read_scene_file(scene).urdf)
    out = work / "out"
    import_session(bag, tree, out, links={link: f"/m/{link}" for link in streams},
                   force=True)
    rows = [line.split(",", 7) for line in (out / "index.csv").read_text().splitlines()[1:]]
    rows = [r for r in rows if r[6] == "throw"]
    truth = [t.release_index for t in session.throws]
    starts = [int(np.argmin(np.abs(session.times_s - float(r[1])))) for r in rows]
    matched, offsets, position_mm, joint_error = set(), [], [], []
    for row, start in zip(rows, starts):
        nearest = min(range(len(truth)), key=lambda k: abs(truth[k] - start))
        if abs(truth[nearest] - start) > 10 or nearest in matched:
            continue
        matched.add(nearest)
        offsets.append(start - truth[nearest])
        _, table = read_table(out / f"{row[0]}.csv")
        sample = np.clip(np.searchsorted(session.times_s, table[:, 0] + float(row[1]) - 1e-4),
                         0, len(session.times_s) - 1)
        base = session.link_names[0]
        position_mm.append(1e3 * float(np.median(np.linalg.norm(
            table[:, 1:4] - session.link_positions_m[base][sample], axis=1))))
        for k, joint in enumerate(tree.moving_joints):
            difference = table[:, 8 + k] - session.joint_positions[sample, k]
            if joint.type == "prismatic":
                joint_error.append(("mm", 1e3 * float(np.median(np.abs(difference)))))
            else:
                wrapped = (difference + math.pi) % (2 * math.pi) - math.pi
                joint_error.append(("deg", math.degrees(float(np.median(np.abs(wrapped))))))
    return {"truth": len(truth), "found": len(matched), "false": len(rows) - len(matched),
            "offsets": offsets, "position_mm": position_mm, "joint_error": joint_error}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--storage", choices=("ros1", "sqlite3", "mcap"), default="ros1")
    parser.add_argument("--rate", type=float, default=150.0, help="capture rate, Hz")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="import-synthetic-"))
    record = {}
    try:
        for name, scene in SCENES.items():
            runs = [_one(scene, seed, args.storage, args.rate, work) for seed in range(args.seeds)]
            offsets = [o for r in runs for o in r["offsets"]]
            joints = [e for r in runs for e in r["joint_error"]]
            record[name] = {
                "throws": sum(r["truth"] for r in runs), "found": sum(r["found"] for r in runs),
                "false": sum(r["false"] for r in runs),
                "start_offsets": {str(k): offsets.count(k) for k in sorted(set(offsets))},
                "position_median_mm_max": round(max(p for r in runs for p in r["position_mm"]), 3),
                "joint_median_error_max": (round(max(e for _, e in joints), 3), joints[0][0])
                if joints else None}
            print(f"{name:8s} {record[name]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"storage": args.storage, "rate_hz": args.rate, "seeds": args.seeds,
                      **record}))


if __name__ == "__main__":
    main()
