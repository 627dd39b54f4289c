"""residualsim: residual contact learning for PyBullet scenes."""

from __future__ import annotations

__version__ = "0.1.0"
