"""Benchmark of the FDP-ADMM intercept through the Python API (issue 14): how far the fitted intercept is
from the truth, private and not, at several quantile levels, next to the derived standard deviations.

Design: the paper's simulation (Zhou & Xiang 2022, Section 5) on a 60-point grid with a large offset added to
the response, y = 8 + int beta X + e - F^{-1}(tau), e ~ t(3), so the tau-quantile of y given X is
8 + int beta X; n = 10000 rows split over M = 10 clients, the cosine basis with K = 10, no penalty
(so that nothing but the noise separates the private fit from the exact one), the API's defaults
otherwise (total eps = 1, delta = 1e-5, 80 rounds, constant step 3, tail average of the last 40).

Columns: the mean and sd over R data-and-noise seeds of (intercept - 8), private (eps = 1) and without
noise (F-ADMM), and the sds the intercept test derives (tests/test_intercept.py: statistical
sqrt(tau (1 - tau)) / (f(q_tau) sqrt(n)); noise sigma / (sqrt(M T) eta' c0 f(q_tau))).

Usage:  python benchmarks/api_intercept.py [--reps R] [--out benchmarks/results/api_intercept]
Writes README.md (table) and results.json to the output directory.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import fdp_flower  # noqa: E402
from fdp_flower.algorithms.fdp_admm.plan import NoisePlan  # noqa: E402
from fdp_flower.functional import design  # noqa: E402

OFFSET, N, CLIENTS, TAIL, ETA, RHO, C0 = 8.0, 10_000, 10, 40, 3.0, 0.1, 1.5
TAUS = (0.1, 0.25, 0.5, 0.75, 0.9)


def derived_sds(tau: float, sigma: float) -> tuple[float, float]:
    f = stats.t.pdf(stats.t.ppf(tau, 3), 3)
    stat = np.sqrt(tau * (1 - tau)) / (f * np.sqrt(N))
    noise = sigma / (np.sqrt(CLIENTS * TAIL) * ETA / (1 + RHO * ETA) * C0 * f)
    return float(stat), float(noise)


def run(reps: int) -> dict:
    grid = design.default_grid(60)
    out: dict = {"reps": reps, "rows": []}
    for tau in TAUS:
        private, plain, mise_p, mise_0 = [], [], [], []
        for seed in range(reps):
            d = design.simulate_slice(100 + seed, 0, N, tau=tau, grid=grid)
            common = dict(grid=grid, tau=tau, n_clients=CLIENTS, seed=seed, penalty="none", reference=False)
            m = fdp_flower.fit(d.curves, d.response + OFFSET, eps=1.0, **common)
            m0 = fdp_flower.fit(d.curves, d.response + OFFSET, eps=None, **common)
            private.append(m.intercept - OFFSET)
            plain.append(m0.intercept - OFFSET)
            mise_p.append(m.mise(design.true_beta))
            mise_0.append(m0.mise(design.true_beta))
        _eta, _sens, sigma = NoisePlan(m.scenario, m.w.size).release(1, np.array([N // CLIENTS]))
        stat, noise = derived_sds(tau, float(sigma[0]))
        out["rows"].append({"tau": tau, "sigma": float(sigma[0]), "eps": m.privacy.eps,
                            "private_mean": float(np.mean(private)), "private_sd": float(np.std(private, ddof=1)),
                            "plain_mean": float(np.mean(plain)), "plain_sd": float(np.std(plain, ddof=1)),
                            "derived_stat_sd": stat, "derived_total_sd": float(np.hypot(stat, noise)),
                            "mise_private": float(np.mean(mise_p)), "mise_plain": float(np.mean(mise_0))})
        print(out["rows"][-1], flush=True)
    return out


def table(results: dict) -> str:
    lines = ["| tau | private: mean error | sd | derived sd | MISE | no noise: mean error | sd | derived sd | MISE |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results["rows"]:
        lines.append(f"| {r['tau']:g} | {r['private_mean']:+.3f} | {r['private_sd']:.3f} | "
                     f"{r['derived_total_sd']:.3f} | {r['mise_private']:.3f} | {r['plain_mean']:+.3f} | "
                     f"{r['plain_sd']:.3f} | {r['derived_stat_sd']:.3f} | {r['mise_plain']:.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "api_intercept"))
    args = parser.parse_args()
    t0 = time.perf_counter()
    results = run(args.reps)
    results["seconds"] = time.perf_counter() - t0
    results["machine"] = platform.platform()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    text = (f"# Intercept of FDP-ADMM through fdp_flower.fit\n\n`python benchmarks/api_intercept.py --reps "
            f"{args.reps}` ({results['seconds']:.0f} s, {results['machine']}); error = fitted intercept - 8, over "
            f"{args.reps} seeds of data and noise (n = {N}, M = {CLIENTS}, total eps = 1, delta = 1e-5).\n\n"
            + table(results) + "\n\nMISE: of beta_hat, the mean over the seeds, here without a penalty.\n")
    (out / "README.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
