"""Issue 29, question 6: what settings chosen for one privacy mode cost when carried into the other.

    python benchmarks/estimates_modes.py [--quick] [--seeds 0 1 2 3 4] [--out benchmarks/results/estimates]

``scenarios/flwr_default.yaml`` is written for ``privacy.mode: per_round`` (30 rounds, Theorem 2's step x 60,
sphere clip c1 = 3, last iterate).  Switched to ``privacy.mode: total`` it keeps those settings, because the
total-budget defaults fill only unset fields.  On the privacy-cost table's problems (benchmarks/privacy_cost.py,
pooled FPCA K = 10, n = 100000, total eps = 1, delta = 1e-5) this script measures the privacy cost of

- ``per-round settings in total mode``: flwr_default.yaml's algorithm and clip with ``mode: total``;
- ``total-budget defaults``: the same scenario without those fields (today's total defaults);
and prints what :func:`fdp_flower.algorithms.fdp_admm.mode_rules.mode_mismatches` says about the first.
Both through the package's batched engine; the exact estimator as in privacy_cost.py.
Writes modes.md and modes.json to --out.
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import yaml

warnings.filterwarnings("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import estimates_floor as EF  # noqa: E402
import privacy_cost as PC  # noqa: E402

from fdp_flower.algorithms.fdp_admm.mode_rules import mode_mismatches  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CELLS = (("paper", 0.5, "l1", 50), ("paper", 0.9, "l2", 20))


def per_round_fields() -> tuple[dict, dict]:
    data = yaml.safe_load((ROOT / "scenarios" / "flwr_default.yaml").read_text())
    algorithm = {k: v for k, v in data["algorithm"].items() if k in ("rounds", "step")}
    return algorithm, {"clip_c1": data["model"]["clip_c1"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--out", default="benchmarks/results/estimates")
    ap.add_argument("--quick", action="store_true", help="seed 0 only")
    args = ap.parse_args()
    from fdp_flower.engines.batched import run_batched

    seeds = [0] if args.quick else args.seeds
    algorithm, model = per_round_fields()
    switched = yaml.safe_load((ROOT / "scenarios" / "flwr_default.yaml").read_text())
    switched["privacy"]["mode"] = "total"
    rule = [f"{'refuse' if m.refuse else 'warn'}: {m.message}" for m in mode_mismatches(switched)]
    rows = []
    for design, tau, pen, m in CELLS:
        for seed in seeds:
            sc = PC.scenario(design, m, pen, tau, seed)
            data = PC._setup(sc)
            w_exact, mise, _ = EF.exact_and_floor(sc, data, Path.home() / ".cache" / "fdp-flower-estimates")
            variants = {"per-round settings in total mode": PC.scenario(design, m, pen, tau, seed, algorithm=algorithm,
                                                                        model=model),
                        "total-budget defaults": sc}
            results = run_batched(list(variants.values()), history=False)
            zero = np.zeros_like(data.beta)
            for (name, s), res in zip(variants.items(), results):
                d = PC._setup(s)
                w_ex, mise_s, _ = PC.exact_on_features(s, d) if s is not sc else (w_exact, mise, None)
                rows.append({"design": design, "tau": tau, "penalty": pen, "M": m, "seed": seed, "what": name,
                             "dist": PC._mise_of(s, d, res.estimate_w - w_ex, zero), "exact_mise": mise_s,
                             "rounds": s.algorithm.rounds})
            print(f"{design} tau={tau} {pen} M={m} seed={seed} done", flush=True)
    lines = ["Privacy cost (ratio of means over seeds " + ", ".join(map(str, seeds)) + ") at total eps = 1:", "",
             "| cell | per-round settings in total mode | total-budget defaults | ratio |", "|---|---|---|---|"]
    for design, tau, pen, m in CELLS:
        costs = {}
        for name in ("per-round settings in total mode", "total-budget defaults"):
            sel = [r for r in rows if (r["design"], r["tau"], r["penalty"], r["M"], r["what"]) == (design, tau, pen, m, name)]
            costs[name] = PC.ratio_of_means(np.array([r["dist"] for r in sel]), np.array([r["exact_mise"] for r in sel]))
        a, b = costs["per-round settings in total mode"], costs["total-budget defaults"]
        lines.append(f"| {design} tau={tau:g} {pen} M={m} | {a[0]:.3f} +- {a[1]:.3f} | {b[0]:.3f} +- {b[1]:.3f} | "
                     f"{a[0] / b[0]:.1f} |")
    lines += ["", "What mode_mismatches says about scenarios/flwr_default.yaml with privacy.mode: total:", ""]
    lines += [f"- {r}" for r in rule]
    text = "\n".join(lines) + "\n"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "modes_quick" if args.quick else "modes"
    (out / f"{name}.md").write_text(text)
    (out / f"{name}.json").write_text(json.dumps(rows, indent=1, default=float))
    print(text)


if __name__ == "__main__":
    sys.exit(main())
