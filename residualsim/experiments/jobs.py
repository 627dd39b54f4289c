"""The command line's jobs as library calls, each composing several wings.

Each function here is what one ``residualsim`` command does, minus argument parsing and
printing, so a test or a notebook reaches it without the command line:

* :func:`simulate_dataset`: the engine from every recorded initial state (``simulate``);
* :func:`score_file`: a prediction file against recordings (``score``);
* :func:`predict_dataset`: a trained model on recordings or impacts (``predict``);
* :func:`synthesize_set`: synthetic tosses with their truth (``data synthesize``);
* :func:`identify_loop`: the arm + loop stiffness from a joint recording (``calibrate
  --scene arm-loop``);
* :func:`rollout_job`: stochastic rollouts and beliefs from a state or a toss (``rollout``);
* :func:`model_and_tosses`, :func:`fit_spread_job`: a model's sampling spread
  (``fit-spread``).

Positions are metres and quaternions w-x-y-z, world frame, as everywhere in residualsim.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from residualsim.data import detect_format, load_impacts, load_trajectories
from residualsim.data.datasets import resolve_data
from residualsim.data.splits import (DEFAULT_FRACTIONS, recording_selector, select_impacts,
                                     select_recordings, split_ids)
from residualsim.errors import DataError, ParameterError
from residualsim.experiments.data_info import describe_for_scene  # noqa: F401 (data info)
from residualsim.sim.recordings import load_recordings, prepare_recordings
from residualsim.sim.scenes import Scene

__all__ = ["describe_for_scene", "simulate_dataset", "score_file", "predict_dataset", "synthesize_set",
           "identify_loop", "rollout_job", "rollout_memory_bytes", "model_and_tosses",
           "fit_spread_job"]

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from residualsim.residual.model import ResidualModel

PathLike = str | os.PathLike[str]


def simulate_dataset(scene: str | Scene, data: Path, params: str | None = None, n_workers: int = 1,
                     substeps: int | None = None, split: str = "all",
                     limit: int | None = None, fractions=None, lists=None):
    """The engine from each recording's first sample (or each impact's pre-contact state).

    ``params``: ``k=v,...``, a JSON file or a calibration directory (its substeps are used
    unless ``substeps`` is given). Returns ``(predictions, count)``: a
    :class:`~residualsim.evaluation.TrajectoryPredictions` (one sample) or, for the MCube
    impacts, :class:`~residualsim.evaluation.ImpactPredictions` in the upstream x-axis
    convention.
    """
    from residualsim.evaluation.predictions import ImpactPredictions, TrajectoryPredictions
    from residualsim.sim.rollout import simulate_impacts, simulate_trajectories
    from residualsim.sim.scenes import make_scene, scene_reference
    from residualsim.sysid.calibration_file import calibration_rate_hz, engine_from_option

    scene = layout = make_scene(scene)  # resolved once; the stages below take the object
    engine_params, substeps, provenance = engine_from_option(params, substeps, scene)
    meta = {"scene": scene_reference(scene), **provenance, "data": str(data), "split": split,
            "command": "simulate"}
    if detect_format(data) == "mcube":
        if not layout.planar:
            raise DataError(f"{data}: planar impacts need a planar scene (planar-ellipse, or "
                            f"a scene file with kind = \"planar\"), not {meta['scene']!r}")
        impacts = select_impacts(load_impacts(data, convention="corrected"), split, limit)
        velocity = simulate_impacts(scene, impacts, engine_params, n_workers, substeps)
        velocity[:, 0] *= -1.0  # back to the upstream files' x-axis convention
        predictions = ImpactPredictions(post_velocity=velocity[None], rows=impacts.rows,
                                        meta={**meta, "convention": "upstream"})
        return predictions, impacts.n_impacts
    trajectories = load_recordings(data, scene, calibration_rate_hz(params), engine_params,
                                   select=recording_selector(split, limit, fractions=fractions,
                                                             lists=lists, source=str(data)))
    results = simulate_trajectories(scene, trajectories, engine_params, n_workers, substeps)
    meta["dt_s"] = float(np.diff(next(iter(trajectories.values())).times_s).mean())
    joints = getattr(layout, "n_joints", 0)
    predictions = TrajectoryPredictions(
        {k: (r.positions_m[None], r.quat_wxyz[None]) + (
            (layout.joint_positions(r.states)[None],) if joints else ())
         for k, r in results.items()}, meta)
    return predictions, len(results)


def score_file(pred: PathLike, data: PathLike | None, scene: str | None = None, *,
               with_meta: bool = False):
    """Score a prediction file against recordings: a ``TrajectoryScore`` (errors also in
    sides of the scene's cube, where it has one) or an ``ImpactScore``; with ``with_meta``,
    ``(score, the file's meta)`` (its ``split``, ``data``, ...). ``data`` defaults
    to the folder the file records (``meta["data"]``, see
    :func:`~residualsim.evaluation.predictions.recorded_data`), else to
    ``$RESIDUALSIM_DATA/<the set of the prediction file's scene>``."""
    from residualsim.evaluation.metrics import score_impacts, score_trajectories
    from residualsim.evaluation.predictions import (ImpactPredictions, load_predictions,
                                                    recorded_data, recorded_scene)
    from residualsim.sim.scenes import make_scene

    predictions = load_predictions(pred)
    if data is None:
        data = recorded_data(predictions, pred)
        if data is not None and not data.exists():
            raise DataError(f"{pred}: the recordings it was made from are not at {data} "
                            "any more; pass --data DIR")
    if data is None:
        default = "planar-ellipse" if isinstance(predictions, ImpactPredictions) else "cube"
        data = resolve_data(None, scene or recorded_scene(predictions, pred) or default)
    if isinstance(predictions, ImpactPredictions):
        convention = predictions.meta.get("convention", "upstream")
        score = score_impacts(predictions, load_impacts(data, convention=convention))
        return (score, predictions.meta) if with_meta else score
    from residualsim.errors import PredictionError
    from residualsim.sim.scenes import same_scene

    predicted = recorded_scene(predictions, pred)
    if scene and predicted and not same_scene(predicted, scene):
        raise PredictionError(f"{pred}: predictions of scene {predicted!r}, not {scene!r}")
    scene = scene or predicted or "cube"
    layout = make_scene(scene)
    dt_s = predictions.meta.get("dt_s")  # CSV recordings resampled as they were predicted
    recordings = load_trajectories(data, rate_hz=1.0 / dt_s if dt_s else None)
    for recording in recordings.values():  # a planar scene's score of 3D tosses, ...
        layout.check_recording(recording)
    side = getattr(layout, "side_m", None)
    score = score_trajectories(predictions, recordings, side_m=side,
                               radius_of_gyration_m=layout.radius_of_gyration_m)
    return (score, predictions.meta) if with_meta else score


def predict_dataset(model_dir: PathLike | ResidualModel, data: str | None, *, samples: int = 0,
                    seed: int = 0,
                    n_workers: int = 1, residual: bool = True, split: str = "all",
                    limit: int | None = None, fractions=None, lists=None, policy=None,
                    batch_size: int | None = 1, max_minutes: float | None = None,
                    progress: Callable[[float], None] | None = None):
    """A trained model (trajectories or single impacts) on ``data``: ``(predictions, figures)``.

    ``samples`` = 0 gives the mean prediction; ``residual=False`` the model's calibrated
    engine alone; ``policy`` (trajectories only) replaces the model's sampling policy (as
    :func:`~residualsim.sim.rollout.predict_trajectories` takes it, as its ``batch_size``:
    copies of the body per PyBullet world for the samples). ``data`` defaults to
    ``$RESIDUALSIM_DATA/<the model scene's set>``. DataError when the data and the model
    are of different kinds. ``samples`` above two are bounded (issue 67): the predictions
    against the memory left before any rollout, the time by a first measurement of two
    samples of each recording (:func:`~residualsim.experiments.budget.bounded_run`; its
    estimate goes to ``progress``), refused past ``max_minutes`` (None: no limit).
    """
    from residualsim.experiments.budget import bounded_run
    from residualsim.parallel import require_memory
    from residualsim.residual.model import ResidualModel

    model = ResidualModel.of(model_dir)
    data = resolve_data(data, model.scene)
    impact_data, impact_model = detect_format(data) == "mcube", \
        model.info.get("kind") == "impacts"
    if impact_data != impact_model:
        raise DataError(f"{data}: {'planar impacts' if impact_data else 'trajectories'}, but "
                        f"{model_dir} is a model of "
                        f"{'single impacts' if impact_model else 'trajectories'}")
    meta = dict(model=str(model_dir), data=str(data), split=split, command="predict")
    if impact_data:
        from residualsim.residual.impact import predict_impacts

        impacts = select_impacts(load_impacts(data, convention="corrected"), split, limit)
        require_memory(max(samples, 1) * impacts.n_impacts * 3 * 8 * 2,  # velocities, twice
                       lambda gib: f"--samples {samples} on {impacts.n_impacts} impacts needs "
                                   f"at least {gib:.3g} GiB", "lower --samples or --limit")
        predictions = bounded_run(
            lambda s: predict_impacts(model, impacts, samples=s, seed=seed,
                                      n_workers=n_workers, residual=residual), samples,
            option="--samples", of=f"samples of the {impacts.n_impacts} impacts",
            max_minutes=max_minutes, remedy="lower --samples or --limit", progress=progress)
        predictions.meta.update(meta)
        return predictions, {"count": impacts.n_impacts,
                             "samples": predictions.post_velocity.shape[0]}
    from residualsim.sim.rollout import predict_trajectories

    trajectories = load_recordings(data, model.layout, 1.0 / model.dt_s, model.params,
                                   select=recording_selector(split, limit, fractions=fractions,
                                                             lists=lists, source=str(data)))
    from residualsim.experiments.uncertainty import check_samples_memory

    check_samples_memory(trajectories, int(samples))
    predictions, stats = bounded_run(
        lambda s: predict_trajectories(model, trajectories, samples=s, seed=seed,
                                       n_workers=n_workers, residual=residual, policy=policy,
                                       batch_size=batch_size), samples, option="--samples",
        of=f"samples of the {len(trajectories)} recordings", max_minutes=max_minutes,
        remedy="lower --samples or --limit", progress=progress)
    predictions.meta.update(meta)
    return predictions, {"count": len(trajectories), "samples": predictions.n_samples,
                         **stats}


def synthesize_set(out: PathLike, params: str, *, scene: str = "cube",
                   like: PathLike | None = None, limit: int | None = None, count: int = 8,
                   n_samples: int = 110, noise_m: float = 0.0, noise_rad: float = 0.0,
                   seed: int = 0, substeps: int | None = None, rate_hz: float | None = None,
                   n_workers: int = 1, overwrite: bool = False) -> tuple[Path, int, dict]:
    """Synthetic tosses of ``scene`` with known ``params``, with ``synthetic.json`` (the
    truth) beside them: ``(directory, count, engine params)``. The cube is written in the
    ContactNets format, any other object (a scene file) as CSV poses without velocities.

    From the initial states and lengths of the set ``like`` (its first ``limit``), else
    ``count`` sampled tosses of ``n_samples`` at ``rate_hz``. Noise: ``noise_m`` m per
    position axis (and prismatic joint), ``noise_rad`` rad per rotation-vector axis (and
    revolute joint).
    """
    from residualsim.sim.scenes import make_scene, parse_params
    from residualsim.sim.synthesize import synthesize_tosses, write_toss_set

    engine_params = parse_params(params)
    recordings = None
    if like:
        recordings = select_recordings(load_recordings(resolve_data(like), scene), "all",
                                       limit)
    tosses = synthesize_tosses(engine_params, like=recordings, n_tosses=count,
                               n_samples=n_samples, noise_m=noise_m, noise_rad=noise_rad,
                               rng=seed, n_workers=n_workers, substeps=substeps, scene=scene,
                               rate_hz=rate_hz)
    csv = scene != "cube"
    truth = {"scene": scene, "params": engine_params.as_json(), "noise_m": noise_m,
             "noise_rad": noise_rad, "seed": seed,
             "substeps": substeps or make_scene(scene).settings.substeps,
             "like": str(like) if like else None, "count": len(tosses),
             "note": "synthetic recordings made by residualsim's engine; " + (
                 "CSV poses only, as a motion-capture user has them" if csv else
                 "velocities are the simulated ones, without noise")}
    path = write_toss_set(out, tosses, truth, overwrite=overwrite, csv=csv)
    return path, len(tosses), engine_params.as_json()


def identify_loop(data: PathLike | None, out: PathLike, method: str,
                  seed_kappa: tuple[float, float], *, n_workers: int = 1,
                  estimate_offsets: bool = False, samples: int = 3000, burn_in: int = 1000,
                  seed: int = 0, resume: bool = False,
                  progress: Callable[[dict], None] | None = None) -> dict:
    """The loop's spring stiffnesses (κ_θ, κ_ψ) N m/rad from a joint recording; writes
    ``out/summary.json`` (atomically) and returns it. Rollouts are cached in
    ``out/rollouts``; an earlier run's cache is reused only with ``resume``; ``out`` holding
    another run is refused (:func:`residualsim.atomic.check_output`)."""
    from residualsim.atomic import atomic_write_text, check_output, claim_output
    from residualsim.data.joint_recording import load_joint_recording
    from residualsim.sysid.calibrate import calibration_run
    from residualsim.sysid.loop_stiffness import identify_stiffness

    if not data:
        raise DataError("calibrate --scene arm-loop needs --data: a joint recording (.npz) "
                        "or a directory holding one (residualsim data synthesize --scene "
                        "arm-loop makes one)")
    if method not in ("lsq", "gradient", "homotopy", "mh"):
        raise ParameterError("--scene arm-loop takes --method lsq, gradient, homotopy or mh")
    run = calibration_run("arm-loop", (), method)
    check_output(out, kind="dir", command="calibrate", run=run, resume=resume, flag="out")
    recording = load_joint_recording(data)
    out = Path(out)
    cache = out / "rollouts"
    if cache.is_dir() and any(cache.iterdir()) and not resume:
        raise DataError(f"{cache}: rollouts of an earlier run exist; resume it (--resume) or "
                        "choose another output")
    claim_output(out, run, resume=resume, flag="out")
    result = identify_stiffness(
        recording, method, seed_kappa, n_workers=n_workers,
        estimate_offsets=estimate_offsets, mh_samples=samples, mh_burn_in=burn_in, rng=seed,
        cache_dir=cache, progress=progress)
    summary = {"scene": "arm-loop", "data": str(recording.source), **result.as_json(),
               "seed_kappa": list(seed_kappa), "history": result.history}
    if result.posterior is not None:
        draws = result.posterior.samples.reshape(-1, 2)
        summary["q05"], summary["q95"] = np.percentile(draws, [5, 95], axis=0).tolist()
    truth = recording.metadata.get("kappa_truth_12")
    if truth:
        summary["truth"] = truth
        summary["rel_error"] = ((result.kappa - np.array(truth)) / np.array(truth)).tolist()
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1) + "\n")
    return summary


