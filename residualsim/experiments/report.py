"""``residualsim report``: one self-contained HTML page to judge a calibration or a model by.

The page holds, for the recordings of one split:

* a headline: the final position's coverage on the table plane (x-y) of the sampled 50 % /
  90 % regions, with the 3-D figure beside it, and, when that is far lower, why (at rest
  the samples agree on the height to 1e-7 m while recordings rest a millimetre lower
  unless ``fit-ground`` set the table height and pose noise);
* the error table of PyBullet's default engine, the calibrated engine and the residual model
  (position RMSE m, final position error m, rotation error degrees, coverage of the sampled
  50 % / 90 % regions, x-y then 3-D);
* for a model, the decomposition of ``residualsim uncertainty``
  (:mod:`~residualsim.experiments.uncertainty`): the mean prediction (a), state noise with
  the mean residual (b, when the model has state noise and ``decomposition`` is on; as many
  samples as (c)) and the sampled model (c), scored alike: energy scores of the final
  position and pose and along the trajectory, the ratios (c)/(b) and (c)/(a), the CRPS, the
  coverages and the reliability curves;
* per recording (the first ``max_figures``), the recorded trajectory against each
  prediction: x, y, z of the base link (m, world frame), the angle turned since the first
  sample (degrees) and the joints (rad or m), with the 50 % and 90 % bands of the sampled
  residual rollouts; where the model's mean prediction is the calibrated engine's (a zero
  mean residual), the caption says that the two lines coincide;
* where the calibration is a Metropolis-Hastings posterior, its corner and trace plots,
  R-hat, bulk ESS and the convergence warnings;
* the reliability curve of the sampled rollouts.

Every figure is a PNG inlined as base64 and captioned with the commands that reproduce it;
the page references nothing outside itself (no network, no server). Its title names the
model and data folders by their names only (no absolute path). It is written atomically.
"""

from __future__ import annotations

import base64
import html
import io
import os
import shlex
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from residualsim.atomic import atomic_write_text
from residualsim.data.datasets import resolve_data
from residualsim.data.splits import DEFAULT_FRACTIONS, recording_selector
from residualsim.errors import DataError, ParameterError
from residualsim.sim.recordings import load_recordings

__all__ = ["build_report", "DEFAULT_FIGURES"]

PathLike = str | os.PathLike[str]

#: Per-recording figures drawn by default (the first N recordings of the split).
DEFAULT_FIGURES = 6

_COLOURS = {"default": "tab:grey", "calibrated": "tab:blue", "residual": "tab:orange"}
_WIDTHS = {"default": 1.4, "calibrated": 2.6, "residual": 1.2}
_LABELS = {"default": "PyBullet defaults", "calibrated": "calibrated engine",
           "residual": "residual model (mean)"}


@dataclass
class _Figure:
    title: str
    png: bytes
    caption: str
    commands: list[str] = field(default_factory=list)


def _png(figure) -> bytes:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue()


def _png_from_file_writer(write: Callable[[Path], None]) -> bytes:
    """PNG bytes of a plotting function that writes a file (corner, trace, reliability)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "figure.png"
        write(path)
        return path.read_bytes()


def _cmd(*argv: Any) -> str:
    return "residualsim " + " ".join(shlex.quote(str(a)) for a in argv if a is not None)


def _split_args(split: str, fractions, lists_file: str | None) -> list[str]:
    extra = ["--split", split]
    if lists_file:
        extra += ["--split-ids", lists_file]
    elif fractions is not None and tuple(fractions) != DEFAULT_FRACTIONS:
        extra += ["--split-fractions", ",".join(f"{f:g}" for f in fractions)]
    return extra


def _angle_deg(quats: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Angle (degrees) turned since ``start`` (w-x-y-z), for quaternions (..., 4)."""
    from residualsim.sim.rotations import geodesic_angle

    return np.degrees(geodesic_angle(quats, np.broadcast_to(start, quats.shape)))


