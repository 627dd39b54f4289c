"""Which calibrated parameters the data determined, as an exported URDF records it.

``calibrate --export-urdf`` writes a URDF whose numbers look alike whether the data pinned
them or left them where they started (issue 67: "an exported URDF records which of its
parameters were determined"). :func:`urdf_note` is the XML comment put at the top of its
``<robot>``, from the run's summary:

- ``written``: which set the file holds (the calibrated one, or the held-out guard's
  ``contact`` or ``default`` set instead);
- ``determined`` / ``weak``: lsq's body stage judges the body and joint names on the free
  flight (its weak directions: a name in one is weak, the rest determined); MH and the
  sandwich give each name its 90 % interval (the posterior's, or the Gaussian's); names no
  method judged (nevergrad, lsq's contact coefficients) are listed as not judged;
- ``not written``: calibrated names the file does not hold (the guard kept another set).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from residualsim.sysid.bodyspace import is_body_name
from residualsim.sysid.identifiability import describe

__all__ = ["determination", "urdf_note", "NOTE_MARK"]

#: How a comment this module wrote begins (an export over an exported URDF replaces it).
NOTE_MARK = "residualsim calibrate:"
_WRITTEN = {"calibrated": "the calibrated set",
            "contact": "the held-out guard's 'contact' set (the URDF's own body with the "
                       "calibrated contact; the calibrated body predicted held-out "
                       "recordings worse)",
            "default": "the held-out guard's 'default' set (PyBullet's defaults; the "
                       "calibrated set predicted held-out recordings worse)"}


def determination(summary: Mapping[str, Any]) -> dict[str, Any]:
    """``{"written", "determined", "weak", "weak_directions", "intervals", "not_judged",
    "not_written"}`` of a calibrate summary (module doc)."""
    names = list(summary.get("calibrated") or [])
    choice = summary.get("held_out_choice") or "calibrated"
    written = [n for n in names if choice == "calibrated"
               or (choice == "contact" and not is_body_name(n))]
    weak_directions, judged = [], set()
    for stage in summary.get("lsq_stages") or []:
        if stage.get("stage") == "body":
            judged.update(stage.get("names") or [])
            weak_directions += stage.get("weak_directions") or []
    weak = {n for d in weak_directions for n in d.get("members", {})}
    low, high = summary.get("q05") or {}, summary.get("q95") or {}
    intervals = {n: (low[n], high[n]) for n in written if n in low and n in high}
    return {"written": choice,
            "determined": [n for n in written if n in judged and n not in weak],
            "weak": [n for n in written if n in weak],
            "weak_directions": [describe(d) for d in weak_directions
                                if set(d.get("members", {})) & set(written)],
            "intervals": intervals,
            "not_judged": [n for n in written if n not in judged and n not in intervals],
            "not_written": [n for n in names if n not in written]}


def urdf_note(summary: Mapping[str, Any]) -> str:
    """The exported URDF's comment (module doc), lines of plain text, no ``--``."""
    found = determination(summary)
    lines = [f"{NOTE_MARK} method {summary.get('method')}; this file holds "
             f"{_WRITTEN.get(found['written'], found['written'])}."]
    if found["determined"]:
        lines.append("determined by the free flight (lsq's body stage): "
                     + ", ".join(found["determined"]))
    if found["weak"]:
        lines.append("weak, not determined by the free flight (searched on the first "
                     "contact, else near the URDF's values): " + ", ".join(found["weak"]))
        lines += [f"  weak direction: {text}" for text in found["weak_directions"]]
    if found["intervals"]:
        lines.append("90 % intervals (the posterior's): " + ", ".join(
            f"{n} {lo:.4g}..{hi:.4g}" for n, (lo, hi) in found["intervals"].items()))
    if found["not_judged"]:
        lines.append("not judged by this method (fitted, how well determined unknown): "
                     + ", ".join(found["not_judged"]))
    if found["not_written"]:
        lines.append("calibrated but not in this file (the URDF's own values): "
                     + ", ".join(found["not_written"]))
    lines.append("everything else: the source URDF's values; summary.json has the figures")
    text = "\n".join(lines).replace("--", "- -")
    return f" {text}\n" if not text.endswith("-") else f" {text} \n"