#: Copies of the sampled trajectories alive at once in ``rollout`` (the workers' results,
#: their pickled transfer, the gathered arrays and the compressed archive's buffer).
ROLLOUT_COPIES = 4


def rollout_memory_bytes(samples: int, n_steps: int, state_size: int, particles: int = 0,
                         events: int = 0) -> int:
    """Bytes ``rollout`` holds at its peak: ``samples`` trajectories of ``n_steps`` + 1
    states (the scene's ``state_size`` plus position and quaternion, float64), and
    ``particles`` states per contact event, each :data:`ROLLOUT_COPIES` times."""
    per_step = (state_size + 7) * 8
    return int(ROLLOUT_COPIES * (samples * (n_steps + 1) * per_step
                                 + particles * events * state_size * 8 * 2))


def _check_rollout_size(samples: int, n_steps: int, state_size: int, particles: int,
                        events: int) -> None:
    """ParameterError, with the estimate, when the rollout would not fit in memory."""
    from residualsim.parallel import require_memory

    require_memory(rollout_memory_bytes(samples, n_steps, state_size, particles, events),
                   lambda gib: f"rollout of {samples} samples x {n_steps + 1} steps "
                               f"({particles} particles x {events} events) needs about "
                               f"{gib:.3g} GiB", "shorten --horizon or lower --samples / "
                               "--particles")


