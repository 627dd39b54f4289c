"""``bench beliefs``: particles through real tosses against real time, the plain engine and
a bare PyBullet loop over the same steps (:func:`bench_beliefs`), in one run.

Each belief method's row counts the engine steps its rollouts took (recording periods
PyBullet stepped, summed over the particles) and times a bare PyBullet loop over the same
steps on the same workers (:func:`_bare_replay`: each particle's engine state where its
stepping began, then ``stepSimulation`` that many times, nothing read), so that
overhead = method time / bare time is a ratio of two figures measured in the same run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Mapping

import numpy as np

from residualsim.data.trajectory import Trajectory
from residualsim.errors import ParameterError
from residualsim.sim.pool import engine_workers

__all__ = ["METHOD_OPTIONS", "check_methods", "bench_beliefs", "format_beliefs_report",
           "method_label"]


@dataclasses.dataclass(frozen=True)
class _BareRequest:
    n_slots: int
    states: np.ndarray
    n_steps: int
    params: object
    seeds: None = None


def _bare_tasks(engine, slot: int, request: _BareRequest) -> None:
    """Worker function: the bare engine loop (:meth:`Engine.rollout_poses`: step and read
    the pose, no contact queries, no residual) for every ``n_slots``-th state."""
    from residualsim.belief.propagation import slot_particles

    for _, state, _ in slot_particles(engine, slot, request):
        engine.rollout_poses(state, request.n_steps)


@dataclasses.dataclass(frozen=True)
class _BareReplay:
    """The engine's share of a belief method's rollouts: ``starts`` (n, state size) where
    each particle's stepping began (NaN rows: it never stepped), ``steps`` (n,) periods."""

    n_slots: int
    starts: np.ndarray
    steps: np.ndarray
    params: object


def _bare_replay(engine, slot: int, request: _BareReplay) -> None:
    """Worker function: every ``n_slots``-th particle's engine steps in a bare PyBullet loop:
    its start state set, then ``stepSimulation`` once per period, nothing read."""
    from residualsim.sim.bullet import pb

    if engine.params != request.params:
        engine.set_params(request.params)
    step, cid = pb.stepSimulation, engine.client
    for index in range(slot, len(request.steps), request.n_slots):
        if request.steps[index] > 0:
            engine.scene.set_state(request.starts[index])
            for _ in range(int(request.steps[index])):
                step(physicsClientId=cid)


def method_label(method: str, batch_size: int | None, draws: int | None = None,
                 loop: str | None = None) -> str:
    """The row name of a belief method at a batch size (and the conjugate step's draws, and
    the rollout loop): "particles" (automatic batches), "particles[batch=1]", "conjugate",
    "conjugate[batch=1,draws=410]", "particles[loop=compiled]"."""
    marks = ([] if batch_size is None else [f"batch={batch_size}"]) + \
        ([] if draws is None else [f"draws={draws}"]) + \
        ([] if loop is None else [f"loop={loop}"])
    return f"{method}[{','.join(marks)}]" if marks else method


#: :func:`bench_beliefs`' options of the belief steps it compares (``bench beliefs``'s).
METHOD_OPTIONS = ("methods", "reference_particles", "batch_sizes", "draws", "loops")
#: ``loops``' names and the ``RESIDUALSIM_COMPILED`` value each sets in the workers.
LOOPS = {"compiled": "1", "python": "0"}


def check_methods(methods: tuple[str, ...] = (), reference_particles: int | None = None,
                  batch_sizes: tuple | None = None, draws: tuple | None = None,
                  loops: tuple | None = None) -> None:
    """ParameterError for an option of the belief steps given without them (it would change
    nothing): ``batch_sizes`` or ``reference_particles`` without ``methods``, ``draws``
    without "conjugate" among them."""
    for flag, value in (("--batch-sizes", batch_sizes),
                        ("--reference-particles", reference_particles), ("--loops", loops)):
        if value is not None and not methods:
            raise ParameterError(f"{flag} applies to the belief steps of --methods (e.g. "
                                 f"--methods particles {flag} ...); none is named")
    if draws is not None and "conjugate" not in methods:
        raise ParameterError("--draws applies to the conjugate step: name it in --methods "
                             "(e.g. --methods particles,conjugate --draws 250,410)")


