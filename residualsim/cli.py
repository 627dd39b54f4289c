"""The ``residualsim`` command: thin wrappers over the library.

Every long command ends by printing one JSON line with its figures, for scripts. Errors
that residualsim raises on purpose print ``residualsim: error: ...`` and exit with 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from pathlib import Path

from .errors import DataError, ParameterError, ResidualSimError
from .workers import BACKENDS, parallel_backend

__all__ = ["main", "resolve_data"]

#: Where each scene's real set lives below ``$RESIDUALSIM_DATA``.
DEFAULT_SETS = {"cube": "contactnets-cube", "planar-ellipse": "planar-impact-ellipse"}
#: Choices of ``--split``: the hash-based splits of :func:`residualsim.data.split_ids`.
SPLITS = ("all", "train", "validation", "test")
#: The bundled synthetic tosses the README's first command runs on.
BUNDLED_SAMPLES = Path(__file__).resolve().parents[1] / "data" / "samples" / "cube-synthetic"
PRETRAINED_CUBE = Path(__file__).resolve().parents[1] / "data" / "pretrained" / "cube-contactnets"
PRETRAINED = {"cube": PRETRAINED_CUBE, "planar-ellipse": PRETRAINED_CUBE.parent / "planar-ellipse"}


def resolve_data(path: str | None, scene: str = "cube") -> Path:
    """A data directory from ``--data``, else ``$RESIDUALSIM_DATA/<the scene's set>``.

    A relative ``--data`` that does not exist is also tried below ``$RESIDUALSIM_DATA``.
    """
    root = os.environ.get("RESIDUALSIM_DATA")
    if path:
        candidate = Path(path)
        if not candidate.exists() and root and (Path(root) / path).exists():
            candidate = Path(root) / path
        if not candidate.exists():
            raise DataError(f"{candidate}: no such data directory")
        return candidate
    if root and scene in DEFAULT_SETS and (Path(root) / DEFAULT_SETS[scene]).exists():
        return Path(root) / DEFAULT_SETS[scene]
    raise DataError("no data given: pass --data DIR or set RESIDUALSIM_DATA to the folder "
                    "holding contactnets-cube/ and planar-impact-ellipse/")


def _count(minimum: int):
    """argparse type: an int >= minimum, with a clear message otherwise."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value
    return parse


