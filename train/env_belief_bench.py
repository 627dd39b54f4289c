"""A gymnasium environment stepping a 1000-particle belief, against real time (issue 49).

``residualsim/CubeToss-v0`` with ``belief_particles`` per contact event: each step
simulates one toss for ``horizon_s`` (1.5 s) and the belief through ``belief_events``
contacts. Per ``belief_batch_size`` (bodies per PyBullet world in the beliefs' rollouts),
the same actions are stepped, interleaved (1, auto, 1, auto, ...) so that other jobs on
the machine weigh on each alike; printed per size: the best and median wall time of a step
(s), real-time factor = simulated seconds advanced / wall seconds (the horizon over the
best step; above 1: faster than real time) and the median's speed-up over the first size;
and whether every size gave the same belief counts::

    python train/env_belief_bench.py --particles 1000 --workers 2 --batch-sizes 1,auto \\
        --steps 3 --repeats 3 [--model data/pretrained/cube-contactnets-5substep]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from residualsim.errors import run_script


def _size(text: str) -> int | None:
    return None if text == "auto" else int(text)


def main(argv: list[str] | None = None) -> int:
    import gymnasium as gym

    import residualsim  # noqa: F401  (registers the environments)

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None,
                        help="model directory (default: the environment's, the shipped "
                             "10-substep cube model)")
    parser.add_argument("--particles", type=int, default=1000,
                        help="belief particles per contact event (default 1000)")
    parser.add_argument("--events", type=int, default=3, help="belief events (default 3)")
    parser.add_argument("--method", default="particles",
                        help="belief method, particles or conjugate (default particles)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--batch-sizes", default="1,auto",
                        help="comma-separated belief_batch_size values (default 1,auto)")
    parser.add_argument("--steps", type=int, default=3,
                        help="environment steps per size and round (default 3)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds (default 3)")
    args = parser.parse_args(argv)
    sizes = [s.strip() for s in args.batch_sizes.split(",") if s.strip()]
    actions = np.random.default_rng(0).uniform(-0.5, 0.5, (args.steps, 6)).astype(np.float32)
    envs = {size: gym.make("residualsim/CubeToss-v0", model=args.model,
                           belief_particles=args.particles, belief_events=args.events,
                           belief_method=args.method, n_workers=args.workers,
                           belief_batch_size=_size(size)) for size in sizes}
    times: dict[str, list[float]] = {size: [] for size in sizes}
    counts: dict[str, list] = {size: [] for size in sizes}
    try:
        for env in envs.values():  # workers up and worlds built before any clock runs
            env.reset(seed=0)
            env.step(actions[0])
        horizon = envs[sizes[0]].unwrapped.horizon_s
        for repeat in range(args.repeats):
            for size, env in envs.items():
                env.reset(seed=repeat)
                for action in actions:
                    start = time.perf_counter()
                    info = env.step(action)[4]
                    times[size].append(time.perf_counter() - start)
                    counts[size].append([(b["accepted"], b["no_event"],
                                          b["rejected_penetration"], b["rejected_energy"])
                                         for b in info["beliefs"]])
                print(f"batch size {size}, round {repeat + 1}: "
                      f"{statistics.median(times[size][-args.steps:]):.2f} s a step",
                      flush=True)
    finally:
        for env in envs.values():
            env.close()
    base = statistics.median(times[sizes[0]])
    report = {size: {"best_s": round(min(times[size]), 3),
                     "median_s": round(statistics.median(times[size]), 3),
                     "real_time_factor": round(horizon / min(times[size]), 3),
                     "real_time_factor_median": round(horizon / statistics.median(times[size]),
                                                      3),
                     f"speed-up over {sizes[0]}": round(base / statistics.median(times[size]),
                                                        3)}
              for size in sizes}
    same = all(counts[size] == counts[sizes[0]] for size in sizes)
    print(json.dumps({"horizon_s": horizon, "particles": args.particles,
                      "events": args.events, "method": args.method, "workers": args.workers,
                      "same_belief_counts": same, **report}, indent=1))
    return 0 if same else 1


if __name__ == "__main__":
    run_script(main)
