"""FDP-ADMM round time on Flower's simulation runtime with per-site noise and with secure aggregation
(issue 32): the same small federation, ``privacy.trust`` site against secure_aggregation (every round
one SecAgg+ round: four stages of messages instead of one).

Design: ``scenarios/flwr_default.yaml`` with n = 3000, total eps = 1, L rounds, M clients over N
SuperNodes (a node hosting several clients sums their shares before masking), one run per mode and
configuration on our own SuperLink (:func:`fdp_flower.engines.flower.run_on_simulation`).  Round time:
the strategy's "round l/L done in s" log lines, rounds 2..L (round 1 includes the ClientApps' imports).
Ratios only: one machine, one run each.

Usage:  python benchmarks/secure_aggregation_fdp_round.py [--configs 3:3 5:3] [--rounds 4]
            [--out benchmarks/results/secure_aggregation]
Writes fdp_round_time.md and fdp_round_time.json.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fdp_flower.engines.flower import run_on_simulation  # noqa: E402

ROUND_LINE = re.compile(r"round (\d+)/(\d+) done in ([\d.]+)s")


def run_mode(mode: str, clients: int, nodes: int, rounds: int) -> dict:
    overrides = ["data.n_samples=3000", f"federation.num_clients={clients}", f"algorithm.rounds={rounds}",
                 "privacy.mode=total", "privacy.eps=1.0", f"privacy.trust={mode}"]
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="fdp-secure-round-") as tmp:
        _, status, _, _ = run_on_simulation(ROOT / "scenarios" / "flwr_default.yaml", overrides, tmp,
                                            num_supernodes=nodes, echo=lines.append, timeout=1200.0)
    times = {int(m.group(1)): float(m.group(3)) for line in lines for m in [ROUND_LINE.search(line)] if m}
    if status != "finished:completed" or len(times) != rounds:
        raise RuntimeError(f"{mode} M={clients} N={nodes}: {status}, rounds seen {sorted(times)}\n" + "\n".join(lines[-40:]))
    later = [times[r] for r in range(2, rounds + 1)]
    return {"mode": mode, "clients": clients, "nodes": nodes, "rounds": rounds, "round_seconds": times,
            "mean_round_seconds": float(np.mean(later))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["3:3", "5:3"], metavar="M:N")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "secure_aggregation"))
    args = parser.parse_args(argv)
    rows = []
    for config in args.configs:
        clients, nodes = (int(x) for x in config.split(":"))
        for mode in ("site", "secure_aggregation"):
            row = run_mode(mode, clients, nodes, args.rounds)
            print(json.dumps(row), flush=True)
            rows.append(row)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fdp_round_time.json").write_text(json.dumps({"argv": sys.argv[1:], "rows": rows}, indent=1))
    lines = ["# FDP-ADMM round time on Flower simulation: per-site noise vs secure aggregation (issue 32)", "",
             f"`python benchmarks/secure_aggregation_fdp_round.py {' '.join(sys.argv[1:])}` (docstring). Mean "
             "of rounds 2..L of the strategy's own round time (request to closed round), one run per row.", "",
             "| M clients | N SuperNodes | site (s / round) | secure aggregation (s / round) | ratio |",
             "|---|---|---|---|---|"]
    for config in args.configs:
        clients, nodes = (int(x) for x in config.split(":"))
        site = next(r for r in rows if (r["clients"], r["nodes"], r["mode"]) == (clients, nodes, "site"))
        secure = next(r for r in rows if (r["clients"], r["nodes"], r["mode"]) == (clients, nodes, "secure_aggregation"))
        lines.append(f"| {clients} | {nodes} | {site['mean_round_seconds']:.3f} | {secure['mean_round_seconds']:.3f} | "
                     f"{secure['mean_round_seconds'] / site['mean_round_seconds']:.2f} |")
    (out / "fdp_round_time.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
