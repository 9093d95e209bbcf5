"""Per-direction (preconditioned) steps for FDP-ADMM in total-budget mode: privacy cost on TUNING seeds.

    nice -n 10 python benchmarks/privacy_cost_precondition.py [--seeds 1000 1001 1002]
        [--out benchmarks/results/privacy_utility/preconditioning_runs.csv]

Question (issue 16): do the privacy-cost cells that miss for convergence rather than noise (Brownian,
tau = 0.3, l2, M = 50: the score variances lambda_k span a factor 361 over K = 10 and the default
constant step 48 / (c1^2 lambda_1) is one scalar) improve with a public, scale-free per-direction
step?  Every candidate is a function of the basis's lambda_k, c1, rho and lam / M only (no data, no
evaluation seed).  Seeds >= 1000 only: the evaluation seeds 0-19 of benchmarks/privacy_cost.py are
never read here.

The run is the total-budget default scenario of benchmarks/privacy_cost.py (ellipsoid clip c1 = 4,
120 rounds, tail average of the last half, eps = 1, delta = 1e-5) with the linearized update eq. (1.2)
applied coordinatewise with per-direction (rho_k, eta_k) = (rho u_k^a, eta / u_k), u_1 = 1:

    w_ik = (g_ik + rho_k w_k + wt_ik / eta_k - f_i'(wt_i)_k) / (rho_k + 1 / eta_k),
    server: w_k = mean_i wt_ik - sum_i g_ik / (M rho_k), g_ik <- g_ik - rho_k (wt_ik - w_k).

Coordinate k of a client's primal moves with its gradient by d_k = 1 / (rho_k + 1/eta_k); the
gradient's replace-one change is at most 2G/m_i in the metric of the clip scales s_k = c1 sqrt(lambda_k),
so the release is Gaussian with multiplier z (the run's calibrated one, unchanged) in the metric
d_k s_k: noise N(0, (z 2G/m_i)^2 diag(d_k s_k)^2).  With u = 1 this is exactly the default run (the
script checks that it reproduces run_batched's estimate to 1e-10).

Candidates (name: u_k, a):
- default: u = 1.
- eta_white: u_k = lambda_k / lambda_1, a = 0 (per-direction eta only, full whitening; rho_k = rho
  caps d_k at 1 / rho, so the gain in the flat directions is at most (rho + 1/eta_1) / rho).
- eta_pow05: u_k = (lambda_k / lambda_1)^0.5, a = 0.
- eta_white_x0.5: eta_white with half the step in every direction.
- eta_damped10: u_k = (lambda_k + lambda_1 / 10) / (1.1 lambda_1), a = 0 (a damped whitening: at most
  11 times the leading direction's eta).
- metric_white: u_k = lambda_k / lambda_1, a = 1 (rho and 1/eta both scaled: ADMM run in the
  whitened coordinates v_k = c1 sqrt(lambda_k) w_k).
- metric_damped: u_k = (c1^2 lambda_k + kappa) / (c1^2 lambda_1 + kappa), a = 1, kappa = c1^2 lambda_1
  (lam / M) / rho: rho_k never falls below about the l2 penalty's curvature lam / M
  (where that curvature dominates, a whitened rho would be far below it and the update overshoots).
- metric_pow05: u_k = (lambda_k / lambda_1)^0.5, a = 1.
Writes one row per (cell, seed, candidate) to --out and prints the table (mean over seeds of
dist / mean exact MISE, per cell and candidate).
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

import privacy_cost as pc  # noqa: E402

from fdp_flower.algorithms.fdp_admm.plan import build_objective, noise_plan, noise_scales, tail_start  # noqa: E402
from fdp_flower.algorithms.fdp_admm.update import FDPADMMState  # noqa: E402
from fdp_flower.engines.batched import run_batched  # noqa: E402
from fdp_flower.privacy.mechanisms import release_rng  # noqa: E402


def candidate_weights(name: str, lam_k: np.ndarray, c1: float, rho: float,
                      lam_over_m: float) -> tuple[np.ndarray, float]:
    """(u_k, a) of candidate ``name`` from public quantities only (``eta_white_x2``: eta_white with
    twice the step, u scaled by 1/2; ``eta_pow<p>``: u_k = (lambda_k / lambda_1)^p)."""
    r = lam_k / lam_k[0]
    if name.startswith("eta_white_x"):
        return r / float(name.removeprefix("eta_white_x")), 0.0
    if name.startswith("eta_pow") and name != "eta_pow05":
        return r ** float(name.removeprefix("eta_pow")), 0.0
    if name == "default":
        return np.ones_like(lam_k), 0.0
    if name == "eta_white":
        return r, 0.0
    if name == "eta_pow05":
        return np.sqrt(r), 0.0
    if name == "metric_white":
        return r, 1.0
    if name == "metric_pow05":
        return np.sqrt(r), 1.0
    if name == "eta_damped10":  # eta_k = eta / (u_k): at most ~11 times the leading direction's
        return (lam_k + lam_k[0] / 10) / (lam_k[0] * 1.1), 0.0
    if name == "metric_damped":
        kappa = c1**2 * lam_k[0] * lam_over_m / rho
        return (c1**2 * lam_k + kappa) / (c1**2 * lam_k[0] + kappa), 1.0
    raise ValueError(name)


CANDIDATES = ("default", "eta_white", "eta_white_x0.5", "eta_pow05", "eta_damped10", "metric_damped")


def quantile_terms(tau: float, site, w: np.ndarray) -> np.ndarray:
    """Every client's mean check-loss subgradient (C, M, K) at its point w (C, M, K): (1/m_i) sum_j a_ij
    (1{a_ij . w >= y_ij} - tau), one client at a time (the rows of ``site``, a stacked ``SiteData``)."""
    n_cfg, num_clients, dim = w.shape
    counts = site.counts
    mask = np.ones(site.response.shape) if site.mask is None else site.mask
    means = np.einsum("imk,im->ik", site.features, mask) / counts[:, None]
    sums = np.empty((num_clients, n_cfg, dim))
    for i in range(num_clients):
        hit = (w[:, i, :] @ site.features_t[i] >= site.response[i]) * mask[i]
        sums[i] = hit @ site.features[i]
    return (sums / counts[:, None, None] - tau * means[:, None, :]).transpose(1, 0, 2)


def run_preconditioned(sc, data, weights: dict[str, tuple[np.ndarray, float]], *,
                       noise_factor: float = 1.0) -> dict[str, np.ndarray]:
    """The released tail average of every candidate on one scenario (same noise draws for all;
    ``noise_factor`` 0: the same run without noise, for the convergence bias)."""
    names = list(weights)
    n_cfg = len(names)
    objective = build_objective(sc)
    plan = noise_plan(sc, data.basis)
    site = data.site_for(sc)
    num_clients, dim = data.site.features.shape[0], data.site.features.shape[2]
    rounds, rho0 = sc.algorithm.rounds, sc.algorithm.rho
    sizes = data.sizes.astype(float)
    eta1 = plan.step_size(1, 1.0)  # constant schedule: the default scalar step
    u = np.stack([weights[n][0] for n in names])  # (C, K)
    a = np.array([weights[n][1] for n in names])[:, None]
    rho = rho0 * u**a  # (C, K)
    inv_eta = u / float(eta1)
    d = 1.0 / (rho + inv_eta)  # (C, K)
    z = plan.noise_multipliers
    assert np.all(z == z[0])
    sigma = noise_factor * z[0] * 2.0 * plan.gradient_bound / sizes  # (M,) per unit of the metric d_k s_k
    shape = d * noise_scales(sc, data.basis)[None, :]  # (C, K)
    zeros = np.zeros((n_cfg, num_clients, dim))
    state = FDPADMMState(0, zeros[:, 0].copy(), zeros.copy(), zeros.copy(), zeros[:, 0].copy(), zeros.copy(),
                         tail_start(sc), zeros[:, 0].copy())
    lam_over_m = objective.lam / objective.num_clients
    for l in range(1, rounds + 1):
        s = (quantile_terms(objective.loss.tau, site, state.noisy_primals)
             + lam_over_m * objective.penalty.subgradient(state.noisy_primals))
        primals = d[:, None, :] * (state.duals + rho[:, None, :] * state.global_w[:, None, :]
                                   + inv_eta[:, None, :] * state.noisy_primals - s)
        noise = np.stack([release_rng(sc.seed, i, l).standard_normal(dim) for i in range(num_clients)])  # (M, K)
        noisy = primals + sigma[None, :, None] * shape[:, None, :] * noise[None]
        gw = noisy.mean(axis=-2) - state.duals.sum(axis=-2) / (num_clients * rho)
        duals = state.duals - rho[:, None, :] * (noisy - gw[:, None, :])
        state = state.successor(gw, duals, noisy)
    est = state.estimate(sc.algorithm.estimator.kind)
    return {n: est[c] for c, n in enumerate(names)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1000, 1001, 1002])
    parser.add_argument("--designs", nargs="+", default=list(pc.CELLS))
    parser.add_argument("--clients", type=int, nargs="+", default=list(pc.CLIENTS))
    parser.add_argument("--candidates", nargs="+", default=list(CANDIDATES))
    parser.add_argument("--out", default="benchmarks/results/privacy_utility/preconditioning_runs.csv")
    parser.add_argument("--noise-free", action="store_true",
                        help="the same runs without noise (convergence bias of each candidate only)")
    parser.add_argument("--rounds", type=int, default=None, help="override algorithm.rounds (default: 120)")
    parser.add_argument("--tail-fraction", type=float, default=None,
                        help="override the tail average's fraction (default: 0.5)")
    parser.add_argument("--table-only", action="store_true", help="print the table of an existing --out")
    args = parser.parse_args()
    if args.table_only:
        print_table(pc.read_csv(Path(args.out)), args.candidates)
        return
    if min(args.seeds) < 1000:
        parser.error("tuning uses seeds >= 1000 only (0-19 are the evaluation seeds)")
    algorithm = {}
    if args.rounds is not None:
        algorithm["rounds"] = args.rounds
    if args.tail_fraction is not None:
        algorithm["estimator"] = {"kind": "tail_average", "tail_fraction": args.tail_fraction}
    rows = []
    checked = False
    for seed in args.seeds:
        for d in args.designs:
            for m in args.clients:
                t0 = time.perf_counter()
                for penalty in pc.PENALTIES:
                    for tau in pc.CELLS[d]:
                        sc = pc.scenario(d, m, penalty, tau, seed, algorithm=algorithm)
                        data = pc._setup(sc)
                        c1, lam_k = sc.model.clip_c1, data.basis.eigenvalues
                        lam_over_m = sc.model.penalty.lam / m
                        weights = {n: candidate_weights(n, lam_k, c1, sc.algorithm.rho, lam_over_m)
                                   for n in args.candidates}
                        est = run_preconditioned(sc, data, weights, noise_factor=0.0 if args.noise_free else 1.0)
                        if not checked and "default" in est and not args.noise_free:
                            ref = run_batched([sc], history=False)[0].estimate_w
                            gap = float(np.max(np.abs(ref - est["default"])))
                            assert gap < 1e-10, f"default candidate differs from run_batched by {gap:g}"
                            print(f"check: default == run_batched to {gap:.1e}", flush=True)
                            checked = True
                        w_exact, exact_mise, _ = pc.exact_on_features(sc, data)
                        zero = np.zeros_like(data.beta)
                        for n, w in est.items():
                            rows.append({"design": d, "tau": tau, "penalty": penalty, "M": m, "seed": seed,
                                         "candidate": n, "exact_mise": exact_mise,
                                         "dist_private_exact": pc._mise_of(sc, data, w - w_exact, zero)})
                print(f"{d} M={m} seed={seed}: {time.perf_counter() - t0:.0f} s", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print_table(rows, args.candidates)


def print_table(rows: list[dict], candidates: list[str]) -> None:
    cells: dict = {}
    rows = [r for r in rows if r["candidate"] in candidates]
    for r in rows:
        cells.setdefault((r["design"], float(r["tau"]), r["penalty"], int(r["M"])), {}).setdefault(
            r["candidate"], []).append((float(r["dist_private_exact"]), float(r["exact_mise"])))
    print("| design | tau | penalty | M | " + " | ".join(candidates) + " |")
    print("|---|---|---|---|" + "---|" * len(candidates))
    for (d, tau, p, m), per in cells.items():
        vals = []
        for n in candidates:
            num, den = map(np.array, zip(*per[n]))
            cost, se = pc.ratio_of_means(num, den)
            vals.append(f"{cost:.3f} +- {se:.3f}" if math.isfinite(se) else f"{cost:.3f}")
        print(f"| {d} | {tau:g} | {p} | {m} | " + " | ".join(vals) + " |")


if __name__ == "__main__":
    sys.exit(main())
