"""Wall time of belief-step variants against the 1000-particle filter, in one run (issue 38,
train/README §10, seventh round).

    python train/belief_timing.py --variants '[{"name": "d250"}, {"name": "d450", "draws": 450}]'

Per round, every variant (``method`` "conjugate" by default, other keys go to
``propagate_belief``) and the particle step (``--particles`` per step) propagate the same
initial beliefs as ``bench beliefs`` (a Gaussian of ``default_initial_std`` about the first
sample of each of ``--tosses`` validation tosses) through 3 contacts on the same
``--workers``; the rounds alternate the methods, so a slower minute of a shared machine
hits them alike. Prints each variant's wall seconds per round and the ratio of its median
to the particle step's median: the time bar of issue 38 is this ratio (at most 0.25). A
warm-up round (not counted) loads every library first.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="cube tosses (default $RESIDUALSIM_DATA/contactnets-cube)")
    parser.add_argument("--model", default="data/pretrained/cube-contactnets-5substep")
    parser.add_argument("--tosses", type=int, default=4)
    parser.add_argument("--particles", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variants", default='[{"name": "conjugate"}]', help="JSON list")
    args = parser.parse_args(argv)

    from residualsim.belief.simulator import StochasticSimulator, recorded_start_beliefs
    from residualsim.experiments.jobs import model_and_tosses

    model, tosses = model_and_tosses(args.model, args.data, "validation", args.tosses)
    beliefs = recorded_start_beliefs(model, tosses)
    variants = [{"name": f"particles-{args.particles}", "method": "particles"},
                *json.loads(args.variants)]
    walls: dict = {v["name"]: [] for v in variants}
    with StochasticSimulator(model, args.workers) as simulator:
        for round_index in range(args.rounds + 1):  # round 0 warms up
            for variant in variants:
                options = dict(variant)
                name, method = options.pop("name"), options.pop("method", "conjugate")
                start = time.perf_counter()
                for belief in beliefs:
                    simulator.beliefs(belief, n_events=3, n_particles=args.particles, seed=0,
                                      method=method, **options)
                if round_index:
                    walls[name].append(time.perf_counter() - start)
    base = float(np.median(walls[variants[0]["name"]]))
    report = {name: {"wall_s": w, "over_particles": float(np.median(w)) / base}
              for name, w in walls.items()}
    for name, row in report.items():
        print(f"{name:>24}: {', '.join(f'{w:.2f}' for w in row['wall_s'])} s; "
              f"{row['over_particles']:.3f} of the particle step")
    print(json.dumps({"command": "belief_timing", "tosses": len(beliefs),
                      "workers": args.workers, "over_particles": {
                          name: row["over_particles"] for name, row in report.items()}}))
    return report


if __name__ == "__main__":
    main()
