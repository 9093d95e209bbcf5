"""Privacy-utility frontier (issue 9): private MISE / exact non-private MISE at a total budget per client.

    python benchmarks/privacy_utility.py [--eps 1] [--reps 20] [--first-seed 0]
        [--out benchmarks/results/privacy_utility]

Zhou & Xiang's (2022) simulation design, n = 100000, K = 10 (pooled FPCA), c1 = 3, tau = 0.5, rho = 0.1,
lam = 0.05, M in {10, 20, 50}, l1 and l2 penalties.  Every private run spends a total
(eps, delta = 1e-5) per client for the whole run (ledger, PLD).  For every (repetition, M,
penalty) the exact non-private centralized estimator of the same penalized problem on the pooled
scores clipped at c1 = 3 (:func:`fdp_flower.algorithms.fdp_admm.reference.solve_reference`) is solved once and cached
(``exact_cache.json``: it does not depend on eps); every ratio below is against it.  Private
configurations:

- ``recommended``: the sphere-clip total-budget defaults of ``fdp_flower.algorithms.fdp_admm.config``
  (``SPHERE_TOTAL_BUDGET_DEFAULTS``: 80 rounds, constant step 3, tail average of the last half; a scenario that
  sets ``clip_c1`` keeps the sphere) with the tighter public clip c1 = 2 (docs/choosing_a_budget.md);
- ``defaults``: the same with c1 = 3;
- ``ellipsoid``: ``model.clip_shape: ellipsoid`` with Mahalanobis radius 4 (rows clipped to
  sum_k a_k^2 / (16 lambda_k) <= 1, lambda_k the pooled FPCA score variances; noise shaped by
  4 sqrt(lambda_k)), 120 rounds, constant step 5, tail average (tuned for l2 on seeds 1000-1003);
- ``paper``: the paper's per-round rule at the same total, i.e. per-round (eps / L, delta / L) with
  the classic Gaussian calibration (basic composition: how a per-round guarantee is budgeted for a
  whole run without an accountant), the paper's G = c1, c1 = 3, L = 30 rounds, last iterate, and the
  project's Theorem 2 x 60 step (the printed x 1 step does not converge in 1000 rounds).

Evaluation seeds are 0 .. reps - 1; every setting was tuned on seeds >= 1000 (disjoint).
Outputs: ``table.md`` (ratio mean +- standard error per cell), ``runs_*.csv`` (every run)
and ``frontier.png`` (mean ratio versus total eps).  ``table.md`` opens with the privacy cost of
issue 16 (``benchmarks/privacy_cost.py``, its runs in ``cost_runs.csv``, plot ``privacy_cost.png``),
the distance of the private estimate to the exact one beside the MISE ratio.
"""
from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import time
from pathlib import Path

import numpy as np

from fdp_flower.algorithms.fdp_admm.config import Scenario, parse_scenario
from fdp_flower.algorithms.fdp_admm.plan import build_objective
from fdp_flower.algorithms.fdp_admm.reference import solve_reference
from fdp_flower.engines.batched import run_batched, shared_setup
from fdp_flower.functional import design

CLIENTS = (10, 20, 50)
PENALTIES = ("l1", "l2")
DELTA = 1.0e-5
PAPER_ROUNDS = 30
CONFIGS = ("recommended", "defaults", "paper", "ellipsoid")


#: c1 of the paper design's problem (the exact estimator's clip) and the tighter clip recommended
#: for private runs on this design (tuned on seeds >= 1000; docs/choosing_a_budget.md).
CLIP = 3.0
RECOMMENDED_CLIP = 2.0
#: the ellipsoid clip (model.clip_shape) and its settings, tuned on seeds 1000-1003 for l2 (tuning.md)
ELLIPSOID = {"clip_c1": 4.0, "rounds": 120, "eta0": 5.0}


def base(num_clients: int, penalty: str, seed: int, clip: float = CLIP) -> dict:
    return {"name": f"pu-M{num_clients}-{penalty}-s{seed}", "seed": seed, "data": {"n_samples": 100_000},
            "federation": {"num_clients": num_clients}, "basis": {"kind": "pooled", "n_components": 10},
            "model": {"loss": {"kind": "quantile", "tau": 0.5}, "penalty": {"kind": penalty}, "clip_c1": clip}}


