"""The recordings a calibration fits, and the ones it holds out.

:func:`load_calibration_data` reads a data set once (trajectories or planar impacts),
splits it (the hash split or explicit id lists, :mod:`residualsim.data.splits`) and
returns a :class:`CalibrationData`: the training recordings the search fits (at most
``max_items`` of them), the validation split, and the training recordings that
``max_items`` left out (``unused``). The held-out guard
(:mod:`residualsim.sysid.held_out`) scores candidates on the validation split together
with up to :data:`MAX_UNUSED_HELD_OUT` of the unused ones: no search saw them, and ten
validation recordings decided the guard noisily (train/README.md §22: contact alone
scored 49.7 mm on 10 validation tosses against the defaults' 44.7 mm, and 40.8 mm on the
test split).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from residualsim.errors import DataError, ParameterError
from residualsim.sim.scenes import make_scene

__all__ = ["CalibrationData", "load_calibration_data", "MAX_UNUSED_HELD_OUT"]

#: At most this many of the training recordings ``max_items`` leaves unused join the
#: held-out guard's set (the first ones in the split's order): each costs one rollout per
#: guard candidate (three at most), so 200 bound the guard to ~600 rollouts.
MAX_UNUSED_HELD_OUT = 200


@dataclass(frozen=True)
class CalibrationData:
    """A calibration's recordings: ``kind`` "trajectories" (``train``, ``validation``,
    ``unused`` and ``held_out`` dicts of id → Trajectory) or "impacts" (PlanarImpacts);
    each None when empty. ``unused``: training recordings beyond ``max_items``, in the
    split's order, at most :data:`MAX_UNUSED_HELD_OUT`; ``held_out``: the guard's set,
    ``validation`` and ``unused`` together; ``duplicates``: a note naming recordings that
    repeat one another (:mod:`residualsim.data.duplicates`). With ``split`` "all"
    ``validation`` is the validation split's ids (fitted too: the caller must not hold them
    out), and ``unused`` and ``held_out`` the recordings ``max_items`` left out (None when
    it left none: nothing is held out)."""

    kind: str
    train: Any
    validation: Any
    unused: Any = None
    held_out: Any = None
    #: Recordings that repeat one another (a one-line note; None: none do).
    duplicates: str | None = None
    #: The split fitted: "all" fits the validation split too (not held out).
    split: str = "train"

    def held_out_counts(self) -> dict[str, int]:
        """How many recordings (impacts) of each kind the guard's set holds."""
        def count(part: Any) -> int:
            if part is None:
                return 0
            return part.n_impacts if self.kind == "impacts" else len(part)
        validation = 0 if self.split == "all" else count(self.validation)
        return {"validation": validation, "unused_training": count(self.unused)}


def load_calibration_data(scene: str, data: Path, split: str, max_items: int | None,
                          split_seed: int = 0, fractions: Sequence[float] | None = None,
                          lists: Mapping[str, Sequence[str]] | None = None
                          ) -> CalibrationData:
    """The recordings of ``data`` for ``scene``: ``split`` "train" (fit the training split)
    or "all" (fit everything; nothing held out);
    the hash split (``fractions``, seed ``split_seed``) or explicit id ``lists``. A
    DataError names ``data`` when it holds nothing the scene can replay."""
    from residualsim.data import detect_format, load_impacts, load_trajectories
    from residualsim.data.duplicates import duplicate_groups, duplicates_note
    from residualsim.sim.recordings import prepare_recordings

    if split not in ("train", "all"):
        raise ParameterError(f"split must be 'train' or 'all', got {split!r}")
    layout = make_scene(scene)
    if detect_format(data) == "mcube":
        if not layout.planar:
            raise DataError(f"{data}: planar impacts need a planar scene, not {scene!r}")
        impacts = load_impacts(data, convention="corrected")
        parts = _parts(impacts.rows.tolist(), split_seed, fractions, lists)
        rows = impacts.rows.tolist() if split == "all" else [int(r) for r in parts["train"]]
        kept, left = _cut(rows, max_items, split)
        validation = impacts.subset(parts["validation"]) if parts["validation"] else None
        held = ([] if split == "all" else [int(r) for r in parts["validation"]]) + left
        return CalibrationData("impacts", impacts.subset(kept), validation,
                               impacts.subset(left) if left else None,
                               impacts.subset(held) if held else None, split=split)
    trajectories = load_trajectories(data)
    if not trajectories:
        raise DataError(f"{data}: no recordings found")
    planar = {t.planar for t in trajectories.values()}
    if planar != {layout.planar}:
        raise DataError(f"{data}: {'planar' if layout.planar else '3D'} scene {scene!r} "
                        f"cannot replay {'3D' if layout.planar else 'planar'} recordings")
    trajectories = prepare_recordings(scene, trajectories)
    parts = _parts(list(trajectories), split_seed, fractions, lists)
    if split == "train":  # an empty one is refused, a small set's sizes are stated
        from residualsim.data.splits import check_split, split_rule

        check_split(parts, "train", str(data), split_rule(fractions, lists))
    train_ids, left = _cut(list(trajectories) if split == "all" else parts["train"],
                           max_items, split)
    if not train_ids:
        raise DataError(f"{data}: the {split} split is empty ({len(trajectories)} recordings)")
    validation = {k: trajectories[k] for k in parts["validation"]}
    unused = {k: trajectories[k] for k in left}
    held = unused if split == "all" else {**validation, **unused}
    groups = duplicate_groups(trajectories)
    note = duplicates_note(groups, {"train": set(train_ids), "held out": set(held)}) \
        if groups else None
    return CalibrationData("trajectories", {k: trajectories[k] for k in train_ids},
                           validation or None, unused or None, held or None, note, split)


def _cut(ids: list, max_items: int | None, split: str) -> tuple[list, list]:
    """(the first ``max_items`` ids, the unused ones the guard scores, at most
    :data:`MAX_UNUSED_HELD_OUT`; with ``split`` "all" too: no search saw them, issue 67)."""
    if max_items is None:
        return ids, []
    return ids[:max_items], ids[max_items:][:MAX_UNUSED_HELD_OUT]


def _parts(ids: list, seed: int, fractions: Sequence[float] | None,
           lists: Mapping[str, Sequence[str]] | None) -> dict[str, list[str]]:
    from residualsim.data.splits import DEFAULT_FRACTIONS, split_from_lists, split_ids

    if lists is not None:
        return split_from_lists([str(i) for i in ids], **lists)
    return split_ids(ids, fractions=fractions or DEFAULT_FRACTIONS, seed=seed)
