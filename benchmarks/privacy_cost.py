"""Privacy cost (issue 16): distance of the private estimate to the exact estimator, per unit of statistical error.

    python benchmarks/privacy_cost.py [--reps 20] [--first-seed 0] [--designs paper brownian heavy_tailed]
        [--clients 10 20 50] [--out benchmarks/results/privacy_utility]

privacy cost = mean over repetitions of int (beta_private - beta_exact)^2 / mean over repetitions of
int (beta_exact - beta)^2, where beta_exact is the exact non-private minimizer of the same penalized
problem on the same features (the run's basis and clipped scores, pooled over the clients;
:func:`fdp_flower.algorithms.fdp_admm.reference.solve_reference`) and beta the true coefficient
function.  Unlike the MISE ratio it cannot be lowered by noise that undoes shrinkage.  The standard
error is the delta-method one of a ratio of two means over repetitions.

Every private run uses the total-budget defaults of ``fdp_flower.algorithms.fdp_admm.config``
(``privacy.mode: total``, eps = 1, delta = 1e-5 per client, nothing else set) with n = 100000,
K = 10 pooled FPCA components and lam = 0.05, on three designs (``data.design``,
:data:`fdp_flower.functional.design.DESIGNS`): the paper's (tau = 0.5, 0.9), ``brownian``
(tau = 0.3) and ``heavy_tailed`` (Cauchy errors, tau = 0.7).  Evaluation seeds are
first-seed .. first-seed + reps - 1 (default 0 .. 19); tuning used seeds >= 1000 only.  The same
runs give the non-private F-ADMM check (privacy off, fixed rho, 30 rounds): relative objective gap
(F(w^30) - F*) / F* with F* the exact optimum.

Outputs in ``--out``: ``cost_runs.csv`` (one row per run, appended); the table opens ``table.md``
(written by ``benchmarks/privacy_utility.py``'s report, which this script calls) and the plot is
``privacy_cost.png``; ``cost_note.md`` (hand-written) is printed under the table.
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

from fdp_flower.algorithms.fdp_admm.config import Scenario, parse_scenario  # noqa: E402
from fdp_flower.algorithms.fdp_admm.plan import build_objective, split_coefficients  # noqa: E402
from fdp_flower.algorithms.fdp_admm.reference import pooled_objective, solve_reference  # noqa: E402
from fdp_flower.engines.batched import data_key, run_batched, shared_setup  # noqa: E402
from fdp_flower.functional import design  # noqa: E402

DELTA = 1.0e-5
#: (design, quantile levels) of the evaluation
CELLS = {"paper": (0.5, 0.9), "brownian": (0.3,), "heavy_tailed": (0.7,)}
PENALTIES = ("l1", "l2")
CLIENTS = (10, 20, 50)
GOAL = 0.1
#: the non-private check's rule: fixed rho, all 30 rounds (the rule these columns were recorded with;
#: the privacy-off defaults -- residual balancing and the residual stop -- are benchmarks/fadmm_convergence.py's)
FIXED_RHO = {"rho_rule": {"kind": "fixed"}, "stopping": {"kind": "cap"}}
TABLE_INTRO = (
    "`python benchmarks/privacy_cost.py` (docstring; docs/choosing_a_budget.md). n = 100000, K = 10 pooled FPCA, "
    "lam = 0.05, rho = 0.1, total eps = 1 and delta = 1e-5 per client for the whole run, every other setting at the "
    "total-budget defaults (ellipsoid clip of Mahalanobis radius 4, 120 rounds, constant step 48 in whitened units, "
    "tail average of the last half). Privacy cost = mean over repetitions of int (beta_private - beta_exact)^2 / mean "
    "of int (beta_exact - beta)^2, beta_exact the exact non-private minimizer on the same clipped scores "
    "(+- delta-method standard error). MISE ratio = mean private MISE / mean exact MISE. Floor = the cost of the "
    "best unbiased one-shot gradient perturbation with the same clip and budget (see noise_floor); shrunk floor = "
    "the same after the oracle's coordinatewise shrinkage. Non-private F-ADMM: the scenario with privacy off "
    "(fixed rho = 0.1, 30 rounds, Theorem 2 step; the current privacy-off defaults are in fadmm_convergence.md), worst relative objective gap (F(w^30) - F*) / F* over the repetitions, "
    "and the mean int (w^30 - w_exact)^2 / exact MISE.")


def scenario(design_name: str, num_clients: int, penalty: str, tau: float, seed: int, *, eps: float | None = 1.0,
             algorithm: dict | None = None, model: dict | None = None) -> Scenario:
    """The evaluation scenario: total-budget mode at ``eps`` (None: privacy off) with the ADMM rule (this
    benchmark measures it; ``algorithm={"rule": "newton", ...}`` asks for the Newton rule, ``{"rule": None}`` leaves
    the rule to the schema's default), every other setting at its default unless ``algorithm`` / ``model``
    (tuning only) say otherwise."""
    data = {"name": f"cost-{design_name}-M{num_clients}-{penalty}-t{tau}-s{seed}", "seed": seed,
            "data": {"n_samples": 100_000, "design": design_name}, "federation": {"num_clients": num_clients},
            "basis": {"kind": "pooled", "n_components": 10},
            "model": {"loss": {"kind": "quantile", "tau": tau}, "penalty": {"kind": penalty}} | (model or {}),
            "privacy": {"mode": "total", "eps": eps, "delta": DELTA} if eps is not None else {"enabled": False}}
    data["algorithm"] = {"rule": "admm", **(algorithm or {})}
    if data["algorithm"]["rule"] is None:  # rule None: left unset, the schema's default rule
        del data["algorithm"]["rule"]
    return parse_scenario(data)


_EXACT: dict = {}


def exact_on_features(sc: Scenario, data) -> tuple[np.ndarray, float, float]:
    """(w_exact, its MISE, F*): the exact estimator on the run's own clipped scores (memoized)."""
    key = (data_key(sc), sc.model.penalty.model_dump_json(), sc.model.loss.tau)
    if key not in _EXACT:
        if len(_EXACT) > 64:
            _EXACT.clear()
        _EXACT[key] = _solve_exact(sc, data)
    return _EXACT[key]


def _solve_exact(sc: Scenario, data) -> tuple[np.ndarray, float, float]:
    ob = build_objective(sc)
    y = data.site_for(sc).response
    feats = [data.site.features[i, : int(m)] for i, m in enumerate(data.sizes)]
    ys = [y[i, : int(m)] for i, m in enumerate(data.sizes)]
    ref = solve_reference(feats, ys, ob.loss, ob.penalty, ob.lam)
    return ref.w, float(_mise_of(sc, data, ref.w, data.beta)), float(ref.objective)


def _mise_of(sc: Scenario, data, w: np.ndarray, target: np.ndarray) -> float:
    return float(design.mise(data.basis.function(split_coefficients(sc, w)[1]), target, data.basis.grid))


def pld_noise_multiplier(eps: float, delta: float) -> float:
    """sigma / Delta of the one Gaussian release that spends exactly (eps, delta) (the PLD of L
    composed Gaussians of multiplier z is that of one with multiplier z / sqrt(L))."""
    from scipy import optimize, stats

    def excess(mu):
        return stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2) - delta

    return 1.0 / optimize.brentq(excess, 1e-3, 50.0)