def defaults_scenario(num_clients: int, penalty: str, seed: int, eps: float) -> Scenario:
    """Total-budget mode with the ADMM rule and every other setting left at the scenario defaults (the table
    measures the ADMM rule; the Newton rule, the default a scenario without ``algorithm.rule`` gets, has its own
    table in benchmarks/results/estimates/floor_runs_package.md)."""
    return parse_scenario(base(num_clients, penalty, seed)
                          | {"privacy": {"mode": "total", "eps": eps, "delta": DELTA}, "algorithm": {"rule": "admm"}})


def recommended_scenario(num_clients: int, penalty: str, seed: int, eps: float) -> Scenario:
    """The ADMM rule's total-budget defaults with the tighter public clip c1 = 2 recommended for this design."""
    return parse_scenario(base(num_clients, penalty, seed, RECOMMENDED_CLIP)
                          | {"privacy": {"mode": "total", "eps": eps, "delta": DELTA}, "algorithm": {"rule": "admm"}})


def ellipsoid_scenario(num_clients: int, penalty: str, seed: int, eps: float, *,
                       clip_c1: float = ELLIPSOID["clip_c1"], rounds: int = ELLIPSOID["rounds"],
                       eta0: float = ELLIPSOID["eta0"]) -> Scenario:
    """Total budget with the ellipsoid clip and shaped noise (default: Mahalanobis radius 4, 120 rounds,
    constant step 5)."""
    b = base(num_clients, penalty, seed, clip_c1)
    return parse_scenario(b | {"model": b["model"] | {"clip_shape": "ellipsoid"},
                               "algorithm": {"rounds": rounds, "step": {"kind": "constant", "eta0": eta0}},
                               "privacy": {"mode": "total", "eps": eps, "delta": DELTA}})


def paper_scenario(num_clients: int, penalty: str, seed: int, eps: float) -> Scenario:
    """The paper's per-round rule, budgeted for the whole run by basic composition."""
    return parse_scenario(base(num_clients, penalty, seed) | {
        "algorithm": {"rounds": PAPER_ROUNDS, "estimator": {"kind": "last"}},
        "privacy": {"mode": "per_round", "eps": eps / PAPER_ROUNDS, "delta": DELTA / PAPER_ROUNDS,
                    "paper_constants": True}})


def exact_mise(num_clients: int, penalty: str, seed: int, cache: dict, cache_path: Path,
               pooled: dict | None = None) -> float:
    """MISE of the exact non-private centralized estimator (cached by (M, penalty, seed)).

    The design's samples do not depend on the split, so the pooled clipped scores and the
    pooled FPCA basis of a seed are shared by every M (``pooled`` memoizes them).
    """
    key = f"{num_clients}/{penalty}/{seed}"
    if key not in cache:
        pooled = {} if pooled is None else pooled
        if seed not in pooled:
            data = shared_setup(parse_scenario(base(CLIENTS[0], penalty, seed) | {"privacy": {"enabled": False}}))
            pooled.clear()
            site = data.site
            pooled[seed] = (site.features.reshape(-1, site.features.shape[-1]), site.response.reshape(-1), data)
        a, y, data = pooled[seed]
        ob = build_objective(parse_scenario(base(num_clients, penalty, seed) | {"privacy": {"enabled": False}}))
        bounds = design.partition_bounds(len(y), num_clients)
        parts = list(itertools.pairwise(bounds))
        ref = solve_reference([a[i:j] for i, j in parts], [y[i:j] for i, j in parts], ob.loss, ob.penalty, ob.lam)
        cache[key] = float(design.mise(data.basis.function(ref.w), data.beta, data.basis.grid))
        cache_path.write_text(json.dumps(cache, indent=1, sort_keys=True))
    return cache[key]