def _json_line(record: dict) -> None:
    def clean(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None if math.isnan(value) else str(value)
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        return value
    print(json.dumps(clean(record), sort_keys=False))


def engine_from_option(params: str | None, substeps: int | None, scene: str
                       ) -> tuple[object, int | None, dict]:
    """(EngineParams, substeps, provenance) from ``--params`` and ``--substeps``.

    ``--params`` may name a calibration output (directory or its summary.json): its point
    parameters are used at the substep count they were calibrated at, unless ``--substeps``
    says otherwise (a warning then: parameters do not transfer across substep counts).
    """
    from .calibrate import is_calibration, load_calibration
    from .scenes import parse_params

    engine_params = parse_params(params)
    provenance: dict = {"params": engine_params.as_json()}
    if params:
        if is_calibration(params):
            calibration = load_calibration(params)
            summary = calibration.path / "summary.json"
            if calibration.scene != scene:
                raise DataError(f"{summary}: calibrated for scene {calibration.scene!r}, "
                                f"not {scene!r}")
            if substeps is not None and substeps != calibration.substeps:
                logging.getLogger(__name__).warning(
                    "%s was calibrated at %d substeps; running at %d", summary,
                    calibration.substeps, substeps)
            substeps = substeps or calibration.substeps
            provenance["calibration"] = str(calibration.path)
    provenance["substeps"] = substeps
    return engine_params, substeps, provenance


def _simulate(scene: str, data: Path, out: Path, params: str | None, workers: int,
              substeps: int | None, limit: int | None, split: str = "all") -> dict:
    """Simulate the engine on a data set and write the prediction file; returns figures."""
    from .data import detect_format, load_impacts, load_trajectories
    from .data.splits import split_ids
    from .predictions import ImpactPredictions, TrajectoryPredictions, save_predictions
    from .rollout import simulate_impacts, simulate_trajectories
    from .scenes import make_scene

    make_scene(scene)
    engine_params, substeps, provenance = engine_from_option(params, substeps, scene)
    meta = {"scene": scene, **provenance, "data": str(data), "split": split,
            "command": "simulate"}
    start = time.perf_counter()
    if detect_format(data) == "mcube":
        impacts = load_impacts(data, convention="corrected")
        if split != "all":
            impacts = impacts.subset(split_ids(impacts.rows.tolist())[split])
        if limit is not None:
            impacts = impacts.subset(impacts.rows[:limit])
        velocity = simulate_impacts(scene, impacts, engine_params, workers, substeps)
        velocity[:, 0] *= -1.0  # back to the upstream files' x-axis convention
        predictions = ImpactPredictions(post_velocity=velocity[None], rows=impacts.rows,
                                        meta={**meta, "convention": "upstream"})
        count = impacts.n_impacts
    else:
        trajectories = load_trajectories(data)
        if split != "all":
            keep = split_ids(list(trajectories))[split]
            trajectories = {k: trajectories[k] for k in keep}
        if limit is not None:
            trajectories = dict(list(trajectories.items())[:limit])
        results = simulate_trajectories(scene, trajectories, engine_params, workers, substeps)
        predictions = TrajectoryPredictions(
            {k: (r.positions_m[None], r.quat_wxyz[None]) for k, r in results.items()}, meta)
        count = len(results)
    save_predictions(out, predictions)
    return {"command": "simulate", "scene": scene, "count": count, "out": str(out),
            "workers": workers, "seconds": time.perf_counter() - start}


def _score(pred: Path, data: Path, scene: str | None) -> tuple[str, dict]:
    """Score a prediction file against a data set: (table text, figures)."""
    from .data import load_impacts, load_trajectories
    from .metrics import format_table, score_impacts, score_trajectories
    from .predictions import ImpactPredictions, load_predictions
    from .scenes import make_scene

    predictions = load_predictions(pred)
    if isinstance(predictions, ImpactPredictions):
        convention = predictions.meta.get("convention", "upstream")
        score = score_impacts(predictions, load_impacts(data, convention=convention))
    else:
        scene = scene or predictions.meta.get("scene", "cube")
        side = getattr(make_scene(scene), "side_m", None)
        score = score_trajectories(predictions, load_trajectories(data), side_m=side)
    return format_table(score), score.aggregate()


def cmd_simulate(args: argparse.Namespace) -> None:
    data = resolve_data(args.data, args.scene)
    _json_line(_simulate(args.scene, data, Path(args.out), args.params, args.workers,
                         args.substeps, args.limit, args.split))


def cmd_score(args: argparse.Namespace) -> None:
    table, figures = _score(Path(args.pred), resolve_data(args.data, args.scene or "cube"),
                            args.scene)
    print(table)
    _json_line({"command": "score", **figures})


def cmd_demo(args: argparse.Namespace) -> None:
    import tempfile

    data = Path(args.data) if args.data else BUNDLED_SAMPLES
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "predictions.npz"
        figures = _simulate("cube", data, out, args.params, args.workers, None, None)
        print(f"simulated {figures['count']} tosses from {data} with the engine's "
              f"{'given' if args.params else 'default'} parameters in "
              f"{figures['seconds']:.2f} s")
        table, score = _score(out, data, "cube")
    print(table)
    _json_line({"command": "demo", "data": str(data), **score})


def cmd_data_info(args: argparse.Namespace) -> None:
    from .data import describe, format_description

    description = describe(resolve_data(args.path))
    print(format_description(description))
    _json_line(description)


def cmd_data_synthesize(args: argparse.Namespace) -> None:
    from .data import load_trajectories
    from .scenes import make_scene, parse_params
    from .synthesize import synthesize_tosses, write_toss_set

    if args.scene == "arm-loop":
        from .synthesize import synthesize_arm_loop

        start = time.perf_counter()
        path = synthesize_arm_loop(args.out, n_links=args.loop_links, rng=args.seed,
                                   substeps=args.substeps or (5 if args.loop_links == 12 else 10))
        _json_line({"command": "data synthesize", "scene": "arm-loop", "out": str(path),
                    "seconds": time.perf_counter() - start})
        return
    if args.scene != "cube":
        raise DataError(f"synthesize writes ContactNets-format tosses (scene 'cube') or an "
                        f"arm-loop joint recording (scene 'arm-loop'), got {args.scene!r}")
    params = parse_params(args.params)
    like = None
    if args.like:
        like = load_trajectories(resolve_data(args.like))
        if args.limit is not None:
            like = dict(list(like.items())[: args.limit])
    start = time.perf_counter()
    tosses = synthesize_tosses(params, like=like, n_tosses=args.count, n_samples=args.samples,
                               noise_m=args.noise_m, noise_rad=args.noise_rad, rng=args.seed,
                               n_workers=args.workers, substeps=args.substeps)
    truth = {"scene": args.scene, "params": params.as_json(), "noise_m": args.noise_m,
             "noise_rad": args.noise_rad, "seed": args.seed,
             "substeps": args.substeps or make_scene(args.scene).settings.substeps,
             "like": str(args.like) if args.like else None, "count": len(tosses),
             "note": "synthetic recordings made by residualsim's engine; velocities are "
                     "the simulated ones, without noise"}
    out = write_toss_set(args.out, tosses, truth, overwrite=args.force)
    _json_line({"command": "data synthesize", "out": str(out), "count": len(tosses),
                "params": params.as_json(), "seconds": time.perf_counter() - start})


def _mapping_option(text: str | None, flag: str) -> dict[str, str]:
    """``name=value,name=value`` into a dict (values kept as text)."""
    result: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ParameterError(f"{flag}: expected name=value, got {item!r}")
        result[name.strip()] = value.strip()
    return result


def _bounds_option(text: str | None) -> dict[str, tuple[float, float]]:
    from .errors import ParameterError

    bounds = {}
    for name, value in _mapping_option(text, "--bounds").items():
        try:
            low, high = (float(v) for v in value.split(":"))
        except ValueError:
            raise ParameterError(f"--bounds: expected {name}=LOW:HIGH, got {value!r}") from None
        bounds[name] = (low, high)
    return bounds


def _identify_loop(args: argparse.Namespace) -> None:
    """``calibrate --scene arm-loop``: the loop's spring stiffnesses from a joint recording."""
    import numpy as np

    from .atomic import atomic_write_text
    from .data.joint_recording import load_joint_recording
    from .identify import identify_stiffness

    if not args.data:
        raise DataError("calibrate --scene arm-loop needs --data: a joint recording (.npz) "
                        "or a directory holding one (residualsim data synthesize --scene "
                        "arm-loop makes one)")
    method = {"nevergrad": None}.get(args.method, args.method)
    if method is None:
        raise ParameterError("--scene arm-loop takes --method lsq, gradient, homotopy or mh")
    recording = load_joint_recording(args.data)
    out = Path(args.out)
    cache = out / "rollouts"
    if cache.is_dir() and any(cache.iterdir()) and not args.resume:
        raise DataError(f"{cache}: rollouts of an earlier run exist; resume it (--resume) or "
                        "choose another output")
    result = identify_stiffness(
        recording, method, args.seed_kappa, n_workers=args.workers,
        estimate_offsets=args.estimate_offsets, mh_samples=args.samples,
        mh_burn_in=args.burn_in, rng=args.seed, cache_dir=cache,
        progress=None if args.quiet else lambda row: print(json.dumps(row), flush=True))
    summary = {"scene": "arm-loop", "data": str(recording.source), **result.as_json(),
               "seed_kappa": list(args.seed_kappa), "history": result.history}
    if result.posterior is not None:
        samples = result.posterior.samples.reshape(-1, 2)
        summary["q05"], summary["q95"] = np.percentile(samples, [5, 95], axis=0).tolist()
    truth = recording.metadata.get("kappa_truth_12")
    if truth:
        summary["truth"] = truth
        summary["rel_error"] = ((result.kappa - np.array(truth)) / np.array(truth)).tolist()
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1) + "\n")
    _json_line({"command": "calibrate", "out": str(out),
                **{k: v for k, v in summary.items() if k != "history"}})


