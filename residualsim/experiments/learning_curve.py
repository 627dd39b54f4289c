"""The learning curve on cube tosses: held-out error against the number of training tosses.

For each repeat r and training-set size N (nested subsets: repeat r draws one seeded
permutation of the training split and takes its first N tosses), every learned method is
trained on those N tosses and scored on the held-out tosses:

* ``engine``: the engine alone, with the curve's parameters (the model's calibrated ones
  unless the caller gives others; no training; one row per size and repeat, the same
  number, so the curve has a flat reference);
* ``mdn``: the residual mixture-density policy (:func:`residualsim.residual.train.train_residual`:
  nevergrad on the trajectory loss, early stopping on the validation split);
* ``gp``: the Gaussian-process residual on per-event optimal impulses
  (:class:`residualsim.baselines.event_gp.EventGPResidual`), applied by the same rollout as the MDN;
* ``sian``: the SIAN-like per-step residual (:class:`residualsim.baselines.sian.SianResidual`, early
  stopping on the validation split's one-step loss);
* ``calibrated``: no residual; the engine's parameters
  (:data:`~residualsim.sysid.calibrate.CUBE_CALIBRATED`) fitted by nevergrad CMA on the N
  training tosses alone (``calibration_budget`` evaluations), at the curve's substeps. It
  answers the other question a researcher with N tosses has: calibrate, or learn a residual?
* ``calibrated+mdn``: both in two stages: ``calibrated``'s engine, then ``mdn`` on it.
* ``joint``: both at once (:func:`residualsim.residual.joint.train_joint`): one nevergrad
  search over the same engine parameters and the MDN's weights on the N tosses, from the
  calibration's start and no correction, ``calibration_budget + mdn_budget`` evaluations,
  early stopping on the validation split.

A method that cannot be fitted on a training set (no contact event to learn from) makes no
correction: its row holds the engine's score and a ``fallback`` note.

The engine's parameters are the same for every residual method and size (those of the
model, or any others the caller gives): the curve measures what the residual learns from N
tosses. The score of a
method is the mean over held-out tosses of each toss's position RMSE over time (metres,
world frame, deterministic prediction from the recorded first sample). Rows are appended to
``curve.jsonl`` (atomically rewritten), so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from residualsim.atomic import atomic_write_text
from residualsim.data.trajectory import Trajectory
from residualsim.errors import DataError, ParameterError
from residualsim.sim.rollout import ContactGuard
from residualsim.sim.scenes import EngineParams

__all__ = ["CurveConfig", "SIZES", "METHODS", "DEFAULT_METHODS", "training_subsets", "position_rmse",
           "run_learning_curve", "summarize", "curve_table", "curve_plot"]

#: Training-set sizes of the issue (tosses); sizes above the training split are capped to it.
SIZES = (1, 2, 5, 10, 25, 50, 100, 200, 300)
METHODS = ("engine", "mdn", "gp", "sian", "calibrated", "calibrated+mdn", "joint")
#: What a curve runs unless told otherwise (``calibrated`` costs a calibration per fit).
DEFAULT_METHODS = ("engine", "mdn", "gp", "sian")


@dataclass(frozen=True)
class CurveConfig:
    """Settings of a learning-curve run (recorded with every row).

    ``mdn_budget`` nevergrad evaluations per MDN fit (``mdn_hidden`` its hidden widths);
    ``guard`` the rollout's event definition and limits (that of the shipped model);
    ``calibration_budget`` nevergrad evaluations per ``calibrated`` fit. ``scene``: the
    built-in cube or a scene file (for another object the cube's baselines ``gp`` and
    ``sian`` do not apply, and ``calibrated`` fits lateral friction and restitution).
    """

    sizes: tuple[int, ...] = SIZES
    repeats: int = 3
    methods: tuple[str, ...] = DEFAULT_METHODS
    mdn_budget: int = 96
    mdn_hidden: tuple[int, ...] = (6,)
    seed: int = 0
    workers: int = 1
    guard: ContactGuard = field(default_factory=ContactGuard)
    calibration_budget: int = 300
    scene: str = "cube"

    def __post_init__(self) -> None:
        if not self.sizes or any(int(n) != n or n < 1 for n in self.sizes):
            raise ParameterError(f"sizes must be integers >= 1, got {self.sizes!r}")
        for name in ("repeats", "mdn_budget", "calibration_budget"):
            value = getattr(self, name)
            if int(value) != value or value < 1:
                raise ParameterError(f"{name} must be an integer >= 1, got {value!r}")
        unknown = set(self.methods) - set(METHODS)
        if unknown or not self.methods:
            raise ParameterError(f"unknown methods {sorted(unknown)}; choose from {METHODS}")
        cube_only = sorted(set(self.methods) & {"gp", "sian"})
        if self.scene != "cube" and cube_only:
            raise ParameterError(f"methods {cube_only} are baselines of the cube scene; for "
                                 f"{self.scene!r} choose from engine, mdn, calibrated")


def training_subsets(train_ids: Sequence[str], sizes: Sequence[int], repeats: int,
                     seed: int = 0) -> dict[tuple[int, int], list[str]]:
    """{(repeat, N): ids}: nested seeded subsets of the training ids; N is capped at the
    number of training ids (sizes that cap to the same N are merged)."""
    if not train_ids:
        raise DataError("no training recordings for the learning curve")
    subsets = {}
    for repeat in range(repeats):
        order = np.random.default_rng([seed, repeat]).permutation(len(train_ids))
        for n in sorted({min(int(n), len(train_ids)) for n in sizes}):
            subsets[(repeat, n)] = [train_ids[i] for i in order[:n]]
    return subsets


def position_rmse(positions: Mapping[str, np.ndarray],
                  trajectories: Mapping[str, Trajectory]) -> float:
    """Mean over recordings of each one's position RMSE over time (m): predicted
    ``positions[id]`` (T, 3) against the recording's, world frame."""
    errors = []
    for traj_id, traj in trajectories.items():
        predicted = np.asarray(positions[traj_id])
        if predicted.shape != traj.positions_m.shape or not np.isfinite(predicted).all():
            raise DataError(f"prediction of {traj_id}: shape {predicted.shape} or non-finite "
                            f"values (recording {traj.positions_m.shape})")
        errors.append(np.sqrt(np.mean(np.sum((predicted - traj.positions_m) ** 2, axis=1))))
    return float(np.mean(errors))


