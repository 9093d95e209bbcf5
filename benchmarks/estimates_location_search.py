"""How often the private location/scale search without declared bounds ends far from the response's median and
IQR: the search alone, simulated with the package's own steps and its planned noise.

    python benchmarks/estimates_location_search.py [--searches 2000] [--out benchmarks/results/estimates]

Both rules run this search before their first data term (docs/algorithms.md section 1.3). It has 8 rounds in
u = asinh(y). In each round the server names 6 thresholds (``newton.quartile_thresholds``). The sites release
their shares of responses at or below each threshold, with Gaussian noise, and the server cuts each quartile's
bracket (``newton.quartile_brackets``). A wrong cut is never undone: the next brackets lie inside the chosen
cell.  Here the pooled shares are the empirical CDF of a design's 2500 training responses plus Gaussian noise with
the pooled sd the package plans for 5 sites of 500 at a total eps = 1. That sd is read from a fit's ledger,
sqrt(sum_i (m_i sigma_i)^2) / sum_i m_i per round.

A search counts as a **gross error** when its location is more than one scale from the median, or its scale is
more than a factor 2 from IQR / 1.349.  Also reported, as a prototype outside the package: the same search with
an isotonic cut, which fits a monotone curve to a bracket's noisy shares and cuts where it crosses the level.
A fit can recover from a moderate search error: its Newton steps and intercept calibration run in the units the
search chose. benchmarks/results/estimates/new_user_defaults.md has one fit of 200 that did not (skewed, seed
116, tau = 0.9).
Writes location_search.md and .json to --out.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import estimates_designs as D  # noqa: E402

SITES, RECORDS, EPS = 5, 2500, 1.0
CASES = (("skewed", 116), ("skewed", 100), ("irregular", 116), ("irregular", 100))


def planned_share_sds(design: str, seed: int) -> np.ndarray:
    """The pooled share noise sd of each search round, from the ledger of a default fit on the design."""
    import fdp_flower
    from fdp_flower.algorithms.fdp_admm.site import NEWTON_MECHANISMS

    train = D.draw(design, seed, RECORDS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = fdp_flower.fit(train.curves, train.response, grid=train.grid, tau=0.5, eps=EPS, n_clients=SITES,
                               seed=seed, reference=False, rule="newton")
    sizes = np.asarray(model.sample_sizes, float)
    rounds = sorted({r.round for r in model.ledger.releases if r.mechanism == NEWTON_MECHANISMS["quartiles"]})
    return np.array([np.sqrt(sum((sizes[r.client] * r.sigma) ** 2 for r in model.ledger.releases
                                 if r.round == k and r.mechanism == NEWTON_MECHANISMS["quartiles"])) / sizes.sum()
                     for k in rounds])


def isotonic_cut(edges: np.ndarray, shares: np.ndarray, p: float) -> list[float]:
    """The prototype cut (for ``newton.quartile_brackets(..., cut=)``): a monotone (isotonic) fit to a bracket's
    noisy shares, cut at the first threshold whose fitted share reaches the level."""
    from sklearn.isotonic import IsotonicRegression

    fitted = IsotonicRegression().fit_transform(np.arange(len(shares)), shares)
    j = int(np.searchsorted(fitted, p, side="left"))
    return [edges[j], edges[j + 1]]


def search(response: np.ndarray, sds: np.ndarray, rng: np.random.Generator, cut) -> tuple[float, float]:
    """One simulated search: (location, scale) from the empirical CDF of ``response`` plus N(0, sd_r^2) shares."""
    from fdp_flower.algorithms.fdp_admm import newton as N

    ordered = np.sort(response)
    brackets = N.unbounded_brackets()
    for sd in sds:
        thresholds = N.quartile_thresholds(brackets, shared=True)
        shares = np.searchsorted(ordered, np.sinh(thresholds), side="right") / ordered.size
        brackets = N.quartile_brackets(brackets, shares + sd * rng.standard_normal(thresholds.size), shared=True,
                                       cut=cut)
    return N.location_and_scale(np.sinh(brackets))


def main() -> None:
    from fdp_flower.algorithms.fdp_admm import newton as N

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--searches", type=int, default=2000)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "estimates"))
    args = ap.parse_args()
    rows = []
    for design, seed in CASES:
        sds = planned_share_sds(design, seed)
        response = D.draw(design, seed, RECORDS).response
        q1, median, q3 = np.quantile(response, [0.25, 0.5, 0.75])
        scale = (q3 - q1) / 1.349
        for name, cut in (("package", N.robust_cut), ("isotonic cut (prototype)", isotonic_cut)):
            rng = np.random.default_rng(seed)
            found = np.array([search(response, sds, rng, cut) for _ in range(args.searches)])
            gross = (np.abs(found[:, 0] - median) / scale > 1.0) | (np.abs(np.log(found[:, 1] / scale)) > np.log(2))
            rows.append({"design": design, "seed": seed, "cut": name, "searches": args.searches,
                         "gross_error_rate": float(gross.mean()), "share_sds": [float(s) for s in sds],
                         "median_location_error": float(np.median(np.abs(found[:, 0] - median)) / scale)})
            print(f"{design} seed {seed} {name}: gross errors {gross.mean():.4f}", flush=True)
    lines = [f"The location/scale search without declared bounds, simulated {args.searches} times per row: "
             f"{RECORDS} training responses of a design, the pooled share noise sds the package plans for {SITES} sites "
             f"at a total eps = {EPS:g} (per round: "
             + ", ".join(f"{s:.3f}" for s in rows[0]["share_sds"]) + "). Gross error: location more than one "
             "scale from the median, or scale more than a factor 2 from IQR / 1.349.", "",
             "| design (seed) | cut | gross error rate | median location error (scales) |", "|---|---|---|---|"]
    lines += [f"| {r['design']} ({r['seed']}) | {r['cut']} | {r['gross_error_rate']:.4f} | "
              f"{r['median_location_error']:.3f} |" for r in rows]
    text = "\n".join(lines) + "\n"
    D.write_results(args.out, "location_search", text, rows)
    print(text)


if __name__ == "__main__":
    main()
