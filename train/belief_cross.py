"""Cross-propagation (issue 38, train/README §10 fifth round): is a conjugate belief a
worse *start* for the next contact, or is the next step itself the loss?

    python train/belief_cross.py --seeds 0,1,2      # after train/belief_accuracy.py --split train

Per training toss and seed (1 worker): the conjugate step's contact-1 belief with K = 4 and
without reduction (``max_components=None``); from each, one step to contact 2 with the
conjugate step (K = 4, none) and with 1000 particles; the energy distance of each contact-2
belief to the cached 3000-particle reference's (``belief_distance``, 2000 draws). Needs the
reference cache of ``train/belief_accuracy.py --split train --reference-particles 3000``.
"""

from __future__ import annotations

import argparse
import pickle
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="data/pretrained/cube-contactnets-5substep")
    parser.add_argument("--data", help="cube tosses (default $RESIDUALSIM_DATA/contactnets-cube)")
    parser.add_argument("--tosses", type=int, default=4)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--cache", default="runs/belief-accuracy-cache")
    args = parser.parse_args(argv)

    from residualsim.belief.distance import belief_distance
    from residualsim.belief.propagation import GaussianMixtureBelief
    from residualsim.belief.simulator import StochasticSimulator, default_initial_std
    from residualsim.experiments.jobs import model_and_tosses
    from residualsim.sim.scenes import make_scene

    model, tosses = model_and_tosses(args.model, args.data, "train", args.tosses)
    scene = make_scene(model.scene)
    steps = {"k4": dict(method="conjugate"),
             "none": dict(method="conjugate", max_components=None),
             "p1000": dict(method="particles", n_particles=1000)}
    out: dict = {}
    with StochasticSimulator(model, 1) as simulator:
        for toss_id, toss in tosses.items():
            path = Path(args.cache) / f"reference_train_{toss_id}_3000.pkl"
            reference = pickle.loads(path.read_bytes())[0]
            start = GaussianMixtureBelief.gaussian(scene.state_from_trajectory(toss, 0),
                                                   default_initial_std(model), planar=False)
            for seed in (int(s) for s in args.seeds.split(",")):
                for first in ("k4", "none"):
                    one = simulator.beliefs(start, n_events=1, seed=seed,
                                            **steps[first])[0].belief
                    d1 = belief_distance(one, reference[0], 2000, seed=0)
                    for second, options in steps.items():
                        two = simulator.beliefs(one, n_events=1, seed=seed + 10,
                                                **options)[0].belief
                        d2 = belief_distance(two, reference[1], 2000, seed=1)
                        out.setdefault(f"from {first}, step {second}", []).append((d1, d2))
                        print(f"toss {toss_id} seed {seed}: from {first} (contact 1 {d1:.3f}), "
                              f"step {second}: contact 2 {d2:.3f}", flush=True)
    for name, rows in out.items():
        rows = np.array(rows)
        print(f"{name:>24}: contact 1 {rows[:, 0].mean():.3f}, contact 2 {rows[:, 1].mean():.3f}")
    return out


if __name__ == "__main__":
    main()
