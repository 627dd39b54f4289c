"""Predictions with and without the skips (closed-form free flight, rest filled in) on the
real cube tosses: the largest difference, and the engine steps saved.

For every toss the shipped cube model's engine alone (:meth:`Engine.rollout`), the lean
pose loop calibration uses (:meth:`Engine.rollout_poses`), the residual's mean and one
seeded residual sample (:func:`residual_rollout`) are run with ``skips=True`` and
``skips=False``; the figures land in ``train/README.md`` (issue 26).

    python train/skips_check.py --data $RESIDUALSIM_DATA/contactnets-cube [--every 1]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pybullet as pb
from residualsim.errors import run_script

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    from residualsim.data import load_trajectories
    from residualsim.residual.model import ResidualModel
    from residualsim.sim.engine import Engine
    from residualsim.sim.rollout import residual_rollout
    from residualsim.sim.rotations import geodesic_angle

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="ContactNets cube tosses")
    parser.add_argument("--model", default=str(ROOT / "data" / "pretrained" / "cube-contactnets"))
    parser.add_argument("--every", type=int, default=1, help="every k-th toss")
    args = parser.parse_args()
    model = ResidualModel.load(args.model)
    policy = model.sampling_policy()
    tosses = load_trajectories(args.data)
    keys = list(tosses)[::args.every]
    names = ("engine", "poses", "residual mean", "residual sample")
    worst = {name: [0.0, 0.0] for name in names}
    steps = {True: 0, False: 0}
    seconds = {True: 0.0, False: 0.0}
    real_step = pb.stepSimulation
    counter = {"n": 0}

    def counting_step(*a, **k):
        counter["n"] += 1
        return real_step(*a, **k)

    pb.stepSimulation = counting_step  # count the engine steps each loop really takes
    with Engine(model.scene, params=model.params, settings=model.settings()) as engine:
        for index, key in enumerate(keys):
            toss = tosses[key]
            start, n = toss.state_at(0), toss.n_samples - 1
            runs = {}
            for skips in (True, False):
                counter["n"], began = 0, time.perf_counter()
                states = engine.rollout(start, n, skips=skips).states
                poses = engine.rollout_poses(start, n, skips=skips)
                mean = residual_rollout(engine, start, n, policy, skips=skips)
                sample = residual_rollout(engine, start, n, policy, skips=skips,
                                          rng=np.random.default_rng([0, index]))
                seconds[skips] += time.perf_counter() - began
                steps[skips] += counter["n"]
                runs[skips] = [(states[:, :3], states[:, 3:7]), poses,
                               (mean.positions_m, mean.quat_wxyz),
                               (sample.positions_m, sample.quat_wxyz)]
            for name, (p, q), (p0, q0) in zip(names, runs[True], runs[False]):
                worst[name][0] = max(worst[name][0], float(np.abs(p - p0).max()))
                worst[name][1] = max(worst[name][1],
                                     float(np.degrees(geodesic_angle(q, q0)).max()))
    pb.stepSimulation = real_step
    for name, (metres, degrees) in worst.items():
        print(f"{name:>16}: largest difference {1000 * metres:.2e} mm, {degrees:.2e} deg")
    print(f"engine steps: {steps[True]} with skips, {steps[False]} without "
          f"({1 - steps[True] / steps[False]:.1%} saved); wall {seconds[True]:.1f} s vs "
          f"{seconds[False]:.1f} s")
    print(json.dumps({"tosses": len(keys), "largest_difference_mm": {
        k: 1000 * v[0] for k, v in worst.items()}, "largest_difference_deg": {
        k: v[1] for k, v in worst.items()}, "steps_with_skips": steps[True],
        "steps_without": steps[False], "seconds_with_skips": seconds[True],
        "seconds_without": seconds[False]}))


if __name__ == "__main__":
    run_script(main)
