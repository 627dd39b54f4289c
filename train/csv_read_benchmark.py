"""Time reading a large CSV recording (issue 51): write a file of N rows (default 10^6,
columns t,x,y,z,qw,qx,qy,qz at 100 Hz; a ball dropped from 0.5 m every second, resting
between drops) into a temporary folder, then time ``load_csv_trajectory`` (parse, checks,
velocity estimate) and report the peak resident memory; then time ``residualsim data info``
on the folder, a process of its own (wall time, CPU time, peak memory)::

    python train/csv_read_benchmark.py [--rows 1000000] [--keep DIR] [--no-data-info]

Not a test: the machine's load changes the figure (train/README.md §21 has the numbers).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from residualsim.data import load_csv_trajectory
from residualsim.errors import run_script


def write_file(path: Path, rows: int) -> None:
    t = np.arange(rows) * 0.01
    z = np.maximum(0.05, 0.5 - 0.5 * 9.81 * (t % 1.0) ** 2)
    angle = 0.3 * np.sin(t / 50)
    table = np.column_stack([t, 0.1 * np.sin(t / 100), 0.05 * np.cos(t / 70), z,
                             np.cos(angle / 2), np.zeros(rows), np.zeros(rows),
                             np.sin(angle / 2)])
    np.savetxt(path, table, delimiter=",", fmt="%.6f", header="t,x,y,z,qw,qx,qy,qz",
               comments="")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keep", help="write the file in this folder and keep it")
    parser.add_argument("--no-data-info", action="store_true",
                        help="time the reading only, not the data info command")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "0.csv"
        write_file(path, args.rows)
        wall, cpu = time.perf_counter(), time.process_time()
        traj = load_csv_trajectory(path)
        print(f"{args.rows} rows: read in {time.perf_counter() - wall:.2f} s wall, "
              f"{time.process_time() - cpu:.2f} s CPU; {traj.n_samples} samples; peak RSS "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB")
        if not args.no_data_info:
            wall = time.perf_counter()
            subprocess.run([sys.executable, "-m", "residualsim", "data", "info", str(folder)],
                           check=True, stdout=subprocess.DEVNULL)
            usage = resource.getrusage(resource.RUSAGE_CHILDREN)
            print(f"residualsim data info: {time.perf_counter() - wall:.2f} s wall, "
                  f"{usage.ru_utime + usage.ru_stime:.2f} s CPU; peak RSS "
                  f"{usage.ru_maxrss / 1e6:.2f} GB")


if __name__ == "__main__":
    run_script(main)
