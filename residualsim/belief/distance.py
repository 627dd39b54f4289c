"""How far apart two beliefs are: the energy distance between samples of each.

For distributions X and Y the (Székely-Rizzo) energy distance is

    D(X, Y) = sqrt(2 E|X − Y| − E|X − X'| − E|Y − Y'|),

zero exactly when X and Y are equal (``scipy.stats.energy_distance``'s definition, in
several dimensions). Here it is estimated from n samples of each belief (V-statistics, so
two samples of one belief give a small positive value of order n^-1/2), in the *reference*
belief's tangent coordinates (:mod:`.mixture`), each coordinate divided by its standard
deviation under the reference: metres, radians and rad/s weigh alike.
"""

from __future__ import annotations

import numpy as np
from scipy.spatial.distance import cdist

from residualsim.belief.mixture import GaussianMixtureBelief
from residualsim.errors import ParameterError

__all__ = ["energy_distance", "belief_distance"]


def energy_distance(x: np.ndarray, y: np.ndarray) -> float:
    """Energy distance between samples ``x`` (n, d) and ``y`` (m, d) (module docstring)."""
    x, y = np.atleast_2d(np.asarray(x, float)), np.atleast_2d(np.asarray(y, float))
    if x.shape[1] != y.shape[1] or len(x) < 1 or len(y) < 1:
        raise ParameterError(f"energy distance needs samples of one width, got shapes "
                             f"{x.shape} and {y.shape}")
    value = 2 * cdist(x, y).mean() - cdist(x, x).mean() - cdist(y, y).mean()
    return float(np.sqrt(max(value, 0.0)))


def belief_distance(belief: GaussianMixtureBelief, reference: GaussianMixtureBelief,
                    n_samples: int = 2000, seed: int = 0,
                    coordinates: np.ndarray | None = None) -> float:
    """Energy distance between ``n_samples`` states drawn from each belief (seeded), in the
    reference's tangent coordinates standardised by the reference sample's spread;
    ``coordinates`` (indices) restricts it to those tangent coordinates (a marginal, e.g.
    the cube's position and rotation vector 0..5), the same draws as without."""
    if belief.tangent.planar != reference.tangent.planar or \
            belief.tangent.size != reference.tangent.size:
        raise ParameterError("beliefs of different scenes cannot be compared")
    rng = np.random.default_rng([int(seed), 0])
    ours = reference.tangent.to_tangent(belief.sample(int(n_samples), rng))
    theirs = reference.tangent.to_tangent(reference.sample(int(n_samples), rng))
    scale = np.maximum(theirs.std(axis=0), 1e-9)
    keep = slice(None) if coordinates is None else np.asarray(coordinates, int)
    return energy_distance((ours / scale)[:, keep], (theirs / scale)[:, keep])
