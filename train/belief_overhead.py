"""The particle belief step's overhead in one process, in CPU time (issue 49, train/README §10).

    python train/belief_overhead.py --model data/pretrained/cube-contactnets-5substep \
        --particles 500 --tosses 4 --repeats 4

The ``bench beliefs`` figure (method time / a bare PyBullet loop over the same engine steps,
:func:`residualsim.experiments.bench_beliefs._bare_replay`) without the workers: each
repeat propagates the initial belief of every validation toss (a Gaussian of
``default_initial_std`` about its first sample) through 3 contacts with
:func:`~residualsim.belief.propagation.stochastic_step` on one in-process engine, then
replays its engine steps in the bare loop, both timed with ``time.process_time``. Prints,
per contact, the best method, rollout (``first_events`` and the lone fallback, without the
parent's refit) and bare times over the repeats, the overheads of those bests, the mean
overhead over the repeats (the bests hide costs that hit some runs only, such as garbage
collections), and a digest of every step's particles, counts and engine steps (equal
digests: the same particles). A warm-up repeat (not counted) loads every library first.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time

import numpy as np


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="cube tosses (default $RESIDUALSIM_DATA/contactnets-cube)")
    parser.add_argument("--model", default="data/pretrained/cube-contactnets-5substep")
    parser.add_argument("--tosses", type=int, default=4)
    parser.add_argument("--particles", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args(argv)

    import residualsim.belief.propagation as propagation
    from residualsim.belief.propagation import stochastic_step
    from residualsim.belief.simulator import recorded_start_beliefs
    from residualsim.experiments.bench_beliefs import _BareReplay, _bare_replay
    from residualsim.experiments.jobs import model_and_tosses
    from residualsim.sim.pool import engine_workers

    model, tosses = model_and_tosses(args.model, args.data, "validation", args.tosses)
    beliefs = recorded_start_beliefs(model, tosses)
    max_steps = max(1, int(round(2.0 / model.dt_s)))
    tasks, rollout_s = propagation._particle_tasks, [0.0]

    def timed_tasks(*task_args):  # the rollouts' share, without the parent's refit
        start = time.process_time()
        try:
            return tasks(*task_args)
        finally:
            rollout_s[0] += time.process_time() - start

    propagation._particle_tasks = timed_tasks
    runs = []
    with engine_workers(model.scene, [0], 1, model.settings()) as workers:
        for repeat in range(args.repeats + 1):  # repeat 0 warms up
            digest, method, rollouts, bare = hashlib.sha256(), [0.0] * 3, [0.0] * 3, [0.0] * 3
            starts: list = [[] for _ in range(3)]
            for belief in beliefs:
                rng = np.random.default_rng(0)
                for k in range(3):
                    rollout_s[0], start = 0.0, time.process_time()
                    step = stochastic_step(workers, model, belief, args.particles, rng,
                                           max_steps)
                    method[k] += time.process_time() - start
                    rollouts[k] += rollout_s[0]
                    starts[k].append(step.engine_runs)
                    digest.update(step.particles.tobytes())
                    digest.update(repr((step.n_no_event, step.n_rejected_penetration,
                                        step.n_rejected_energy, step.engine_steps)).encode())
                    if step.belief is None:
                        break
                    belief = step.belief
            for k in range(3):
                replay = _BareReplay(1, np.concatenate([s[0] for s in starts[k]]),
                                     np.concatenate([s[1] for s in starts[k]]), model.params)
                start = time.process_time()
                workers.map(_bare_replay, replay)
                bare[k] = time.process_time() - start
            if repeat:
                runs.append((method, rollouts, bare, digest.hexdigest()[:16]))
    propagation._particle_tasks = tasks
    best = [np.min([run[i] for run in runs], axis=0) for i in range(3)]
    report = {
        "method_s": best[0].round(3).tolist(), "rollout_s": best[1].round(3).tolist(),
        "bare_s": best[2].round(3).tolist(),
        "overhead_per_contact": (best[0] / best[2]).round(3).tolist(),
        "overhead": round(float(best[0].sum() / best[2].sum()), 3),
        "rollout_overhead": round(float(best[1].sum() / best[2].sum()), 3),
        "mean_overhead": round(float(np.mean([sum(r[0]) for r in runs])
                                     / np.mean([sum(r[2]) for r in runs])), 3),
        "digests": sorted({run[3] for run in runs})}
    print(json.dumps({"command": "belief_overhead", "particles": args.particles,
                      "tosses": len(beliefs), "repeats": len(runs), **report}))
    return report


if __name__ == "__main__":
    main()
