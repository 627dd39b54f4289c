"""Figures of calibration runs (PNG, written atomically): corner and trace plots.

Uses matplotlib's non-interactive Agg backend and the ``corner`` package (the standard corner
plot of the emcee ecosystem) rather than re-drawing one by hand.
"""

from __future__ import annotations

import os

import numpy as np

from residualsim.atomic import save_png
from residualsim.sysid.posterior import Posterior

__all__ = ["corner_plot", "trace_plot"]


def _labels(posterior: Posterior) -> list[str]:
    return [f"{p.name} [{p.unit}]" if p.unit != "-" else p.name
            for p in posterior.space.parameters]


#: Fewer distinct draws than this: the corner plot says its contours are rough.
FEW_DRAWS = 200


def corner_plot(posterior: Posterior, path: str | os.PathLike[str],
                truths: dict[str, float] | None = None) -> None:
    """Pairwise and marginal histograms of all draws, 5/50/95 % quantiles marked. corner's
    own warning for few draws ("Too few points to create valid contours", printed with no
    file named) is silenced; the figure says instead how few distinct draws it holds when
    they are under :data:`FEW_DRAWS` (MH repeats a draw when it rejects a step)."""
    import matplotlib

    matplotlib.use("Agg")
    import corner

    flat = posterior.flat()
    truth = [truths.get(n) for n in posterior.names] if truths else None
    if posterior.space.ndim == 1 or np.ptp(flat, axis=0).min() > 0:
        figure = corner.corner(flat, labels=_labels(posterior), quantiles=[0.05, 0.5, 0.95],
                               show_titles=True, title_fmt=".4g", truths=truth, quiet=True)
        distinct = len(np.unique(flat, axis=0))
        if distinct < FEW_DRAWS:
            figure.suptitle(f"{distinct} distinct draws: the contours are rough (more "
                            "--samples smooth them)", y=1.02)
    else:  # a parameter never moved: corner cannot bin it; show the values instead
        import matplotlib.pyplot as plt

        figure, axis = plt.subplots()
        axis.text(0.5, 0.5, "constant draws: " + ", ".join(
            f"{n} = {v:.4g}" for n, v in posterior.median().items()), ha="center")
        axis.set_axis_off()
    save_png(figure, path)


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
    save_png(figure, path)