def _trajectory_figure(recording, means: Mapping[str, Any], sampled) -> bytes:
    """x, y, z (m), the angle turned (deg) and the joints against time for one recording."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = recording.times_s - recording.times_s[0]
    start = recording.quat_wxyz[0]
    n_joints = recording.n_joints
    panels = [("x", "m"), ("y", "m"), ("z", "m"), ("angle turned", "deg")]
    panels += [(f"joint {name}", "rad or m") for name in recording.joint_names]
    columns = 2
    rows = -(-len(panels) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(10, 2.3 * rows), sharex=True,
                                squeeze=False)

    def series(prediction) -> list[np.ndarray]:  # (S, T) per panel
        values = [prediction.position[..., k] for k in range(3)]
        values.append(_angle_deg(prediction.quaternion, start))
        if n_joints and prediction.joint_positions is not None:
            values += [prediction.joint_positions[..., j] for j in range(n_joints)]
        return values

    recorded = [recording.positions_m[:, k] for k in range(3)]
    recorded.append(_angle_deg(recording.quat_wxyz, start))
    if n_joints:
        recorded += [recording.joint_positions[:, j] for j in range(n_joints)]
    bands = series(sampled) if sampled is not None else None
    for index, ((name, unit), axis) in enumerate(zip(panels, axes.flat)):
        if bands is not None and index < len(bands):
            for low, high, alpha, label in ((5, 95, 0.18, "residual samples, 90 %"),
                                            (25, 75, 0.35, "residual samples, 50 %")):
                lo, hi = np.percentile(bands[index], [low, high], axis=0)
                axis.fill_between(t[:len(lo)], lo, hi, color=_COLOURS["residual"],
                                  alpha=alpha, lw=0, label=label)
        for key, prediction in means.items():  # wide to narrow: equal lines stay visible
            values = series(prediction)
            if index < len(values):
                axis.plot(t[:values[index].shape[1]], values[index][0], color=_COLOURS[key],
                          lw=_WIDTHS[key], label=_LABELS[key])
        axis.plot(t, recorded[index], color="k", lw=1.6, ls="--", label="recorded")
        axis.set_ylabel(f"{name} [{unit}]")
        axis.grid(alpha=0.3)
    for axis in list(axes.flat)[len(panels):]:
        axis.set_axis_off()
    for axis in axes[-1]:
        axis.set_xlabel("time since the first sample [s]")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="upper center", ncol=min(len(labels), 5), fontsize=8,
                  bbox_to_anchor=(0.5, 1.0), frameon=False)
    figure.tight_layout(rect=(0, 0, 1, 0.94))
    return _png(figure)


def _error_table(scores: Mapping[str, dict], split: str, n: int) -> str:
    columns = [("position_rmse_m", "position RMSE [m]", "{:.4f}"),
               ("final_error_m", "final position error [m]", "{:.4f}"),
               ("rotation_error_deg", "rotation error [deg]", "{:.1f}"),
               ("joint_rmse", "joint RMSE [rad or m]", "{:.4f}"),
               ("coverage_xy_50", "final x-y in 50 % region", "{:.0%}"),
               ("coverage_xy_90", "final x-y in 90 % region", "{:.0%}"),
               ("coverage_50", "3-D: in 50 % region", "{:.0%}"),
               ("coverage_90", "3-D: in 90 % region", "{:.0%}")]
    used = [c for c in columns if any(s.get(c[0]) is not None for s in scores.values())]
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label, _ in used)
    body = []
    for key, score in scores.items():
        cells = "".join(
            f"<td>{'–' if score.get(name) is None else fmt.format(score[name])}</td>"
            for name, _, fmt in used)
        body.append(f"<tr><th>{html.escape(key)}</th>{cells}</tr>")
    return (f"<table><caption>{n} recordings of the {html.escape(split)} split; means over "
            f"recordings (final: the last sample; rotation: the geodesic angle, averaged over "
            f"time; regions: of the sampled final positions, on the table plane x-y, then in "
            f"3-D)</caption><tr><th>engine</th>{head}</tr>{''.join(body)}</table>")


#: The 3-D 90 % coverage this far (or more) below the x-y one is explained in the headline.
THIN_3D_GAP = 0.25


def _headline(summary: Mapping[str, Any], samples: int) -> str:
    """The headline coverage: final x-y first, the 3-D figure beside it, and why the 3-D
    figure is low when it is (:data:`THIN_3D_GAP`)."""
    def percent(value):
        return "–" if value is None else f"{value:.0%}"

    xy90, d90 = summary.get("coverage_xy_90"), summary.get("coverage_90")
    thin = xy90 is not None and d90 is not None and d90 < xy90 - THIN_3D_GAP
    why = (" At rest the samples agree on the height to a fraction of a millimetre while "
           "recordings rest at another height or with pose noise, so the thin 3-D regions "
           "rarely hold a recording: the x-y figure says where the object ends up "
           "(<code>residualsim fit-ground</code> sets the table height and the pose noise "
           "from the rest phases).") if thin else ""
    return (f"<p class=\"headline\"><b>Final position on the table (x-y): "
            f"{percent(summary['coverage_xy_50'])} / {percent(xy90)} of the "
            f"recordings inside the 50 % / 90 % regions of {samples} samples</b> (target about "
            f"50 % / 90 %); in 3-D: {percent(summary['coverage_50'])} / "
            f"{percent(d90)}.{why}</p>")


def _decomposition_html(result: Mapping[str, Any]) -> str:
    """The tables of :func:`~residualsim.experiments.uncertainty.decomposition_tables`."""
    from residualsim.experiments.uncertainty import decomposition_tables

    parts = []
    for caption, header, rows in decomposition_tables(result):
        if not rows:
            continue
        head = "".join(f"<th>{html.escape(cell)}</th>" for cell in header)
        body = "".join("<tr><th>" + html.escape(cells[0]) + "</th>"
                       + "".join(f"<td>{html.escape(c)}</td>" for c in cells[1:]) + "</tr>"
                       for cells in rows)
        parts.append(f"<table><caption>{html.escape(caption)}</caption><tr>{head}</tr>"
                     f"{body}</table>")
    return "".join(parts)


def _coincide(first, second) -> bool:
    """Whether two mean predictions of one recording are the same trajectory (positions to
    1e-9 m, quaternions to 1e-9)."""
    return (first.position.shape == second.position.shape
            and np.allclose(first.position, second.position, rtol=0.0, atol=1e-9)
            and np.allclose(first.quaternion, second.quaternion, rtol=0.0, atol=1e-9))


def _name(path: PathLike) -> str:
    """A folder's name for the title (no absolute path)."""
    return Path(path).name or str(path)


