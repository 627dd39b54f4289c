"""Nevergrad ask/tell in reproducible batches, with checkpoints that resume exactly.

Used by calibration (point estimates of engine parameters) and by residual training
(Algorithm 2). The optimiser is pinned by name (``"CMA"`` by default: ``NGOpt`` changes
algorithm with the number of workers and hung here once). Candidates are asked and told in
batches of ``batch_size`` (``batch_mode``: reproducible for a seed) and a batch is evaluated
by one call of the loss, so the caller can spread it over worker processes.

Checkpoint: after every batch (or every ``checkpoint_every`` evaluations) the history
(candidates, losses) and a small JSON ``state`` of the caller are written atomically to one
``.npz``. Resuming replays the history through a fresh optimiser with the same seed (nothing
is pickled) and refuses a history that does not replay or a checkpoint of another problem
(its ``fingerprint`` differs). A rollout that fails (NaN loss) is told :data:`FAILED_LOSS`
(nevergrad would silently clip NaN to 5e20) and counted.
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from residualsim.atomic import atomic_open
from residualsim.errors import DataError, ParameterError
from residualsim.sysid.mcmc import as_generator, check_fingerprint
from residualsim.sysid.paramspace import ParamSpace

__all__ = ["minimize", "point_estimate", "OptimizationResult", "FAILED_LOSS"]

log = logging.getLogger(__name__)

#: Loss told to the optimiser for a failed (NaN or infinite) evaluation.
FAILED_LOSS = 1e6


@dataclass
class OptimizationResult:
    """History of one run: ``candidates`` (n, d), ``losses`` (n,), the best of them, the
    number of failed evaluations, the caller's ``state`` and whether it stopped early."""

    candidates: np.ndarray
    losses: np.ndarray
    failed: int = 0
    state: dict[str, Any] = field(default_factory=dict)
    stopped_early: bool = False

    @property
    def evaluations(self) -> int:
        return len(self.losses)

    @property
    def best_index(self) -> int:
        return int(np.argmin(self.losses))

    @property
    def best(self) -> np.ndarray:
        """The candidate with the lowest loss."""
        return self.candidates[self.best_index]

    @property
    def best_loss(self) -> float:
        return float(self.losses[self.best_index])


#: Optimisers whose proposals do not depend on the budget (tested for CMA: the same
#: candidates for budgets 64 and 320), so that ``--resume`` may change the budget: a larger
#: one continues the run, one equal to the evaluations recorded ends it there, with the
#: result a run with that budget from the start would give.
BUDGET_FREE_OPTIMIZERS = ("CMA",)


def _without_budget(fingerprint: Mapping[str, Any]) -> dict:
    """``fingerprint`` without the budget (top level, or in a ``config`` mapping)."""
    plain = json.loads(json.dumps(dict(fingerprint)))
    plain.pop("budget", None)
    if isinstance(plain.get("config"), dict):
        plain["config"].pop("budget", None)
    return plain


def _load(path: Path, fingerprint: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, dict]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            header = json.loads(str(archive["header"]))
            candidates, losses = archive["candidates"], archive["losses"]
    except Exception as exc:  # empty, truncated, not a zip, missing arrays, bad JSON, ...
        raise DataError(f"{path}: not a readable optimisation checkpoint "
                        f"({type(exc).__name__}: {exc})") from None
    if not isinstance(header, dict):
        raise DataError(f"{path}: not a readable optimisation checkpoint (bad header)")
    saved = header.get("fingerprint", {})
    if isinstance(saved, dict) and fingerprint.get("optimizer") in BUDGET_FREE_OPTIMIZERS:
        saved, fingerprint = _without_budget(saved), _without_budget(fingerprint)
    check_fingerprint(path, saved, fingerprint)
    if candidates.ndim != 2 or len(candidates) != len(losses):
        raise DataError(f"{path}: damaged checkpoint (history shapes disagree)")
    return candidates, losses, dict(header.get("state", {}))


def _save(path: Path, fingerprint: Mapping[str, Any], candidates: list, losses: list,
          state: Mapping[str, Any]) -> None:
    header = json.dumps({"fingerprint": dict(fingerprint), "state": dict(state)})
    with atomic_open(path) as handle:
        np.savez(handle, header=np.array(header), candidates=np.array(candidates),
                 losses=np.array(losses, dtype=np.float64))


