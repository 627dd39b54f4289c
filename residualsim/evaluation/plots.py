"""The reliability plot: coverage of the central sample regions against their level.

Each curve is a :func:`~residualsim.evaluation.sample_scores.reliability_curve`
({level: coverage}, e.g. ``TrajectoryScore.reliability()``). The figure shows the diagonal
(perfect calibration), the band of +-10 points around it, and, given S, the coverage a
calibrated S-sample ensemble is expected to show, (alpha (S - 1) + 1) / (S + 1). Curves
below the diagonal are overconfident (regions too small), above it underconfident.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from residualsim.atomic import save_png
from residualsim.errors import PredictionError

__all__ = ["reliability_plot", "BAND"]

#: Half-width of the band drawn around the diagonal (coverage, 10 points).
BAND = 0.10

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def reliability_plot(curves: Mapping[str, Mapping[str, float] | None],
                     path: str | os.PathLike[str], *, title: str = "",
                     n_samples: int | None = None) -> None:
    """Write the reliability plot of ``curves`` to ``path`` (PNG, atomically).

    Parameters
    ----------
    curves : mapping of label -> {level: coverage} or None
        The curves to draw (levels as strings or numbers in (0, 1)); None entries (S = 1)
        are skipped.
    path : path-like
        The PNG file to write.
    title : str, optional
        The figure's title.
    n_samples : int, optional
        S, to draw the coverage expected of a calibrated S-sample ensemble.

    Raises
    ------
    PredictionError
        If no curve is given (every prediction has S = 1: no sample regions).
    """
    drawn = {label: curve for label, curve in curves.items() if curve}
    if not drawn:
        raise PredictionError("no reliability curve to plot: the predictions have one "
                              "sample each (S = 1), so there are no sample regions")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(5.2, 5.0))
    line = np.linspace(0.0, 1.0, 101)
    axis.fill_between(line, line - BAND, line + BAND, color="0.88", lw=0,
                      label=f"diagonal ± {100 * BAND:.0f} points")
    axis.plot(line, line, color="k", lw=1.0, label="calibrated")
    if n_samples is not None and n_samples >= 2:
        axis.plot(line, (line * (n_samples - 1) + 1) / (n_samples + 1), color="0.4", lw=0.8,
                  ls=":", label=f"calibrated, S = {n_samples}")
    for index, (label, curve) in enumerate(drawn.items()):
        levels = np.array([float(level) for level in curve])
        coverage = np.array([float(value) for value in curve.values()])
        order = np.argsort(levels)
        axis.plot(levels[order], coverage[order], marker=_MARKERS[index % len(_MARKERS)],
                  ms=4, lw=1.4, label=label)
    axis.set_xlim(0.0, 1.0)
    axis.set_ylim(0.0, 1.0)
    axis.set_aspect("equal")
    axis.set_xlabel("level of the central sample region")
    axis.set_ylabel("coverage (fraction of recordings inside)")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    axis.set_title(title or "reliability", fontsize=10)
    save_png(figure, path)
