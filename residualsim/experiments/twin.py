"""``residualsim twin``: recordings (or a capture session) to a stochastic twin in one command.

The stages, each the stage command's own library function (nothing here redoes a stage):

1. ``import`` (a capture session only): :func:`~residualsim.data.session_import.import_session`
   into ``DIR/recordings`` (its ``index.csv`` kept there);
2. ``check``: the recordings read as ``data info`` reads them and split by a hash of each
   id (70/15/15); a validation split under :data:`MIN_VALIDATION` or a test split under
   :data:`MIN_TEST` recordings is refused, saying how many recordings that takes;
3. ``contact``: :func:`~residualsim.sysid.calibrate.calibrate`, least squares (``lsq``, the
   method that wins held out, train/README §22) of the contact group, the ground from the
   rest phases, the held-out guard on validation (``DIR/stages/contact``);
4. ``body`` (``--body``): the same with ``contact,body,joints`` (``DIR/stages/body``), its
   held-out guard also scoring the contact stage's fit (``guard_against``): the identified
   body is kept only where it beats, on validation, the contact fitted alone with the
   URDF's body (position RMSE; :func:`_kept`);
5. ``train``: :func:`~residualsim.residual.train.run_training` from the kept calibration, with
   the table and pose noise from the rest phases where the recordings rest
   (``observation_noise``: samples predict what the capture system records, so the 3-D
   regions are not zero-height at rest), the state noise and the spread fitted: the twin is
   the model written in ``DIR`` itself;
6. ``judge`` (the test split only): the default engine, the calibrated engine and the twin's
   mean (:func:`~residualsim.experiments.jobs.predict_dataset`), and the energy-score
   decomposition with the 50 / 90 % coverage of 32 samples
   (:func:`~residualsim.experiments.uncertainty.uncertainty_decomposition`);
7. ``report``: :func:`~residualsim.experiments.report.build_report` to ``DIR/report.html``,
   and the corrected URDF (:func:`~residualsim.sysid.calibrate.export_calibrated_urdf`).

Time: ``minutes`` (default :data:`DEFAULT_MINUTES`) is shared by the stages
(:data:`SHARES`); each stage's own budget (least-squares evaluations, training evaluations,
the recordings fitted) is set from it by a cost model of the data (samples per recording,
substeps, links), never from a clock, so that a resumed run computes what an uninterrupted
one does. ``summary.json`` records what each stage was given and used; wall-clock seconds go
to ``DIR/twin-state.json``, which also marks the finished stages: ``--resume`` skips them
and resumes the stage that was running from its own checkpoint.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from residualsim.atomic import atomic_write_text, read_json
from residualsim.errors import DataError, ParameterError

if TYPE_CHECKING:
    from residualsim.sim.scenes import Scene

__all__ = ["run_twin", "DEFAULT_MINUTES", "SHARES", "MIN_VALIDATION", "MIN_TEST"]

DEFAULT_MINUTES = 30.0
#: Each stage's share of the minutes (the body's share goes to the others without --body).
SHARES = {"contact": 0.25, "body": 0.30, "train": 0.25, "judge": 0.12, "report": 0.08}
#: Fewest recordings a split needs to judge with: the held-out guard compares fits on
#: validation, the coverage of a 90 % region needs a few recordings to mean anything.
MIN_VALIDATION = 3
MIN_TEST = 5
#: Why the twin's samples do not draw engine parameters (issue 66: "where a parameter
#: posterior exists"): the calibration that wins held out gives none.
NO_POSTERIOR = ("not drawn: least squares, the calibration that wins held out (train/README "
                "§22), gives a point estimate and no posterior; the samples' spread is the "
                "state noise, the pose noise at rest and the residual's")
STATE_FILE = "twin-state.json"
SUMMARY_FILE = "summary.json"
#: Seconds per simulated sample, per substep and link, with the Python around the engine:
#: 2 workers on this 2-core machine, shared, ran an lsq evaluation of 42 hinge recordings
#: (110 samples, 10 substeps) in 3.3 s, a training evaluation with its validation in 8 s.
_STEP_S = 3.0e-5
#: Fewest training recordings the residual sees (its contact events are what it learns from).
_MIN_TRAIN = 12
#: A training evaluation's cost over a least-squares evaluation's (validation, the fit of
#: the state noise and spread at the end).
_TRAIN_COST = 2.5


def _say(text: str) -> None:
    print(f"twin: {text}", file=sys.stderr, flush=True)


class _Run:
    """The state file: finished stages, their results and seconds."""

    def __init__(self, out: Path, identity: dict, resume: bool) -> None:
        self.path = out / STATE_FILE
        self.started = time.perf_counter()
        if self.path.exists():
            if not resume:
                raise ParameterError(f"--out {out}: holds a twin run ({STATE_FILE}); pass "
                                     "--resume to continue it, or choose another folder")
            state = read_json(self.path, error=ParameterError)
            if state.get("identity") != identity:
                raise ParameterError(f"--out {out}: holds a twin run of other settings "
                                     f"({state.get('identity')}); --resume continues only "
                                     "the same command")
            self.state = state
            _say(f"resuming {out}: finished stages {', '.join(state['stages']) or 'none'}")
        else:
            if out.exists() and any(out.iterdir()):
                raise ParameterError(f"--out {out}: exists and holds other files; twin writes "
                                     "a new folder")
            out.mkdir(parents=True, exist_ok=True)
            self.state = {"identity": identity, "stages": {}}
            self._save()

    def _save(self) -> None:
        atomic_write_text(self.path, json.dumps(self.state, indent=1))

    def stage(self, name: str, number: int, total: int, given: dict, work) -> dict:
        done = self.state["stages"].get(name)
        if done is not None:
            _say(f"[{number}/{total}] {name}: done before ({done['seconds']:.0f} s)")
            return done["result"]
        elapsed = time.perf_counter() - self.started
        _say(f"[{number}/{total}] {name}: started at {elapsed:.0f} s, given {given}")
        start = time.perf_counter()
        result = work()
        seconds = time.perf_counter() - start
        self.state["stages"][name] = {"seconds": seconds, "given": given, "result": result}
        self._save()
        finished = [s["seconds"] for s in self.state["stages"].values()]
        left = (total - len(finished)) * float(np.mean(finished)) if finished else 0.0
        _say(f"[{number}/{total}] {name}: done in {seconds:.0f} s ({time.perf_counter() - self.started:.0f} s "
             f"elapsed, about {left:.0f} s left)")
        return result


def _budgets(trajectories: dict, train_ids: list[str], substeps: int, links: int,
             minutes: float, n_workers: int, body: bool, caps: dict | None) -> dict:
    """Each stage's budget from the minutes (module docstring): deterministic. ``caps``
    (``RESIDUALSIM_TINY`` smoke runs) bound each."""
    samples = float(np.mean([len(t.times_s) for t in trajectories.values()]))
    rollout_s = samples * substeps * links * _STEP_S  # one recording, once
    fit = min(len(train_ids), 60)
    evaluation_s = max(rollout_s * fit * 2.0 / n_workers, 1e-3)  # lsq: starts refitted too
    shares = dict(SHARES)
    if not body:
        spare = shares.pop("body")
        shares = {k: v + spare * v / sum(shares.values()) for k, v in shares.items()}
    seconds = {k: v * minutes * 60.0 for k, v in shares.items()}
    budget = {"contact": int(np.clip(seconds["contact"] / evaluation_s, 20, 200)),
              "train_recordings": max(fit, min(len(train_ids), _MIN_TRAIN)),
              "train": int(np.clip(seconds["train"] / (evaluation_s * _TRAIN_COST), 16, 600)),
              "fit_recordings": fit}
    if body:
        budget["body"] = int(np.clip(seconds["body"] / evaluation_s, 40, 600))
    for name, cap in (caps or {}).items():
        if name in budget:
            budget[name] = min(budget[name], cap)
    budget["samples"] = min(32, (caps or {}).get("samples", 32))
    return {"seconds": {k: round(v, 1) for k, v in seconds.items()}, **budget,
            "rollout_s_estimate": rollout_s}


def _kept(fitted: dict, stages: Path) -> tuple[Path, str]:
    """The calibration the twin keeps after the body stage, and why in words: the body
    stage's held-out guard (:mod:`residualsim.sysid.held_out`) scored the identified body,
    the URDF's body with the contact fitted beside it, the contact stage's fit (the contact
    alone with the URDF's body) and the defaults on validation; the twin keeps its choice."""
    choice = fitted.get("held_out_choice") or "calibrated"
    figures = {label: f.get("position_rmse_m") for label, f in
               (fitted.get("validation") or {}).items()}
    scores = ", ".join(f"{label} {value:.4g} m" for label, value in figures.items()
                       if value is not None)
    if choice == "calibrated":
        return stages / "body", (f"the identified body is kept (validation position RMSE: "
                                 f"{scores})")
    if choice == "contact_fit":
        return stages / "contact", (f"the URDF's body is kept with the contact fitted alone: "
                                    f"the identified body did not beat it (validation "
                                    f"position RMSE: {scores})")
    return stages / "body", (f"the URDF's body is kept ({choice} set of the body stage: the "
                             f"identified body did not win; validation position RMSE: "
                             f"{scores})")


def run_twin(data: str | Path, scene: str | Scene, out: str | Path, *, body: bool = False,
             n_workers: int = 1, minutes: float | None = None, resume: bool = False,
             seed: int = 0, links: dict[str, str] | None = None,
             caps: dict[str, int] | None = None) -> dict[str, Any]:
    """Run the twin pipeline (module docstring); returns the summary written to
    ``out/summary.json``. ``data``: a recordings folder or a capture session (a bag or a
    session CSV; ``links`` maps URDF links to its topics, as ``data import --link``).
    ``caps``: upper bounds of the stages' budgets (``contact``, ``body``, ``train``,
    ``fit_recordings``, ``samples``), for smoke runs. ``scene``: a scene file, a ``.urdf``,
    or the Scene object (resolved once, here or by the caller, and handed to every stage)."""
    from residualsim.sim.scenes import make_scene, scene_reference

    out = Path(out)
    minutes = float(minutes or DEFAULT_MINUTES)
    if not (math.isfinite(minutes) and minutes > 0):
        raise ParameterError(f"--minutes must be a number > 0, got {minutes}")
    layout = make_scene(scene)  # the one resolution: every stage below takes this object
    data = Path(data)
    identity = {"data": str(data.resolve()), "scene": scene_reference(layout), "body": body,
                "workers": n_workers, "minutes": minutes, "seed": seed, "links": links,
                "caps": caps}
    fresh = not (out / STATE_FILE).exists()
    run = _Run(out, identity, resume)
    try:
        return _stages(run, out, data, layout, body, n_workers, minutes, seed, links, caps)
    except BaseException:
        if fresh and not run.state["stages"]:  # nothing finished: leave no folder behind
            (out / STATE_FILE).unlink(missing_ok=True)
            if out.exists() and not any(out.iterdir()):
                out.rmdir()
        raise


def _stages(run: "_Run", out: Path, data: Path, layout: Scene, body: bool,
            n_workers: int, minutes: float, seed: int, links, caps) -> dict[str, Any]:
    from residualsim.data import load_trajectories
    from residualsim.data.bags import is_bag
    from residualsim.data.splits import split_recordings

    session = is_bag(data) or (data.is_file() and data.suffix.lower() == ".csv")
    total = 5 + int(body) + int(session)  # check, contact, train, judge, report
    number = 0
    if session:
        number += 1
        run.stage("import", number, total, {"source": str(data)},
                  lambda: _import(data, layout, out / "recordings", links))
        data = out / "recordings"
    number += 1
    trajectories = load_trajectories(data)
    parts = split_recordings(list(trajectories))
    check = run.stage("check", number, total, {"rule": "hash split 0.7/0.15/0.15"},
                      lambda: _check(data, trajectories, parts))
    substeps = layout.settings.substeps
    n_links = 1 + len(getattr(layout, "joint_names", ()) or ())
    budgets = _budgets(trajectories, parts["train"], substeps, n_links, minutes, n_workers, body,
                       caps)
    stages = out / "stages"
    common = dict(n_workers=n_workers, seed=seed, resume=True, plots=False,
                  max_items=budgets["fit_recordings"])
    number += 1
    contact = run.stage("contact", number, total, {"method": "lsq", "params": ["contact"],
                                                    "budget": budgets["contact"]},
                        lambda: _calibrate(layout, data, ["contact"], stages / "contact",
                                           budgets["contact"], common))
    chosen, body_note = stages / "contact", "no --body: the URDF's body"
    if body:
        number += 1
        fitted = run.stage("body", number, total,
                           {"method": "lsq", "params": ["contact", "body", "joints"],
                            "budget": budgets["body"], "guard_against": "contact"},
                           lambda: _calibrate(layout, data, ["contact", "body", "joints"],
                                              stages / "body", budgets["body"],
                                              {**common, "guard_against": stages / "contact"}))
        chosen, body_note = _kept(fitted, stages)
        _say(body_note)
    number += 1
    trained = run.stage("train", number, total, {"budget": budgets["train"],
                                                 "recordings": budgets["train_recordings"],
                                                 "calibration": chosen.name},
                        lambda: _train(layout, data, out, chosen, budgets["train"], n_workers,
                                       seed, budgets["train_recordings"],
                                       _rests(run.state["stages"]["contact"]["result"])))
    number += 1
    samples = budgets["samples"]
    judged = run.stage("judge", number, total, {"split": "test", "samples": samples},
                       lambda: _judge(layout, data, out, n_workers, seed, samples))
    number += 1
    reported = run.stage("report", number, total, {"split": "test", "samples": samples},
                         lambda: _report(layout, data, out, chosen, n_workers, seed, samples))
    summary = {"command": "twin", "data": str(data), "scene": run.state["identity"]["scene"],
               "seed": seed,
               "workers": n_workers, "minutes": minutes, "check": check,
               "budgets": budgets, "calibration": {"contact": _brief(contact)},
               "kept_calibration": chosen.name, "body": body_note,
               "engine_parameter_draws": NO_POSTERIOR, "train": trained,
               "test": judged, "artefacts": reported,
               "verdict": _verdict(body_note if body else None, judged)}
    if body:
        summary["calibration"]["body"] = _brief(run.state["stages"]["body"]["result"])
    atomic_write_text(out / SUMMARY_FILE, json.dumps(summary, indent=1) + "\n")
    _say(f"done in {time.perf_counter() - run.started:.0f} s: {out / SUMMARY_FILE}")
    return summary


def _import(source: Path, layout, target: Path, links) -> dict:
    from residualsim.data.kinematics import read_kinematics
    from residualsim.data.session_import import import_session

    urdf = getattr(getattr(layout, "spec", None), "urdf", None)
    if urdf is None:
        raise ParameterError("twin: a capture session needs a scene file or .urdf (--scene)")
    summary = import_session(source, read_kinematics(urdf), target, links=links, force=True)
    return {"throws": summary["throws"], "skipped": summary["skipped"],
            "index": str(target / "index.csv")}


def _check(data: Path, trajectories: dict, parts: dict) -> dict:
    counts = {k: len(v) for k, v in parts.items()}
    if counts["validation"] < MIN_VALIDATION or counts["test"] < MIN_TEST:
        need = int(math.ceil((max(MIN_VALIDATION, MIN_TEST) + 2) / 0.15 / 10.0)) * 10
        raise DataError(f"{data}: {len(trajectories)} recordings split {counts['train']} / "
                        f"{counts['validation']} / {counts['test']} (train / validation / "
                        f"test, by a hash of each id: about 15 % each to validation and "
                        f"test); a twin needs at least {MIN_VALIDATION} validation recordings "
                        f"to choose on and {MIN_TEST} test recordings to judge with: record "
                        f"more, about {need} in all")
    return {"recordings": len(trajectories), "splits": counts}


def _calibrate(scene, data, names, target: Path, budget: int, common: dict) -> dict:
    from residualsim.sysid.calibrate import calibrate

    return calibrate(scene, data, names, target, method="lsq", budget=budget, progress=True,
                     **common)


def _brief(summary: dict) -> dict:
    keep = ("method", "params", "held_out_choice", "evaluations", "validation_count",
            "ground", "warnings")
    return {k: summary.get(k) for k in keep if k in summary}


def _rests(contact: dict) -> bool:
    """Whether the recordings rest (the contact stage's ground stage set a table height
    from them): then the twin also carries the pose noise those rest phases show."""
    ground = contact.get("ground") or {}
    return bool(ground) and "skipped" not in ground


def _train(scene, data, out: Path, calibration: Path, budget: int, n_workers: int,
           seed: int, recordings: int, rests: bool) -> dict:
    from residualsim.residual.train import TrainingConfig, run_training

    config = TrainingConfig(budget=budget, hidden=(6,), seed=seed)
    figures = run_training(scene, data, out, calibration=calibration, config=config,
                           n_workers=n_workers, resume=True, command="twin",
                           max_trajectories=recordings, uncertainty_recordings=recordings,
                           observation_noise=rests)
    return {k: v for k, v in figures.items() if isinstance(v, (int, float, str, bool))
            or v is None}


def _score(predictions, recordings, layout) -> dict:
    from residualsim.evaluation.metrics import score_trajectories

    aggregate = score_trajectories(predictions, recordings, side_m=getattr(layout, "side_m",
                                                                           None),
                                   radius_of_gyration_m=layout.radius_of_gyration_m
                                   ).aggregate()
    return {k: aggregate.get(k) for k in ("position_rmse_m", "final_error_m",
                                          "rotation_error_deg", "n_trajectories")}


def _judge(layout: Scene, data, out: Path, n_workers: int, seed: int, samples: int) -> dict:
    from residualsim.experiments.jobs import predict_dataset, simulate_dataset
    from residualsim.experiments.uncertainty import uncertainty_decomposition
    from residualsim.sim.recordings import load_recordings
    from residualsim.residual.model import ResidualModel
    from residualsim.data.splits import recording_selector

    model = ResidualModel.load(out)  # loaded once: the stages below take the object
    test = load_recordings(data, model.layout, 1.0 / model.dt_s, model.params,
                           select=recording_selector("test", None, source=str(data)))
    engine, _ = predict_dataset(model, str(data), split="test", residual=False,
                                n_workers=n_workers)
    twin, _ = predict_dataset(model, str(data), split="test", n_workers=n_workers)
    default, _ = simulate_dataset(layout, Path(data), None, n_workers=n_workers, split="test",
                                  substeps=model.substeps)
    errors = {"default_engine": _score(default, test, layout),
              "calibrated_engine": _score(engine, test, layout),
              "twin_mean": _score(twin, test, layout)}
    decomposition = uncertainty_decomposition(model, str(data), split="test", samples=samples,
                                              seed=seed, n_workers=n_workers)
    rows = {row["row"]: {k: row.get(k) for k in (
        "energy_score_m", "trajectory_energy_score_m", "coverage_xy_50", "coverage_xy_90",
        "coverage_50", "coverage_90")} for row in decomposition["rows"]}
    return {"recordings": len(test), "errors": errors, "energy_score_rows": rows,
            "samples": samples, "ratios": decomposition["ratios"]}


def _report(layout: Scene, data, out: Path, calibration: Path, n_workers: int, seed: int,
            samples: int) -> dict:
    from residualsim.experiments.report import build_report
    from residualsim.sysid.calibrate import export_calibrated_urdf
    from residualsim.sysid.calibration_file import load_calibration

    build_report(out / "report.html", model=out, data=data, split="test", samples=samples,
                 seed=seed, n_workers=n_workers, progress=False, decomposition=False)
    artefacts = {"report": "report.html", "model": "model.json"}
    params = load_calibration(calibration).params
    try:
        urdf = export_calibrated_urdf(layout, params, out / "twin.urdf")
        artefacts["urdf"] = Path(urdf).name if urdf else None
    except (DataError, ParameterError, ValueError) as exc:  # a built-in scene has no file
        artefacts["urdf"] = None
        artefacts["urdf_note"] = str(exc)
    return artefacts


def _verdict(body_note: str | None, judged: dict) -> list[str]:
    """Which parts earned their place, in words (the test split's figures; the body's
    choice made on validation, ``body_note``, None without ``--body``)."""
    errors = judged["errors"]
    default = errors["default_engine"]["position_rmse_m"]
    engine = errors["calibrated_engine"]["position_rmse_m"]
    mean = errors["twin_mean"]["position_rmse_m"]
    rows = list(judged["energy_score_rows"].values())
    words = [f"calibration: test position RMSE {engine:.4g} m against the default engine's "
             f"{default:.4g} m ({engine / default:.3f}x)"]
    if body_note is not None:
        words.append(f"body: {body_note}")
    words.append(f"residual: the twin's mean {mean:.4g} m against the calibrated engine's "
                 f"{engine:.4g} m ({_earned(mean, engine)})")
    if len(rows) >= 2:
        first, last = rows[0]["energy_score_m"], rows[-1]["energy_score_m"]
        words.append(f"spread: energy score of the final position {last:.4g} m sampled "
                     f"against {first:.4g} m deterministic ({_earned(last, first)}); 90 % x-y "
                     f"region holds {_percent(rows[-1]['coverage_xy_90'])} of the test recordings")
    return words


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.0f} %"


#: A part earns its place by lowering the test figure by more than this share; within it
#: the figures are the same (a zero residual's mean differs from its engine's by rounding).
EARNED = 0.005


def _earned(with_part: float, without: float) -> str:
    if with_part < without * (1.0 - EARNED):
        return "earned its place"
    return "no better" if with_part > without * (1.0 + EARNED) else "the same, within 0.5 %"
