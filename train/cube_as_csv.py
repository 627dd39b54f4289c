"""The cube as a user's object: the shipped cube model's figures when the cube is a scene file
(``assets/cube.toml``) and its real tosses are plain CSV, against the built-in scene and
the ContactNets files.

Converts the visible ContactNets tosses to CSV twice (with the recorded velocities, and as
poses only, the velocities then estimated and the initial state fitted by rollout), and
scores the shipped model's mean prediction on the validation and test splits for each::

    python train/cube_as_csv.py --data ../shared/data/contactnets-cube [--workers 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
from pathlib import Path
from residualsim.errors import run_script

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.join(
        os.environ.get("RESIDUALSIM_DATA", "../shared/data"), "contactnets-cube"))
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)

    from residualsim.data import load_trajectories
    from residualsim.data.csv import save_csv_trajectories
    from residualsim.data.splits import select_recordings
    from residualsim.evaluation import score_trajectories
    from residualsim.residual.model import ResidualModel
    from residualsim.sim.recordings import load_recordings
    from residualsim.sim.rollout import predict_trajectories

    model = ResidualModel.load(ROOT / "data" / "pretrained" / "cube-contactnets")
    file_model = dataclasses.replace(model, scene=str(ROOT / "assets" / "cube.toml"))
    tosses = load_trajectories(args.data)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        with_velocities, poses_only = Path(tmp) / "velocities", Path(tmp) / "poses"
        save_csv_trajectories(with_velocities, tosses, with_velocities=True)
        save_csv_trajectories(poses_only, tosses, with_velocities=False)
        sets = {"built-in cube, .pt files": (model, tosses),
                "cube.toml, CSV with velocities": (
                    file_model, load_recordings(with_velocities, file_model.scene)),
                "cube.toml, CSV poses only": (
                    file_model, load_recordings(poses_only, file_model.scene))}
        for label, (chosen, recordings) in sets.items():
            for split in ("validation", "test"):
                subset = select_recordings(recordings, split)
                predictions, _ = predict_trajectories(chosen, subset, n_workers=args.workers)
                score = score_trajectories(predictions, select_recordings(tosses, split),
                                           side_m=0.1048).aggregate()
                rows.append({"set": label, "split": split, "tosses": len(subset),
                             "position_rmse_m": score["position_rmse_m"],
                             "rotation_error_deg": score["rotation_error_deg"]})
                print(json.dumps(rows[-1]), flush=True)
    return 0


if __name__ == "__main__":
    run_script(main)