def cmd_calibrate(args: argparse.Namespace) -> None:
    from .calibrate import calibrate

    if args.scene == "arm-loop":
        return _identify_loop(args)
    if args.method not in ("mh", "nevergrad"):
        raise ParameterError(f"--method {args.method} is for --scene arm-loop; calibrate "
                             f"{args.scene} with mh or nevergrad")
    data = resolve_data(args.data, args.scene)
    summary = calibrate(
        args.scene, data, args.params.split(","), args.out, method=args.method,
        samples=args.samples, burn_in=args.burn_in, chains=args.chains,
        proposal_scale=args.proposal_scale, adapt=not args.no_adapt,
        bounds=_bounds_option(args.bounds), priors=_mapping_option(args.prior, "--prior"),
        noise=args.noise, substeps=args.substeps, split=args.split,
        max_items=args.max_trajectories, n_workers=args.workers, seed=args.seed,
        budget=args.budget, optimizer=args.optimizer, checkpoint_every=args.checkpoint_every,
        resume=args.resume, plots=not args.no_plots, progress=not args.quiet)
    for label, figures in (summary.get("validation") or {}).items():
        if "position_rmse_m" in figures:
            print(f"validation, {label} parameters: position RMSE "
                  f"{figures['position_rmse_m']:.4g} m")
        else:
            print(f"validation, {label} parameters: RMSE of (dx, dy, k dtheta) "
                  f"{figures['velocity_rmse_mps']:.4g} m/s")
    keys = ("method", "scene", "median", "q05", "q95", "rhat", "ess", "acceptance", "best",
            "loss", "params", "settings", "evaluations", "validation", "worker_restarts",
            "backend", "seconds")
    _json_line({"command": "calibrate", "out": str(args.out),
                **{k: summary[k] for k in keys if k in summary}})


def cmd_bench_engine(args: argparse.Namespace) -> None:
    from .bench import bench_engine_overhead, bench_workers
    from .data import load_trajectories

    overhead = bench_engine_overhead(n_tosses=args.tosses, repeats=args.repeats)
    for key, row in overhead.items():
        print(f"{key:>12}: rollout {row['rollout_wrapper_us_per_step']:7.2f} us/step vs raw "
              f"{row['rollout_raw_us_per_step']:7.2f} -> ratio {row['rollout_ratio']:.3f};  "
              f"step {row['step_wrapper_us']:7.2f} vs {row['step_raw_us']:7.2f} -> ratio "
              f"{row['step_ratio']:.3f}")
    record = {"command": "bench engine", "overhead": overhead}
    try:
        data = resolve_data(args.data, "cube")
    except DataError as exc:
        print(f"worker speed-up skipped: {exc}")
    else:
        trajectories = load_trajectories(data)
        workers = bench_workers(trajectories)
        print(f"{workers['n_trajectories']} tosses ({workers['n_samples']} samples): 1 worker "
              f"{workers['workers_1']['map_s']:.2f} s, 2 workers "
              f"{workers['workers_2']['map_s']:.2f} s -> speed-up "
              f"{workers['speedup_2_over_1']:.2f}x (results identical: "
              f"{workers['workers_2']['identical_to_first']})")
        record["workers"] = workers
    _json_line(record)


def cmd_bench_calibration(args: argparse.Namespace) -> None:
    from .bench import bench_calibration
    from .data import load_trajectories

    trajectories = load_trajectories(resolve_data(args.data, "cube"))
    trajectories = dict(list(trajectories.items())[: args.tosses])
    report = bench_calibration(trajectories, substeps=args.substeps, n_chains=args.chains,
                               steps=args.samples + args.burn_in, probe_steps=args.probe_steps)
    print(f"{report['n_trajectories']} tosses, {args.substeps} substep(s), {args.chains} "
          f"chains, {report['steps']} steps:")
    for key, row in report.items():
        if key.startswith("workers_"):
            print(f"  {key.replace('_', ' ')}: {row['seconds_per_step']:.3f} s/step -> "
                  f"{row['projected_minutes']:.1f} min (identical: {row['identical_to_first']})")
    print(f"  speed-up 2 workers over 1: {report.get('speedup_2_over_1', float('nan')):.2f}x")
    print(f"  one toss {report['ms_per_trajectory']:.2f} ms, of which stepSimulation "
          f"{report['step_only_ms_per_trajectory']:.2f} ms -> share outside stepSimulation "
          f"{report['share_outside_step']:.2f}")
    _json_line({"command": "bench calibration", **report})


def cmd_train(args: argparse.Namespace) -> None:
    from .rollout import ContactGuard
    from .train import TrainingConfig, run_training

    config = TrainingConfig(
        budget=args.budget, samples=args.samples, hidden=tuple(args.hidden),
        n_components=args.components, sigma=args.sigma, optimizer=args.optimizer,
        batch_size=args.batch_size, rotation_weight=args.rotation_weight,
        validate_every=args.validate_every, patience=args.patience, seed=args.seed,
        guard=ContactGuard())
    figures = run_training(args.scene, resolve_data(args.data, args.scene), args.out,
                           calibration=args.calibration, substeps=args.substeps,
                           max_trajectories=args.max_tosses, config=config,
                           n_workers=args.workers, resume=args.resume,
                           checkpoint_every=args.checkpoint_every, progress=not args.quiet,
                           command=" ".join(["residualsim", *sys.argv[1:]]))
    print(f"validation position RMSE: residual {figures['validation_rmse_m']:.4g} m, engine "
          f"{figures['engine_validation_rmse_m']:.4g} m ({100 * figures['improvement']:.1f} % "
          f"lower); rotation {figures['validation_rotation_deg']:.1f} deg vs "
          f"{figures['engine_validation_rotation_deg']:.1f} deg")
    _json_line({"command": "train", "out": str(args.out), **figures})


def _predict_impacts(args: argparse.Namespace, model, data: Path) -> None:
    from .data import load_impacts
    from .data.splits import split_ids
    from .impact_residual import predict_impacts
    from .predictions import save_predictions

    impacts = load_impacts(data, convention="corrected")
    if args.split != "all":
        impacts = impacts.subset(split_ids(impacts.rows.tolist())[args.split])
    if args.limit is not None:
        impacts = impacts.subset(impacts.rows[:args.limit])
    start = time.perf_counter()
    predictions = predict_impacts(model, impacts, samples=args.samples, seed=args.seed,
                                  n_workers=args.workers, residual=not args.no_residual)
    predictions.meta.update(model=str(args.model), data=str(data), split=args.split,
                            command="predict")
    save_predictions(args.out, predictions)
    _json_line({"command": "predict", "model": str(args.model), "count": impacts.n_impacts,
                "samples": predictions.post_velocity.shape[0],
                "residual": not args.no_residual, "out": str(args.out),
                "seconds": time.perf_counter() - start})