def rollout_job(model_dir: PathLike | ResidualModel, out: PathLike, *,
                state: np.ndarray | None = None,
                toss: str | None = None, data: str | None = None,
                horizon_s: float | None = None, samples: int = 64, particles: int = 1000,
                events: int = 3, seed: int = 0, n_workers: int = 1, residual: bool = True,
                plot: PathLike | None = None, belief_method: str = "particles",
                max_minutes: float | None = None,
                progress: Callable[[float], None] | None = None) -> dict:
    """Stochastic rollouts and per-contact beliefs from one initial state or recorded toss.

    ``state``: 13 numbers (position m, quaternion w-x-y-z, velocity m/s, angular velocity
    rad/s, world frame) or the scene's state vector; or ``toss``, an id in ``data`` (then the
    sampled initial velocities follow the model's state noise). Writes ``out`` (.npz:
    sampled positions and quaternions, the particles and mixture of each event) and, with
    ``plot``, the belief picture (PNG). ``belief_method``: the belief step
    (:func:`~residualsim.belief.propagation.propagate_belief`'s ``method``; with "conjugate"
    the event particles are its draws' outcomes). The counts are bounded (issue 67): their
    memory before the workers start, their time, with ``max_minutes`` or ``progress``, by
    :func:`~residualsim.experiments.budget.check_rollout_time` (its estimate to
    ``progress``; refused past ``max_minutes``). Returns the command's figures.
    """
    from residualsim.experiments.budget import check_rollout_time
    from residualsim.atomic import atomic_open
    from residualsim.belief.plot import belief_plot
    from residualsim.belief.simulator import (MAX_HORIZON_S, StochasticSimulator,
                                             default_initial_std, toss_state)
    from residualsim.residual.model import ResidualModel
    from residualsim.sim.scenes import make_scene

    from residualsim.data.trajectory import QUATERNION_NORM_TOLERANCE
    from residualsim.sim.recordings import check_start_state

    if (state is None) == (toss is None):
        raise ParameterError("give exactly one of --state and --toss")
    if horizon_s is not None and not (np.isfinite(horizon_s) and horizon_s > 0):
        raise ParameterError(f"--horizon must be a finite number of seconds > 0, got "
                             f"{horizon_s}")
    model = ResidualModel.of(model_dir)
    layout = model.layout
    recorded = None
    if toss is not None:
        path = resolve_data(data, model.scene)
        trajectories = load_trajectories(path, rate_hz=1.0 / model.dt_s)
        if toss not in trajectories:
            from residualsim.data.ids import unknown_id

            raise DataError(unknown_id("toss", toss, trajectories, str(path)))
        recording = prepare_recordings(model.layout, {toss: trajectories[toss]},
                                       model.params)[toss]
        state = model.layout.state_from_trajectory(recording, 0)
        recorded = recording.positions_m
        horizon = horizon_s if horizon_s is not None else \
            recording.times_s[-1] - recording.times_s[0]
    else:
        horizon = horizon_s if horizon_s is not None else 1.5
        state = np.asarray(state, dtype=float)
        if state.shape not in ((13,), (layout.state_size,)) or not np.isfinite(state).all():
            raise ParameterError(f"--state: expected 13 finite numbers (or the "
                                 f"{layout.state_size} of scene {layout.name!r}'s state), "
                                 f"got {state.size}")
        if state.shape == (13,) and not layout.planar:
            norm = float(np.hypot.reduce(state[3:7]))  # no overflow for huge entries
            if abs(norm - 1.0) > QUATERNION_NORM_TOLERANCE:
                raise ParameterError(
                    f"--state: the quaternion w,x,y,z has norm {norm:.4g}, expected 1 "
                    f"(within {QUATERNION_NORM_TOLERANCE:g}, as for recordings)")
        check_start_state(model.layout, state if state.shape != (13,) else toss_state(
            state[:3], state[3:7], state[7:10], state[10:13]))
    if not 0 < horizon <= MAX_HORIZON_S:
        raise ParameterError(f"--horizon must be more than 0 and at most {MAX_HORIZON_S:g} s, "
                             f"got {horizon:g}")
    _check_rollout_size(samples, max(1, int(round(horizon / model.dt_s))),
                        layout.state_size, particles, events)
    start = time.perf_counter()
    with StochasticSimulator(model, n_workers=n_workers, residual=residual) as simulator:
        if state.shape == (13,):
            state = toss_state(state[:3], state[3:7], state[7:10], state[10:13])
        def rollouts(count: int):
            return simulator.rollout(state, horizon, samples=count, seed=seed,
                                     state_noise=toss is not None)  # a recorded state

        def beliefs(count: int, n_events: int = events):
            return simulator.beliefs(state, n_events=n_events, n_particles=count, seed=seed,
                                     method=belief_method)

        if max_minutes or progress is not None:
            check_rollout_time(rollouts, (lambda n: beliefs(n, 1)) if particles and
                               belief_method == "particles" else None, samples, particles,
                               events, max_minutes=max_minutes, progress=progress)
        runs = rollouts(samples)
        steps = beliefs(particles) if particles else []
    arrays = {"positions_m": runs.positions_m, "quat_wxyz": runs.quat_wxyz,
              "times_s": runs.times_s, "initial_state": state, "n_events": runs.n_events,
              "max_penetration_m": runs.max_penetration_m,
              "initial_std": default_initial_std(model)}
    for k, step in enumerate(steps, start=1):
        arrays[f"event{k}_particles"] = step.particles
        if step.belief is not None:
            arrays[f"event{k}_weights"] = step.belief.weights
            arrays[f"event{k}_means"] = step.belief.means
            arrays[f"event{k}_covariances"] = step.belief.covariances
    with atomic_open(out) as handle:
        np.savez_compressed(handle, **arrays)
    if plot:
        belief_plot(steps, plot, recorded_m=recorded, sampled_m=runs.positions_m,
                    title=f"{toss or 'state'}: {particles} particles, {samples} rollouts")
    final = runs.final_positions_m
    return {"out": str(out), "samples": samples, "horizon_s": float(horizon),
            "final_mean_m": final.mean(axis=0).tolist(),
            "final_std_m": final.std(axis=0).tolist(),
            "max_penetration_m": float(runs.max_penetration_m.max()),
            "beliefs": [step.summary() for step in steps],
            "plot": None if plot is None else str(plot),
            "seconds": time.perf_counter() - start}


