"""The belief picture (PNG, written atomically): particle clouds after each contact event."""

from __future__ import annotations

import os

import numpy as np

from residualsim.atomic import save_png

__all__ = ["belief_plot", "EVENT_COLOURS"]


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
    save_png(figure, path)
