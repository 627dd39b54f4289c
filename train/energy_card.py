"""Write the model card of a model trained with ``train --objective energy``: how it was
trained (from its ``model.json``) and the decomposition of its predictive uncertainty on
held-out splits (the JSON files of ``residualsim uncertainty --out``).

    residualsim uncertainty --model M --split validation --samples 32 --out val.json
    residualsim uncertainty --model M --split test --samples 32 --out test.json
    python train/energy_card.py --model M --decomposition val.json test.json \\
        [--compare-with OTHER_VAL.json OTHER_TEST.json --compare-name "scalar spread"]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _row(result: dict, name: str) -> dict:
    return next(row for row in result["rows"] if row["row"] == name)


def _headline(results: list[dict], label: str) -> list[str]:
    """One table line per split: energy scores of (a), (b), (c), the ratios, coverage."""
    lines = []
    for result in results:
        a, b, c = (_row(result, n) for n in ("deterministic", "state noise",
                                              "state noise + residual"))
        ratios = result["ratios"]
        lines.append(
            f"| {label} | {result['split']} ({result['count']}) | "
            f"{a['energy_score_m']:.4f} / {b['energy_score_m']:.4f} / "
            f"{c['energy_score_m']:.4f} | "
            f"{a['trajectory_energy_score_pose_m']:.4f} / "
            f"{b['trajectory_energy_score_pose_m']:.4f} / "
            f"{c['trajectory_energy_score_pose_m']:.4f} | "
            f"{ratios['c_over_b']['energy_score_m']:.3f} / "
            f"{ratios['c_over_b']['trajectory_energy_score_pose_m']:.3f} | "
            f"{ratios['c_over_a']['energy_score_m']:.3f} / "
            f"{ratios['c_over_a']['trajectory_energy_score_pose_m']:.3f} | "
            f"{100 * c['coverage_xy_50']:.0f} / {100 * c['coverage_xy_90']:.0f} % | "
            f"{100 * c['coverage_50']:.0f} / {100 * c['coverage_90']:.0f} % |")
    return lines


def card(model_dir: Path, decompositions: list[dict], compare: list[dict] | None,
         compare_name: str) -> str:
    from residualsim.experiments.uncertainty import format_decomposition
    from residualsim.residual.energy_loss import VALIDATION_SAMPLES

    model = json.loads((model_dir / "model.json").read_text())
    info, figures = model["info"], model["info"]["figures"]
    config = info["config"]
    noise = model.get("state_noise") or {}
    observed = model.get("observation_noise") or {}
    lines = [
        f"# Model card: {model_dir.name}",
        "",
        "A residual contact model trained as a stochastic simulator: `train --objective "
        "energy` (train/README.md §25). The loss is the energy score of "
        f"{config['samples']} sampled trajectories per training recording (antithetic "
        "pairs, common random numbers), along the trajectory on pose points (position, "
        "rotation weighted by the radius of gyration), so the mixture's means, scales and "
        "weights and the start's width are trained together. No spread is fitted "
        f"afterwards (spread {model.get('spread', 1.0):g}).",
        "",
        f"* command: `{info.get('command')}`",
        f"* scene {model['scene']}, {model['settings']['substeps']} substeps, "
        f"dt {model['settings']['dt_s']:.6g} s; engine parameters {model['params']}",
        f"* network: hidden {config['hidden']}, {config['n_components']} components, "
        f"{figures['n_parameters']} trained numbers (the last: log of the start width); "
        f"CMA, sigma {config['sigma']}, budget {config['budget']}, "
        f"{figures['evaluations']} evaluations, chosen at {figures['chosen_evaluation']}, "
        f"{figures['seconds'] / 60:.0f} min on {figures['workers']} workers",
        f"* training recordings {info['n_train']}, validation {info['n_validation']} "
        f"({info.get('split')})",
        f"* start width: factor {noise.get('factor', 1.0):.3g} on the free-flight estimate "
        f"(velocity s.d. {noise.get('velocity_std_mps')} m/s, angular "
        f"{noise.get('omega_std_radps')} rad/s)",
        f"* pose noise: offset s.d. {1000 * observed.get('offset_std_m', 0):.3f} mm, "
        f"jitter {1000 * observed.get('jitter_std_m', 0):.3f} mm; table height "
        f"{1000 * (model['params'].get('table_height_m') or 0):.3f} mm",
        f"* validation during training ({VALIDATION_SAMPLES} samples): energy score along the trajectory "
        f"{figures['validation_energy_score_m']:.4f} m (the start "
        f"{figures['start_validation_energy_score_m']:.4f} m, the engine with the "
        f"estimated state noise {figures['engine_validation_energy_score_m']:.4f} m); mean "
        f"prediction position RMSE {figures['validation_rmse_m']:.4f} m (engine "
        f"{figures['engine_validation_rmse_m']:.4f} m)",
        "",
        "## Held-out decomposition",
        "",
        "(a) mean prediction, (b) state noise with the mean residual, (c) the model as "
        "sampled. Energy scores in metres (final position; pose along the trajectory); "
        "coverage of the final position's 50 / 90 % sample regions.",
        "",
        "| model | split | ES final position (a) / (b) / (c) | ES pose along trajectory "
        "(a) / (b) / (c) | (c)/(b) final / trajectory | (c)/(a) final / trajectory | "
        "x-y coverage (c) | 3-D coverage (c) |",
        "|---|---|---|---|---|---|---|---|",
        *_headline(decompositions, "this model"),
        *(_headline(compare, compare_name) if compare else []),
        "",
    ]
    for result in decompositions:
        lines += [f"### {result['split']} split", "", format_decomposition(result)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, type=Path)
    parser.add_argument("--decomposition", nargs="+", required=True, type=Path)
    parser.add_argument("--compare-with", nargs="*", type=Path)
    parser.add_argument("--compare-name", default="scalar spread")
    args = parser.parse_args(argv)
    from residualsim.atomic import atomic_write_text

    load = [json.loads(p.read_text()) for p in args.decomposition]
    compare = [json.loads(p.read_text()) for p in args.compare_with or []]
    atomic_write_text(args.model / "MODEL_CARD.md", card(args.model, load, compare,
                                                         args.compare_name))


if __name__ == "__main__":
    main()
