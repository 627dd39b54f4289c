"""Recorded data: readers, writers, splits and summaries.

* :mod:`~residualsim.data.contactnets`: the ContactNets cube tosses (``tosses/<id>.pt``).
* :mod:`~residualsim.data.mcube`: the MCube planar ellipse impacts.
* :mod:`~residualsim.data.npz`: residualsim's own ``<id>.npz`` trajectory files.
* :mod:`~residualsim.data.csv`: plain ``<id>.csv`` recordings (poses, joints, optional
  velocities), for any URDF body.
* :mod:`~residualsim.data.velocities`: velocities of poses-only recordings.
* :mod:`~residualsim.data.joint_recording`: joint angles and torques of an arm (arm + loop).
* :mod:`~residualsim.data.splits`: stable train/validation/test splits of ids.
* :mod:`~residualsim.data.datasets`: format detection and ``data info`` summaries.

torch and scipy are imported only inside the functions that need them, so importing this
package stays fast.
"""

from __future__ import annotations

from residualsim.data.contactnets import load_toss, load_tosses, write_toss
from residualsim.data.csv import (load_csv_trajectories, load_csv_trajectory, save_csv_trajectories,
                                  save_csv_trajectory)
from residualsim.data.datasets import describe, detect_format, format_description, load_trajectories
from residualsim.data.impacts import PlanarImpacts
from residualsim.data.joint_recording import JointRecording, load_joint_recording, save_joint_recording
from residualsim.data.mcube import load_impacts
from residualsim.data.npz import load_trajectory, save_trajectories, save_trajectory
from residualsim.data.splits import (load_split_ids, parse_split_fractions, split_from_lists,
                                     split_ids)
from residualsim.data.trajectory import Trajectory
from residualsim.data.velocities import VelocityEstimate, estimate_velocities

__all__ = [
    "Trajectory",
    "PlanarImpacts",
    "JointRecording",
    "load_joint_recording",
    "save_joint_recording",
    "load_toss",
    "write_toss",
    "load_tosses",
    "load_impacts",
    "save_trajectory",
    "load_trajectory",
    "load_trajectories",
    "save_trajectories",
    "split_ids",
    "parse_split_fractions",
    "split_from_lists",
    "load_split_ids",
    "load_csv_trajectory",
    "load_csv_trajectories",
    "save_csv_trajectory",
    "save_csv_trajectories",
    "estimate_velocities",
    "VelocityEstimate",
    "detect_format",
    "describe",
    "format_description",
]