def minimize(loss: Callable[[np.ndarray], np.ndarray], init: np.ndarray, *,
             budget: int, sigma: float | None = None, lower: float | None = None,
             upper: float | None = None, optimizer: str = "CMA", batch_size: int = 4,
             seed: int = 0, checkpoint: str | os.PathLike[str] | None = None,
             resume: bool = False, checkpoint_every: int | None = None,
             fingerprint: Mapping[str, Any] | None = None,
             after_batch: Callable[[OptimizationResult], bool] | None = None,
             progress: bool = False, desc: str | None = None) -> OptimizationResult:
    """Minimise ``loss(candidates (n, d)) -> (n,)`` from ``init`` (d,) with nevergrad.

    Parameters
    ----------
    loss : callable
        Evaluates a batch of candidates; NaN or inf marks a failed evaluation.
    init : ndarray of shape (d,)
        Starting point (and centre of the first search distribution).
    budget : int
        Number of loss evaluations (candidates).
    sigma : float, optional
        Initial mutation scale (nevergrad's default without it).
    lower, upper : float, optional
        Box bounds applied to every coordinate.
    optimizer : str
        A name in ``nevergrad.optimizers.registry``.
    batch_size : int
        Candidates asked, evaluated and told together.
    seed : int
        Seed of the optimiser's random state.
    checkpoint : path, optional
        ``.npz`` written (atomically) after a batch once ``checkpoint_every`` evaluations
        have been added since the last write (default: after every batch), and always at
        the end; with ``resume`` an existing one is replayed, so an interruption loses at
        most one interval.
    fingerprint : mapping, optional
        Identifies the problem; a checkpoint with a different one is refused.
    after_batch : callable, optional
        Called with the result so far after each batch (its ``state`` dict may be updated and
        is checkpointed); returning True stops the run early. Replayed batches do not call
        it again: the state saved with the checkpoint is restored instead.
    """
    import nevergrad as ng

    from residualsim.parallel.progress import progress_bar

    if optimizer not in ng.optimizers.registry:
        raise ParameterError(f"unknown nevergrad optimizer {optimizer!r}")
    every = batch_size if checkpoint_every is None else checkpoint_every
    for name, value in (("budget", budget), ("batch_size", batch_size),
                        ("checkpoint_every", every)):
        if int(value) != value or value < 1:
            raise ParameterError(f"{name} must be an integer >= 1, got {value}")
    # cma warns about "orphanated injected solutions" when a generation is asked in parts
    # (batches smaller than its population); harmless here, and it floods the progress bar.
    warnings.filterwarnings("ignore", message="orphanated injected solution")
    init = np.asarray(init, dtype=np.float64)
    fingerprint = {**dict(fingerprint or {}), "optimizer": optimizer, "batch_size": batch_size,
                   "seed": int(seed), "dimension": int(init.size),
                   "sigma": sigma, "lower": lower, "upper": upper}
    parametrization = ng.p.Array(init=init, lower=lower, upper=upper)
    if sigma is not None:
        parametrization.set_mutation(sigma=sigma)
    parametrization.random_state = np.random.RandomState(int(seed))
    opt = ng.optimizers.registry[optimizer](parametrization=parametrization, budget=budget,
                                             num_workers=batch_size)
    path = Path(checkpoint) if checkpoint is not None else None
    recorded_z, recorded_loss, state = np.empty((0, init.size)), np.empty(0), {}
    if path is not None and path.exists():
        if not resume:
            raise DataError(f"{path}: a checkpoint of an earlier run exists; resume it or "
                            "choose another output")
        recorded_z, recorded_loss, state = _load(path, fingerprint)
        if len(recorded_loss) > budget:
            raise DataError(f"{path}: the checkpoint holds {len(recorded_loss)} evaluations, "
                            f"more than the budget of {budget}: resume with a budget of at "
                            f"least {len(recorded_loss)} (that many ends the run there)")
    saved = len(recorded_loss)  # evaluations in the checkpoint on disk
    candidates: list[np.ndarray] = []
    losses: list[float] = []
    result = OptimizationResult(np.empty((0, init.size)), np.empty(0), state=state)
    bar = progress_bar(total=budget, disable=not progress, unit="eval",
                       desc=desc or optimizer)
    try:
        while len(losses) < budget:
            asked = [opt.ask() for _ in range(min(batch_size, budget - len(losses)))]
            z = np.array([c.value for c in asked])
            done = len(losses)
            replayed = done + len(asked) <= len(recorded_loss)
            if replayed:
                if not np.allclose(z, recorded_z[done:done + len(asked)], rtol=0, atol=1e-12):
                    raise DataError(f"{path}: the checkpoint does not replay (different "
                                    "optimiser or version); use a new output directory")
                values = recorded_loss[done:done + len(asked)]
                result.failed += int(np.sum(values == FAILED_LOSS))
            else:
                values = np.asarray(loss(z), dtype=np.float64).reshape(len(asked))
                bad = ~np.isfinite(values)
                if bad.any():
                    result.failed += int(bad.sum())
                    log.warning("%d evaluations failed; their loss is set to %g",
                                bad.sum(), FAILED_LOSS)
                values = np.where(bad, FAILED_LOSS, values)
            for candidate, value in zip(asked, values):
                opt.tell(candidate, float(value))
            candidates.extend(z)
            losses.extend(float(v) for v in values)
            result.candidates, result.losses = np.array(candidates), np.array(losses)
            bar.update(len(asked))
            bar.set_postfix(best=f"{result.best_loss:.4g}")
            if replayed:  # its callback ran before the interruption: state is restored
                stop = len(losses) == len(recorded_loss) and bool(state.get("stopped_early"))
            else:
                stop = bool(after_batch(result)) if after_batch is not None else False
                if stop:
                    result.state["stopped_early"] = True
                due = len(losses) - saved >= every or stop or len(losses) >= budget
                if path is not None and due:
                    _save(path, fingerprint, candidates, losses, result.state)
                    saved = len(losses)
            if stop:
                result.stopped_early = True
                break
    finally:
        bar.close()
    return result


