"""Lone rollouts' overhead over a bare PyBullet loop of the same engine steps, in one process,
in CPU time, the compiled and the Python loop side by side (issue 68, train/README §10).

    python train/lone_overhead.py --model data/pretrained/cube-contactnets-5substep \
        --tosses 4 --samples 16 --repeats 5 --loops compiled,python

Each repeat rolls every validation toss out ``samples`` times with
:func:`~residualsim.sim.rollout.residual_rollout` (the lone loop ``predict`` and training
run: the residual drawn from ``default_rng([7, toss, sample])``), then once more each with
the engine alone, once per loop (``RESIDUALSIM_COMPILED`` set before each; the loops give
the same rollouts bit for bit), and replays the engine steps those rollouts took in a bare
loop. The bare loop is exact: a recording pass (untimed) notes every run of consecutive
engine steps the rollouts make (its first state, read before its first step, and its
length; a run ends where Python set the state: a reset, a flight's handover, a residual's
correction) and the bare loop sets each run's first state and calls ``stepSimulation``
that many times, reading nothing. (Until session 14 the bare loop stepped each rollout's
``engine_steps`` on from its first stepped state without the flights' resets and the
corrections: it stepped the later flights with the engine, at ~5 µs a step, in place of
contact steps at ~150 µs, so it was cheaper than the rollouts' own steps and the ratios
came out high; ``--continuous`` keeps that bare loop for comparison.)

Prints per loop the medians over the repeats of residual / bare, engine alone / bare and
residual / engine alone, and each repeat's. ``--via-batch`` runs each rollout as a batch of
one copy (:func:`~residualsim.sim.batch.batched_rollouts`, ``batch_size=1``).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="cube tosses (default $RESIDUALSIM_DATA/contactnets-cube)")
    parser.add_argument("--model", default="data/pretrained/cube-contactnets-5substep")
    parser.add_argument("--tosses", type=int, default=4)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--loops", default="compiled,python",
                        help="loops to time, comma-separated: compiled, python")
    parser.add_argument("--via-batch", action="store_true",
                        help="each rollout as a batch of one copy (batched_rollouts)")
    parser.add_argument("--continuous", action="store_true",
                        help="the old bare loop: engine_steps on from the first stepped state")
    args = parser.parse_args(argv)
    loops = args.loops.split(",")
    if not set(loops) <= {"compiled", "python"}:
        parser.error(f"--loops: compiled and/or python, got {args.loops!r}")

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

    def segments(with_policy: bool) -> list:
        """The runs of consecutive engine steps the rollouts make (Python loop, recorded)."""
        os.environ["RESIDUALSIM_COMPILED"] = "0"
        found, last = [], [None]
        step = pb.stepSimulation

        def recording_step(*a, **k):
            now = scene.get_state()
            if last[0] is not None and np.array_equal(now, last[0]):
                found[-1][1] += 1
            else:
                found.append([now, 1])
            step(*a, **k)
            last[0] = scene.get_state()

        pb.stepSimulation = recording_step
        try:
            rollouts(with_policy)
        finally:
            pb.stepSimulation = step
        return found

    def bare(runs: list) -> float:
        begin = time.process_time()
        for start, count in runs:
            scene.set_state(start)
            for _ in range(count):
                pb.stepSimulation(physicsClientId=engine.client)
        return time.process_time() - begin

    exact = {True: segments(True), False: segments(False)}
    rows: dict = {loop: [] for loop in loops}
    for loop in loops:  # warm-up: libraries, caches, the kernel's compilation
        os.environ["RESIDUALSIM_COMPILED"] = "1" if loop == "compiled" else "0"
        rollouts(True)
    for _ in range(args.repeats):
        for loop in loops:
            os.environ["RESIDUALSIM_COMPILED"] = "1" if loop == "compiled" else "0"
            residual_s, residual_runs = rollouts(True)
            engine_s, engine_runs = rollouts(False)
            if args.continuous:
                references = [[(r.engine_start, int(r.engine_steps)) for r in runs
                               if r.engine_steps] for runs in (residual_runs, engine_runs)]
            else:
                references = [exact[True], exact[False]]
            rows[loop].append((residual_s, bare(references[0]), engine_s, bare(references[1])))
    report: dict = {"command": "lone_overhead", "via_batch": args.via_batch,
                    "bare": "continuous" if args.continuous else "exact",
                    "tosses": len(starts), "samples": args.samples, "repeats": args.repeats,
                    "engine_steps": int(sum(count for _, count in exact[True]))}
    for loop, measured in rows.items():
        table = np.array(measured)
        ratios = {"residual_over_bare": table[:, 0] / table[:, 1],
                  "engine_over_bare": table[:, 2] / table[:, 3],
                  "residual_over_engine": table[:, 0] / table[:, 2]}
        report[loop] = {**{name: round(float(np.median(v)), 3) for name, v in ratios.items()},
                        **{f"{name}_repeats": [round(float(x), 3) for x in v]
                           for name, v in ratios.items()}}
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
