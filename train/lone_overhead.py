"""Lone rollouts' overhead over a bare PyBullet loop of the same engine steps, in one process,
in CPU time, the compiled and the Python loop side by side (issue 68, train/README §10).

    python train/lone_overhead.py --model data/pretrained/cube-contactnets-5substep \
        --tosses 4 --samples 16 --repeats 5 --loops compiled,python

Jobs, each over the first ``tosses`` validation tosses:

* ``residual``: ``samples`` lone :func:`~residualsim.sim.rollout.residual_rollout` per toss,
  the residual drawn from ``default_rng([7, toss, sample])`` (``predict`` at batch size 1);
* ``engine``: the same with the engine alone (the events still found and described);
* ``likelihood``: one evaluation of the calibration likelihood
  (:func:`~residualsim.sysid.likelihood.trajectory_errors`: the engine's pose loop,
  :func:`~residualsim.sim.lone_compiled.pose_rollout`) at ``samples`` parameter sets;
* ``training``: one training epoch's rollouts (:func:`~residualsim.sim.rollout.residual_errors`
  for 4 candidate policies, the model's weights perturbed, ``samples`` draws each).

Each job runs once per loop (``RESIDUALSIM_COMPILED`` set before it; the loops give the same
rollouts bit for bit), and its engine steps are replayed in a bare loop. The bare loop is
exact: a recording pass (untimed, Python loop) notes every run of consecutive engine steps
the job makes (its first state, read before its first step, and its length; a run ends where
Python set the state: a reset, a flight's handover, a residual's correction), and the bare
loop sets each run's first state and calls ``stepSimulation`` that many times, reading
nothing. (Until session 14 the bare loop stepped each rollout's ``engine_steps`` on from its
first stepped state without the flights' resets and the corrections; ``--continuous``
keeps that loop for the ``residual`` and ``engine`` jobs.)

Prints per loop and job the median over the repeats of job / bare, and each repeat's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time

import numpy as np

JOBS = ("residual", "engine", "likelihood", "training")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="cube tosses (default $RESIDUALSIM_DATA/contactnets-cube)")
    parser.add_argument("--model", default="data/pretrained/cube-contactnets-5substep")
    parser.add_argument("--tosses", type=int, default=4)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--loops", default="compiled,python",
                        help="loops to time, comma-separated: compiled, python")
    parser.add_argument("--jobs", default=",".join(JOBS),
                        help=f"jobs to time, comma-separated: {', '.join(JOBS)}")
    parser.add_argument("--continuous", action="store_true",
                        help="the old bare loop: engine_steps on from the first stepped state")
    args = parser.parse_args(argv)
    loops, jobs = args.loops.split(","), args.jobs.split(",")
    if not set(loops) <= {"compiled", "python"}:
        parser.error(f"--loops: compiled and/or python, got {args.loops!r}")
    if not set(jobs) <= set(JOBS):
        parser.error(f"--jobs: some of {', '.join(JOBS)}, got {args.jobs!r}")

    from residualsim.experiments.jobs import model_and_tosses
    from residualsim.sim.bullet import pb
    from residualsim.sim.engine import Engine
    from residualsim.sim.rollout import (RolloutRequest, residual_errors, residual_rollout,
                                         trajectory_items)
    from residualsim.sysid.likelihood import trajectory_errors

    model, tosses = model_and_tosses(args.model, args.data, "validation", args.tosses)
    engine = Engine(model.scene, model.params, model.settings())
    policy, guard, scene = model.sampling_policy(), model.guard, engine.scene
    starts = [(k, scene.state_from_trajectory(traj, 0), len(traj.times_s) - 1)
              for k, traj in enumerate(tosses.values())]
    radius = scene.radius_of_gyration_m  # m: weighs the rotation error as the likelihood does
    errors_items = [(state, traj.positions_m[1:], traj.quat_wxyz[1:], radius)
                    for (_, state, _), traj in zip(starts, tosses.values())]
    rng = np.random.default_rng(3)
    params = [model.params] + [dataclasses.replace(
        model.params, lateral_friction=float(rng.uniform(0.1, 0.6)),
        restitution=float(rng.uniform(0.0, 0.4))) for _ in range(args.samples - 1)]
    flat = model.policy.get_flat()
    candidates = tuple(model.policy.set_flat(flat + 0.05 * rng.standard_normal(flat.shape))
                       .numpy(model.spread) for _ in range(4))
    request = RolloutRequest(params=model.params, policies=candidates, samples=args.samples,
                             seed=11, guard=guard)
    items = trajectory_items(model.layout, tosses)

    def run(job: str) -> list:
        runs = []
        for k, state, n_steps in starts:
            if job == "likelihood":
                runs.append(trajectory_errors(engine, errors_items[k], params))
            elif job == "training":
                runs.append(residual_errors(engine, items[k], request))
            else:
                for s in range(args.samples):
                    chosen = policy if job == "residual" else None
                    draws = np.random.default_rng([7, k, s]) if job == "residual" else None
                    runs.append(residual_rollout(engine, state, n_steps, chosen, draws, guard))
        if job == "likelihood" and engine.params != model.params:
            engine.set_params(model.params)
        return runs

    def segments(job: str) -> list:
        """The runs of consecutive engine steps a job makes (Python loop, recorded), each
        with the engine parameters it ran at."""
        os.environ["RESIDUALSIM_COMPILED"] = "0"
        found, last = [], [None]
        step = pb.stepSimulation

        def recording_step(*a, **k):
            now = scene.get_state()
            if last[0] is not None and np.array_equal(now, last[0]):
                found[-1][1] += 1
            else:
                found.append([now, 1, engine.params])
            step(*a, **k)
            last[0] = scene.get_state()

        pb.stepSimulation = recording_step
        try:
            run(job)
        finally:
            pb.stepSimulation = step
        return found

    def bare(runs: list) -> float:
        begin = time.process_time()
        for start, count, at in runs:
            if engine.params != at:
                engine.set_params(at)
            scene.set_state(start)
            for _ in range(count):
                pb.stepSimulation(physicsClientId=engine.client)
        elapsed = time.process_time() - begin
        engine.set_params(model.params)
        return elapsed

    def timed(job: str) -> tuple[float, list]:
        begin = time.process_time()
        runs = run(job)
        return time.process_time() - begin, runs

    exact = {job: segments(job) for job in jobs}
    for loop in loops:  # warm-up: libraries, caches, the kernel's compilation
        os.environ["RESIDUALSIM_COMPILED"] = "1" if loop == "compiled" else "0"
        run("residual")
    rows: dict = {(loop, job): [] for loop in loops for job in jobs}
    for _ in range(args.repeats):
        for loop in loops:
            os.environ["RESIDUALSIM_COMPILED"] = "1" if loop == "compiled" else "0"
            for job in jobs:
                seconds, runs = timed(job)
                reference = exact[job]
                if args.continuous and job in ("residual", "engine"):
                    reference = [(r.engine_start, int(r.engine_steps), model.params)
                                 for r in runs if r.engine_steps]
                rows[loop, job].append(seconds / bare(reference))
    report: dict = {"command": "lone_overhead",
                    "bare": "continuous" if args.continuous else "exact",
                    "tosses": len(starts), "samples": args.samples, "repeats": args.repeats,
                    "engine_steps": {job: int(sum(r[1] for r in exact[job])) for job in jobs}}
    for (loop, job), ratios in rows.items():
        report.setdefault(loop, {})[job] = {"median": round(float(np.median(ratios)), 3),
                                            "repeats": [round(float(x), 3) for x in ratios]}
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
