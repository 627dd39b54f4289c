"""What the first pose costs the sandwich on issue 50's 20 x 60 design, and a parametric
bootstrap of it (train/README.md §20.4).

    python train/start_bootstrap.py --start recorded --boot 10 --out runs/bootbias-20x60.jsonl
    python train/start_bootstrap.py --start ballistic --boot 10 --out runs/bootfit-20x60.jsonl
    python train/start_bootstrap.py --start true --out runs/start-true-20x60.jsonl

Data set j is check-calibration's (``residualsim check-calibration --scene cube --tosses 20
--samples 60 --substeps 5 --noise-m 0.002``, seed 0): the truth from
``default_rng([0, j])`` on [0.1, 0.7]², 20 synthetic tosses with 2 mm position noise and
exact velocities. Each set is fitted by ``calibrate --method sandwich`` (its median and
90 % interval, sd = width / 3.29) with the rollouts starting from the first pose:

* ``recorded``: as recorded (2 mm noise, calibrate's default);
* ``ballistic``: the first position fitted to the free flight before the first contact
  (found where the exact velocity leaves v0 + g t by 0.05 m/s) with Bullet's discrete
  ballistic x_m = x_0 + m h v_0 + h² g m (m + 1) / 2 (h = dt / substeps; the continuous
  ½ g t² puts x_0 about ½ g h t̄ ≈ 0.5 mm low and biased restitution down on 7 of 8 sets);
  recorded orientation and velocities kept. Synthetic recordings only: it reads the exact
  velocities;
* ``fit``: ``calibrate --recorded-start fit`` (pose fitted by rollout, velocities kept);
* ``true``: the noise-free first position.

``--boot B`` adds a parametric bootstrap: B data sets simulated at the estimate from the
set's own (start-treated) first states with fresh 2 mm noise, each fitted the same way;
the line gets the bootstrap's sd and its bias (mean − estimate). One JSON line per set,
appended (resume by ``--first``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

import numpy as np

NAMES = ["lateral_friction", "restitution"]
BOUNDS = {"lateral_friction": [0.1, 0.7], "restitution": [0.1, 0.7]}
GRAVITY_MPS2 = np.array([0.0, 0.0, -9.81])
TOSSES, SAMPLES, SUBSTEPS, NOISE_M = 20, 60, 5, 0.002


def sandwich_fit(tosses: dict, seed: int, workers: int, recorded_start: str = "recorded"
                 ) -> tuple[np.ndarray, np.ndarray]:
    """calibrate --method sandwich (``--recorded-start``) on ``tosses``: (median (2,), sd
    (2,) from the 90 % width)."""
    from residualsim.data.csv import save_csv_trajectories
    from residualsim.sysid.calibrate import calibrate

    with tempfile.TemporaryDirectory() as tmp:
        save_csv_trajectories(Path(tmp) / "data", tosses, with_velocities=True)
        summary = calibrate("cube", Path(tmp) / "data", NAMES, Path(tmp) / "out", split="all",
                            bounds=BOUNDS, substeps=SUBSTEPS, n_workers=workers, seed=seed,
                            plots=False, method="sandwich", recorded_start=recorded_start)
    return (np.array([summary["median"][n] for n in NAMES]),
            np.array([(summary["q95"][n] - summary["q05"][n]) / 3.29 for n in NAMES]))


def ballistic_start(toss, substeps: int = SUBSTEPS):
    """``toss`` with its first position fitted to its free flight (module docstring)."""
    t = toss.times_s - toss.times_s[0]
    v0 = toss.linear_velocity_mps[0]
    left = np.linalg.norm(toss.linear_velocity_mps - (v0 + GRAVITY_MPS2 * t[:, None]), axis=1)
    n = max(1, int(np.argmax(left > 0.05)) - 1 if (left > 0.05).any() else len(t))
    h = (toss.times_s[1] - toss.times_s[0]) / substeps
    tt = t[:n, None]
    drift = v0 * tt + 0.5 * GRAVITY_MPS2 * (tt ** 2 + h * tt)
    positions = toss.positions_m.copy()
    positions[0] = (toss.positions_m[:n] - drift).mean(axis=0)
    return dataclasses.replace(toss, positions_m=positions)


def data_set(j: int, noise_m: float = NOISE_M):
    """Data set j of check-calibration's generator: (truth (2,), tosses)."""
    from residualsim.sim.synthesize import synthesize_tosses
    from residualsim.sysid.paramspace import ParamSpace

    space = ParamSpace(NAMES, bounds=BOUNDS, scene="cube")
    rng = np.random.default_rng([0, j])
    truth = space.from_unit(rng.random(space.ndim))
    tosses = synthesize_tosses(space.engine_params(truth), n_tosses=TOSSES, n_samples=SAMPLES,
                               noise_m=noise_m, noise_rad=0.0, rng=rng, substeps=SUBSTEPS)
    return space, truth, tosses