def bench_beliefs(model, trajectories: Mapping[str, Trajectory], particles: int = 1000,
                  n_workers: int = 2, n_events: int = 3, seed: int = 0,
                  bare_substeps: tuple[int, ...] = (1,), methods: tuple[str, ...] = (),
                  reference_particles: int | None = None, distance_samples: int = 2000,
                  batch_sizes: tuple | None = None, draws: tuple | None = None,
                  repeats: int = 1, loops: tuple | None = None) -> dict:
    """Particles through whole real tosses, against real time and the plain engine.

    For each toss (initial state from its first sample, horizon its recorded length), in
    the same run: ``particles`` residual rollouts drawn from the initial belief (a Gaussian
    of :func:`~residualsim.belief.simulator.default_initial_std` about the recorded
    state), the same number of rollouts of the calibrated engine alone from the same
    initial states, and the event-to-event belief propagation
    (:func:`~residualsim.belief.propagation.propagate_belief`) over ``n_events`` contacts
    with its rejection counts. Ratios: wall time / simulated time
    (below 1: faster than real time) and residual / engine.

    The floor any PyBullet propagation pays: the same particles through the bare engine
    loop (step and read the pose, nothing else) at the model's substeps and at each of
    ``bare_substeps`` (``bare_over_real_time``, keyed by substeps). Only the timing is
    meaningful at other substep counts: the model was calibrated at its own. Every pool
    runs one short rollout before the clocks start, so no row pays for starting workers,
    and each of ``methods`` one contact (:func:`_warm_methods`), so none pays for its imports.

    ``methods`` (e.g. ``("particles", "conjugate")``): each belief method of
    :func:`~residualsim.belief.propagation.propagate_belief` through the same ``n_events``
    contacts from the same initial belief, timed in the same run, against a reference belief
    (the particle step with ``reference_particles``, default 20000, another seed): per method
    ``over_real_time`` (its wall time over the simulated time, the recorded tosses' length
    as for the other rows), ``rollouts`` (engine rollouts to an event, all tosses) and
    ``distance_to_reference`` (:func:`~residualsim.belief.distance.belief_distance`,
    ``distance_samples`` draws from each belief, summed over the contacts, averaged over
    the tosses; a contact that a method's belief did not reach is left out and counted in
    ``missing``), ``engine_steps`` (the periods PyBullet stepped for its rollouts, all
    particles of all contacts), ``bare_s`` (a bare PyBullet loop over those same steps,
    :func:`_bare_replay`, on the same workers right after the method) and ``overhead`` (its
    wall time / ``bare_s``; ``rollout_overhead`` the same for its rollouts alone, without
    the refits in the parent). Each method runs once per entry of ``batch_sizes``
    (copies of the body per world in its rollouts; None: automatic, 1: one at a time), and
    "conjugate" once per entry of ``draws`` (its draws per step; None: the step's default),
    rows named by :func:`method_label`; ``batch_sizes`` (default: automatic only) without
    ``methods``, or ``draws`` (default: the step's own) without "conjugate" among them, is
    refused (ParameterError: they would change nothing), as is ``reference_particles``
    without ``methods``. ``repeats``: each toss's method runs (and their bare loops) timed
    that many times in turn, the same particles each time; the timings are the
    medians over the repeats and ``overheads`` every repeat's (this machine's timings of the
    same work varied by +-10 %). ``loops``: each method once per rollout loop, "compiled"
    (over Bullet's C API) and/or "python", in the same run (``RESIDUALSIM_COMPILED`` set in
    the simulator's workers before each row; None: as the environment says).
    """
    from residualsim.belief.propagation import GaussianMixtureBelief
    from residualsim.belief.simulator import StochasticSimulator, default_initial_std

    check_methods(methods, reference_particles, batch_sizes, draws, loops)
    batch_sizes, draws, loops = batch_sizes or (None,), draws or (None,), loops or (None,)
    reference_particles = reference_particles or 20000

    scene = model.layout
    rows, totals = [], {"propagated": 0, "accepted": 0, "no_event": 0,
                        "rejected_penetration": 0, "rejected_energy": 0}
    slots = list(range(max(1, int(n_workers))))
    bare_counts = sorted({model.substeps, *map(int, bare_substeps)})
    bare_s = dict.fromkeys(bare_counts, 0.0)
    method_runs = [(name, size, count, loop) for name in methods for size in batch_sizes
                   for count in (draws if name == "conjugate" else (None,)) for loop in loops]
    method_rows: dict = {method_label(*run): [] for run in method_runs}
    with contextlib.ExitStack() as stack:
        residual = stack.enter_context(StochasticSimulator(model, n_workers))
        engine = stack.enter_context(StochasticSimulator(model, n_workers, residual=False))
        bare_pools = {n: stack.enter_context(engine_workers(
            model.scene, slots, len(slots), dataclasses.replace(model.settings(), substeps=n)))
            for n in bare_counts}
        first = scene.state_from_trajectory(next(iter(trajectories.values())), 0)
        for simulator in (residual, engine):  # start the workers before any clock runs
            simulator.rollout(first, model.dt_s, samples=len(slots))
        for pool in bare_pools.values():
            pool.map(_bare_tasks, _BareRequest(len(slots), first[None], 1, model.params))
        _warm_methods(residual, GaussianMixtureBelief.gaussian(
            first, default_initial_std(model), planar=scene.planar), method_runs, seed)
        for traj_id, traj in trajectories.items():
            state = scene.state_from_trajectory(traj, 0)
            belief = GaussianMixtureBelief.gaussian(state, default_initial_std(model),
                                                    planar=scene.planar)
            horizon = float(traj.times_s[-1] - traj.times_s[0])
            start = time.perf_counter()
            runs = residual.rollout(belief, horizon, samples=particles, seed=seed)
            residual_s = time.perf_counter() - start
            start = time.perf_counter()
            engine.rollout(belief, horizon, samples=particles, seed=seed)
            engine_s = time.perf_counter() - start
            start = time.perf_counter()
            steps = residual.beliefs(belief, n_events=n_events, n_particles=particles,
                                     seed=seed)
            belief_s = time.perf_counter() - start
            request = _BareRequest(
                n_slots=len(slots), params=model.params,
                states=runs.initial_states,  # the residual rollouts' own draws
                n_steps=max(1, int(round(horizon / model.dt_s))))
            for n, pool in bare_pools.items():
                start = time.perf_counter()
                pool.map(_bare_tasks, request)
                bare_s[n] += time.perf_counter() - start
            if methods:
                _bench_methods(residual, bare_pools[model.substeps], model, belief,
                               method_runs, n_events, particles, reference_particles,
                               distance_samples, seed, horizon, method_rows, repeats)
            for step in steps:
                summary = step.summary()
                totals["propagated"] += summary["drawn"]
                for key in ("accepted", "no_event", "rejected_penetration",
                            "rejected_energy"):
                    totals[key] += summary[key]
            rows.append({"toss": traj_id, "simulated_s": horizon, "residual_s": residual_s,
                         "engine_s": engine_s, "beliefs_s": belief_s,
                         "events": len(steps),
                         "max_penetration_m": float(runs.max_penetration_m.max())})
    simulated = sum(r["simulated_s"] for r in rows)
    met = totals["propagated"] - totals["no_event"]
    extra = {"methods": _method_report(method_rows, simulated),
             "reference_particles": reference_particles} if methods else {}
    return {**extra, "scene": model.scene, "n_trajectories": len(rows), "particles": particles,
            "workers": n_workers,
            "substeps": model.substeps, "simulated_s": simulated,
            "residual_over_real_time": sum(r["residual_s"] for r in rows) / simulated,
            "engine_over_real_time": sum(r["engine_s"] for r in rows) / simulated,
            "residual_over_engine": sum(r["residual_s"] for r in rows) /
            sum(r["engine_s"] for r in rows),
            "bare_over_real_time": {str(n): t / simulated for n, t in bare_s.items()},
            "beliefs_s_per_toss": sum(r["beliefs_s"] for r in rows) / len(rows),
            **totals, "rejected_fraction": (totals["rejected_penetration"] +
                                            totals["rejected_energy"]) / max(met, 1),
            "per_toss": rows}


