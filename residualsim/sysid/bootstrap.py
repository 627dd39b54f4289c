"""A parametric bootstrap of ``calibrate --method sandwich``'s estimate: its covariance
(``--covariance bootstrap``, MH's default; issue 50, train/README.md §20.4-20.5).

From the true first poses the sandwich's intervals are calibrated (20 synthetic tosses × 60
samples, 2 mm noise: 90 % coverage 1.00 / 0.96 for friction / restitution). From recorded
ones each recording's start error moves the estimate by several of the sandwich's standard
deviations (0.0002-0.0013 there: a 0.5 mm height error is worth ~0.003 in restitution),
which the scatter between recordings does not show. The bootstrap measures it as it
arises: B data sets simulated at the estimate θ̂ from the recordings' own first states as
the likelihood rolls them out (fitted with ``--recorded-start fit``), every sample's pose
given fresh noise of the recordings' own level (:func:`pose_noise`), each fitted by the
same estimator; the covariance of the B estimates (unit coordinates of the space) is the
posterior's. Replicate b draws from ``default_rng([seed, b])``, so the result does not
depend on the number of workers.

MH's default (``calibrate``: the calibrated likelihood's envelope with this covariance
where it is wider than the sandwich's, :func:`bootstrap_about`,
:func:`residualsim.sysid.calibrated.wider`; train/README.md §20.5) and an
option of ``--method sandwich``. Simulation-based calibration of the default on 50 data
sets each of 6 × 50 and 20 × 60 synthetic tosses passed (ranks p ≥ 0.05 for friction and
restitution; §20.5). Only white noise is simulated: on the real cube the poses' white
jitter is ~0.01 mm while each recording sits ~0.3 mm off as a whole
(:mod:`residualsim.residual.observation_noise`), which the replicates would miss (not
measured: no real recordings with a known truth).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from residualsim.atomic import atomic_write_text, read_json
from residualsim.data.trajectory import Trajectory
from residualsim.errors import ParameterError
from residualsim.parallel.progress import progress_bar

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_REPLICATES", "COVARIANCES", "pose_noise", "bootstrap_estimates",
           "bootstrap_covariance", "bootstrap_about", "bootstrap_sandwich",
           "check_covariance", "default_covariance"]

#: Bootstrap replicates B by default: the standard deviations to about ±25 % (B = 10).
DEFAULT_REPLICATES = 10
#: ``calibrate --covariance``: the sandwich's own (default), or this bootstrap's.
COVARIANCES = ("sandwich", "bootstrap")


def pose_noise(trajectories: Mapping[str, Trajectory]) -> tuple[float, float]:
    """The recordings' white pose noise: (position σ in m per axis, orientation σ in rad per
    axis), the medians over recordings of 8 samples or more (0 when none has)."""
    from residualsim.data.velocities import relative_rotvecs, white_noise_level

    positions, angles = [], []
    for traj in trajectories.values():
        if traj.n_samples < 8:
            continue
        positions.append(float(np.median(white_noise_level(traj.positions_m))))
        quats = np.asarray(traj.quat_wxyz, dtype=np.float64)
        turns = np.cumsum(relative_rotvecs(quats[1:], quats[:-1]), axis=0)
        angles.append(float(np.median(white_noise_level(turns))))
    if not positions:
        return 0.0, 0.0
    return float(np.median(positions)), float(np.median(angles))


def bootstrap_estimates(scene: str, trajectories: Mapping[str, Trajectory], space,
                        estimate: np.ndarray, fit: Callable[[dict, int], np.ndarray],
                        replicates: int = DEFAULT_REPLICATES, seed: int = 0,
                        substeps: int | None = None,
                        noise: tuple[float, float] | None = None,
                        checkpoint: str | os.PathLike[str] | None = None,
                        resume: bool = False, progress: bool = False) -> np.ndarray:
    """The estimates (replicates, d), natural values, of ``fit`` (synthetic recordings,
    replicate seed → natural values (d,)) on ``replicates`` data sets simulated with the
    engine at ``estimate`` (natural values (d,)) from ``trajectories``' first states, with
    pose noise ``noise`` (m, rad; default :func:`pose_noise` of ``trajectories``).

    ``checkpoint``: a JSON file rewritten atomically after each replicate; with ``resume``
    the replicates it holds are kept (if it was written for the same estimate, noise,
    seed and substeps; another is refused with a ParameterError naming it). ``progress``:
    a line (a bar on a terminal) per replicate refitted
    (:func:`~residualsim.parallel.progress.progress_bar`)."""
    from residualsim.sim.synthesize import MAX_NOISE_M, MAX_NOISE_RAD, synthesize_tosses

    if int(replicates) != replicates or replicates < 2:
        raise ParameterError(f"bootstrap replicates must be an integer >= 2, got {replicates}")
    noise_m, noise_rad = pose_noise(trajectories) if noise is None else noise
    if noise_m > MAX_NOISE_M or noise_rad > MAX_NOISE_RAD:
        log.warning("the recordings' pose noise (%.3g m, %.3g rad) is above what synthetic "
                    "recordings take: the bootstrap simulates %.3g m, %.3g rad, and its "
                    "intervals may be too narrow", noise_m, noise_rad,
                    min(noise_m, MAX_NOISE_M), min(noise_rad, MAX_NOISE_RAD))
    noise_m, noise_rad = min(noise_m, MAX_NOISE_M), min(noise_rad, MAX_NOISE_RAD)
    params = space.engine_params(np.asarray(estimate, dtype=np.float64))
    key = {"estimate": [float(v) for v in estimate], "noise": [noise_m, noise_rad],
           "seed": int(seed), "substeps": substeps}
    rows = [np.asarray(r, dtype=np.float64) for r in _resumed(checkpoint, key, resume)]
    bar = progress_bar(total=int(replicates), initial=len(rows), desc="bootstrap",
                       unit="refits", disable=not progress)
    for b in range(len(rows), int(replicates)):
        fake = synthesize_tosses(params, like=trajectories, noise_m=noise_m,
                                 noise_rad=noise_rad, rng=np.random.default_rng([seed, b]),
                                 substeps=substeps, scene=scene)
        rows.append(np.asarray(fit(fake, b), dtype=np.float64))
        if checkpoint is not None:
            atomic_write_text(checkpoint, json.dumps(
                {**key, "rows": [r.tolist() for r in rows]}))
        log.info("bootstrap %d/%d: %s", b + 1, replicates,
                 dict(zip(space.names, np.round(rows[-1], 4))))
        bar.update(1)
    bar.close()
    return np.array(rows[:int(replicates)])


def _resumed(checkpoint, key: dict, resume: bool) -> list:
    """The replicates a checkpoint of the same ``key`` holds (none without ``resume``)."""
    if checkpoint is None or not resume or not Path(checkpoint).is_file():
        return []
    stored = read_json(Path(checkpoint), error=ParameterError)
    if not isinstance(stored, dict) or {k: stored.get(k) for k in key} != key:
        raise ParameterError(f"{checkpoint}: a bootstrap checkpoint of another calibration "
                             "(estimate, noise, seed or substeps differ); delete it or choose "
                             "another --out")
    return list(stored.get("rows", []))


def bootstrap_covariance(space, estimates: np.ndarray) -> np.ndarray:
    """The covariance (d, d) of bootstrap ``estimates`` (B, d; natural values) in the
    space's unit coordinates, with a floor of 1e-12 on its diagonal (replicates that all
    agree leave a point mass)."""
    units = space.to_unit(np.atleast_2d(estimates))
    covariance = np.atleast_2d(np.cov(units, rowvar=False))
    return covariance + 1e-12 * np.eye(len(covariance))


def check_covariance(covariance: str, method: str, replicates: int | None = None,
                     weighting: str | None = None) -> None:
    """ParameterError, before any work, unless ``covariance`` is one of :data:`COVARIANCES`,
    a bootstrap comes with ``method`` ``sandwich`` or ``mh`` with ``weighting``
    ``calibrated``, and ``replicates`` (None: not given) is given only with a bootstrap and
    is an integer >= 2."""
    allowed = method == "sandwich" or (method == "mh" and weighting == "calibrated")
    if covariance not in COVARIANCES or (covariance == "bootstrap" and not allowed):
        raise ParameterError(f"covariance (--covariance) must be one of "
                             f"{', '.join(COVARIANCES)}, bootstrap with method 'sandwich' or "
                             f"'mh' with --weighting calibrated; got {covariance!r} with "
                             f"{method!r}" + (f" and weighting {weighting!r}"
                                              if method == "mh" else ""))
    if replicates is not None and covariance != "bootstrap":
        raise ParameterError(f"bootstrap replicates (--bootstrap {replicates}) apply to "
                             "--covariance bootstrap only")
    if replicates is not None and (int(replicates) != replicates or replicates < 2):
        raise ParameterError(f"bootstrap replicates must be an integer >= 2, got {replicates}")


def default_covariance(method: str, weighting: str, noise: float | None, kind: str) -> str:
    """``calibrate``'s covariance when none is named: ``bootstrap`` for MH's calibrated
    likelihood on trajectories with the noise estimated (the default MH, train/README.md
    §20.5), else ``sandwich`` (``--method sandwich``'s own; ignored by the rest)."""
    calibrated_mh = method == "mh" and weighting == "calibrated"
    return "bootstrap" if calibrated_mh and noise is None and kind == "trajectories" \
        else "sandwich"


def bootstrap_about(scene: str, likelihood, space, estimate: np.ndarray, *, seed: int,
                    sobol_points: int, replicates: int = DEFAULT_REPLICATES,
                    checkpoint: str | os.PathLike[str] | None = None,
                    resume: bool = False, search: bool = True,
                    progress: bool = False) -> tuple[np.ndarray, dict]:
    """The bootstrap covariance (d, d; unit coordinates) of the sandwich estimator about
    ``estimate`` (natural values (d,)), and its record for the summary (replicates, seed,
    pose noise in m and rad, the replicates' estimates). ``likelihood``
    (a :class:`~residualsim.sysid.likelihood.TrajectoryLikelihood`) is the one the estimate
    came from: its ``trajectories`` as rolled out give the first states, its settings the
    substeps, and :meth:`~residualsim.sysid.likelihood.TrajectoryLikelihood.like` the same
    likelihood on each replicate; ``checkpoint``, ``resume``: as :func:`bootstrap_estimates`.
    ``search``: each replicate's fit starts, as the estimate's did, from the best of
    ``sobol_points`` over the box; False: from ``estimate`` (MH's staged least-squares pilot
    of body and joint names, too costly to repeat per replicate and a box search being what
    found poor bodies: train/README.md §22)."""
    from residualsim.sysid.weighting import sandwich_calibration

    def fit(recordings: dict, b: int) -> np.ndarray:
        with likelihood.like(recordings) as replicate:
            def log_like(x: np.ndarray) -> np.ndarray:
                return replicate([space.engine_params(row) for row in x])

            found = sandwich_calibration(replicate, log_like, space, seed + 1 + b,
                                         sobol_points, None if search else estimate)
        return np.array([found["median"][n] for n in space.names])

    noise = pose_noise(likelihood.trajectories)
    estimates = bootstrap_estimates(scene, likelihood.trajectories, space, estimate, fit,
                                    replicates, seed, likelihood.settings.substeps, noise,
                                    checkpoint, resume, progress)
    return bootstrap_covariance(space, estimates), {
        "replicates": int(replicates), "seed": int(seed), "noise_m": noise[0],
        "noise_rad": noise[1], "estimates": estimates.tolist()}


def bootstrap_sandwich(scene: str, likelihood, space, result: Mapping, *, seed: int,
                       sobol_points: int, replicates: int = DEFAULT_REPLICATES,
                       checkpoint: str | os.PathLike[str] | None = None,
                       resume: bool = False, search: bool = True,
                       progress: bool = False) -> dict:
    """``calibrate --method sandwich --covariance bootstrap``: the sandwich's ``result``
    (:func:`~residualsim.sysid.weighting.sandwich_calibration`'s entries) with its
    covariance replaced by :func:`bootstrap_about`'s about the same mode (arguments as
    there). Returns the entries to update: ``median``, ``q05``, ``q95`` and ``sandwich``
    (its ``covariance_unit`` now the bootstrap's; the sandwich's own kept as
    ``sandwich_covariance_unit``, the bootstrap's record under ``bootstrap``)."""
    from residualsim.sysid.weighting import gaussian_quantiles

    sandwich = dict(result["sandwich"])
    estimate = np.array([result["median"][n] for n in space.names])
    covariance, record = bootstrap_about(scene, likelihood, space, estimate, seed=seed,
                                         sobol_points=sobol_points, replicates=replicates,
                                         checkpoint=checkpoint, resume=resume,
                                         search=search, progress=progress)
    sandwich.update(sandwich_covariance_unit=sandwich.get("covariance_unit"),
                    covariance_unit=covariance.tolist(), bootstrap=record)
    return {**gaussian_quantiles(space, np.asarray(sandwich["mode_unit"]), covariance),
            "sandwich": sandwich}
