"""Issue 29, item 2: the share of held-out responses below the fitted tau-quantile at total eps = 1 with
5 sites of 500 curves, on two functional designs that are not the paper's (benchmarks/estimates_designs.py).

    python benchmarks/estimates_coverage.py [--quick] [--reps 20] [--out benchmarks/results/estimates]

Evaluation seeds 100 .. 100 + reps - 1 (seeds 0-3 were looked at while the pipeline was designed).
Per design (``irregular``: irregular 60-point grid, heteroscedastic normal errors, response near 11;
``skewed``: 101-point grid on [0, 2], Gamma(2) errors, response in units of 100 centred near -300) and seed
0 .. reps - 1: 2500 training curves split over 5 sites of 500, 10000 held-out curves, and a public pilot
sample of 1000 curves (its own seed) from which the basis (FPCA, K = 5, with its score variances) and the
declared response bounds (pilot median +- 20 pilot sds) are taken -- the "provided basis" of a deployment.
No penalty; intercept; ellipsoid clip of Mahalanobis radius sqrt(chi2_5(0.9)) = 3.04.

Columns, per tau in {0.1, 0.25, 0.5, 0.75, 0.9}: the mean share of held-out responses at or below the fitted
quantile (sd over seeds; how many of the seeds are within 0.03 of tau) for

- ``exact``: the exact (LP) estimator of the pooled problem, the non-private target;
- ``proposed, eps = 1``: the proposed data-term pipeline (benchmarks/estimates_protocol.private_fit):
  location/scale of y (6 rounds, 8% of the budget), 19 fit rounds (density curvature, 2%; dual averaging;
  empirical-Bayes shrinkage of the noisy directions), the intercept calibrated at the released slopes
  (5 rounds, 10%): 30 rounds, every release charged to one total (eps, delta) = (1, 1e-5);
- ``proposed, eps = 1, no calibration``: the same without the last phase (24 fit rounds);
- ``proposed, privacy off``: the same pipeline without noise;
- ``today: fit(...)``: ``fdp_flower.fit`` with the same basis, clip and eps (its total-budget defaults:
  120 rounds, step 48 in whitened units, tail average).

Also: the privacy cost int (beta_private - beta_exact)^2 / int (beta_exact - beta)^2 of the coefficient
function (ratio of means over seeds) next to its prediction (fdp_flower.privacy.predicted_cost), and
the share of the exact fit's explanatory power the private fit keeps, 1 - (L_private - L_exact) /
(L_unconditional - L_exact) with L the mean held-out check loss and L_unconditional that of the
training sample's tau-quantile (1: as good as exact; 0: no better than ignoring the curves).
Writes coverage.md and coverage_runs.json to --out.
"""
from __future__ import annotations

import argparse
import json
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

from fdp_flower.api import client_partition  # noqa: E402
from fdp_flower.functional.fpca import fit_pooled_fpca  # noqa: E402
from fdp_flower.privacy.predicted_cost import default_clip_radius, predicted_privacy_cost  # noqa: E402

TAUS = (0.1, 0.25, 0.5, 0.75, 0.9)
DESIGNS = ("irregular", "skewed")
N_TRAIN, SITES, N_TEST, N_PILOT, K, EPS, DELTA = 2500, 5, 10_000, 1000, 5, 1.0, 1e-5
LS = {"rounds": 6, "thresholds": 3, "round_shares": (0.1, 0.1, 0.15, 0.15, 0.2, 0.3), "levels": (0.25, 0.75),
      "margin": 0}
FIT = {"curvature": "density", "average": "dual", "transient": 6, "transient_share": 0.1, "density_rounds": (3, 8),
       "shrink_mode": "eb"}
WITH_CALIBRATION = (P.PPGSettings(rounds=19, **FIT), None)  # Budget.for_sample: 8% / 2% / 10% at n = 2500, eps = 1
WITHOUT_CALIBRATION = (P.PPGSettings(rounds=24, **FIT), P.Budget(location_scale=0.08, density=0.02))


def check_loss(pred: np.ndarray, y: np.ndarray, tau: float) -> float:
    return D.check_loss(y - pred, tau)


def true_beta(design: str, grid: np.ndarray) -> np.ndarray:
    if design == "irregular":
        return 2.0 * np.sin(2 * np.pi * grid) + 1.0
    return 100.0 * (np.exp(-grid) - 0.4)


