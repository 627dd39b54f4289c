"""Cross-propagation (issue 38, train/README §10, fifth and sixth rounds): is a conjugate
belief a worse *start* for the next contact, or is the next step itself the loss?

    python train/belief_cross.py --seeds 0,1,2                      # fifth round
    python train/belief_cross.py --seeds 0,1,2,3 --starts k4,p1000,ref --steps k4,p1000 --blocks

Needs the reference cache of ``train/belief_accuracy.py --split train --reference-particles
3000``. Per training toss and seed (1 worker): each contact-1 belief of ``--starts`` (named
steps from the toss's initial belief; ``ref``: the cached reference's own), then from each
one step to contact 2 with each of ``--steps``; the energy distance of every contact-2
belief to the reference's (``belief_distance``, 2000 draws). Named steps: ``k4`` (the
shipped conjugate step), ``none`` (no reduction), ``p1000`` (1000 particles), plus those of
``--configs`` (JSON: name -> ``propagate_belief`` options). ``--blocks``: for each
contact-1 belief also the energy distance of its position-rotation marginal (tangent
coordinates 0..5) and velocity marginal (6..11), each block's spread (geometric mean of the
standard-deviation ratios to the reference) and the root-mean-square difference of its
correlation matrix's pose-pose, velocity-velocity and pose-velocity entries from the
reference's (20 000 draws each).
"""

from __future__ import annotations

import argparse
import json
import pickle
from pathlib import Path

import numpy as np

POSE, VELOCITY = np.arange(0, 6), np.arange(6, 12)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="data/pretrained/cube-contactnets-5substep")
    parser.add_argument("--data", help="cube tosses (default $RESIDUALSIM_DATA/contactnets-cube)")
    parser.add_argument("--tosses", type=int, default=4)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--cache", default="runs/belief-accuracy-cache")
    parser.add_argument("--starts", default="k4,none", help="contact-1 beliefs (names)")
    parser.add_argument("--steps", default="k4,none,p1000", help="steps to contact 2 (names)")
    parser.add_argument("--configs", default="{}", help="JSON: more named steps")
    parser.add_argument("--blocks", action="store_true",
                        help="per-block distances, spreads and correlations of the starts")
    args = parser.parse_args(argv)

    from residualsim.belief.distance import belief_distance
    from residualsim.belief.propagation import GaussianMixtureBelief
    from residualsim.belief.simulator import StochasticSimulator, default_initial_std
    from residualsim.experiments.jobs import model_and_tosses
    from residualsim.sim.scenes import make_scene

    model, tosses = model_and_tosses(args.model, args.data, "train", args.tosses)
    scene = make_scene(model.scene)
    configs = {"k4": dict(method="conjugate"),
               "none": dict(method="conjugate", max_components=None),
               "p1000": dict(method="particles", n_particles=1000),
               **json.loads(args.configs)}
    starts, steps = args.starts.split(","), args.steps.split(",")
    out: dict = {}
    with StochasticSimulator(model, 1) as simulator:
        for toss_id, toss in tosses.items():
            path = Path(args.cache) / f"reference_train_{toss_id}_3000.pkl"
            reference = pickle.loads(path.read_bytes())[0]
            initial = GaussianMixtureBelief.gaussian(scene.state_from_trajectory(toss, 0),
                                                     default_initial_std(model), planar=False)
            for seed in (int(s) for s in args.seeds.split(",")):
                for first in starts:
                    one = reference[0] if first == "ref" else simulator.beliefs(
                        initial, n_events=1, seed=seed, **configs[first])[0].belief
                    d1 = belief_distance(one, reference[0], 2000, seed=0)
                    if args.blocks:
                        out.setdefault(f"start {first}", []).append(
                            [d1, *_blocks(one, reference[0], belief_distance)])
                    for second in steps:
                        two = simulator.beliefs(one, n_events=1, seed=seed + 10,
                                                **configs[second])[0].belief
                        d2 = belief_distance(two, reference[1], 2000, seed=1)
                        out.setdefault(f"from {first}, step {second}", []).append((d1, d2))
                        print(f"toss {toss_id} seed {seed}: from {first} (contact 1 {d1:.3f}), "
                              f"step {second}: contact 2 {d2:.3f}", flush=True)
    for name, rows in out.items():
        rows = np.array(rows)
        error = rows.std(axis=0, ddof=1) / np.sqrt(len(rows)) if len(rows) > 1 else rows[0] * 0
        if name.startswith("start"):
            labels = ["contact 1", "pose", "velocity", "spread pose", "spread velocity",
                      "corr pose", "corr velocity", "corr cross"]
            print(f"{name:>24}: " + ", ".join(
                f"{label} {m:.3f}" for label, m in zip(labels, rows.mean(axis=0))))
        else:
            print(f"{name:>24}: contact 1 {rows[:, 0].mean():.3f}, contact 2 "
                  f"{rows[:, 1].mean():.3f} (standard error {error[1]:.3f})")
    return out


def _blocks(ours, reference, belief_distance, n: int = 20000) -> list[float]:
    """[distance of the pose marginal, of the velocity marginal, spread of each block,
    RMS correlation difference pose-pose, velocity-velocity, pose-velocity] (module
    docstring)."""
    distances = [belief_distance(ours, reference, 2000, seed=0, coordinates=c)
                 for c in (POSE, VELOCITY)]
    rng = np.random.default_rng(7)
    x = reference.tangent.to_tangent(ours.sample(n, rng))
    y = reference.tangent.to_tangent(reference.sample(n, rng))
    ratio = np.maximum(x.std(axis=0), 1e-12) / np.maximum(y.std(axis=0), 1e-12)
    spreads = [float(np.exp(np.mean(np.log(ratio[c])))) for c in (POSE, VELOCITY)]
    gap = np.corrcoef(x.T) - np.corrcoef(y.T)
    off = ~np.eye(6, dtype=bool)
    corr = [float(np.sqrt(np.mean(gap[np.ix_(POSE, POSE)][off] ** 2))),
            float(np.sqrt(np.mean(gap[np.ix_(VELOCITY, VELOCITY)][off] ** 2))),
            float(np.sqrt(np.mean(gap[np.ix_(POSE, VELOCITY)] ** 2)))]
    return distances + spreads + corr


if __name__ == "__main__":
    main()