def model_and_tosses(model_dir: PathLike | ResidualModel, data: str | None, split: str,
                     n_tosses: int | None,
                     unseen: bool = False):
    """The model in ``model_dir`` and the first ``n_tosses`` (None: all) recordings of
    ``split``; with ``unseen``, only those the model was not trained on
    (``info["train_ids"]``)."""
    from residualsim.residual.model import ResidualModel

    model = ResidualModel.of(model_dir)
    path = resolve_data(data, model.scene)
    trajectories = load_recordings(path, model.layout, 1.0 / model.dt_s, model.params)
    keep = split_ids(list(trajectories))[split]
    if not keep:
        raise DataError(f"{path}: none of its {len(trajectories)} recordings falls in the "
                        f"{split} split (the hash split's shares: {DEFAULT_FRACTIONS}); "
                        "give more recordings")
    if unseen:
        if "train_ids" not in model.info:
            raise ParameterError(f"{model_dir}: the model does not record which tosses it "
                                 f"was trained on (info.train_ids), so --unseen cannot apply")
        trained = set(model.info["train_ids"])
        keep = [k for k in keep if k not in trained]
        if not keep:
            raise DataError(f"{model_dir}: every {split} toss was used in training; "
                            f"nothing is left for --unseen")
    keep = keep[:n_tosses]
    return model, {k: trajectories[k] for k in keep}


