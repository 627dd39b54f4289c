"""A random-walk Metropolis-Hastings sampler over a :class:`ParamSpace`, with checkpoints.

The residual-learning paper's calibration: proposals z' = z + s·L·ε (ε ~ N(0, I)) in the
space's unit coordinates, s = 0.05 by default (5 % of each parameter's range), accepted with
probability min(1, p(z') / p(z)). Proposals leaving [0, 1]^d are mirrored back in
(:meth:`ParamSpace.reflect`), which keeps the walk symmetric.

Several chains advance in lock step so that one call of the likelihood evaluates all their
proposals at once (the likelihood spreads them over worker processes). With ``adapt=True``
the step size s follows a Robbins-Monro rule towards ``target_acceptance`` and the shape L
the chains' within-chain covariance, *during burn-in only*; after burn-in the kernel is fixed,
so the kept draws come from a valid Metropolis-Hastings chain.

**Delayed acceptance** (Christen & Fox 2005; ``screen=``): a proposal y first faces a cheap
approximation π̃ (e.g. the likelihood of a subset of the recordings, scaled to the whole
set), accepted with min(1, π̃(y)/π̃(x)); only a proposal that passes is evaluated in full and
accepted with min(1, π(y) π̃(x) / (π(x) π̃(y))). The kernel satisfies detailed balance for
π itself, whatever π̃ is, so the chain stays exact; proposals that the screen rejects cost
only the screen.

The log-likelihood of the current state is stored, never re-evaluated (a stochastic
likelihood would then still be pseudo-marginal). The generator state is saved in every
checkpoint, so a resumed run continues the same stream and ends with the same draws as an
uninterrupted one.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from residualsim.atomic import atomic_open
from residualsim.errors import DataError, ParameterError
from residualsim.sysid.paramspace import ParamSpace
from residualsim.sysid.posterior import Posterior

__all__ = ["MetropolisHastings", "Screen", "CHECKPOINT_FORMAT", "as_generator",
           "check_resumable", "check_fingerprint"]

log = logging.getLogger(__name__)

#: Format tag of sampler checkpoints.
CHECKPOINT_FORMAT = "residualsim.mh-checkpoint/1"

#: log-likelihood of natural parameter values (n, d) -> (n,).
LogLikelihood = Callable[[np.ndarray], np.ndarray]


class Screen:
    """The two stages of a delayed-acceptance likelihood (see the module docstring).

    ``first(x) -> (approximate log L (n,), token)`` is the cheap stage; ``complete(x,
    token) -> log L (n,)`` finishes the evaluation of the same points (the token carries
    what the first stage computed, e.g. the subset's log-likelihood, so nothing is done
    twice). Both take natural parameter values (n, d)."""

    def __init__(self, first: Callable[[np.ndarray], tuple[np.ndarray, Any]],
                 complete: Callable[[np.ndarray, Any], np.ndarray]) -> None:
        self.first, self.complete = first, complete


def check_fingerprint(path: Path, saved: Mapping[str, Any], expected: Mapping[str, Any]) -> None:
    """Refuse a checkpoint whose run description differs, naming the keys that differ."""
    saved, expected = json.loads(json.dumps(saved)), json.loads(json.dumps(dict(expected)))
    if not isinstance(saved, dict) or saved != expected:
        saved = saved if isinstance(saved, dict) else {}
        keys = sorted(k for k in set(saved) | set(expected) if saved.get(k) != expected.get(k))
        raise DataError(f"{path}: checkpoint belongs to another run ({', '.join(keys)} "
                        "differ); use a new output directory")


def as_generator(rng: int | np.random.Generator | None) -> np.random.Generator:
    """A numpy Generator from a seed, a Generator (used as is) or None (fresh entropy)."""
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is not None and (isinstance(rng, bool) or not isinstance(rng, (int, np.integer))):
        raise ParameterError(f"rng must be an int seed, a numpy Generator or None, got {rng!r}")
    return np.random.default_rng(rng)


class _Chains:
    """Mutable sampler state: history, current point, kernel; saved in checkpoints."""

    def __init__(self, z: np.ndarray, log_like: np.ndarray, log_prior: np.ndarray,
                 scale: float) -> None:
        n_chains, ndim = z.shape
        self.z, self.log_like, self.log_prior = z, log_like, log_prior
        self.scale = scale
        self.shape = np.eye(ndim)
        self.history_z = np.empty((n_chains, 0, ndim))
        self.history_ll = np.empty((n_chains, 0))
        self.history_lp = np.empty((n_chains, 0))
        self.accepted = np.empty((n_chains, 0), dtype=bool)
        self.n_evaluations = 0
        self.n_screened = 0  # delayed acceptance: proposals that met the first stage only
        self.log_screen = np.zeros(n_chains)  # the first stage's value at the current point
        self.seconds = 0.0

    @property
    def step(self) -> int:
        return self.history_z.shape[1]

    def record(self, accepted: np.ndarray) -> None:
        self.history_z = np.concatenate([self.history_z, self.z[:, None]], axis=1)
        self.history_ll = np.concatenate([self.history_ll, self.log_like[:, None]], axis=1)
        self.history_lp = np.concatenate([self.history_lp, self.log_prior[:, None]], axis=1)
        self.accepted = np.concatenate([self.accepted, accepted[:, None]], axis=1)


class MetropolisHastings:
    """Random-walk Metropolis-Hastings over engine parameters, several chains in lock step.

    Parameters
    ----------
    log_likelihood : callable
        ``f(x) -> log L`` for natural parameter values x of shape (n, d), returning (n,);
        ``-inf`` for a failed rollout. Called once per step with every chain's proposal.
    space : ParamSpace
        Names, bounds and priors; the walk runs in its unit coordinates.
    n_chains : int
        Independent chains (2+ for R-hat).
    proposal_scale : float
        Initial random-walk step in unit coordinates (0.05 = 5 % of each range).
    adapt : bool
        Adapt step size and shape during burn-in (fixed afterwards).
    target_acceptance : float
        Acceptance rate the adaptation aims for.
    init_draws : int
        Chains start at the best points (highest posterior) of a scrambled Sobol set of
        ``init_draws × n_chains`` points (rounded up to a power of 2) covering the box, unless :meth:`run` gets
        ``initial``. Contact likelihoods have narrow basins and flat plateaus (e.g. every
        friction above the sticking value fits equally badly); a random-walk start on a
        plateau may never find the basin.
    rng : int, numpy Generator or None
        Seed; the same seed gives the same draws.
    screen : Screen or None
        Delayed acceptance (see the module docstring); ``log_likelihood`` then still serves
        the starting points.
    """

    def __init__(self, log_likelihood: LogLikelihood, space: ParamSpace, n_chains: int = 2,
                 proposal_scale: float = 0.05, adapt: bool = True,
                 target_acceptance: float = 0.3, init_draws: int = 32,
                 rng: int | np.random.Generator | None = None,
                 screen: Screen | None = None) -> None:
        if int(n_chains) != n_chains or n_chains < 1:
            raise ParameterError(f"n_chains must be an integer >= 1, got {n_chains}")
        if not (math.isfinite(proposal_scale) and 0 < proposal_scale <= 1):
            raise ParameterError(f"proposal_scale must lie in (0, 1], got {proposal_scale}")
        if not 0 < target_acceptance < 1:
            raise ParameterError(f"target_acceptance must lie in (0, 1), got "
                                 f"{target_acceptance}")
        if int(init_draws) != init_draws or init_draws < 1:
            raise ParameterError(f"init_draws must be an integer >= 1, got {init_draws}")
        self.log_likelihood = log_likelihood
        self.space = space
        self.n_chains = int(n_chains)
        self.proposal_scale = float(proposal_scale)
        self.adapt = bool(adapt)
        self.target_acceptance = float(target_acceptance)
        self.init_draws = int(init_draws)
        self.rng = as_generator(rng)
        self.screen = screen

    def options(self) -> dict[str, Any]:
        """The sampler options, JSON-safe (part of a checkpoint's fingerprint)."""
        options = {"n_chains": self.n_chains, "proposal_scale": self.proposal_scale,
                   "adapt": self.adapt, "target_acceptance": self.target_acceptance,
                   "init_draws": self.init_draws}
        if self.screen is not None:
            options["delayed_acceptance"] = True
        return options

    # --- one step -----------------------------------------------------------------------------
    def _evaluate(self, chains: _Chains | None, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        log_prior = self.space.log_prior(z)
        log_like = np.full(len(z), -np.inf)
        inside = np.isfinite(log_prior)
        if inside.any():
            values = np.asarray(self.log_likelihood(self.space.from_unit(z[inside])),
                                dtype=np.float64).reshape(-1)
            log_like[inside] = np.where(np.isnan(values), -np.inf, values)
        if chains is not None:
            chains.n_evaluations += int(inside.sum())
        return log_like, log_prior

    def _start(self, initial: np.ndarray | None) -> _Chains:
        d = self.space.ndim
        if initial is not None:
            x = np.broadcast_to(np.asarray(initial, dtype=np.float64),
                                (self.n_chains, d)).copy()
            z = self.space.to_unit(x)
            if not np.all((z >= 0) & (z <= 1)):
                raise ParameterError(f"initial values {x.tolist()} lie outside the bounds "
                                     f"of {self.space}")
            log_like, log_prior = self._evaluate(None, z)
        else:
            from scipy.stats import qmc

            # A scrambled Sobol set covers the box evenly: a narrow basin is not missed.
            sobol = qmc.Sobol(d, scramble=True, seed=self.rng)
            power = math.ceil(math.log2(self.init_draws * self.n_chains))
            candidates = sobol.random_base2(power)  # balanced sets come in powers of 2
            log_like, log_prior = self._evaluate(None, candidates)
            best = np.argsort(-(log_like + log_prior), kind="stable")[: self.n_chains]
            z, log_like, log_prior = candidates[best], log_like[best], log_prior[best]
        chains = _Chains(z, log_like, log_prior, self.proposal_scale)
        chains.n_evaluations = len(z) if initial is not None else len(candidates)
        if self.screen is not None:
            chains.log_screen = np.asarray(self.screen.first(self.space.from_unit(z))[0],
                                           dtype=np.float64).reshape(-1)
        return chains

    def _screened(self, chains: _Chains, proposal: np.ndarray, log_u: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Delayed acceptance of ``proposal``: (accept, log L, log prior, first stage)."""
        n = len(proposal)
        log_u2 = np.log(self.rng.random(n))
        log_prior = self.space.log_prior(proposal)
        first, log_like = np.full(n, -np.inf), np.full(n, -np.inf)
        inside = np.flatnonzero(np.isfinite(log_prior))
        if len(inside):
            values, token = self.screen.first(self.space.from_unit(proposal[inside]))
            first[inside] = np.nan_to_num(np.asarray(values, np.float64), nan=-np.inf)
        with np.errstate(invalid="ignore"):
            passed = log_u < (first + log_prior) - (chains.log_screen + chains.log_prior)
        chains.n_screened += len(inside)
        keep = np.flatnonzero(passed[inside])
        if len(keep):
            values = self.screen.complete(self.space.from_unit(proposal[inside[keep]]),
                                          _take(token, keep))
            log_like[inside[keep]] = np.nan_to_num(np.asarray(values, np.float64),
                                                   nan=-np.inf)
            chains.n_evaluations += len(keep)
        with np.errstate(invalid="ignore"):
            second = (log_like - chains.log_like) - (first - chains.log_screen)
            accept = passed & (log_u2 < second)
        return accept, log_like, log_prior, first

    def _step(self, chains: _Chains, burn_in: int) -> np.ndarray:
        n, d = chains.z.shape
        noise = self.rng.standard_normal((n, d))
        log_u = np.log(self.rng.random(n))
        factor = np.linalg.cholesky(chains.shape)
        proposal = self.space.reflect(chains.z + chains.scale * noise @ factor.T)
        if self.screen is None:
            log_like, log_prior = self._evaluate(chains, proposal)
            with np.errstate(invalid="ignore"):
                accept = log_u < (log_like + log_prior) - (chains.log_like + chains.log_prior)
        else:
            accept, log_like, log_prior, first = self._screened(chains, proposal, log_u)
            chains.log_screen = np.where(accept, first, chains.log_screen)
        chains.z = np.where(accept[:, None], proposal, chains.z)
        chains.log_like = np.where(accept, log_like, chains.log_like)
        chains.log_prior = np.where(accept, log_prior, chains.log_prior)
        chains.record(accept)
        if self.adapt and chains.step <= burn_in:
            self._adapt(chains, accept)
        return accept

    def _adapt(self, chains: _Chains, accept: np.ndarray) -> None:
        t = chains.step
        gain = (t + 1.0) ** -0.6
        chains.scale = float(np.clip(
            chains.scale * math.exp(gain * (accept.mean() - self.target_acceptance)),
            1e-6, 1.0))
        d = chains.z.shape[1]
        if d > 1 and t >= 200 and t % 100 == 0:
            recent = chains.history_z[:, t // 2:]
            within = np.mean([np.cov(chain, rowvar=False) for chain in recent], axis=0)
            within += 1e-12 * np.eye(d)
            sign, logdet = np.linalg.slogdet(within)
            if sign > 0 and np.isfinite(logdet) and np.all(np.diag(within) > 1e-10):
                chains.shape = within / math.exp(logdet / d)

    # --- running ---------------------------------------------------------------------------------
    def run(self, n_samples: int, burn_in: int = 1000, *, initial: np.ndarray | None = None,
            checkpoint: str | os.PathLike[str] | None = None, checkpoint_every: int = 100,
            resume: bool = False, fingerprint: Mapping[str, Any] | None = None,
            progress: bool = False, meta: Mapping[str, Any] | None = None) -> Posterior:
        """Draw ``n_samples`` per chain after ``burn_in`` steps; return the :class:`Posterior`.

        ``checkpoint`` is written atomically every ``checkpoint_every`` steps and at the end.
        With ``resume=True`` an existing checkpoint is continued (its ``fingerprint`` must
        match: same problem, same options, same seed); a run may be resumed with a larger
        ``n_samples`` to draw more.
        """
        for name, value, low in (("n_samples", n_samples, 1), ("burn_in", burn_in, 0),
                                 ("checkpoint_every", checkpoint_every, 1)):
            if int(value) != value or value < low:
                raise ParameterError(f"{name} must be an integer >= {low}, got {value}")
        total = burn_in + n_samples
        fingerprint = {**dict(fingerprint or {}), "sampler": self.options(),
                       "space": self.space.as_json(), "burn_in": int(burn_in)}
        path = Path(checkpoint) if checkpoint is not None else None
        chains = None
        if path is not None and path.exists():
            if not resume:
                raise DataError(f"{path}: a checkpoint of an earlier run exists; resume it or "
                                "choose another output")
            chains = self._load(path, fingerprint)
            log.info("resuming %s at step %d of %d", path, chains.step, total)
        started = time.perf_counter()
        seconds_before = chains.seconds if chains else 0.0
        if chains is None:
            chains = self._start(initial)
        from residualsim.parallel.progress import progress_bar

        bar = progress_bar(total=total, initial=chains.step, disable=not progress,
                           unit="step", desc="MH", dynamic_ncols=True)
        try:
            while chains.step < total:
                self._step(chains, burn_in)
                bar.update(1)
                if chains.step % 10 == 0 or chains.step == total:
                    recent = chains.accepted[:, -100:].mean()
                    bar.set_postfix(accept=f"{recent:.2f}", scale=f"{chains.scale:.3g}",
                                    phase="burn-in" if chains.step <= burn_in else "sampling")
                if path is not None and (chains.step % checkpoint_every == 0
                                         or chains.step == total):
                    chains.seconds = seconds_before + time.perf_counter() - started
                    self._save(path, chains, fingerprint)
        finally:
            bar.close()
        chains.seconds = seconds_before + time.perf_counter() - started
        return self._posterior(chains, burn_in, total, meta)

    def _posterior(self, chains: _Chains, burn_in: int, total: int,
                   meta: Mapping[str, Any] | None) -> Posterior:
        kept = slice(burn_in, total)
        info = {**dict(meta or {}), "sampler": self.options(), "burn_in": burn_in,
                "n_samples": total - burn_in, "final_scale": chains.scale,
                "proposal_shape": chains.shape.tolist(),
                "burn_in_acceptance": float(chains.accepted[:, :burn_in].mean())
                if burn_in else None,
                "evaluations": chains.n_evaluations, "seconds": chains.seconds}
        if self.screen is not None:
            info["screened"] = chains.n_screened
        return Posterior(space=self.space, samples=self.space.from_unit(chains.history_z[:, kept]),
                         log_likelihood=chains.history_ll[:, kept],
                         log_prior=chains.history_lp[:, kept],
                         acceptance=chains.accepted[:, kept].mean(axis=1), meta=info,
                         warmup=self.space.from_unit(chains.history_z[:, :burn_in]))

    # --- checkpoints -------------------------------------------------------------------------------
    def _save(self, path: Path, chains: _Chains, fingerprint: Mapping[str, Any]) -> None:
        header = {"format": CHECKPOINT_FORMAT, "fingerprint": fingerprint,
                  "scale": chains.scale, "shape": chains.shape.tolist(),
                  "rng": {"bit_generator": type(self.rng.bit_generator).__name__,
                          "state": self.rng.bit_generator.state},
                  "n_evaluations": chains.n_evaluations, "n_screened": chains.n_screened,
                  "seconds": chains.seconds}
        with atomic_open(path) as handle:
            np.savez(handle, header=np.array(json.dumps(header)), z=chains.z,
                     log_like=chains.log_like, log_prior=chains.log_prior,
                     log_screen=chains.log_screen,
                     history_z=chains.history_z, history_ll=chains.history_ll,
                     history_lp=chains.history_lp, accepted=chains.accepted)

    def _load(self, path: Path, fingerprint: Mapping[str, Any]) -> _Chains:
        header, arrays = _read_checkpoint(path)
        check_fingerprint(path, header.get("fingerprint", {}), fingerprint)
        if header["rng"]["bit_generator"] != type(self.rng.bit_generator).__name__:
            raise DataError(f"{path}: checkpoint used a {header['rng']['bit_generator']} "
                            "generator")
        chains = _Chains(arrays["z"], arrays["log_like"], arrays["log_prior"], header["scale"])
        chains.shape = np.asarray(header["shape"], dtype=np.float64)
        chains.history_z, chains.history_ll = arrays["history_z"], arrays["history_ll"]
        chains.history_lp, chains.accepted = arrays["history_lp"], arrays["accepted"]
        chains.n_evaluations, chains.seconds = header["n_evaluations"], header["seconds"]
        chains.n_screened = header.get("n_screened", 0)
        if "log_screen" in arrays:
            chains.log_screen = arrays["log_screen"]
        self.rng.bit_generator.state = header["rng"]["state"]
        return chains


def _read_checkpoint(path: Path) -> tuple[dict, dict]:
    """(header, arrays) of an MH checkpoint; DataError naming ``path`` if it is not one."""
    try:
        with np.load(path, allow_pickle=False) as content:
            header = json.loads(str(content["header"]))
            arrays = {k: content[k] for k in content.files if k != "header"}
    except Exception as exc:  # any unreadable file (truncated zip, empty, not npz)
        raise DataError(f"{path}: not a readable checkpoint ({exc!r})") from None
    if not isinstance(header, dict) or header.get("format") != CHECKPOINT_FORMAT:
        raise DataError(f"{path}: not a Metropolis-Hastings checkpoint")
    return header, arrays


def check_resumable(path: Path, fingerprint: Mapping[str, Any], resume: bool, space,
                    burn_in: int, sampler: Mapping[str, Any]) -> None:
    """Before any work (a pilot fit, a bootstrap): refuse an existing checkpoint at ``path``
    without ``resume``, or one of another run, as :meth:`MetropolisHastings.run` would;
    ``sampler``: the sampler options known before it is built (:meth:`~MetropolisHastings.
    options`' keys; the rest are compared when it starts)."""
    path = Path(path)
    if not path.exists():
        return
    if not resume:
        raise DataError(f"{path}: a checkpoint of an earlier run exists; resume it or "
                        "choose another output")
    saved = dict(_read_checkpoint(path)[0].get("fingerprint") or {})
    options = saved.get("sampler") if isinstance(saved.get("sampler"), dict) else {}
    saved["sampler"] = {key: options.get(key) for key in sampler}
    check_fingerprint(path, saved, {**dict(fingerprint), "space": space.as_json(),
                                    "burn_in": int(burn_in), "sampler": dict(sampler)})


def _take(token: Any, rows: np.ndarray) -> Any:
    """Rows ``rows`` of a first-stage token: an array, or a tuple / list of arrays."""
    if isinstance(token, (tuple, list)):
        return type(token)(_take(t, rows) for t in token)
    return np.asarray(token)[rows]
