"""``residualsim predict --samples`` at several ``--batch-size`` values in one run (issue 49).

Runs the command line once per batch size and repeat, interleaved (1, auto, 1, auto, ...)
so that other jobs on the machine weigh on each alike, checks that every batch size wrote
the same predictions (the SHA-256 of ``train/prediction_hashes.py``), and prints per batch
size the wall times (s), their median and the median's ratio to the first size's::

    python train/predict_batch_bench.py --model data/pretrained/cube-contactnets-5substep \\
        --samples 32 --workers 2 --batch-sizes 1,auto --repeats 2 [--limit 40]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from residualsim.errors import run_script

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT / "train"))
    from prediction_hashes import hash_predictions

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="data/pretrained/cube-contactnets-5substep",
                        help="model directory (default data/pretrained/cube-contactnets-5substep)")
    parser.add_argument("--data", default=str(Path(os.environ.get(
        "RESIDUALSIM_DATA", "../shared/data")) / "contactnets-cube"),
                        help="recordings (default $RESIDUALSIM_DATA/contactnets-cube)")
    parser.add_argument("--samples", default="32", help="samples per recording (default 32)")
    parser.add_argument("--workers", default="2", help="worker processes (default 2)")
    parser.add_argument("--split", default="all", help="recordings to predict (default all)")
    parser.add_argument("--limit", help="at most this many recordings (default: no limit)")
    parser.add_argument("--batch-sizes", default="1,auto",
                        help="comma-separated --batch-size values (default 1,auto)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per size (default 2)")
    args = parser.parse_args(argv)
    sizes = [s.strip() for s in args.batch_sizes.split(",") if s.strip()]
    times: dict[str, list[float]] = {size: [] for size in sizes}
    hashes: dict[str, set] = {size: set() for size in sizes}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for size in sizes:
                out = Path(tmp) / f"{size}-{repeat}.npz"
                command = [sys.executable, "-m", "residualsim", "predict", "--model",
                           args.model, "--data", args.data, "--out", str(out), "--samples",
                           args.samples, "--seed", "0", "--workers", args.workers, "--split",
                           args.split, "--batch-size", size,
                           *(["--limit", args.limit] if args.limit else [])]
                start = time.perf_counter()
                subprocess.run(command, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
                times[size].append(time.perf_counter() - start)
                hashes[size].add(hash_predictions(out))
                print(f"batch size {size}, run {repeat + 1}: {times[size][-1]:.1f} s",
                      flush=True)
    base = statistics.median(times[sizes[0]])
    report = {size: {"seconds": [round(t, 2) for t in times[size]],
                     "median_s": round(statistics.median(times[size]), 2),
                     f"speed-up over {sizes[0]}": round(base / statistics.median(times[size]),
                                                        3)}
              for size in sizes}
    same = len(set().union(*hashes.values())) == 1
    print(json.dumps({"same_predictions": same, **report}, indent=1))
    return 0 if same else 1


if __name__ == "__main__":
    run_script(main)