def noise_floor(sc: Scenario, data, eps: float) -> float:
    """E int (beta_floor - beta_exact)^2 of :func:`_floor_covariance`'s release."""
    return _expected_sq_function(data, _floor_covariance(sc, data, eps))


def _floor_covariance(sc: Scenario, data, eps: float) -> np.ndarray:
    """Covariance of the coefficients of an idealized gradient perturbation with the run's clip:
    every client spends its whole (eps, delta) on one release of its mean loss gradient at the exact
    solution, and the server takes one exact Newton step, w = w* - H^{-1} (1/M) sum_i noise_i, with
    H = f(q_tau) (1/n) sum a a^T (+ lam / M for l2: the curvature of f_i averaged) and f the error
    density at its tau-quantile.  Noise of client i: replace-one sensitivity 2 G / m_i with the
    run's clip (G = max(tau, 1 - tau) c1, isotropic, for the sphere; Mahalanobis with scales
    c1 sqrt(lambda_k) for the ellipsoid).  It is the error of the best unbiased use of one noisy
    gradient (and the order that an iterative method averaging its noise can reach); a shrunk
    estimate can do better (:func:`shrunk_floor`).  It is not a minimax lower bound."""
    d = design.get_design(sc.data.design)
    tau = sc.model.loss.tau
    from scipy import stats

    law = {"t3": stats.t(3), "normal": stats.norm(), "cauchy": stats.cauchy()}[d.error_law]
    density = float(law.pdf(law.ppf(tau)) / d.error_scale)
    feats = np.concatenate([data.site.features[i, : int(m)] for i, m in enumerate(data.sizes)])
    dim = feats.shape[1]
    hess = density * feats.T @ feats / feats.shape[0]
    if sc.model.penalty.kind == "l2":
        hess = hess + sc.model.penalty.lam / sc.federation.num_clients * np.eye(dim)
    z = pld_noise_multiplier(eps, sc.privacy.delta)
    ones = np.ones(dim)
    if sc.model.clip_shape == "sphere":
        g, scales = max(tau, 1 - tau) * sc.model.clip_c1, ones
    else:
        g, scales = max(tau, 1 - tau), sc.model.clip_c1 * np.sqrt(data.basis.eigenvalues)
    per_client = (2.0 * g * z / data.sizes.astype(float)) ** 2  # (M,) variance per unit scale
    noise_cov = np.diag(scales**2) * per_client.sum() / sc.federation.num_clients**2
    hinv = np.linalg.inv(hess)
    return hinv @ noise_cov @ hinv


