"""Where a belief step loses accuracy: belief-step variants against a cached particle
reference on validation cube tosses (issue 38, train/README §10).

    python train/belief_accuracy.py --tosses 4 --reference-particles 3000 \\
        --variants '[{"name": "sigma", "draws": null}, {"name": "d150"}]' [--seeds 0,1,2]

Per toss (initial belief as ``bench beliefs``: a Gaussian of ``default_initial_std`` about
the first recorded sample; 3 contacts; 1 worker): the reference (particle step,
``--reference-particles``, seed 1) and the 1000-particle filter (seed 0) are computed once
and cached in ``--cache`` (pickled beliefs; delete it when the code changes); each variant
(``method`` "conjugate" by default, other keys go to ``propagate_belief``) runs once per
seed. Prints per variant the energy distance to the reference summed over the contacts
(``belief_distance``, 2000 draws each) averaged over the tosses, each toss's per-contact
distances, engine rollouts and wall seconds.
"""

from __future__ import annotations

import argparse
import json
import pickle
import time
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="cube tosses (default $RESIDUALSIM_DATA/contactnets-cube)")
    parser.add_argument("--model", default="data/pretrained/cube-contactnets-5substep")
    parser.add_argument("--tosses", type=int, default=4)
    parser.add_argument("--split", default="validation", choices=("train", "validation", "test"),
                        help="tosses from this split (train: explore without touching the "
                             "validation tosses `bench beliefs` uses)")
    parser.add_argument("--reference-particles", type=int, default=3000)
    parser.add_argument("--variants", default='[{"name": "conjugate"}]', help="JSON list")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--cache", default="runs/belief-accuracy-cache")
    parser.add_argument("--raw-reference", action="store_true",
                        help="distances to the reference's accepted particles themselves, "
                             "not to its mixture fit (at most 4 components by BIC): is a "
                             "belief of more components closer to the reference's particles?")
    parser.add_argument("--one-step", action="store_true",
                        help="each contact from the reference's belief after the previous one "
                             "(the step's own error, without compounding)")
    args = parser.parse_args(argv)

    from residualsim.belief.distance import belief_distance
    from residualsim.belief.propagation import GaussianMixtureBelief
    from residualsim.belief.simulator import StochasticSimulator, default_initial_std
    from residualsim.experiments.jobs import model_and_tosses
    from residualsim.sim.scenes import make_scene

    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    model, tosses = model_and_tosses(args.model, args.data, args.split, args.tosses)
    scene = make_scene(model.scene)
    seeds = [int(s) for s in args.seeds.split(",")]
    report: dict = {}
    with StochasticSimulator(model, 1) as simulator:
        for toss_id, toss in tosses.items():
            belief = GaussianMixtureBelief.gaussian(scene.state_from_trajectory(toss, 0),
                                                    default_initial_std(model), planar=False)

            def run(method, seed, n_particles=1000, starts=None, **options):
                start = time.perf_counter()
                if starts is None:
                    steps = simulator.beliefs(belief, n_events=3, n_particles=n_particles,
                                              seed=seed, method=method, **options)
                else:  # one step from each given belief
                    steps = [simulator.beliefs(b, n_events=1, n_particles=n_particles,
                                               seed=seed, method=method, **options)[0]
                             for b in starts]
                return ([s.belief for s in steps], sum(s.n_drawn for s in steps),
                        time.perf_counter() - start)

            def cached(name, make):
                path = cache / f"{name}.pkl"
                if not path.exists():
                    path.write_bytes(pickle.dumps(make()))
                return pickle.loads(path.read_bytes())

            reference = cached(f"reference_{args.split}_{toss_id}_{args.reference_particles}",
                               lambda: run("particles", 1, args.reference_particles))[0]
            if args.raw_reference:  # the same seeded run, its particles kept
                raw = cached(f"reference_particles_{args.split}_{toss_id}_"
                             f"{args.reference_particles}",
                             lambda: [s.particles for s in simulator.beliefs(
                                 belief, n_events=3, n_particles=args.reference_particles,
                                 seed=1, method="particles")])
            starts = [belief, *reference[:-1]] if args.one_step else None
            tag = "_onestep" if args.one_step else ""
            rows = {"particles-1000": cached(f"particles1000{tag}_{args.split}_{toss_id}",
                                             lambda: run("particles", 0, starts=starts))}
            if args.raw_reference:  # what fitting at most 4 components costs
                rows["reference-fit"] = (reference, 0, 0.0)
            for variant in json.loads(args.variants):
                options = dict(variant)
                name, method = options.pop("name"), options.pop("method", "conjugate")
                for seed in seeds:
                    rows[f"{name}/seed{seed}"] = run(method, seed, starts=starts, **options)
            for name, (beliefs, rollouts, wall) in rows.items():
                distances = [float("nan") if ours is None else
                             _raw_distance(ours, ref, raw[k], seed=k) if args.raw_reference
                             else belief_distance(ours, ref, 2000, seed=k)
                             for k, (ours, ref) in enumerate(zip(beliefs, reference))]
                shapes = [_shape(ours, ref) for ours, ref in zip(beliefs, reference)]
                report.setdefault(name, []).append(
                    {"toss": toss_id, "distance": float(np.sum(distances)),
                     "per_contact": distances, "rollouts": rollouts, "wall_s": wall,
                     "spread": [s[0] for s in shapes], "offset": [s[1] for s in shapes]})
    for name, runs in report.items():
        print(f"{name:>24}: {np.mean([r['distance'] for r in runs]):.3f}  " + " ".join(
            f"[{r['distance']:.2f}: {', '.join(f'{d:.2f}' for d in r['per_contact'])}; "
            f"{r['rollouts']} rollouts, {r['wall_s']:.1f} s]" for r in runs))
        print(f"{'':>24}  spread per contact " + ", ".join(
            f"{v:.2f}" for v in np.nanmean([r["spread"] for r in runs], axis=0)) +
            "; offset " + ", ".join(
            f"{v:.2f}" for v in np.nanmean([r["offset"] for r in runs], axis=0)))
    print(json.dumps({"command": "belief_accuracy", "distance": {
        name: float(np.mean([r["distance"] for r in runs])) for name, runs in report.items()}}))
    return report


