"""Hash the shipped models' predictions on the visible data, to show a change altered nothing.

Runs ``residualsim predict`` (through the command line, so the script does not depend on the
package's module layout) for each shipped model on every visible recording of its data set:
the mean prediction with the residual, the calibrated engine alone (``--no-residual``) and a
seeded stochastic prediction, then prints one SHA-256 per prediction file over its arrays
(the ``meta`` entry is left out: it holds paths and timings). Run it before and after a
refactor; equal hashes mean bit-identical predictions::

    python train/prediction_hashes.py --data ../shared/data [--out hashes.json]
    python train/prediction_hashes.py --data ../shared/data --check train/prediction_hashes.json

``train/prediction_hashes.json`` holds the hashes of version 0.2.0 (the planar ones as
0.1.0's; the cube's renewed when the cube model took its table height, train/README.md
§13); ``--check`` exits 1 on any difference.

To hash another checkout, run it with that checkout first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from residualsim.errors import run_script

ROOT = Path(__file__).resolve().parent.parent

#: (name, model directory, data set folder, extra predict arguments)
RUNS = [
    ("cube-mean", "data/pretrained/cube-contactnets", "contactnets-cube", []),
    ("cube-engine", "data/pretrained/cube-contactnets", "contactnets-cube", ["--no-residual"]),
    ("cube-samples", "data/pretrained/cube-contactnets", "contactnets-cube",
     ["--samples", "8", "--seed", "0", "--limit", "40"]),
    ("planar-mean", "data/pretrained/planar-ellipse", "planar-impact-ellipse", []),
    ("planar-engine", "data/pretrained/planar-ellipse", "planar-impact-ellipse",
     ["--no-residual"]),
    ("planar-samples", "data/pretrained/planar-ellipse", "planar-impact-ellipse",
     ["--samples", "8", "--seed", "0", "--limit", "200"]),
]


def hash_predictions(path: Path) -> str:
    """SHA-256 over every array of a prediction file but ``meta``, in sorted key order."""
    digest = hashlib.sha256()
    with np.load(path, allow_pickle=False) as archive:
        for key in sorted(archive.files):
            if key == "meta":
                continue
            values = np.ascontiguousarray(archive[key])
            digest.update(key.encode())
            digest.update(str(values.dtype).encode() + str(values.shape).encode())
            digest.update(values.tobytes())
    return digest.hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("RESIDUALSIM_DATA", "../shared/data"),
                        help="folder holding the real data sets")
    parser.add_argument("--workers", default="2")
    parser.add_argument("--out", help="also write the hashes to this JSON file")
    parser.add_argument("--check", help="compare with the hashes in this JSON file (exit 1 "
                        "on any difference)")
    args = parser.parse_args(argv)
    hashes = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, model, folder, extra in RUNS:
            out = Path(tmp) / f"{name}.npz"
            command = [sys.executable, "-m", "residualsim", "predict", "--model",
                       str(ROOT / model), "--data", str(Path(args.data) / folder),
                       "--out", str(out), "--workers", args.workers, *extra]
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
            hashes[name] = hash_predictions(out)
            print(f"{name:15s} {hashes[name]}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(hashes, indent=1) + "\n")
    if args.check:
        expected = json.loads(Path(args.check).read_text())
        differing = sorted(k for k in expected if hashes.get(k) != expected[k])
        print("identical to " + args.check if not differing else
              "DIFFERENT from " + args.check + ": " + ", ".join(differing))
        return 1 if differing else 0
    return 0


if __name__ == "__main__":
    run_script(main)
