"""Issue 29, question 1: why a new user's fitted quantiles sit at the wrong level, measured.

    python benchmarks/estimates_levels.py [--quick] [--reps 10] [--out benchmarks/results/estimates]

Design ``irregular`` of benchmarks/estimates_designs.py (irregular 60-point grid, heteroscedastic errors,
response centred near 11): 2500 training curves over 5 sites of 500, a held-out test set of 10000 curves
from the same process, seeds 0 .. reps - 1 (data, split and noise).  Share of held-out responses at or below
the fitted tau-quantile, tau in {0.1, 0.25, 0.5, 0.75, 0.9}.

Part A goes through ``fdp_flower.fit`` with its defaults (cosine basis K = 10, sphere clip 3, intercept,
l1 lam = 0.05, 80 rounds, step 3, tail average; total eps = 1, delta = 1e-5; or eps=None), with and without
``response_offset=10``.  Part B takes the same clipped rows and runs the rule in its data-term form
(benchmarks/estimates_protocol.run_admm, which reproduces the package's iterates to 2e-15 without noise) with
one thing changed at a time, to name the causes:

- ``exact``: the exact estimator of the same penalized problem (LP), the level a fit should reach;
- ``admm, no noise``: today's rule without noise, fixed rho = 0.1 (its objective gap and the amplitude of
  the intercept over the averaged tail show whether it converged);
- ``admm, no noise, eta 0.3``: the same with a step 10 times smaller (stable for these rows), 400 rounds;
- ``admm, eps 1``: today's private rule (the site linearizes at its own noisy release);
- ``admm, eps 1, global point``: the same, the server naming the global iterate to every site instead;
- ``admm, eps 1, eta 0.3, global point``: both changes.

Writes levels.md and levels.json to --out.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

warnings.filterwarnings("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import estimates_designs as D  # noqa: E402
import estimates_protocol as P  # noqa: E402

import fdp_flower  # noqa: E402
from fdp_flower.api import client_partition  # noqa: E402
from fdp_flower.functional.fpca import fixed_basis  # noqa: E402

TAUS = (0.1, 0.25, 0.5, 0.75, 0.9)
N_TRAIN, SITES, N_TEST, DELTA = 2500, 5, 10_000, 1e-5


def part_a(seed: int, tr, te) -> list[dict]:
    rows = []
    for eps in (1.0, None):
        for offset in (0.0, 10.0):
            for tau in TAUS:
                t0 = time.perf_counter()
                m = fdp_flower.fit(tr.curves, tr.response, grid=tr.grid, tau=tau, eps=eps, n_clients=SITES, seed=seed,
                                   response_offset=offset, reference=False)
                rows.append({"part": "A", "seed": seed, "tau": tau, "what": f"fit, eps={eps}, response_offset={offset:g}",
                             "coverage": D.coverage(m.predict(te.curves), te.response), "stop_reason": m.stop_reason,
                             "rounds": int(len(m.history)), "seconds": time.perf_counter() - t0})
    return rows


def part_b(seed: int, tr, te) -> list[dict]:
    basis = fixed_basis("cosine", 10, tr.grid)
    parts, _ = client_partition(N_TRAIN, n_clients=SITES, client_ids=None, seed=seed)
    scores = [basis.scores(tr.curves[p]) for p in parts]
    test = np.c_[np.full(len(te.response), 1.5), basis.scores(te.curves)]  # c0 = 0.5 x 3, unclipped as predict()
    z80 = math.sqrt(80) / P.total_mu(1.0, DELTA)
    rows = []
    for tau in TAUS:
        prob = P.build_problem(scores, [tr.response[p] for p in parts], tau=tau, penalty="l1", lam=0.05, clip=3.0)
        w_exact = P.exact_solution(prob)
        f_exact = P.objective(prob, w_exact)

        def add(what, w, **extra):
            rows.append({"part": "B", "seed": seed, "tau": tau, "what": what,
                         "coverage": D.coverage(test @ w, te.response),
                         "objective_gap": (P.objective(prob, w) - f_exact) / f_exact, **extra})

        add("exact", w_exact)
        for what, kw in (("admm, no noise", dict(rounds=80, eta=3.0, z=0.0)),
                         ("admm, no noise, eta 0.3, 400 rounds", dict(rounds=400, eta=0.3, z=0.0)),
                         ("admm, eps 1", dict(rounds=80, eta=3.0, z=z80)),
                         ("admm, eps 1, global point", dict(rounds=80, eta=3.0, z=z80, anchor="global")),
                         ("admm, eps 1, eta 0.3, global point", dict(rounds=80, eta=0.3, z=z80, anchor="global"))):
            tr_ = P.run_admm(prob, rho=0.1, rng=np.random.default_rng([seed, 1]), **kw)
            tail = tr_.iterates[len(tr_.iterates) // 2:, 0] * 1.5
            add(what, tr_.estimate, intercept_tail_sd=float(tail.std()))
    return rows


def summarize(rows: list[dict]) -> dict:
    out: dict = {}
    for r in rows:
        out.setdefault((r["part"], r["what"]), {}).setdefault(r["tau"], []).append(r)
    return out


def report(rows: list[dict], reps: int) -> str:
    s = summarize(rows)
    lines = [f"Design irregular, {N_TRAIN} training curves over {SITES} sites, {N_TEST} held-out curves, {reps} seeds. "
             "Cells: mean share of held-out responses <= the fitted tau-quantile (sd over seeds).", "",
             "| part | fit | " + " | ".join(f"tau = {t:g}" for t in TAUS) + " | notes |",
             "|---|---|" + "---|" * len(TAUS) + "---|"]
    for (part, what), by_tau in s.items():
        cells = []
        for t in TAUS:
            v = np.array([r["coverage"] for r in by_tau.get(t, [])])
            cells.append(f"{v.mean():.3f} ({v.std():.3f})" if v.size else "-")
        notes = []
        any_rows = [r for t in TAUS for r in by_tau.get(t, [])]
        if "objective_gap" in any_rows[0]:
            notes.append("objective gap " + "/".join(f"{100 * np.mean([r['objective_gap'] for r in by_tau[t]]):.1f}%"
                                                     for t in TAUS))
        if "intercept_tail_sd" in any_rows[0]:
            notes.append("sd of the intercept over the averaged tail " + "/".join(
                f"{np.mean([r['intercept_tail_sd'] for r in by_tau[t]]):.2f}" for t in TAUS))
        if "stop_reason" in any_rows[0]:
            reasons = sorted({r["stop_reason"].split(":")[0] for r in any_rows})
            rounds = sorted({r["rounds"] for r in any_rows})
            notes.append(f"stop_reason {', '.join(reasons)}; rounds {rounds[0]}-{rounds[-1]}")
        lines.append(f"| {part} | {what} | " + " | ".join(cells) + " | " + "; ".join(notes) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", default="benchmarks/results/estimates")
    ap.add_argument("--quick", action="store_true", help="2 seeds")
    args = ap.parse_args()
    reps = 2 if args.quick else args.reps
    rows = []
    for seed in range(reps):
        tr = D.draw("irregular", seed, N_TRAIN)
        te = D.draw("irregular", seed, N_TEST, part=1)
        rows += part_a(seed, tr, te)
        rows += part_b(seed, tr, te)
        print(f"seed {seed} done", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "levels_quick" if args.quick else "levels"
    text = report(rows, reps)
    (out / f"{name}.md").write_text(text)
    (out / f"{name}.json").write_text(json.dumps(rows, indent=1, default=float))
    print(text)


if __name__ == "__main__":
    sys.exit(main())
