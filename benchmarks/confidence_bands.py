"""Coverage of the private confidence bands (docs/inference.md): 200 repetitions per cell.

    nice -n 10 python benchmarks/confidence_bands.py [--reps 200] [--nonprivate-reps 100] [--workers 2]
        [--out benchmarks/results/confidence_bands]
    python benchmarks/confidence_bands.py --report-only      # the tables from the recorded runs.csv

For two functional designs, tau in {0.5, 0.9} and total eps in {1, 4} (plus the non-private fit, eps =
None, for the width comparison), each repetition draws a fresh data set, fits FDP-ADMM with the
in-process engine through the Python API with the inference share of the budget kept aside
(``fdp_flower.inference.releases.fit_budget``: the estimator's default 15%), runs every site's
inference releases (``fdp_flower.inference.inprocess.run_inference``: the fit and the inference meet
the total eps by PLD) and computes the 95% bands (``model.confidence_band``).  It records whether the
pointwise band covers beta°(t) at each grid point (the table gives the mean over the grid), whether
the simultaneous band covers it everywhere, and whether the intercept's interval covers alpha°.

The target.  A fit on K basis scores estimates the population quantile regression of y on the rows it
trains on (scores, clipped, intercept column): w° = argmin E rho_tau(y - a . w), beta°(t) = sum_k w°_k
phi_k(t), alpha° its intercept.  When beta lies in the span and no row is clipped, beta° = beta; here
it is computed exactly for each design: the error is integrated out analytically (its CDF) and the
curves by Monte Carlo over 10^6 draws (fixed seed), Newton on the first-order condition
E a (F_e(a . w - m(X)) - tau) = 0 (m(X) = int beta X - F_e^{-1}(tau), the conditional quantile).  The
summary reports ||beta° - beta_K|| (beta_K: beta's projection on the basis) to show how far that is.

Designs (n = 50000 curves on 100 grid points, M = 5 sites of 10000):

- ``paper``: Zhou & Xiang's (2022) design (docs/algorithms.md, eq. (1.14)): cosine scores of sd 1/k
  (50 terms), beta with coefficients 4 (-1)^(k+1) k^-2, t(3) errors; fitted on the cosine basis,
  K = 4, clip 3, step 2 (with the default step 3 the sites oscillate around the consensus in the
  intercept direction at tau = 0.5, and the band is refused: docs/inference.md);
- ``brownian``: Brownian-motion curves (Karhunen-Loeve, 50 terms) times a public 2 (a change of
  units, so that the scores' scale suits the clip), beta = 0.5 phi_1 - 1.0 phi_2 + 0.8 phi_3 on the
  first three cosines (the integral by the grid's quadrature), Gaussian errors of sd 0.5; fitted on
  the cosine basis, K = 3, clip 3, step 0.8 (the Gaussian errors' density at the median is 0.8: the
  default step 3 would make the sites overshoot, docs/inference.md).  Brownian scores on the cosines
  are correlated and their variances fall fast (the smallest is 0.046 after the rescaling), and 4.4% of
  the rows are clipped.

A first version of the Brownian design put beta on the Brownian KL functions (outside the cosine
span, correlated with the omitted cosine scores): the conditional quantile is then not linear in the
K scores, the location-shift sandwich does not hold, and even the non-private band covered about 80%
at tau = 0.9 in a pilot of 3 repetitions (docs/inference.md, section 5).

Speed: every private fit calibrates its noise and reports its eps by PLD each round; those are pure
functions of (eps, delta, schedule), identical in every repetition, so this script memoizes them
(``functools.lru_cache`` on the two calibration functions), and it turns off the engine's per-round
simulation metrics (:func:`skip_simulation_metrics`).  Neither changes an iterate or a release.
"""
from __future__ import annotations

