"""What the checkout ships under its ``data/`` folder: bundled recordings and pretrained models.

* ``data/samples/cube-synthetic/``: eight synthetic cube tosses with known truth;
* the demo's real tosses are NOT in the checkout: :func:`demo_tosses` links eight tosses of
  the visible training split from the shared ContactNets set (``$RESIDUALSIM_DATA``, else
  ``../shared/data`` beside the checkout) into a folder of their own;
* ``data/pretrained/<name>/``: the shipped models, each with its model card.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["REPO_DATA_DIR", "SYNTHETIC_SAMPLES", "DEMO_TOSS_IDS", "demo_tosses",
           "shared_data_dir", "PRETRAINED", "PRETRAINED_CUBE"]

#: The checkout's ``data/`` folder.
REPO_DATA_DIR = Path(__file__).resolve().parents[2] / "data"
#: Synthetic cube tosses (ContactNets format) with their truth in ``synthetic.json``.
SYNTHETIC_SAMPLES = REPO_DATA_DIR / "samples" / "cube-synthetic"
#: The demo's real cube tosses: ids of the ContactNets set's visible TRAINING split (the
#: shipped model saw them, so the demo shows the pipeline, not generalisation).
DEMO_TOSS_IDS = ("8", "9", "11", "12", "14", "18", "19", "20")
#: The shipped model directory of each built-in scene.
PRETRAINED = {"cube": REPO_DATA_DIR / "pretrained" / "cube-contactnets",
              "planar-ellipse": REPO_DATA_DIR / "pretrained" / "planar-ellipse"}
#: The shipped cube model (calibrated engine + residual + state noise).
PRETRAINED_CUBE = PRETRAINED["cube"]


def shared_data_dir() -> Path:
    """The real data folder: ``$RESIDUALSIM_DATA``, else ``../shared/data`` beside the
    checkout."""
    import os

    configured = os.environ.get("RESIDUALSIM_DATA")
    return Path(configured) if configured else REPO_DATA_DIR.parents[1] / "shared" / "data"


def demo_tosses(data: str | Path | None = None) -> Path:
    """A folder ``<tmp>/residualsim-demo-<hash>/tosses/<id>.pt`` of symbolic links to the
    :data:`DEMO_TOSS_IDS` tosses of the ContactNets set in ``data`` (default
    ``shared_data_dir() / "contactnets-cube"``): real data is read where it lies, never
    copied into the project. DataError naming the folder when a toss is missing."""
    import hashlib
    import tempfile

    from residualsim.errors import DataError

    source = Path(data) if data is not None else shared_data_dir() / "contactnets-cube"
    source = source.resolve()
    missing = [i for i in DEMO_TOSS_IDS if not (source / "tosses" / f"{i}.pt").is_file()]
    if missing:
        raise DataError(f"{source}: the demo reads ContactNets tosses {', '.join(missing)} "
                        "from tosses/ there; set RESIDUALSIM_DATA to the folder holding "
                        "contactnets-cube/ or pass --data")
    key = hashlib.sha256(str(source).encode()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / f"residualsim-demo-{key}" / "tosses"
    folder.mkdir(parents=True, exist_ok=True)
    for toss in DEMO_TOSS_IDS:
        link = folder / f"{toss}.pt"
        if not link.is_symlink():
            link.unlink(missing_ok=True)
            try:
                link.symlink_to(source / "tosses" / f"{toss}.pt")
            except FileExistsError:  # another process made it meanwhile
                pass
    return folder.parent