#: Particles (or the conjugate step's draws) of the one contact each method runs before the
#: clocks start.
WARM_PARTICLES = 50


def _warm_methods(simulator, belief, runs, seed: int) -> None:
    """Each (method, batch size, draws) of ``runs`` through one contact of ``belief`` with
    :data:`WARM_PARTICLES`, untimed: what a method loads on its first call (the conjugate
    step's quasi-random draws import scipy.stats, 0.4-0.75 s once per process) is not
    charged to the steps a planner repeats."""
    for name, size, count, loop in runs:
        _use_loop(simulator, loop)
        options = {"batch_size": size} if count is None else {"batch_size": size,
                                                              "draws": WARM_PARTICLES}
        simulator.beliefs(belief, n_events=1, n_particles=WARM_PARTICLES, seed=seed,
                          method=name, **options)


def _bench_methods(simulator, bare_pool, model, belief, runs, n_events: int,
                   particles: int, reference_particles: int, distance_samples: int,
                   seed: int, horizon_s: float, rows: dict, repeats: int = 1) -> None:
    """One toss of :func:`bench_beliefs`' method comparison: the reference belief, then each
    (method, batch size, draws) of ``runs`` timed on the same workers and its engine steps
    replayed in the bare loop on ``bare_pool``, all ``repeats`` times in turn (the same seed:
    the same particles each time); appends a row per run to ``rows``, its timings (wall,
    bare, rollouts, s) once per repeat in ``timings``."""
    reference = simulator.beliefs(belief, n_events=n_events, n_particles=reference_particles,
                                  seed=seed + 1, method="particles")
    timings: dict = {run: [] for run in runs}
    steps: dict = {}  # each run's belief steps (the same at every repeat: the same seed)
    for _ in range(int(repeats)):
        for run in runs:
            steps[run], timing = _timed_method(simulator, bare_pool, model, belief, run,
                                               n_events, particles, seed)
            timings[run].append(timing)
    for run in runs:
        _method_row(steps[run], reference, distance_samples, horizon_s, timings[run],
                    rows[method_label(*run)])