def _raw_distance(ours, reference, particles: np.ndarray, n: int = 2000, seed: int = 0
                  ) -> float:
    """``belief_distance`` with the reference's accepted particles (n of them, drawn
    without replacement) in place of draws from its mixture fit: the same reference
    tangent coordinates, standardised by the particles' spread."""
    from residualsim.belief.distance import energy_distance

    rng = np.random.default_rng([int(seed), 0])
    x = reference.tangent.to_tangent(ours.sample(n, rng))
    y = reference.tangent.to_tangent(
        particles[rng.choice(len(particles), min(n, len(particles)), replace=False)])
    scale = np.maximum(y.std(axis=0), 1e-9)
    return energy_distance(x / scale, y / scale)


def _shape(ours, reference, n: int = 2000) -> tuple[float, float]:
    """How a belief's draws sit against the reference's, in the reference's tangent
    coordinates standardised by its spread: (geometric mean over coordinates of the standard
    deviation ratio ours / reference, root-mean-square of the mean offset in reference
    standard deviations)."""
    if ours is None:
        return float("nan"), float("nan")
    rng = np.random.default_rng(7)
    x = reference.tangent.to_tangent(ours.sample(n, rng))
    y = reference.tangent.to_tangent(reference.sample(n, rng))
    scale = np.maximum(y.std(axis=0), 1e-9)
    ratio = np.maximum(x.std(axis=0), 1e-12) / scale
    return (float(np.exp(np.mean(np.log(ratio)))),
            float(np.sqrt(np.mean(((x.mean(axis=0) - y.mean(axis=0)) / scale) ** 2))))


if __name__ == "__main__":
    main()
