"""Foundation benchmark (issue 2): F-ADMM against the exact solution, and eps = infinity vs the paper.

    python benchmarks/foundation.py [--reps 5] [--out benchmarks/results/foundation.md]

1. F-ADMM (privacy off) on the paper design, n = 100000, M = 10, K = 10, tau = 0.5, l1 and l2:
   rounds to a 1% relative objective gap, gap after 30 rounds, MISE vs the exact estimator's.
2. M = 10, eps = infinity, tau in {0.25, 0.5, 0.9}, l1 / l2: final MISE (mean over repetitions)
   next to the paper's Table 1 / Table 4 figures.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from fdp_flower.algorithms.fdp_admm.config import parse_scenario
from fdp_flower.engines.inprocess import run_fdp_admm
from fdp_flower.functional import design

PAPER_EPS_INF = {("l1", 0.25): 0.43536, ("l1", 0.5): 0.38291, ("l1", 0.9): 0.98044,
                 ("l2", 0.25): 0.27901, ("l2", 0.5): 0.20853, ("l2", 0.9): 0.49421}


def scenario(penalty: str, tau: float, seed: int, rounds: int):
    return parse_scenario({"name": f"fadmm-{penalty}-{tau}", "seed": seed,
                           "data": {"n_samples": 100_000}, "federation": {"num_clients": 10},
                           "basis": {"kind": "pooled", "n_components": 10},
                           "model": {"loss": {"kind": "quantile", "tau": tau}, "penalty": {"kind": penalty}},
                           "algorithm": {"rounds": rounds}, "privacy": {"enabled": False}})


def convergence(lines: list[str]) -> None:
    lines += ["## 1. F-ADMM vs the exact centralized solution (n = 100000, M = 10, K = 10, tau = 0.5)", "",
              "| penalty | first round with gap <= 1% | gap at round 30 | MISE at 30 | MISE at 100 | exact MISE | "
              "MISE(100) / exact | seconds |", "|---|---|---|---|---|---|---|---|"]
    for penalty in ("l1", "l2"):
        t0 = time.perf_counter()
        r = run_fdp_admm(scenario(penalty, 0.5, 0, 100))
        took = time.perf_counter() - t0
        gaps = [h["objective_gap"] for h in r.history]
        first = next(i + 1 for i, g in enumerate(gaps) if g <= 0.01)
        exact = float(design.mise(r.basis.function(r.reference.w), design.true_beta(r.basis.grid), r.basis.grid))
        m30, m100 = r.history[29]["mise"], r.history[-1]["mise"]
        lines.append(f"| {penalty} | {first} | {gaps[29]:.2e} | {m30:.4f} | {m100:.4f} | {exact:.4f} | "
                     f"{m100 / exact:.3f} | {took:.1f} |")
        print(lines[-1], flush=True)


def paper_eps_inf(lines: list[str], reps: int) -> None:
    lines += ["", f"## 2. eps = infinity, M = 10: final MISE (100 rounds, mean of {reps} repetitions) vs paper",
              "", "| penalty | tau | ours (mean +- sd) | paper | ours below paper |", "|---|---|---|---|---|"]
    for (penalty, tau), paper in PAPER_EPS_INF.items():
        values = [run_fdp_admm(scenario(penalty, tau, seed, 100), with_reference=False).history[-1]["mise"]
                  for seed in range(reps)]
        mean, sd = float(np.mean(values)), float(np.std(values, ddof=1)) if reps > 1 else 0.0
        lines.append(f"| {penalty} | {tau} | {mean:.4f} +- {sd:.4f} | {paper:.5f} | {'yes' if mean < paper else 'NO'} |")
        print(lines[-1], flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", default="benchmarks/results/foundation.md")
    args = parser.parse_args()
    lines = ["# Foundation benchmark (issue 2)", "",
             f"`python benchmarks/foundation.py --reps {args.reps}`; default step: Theorem 2 x 60; rho = 0.1, "
             "lam = 0.05, c1 = 3, pooled FPCA K = 10.", ""]
    t0 = time.perf_counter()
    convergence(lines)
    paper_eps_inf(lines, args.reps)
    lines += ["", f"Total time {time.perf_counter() - t0:.0f} s."]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
