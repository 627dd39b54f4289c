"""Held-out cube tosses: how often the beliefs after each contact cover the recorded state,
for the particle and the conjugate belief steps (issue 38).

    python train/belief_coverage.py --data $RESIDUALSIM_DATA/contactnets-cube \\
        [--model data/pretrained/cube-contactnets-5substep] [--tosses 12] [--particles 300] \\
        [--samples 200] [--workers 2] [--out runs/belief-coverage]

For each of the first ``--tosses`` validation tosses (``residualsim.split_ids``): the belief
starts as a Gaussian about the recorded first sample (``default_initial_std``) and goes
through 3 contacts with each method (the same workers, seed 0). The recorded state after
contact k is the post-contact sample of the k-th recorded contact run
(``residualsim.baselines.recorded_events.contact_runs``: velocity jumps beyond free flight),
so a belief's k-th event is compared with the k-th recorded impact; a toss with fewer
recorded runs or beliefs than k is left out at k. From each belief ``--samples`` states are
drawn and the recorded centre position (m, world frame) is tested against their Mahalanobis-
depth regions (``residualsim.evaluation.sample_scores.region_membership``, the regions
``score`` uses); the coverage at 10 %, ..., 90 % is the reliability curve (written as a PNG
with ``reliability_plot``). Prints one JSON line: per method the coverage at 50 % and 90 %,
the curve, the largest deviation from the diagonal, the number of (toss, contact) pairs,
rollouts and wall time.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="cube tosses (default $RESIDUALSIM_DATA/contactnets-cube)")
    parser.add_argument("--model", default="data/pretrained/cube-contactnets-5substep")
    parser.add_argument("--tosses", type=int, default=12)
    parser.add_argument("--particles", type=int, default=300)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--events", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default="runs/belief-coverage")
    args = parser.parse_args(argv)

    from residualsim.baselines.recorded_events import contact_runs
    from residualsim.belief.propagation import GaussianMixtureBelief
    from residualsim.belief.simulator import StochasticSimulator, default_initial_std
    from residualsim.evaluation.plots import reliability_plot
    from residualsim.evaluation.sample_scores import (RELIABILITY_LEVELS, max_deviation,
                                                      region_membership, reliability_curve)
    from residualsim.experiments.jobs import model_and_tosses
    from residualsim.sim.scenes import make_scene

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model, tosses = model_and_tosses(args.model, args.data, "validation", args.tosses)
    scene = make_scene(model.scene)
    methods = ("particles", "conjugate")
    inside = {m: [] for m in methods}
    cost = {m: {"rollouts": 0, "wall_s": 0.0} for m in methods}
    rng = np.random.default_rng(0)
    with StochasticSimulator(model, n_workers=args.workers) as simulator:
        first = scene.state_from_trajectory(next(iter(tosses.values())), 0)
        simulator.rollout(first, model.dt_s, samples=args.workers)  # workers up before timing
        for traj in tosses.values():
            state = scene.state_from_trajectory(traj, 0)
            belief = GaussianMixtureBelief.gaussian(state, default_initial_std(model),
                                                    planar=False)
            runs = contact_runs(traj)
            for method in methods:
                start = time.perf_counter()
                steps = simulator.beliefs(belief, n_events=args.events,
                                          n_particles=args.particles, seed=0, method=method)
                cost[method]["wall_s"] += time.perf_counter() - start
                cost[method]["rollouts"] += sum(step.n_drawn for step in steps)
                for k, step in enumerate(steps):
                    if step.belief is None or k >= len(runs):
                        continue
                    truth = scene.state_from_trajectory(traj, runs[k][1])[0:3]
                    samples = step.belief.sample(args.samples, rng)[:, 0:3]
                    inside[method].append(region_membership(samples[None], truth[None],
                                                            RELIABILITY_LEVELS)[:, 0])
    report = {"model": args.model, "tosses": len(tosses), "n_particles": args.particles,
              "samples": args.samples}
    curves = {}
    for method in methods:
        table = np.array(inside[method], dtype=float)
        curve = reliability_curve(table, RELIABILITY_LEVELS)
        curves[method] = curve
        report[method] = {"pairs": len(table), "coverage_50": curve["0.5"],
                          "coverage_90": curve["0.9"], "max_deviation": max_deviation(curve),
                          "curve": curve, **cost[method]}
    reliability_plot(curves, out / "reliability.png",
                     title="recorded position after each contact, validation tosses",
                     n_samples=args.samples)
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
