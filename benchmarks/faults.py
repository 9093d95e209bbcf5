"""Benchmark of FDP-ADMM under client failures (issue 8): final MISE with 30% of the clients failing
at random each round, next to the fault-free run.

Design: the paper's simulation (Zhou & Xiang 2022, Section 5; ``scenarios/flwr_default.yaml``): n = 100000
split over M = 10 clients, pooled FPCA with K = 10, quantile loss tau = 0.5, l1 penalty, rho = 0.1,
per-round (eps, delta) = (0.5, 1e-5), L = 30 rounds, R seeds.  Conditions:

- ``fault_free``: every client replies every round;
- ``fail30``: each client fails independently with probability 0.3 each round (its own seeded
  stream); a failed client keeps its last released primal and its dual (``fdp_flower.algorithms.faults``);
  quorum 0.2 (a round needs 2 of 10 replies);
- ``fail30_longer``: the same failures with L = 43 rounds, so that each client makes about as many
  releases (0.7 x 43 ~ 30) as in the fault-free run.

Failed clients make no release that round, so they spend less privacy: the table reports the worst
client's composed eps (PLD) next to the MISE.

Usage:  python benchmarks/faults.py [--reps R] [--quick] [--out benchmarks/results/faults]
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fdp_flower.algorithms.fdp_admm.config import load_scenario  # noqa: E402
from fdp_flower.engines.inprocess import run_fdp_admm  # noqa: E402

CONDITIONS = {
    "fault_free": [],
    "fail30": ["faults.failure_rate=0.3", "faults.quorum=0.2"],
    "fail30_longer": ["faults.failure_rate=0.3", "faults.quorum=0.2", "algorithm.rounds=43"],
}


def run(reps: int, quick: bool) -> dict:
    base = ["data.n_samples=10000", "algorithm.rounds=20"] if quick else []
    out: dict = {"conditions": {}, "reps": reps, "quick": quick}
    for name, overrides in CONDITIONS.items():
        if quick and name == "fail30_longer":
            overrides = overrides[:-1] + ["algorithm.rounds=29"]
        rows = []
        for seed in range(reps):
            sc = load_scenario(ROOT / "scenarios" / "flwr_default.yaml", base + overrides + [f"seed={seed}"])
            t0 = time.perf_counter()
            res = run_fdp_admm(sc, with_reference=False)
            worst = res.ledger.worst_case(sc.privacy.delta)
            rows.append({"seed": seed, "mise": res.history[-1]["mise"], "mise_avg": res.history[-1]["mise_avg"],
                         "rounds": len(res.history), "stop_reason": res.stop_reason,
                         "failures": len(res.failures),
                         "failed_fraction": len(res.failures) / (len(res.history) * sc.federation.num_clients),
                         "releases_worst": worst.releases, "eps_worst_pld": worst.eps_pld,
                         "seconds": time.perf_counter() - t0})
            print(f"{name:14s} seed {seed}: MISE {rows[-1]['mise']:.4f}  failures {rows[-1]['failures']:3d}  "
                  f"eps {worst.eps_pld:.2f}  {rows[-1]['stop_reason']}", flush=True)
        mise = np.array([r["mise"] for r in rows])
        out["conditions"][name] = {
            "overrides": overrides, "runs": rows,
            "mise_mean": float(mise.mean()), "mise_sd": float(mise.std(ddof=1)) if reps > 1 else 0.0,
            "mise_median": float(np.median(mise)),
            "completed": sum(r["stop_reason"] == "completed" for r in rows),
            "failed_fraction": float(np.mean([r["failed_fraction"] for r in rows])),
            "eps_worst_pld_mean": float(np.mean([r["eps_worst_pld"] for r in rows])),
        }
    return out


def write(out: dict, directory: Path, seconds: float) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    out["environment"] = {"python": platform.python_version(), "numpy": np.__version__,
                          "machine": platform.machine(), "seconds": seconds}
    (directory / "results.json").write_text(json.dumps(out, indent=2))
    c = out["conditions"]
    lines = [
        "# FDP-ADMM with failing clients (issue 8)", "",
        "Command: `python benchmarks/faults.py" + (" --quick" if out["quick"] else "") + f" --reps {out['reps']}`"
        + f" ({seconds:.0f} s).", "",
        "Paper design (Zhou & Xiang 2022, Section 5): " + ("n = 10000 (quick)" if out["quick"] else "n = 100000")
        + ", M = 10, pooled FPCA K = 10, tau = 0.5, l1, rho = 0.1, "
        "per-round eps = 0.5, delta = 1e-5; " + f"{out['reps']} seeds (0..{out['reps'] - 1}), the same data and "
        "noise streams across conditions.  A failed client keeps its last released primal and its dual, and "
        "makes no release (no privacy spent) that round.", "",
        "| condition | rounds | failed client-rounds | runs completed | final MISE mean (sd) | median | "
        "worst-client eps (PLD) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, d in c.items():
        rounds = d["runs"][0]["rounds"]
        lines.append(f"| {name} | {rounds} | {100 * d['failed_fraction']:.1f}% | {d['completed']}/{out['reps']} | "
                     f"{d['mise_mean']:.4f} ({d['mise_sd']:.4f}) | {d['mise_median']:.4f} | "
                     f"{d['eps_worst_pld_mean']:.2f} |")
    ff, f30 = c["fault_free"]["mise_mean"], c["fail30"]["mise_mean"]
    lines += ["", f"30% failures at the same L: MISE {f30:.4f} vs {ff:.4f} fault-free (ratio {f30 / ff:.2f})."]
    for name in ("fail30", "fail30_longer"):
        diff = np.array([a["mise"] - b["mise"] for a, b in zip(c[name]["runs"], c["fault_free"]["runs"])])
        se = diff.std(ddof=1) / np.sqrt(diff.size) if diff.size > 1 else float("nan")
        lines.append(f"Paired by seed, {name} - fault_free: {diff.mean():+.4f} (standard error {se:.4f}; "
                     f"{int((diff > 0).sum())} of {diff.size} seeds worse).")
    lines += ["", "The worst-client eps is the maximum over clients of the composed (PLD) eps; with failures "
                  "each client makes fewer releases, but the unluckiest client's count varies by seed.",
              "See results.json for every run and run.log for the console output."]
    (directory / "README.md").write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="n = 10000, L = 20 (smoke run)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "faults"))
    parser.add_argument("--rewrite", action="store_true", help="only rewrite README.md from results.json")
    args = parser.parse_args(argv)
    if args.rewrite:
        out = json.loads((Path(args.out) / "results.json").read_text())
        write(out, Path(args.out), out["environment"]["seconds"])
        print((Path(args.out) / "README.md").read_text())
        return 0
    t0 = time.perf_counter()
    out = run(args.reps, args.quick)
    write(out, Path(args.out), time.perf_counter() - t0)
    print((Path(args.out) / "README.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
