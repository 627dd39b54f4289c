"""The recordings' pose noise, carried by stochastic predictions.

A stochastic prediction predicts what the capture system records, so each sample's
positions get the recordings' pose noise on top of the rollout (:meth:`ObservationNoise.apply`):
one offset drawn from N(0, offset_std² I₃) for the whole trajectory (a recording's pose
sits a little off, the same way all through: the capture frame, the marker fit) plus iid
jitter N(0, jitter_std² I₃) per time sample, world frame, metres (planar scenes: the plane's
two axes x and y only).

Both come from the rest phases (:func:`residualsim.sysid.ground.estimate_table_height`):
after the table height, the resting heights still differ from the rollouts' by a
per-recording offset (about 0.25-0.33 mm on the real cube) and jitter within a recording
(about 0.01 mm). Only heights are seen at rest, and the noise is taken **isotropic**: x-y
offsets are not identifiable from rest heights, and sub-millimetre noise is negligible
against the centimetre x-y spread of the samples, whereas along the up axis, where every
sample rests at the same height to 1e-7 m, it is what makes 3-D regions meaningful.

The draws come from their own stream, ``numpy.random.default_rng([seed, k, s, 1])`` for
sample s of the k-th recording (drawn in :func:`residualsim.sim.rollout.predict_trajectories`), so the rollouts' streams (state noise, then residual draws
from ``default_rng([seed, k, s])``) are untouched and the result is the same for any number
of workers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from residualsim.errors import DataError, ParameterError

__all__ = ["ObservationNoise", "estimate_observation_noise", "fit_ground"]


@dataclass(frozen=True)
class ObservationNoise:
    """Pose noise of the recordings (see the module docstring).

    ``offset_std_m``: standard deviation (m) of a per-recording position offset, each
    world axis; ``jitter_std_m``: standard deviation (m) of the per-sample jitter, each
    world axis; ``n_recordings``: rest phases it was estimated from; ``table_height_m``:
    the table height (m, up axis) estimated with it (provenance; the model's engine
    parameters carry the one in force).
    """

    offset_std_m: float
    jitter_std_m: float
    n_recordings: int = 0
    table_height_m: float | None = None

    def __post_init__(self) -> None:
        for name in ("offset_std_m", "jitter_std_m"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    math.isfinite(value) and 0.0 <= value <= 0.05):
                raise ParameterError(f"observation noise: {name} must be a number in "
                                     f"[0, 0.05] m, got {value!r}")
            object.__setattr__(self, name, float(value))

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> ObservationNoise:
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(dict(value)) - fields)
        if unknown:
            raise DataError(f"observation noise: unknown field(s) {unknown}")
        try:
            return cls(**dict(value))
        except (TypeError, ParameterError) as exc:
            raise DataError(str(exc)) from None

    def apply(self, positions_m: np.ndarray, rng: np.random.Generator,
              planar: bool = False) -> np.ndarray:
        """``positions_m`` (T, 3) m world plus one offset for the whole trajectory and iid
        jitter per sample (a new array); planar: on x and y only. Draws the offset (3,)
        first, then the jitter (T, 3), always all three axes (the stream does not depend
        on the scene)."""
        positions = np.asarray(positions_m, dtype=np.float64)
        offset = rng.normal(0.0, 1.0, 3) * self.offset_std_m
        jitter = rng.normal(0.0, 1.0, positions.shape) * self.jitter_std_m
        noise = offset + jitter
        if planar:
            noise[:, 2] = 0.0
        return positions + noise


def estimate_observation_noise(model, trajectories: Mapping, n_workers: int = 1):
    """(table height estimate, ObservationNoise) of a model's engine from recordings' rest
    phases (:func:`residualsim.sysid.ground.estimate_table_height` with the model's
    parameters at its substeps). The table height is the absolute one; the noise is the
    per-recording offset's and the jitter's standard deviations, which do not depend on
    where the table is. DataError when fewer than
    :data:`~residualsim.sysid.ground.MIN_REST_RECORDINGS` recordings qualify."""
    from residualsim.sysid.ground import MIN_REST_RECORDINGS, estimate_table_height

    found = estimate_table_height(model.layout, trajectories, model.params, model.substeps,
                                  n_workers)
    if found.n_used < MIN_REST_RECORDINGS:
        raise DataError(f"only {found.n_used} of {found.n_recordings} recordings end at rest "
                        f"in their rollout's attitude, fewer than {MIN_REST_RECORDINGS}: too "
                        "few to estimate the pose noise from")
    noise = ObservationNoise(offset_std_m=found.offset_std_m, jitter_std_m=found.jitter_std_m,
                             n_recordings=found.n_used, table_height_m=found.table_height_m)
    return found, noise


def fit_ground(model, trajectories: Mapping, n_workers: int = 1):
    """``model`` with the table height and the pose noise estimated on ``trajectories``
    (its training recordings): its engine parameters get ``table_height_m``, it gets an
    :class:`ObservationNoise`, and ``info["ground"]`` records the estimate. Returns (new
    model, :class:`~residualsim.sysid.ground.GroundEstimate`). Changing the table height
    changes the model's predictions: that is the point of re-fitting it."""
    found, noise = estimate_observation_noise(model, trajectories, n_workers)
    params = model.params.replace(table_height_m=found.table_height_m)
    info = dict(model.info, ground={**found.as_json(), "recordings": len(trajectories)})
    return dataclasses.replace(model, params=params, observation_noise=noise,
                               info=info), found