def fitted_starts(tosses: dict, workers: int) -> dict:
    """``tosses`` with their first poses fitted by rollout as ``--recorded-start fit`` does."""
    from residualsim.data import load_trajectories
    from residualsim.data.csv import save_csv_trajectories
    from residualsim.sim.recordings import fit_starts
    from residualsim.sim.rollout import recording_settings

    with tempfile.TemporaryDirectory() as tmp:
        save_csv_trajectories(tmp, tosses, with_velocities=True)
        loaded = load_trajectories(tmp)
    settings = recording_settings("cube", loaded, SUBSTEPS)
    return fit_starts("cube", loaded, settings, None, workers, estimated=False, recorded=True)


def treated(tosses: dict, start: str, j: int) -> dict:
    if start in ("recorded", "fit"):
        return tosses
    if start == "ballistic":
        return {k: ballistic_start(t) for k, t in tosses.items()}
    _, _, clean = data_set(j, noise_m=0.0)  # same draws, no noise: the true first poses
    out = {}
    for k, toss in tosses.items():
        positions = toss.positions_m.copy()
        positions[0] = clean[k].positions_m[0]
        out[k] = dataclasses.replace(toss, positions_m=positions)
    return out


def main(argv: list[str] | None = None) -> None:
    from residualsim.sim.synthesize import synthesize_tosses

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--start", choices=("recorded", "ballistic", "fit", "true"), required=True)
    parser.add_argument("--boot", type=int, default=0, help="bootstrap refits per set")
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--datasets", type=int, default=25)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    for j in range(args.first, args.datasets):
        started = time.perf_counter()
        space, truth, tosses = data_set(j)
        tosses = treated(tosses, args.start, j)
        how = "fit" if args.start == "fit" else "recorded"
        estimate, sd = sandwich_fit(tosses, j, args.workers, how)
        line = {"index": j, "start": args.start, "truth": truth.tolist(),
                "est": estimate.tolist(), "sd": sd.tolist(),
                "z": ((estimate - truth) / sd).tolist()}
        if args.boot:
            starts = fitted_starts(tosses, args.workers) if args.start == "fit" else tosses
            boots = np.array([sandwich_fit(treated(synthesize_tosses(
                space.engine_params(estimate), like=starts, noise_m=NOISE_M,
                rng=np.random.default_rng([j, b, 7]), substeps=SUBSTEPS),
                "ballistic" if args.start == "ballistic" else "recorded", j),
                1000 + b, args.workers, how)[0] for b in range(args.boot)])
            bias = boots.mean(axis=0) - estimate
            line.update(boots=boots.tolist(), bsd=boots.std(axis=0, ddof=1).tolist(),
                        zc=((estimate - bias - truth) / sd).tolist())
        line["seconds"] = time.perf_counter() - started
        print(j, np.round(line["z"], 2), round(line["seconds"]), flush=True)
        with open(args.out, "a") as f:
            f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
