"""How close must a pose-only body be to hold held-out error within 1.2x the true model's?

On the synthetic hinge of ``train/own_object_body.py`` (its output folder: scenes, tosses,
truth), the TRUE model is scored on the test split with its body perturbed by the sizes
of error the identification leaves (issue 48's bars: principal moments within 10 %,
centres of mass within 3 mm, damping within 20 %): every link's inertia tensor scaled by
(1 + m s_l) (s_l = ±1, fixed signs per link and seed), its centre of mass moved by c
(a fixed random direction per link), the hinge damping by (1 + d s). Each row is the test
position RMSE over the true model's, mean over ``--seeds`` sign/direction draws.

    python train/body_sensitivity.py --run runs/own-object-body --workers 2
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np

from residualsim.errors import run_script

#: (moment factor m, centre-of-mass shift c in m, damping factor d) per row.
ROWS = [(0.0, 0.0, 0.0), (0.01, 0.0, 0.0), (0.03, 0.0, 0.0), (0.10, 0.0, 0.0),
        (0.0, 0.001, 0.0), (0.0, 0.003, 0.0), (0.0, 0.0, 0.2),
        (0.03, 0.001, 0.05), (0.10, 0.003, 0.2)]


def perturbed(truth, moment: float, shift_m: float, damping: float, seed: int):
    """``truth`` (BodyParams) with the perturbation of one row (see the module doc)."""
    from residualsim.sim.scenes.body import JointDynamics

    rng = np.random.default_rng([seed, 48])
    links = []
    for link in truth.links:
        sign = rng.choice((-1.0, 1.0))
        direction = rng.normal(size=3)
        direction /= np.linalg.norm(direction)
        links.append(dataclasses.replace(
            link, inertia=tuple((1 + moment * sign) * np.asarray(link.inertia)),
            com_m=tuple(np.add(link.com_m, shift_m * direction))))
    joints = tuple(JointDynamics(j.name, j.damping * (1 + damping * rng.choice((-1.0, 1.0))),
                                 j.friction) for j in truth.joints)
    return dataclasses.replace(truth, links=tuple(links), joints=joints)


def main(argv: list[str] | None = None) -> int:
    import own_object_body as study

    from residualsim.sim.scenes import EngineParams
    from residualsim.sim.scenes.params import ObjectParams

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", default="runs/own-object-body",
                        help="an own_object_body.py output folder (default %(default)s)")
    parser.add_argument("--seeds", type=int, default=3, help="draws per row (default 3)")
    parser.add_argument("--workers", type=int, default=2, help="default 2")
    args = parser.parse_args(argv)
    run = Path(args.run)
    user_scene, _, truth = study.write_scenes(run)
    data = run / "tosses"
    contact = EngineParams(**study.TRUTH_CONTACT)
    options = argparse.Namespace(workers=args.workers)
    true_rmse = study.held_out(user_scene, data, ObjectParams.of(contact, truth),
                               options)["position_rmse_m"]
    print(f"true body, user scene: test position RMSE {1000 * true_rmse:.2f} mm")
    print("| moments ±% | centres of mass, mm | damping ±% | test RMSE / true model's |")
    print("|---|---|---|---|")
    rows = []
    for moment, shift, damping in ROWS[1:]:
        ratios = [study.held_out(user_scene, data, ObjectParams.of(
            contact, perturbed(truth, moment, shift, damping, seed)), options)[
            "position_rmse_m"] / true_rmse for seed in range(args.seeds)]
        rows.append({"moment": moment, "com_m": shift, "damping": damping,
                     "ratios": ratios})
        print(f"| {100 * moment:.0f} | {1000 * shift:.0f} | {100 * damping:.0f} | "
              f"{np.mean(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f}) |", flush=True)
    (run / "body-sensitivity.json").write_text(json.dumps(
        {"true_rmse_m": true_rmse, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    run_script(main)