def load_cache(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def run_cells(eps_values, seeds, runs_csv: Path, configs=CONFIGS) -> None:
    """Private runs of every cell, appended to ``runs.csv`` (MISE of the last iterate, the
    running average and the configured estimator: one run gives all three)."""
    makers = {"defaults": defaults_scenario, "recommended": recommended_scenario, "paper": paper_scenario,
              "ellipsoid": ellipsoid_scenario}
    for num_clients in CLIENTS:
        for seed in seeds:
            t0 = time.perf_counter()
            scenarios, keys = [], []
            for penalty in PENALTIES:
                for eps in eps_values:
                    for name in configs:
                        scenarios.append(makers[name](num_clients, penalty, seed, eps))
                        keys.append((penalty, eps, name))
            rows = []
            for (penalty, eps, name), sc, res in zip(keys, scenarios, run_batched(scenarios, history=False)):
                rows.append({"M": num_clients, "penalty": penalty, "eps": eps, "config": name, "seed": seed,
                             "rounds": sc.algorithm.rounds, "estimator": sc.algorithm.estimator.kind,
                             "mise": res.final["mise_estimate"], "mise_last": res.final["mise"],
                             "mise_avg": res.final["mise_avg"], "eps_zcdp": res.final.get("eps_zcdp", math.nan)})
            _append_csv(runs_csv, rows)
            print(f"M={num_clients} seed={seed}: {len(scenarios)} runs in {time.perf_counter() - t0:.0f} s",
                  flush=True)


def _append_csv(path: Path, rows: list[dict]) -> None:
    new = not path.is_file()
    with path.open("a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        if new:
            writer.writeheader()
        writer.writerows(rows)


def read_runs(path: Path) -> list[dict]:
    with path.open() as fh:
        return [{k: (v if k in ("penalty", "config", "estimator") else float(v)) for k, v in r.items()}
                for r in csv.DictReader(fh)]


def with_ratios(rows: list[dict], cache: dict, cache_path: Path) -> list[dict]:
    """Each run with the exact MISE of its (M, penalty, seed) and the ratios (computing missing references)."""
    pooled: dict = {}
    out = []
    for r in sorted(rows, key=lambda r: (r["seed"], r["M"], r["penalty"])):
        exact = exact_mise(int(r["M"]), r["penalty"], int(r["seed"]), cache, cache_path, pooled)
        out.append(r | {"exact_mise": exact, "ratio": r["mise"] / exact, "ratio_last": r["mise_last"] / exact,
                        "ratio_avg": r["mise_avg"] / exact})
    return out


def summarize(rows: list[dict]) -> dict:
    """(config, M, penalty, eps) -> (mean ratio, standard error, repetitions, mean MISE, mean exact MISE,
    mean ratio of the last iterate, mean ratio of the full average)."""
    cells: dict = {}
    for r in rows:
        cells.setdefault((r["config"], int(r["M"]), r["penalty"], float(r["eps"])), []).append(r)
    out = {}
    for key, rs in cells.items():
        ratio = np.array([r["ratio"] for r in rs])
        se = float(ratio.std(ddof=1) / math.sqrt(len(ratio))) if len(ratio) > 1 else math.nan
        out[key] = (float(ratio.mean()), se, len(rs), float(np.mean([r["mise"] for r in rs])),
                    float(np.mean([r["exact_mise"] for r in rs])), float(np.mean([r["ratio_last"] for r in rs])),
                    float(np.mean([r["ratio_avg"] for r in rs])))
    return out


def table(summary: dict, eps: float) -> list[str]:
    lines = [("| M | penalty | exact MISE | recommended: private MISE | recommended: ratio (mean +- se) | goal <= 1.1 "
              "| its last iterate | its full average | defaults (c1 = 3): ratio | paper rule: ratio "
              "| ellipsoid clip: ratio | reps |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def cell(v):
        return f"{v[0]:.2f} +- {v[1]:.2f}" if v else "-"

    for num_clients in CLIENTS:
        for penalty in PENALTIES:
            r = summary.get(("recommended", num_clients, penalty, eps))
            if r is None:
                continue
            met = "met" if r[0] <= 1.1 else f"not met (+{r[0] - 1.1:.2f})"
            d = summary.get(("defaults", num_clients, penalty, eps))
            p = summary.get(("paper", num_clients, penalty, eps))
            e = summary.get(("ellipsoid", num_clients, penalty, eps))
            lines.append(f"| {num_clients} | {penalty} | {r[4]:.4f} | {r[3]:.4f} | {r[0]:.3f} +- {r[1]:.3f} | {met} "
                         f"| {r[5]:.3f} | {r[6]:.3f} | {cell(d)} | {cell(p)} "
                         f"| {'-' if e is None else f'{e[0]:.3f} +- {e[1]:.3f}'} | {r[2]} |")
    return lines


LABELS = {"recommended": "sphere c1 = 2", "ellipsoid": "ellipsoid", "paper": "paper rule"}


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, penalty in zip(axes, PENALTIES):
        for num_clients, color in zip(CLIENTS, ("C0", "C1", "C2")):
            for config, style in (("recommended", "-o"), ("ellipsoid", "-.s"), ("paper", "--x")):
                pts = sorted((k[3], v[0], v[1]) for k, v in summary.items()
                             if k[:3] == (config, num_clients, penalty))
                if not pts:
                    continue
                e, m, s = map(np.array, zip(*pts))
                ax.errorbar(e, m, yerr=np.nan_to_num(s), fmt=style, color=color, capsize=2,
                            label=f"M = {num_clients}, {LABELS[config]}")
        ax.axhline(1.1, color="grey", lw=0.8, ls=":")
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("total eps per client (delta = 1e-5)")
        ax.set_title(f"{penalty} penalty")
    axes[0].set_ylabel("private MISE / exact non-private MISE")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eps", type=float, nargs="+", default=[1.0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/results/privacy_utility")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    parser.add_argument("--references-only", action="store_true")
    parser.add_argument("--report-only", action="store_true", help="rebuild table and plot from runs.csv")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache_path = out / "exact_cache.json"
    cache: dict = {}
    seeds = range(args.first_seed, args.first_seed + args.reps)
    if args.references_only:
        pooled: dict = {}
        for seed in seeds:
            for num_clients in CLIENTS:
                for penalty in PENALTIES:
                    exact_mise(num_clients, penalty, seed, load_cache(cache_path) | cache, cache_path, pooled)
            print(f"references of seed {seed} done", flush=True)
        return
    if not args.report_only:
        tag = "_".join(f"{e:g}" for e in args.eps)
        run_cells(args.eps, seeds, out / f"runs_eps{tag}_seeds{seeds[0]}-{seeds[-1]}.csv", tuple(args.configs))
    write_report(out)


def cost_section(out: Path) -> list[str]:
    """The privacy-cost table of ``benchmarks/privacy_cost.py`` (issue 16), if its runs exist."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import privacy_cost

    rows = [r for path in sorted(out.glob("cost_runs*.csv")) for r in privacy_cost.read_csv(path)]
    if not rows:
        return []
    summary = privacy_cost.summarize(rows)
    privacy_cost.plot(summary, out / "privacy_cost.png")
    note = (out / "cost_note.md").read_text().strip().splitlines() if (out / "cost_note.md").is_file() else []
    return (["# Privacy cost at total eps = 1 (issue 16)", "", privacy_cost.TABLE_INTRO, ""]
            + privacy_cost.table_lines(summary) + [""] + note + ["", "![privacy cost](privacy_cost.png)", ""])


def write_report(out: Path) -> None:
    cache_path = out / "exact_cache.json"
    rows = with_ratios([r for path in sorted(out.glob("runs_*.csv")) for r in read_runs(path)],
                       load_cache(cache_path), cache_path)
    summary = summarize(rows)
    eps_values = sorted({k[3] for k in summary}, key=lambda e: (e != 1.0, e))  # the acceptance column first
    lines = cost_section(out) + ["# Privacy-utility frontier (issue 9)", "",
             ("`python benchmarks/privacy_utility.py` (see its docstring and docs/choosing_a_budget.md). Zhou & Xiang (2022) "
             "design, n = 100000, K = 10, tau = 0.5, delta = 1e-5 per client for the whole run. "
             "Ratio = private MISE / MISE of the exact non-private centralized estimator of the same penalized "
             "problem on the pooled scores clipped at c1 = 3, per repetition, then averaged (+- standard error). "
             "recommended = total-mode defaults (80 rounds, constant step 3, tail average of the last half) "
             "with c1 = 2; 'its last iterate' / 'its full average' = other estimators of the same runs; "
             "defaults = the same with c1 = 3; paper rule = per-round (eps/30, delta/30), classic Gaussian, "
             "G = c1, c1 = 3, 30 rounds, last iterate; ellipsoid clip = model.clip_shape ellipsoid "
             "(rows clipped to sum_k a_k^2 / (16 lambda_k) <= 1, noise shaped by 4 sqrt(lambda_k)), 120 rounds, "
             "constant step 5, tail average (tuned for l2 on seeds 1000-1003). Evaluation seeds 0 .. reps - 1 (eps = 1: 20 "
             "repetitions; other eps: 20 for recommended and the paper rule, defaults not run); tuning used seeds 1000-1001 "
             "(tuning.md)."), ""]
    for eps in eps_values:
        lines += [f"## Total eps = {eps:g}", ""] + table(summary, eps) + [""]
    (out / "table.md").write_text("\n".join(lines) + "\n")
    plot(summary, out / "frontier.png")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
