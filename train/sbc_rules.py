"""Judge another covariance rule of the calibrated likelihood on finished SBC runs (issue 50).

    python train/sbc_rules.py runs/cc-hinge-default-20x60.jsonl --draws 19 --bins 5

``calibrate``'s default MH (λ = 0) samples its envelope alone: the Gaussian N(ẑ, Σ) in the
space's unit coordinates, truncated to the prior's box [0, 1]^d (the prior uniform there).
``check-calibration`` keeps, per data set, what that Gaussian was built from (the row's
``envelope``: ẑ, H, J, k, the bootstrap's replicates and the Σ sampled). So the ranks of any
other rule for Σ can be drawn here, in seconds, on the same data sets and truths, instead of
calibrating 50 data sets again. Rules (all unit coordinates):

- ``recorded``: the Σ MH sampled (this rule reproduces the run's own ranks in distribution);
- ``sandwich``: k H⁻¹(J + H)H⁻¹ alone;
- ``bootstrap``: the replicates' covariance times t(B − 1)'s factor alone;
- ``wider``: the default (:func:`residualsim.sysid.calibrated.wider` of the two);
- ``wider-shrunk``: as ``wider`` after the replicates' covariance, whitened by the
  sandwich's, is shrunk toward its mean eigenvalue by Ledoit and Wolf's (2004) intensity
  (scikit-learn's ``ledoit_wolf``): 10 replicates in d dimensions spread the eigenvalues
  (in 4-D, the largest of a sample covariance of 10 draws is ~2.8 times the truth's), and
  the widest of two covariances takes the spread as width.

Prints per rule and parameter the rank histogram, its chi-square p and the 90 % coverage
(:func:`residualsim.sysid.sbc.report`, as ``check-calibration`` summarises its own ranks).
Rows without an ``envelope`` (runs before it was kept, the raw likelihood's fallback) are
skipped and counted.
"""

from __future__ import annotations

import argparse
import json

import numpy as np


def truncated_gaussian(mode: np.ndarray, covariance: np.ndarray, count: int,
                       rng: np.random.Generator) -> np.ndarray:
    """``count`` draws (count, d) of N(mode, covariance) inside [0, 1]^d, by rejection:
    from the Gaussian, or (a Gaussian much wider than the box) from the uniform, accepted
    with the density relative to the mode's."""
    covariance = 0.5 * (covariance + covariance.T)  # rounding left some a hair asymmetric
    precision = np.linalg.inv(covariance)
    for proposal in ("gaussian", "uniform"):
        kept: list[np.ndarray] = []
        total = 0
        for _ in range(500):
            if proposal == "gaussian":
                z = rng.multivariate_normal(mode, covariance, size=max(1000, 4 * count))
            else:
                z = rng.random((max(1000, 4 * count), len(mode)))
                q = np.einsum("ni,ij,nj->n", z - mode, precision, z - mode)
                z = z[rng.random(len(z)) < np.exp(-0.5 * q)]
            z = z[np.all((z >= 0.0) & (z <= 1.0), axis=1)]
            kept.append(z)
            total += len(z)
            if total >= count:
                return np.concatenate(kept)[:count]
    raise RuntimeError(f"the Gaussian about {mode} puts too little mass in the box")


def covariances(envelope: dict, space) -> dict[str, np.ndarray]:
    """Each rule's Σ (d, d) for one row's ``envelope`` (see the module docstring)."""
    from sklearn.covariance import ledoit_wolf

    from residualsim.sysid.calibrated import wider
    from residualsim.sysid.weighting import sandwich_covariance, t_inflation

    sandwich = sandwich_covariance(np.asarray(envelope["information_unit"]),
                                   np.asarray(envelope["spread_unit"]),
                                   float(envelope["inflation"]))
    rules = {"recorded": np.asarray(envelope["covariance_unit"]), "sandwich": sandwich}
    record = envelope.get("bootstrap")
    if record is None:
        return rules
    units = space.to_unit(np.asarray(record["estimates"]))
    k_b = t_inflation(len(units) - 1)
    replicated = np.cov(units, rowvar=False) + 1e-12 * np.eye(units.shape[1])
    rules["bootstrap"] = k_b * replicated
    rules["wider"] = wider(sandwich, k_b * replicated)[0]
    values, vectors = np.linalg.eigh(sandwich)
    root = vectors @ np.diag(np.sqrt(np.maximum(values, 1e-300))) @ vectors.T
    whiten = np.linalg.inv(root)
    centred = (units - units.mean(axis=0)) @ whiten.T
    shrunk, _ = ledoit_wolf(centred, assume_centered=True)
    shrunk *= len(units) / (len(units) - 1)  # ledoit_wolf divides by B
    rules["wider-shrunk"] = wider(sandwich, k_b * root @ shrunk @ root.T)[0]
    return rules


def main(argv: list[str] | None = None) -> dict:
    from residualsim.errors import ParameterError
    from residualsim.sysid.paramspace import ParamSpace
    from residualsim.sysid.sbc import report

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", help="check-calibration's JSONL")
    parser.add_argument("--draws", type=int, default=19, help="L draws per data set")
    parser.add_argument("--bins", type=int, default=5, help="histogram bins (divide L + 1)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        with open(args.results) as handle:
            rows = [json.loads(line) for line in handle if line.strip()]
    except (OSError, ValueError) as exc:
        parser.error(f"{args.results}: {exc}")
    kept = [row for row in rows if (row.get("envelope") or {}).get("information_unit")]
    if not kept:
        parser.error(f"{args.results}: no row keeps its envelope (run check-calibration "
                     "with this version)")
    config = kept[0]["config"]
    space = ParamSpace(config["params"], bounds=config["bounds"], scene=config["scene"])
    results: dict[str, list] = {}  # per rule, rows as sbc.report reads them (unit coordinates)
    for row in kept:
        rng = np.random.default_rng([args.seed, row["index"]])
        truth = space.to_unit(np.array([[row["truth"][n] for n in space.names]]))[0]
        mode = space.to_unit(np.array([row["envelope"]["envelope_mode"]]))[0]
        for rule, covariance in covariances(row["envelope"], space).items():
            draws = truncated_gaussian(mode, covariance, args.draws, rng)
            low, high = np.quantile(truncated_gaussian(mode, covariance, 2000, rng),
                                    [0.05, 0.95], axis=0)
            results.setdefault(rule, []).append({
                "rank": dict(zip(space.names, np.sum(draws < truth, axis=0).tolist())),
                "truth": dict(zip(space.names, truth.tolist())),
                "q05": dict(zip(space.names, low.tolist())),
                "q95": dict(zip(space.names, high.tolist()))})
    out: dict = {"rows": len(rows), "with_envelope": len(kept), "rules": {}}
    print(f"{len(kept)} of {len(rows)} data sets keep their envelope")
    for rule, rule_rows in results.items():
        try:
            summary = report(rule_rows, args.draws, args.bins, space.names)
        except ParameterError as exc:
            parser.error(str(exc))
        out["rules"][rule] = {name: {"histogram": summary[name]["histogram"],
                                     "p": summary[name]["p_value"],
                                     "coverage90": summary[name]["coverage_90"]}
                              for name in space.names}
        for name, row in out["rules"][rule].items():
            print(f"{rule:13s} {name:24s} {row['histogram']} p {row['p']:.3f} "
                  f"coverage {row['coverage90']:.2f}")
    return out


if __name__ == "__main__":
    main()