def _set_loop(engine, slot: int, value: str) -> None:
    """Worker function: the rollout loop this worker runs (``RESIDUALSIM_COMPILED``)."""
    import os

    os.environ["RESIDUALSIM_COMPILED"] = value


def _use_loop(simulator, loop: str | None) -> None:
    """The rollout loop ``loop`` ("compiled", "python"; None: leave as it is) in the
    simulator's workers and in this process (a pool run in process)."""
    import os

    if loop is None:
        return
    os.environ["RESIDUALSIM_COMPILED"] = LOOPS[loop]
    simulator._workers.map(_set_loop, LOOPS[loop])


def _timed_method(simulator, bare_pool, model, belief, run, n_events: int, particles: int,
                  seed: int) -> tuple[list, tuple[float, float, float]]:
    """One timed pass of ``run`` = (method, batch size, draws) and the bare loop over its
    engine steps: (its belief steps, (wall, bare, rollouts) s)."""
    name, size, count, loop = run
    _use_loop(simulator, loop)
    options = {"batch_size": size} if count is None else {"batch_size": size, "draws": count}
    start = time.perf_counter()
    steps = simulator.beliefs(belief, n_events=n_events, n_particles=particles, seed=seed,
                              method=name, **options)
    wall = time.perf_counter() - start
    done = [step.engine_runs for step in steps if step.engine_runs is not None]
    replay = _BareReplay(len(bare_pool.items), np.concatenate([d[0] for d in done]),
                         np.concatenate([d[1] for d in done]), model.params)
    start = time.perf_counter()
    bare_pool.map(_bare_replay, replay)
    bare = time.perf_counter() - start
    return steps, (wall, bare, float(sum(step.rollout_s for step in steps)))


def _method_row(steps, reference, distance_samples: int, horizon_s: float, timings: list,
                rows: list) -> None:
    """Appends to ``rows`` one toss's row of a method: its timings per repeat, engine
    steps, rollouts and distance to ``reference`` (per contact and summed)."""
    from residualsim.belief.distance import belief_distance

    distances, missing = [], 0
    for k, ref in enumerate(reference):
        ours = steps[k].belief if k < len(steps) else None
        if ours is None or ref.belief is None:
            missing += 1
            continue
        distances.append(belief_distance(ours, ref.belief, distance_samples, seed=k))
    walls, bares, rollouts = (np.median([t[i] for t in timings]) for i in range(3))
    rows.append({
        "wall_s": float(walls), "simulated_s": horizon_s, "bare_s": float(bares),
        "rollout_s": float(rollouts), "timings": [list(t) for t in timings],
        "engine_steps": int(sum(step.engine_steps for step in steps)),
        "rollouts": int(sum(step.n_drawn for step in steps)),
        "distance": float(sum(distances)), "missing": missing, "per_contact": distances,
        "rejected_fraction": [step.rejected_fraction for step in steps]})


