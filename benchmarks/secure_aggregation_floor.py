"""Predicted privacy-cost floors per trust mode (issue 32): per-site DP, secure aggregation with
distributed Skellam noise, trusted aggregator (central DP), at total eps = 1, delta = 1e-5.

    python benchmarks/secure_aggregation_floor.py [--data-samples 20000 100000] [--seeds 2]
        [--out benchmarks/results/secure_aggregation]

Two tables in ``predicted_floor.md``:

1. closed form, eq. (9.13) of docs/secure_aggregation.md (:func:`fdp_flower.privacy.trust_modes.
   noise_floor_per_direction`): the floor's variance over the statistical variance in one FPCA
   direction, ellipsoid clip of radius 4, for tau in {0.5, 0.9}, n in {2e4, 1e5, 1e6} and M in
   {10, 50, 200, 1000} (equal sizes); it does not depend on the penalty;
2. on the paper design (``--data-samples``; n = 1e6 is possible but takes about an hour per seed):
   the ``floor`` column of benchmarks/results/privacy_utility/table.md (:func:`privacy_cost.noise_floor`:
   the expected int (beta_floor - beta_exact)^2 of one noisy gradient per site at the exact solution
   and an exact Newton step, over the mean exact MISE, total-budget defaults, K = 10 pooled FPCA) for
   per-site DP, and the same with the noise variance of each other mode (eqs. (9.14), (9.15)); the
   penalty enters through the Hessian (l2) and the exact estimator's error.

Secure aggregation tolerates t = max(1, M // 10) missing or colluding shares (each share inflated by
M / (M - t) = 1.11), over L = 120 releases (the total-budget default), K = 11 (10 scores and the
intercept).  The issue's goal for the measured cost: secure aggregation <= 0.1 wherever the central
floor is below 0.07, and within 1.5 times the central floor elsewhere; the "goal" column applies it
to the predicted floors.  Outputs: ``predicted_floor.md``, ``predicted_floor_rows.csv``.
"""
from __future__ import annotations

import argparse
import csv
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

warnings.filterwarnings("ignore", category=DeprecationWarning)
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fdp_flower.privacy.trust_modes import gradient_noise_variance, noise_floor_per_direction  # noqa: E402

EPS, DELTA, ROUNDS, DIM, CLIP = 1.0, 1.0e-5, 120, 11, 4.0
TAUS = (0.5, 0.9)
SAMPLES = (20_000, 100_000, 1_000_000)
CLIENTS = (10, 50, 200, 1000)
PENALTIES = ("l1", "l2")
MODES = ("site", "secure_aggregation", "trusted_aggregator")