def _fit_ground(model, data: str | None, recordings: dict, n_workers: int):
    """:func:`~residualsim.residual.observation_noise.fit_ground`, its DataError naming the
    data folder and what the rest phases need."""
    from residualsim.residual.observation_noise import fit_ground
    from residualsim.sysid.ground import REST_STILL_M, REST_WINDOW_S

    try:
        return fit_ground(model, recordings, n_workers)
    except DataError as exc:  # which recordings: the folder and its split
        raise DataError(f"{resolve_data(data, model.scene)} (its training split, "
                        f"{len(recordings)} recordings): {exc}; the table height needs "
                        f"recordings that end at rest on the table (their last "
                        f"{REST_WINDOW_S:g} s within {1e3 * REST_STILL_M:g} mm)") from None


def fit_ground_job(model_dir: PathLike, data: str | None, *, out: PathLike | None = None,
                   n_workers: int = 1) -> dict:
    """Estimate a model's table height and the recordings' pose noise from the rest phases
    of its data set's training split (:func:`residualsim.residual.observation_noise.fit_ground`)
    and write the model to ``out`` (a new directory, ``info.derived_from`` naming
    ``model_dir``) or, with ``out=None``, over ``model_dir`` (each file atomically)."""
    start = time.perf_counter()
    model, recordings = model_and_tosses(model_dir, data, "train", None)
    fitted, found = _fit_ground(model, data, recordings, n_workers)
    if out is not None:
        fitted.info["derived_from"] = str(model_dir)
    target = Path(out if out is not None else model_dir)
    fitted.save(target)
    return {"model": str(target), "ground": found.as_json(),
            "observation_noise": fitted.observation_noise.as_json(),
            "recordings": len(recordings), "seconds": time.perf_counter() - start}