# --- one method on one training set --------------------------------------------------------
def _engine_positions(trajectories, params, substeps, config) -> dict:
    from residualsim.sim.rollout import simulate_trajectories

    runs = simulate_trajectories(config.scene, trajectories, params, config.workers, substeps)
    return {k: run.positions_m for k, run in runs.items()}


def _rollout_positions(policy, trajectories, params, substeps, guard) -> dict:
    """Deterministic residual rollouts of ``policy`` (any object with ``mean``) in one
    process."""
    from residualsim.sim.engine import Engine
    from residualsim.sim.rollout import recording_settings, residual_rollout

    settings = recording_settings("cube", trajectories, substeps)
    out = {}
    with Engine("cube", params, settings) as engine:
        for traj_id, traj in trajectories.items():
            start = engine.scene.state_from_trajectory(traj, 0)
            out[traj_id] = residual_rollout(engine, start, traj.n_samples - 1, policy,
                                            None, guard).positions_m
    return out


def _mdn_positions(train, validation, heldout, params, substeps, config, scratch) -> dict:
    from residualsim.sim.rollout import predict_trajectories
    from residualsim.residual.train import TrainingConfig, train_residual

    training = TrainingConfig(budget=config.mdn_budget, hidden=config.mdn_hidden,
                              seed=config.seed, guard=config.guard)
    model, _ = train_residual(config.scene, train, validation, scratch, params=params,
                              substeps=substeps, config=training, n_workers=config.workers)
    predictions, _ = predict_trajectories(model, heldout, n_workers=config.workers)
    return {k: np.asarray(predictions[k].position[0]) for k in heldout}


def _gp_positions(train, validation, heldout, params, substeps, config, scratch) -> dict:
    from residualsim.baselines.event_gp import EventGPResidual

    gp = EventGPResidual.fit(train, params=params, substeps=substeps, seed=config.seed,
                             guard=config.guard)
    return _rollout_positions(gp, heldout, params, substeps, config.guard)


