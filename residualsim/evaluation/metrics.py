"""Scoring predictions against recordings.

Definitions (S sampled predictions per trajectory or impact; for a deterministic
prediction S = 1):

Trajectories, per trajectory of T steps with recorded positions p_t and orientations q_t
and predicted samples p_{s,t}, q_{s,t}:

* position RMSE = sqrt(mean over t and s of ||p_{s,t} - p_t||^2), metres (and in cube
  sides when ``side_m`` is given);
* final-position error = mean over s of ||p_{s,T} - p_T||, metres;
* rotation error = mean over t and s of the geodesic angle 2 arccos(|<q_{s,t}, q_t>|) in
  degrees, in [0, 180] (both normalised; computed as 4 arcsin(min(||q - q'||, ||q + q'||) / 2),
  the same angle but accurate near 0);
* energy score of the final position, ES = mean_s ||X_s - y|| - 1/(2 S^2)
  sum_{s,s'} ||X_s - X_s'|| with X_s = p_{s,T} and y = p_T (for S = 1, the final error);
* with S > 1, whether the recorded final position lies in the 50 % and 90 % sample
  regions (see below); coverage is the fraction of trajectories for which it does;
* the reliability curve of the final position: the coverage of the 10 %, 20 %, ..., 90 %
  regions (3-D and world x-y);
* the reliability curve along the trajectory: for each time sample t = 1 .. T-1 (t = 0 is
  the recorded initial position the rollouts start from), whether p_t lies in the
  alpha-region of the S points p_{s,t}; the fraction of time samples inside, averaged over
  trajectories (each trajectory weighs the same, whatever its length); 3-D and x-y;
* CRPS of each coordinate x, y, z of the final position (the energy-form estimator, see
  :mod:`residualsim.evaluation.sample_scores`; for S = 1 the absolute error);
* energy score along the trajectory: the mean over t = 0 .. T-1 of the energy score of the
  S points p_{s,t} against p_t (for S = 1, the mean position error over time; t = 0, where
  rollouts start from the recording, adds 0);
* with the body's radius of gyration r_g given (``radius_of_gyration_m``), the same two
  energy scores for the pose (final and along the trajectory): poses embedded in R^12 by
  :func:`~residualsim.evaluation.sample_scores.pose_points` with rotation weight
  :data:`POSE_ROTATION_WEIGHT` (position and r_g-weighted rotation matrix, metres), where
  the Euclidean energy score is a proper score for poses.

Aggregates are the mean and the median over trajectories of the per-trajectory values.

Planar impacts, per impact n with recorded post-contact velocity v_n = (dx, dy, dtheta)
and predictions v_{s,n}: the error vector is e = (dx error, dy error, k * dtheta error)
in m/s, with k the radius of gyration, so all three components are velocities of a point
at distance k from the centre of mass. Then

* RMSE = sqrt(mean_n mean_s ||e||^2), m/s (note: the norm of the 3-vector, not divided
  by 3), and per component RMSE_i = sqrt(mean_n mean_s e_i^2), so that
  RMSE^2 = RMSE_dx^2 + RMSE_dy^2 + RMSE_kdtheta^2;
* energy score of the (dx, dy, k dtheta) vector, averaged over impacts;
* with S > 1, coverage 50 % and 90 % of the recorded (dx, dy, k dtheta), and its
  reliability curve (10 %, ..., 90 %);
* CRPS of each component dx, dy, k dtheta, m/s.

Sample regions, the energy score, the CRPS and the reliability curve are defined in
:mod:`residualsim.evaluation.sample_scores`.

The module is longer than 600 lines: the two score classes share its helpers, definitions
and table format, which would otherwise be split across modules importing each other.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from residualsim.data.impacts import PlanarImpacts
from residualsim.data.trajectory import Trajectory
from residualsim.errors import DataError, PredictionError
from residualsim.evaluation.predictions import ImpactPredictions, TrajectoryPredictions
from residualsim.evaluation.sample_scores import (COVERAGE_LEVELS, RELIABILITY_LEVELS,
                                                 crps_ensemble, energy_score, max_deviation,
                                                 pose_points, region_membership,
                                                 reliability_curve, trajectory_energy_score)

__all__ = [
    "TrajectoryScore",
    "ImpactScore",
    "score_trajectories",
    "score_impacts",
    "format_table",
    "POSE_ROTATION_WEIGHT",
]

#: Weight w of rotation against position in the pose energy scores (the training loss's
#: default): two poses differing by a small angle theta lie w r_g theta metres apart.
POSE_ROTATION_WEIGHT = 1.0

def _rotation_angles_deg(predicted: np.ndarray, recorded: np.ndarray) -> np.ndarray:
    """Geodesic angles in degrees between (S, T, 4) and (T, 4) quaternions, shape (S, T).

    Both are normalised; the angle is 4 arcsin(min(||q - r||, ||q + r||) / 2), which equals
    2 arccos(|<q, r>|) but stays accurate near 0. Components are processed as contiguous
    (S, T) planes, several times faster than reductions over a trailing axis of length 4.
    """
    planes = np.array(np.moveaxis(predicted, -1, 0), dtype=np.float64)  # (4, S, T), a copy
    planes /= np.sqrt(np.einsum("kst,kst->st", planes, planes))
    reference = recorded.T / np.sqrt(np.einsum("tk,tk->t", recorded, recorded))  # (4, T)
    minus = np.zeros(planes.shape[1:])
    plus = np.zeros(planes.shape[1:])
    for component, target in zip(planes, reference):
        difference = component - target
        minus += difference * difference
        difference = component + target
        plus += difference * difference
    np.minimum(minus, plus, out=minus)
    half_chord = np.sqrt(minus, out=minus)
    half_chord *= 0.5
    np.minimum(half_chord, 1.0, out=half_chord)
    return np.degrees(4.0 * np.arcsin(half_chord))


def _mean(values: np.ndarray | None) -> float | None:
    return None if values is None else float(np.mean(values))


def _median(values: np.ndarray | None) -> float | None:
    return None if values is None else float(np.median(values))


def _readonly(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


def _curve(inside: np.ndarray | None) -> dict[str, float] | None:
    if inside is None or np.isnan(inside).all(axis=0).any():
        return None
    kept = inside[~np.isnan(inside).any(axis=1)]
    return reliability_curve(kept, RELIABILITY_LEVELS)


@dataclass(frozen=True, eq=False)
class TrajectoryScore:
    """Scores of trajectory predictions; per-trajectory arrays follow ``ids``.

    Attributes
    ----------
    ids : tuple of str
        The scored trajectory ids, in prediction order.
    n_samples : int
        Samples per trajectory S.
    position_rmse_m : ndarray of shape (n,)
        sqrt(mean over t, s of ||p_{s,t} - p_t||^2), metres.
    final_error_m : ndarray of shape (n,)
        mean over s of ||p_{s,T} - p_T||, metres.
    rotation_error_deg : ndarray of shape (n,)
        mean over t, s of the geodesic angle, degrees.
    energy_score_m : ndarray of shape (n,)
        Energy score of the final position, metres.
    inside_50, inside_90 : ndarray of bool, shape (n,), or None
        Whether the recorded final position lies in the 50 % / 90 % sample region; None
        when S == 1.
    inside_xy_50, inside_xy_90 : ndarray of bool, shape (n,), or None
        The same for the final position's world x and y only (on the table plane). A body
        at rest on the table has its height fixed by geometry: the rollouts agree on it to
        1e-7 m, while the recordings rest 1.1 mm lower (ContactNets tosses: 0.05125 ±
        0.00033 m against 0.0524 m simulated), so in 3D that constant offset alone puts
        nearly every recording outside any sample region.
    side_m : float or None
        Cube side used for ``position_rmse_sides``.
    missing_ids : tuple of str
        Recorded ids that were not predicted (not scored).
    joint_rmse : ndarray of shape (n,) or None
        For objects with joints (predictions and recordings both carry them): sqrt(mean
        over t, s and joints of the joint position error), rad (or m for prismatic joints).
    inside_levels, inside_levels_xy : ndarray of bool, shape (n, L), or None
        Whether the recorded final position (3-D; x-y) lies in the region of each level of
        :data:`~residualsim.evaluation.sample_scores.RELIABILITY_LEVELS`; None when S == 1.
    trajectory_inside, trajectory_inside_xy : ndarray of shape (n, L), or None
        Per trajectory, the fraction of its time samples 1 .. T-1 whose recorded position
        (3-D; x-y) lies in the region of each level (NaN for T = 1); None when S == 1.
    crps_final_m : ndarray of shape (n, 3), or None
        CRPS of the final position's x, y, z, metres.
    trajectory_energy_score_m : ndarray of shape (n,), or None
        Energy score of the position along the trajectory (mean over the T time samples of
        each time's energy score), metres; for S = 1 the mean position error over time.
    radius_of_gyration_m : float or None
        r_g of the pose scores (None: no pose scores).
    energy_score_pose_m, trajectory_energy_score_pose_m : ndarray of shape (n,), or None
        The energy scores of the final pose and of the pose along the trajectory, metres
        (poses as :func:`~residualsim.evaluation.sample_scores.pose_points` with r_g and
        :data:`POSE_ROTATION_WEIGHT`); None without ``radius_of_gyration_m``.
    """

    ids: tuple[str, ...]
    n_samples: int
    position_rmse_m: np.ndarray
    final_error_m: np.ndarray
    rotation_error_deg: np.ndarray
    energy_score_m: np.ndarray
    inside_50: np.ndarray | None = None
    inside_90: np.ndarray | None = None
    side_m: float | None = None
    missing_ids: tuple[str, ...] = ()
    inside_xy_50: np.ndarray | None = None
    inside_xy_90: np.ndarray | None = None
    joint_rmse: np.ndarray | None = None
    inside_levels: np.ndarray | None = None
    inside_levels_xy: np.ndarray | None = None
    trajectory_inside: np.ndarray | None = None
    trajectory_inside_xy: np.ndarray | None = None
    crps_final_m: np.ndarray | None = None
    trajectory_energy_score_m: np.ndarray | None = None
    radius_of_gyration_m: float | None = None
    energy_score_pose_m: np.ndarray | None = None
    trajectory_energy_score_pose_m: np.ndarray | None = None

    @property
    def n_trajectories(self) -> int:
        """Number of scored trajectories."""
        return len(self.ids)

    @property
    def n_missing(self) -> int:
        """Number of recordings without a prediction."""
        return len(self.missing_ids)

    @property
    def position_rmse_sides(self) -> np.ndarray | None:
        """Position RMSE in cube sides, shape (n,), or None without ``side_m``."""
        return None if self.side_m is None else self.position_rmse_m / self.side_m

    def aggregate(self) -> dict[str, Any]:
        """Summary over trajectories, JSON-ready; the keys are stable.

        Returns
        -------
        dict
            ``n_trajectories``, ``n_missing``, ``n_samples`` (ints); the means over
            trajectories ``position_rmse_m``, ``position_rmse_sides``, ``final_error_m``,
            ``rotation_error_deg``, ``energy_score_m`` and their medians (the same names
            with ``_median``); ``coverage_50`` and ``coverage_90`` (fractions of
            trajectories), ``coverage_xy_50`` and ``coverage_xy_90`` (the same on the table
            plane). ``position_rmse_sides*`` are None without ``side_m``, the
            coverages None when S == 1. Objects with joints add ``joint_rmse`` and
            ``joint_rmse_median`` (rad, or m for prismatic joints). The reliability curves
            ``reliability_final``, ``reliability_final_xy``, ``reliability_trajectory`` and
            ``reliability_trajectory_xy`` map each level (``"0.1"`` .. ``"0.9"``) to its
            coverage (None when S == 1); ``reliability_max_deviation`` holds each curve's
            max |coverage - level| under the keys ``final``, ``final_xy``, ``trajectory``,
            ``trajectory_xy`` (None when S == 1); ``crps_final_m`` the mean CRPS of the
            final x, y, z (keys ``x``, ``y``, ``z``). The energy scores along the trajectory
            ``trajectory_energy_score_m`` (position) and, with a radius of gyration, of the
            pose ``energy_score_pose_m`` (final) and ``trajectory_energy_score_pose_m`` (each
            with its ``_median``; None without the radius), metres, and
            ``radius_of_gyration_m`` (None without it).
        """
        sides = self.position_rmse_sides
        joints = {} if self.joint_rmse is None else {
            "joint_rmse": _mean(self.joint_rmse), "joint_rmse_median": _median(self.joint_rmse)}
        return {
            "n_trajectories": self.n_trajectories,
            "n_missing": self.n_missing,
            "n_samples": self.n_samples,
            "position_rmse_m": _mean(self.position_rmse_m),
            "position_rmse_m_median": _median(self.position_rmse_m),
            "position_rmse_sides": _mean(sides),
            "position_rmse_sides_median": _median(sides),
            "final_error_m": _mean(self.final_error_m),
            "final_error_m_median": _median(self.final_error_m),
            "rotation_error_deg": _mean(self.rotation_error_deg),
            "rotation_error_deg_median": _median(self.rotation_error_deg),
            "energy_score_m": _mean(self.energy_score_m),
            "energy_score_m_median": _median(self.energy_score_m),
            "coverage_50": _mean(self.inside_50),
            "coverage_90": _mean(self.inside_90),
            "coverage_xy_50": _mean(self.inside_xy_50),
            "coverage_xy_90": _mean(self.inside_xy_90),
            **joints,
            **{f"reliability_{name}": curve for name, curve in self.reliability().items()},
            "reliability_max_deviation": None if self.n_samples < 2 else {
                name: max_deviation(curve) for name, curve in self.reliability().items()},
            "crps_final_m": None if self.crps_final_m is None else dict(
                zip("xyz", (float(v) for v in self.crps_final_m.mean(axis=0)))),
            "trajectory_energy_score_m": _mean(self.trajectory_energy_score_m),
            "trajectory_energy_score_m_median": _median(self.trajectory_energy_score_m),
            "energy_score_pose_m": _mean(self.energy_score_pose_m),
            "energy_score_pose_m_median": _median(self.energy_score_pose_m),
            "trajectory_energy_score_pose_m": _mean(self.trajectory_energy_score_pose_m),
            "trajectory_energy_score_pose_m_median": _median(
                self.trajectory_energy_score_pose_m),
            "radius_of_gyration_m": self.radius_of_gyration_m,
        }

    def reliability(self) -> dict[str, dict[str, float] | None]:
        """The reliability curves ``final``, ``final_xy``, ``trajectory``,
        ``trajectory_xy``: {level: coverage}, or None (S == 1)."""
        return {"final": _curve(self.inside_levels), "final_xy": _curve(self.inside_levels_xy),
                "trajectory": _curve(self.trajectory_inside),
                "trajectory_xy": _curve(self.trajectory_inside_xy)}

    def _table(self) -> tuple[str, list[tuple[str, Any, str]]]:
        summary = self.aggregate()
        title = (
            f"{self.n_trajectories} trajectories scored, {self.n_missing} recordings not "
            f"predicted, S = {self.n_samples}"
        )
        rows = [
            ("position RMSE", summary["position_rmse_m"], "m"),
            ("position RMSE, median", summary["position_rmse_m_median"], "m"),
        ]
        if self.side_m is not None:
            rows += [
                ("position RMSE", summary["position_rmse_sides"], "sides"),
                ("position RMSE, median", summary["position_rmse_sides_median"], "sides"),
            ]
        rows += [
            ("final-position error", summary["final_error_m"], "m"),
            ("final-position error, median", summary["final_error_m_median"], "m"),
            ("rotation error", summary["rotation_error_deg"], "deg"),
            ("rotation error, median", summary["rotation_error_deg_median"], "deg"),
            ("energy score (final position)", summary["energy_score_m"], "m"),
            ("energy score (position along the trajectory)",
             summary["trajectory_energy_score_m"], "m"),
        ]
        if self.radius_of_gyration_m is not None:
            rows += [("energy score (final pose)", summary["energy_score_pose_m"], "m"),
                     ("energy score (pose along the trajectory)",
                      summary["trajectory_energy_score_pose_m"], "m")]
        rows += [
            ("coverage of 50 % region", summary["coverage_50"], ""),
            ("coverage of 90 % region", summary["coverage_90"], ""),
            ("coverage of 50 % region, x-y", summary["coverage_xy_50"], ""),
            ("coverage of 90 % region, x-y", summary["coverage_xy_90"], ""),
        ]
        if summary["crps_final_m"] is not None:
            rows += [(f"CRPS, final {axis}", value, "m")
                     for axis, value in summary["crps_final_m"].items()]
        if self.joint_rmse is not None:
            rows.append(("joint RMSE", summary["joint_rmse"], "rad"))
        return title, rows


@dataclass(frozen=True, eq=False)
class ImpactScore:
    """Scores of planar impact predictions; per-impact arrays follow ``rows``.

    Attributes
    ----------
    rows : ndarray of shape (n,), int
        The scored impacts' row numbers, in prediction order.
    n_samples : int
        Samples per impact S.
    radius_of_gyration_m : float
        k, the scale of the angular component.
    velocity_error_mps : ndarray of shape (n,)
        sqrt(mean_s ||e||^2) with e = (dx, dy, k dtheta) errors, m/s.
    component_error_mps : ndarray of shape (n, 3)
        sqrt(mean_s e_i^2) per component (dx, dy, k dtheta), m/s.
    energy_score_mps : ndarray of shape (n,)
        Energy score of (dx, dy, k dtheta), m/s.
    inside_50, inside_90 : ndarray of bool, shape (n,), or None
        Whether the recorded (dx, dy, k dtheta) lies in the sample region; None when S == 1.
    missing_rows : ndarray of int
        Rows of the data that were not predicted (not scored).
    inside_levels : ndarray of bool, shape (n, L), or None
        Whether the recorded (dx, dy, k dtheta) lies in the region of each level of
        :data:`~residualsim.evaluation.sample_scores.RELIABILITY_LEVELS`; None when S == 1.
    crps_mps : ndarray of shape (n, 3), or None
        CRPS of dx, dy and k dtheta, m/s.
    """

    rows: np.ndarray
    n_samples: int
    radius_of_gyration_m: float
    velocity_error_mps: np.ndarray
    component_error_mps: np.ndarray
    energy_score_mps: np.ndarray
    inside_50: np.ndarray | None = None
    inside_90: np.ndarray | None = None
    missing_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    inside_levels: np.ndarray | None = None
    crps_mps: np.ndarray | None = None

    @property
    def n_impacts(self) -> int:
        """Number of scored impacts."""
        return int(self.rows.shape[0])

    @property
    def n_missing(self) -> int:
        """Number of impacts in the data without a prediction."""
        return int(self.missing_rows.shape[0])

    def aggregate(self) -> dict[str, Any]:
        """Summary over impacts, JSON-ready; the keys are stable.

        Returns
        -------
        dict
            ``n_impacts``, ``n_missing``, ``n_samples`` (ints); ``velocity_rmse_mps`` =
            sqrt(mean_n mean_s ||e||^2) and ``velocity_rmse_mps_median`` (median over impacts
            of the per-impact value); ``dx_rmse_mps``, ``dy_rmse_mps``, ``kdtheta_rmse_mps``
            and ``dtheta_rmse_radps`` (= ``kdtheta_rmse_mps`` / k); ``energy_score_mps`` and
            ``energy_score_mps_median``; ``coverage_50`` and ``coverage_90`` (None when
            S == 1); ``reliability`` ({level: coverage}, levels ``"0.1"`` .. ``"0.9"``) and
            its ``reliability_max_deviation`` (None when S == 1); ``crps_mps``, the mean
            CRPS of ``dx``, ``dy`` and ``kdtheta``.
        """
        component = np.sqrt(np.mean(self.component_error_mps**2, axis=0))
        return {
            "n_impacts": self.n_impacts,
            "n_missing": self.n_missing,
            "n_samples": self.n_samples,
            "velocity_rmse_mps": float(np.sqrt(np.mean(self.velocity_error_mps**2))),
            "velocity_rmse_mps_median": _median(self.velocity_error_mps),
            "dx_rmse_mps": float(component[0]),
            "dy_rmse_mps": float(component[1]),
            "kdtheta_rmse_mps": float(component[2]),
            "dtheta_rmse_radps": float(component[2] / self.radius_of_gyration_m),
            "energy_score_mps": _mean(self.energy_score_mps),
            "energy_score_mps_median": _median(self.energy_score_mps),
            "coverage_50": _mean(self.inside_50),
            "coverage_90": _mean(self.inside_90),
            "reliability": self.reliability()["impact"],
            "reliability_max_deviation": max_deviation(self.reliability()["impact"]),
            "crps_mps": None if self.crps_mps is None else dict(
                zip(("dx", "dy", "kdtheta"), (float(v) for v in self.crps_mps.mean(axis=0)))),
        }

    def reliability(self) -> dict[str, dict[str, float] | None]:
        """The reliability curve of (dx, dy, k dtheta) under the key ``impact``."""
        return {"impact": _curve(self.inside_levels)}

    def _table(self) -> tuple[str, list[tuple[str, Any, str]]]:
        summary = self.aggregate()
        title = (
            f"{self.n_impacts} impacts scored, {self.n_missing} not predicted, "
            f"S = {self.n_samples}, k = {self.radius_of_gyration_m:.4g} m"
        )
        rows = [
            ("velocity RMSE (dx, dy, k dtheta)", summary["velocity_rmse_mps"], "m/s"),
            ("velocity error, median", summary["velocity_rmse_mps_median"], "m/s"),
            ("dx RMSE", summary["dx_rmse_mps"], "m/s"),
            ("dy RMSE", summary["dy_rmse_mps"], "m/s"),
            ("k dtheta RMSE", summary["kdtheta_rmse_mps"], "m/s"),
            ("dtheta RMSE", summary["dtheta_rmse_radps"], "rad/s"),
            ("energy score", summary["energy_score_mps"], "m/s"),
            ("coverage of 50 % region", summary["coverage_50"], ""),
            ("coverage of 90 % region", summary["coverage_90"], ""),
        ]
        if summary["crps_mps"] is not None:
            rows += [(f"CRPS, {name}", value, "m/s")
                     for name, value in summary["crps_mps"].items()]
        return title, rows


def _coverage(samples: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray | None, ...]:
    """inside_50, inside_90 and the (n, L) membership at every reliability level (the same
    regions; Nones for S == 1)."""
    if samples.shape[1] < 2:
        return None, None, None
    inside = np.ascontiguousarray(region_membership(samples, truth, RELIABILITY_LEVELS).T)
    i50, i90 = (RELIABILITY_LEVELS.index(level) for level in COVERAGE_LEVELS)
    return _readonly(inside[:, i50].copy()), _readonly(inside[:, i90].copy()), _readonly(inside)


def _time_coverage(position: np.ndarray, recorded: np.ndarray) -> np.ndarray:
    """Fraction of the time samples 1 .. T-1 whose recorded point (T, D) lies in the
    region of the S sampled points (S, T, D) at that time, per level: shape (L,)."""
    if position.shape[1] < 2:
        return np.full(len(RELIABILITY_LEVELS), np.nan)
    inside = region_membership(np.swapaxes(position[:, 1:], 0, 1), recorded[1:],
                               RELIABILITY_LEVELS)
    return inside.mean(axis=1)


def _positive_length(value: Any, name: str) -> float | None:
    """``value`` as a float of metres (None stays None); PredictionError unless positive."""
    if value is None:
        return None
    numeric = isinstance(value, (int, float, np.integer, np.floating))
    if isinstance(value, bool) or not numeric or not (math.isfinite(value) and value > 0):
        raise PredictionError(f"{name} must be a positive number of metres, got {value!r}")
    return float(value)


def score_trajectories(
    predictions: TrajectoryPredictions,
    recordings: Mapping[str, Trajectory] | Iterable[Trajectory],
    side_m: float | None = None,
    *,
    radius_of_gyration_m: float | None = None,
) -> TrajectoryScore:
    """Score trajectory predictions against recordings.

    Parameters
    ----------
    predictions : TrajectoryPredictions
        S sampled rollouts per predicted trajectory.
    recordings : mapping of str -> Trajectory, or iterable of Trajectory
        The recorded trajectories, keyed by id (an iterable is keyed by ``traj_id``).
        Recordings without a prediction are not scored; their ids are reported in
        ``missing_ids``.
    side_m : float, optional
        Cube side in metres, to also report the position RMSE in sides.
    radius_of_gyration_m : float, optional
        The body's radius of gyration r_g in metres (a scene's ``radius_of_gyration_m``),
        to also score poses (final and along the trajectory); without it the pose scores
        are None.

    Returns
    -------
    TrajectoryScore
        Per-trajectory values and :meth:`TrajectoryScore.aggregate`; the metrics are
        defined in :mod:`residualsim.evaluation.metrics`.

    Raises
    ------
    PredictionError
        If a predicted id has no recording, or its predicted length T differs from the
        recorded one (the message names the id and both lengths), or ``side_m`` or
        ``radius_of_gyration_m`` is not a positive number.
    """
    if isinstance(predictions, ImpactPredictions):
        raise PredictionError(
            f"{predictions.source or 'predictions'}: these are impact predictions; "
            "use score_impacts"
        )
    if not isinstance(predictions, TrajectoryPredictions):
        raise TypeError(
            f"predictions must be TrajectoryPredictions, got {type(predictions).__name__}"
        )
    if not isinstance(recordings, Mapping):
        recordings = {trajectory.traj_id: trajectory for trajectory in recordings}
    side_m = _positive_length(side_m, "side_m")
    radius = _positive_length(radius_of_gyration_m, "radius_of_gyration_m")
    where = predictions.source or "predictions"

    ids = predictions.ids
    unknown = [traj_id for traj_id in ids if traj_id not in recordings]
    if unknown:
        listed = ", ".join(repr(i) for i in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
        raise PredictionError(
            f"{where}: {len(unknown)} predicted trajectories have no recording "
            f"(among {len(recordings)} recordings): {listed}"
        )
    for traj_id in ids:
        predicted_t = predictions[traj_id].position.shape[1]
        recorded_t = recordings[traj_id].n_samples
        if predicted_t != recorded_t:
            raise PredictionError(
                f"{where}: trajectory {traj_id!r} is predicted for T={predicted_t} steps "
                f"but recorded with T={recorded_t}"
            )
        predicted_joints = predictions[traj_id].joint_positions
        recorded_joints = getattr(recordings[traj_id], "joint_positions", None)
        if predicted_joints is not None and recorded_joints is not None \
                and np.shape(predicted_joints)[2:] != recorded_joints.shape[1:]:
            raise PredictionError(
                f"{where}: trajectory {traj_id!r} predicts {np.shape(predicted_joints)[2]} "
                f"joint position(s) per step but the recording has "
                f"{recorded_joints.shape[1]} joint(s)")

    n = len(ids)
    n_samples = predictions.n_samples
    rmse = np.empty(n)
    rotation = np.empty(n)
    final_predicted = np.empty((n, n_samples, 3))
    final_recorded = np.empty((n, 3))
    joint_rmse = np.full(n, np.nan)
    sampled = n_samples >= 2
    over_time = np.full((2, n, len(RELIABILITY_LEVELS)), np.nan)  # 3-D, x-y
    along = np.empty(n)
    along_pose = np.empty(n)
    final_pose = np.empty((n, n_samples, 12))
    final_pose_recorded = np.empty((n, 12))
    for index, traj_id in enumerate(ids):
        prediction = predictions[traj_id]
        recording = recordings[traj_id]
        difference = np.asarray(prediction.position, dtype=np.float64) - recording.positions_m
        squared = np.einsum("std,std->", difference, difference)
        rmse[index] = math.sqrt(squared / difference[..., 0].size)
        rotation[index] = _rotation_angles_deg(
            np.asarray(prediction.quaternion, dtype=np.float64), recording.quat_wxyz
        ).mean()
        final_predicted[index] = prediction.position[:, -1]
        final_recorded[index] = recording.positions_m[-1]
        along[index] = trajectory_energy_score(prediction.position, recording.positions_m)
        if radius is not None:
            poses = pose_points(prediction.position, prediction.quaternion, radius,
                                POSE_ROTATION_WEIGHT)
            recorded_poses = pose_points(recording.positions_m, recording.quat_wxyz, radius,
                                         POSE_ROTATION_WEIGHT)
            along_pose[index] = trajectory_energy_score(poses, recorded_poses)
            final_pose[index] = poses[:, -1]
            final_pose_recorded[index] = recorded_poses[-1]
        if sampled:
            position = np.asarray(prediction.position, dtype=np.float64)
            over_time[0, index] = _time_coverage(position, recording.positions_m)
            over_time[1, index] = _time_coverage(position[..., :2],
                                                 recording.positions_m[:, :2])
        recorded_joints = getattr(recording, "joint_positions", None)
        if prediction.joint_positions is not None and recorded_joints is not None \
                and recorded_joints.shape[1] > 0:
            joint_error = np.asarray(prediction.joint_positions) - recorded_joints
            joint_rmse[index] = math.sqrt(float(np.mean(joint_error ** 2)))

    final_offset = final_predicted - final_recorded[:, None, :]
    final_error = np.linalg.norm(final_offset, axis=-1).mean(axis=1)
    inside_50, inside_90, inside_levels = _coverage(final_predicted, final_recorded)
    inside_xy_50, inside_xy_90, inside_levels_xy = _coverage(final_predicted[..., :2],
                                                             final_recorded[:, :2])
    predicted_set = set(ids)
    return TrajectoryScore(
        ids=tuple(ids),
        n_samples=n_samples,
        position_rmse_m=_readonly(rmse),
        final_error_m=_readonly(final_error),
        rotation_error_deg=_readonly(rotation),
        energy_score_m=_readonly(energy_score(final_predicted, final_recorded)),
        inside_50=inside_50,
        inside_90=inside_90,
        side_m=side_m,
        missing_ids=tuple(str(i) for i in recordings if i not in predicted_set),
        inside_xy_50=inside_xy_50,
        inside_xy_90=inside_xy_90,
        joint_rmse=None if np.isnan(joint_rmse).all() else _readonly(joint_rmse),
        inside_levels=inside_levels,
        inside_levels_xy=inside_levels_xy,
        trajectory_inside=_readonly(over_time[0]) if sampled else None,
        trajectory_inside_xy=_readonly(over_time[1]) if sampled else None,
        crps_final_m=_readonly(crps_ensemble(final_predicted, final_recorded)),
        trajectory_energy_score_m=_readonly(along),
        radius_of_gyration_m=radius,
        energy_score_pose_m=None if radius is None else _readonly(
            energy_score(final_pose, final_pose_recorded)),
        trajectory_energy_score_pose_m=None if radius is None else _readonly(along_pose),
    )


def score_impacts(predictions: ImpactPredictions, impacts: PlanarImpacts) -> ImpactScore:
    """Score planar impact predictions against recorded post-contact velocities.

    Predictions are matched to the data by row number; impacts of the data that were not
    predicted are not scored and are reported in ``missing_rows``.

    Parameters
    ----------
    predictions : ImpactPredictions
        S sampled post-contact (dx, dy, dtheta) for N impacts.
    impacts : PlanarImpacts
        The recorded impacts; ``post_state[:, 3:6]`` is the truth and
        ``radius_of_gyration_m`` the scale k of the angular component.

    Returns
    -------
    ImpactScore

    Raises
    ------
    PredictionError
        If a predicted row is not in the data (the message names the row).
    DataError
        If the data repeats a row number.
    """
    if isinstance(predictions, TrajectoryPredictions):
        raise PredictionError(
            f"{predictions.source or 'predictions'}: these are trajectory predictions; "
            "use score_trajectories"
        )
    if not isinstance(predictions, ImpactPredictions):
        raise TypeError(
            f"predictions must be ImpactPredictions, got {type(predictions).__name__}"
        )
    where = predictions.source or "predictions"
    data_rows = impacts.rows
    order = np.argsort(data_rows, kind="stable")
    sorted_rows = data_rows[order]
    repeated = sorted_rows[1:][sorted_rows[1:] == sorted_rows[:-1]]
    if repeated.size:
        raise DataError(
            f"{impacts.source or 'planar impacts'}: row numbers repeat, e.g. {int(repeated[0])}"
        )
    position = np.minimum(np.searchsorted(sorted_rows, predictions.rows), len(sorted_rows) - 1)
    found = sorted_rows[position] == predictions.rows
    if not found.all():
        absent = predictions.rows[~found]
        raise PredictionError(
            f"{where}: {absent.size} predicted rows are not in the data "
            f"({impacts.source or 'planar impacts'}), e.g. row {int(absent[0])}"
        )
    index = order[position]
    k = float(impacts.radius_of_gyration_m)
    if not (math.isfinite(k) and k > 0):
        raise DataError(
            f"{impacts.source or 'planar impacts'}: radius of gyration {k} is not positive"
        )
    scale = np.array([1.0, 1.0, k])
    truth = impacts.post_state[index, 3:6] * scale  # (N, 3)
    samples = np.asarray(predictions.post_velocity, dtype=np.float64).transpose(1, 0, 2) * scale
    error2 = (samples - truth[:, None, :]) ** 2  # (N, S, 3)
    component = np.sqrt(error2.mean(axis=1))
    velocity = np.sqrt(error2.sum(axis=-1).mean(axis=1))
    inside_50, inside_90, inside_levels = _coverage(samples, truth)
    missing = np.ones(len(data_rows), dtype=bool)
    missing[index] = False
    return ImpactScore(
        rows=_readonly(predictions.rows.copy()),
        n_samples=predictions.n_samples,
        radius_of_gyration_m=k,
        velocity_error_mps=_readonly(velocity),
        component_error_mps=_readonly(component),
        energy_score_mps=_readonly(energy_score(samples, truth)),
        inside_50=inside_50,
        inside_90=inside_90,
        missing_rows=_readonly(data_rows[missing].copy()),
        inside_levels=inside_levels,
        crps_mps=_readonly(crps_ensemble(samples, truth)),
    )


def _format_value(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    return f"{value:.4g}"


def format_table(score: TrajectoryScore | ImpactScore) -> str:
    """A human-readable table of a score: a summary line, a header, one row per metric.

    Parameters
    ----------
    score : TrajectoryScore or ImpactScore

    Returns
    -------
    str
        Lines ``metric  value  unit``, values to 4 significant digits, ``n/a`` where a
        metric does not apply (coverage with S = 1); with S > 1 then the reliability
        curves, one line each: the coverage (%) of the 10 % .. 90 % regions and the
        curve's max deviation from the diagonal (points).
    """
    if not isinstance(score, (TrajectoryScore, ImpactScore)):
        raise TypeError(
            f"score must be TrajectoryScore or ImpactScore, got {type(score).__name__}"
        )
    title, rows = score._table()
    cells = [(label, _format_value(value), unit) for label, value, unit in rows]
    label_width = max(len("metric"), *(len(c[0]) for c in cells))
    value_width = max(len("value"), *(len(c[1]) for c in cells))
    lines = [title, f"{'metric':<{label_width}}  {'value':>{value_width}}  unit"]
    lines += [
        f"{label:<{label_width}}  {value:>{value_width}}  {unit}".rstrip()
        for label, value, unit in cells
    ]
    curves = {name: curve for name, curve in score.reliability().items() if curve is not None}
    if curves:
        width = max(len("reliability"), *(len(name) for name in curves))
        header = "".join(f"{100 * level:>6.0f}" for level in RELIABILITY_LEVELS)
        lines.append(f"{'reliability':<{width}}{header}  max dev  (coverage %, per level %)")
        for name, curve in curves.items():
            values = "".join(f"{100 * value:>6.1f}" for value in curve.values())
            lines.append(f"{name:<{width}}{values}  {100 * max_deviation(curve):>7.1f}")
    return "\n".join(lines)