def shrunk_floor(sc: Scenario, data, eps: float, w_exact: np.ndarray) -> float:
    """The same release after the best coordinatewise linear shrinkage that knows w_exact (an oracle):
    sum_k c_k^2 v_k / (c_k^2 + v_k), c_k the exact coefficients and v_k the release's variances in
    the orthonormal FPCA basis.  No estimator that shrinks the one-shot release coordinatewise does
    better; an iterative run stopped early shrinks too, so it can beat :func:`noise_floor`."""
    var = np.diag(_floor_covariance(sc, data, eps))
    c2 = split_coefficients(sc, w_exact)[1] ** 2
    return float(np.sum(c2 * var / (c2 + var)))


def _expected_sq_function(data, cov: np.ndarray) -> float:
    """E int (sum_k x_k phi_k)^2 for x ~ N(0, cov): tr(cov Gram) with the basis's Gram matrix."""
    from fdp_flower.functional.fpca import quadrature_weights

    phi = data.basis.function(np.eye(cov.shape[0]))  # (K, G)
    gram = (phi * quadrature_weights(data.basis.grid)) @ phi.T
    return float(np.trace(cov @ gram))


def objective_at(sc: Scenario, data, w: np.ndarray) -> float:
    ob = build_objective(sc)
    y = data.site_for(sc).response
    feats = [data.site.features[i, : int(m)] for i, m in enumerate(data.sizes)]
    ys = [y[i, : int(m)] for i, m in enumerate(data.sizes)]
    return pooled_objective(w, feats, ys, ob.loss, ob.penalty, ob.lam)


_SETUP: dict = {}


def _setup(sc: Scenario):
    """The pooled basis and clipped scores of a run (memoized per data key)."""
    key = data_key(sc)
    if key not in _SETUP:
        if len(_SETUP) >= 4:
            _SETUP.clear()
        _SETUP[key] = shared_setup(sc)
    return _SETUP[key]


