"""Issue 29, items 3, 4 and 6 for FDP-ADMM: the privacy-cost table's cells run with the proposed server
algorithm of the data-term protocol (benchmarks/estimates_protocol.py) in at most 30 rounds.

    python benchmarks/estimates_floor.py [--quick] [--seeds 0 1 ...] [--variants proposed ...]
        [--designs paper brownian heavy_tailed] [--clients 10 20 50] [--out benchmarks/results/estimates]
    python benchmarks/estimates_floor.py --variants package --seeds 0 1 2 3 4 5 6   # the package's Newton rule
    python benchmarks/estimates_floor.py --variants default --seeds 0 1 2   # nothing set: the schema's default rule

Per cell (design, tau, penalty, M of benchmarks/privacy_cost.py: n = 100000, K = 10 pooled FPCA, the
ellipsoid clip of Mahalanobis radius 4, lam = 0.05, total eps = 1, delta = 1e-5 per site) and seed it
records, for every variant: the privacy cost int (beta_private - beta_exact)^2 / exact MISE (averaged as in
privacy_cost.py: ratio of means), the privacy-off run's distance to the exact estimator (same ratio), the
unbiased floor (privacy_cost.noise_floor) and the rounds.  The exact estimator is the package's LP / QP
reference on the same clipped scores (cached on disk in --cache).  ``today`` rows are the current
defaults' numbers read from benchmarks/results/privacy_utility/cost_runs.csv (same evaluation seeds).

Seeds: tuning 1000-1001, evaluation 0-19 (never used to choose anything).  --quick: paper tau = 0.5 and
brownian, M = 10 and 50, seed 1000, the proposed variant only (a few minutes).
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

warnings.filterwarnings("ignore", category=DeprecationWarning)
sys.path.insert(0, str(Path(__file__).resolve().parent))

import estimates_protocol as P  # noqa: E402
import privacy_cost as PC  # noqa: E402

EPS, DELTA = 1.0, 1e-5
#: the declared public bounds of the response in the table's designs (all responses lie well inside)
TABLE_BOUNDS = (-20.0, 20.0)
LS_KWARGS = {"rounds": 6, "thresholds": 3, "round_shares": (0.1, 0.1, 0.15, 0.15, 0.2, 0.3), "levels": (0.25, 0.75),
             "margin": 0}

#: variants: (PPGSettings overrides, pipeline keyword overrides)
#: the proposed server rule (issue 29 memo): 6 location/scale rounds + 24 fit rounds = 30
PROPOSED = {"curvature": "density", "average": "dual", "rounds": 24, "transient": 6, "transient_share": 0.1,
            "density_rounds": (3, 8), "shrink_mode": "eb"}
VARIANTS: dict[str, tuple[dict, dict]] = {
    "proposed": (PROPOSED, {}),
    # ablations (tuning seeds): without the empirical-Bayes shrinkage, with the positive-part rule instead,
    # with the mean of the pre-prox points of the second phase instead of the dual average
    "proposed_no_shrink": ({k: v for k, v in PROPOSED.items() if k != "shrink_mode"}, {}),
    "proposed_js": ({**PROPOSED, "shrink_mode": "js", "shrink": 1.0}, {}),
    "proposed_prox_of_mean": ({**PROPOSED, "average": "prox_of_mean"}, {}),
    "oracle_curvature": ({**PROPOSED, "curvature": "given"}, {"oracle": True}),
    # today's total-budget defaults (120 rounds, step 48 whitened, rho 0.1, tail average of the last half)
    # re-run through the data-term form of the ADMM (estimates_protocol.run_admm), for the tuning seeds
    "today_admm": ({}, {"admm": True}),
    "package": ({}, {}),  # package_row
    "default": ({}, {}),  # package_row with the rule the schema picks when nothing is set (no response bounds)
}


def cache_path(cache: Path, key: tuple) -> Path:
    return cache / (hashlib.sha1(repr(key).encode()).hexdigest()[:20] + ".npz")


def exact_and_floor(sc, data, cache: Path) -> tuple[np.ndarray, float, float]:
    """(w_exact, exact MISE, E int (beta_floor - beta_exact)^2 at EPS) of a scenario, cached on disk."""
    key = ("v1", PC.data_key(sc), sc.model.penalty.model_dump_json(), sc.model.loss.tau)
    path = cache_path(cache, key)
    if path.is_file():
        z = np.load(path)
        return z["w"], float(z["mise"]), float(z["floor"])
    w, mise, _ = PC.exact_on_features(sc, data)
    floor = PC.noise_floor(sc, data, EPS)
    cache.mkdir(parents=True, exist_ok=True)
    np.savez(path, w=w, mise=mise, floor=floor)
    return w, mise, floor


def run_cell(design: str, tau: float, penalty: str, m: int, seed: int, variants: list[str], cache: Path) -> list[dict]:
    sc = PC.scenario(design, m, penalty, tau, seed)
    data = PC._setup(sc)
    w_exact, exact_mise, floor = exact_and_floor(sc, data, cache)
    prob = P.problem_of_scenario(sc, data)
    zero = np.zeros_like(data.beta)
    rows = []
    for name in variants:
        if name in PACKAGE_VARIANTS:
            rows.append(package_row(design, tau, penalty, m, seed, cache, w_exact, exact_mise, floor, sc, data,
                                    variant=name))
            continue
        overrides, kw = VARIANTS[name]
        settings = P.PPGSettings(**overrides)
        row = {"design": design, "tau": tau, "penalty": penalty, "M": m, "seed": seed, "variant": name,
               "rounds": settings.rounds + LS_KWARGS["rounds"], "exact_mise": exact_mise,
               "floor_dist": floor}
        for eps, col in ((EPS, "dist_private_exact"), (None, "dist_nonprivate_exact")):
            rng = np.random.default_rng([seed, 29, 7])
            if kw.get("admm"):
                z = 0.0 if eps is None else math.sqrt(120) / P.total_mu(eps, DELTA)
                est = P.run_admm(prob, rounds=120, eta=48.0, rho=0.1, z=z, rng=rng,
                                 step_units=1.0 / (16.0 * float(np.max(data.basis.eigenvalues)))).estimate
                row["rounds"] = 120
            elif kw.get("oracle"):
                mu = None if eps is None else P.total_mu(eps, DELTA)
                est = P.run_ppg(prob, settings=settings, curvature=P.error_density(design, tau), mu=mu, rng=rng).estimate
            else:
                est, info = P.private_fit(prob, eps=eps, delta=DELTA, settings=settings, rng=rng, bounds=TABLE_BOUNDS,
                                          ls_kwargs=LS_KWARGS)
                if eps is not None:
                    row["curvature_ratio"] = info["curvature"] / P.error_density(design, tau)
            row[col] = PC._mise_of(sc, data, est - w_exact, zero)
        rows.append(row)
    return rows


#: the package's server rule: ``algorithm.rule: newton`` with the table's public response bounds, every other
#: field at its default (the private run gets the total-budget ellipsoid clip of the cell, so its features,
#: exact estimator and floor are the cell's; the privacy-off run has its own clip and is measured against the
#: exact estimator on its own features)
PACKAGE_ALGORITHM = {"rule": "newton", "response_bounds": list(TABLE_BOUNDS)}
#: ``default``: ``algorithm`` left unset (privacy_cost.scenario's rule None), so the rule is the schema's choice
#: for the cell (the Newton rule) and no response bounds are declared
PACKAGE_VARIANTS = {"package": PACKAGE_ALGORITHM, "default": {"rule": None}}


def package_row(design, tau, penalty, m, seed, cache, w_exact, exact_mise, floor, sc, data, *,
                variant: str = "package") -> dict:
    """One cell and seed of the package's in-process run (``fdp_flower.engines.inprocess.run_fdp_admm``),
    private at EPS and with privacy off, with the ``algorithm`` of :data:`PACKAGE_VARIANTS`."""
    from fdp_flower.engines.inprocess import run_fdp_admm

    algorithm = PACKAGE_VARIANTS[variant]
    with warnings.catch_warnings():  # the predicted-cost and mode warnings are said here, not per seed
        warnings.simplefilter("ignore")
        private = PC.scenario(design, m, penalty, tau, seed, algorithm=algorithm)
        plain = PC.scenario(design, m, penalty, tau, seed, eps=None, algorithm=algorithm)
    assert private.algorithm.rule == plain.algorithm.rule == "newton"
    assert PC.data_key(private) == PC.data_key(sc), "the package's private run must see the cell's features"
    res = run_fdp_admm(private, with_reference=False)
    zero = np.zeros_like(data.beta)
    row = {"design": design, "tau": tau, "penalty": penalty, "M": m, "seed": seed, "variant": variant,
           "rounds": private.algorithm.rounds, "exact_mise": exact_mise, "floor_dist": floor,
           "eps_spent": res.ledger.summary(0, private.privacy.delta).headline_eps,
           "dist_private_exact": PC._mise_of(sc, data, res.state.estimate("last") - w_exact, zero)}
    pdata = PC._setup(plain)
    pw, pmise, _ = exact_and_floor(plain, pdata, cache)
    pres = run_fdp_admm(plain, with_reference=False)
    # the privacy-off distance in units of the cell's exact MISE, as summarize() divides by exact_mise
    row["dist_nonprivate_exact"] = PC._mise_of(plain, pdata, pres.state.estimate("last") - pw, zero) / pmise * exact_mise
    return row


def today_rows(seeds: set[int]) -> list[dict]:
    """The current defaults' privacy costs (benchmarks/results/privacy_utility/cost_runs*.csv, the rows of
    benchmarks/privacy_cost.py; the first row of a (cell, seed) when files overlap)."""
    folder = Path(__file__).resolve().parent / "results" / "privacy_utility"
    out, seen = [], set()
    for r in (r for path in sorted(folder.glob("cost_runs*.csv")) for r in PC.read_csv(path)):
        key = (r["design"], r["tau"], r["penalty"], r["M"], r["seed"], r["variant"])
        if key in seen:
            continue
        seen.add(key)
        if r["variant"] == "defaults" and int(r["seed"]) in seeds:
            out.append({"design": r["design"], "tau": float(r["tau"]), "penalty": r["penalty"], "M": int(r["M"]),
                        "seed": int(r["seed"]), "variant": "today", "rounds": int(float(r["rounds"])),
                        "exact_mise": float(r["exact_mise"]), "dist_private_exact": float(r["dist_private_exact"]),
                        "floor_dist": float(r["floor_dist"])})
    return out


def summarize(rows: list[dict]) -> list[dict]:
    cells: dict = {}
    for r in rows:
        cells.setdefault((r["variant"], r["design"], float(r["tau"]), r["penalty"], int(r["M"])), []).append(r)
    out = []
    for (v, d, t, p, m), rs in sorted(cells.items()):
        den = np.array([float(r["exact_mise"]) for r in rs])
        num = np.array([float(r["dist_private_exact"]) for r in rs])
        cost, se = PC.ratio_of_means(num, den)
        floor = float(np.mean([float(r["floor_dist"]) for r in rs]) / den.mean())
        nonpriv = [float(r["dist_nonprivate_exact"]) for r in rs if r.get("dist_nonprivate_exact") not in (None, "")]
        out.append({"variant": v, "design": d, "tau": t, "penalty": p, "M": m, "reps": len(rs), "cost": cost,
                    "cost_se": se, "floor": floor, "goal": max(0.1, 1.5 * floor),
                    "nonprivate_dist": float(np.mean(nonpriv) / den.mean()) if nonpriv else math.nan,
                    "nonprivate_worst": float(max(np.array(nonpriv) / den)) if nonpriv else math.nan,
                    "rounds": int(float(rs[0]["rounds"]))})
    return out


def table(summary: list[dict], variants: list[str]) -> list[str]:
    by = {(c["variant"], c["design"], c["tau"], c["penalty"], c["M"]): c for c in summary}
    keys = sorted({k[1:] for k in by}, key=lambda k: (list(PC.CELLS).index(k[0]), k[1], k[2], k[3]))
    head = "| design | tau | penalty | M | floor | goal max(0.1, 1.5 floor) | " + " | ".join(
        f"{v}: cost (+- se)" for v in variants) + " | " + " | ".join(
        f"{v}: privacy off, dist / exact MISE (worst)" for v in variants if v != "today") + " |"
    lines = [head, "|" + "---|" * (6 + len(variants) + len([v for v in variants if v != "today"]))]
    for k in keys:
        cells = [by.get((v, *k)) for v in variants]
        ref = next(c for c in cells if c is not None)
        row = f"| {k[0]} | {k[1]:g} | {k[2]} | {k[3]} | {ref['floor']:.3f} | {ref['goal']:.3f} | "
        row += " | ".join("-" if c is None else f"{c['cost']:.3f} +- {c['cost_se']:.3f}"
                          + ("" if c["cost"] <= c["goal"] else " **miss**") for c in cells)
        row += " | " + " | ".join("-" if c is None else f"{c['nonprivate_dist']:.4f} ({c['nonprivate_worst']:.4f})"
                                  for v, c in zip(variants, cells) if v != "today") + " |"
        lines.append(row)
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(20)))
    ap.add_argument("--designs", nargs="+", default=list(PC.CELLS), choices=list(PC.CELLS))
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 20, 50])
    ap.add_argument("--penalties", nargs="+", default=["l1", "l2"])
    ap.add_argument("--variants", nargs="+", default=["proposed"], choices=list(VARIANTS))
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "estimates"))
    ap.add_argument("--runs", default=None,
                    help="rows file in --out (default: floor_runs_package.csv for --variants package alone, whose "
                         "rows also record eps_spent; floor_runs.csv otherwise)")
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "fdp-flower-estimates"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.designs, args.clients, args.variants = [1000], ["paper", "brownian"], [10, 50], ["proposed"]
        args.runs = "floor_runs_quick.csv"
    if args.runs is None:
        alone = args.variants[0] if len(args.variants) == 1 else None
        args.runs = f"floor_runs_{alone}.csv" if alone in PACKAGE_VARIANTS else "floor_runs.csv"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = out / args.runs
    cache = Path(args.cache)
    if not args.report_only:
        done = set()
        if runs.is_file():
            done = {(r["design"], float(r["tau"]), r["penalty"], int(r["M"]), int(r["seed"]), r["variant"])
                    for r in PC.read_csv(runs)}
        for seed in args.seeds:
            for d in args.designs:
                for tau in PC.CELLS[d]:
                    if args.quick and tau == 0.9:
                        continue
                    for p in args.penalties:
                        for m in args.clients:
                            todo = [v for v in args.variants if (d, tau, p, m, seed, v) not in done]
                            if not todo:
                                continue
                            t0 = time.perf_counter()
                            PC.append_csv(runs, run_cell(d, tau, p, m, seed, todo, cache))
                            print(f"{d} tau={tau} {p} M={m} seed={seed}: {time.perf_counter() - t0:.0f} s", flush=True)
    rows = PC.read_csv(runs)
    seeds = {int(r["seed"]) for r in rows}
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    rows += today_rows(seeds)
    summary = summarize(rows)
    lines = [f"Seeds: {sorted(seeds)}; rows: {runs.name}", "", *table(summary, ["today", *variants]), ""]
    for v in variants:  # the acceptance line of each variant, computed (not written by hand)
        cells = [c for c in summary if c["variant"] == v]
        met = sum(c["cost"] <= c["goal"] for c in cells)
        worst_off = max((c["nonprivate_worst"] for c in cells), default=math.nan)
        spent = [float(r["eps_spent"]) for r in rows if r["variant"] == v and r.get("eps_spent") not in (None, "")]
        line = (f"- {v}: {met} of {len(cells)} cells at or below max(0.1, 1.5 floor); privacy off at most "
                f"{worst_off:.4f} exact MISEs from the exact estimator (worst repetition); {cells[0]['rounds']} rounds")
        if spent:
            line += f"; eps spent (PLD) {min(spent):.6f} to {max(spent):.6f} of 1"
        lines.append(line)
        today = {(c["design"], c["tau"], c["penalty"], c["M"]): c for c in summary if c["variant"] == "today"}
        worse = []  # item 6: equal or better than today's 120-round ADMM schedule, cell by cell
        for c in cells:
            t = today.get((c["design"], c["tau"], c["penalty"], c["M"]))
            if t is not None and c["cost"] > t["cost"]:
                se = math.hypot(c["cost_se"], t["cost_se"])
                worse.append(f"{c['design']} tau {c['tau']:g} {c['penalty']} M = {c['M']}: {c['cost']:.3f} vs "
                             f"{t['cost']:.3f}, {(c['cost'] - t['cost']) / se:.2f} combined se" if se > 0 else
                             f"{c['design']} tau {c['tau']:g} {c['penalty']} M = {c['M']}: {c['cost']:.3f} vs "
                             f"{t['cost']:.3f}")
        if today:
            lines.append(f"- {v} against today (the ADMM rule's 120 rounds): equal or lower cost in "
                         f"{len(cells) - len(worse)} of {len(cells)} cells"
                         + (f"; higher in {'; '.join(worse)}" if worse else ""))
    text = "\n".join(lines) + "\n"
    (out / (runs.stem + ".md")).write_text(text)
    (out / (runs.stem + ".json")).write_text(json.dumps(summary, indent=1))
    print(text)


if __name__ == "__main__":
    sys.exit(main())
