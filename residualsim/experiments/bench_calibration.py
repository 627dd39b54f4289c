"""The cost of a Metropolis-Hastings calibration (``residualsim bench calibration``).

:func:`bench_calibration` times likelihood calls as a sampler makes them (1 and 2 workers,
the share spent outside ``stepSimulation``); :func:`bench_sampler` runs real chains, plain
and with delayed acceptance, from the same start in the same run, and reports seconds per
step, the projection to a full run and the effective samples per minute.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np
from residualsim.sim.bullet import pb

from residualsim.data.trajectory import Trajectory
from residualsim.experiments.bench import _best_of, _recordings
from residualsim.sim.engine import Engine
from residualsim.sim.rollout import recording_settings, simulation_items
from residualsim.sim.scenes import make_scene

__all__ = ["bench_calibration", "bench_sampler", "bench_calibration_job",
           "format_calibration_report"]


def bench_calibration(trajectories: Mapping[str, Trajectory], substeps: int = 1,
                      n_chains: int = 2, steps: int = 1000 + 3000, probe_steps: int = 20,
                      worker_counts: tuple[int, ...] = (1, 2), scene: str = "cube") -> dict:
    """Cost of a Metropolis-Hastings calibration over ``trajectories`` (recordings of
    ``scene``).

    For each worker count, the seconds per sampler step (one likelihood call evaluating
    ``n_chains`` parameter sets over all trajectories, as :class:`MetropolisHastings` does)
    over ``probe_steps`` steps, and the projected time of ``steps`` steps; the speed-up of
    the later worker counts over the first; and, in this process, the share of a likelihood
    evaluation spent outside ``stepSimulation`` (against a loop doing only the resets and
    ``stepSimulation`` calls of the same rollouts).
    """
    from residualsim.sysid.likelihood import TrajectoryLikelihood
    from residualsim.sim.scenes import EngineParams

    rng = np.random.default_rng(0)
    batches = [[EngineParams(lateral_friction=float(m), restitution=float(e))
                for m, e in zip(rng.uniform(0.1, 0.4, n_chains), rng.uniform(0, 0.5, n_chains))]
               for _ in range(probe_steps)]
    report: dict = {"scene": scene, "n_trajectories": len(trajectories), "substeps": substeps,
                    "n_chains": n_chains, "steps": steps}
    reference = None
    for count in worker_counts:
        with TrajectoryLikelihood(scene, trajectories, substeps, n_workers=count) as lik:
            lik.errors(batches[0])  # warm-up
            start = time.perf_counter()
            errors = [lik.errors(batch) for batch in batches]
            per_step = (time.perf_counter() - start) / probe_steps
        reference = errors if reference is None else reference
        report[f"workers_{count}"] = {
            "seconds_per_step": per_step, "projected_minutes": per_step * steps / 60.0,
            "identical_to_first": all(np.array_equal(a, b) for a, b in zip(reference, errors))}
    first = report[f"workers_{worker_counts[0]}"]["seconds_per_step"]
    for count in worker_counts[1:]:
        report[f"speedup_{count}_over_{worker_counts[0]}"] = (
            first / report[f"workers_{count}"]["seconds_per_step"])
    # Share outside stepSimulation, in this process.
    settings = recording_settings(scene, trajectories, substeps)
    items = simulation_items(scene, trajectories)
    with TrajectoryLikelihood(scene, trajectories, substeps, n_workers=1) as lik:
        engine = Engine(scene, params=batches[0][0], settings=settings)

        def steps_only() -> None:
            cid = engine.client
            for _, state, n_samples in items:
                engine.reset(state)
                for _ in range(n_samples - 1):
                    pb.stepSimulation(physicsClientId=cid)

        full = step = np.inf
        for _ in range(3):  # interleaved
            full = min(full, _best_of(lambda: lik.errors(batches[0][:1]), 1))
            step = min(step, _best_of(steps_only, 1))
        engine.close()
    report["ms_per_trajectory"] = 1e3 * full / len(items)
    report["step_only_ms_per_trajectory"] = 1e3 * step / len(items)
    report["share_outside_step"] = 1.0 - step / full
    return report


def bench_sampler(trajectories: Mapping[str, Trajectory], scene: str = "cube",
                  substeps: int = 1, n_chains: int = 2, steps: int = 1000 + 3000,
                  sampler_steps: int = 200, fraction: float = 0.25, n_workers: int = 2,
                  seed: int = 0) -> dict:
    """Real Metropolis-Hastings runs over ``trajectories`` (friction and restitution), plain
    and with delayed acceptance screening on ``fraction`` of the recordings, in the same
    run: each ``sampler_steps`` // 4 burn-in + the rest kept, from the same start (the
    median of a first plain run of that length, so both time the chain in the posterior).
    Reports seconds per step, the projection to ``steps`` steps, acceptance, the share of
    proposals completed in full and the bulk ESS per minute (smallest over parameters)."""
    from residualsim.sysid.likelihood import StagedLikelihood, TrajectoryLikelihood
    from residualsim.sysid.mcmc import MetropolisHastings
    from residualsim.sysid.paramspace import ParamSpace

    space = ParamSpace(["lateral_friction", "restitution"])
    burn_in = sampler_steps // 4
    report: dict = {"sampler_steps": sampler_steps, "fraction": fraction,
                    "n_workers": n_workers}
    start = None
    for label in ("warm-up", "plain", "delayed"):
        if label == "delayed":
            likelihood = StagedLikelihood(scene, trajectories, fraction, seed=seed,
                                          substeps=substeps, n_workers=n_workers)
        else:
            likelihood = TrajectoryLikelihood(scene, trajectories, substeps,
                                              n_workers=n_workers)
        with likelihood:
            def log_like(x):
                return likelihood([space.engine_params(row) for row in x])

            log_like(np.array([[0.3, 0.3]] * n_chains))  # workers up before the clock

            screen = likelihood.screen(space.engine_params) if label == "delayed" else None
            sampler = MetropolisHastings(log_like, space, n_chains=n_chains, rng=seed,
                                         screen=screen)
            posterior = sampler.run(sampler_steps - burn_in, burn_in, initial=start)
        if label == "warm-up":
            median = posterior.median()
            start = [median[name] for name in space.names]
            report["start"] = median
            continue
        seconds = posterior.meta["seconds"]
        summary = posterior.summary()
        ess = min(summary["ess"].values())
        per_step = seconds / sampler_steps
        report[label] = {
            "seconds_per_step": per_step, "projected_minutes": per_step * steps / 60.0,
            "acceptance": float(np.mean(summary["acceptance"])),
            "completed_share": (posterior.meta["evaluations"] - n_chains)
            / (n_chains * sampler_steps),
            "ess": ess, "ess_per_minute": ess / ((seconds - burn_in * per_step) / 60.0),
            "median": summary["median"]}
    report["speedup"] = (report["plain"]["seconds_per_step"]
                         / report["delayed"]["seconds_per_step"])
    return report


def bench_calibration_job(scene: str = "cube", data=None, n_tosses: int = 100,
                          sampler_steps: int = 0, fraction: float = 0.25,
                          **options) -> dict:
    """``bench calibration``: :func:`bench_calibration` over the first ``n_tosses``
    recordings of ``scene`` in ``data`` (default: the scene's set below
    ``$RESIDUALSIM_DATA``); ``options`` go to :func:`bench_calibration`; with
    ``sampler_steps`` also :func:`bench_sampler` (delayed acceptance at ``fraction``)."""
    make_scene(scene)
    trajectories = dict(list(_recordings(data, scene).items())[:n_tosses])
    report = bench_calibration(trajectories, scene=scene, **options)
    if sampler_steps:
        report["sampler"] = bench_sampler(
            trajectories, scene, substeps=options.get("substeps", 1),
            n_chains=options.get("n_chains", 2), steps=options.get("steps", 4000),
            sampler_steps=sampler_steps, fraction=fraction)
    return report


def format_calibration_report(report: Mapping) -> str:
    """The lines ``bench calibration`` prints for :func:`bench_calibration`'s report."""
    lines = [f"{report['scene']}: {report['n_trajectories']} recordings, {report['substeps']} "
             f"substep(s), {report['n_chains']} chains, {report['steps']} steps:"]
    for key, row in report.items():
        if key.startswith("workers_"):
            lines.append(f"  {key.replace('_', ' ')}: {row['seconds_per_step']:.3f} s/step -> "
                         f"{row['projected_minutes']:.1f} min (identical: "
                         f"{row['identical_to_first']})")
    lines.append(f"  speed-up 2 workers over 1: "
                 f"{report.get('speedup_2_over_1', float('nan')):.2f}x")
    lines.append(f"  one recording {report['ms_per_trajectory']:.2f} ms, of which "
                 f"stepSimulation {report['step_only_ms_per_trajectory']:.2f} ms -> share "
                 f"outside stepSimulation {report['share_outside_step']:.2f}")
    sampler = report.get("sampler")
    if sampler:
        lines.append(f"  real chains, {sampler['sampler_steps']} steps each from the same "
                     f"start, {sampler['n_workers']} workers:")
        for label in ("plain", "delayed"):
            row = sampler[label]
            lines.append(
                f"    {label:>7}: {row['seconds_per_step']:.3f} s/step -> "
                f"{row['projected_minutes']:.1f} min; acceptance {row['acceptance']:.2f}, "
                f"completed {row['completed_share']:.2f} of proposals, ESS {row['ess']:.0f}"
                f" -> {row['ess_per_minute']:.1f} per minute")
        lines.append(f"    delayed acceptance (screen {sampler['fraction']:.2f} of the "
                     f"recordings) over plain: {sampler['speedup']:.2f}x per step")
    return "\n".join(lines)
