"""What the checkout ships under its ``data/`` folder: bundled recordings and pretrained models.

* ``data/samples/cube-synthetic/``: eight synthetic cube tosses with known truth;
* ``data/samples/contactnets-cube/``: a handful of real ContactNets tosses from the visible
  training split (BSD-3-Clause, attribution beside them), for ``residualsim demo``;
* ``data/pretrained/<name>/``: the shipped models, each with its model card.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["REPO_DATA_DIR", "SYNTHETIC_SAMPLES", "REAL_SAMPLES", "PRETRAINED",
           "PRETRAINED_CUBE"]

#: The checkout's ``data/`` folder.
REPO_DATA_DIR = Path(__file__).resolve().parents[2] / "data"
#: Synthetic cube tosses (ContactNets format) with their truth in ``synthetic.json``.
SYNTHETIC_SAMPLES = REPO_DATA_DIR / "samples" / "cube-synthetic"
#: Real cube tosses from the visible training split (ContactNets format).
REAL_SAMPLES = REPO_DATA_DIR / "samples" / "contactnets-cube"
#: The shipped model directory of each built-in scene.
PRETRAINED = {"cube": REPO_DATA_DIR / "pretrained" / "cube-contactnets",
              "planar-ellipse": REPO_DATA_DIR / "pretrained" / "planar-ellipse"}
#: The shipped cube model (calibrated engine + residual + state noise).
PRETRAINED_CUBE = PRETRAINED["cube"]