def _page(title: str, sections: Sequence[tuple[str, str]]) -> str:
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;"
             "color:#222}table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid "
             "#bbb;padding:4px 8px;text-align:right}th:first-child{text-align:left}"
             "caption{caption-side:bottom;font-size:90%;color:#555;text-align:left}"
             "figure{margin:1.5em 0}img{max-width:100%;border:1px solid #ddd}"
             "figcaption{font-size:90%;color:#444}code{background:#f4f4f4;padding:1px 3px;"
             "font-size:85%}.warn{color:#a40}")
    body = "".join(f"<h2>{html.escape(h)}</h2>{content}" for h, content in sections)
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>"
            f"{html.escape(title)}</title><style>{style}</style></head><body><h1>"
            f"{html.escape(title)}</h1>{body}</body></html>\n")


def _figure_html(figure: _Figure) -> str:
    encoded = base64.b64encode(figure.png).decode("ascii")
    commands = "<br>".join(f"<code>{html.escape(c)}</code>" for c in figure.commands)
    return (f"<figure><img alt=\"{html.escape(figure.title)}\" "
            f"src=\"data:image/png;base64,{encoded}\"><figcaption><b>"
            f"{html.escape(figure.title)}.</b> {html.escape(figure.caption)}"
            f"{'<br>Reproduce: ' + commands if commands else ''}</figcaption></figure>")


