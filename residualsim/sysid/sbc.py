"""Simulation-based calibration (SBC) of ``residualsim calibrate`` on any scene.

Talts, Betancourt, Simpson, Vehtari and Gelman (2018), "Validating Bayesian inference
algorithms with simulation-based calibration". For each data set j (random generator
``np.random.default_rng([seed, j])``): draw the truth θ from calibrate's prior (uniform over
the bounds in unit coordinates: uniform in natural units, log-uniform for log-scale
parameters, as :class:`~residualsim.sysid.paramspace.ParamSpace` has it), synthesize tosses
of the scene with it (:func:`residualsim.sim.synthesize.synthesize_tosses`: exact
velocities, pose noise in m and rad), write them as CSV recordings, run exactly the user's
:func:`~residualsim.sysid.calibrate.calibrate` on them, take L posterior draws (MH: the
chains thinned evenly; ``method="sandwich"``: the summary's Gaussian in unit coordinates,
reflected into the prior's box) and record the rank of the truth among them: the number of
draws below it, 0..L. If calibrate's posterior is right, every rank is equally likely; a
U-shaped histogram is an overconfident posterior, a one-sided one a biased posterior, a
hump an underconfident one.

Results go one JSON line per data set to a file rewritten atomically, so an interrupted
run resumes where it stopped; lines of another configuration are refused.
:func:`report` pools the L+1 ranks into bins and tests their uniformity per parameter with
Pearson's chi-square (``scipy.stats.chisquare``). ``train/sbc.py`` is the experimental
script (other likelihoods, samplers) that shares :func:`thin`, :func:`report` and
:func:`read_results`.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from residualsim.errors import ParameterError

__all__ = ["simulation_based_calibration", "thin", "reflected_gaussian", "read_results",
           "report", "rank_of"]


def thin(samples: np.ndarray, count: int) -> np.ndarray:
    """``count`` draws (count, d) evenly spaced through each chain of ``samples`` (C, S, d),
    chains taking turns: the autocorrelated chains thinned to nearly independent draws."""
    chains, steps, _ = samples.shape
    per_chain = -(-count // chains)
    picks = [samples[c, np.linspace(0, steps - 1, per_chain).round().astype(int)]
             for c in range(chains)]
    return np.concatenate(picks)[:count]


def reflected_gaussian(mode_unit: Sequence[float], covariance: np.ndarray | None, count: int,
                       rng: np.random.Generator) -> np.ndarray:
    """``count`` draws (count, d) in unit coordinates from the Gaussian N(mode, covariance)
    (both in unit coordinates, the sandwich posterior's), folded into [0, 1] at the walls;
    uniform on [0, 1]^d (the prior) when ``covariance`` is None (no envelope found)."""
    d = len(mode_unit)
    if covariance is None:
        return rng.random((count, d))
    z = rng.multivariate_normal(np.asarray(mode_unit, dtype=np.float64),
                                np.asarray(covariance, dtype=np.float64), size=count)
    z = np.abs(z) % 2.0
    return np.where(z > 1.0, 2.0 - z, z)


def rank_of(draws: np.ndarray, truth: Sequence[float]) -> list[int]:
    """Per parameter, the number of ``draws`` (L, d) strictly below ``truth`` (d,): 0..L."""
    return [int(np.sum(draws[:, i] < t)) for i, t in enumerate(truth)]


def read_results(path: str | os.PathLike[str], config: Mapping) -> list[dict]:
    """The result lines of ``path`` (none when it does not exist); ParameterError naming the
    file and line when one was written with another configuration than ``config``."""
    path = Path(path)
    if not path.exists():
        return []
    expected = json.loads(json.dumps(config))
    results = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            result = json.loads(line)
        except json.JSONDecodeError:
            raise ParameterError(f"{path}:{number}: not a result line (JSON); use another "
                                 "--out") from None
        if not isinstance(result, dict) or result.get("config") != expected:
            raise ParameterError(f"{path}:{number}: a result of another configuration; use "
                                 "another --out")
        results.append(result)
    return results


def report(results: Sequence[Mapping], draws: int, bins: int,
           names: Sequence[str] | None = None) -> dict[str, Any]:
    """Per parameter (``names``, default those of the first result's ranks): the rank
    histogram (counts in ``bins`` bins of the L+1 = ``draws``+1 ranks), Pearson's chi-square
    of uniformity and its p-value, the share of data sets whose truth lies in calibrate's
    5-95 % interval (``coverage_90``, nominal 0.9) and the mean rank (L/2 when unbiased);
    then the mean seconds per data set, the largest R-hat and smallest ESS (MH only, else
    None). ParameterError when ``bins`` does not divide L+1."""
    from scipy.stats import chisquare

    if bins < 1 or (draws + 1) % bins:
        raise ParameterError(f"--bins {bins} must divide L + 1 = {draws + 1} (--draws + 1)")
    if names is None:
        names = list(results[0]["rank"]) if results else []
    out: dict[str, Any] = {"datasets": len(results)}
    for name in names:
        ranks = np.array([r["rank"][name] for r in results], dtype=int)
        counts = np.bincount(ranks * bins // (draws + 1), minlength=bins)
        test = chisquare(counts) if len(ranks) else None
        inside = [r["q05"][name] <= r["truth"][name] <= r["q95"][name] for r in results
                  if r.get("q05") and r.get("q95")]
        out[name] = {"histogram": counts.tolist(),
                     "chi2": float(test.statistic) if test else None,
                     "p_value": float(test.pvalue) if test else None,
                     "coverage_90": float(np.mean(inside)) if inside else None,
                     "mean_rank": float(ranks.mean()) if len(ranks) else None}
    seconds = [r["seconds"] for r in results if r.get("seconds") is not None]
    out["seconds_per_dataset"] = float(np.mean(seconds)) if seconds else None
    rhat = [v for r in results for v in (r.get("rhat") or {}).values() if v is not None]
    ess = [v for r in results for v in (r.get("ess") or {}).values() if v is not None]
    out["max_rhat"] = max(rhat, default=None)
    out["min_ess"] = min(ess, default=None)
    return out


def _posterior_draws(out: Path, summary: Mapping, count: int,
                     rng: np.random.Generator) -> np.ndarray:
    """L = ``count`` draws (natural units) of the calibration in ``out``: MH's chains thinned,
    or the sandwich's Gaussian."""
    from residualsim.sysid.paramspace import ParamSpace
    from residualsim.sysid.posterior import Posterior

    if summary.get("method") == "sandwich":
        found = summary["sandwich"]
        covariance = found.get("covariance_unit")
        z = reflected_gaussian(found["mode_unit"], None if covariance is None else
                               np.asarray(covariance), count, rng)
        return ParamSpace.from_json(summary["space"]).from_unit(z)
    return thin(Posterior.load(out / "posterior.npz").samples, count)


def one_dataset(scene: str, names: Sequence[str], index: int, config: Mapping,
                n_workers: int = 1) -> dict[str, Any]:
    """Draw a truth, synthesize, calibrate; the result line of data set ``index``
    (``config`` as :func:`simulation_based_calibration` builds it)."""
    from residualsim.data.csv import save_csv_trajectories
    from residualsim.sim.synthesize import synthesize_tosses
    from residualsim.sysid.calibrate import calibrate
    from residualsim.sysid.paramspace import ParamSpace

    started = time.perf_counter()
    space = ParamSpace(list(names), bounds=config["bounds"], scene=scene)
    rng = np.random.default_rng([config["seed"], index])
    truth = space.from_unit(rng.random(space.ndim))
    tosses = synthesize_tosses(space.engine_params(truth), n_tosses=config["tosses"],
                               n_samples=config["samples"], noise_m=config["noise_m"],
                               noise_rad=config["noise_rad"], rng=rng,
                               substeps=config["substeps"], scene=scene)
    with tempfile.TemporaryDirectory(prefix="residualsim-sbc-") as tmp:
        data, out = Path(tmp) / "data", Path(tmp) / "calibration"
        save_csv_trajectories(data, tosses, with_velocities=True)
        summary = calibrate(scene, data, list(names), out, split="all",
                            bounds=config["bounds"], substeps=config["substeps"],
                            n_workers=n_workers, seed=index, plots=False,
                            **config["calibrate"])
        draws = _posterior_draws(out, summary, config["draws"],
                                 np.random.default_rng([config["seed"], index, 1]))
    names = space.names
    return {"index": index, "config": dict(config),
            "truth": dict(zip(names, map(float, truth))),
            "rank": dict(zip(names, rank_of(draws, truth))),
            **{key: summary.get(key) for key in ("median", "q05", "q95", "rhat", "ess",
                                                 "acceptance", "evaluations", "warnings")},
            "envelope": _envelope(summary), "seconds": time.perf_counter() - started}


def _envelope(summary: Mapping) -> dict | None:
    """What the posterior was built from, kept so that another covariance rule can be
    judged on the same data sets without calibrating again: MH's calibrated adjustment
    (``envelope_mode`` and the bootstrap's ``estimates`` in natural values; H, J, k and the
    covariance sampled in the space's unit coordinates; train/sbc_rules.py reads them) or
    the sandwich's Gaussian (unit coordinates); None for the raw likelihood."""
    found = (summary.get("weighting") or {}).get("adjustment") or summary.get("sandwich")
    return None if found is None else {k: v for k, v in found.items()
                                       if k not in ("transform_unit", "magnitude_w")}


def _seconds_left(results: Sequence[Mapping], datasets: int) -> float | None:
    """The data sets left to run times the mean seconds of those run (None: none timed)."""
    seconds = [r["seconds"] for r in results if r.get("seconds") is not None]
    if not seconds:
        return None
    left = datasets - sum(1 for r in results if r["index"] < datasets)
    return float(np.mean(seconds)) * left


def _check_time(left_s: float, results: Sequence[Mapping], datasets: int, path: Path,
                options: Mapping, max_minutes: float | None) -> None:
    """ParameterError when the data sets left would take longer than ``max_minutes``."""
    from residualsim.parallel import require_time

    timed = [r["seconds"] for r in results if r.get("seconds") is not None]
    count = datasets - sum(1 for r in results if r["index"] < datasets)
    mh = options.get("method", "mh") == "mh"
    require_time(left_s, max_minutes, f"the {count} data sets left of --datasets {datasets}",
                 (f"data set {results[0]['index']} took {timed[0]:.3g} s" if len(timed) == 1
                  else f"{len(timed)} took {np.mean(timed):.3g} s each on average") +
                 f"; {path} keeps {'it' if len(results) == 1 else 'them'}, a rerun resumes",
                 "lower --datasets, --tosses" + (", --mh-samples or --burn-in" if mh else ""))


def simulation_based_calibration(
        scene: str, names: Sequence[str], out_jsonl: str | os.PathLike[str], *,
        datasets: int = 20, tosses: int = 6, samples: int = 50, noise_m: float = 0.002,
        noise_rad: float = 0.0, substeps: int | None = None,
        bounds: Mapping[str, Sequence[float]] | None = None, draws: int = 19, bins: int = 5,
        seed: int = 0, n_workers: int = 1, calibrate_options: Mapping[str, Any] | None = None,
        progress: Callable[[dict, int], None] | None = None,
        starting: Callable[[int, int, float | None], None] | None = None,
        max_minutes: float | None = None) -> dict[str, Any]:
    """Run SBC of :func:`~residualsim.sysid.calibrate.calibrate` on ``scene`` and return
    :func:`report`'s figures (with ``out`` and ``ran``, the data sets run now).

    Parameters
    ----------
    scene : str
        A built-in scene name (``cube``) or a scene file (.toml).
    names : sequence of str
        The calibrated parameters, as calibrate's ``--params``.
    out_jsonl : path
        One JSON line per finished data set; a rerun skips the indices already there and
        refuses (ParameterError naming the file) a file of another configuration.
    datasets, tosses, samples : int
        Data sets, tosses per data set, samples per toss (at the scene's rate).
    noise_m, noise_rad : float
        Pose noise of the synthetic recordings: position (m, per axis), orientation (rad).
    substeps : int, optional
        Engine substeps per sample, of the truth and of calibrate (default: the scene's).
    bounds : mapping name -> (low, high)
        The prior's box, natural units; calibrate gets the same.
    draws, bins : int
        L posterior draws per data set (ranks 0..L); histogram bins (must divide L+1).
    seed : int
        Data set j draws from ``np.random.default_rng([seed, j])``; calibrate gets seed j.
    n_workers : int
        calibrate's likelihood workers (on the current parallel backend).
    calibrate_options : mapping
        Passed to calibrate as they are: ``method`` ("mh", default, or "sandwich"),
        ``samples``, ``burn_in``, ``chains``, ``weighting``, ``rugged_weight``...
    progress : callable (result line, data sets done), optional
        Called after each data set.
    starting : callable (index, data sets done, estimated seconds left or None), optional
        Called before each data set.
    max_minutes : float, optional
        The data sets' count bounded (issue 67): once a data set's time is known (the first
        run now, or those in ``out_jsonl``: the short first measurement), the data sets left
        are estimated at their mean time each and a ParameterError (naming the estimate,
        ``--datasets``, the file that keeps the finished ones and the options to change) is
        raised before the next one when they exceed this (None or 0: no limit; the rule:
        :func:`residualsim.parallel.require_time`).
    """
    from residualsim.atomic import atomic_write_text

    if datasets < 1 or draws < 1:
        raise ParameterError(f"need datasets >= 1 and draws >= 1, got {datasets}, {draws}")
    options = dict(calibrate_options or {})
    if options.get("method", "mh") not in ("mh", "sandwich"):
        raise ParameterError(f"SBC checks calibrate's posterior: method 'mh' or 'sandwich', "
                             f"got {options['method']!r}")
    report([], draws, bins)  # bins checked before any work
    config = {"scene": str(scene), "params": list(names),
              "bounds": {k: [float(v) for v in b] for k, b in (bounds or {}).items()},
              "tosses": tosses, "samples": samples, "noise_m": noise_m,
              "noise_rad": noise_rad, "substeps": substeps, "draws": draws, "seed": seed,
              "calibrate": options}
    path = Path(out_jsonl)
    results = read_results(path, config)
    done = {r["index"] for r in results}
    ran, checked = 0, False
    for index in range(datasets):
        if index in done:
            continue
        left = _seconds_left(results, datasets)
        if left is not None and not checked:
            checked = True
            _check_time(left, results, datasets, path, options, max_minutes)
        if starting is not None:
            starting(index, len(results), left)
        result = one_dataset(scene, names, index, config, n_workers=n_workers)
        results.append(result)
        ran += 1
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in results))
        if progress is not None:
            progress(result, len(results))
    kept = [r for r in results if r["index"] < datasets]
    return {"out": str(path), "ran": ran, **report(kept, draws, bins, list(kept[0]["rank"]))}