def _training_state_noise(model, data: str | None, n_workers: int = 1):
    """The initial-velocity noise estimated on the whole training split (the tracker's
    noise does not depend on which tosses the policy saw): a cube's in closed form, any
    other free object's by the model's engine refitting each initial state
    (:func:`~residualsim.residual.uncertainty_fit.training_state_noise`)."""
    from residualsim.residual.state_noise import estimate_state_noise
    from residualsim.residual.uncertainty_fit import training_state_noise

    trajectories = load_trajectories(resolve_data(data, model.scene), rate_hz=1.0 / model.dt_s)
    train = {k: trajectories[k] for k in split_ids(list(trajectories))["train"]}
    try:
        noise = estimate_state_noise(train)
    except DataError:  # not cube recordings: the engine's fit (pose-only starts fitted first)
        noise, _, reason = training_state_noise(
            model, prepare_recordings(model.layout, train, model.params), n_workers)
        if noise is None:
            raise DataError(reason) from None
    log.info("initial-state noise from %d training tosses: velocity %s m/s, angular velocity "
             "%s rad/s (world x, y, z)", noise.n_recordings,
             [round(v, 4) for v in noise.velocity_std_mps],
             [round(v, 3) for v in noise.omega_std_radps])
    return noise


def fit_spread_job(model_dir: PathLike, data: str | None, *, out: PathLike | None = None,
                   tosses: int = 60,
                   unseen: bool = False, samples: int = 32,
                   grid: tuple[float, ...] = (1.0, 1.5, 2.0, 3.0, 4.0), seed: int = 0,
                   n_workers: int = 1, criterion: str = "energy",
                   state_noise: bool = False, with_validation: bool = False,
                   observation_noise: bool = False) -> dict:
    """Set a model's sampling spread from its training tosses (energy score or coverage),
    optionally after estimating the initial-state noise (keeping the model's chosen
    ``StateNoise.factor``, if any; samples draw the noise times it); writes the model to
    ``out`` (a new model directory; its ``info.derived_from`` names ``model_dir``) or, with
    ``out=None``, rewrites ``model_dir`` (a ``MODEL_CARD.md`` there then gets a note that
    the spread changed after it was written) and returns the figures. Finished grid points are
    checkpointed in ``<out>/spread-fit.checkpoint.json`` and reused by a rerun.
    ``with_validation``: the validation split's tosses join the training tosses, and the
    criterion is computed over both (the spread is then a choice made on validation too).
    ``observation_noise``: first set the table height and the recordings' pose noise from
    the whole training split's rest phases (:func:`fit_ground_job`'s estimate)."""
    from residualsim.residual.spread import fit_spread

    model, recordings = model_and_tosses(model_dir, data, "train", tosses, unseen=unseen)
    n_validation = 0
    if with_validation:
        _, held = model_and_tosses(model_dir, data, "validation", None)
        recordings, n_validation = {**recordings, **held}, len(held)
    start = time.perf_counter()
    target = Path(out if out is not None else model_dir)
    if state_noise:  # a new estimate; the width chosen for the old one on validation stays
        noise = _training_state_noise(model, data, n_workers)
        if model.state_noise is not None:
            noise = dataclasses.replace(noise, factor=model.state_noise.factor)
        model = dataclasses.replace(model, state_noise=noise)
    if observation_noise:
        model = _fit_ground(model, data, model_and_tosses(model_dir, data, "train", None)[1],
                            n_workers)[0]
    checkpoint = target / "spread-fit.checkpoint.json"  # rows so far; resumable
    spread, rows = fit_spread(model, recordings, samples=samples, grid=grid, seed=seed,
                              n_workers=n_workers, criterion=criterion, checkpoint=checkpoint)
    info = dict(model.info, spread_fit={"training_tosses": len(recordings) - n_validation,
                                        "validation_tosses": n_validation,
                                        "unseen_by_training": unseen,
                                        "criterion": criterion,
                                        "state_noise_fitted": state_noise,
                                        "samples": samples, "seed": seed, "rows": rows})
    if observation_noise:
        info["spread_fit"]["observation_noise_fitted"] = True
    if out is not None:
        info["derived_from"] = str(model_dir)
    dataclasses.replace(model, spread=spread, info=info).save(target)
    checkpoint.unlink(missing_ok=True)
    card = target / "MODEL_CARD.md"
    if out is None and card.is_file():
        from residualsim.atomic import atomic_write_text

        atomic_write_text(card, card.read_text().rstrip("\n") + (
            f"\n\n> **Note** (residualsim fit-spread --in-place, "
            f"{time.strftime('%Y-%m-%d')}): the sampling spread is now {spread:g} "
            f"({criterion} criterion, {len(recordings)} tosses"
            f"{', state noise refitted' if state_noise else ''}); figures above that "
            "depend on the spread predate it.\n"))
    return {"model": str(target), "spread": spread,
            "state_noise": None if model.state_noise is None else model.state_noise.as_json(),
            "rows": rows, "tosses": len(recordings), "seconds": time.perf_counter() - start}