import argparse
import csv
import functools
import math
import multiprocessing
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GRID = np.linspace(0.0, 1.0, 100)
N_SAMPLES = 50_000
N_SITES = 5
LEVEL = 0.95
DELTA = 1e-5
TAUS = (0.5, 0.9)
EPSILONS = (1.0, 4.0, None)
TARGET_DRAWS = 1_000_000
SEED_OFFSET = {"paper": 10_000, "brownian": 20_000}
DESIGNS = {
    "paper": dict(design="paper", curve_scale=1.0, basis="cosine", n_components=4, clip=3.0, step=2.0),
    "brownian": dict(design="brownian", curve_scale=2.0, basis="cosine", n_components=3, clip=3.0, step=0.8,
                     beta_cosine=(0.5, -1.0, 0.8), rounds=400),
}
COLUMNS = ("design", "tau", "eps", "rep", "refused", "cover_pointwise", "cover_simultaneous", "cover_intercept",
           "width_pointwise", "width_simultaneous", "sd_sampling", "sd_privacy", "intercept_sd",
           "intercept_error", "beta_rmse", "density", "gram_snr", "transient", "eps_spent", "target_gap", "seconds")


def memoize_calibration() -> None:
    """lru_cache on the pure calibration functions (same arguments in every repetition; see the docstring)."""
    import fdp_flower.privacy.calibration as cal
    import fdp_flower.privacy.ledger as led

    cal.analytic_gaussian_epsilon = functools.lru_cache(maxsize=200_000)(cal.analytic_gaussian_epsilon)
    led.analytic_gaussian_epsilon = cal.analytic_gaussian_epsilon
    original = cal.calibrate_noise_multiplier

    @functools.lru_cache(maxsize=4096)
    def cached(eps, delta, relative, fixed):
        return original(eps, delta, list(relative), fixed_multipliers=list(fixed))

    def calibrate(eps, delta, relative, *, fixed_multipliers=()):
        return cached(float(eps), float(delta), tuple(float(r) for r in relative),
                      tuple(float(z) for z in fixed_multipliers))

    cal.calibrate_noise_multiplier = calibrate


# ---------------------------------------------------------------- designs
def _law(name: str):
    from scipy import special, stats

    if name == "t3":
        return (lambda x: special.stdtr(3, x)), (lambda x: stats.t.pdf(x, 3))
    if name == "normal":
        return special.ndtr, stats.norm.pdf
    raise ValueError(name)


def signal(design_name: str, scores: np.ndarray, curves: np.ndarray) -> np.ndarray:
    """int beta X of every curve: the paper's exact sum_k w_k A_k; for the Brownian design, whose beta lies on
    the first cosines, the integral by the grid's quadrature (the fit's own cosine scores, unclipped)."""
    from fdp_flower.functional.design import get_design

    spec = DESIGNS[design_name]
    if "beta_cosine" in spec:
        from fdp_flower.functional.fpca import fixed_basis

        coefficients = np.asarray(spec["beta_cosine"], dtype=float)
        return fixed_basis("cosine", coefficients.size, GRID).scores(curves) @ coefficients
    return scores @ get_design(spec["design"]).coefficients


def beta_of(design_name: str) -> np.ndarray:
    """beta on the grid, in the units of the (rescaled) curves the fit sees."""
    from fdp_flower.functional.design import get_design

    spec = DESIGNS[design_name]
    if "beta_cosine" in spec:
        from fdp_flower.functional.fpca import fixed_basis

        coefficients = np.asarray(spec["beta_cosine"], dtype=float)
        return coefficients @ fixed_basis("cosine", coefficients.size, GRID).components
    d = get_design(spec["design"])
    return d.coefficients @ d.functions(GRID, d.coefficients.size) / spec["curve_scale"]


def draw(design_name: str, seed: int, n: int, tau: float):
    """(curves (n, G), y (n,)) of the design: y = int beta X + e - F_e^{-1}(tau)."""
    from fdp_flower.functional.design import get_design

    spec = DESIGNS[design_name]
    d = get_design(spec["design"])
    rng = np.random.default_rng(seed)
    a, e = d.draw(rng, n)
    curves = spec["curve_scale"] * (a @ d.functions(GRID, a.shape[1]))
    return curves, signal(design_name, a, curves) + e - d.error_quantile(tau)


