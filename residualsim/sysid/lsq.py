"""Least squares on trajectory error: a point estimate for many parameters at once.

``calibrate --method lsq`` minimises, over the unit box of a
:class:`~residualsim.sysid.paramspace.ParamSpace`, a robust sum over the per-sample
residuals of every recording (:func:`residualsim.sysid.likelihood.trajectory_residuals`:
position error, r_g times the rotation vector, scaled joint errors, all metres):

    Σ_k ρ(r_k),   ρ(r) = f² log(1 + r²/f²)   (Cauchy, f = ``f_scale``, default 1 cm),

quadratic for residuals below f and growing only logarithmically beyond, so the few
recordings that contact sends centimetres off whatever the parameters cannot dominate,
while the millimetre residuals of free flight weigh fully. Per-sample residuals give
Gauss-Newton a Jacobian of (samples × 6) rows per recording rather than one number.
:func:`scipy.optimize.least_squares` (trust region reflective, bounds [0, 1]) takes a
forward-difference Jacobian whose d + 1 parameter sets are evaluated as ONE batch, so the
likelihood's workers share them: a Jacobian costs d + 1 rollouts per recording. The
difference step (default 2 % of each range) is deliberately wide: contact makes e_i rough
on a fine scale, and a wide step reads its trend.

**Stages** (:func:`staged_least_squares`, what ``calibrate --method lsq`` runs). Free
flight identifies the body and joints: inertia, centres of mass, mass ratios and joint
losses shape the tumble before the first contact, smoothly and without the chaos of contact.
Contact segments identify the contact coefficients. So with body or joint names:

1. ``body``: body and joints on each recording's free flight (the samples before its first
   contact, :func:`residualsim.sim.recordings.free_flight_samples`, at most 30; difference
   step 0.5 %) and on its later flights between bounces, each fitted as a recording of its
   own (:mod:`residualsim.sysid.flight_segments`), ``budget`` parameter sets;
2. ``contact``: the contact coefficients with that body on the free flight plus the first
   :data:`IMPACT_SECONDS` of contact, at most 12 (k + 1) sets for k coefficients. Whole
   recordings were tried first: their later contacts are chaotic, and with 210 synthetic
   hinge tosses the fit fell into a poor minimum (friction 0.18 for 0.30,
   train/README.md §19);
3. ``impact``: the body moved only along the directions the free flight left weak
   (:func:`~residualsim.sysid.identifiability.weak_basis`), on the same horizon, the contact
   and every other body direction held; skipped when there are none; at most
   :data:`IMPACT_SETS_PER_DIRECTION` (m + 1) sets for m directions, anchored as the first
   stage anchors them. Some of what free flight cannot see, contact can (through the
   impulse's M_c = (J M⁻¹ Jᵀ)⁻¹): on the synthetic hinge this stage moved the free flight's
   weak combination of the centres of mass along the axis toward the truth (0.5 and 0.3 mm
   off, from 1.0 and 1.5). It does not find a single body's inertia scale (torque-free
   motion depends only on the moments' ratios): the contact stage has absorbed it by then
   (an L-shaped body with inertia 2× its URDF's: friction 0.62 for 0.30, the scale left
   50 % low; searched together with the contact by Nelder-Mead it got to 30 % low with
   friction 0.68, and the hinge's validation error rose from 18.4 to 19.5 mm: not kept).
   The body, joints and contact refined all together on this horizon (the previous design)
   did worse: on the hinge (100 tosses with velocities, five calibrations with different
   settings) every one ended further from the truth, held out, than its first two stages
   had been (11.9 against 11.2 mm on the test split; the true model 10.5): 20 samples of
   chaotic contact per recording let the body fit noise the free flight had ruled out.

Without body names it is one stage (``all``) on the whole recordings. Contact
coefficients (``contact`` and ``all``) are searched in two steps: candidate starts screened
on the short horizon (:func:`_contact_starts`), then Nelder-Mead from the best
(:data:`SIMPLEX_SIZE` says why not Gauss-Newton). Recordings without velocities
(poses only) had their initial state fitted to the free flight with the URDF's body when
they were read; in the ``body`` stage each such state is an unknown beside
the parameters (:mod:`residualsim.sysid.joint_states`), so the velocities cannot absorb
what the body should explain.

**Residuals.** Rotation enters as r_g times the rotation *vector* between recorded and
simulated orientation (three signed components), not the angle: the angle has a kink at
zero where Gauss-Newton's linear model fails (on pose-only hinge tosses the angle residual
stalled the body stage; the vector converged in 177 sets).

Resume: every evaluated batch is written (atomically, one ``.npz`` each, residuals as float32
whether resumed or not) to the checkpoint folder; a resumed run replays the same
deterministic iteration and reads each batch back instead of rolling out.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from residualsim.atomic import atomic_open, atomic_write_text, read_json
from residualsim.errors import DataError, ParameterError
from residualsim.parallel.progress import progress_bar
from residualsim.sysid.mcmc import check_fingerprint
from residualsim.sysid.paramspace import ParamSpace

__all__ = ["fit_least_squares", "staged_least_squares", "forward_differences",
           "flight_horizons", "DEFAULT_STEP", "DEFAULT_F_SCALE"]

log = logging.getLogger(__name__)

#: Forward-difference step in unit coordinates (a fraction of each parameter's range).
DEFAULT_STEP = 0.02
#: The step of the free-flight (body) stage: free flight is smooth in the parameters.
FLIGHT_STEP = 0.005
#: Scale f (m) of the Cauchy loss: residuals beyond it count logarithmically.
DEFAULT_F_SCALE = 0.01
#: Seconds of free flight before the first contact that the ``body`` stage leaves out: the
#: last samples before a contact are within the engine's contact distance for a body whose
#: swing differs a little, which makes the loss rough (pose-only hinge tosses, 100 Hz:
#: without the margin the body stage stopped at a robust loss of 1.1e-4 per recording with
#: arm moments 57 % off; 20 ms left out, it converged with base moments within 4.3 % and
#: its centre of mass within 1.5 mm).
FLIGHT_MARGIN_S = 0.02
#: Seconds of contact after the free flight that the ``impact`` stage compares.
IMPACT_SECONDS = 0.2
#: Contact coefficients whose range a contact stage's candidate starts cover.
PRIMARY = ("lateral_friction", "restitution")
#: Edge of the first Nelder-Mead simplex (unit coordinates). Contact coefficients are
#: searched without derivatives: across recordings, chaotic contact makes the robust loss
#: V-shaped at its minimum (pose-only hinge tosses, restitution in steps of 0.025: the loss
#: falls linearly to the truth and rises linearly after), where Gauss-Newton stopped
#: 0.08 away from the truth.
SIMPLEX_SIZE = 0.05
#: Sobol points among those candidate starts.
SCREENED_STARTS = 32
#: The difference step of the ``impact`` stage (contact is rough; the body is smooth).
IMPACT_STEP = 0.01
#: Parameter sets of the ``impact`` stage per weak direction (plus one).
IMPACT_SETS_PER_DIRECTION = 12
#: Weight of the anchor that keeps what the recordings cannot determine at the start (see
#: :func:`fit_least_squares`): ε in ε² |D (z − z_start)|², D the first Jacobian's column
#: norms. In those column-normalised coordinates the data's curvature along a direction is
#: s², s its singular value (largest about 1-2), so the anchor moves a direction with
#: s = 0.16 (the weakest identified one on the synthetic hinge) by 0.4 % of its way back to
#: the start, and pins the structural ones (s below 0.003).
ANCHOR = 0.01


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
                      progress: bool = False, states: Any = None,
                      simplex: bool = False, anchor: bool | np.ndarray = False
                      ) -> dict[str, Any]:
    """Minimise Σ_k ρ(r_k) (module doc) over the space.

    ``residuals(x (n, d) natural values) -> (n, m)`` evaluates a batch (metres);
    ``f_scale`` (m) the Cauchy scale; ``n_items`` the recordings (the reported loss is per
    recording).
    ``budget``: parameter sets evaluated at most (each a rollout of every recording; a
    Jacobian spends d + 1); the best set seen is returned when it is spent. ``start``: unit
    coordinates (default :meth:`ParamSpace.start`), or several rows of them: all are
    evaluated as one batch and the search starts from the best. Returns ``{"x": best
    values, "x_unit": the same in unit coordinates, "loss": its robust cost per recording
    (m²), "evaluations", "iterations", "status", "history"}``.

    ``simplex``: search by Nelder-Mead on the robust loss instead of Gauss-Newton (for
    contact coefficients, whose loss is V-shaped at its minimum, see :data:`SIMPLEX_SIZE`).
    ``states``: a :class:`~residualsim.sysid.joint_states.StateBlock`; then the recordings'
    initial-state offsets are unknowns too (:mod:`residualsim.sysid.joint_states`),
    ``residuals(x, offsets (n, items, k))`` takes them, the search is
    :func:`~residualsim.sysid.joint_states.schur_levenberg_marquardt` and the result adds
    ``"offsets"`` (items, k) of the best set. ``"jacobian"``: the last Jacobian computed
    (residuals × d, unit coordinates), when the search computed one.

    ``anchor``: add the robust cost of the rows :data:`ANCHOR` · D (θ − θ_start) (D the
    first Jacobian's column norms, so metres like the residuals) to the objective, a ridge
    toward the start in column-normalised coordinates: directions the recordings determine
    are left where they are, those they cannot (weak, :mod:`residualsim.sysid.identifiability`)
    stay at the start instead of drifting along a valley of equal loss. The reported losses
    include it, and ``"anchor_weights"`` (d,) returns ε D. An array of d weights instead of
    ``True`` sets ε D itself (units of the residuals per unit coordinate).
    """
    from scipy.optimize import least_squares

    if not 0 < step < 0.5:
        raise ParameterError(f"the difference step must lie in (0, 0.5), got {step}")
    d = space.ndim
    n_shifts = d + (states.k if states is not None and states.size else 0)
    if budget < n_shifts + 2:
        raise ParameterError(f"budget {budget} is below one Jacobian ({n_shifts + 1} "
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
    bar = progress_bar(total=budget, unit="sets", disable=not progress,
                       desc="lsq" + (f" {Path(checkpoint).name}" if checkpoint else ""))
    ridge: dict[str, Any] = {"weights": None, "origin": None}  # the anchor, set when known
    if not isinstance(anchor, bool):
        ridge["weights"] = np.asarray(anchor, dtype=np.float64).reshape(d)
        anchor = True

    def anchor_rows(z: np.ndarray) -> np.ndarray:
        if ridge["weights"] is None or ridge["origin"] is None:
            return np.zeros(d if anchor else 0)
        return ridge["weights"] * (np.clip(z[:d], 0.0, 1.0) - ridge["origin"])

    def evaluate(batch: np.ndarray) -> np.ndarray:
        missing = [z for z in batch if _key(z) not in cache]
        if len(history) + len(batch) > budget:
            raise _Budget
        if missing:
            missing_z = np.array(missing)
            values = np.atleast_2d(
                residuals(space.from_unit(missing_z)) if n_shifts == d else
                residuals(space.from_unit(missing_z[:, :d]),
                          missing_z[:, d:].reshape(len(missing), -1, states.k)))
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
            r = np.concatenate([r, anchor_rows(z)])
            loss = float(f_scale ** 2 * np.sum(np.log1p((r / f_scale) ** 2)) / n_items)
            history.append({"z": z[:d].tolist(), "loss": loss})  # θ only, not the offsets
            if loss < best["loss"]:
                best.update(loss=loss, z=z.copy())
        bar.update(len(batch))
        bar.set_postfix(best=f"{best['loss']:.5g}")
        return rows

    last: dict[str, Any] = {}

    def clip(z: np.ndarray) -> np.ndarray:
        z = z.copy()
        z[..., :d] = np.clip(z[..., :d], 0.0, 1.0)
        return z

    def fun(z: np.ndarray) -> np.ndarray:
        r = np.concatenate([evaluate(clip(z)[None])[0], anchor_rows(z)])
        last.update(z=z.copy(), r=r)
        return r

    def differences(z: np.ndarray, r0: np.ndarray) -> np.ndarray:
        """The recordings' Jacobian (:func:`forward_differences`), then the anchor's rows."""
        r0 = r0[:len(r0) - (d if anchor else 0)]  # the recordings' rows
        jacobian = forward_differences(evaluate, z, r0, d, step,
                                       states if n_shifts > d else None)
        last["jacobian"] = jacobian[:, :d]
        if not anchor:
            return jacobian
        if ridge["weights"] is None:
            ridge["weights"] = ANCHOR * np.linalg.norm(np.nan_to_num(jacobian[:, :d]), axis=0)
        return np.vstack([jacobian, np.hstack([np.diag(ridge["weights"]),
                                               np.zeros((d, n_shifts - d))])])

    def jac(z: np.ndarray) -> np.ndarray:
        return differences(z, last["r"] if "z" in last and np.array_equal(last["z"], z)
                           else fun(z))

    z0 = np.clip(space.start() if start is None else np.asarray(start, float), 0.0, 1.0)
    if z0.ndim == 2:  # candidate starts: the best of them
        candidates = np.concatenate([z0, np.zeros((len(z0), n_shifts - d))], axis=1)
        z0 = z0[int(np.argmin([np.sum(np.log1p((r / f_scale) ** 2))
                               for r in evaluate(candidates)]))]
    ridge["origin"] = z0[:d].copy()
    status, iterations = "budget spent", None
    try:
        if simplex:
            from scipy.optimize import minimize

            corner = np.where(z0 + SIMPLEX_SIZE <= 1.0, SIMPLEX_SIZE, -SIMPLEX_SIZE)
            fit = minimize(lambda z: float(np.sum(np.log1p((fun(z) / f_scale) ** 2))), z0,
                           method="Nelder-Mead", bounds=[(0.0, 1.0)] * d,
                           options={"maxfev": budget, "xatol": 1e-3, "fatol": 1e-9,
                                    "initial_simplex": np.vstack([z0, z0 + np.diag(corner)])})
            status, iterations = fit.message, int(fit.nit)
        elif n_shifts > d:
            from residualsim.sysid.joint_states import schur_levenberg_marquardt

            status = schur_levenberg_marquardt(
                fun, differences, np.concatenate([z0, np.zeros(states.size)]), d, states,
                f_scale)
        else:
            fit = least_squares(fun, z0, jac=jac, bounds=(0.0, 1.0), method="trf",
                                loss="cauchy", f_scale=f_scale, x_scale=1.0, max_nfev=budget,
                                xtol=1e-4, ftol=1e-6, gtol=1e-8)
            status, iterations = fit.message, int(fit.nfev)
    except _Budget:
        pass
    finally:
        bar.close()
    if best["z"] is None:
        raise DataError("least squares evaluated nothing (budget too small)")
    if anchor and ridge["weights"] is not None:
        _anchored_steps(evaluate, best, cache, last["jacobian"], ridge, f_scale, d)
    history = [{"loss": row["loss"], "z": row["z"],
                "x": space.from_unit(np.array(row["z"])).tolist()} for row in history]
    extra = {"offsets": best["z"][d:].reshape(-1, states.k)} if n_shifts > d else {}
    if "jacobian" in last:
        extra["jacobian"] = last["jacobian"]
    if anchor and ridge["weights"] is not None:
        extra["anchor_weights"] = ridge["weights"]
    return {**extra, "x": space.from_unit(best["z"][:d]).tolist(),
            "x_unit": best["z"][:d].tolist(), "loss": best["loss"],
            "evaluations": len(history), "iterations": iterations, "status": status,
            "failed": int(sum(not np.isfinite(row["loss"]) for row in history)),
            "history": history}


def forward_differences(evaluate: Callable[[np.ndarray], np.ndarray], z: np.ndarray,
                        r0: np.ndarray, d: int, step: float, states: Any = None) -> np.ndarray:
    """The forward-difference Jacobian (m, d + k) of ``evaluate`` (a batch of points z
    (n, d + offsets) -> residuals (n, m)) at ``z`` whose residuals are ``r0`` (m,): along
    each of the d parameters (unit coordinates, step ``step``, backward at the upper wall),
    then along offset component j of every recording of ``states`` (a
    :class:`~residualsim.sysid.joint_states.StateBlock`) at once (each recording's rows
    depend on its own offset only). One batch of d + k points."""
    k = states.k if states is not None and states.size else 0
    signs = np.ones(d + k)
    signs[:d] = np.where(z[:d] + step <= 1.0, 1.0, -1.0)
    steps = signs * np.concatenate([np.full(d, step), states.step if k else []])
    shifted = np.repeat(np.asarray(z, dtype=np.float64)[None], d + k, axis=0)
    shifted[np.arange(d), np.arange(d)] += steps[:d]
    for j in range(k):
        shifted[d + j, d + j::k] += steps[d + j]
    shifted[:, :d] = np.clip(shifted[:, :d], 0.0, 1.0)
    return ((evaluate(shifted) - r0[None]) / steps[:, None]).T


def _anchored_steps(evaluate: Callable[[np.ndarray], np.ndarray], best: dict[str, Any],
                    cache: Mapping[str, np.ndarray], jacobian: np.ndarray,
                    ridge: Mapping[str, Any], f_scale: float, d: int, steps: int = 3) -> None:
    """Gauss-Newton steps on the anchored objective from the best set, with the last
    Jacobian (θ only; offsets held): a trust-region search stops once the data are met,
    before the anchor's small pull (ε² of the data's curvature) has moved the weak
    directions back, and one full step along them does it. ``evaluate`` keeps a step
    whose anchored loss is lower; stops at the first that is not, or when the budget is
    spent."""
    weights = np.asarray(ridge["weights"])
    for _ in range(steps):
        z = best["z"]
        r = np.where(np.isfinite(cache[_key(z)]), cache[_key(z)], 1.0).astype(np.float64)
        w = np.sqrt(1.0 / (1.0 + (r / f_scale) ** 2))
        a = np.nan_to_num(jacobian) * w[:, None]
        lhs = a.T @ a + np.diag(weights ** 2)
        rhs = a.T @ (r * w) + weights ** 2 * (z[:d] - ridge["origin"])
        candidate = z.copy()
        candidate[:d] = np.clip(z[:d] - np.linalg.lstsq(lhs, rhs, rcond=None)[0], 0.0, 1.0)
        before = best["loss"]
        try:
            evaluate(candidate[None])
        except _Budget:
            return
        if best["loss"] >= before:
            return


def _contact_starts(space: ParamSpace, current: np.ndarray, seed: int) -> np.ndarray:
    """Candidate starts (unit coordinates) of a stage fitting contact coefficients, screened
    on the free flight plus :data:`IMPACT_SECONDS` of contact before the local search: the
    current values, the scene's own (its URDF's, else PyBullet's defaults) and
    :data:`SCREENED_STARTS` scrambled Sobol points (seeded) over the primary coefficients
    (:data:`PRIMARY`; the others at the scene's own values).

    Why: the robust loss over (friction, restitution) has one sharp valley at the truth and
    a flat plateau around it, where Gauss-Newton stalls. On pose-only hinge tosses with
    the true body, searches from mid-range and from the defaults stopped at robust losses
    0.28 and 0.22 per recording, the truth being at 0.067; spread over every coefficient,
    each Sobol point had rolling or spinning friction of centimetres, which stops any
    tumble, and all were worse than the defaults."""
    from scipy.stats import qmc

    own = space.to_unit(np.array([np.clip(getattr(space.base, p.name), p.low, p.high)
                                  for p in space.parameters]))
    rows = [current, own]
    spread = [i for i, name in enumerate(space.names) if name in PRIMARY]
    if spread:
        points = np.repeat(own[None], SCREENED_STARTS, axis=0)
        points[:, spread] = qmc.Sobol(len(spread), scramble=True,
                                      seed=seed).random(SCREENED_STARTS)
        rows += list(points)
    return np.unique(np.stack(rows), axis=0)


def flight_horizons(scene: str, train: Mapping[str, Any], settings: Any,
                    contact_s: float) -> list[int]:
    """Per recording: its free-flight samples plus ``contact_s`` seconds of samples."""
    from residualsim.sim.engine import Engine
    from residualsim.sim.recordings import free_flight_samples

    with Engine(scene, settings=settings) as engine:
        flight = [free_flight_samples(engine, t) for t in train.values()]
    if not contact_s:  # free flight only: keep FLIGHT_MARGIN_S away from the contact
        return [max(3, n - math.ceil(FLIGHT_MARGIN_S * t.rate_hz - 1e-9))
                for n, t in zip(flight, train.values())]
    return [n + int(round(contact_s * t.rate_hz)) for n, t in zip(flight, train.values())]


def staged_least_squares(scene: str, train: Mapping[str, Any], space: ParamSpace,
                         likelihood: Any, *, budget: int, out: Path, resume: bool,
                         fingerprint: Mapping[str, Any], progress: bool = False,
                         n_workers: int = 1, rotation_weight: float = 1.0,
                         seed: int = 0) -> dict[str, Any]:
    """The stages of the module doc over ``space`` on recordings ``train``; ``likelihood``
    the whole-recording :class:`~residualsim.sysid.likelihood.TrajectoryLikelihood`.
    With ``likelihood.fit_recorded`` (``--recorded-start fit``, lsq's default) the stages
    after ``body`` start the recordings with recorded velocities from first poses fitted to
    their free flight with the body found so far (``all``: the likelihood's, fitted with the
    URDF's); ``body`` rolls them out as recorded: a pose fitted with the URDF's body would
    carry its error into the body stage, as pose-only starts did (train/README.md §22).
    Checkpoints go to ``out/lsq-checkpoint/<stage>``. Returns :func:`fit_least_squares`'s
    keys for the full space plus ``stages`` (per stage: names, evaluations, loss, status)."""
    from residualsim.sysid.bodyspace import inertia_scale_direction, is_body_name
    from residualsim.sysid.identifiability import (WeakSubspace, describe, weak_basis,
                                                   weak_directions, without_inertia_scale)
    from residualsim.sysid.flight_segments import flight_segments
    from residualsim.sysid.joint_states import OffsetResiduals, apply_offsets, estimated_ids
    from residualsim.sim.recordings import fit_starts

    values = space.from_unit(space.start())
    body = [n for n in space.names if is_body_name(n)]
    contact = [n for n in space.names if not is_body_name(n)]
    if body and contact:
        plan = [("body", body, budget, FLIGHT_STEP),
                ("contact", contact, min(budget, 12 * (len(contact) + 1)), DEFAULT_STEP),
                ("impact", body, budget, IMPACT_STEP)]
    elif body:
        plan = [("body", body, budget, FLIGHT_STEP)]
    else:
        plan = [("all", space.names, budget, DEFAULT_STEP)]
    stages, history, evaluations, failed, found = [], [], 0, 0, None
    weak, flight_weak, flight_ridge, warnings = [], [], None, []  # the body stage's weak ones
    for stage, names, stage_budget, step in plan:
        index = [space.names.index(n) for n in names]
        sub = ParamSpace(names, bounds={n: (space.parameters[i].low, space.parameters[i].high)
                                        for n, i in zip(names, index)},
                         base=space.base, scene=space.scene)
        if stage == "impact":  # only along the directions free flight left weak
            if not len(flight_weak):
                continue
            sub = WeakSubspace(sub, sub.to_unit(values[index]), flight_weak,
                               [describe(w) for w in weak])
            stage_budget = min(budget, IMPACT_SETS_PER_DIRECTION * (sub.ndim + 1))
            ridge = np.linalg.norm(flight_ridge[None] * flight_weak, axis=1)
        fixed = values.copy()

        def full(x: np.ndarray, fixed=fixed, index=index) -> np.ndarray:
            rows = np.repeat(fixed[None], len(x), axis=0)
            rows[:, index] = x
            return rows

        if stage != "body" and getattr(likelihood, "fit_recorded", False):  # the body's
            train = likelihood.trajectories if stage == "all" else fit_starts(
                scene, train, likelihood.settings, space.engine_params(values), n_workers,
                estimated=False, recorded=True)  # pose-only: solved in the body stage
        fitted, segments = train, {}
        if stage == "body":  # the later flights too, each a recording of its own
            segments = flight_segments(scene, train, likelihood.settings,
                                       space.engine_params(values), n_workers)
            fitted = {**train, **segments}
        if stage == "all":
            target, block = likelihood, None
        else:
            horizons = flight_horizons(scene, fitted, likelihood.settings,
                                       0.0 if stage == "body" else IMPACT_SECONDS)
            target = OffsetResiduals(scene, fitted, likelihood.settings, horizons,
                                     estimated_ids(fitted) if stage == "body" else [],
                                     n_workers, rotation_weight)
            block = target.block if target.block.items else None

        def evaluate(x: np.ndarray, offsets: np.ndarray | None = None, target=target,
                     full=full) -> np.ndarray:
            params = [space.engine_params(row) for row in full(x)]
            return target.residuals(params) if target is likelihood else target(params, offsets)

        start = sub.start() if stage == "impact" else sub.to_unit(values[index])
        screened = 0
        if stage in ("all", "contact"):  # screen candidate starts on the short horizon
            candidates = _contact_starts(sub, start, seed)
            screen = target if stage == "contact" else OffsetResiduals(
                scene, train, likelihood.settings,
                flight_horizons(scene, train, likelihood.settings, IMPACT_SECONDS), [], n_workers,
                rotation_weight)
            try:
                r = screen([space.engine_params(row)
                            for row in full(sub.from_unit(candidates))])
            finally:
                if screen is not target:
                    screen.close()
            start = candidates[int(np.argmin(np.sum(np.log1p((r / DEFAULT_F_SCALE) ** 2),
                                                    axis=1)))]
            screened = len(candidates)
        try:
            found = fit_least_squares(
                evaluate, sub, budget=stage_budget, step=step, n_items=likelihood.n_items,
                start=start, checkpoint=out / "lsq-checkpoint" / stage,
                resume=resume, fingerprint={**fingerprint, "stage": stage,
                                            "fixed": fixed.tolist(),
                                            **({"segments": list(segments)} if segments
                                               else {})}, progress=progress,
                states=block, simplex=stage in ("all", "contact"),
                anchor=ridge if stage == "impact" else any(is_body_name(n) for n in names))
        finally:
            if target is not likelihood:
                target.close()
        if "offsets" in found:  # the recordings' own starts (the segments are dropped)
            ids = [target.ids[i] for i, _, _ in block.items]
            own = [j for j, key in enumerate(ids) if key in train]
            train = apply_offsets(scene, train, [ids[j] for j in own], found["offsets"][own])
        values[index] = found["x"]
        history += [{**row, "stage": stage, "x": full(np.array([row["x"]]))[0].tolist()}
                    for row in found["history"]]
        evaluations += found["evaluations"]
        failed += found["failed"]
        if stage == "body" and "jacobian" in found:  # a single body's scale: never seen
            scale = inertia_scale_direction(sub, scene)
            seen = without_inertia_scale(found["jacobian"], scale)
            weak = weak_directions(seen, names, scale=scale)
            flight_weak = weak_basis(seen, len(names))
            flight_ridge = found["anchor_weights"]
        if stage == "body" and weak:
            warnings += [f"the free flight does not determine {describe(w)}: "
                         + ("searched on the first contact, else it stays near the URDF's "
                            "values" if contact else "it stays near the URDF's values")
                         + " (train/README.md §19)" for w in weak]
        if stage == "impact":  # how far contact moved each direction, and how sharply
            moved = np.array(found["x_unit"]) - 0.5
            seen = (np.linalg.norm(np.nan_to_num(found["jacobian"]), axis=0)
                    if "jacobian" in found else np.zeros(sub.ndim))
        if _stopped_on_budget(found["status"]):
            warnings.append(f"the {stage} stage stopped on its budget ({found['evaluations']} "
                            "parameter sets) before it converged: its values may be short "
                            "of the best (raise --budget)")
        stages.append({"stage": stage, "names": sub.names, "evaluations": found["evaluations"],
                       **({"screened_starts": screened} if screened else {}),
                       "loss": found["loss"], "status": found["status"],
                       **({"samples": int(np.sum(horizons))} if stage != "all" else {}),
                       **({"initial_states": len(block.items)} if block else {}),
                       **({"flight_segments": len(segments)} if stage == "body" else {}),
                       **({"weak_directions": weak} if stage == "body" else {}),
                       **({"directions": [{**w, "step": float(a), "response_m": float(r)}
                                          for w, a, r in zip(weak, moved, seen)]}
                          if stage == "impact" else {})})
    return {"x": values.tolist(), "loss": found["loss"], "evaluations": evaluations,
            "warnings": warnings,
            "failed": failed, "stages": stages, "history": history}


def _stopped_on_budget(status: str) -> bool:
    """Whether a stage's status (:func:`fit_least_squares`) says its budget ran out."""
    text = str(status).lower()
    return text == "budget spent" or "maximum number of function evaluations" in text


def lsq_pilot(scene: str, train: Mapping[str, Any], space: ParamSpace, likelihood: Any,
              **stages: Any) -> tuple[list[float], dict[str, Any]]:
    """MH's pilot with body or joint names (``calibrate --method mh``): the staged fit of
    :func:`staged_least_squares` (its keyword arguments ``stages``), where the calibrated
    likelihood's pilot, envelope and bootstrap then start instead of a Sobol search of the
    box (which found poor bodies on pose-only recordings: train/README.md §22). Returns the
    natural values (d,) and the fit's record for the summary (its loss, evaluations,
    stages and warnings)."""
    found = staged_least_squares(scene, train, space, likelihood, **stages)
    return found["x"], {k: v for k, v in found.items() if k not in ("x", "history")}