def cmd_predict(args: argparse.Namespace) -> None:
    from .data import detect_format, load_trajectories
    from .data.splits import split_ids
    from .predictions import save_predictions
    from .residual import ResidualModel
    from .rollout import predict_trajectories

    model = ResidualModel.load(args.model)
    data = resolve_data(args.data, model.scene)
    impact_data, impact_model = detect_format(data) == "mcube", \
        model.info.get("kind") == "impacts"
    if impact_data != impact_model:
        raise DataError(f"{data}: {'planar impacts' if impact_data else 'trajectories'}, but "
                        f"{args.model} is a model of "
                        f"{'single impacts' if impact_model else 'trajectories'}")
    if impact_data:
        _predict_impacts(args, model, data)
        return
    trajectories = load_trajectories(data)
    if args.split != "all":
        keep = split_ids(list(trajectories))[args.split]
        trajectories = {k: trajectories[k] for k in keep}
    if args.limit is not None:
        trajectories = dict(list(trajectories.items())[:args.limit])
    start = time.perf_counter()
    predictions, stats = predict_trajectories(model, trajectories, samples=args.samples,
                                              seed=args.seed, n_workers=args.workers,
                                              residual=not args.no_residual)
    predictions.meta.update(model=str(args.model), data=str(data), split=args.split,
                            command="predict")
    save_predictions(args.out, predictions)
    _json_line({"command": "predict", "model": str(args.model), "count": len(trajectories),
                "samples": predictions.n_samples, "residual": not args.no_residual,
                "out": str(args.out), **stats, "seconds": time.perf_counter() - start})


def _float_list(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}")
    if not values or any(not (math.isfinite(v) and v >= 0) for v in values):
        raise argparse.ArgumentTypeError(f"expected finite numbers >= 0, got {text!r}")
    return values


def _nonnegative_float(text: str) -> float:
    """argparse type: one finite number >= 0."""
    if "," in text:
        raise argparse.ArgumentTypeError(f"expected one number, got {text!r}")
    return _float_list(text)[0]


def _state_option(text: str):
    import numpy as np

    try:
        values = np.array([float(v) for v in text.split(",")])
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}")
    if not np.isfinite(values).all():
        raise argparse.ArgumentTypeError(f"the state must be finite, got {text!r}")
    return values


def cmd_rollout(args: argparse.Namespace) -> None:
    """Stochastic rollouts and per-contact beliefs from one initial state (or toss)."""
    import numpy as np

    from .atomic import atomic_open
    from .data import load_trajectories
    from .plots import belief_plot
    from .residual import ResidualModel
    from .scenes import make_scene
    from .simulator import StochasticSimulator, default_initial_std

    if (args.state is None) == (args.toss is None):
        raise ParameterError("give exactly one of --state and --toss")
    model = ResidualModel.load(args.model)
    for path in (args.out, args.plot):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
    recorded = None
    if args.toss is not None:
        trajectories = load_trajectories(resolve_data(args.data, model.scene))
        if args.toss not in trajectories:
            raise DataError(f"no toss {args.toss!r} in the recordings")
        toss = trajectories[args.toss]
        state = make_scene(model.scene).state_from_trajectory(toss, 0)
        recorded = toss.positions_m
        horizon = args.horizon if args.horizon is not None else toss.times_s[-1] - \
            toss.times_s[0]
    else:
        state, horizon = args.state, args.horizon if args.horizon is not None else 1.5
    start = time.perf_counter()
    with StochasticSimulator(model, n_workers=args.workers,
                             residual=not args.no_residual) as simulator:
        if state.shape == (13,):
            from .simulator import toss_state

            state = toss_state(state[:3], state[3:7], state[7:10], state[10:13])
        runs = simulator.rollout(state, horizon, samples=args.samples, seed=args.seed,
                                 state_noise=args.toss is not None)  # a recorded state
        steps = simulator.beliefs(state, n_events=args.events, n_particles=args.particles,
                                  seed=args.seed) if args.particles else []
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
    with atomic_open(args.out) as handle:
        np.savez_compressed(handle, **arrays)
    if args.plot:
        belief_plot(steps, args.plot, recorded_m=recorded, sampled_m=runs.positions_m,
                    title=f"{args.toss or 'state'}: {args.particles} particles, "
                          f"{args.samples} rollouts")
    final = runs.final_positions_m
    _json_line({"command": "rollout", "out": str(args.out), "samples": args.samples,
                "horizon_s": float(horizon), "final_mean_m": final.mean(axis=0).tolist(),
                "final_std_m": final.std(axis=0).tolist(),
                "max_penetration_m": float(runs.max_penetration_m.max()),
                "beliefs": [step.summary() for step in steps], "plot": args.plot,
                "seconds": time.perf_counter() - start})


def _model_and_tosses(args: argparse.Namespace, split: str, unseen: bool = False):
    """The model of ``--model`` and the first ``--tosses`` recordings of ``split``; with
    ``unseen``, only those the model was not trained on (``info["train_ids"]``)."""
    from .data import load_trajectories
    from .data.splits import split_ids
    from .residual import ResidualModel

    model = ResidualModel.load(args.model)
    trajectories = load_trajectories(resolve_data(args.data, model.scene))
    keep = split_ids(list(trajectories))[split]
    if unseen:
        if "train_ids" not in model.info:
            raise ParameterError(f"{args.model}: the model does not record which tosses it "
                                 f"was trained on (info.train_ids), so --unseen cannot apply")
        trained = set(model.info["train_ids"])
        keep = [k for k in keep if k not in trained]
        if not keep:
            raise DataError(f"{args.model}: every {split} toss was used in training; "
                            f"nothing is left for --unseen")
    keep = keep[:args.tosses]
    return model, {k: trajectories[k] for k in keep}


def cmd_bench_residual(args: argparse.Namespace) -> None:
    from .bench import bench_residual

    model, tosses = _model_and_tosses(args, "validation")
    report = bench_residual(model, tosses, repeats=args.repeats)
    times = report["seconds_per_toss"]
    print(f"{report['n_trajectories']} validation tosses, {report['substeps']} substeps, "
          f"{report['events_per_toss']:.2f} events per toss; ms per toss:")
    for key, value in times.items():
        print(f"  {key:>16}: {1000 * value:7.3f}")
    print(f"  residual (mean) / engine: {report['mean_over_engine_poses']:.3f} (lean loop), "
          f"{report['mean_over_engine_rollout']:.3f} (Engine.rollout); per stochastic sample "
          f"{report['sample_over_engine_poses']:.3f} / {report['sample_over_engine_rollout']:.3f}")
    _json_line({"command": "bench residual", **report})


