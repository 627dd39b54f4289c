"""How many impacts begin and end inside one engine step, unseen by the event detector.

    python train/hidden_impacts.py --data $RESIDUALSIM_DATA/contactnets-cube \\
        [--calibrations data/pretrained/cube-contactnets/calibration-summary.json ...]

Contacts are read after each step (one recorded sample); a bounce that is over by then
leaves no touching point and is no contact event (:class:`residualsim.sim.rollout.
ContactGuard`). For each calibration (its substeps and parameters), the engine alone
replays the validation tosses from their first samples and counts the steps whose linear
velocity (m/s, world frame) changed by more than ``--jump`` beyond gravity's change
(:func:`residualsim.sim.rollout.velocity_jump`, the test ``ContactGuard.hidden_impact_mps``
applies), and of those the steps that ended with no touching point. The test split is not
read.
"""

from __future__ import annotations

import argparse
import json
import os

import pybullet as pb

from residualsim.data import load_trajectories
from residualsim.data.splits import split_ids
from residualsim.errors import run_script
from residualsim.sim.contact import is_touching
from residualsim.sim.engine import Engine
from residualsim.sim.recordings import prepare_recordings
from residualsim.sim.rollout import recording_settings, velocity_jump
from residualsim.sim.scenes import EngineParams


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.join(os.environ.get("RESIDUALSIM_DATA", ""),
                                                       "contactnets-cube"))
    parser.add_argument("--calibrations", nargs="+", default=[
        "data/pretrained/cube-contactnets/calibration-summary.json",
        "data/pretrained/cube-contactnets-5substep/calibration-summary.json"])
    parser.add_argument("--jump", type=float, default=0.3, help="m/s (default 0.3)")
    args = parser.parse_args()
    trajectories = prepare_recordings("cube", load_trajectories(args.data))
    validation = {k: trajectories[k] for k in split_ids(list(trajectories))["validation"]}
    for path in args.calibrations:
        with open(path) as handle:
            summary = json.load(handle)
        substeps = int(summary["settings"]["substeps"])
        settings = recording_settings("cube", validation, substeps)
        jumps = hidden = tosses = 0
        with Engine("cube", EngineParams(**summary["params"]), settings) as engine:
            scene = engine.scene
            for toss in validation.values():
                engine.reset(toss.state_at(0))
                seen = False
                for _ in range(toss.n_samples - 1):
                    before = scene.read_raw()
                    pb.stepSimulation(physicsClientId=engine.client)
                    if velocity_jump(engine, before, scene.read_raw()) > args.jump:
                        jumps += 1
                        points = pb.getContactPoints(scene.body, scene.static_body,
                                                     physicsClientId=engine.client)
                        if not any(is_touching(p) for p in points):
                            hidden += 1
                            seen = True
                tosses += seen
        print(json.dumps({"calibration": path, "substeps": substeps, "impulses": jumps,
                          "no_touching_point_after_the_step": hidden,
                          "tosses_with_one": tosses, "tosses": len(validation)}))


if __name__ == "__main__":
    run_script(main)
