"""Regenerate ``data/samples/contactnets-cube/``: a few real ContactNets tosses for the demo.

Selection rule (deterministic, no randomness):

1. the toss is in the TRAINING split of :func:`residualsim.data.split_ids` (seed 0, fractions
   0.7 / 0.15 / 0.15) over every id of the set, so no validation or test toss is shipped;
2. the shipped residual model (``data/pretrained/cube-contactnets``) was trained on it
   (``model.json`` ``info.train_ids``), so "the model saw these tosses" holds exactly;
3. it has at least 3 recorded contact runs
   (:func:`residualsim.baselines.recorded_events.contact_runs`), so the belief picture has three
   contacts to show;
4. it has a moderate length, 90 to 120 samples at 148 Hz (0.6 to 0.8 s; the set's median is
   101), keeping the demo fast;
5. the first ``--count`` (default 8) such ids in numeric order.

The files are copied byte for byte (``tosses/<id>.pt``) with the data set's ``LICENSE``;
a README with the attribution, the ids and this rule is written beside them::

    python train/bundle_samples.py --data ../shared/data/contactnets-cube
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from residualsim.atomic import atomic_write_text
from residualsim.baselines.recorded_events import contact_runs
from residualsim.data import load_tosses, split_ids
from residualsim.data.bundled import PRETRAINED_CUBE, REAL_SAMPLES
from residualsim.errors import DataError
from residualsim.residual.model import ResidualModel

#: Rule parameters (see the module docstring).
MIN_CONTACT_RUNS = 3
MIN_SAMPLES, MAX_SAMPLES = 90, 120
DEFAULT_COUNT = 8

README = """# Real ContactNets cube tosses (a bundled sample)

{count} real tosses of an acrylic cube (side 0.1048 m, 0.37 kg) thrown by hand onto a table
and tracked at 148 Hz, copied unchanged from the ContactNets data set:

> Samuel Pfrommer, Mathew Halm, Michael Posa. *ContactNets: Learning Discontinuous Contact
> Dynamics with Smooth, Implicit Representations.* Conference on Robot Learning (CoRL), 2020.

Licence: BSD-3-Clause, see `LICENSE` (copied from the data set) beside this file.

Layout and units as upstream: `tosses/<id>.pt`, a float64 tensor `[1, T, 19]` in cube
half-widths (0.0524 m), quaternion w-x-y-z, body-frame angular velocity
(`residualsim.data.contactnets` documents the columns).

**Ids**: {ids}.

**These are TRAINING tosses**: the shipped model `data/pretrained/cube-contactnets` was
calibrated and trained on them, so `residualsim demo` shows what the pipeline does, not how
well it generalises (held-out figures are in the project README and the model card).

**Selection rule** (`train/bundle_samples.py`, deterministic): ids in the training split of
`residualsim.data.split_ids` (seed 0) over the whole set, that the shipped model was trained
on (`model.json` `info.train_ids`), with at least {min_runs} recorded contact runs
(`residualsim.baselines.recorded_events.contact_runs`) and {min_samples} to {max_samples}
samples; the first {count} in numeric order. Regenerate with

    python train/bundle_samples.py --data ../shared/data/contactnets-cube
"""


def select_ids(data: Path, count: int = DEFAULT_COUNT) -> list[str]:
    """The bundled ids under the rule of the module docstring, in numeric order."""
    tosses = load_tosses(data)
    train = split_ids(list(tosses))["train"]
    trained = set(ResidualModel.load(PRETRAINED_CUBE).info.get("train_ids", []))
    chosen = [k for k in sorted(train, key=int) if k in trained
              and MIN_SAMPLES <= tosses[k].n_samples <= MAX_SAMPLES
              and len(contact_runs(tosses[k])) >= MIN_CONTACT_RUNS]
    if len(chosen) < count:
        raise DataError(f"{data}: only {len(chosen)} tosses meet the rule, {count} wanted")
    return chosen[:count]


def write_bundle(data: Path, out: Path, count: int = DEFAULT_COUNT) -> list[str]:
    """Copy the selected tosses, the LICENSE and a README into ``out``; returns the ids."""
    ids = select_ids(data, count)
    source = data / "tosses"
    if out.exists():
        shutil.rmtree(out / "tosses", ignore_errors=True)
    (out / "tosses").mkdir(parents=True, exist_ok=True)
    for traj_id in ids:
        shutil.copyfile(source / f"{traj_id}.pt", out / "tosses" / f"{traj_id}.pt")
    shutil.copyfile(data / "LICENSE", out / "LICENSE")
    atomic_write_text(out / "README.md", README.format(
        count=len(ids), ids=", ".join(ids), min_runs=MIN_CONTACT_RUNS,
        min_samples=MIN_SAMPLES, max_samples=MAX_SAMPLES))
    return ids


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None,
                        help="the ContactNets set (default $RESIDUALSIM_DATA/contactnets-cube)")
    parser.add_argument("--out", default=str(REAL_SAMPLES), help="where to write the bundle")
    parser.add_argument("--count", type=int, default=DEFAULT_COUNT, help="tosses to bundle")
    args = parser.parse_args(argv)
    data = Path(args.data) if args.data else None
    if data is None and os.environ.get("RESIDUALSIM_DATA"):
        data = Path(os.environ["RESIDUALSIM_DATA"]) / "contactnets-cube"
    if data is None or not (data / "tosses").is_dir():
        print(f"bundle_samples: no ContactNets set at {data}: pass --data or set "
              "RESIDUALSIM_DATA", file=sys.stderr)
        return 2
    out = Path(args.out)
    ids = write_bundle(data, out, args.count)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {len(ids)} tosses ({', '.join(ids)}) to {out}, {size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