def _fit_state_noise(args: argparse.Namespace, model):
    """The initial-velocity noise estimated on the whole training split (the tracker's
    noise does not depend on which tosses the policy saw)."""
    from .data import load_trajectories
    from .data.splits import split_ids
    from .state_noise import estimate_state_noise

    trajectories = load_trajectories(resolve_data(args.data, model.scene))
    noise = estimate_state_noise({k: trajectories[k]
                                  for k in split_ids(list(trajectories))["train"]})
    logging.getLogger(__name__).info(
        "initial-state noise from %d training tosses: velocity %s m/s, angular velocity %s "
        "rad/s (world x, y, z)", noise.n_recordings,
        [round(v, 4) for v in noise.velocity_std_mps],
        [round(v, 3) for v in noise.omega_std_radps])
    return noise


def cmd_fit_spread(args: argparse.Namespace) -> None:
    """Set a model's sampling spread from its training tosses (energy score or coverage)."""
    import dataclasses

    from .train import fit_spread

    model, tosses = _model_and_tosses(args, "train", unseen=args.unseen)
    start = time.perf_counter()
    if args.state_noise:
        model = dataclasses.replace(model, state_noise=_fit_state_noise(args, model))
    checkpoint = Path(args.model) / "spread-fit.checkpoint.json"  # rows so far; resumable
    spread, rows = fit_spread(model, tosses, samples=args.samples, grid=args.grid,
                              seed=args.seed, n_workers=args.workers,
                              criterion=args.criterion, checkpoint=checkpoint)
    info = dict(model.info, spread_fit={"training_tosses": len(tosses),
                                        "unseen_by_training": args.unseen,
                                        "criterion": args.criterion,
                                        "state_noise_fitted": args.state_noise,
                                        "samples": args.samples, "seed": args.seed,
                                        "rows": rows})
    dataclasses.replace(model, spread=spread, info=info).save(args.model)
    checkpoint.unlink(missing_ok=True)
    _json_line({"command": "fit-spread", "model": str(args.model), "spread": spread,
                "state_noise": None if model.state_noise is None else model.state_noise.as_json(),
                "rows": rows, "tosses": len(tosses), "seconds": time.perf_counter() - start})


def cmd_bench_beliefs(args: argparse.Namespace) -> None:
    from .bench import bench_beliefs

    model, tosses = _model_and_tosses(args, "validation")
    report = bench_beliefs(model, tosses, particles=args.particles, n_workers=args.workers,
                           n_events=args.events, seed=args.seed)
    print(f"{report['n_trajectories']} validation tosses, {report['simulated_s']:.2f} s "
          f"simulated, {report['particles']} particles, {report['workers']} workers:")
    print(f"  wall / simulated time: residual {report['residual_over_real_time']:.2f}, "
          f"engine alone {report['engine_over_real_time']:.2f} (below 1: faster than real "
          f"time); residual / engine {report['residual_over_engine']:.2f}")
    floor = ", ".join(f"{ratio:.2f} at {n} substep{'s' if n != '1' else ''}"
                      for n, ratio in report["bare_over_real_time"].items())
    print(f"  floor, the bare engine loop (step and read the pose only): {floor}")
    print(f"  beliefs: {report['propagated']} particles propagated to their next event, "
          f"{report['accepted']} accepted, {report['rejected_penetration']} rejected for "
          f"penetration, {report['rejected_energy']} for energy gain "
          f"(fraction {report['rejected_fraction']:.4f}), {report['no_event']} met no event")
    _json_line({"command": "bench beliefs", **report})


def cmd_bench_executors(args: argparse.Namespace) -> None:
    from .bench import bench_executors

    model, tosses = _model_and_tosses(args, "train")
    report = bench_executors(model, tosses, candidates=args.candidates, repeats=args.repeats)
    print(f"{report['n_trajectories']} training tosses, {report['substeps']} substeps, "
          f"batches of {report['candidates']} candidates (mean mode):")
    for key, row in report.items():
        if isinstance(row, dict):
            ratio = row.get("speedup_over_first")
            print(f"  {key:>8}: {row['evals_per_s']:6.2f} evaluations/s"
                  + (f" ({ratio:.2f}x local_1)" if ratio else "")
                  + f"; empty map call {row['noop_ms']:.2f} ms; start {row['startup_s']:.2f} s"
                  + f"; identical {row['identical_to_first']}")
    if "ray_over_local_noop" in report:
        print(f"  Ray / local (2 workers): map-call overhead {report['ray_over_local_noop']:.2f}x,"
              f" evaluations/s {report['ray_over_local_evals']:.2f}x")
    _json_line({"command": "bench executors", **report})


def _kappa_option(text: str) -> tuple[float, float]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected two numbers like 5,5, got {text!r}")
    if len(values) != 2:
        raise argparse.ArgumentTypeError(f"expected two numbers like 5,5, got {text!r}")
    return values


def cmd_evaluate(args: argparse.Namespace) -> None:
    """Impact table (planar-ellipse) or learning curve (cube) into --out."""
    from .evaluate import evaluate_curve, evaluate_impacts, impact_markdown
    from .learning_curve import CurveConfig, curve_table
    from .residual import ResidualModel

    start = time.perf_counter()
    model = ResidualModel.load(args.model or PRETRAINED[args.scene])
    if model.scene != args.scene:
        raise DataError(f"{args.model}: a {model.scene!r} model, not {args.scene!r}")
    data = resolve_data(args.data, args.scene)
    if args.scene == "planar-ellipse":
        table = evaluate_impacts(model, data, args.out, n_workers=args.workers, seed=args.seed)
        print(impact_markdown(table), end="")
        _json_line({"command": "evaluate", "scene": args.scene, "out": str(args.out),
                    "table": {r["model"]: [r["validation"], r["test"]] for r in table},
                    "seconds": time.perf_counter() - start})
        return
    import dataclasses

    if args.params is not None:  # another engine under the same curve (e.g. the defaults)
        from .scenes import parse_params

        model = dataclasses.replace(
            model, params=parse_params(None if args.params == "default" else args.params))
    guard = model.guard
    if args.penetration_tolerance is not None:
        guard = dataclasses.replace(guard, penetration_tolerance_m=args.penetration_tolerance)
    config = CurveConfig(sizes=tuple(args.sizes), repeats=args.repeats,
                         methods=tuple(args.methods), mdn_budget=args.budget, seed=args.seed,
                         workers=args.workers, guard=guard)
    summary = evaluate_curve(model, data, args.out, config, resume=args.resume,
                             heldout=args.heldout)
    print(curve_table(summary), end="")
    _json_line({"command": "evaluate", "scene": args.scene, "out": str(args.out),
                "summary": summary, "seconds": time.perf_counter() - start})


