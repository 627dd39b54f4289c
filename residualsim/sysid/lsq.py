"""Least squares on trajectory error: a point estimate for many parameters at once.

``calibrate --method lsq`` minimises, over the unit box of a
:class:`~residualsim.sysid.paramspace.ParamSpace`, a robust sum over the per-sample
residuals of every recording (:func:`residualsim.sysid.likelihood.trajectory_residuals`:
position error, r_g times the rotation angle, scaled joint errors, all metres):

    Σ_k ρ(r_k),   ρ(r) = f² log(1 + r²/f²)   (Cauchy, f = ``f_scale``, default 1 cm),

quadratic for residuals below f and growing only logarithmically beyond, so the few
recordings that contact sends centimetres off whatever the parameters cannot dominate,
while the millimetre residuals of free flight weigh fully. Per-sample residuals give
Gauss-Newton a Jacobian of (samples × 5) rows per recording rather than one number.
:func:`scipy.optimize.least_squares` (trust region reflective, bounds [0, 1]) takes a
forward-difference Jacobian whose d + 1 parameter sets are evaluated as ONE batch, so the
likelihood's workers share them: a Jacobian costs d + 1 rollouts per recording. The difference step (default 2 % of each range) is deliberately
wide: contact makes e_i rough on a fine scale, and a wide step reads its trend.

**Stages** (:func:`staged_least_squares`, what ``calibrate --method lsq`` runs). Free
flight identifies the body and joints: inertia, centres of mass, mass ratios and joint
losses shape the tumble before the first contact, smoothly and without the chaos of contact.
Contact segments identify the contact coefficients. So with body or joint names the body is
fitted first on each recording's free flight (the samples before its first contact,
:func:`residualsim.sim.recordings.free_flight_samples`, at most 30; difference step 0.5 %),
then the contact coefficients on the whole recordings with that body. ``budget`` parameter
sets go to the body stage, at most 12 Jacobians' worth (12 (k + 1) for k coefficients) to
the contact stage: a free-flight rollout is short, a whole one is not. Without body names
it is one stage on the whole recordings. Free flight cannot separate what only contact
reveals (the scale of the inertias against the mass, how the mass splits between links
along a joint axis: at 0.5 mm pose noise the true body fits free flight no better than a
body 10 % off), so a third stage, ``impact``, refines body, joints and contact together on
each recording's free flight plus its first :data:`IMPACT_SECONDS` of contact, where the
impulse's response to the body's inertia (M_c = (J M⁻¹ Jᵀ)⁻¹) is sharp and the chaos of
later contacts has not set in; it gets ``budget`` parameter sets too. Recordings without
velocities had their initial state fitted to the free flight with the URDF's body when they
were read; that fit absorbs part of the body's error, so before each later stage it is
fitted again with the parameters found so far (:func:`refit_initial_states`).

Resume: every evaluated batch is written (atomically, one ``.npz`` each, residuals as float32
whether resumed or not) to the checkpoint folder; a resumed run replays the same
deterministic iteration and reads each batch back instead of rolling out.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from residualsim.atomic import atomic_open, atomic_write_text, read_json
from residualsim.errors import DataError, ParameterError
from residualsim.sysid.mcmc import check_fingerprint
from residualsim.sysid.paramspace import ParamSpace

__all__ = ["fit_least_squares", "staged_least_squares", "refit_initial_states", "DEFAULT_STEP",
           "DEFAULT_F_SCALE"]

log = logging.getLogger(__name__)

#: Forward-difference step in unit coordinates (a fraction of each parameter's range).
DEFAULT_STEP = 0.02
#: The step of the free-flight (body) stage: free flight is smooth in the parameters.
FLIGHT_STEP = 0.005
#: Scale f (m) of the Cauchy loss: residuals beyond it count logarithmically.
DEFAULT_F_SCALE = 0.01
#: Seconds of contact after the free flight that the ``impact`` stage compares.
IMPACT_SECONDS = 0.2
#: The difference step of the ``impact`` stage (contact is rough; the body is smooth).
IMPACT_STEP = 0.01


def _key(z: np.ndarray) -> str:
    return ",".join(f"{v:.12g}" for v in z)


class _Budget(Exception):
    """Raised inside the residual function when the evaluation budget is spent."""


def fit_least_squares(residuals: Callable[[np.ndarray], np.ndarray], space: ParamSpace, *,
                      budget: int = 300, step: float = DEFAULT_STEP,
                      f_scale: float = DEFAULT_F_SCALE, n_items: int = 1,
                      start: np.ndarray | None = None,
                      checkpoint: str | os.PathLike[str] | None = None, resume: bool = False,
                      fingerprint: Mapping[str, Any] | None = None,
                      progress: bool = False) -> dict[str, Any]:
    """Minimise Σ_k ρ(r_k) (module doc) over the space.

    ``residuals(x (n, d) natural values) -> (n, m)`` evaluates a batch (metres);
    ``f_scale`` (m) the Cauchy scale; ``n_items`` the recordings (the reported loss is per
    recording).
    ``budget``: parameter sets evaluated at most (each a rollout of every recording; a
    Jacobian spends d + 1); the best set seen is returned when it is spent. ``start``: unit
    coordinates (default :meth:`ParamSpace.start`). Returns ``{"x": best values, "loss":
    its robust cost per recording (m²), "evaluations", "iterations", "status", "history"}``.
    """
    from scipy.optimize import least_squares

    if not 0 < step < 0.5:
        raise ParameterError(f"the difference step must lie in (0, 0.5), got {step}")
    if budget < space.ndim + 2:
        raise ParameterError(f"budget {budget} is below one Jacobian ({space.ndim + 1} "
                             "evaluations) plus a step")
    fingerprint = {**dict(fingerprint or {}), "space": space.as_json(), "step": step,
                   "f_scale": f_scale, "method": "lsq"}
    folder = Path(checkpoint) if checkpoint is not None else None
    cache: dict[str, np.ndarray] = {}
    if folder is not None and (folder / "fingerprint.json").is_file():
        if not resume:
            raise DataError(f"{folder}: a checkpoint exists; resume it or use a new output "
                            "directory")
        check_fingerprint(folder, read_json(folder / "fingerprint.json", error=DataError),
                          fingerprint)
        for part in sorted(folder.glob("batch-*.npz")):
            with np.load(part) as saved:
                for z, row in zip(saved["z"], saved["residuals"]):
                    cache[_key(z)] = row
    elif folder is not None:
        atomic_write_text(folder / "fingerprint.json", json.dumps(fingerprint))
    history: list[dict[str, Any]] = []
    best: dict[str, Any] = {"loss": np.inf, "z": None}
    started = time.perf_counter()

    def evaluate(batch: np.ndarray) -> np.ndarray:
        missing = [z for z in batch if _key(z) not in cache]
        if len(history) + len(batch) > budget:
            raise _Budget
        if missing:
            values = np.atleast_2d(residuals(space.from_unit(np.array(missing))))
            values = values.astype(np.float32)  # as stored: a resumed run sees the same
            for z, row in zip(missing, values):
                cache[_key(z)] = row
            if folder is not None:
                with atomic_open(folder / f"batch-{len(list(folder.glob('batch-*.npz'))):05d}"
                                 ".npz") as handle:
                    np.savez(handle, z=np.array(missing), residuals=values)
        rows = np.array([cache[_key(z)] for z in batch], dtype=np.float64)
        rows = np.where(np.isfinite(rows), rows, 1.0)
        for z, r in zip(batch, rows):
            loss = float(f_scale ** 2 * np.sum(np.log1p((r / f_scale) ** 2)) / n_items)
            history.append({"z": z.tolist(), "loss": loss})
            if loss < best["loss"]:
                best.update(loss=loss, z=z.copy())
        if progress:
            log.info("lsq: %d evaluations, best loss %.5g (%.0f s)", len(history),
                     best["loss"], time.perf_counter() - started)
        return rows

    last: dict[str, Any] = {}

    def fun(z: np.ndarray) -> np.ndarray:
        r = evaluate(np.clip(z, 0.0, 1.0)[None])[0]
        last.update(z=z.copy(), r=r)
        return r

    def jac(z: np.ndarray) -> np.ndarray:
        r0 = last["r"] if "z" in last and np.array_equal(last["z"], z) else fun(z)
        signs = np.where(z + step <= 1.0, 1.0, -1.0)
        shifted = z[None] + np.diag(signs * step)
        r = evaluate(np.clip(shifted, 0.0, 1.0))
        return ((r - r0[None]) / (signs * step)[:, None]).T

    z0 = np.clip(space.start() if start is None else np.asarray(start, float), 0.0, 1.0)
    status, iterations = "budget spent", None
    try:
        fit = least_squares(fun, z0, jac=jac, bounds=(0.0, 1.0), method="trf", loss="cauchy",
                            f_scale=f_scale, x_scale=1.0, max_nfev=budget, xtol=1e-4,
                            ftol=1e-6, gtol=1e-8)
        status, iterations = fit.message, int(fit.nfev)
    except _Budget:
        pass
    if best["z"] is None:
        raise DataError("least squares evaluated nothing (budget too small)")
    history = [{**row, "x": space.from_unit(np.array(row["z"])).tolist()} for row in history]
    return {"x": space.from_unit(best["z"]).tolist(), "loss": best["loss"],
            "evaluations": len(history), "iterations": iterations, "status": status,
            "failed": int(sum(not np.isfinite(row["loss"]) for row in history)),
            "history": history}


def refit_initial_states(scene: str, trajectories: Mapping[str, Any], params: Any,
                         settings: Any) -> dict[str, Any]:
    """``trajectories`` with the initial state of each recording whose velocities were
    estimated fitted again to its free flight by an engine at ``params`` (e.g. a body found
    by the body stage); recordings with recorded velocities are returned as they are."""
    from residualsim.sim.engine import Engine
    from residualsim.sim.recordings import fit_initial_state

    estimated = [k for k, t in trajectories.items()
                 if t.metadata.get("velocities") == "estimated"]
    out = dict(trajectories)
    if estimated:
        with Engine(scene, params=params, settings=settings) as engine:
            for key in estimated:
                out[key] = fit_initial_state(engine, trajectories[key])
    return out


def staged_least_squares(scene: str, train: Mapping[str, Any], space: ParamSpace,
                         likelihood: Any, *, budget: int, out: Path, resume: bool,
                         fingerprint: Mapping[str, Any], progress: bool = False,
                         n_workers: int = 1, rotation_weight: float = 1.0) -> dict[str, Any]:
    """The stages of the module doc over ``space`` on recordings ``train``; ``likelihood``
    the whole-recording :class:`~residualsim.sysid.likelihood.TrajectoryLikelihood`.
    Checkpoints go to ``out/lsq-checkpoint/<stage>``. Returns :func:`fit_least_squares`'s
    keys for the full space plus ``stages`` (per stage: names, evaluations, loss, status)."""
    from residualsim.sim.engine import Engine
    from residualsim.sim.recordings import free_flight_samples
    from residualsim.sysid.bodyspace import is_body_name
    from residualsim.sysid.likelihood import TrajectoryLikelihood

    values = space.from_unit(space.start())
    body = [n for n in space.names if is_body_name(n)]
    contact = [n for n in space.names if not is_body_name(n)]
    if body and contact:
        plan = [("body", body, budget, FLIGHT_STEP),
                ("contact", contact, min(budget, 12 * (len(contact) + 1)), DEFAULT_STEP),
                ("impact", body + contact, budget, IMPACT_STEP)]
    elif body:
        plan = [("body", body, budget, FLIGHT_STEP)]
    else:
        plan = [("all", space.names, budget, DEFAULT_STEP)]
    stages, history, evaluations, failed, found = [], [], 0, 0, None
    warnings = []
    if body and any(t.metadata.get("velocities") == "estimated" for t in train.values()):
        warnings.append(
            "body or joint names with recordings without velocities: each initial state is "
            "fitted to the same free flight the body is, and on synthetic hinge tosses this "
            "left the body worse than the URDF's (train/README.md section 19); record "
            "velocities, or check the held-out figures against contact alone")
        log.warning("%s", warnings[-1])
    refitted = False  # train's initial states differ from those ``likelihood`` holds
    for number, (stage, names, stage_budget, step) in enumerate(plan):
        if number and body and any(t.metadata.get("velocities") == "estimated"
                                   for t in train.values()):
            train = refit_initial_states(scene, train, space.engine_params(values),
                                         likelihood.settings)
            refitted = True
        index = [space.names.index(n) for n in names]
        sub = ParamSpace(names, bounds={n: (space.parameters[i].low, space.parameters[i].high)
                                        for n, i in zip(names, index)},
                         base=space.base, scene=space.scene)
        fixed = values.copy()

        def full(x: np.ndarray, fixed=fixed, index=index) -> np.ndarray:
            rows = np.repeat(fixed[None], len(x), axis=0)
            rows[:, index] = x
            return rows

        if stage in ("body", "impact"):
            with Engine(scene, settings=likelihood.settings) as engine:
                horizons = [free_flight_samples(engine, t) for t in train.values()]
            if stage == "impact":
                horizons = [n + int(round(IMPACT_SECONDS * t.rate_hz))
                            for n, t in zip(horizons, train.values())]
            target = TrajectoryLikelihood(scene, train, likelihood.settings.substeps,
                                          likelihood.noise, n_workers, initial_draws=0,
                                          rotation_weight=rotation_weight, horizons=horizons)
        elif refitted:  # whole recordings from the refitted initial states
            target = TrajectoryLikelihood(scene, train, likelihood.settings.substeps,
                                          likelihood.noise, n_workers,
                                          initial_draws=likelihood.initial_draws,
                                          rotation_weight=rotation_weight)
        else:
            target = likelihood
        try:
            found = fit_least_squares(
                lambda x, target=target, full=full: target.residuals(
                    [space.engine_params(row) for row in full(x)]),
                sub, budget=stage_budget, step=step, n_items=likelihood.n_items,
                start=sub.to_unit(values[index]), checkpoint=out / "lsq-checkpoint" / stage,
                resume=resume, fingerprint={**fingerprint, "stage": stage,
                                            "fixed": fixed.tolist()}, progress=progress)
        finally:
            if target is not likelihood:
                target.close()
        values[index] = found["x"]
        history += [{**row, "stage": stage, "x": full(np.array([row["x"]]))[0].tolist()}
                    for row in found["history"]]
        evaluations += found["evaluations"]
        failed += found["failed"]
        stages.append({"stage": stage, "names": names, "evaluations": found["evaluations"],
                       "loss": found["loss"], "status": found["status"],
                       **({"samples": int(np.sum(horizons))}
                          if stage in ("body", "impact") else {})})
    return {"x": values.tolist(), "loss": found["loss"], "evaluations": evaluations,
            "warnings": warnings,
            "failed": failed, "stages": stages, "history": history}