def target(design_name: str, model, tau: float) -> np.ndarray:
    """w°: the population quantile regression on the fit's rows (module docstring)."""
    from fdp_flower.algorithms.fdp_admm.site import site_features
    from fdp_flower.functional.design import CurveData, get_design

    d = get_design(DESIGNS[design_name]["design"])
    cdf, pdf = _law(d.error_law)
    rows, means = [], []
    chunk = 100_000
    for c in range(TARGET_DRAWS // chunk):
        rng = np.random.default_rng(np.random.SeedSequence(987_654, spawn_key=(c,)))
        a, _ = d.draw(rng, chunk)
        curves = DESIGNS[design_name]["curve_scale"] * (a @ d.functions(GRID, a.shape[1]))
        features, _ = site_features(model.scenario, model.basis, CurveData(curves, np.zeros(chunk), GRID))
        rows.append(features)
        means.append(signal(design_name, a, curves) - d.error_quantile(tau))
    a = np.vstack(rows)
    m = np.concatenate(means)
    w = np.linalg.lstsq(a, m, rcond=None)[0]  # exact without clipping or omitted terms; Newton from there
    for _ in range(100):  # Newton on E a (F_e((a.w - m) / s) - tau) = 0
        u = (a @ w - m) / d.error_scale
        gradient = a.T @ (cdf(u) - tau) / len(m)
        hessian = (a * (pdf(u) / d.error_scale)[:, None]).T @ a / len(m)
        step = np.linalg.solve(hessian, gradient)
        w = w - step
        if np.max(np.abs(step)) < 1e-13:
            break
    return w


def projection_gap(design_name: str, model, beta_target: np.ndarray) -> float:
    """||beta° - beta_K||: beta° against beta's projection on the fit's basis (L2 on the grid)."""
    beta = beta_of(design_name)
    b = model.basis
    projected = ((beta * b.weights) @ b.components.T) @ b.components
    return float(np.sqrt(((beta_target - projected) ** 2) @ b.weights))


# ---------------------------------------------------------------- one repetition
#: ``--level-calibration``: the private fits run the ADMM rule with its location/scale search and level calibration
#: (fit's default; docs/algorithms.md section 1.4) at its default step in standardized units, instead of the
#: design's step in the response's units (the non-private reference fits are unchanged)
LEVEL_CALIBRATED = False


def fit_kwargs(design_name: str, tau: float, private: bool = False) -> dict:
    spec = DESIGNS[design_name]
    kwargs = dict(grid=GRID, tau=tau, n_clients=N_SITES, basis=spec["basis"], n_components=spec["n_components"],
                  clip=spec["clip"], step=spec["step"], penalty="none", lam=0.0, reference=False, delta=DELTA,
                  rounds=spec.get("rounds"), response_offset=0.0, response_scale=1.0, level_calibration=False)
    if LEVEL_CALIBRATED and private:
        kwargs.update(step=None, level_calibration=True)
    return kwargs


def one_cell(design_name: str, tau: float, eps, rep: int, curves, y, truth) -> dict:
    import fdp_flower
    from fdp_flower.api import client_partition
    from fdp_flower.inference.bands import InferenceError
    from fdp_flower.inference.inprocess import run_inference
    from fdp_flower.inference.releases import fit_budget

    started = time.perf_counter()
    seed = SEED_OFFSET[design_name] + rep
    kwargs = fit_kwargs(design_name, tau, private=eps is not None)
    eps_fit = None if eps is None else fit_budget(eps, DELTA)
    model = fdp_flower.fit(curves, y, eps=eps_fit, seed=seed, **kwargs)
    parts, _ = client_partition(len(y), n_clients=N_SITES, client_ids=None, seed=seed)
    record = run_inference(model, [(curves[r], y[r]) for r in parts], eps_total=eps)
    model = model.with_inference(record)
    row = {"design": design_name, "tau": tau, "eps": "none" if eps is None else eps, "rep": rep,
           "eps_spent": model.privacy.eps if model.privacy.private else 0.0}
    w_target, beta_target, alpha_target, gap = truth
    row["target_gap"] = gap
    try:
        band = model.confidence_band(LEVEL, draws=4000, seed=rep)
    except InferenceError as exc:
        row.update(refused=str(exc)[:80], seconds=time.perf_counter() - started)
        return row
    err = band.estimate - beta_target
    row.update(
        refused="", cover_pointwise=float(np.mean(np.abs(err) <= band.critical_pointwise * band.sd)),
        cover_simultaneous=float(np.all(np.abs(err) <= band.critical_simultaneous * band.sd)),
        cover_intercept=float(abs(band.intercept - alpha_target) <= band.critical_pointwise * band.intercept_sd),
        width_pointwise=float(np.mean(2 * band.critical_pointwise * band.sd)),
        width_simultaneous=float(np.mean(2 * band.critical_simultaneous * band.sd)),
        sd_sampling=float(np.mean(band.sd_sampling)), sd_privacy=float(np.mean(band.sd_privacy)),
        intercept_sd=band.intercept_sd, intercept_error=band.intercept - alpha_target,
        beta_rmse=float(np.sqrt(np.mean(err**2))), density=band.sandwich.density.density,
        gram_snr=band.sandwich.gram_snr, transient=band.coefficients.transient_norm,
        seconds=time.perf_counter() - started)
    return row


_TARGETS: dict = {}


def truth_of(design_name: str, tau: float, model) -> tuple:
    key = (design_name, tau)
    if key not in _TARGETS:
        from fdp_flower.inference.fdp_admm import linear_maps

        w = target(design_name, model, tau)
        beta_map, intercept_map, offset = linear_maps(model)
        _TARGETS[key] = (w, beta_map @ w, offset + intercept_map @ w, projection_gap(design_name, model, beta_map @ w))
    return _TARGETS[key]


def run_job(job: tuple) -> list[dict]:
    """One repetition of one (design, tau): the data set, then every eps on it (the non-private fit only in
    the first ``nonprivate_reps`` repetitions: it is the width reference)."""
    import fdp_flower

    design_name, tau, rep, nonprivate_reps = job
    seed = SEED_OFFSET[design_name] + rep
    curves, y = draw(design_name, seed, N_SAMPLES, tau)
    key = (design_name, tau)
    if key not in _TARGETS:  # the rows depend on the basis and clip only: any fit's model defines them
        probe = fdp_flower.fit(curves[:2000], y[:2000], eps=None, **{**fit_kwargs(design_name, tau),
                                                                    "n_clients": 2, "rounds": 1})
        truth_of(design_name, tau, probe)
    return [one_cell(design_name, tau, eps, rep, curves, y, _TARGETS[key]) for eps in EPSILONS
            if eps is not None or rep < nonprivate_reps]


def skip_simulation_metrics() -> None:
    """The in-process engine computes, each round, simulation-only metrics on the pooled data (objective,
    MISE, empirical loss: ``fdp_flower.algorithms.fdp_admm.setup.Evaluator``); they read the state and never
    change it, and cost three passes over the data per round (three quarters of a fit here).  The benchmark
    does not use them: the evaluator returns no metric (the history keeps round, rho and the privacy columns)."""
    from fdp_flower.algorithms.fdp_admm import setup

    setup.Evaluator.__call__ = lambda self, state: {}


def _init_worker() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    memoize_calibration()
    skip_simulation_metrics()


# ---------------------------------------------------------------- tables
def _read(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def calibration_note(pooled: list[tuple[int, int]], n_outside: int) -> str:
    """How often an exactly calibrated band would leave [93%, 97%] at these repetitions, and the pooled
    coverage of the binomial columns (simultaneous, intercept) with its Monte Carlo SE."""
    from scipy import stats

    if not pooled:
        return ""
    n = max(t for _, t in pooled)  # the repetitions of a full cell (a cell with refusals has fewer)
    p_out = float(stats.binom.cdf(math.ceil(0.93 * n) - 1, n, LEVEL) + stats.binom.sf(math.floor(0.97 * n), n, LEVEL))
    covered, trials = sum(c for c, _ in pooled), sum(t for _, t in pooled)
    se = math.sqrt(LEVEL * (1 - LEVEL) / trials)
    cells = 3 * len(pooled) // 2
    return (f"Reading: at {n} repetitions [93%, 97%] is +-{2 / (100 * math.sqrt(LEVEL * (1 - LEVEL) / n)):.1f} "
            f"Monte Carlo SEs around {LEVEL:.0%}; a band of exactly {LEVEL:.0%} coverage leaves it with probability "
            f"{p_out:.2f} per binomial column (exact binomial), i.e. about {p_out * cells:.1f} of the {cells} private "
            f"coverage figures (fewer for the pointwise column, a mean over the grid); {n_outside} are outside.  "
            f"Pooled over the private cells' simultaneous and intercept columns: {covered} of {trials} covered, "
            f"{100 * covered / trials:.1f}% ({(covered / trials - LEVEL) / se:+.1f} SEs from {LEVEL:.0%}).")


def report(rows: list[dict], out: Path, elapsed: float | None) -> str:
    """The coverage table (Markdown) of the recorded runs."""
    counts: dict = {}
    for r in rows:
        if r["eps"] != "none":
            counts[(r["design"], r["tau"], r["eps"])] = counts.get((r["design"], r["tau"], r["eps"]), 0) + 1
    reps = max(1, min(counts.values(), default=1))
    variant = (["Variant `--level-calibration`: the private fits run the ADMM rule with its location/scale search and "
                "level calibration (fit's default for a private fit; docs/algorithms.md section 1.4) at its default "
                "step in standardized units (1.0), the band from `fdp_flower.inference.fdp_admm.level_inference` "
                "(docs/inference.md section 6); the non-private reference fits as in the main table.", ""]
               if LEVEL_CALIBRATED else [])
    lines = ["# Coverage of the private confidence bands", "", *variant,
             f"Nominal level {LEVEL:.0%}; n = {N_SAMPLES} curves on {GRID.size} grid points, M = {N_SITES} sites; "
             "each cell's coverage is over its repetitions (the Monte Carlo SE of a 95% coverage: "
             f"{100 * math.sqrt(LEVEL * (1 - LEVEL) / reps):.1f} points at the {reps} repetitions of the smallest "
             "private cell; 1.5 points at 200).  "
             "Pointwise: the mean over the grid of the fraction of repetitions whose pointwise band covers beta°(t); "
             "simultaneous: the fraction whose simultaneous band covers beta° on the whole grid; intercept: the "
             "fraction whose interval covers alpha°.  Widths: the mean over the grid of the band's width, and its "
             "ratio to the non-private band's on the same data sets.  sd parts: the mean over the grid of the "
             "sampling and privacy parts of sd(t).  Produced by `python benchmarks/confidence_bands.py` "
             "(docs/inference.md).", ""]
    if elapsed is not None:
        lines += [f"Run time: {elapsed / 60:.0f} min.", ""]
    header = ("| design | tau | eps | reps | refused | pointwise | simultaneous | intercept | width (pointwise) "
              "| width / non-private | sd sampling | sd privacy | ||A|| | Gram SNR |")
    lines += [header, "|" + "---|" * 14]
    gaps: dict = {}
    cells: dict = {}
    for r in rows:
        cells.setdefault((r["design"], float(r["tau"]), r["eps"]), []).append(r)

    def num(rs, key):
        return np.array([float(r[key]) for r in rs if r["refused"] == "" and r[key] != ""])

    outside: list[str] = []
    pooled: list[tuple[int, int]] = []  # (covered, repetitions) of the simultaneous and intercept columns
    for (design, tau, eps), rs in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] == "none",
                                                                         kv[0][2])):
        ok = [r for r in rs if r["refused"] == ""]
        gaps[(design, tau)] = float(rs[0]["target_gap"]) if rs[0].get("target_gap") else float("nan")
        base = {int(r["rep"]): float(r["width_pointwise"]) for r in cells.get((design, tau, "none"), [])
                if r["refused"] == ""}
        ratio = [float(r["width_pointwise"]) / base[int(r["rep"])] for r in ok if int(r["rep"]) in base]
        cover = [num(rs, k).mean() if ok else float("nan")
                 for k in ("cover_pointwise", "cover_simultaneous", "cover_intercept")]
        lines.append(
            f"| {design} | {tau:g} | {eps} | {len(rs)} | {len(rs) - len(ok)} | {100 * cover[0]:.1f}% | "
            f"{100 * cover[1]:.1f}% | {100 * cover[2]:.1f}% | {num(rs, 'width_pointwise').mean():.4g} | "
            f"{np.mean(ratio):.2f} | {num(rs, 'sd_sampling').mean():.3g} | {num(rs, 'sd_privacy').mean():.3g} | "
            f"{num(rs, 'transient').mean():.2f} | {np.median(num(rs, 'gram_snr')):.3g} |")
        if eps != "none" and ok:  # a cell whose every band was refused has no coverage (its row says so)
            for name, c in zip(("pointwise", "simultaneous", "intercept"), cover):
                if name != "pointwise":
                    pooled.append((round(c * len(ok)), len(ok)))
                if not 0.93 <= c <= 0.97:
                    z = (c - LEVEL) / math.sqrt(LEVEL * (1 - LEVEL) / len(ok))
                    outside.append(f"{design}, tau = {tau:g}, eps = {eps}: {name} {100 * c:.1f}% "
                                   f"({z:+.1f} Monte Carlo SEs from {LEVEL:.0%})")
    lines += ["", "Private cells outside [93%, 97%]: " + ("none." if not outside else "; ".join(outside) + "."), "",
              calibration_note(pooled, len(outside)), "",
              "The target beta° against beta's projection beta_K on the basis (L2 norm on the grid; the difference is "
              "the clipping and, for tau != 0.5 with omitted components, the quantile regression's pseudo-true "
              "value): " + "; ".join(f"{d}, tau = {t:g}: {g:.3g}" for (d, t), g in sorted(gaps.items())) + "."]
    text = "\n".join(lines) + "\n"
    (out / "README.md").write_text(text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--nonprivate-reps", type=int, default=100,
                        help="repetitions of the non-private fit (the width reference; default 100)")
    parser.add_argument("--designs", nargs="+", default=list(DESIGNS), choices=list(DESIGNS))
    parser.add_argument("--taus", nargs="+", type=float, default=list(TAUS))
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/confidence_bands"))
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--epsilons", nargs="+", default=None, help="e.g. 1 4 none (default: 1 4 none)")
    parser.add_argument("--level-calibration", action="store_true",
                        help="private fits with the ADMM rule's level calibration (write to another --out)")
    args = parser.parse_args()
    global LEVEL_CALIBRATED, EPSILONS
    LEVEL_CALIBRATED = args.level_calibration
    if args.epsilons:
        EPSILONS = tuple(None if e == "none" else float(e) for e in args.epsilons)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = out / "runs.csv"
    if args.report_only:
        print(report(_read(runs), out, None))
        return
    done = {(r["design"], float(r["tau"]), int(r["rep"])) for r in _read(runs)} if runs.is_file() else set()
    jobs = [(d, t, rep, args.nonprivate_reps) for rep in range(args.reps) for d in args.designs for t in args.taus
            if (d, t, rep) not in done]
    started = time.time()
    new = not runs.is_file()
    with open(runs, "a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore")
        if new:
            writer.writeheader()
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(args.workers, initializer=_init_worker) as pool:
            for i, rows in enumerate(pool.imap_unordered(run_job, jobs), start=1):
                for r in rows:
                    writer.writerow({k: r.get(k, "") for k in COLUMNS})
                fh.flush()
                if i % 10 == 0 or i == len(jobs):
                    print(f"{i}/{len(jobs)} jobs, {(time.time() - started) / 60:.1f} min", flush=True)
    print(report(_read(runs), out, time.time() - started))


if __name__ == "__main__":
    main()