def _sian_positions(train, validation, heldout, params, substeps, config, scratch) -> dict:
    from residualsim.baselines.sian import SianResidual

    with SianResidual("cube") as sian:
        sian.fit(train, params=params, substeps=substeps, validation=validation,
                 seed=config.seed)
        return {k: positions for k, (positions, _) in sian.predict(heldout).items()}


def _calibrated_positions(train, validation, heldout, params, substeps, config, scratch
                          ) -> dict:
    return _engine_positions(heldout, _calibrate_on(train, substeps, config), substeps, config)


def _calibrated_mdn_positions(train, validation, heldout, params, substeps, config, scratch
                              ) -> dict:
    calibrated = _calibrate_on(train, substeps, config)
    try:
        return _mdn_positions(train, validation, heldout, calibrated, substeps, config,
                              scratch)
    except DataError:  # no contact event to learn from: the calibrated engine alone
        return _engine_positions(heldout, calibrated, substeps, config)


def _calibrate_on(train, substeps, config) -> EngineParams:
    """The engine parameters nevergrad finds on the training tosses alone."""
    from residualsim.sysid.optimize import point_estimate
    from residualsim.sysid.likelihood import TrajectoryLikelihood

    space = _calibration_space(config)
    with TrajectoryLikelihood(config.scene, train, substeps, None,
                              config.workers) as likelihood:
        found = point_estimate(
            lambda x: -likelihood([space.engine_params(row) for row in x]) / len(train),
            space, budget=config.calibration_budget, batch_size=4, rng=config.seed)
    return space.engine_params(found["x"])


def _joint_positions(train, validation, heldout, params, substeps, config, scratch) -> dict:
    from residualsim.residual.joint import train_joint
    from residualsim.residual.train import TrainingConfig
    from residualsim.sim.rollout import predict_trajectories

    training = TrainingConfig(budget=config.calibration_budget + config.mdn_budget,
                              hidden=config.mdn_hidden, seed=config.seed, guard=config.guard)
    model, _ = train_joint(config.scene, train, validation, _calibration_space(config),
                           substeps=substeps, config=training, n_workers=config.workers)
    predictions, _ = predict_trajectories(model, heldout, n_workers=config.workers)
    return {k: np.asarray(predictions[k].position[0]) for k in heldout}


def _calibration_space(config: CurveConfig):
    """The parameters ``calibrated`` and ``joint`` fit: the cube's six, or friction and
    restitution for another object."""
    from residualsim.sysid.calibrate import CUBE_CALIBRATED, CUBE_CALIBRATION_BOUNDS
    from residualsim.sysid.paramspace import ParamSpace

    return (ParamSpace(CUBE_CALIBRATED, bounds=CUBE_CALIBRATION_BOUNDS)
            if config.scene == "cube" else ParamSpace(["lateral_friction", "restitution"]))


_FITTERS: dict[str, Callable[..., dict]] = {"mdn": _mdn_positions, "gp": _gp_positions,
                                            "sian": _sian_positions,
                                            "calibrated": _calibrated_positions,
                                            "calibrated+mdn": _calibrated_mdn_positions,
                                            "joint": _joint_positions}