def run_seed(design_name: str, num_clients: int, seed: int, variants: dict | None = None, *,
             nonprivate: bool = True) -> list[dict]:
    """Every (penalty, tau) of one design, M and seed: private runs of each variant (default: the
    defaults), the non-private F-ADMM run (if ``nonprivate``), the exact estimator.  One row per
    (penalty, tau, variant)."""
    variants = variants or {"defaults": {}}
    rows = []
    for penalty in PENALTIES:
        for tau in CELLS[design_name]:
            private = {name: scenario(design_name, num_clients, penalty, tau, seed, **kw) for name, kw in variants.items()}
            plain = scenario(design_name, num_clients, penalty, tau, seed, eps=None, algorithm=FIXED_RHO)
            results = run_batched([*private.values(), plain] if nonprivate else list(private.values()), history=False)
            for name, sc, res in zip(private, private.values(), results):
                data = _setup(sc)
                w_exact, exact_mise, f_star = exact_on_features(sc, data)
                zero = np.zeros_like(data.beta)
                dist = _mise_of(sc, data, res.estimate_w - w_exact, zero)
                row = {"design": design_name, "M": num_clients, "penalty": penalty, "tau": tau, "seed": seed,
                       "variant": name, "clip_shape": sc.model.clip_shape, "clip_c1": sc.model.clip_c1,
                       "rounds": sc.algorithm.rounds, "dist_private_exact": dist, "exact_mise": exact_mise,
                       "private_mise": res.final["mise_estimate"], "eps_zcdp": res.final.get("eps_zcdp", math.nan),
                       "floor_dist": noise_floor(sc, data, sc.privacy.eps),
                       "shrunk_floor_dist": shrunk_floor(sc, data, sc.privacy.eps, w_exact)}
                if nonprivate and name == next(iter(variants)):
                    pdata = _setup(plain)
                    pw, pmise, pf = exact_on_features(plain, pdata)
                    f30 = objective_at(plain, pdata, results[-1].global_w)
                    row |= {"nonprivate_rounds": plain.algorithm.rounds, "nonprivate_gap": (f30 - pf) / pf,
                            "nonprivate_dist": _mise_of(plain, pdata, results[-1].global_w - pw, zero) / pmise}
                rows.append(row)
    return rows


