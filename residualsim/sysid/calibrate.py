"""Calibration: engine parameters from recorded trajectories or impacts.

The first stage of the data flow (recordings → calibration → residual training → rollouts).
:func:`calibrate` loads a data set, keeps its training split, builds the trajectory
likelihood (:mod:`residualsim.sysid.likelihood`) over worker processes and samples it with
Metropolis-Hastings (``method="mh"``, :class:`~residualsim.sysid.mcmc.MetropolisHastings`;
the point value is the posterior median), takes the Gaussian about its envelope
(``"sandwich"``) or minimises trajectory error (``"lsq"``, ``"nevergrad"``). It writes one
directory: ``summary.json`` (the point value, or the held-out guard's better choice,
:mod:`residualsim.sysid.held_out`, as full engine parameters; the settings, intervals and
diagnostics), ``posterior.npz`` with corner and trace plots (MH) and checkpoints from which
an interrupted run resumes. :func:`load_calibration` reads it back; ``simulate``,
``predict`` and ``train`` take it and its substep count (parameters fitted at one substep
count do not transfer to another: see PYBULLET_NOTES).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from residualsim.atomic import atomic_write_text, check_output, claim_output, path_for_file
from residualsim.errors import DataError, ParameterError
from residualsim.sysid.bodyspace import default_budget, names_body
from residualsim.sysid.bootstrap import (DEFAULT_REPLICATES, bootstrap_about,
                                         bootstrap_sandwich, check_covariance,
                                         default_covariance)
from residualsim.sysid.calibrate_options import check_applicable, check_options
from residualsim.sysid.calibration_data import load_calibration_data
from residualsim.sysid.calibration_file import SUMMARY_FORMAT, load_calibration
from residualsim.sysid.determined import urdf_note
from residualsim.sysid.held_out import held_out_guard
from residualsim.sysid.lsq import lsq_pilot
from residualsim.sysid.likelihood import (ImpactLikelihood, StagedLikelihood,
                                         TrajectoryLikelihood)
from residualsim.sysid.mcmc import MetropolisHastings, check_resumable
from residualsim.sysid.optimize import point_estimate
from residualsim.sysid.paramspace import ParamSpace, calibration_run
from residualsim.sysid.posterior import convergence_warnings
from residualsim.sysid.calibrated import (DEFAULT_RUGGED,
                                          calibrated_weights)
from residualsim.sysid.weighting import effective_weights, sandwich_calibration
from residualsim.sim.scenes import (EngineParams, Scene, is_scene_path, make_scene, parse_params,
                                   scene_reference)
from residualsim.sim.scenes import same_scene
from residualsim.sim.scenes.body import check_body_matches
from residualsim.sim.scenes.params import body_of
from residualsim.parallel import current_backend

__all__ = ["calibrate", "point_estimate", "export_calibrated_urdf", "CUBE_CALIBRATED",
           "CUBE_CALIBRATION_BOUNDS"]

log = logging.getLogger(__name__)

#: Substeps per recorded sample used to calibrate on trajectories unless told otherwise:
#: None, the scene's own (10 for the cube), the count ``data synthesize``, ``train`` and
#: ``predict`` use too, so a calibration transfers to them unchanged (no longer exported,
#: being no number; MPEC's held-out settings read it). (One substep fits the
#: real tosses as well as ten, held-out position RMSE 0.027 m either way on a friction x
#: restitution grid, at a seventh of the cost: pass ``--substeps 1`` and train and predict
#: at 1 too; the result records it.)
DEFAULT_TRAJECTORY_SUBSTEPS = None
#: Initial states drawn per recording whose initial state was fitted from poses, K of
#: :class:`~residualsim.sysid.likelihood.TrajectoryLikelihood` (K times the rollouts of those
#: recordings). 4 smoothed the hinge's likelihood surface enough that MH's 90 % intervals
#: held the truth with R-hat 1.02 (train/README.md §14); recordings with velocities are
#: unaffected.
DEFAULT_INITIAL_DRAWS = 4
#: How the first pose of a recording with recorded velocities enters the likelihood, per
#: method (others ``"recorded"``, rolled out from as it is): ``"fit"`` (fitted to the free
#: flight, velocities kept, averaged over its uncertainty with the initial draws). lsq: its
#: noise misled the point and the held-out figures (train/README.md §22, issue 51).
DEFAULT_RECORDED_START = {"lsq": "fit"}
#: The cube's strong engine baseline: the parameters fitted for the shipped model (at 10
#: substeps, nevergrad), with spinning and rolling friction bounded to plausible lengths (m).
CUBE_CALIBRATED = ("lateral_friction", "restitution", "spinning_friction", "rolling_friction",
                   "contact_stiffness", "contact_damping")
CUBE_CALIBRATION_BOUNDS = {"spinning_friction": (0.0, 0.1), "rolling_friction": (0.0, 0.05)}


def _data_fingerprint(ids: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]


def calibrate(scene: str | Scene, data: str | os.PathLike[str], names: Sequence[str],
              out: str | os.PathLike[str], *, method: str = "mh", samples: int = 3000,
              burn_in: int = 1000, chains: int = 2, proposal_scale: float = 0.05,
              adapt: bool = True, bounds: Mapping[str, Sequence[float]] | None = None,
              priors: Mapping[str, str] | None = None, noise: float | None = None,
              substeps: int | None = None, split: str = "train",
              max_items: int | None = None, n_workers: int = 1, seed: int = 0,
              budget: int | None = None, optimizer: str | None = None,
              checkpoint_every: int | None = None,
              resume: bool = False, plots: bool = True, progress: bool = False,
              initial: Mapping[str, float] | None = None,
              split_fractions: Sequence[float] | None = None,
              split_lists: Mapping[str, Sequence[str]] | None = None,
              initial_draws: int | None = None, delayed_acceptance: float | None = None,
              rotation_weight: float = 1.0, export_urdf: str | os.PathLike[str] | None = None,
              recorded_start: str | None = None, start_points: int = 32,
              weighting: str | None = None, rugged_weight: float | None = None,
              small_sample: str | None = None, covariance: str | None = None,
              bootstrap_replicates: int | None = None,
              base: EngineParams | Mapping[str, float] | str | None = None,
              ground: bool = True, keep_calibrated: bool = False,
              guard_against: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Calibrate ``names`` of the scene's engine parameters on a data set; write ``out``.

    Parameters mirror ``residualsim calibrate`` (see its ``--help``); ``checkpoint_every``
    is in sampler steps for MH (default 50) and in evaluations for nevergrad (default every
    batch). Workers run on the backend of :func:`residualsim.parallel.workers.parallel_backend`.
    ``substeps`` default: the scene's, for trajectories and impacts alike (as ``data
    synthesize``, ``train`` and ``predict`` use). ``noise``: observation noise scale σ (m
    for trajectories, m/s for impacts), default estimated. ``initial``: MH starts there
    (its pilot fit, or the raw likelihood's chains; e.g. MPEC's values,
    :func:`residualsim.sysid.mpec.calibration.calibrate_mpec`). ``split_fractions`` /
    ``split_lists``: the train / validation / test split
    (:func:`residualsim.data.splits.split_recordings`; default 0.7/0.15/0.15).
    ``initial_draws``: initial states drawn per recording whose initial state was fitted
    from poses (:class:`~residualsim.sysid.likelihood.TrajectoryLikelihood`); default
    :data:`DEFAULT_INITIAL_DRAWS`, 0 with the bootstrap (§20.4; velocities: one rollout).
    ``delayed_acceptance``: MH screens each proposal on this fraction of the recordings
    first (:class:`~residualsim.sysid.likelihood.StagedLikelihood`; the chain stays exact).
    ``rotation_weight``: weight w of the squared rotation angle against the squared position
    error in each recording's error (trajectories only; see
    :mod:`residualsim.sysid.likelihood`); the summary's ``train_rms_error`` (m) and
    ``noise_estimate`` are of that weighted error, so with w != 1 they do not compare with
    an unweighted calibration's (``train/calibration_crossloss.py`` re-scores unweighted).
    ``names`` may hold groups (``contact``, ``soft_contact``, ``body``, ``joints``) and
    body and joint names (:mod:`residualsim.sysid.bodyspace`); ``method="lsq"`` is least
    squares on trajectory error (:mod:`residualsim.sysid.lsq`, ``budget`` parameter sets,
    default 600 on the body, else 200: :func:`~residualsim.sysid.bodyspace.default_budget`).
    ``export_urdf``: also write the scene's URDF with the identified values there.
    ``recorded_start``: ``"fit"`` or ``"recorded"`` (default :data:`DEFAULT_RECORDED_START`;
    ``"fit"`` with the bootstrap's covariance),
    how the first pose of a recording with recorded velocities is treated (``fit_recorded``
    of :class:`~residualsim.sysid.likelihood.TrajectoryLikelihood`; train/README.md §20);
    with ``"fit"`` lsq and the validation split start from the fitted poses too.
    ``method="sandwich"`` (trajectories, noise estimated): the pilot fit below, each
    recording's ν_i measured there, the ν-weighted mode (30 evaluations) and the Gaussian
    of :func:`~residualsim.sysid.weighting.sandwich_posterior` about the envelope there
    (``median``, ``q05``, ``q95`` as MH's; train/README.md §20); ``covariance="bootstrap"``:
    its covariance from ``bootstrap_replicates`` (10) refits (§20.4).
    ``weighting``: one of :data:`~residualsim.sysid.calibrate_options.WEIGHTINGS` (default
    calibrated; ``"recording"`` with ``delayed_acceptance``), the likelihood MH samples on
    trajectories with the noise estimated (refused otherwise, as are the options of other
    methods: :func:`~residualsim.sysid.calibrate_options.check_applicable`). ``"calibrated"``:
    :func:`~residualsim.sysid.calibrated.calibrated_weights`: the envelope's mode ẑ where
    chains start, its sandwich covariance times the few-recordings factor of
    ``small_sample`` or, with ``covariance="bootstrap"`` (the default), the wider of that
    and the bootstrap's about ẑ; the share ``rugged_weight`` λ (0.2; 0 with the bootstrap:
    §20.5) of the likelihood's departure kept, proposals screened on the envelope (so no
    ``delayed_acceptance``). ``"effective"``: the mode's curvature adjusted to the scatter
    between recordings (Chandler and Bate 2007; :mod:`residualsim.sysid.weighting`). The
    pilot fit: ``initial``, or with body or joint names the staged least-squares fit
    (:func:`~residualsim.sysid.lsq.lsq_pilot`, ``budget``), or the best of 32 × ``chains``
    Sobol points; refined by 40 Nelder-Mead evaluations.
    ``names`` may also hold the group ``solver`` (the solver parameters the scene's engine
    honours, :func:`~residualsim.sysid.bodyspace.solver_group`); a solver parameter the
    engine ignores is refused before any work. ``base``: values of the parameters not
    calibrated (:func:`~residualsim.sim.scenes.parse_params`, e.g. a calibration directory,
    to add parameters to an earlier calibration); default PyBullet's.
    ``ground``: after a search on trajectories, set ``table_height_m`` from the rest phases
    (:func:`residualsim.sysid.ground.ground_stage`; the summary's ``ground`` says what or why
    not). ``train_rms_error`` is the searched point's; held-out figures the final params'.
    With a validation split (``split="train"``), the held-out guard
    (:func:`~residualsim.sysid.held_out.held_out_guard`) keeps the best on the held-out
    recordings (the validation split and the training recordings ``max_items`` left
    unused, :mod:`residualsim.sysid.calibration_data`; the summary's ``validation`` figures
    are theirs, ``held_out_counts`` says how many of each) of the
    calibrated set, the object's own URDF body with the calibrated contact (when body or
    joint names were calibrated) and PyBullet's defaults: the summary's ``params``/``body``
    and ``export_urdf`` are the kept set, ``calibrated_params``/``calibrated_body`` the
    search's, ``held_out_choice`` says which; ``keep_calibrated`` keeps the calibrated set
    (with a warning when it is worse). ``guard_against``: a contact-only calibration
    directory of this scene and substep count, which the guard also scores
    (:mod:`residualsim.sysid.held_out`, candidate ``contact_fit``).
    ``out`` holding another run, or this one without ``resume``, is refused before any work
    (:func:`residualsim.atomic.check_output`; ``run.json`` there names the run).
    Returns the summary written to ``out/summary.json``.
    """
    asked = {"weighting": weighting, "small_sample": small_sample, "rugged_weight": rugged_weight}
    weighting, small_sample = check_options(
        method, max_items=max_items, weighting=weighting,
        delayed_acceptance=delayed_acceptance, recorded_start=recorded_start,
        proposal_scale=proposal_scale, rugged_weight=rugged_weight, small_sample=small_sample,
        covariance=covariance, noise=noise, bootstrap_replicates=bootstrap_replicates,
        optimizer=optimizer, checkpoint_every=checkpoint_every)
    optimizer = optimizer or "CMA"
    budget = budget or default_budget(method, names)  # 600 for lsq on the body, else 200
    started = time.perf_counter()
    data, out = Path(data), Path(out)
    scene = make_scene(scene)  # resolved once here; every stage below takes the object
    name = scene_reference(scene)  # what the files say
    base = None if base is None else parse_params(base)
    if base is not None and body_of(base) is not None:  # made for this object?
        spec = getattr(scene, "spec", None)
        if spec is not None:
            check_body_matches(spec.urdf, body_of(base))
    space = ParamSpace(names, bounds=bounds, priors=priors, base=base, scene=name)
    run = calibration_run(name, space.names, method, base)
    check_output(out, kind="dir", command="calibrate", run=run, resume=resume, flag="out")
    scene.check_params(space.engine_params(space.from_unit(space.start())))
    recordings = load_calibration_data(scene, data, split, max_items,
                                       fractions=split_fractions, lists=split_lists)
    kind, train, validation = recordings.kind, recordings.train, recordings.validation
    check_applicable(method, noise=noise, impacts=kind == "impacts", **asked)
    if recordings.duplicates:  # said now, before the long run, and in the summary
        log.warning("%s: %s", data, recordings.duplicates)
    covariance = covariance or default_covariance(method, weighting, noise, kind)
    check_covariance(covariance, method, bootstrap_replicates, weighting)  # impacts: none
    if rugged_weight is None:  # the bootstrap's envelope alone (§20.5), the sandwich's 0.2
        rugged_weight = 0.0 if covariance == "bootstrap" else DEFAULT_RUGGED
    recorded_start = recorded_start or ("fit" if covariance == "bootstrap" else
                                        DEFAULT_RECORDED_START.get(method, "recorded"))
    fit_recorded = recorded_start == "fit"
    if kind == "impacts":
        if rotation_weight != 1.0:
            raise ParameterError("rotation_weight applies to trajectories, not impacts")
        likelihood = ImpactLikelihood(scene, train, substeps, noise, n_workers)
    else:
        draws = (0 if covariance == "bootstrap" else DEFAULT_INITIAL_DRAWS) \
            if initial_draws is None else initial_draws
        if delayed_acceptance and method == "mh":
            likelihood = StagedLikelihood(scene, train, delayed_acceptance, seed=seed,
                                          substeps=substeps, noise_m=noise,
                                          n_workers=n_workers, initial_draws=draws,
                                          rotation_weight=rotation_weight,
                                          fit_recorded=fit_recorded)
        else:
            likelihood = TrajectoryLikelihood(scene, train, substeps, noise, n_workers,
                                              initial_draws=draws, seed=seed,
                                              rotation_weight=rotation_weight,
                                              fit_recorded=fit_recorded)
    settings = likelihood.settings
    contact_fit = _contact_fit(guard_against, scene, settings.substeps)  # before the search
    claim_output(out, run, resume=resume, flag="out")
    fingerprint = {"scene": name, "data": _data_fingerprint(likelihood.ids),
                   "n_items": likelihood.n_items, "dt_s": settings.dt_s,
                   "substeps": settings.substeps, "noise": noise, "seed": seed,
                   "method": method}
    if getattr(likelihood, "initial_draws", 0):
        fingerprint["initial_draws"] = likelihood.initial_draws
    if isinstance(likelihood, StagedLikelihood):
        fingerprint["delayed_acceptance"] = likelihood.fraction
    if rotation_weight != 1.0:
        fingerprint["rotation_weight"] = float(rotation_weight)
    if kind == "trajectories" and fit_recorded:
        fingerprint["recorded_start"] = "fit"
    if base is not None:
        fingerprint["base"] = base.as_json()
    log.info("calibrating %s on %d %s of %s (%s split, %d substeps, %d workers)",
             ", ".join(space.names), likelihood.n_items, kind, data, split,
             settings.substeps, likelihood.n_workers)
    with likelihood:
        def log_like(x: np.ndarray) -> np.ndarray:
            return likelihood([space.engine_params(row) for row in x])

        def negative_log_like(x: np.ndarray) -> np.ndarray:
            # per recording, so the loss reads the same for any data size
            return -log_like(x) / likelihood.n_items

        result: dict[str, Any] = {}
        start = None if initial is None else [float(initial[n]) for n in space.names]
        body = names_body(space.names) and kind == "trajectories"

        def staged_pilot() -> list[float]:
            """MH's and the sandwich's start with body or joint names: found in stages, not
            by a box search (§22), the recordings' first states fitted again with it."""
            found, result["lsq_pilot"] = lsq_pilot(
                scene, train, space, likelihood, budget=budget, out=out, resume=resume,
                fingerprint=fingerprint, progress=progress, n_workers=n_workers,
                rotation_weight=rotation_weight, seed=seed)
            likelihood.refit_starts(space.engine_params(np.asarray(found)))
            return found

        if method == "mh":
            if start is not None:
                fingerprint["initial"] = start
            adjusted = kind == "trajectories" and noise is None and weighting != "recording"
            effective = adjusted and weighting == "effective"
            to_params, target, screen = space.engine_params, log_like, None
            if covariance == "bootstrap" and not adjusted:
                raise ParameterError("--covariance bootstrap is for trajectories with the "
                                     "noise scale estimated (no --noise)")
            if adjusted and weighting == "calibrated":
                fingerprint["weighting"] = {"method": "calibrated", "rugged_weight":
                                            rugged_weight, "small_sample": small_sample}
                if covariance == "bootstrap":
                    fingerprint["weighting"]["bootstrap"] = \
                        bootstrap_replicates or DEFAULT_REPLICATES
            elif effective:
                fingerprint["weighting"] = "effective"
            check_resumable(out / "checkpoint.npz", fingerprint, resume, space, burn_in,
                            {"n_chains": chains, "proposal_scale": proposal_scale,
                             "adapt": adapt, "init_draws": start_points})
            start = staged_pilot() if body and start is None else start
            if adjusted and weighting == "calibrated":
                result["weighting"], calibrated_mh = calibrated_weights(
                    likelihood, log_like, space, seed, start_points * chains, start,
                    rugged_weight, small_sample, None if covariance != "bootstrap" else
                    lambda mode: bootstrap_about(
                        scene, likelihood, space, mode, seed=seed,
                        sobol_points=start_points * chains,
                        replicates=bootstrap_replicates or DEFAULT_REPLICATES,
                        checkpoint=out / "bootstrap-checkpoint.json", resume=resume,
                        search=not body, progress=progress))
                start = result["weighting"]["mode"]
                target, screen = calibrated_mh.target, calibrated_mh.screen
            elif effective:
                result["weighting"], move = effective_weights(likelihood, log_like, space,
                                                              seed, start_points * chains, start)
                start = result["weighting"]["mode"]
                if move is not None:
                    def to_params(x: np.ndarray) -> EngineParams:
                        return space.engine_params(move(x))

                    def target(x: np.ndarray) -> np.ndarray:
                        return likelihood([to_params(row) for row in x])
            if screen is None and isinstance(likelihood, StagedLikelihood):
                screen = likelihood.screen(to_params)
            sampler = MetropolisHastings(target, space, n_chains=chains,
                                         proposal_scale=proposal_scale, adapt=adapt, rng=seed,
                                         screen=screen, init_draws=start_points)
            every = 50 if checkpoint_every is None else checkpoint_every
            posterior = sampler.run(samples, burn_in, initial=start,
                                    checkpoint=out / "checkpoint.npz",
                                    checkpoint_every=every, resume=resume,
                                    fingerprint=fingerprint, progress=progress,
                                    meta={**fingerprint, "data_path": str(data)})
            posterior.save(out / "posterior.npz")
            result.update(posterior.summary())
            result["warnings"] = convergence_warnings(result) + \
                result.get("lsq_pilot", {}).get("warnings", [])
            if effective and result["weighting"]["adjustment_transform"] is None:
                result["warnings"].append(
                    "the likelihood's curvature could not be adjusted to the scatter between "
                    "recordings (flat or rugged around the mode): the posterior may be too "
                    "narrow (--weighting recording is wider)")
            result["warnings"] += (result.get("weighting") or {}).get(
                "adjustment", {}).get("warnings", [])
            for warning in result["warnings"]:
                log.warning("%s: %s", out, warning)
            point = posterior.median()
            result["evaluations"] = posterior.meta["evaluations"]
            result["rollouts"] = getattr(likelihood, "n_rollouts", None)
            if screen is not None:
                result["screened"] = posterior.meta["screened"]
            result["sampling_seconds"] = posterior.meta["seconds"]
            result["final_proposal_scale"] = posterior.meta["final_scale"]
            if plots:
                from residualsim.sysid.plots import corner_plot, trace_plot

                corner_plot(posterior, out / "corner.png")
                trace_plot(posterior, out / "trace.png")
        elif method == "sandwich":
            if kind != "trajectories" or noise is not None:
                raise ParameterError("method 'sandwich' is for trajectories with the noise "
                                     "scale estimated (no --noise)")
            start = staged_pilot() if body and start is None else start
            result.update(sandwich_calibration(
                likelihood, log_like, space, seed, start_points * chains, start,
                checkpoint=out / "sandwich-checkpoint.json", resume=resume,
                fingerprint={**fingerprint, "space": space.as_json(), "start": start}))
            if covariance == "bootstrap" and result["sandwich"]["covariance_unit"] is not None:
                result.update(bootstrap_sandwich(
                    scene, likelihood, space, result, seed=seed,
                    sobol_points=start_points * chains,
                    replicates=bootstrap_replicates or DEFAULT_REPLICATES,
                    checkpoint=out / "bootstrap-checkpoint.json", resume=resume,
                    search=not body, progress=progress))
            result["warnings"] += result.get("lsq_pilot", {}).get("warnings", [])
            point = result["median"]
        elif method == "lsq":
            if kind != "trajectories":
                raise ParameterError("method 'lsq' fits trajectories, not impacts")
            from residualsim.sysid.lsq import staged_least_squares

            found = staged_least_squares(  # as read: a body stage fits them itself
                scene, train, space, likelihood, budget=budget, out=out, resume=resume,
                fingerprint=fingerprint, progress=progress, n_workers=n_workers,
                rotation_weight=rotation_weight, seed=seed)
            atomic_write_text(out / "history.json", json.dumps(found["history"]))
            point = dict(zip(space.names, found["x"]))
            result.update({"best": point, "loss": found["loss"],
                           "evaluations": found["evaluations"], "failed": found["failed"],
                           "lsq_stages": found["stages"], "warnings": found["warnings"]})
            for warning in found["warnings"]:
                log.warning("%s: %s", out, warning)
        else:
            found = point_estimate(negative_log_like, space, budget=budget, optimizer=optimizer,
                                   batch_size=4, rng=seed, start=space.start(),
                                   checkpoint=out / "nevergrad-checkpoint.npz", resume=resume,
                                   checkpoint_every=checkpoint_every, fingerprint=fingerprint,
                                   progress=progress)
            atomic_write_text(out / "history.json", json.dumps(found["history"]))
            point = dict(zip(space.names, found["x"]))
            result.update({"best": point, "loss": found["loss"],
                           "start_loss": found["start_loss"],
                           "evaluations": found["evaluations"], "failed": found["failed"],
                           "warnings": found["warnings"]})
            for warning in found["warnings"]:
                log.warning("%s: %s", out, warning)
        params = space.engine_params([point[n] for n in space.names])
        at_point = likelihood.errors([params])[0]
        result["train_rms_error"] = float(np.sqrt(np.mean(at_point)))
        result["noise_estimate"] = likelihood.noise_estimate(at_point)
        result["worker_restarts"] = likelihood.restarts
    if kind == "trajectories" and ground:
        from residualsim.sysid.ground import ground_stage

        params, result["ground"] = ground_stage(scene, train, params, space.names,
                                                settings.substeps, n_workers)
    held_out, guard, calibrated_params = None, {}, params
    n_validation = 0 if validation is None else (
        validation.n_impacts if kind == "impacts" else len(validation))
    if recordings.held_out is None:  # said, and recorded: the guard did not run
        guard["held_out_guard"] = "did not run: " + (
            "--split all fits every recording, none is left out (--max-trajectories N "
            "leaves the rest out, and they are scored)" if split == "all" else
            "no validation recording and none left unused")
        if split == "all":  # (split "train": the empty validation split is warned below)
            result.setdefault("warnings", []).append(
                f"the held-out guard {guard['held_out_guard']}")
            log.warning("%s: %s", out, result["warnings"][-1])
    else:  # the validation split and what --max-trajectories left out (split "all" too)
        params, guard, warnings = held_out_guard(
            scene, kind, recordings.held_out, params, space.names, settings.substeps,
            n_workers, method=method, keep_calibrated=keep_calibrated, fit_starts=fit_recorded,
            contact_fit=contact_fit, contact_fit_source=str(guard_against or ""))
        held_out = guard.pop("validation")
        guard["held_out_counts"] = recordings.held_out_counts()
        for warning in warnings:
            result.setdefault("warnings", []).append(warning)
            log.warning("%s: %s", out, warning)
    if recordings.duplicates:
        result.setdefault("warnings", []).append(recordings.duplicates)
    if split != "all" and n_validation < 2:
        warning = ("the validation split holds one recording only: its figures say little"
                   if n_validation else "the validation split is empty: no held-out figures")
        result.setdefault("warnings", []).append(warning + " (--split-fractions or "
                                                 "--split-ids choose the splits)")
        log.warning("%s: %s", out, result["warnings"][-1])
    body = body_of(params)
    summary = {
        "format": SUMMARY_FORMAT, "method": method,
        "scene": path_for_file(name, out) if is_scene_path(name) else name,
        "params": params.as_json(), "calibrated": space.names,
        **({"body": body.as_json(),
            "total_mass_kg": {"value": body.mass_kg, "note": "kept from the URDF: poses "
                              "alone cannot observe the total mass"}} if body else {}),
        **result,
        "settings": {"dt_s": settings.dt_s, "substeps": settings.substeps},
        "data": {"path": str(data), "kind": kind, "split": split,
                 "n_items": likelihood.n_items, "ids_sha256": fingerprint["data"]},
        "space": space.as_json(), "seed": seed, "noise": noise, "workers": n_workers,
        "initial_draws": getattr(likelihood, "initial_draws", 0),
        "delayed_acceptance": getattr(likelihood, "fraction", None),
        "rotation_weight": float(rotation_weight),
        "recorded_start": recorded_start if kind == "trajectories" else None,
        "weighting": ({"method": weighting, **result.pop("weighting")}
                      if "weighting" in result else {"method": "recording"}),
        "backend": current_backend().name,
        "validation": held_out, **guard,
        "calibrated_params": calibrated_params.as_json(),
        **({"calibrated_body": body_of(calibrated_params).as_json()}
           if body_of(calibrated_params) else {}),
        "validation_count": n_validation if split != "all" else 0,
        "seconds": time.perf_counter() - started,
    }
    atomic_write_text(out / "summary.json", json.dumps(_json_safe(summary), indent=2))
    if export_urdf is not None:
        export_calibrated_urdf(scene, params, export_urdf, note=urdf_note(summary))
        if guard.get("held_out_choice", "calibrated") != "calibrated":
            log.warning("%s: --export-urdf %s holds the %s set, not the calibrated one "
                        "(worse on validation; --keep-calibrated writes it)", out, export_urdf,
                        guard["held_out_choice"])
    return summary