def run_learning_curve(trajectories: Mapping[str, Trajectory], split: Mapping[str, list[str]],
                       params: EngineParams, substeps: int, out: str | Path,
                       config: CurveConfig = CurveConfig(), heldout: str = "test",
                       log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Run (or resume) the learning curve; returns all rows of ``out/curve.jsonl``.

    ``split`` has ``"train"``, ``"validation"`` (early stopping) and the ``heldout`` ids
    (scored; nothing is tuned on them). Each row: method, n_train, repeat, heldout_rmse_m,
    seconds (fit and prediction wall time).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "curve.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    done = {(r["method"], r["n_train"], r["repeat"]) for r in rows}
    pick = {name: {i: trajectories[i] for i in split[name]} for name in ("train", "validation",
                                                                         heldout)}
    subsets = training_subsets(list(pick["train"]), config.sizes, config.repeats, config.seed)
    engine_rmse = None
    for (repeat, n), ids in subsets.items():  # repeat-major: a partial run is a whole curve
        train = {i: pick["train"][i] for i in ids}
        for method in config.methods:
            if (method, n, repeat) in done:
                continue
            started = time.perf_counter()
            if engine_rmse is None:
                engine_rmse = position_rmse(_engine_positions(
                    pick[heldout], params, substeps, config), pick[heldout])
            rmse, fallback = engine_rmse, None
            if method != "engine":
                try:
                    with tempfile.TemporaryDirectory() as scratch:
                        positions = _FITTERS[method](train, pick["validation"], pick[heldout],
                                                     params, substeps, config, scratch)
                    rmse = position_rmse(positions, pick[heldout])
                except DataError as exc:  # e.g. no contact event to learn from in 1 toss
                    fallback = f"not fitted, so no correction: {exc}"
                    log(f"{method} N = {n}: {fallback}")
            row = {"method": method, "n_train": n, "repeat": repeat, "heldout": heldout,
                   "n_heldout": len(pick[heldout]), "heldout_rmse_m": rmse,
                   "seconds": time.perf_counter() - started, "train_ids": ids}
            if fallback:
                row["fallback"] = fallback
            rows.append(row)
            atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))
            log(f"{method:6s} N = {n:3d} repeat {repeat}: held-out position RMSE "
                f"{rmse:.4f} m ({row['seconds']:.0f} s)")
    return rows


def summarize(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (method, N): mean, standard deviation, min and max of the held-out RMSE over the
    repeats, and the number of repeats."""
    groups: dict[tuple[str, int], list[float]] = {}
    for row in rows:
        groups.setdefault((row["method"], row["n_train"]), []).append(row["heldout_rmse_m"])
    order = {m: i for i, m in enumerate(METHODS)}
    return [{"method": m, "n_train": n, "repeats": len(v), "mean_m": float(np.mean(v)),
             "std_m": float(np.std(v)), "min_m": float(np.min(v)), "max_m": float(np.max(v))}
            for (m, n), v in sorted(groups.items(), key=lambda kv: (order[kv[0][0]], kv[0][1]))]


def curve_table(summary: Sequence[Mapping[str, Any]]) -> str:
    """Markdown table: one row per N, one column per method, 'mean ± std (repeats)' in mm."""
    methods = [m for m in METHODS if any(s["method"] == m for s in summary)]
    sizes = sorted({s["n_train"] for s in summary})
    cell = {(s["method"], s["n_train"]): s for s in summary}
    lines = ["| training tosses | " + " | ".join(methods) + " |",
             "|---|" + "---|" * len(methods)]
    for n in sizes:
        values = []
        for m in methods:
            s = cell.get((m, n))
            values.append("" if s is None else
                          f"{1000 * s['mean_m']:.1f} ± {1000 * s['std_m']:.1f} ({s['repeats']})")
        lines.append(f"| {n} | " + " | ".join(values) + " |")
    return "\n".join(lines) + "\n"


def curve_plot(summary: Sequence[Mapping[str, Any]], path: str | Path, title: str = "") -> None:
    """PNG of held-out RMSE (mm, log scale) against training tosses (log scale): the mean
    over repeats with min-max bars per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from residualsim.atomic import atomic_open

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for method in METHODS:
        rows = sorted((s for s in summary if s["method"] == method), key=lambda s: s["n_train"])
        if not rows:
            continue
        n = np.array([s["n_train"] for s in rows])
        mean = 1000 * np.array([s["mean_m"] for s in rows])
        low = mean - 1000 * np.array([s["min_m"] for s in rows])
        high = 1000 * np.array([s["max_m"] for s in rows]) - mean
        style = "--" if method == "engine" else "-o"
        ax.errorbar(n, mean, yerr=[low, high], fmt=style, capsize=3, label=method, ms=4)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training tosses")
    ax.set_ylabel("held-out position RMSE (mm)")
    ax.set_title(title or "cube tosses: learning curve (bars: min-max over repeats)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    with atomic_open(path) as handle:
        fig.savefig(handle, format="png", dpi=120)
    plt.close(fig)
