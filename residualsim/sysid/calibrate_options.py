"""The options of :func:`residualsim.sysid.calibrate.calibrate`, checked before any work.

Each is refused with :class:`~residualsim.errors.ParameterError` when it is out of range or
when it does not apply to the method (and data) it comes with, naming what it applies to.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from residualsim.errors import ParameterError
from residualsim.sysid.bootstrap import check_covariance, default_covariance
from residualsim.sysid.calibrated import DEFAULT_SMALL_SAMPLE
from residualsim.sysid.weighting import SMALL_SAMPLE

__all__ = ["WEIGHTINGS", "DEFAULT_WEIGHTING", "METHODS", "APPLICABLE", "check_options",
           "check_command", "check_applicable"]

#: The likelihood MH samples on trajectories with the noise estimated: ``"calibrated"`` (the
#: default: the ν-weighted likelihood tied to its envelope, whose covariance is the wider of a
#: parametric bootstrap's and the sandwich's, :mod:`residualsim.sysid.calibrated` and
#: :mod:`residualsim.sysid.bootstrap`;
#: passed simulation-based calibration on 6 × 50 and 20 × 60 synthetic tosses,
#: train/README.md §20.5), ``"recording"`` (the raw likelihood, each recording one
#: observation, ν_i = 1: too wide a posterior on few short tosses, too narrow on many; kept
#: for comparison) or ``"effective"`` (ν_i with the Chandler-Bate curvature adjustment at
#: the rugged mode: too narrow, MH finds the likelihood's spikes).
WEIGHTINGS = ("recording", "calibrated", "effective")
DEFAULT_WEIGHTING = "calibrated"
#: The options that apply to some methods only (:func:`check_applicable`'s keywords).
APPLICABLE = ("weighting", "small_sample", "rugged_weight", "delayed_acceptance", "optimizer",
              "checkpoint_every", "guard_against")
#: The methods :func:`~residualsim.sysid.calibrate.calibrate` runs on recordings.
METHODS = ("mh", "sandwich", "nevergrad", "lsq")


def check_applicable(method: str, *, scene: str = "", noise: float | None = None,
                     impacts: bool = False,
                     weighting: str | None = None, small_sample: str | None = None,
                     rugged_weight: float | None = None,
                     delayed_acceptance: float | None = None, optimizer: str | None = None,
                     checkpoint_every: int | None = None,
                     guard_against: object | None = None) -> None:
    """ParameterError when an option given (not None) does not apply to ``method`` (or the
    arm + loop's ``scene``): it would be accepted and have no effect. Each names what it
    applies to: ``--weighting`` MH (calibrated or effective: with the noise estimated),
    ``--small-sample`` and ``--rugged-weight`` MH's calibrated likelihood (the default MH,
    noise estimated), ``--delayed-acceptance`` MH, ``--optimizer`` nevergrad,
    ``--checkpoint-every`` MH and nevergrad, ``--guard-against`` the methods
    :func:`~residualsim.sysid.calibrate.calibrate` runs (its held-out guard). ``impacts``: the data are impacts (MH samples
    the raw likelihood there)."""
    mh = method == "mh" and scene != "arm-loop"
    estimated = noise is None and not impacts
    used = weighting or ("recording" if delayed_acceptance else DEFAULT_WEIGHTING)
    calibrated = mh and used == "calibrated" and estimated
    this = "--scene arm-loop" if scene == "arm-loop" else f"--method {method}" + (
        "" if not mh else " on impacts" if impacts else " with --noise" if noise is not None else
        f" with --weighting {weighting}" if weighting not in (None, "calibrated") else
        " with --delayed-acceptance (--weighting recording)" if used == "recording" else "")
    likelihood = "--method mh's calibrated likelihood (the default MH on trajectories: " \
        "--weighting calibrated, the noise estimated)"
    rules = (
        ("--weighting", weighting, mh, "--method mh (the likelihood it samples)"),
        ("--weighting", None if weighting == "recording" else weighting, estimated,
         "MH on trajectories with the noise estimated (else MH samples the raw likelihood)"),
        ("--small-sample", small_sample, calibrated, likelihood),
        ("--rugged-weight", rugged_weight, calibrated, likelihood),
        ("--delayed-acceptance", delayed_acceptance, mh, "--method mh"),
        ("--optimizer", optimizer, method == "nevergrad", "--method nevergrad"),
        ("--checkpoint-every", checkpoint_every, mh or method == "nevergrad",
         "--method mh or nevergrad"),
        ("--guard-against", guard_against, method in METHODS and scene != "arm-loop",
         f"--method {', '.join(METHODS)} (the held-out guard they run)"))
    for flag, value, applies, where in rules:
        if value is not None and not applies:
            raise ParameterError(f"{flag} {value} applies to {where}, not to {this}: it "
                                 "would have no effect; drop it")


def check_options(method: str, *, max_items: int | None, weighting: str | None,
                  delayed_acceptance: float | None, recorded_start: str | None,
                  proposal_scale: float, rugged_weight: float | None,
                  small_sample: str | None, covariance: str | None, noise: float | None,
                  bootstrap_replicates: int | None, optimizer: str | None = None,
                  checkpoint_every: int | None = None) -> tuple[str, str]:
    """ParameterError for an option out of range or not applying to ``method``
    (:func:`check_applicable`); returns the weighting MH uses (given, or
    :data:`DEFAULT_WEIGHTING`; ``"recording"`` with ``delayed_acceptance``) and the
    few-recordings widening (given, or :data:`DEFAULT_SMALL_SAMPLE`)."""
    if method not in METHODS:
        raise ParameterError(f"method must be 'mh', 'sandwich', 'nevergrad' or 'lsq', got "
                             f"{method!r}")
    check_applicable(method, noise=noise, weighting=weighting, small_sample=small_sample,
                     rugged_weight=rugged_weight, delayed_acceptance=delayed_acceptance,
                     optimizer=optimizer, checkpoint_every=checkpoint_every)
    small_sample = small_sample or DEFAULT_SMALL_SAMPLE
    if max_items is not None and (int(max_items) != max_items or max_items < 1):
        raise ParameterError(f"max_items must be an integer >= 1, got {max_items}")
    weighting = weighting or ("recording" if delayed_acceptance else DEFAULT_WEIGHTING)
    if recorded_start not in (None, "fit", "recorded"):
        raise ParameterError(f"recorded_start must be 'fit' or 'recorded', got {recorded_start!r}")
    if weighting not in WEIGHTINGS:
        raise ParameterError(f"weighting must be one of {', '.join(WEIGHTINGS)}, got "
                             f"{weighting!r}")
    if not (math.isfinite(proposal_scale) and 0 < proposal_scale <= 1):  # before the pilot
        raise ParameterError(f"proposal_scale must lie in (0, 1], got {proposal_scale}")
    if rugged_weight is not None and not 0.0 <= rugged_weight <= 1.0:
        raise ParameterError(f"rugged_weight (--rugged-weight) must be within 0 to 1, got "
                             f"{rugged_weight}")
    if small_sample not in SMALL_SAMPLE:
        raise ParameterError(f"small_sample must be one of {', '.join(SMALL_SAMPLE)}, got "
                             f"{small_sample!r}")
    check_covariance(covariance or default_covariance(method, weighting, noise, "trajectories"),
                     method, bootstrap_replicates, weighting)
    if weighting == "calibrated" and delayed_acceptance:
        raise ParameterError("--delayed-acceptance screens on a share of the recordings; "
                             "--weighting calibrated screens every proposal on the envelope "
                             "already: drop one")
    return weighting, small_sample


def check_command(scene: str, method: str, names: Sequence[str], *, rotation_weight: float,
                  base: object, init: str = "sobol", **given: Any) -> None:
    """``residualsim calibrate``'s options that apply to some scenes or methods only
    (the arm + loop, MPEC; ``given``: :func:`check_applicable`'s): ParameterError naming
    what they apply to, before any work (MPEC's start runs before the search)."""
    check_applicable(method, scene=scene, **given)
    if init != "sobol" and (scene == "arm-loop" or method not in ("mh", "sandwich")):
        raise ParameterError(f"--init {init} applies to --method mh or sandwich (where their "
                             f"search starts), not to --method {method}: drop it")
    if rotation_weight != 1.0 and (scene == "arm-loop" or method == "mpec"):
        raise ParameterError("--rotation-weight applies to --method mh or nevergrad on "
                             "trajectories of a free body")
    if base is not None and (scene == "arm-loop" or method == "mpec"):
        raise ParameterError("--base applies to --method mh, sandwich, nevergrad or lsq")
    if scene == "arm-loop" and "table_height_m" in {name.strip() for name in names}:
        raise ParameterError("table_height_m has no effect in scene 'arm-loop': no table")
    if scene != "arm-loop" and method not in (*METHODS, "mpec"):
        raise ParameterError(f"--method {method} is for --scene arm-loop; calibrate "
                             f"{scene} with mh, sandwich, nevergrad, lsq or mpec")
