"""How an interval's own width compares with the estimator's scatter over independent data
sets with a known truth (issue 50's width bar, train/README.md §20.6).

Each DIR is a finished ``residualsim calibrate`` output (its summary.json: median, q05, q95
in natural units) on one data set simulated at ``--truth``. Per parameter it prints the
z-scores (median − truth) / sd with sd = (q95 − q05) / 3.29 (the Gaussian's 90 % width), how
many 90 % intervals miss the truth, the root mean square z (1 for intervals as wide as the
estimator scatters; above 1 by the factor they are too narrow) and the robust version
median |z| / 0.6745::

    for s in 1 2 3; do python train/object_truth_set.py ... --seed $s --out runs/h170-s$s
      residualsim calibrate ... --data runs/h170-s$s/recordings --method sandwich \\
        --out runs/h170-s$s-fit; done
    python train/estimator_scatter.py --truth lateral_friction=0.3,restitution=0.4 \\
        runs/h170-s*-fit
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

WIDTH_OVER_SD = 3.29  # a Gaussian's 90 % interval, 2 x 1.645 standard deviations


def scatter(summaries: list[dict], truth: dict[str, float]) -> dict[str, dict]:
    """Per parameter of ``truth``: z-scores, misses of the 90 % interval, RMS and robust z,
    the intervals' widths (natural units), over the calibrations' ``summaries``."""
    out = {}
    for name, value in truth.items():
        low = np.array([s["q05"][name] for s in summaries])
        high = np.array([s["q95"][name] for s in summaries])
        z = (np.array([s["median"][name] for s in summaries]) - value) / \
            ((high - low) / WIDTH_OVER_SD)
        out[name] = {"z": z.tolist(), "misses": int(np.sum((value < low) | (value > high))),
                     "rms_z": float(np.sqrt(np.mean(z ** 2))),
                     "robust_z": float(np.median(np.abs(z)) / 0.6745),
                     "widths": (high - low).tolist()}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--truth", required=True, help="name=value,... natural units")
    parser.add_argument("dirs", nargs="+", help="calibrate output directories")
    args = parser.parse_args()
    try:
        truth = {k: float(v) for k, v in (pair.split("=") for pair in args.truth.split(","))}
    except ValueError:
        parser.error(f"--truth: expected name=value,... got {args.truth!r}")
    summaries = []
    for directory in args.dirs:
        path = Path(directory) / "summary.json"
        try:
            summaries.append(json.loads(path.read_text()))
        except (OSError, ValueError) as exc:
            parser.error(f"{path}: {exc}")
    missing = [f"{d}: {name}" for d, s in zip(args.dirs, summaries) for name in truth
               if name not in s.get("median", {}) or name not in s.get("q05", {})]
    if missing:
        parser.error(f"no interval for {missing[0]} (calibrated parameters must include it)")
    for name, row in scatter(summaries, truth).items():
        print(f"{name:22s} z {' '.join(f'{v:+.1f}' for v in row['z'])}; misses "
              f"{row['misses']}/{len(summaries)}; rms z {row['rms_z']:.2f}, robust "
              f"{row['robust_z']:.2f}; widths {min(row['widths']):.3g}-{max(row['widths']):.3g}")


if __name__ == "__main__":
    main()