def tolerated(m: int) -> int:
    return max(1, m // 10)


def goal(secure: float, central: float) -> str:
    if central < 0.07:
        return "met" if secure <= 0.1 else f"missed ({secure:.3g} > 0.1)"
    return "met" if secure <= 1.5 * central else f"missed (x{secure / central:.2f})"


def closed_form_rows() -> list[dict]:
    rows = []
    for tau in TAUS:
        for n in SAMPLES:
            for m in CLIENTS:
                f = {mode: noise_floor_per_direction(mode, tau=tau, clip_radius=CLIP, clients=m, samples=n, eps=EPS,
                                                     delta=DELTA, tolerated=tolerated(m), rounds=ROUNDS, dim=DIM)
                     for mode in MODES}
                rows.append({"table": "closed_form", "tau": tau, "n": n, "M": m, "t": tolerated(m), **f})
    return rows


def _scenario(n: int, m: int, penalty: str, tau: float, seed: int):
    from fdp_flower.algorithms.fdp_admm.config import parse_scenario

    return parse_scenario({
        "name": f"sa-floor-n{n}-M{m}-{penalty}-t{tau}-s{seed}", "seed": seed,
        "data": {"n_samples": n, "design": "paper"}, "federation": {"num_clients": m},
        "basis": {"kind": "pooled", "n_components": 10},
        "model": {"loss": {"kind": "quantile", "tau": tau}, "penalty": {"kind": penalty}},
        "privacy": {"mode": "total", "eps": EPS, "delta": DELTA}})


def data_rows(samples: list[int], seeds: int) -> list[dict]:
    import privacy_cost as pc

    rows = []
    for n in samples:
        for m in CLIENTS:
            scale = {mode: gradient_noise_variance(mode, clients=m, samples=n, eps=EPS, delta=DELTA,
                                                   tolerated=tolerated(m), rounds=ROUNDS, dim=DIM)
                     for mode in MODES}
            for tau in TAUS:
                for penalty in PENALTIES:
                    t0 = time.perf_counter()
                    floors, mises = [], []
                    for seed in range(seeds):
                        sc = _scenario(n, m, penalty, tau, seed)
                        data = pc._setup(sc)
                        _w, mise, _f = pc.exact_on_features(sc, data)
                        floors.append(pc.noise_floor(sc, data, EPS))
                        mises.append(mise)
                    site = float(np.mean(floors) / np.mean(mises))
                    f = {mode: site * scale[mode] / scale["site"] for mode in MODES}
                    rows.append({"table": "paper_design", "tau": tau, "penalty": penalty, "n": n, "M": m,
                                 "t": tolerated(m), "exact_mise": float(np.mean(mises)), "seeds": seeds, **f})
                    print(f"n={n} M={m} tau={tau} {penalty}: site {site:.4g} ({time.perf_counter() - t0:.0f} s)",
                          flush=True)
    return rows


def _n(n: int) -> str:
    e = int(round(math.log10(n)))
    return f"{n // 10**e}e{e}" if n % 10**e == 0 else str(n)


def _fmt(x: float) -> str:
    return f"{x:.3g}" if x < 100 else f"{x:.0f}"


def closed_form_table(rows: list[dict]) -> list[str]:
    lines = ["| tau | n | M | m_i | t | per-site DP | secure aggregation | trusted aggregator | secure / central "
             "| goal |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['tau']:g} | {_n(r['n'])} | {r['M']} | {r['n'] // r['M']} | {r['t']} | {_fmt(r['site'])} "
                     f"| {_fmt(r['secure_aggregation'])} | {_fmt(r['trusted_aggregator'])} "
                     f"| {r['secure_aggregation'] / r['trusted_aggregator']:.3f} "
                     f"| {goal(r['secure_aggregation'], r['trusted_aggregator'])} |")
    return lines


def data_table(rows: list[dict]) -> list[str]:
    lines = ["| tau | penalty | n | M | t | exact MISE | per-site DP | secure aggregation | trusted aggregator "
             "| goal | seeds |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["tau"], r["penalty"], r["n"], r["M"])):
        lines.append(f"| {r['tau']:g} | {r['penalty']} | {_n(r['n'])} | {r['M']} | {r['t']} | {r['exact_mise']:.4f} "
                     f"| {_fmt(r['site'])} | {_fmt(r['secure_aggregation'])} | {_fmt(r['trusted_aggregator'])} "
                     f"| {goal(r['secure_aggregation'], r['trusted_aggregator'])} | {r['seeds']} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-samples", type=int, nargs="*", default=[20_000, 100_000])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--from-csv", action="store_true",
                        help="rewrite predicted_floor.md from predicted_floor_rows.csv in --out without computing")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "secure_aggregation"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    if args.from_csv:
        with (out / "predicted_floor_rows.csv").open() as fh:
            rows = [{k: (v if k in ("table", "penalty") else float(v) if "." in v or "e" in v else int(v))
                     for k, v in r.items() if v != ""} for r in csv.DictReader(fh)]
        closed = [r for r in rows if r["table"] == "closed_form"]
        data = [r for r in rows if r["table"] == "paper_design"]
        args.data_samples = sorted({int(r["n"]) for r in data})
        args.seeds = int(data[0]["seeds"]) if data else args.seeds
    else:
        closed = closed_form_rows()
        data = data_rows(args.data_samples, args.seeds) if args.data_samples else []
        with (out / "predicted_floor_rows.csv").open("w", newline="") as fh:
            fields = sorted({k for r in closed + data for k in r})
            writer = csv.DictWriter(fh, fieldnames=fields, restval="")
            writer.writeheader()
            writer.writerows(closed + data)
    ratio = [r["secure_aggregation"] / r["trusted_aggregator"] for r in closed]
    lines = [
        "# Predicted privacy-cost floors per trust mode (issue 32)",
        "",
        f"`python benchmarks/secure_aggregation_floor.py --data-samples {' '.join(map(str, args.data_samples))} "
        f"--seeds {args.seeds}` ("
        + ("table rewritten from predicted_floor_rows.csv" if args.from_csv
           else f"{time.strftime('%Y-%m-%d')}, {time.perf_counter() - started:.0f} s") + "; docstring). "
        "Total eps = 1, delta = 1e-5 per site for the whole run; the floor is the privacy cost of the best unbiased "
        "use of the budget (one noisy gradient per site at the exact solution and an exact Newton step), "
        "docs/choosing_a_budget.md and docs/secure_aggregation.md. Secure aggregation: Skellam shares summed by "
        "SecAgg+, t = max(1, M // 10) missing or colluding shares tolerated (M / (M - t) = 1.11), RDP accounting "
        "over L = 120 rounds, K = 11. Goal (the issue's, applied to the floors): secure aggregation <= 0.1 where the "
        "central floor is below 0.07, within 1.5 x the central floor elsewhere.",
        "",
        "## 1. Closed form, one FPCA direction (eq. (9.13)), ellipsoid clip of radius 4",
        "",
        "Variance of the floor over the statistical variance in every direction: per-site DP "
        "4 max(tau, 1 - tau)^2 gamma^2 z^2 M / (n tau (1 - tau)) with z = 3.7306; trusted aggregator the same "
        "without the factor M; secure aggregation the central figure times "
        f"{min(ratio):.3f}-{max(ratio):.3f} (M / (M - t) = 1.11 times 1.176, the price of the RDP conversion that "
        "Skellam's accounting goes through, against the PLD-exact Gaussian; rounding and the Skellam's O(1/V) terms "
        "add < 0.2%). It does not depend on the penalty.",
        "",
        *closed_form_table(closed),
        "",
    ]
    if data:
        lines += [
            "## 2. Paper design: the floor column of the privacy-cost table, per trust mode",
            "",
            "privacy_cost.noise_floor (E int (beta_floor - beta_exact)^2 over the mean exact MISE, pooled FPCA "
            "K = 10, total-budget defaults: ellipsoid clip of radius 4, lam = 0.05) for per-site DP, on "
            f"{args.seeds} seeds; the other modes scale its noise covariance by their V_g (eqs. (9.14), (9.15)). "
            "The exact MISE contains bias (truncation at K = 10, the penalty, the clip), and the penalty shrinks the "
            "exact estimator, so these ratios differ from the closed form's in both directions. At n = 1e5, M = 10 and "
            "50 the per-site column is the 'floor' column of benchmarks/results/privacy_utility/table.md on 2 seeds "
            "instead of 20 (there: tau = 0.5 l1 0.006 / 0.098, l2 0.012 / 0.245; tau = 0.9 l1 0.083 / 1.56, "
            "l2 0.033 / 2.49): single seeds move the exact MISE by up to a third.",
            "",
            *data_table(data),
            "",
        ]
    lines += [
        "What the floors leave out: the measured privacy cost also contains the optimization error of a finite run "
        "and the early stopping's shrinkage (an early-stopped run can fall below its unbiased floor, "
        "benchmarks/results/privacy_utility/table.md); the measured table per trust mode comes after the "
        "integration into the FDP-ADMM protocol.",
        "",
    ]
    (out / "predicted_floor.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