def point_estimate(loss: Callable[[np.ndarray], np.ndarray], space: ParamSpace, *,
                   budget: int = 200, optimizer: str = "CMA", batch_size: int = 4,
                   rng: int | None = 0, checkpoint: str | os.PathLike[str] | None = None,
                   resume: bool = False, checkpoint_every: int | None = None,
                   fingerprint: Mapping[str, Any] | None = None,
                   progress: bool = False, start: np.ndarray | None = None) -> dict[str, Any]:
    """Minimise ``loss(x (n, d)) -> (n,)`` over the space with a pinned nevergrad optimiser,
    from unit coordinates ``start`` (default the middle of the box).

    Candidates are asked and told in batches of ``batch_size`` (reproducible for a seed and
    evaluated together by the likelihood's workers). The history is checkpointed as JSON
    after each batch; resuming replays it through a fresh optimiser with the same seed
    (no pickles) and refuses a history that does not replay; ``checkpoint_every``
    evaluations between writes (default every batch; see
    :func:`residualsim.sysid.optimize.minimize`). The start is evaluated too; when no
    candidate beats it, it is returned with a warning. Returns ``{"x": best values,
    "loss": best loss, "start_loss", "evaluations", "failed", "history", "warnings"}``.
    """
    seed = rng if isinstance(rng, int) else int(as_generator(rng).integers(2**31))
    fingerprint = {**dict(fingerprint or {}), "space": space.as_json()}
    init = np.full(space.ndim, 0.5) if start is None else np.asarray(start, dtype=float)
    result = minimize(lambda z: loss(space.from_unit(z)), init,
                      budget=budget, lower=0.0, upper=1.0, optimizer=optimizer,
                      batch_size=batch_size, seed=seed, checkpoint=checkpoint, resume=resume,
                      checkpoint_every=checkpoint_every, fingerprint=fingerprint,
                      progress=progress)
    history = [{"z": z.tolist(), "x": space.from_unit(z).tolist(), "loss": float(value)}
               for z, value in zip(result.candidates, result.losses)]
    best, best_loss, warnings = result.best, result.best_loss, []
    start_loss = float(loss(space.from_unit(init[None]))[0])  # the optimiser may not ask it
    if np.isfinite(start_loss) and not start_loss >= best_loss:
        warnings.append(f"no candidate of {result.evaluations} beat the starting parameters "
                        f"(loss {best_loss:.6g} against {start_loss:.6g}): the start is "
                        "returned; raise --budget or use --method lsq")
        best, best_loss = init, start_loss
    return {"x": space.from_unit(best).tolist(), "loss": best_loss, "start_loss": start_loss,
            "evaluations": result.evaluations, "failed": result.failed, "history": history,
            "warnings": warnings}
