"""Benchmark of ``residualsim data import`` at scale (issue 65): a one-hour capture session at
240 Hz with three tracked rigid bodies (about 2.6 million PoseStamped messages) in a ROS 1
bag (``--storage mcap``: a ROS 2 MCAP bag), imported against the time ``rosbags`` takes to
read the same bag alone (every message's raw bytes, nothing decoded), both measured in
this run, each in a fresh process (their peak memory read from the kernel).

The session: a synthetic two-minute hinge session (PyBullet throws between carries,
placements and slides; 0.3 mm noise, jitter, dropouts) repeated to an hour, its two links
on two topics, plus a third rigid body (a static marker) on a third topic, as a lab's
capture holds. The import reads the two links it is given; the baseline reads all three.

    python train/bench_import.py --out runs/bench-import [--minutes 60] [--storage ros1]

Prints one JSON line: the seconds of each, their ratio (target <= 2) and the import's peak
resident memory (target < 1 GB).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SCENE = ROOT / "assets" / "examples" / "hinge.toml"


def _session_bag(path: Path, minutes: float, storage: str, seed: int) -> Path:
    from residualsim.data.session_write import PoseMessages, write_pose_bag
    from residualsim.sim.sessions import corrupt_session, synthesize_session

    session = synthesize_session(str(SCENE), rate_hz=240.0, n_throws=20, seed=seed,
                                 start_s=1.7e9)
    streams = corrupt_session(session, jitter_s=1e-4, dropout=0.002, seed=seed)
    span = session.times_s[-1] - session.times_s[0] + 1.0 / 240.0
    copies = int(np.ceil(minutes * 60.0 / span))
    tiled = {}
    for link, messages in streams.items():
        tiled[f"/mocap/{link}/pose"] = PoseMessages(
            np.concatenate([messages.stamps_s + k * span for k in range(copies)]),
            np.tile(messages.positions_m, (copies, 1)), np.tile(messages.quat_wxyz, (copies, 1)))
    stamps = 1.7e9 + np.arange(int(copies * span * 240.0)) / 240.0
    rng = np.random.default_rng(seed)
    tiled["/mocap/marker/pose"] = PoseMessages(
        stamps, np.array([1.0, 0.5, 0.0]) + rng.normal(0.0, 3e-4, (len(stamps), 3)),
        np.tile([1.0, 0.0, 0.0, 0.0], (len(stamps), 1)))
    target = path.with_suffix(".bag") if storage == "ros1" else path
    return write_pose_bag(target, tiled, storage=storage, overwrite=True)


def _read_alone(bag: str) -> None:
    from rosbags.highlevel import AnyReader

    count = 0
    with AnyReader([Path(bag)]) as reader:
        for _ in reader.messages():
            count += 1
    print(json.dumps({"messages": count, "peak_mb": _peak_mb()}))


def _import(bag: str, out: str) -> None:
    from residualsim.data.kinematics import read_kinematics
    from residualsim.data.session_import import import_session
    from residualsim.sim.scenes import read_scene_file

    tree = read_kinematics(read_scene_file(SCENE).urdf)
    summary = import_session(bag, tree, out, links={"base": "/mocap/base/pose",
                                                    "arm": "/mocap/arm/pose"}, force=True)
    print(json.dumps({"throws": summary["throws"], "samples": summary["tracked_samples"],
                      "peak_mb": _peak_mb()}))


def _peak_mb() -> float:
    """This process's peak resident memory, MB (read in the process itself: a child's
    RUSAGE_CHILDREN figure can carry its parent's memory from before the exec)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _timed(*argv: str) -> tuple[float, dict]:
    """Seconds and the JSON line of this script run with ``argv`` in a fresh process."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, *argv], check=True, capture_output=True,
                          text=True)
    return time.perf_counter() - start, json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/bench-import", help="working folder")
    parser.add_argument("--minutes", type=float, default=60.0, help="session length")
    parser.add_argument("--storage", choices=("ros1", "mcap", "sqlite3"), default="ros1")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3,
                        help="read and import this many times, interleaved; medians")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args()
    if args.child:
        if args.child[0] == "write":
            bag = _session_bag(Path(args.child[1]), args.minutes, args.storage, args.seed)
            print(json.dumps({"bag": str(bag)}))
            return
        {"read": lambda: _read_alone(args.child[1]),
         "import": lambda: _import(args.child[1], args.child[2])}[args.child[0]]()
        return
    work = Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    # written in a child too: a child's peak memory counts its parent's from before the exec
    written, wrote = _timed("--child", "write", str(work / f"session-{args.storage}"),
                            "--minutes", str(args.minutes), "--storage", args.storage,
                            "--seed", str(args.seed))
    bag = Path(wrote["bag"])
    print(f"wrote {bag} in {written:.0f} s", file=sys.stderr)
    reads, imports = [], []
    for _ in range(args.repeats):  # interleaved: both sides see the machine's same moods
        reads.append(_timed("--child", "read", str(bag)))
        imports.append(_timed("--child", "import", str(bag), str(work / "throws")))
    read_s = float(np.median([r[0] for r in reads]))
    import_s = float(np.median([r[0] for r in imports]))
    read, imported = reads[0][1], max((r[1] for r in imports), key=lambda r: r["peak_mb"])
    print(json.dumps({"bench": "data import", "storage": args.storage, "minutes": args.minutes,
                      "repeats": args.repeats,
                      "ratios": [round(i[0] / r[0], 3) for r, i in zip(reads, imports)],
                      "messages": read["messages"], "read_alone_s": round(read_s, 2),
                      "import_s": round(import_s, 2), "ratio": round(import_s / read_s, 3),
                      "import_peak_mb": round(imported["peak_mb"]),
                      "read_alone_peak_mb": round(read["peak_mb"]), "throws": imported["throws"],
                      "tracked_samples": imported["samples"],
                      "bag_mb": round(_size(bag) / 2 ** 20)}))


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


if __name__ == "__main__":
    main()