def cmd_bench_identify_loop(args: argparse.Namespace) -> None:
    from .bench import bench_identify_loop

    report = bench_identify_loop(args.method, args.seed_kappa, n_links=args.generator_links,
                                 n_workers=args.workers, estimate_offsets=args.offsets,
                                 offset_rad=args.offset_rad, rng=args.seed)
    print(f"{args.method} from {list(args.seed_kappa)} ({report['generator_n_links']}-link "
          f"recording): kappa = {[round(k, 5) for k in report['kappa']]} vs truth "
          f"{report['truth']}, relative error "
          f"{[f'{100 * e:+.2f} %' for e in report['rel_error']]}, {report['rollouts']} "
          f"rollouts, {report['wall_s']:.1f} s")
    _json_line({"command": "bench identify-loop", **report})


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``residualsim`` command."""
    from . import __version__
    from .learning_curve import DEFAULT_METHODS, METHODS, SIZES

    parser = argparse.ArgumentParser(prog="residualsim", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"residualsim {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress")
    commands = parser.add_subparsers(dest="command", required=True)

    def add_workers(sub):
        sub.add_argument("--workers", type=_count(1), default=1,
                         help="workers: processes, or Ray actors with --backend ray (default 1)")
        sub.add_argument("--backend", choices=BACKENDS, default="local",
                         help="where workers run: local processes or Ray actors (default local)")
        sub.add_argument("--address", help="Ray cluster to join with --backend ray: auto or "
                         "HOST:PORT (default: start a local Ray)")

    demo = commands.add_parser("demo", help="simulate the bundled sample tosses and score them")
    demo.add_argument("--data", help=f"tosses to use (default: {BUNDLED_SAMPLES.name} bundled)")
    demo.add_argument("--params", help="engine parameters: k=v,... or a JSON file")
    add_workers(demo)
    demo.set_defaults(run=cmd_demo)

    sim = commands.add_parser("simulate", help="roll the plain engine from recorded states")
    sim.add_argument("--scene", default="cube")
    sim.add_argument("--data", help="recordings (default $RESIDUALSIM_DATA/<scene's set>)")
    sim.add_argument("--out", required=True, help="prediction file to write (.npz)")
    sim.add_argument("--params", help="engine parameters: k=v,..., a JSON file or a "
                     "calibration directory (its substeps are used too)")
    sim.add_argument("--substeps", type=_count(1), help="internal steps per sample")
    sim.add_argument("--split", choices=SPLITS, default="all",
                     help="which split of the recordings (default all)")
    sim.add_argument("--limit", type=_count(1), help="only the first N recordings")
    add_workers(sim)
    sim.set_defaults(run=cmd_simulate)

    score = commands.add_parser("score", help="score a prediction file against recordings")
    score.add_argument("--pred", required=True)
    score.add_argument("--data", help="recordings (default $RESIDUALSIM_DATA/<scene's set>)")
    score.add_argument("--scene", help="scene (default: the one in the prediction file)")
    score.set_defaults(run=cmd_score)

    data = commands.add_parser("data", help="inspect and make data sets")
    data_commands = data.add_subparsers(dest="data_command", required=True)
    info = data_commands.add_parser("info", help="counts, durations, rates, first contacts")
    info.add_argument("path")
    info.set_defaults(run=cmd_data_info)
    synth = data_commands.add_parser("synthesize", help="synthetic tosses with known truth")
    synth.add_argument("--scene", default="cube")
    synth.add_argument("--params", required=True, help="true parameters: k=v,... or JSON")
    synth.add_argument("--like", help="start from this set's initial states and lengths")
    synth.add_argument("--limit", type=_count(1), help="with --like: only the first N recordings")
    synth.add_argument("--count", type=_count(1), default=8, help="sampled tosses without --like")
    synth.add_argument("--samples", type=_count(2), default=110, help="samples per sampled toss")
    synth.add_argument("--out", required=True)
    synth.add_argument("--noise-m", type=float, default=0.0, help="position noise std, m")
    synth.add_argument("--noise-rad", type=float, default=0.0, help="orientation noise, rad")
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument("--substeps", type=_count(1),
                       help="engine substeps per sample (default: the scene's)")
    synth.add_argument("--force", action="store_true", help="replace an existing --out")
    synth.add_argument("--loop-links", type=int, choices=(12, 24), default=24,
                       help="arm-loop: links of the generating loop (default 24)")
    add_workers(synth)
    synth.set_defaults(run=cmd_data_synthesize)

    cal = commands.add_parser(
        "calibrate", help="posterior (Metropolis-Hastings) or point estimate of engine "
        "parameters from recordings")
    cal.add_argument("--scene", default="cube")
    cal.add_argument("--data", help="recordings (default $RESIDUALSIM_DATA/<scene's set>)")
    cal.add_argument("--params", default="lateral_friction,restitution",
                     help="comma-separated parameters to calibrate (default "
                     "lateral_friction,restitution)")
    cal.add_argument("--out", required=True, help="output directory")
    cal.add_argument("--method", choices=("mh", "nevergrad", "lsq", "gradient", "homotopy"),
                     default="mh", help="mh or nevergrad; for --scene arm-loop: lsq, "
                     "gradient, homotopy or mh")
    cal.add_argument("--seed-kappa", type=_kappa_option, default=(5.0, 5.0),
                     help="arm-loop: starting (kappa_theta, kappa_psi) N m/rad (default 5,5)")
    cal.add_argument("--estimate-offsets", action="store_true",
                     help="arm-loop homotopy/lsq: estimate the joint-angle sensor offsets too")
    cal.add_argument("--samples", type=_count(1), default=3000, help="kept draws per chain")
    cal.add_argument("--burn-in", type=_count(0), default=1000, help="steps discarded per chain")
    cal.add_argument("--chains", type=_count(1), default=2)
    cal.add_argument("--proposal-scale", type=float, default=0.05,
                     help="random-walk step in units of each parameter's range (default 0.05)")
    cal.add_argument("--no-adapt", action="store_true",
                     help="keep the proposal fixed during burn-in too (the paper's setting)")
    cal.add_argument("--bounds", help="name=LOW:HIGH,... search bounds")
    cal.add_argument("--prior", help="name=uniform|loguniform|normal:MEAN:STD,...")
    cal.add_argument("--noise", type=float,
                     help="observation noise scale (m; m/s for impacts); default estimated")
    cal.add_argument("--substeps", type=_count(1), help="engine substeps per sample "
                     "(default 1 for trajectories, the scene's for impacts)")
    cal.add_argument("--split", choices=("train", "all"), default="train",
                     help="recordings to calibrate on (default: the training split)")
    cal.add_argument("--max-trajectories", type=_count(1),
                     help="only the first N recordings of the split")
    cal.add_argument("--budget", type=_count(1), default=200, help="nevergrad evaluations")
    cal.add_argument("--optimizer", default="CMA", help="nevergrad optimizer (default CMA)")
    cal.add_argument("--checkpoint-every", type=_count(1), help="Metropolis-Hastings steps "
                     "(default 50), or evaluations with --method nevergrad (default: each batch)"
                     " between checkpoints")
    cal.add_argument("--resume", action="store_true", help="continue the checkpoint in --out")
    cal.add_argument("--seed", type=int, default=0)
    cal.add_argument("--no-plots", action="store_true")
    cal.add_argument("--quiet", action="store_true", help="no progress bar")
    add_workers(cal)
    cal.set_defaults(run=cmd_calibrate)

    tr = commands.add_parser("train", help="train the residual contact model (nevergrad)")
    tr.add_argument("--scene", default="cube")
    tr.add_argument("--data", help="recordings (default $RESIDUALSIM_DATA/<scene's set>)")
    tr.add_argument("--calibration", help="calibration directory (default: engine defaults)")
    tr.add_argument("--out", required=True, help="model directory to write")
    tr.add_argument("--budget", type=_count(1), default=800, help="nevergrad evaluations")
    tr.add_argument("--max-tosses", type=_count(1),
                    help="only the first N training recordings")
    tr.add_argument("--samples", type=_count(0), default=0, help="policy samples per "
                    "recording in the loss (default 0: the mean prediction)")
    tr.add_argument("--hidden", type=_count(1), nargs="+", default=[16],
                    help="hidden layer widths (default 16)")
    tr.add_argument("--components", type=_count(1), default=2, help="mixture components")
    tr.add_argument("--sigma", type=float, default=0.1, help="initial mutation scale on θ")
    tr.add_argument("--optimizer", default="CMA", help="nevergrad optimizer (default CMA)")
    tr.add_argument("--batch-size", type=_count(1), default=8,
                    help="candidates evaluated together")
    tr.add_argument("--rotation-weight", type=float, default=1.0,
                    help="weight of the rotation error (x radius of gyration) in the loss")
    tr.add_argument("--validate-every", type=_count(1), default=48, help="evaluations")
    tr.add_argument("--patience", type=_count(1), default=6,
                    help="validation checks without improvement before stopping")
    tr.add_argument("--substeps", type=_count(1),
                    help="engine substeps (default: the calibration's, else the scene's)")
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--checkpoint-every", type=_count(1),
                    help="evaluations between checkpoints (default: after every batch)")
    tr.add_argument("--resume", action="store_true", help="continue the checkpoint in --out")
    tr.add_argument("--quiet", action="store_true", help="no progress bar")
    add_workers(tr)
    tr.set_defaults(run=cmd_train)

    pr = commands.add_parser("predict", help="predict recordings with a trained model")
    pr.add_argument("--model", required=True, help="model directory (residualsim train)")
    pr.add_argument("--data", help="recordings (default $RESIDUALSIM_DATA/<scene's set>)")
    pr.add_argument("--out", required=True, help="prediction file to write (.npz)")
    pr.add_argument("--samples", type=_count(0), default=0,
                    help="stochastic samples per recording (default 0: the mean prediction)")
    pr.add_argument("--seed", type=int, default=0)
    pr.add_argument("--no-residual", action="store_true",
                    help="the model's calibrated engine alone")
    pr.add_argument("--split", choices=SPLITS, default="all",
                    help="which split of the recordings (default all)")
    pr.add_argument("--limit", type=_count(1), help="only the first N recordings")
    add_workers(pr)
    pr.set_defaults(run=cmd_predict)

    ro = commands.add_parser(
        "rollout", help="stochastic rollouts and per-contact beliefs from a state or a toss")
    ro.add_argument("--model", default=str(PRETRAINED_CUBE),
                    help="model directory (default: the shipped cube model)")
    ro.add_argument("--state", type=_state_option,
                    help="13 numbers: position m, quaternion w,x,y,z, velocity m/s, angular "
                         "velocity rad/s (world frame)")
    ro.add_argument("--toss", help="start from this recorded toss instead (with --data) and "
                    "draw it in the plot")
    ro.add_argument("--data", help="recordings for --toss (default $RESIDUALSIM_DATA/...)")
    ro.add_argument("--horizon", type=float, help="seconds (default: the toss's length, or "
                    "1.5 s)")
    ro.add_argument("--samples", type=_count(1), default=64)
    ro.add_argument("--particles", type=_count(0), default=1000,
                    help="belief particles per contact event (0: no beliefs)")
    ro.add_argument("--events", type=_count(1), default=3, help="contact events to follow")
    ro.add_argument("--seed", type=int, default=0)
    ro.add_argument("--no-residual", action="store_true", help="the calibrated engine alone")
    ro.add_argument("--out", required=True, help=".npz file to write")
    ro.add_argument("--plot", help="PNG of the particle clouds after each contact")
    add_workers(ro)
    ro.set_defaults(run=cmd_rollout)

    fs = commands.add_parser(
        "fit-spread", help="set a model's sampling spread from its training tosses")
    fs.add_argument("--model", required=True, help="model directory (updated in place)")
    fs.add_argument("--data", help="recordings (default $RESIDUALSIM_DATA/<scene's set>)")
    fs.add_argument("--tosses", type=_count(1), default=60,
                    help="first N tosses of the training split (default 60)")
    fs.add_argument("--unseen", action="store_true",
                    help="only training-split tosses the model was not trained on (its "
                         "mean fits its own training tosses better, which would make the "
                         "spread too narrow)")
    fs.add_argument("--samples", type=_count(2), default=32)
    fs.add_argument("--grid", type=_float_list, default=(1.0, 1.5, 2.0, 3.0, 4.0),
                    help="spreads to try (default 1,1.5,2,3,4)")
    fs.add_argument("--seed", type=int, default=0)
    fs.add_argument("--criterion", choices=("energy", "coverage"), default="energy",
                    help="energy: lowest energy score (default); coverage: 50 %% and 90 %% "
                         "sample regions closest to their nominal coverage on the table "
                         "plane, |c50 - 0.5| + |c90 - 0.9|")
    fs.add_argument("--state-noise", action="store_true",
                    help="first estimate the noise of the recorded initial velocities from "
                         "the free flight before the first contact (whole training split) "
                         "and draw each sample's initial state from it")
    add_workers(fs)
    fs.set_defaults(run=cmd_fit_spread)

    ev = commands.add_parser(
        "evaluate", help="impact table (planar-ellipse) or learning curve (cube) on real data")
    ev.add_argument("--scene", choices=("cube", "planar-ellipse"), required=True)
    ev.add_argument("--model", help="model directory (default: the shipped model of the scene)")
    ev.add_argument("--data", help="recordings (default $RESIDUALSIM_DATA/<scene's set>)")
    ev.add_argument("--out", required=True, help="output directory")
    ev.add_argument("--sizes", type=_count(1), nargs="+", default=list(SIZES),
                    help="cube: training-set sizes (tosses; capped at the training split)")
    ev.add_argument("--repeats", type=_count(1), default=3, help="cube: subsets per size")
    ev.add_argument("--methods", nargs="+", choices=METHODS, default=list(DEFAULT_METHODS),
                    help="cube: methods to fit (default: %(default)s; 'calibrated' fits the "
                         "engine's parameters on each training subset instead)")
    ev.add_argument("--budget", type=_count(1), default=96,
                    help="cube: nevergrad evaluations per MDN fit")
    ev.add_argument("--heldout", choices=("validation", "test"), default="test",
                    help="cube: the split scored (validation is used for early stopping)")
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--params", metavar="P",
                    help="cube: engine parameters for every method instead of the model's "
                         "calibrated ones: k=v,..., a JSON file, or 'default' (PyBullet's)")
    ev.add_argument("--penetration-tolerance", type=_nonnegative_float, default=None,
                    metavar="M", help="cube: the contact guard's penetration tolerance for the "
                    "MDN and GP rollouts, m (default: the model's)")
    ev.add_argument("--resume", action="store_true", help="cube: continue an interrupted run")
    add_workers(ev)
    ev.set_defaults(run=cmd_evaluate)

    bench = commands.add_parser("bench", help="benchmarks (ratios against in-run baselines)")
    bench_commands = bench.add_subparsers(dest="bench_command", required=True)
    engine = bench_commands.add_parser("engine", help="wrapper overhead and worker speed-up")
    engine.add_argument("--data", help="real tosses for the worker speed-up")
    engine.add_argument("--tosses", type=_count(1), default=20)
    engine.add_argument("--repeats", type=_count(1), default=5)
    engine.set_defaults(run=cmd_bench_engine)
    bcal = bench_commands.add_parser(
        "calibration", help="Metropolis-Hastings step cost, 1 vs 2 workers, projected time")
    bcal.add_argument("--data", help="real tosses (default $RESIDUALSIM_DATA/contactnets-cube)")
    bcal.add_argument("--tosses", type=_count(1), default=100)
    bcal.add_argument("--substeps", type=_count(1), default=1)
    bcal.add_argument("--chains", type=_count(1), default=2)
    bcal.add_argument("--samples", type=_count(1), default=3000)
    bcal.add_argument("--burn-in", type=_count(0), default=1000)
    bcal.add_argument("--probe-steps", type=_count(1), default=20,
                      help="sampler steps timed per worker count")
    bcal.set_defaults(run=cmd_bench_calibration)
    bres = bench_commands.add_parser(
        "residual", help="residual rollout cost against the calibrated engine alone")
    bres.add_argument("--model", default=str(PRETRAINED_CUBE), help="model directory "
                      "(default: the shipped cube model)")
    bres.add_argument("--data", help="real tosses (default $RESIDUALSIM_DATA/contactnets-cube)")
    bres.add_argument("--tosses", type=_count(1), default=40)
    bres.add_argument("--repeats", type=_count(1), default=5)
    bres.set_defaults(run=cmd_bench_residual)

    bexe = bench_commands.add_parser(
        "executors", help="evaluations/s with 1 and 2 local workers and 2 Ray actors")
    bexe.add_argument("--model", default=str(PRETRAINED_CUBE), help="model whose training "
                      "loss is evaluated (default: the shipped cube model)")
    bexe.add_argument("--data", help="real tosses (default $RESIDUALSIM_DATA/contactnets-cube)")
    bexe.add_argument("--tosses", type=_count(1), default=40, help="training tosses used")
    bexe.add_argument("--candidates", type=_count(1), default=8, help="per batch")
    bexe.add_argument("--repeats", type=_count(1), default=3)
    bexe.set_defaults(run=cmd_bench_executors)

    bbel = bench_commands.add_parser(
        "beliefs", help="particles through real tosses: wall / simulated time, vs the engine")
    bbel.add_argument("--model", default=str(PRETRAINED_CUBE), help="model directory "
                      "(default: the shipped cube model)")
    bbel.add_argument("--data", help="real tosses (default $RESIDUALSIM_DATA/contactnets-cube)")
    bbel.add_argument("--tosses", type=_count(1), default=4, help="validation tosses")
    bbel.add_argument("--particles", type=_count(2), default=1000)
    bbel.add_argument("--events", type=_count(1), default=3)
    bbel.add_argument("--workers", type=_count(1), default=2)
    bbel.add_argument("--seed", type=int, default=0)
    bbel.set_defaults(run=cmd_bench_beliefs)

    bid = bench_commands.add_parser(
        "identify-loop", help="generate an arm-loop recording and identify the loop springs")
    bid.add_argument("--method", choices=("lsq", "gradient", "homotopy", "mh"), default="lsq")
    bid.add_argument("--seed-kappa", type=_kappa_option, default=(5.0, 5.0),
                     help="starting (kappa_theta, kappa_psi) N m/rad (default 5,5)")
    bid.add_argument("--generator-links", type=int, choices=(12, 24), default=12,
                     help="links of the generating loop (24: model error; default 12)")
    bid.add_argument("--offsets", action="store_true",
                     help="estimate the 7 joint-angle sensor offsets with kappa")
    bid.add_argument("--offset-rad", type=float, default=0.0,
                     help="std of the sensor zero offsets put in the recording")
    bid.add_argument("--workers", type=_count(1), default=2)
    bid.add_argument("--seed", type=int, default=0, help="noise seed of the recording")
    bid.set_defaults(run=cmd_bench_identify_loop)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``residualsim`` command; returns the exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        if getattr(args, "address", None) and args.backend != "ray":
            raise ParameterError("--address needs --backend ray")
        with parallel_backend(getattr(args, "backend", "local"), getattr(args, "address", None)):
            args.run(args)
    except ResidualSimError as exc:
        print(f"residualsim: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("residualsim: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
