"""Figures (PNG, written atomically): corner and trace plots of calibration runs, and the
belief plot of particle clouds through contact.

Uses matplotlib's non-interactive Agg backend and the ``corner`` package (the standard corner
plot of the emcee ecosystem) rather than re-drawing one by hand.
"""

from __future__ import annotations

import io
import os

import numpy as np

from .atomic import atomic_open
from .posterior import Posterior

__all__ = ["corner_plot", "trace_plot", "belief_plot"]


def _labels(posterior: Posterior) -> list[str]:
    return [f"{p.name} [{p.unit}]" if p.unit != "-" else p.name
            for p in posterior.space.parameters]


def _save(figure, path: str | os.PathLike[str]) -> None:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    with atomic_open(path) as handle:
        handle.write(buffer.getvalue())


def corner_plot(posterior: Posterior, path: str | os.PathLike[str],
                truths: dict[str, float] | None = None) -> None:
    """Pairwise and marginal histograms of all draws, 5/50/95 % quantiles marked."""
    import matplotlib

    matplotlib.use("Agg")
    import corner

    flat = posterior.flat()
    truth = [truths.get(n) for n in posterior.names] if truths else None
    if posterior.space.ndim == 1 or np.ptp(flat, axis=0).min() > 0:
        figure = corner.corner(flat, labels=_labels(posterior), quantiles=[0.05, 0.5, 0.95],
                               show_titles=True, title_fmt=".4g", truths=truth)
    else:  # a parameter never moved: corner cannot bin it; show the values instead
        import matplotlib.pyplot as plt

        figure, axis = plt.subplots()
        axis.text(0.5, 0.5, "constant draws: " + ", ".join(
            f"{n} = {v:.4g}" for n, v in posterior.median().items()), ha="center")
        axis.set_axis_off()
    _save(figure, path)


def trace_plot(posterior: Posterior, path: str | os.PathLike[str]) -> None:
    """Each parameter against step for every chain; burn-in shaded grey."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = posterior.space.ndim
    figure, axes = plt.subplots(d + 1, 1, figsize=(8, 1.8 * (d + 1)), sharex=True)
    warmup = posterior.warmup if posterior.warmup is not None else posterior.samples[:, :0]
    n_burn = warmup.shape[1]
    full = np.concatenate([warmup, posterior.samples], axis=1)
    steps = np.arange(full.shape[1])
    for i, (axis, label) in enumerate(zip(axes, _labels(posterior))):
        for chain in full:
            axis.plot(steps, chain[:, i], lw=0.6)
        axis.set_ylabel(label)
    axes[-1].plot(np.arange(n_burn, full.shape[1]), posterior.log_likelihood.T, lw=0.6)
    axes[-1].set_ylabel("log L (kept)")
    axes[-1].set_xlabel("step")
    for axis in axes:
        if n_burn:
            axis.axvspan(0, n_burn, color="0.9", zorder=-1)
    figure.suptitle(f"{posterior.n_chains} chains; burn-in shaded; acceptance "
                    f"{np.mean(posterior.acceptance):.2f}")
    _save(figure, path)


#: Colours of the particle clouds after the 1st, 2nd, 3rd, ... contact event.
EVENT_COLOURS = ("tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink")


def belief_plot(steps, path: str | os.PathLike[str], recorded_m: np.ndarray | None = None,
                sampled_m: np.ndarray | None = None, title: str = "") -> None:
    """The residual-learning paper's Figure 1: particle clouds of the body's centre after
    each contact event (one colour per event), over the recorded trajectory (T, 3) m world
    (black) and sampled rollouts (S, T, 3) (thin grey). Two panels: side view (x-z) and
    top view (x-y), metres, world frame."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for axis, (i, j), names in zip(axes, ((0, 2), (0, 1)), (("x", "z"), ("x", "y"))):
        if sampled_m is not None:
            for run in sampled_m[:32]:
                axis.plot(run[:, i], run[:, j], color="0.75", lw=0.5, zorder=1)
        if recorded_m is not None:
            axis.plot(recorded_m[:, i], recorded_m[:, j], color="k", lw=1.6, zorder=3,
                      label="recorded")
        for k, step in enumerate(steps):
            if len(step.particles):
                axis.scatter(step.particles[:, i], step.particles[:, j], s=4, alpha=0.5,
                             color=EVENT_COLOURS[k % len(EVENT_COLOURS)], zorder=2,
                             label=f"after contact {k + 1} ({len(step.particles)})")
        axis.set_xlabel(f"{names[0]} [m]")
        axis.set_ylabel(f"{names[1]} [m]")
        axis.set_aspect("equal", adjustable="datalim")
    axes[0].legend(fontsize=8, loc="best")
    figure.suptitle(title or "belief through contact")
    _save(figure, path)
