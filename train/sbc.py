"""Simulation-based calibration (SBC) of the Metropolis-Hastings calibration of the cube.

    python train/sbc.py --out runs/sbc-fit.jsonl [--datasets 50] [--initial-state fit]
    python train/sbc.py --out runs/sbc-fit.jsonl --report      # histograms and p-values only
    python train/sbc.py --out runs/sbc-sand.jsonl --initial-state recorded --sampler sandwich

The posterior is MH's (``--sampler mh``, with ``--weighting`` choosing the likelihood:
``recording`` ν_i = 1, ``nu-only``, ``scalar``, ``curvature``, ``tempered`` or
``centred``, see :mod:`residualsim.sysid.weighting` and :func:`centred_adjustment`),
``calibrate --method sandwich``'s (``--sampler sandwich``) or the exact one of the
likelihood on a grid (``--sampler grid``). ``--small-sample cr1t`` widens the sandwich
envelope for few recordings (the t quantile of the cluster-robust CR1 correction,
:func:`residualsim.sysid.weighting.small_sample_inflation`) in ``centred`` and ``sandwich``.

Talts, Betancourt, Simpson, Vehtari and Gelman (2018), "Validating Bayesian inference
algorithms with simulation-based calibration". For each data set j (seeded by ``[seed,
j]``): draw the truth θ = (lateral friction, restitution) from the calibration prior (uniform
over ``--bounds``), synthesize ``--tosses`` cube tosses of ``--samples`` samples at
``--substeps`` substeps with ``--noise-m`` (m, per axis) / ``--noise-rad`` (rad) pose noise
(:func:`residualsim.sim.synthesize.synthesize_tosses`: exact velocities, noisy poses, as
``residualsim data synthesize``), sample the posterior with the same prior and the
likelihood ``calibrate --method mh`` uses (:class:`~residualsim.sysid.likelihood.
TrajectoryLikelihood`, ``--initial-state`` choosing how a recorded initial state is
treated), thin the kept draws to ``--draws`` L, and record the rank of the truth among them
(the number of draws below it, 0..L). If the sampler is right, every rank is equally likely;
a U-shaped histogram is an overconfident posterior, a one-sided one a biased posterior, a
hump an underconfident one.

One JSON line per finished data set is appended to ``--out`` (the file is rewritten through
a temporary file, so it never holds a half line); a rerun skips the data sets already there
(lines of another configuration are refused). Data sets ``--start`` .. ``--datasets``-1 are
run (or up to ``--stop``), so shards can run side by side; ``--report --also SHARD...`` pools them (by index). Progress goes to stderr. The report pools the
L+1 ranks into ``--bins`` bins and tests uniformity per parameter with Pearson's chi-square
(``scipy.stats.chisquare``); p ≥ 0.01 is the issue's bar. Results: train/README.md §20.
Thinning, the report and the result file are :mod:`residualsim.sysid.sbc`'s, whose
``residualsim check-calibration`` runs the same check of ``calibrate`` itself on any scene.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from residualsim.errors import ParameterError
from residualsim.sysid.sbc import read_results as _read_results
from residualsim.sysid.sbc import reflected_gaussian, thin
from residualsim.sysid.sbc import report as _report

NAMES = ("lateral_friction", "restitution")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from residualsim.sysid.weighting import SMALL_SAMPLE

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="JSON-lines file of results (appended)")
    parser.add_argument("--datasets", type=int, default=50, help="synthetic data sets (>= 1)")
    parser.add_argument("--tosses", type=int, default=10, help="cube tosses per data set")
    parser.add_argument("--samples", type=int, default=70, help="samples per toss (148 Hz)")
    parser.add_argument("--substeps", type=int, default=5, help="engine substeps per sample")
    parser.add_argument("--noise-m", type=float, default=0.002, help="position noise, m")
    parser.add_argument("--noise-rad", type=float, default=0.0, help="orientation noise, rad")
    parser.add_argument("--bounds", default="0.1:0.7,0.1:0.7",
                        help="prior bounds friction LOW:HIGH,restitution LOW:HIGH (uniform)")
    parser.add_argument("--initial-state", choices=("recorded", "fit"), default="fit",
                        help="recorded: roll out from the recorded first sample (the old "
                             "likelihood); fit: fit the initial pose to the free flight and "
                             "average over its uncertainty (TrajectoryLikelihood "
                             "fit_recorded=True)")
    parser.add_argument("--initial-draws", type=int, default=4,
                        help="K initial states per recording for --initial-state fit")
    parser.add_argument("--weighting", choices=("curvature", "tempered", "centred", "scalar",
                                                 "nu-only", "recording"),
                        default="curvature",
                        help="curvature: each recording weighs as its effective number of "
                             "independent residuals at a pilot fit, the likelihood's "
                             "curvature adjusted to the scatter between recordings, chains "
                             "start at its mode (calibrate's --weighting effective); "
                             "tempered: a power w on the likelihood and Chandler-Bate for the "
                             "rest, both from the sandwich's envelope (tempered_adjustment); "
                             "centred: Chandler-Bate centred on the envelope's mode, to the "
                             "sandwich's curvature (centred_adjustment); "
                             "scalar: "
                             "one factor on every ν_i instead; nu-only: no adjustment; "
                             "recording: one observation each (ν_i = 1, the old likelihood)")
    parser.add_argument("--rugged-weight", type=float, default=1.0,
                        help="centred: λ in [0, 1] on the likelihood's departure from its "
                             "envelope (1, the default: Chandler-Bate as it is; 0: MH on the "
                             "adjusted envelope alone, the sandwich's Gaussian)")
    parser.add_argument("--small-sample", choices=SMALL_SAMPLE, default="none",
                        help="few-recordings correction of the sandwich envelope (centred "
                             "weighting and --sampler sandwich): cr1t scales its covariance "
                             "by (t_0.95,G-d / z_0.95)^2 (weighting.small_sample_inflation)")
    parser.add_argument("--pilot-evaluations", type=int, default=40,
                        help="Nelder-Mead evaluations of the pilot fit")
    parser.add_argument("--sampler", choices=("mh", "grid", "sandwich"), default="mh",
                        help="mh: calibrate's Metropolis-Hastings; grid: the exact posterior "
                             "of the same likelihood on a --grid² grid around the pilot fit "
                             "(tells the likelihood's calibration from the sampler's mixing)")
    parser.add_argument("--grid", type=int, default=25, help="grid points per axis")
    parser.add_argument("--mh-samples", type=int, default=300, help="kept MH steps per chain")
    parser.add_argument("--burn-in", type=int, default=150, help="MH burn-in steps")
    parser.add_argument("--chains", type=int, default=2, help="MH chains")
    parser.add_argument("--init-draws", type=int, default=8,
                        help="Sobol start points per chain (calibrate uses 32)")
    parser.add_argument("--draws", type=int, default=19,
                        help="L thinned posterior draws per data set (ranks 0..L)")
    parser.add_argument("--bins", type=int, default=10, help="histogram bins (divide L+1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1, help="likelihood worker processes")
    parser.add_argument("--start", type=int, default=0,
                        help="first data set index to run (a shard: run several --out files "
                             "with different --start, then --report --also the others)")
    parser.add_argument("--stop", type=int, help="stop before this index (default --datasets)")
    parser.add_argument("--report", action="store_true", help="only print the report")
    parser.add_argument("--also", nargs="*", default=[],
                        help="more result files (shards) to pool into the report")
    return parser.parse_args(argv)


def config_of(args: argparse.Namespace) -> dict:
    """The settings a result line must share with the run (everything but the count)."""
    keys = ("tosses", "samples", "substeps", "noise_m", "noise_rad", "bounds", "initial_state",
            "initial_draws", "weighting", "pilot_evaluations", "mh_samples", "burn_in",
            "chains", "init_draws", "draws", "seed", "sampler", "grid")
    config = {k: getattr(args, k) for k in keys}
    if args.rugged_weight != 1.0:  # (files written before the option stay readable)
        config["rugged_weight"] = args.rugged_weight
    if args.small_sample != "none":
        config["small_sample"] = args.small_sample
    return config


def parse_bounds(text: str) -> dict[str, tuple[float, float]]:
    parts = text.split(",")
    if len(parts) != 2:
        raise SystemExit(f"--bounds: expected two LOW:HIGH pairs, got {text!r}")
    bounds = {}
    for name, part in zip(NAMES, parts):
        low, high = (float(v) for v in part.split(":"))
        bounds[name] = (low, high)
    return bounds


def tempered_adjustment(likelihood, space, center: np.ndarray, log_like):
    """(the adjusted log-likelihood, its summary): the sandwich's envelope fits (H, J at
    ``center``, :func:`~residualsim.sysid.weighting.sandwich_posterior`'s design) give the
    target curvature H_adj = H (J + H)⁻¹ H (the sandwich covariance's inverse); the power
    w ≤ 1 on every ν_i is the largest eigenvalue of H^-1/2 H_adj H^-1/2 (no direction is
    widened by more than it needs; the likelihood's spikes shrink by w), and the
    Chandler-Bate map C (Cᵀ wH C = H_adj) widens the remaining directions. Unadjusted when
    no positive-definite envelope is found."""
    from residualsim.sysid.weighting import (_local_quadratics, adjusted_log_likelihood,
                                             curvature_transform)

    found = _local_quadratics(likelihood, space, center, sandwich=True)
    if found.get("information") is None:
        return log_like, {"w": None}
    information, spread = found["information"], found["spread"]
    target = information @ np.linalg.solve(spread + information, information)
    values, vectors = np.linalg.eigh(information)
    inverse_root = vectors @ np.diag(1 / np.sqrt(values)) @ vectors.T
    w = float(np.clip(np.linalg.eigvalsh(inverse_root @ target @ inverse_root).max(), 1e-3,
                      1.0))
    transform = curvature_transform(w * information, w * w * (spread + information))
    likelihood.scale_weights(w)
    return (adjusted_log_likelihood(log_like, space, center, transform),
            {"w": w, "transform": transform.tolist(), "evaluations": found["evaluations"]})


def centred_adjustment(likelihood, space, center: np.ndarray, log_like, rugged: float = 1.0,
                       small_sample: str = "none"):
    """(the target, its delayed-acceptance screen, where chains start, its summary): the
    likelihood ``calibrate --weighting calibrated`` samples
    (:func:`residualsim.sysid.calibrated.calibrated_target` about ``center``, natural values),
    with λ = ``rugged`` and the few-recordings correction ``small_sample``. The target is
    the raw likelihood, chains at ``center``, when no positive-definite envelope is found
    (``failed`` in the summary)."""
    from residualsim.sysid.calibrated import calibrated_target

    found = calibrated_target(likelihood, log_like, space, center, rugged, small_sample)
    summary = dict(found.summary)
    summary["failed"] = "failed" in summary
    return found.target, found.screen, found.start, summary


def one_dataset(args: argparse.Namespace, index: int) -> dict:
    """Draw a truth, synthesize, sample the posterior; the result line of data set ``index``."""
    from residualsim.sim.scenes import EngineParams
    from residualsim.sim.synthesize import synthesize_tosses
    from residualsim.sysid.likelihood import TrajectoryLikelihood
    from residualsim.sysid.mcmc import MetropolisHastings
    from residualsim.sysid.paramspace import ParamSpace
    from residualsim.sysid.weighting import (adjusted_log_likelihood, magnitude_adjustment,
                                             pilot_reference)

    started = time.perf_counter()
    bounds = parse_bounds(args.bounds)
    rng = np.random.default_rng([args.seed, index])
    truth = {n: float(rng.uniform(*bounds[n])) for n in NAMES}
    tosses = synthesize_tosses(EngineParams(**truth), n_tosses=args.tosses,
                               n_samples=args.samples, noise_m=args.noise_m,
                               noise_rad=args.noise_rad, rng=rng, substeps=args.substeps)
    space = ParamSpace(list(NAMES), bounds=bounds)
    fit = args.initial_state == "fit"
    likelihood = TrajectoryLikelihood("cube", tosses, substeps=args.substeps,
                                      n_workers=args.workers,
                                      initial_draws=args.initial_draws if fit else 0,
                                      seed=index, fit_recorded=fit)
    weights = {"mode": args.weighting}
    with likelihood:
        def log_like(x: np.ndarray) -> np.ndarray:
            return likelihood([space.engine_params(row) for row in x])

        start, screen = None, None
        if args.weighting != "recording":  # as calibrate: pilot fit, ν fixed, start there
            start = pilot_reference(log_like, space, seed=index,
                                    sobol_points=args.init_draws * args.chains,
                                    evaluations=args.pilot_evaluations)
            nu = likelihood.set_reference(space.engine_params(start))
            weights.update(reference=start.tolist(), nu_median=float(np.median(nu)),
                           nu_min=float(nu.min()), nu_max=float(nu.max()))
            if args.weighting == "scalar":
                adjustment = magnitude_adjustment(likelihood, space, start)
                likelihood.scale_weights(adjustment["w"])
                weights["adjustment"] = _jsonable(adjustment)
            elif args.weighting == "tempered":  # a power w, then Chandler-Bate for the rest
                start = pilot_reference(log_like, space, start=start, evaluations=30,
                                        simplex=0.01)
                log_like, weights["adjustment"] = tempered_adjustment(
                    likelihood, space, start, log_like)
                weights["mode"] = start.tolist()
            elif args.weighting == "centred":  # Chandler-Bate about the envelope's mode
                start = pilot_reference(log_like, space, start=start, evaluations=30,
                                        simplex=0.01)
                log_like, screen, start, weights["adjustment"] = centred_adjustment(
                    likelihood, space, start, log_like, args.rugged_weight,
                    args.small_sample)
                weights["mode"] = start.tolist()
            elif args.weighting == "curvature":  # the ν-weighted mode, then Chandler-Bate
                start = pilot_reference(log_like, space, start=start, evaluations=30,
                                        simplex=0.01)
                adjustment = magnitude_adjustment(likelihood, space, start)
                weights["adjustment"] = _jsonable(adjustment)
                weights["mode"] = start.tolist()
                if adjustment["w_raw"] is not None:
                    log_like = adjusted_log_likelihood(log_like, space, start,
                                                       adjustment["transform"])
        if args.sampler == "sandwich":
            draws, summary = sandwich_draws(likelihood, space, start, args.draws,
                                            np.random.default_rng([args.seed, index, 1]),
                                            args.small_sample)
            evaluations = summary.pop("evaluations")
            weights["sandwich"] = summary.pop("sandwich")
        elif args.sampler == "grid":
            if start is None:
                start = pilot_reference(log_like, space, seed=index,
                                        sobol_points=args.init_draws * args.chains,
                                        evaluations=args.pilot_evaluations)
            draws, summary = grid_posterior(log_like, space, start, args.grid, args.draws,
                                            np.random.default_rng([args.seed, index, 1]))
            evaluations = summary.pop("evaluations")
        else:
            sampler = MetropolisHastings(log_like, space, n_chains=args.chains,
                                         init_draws=args.init_draws, screen=screen,
                                         rng=np.random.default_rng([args.seed, index, 1]))
            posterior = sampler.run(args.mh_samples, args.burn_in, initial=start)
            draws = thin(posterior.samples, args.draws)
            summary = posterior.summary()
            evaluations = posterior.meta["evaluations"]
    return {
        "index": index, "config": config_of(args), "truth": truth,
        "rank": {n: int(np.sum(draws[:, i] < truth[n])) for i, n in enumerate(NAMES)},
        "median": summary["median"], "q05": summary["q05"], "q95": summary["q95"],
        "rhat": summary["rhat"], "ess": summary["ess"], "acceptance": summary["acceptance"],
        "weighting": weights,
        "evaluations": evaluations, "rollouts": likelihood.n_rollouts,
        "seconds": time.perf_counter() - started,
    }


def grid_posterior(log_like, space, center: np.ndarray, points: int, count: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, dict]:
    """``count`` draws (count, d) from the likelihood × uniform prior on a ``points``^d grid
    around ``center`` (natural values), and a summary like a Posterior's. The box: ±8
    conditional standard deviations from the log-likelihood's curvature at ``center``
    (unit coordinates, clipped to [0, 1]), doubled (up to twice) while more than 0.1 % of
    the mass lies in the outer cells."""
    d = space.ndim
    zc = space.to_unit(np.asarray(center, dtype=np.float64)[None])[0]
    h = 0.002
    stencil = [zc] + [zc + s * h * np.eye(d)[k] for k in range(d) for s in (-1, 1)]
    stencil = np.clip(np.array(stencil), 0, 1)
    values = np.asarray(log_like(space.from_unit(stencil)), dtype=np.float64)
    evaluations = len(stencil)
    half = []
    for k in range(d):
        curvature = (values[1 + 2 * k] - 2 * values[0] + values[2 + 2 * k]) / h**2
        half.append(8.0 / np.sqrt(-curvature) if curvature < 0 else 0.1)
    half = np.minimum(np.array(half), 0.5)
    for _ in range(3):
        axes = [np.linspace(max(0.0, zc[k] - half[k]), min(1.0, zc[k] + half[k]), points)
                for k in range(d)]
        mesh = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, d)
        logp = np.asarray(log_like(space.from_unit(mesh)), dtype=np.float64)
        evaluations += len(mesh)
        logp = np.where(np.isfinite(logp), logp, -np.inf)
        weights = np.exp(logp - logp.max())
        weights /= weights.sum()
        grid = weights.reshape([points] * d)
        edge = sum(float(np.take(grid, [0, -1], axis=k).sum()) for k in range(d))
        at_bound = [(axes[k][0] <= 0.0, axes[k][-1] >= 1.0) for k in range(d)]
        if edge < 1e-3 or all(all(b) for b in at_bound):
            break
        half = np.minimum(2 * half, 1.0)
    steps = np.array([a[1] - a[0] for a in axes])
    picks = rng.choice(len(mesh), size=count, p=weights)
    z = np.clip(mesh[picks] + (rng.random((count, d)) - 0.5) * steps, 0, 1)
    x = space.from_unit(z)
    fine = space.from_unit(mesh)
    summary = {"evaluations": evaluations, "median": {}, "q05": {}, "q95": {},
               "rhat": {n: 1.0 for n in space.names}, "ess": {n: float(count) for n in
                                                                space.names},
               "acceptance": None, "edge_mass": edge}
    for k, name in enumerate(space.names):
        order = np.argsort(fine[:, k], kind="stable")
        cdf = np.cumsum(weights[order])
        for key, q in (("median", 0.5), ("q05", 0.05), ("q95", 0.95)):
            summary[key][name] = float(fine[order[min(np.searchsorted(cdf, q),
                                                       len(cdf) - 1)], k])
    return x, summary


def sandwich_draws(likelihood, space, center: np.ndarray, count: int,
                   rng: np.random.Generator, small_sample: str = "none"
                   ) -> tuple[np.ndarray, dict]:
    """``count`` draws (natural values) from calibrate's sandwich posterior
    (:func:`residualsim.sysid.weighting.sandwich_posterior`, ``small_sample`` its
    few-recordings correction) and a Posterior-like summary; the prior's (no information)
    when it found no envelope."""
    from residualsim.sysid.weighting import sandwich_posterior

    found = sandwich_posterior(likelihood, space, center, small_sample)
    z = reflected_gaussian(found["mode_unit"], found["covariance"], count, rng)
    summary = {key: found[key] for key in ("median", "q05", "q95", "evaluations")}
    summary.update(rhat={n: 1.0 for n in space.names}, acceptance=None,
                   ess={n: float(count) for n in space.names},
                   sandwich={"h": found["h"], "w": found["w"], "inflation": found["inflation"],
                             "failed": found["covariance"] is None})
    return space.from_unit(z), summary


def _jsonable(value):
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return value.tolist()
    return float(value) if isinstance(value, np.floating) else value


def read_results(path: Path, config: dict) -> list[dict]:
    """:func:`residualsim.sysid.sbc.read_results`, its refusal as a SystemExit."""
    try:
        return _read_results(path, config)
    except ParameterError as exc:
        raise SystemExit(str(exc)) from None


def report(results: list[dict], draws: int, bins: int) -> dict:
    """:func:`residualsim.sysid.sbc.report` on :data:`NAMES`, a bad ``bins`` a SystemExit."""
    try:
        return _report(results, draws, bins, NAMES)
    except ParameterError as exc:
        raise SystemExit(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    from residualsim.atomic import atomic_write_text

    args = parse_args(argv)
    path = Path(args.out)
    config = config_of(args)
    results = read_results(path, config)
    done = {r["index"] for r in results}
    if not args.report:
        path.parent.mkdir(parents=True, exist_ok=True)
        for index in range(args.start, min(args.stop or args.datasets, args.datasets)):
            if index in done:
                continue
            result = one_dataset(args, index)
            results.append(result)
            atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in results))
            print(f"[sbc] {len(results)}/{args.datasets} data set {index}: truth "
                  f"{result['truth']['lateral_friction']:.3f}/"
                  f"{result['truth']['restitution']:.3f} ranks {result['rank']} "
                  f"R-hat {max(result['rhat'].values()):.3f} "
                  f"{result['seconds']:.0f} s", file=sys.stderr, flush=True)
    pooled = {r["index"]: r for r in results}
    for other in args.also:
        pooled.update({r["index"]: r for r in read_results(Path(other), config)})
    print(json.dumps(report(list(pooled.values()), args.draws, args.bins)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
