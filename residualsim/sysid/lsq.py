"""Least squares on trajectory error: a point estimate for many parameters at once.

``calibrate --method lsq`` minimises, over the unit box of a
:class:`~residualsim.sysid.paramspace.ParamSpace`, the sum of squared residuals

    r_i(z) = sqrt( log(max(e_i, ERROR_FLOOR) / ERROR_FLOOR) ),   Σ_i r_i² = −2 log L + const,

one per recording, with e_i the recording's (effective) trajectory error of
:mod:`residualsim.sysid.likelihood`: the optimum is the maximum of the same likelihood
(σ estimated) that ``mh`` samples and ``nevergrad`` maximises, and no recording that contact
sends centimetres off dominates the sum. :func:`scipy.optimize.least_squares` (trust region
reflective, bounds [0, 1]) takes a forward-difference Jacobian whose d + 1 parameter sets are
evaluated as ONE batch, so the likelihood's workers share them: a Jacobian costs d + 1
rollouts per recording. The difference step (default 2 % of each range) is deliberately
wide: contact makes e_i rough on a fine scale, and a wide step reads its trend.

Free-flight segments identify the body and joints (inertia, centre of mass and joint
damping shape the tumble between contacts), contact segments the contact coefficients, so
the residuals of one recording inform both.

Resume: every evaluated batch is written (atomically, JSON) to the checkpoint; a resumed run
replays the same deterministic iteration and reads each batch back instead of rolling out.
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

from residualsim.atomic import atomic_write_text, read_json
from residualsim.errors import DataError, ParameterError
from residualsim.sysid.likelihood import ERROR_FLOOR
from residualsim.sysid.mcmc import check_fingerprint
from residualsim.sysid.paramspace import ParamSpace

__all__ = ["fit_least_squares", "DEFAULT_STEP"]

log = logging.getLogger(__name__)

#: Forward-difference step in unit coordinates (a fraction of each parameter's range).
DEFAULT_STEP = 0.02


class _Budget(Exception):
    """Raised inside the residual function when the evaluation budget is spent."""


def fit_least_squares(errors: Callable[[np.ndarray], np.ndarray], space: ParamSpace, *,
                      budget: int = 300, step: float = DEFAULT_STEP,
                      start: np.ndarray | None = None,
                      checkpoint: str | os.PathLike[str] | None = None, resume: bool = False,
                      fingerprint: Mapping[str, Any] | None = None,
                      progress: bool = False) -> dict[str, Any]:
    """Minimise Σ r_i² (module doc) over the space.

    ``errors(x (n, d) natural values) -> (n, n_recordings)`` evaluates a batch.
    ``budget``: parameter sets evaluated at most (each a rollout of every recording; a
    Jacobian spends d + 1); the best set seen is returned when it is spent. ``start``: unit
    coordinates (default :meth:`ParamSpace.start`). Returns ``{"x": best values, "loss":
    its mean r_i², "evaluations", "iterations", "status", "history"}``.
    """
    from scipy.optimize import least_squares

    if not 0 < step < 0.5:
        raise ParameterError(f"the difference step must lie in (0, 0.5), got {step}")
    if budget < space.ndim + 2:
        raise ParameterError(f"budget {budget} is below one Jacobian ({space.ndim + 1} "
                             "evaluations) plus a step")
    fingerprint = {**dict(fingerprint or {}), "space": space.as_json(), "step": step,
                   "method": "lsq"}
    path = Path(checkpoint) if checkpoint is not None else None
    cache: dict[str, list[float]] = {}
    if path is not None and resume and path.is_file():
        saved = read_json(path, error=DataError)
        check_fingerprint(path, saved.get("fingerprint"), fingerprint)
        cache = {k: v for k, v in saved["cache"]}
    elif path is not None and path.is_file() and not resume:
        raise DataError(f"{path}: a checkpoint exists; pass resume to continue it")
    history: list[dict[str, Any]] = []
    best: dict[str, Any] = {"loss": np.inf, "z": None}
    started = time.perf_counter()

    def key(z: np.ndarray) -> str:
        return ",".join(f"{v:.12g}" for v in z)

    def evaluate(batch: np.ndarray) -> np.ndarray:
        missing = [z for z in batch if key(z) not in cache]
        if len(history) + len(batch) > budget:
            raise _Budget
        if missing:
            values = np.atleast_2d(errors(space.from_unit(np.array(missing))))
            for z, row in zip(missing, values):
                cache[key(z)] = [float(v) for v in row]
            if path is not None:
                atomic_write_text(path, json.dumps({"fingerprint": fingerprint,
                                                    "cache": list(cache.items())}))
        rows = np.array([cache[key(z)] for z in batch], dtype=np.float64)
        residuals = np.sqrt(np.log(np.maximum(np.where(np.isfinite(rows), rows, 1e6),
                                              ERROR_FLOOR) / ERROR_FLOOR))
        for z, r in zip(batch, residuals):
            loss = float(np.mean(r ** 2))
            history.append({"z": z.tolist(), "loss": loss})
            if loss < best["loss"]:
                best.update(loss=loss, z=z.copy())
        if progress:
            log.info("lsq: %d evaluations, best loss %.5g (%.0f s)", len(history),
                     best["loss"], time.perf_counter() - started)
        return residuals

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
        fit = least_squares(fun, z0, jac=jac, bounds=(0.0, 1.0), method="trf",
                            x_scale=1.0, max_nfev=budget, xtol=1e-4, ftol=1e-6, gtol=1e-8)
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