def _likelihood_note(summary: Mapping[str, Any]) -> str:
    """One sentence: which likelihood MH sampled and, if calibrated, its adjustment."""
    weighting = summary.get("weighting") or {}
    method = weighting.get("method", "recording")
    adjustment = weighting.get("adjustment") or {}
    if method == "calibrated" and "failed" not in adjustment:
        mode = ", ".join(f"{name} {value:.4g}" for name, value in
                         zip(summary.get("calibrated") or [], weighting.get("mode") or []))
        boot = adjustment.get("bootstrap")
        scale = (f"the inverse of a parametric bootstrap's covariance ({boot['replicates']} "
                 f"refits of data simulated at the mode with the recordings' pose noise, "
                 f"{1000 * boot['noise_m']:.2g} mm) or of the sandwich's from the scatter "
                 f"between recordings, the wider in each direction (the bootstrap in "
                 f"{boot.get('wider_directions', 0)})" if boot else
                 f"the sandwich's from the scatter between recordings, widened "
                 f"×{adjustment.get('inflation', 1.0):.3g} for few recordings "
                 f"({adjustment.get('small_sample')})")
        return (f"Likelihood: calibrated (train/README.md §20.3, §20.5). The likelihood tied "
                f"to its envelope, whose mode ({mode}) the chains start from and whose curvature is "
                f"{scale}; λ = "
                f"{adjustment.get('rugged_weight', 0.0):g} of the likelihood's departure "
                f"from the envelope kept." + (
                    f" Along {adjustment['flat_directions']} direction(s) the envelope was not "
                    f"concave at any scale (not pinned by the recordings): sampled as the "
                    f"prior has them." if adjustment.get("flat_directions") else ""))
    if method == "calibrated":
        return (f"Likelihood: raw (as --weighting recording): the calibrated one could not "
                f"be built ({adjustment['failed']}); its intervals may be too wide.")
    return {"recording": "Likelihood: raw (--weighting recording, each recording one "
                         "observation), not calibrated: too wide on few tosses, too narrow on "
                         "many (train/README.md §20).",
            "effective": "Likelihood: effective (Chandler-Bate at the rugged mode), not "
                         "calibrated: too narrow (train/README.md §20)."}.get(method, method)


def _posterior_section(calibration: Path, summary: Mapping[str, Any]) -> tuple[str, list]:
    """Corner and trace plots, R-hat, ESS and warnings of an MH calibration, if any."""
    from residualsim.sysid.plots import corner_plot, trace_plot
    from residualsim.sysid.posterior import Posterior

    path = calibration / "posterior.npz"
    if summary.get("method") == "sandwich":  # intervals, no draws (train/README.md §20)
        rows = "".join(
            f"<tr><th>{html.escape(name)}</th><td>{value:.4g}</td><td>"
            f"{summary.get('q05', {}).get(name, float('nan')):.4g} – "
            f"{summary.get('q95', {}).get(name, float('nan')):.4g}</td></tr>"
            for name, value in (summary.get("median") or {}).items())
        return ("<p>Sandwich posterior (Gaussian around the likelihood's envelope):</p>"
                "<table><tr><th></th><th>median</th><th>90 % interval</th></tr>"
                f"{rows}</table>"), []
    if summary.get("method") != "mh" or not path.is_file():
        return (f"<p>{html.escape(str(calibration))}: a {html.escape(str(summary.get('method')))}"
                " point estimate, no posterior to show.</p>"), []
    posterior = Posterior.load(path)
    rows = "".join(
        f"<tr><th>{html.escape(name)}</th><td>{summary.get('median', {}).get(name, float('nan')):.4g}"
        f"</td><td>{summary.get('q05', {}).get(name, float('nan')):.4g} – "
        f"{summary.get('q95', {}).get(name, float('nan')):.4g}</td>"
        f"<td>{(summary.get('rhat') or {}).get(name, float('nan')):.3f}</td>"
        f"<td>{(summary.get('ess') or {}).get(name, float('nan')):.0f}</td></tr>"
        for name in posterior.names)
    warnings = summary.get("warnings") or []
    notes = ("".join(f"<li class=\"warn\">{html.escape(w)}</li>" for w in warnings)
             or "<li>no convergence warnings</li>")
    table = (f"<p>{html.escape(_likelihood_note(summary))}</p>"
             f"<table><tr><th>parameter</th><th>median</th><th>5 %–95 %</th><th>R-hat</th>"
             f"<th>bulk ESS</th></tr>{rows}</table><ul>{notes}</ul>")
    again = f"(redrawn from {calibration / 'posterior.npz'}; calibrate writes corner.png and " \
            "trace.png beside it)"
    figures = [
        _Figure("Posterior: corner plot", _png_from_file_writer(
            lambda p: corner_plot(posterior, p)),
            "Pairwise and marginal histograms of the kept draws, 5/50/95 % marked " + again,
            [str(summary.get("command") or "residualsim calibrate ... (see summary.json)")]),
        _Figure("Posterior: trace plot", _png_from_file_writer(
            lambda p: trace_plot(posterior, p)),
            "Each parameter against step for every chain, burn-in shaded " + again,
            [str(summary.get("command") or "residualsim calibrate ... (see summary.json)")])]
    return table, figures


