"""Issue 29, item 3 for FDP-ADMM: privacy off means the exact estimator.

    python benchmarks/estimates_exact.py [--quick] [--seeds 1000] [--out benchmarks/results/estimates]

Distance to the exact estimator, int (beta - beta_exact)^2 / int (beta_exact - beta)^2 (the exact MISE), of
the privacy-off fits, never the objective gap alone.

Part 1, the privacy-cost table's designs (benchmarks/privacy_cost.py: n = 100000, pooled FPCA K = 10,
lam = 0.05, every (design, tau, penalty, M) cell), after L rounds:

- ``run defaults``: what ``fdp-flower run`` does with privacy off today (field defaults: Theorem 2 step x 60,
  residual balancing of rho, the residual stop, a 30-round cap), through the package's batched engine;
- ``fit defaults``: what ``fit(eps=None)`` does today (80 rounds, constant step 3, tail average of the last
  half, residual balancing and the residual stop), through the package's batched engine;
- ``newton (diag), L``: the proposed server rule without noise (benchmarks/estimates_protocol.run_ppg with the
  public FPCA eigenvalues as preconditioner, the released residual density as curvature, dual averaging),
  the response's quartiles first (6 rounds), L fit rounds;
- ``newton + smoothing``: the same with the Gaussian-smoothed check loss for the first rounds (h = 0.5, 0.25,
  0.1 in units of the response's scale, then none);
- ``gradient (identity), L``: the same rule without the preconditioner (a scalar step).

Part 2, the issue's second case: a functional design that is not the benchmark's (``skewed`` of
benchmarks/estimates_designs.py, here with n = 20000 over 8 sites), a provided FPCA basis (K = 10, from a
public pilot sample of 2000 curves), tau = 0.3, intercept, l1 lam = 0.05, the response as drawn and
shifted by +1000: ``run defaults``, ``fit defaults`` (both through the package's in-process engine) and the
proposed rule without noise (warm start = the response's private location, 6 + 24 rounds), also without the
warm start (no location/scale phase: started at 0 in the response's units).
Writes exact.md and exact.json to --out.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

warnings.filterwarnings("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import estimates_designs as D  # noqa: E402
import estimates_floor as EF  # noqa: E402
import estimates_protocol as P  # noqa: E402
import privacy_cost as PC  # noqa: E402

ROUNDS = (6, 12, 18, 24)
CACHE = Path.home() / ".cache" / "fdp-flower-estimates"
BASE = {"curvature": "density", "average": "dual", "transient": 6, "transient_share": 0.1, "density_rounds": (3, 8)}


def newton_settings(rounds: int, **kw) -> P.PPGSettings:
    t = min(6, max(1, rounds // 3))
    dens = tuple(r for r in (min(3, t - 1), 8) if r < rounds) or (0,)
    return P.PPGSettings(**{**BASE, "rounds": rounds, "transient": t, "density_rounds": dens, **kw})


def part1(seeds: list[int], designs: list[str], clients: list[int]) -> list[dict]:
    from fdp_flower.engines.batched import run_batched

    rows = []
    for seed in seeds:
        for design in designs:
            for tau in PC.CELLS[design]:
                for pen in ("l1", "l2"):
                    for m in clients:
                        t0 = time.perf_counter()
                        sc = PC.scenario(design, m, pen, tau, seed)
                        data = PC._setup(sc)
                        w_exact, mise, _ = EF.exact_and_floor(sc, data, CACHE)
                        zero = np.zeros_like(data.beta)

                        def dist(w):
                            return PC._mise_of(sc, data, w - w_exact, zero) / mise

                        run_sc = PC.scenario(design, m, pen, tau, seed, eps=None)
                        fit_sc = PC.scenario(design, m, pen, tau, seed, eps=None, algorithm={
                            "rounds": 80, "step": {"kind": "constant", "eta0": 3.0},
                            "estimator": {"kind": "tail_average", "tail_fraction": 0.5}})
                        for what, s in (("run defaults", run_sc), ("fit defaults", fit_sc)):
                            res = run_batched([s], history=False)[0]
                            rows.append({"part": 1, "design": design, "tau": tau, "penalty": pen, "M": m, "seed": seed,
                                         "what": what, "rounds": int(len(res.history) or s.algorithm.rounds),
                                         "stop_reason": res.stop_reason, "dist": dist(res.estimate_w)})
                        prob = P.problem_of_scenario(sc, data)
                        for rounds in ROUNDS:
                            for what, st in ((f"newton (diag)", newton_settings(rounds)),
                                             (f"newton + smoothing", newton_settings(rounds, bandwidths=(0.5, 0.25, 0.1, 0.0))),
                                             (f"gradient (identity)", newton_settings(rounds, preconditioner="identity"))):
                                w, _ = P.private_fit(prob, eps=None, delta=1e-5, settings=st, rng=np.random.default_rng(0),
                                                     bounds=EF.TABLE_BOUNDS, ls_kwargs=EF.LS_KWARGS)
                                rows.append({"part": 1, "design": design, "tau": tau, "penalty": pen, "M": m,
                                             "seed": seed, "what": what, "rounds": rounds + EF.LS_KWARGS["rounds"],
                                             "dist": dist(w)})
                        print(f"{design} tau={tau} {pen} M={m} seed={seed}: {time.perf_counter() - t0:.0f} s", flush=True)
    return rows


def part2(seeds: list[int], n: int = 20_000, sites: int = 8, k: int = 10, tau: float = 0.3) -> list[dict]:
    import fdp_flower
    from fdp_flower.algorithms.fdp_admm.config import parse_scenario
    from fdp_flower.api import client_partition
    from fdp_flower.engines.inprocess import run_fdp_admm
    from fdp_flower.functional.fpca import fit_pooled_fpca
    from fdp_flower.outputs.models import FunctionalModel

    import estimates_coverage as C

    rows = []
    for seed in seeds:
        tr = D.draw("skewed", seed, n, scale=1.0, location=0.0)
        pilot = D.draw("skewed", 10**6 + seed, 2000, part=2, scale=1.0, location=0.0)
        basis = fit_pooled_fpca(pilot.curves, pilot.grid, n_components=k)
        beta = C.true_beta("skewed", tr.grid) / 100.0
        parts, _ = client_partition(n, n_clients=sites, client_ids=None, seed=seed)
        scores = [basis.scores(tr.curves[p]) for p in parts]
        for shift in (0.0, 1000.0):
            y = tr.response + shift
            prob = P.build_problem(scores, [y[p] for p in parts], tau=tau, penalty="l1", lam=0.05, clip=3.0,
                                   eigenvalues=basis.eigenvalues)
            w_exact = P.exact_solution(prob)
            mise = float(((basis.function(w_exact[1:]) - beta) ** 2) @ basis.weights)

            def dist(w):
                return float(((basis.function(np.asarray(w)[1:] - w_exact[1:])) ** 2) @ basis.weights) / mise

            with tempfile.TemporaryDirectory() as tmp:
                m = fdp_flower.fit(tr.curves, y, grid=tr.grid, tau=tau, eps=None, n_clients=sites, seed=seed, basis=basis,
                                   reference=False, data_dir=tmp)
                rows.append({"part": 2, "seed": seed, "shift": shift, "what": "fit defaults", "dist": dist(m.w),
                             "rounds": int(len(m.history)), "stop_reason": m.stop_reason})
                data = m.scenario.model_dump(mode="json")
                data["algorithm"] = {"kind": "fdp_admm"}  # the field defaults, as a scenario file without them
                res = run_fdp_admm(parse_scenario(data), with_reference=False)
                mr = FunctionalModel.from_run(res)
                rows.append({"part": 2, "seed": seed, "shift": shift, "what": "run defaults", "dist": dist(mr.w),
                             "rounds": int(len(mr.history)), "stop_reason": mr.stop_reason})
            spread = float(np.std(pilot.response))
            bounds = (float(np.median(pilot.response)) + shift - 20 * spread,
                      float(np.median(pilot.response)) + shift + 20 * spread)
            for what, kw in (("proposed (warm start)", {"bounds": bounds}), ("proposed, no warm start", {"standardize": False})):
                w, _ = P.private_fit(prob, eps=None, delta=1e-5, settings=newton_settings(24), rng=np.random.default_rng(0),
                                     ls_kwargs=EF.LS_KWARGS, **kw)
                rows.append({"part": 2, "seed": seed, "shift": shift, "what": what, "dist": dist(w),
                             "rounds": 24 + (EF.LS_KWARGS["rounds"] if "bounds" in kw else 0)})
            print(f"part 2 seed {seed} shift {shift:g} done", flush=True)
    return rows


def report(rows: list[dict]) -> str:
    lines = ["## Part 1: the privacy-cost table's cells, privacy off", "",
             "Distance to the exact estimator / exact MISE: the worst cell (and the median over cells); 'cells <= 0.02': "
             "how many of the cells meet item 3's goal.", "",
             "| fit | rounds | worst cell | median | cells <= 0.02 | worst cell is |", "|---|---|---|---|---|---|"]
    p1 = [r for r in rows if r["part"] == 1]
    keys = list(dict.fromkeys((r["what"], r["rounds"]) for r in p1))
    for what, rounds in keys:
        sel = [r for r in p1 if r["what"] == what and r["rounds"] == rounds]
        cells: dict = {}
        for r in sel:
            cells.setdefault((r["design"], r["tau"], r["penalty"], r["M"]), []).append(r["dist"])
        vals = {c: float(np.mean(v)) for c, v in cells.items()}
        worst = max(vals, key=vals.get)
        label = f"{rounds}" if what not in ("run defaults", "fit defaults") else \
            f"cap {rounds} ({sorted({r['stop_reason'].split(':')[0] for r in sel})[0]})"
        lines.append(f"| {what} | {label} | {vals[worst]:.4f} | {np.median(list(vals.values())):.4f} | "
                     f"{sum(v <= 0.02 for v in vals.values())}/{len(vals)} | {worst[0]} tau={worst[1]:g} {worst[2]} M={worst[3]} |")
    p2 = [r for r in rows if r["part"] == 2]
    if p2:
        lines += ["", "## Part 2: design 'skewed', n = 20000 over 8 sites, provided FPCA basis, tau = 0.3, privacy off", "",
                  "| fit | shift | distance to exact / exact MISE (mean over seeds) | rounds | stop_reason |",
                  "|---|---|---|---|---|"]
        for what in dict.fromkeys(r["what"] for r in p2):
            for shift in (0.0, 1000.0):
                sel = [r for r in p2 if r["what"] == what and r["shift"] == shift]
                reason = sorted({r.get("stop_reason", "-").split(":")[0] for r in sel})
                lines.append(f"| {what} | +{shift:g} | {np.mean([r['dist'] for r in sel]):.4f} | "
                             f"{sorted({r['rounds'] for r in sel})} | {', '.join(reason)} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1000])
    ap.add_argument("--part2-seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default="benchmarks/results/estimates")
    ap.add_argument("--quick", action="store_true", help="paper and brownian, M = 10 and 50, one part-2 seed")
    args = ap.parse_args()
    designs, clients, p2 = list(PC.CELLS), [10, 20, 50], args.part2_seeds
    if args.quick:
        designs, clients, p2 = ["paper", "brownian"], [10, 50], [0]
    rows = part1(args.seeds, designs, clients) + part2(p2)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "exact_quick" if args.quick else "exact"
    text = report(rows)
    (out / f"{name}.md").write_text(text)
    (out / f"{name}.json").write_text(json.dumps(rows, indent=1, default=float))
    print(text)


if __name__ == "__main__":
    sys.exit(main())