def run_seed(design: str, seed: int, with_today: bool, package_only: bool = False) -> list[dict]:
    import fdp_flower

    tr, te = D.draw(design, seed, N_TRAIN), D.draw(design, seed, N_TEST, part=1)
    pilot = D.draw(design, 10**6 + seed, N_PILOT, part=2)
    basis = fit_pooled_fpca(pilot.curves, pilot.grid, n_components=K)
    sd = float(np.std(pilot.response))
    bounds = (float(np.median(pilot.response)) - 20 * sd, float(np.median(pilot.response)) + 20 * sd)
    parts, _ = client_partition(N_TRAIN, n_clients=SITES, client_ids=None, seed=seed)
    scores = [basis.scores(tr.curves[p]) for p in parts]
    test_scores = basis.scores(te.curves)
    gamma = default_clip_radius(K)
    beta = true_beta(design, tr.grid)
    weights = basis.weights
    rows = []
    for tau in TAUS:
        prob = P.build_problem(scores, [tr.response[p] for p in parts], tau=tau, penalty="none", lam=0.0, clip=gamma,
                               shape="ellipsoid", eigenvalues=basis.eigenvalues)
        c0 = float(prob.features[0][0, 0])
        design_test = np.c_[np.full(N_TEST, c0), test_scores]
        w_exact = P.exact_solution(prob)
        uncond = float(np.quantile(tr.response, tau))
        l_exact = check_loss(design_test @ w_exact, te.response, tau)
        l_uncond = check_loss(np.full(N_TEST, uncond), te.response, tau)
        exact_mise = float(((basis.function(w_exact[1:]) - beta) ** 2) @ weights)

        def add(what, pred, w=None, **extra):
            row = {"design": design, "seed": seed, "tau": tau, "what": what,
                   "coverage": D.coverage(pred, te.response),
                   "kept": 1 - (check_loss(pred, te.response, tau) - l_exact) / (l_uncond - l_exact),
                   "exact_mise": exact_mise, **extra}
            if w is not None:
                row["dist_exact"] = float(((basis.function(w[1:] - w_exact[1:])) ** 2) @ weights)
            rows.append(row)

        add("exact", design_test @ w_exact, w_exact)
        for what, eps, (settings, budget) in () if package_only else (("proposed, eps = 1", EPS, WITH_CALIBRATION),
                                              ("proposed, eps = 1, no calibration", EPS, WITHOUT_CALIBRATION),
                                              ("proposed, privacy off", None, WITH_CALIBRATION)):
            w, info = P.private_fit(prob, eps=eps, delta=DELTA, settings=settings, rng=np.random.default_rng([seed, 3]),
                                    bounds=bounds, budget=budget, ls_kwargs=LS)
            add(what, design_test @ w, w)
        for what, eps in (("package: fit(rule='newton'), eps = 1", EPS), ("package: fit(rule='newton'), privacy off", None)):
            m = fdp_flower.fit(tr.curves, tr.response, grid=tr.grid, tau=tau, eps=eps, delta=DELTA, n_clients=SITES,
                               seed=seed, basis=basis, clip=gamma, clip_shape="ellipsoid", penalty="none", lam=0.0,
                               reference=False, rule="newton", response_bounds=bounds, noise_source="seeded")
            add(what, m.predict(te.curves), _model_w(m))
        if with_today:
            m = fdp_flower.fit(tr.curves, tr.response, grid=tr.grid, tau=tau, eps=EPS, delta=DELTA, n_clients=SITES,
                               seed=seed, basis=basis, clip=gamma, clip_shape="ellipsoid", penalty="none", lam=0.0,
                               reference=False)
            add("today: fit(), same basis and clip", m.predict(te.curves), m.w)
    return rows


def _model_w(model) -> np.ndarray:
    """(c0 b-coordinate, coefficients) of a fitted model in the benchmark's coordinates (intercept column c0)."""
    return np.r_[[np.nan], model.coefficients]


def report(rows: list[dict]) -> str:
    lines = []
    for design in DESIGNS:
        rs = [r for r in rows if r["design"] == design]
        if not rs:
            continue
        seeds = sorted({r["seed"] for r in rs})
        lines += [f"### {design} ({len(seeds)} seeds)", "",
                  "| fit | " + " | ".join(f"tau = {t:g}" for t in TAUS) + " |", "|---|" + "---|" * len(TAUS)]
        whats = list(dict.fromkeys(r["what"] for r in rs))
        for what in whats:
            cells = []
            for t in TAUS:
                v = np.array([r["coverage"] for r in rs if r["what"] == what and r["tau"] == t])
                cells.append(f"{v.mean():.3f} ({v.std():.3f}; {int(np.sum(np.abs(v - t) <= 0.03))}/{v.size})")
            lines.append(f"| {what} | " + " | ".join(cells) + " |")
        lines += ["", "Privacy cost of the coefficient function (ratio of means over seeds) against its prediction, "
                      "and the share of the exact fit's explanatory power kept (mean over seeds):", "",
                  "| fit | " + " | ".join(f"tau = {t:g}" for t in TAUS) + " |", "|---|" + "---|" * len(TAUS)]
        pred = [predicted_privacy_cost([N_TRAIN // SITES] * SITES, eps=EPS, delta=DELTA, tau=t, n_components=K).cost
                for t in TAUS]
        lines.append("| predicted privacy cost (floor, whole budget) | " + " | ".join(f"{p:.2f}" for p in pred) + " |")
        for what in whats:
            if what == "exact":
                continue
            cells = []
            for t in TAUS:
                sel = [r for r in rs if r["what"] == what and r["tau"] == t]
                cost = np.mean([r["dist_exact"] for r in sel]) / np.mean([r["exact_mise"] for r in sel])
                kept = np.mean([r["kept"] for r in sel])
                cells.append(f"cost {cost:.2f}, kept {kept:.2f}")
            lines.append(f"| {what} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=100,
                    help="seeds first-seed .. first-seed + reps - 1 (0-3 were used while designing the pipeline)")
    ap.add_argument("--designs", nargs="+", default=list(DESIGNS), choices=DESIGNS)
    ap.add_argument("--no-today", action="store_true", help="skip the fdp_flower.fit column")
    ap.add_argument("--out", default="benchmarks/results/estimates")
    ap.add_argument("--quick", action="store_true", help="2 seeds")
    ap.add_argument("--package-only", action="store_true",
                    help="only the exact fit and the package's fit(rule='newton') (not the prototype's rows)")
    args = ap.parse_args()
    reps = 2 if args.quick else args.reps
    rows = []
    for seed in range(args.first_seed, args.first_seed + reps):
        for design in args.designs:
            t0 = time.perf_counter()
            rows += run_seed(design, seed, not args.no_today, args.package_only)
            print(f"{design} seed {seed}: {time.perf_counter() - t0:.0f} s", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = ("coverage_quick" if args.quick else "coverage") + ("_package" if args.package_only else "")
    text = report(rows)
    (out / f"{name}.md").write_text(text)
    (out / f"{name}_runs.json").write_text(json.dumps(rows, indent=1, default=float))
    print(text)


if __name__ == "__main__":
    sys.exit(main())
