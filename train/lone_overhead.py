"""Lone rollouts' overhead over a bare PyBullet loop of the same engine steps, in one process,
in CPU time (issue 68, train/README §10).

    python train/lone_overhead.py --model data/pretrained/cube-contactnets-5substep \
        --tosses 4 --samples 8 --repeats 5

Each repeat rolls every validation toss out ``samples`` times with
:func:`~residualsim.sim.rollout.residual_rollout` (the lone loop ``predict`` runs: the
residual drawn from ``default_rng([repeat-free seed, toss, sample])``, and once with the engine
alone), then replays the engine steps each rollout took in a bare loop (its
``engine_start`` set, ``stepSimulation`` ``engine_steps`` times, nothing read), as
``bench beliefs`` replays a belief step's. Prints the medians over the repeats of
residual / bare, engine alone / bare and residual / engine alone, and each repeat's. Lone
rollouts run the Python loop whatever ``RESIDUALSIM_COMPILED`` says; ``--via-batch`` runs
each one instead as a batch of one copy (:func:`~residualsim.sim.batch.batched_rollouts`,
``batch_size=1``: the same rollouts bit for bit), which takes the compiled loop when the
switch is on.
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
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--via-batch", action="store_true",
                        help="each rollout as a batch of one copy (batched_rollouts)")
    args = parser.parse_args(argv)

    from residualsim.experiments.jobs import model_and_tosses
    from residualsim.sim.batch import batched_rollouts
    from residualsim.sim.bullet import pb
    from residualsim.sim.engine import Engine
    from residualsim.sim.rollout import residual_rollout

    model, tosses = model_and_tosses(args.model, args.data, "validation", args.tosses)
    engine = Engine(model.scene, model.params, model.settings())
    policy, guard, scene = model.sampling_policy(), model.guard, engine.scene
    starts = [(k, scene.state_from_trajectory(traj, 0), len(traj.times_s) - 1)
              for k, traj in enumerate(tosses.values())]

    def rollouts(with_policy: bool) -> tuple[float, list]:
        begin, runs = time.process_time(), []
        for k, state, n_steps in starts:
            for s in range(args.samples):
                rng = np.random.default_rng([7, k, s]) if with_policy else None
                chosen = policy if with_policy else None
                if args.via_batch:
                    runs.append(batched_rollouts(engine, state[None], n_steps, chosen, [rng],
                                                 guard, batch_size=1)[0])
                else:
                    runs.append(residual_rollout(engine, state, n_steps, chosen, rng, guard))
        return time.process_time() - begin, runs

    def bare(runs: list) -> float:
        begin = time.process_time()
        for run in runs:
            if run.engine_steps:
                scene.set_state(run.engine_start)
                for _ in range(int(run.engine_steps)):
                    pb.stepSimulation(physicsClientId=engine.client)
        return time.process_time() - begin

    rollouts(True)  # warm-up: libraries, caches
    rows = []
    for _ in range(args.repeats):
        residual_s, residual_runs = rollouts(True)
        engine_s, engine_runs = rollouts(False)
        rows.append((residual_s, bare(residual_runs), engine_s, bare(engine_runs)))
    rows = np.array(rows)
    ratios = {"residual_over_bare": rows[:, 0] / rows[:, 1],
              "engine_over_bare": rows[:, 2] / rows[:, 3],
              "residual_over_engine": rows[:, 0] / rows[:, 2]}
    report = {"command": "lone_overhead", "via_batch": args.via_batch,
              "tosses": len(starts), "samples": args.samples,
              "repeats": args.repeats,
              "engine_steps": int(sum(r.engine_steps for r in residual_runs)),
              **{name: round(float(np.median(v)), 3) for name, v in ratios.items()},
              **{f"{name}_repeats": [round(float(x), 3) for x in v]
                 for name, v in ratios.items()}}
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
