"""Benchmarks that print ratios against a baseline measured in the same run.

These machines are noisy, so nothing here asserts a time: each figure is the best of
several interleaved repeats, reported next to its baseline.

* wrapper overhead: :meth:`Engine.rollout` (step, read state, detect contacts) against a
  raw PyBullet loop doing the same calls on the same world, and :meth:`Engine.step` against
  bare ``stepSimulation``, at 1 substep and at the scene's default.
* worker speed-up: simulating a set of tosses with 1 and 2 persistent worker processes.
* calibration: the cost of a Metropolis-Hastings step with 1 and 2 workers, and real
  chains with and without delayed acceptance (:mod:`.bench_calibration`).

The engine and calibration benches run on any scene (the cube, a planar scene, a scene
file or a ``.urdf``): :func:`bench_engine_job` and :func:`.bench_calibration_job` are the
``bench engine`` and ``bench calibration`` commands, recordings loaded as every command
loads them (:func:`residualsim.sim.recordings.load_recordings`).
* residual rollouts against the calibrated engine alone (:func:`bench_residual`).
* executors: training evaluations per second with 1 and 2 local workers and 2 Ray actors,
  and the cost of one map call on each (:func:`bench_executors`).
* arm + loop stiffness identification: generate, identify, error and wall time
  (:func:`bench_identify_loop`).
* beliefs: particles through whole real tosses against real time, the engine alone and the
  bare PyBullet loop, with the belief filter's rejection counts (:func:`bench_beliefs`, in
  :mod:`.bench_beliefs`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping

import numpy as np
from residualsim.sim.bullet import pb

from residualsim.data.datasets import resolve_data
from residualsim.data.trajectory import Trajectory
from residualsim.errors import DataError
from residualsim.experiments.bench_beliefs import bench_beliefs, format_beliefs_report
from residualsim.sim.engine import Engine
from residualsim.sim.recordings import load_recordings
from residualsim.sim.rollout import simulate_one, recording_settings, simulation_items
from residualsim.sim.scenes import make_scene, parse_params
from residualsim.sim.synthesize import toss_states
from residualsim.sim.pool import engine_workers

__all__ = ["bench_engine_overhead", "bench_workers", "bench_residual", "bench_executors",
           "bench_identify_loop", "bench_beliefs", "bench_engine_job", "format_engine_report",
           "format_residual_report", "format_beliefs_report"]


def _best_of(function, repeats: int) -> float:
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def _raw_rollout(engine: Engine, state: np.ndarray, n_steps: int) -> list:
    """What a user would write by hand: reset, then step, read the state (pose and velocity
    of the base and the joints; a planar scene's three joints), query contacts."""
    engine.reset(state)
    scene = engine.scene
    cid, body, table, link = engine.client, scene.body, scene.static_body, scene.link
    step, contacts, joint_states = pb.stepSimulation, pb.getContactPoints, pb.getJointStates
    records = []
    if scene.planar:
        joints = list(range(pb.getNumJoints(body, physicsClientId=cid)))
        for _ in range(n_steps):
            step(physicsClientId=cid)
            records.append((joint_states(body, joints, physicsClientId=cid),
                            contacts(body, table, link, -1, physicsClientId=cid)))
        return records
    joints = list(getattr(getattr(scene, "info", None), "joint_indices", ()))
    pose, velocity = pb.getBasePositionAndOrientation, pb.getBaseVelocity
    for _ in range(n_steps):
        step(physicsClientId=cid)
        records.append((pose(body, physicsClientId=cid), velocity(body, physicsClientId=cid),
                        joint_states(body, joints, physicsClientId=cid) if joints else (),
                        contacts(body, table, link, -1, physicsClientId=cid)))
    return records


def bench_engine_overhead(n_tosses: int = 20, n_steps: int = 110, repeats: int = 5,
                          substeps: tuple[int, ...] | None = None, scene: str = "cube") -> dict:
    """Time per step of the wrapper against raw PyBullet on the same sampled tosses of
    ``scene`` (:func:`residualsim.sim.synthesize.toss_states`).

    Returns, per substep count (default: 1 and the scene's own), microseconds per step for
    the raw loop and the wrapper's rollout and their ratio, plus the same for bare stepping
    (``Engine.step``).
    """
    layout = make_scene(scene)
    if substeps is None:
        substeps = tuple(sorted({1, layout.settings.substeps}))
    states = toss_states(scene, n_tosses, rng=0)
    report: dict = {}
    for count in substeps:
        settings = dataclasses.replace(layout.settings, substeps=count)
        engine = Engine(scene, settings=settings)
        total = n_tosses * n_steps

        def raw() -> None:
            for state in states:
                _raw_rollout(engine, state, n_steps)

        def wrapped() -> None:
            for state in states:
                engine.rollout(state, n_steps)

        def raw_step() -> None:
            engine.reset(states[0])
            for _ in range(total):
                pb.stepSimulation(physicsClientId=engine.client)

        def wrapped_step() -> None:
            engine.reset(states[0])
            engine.step(total)

        times = {name: np.inf for name in ("raw", "wrapped", "raw_step", "wrapped_step")}
        for _ in range(repeats):  # interleave so load changes hit both alike
            for name, fn in (("raw", raw), ("wrapped", wrapped), ("raw_step", raw_step),
                             ("wrapped_step", wrapped_step)):
                times[name] = min(times[name], _best_of(fn, 1))
        engine.close()
        report[f"substeps_{count}"] = {
            "rollout_raw_us_per_step": 1e6 * times["raw"] / total,
            "rollout_wrapper_us_per_step": 1e6 * times["wrapped"] / total,
            "rollout_ratio": times["wrapped"] / times["raw"],
            "step_raw_us": 1e6 * times["raw_step"] / total,
            "step_wrapper_us": 1e6 * times["wrapped_step"] / total,
            "step_ratio": times["wrapped_step"] / times["raw_step"],
        }
    return report


def bench_workers(trajectories: Mapping[str, Trajectory], params=None,
                  worker_counts: tuple[int, ...] = (1, 2), repeats: int = 2,
                  scene: str = "cube") -> dict:
    """Seconds to simulate every trajectory (recordings of ``scene``) with 1 and 2
    persistent worker processes.

    ``map_s`` is one simulation pass over the set with the pool already running (what a
    calibration likelihood pays per evaluation); ``startup_s`` is starting the pool.
    """
    params = parse_params(params)
    items = simulation_items(scene, trajectories)
    settings = recording_settings(scene, trajectories)
    report: dict = {"n_trajectories": len(items),
                    "n_samples": int(sum(item[2] for item in items))}
    reference = None
    for count in worker_counts:
        start = time.perf_counter()
        with engine_workers(scene, items, count, settings) as pool:
            startup = time.perf_counter() - start
            results = pool.map(simulate_one, params)  # warm-up, and the check below
            seconds = _best_of(lambda: pool.map(simulate_one, params), repeats)
        states = [r.states for r in results]
        if reference is None:
            reference = states
        identical = all(np.array_equal(a, b) for a, b in zip(reference, states))
        report[f"workers_{count}"] = {"map_s": seconds, "startup_s": startup,
                                      "identical_to_first": identical}
    first = report[f"workers_{worker_counts[0]}"]["map_s"]
    for count in worker_counts[1:]:
        report[f"speedup_{count}_over_{worker_counts[0]}"] = first / report[f"workers_{count}"]["map_s"]
    return report


def _recordings(data, scene: str) -> dict[str, Trajectory]:
    """The recordings of ``scene`` in ``data`` (``--data``, else the scene's set), loaded and
    checked as every command loads them; DataError when there are none or they do not fit."""
    from residualsim.data import detect_format

    path = resolve_data(data, scene)
    if detect_format(path) == "mcube":
        raise DataError(f"{path}: the planar impact set holds single impacts; the engine and "
                        f"calibration benches replay trajectory recordings of scene {scene!r}")
    recordings = load_recordings(path, scene)
    if not recordings:
        raise DataError(f"{path}: no recordings")
    return recordings


def bench_engine_job(scene: str = "cube", data=None, n_tosses: int = 20,
                     repeats: int = 5) -> dict:
    """``bench engine``: :func:`bench_engine_overhead` on ``scene`` and, over its recordings
    in ``data``, :func:`bench_workers`. Without ``data`` the scene's set below
    ``$RESIDUALSIM_DATA`` is used, or, when there is none (or it holds no trajectories:
    the planar impact set), the worker bench is skipped (``workers_skipped`` says why).
    An unknown scene (SceneError) or recordings in ``data`` that do not fit it (DataError)
    are refused before anything is timed."""
    layout = make_scene(scene)
    trajectories, skipped = None, None
    try:
        trajectories = _recordings(data, scene)
    except DataError as exc:
        if data:
            raise
        skipped = str(exc)
    report: dict = {"scene": scene, "scene_name": layout.name,
                    "overhead": bench_engine_overhead(n_tosses=n_tosses, repeats=repeats,
                                                      scene=scene)}
    if trajectories is None:
        report["workers_skipped"] = skipped
    else:
        report["workers"] = bench_workers(trajectories, scene=scene)
    return report


def format_engine_report(report: Mapping) -> str:
    """The lines ``bench engine`` prints for :func:`bench_engine_job`'s report."""
    lines = [f"scene {report['scene_name']} ({report['scene']})"]
    for key, row in report["overhead"].items():
        lines.append(
            f"{key:>12}: rollout {row['rollout_wrapper_us_per_step']:7.2f} us/step vs raw "
            f"{row['rollout_raw_us_per_step']:7.2f} -> ratio {row['rollout_ratio']:.3f};  "
            f"step {row['step_wrapper_us']:7.2f} vs {row['step_raw_us']:7.2f} -> ratio "
            f"{row['step_ratio']:.3f}")
    workers = report.get("workers")
    if workers is None:
        lines.append(f"worker speed-up skipped: {report['workers_skipped']}")
    else:
        lines.append(
            f"{workers['n_trajectories']} recordings ({workers['n_samples']} samples): 1 "
            f"worker {workers['workers_1']['map_s']:.2f} s, 2 workers "
            f"{workers['workers_2']['map_s']:.2f} s -> speed-up "
            f"{workers['speedup_2_over_1']:.2f}x (results identical: "
            f"{workers['workers_2']['identical_to_first']})")
    return "\n".join(lines)


def bench_residual(model, trajectories: Mapping[str, Trajectory], repeats: int = 5,
                   samples: int = 4) -> dict:
    """Cost of residual rollouts against the model's calibrated engine alone, same tosses.

    One process, one engine at the model's settings, interleaved repeats (best of each):

    * ``engine_poses``: :meth:`Engine.rollout_poses`, the leanest engine-only loop (what
      calibration runs);
    * ``engine_rollout``: :meth:`Engine.rollout`, the engine with its contact-event
      bookkeeping (what ``simulate`` runs);
    * ``residual_mean``: Algorithm 1 in deterministic mode;
    * ``residual_sample``: Algorithm 1 in stochastic mode (per sample).

    Returns seconds per toss for each and the ratios of the residual modes to both
    engine baselines, plus the number of events per toss.
    """
    from residualsim.sim.rollout import residual_rollout

    settings = recording_settings(model.layout, trajectories, model.substeps)
    engine = Engine(model.layout, params=model.params, settings=settings)
    policy = model.policy.numpy()
    cases = [(engine.scene.state_from_trajectory(t, 0), t.n_samples - 1)
             for t in trajectories.values()]
    events = [residual_rollout(engine, s, n, policy, None, model.guard).n_events
              for s, n in cases]

    def run(kind: str) -> None:
        for index, (state, n_steps) in enumerate(cases):
            if kind == "engine_poses":
                engine.rollout_poses(state, n_steps)
            elif kind == "engine_rollout":
                engine.rollout(state, n_steps)
            elif kind == "residual_mean":
                residual_rollout(engine, state, n_steps, policy, None, model.guard)
            else:
                for sample in range(samples):
                    residual_rollout(engine, state, n_steps, policy,
                                     np.random.default_rng([0, index, sample]), model.guard)

    kinds = ("engine_poses", "engine_rollout", "residual_mean", "residual_sample")
    best = dict.fromkeys(kinds, np.inf)
    for _ in range(repeats):
        for kind in kinds:
            best[kind] = min(best[kind], _best_of(lambda: run(kind), 1))
    engine.close()
    per_toss = {k: v / len(cases) for k, v in best.items()}
    per_toss["residual_sample"] /= samples
    return {
        "scene": model.scene, "n_trajectories": len(cases), "substeps": model.substeps,
        "repeats": repeats,
        "events_per_toss": float(np.mean(events)),
        "seconds_per_toss": per_toss,
        "mean_over_engine_poses": per_toss["residual_mean"] / per_toss["engine_poses"],
        "mean_over_engine_rollout": per_toss["residual_mean"] / per_toss["engine_rollout"],
        "sample_over_engine_poses": per_toss["residual_sample"] / per_toss["engine_poses"],
        "sample_over_engine_rollout": per_toss["residual_sample"] / per_toss["engine_rollout"],
    }


def _noop(engine, item, payload) -> None:
    """Worker function doing nothing: what a map call costs beyond the work itself."""
    return None


def bench_executors(model, trajectories: Mapping[str, Trajectory], candidates: int = 8,
                    repeats: int = 3, noop_calls: int = 50,
                    configs: tuple[tuple[str, int], ...] = (("local", 1), ("local", 2),
                                                            ("ray", 2))) -> dict:
    """Training evaluations per second on each backend, and the cost of a map call.

    For each (backend, workers) in ``configs`` one pool is built over the recordings (as
    :func:`residualsim.residual.train.train_residual` does) and a batch of ``candidates`` policy
    weight vectors (the model's, perturbed with a fixed seed) is evaluated in mean mode:
    ``evals_per_s`` is the best of ``repeats`` batches. ``noop_ms`` is one map call of a
    function that does nothing over the same items (messaging and scheduling only), best
    of ``noop_calls``; ``startup_s`` starts the pool (for Ray, plus starting Ray itself
    when no Ray runs yet: ``ray_init_s``). Ratios are against the first config; every
    config's errors must equal the first's bit for bit (``identical_to_first``).
    """
    from residualsim.sim.rollout import RolloutRequest, residual_errors, trajectory_items
    from residualsim.parallel import Backend

    settings = recording_settings(model.layout, trajectories, model.substeps)
    items = trajectory_items(model.layout, trajectories, "train")
    theta = model.policy.get_flat()
    noise = np.random.default_rng(0).normal(0.0, 0.05, (candidates, theta.size))
    policies = tuple(model.policy.set_flat(theta + row).numpy() for row in noise)
    model.policy.set_flat(theta)
    request = RolloutRequest(params=model.params, policies=policies, guard=model.guard)
    report: dict = {"n_trajectories": len(items), "substeps": model.substeps,
                    "candidates": candidates, "repeats": repeats}
    reference = None
    for name, count in configs:
        key = f"{name}_{count}"
        row: dict = {}
        if name == "ray":
            from residualsim.parallel.ray_transport import ensure_ray

            start = time.perf_counter()
            ensure_ray(None, count)
            row["ray_init_s"] = time.perf_counter() - start
        start = time.perf_counter()
        with engine_workers(model.layout, items, count, settings, backend=Backend(name)) as pool:
            pool.map(_noop)  # the first call waits for every worker to be up
            row["startup_s"] = time.perf_counter() - start
            table = np.array(pool.map(residual_errors, request))
            seconds = _best_of(lambda: pool.map(residual_errors, request), repeats)
            row["noop_ms"] = 1e3 * _best_of(lambda: pool.map(_noop), noop_calls)
        row["evals_per_s"] = candidates / seconds
        row["seconds_per_batch"] = seconds
        if reference is None:
            reference = table
        row["identical_to_first"] = bool(np.array_equal(reference, table))
        report[key] = row
    first = report[f"{configs[0][0]}_{configs[0][1]}"]
    for name, count in configs[1:]:
        row = report[f"{name}_{count}"]
        row["speedup_over_first"] = row["evals_per_s"] / first["evals_per_s"]
    if ("local", 2) in configs and ("ray", 2) in configs:
        report["ray_over_local_noop"] = report["ray_2"]["noop_ms"] / report["local_2"]["noop_ms"]
        report["ray_over_local_evals"] = (report["ray_2"]["evals_per_s"]
                                          / report["local_2"]["evals_per_s"])
    return report


def bench_identify_loop(method: str = "lsq", seed_kappa=(5.0, 5.0), n_links: int = 12,
                        n_workers: int = 2, estimate_offsets: bool = False,
                        offset_rad: float = 0.0, rng: int = 0,
                        recording_dir: str | None = None) -> dict:
    """Generate an arm-loop recording (``n_links`` generating loop, sensor noise), identify
    κ from ``seed_kappa`` with ``method`` and compare with the truth (the 12-link
    equivalent of the generating springs). Returns the figures as a JSON-ready dict."""
    import tempfile

    from residualsim.data.joint_recording import load_joint_recording
    from residualsim.sysid.loop_stiffness import ReplayConfig, identify_stiffness
    from residualsim.sim.synthesize import synthesize_arm_loop

    with tempfile.TemporaryDirectory() as scratch:
        directory = recording_dir or scratch
        start = time.perf_counter()
        substeps = ReplayConfig().substeps if n_links == 12 else 10
        path = synthesize_arm_loop(directory, n_links=n_links, substeps=substeps,
                                   offset_rad=offset_rad, rng=rng)
        generate_s = time.perf_counter() - start
        recording = load_joint_recording(path)
    truth = np.array(recording.metadata["kappa_truth_12"])
    result = identify_stiffness(recording, method, seed_kappa, n_workers=n_workers,
                                estimate_offsets=estimate_offsets, rng=rng)
    out = result.as_json()
    out.update(truth=truth.tolist(), seed_kappa=list(map(float, seed_kappa)),
               rel_error=((result.kappa - truth) / truth).tolist(),
               generator_n_links=n_links, generate_s=round(generate_s, 2),
               workers=n_workers)
    if result.posterior is not None:
        samples = result.posterior.samples.reshape(-1, 2)
        out["interval_90"] = np.percentile(samples, [5, 95], axis=0).T.tolist()
    return out


def format_residual_report(report: dict) -> str:
    """The lines ``residualsim bench residual`` prints for :func:`bench_residual`'s report
    (milliseconds per toss and the residual's cost over the engine's)."""
    lines: list[str] = []
    times = report["seconds_per_toss"]
    lines.append(f"{report['n_trajectories']} validation tosses, {report['substeps']} substeps, "
                 f"{report['events_per_toss']:.2f} events per toss; ms per toss:")
    for key, value in times.items():
        lines.append(f"  {key:>16}: {1000 * value:7.3f}")
    lines.append(f"  residual (mean) / engine: {report['mean_over_engine_poses']:.3f} (lean "
                 f"loop), {report['mean_over_engine_rollout']:.3f} (Engine.rollout); per "
                 f"stochastic sample {report['sample_over_engine_poses']:.3f} / "
                 f"{report['sample_over_engine_rollout']:.3f}")
    return "\n".join(lines)