def append_csv(path: Path, rows: list[dict]) -> None:
    fields = sorted({k for r in rows for k in r})
    new = not path.is_file()
    if not new:
        with path.open() as fh:
            fields = next(csv.reader(fh))
    with path.open("a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, restval="")
        if new:
            writer.writeheader()
        writer.writerows(rows)


def read_csv(path: Path) -> list[dict]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def ratio_of_means(num: np.ndarray, den: np.ndarray) -> tuple[float, float]:
    """mean(num) / mean(den) and its delta-method standard error over paired repetitions."""
    n = num.size
    r = num.mean() / den.mean()
    if n < 2:
        return float(r), math.nan
    resid = (num - r * den) / den.mean()
    return float(r), float(resid.std(ddof=1) / math.sqrt(n))


def summarize(rows: list[dict], variant: str = "defaults") -> list[dict]:
    cells: dict = {}
    for r in rows:
        if r["variant"] == variant:
            cells.setdefault((r["design"], int(r["M"]), r["penalty"], float(r["tau"])), []).append(r)
    out = []
    for (d, m, p, t), rs in cells.items():
        num = np.array([float(r["dist_private_exact"]) for r in rs])
        den = np.array([float(r["exact_mise"]) for r in rs])
        priv = np.array([float(r["private_mise"]) for r in rs])
        cost, se = ratio_of_means(num, den)
        mr, mse = ratio_of_means(priv, den)
        gaps = [float(r["nonprivate_gap"]) for r in rs if r.get("nonprivate_gap") not in (None, "")]
        dists = [float(r["nonprivate_dist"]) for r in rs if r.get("nonprivate_dist") not in (None, "")]
        floor = np.mean([float(r["floor_dist"]) for r in rs]) / den.mean()
        shrunk = np.mean([float(r["shrunk_floor_dist"]) for r in rs]) / den.mean()
        out.append({"design": d, "M": m, "penalty": p, "tau": t, "cost": cost, "cost_se": se, "mise_ratio": mr,
                    "mise_ratio_se": mse, "exact_mise": float(den.mean()), "reps": len(rs),
                    "nonprivate_gap": max(gaps) if gaps else math.nan,
                    "nonprivate_dist": float(np.mean(dists)) if dists else math.nan,
                    "floor": float(floor), "shrunk_floor": float(shrunk), "rounds": int(float(rs[0]["rounds"])),
                    "clip": f"{rs[0]['clip_shape']} {float(rs[0]['clip_c1']):g}"})
    order = {d: i for i, d in enumerate(CELLS)}
    return sorted(out, key=lambda c: (order.get(c["design"], 9), c["tau"], c["penalty"], c["M"]))


def table_lines(summary: list[dict]) -> list[str]:
    lines = ["| design | tau | penalty | M | privacy cost (mean +- se) | goal <= 0.1 | floor | shrunk floor "
             "| MISE ratio (+- se) | exact MISE | reps | F-ADMM, no noise, 30 rounds: worst objective gap "
             "| ... its distance to exact / exact MISE |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in summary:
        met = "met" if c["cost"] <= GOAL else f"missed (x{c['cost'] / GOAL:.1f})"
        lines.append(f"| {c['design']} | {c['tau']:g} | {c['penalty']} | {c['M']} | {c['cost']:.3f} +- {c['cost_se']:.3f} "
                     f"| {met} | {c['floor']:.3f} | {c['shrunk_floor']:.3f} "
                     f"| {c['mise_ratio']:.2f} +- {c['mise_ratio_se']:.2f} | {c['exact_mise']:.4f} | {c['reps']} "
                     f"| {100 * c['nonprivate_gap']:.2f}% | {c['nonprivate_dist']:.2f} |")
    return lines


def plot(summary: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, penalty in zip(axes, PENALTIES):
        for i, (d, taus) in enumerate(CELLS.items()):
            for j, tau in enumerate(taus):
                pts = [(c["M"], c["cost"], c["cost_se"], c["mise_ratio"]) for c in summary
                       if (c["design"], c["penalty"], c["tau"]) == (d, penalty, tau)]
                if not pts:
                    continue
                m, cost, se, mr = map(np.array, zip(*sorted(pts)))
                color = f"C{2 * i + j}"
                ax.errorbar(m, cost, yerr=np.nan_to_num(se), fmt="-o", color=color, capsize=2,
                            label=f"{d}, tau = {tau:g}: privacy cost")
                ax.plot(m, mr, ":x", color=color, label=f"{d}, tau = {tau:g}: MISE ratio")
        ax.axhline(GOAL, color="grey", lw=0.8, ls="--")
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(CLIENTS, [str(m) for m in CLIENTS])
        ax.set_xlabel("clients M (n = 100000, total eps = 1, delta = 1e-5)")
        ax.set_title(f"{penalty} penalty")
    axes[0].set_ylabel("privacy cost / MISE ratio")
    axes[1].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--designs", nargs="+", default=list(CELLS), choices=list(CELLS))
    parser.add_argument("--clients", type=int, nargs="+", default=list(CLIENTS))
    parser.add_argument("--out", default="benchmarks/results/privacy_utility")
    parser.add_argument("--nonprivate-reps", type=int, default=20,
                        help="run the non-private F-ADMM check on the first this many seeds only")
    parser.add_argument("--runs", default="cost_runs.csv", help="file in --out the rows are appended to")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = out / args.runs
    if not args.report_only:
        done = {(r["design"], int(r["M"]), int(r["seed"])) for path in out.glob("cost_runs*.csv")
                for r in read_csv(path)}
        for seed in range(args.first_seed, args.first_seed + args.reps):
            for d in args.designs:
                for m in args.clients:
                    if (d, m, seed) in done:
                        continue
                    t0 = time.perf_counter()
                    append_csv(runs, run_seed(d, m, seed, nonprivate=seed < args.first_seed + args.nonprivate_reps))
                    print(f"{d} M={m} seed={seed}: {time.perf_counter() - t0:.0f} s", flush=True)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import privacy_utility

    privacy_utility.write_report(out)


if __name__ == "__main__":
    sys.exit(main())