def _method_report(rows: dict, simulated_s: float) -> dict:
    """Per method: over_real_time, rollouts, distance_to_reference, engine_steps, bare_s,
    overhead and rollout_overhead (see :func:`bench_beliefs`), and over_particles (its wall
    time / the "particles" row's, None without that row). With repeats, each timing is the
    median over the repeats of the tosses' sums, and ``overheads`` lists every repeat's."""
    report = {}
    for name, runs in rows.items():
        sums = np.sum([r["timings"] for r in runs], axis=0)  # (repeats, 3): wall, bare, rollouts
        wall, bare, rollout = (float(np.median(sums[:, i])) for i in range(3))
        overheads = (sums[:, 0] / sums[:, 1]).tolist() if (sums[:, 1] > 0).all() else []
        report[name] = {
            "over_real_time": wall / simulated_s,
            "rollouts": sum(r["rollouts"] for r in runs),
            "distance_to_reference": float(np.mean([r["distance"] for r in runs])),
            "missing": sum(r["missing"] for r in runs),
            "wall_s": wall, "rollout_s": rollout, "bare_s": bare,
            "engine_steps": sum(r["engine_steps"] for r in runs),
            "overhead": float(np.median(overheads)) if overheads else None,
            "overheads": overheads,
            "rollout_overhead": float(np.median(sums[:, 2] / sums[:, 1])) if overheads
            else None,
            "per_toss": runs}
    base = report.get("particles")  # the particle step at its automatic batch size
    for row in report.values():
        row["over_particles"] = row["wall_s"] / base["wall_s"] if base else None
    return report


def format_beliefs_report(report: dict) -> str:
    """The lines ``residualsim bench beliefs`` prints for :func:`bench_beliefs`'s report
    (wall over simulated time, the bare-loop floor, particle outcomes, per-method rows)."""
    lines: list[str] = []
    lines.append(f"{report['n_trajectories']} validation tosses, {report['simulated_s']:.2f} s "
                 f"simulated, {report['particles']} particles, {report['workers']} workers:")
    lines.append(f"  wall / simulated time: residual {report['residual_over_real_time']:.2f}, "
                 f"engine alone {report['engine_over_real_time']:.2f} (below 1: faster than real "
                 f"time); residual / engine {report['residual_over_engine']:.2f}")
    floor = ", ".join(f"{ratio:.2f} at {n} substep{'s' if n != '1' else ''}"
                      for n, ratio in report["bare_over_real_time"].items())
    lines.append(f"  floor, the bare engine loop (step and read the pose only): {floor}")
    lines.append(f"  beliefs: {report['propagated']} particles propagated to their next event, "
                 f"{report['accepted']} accepted, {report['rejected_penetration']} rejected for "
                 f"penetration, {report['rejected_energy']} for energy gain "
                 f"(fraction {report['rejected_fraction']:.4f}), {report['no_event']} met no event")
    for name, row in report.get("methods", {}).items():
        lines.append(f"  {name:>18}: {row['over_real_time']:.3f} x real time, {row['rollouts']} "
                     f"rollouts, distance to the {report['reference_particles']}-particle "
                     f"reference {row['distance_to_reference']:.3f} (summed over contacts)"
                     + ("" if row.get("over_particles") is None else
                        f"; time / particles {row['over_particles']:.3f}"))
        if row["overhead"] is not None:
            lines.append(f"  {'':>18}  {row['engine_steps']} engine steps; bare PyBullet loop "
                         f"over them {row['bare_s']:.2f} s; overhead = method / bare "
                         f"{row['overhead']:.2f} (its rollouts alone {row['rollout_s']:.2f} s:"
                         f" {row['rollout_overhead']:.2f})")
            if len(row["overheads"]) > 1:
                lines.append(f"  {'':>18}  median of {len(row['overheads'])} repeats; "
                             f"overhead {min(row['overheads']):.2f}-"
                             f"{max(row['overheads']):.2f} over the repeats")
    rows = report.get("methods", {})
    for label, lone in rows.items():  # batch=1 beside automatic batches: the speed-up
        batched = rows.get(label.replace("batch=1,", "").replace("[batch=1]", ""))
        if "batch=1" in label and batched and batched["wall_s"] > 0:
            lines.append(f"  {'':>18}  {label}: automatic batches "
                         f"{lone['wall_s'] / batched['wall_s']:.2f}x faster than one at a time")
    return "\n".join(lines)
