"""Posterior samples of engine parameters: diagnostics, summaries, a file format.

Diagnostics are the rank-normalised split R-hat and the bulk effective sample size of
Vehtari et al. (2021), computed by ``arviz-stats`` (the reference implementation) rather
than re-derived here. R-hat near 1 (below about 1.01-1.05) says the chains agree; ESS is the
number of independent draws the correlated chain is worth.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from residualsim.atomic import atomic_open
from residualsim.errors import DataError
from residualsim.sysid.paramspace import ParamSpace

__all__ = ["Posterior", "POSTERIOR_FORMAT", "convergence_warnings", "RHAT_MAX", "ESS_MIN",
           "ACCEPTANCE_RANGE"]

#: Format tag stored in every posterior file.
POSTERIOR_FORMAT = "residualsim.sysid.posterior/1"

#: Convergence limits of a Metropolis-Hastings calibration: beyond them ``summary.json`` and
#: the command's JSON line carry a warning (:func:`convergence_warnings`). Rank-normalised
#: split R-hat above 1.05 (chains disagree), bulk ESS below 100 draws per parameter (the
#: 5-95 % interval is then itself uncertain), acceptance outside 10-60 % (a random walk
#: whose step is far too large or too small).
RHAT_MAX = 1.05
ESS_MIN = 100.0
ACCEPTANCE_RANGE = (0.10, 0.60)


def _per_parameter(names: list[str], values: np.ndarray) -> dict[str, float]:
    return {name: float(v) for name, v in zip(names, np.asarray(values, dtype=np.float64))}


@dataclass(frozen=True)
class Posterior:
    """Samples of a Metropolis-Hastings run after burn-in.

    Parameters
    ----------
    space : ParamSpace
        The calibrated parameters (names, bounds, priors, fixed base values).
    samples : ndarray of shape (C, S, d)
        C chains of S draws of the d parameters, natural units.
    log_likelihood, log_prior : ndarray of shape (C, S)
        At each draw (log prior in the sampler's unit coordinates).
    acceptance : ndarray of shape (C,)
        Share of accepted proposals after burn-in, per chain.
    meta : dict
        JSON-safe facts about the run (scene, data, settings, sampler options, timing).
    warmup : ndarray of shape (C, B, d), optional
        The burn-in draws, kept for trace plots only (not part of the posterior).
    """

    space: ParamSpace
    samples: np.ndarray
    log_likelihood: np.ndarray
    log_prior: np.ndarray
    acceptance: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)
    warmup: np.ndarray | None = None

    def __post_init__(self) -> None:
        samples = np.asarray(self.samples, dtype=np.float64)
        if samples.ndim != 3 or samples.shape[2] != self.space.ndim or samples.shape[1] < 1:
            raise DataError(f"posterior samples must have shape (chains, draws, "
                            f"{self.space.ndim}), got {samples.shape}")
        for name in ("log_likelihood", "log_prior"):
            if np.shape(getattr(self, name)) != samples.shape[:2]:
                raise DataError(f"posterior {name} must have shape {samples.shape[:2]}")
        object.__setattr__(self, "samples", samples)

    @property
    def names(self) -> list[str]:
        return self.space.names

    @property
    def n_chains(self) -> int:
        return int(self.samples.shape[0])

    @property
    def n_draws(self) -> int:
        """Draws per chain."""
        return int(self.samples.shape[1])

    def flat(self) -> np.ndarray:
        """All draws, chains concatenated: shape (C * S, d)."""
        return self.samples.reshape(-1, self.space.ndim)

    # --- summaries ------------------------------------------------------------------------------
    def quantile(self, q: float) -> dict[str, float]:
        """Per-parameter quantile ``q`` in [0, 1] over all draws."""
        return _per_parameter(self.names, np.quantile(self.flat(), q, axis=0))

    def median(self) -> dict[str, float]:
        """Posterior median per parameter: the point value the paper uses."""
        return self.quantile(0.5)

    def rhat(self) -> dict[str, float]:
        """Rank-normalised split R-hat per parameter (needs 2+ chains or 4+ draws)."""
        from arviz_stats.base import array_stats

        values = array_stats.rhat(self.samples, chain_axis=0, draw_axis=1)
        return _per_parameter(self.names, np.atleast_1d(values))

    def ess(self) -> dict[str, float]:
        """Bulk effective sample size per parameter, all chains together."""
        from arviz_stats.base import array_stats

        values = array_stats.ess(self.samples, chain_axis=0, draw_axis=1)
        return _per_parameter(self.names, np.atleast_1d(values))

    def summary(self) -> dict[str, Any]:
        """JSON-safe summary: median, 5-95 % interval, R-hat, ESS, acceptance, MAP draw."""
        best = np.unravel_index(np.argmax(self.log_likelihood + self.log_prior),
                                self.log_likelihood.shape)
        return {
            "median": self.median(),
            "q05": self.quantile(0.05),
            "q95": self.quantile(0.95),
            "mean": _per_parameter(self.names, self.flat().mean(axis=0)),
            "std": _per_parameter(self.names, self.flat().std(axis=0)),
            "rhat": self.rhat(),
            "ess": self.ess(),
            "acceptance": float(np.mean(self.acceptance)),
            "acceptance_per_chain": [float(a) for a in self.acceptance],
            "max_posterior": _per_parameter(self.names, self.samples[best]),
            "chains": self.n_chains,
            "draws_per_chain": self.n_draws,
        }

    # --- files ------------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write an ``.npz`` (arrays plus a JSON header), atomically."""
        header = {"format": POSTERIOR_FORMAT, "space": self.space.as_json(), "meta": self.meta}
        warmup = {} if self.warmup is None else {"warmup": self.warmup}
        with atomic_open(path) as handle:
            np.savez(handle, header=np.array(json.dumps(header)), samples=self.samples,
                     log_likelihood=self.log_likelihood, log_prior=self.log_prior,
                     acceptance=np.asarray(self.acceptance, dtype=np.float64), **warmup)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Posterior:
        """Read a file written by :meth:`save`; DataError naming the file if it is not one."""
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as content:
                header = json.loads(str(content["header"]))
                arrays = {k: content[k] for k in ("samples", "log_likelihood", "log_prior",
                                                   "acceptance")}
                arrays["warmup"] = content["warmup"] if "warmup" in content else None
        except FileNotFoundError:
            raise DataError(f"{path}: posterior file not found") from None
        except Exception as exc:  # any unreadable file (truncated zip, empty, not npz)
            raise DataError(f"{path}: not a residualsim posterior file ({exc!r})") from None
        if not isinstance(header, dict) or header.get("format") != POSTERIOR_FORMAT:
            found = header.get("format") if isinstance(header, dict) else None
            raise DataError(f"{path}: format {found!r}, expected {POSTERIOR_FORMAT!r}")
        try:
            return cls(space=ParamSpace.from_json(header["space"]), meta=header.get("meta", {}),
                       **arrays)
        except Exception as exc:
            raise DataError(f"{path}: {exc}") from None


def convergence_warnings(summary: Mapping[str, Any]) -> list[str]:
    """Warnings (text) for a posterior summary (:meth:`Posterior.summary`) outside the limits
    :data:`RHAT_MAX`, :data:`ESS_MIN` and :data:`ACCEPTANCE_RANGE`; empty when converged."""
    warnings = []
    for name, value in (summary.get("rhat") or {}).items():
        if isinstance(value, (int, float)) and math.isfinite(value) and value > RHAT_MAX:
            warnings.append(f"R-hat of {name} is {value:.3g} (> {RHAT_MAX}): the chains have "
                            "not mixed; run more samples or burn-in")
    for name, value in (summary.get("ess") or {}).items():
        if isinstance(value, (int, float)) and math.isfinite(value) and value < ESS_MIN:
            warnings.append(f"bulk ESS of {name} is {value:.3g} (< {ESS_MIN:g}): the "
                            "interval rests on too few independent draws; run more samples")
    acceptance = summary.get("acceptance")
    low, high = ACCEPTANCE_RANGE
    if isinstance(acceptance, (int, float)) and not low <= acceptance <= high:
        warnings.append(f"acceptance is {100 * acceptance:.1f} % (outside {100 * low:.0f}-"
                        f"{100 * high:.0f} %): the proposal step is too "
                        f"{'large' if acceptance < low else 'small'}; change "
                        "--proposal-scale or keep adaptation on")
    return warnings
