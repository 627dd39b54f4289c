"""``residualsim bench mpec``: the seed's experiments (Berard & Trinkle 2008) on synthetic
point masses, the MPEC against our bootstrap particle filter.

* single particle falling and sliding: μ = 0.2, h = 0.05 s, q₀ = (0, 3) m, ν₀ = 0,
  λ_app = (5, -9.81 m) N, m = 1 kg, N = 100 steps, uniform observation noise in [-ε, ε]
  for ε = 5e-5 ... 5e-1 m (the seed: 0.2, 0.2, 0.2, 0.200022, 0.199873);
* 2, 3, 5 and 10 particles, x₀ ∈ [-10, 10] m, y₀ ∈ [0, 5] m, μ ∈ (0, 0.5] uniform, noise
  in [-0.005, 0.005] m (the seed's μ RMSE ≈ 6e-6 to 7e-6).

The MPEC runs with the noise box |n| <= ε (:func:`~residualsim.sysid.mpec.identify_particles`);
the filter is :func:`~residualsim.sysid.mpec.filter_mu`. Every draw comes from one seed.

With real cube tosses (:func:`bench_mpec_cube`, ``bench mpec --cube-tosses N --data DIR``):
the cube MPEC (:func:`~residualsim.sysid.mpec.identify_tosses`, what ``calibrate --method
mpec --scene cube --max-trajectories N`` runs) on the first N tosses of the training split,
timed, against Metropolis-Hastings on the same tosses in the same run: seconds per sampler
step (one likelihood call evaluating ``mh_chains`` parameter sets over every toss, as
:class:`~residualsim.sysid.mcmc.MetropolisHastings` does) measured over ``probe_steps``
steps after a warm-up step (half before the MPEC, half after), projected to ``mh_steps`` (calibrate's default 1000 burn-in +
3000 samples). Both use ``n_workers`` processes; the MPEC's time includes starting its
workers and compiling its programs, MH's projection excludes starting its engines. On a
shared machine the wall-time ratio moves with the others' load, so the CPU-time ratio (this
process and the workers, from /proc and getrusage) is reported beside it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from residualsim.sysid.mcmc import as_generator
from residualsim.sysid.mpec import filter_mu, identify_particles, make_particle_recording

__all__ = ["bench_mpec", "bench_mpec_cube", "format_mpec_report", "SINGLE_NOISE_LEVELS",
           "MULTI_COUNTS"]

SINGLE_NOISE_LEVELS = (5e-5, 5e-4, 5e-3, 5e-2, 5e-1)
MULTI_COUNTS = (2, 3, 5, 10)
_FORCE = (5.0, -9.81)


def _solve_row(estimate) -> dict[str, Any]:
    report = estimate.report
    solves = report["solves"]
    flat = [s for group in solves for s in group] if solves and isinstance(solves[0], list) \
        else solves
    return {"iterations": report["iterations"], "solver_seconds": report["solver_seconds"],
            "n_solves": len(flat), "violation": report["complementarity_violation"],
            "status": report["solver_status"],
            "iterations_per_solve": [s["iterations"] for s in flat],
            "seconds_per_solve": [round(s["seconds"], 4) for s in flat]}


def bench_mpec(noise_levels: Sequence[float] = SINGLE_NOISE_LEVELS,
               counts: Sequence[int] = MULTI_COUNTS, multi_noise: float = 0.005,
               filter_particles: int = 2000, rng: int | np.random.Generator | None = 0
               ) -> dict[str, Any]:
    """Run both experiments; return rows and the headline figures (see the module)."""
    rng = as_generator(rng)
    started = time.perf_counter()
    single = []
    for eps in noise_levels:
        recording = make_particle_recording([0.2], [0.0, 3.0], _FORCE, h=0.05, n_steps=100,
                                            noise=eps, rng=rng)
        estimate = identify_particles(recording, noise_bound=eps)
        pf = filter_mu(recording, filter_particles, rng=rng)
        single.append({"noise": eps, "mu_true": 0.2, "mu_mpec": float(estimate.mu[0]),
                       "mu_error": float(abs(estimate.mu[0] - 0.2)),
                       "mu_filter": float(pf.mu[0]), "filter_error": float(abs(pf.mu[0] - 0.2)),
                       "filter_seconds": pf.seconds, **_solve_row(estimate)})
    multi = []
    for count in counts:
        mu = rng.uniform(0.0, 0.5, count)
        mu[mu == 0.0] = 0.5  # (0, 0.5]
        q0 = np.column_stack([rng.uniform(-10, 10, count), rng.uniform(0, 5, count)])
        recording = make_particle_recording(mu, q0, _FORCE, noise=multi_noise, rng=rng)
        estimate = identify_particles(recording, noise_bound=multi_noise)
        pf = filter_mu(recording, filter_particles, rng=rng)
        multi.append({"particles": count, "mu_true": mu.tolist(),
                      "mu_mpec": estimate.mu.tolist(),
                      "mu_rmse": float(np.sqrt(np.mean((estimate.mu - mu) ** 2))),
                      "mu_max_error": float(np.max(np.abs(estimate.mu - mu))),
                      "filter_rmse": float(np.sqrt(np.mean((pf.mu - mu) ** 2))),
                      "filter_seconds": pf.seconds, **_solve_row(estimate)})
    up_to = [row["mu_error"] for row in single if row["noise"] <= 5e-2]
    return {"single": single, "multi": multi,
            "max_mu_error": float(max(up_to)) if up_to else float("nan"),
            "multi_mu_rmse": float(max(row["mu_rmse"] for row in multi)) if multi else
            float("nan"),
            "multi_mu_max_error": float(max(row["mu_max_error"] for row in multi)) if multi
            else float("nan"),
            "seconds": time.perf_counter() - started}


def bench_mpec_cube(data: str, n_tosses: int = 100, n_workers: int = 2, mh_chains: int = 2,
                    mh_steps: int = 4000, mh_substeps: int = 1, probe_steps: int = 20
                    ) -> dict[str, Any]:
    """The cube MPEC against Metropolis-Hastings on the same tosses (see the module):
    MPEC seconds and estimates, MH seconds per step and projected seconds, their ratio."""
    from residualsim.sim.scenes import EngineParams
    from residualsim.sysid.calibration_data import load_calibration_data
    from residualsim.sysid.likelihood import TrajectoryLikelihood
    from residualsim.sysid.mpec import identify_tosses

    if probe_steps < 2:
        raise ValueError(f"probe_steps must be >= 2 (half before, half after), got {probe_steps}")
    train = load_calibration_data("cube", Path(data), "train", n_tosses).train
    rng = np.random.default_rng(0)
    batches = [[EngineParams(lateral_friction=float(m), restitution=float(e))
                for m, e in zip(rng.uniform(0.1, 0.4, mh_chains), rng.uniform(0, 0.5, mh_chains))]
               for _ in range(probe_steps + 1)]

    def probe(steps: list) -> tuple[float, float]:
        """MH wall and CPU seconds per step over ``steps`` (after a warm-up step)."""
        with TrajectoryLikelihood("cube", train, mh_substeps, n_workers=n_workers) as likelihood:
            likelihood.errors(batches[0])
            pids = [p for p in likelihood._pool.pids() if p != os.getpid()]
            cpu, started = time.process_time() + _cpu_seconds(pids), time.perf_counter()
            for batch in steps:
                likelihood.errors(batch)
            return ((time.perf_counter() - started) / len(steps),
                    (time.process_time() + _cpu_seconds(pids) - cpu) / len(steps))

    # MH probed before and after the MPEC, half the steps each, so that a change in the
    # machine's load during the run weighs on both sides of the ratio
    load = [os.getloadavg()[0]]
    before, before_cpu = probe(batches[1:1 + probe_steps // 2])
    cpu, started = time.process_time() + _children_cpu_seconds(), time.perf_counter()
    estimate = identify_tosses(train, n_workers=n_workers)
    mpec_seconds = time.perf_counter() - started
    mpec_cpu = time.process_time() + _children_cpu_seconds() - cpu  # its workers have ended
    after, after_cpu = probe(batches[1 + probe_steps // 2:])
    load.append(os.getloadavg()[0])
    per_step, per_step_cpu = (before + after) / 2, (before_cpu + after_cpu) / 2
    report = estimate.report
    return {"n_tosses": len(train), "n_windows": report["n_windows"], "n_workers": n_workers,
            "mpec_seconds": mpec_seconds, "mu": estimate.mu, "restitution": estimate.restitution,
            "iterations": report["iterations"], "status": report["solver_status"],
            "violation": report["complementarity_violation"], "mh_chains": mh_chains,
            "mh_substeps": mh_substeps, "mh_steps": mh_steps, "mh_probe_steps": probe_steps,
            "mh_seconds_per_step": per_step, "mh_seconds_per_step_before_after": [before, after],
            "mh_projected_seconds": per_step * mh_steps, "load_average_1min": load,
            "speedup_over_mh": per_step * mh_steps / mpec_seconds,
            "mpec_cpu_seconds": mpec_cpu, "mh_cpu_seconds_per_step": per_step_cpu,
            "cpu_ratio": per_step_cpu * mh_steps / mpec_cpu}


def _cpu_seconds(pids: Sequence[int]) -> float:
    """CPU seconds (user + system) used so far by running processes (Linux /proc; NaN
    elsewhere)."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _children_cpu_seconds() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def format_mpec_report(report: dict) -> str:
    """The table ``residualsim bench mpec`` prints for a :func:`bench_mpec` report."""
    lines = ["noise      mu MPEC     |error|   filter    iters  solve s  violation"]
    for row in report["single"]:
        lines.append(f"{row['noise']:<8.0e} {row['mu_mpec']:.6f} {row['mu_error']:9.2e} "
                     f"{row['mu_filter']:.4f} {row['iterations']:7d} "
                     f"{row['solver_seconds']:7.2f} {row['violation']:9.1e}")
    for row in report["multi"]:
        lines.append(f"{row['particles']:2d} particles: mu RMSE MPEC {row['mu_rmse']:.2e}, "
                     f"filter {row['filter_rmse']:.2e}; {row['iterations']} iterations, "
                     f"{row['solver_seconds']:.2f} s")
    cube = report.get("cube")
    if cube:
        lines.append(
            f"cube, {cube['n_tosses']} tosses ({cube['n_windows']} windows, {cube['n_workers']} "
            f"workers): MPEC mu {cube['mu']:.4f}, e {cube['restitution']:.4f} in "
            f"{cube['mpec_seconds']:.1f} s ({cube['iterations']} IPOPT iterations, "
            f"{cube['status']}); MH {cube['mh_chains']} chains, {cube['mh_substeps']} substep(s): "
            f"{cube['mh_seconds_per_step']:.4f} s/step -> {cube['mh_projected_seconds']:.0f} s "
            f"for {cube['mh_steps']} steps; MPEC {cube['speedup_over_mh']:.1f}x faster (CPU "
            f"time: {cube['cpu_ratio']:.1f}x; load average {cube['load_average_1min'][0]:.1f})")
    return "\n".join(lines)
