"""The held-out guard of a calibration: never keep (or export) a worse parameter set.

A search on the training split can end worse on the validation split than where it
started: too small a budget, a rugged likelihood, too many parameters (nevergrad's 300
evaluations of 25 body names left the synthetic hinge worse than PyBullet's defaults,
train/README.md §19). :func:`held_out_guard` scores up to three candidate sets on the
validation split and keeps the best (issues 48 and 51):

- ``"calibrated"``: the result of the search (and of the ground stage);
- ``"contact"``: the calibrated contact, solver and table parameters with the object's own
  URDF body (its body and joint values dropped); only when the calibration identified body
  or joint parameters;
- ``"contact_fit"``: a contact-only calibration of its own (``calibrate --guard-against
  DIR``: the contact fitted alone with the URDF's body), when given;
- ``"default"``: :class:`~residualsim.sim.scenes.EngineParams` ``()``, PyBullet's defaults.

A candidate with a body of its own rolls pose-only recordings out from starts fitted with
that body; with ``fit_starts`` (``calibrate --recorded-start fit``, lsq's default) each
candidate rolls the recordings with recorded velocities out from first poses fitted to
their free flight with its own parameters, not from the noisy recorded ones
(train/README.md §22).

The ``contact`` candidate keeps the contact fitted beside the body, which may have absorbed
the body's error; the best contact-only fit (issue 67) is a calibration of its own (with lsq
its ``all`` stage on whole recordings, with MH a second chain), which the guard scores when
it is given (``contact_fit``: ``calibrate --guard-against DIR``; ``residualsim twin --body``
passes its contact stage). Without one, where the ``contact`` candidate is compared, the
summary says what was not (``held_out_not_compared``: the contact-only fit and how to run
it) beside each candidate described (``held_out_compared``), and so does
:func:`held_out_note` on standard error.

The score is the validation position RMSE (m) for trajectories and the RMSE of the planar
post-impact velocities (dx, dy, k dtheta; m/s) for impacts; a tie (within
:data:`TIE_RELATIVE` or :data:`TIE_ABSOLUTE`) keeps the calibrated set.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from residualsim.sim.scenes import EngineParams, make_scene
from residualsim.sim.scenes.params import ObjectParams, body_of
from residualsim.sysid.bodyspace import is_body_name

__all__ = ["held_out_figures", "held_out_guard", "guard_candidates", "choose_candidate",
           "held_out_note", "GUARD_KEYS", "TIE_RELATIVE", "TIE_ABSOLUTE", "NOT_COMPARED"]

log = logging.getLogger(__name__)

#: The held-out figure the guard compares, per kind of data: validation position RMSE (m)
#: for trajectories, post-impact velocity RMSE (m/s) for planar impacts.
GUARD_KEYS = {"trajectories": "position_rmse_m", "impacts": "velocity_rmse_mps"}
#: Figures closer than this share of the better one, or than this absolute amount (m or
#: m/s), tie: the same parameters rebuilt through a parameter space differ by rounding
#: (1e-16 in an inertia moved a noise-free hinge's position RMSE by 1e-15 m).
TIE_RELATIVE, TIE_ABSOLUTE = 1e-6, 1e-9
_DESCRIBED = {"calibrated": "the calibrated parameters",
              "contact": "the object's own URDF body with the calibrated contact",
              "default": "the engine's defaults"}
#: ``held_out_not_compared`` where the ``contact`` candidate is compared (module doc);
#: ``{names}``: the calibrated contact names.
NOT_COMPARED = ("a contact-only fit with the URDF's body (the 'contact' candidate keeps the "
                "contact fitted beside the body, not fitted alone): calibrate --params "
                "{names} fits one, and --guard-against that folder scores it here")


def held_out_figures(scene: str, kind: str, validation: Any, params: Mapping[str, EngineParams],
                     substeps: int | None, n_workers: int, fit_starts: bool = False
                     ) -> dict[str, dict[str, float]]:
    """Scores of the engine on held-out data for each named parameter set (the aggregate
    figures of :mod:`residualsim.evaluation.metrics`: metres, radians, m/s). A set with a
    body of its own rolls the pose-only recordings out from starts fitted with that body
    (``validation`` was read with the URDF's): a start fitted with another body carries its
    error (:func:`~residualsim.sim.recordings.fit_starts`; train/README.md §22).
    ``fit_starts``: also roll each set out from the first poses of the recordings with
    recorded velocities fitted to their free flight with that set, as ``calibrate
    --recorded-start fit`` trains."""
    from residualsim.evaluation.metrics import score_impacts, score_trajectories
    from residualsim.evaluation.predictions import ImpactPredictions, TrajectoryPredictions
    from residualsim.sim.recordings import fit_starts as fit_again
    from residualsim.sim.rollout import (recording_settings, simulate_impacts,
                                         simulate_trajectories)

    figures, recordings = {}, validation
    for label, engine_params in params.items():
        own_body = body_of(engine_params) is not None  # pose-only starts: fitted with it
        if kind == "trajectories" and (fit_starts or own_body):
            recordings = fit_again(scene, validation, recording_settings(
                scene, validation, substeps), engine_params, n_workers, estimated=own_body,
                recorded=fit_starts)
        elif kind == "trajectories":
            recordings = validation
        if kind == "impacts":
            velocity = simulate_impacts(scene, validation, engine_params, n_workers, substeps)
            score = score_impacts(ImpactPredictions(post_velocity=velocity[None],
                                                    rows=validation.rows,
                                                    meta={"convention": "corrected"}),
                                  validation)
        else:
            results = simulate_trajectories(scene, recordings, engine_params, n_workers,
                                            substeps)
            predictions = TrajectoryPredictions(
                {k: (r.positions_m[None], r.quat_wxyz[None]) for k, r in results.items()})
            layout = make_scene(scene)
            score = score_trajectories(predictions, validation,
                                       side_m=getattr(layout, "side_m", None),
                                       radius_of_gyration_m=layout.radius_of_gyration_m)
        figures[label] = {k: v for k, v in score.aggregate().items()
                          if isinstance(v, (int, float)) and v is not None}
    return figures


def guard_candidates(params: EngineParams, names: Sequence[str],
                     contact_fit: EngineParams | None = None) -> dict[str, EngineParams]:
    """The guard's candidates, in order of preference on a tie: ``calibrated`` (``params``),
    ``contact`` (``params`` without its body, so the URDF's own; contact, solver and
    ``table_height_m`` kept) when ``names`` hold body or joint names and ``params`` a body,
    ``contact_fit`` (a contact-only calibration's parameters) when given, and ``default``
    (PyBullet's)."""
    candidates = {"calibrated": params}
    if body_of(params) is not None and any(is_body_name(n) for n in names):
        candidates["contact"] = ObjectParams.of(params, None)
    if contact_fit is not None:
        candidates["contact_fit"] = contact_fit
    candidates["default"] = EngineParams()
    return candidates


def _score(figures: Mapping[str, Mapping[str, float]], label: str, key: str) -> float:
    """``figures[label][key]``; a missing or non-finite figure counts as infinite."""
    value = figures[label].get(key, math.inf)
    return value if isinstance(value, (int, float)) and math.isfinite(value) else math.inf


def _beats(figures: Mapping[str, Mapping[str, float]], label: str, other: str,
           key: str) -> bool:
    """Whether ``label``'s figure is below ``other``'s by more than a tie
    (:data:`TIE_RELATIVE` of it or :data:`TIE_ABSOLUTE`)."""
    reference, score = _score(figures, other, key), _score(figures, label, key)
    if math.isinf(reference):
        return score < reference
    return score < reference - max(TIE_ABSOLUTE, TIE_RELATIVE * reference)


def choose_candidate(figures: Mapping[str, Mapping[str, float]], key: str) -> str:
    """The first label (in ``figures``' order: the calibrated one first) whose
    ``figures[label][key]`` no other label beats by more than a tie; a missing or non-finite
    figure counts as infinite."""
    return next(label for label in figures
                if not any(_beats(figures, other, label, key) for other in figures))


def _remedy(method: str) -> str:
    """What to try when a calibration predicts the validation split worse (CLI words)."""
    if method == "lsq":  # lsq already: it follows the valley it starts in
        return ("more --budget, fewer parameters, narrower --bounds, or a start nearer the "
                "data (--base)")
    more = {"mh": "more --samples, ", "nevergrad": "more --budget, "}.get(method, "")
    return f"{more}--method lsq, or fewer parameters"


def held_out_guard(scene: str, kind: str, validation: Any, params: EngineParams,
                   names: Sequence[str], substeps: int | None, n_workers: int, *,
                   method: str, keep_calibrated: bool = False, fit_starts: bool = False,
                   contact_fit: EngineParams | None = None, contact_fit_source: str = ""
                   ) -> tuple[EngineParams, dict[str, Any], list[str]]:
    """Score the candidates of :func:`guard_candidates` on ``validation``; (the kept
    parameters, the summary's entries, warnings).

    The entries: ``validation`` (each candidate's figures), ``held_out_choice`` (the kept
    label), ``held_out_ratio_to_default`` (each candidate's :data:`GUARD_KEYS` figure over
    the default's) and, when ``keep_calibrated`` kept a worse calibrated set,
    ``held_out_best``. The kept set is the best candidate, or the calibrated one with
    ``keep_calibrated`` (a warning either way when the calibrated set is not the best).
    ``contact_fit``: a contact-only calibration's parameters (``contact_fit_source``: where
    it comes from, for the summary's words), scored as the candidate ``contact_fit``.
    """
    candidates = guard_candidates(params, names, contact_fit)
    described = dict(_DESCRIBED, contact_fit=f"the contact fitted alone with the URDF's body "
                                             f"({contact_fit_source or 'given'})")
    figures = held_out_figures(scene, kind, validation, candidates, substeps, n_workers,
                               fit_starts)  # fit_starts: see held_out_figures
    key = GUARD_KEYS[kind]
    best = choose_candidate(figures, key)
    reference = figures["default"].get(key, math.nan)
    entry: dict[str, Any] = {
        "validation": figures,
        "held_out_compared": {label: described[label] for label in figures},
        **({"held_out_not_compared": NOT_COMPARED.format(names=",".join(
            n for n in names if not is_body_name(n)) or "<contact names>")}
           if "contact" in figures and "contact_fit" not in figures else {}),
        "held_out_ratio_to_default": {
            label: (f.get(key, math.nan) / reference if reference > 0 else
                    (1.0 if f.get(key) == reference else math.inf))
            for label, f in figures.items()},
    }
    warnings = []
    if best == "calibrated":
        entry["held_out_choice"] = "calibrated"
        return params, entry, warnings
    unit = "m" if kind == "trajectories" else "m/s"
    scores = ", ".join(f"{label} {f.get(key, math.nan):.4g} {unit}"
                       for label, f in figures.items())
    better = [label for label in figures if _beats(figures, label, "calibrated", key)]
    text = (f"held-out guard: the calibrated parameters predict the validation split worse "
            f"than {' and than '.join(described[label] for label in better)} ({key}: "
            f"{scores}); ")
    if keep_calibrated:
        entry["held_out_choice"], entry["held_out_best"] = "calibrated", best
        warnings.append(text + f"kept them as asked (--keep-calibrated; the {best} set "
                        f"predicts it best). Remedies: {_remedy(method)}")
        return params, entry, warnings
    entry["held_out_choice"] = best
    warnings.append(text + f"kept the {best} set instead (summary 'params'; the calibrated "
                    f"set is under 'calibrated_params'; --keep-calibrated keeps it). "
                    f"Remedies: {_remedy(method)}")
    return candidates[best], entry, warnings


def held_out_note(summary: Mapping[str, Any], export: str | None = None) -> str | None:
    """One or two lines for the user: each candidate's held-out figure, the kept one, and
    which set ``--export-urdf`` (``export``) wrote when it was not the calibrated one; why
    the guard did not run (``held_out_guard``); else None."""
    figures = summary.get("validation") or {}
    if not figures:
        guard = summary.get("held_out_guard")
        return f"held-out guard {guard}" if guard else None
    trajectories = all("position_rmse_m" in f for f in figures.values())
    key = "position_rmse_m" if trajectories else "velocity_rmse_mps"
    counts = summary.get("held_out_counts") or {
        "validation": summary.get("validation_count") or 0, "unused_training": 0}
    unit = "recordings" if trajectories else "impacts"
    valid, unused = counts.get("validation") or 0, counts.get("unused_training") or 0
    if unused:  # the training recordings --max-trajectories left out count as held out
        what = "held out (" + (f"{valid} validation + " if valid else "") + (
            f"{unused} unused training {unit})")
    else:
        what = "validation" + (f" ({valid} {unit})" if valid else "")
    what += ", position RMSE" if trajectories else ", RMSE of (dx, dy, k dtheta)"
    scores = ", ".join(f"{label} {f[key]:.4g} {'m' if trajectories else 'm/s'}"
                       for label, f in figures.items() if key in f)
    choice = summary.get("held_out_choice")
    line = f"{what}: {scores}" + (f"; kept: {choice}" if choice else "")
    if summary.get("held_out_not_compared"):  # what "contact" is, and what it is not
        line += ("\nheld-out guard compared " + "; ".join(
            f"{label}: {text}" for label, text in summary["held_out_compared"].items()) +
            f"; not compared: {summary['held_out_not_compared']}")
    if export and choice and choice != "calibrated":
        line += (f"\n--export-urdf {export}: wrote the {choice} set, not the calibrated one "
                 "(worse on validation; --keep-calibrated writes it)")
    return line