def build_report(out: PathLike, *, model: PathLike | None = None,
                 calibration: PathLike | None = None, data: PathLike | None = None,
                 split: str = "all", samples: int = 32, seed: int = 0,
                 max_figures: int = DEFAULT_FIGURES, n_workers: int = 1,
                 fractions: Sequence[float] | None = None,
                 lists: Mapping[str, Sequence[str]] | None = None,
                 lists_file: str | None = None, progress: bool = True,
                 decomposition: bool = True) -> dict[str, Any]:
    """Write the HTML report of a model and/or a calibration on ``data`` to ``out``.

    ``data`` defaults to ``$RESIDUALSIM_DATA/<the scene's set>``; ``split`` is ``"all"`` or
    a split name (``fractions`` / ``lists`` choose the splits); ``samples`` sampled residual
    rollouts per recording give the bands and the reliability curve (needs ``model``);
    ``max_figures`` bounds the per-recording figures (the first N recordings);
    ``decomposition`` adds row (b) of the uncertainty decomposition (state noise with the
    mean residual, ``samples`` more rollouts per recording; only for a model with state
    noise). Returns the figures of the report (``out``, ``bytes``, ``figures``,
    ``recordings``, ``split``, ``seconds``, ``zero_residual``: the drawn recordings whose
    model mean equals the calibrated engine's, and ``decomposition``: the decomposition's
    rows without their full scores, and its ratios, or None). DataError for impact data or
    a model and calibration of different scenes.
    """
    from residualsim.evaluation.metrics import score_trajectories
    from residualsim.parallel.progress import progress_bar
    from residualsim.experiments.jobs import predict_dataset, simulate_dataset
    from residualsim.experiments.uncertainty import (ROWS, decomposition_ratios,
                                                     decomposition_row, state_noise_policy)
    from residualsim.sim.scenes import make_scene, same_scene
    from residualsim.sysid.calibration_file import load_calibration

    if model is None and calibration is None:
        raise ParameterError("report needs --model DIR and/or --calibration DIR")
    started = time.perf_counter()
    loaded_model = loaded_cal = None
    if model is not None:
        from residualsim.residual.model import ResidualModel

        loaded_model = ResidualModel.of(model)
        if loaded_model.info.get("kind") == "impacts":
            raise DataError(f"{model}: a model of single impacts; the report draws trajectories")
    if calibration is not None:
        loaded_cal = load_calibration(calibration)
    scene = loaded_model.scene if loaded_model is not None else loaded_cal.scene
    # resolved once (the model holds its own): the stages below take this object
    layout = loaded_model.layout if loaded_model is not None else make_scene(scene)
    if loaded_model is not None and loaded_cal is not None and not same_scene(
            loaded_model.scene, loaded_cal.scene):
        raise DataError(f"{calibration}: calibrated for {loaded_cal.scene!r}, but {model} "
                        f"is a model of {scene!r}")
    substeps = loaded_model.substeps if loaded_model is not None else loaded_cal.substeps
    path = resolve_data(None if data is None else str(data), scene)
    from residualsim.data import detect_format

    if detect_format(path) == "mcube":
        raise DataError(f"{path}: planar impacts; the report draws trajectory recordings")
    # pose-only starts fitted with the body that rolls them out (the model's, else the
    # calibration's)
    body_params = (loaded_model or loaded_cal).params
    recordings = load_recordings(path, layout, params=body_params, select=recording_selector(
        split, fractions=fractions, lists=lists, source=str(path)))
    select = dict(split=split, fractions=fractions, lists=lists)
    where = ["--data", path, *_split_args(split, fractions, lists_file)]
    noise_only_policy = (state_noise_policy(loaded_model)
                         if loaded_model is not None and decomposition and samples >= 2
                         else None)
    stages = 2 + (loaded_model is not None) * 2 + (noise_only_policy is not None) \
        + min(max_figures, len(recordings)) + 2
    bar = progress_bar(total=stages, disable=not progress, unit="step", desc="report")
    means: dict[str, Any] = {}
    commands: dict[str, list[str]] = {}
    means["default"], _ = simulate_dataset(layout, path, None, n_workers, substeps, **select)
    commands["default"] = [_cmd("simulate", "--scene", scene, "--substeps", substeps, *where,
                                "--out", "default.npz")]
    bar.update()
    if loaded_cal is not None:
        means["calibrated"], _ = simulate_dataset(layout, path, str(calibration), n_workers,
                                                  None, **select)
        commands["calibrated"] = [_cmd("simulate", "--scene", scene, "--params", calibration,
                                       *where, "--out", "calibrated.npz")]
    else:
        means["calibrated"], _ = predict_dataset(loaded_model, str(path), n_workers=n_workers,
                                                 residual=False, **select)
        commands["calibrated"] = [_cmd("predict", "--model", model, "--no-residual", *where,
                                       "--out", "calibrated.npz")]
    bar.update()
    sampled = None
    if loaded_model is not None:
        means["residual"], _ = predict_dataset(loaded_model, str(path), n_workers=n_workers,
                                               **select)
        commands["residual"] = [_cmd("predict", "--model", model, *where, "--out",
                                     "residual.npz")]
        bar.update()
        if samples >= 2:
            sampled, _ = predict_dataset(loaded_model, str(path), samples=samples, seed=seed,
                                         n_workers=n_workers, **select)
            commands["sampled"] = [_cmd("predict", "--model", model, *where, "--samples",
                                        samples, "--seed", seed, "--out", "sampled.npz")]
        bar.update()
    noise_only = None
    if noise_only_policy is not None:
        noise_only, _ = predict_dataset(loaded_model, str(path), samples=samples, seed=seed,
                                        n_workers=n_workers, policy=noise_only_policy,
                                        **select)
        bar.update()
    scale = dict(side_m=getattr(layout, "side_m", None),
                 radius_of_gyration_m=layout.radius_of_gyration_m)
    mean_scores = {k: score_trajectories(p, recordings, **scale) for k, p in means.items()}
    scores = {_LABELS[k]: score.aggregate() for k, score in mean_scores.items()}
    sampled_score = None
    if sampled is not None:
        sampled_score = score_trajectories(sampled, recordings, **scale)
        scores[f"residual model, {samples} samples"] = sampled_score.aggregate()
    table = _error_table(scores, split, len(recordings))
    if sampled_score is not None:
        table = _headline(scores[f"residual model, {samples} samples"], samples) + table
    score_commands = "".join(
        f"<li><code>{html.escape(c)}</code> then <code>residualsim score --pred "
        f"{html.escape(c.rsplit(' ', 1)[-1])}</code></li>"
        for cs in commands.values() for c in cs)
    sections = [("Errors", table + f"<p>Reproduce the rows:</p><ul>{score_commands}</ul>")]
    decomposed = None
    if sampled_score is not None:
        rows = [decomposition_row(ROWS[0][0], mean_scores["residual"])]
        if noise_only is not None:
            rows.append(decomposition_row(ROWS[1][0],
                                          score_trajectories(noise_only, recordings, **scale)))
        rows.append(decomposition_row(ROWS[2][0], sampled_score))
        decomposed = {"count": len(recordings), "split": split, "samples": samples,
                      "seed": seed, "rows": rows, "ratios": decomposition_ratios(rows)}
        again = _cmd("uncertainty", "--model", model, *where, "--samples", samples,
                     "--seed", seed)
        if noise_only is None:
            absent = ("the model has no state noise, so there is no row (b)"
                      if loaded_model.state_noise is None else
                      "row (b) was not run (report --no-decomposition)")
        else:
            absent = (f"(b) starts each of its {samples} samples from the same drawn initial "
                      "state as the same sample of (c) and applies the mean residual at every "
                      "contact")
        sections.append(("Where the spread comes from", (
            "<p>The recordings predicted three ways and scored alike, as "
            "<code>residualsim uncertainty</code> does: (a) the mean prediction, (b) "
            "initial-state noise with the mean residual, (c) the model as sampled (state "
            "noise and sampled residual). Energy scores in metres, lower is better; the pose "
            f"scores weigh rotation by the radius of gyration r<sub>g</sub> = "
            f"{layout.radius_of_gyration_m:.4g} m; along the trajectory: the mean over time. "
            f"{html.escape(absent)}.</p>" + _decomposition_html(decomposed)
            + f"<p>Reproduce: <code>{html.escape(again)}</code></p>")))

    figures: list[_Figure] = []
    shown = list(recordings)[:max_figures]
    report_command = _cmd("report", *(["--model", model] if model else []),
                          *(["--calibration", calibration] if calibration else []), *where,
                          "--samples", samples, "--seed", seed, "--figures", max_figures,
                          "--out", out)
    zero_residual = []
    for traj_id in shown:
        png = _trajectory_figure(recordings[traj_id], {k: p[traj_id] for k, p in means.items()},
                                 sampled[traj_id] if sampled is not None else None)
        bands = (f" Bands: the central 50 % and 90 % of {samples} sampled residual rollouts "
                 f"(seed {seed}) at each time." if sampled is not None else "")
        if "residual" in means and _coincide(means["residual"][traj_id],
                                             means["calibrated"][traj_id]):
            zero_residual.append(traj_id)
            bands += (" The residual is zero here: the residual model's mean prediction is "
                      "the calibrated engine's own (the policy's mean residual is zero at "
                      "every contact), so the calibrated engine's line lies hidden under the "
                      "model's line." if loaded_cal is None else
                      " The residual model's mean prediction coincides with the calibrated "
                      "engine's here, so the calibrated engine's line lies hidden under the "
                      "model's line.")
        figures.append(_Figure(
            f"Recording {traj_id}", png,
            "Recorded (dashed) against each prediction from the recorded first state: base "
            "link x, y, z (m, world frame) and the angle turned since the first sample "
            "(deg)" + (", joints (rad or m)" if recordings[traj_id].n_joints else "") + "."
            + bands + " The predictions are those of the commands under Errors.",
            [report_command]))
        bar.update()
    per_recording = "".join(_figure_html(f) for f in figures)
    if len(recordings) > len(shown):
        per_recording += (f"<p>{len(recordings) - len(shown)} more recordings are in the "
                          f"table but not drawn (--figures N draws more).</p>")
    sections.append(("Trajectories", per_recording))

    if loaded_cal is not None:
        text, posterior_figures = _posterior_section(Path(calibration), loaded_cal.summary)
        sections.append(("Calibration", text + "".join(_figure_html(f)
                                                       for f in posterior_figures)))
        figures += posterior_figures
    bar.update()
    if sampled_score is not None:
        from residualsim.evaluation.plots import reliability_plot

        names = {"final_xy": "final position on the table (x-y)",
                 "final": "final position (3D)"}
        curves = {names[k]: v for k, v in sampled_score.reliability().items() if k in names}
        reliability = _Figure(
            "Reliability", _png_from_file_writer(lambda p: reliability_plot(
                curves, p, n_samples=samples, title=f"{len(recordings)} recordings, "
                f"S = {samples}")),
            "Coverage of the central 10 %..90 % sample regions of the final position (3D and "
            "on the table plane) against their level; below the diagonal: overconfident. "
            "At rest the samples barely spread in height, so the 3D regions are thin: read "
            "the x-y curve for where the object ends up.",
            commands["sampled"] + ["residualsim score --pred sampled.npz --plot rel.png"])
        figures.append(reliability)
        sections.append(("Reliability", _figure_html(reliability)))
    bar.update()
    bar.close()
    shown_model = (f"model {_name(model)} on " if model is not None
                   else f"calibration {_name(calibration)} on ")
    title = (f"residualsim report: {shown_model}{_name(path)} ({scene}, {split} split)")
    page = _page(title, sections)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, page)
    return {"out": str(out), "bytes": len(page.encode()), "figures": len(figures),
            "recordings": len(recordings), "drawn": len(shown), "split": split,
            "zero_residual": zero_residual,
            "decomposition": None if decomposed is None else {
                "rows": [{k: v for k, v in row.items() if k != "score"}
                         for row in decomposed["rows"]],
                "ratios": decomposed["ratios"]},
            "seconds": time.perf_counter() - started}