def _contact_fit(directory: str | os.PathLike[str] | None, scene: Scene, substeps: int
                 ) -> EngineParams | None:
    """The parameters of the contact-only calibration in ``directory`` for the held-out
    guard; DataError when it is not one of ``scene`` at ``substeps`` (contact values do not
    transfer across substep counts) or holds a body of its own."""
    if directory is None:
        return None
    found = load_calibration(directory)
    where = f"--guard-against {directory}"
    if not same_scene(found.scene, scene):
        raise DataError(f"{where}: a calibration of scene {found.scene!r}, not "
                        f"{scene_reference(scene)!r}")
    if found.substeps != substeps:
        raise DataError(f"{where}: calibrated at {found.substeps} substeps, this run at "
                        f"{substeps}: contact values do not transfer across substep counts")
    if body_of(found.params) is not None:
        raise DataError(f"{where}: holds a body of its own; the guard compares a contact-only "
                        "fit with the URDF's body (calibrate --params contact)")
    return found.params


def export_calibrated_urdf(scene: str | Scene, params: EngineParams, out: str | os.PathLike[str],
                           note: str | None = None) -> Path:
    """Write the scene's URDF with ``params``' body (if any) and contact coefficients in
    each link's ``<contact>`` element (:func:`residualsim.sim.scenes.body.write_urdf`);
    ``note`` its first comment (calibrate: :func:`~residualsim.sysid.determined.urdf_note`)."""
    from residualsim.sim.scenes.body import write_urdf

    spec = getattr(make_scene(scene), "spec", None)
    if spec is None:
        raise ParameterError(f"scene {scene_reference(scene)!r} is built in: --export-urdf needs an object "
                             "from a scene file or URDF")
    return write_urdf(spec.urdf, out, body=body_of(params), contact=params, note=note)


def _json_safe(value: Any) -> Any:
    """Replace non-finite floats (strict JSON has none) with strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value
