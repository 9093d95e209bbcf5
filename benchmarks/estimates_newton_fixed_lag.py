"""Where the 30-round Newton rule on a fixed basis loses (benchmarks/estimates_fit_private_rounds.py): lag or noise.

    python benchmarks/estimates_newton_fixed_lag.py [--out benchmarks/results/estimates]

``fit(..., eps=1.0, rule="newton")`` on the cosine basis (K = 10), run twice on the same data: as released, and with
every release's noise replaced by 0 while the schedule, the sigmas the server checks and its noise floor of the
second-moments metric stay the same (the site still charges its ledger; the draws are zeros).  What is left without
noise is the lag of 14 term rounds along the floored directions.  Cells (one seed each, seeds not among the
evaluation seeds of estimates_fit_private_rounds.py): irregular (2500 curves / 5 sites) at tau 0.1 / 0.9 / 0.5,
relative slope distance to the exact (privacy-off, 100-round) fit, which is 0 for the exact fit itself; the paper
design (20000 curves / 10 sites) at tau 0.1 / 0.9 / 0.5, MISE against its beta -- beside it the privacy-off fit's
own MISE (the exact estimator's, which the lag is measured from).  Writes newton_fixed_lag.md to --out.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import estimates_designs as D  # noqa: E402

CELLS = (("irregular", 0, 0.1), ("irregular", 1, 0.9), ("irregular", 2, 0.5), ("paper", 11, 0.1),
         ("paper", 12, 0.9), ("paper", 13, 0.5))


class _Zeros:
    def standard_normal(self, shape):
        return np.zeros(shape)


def exact_paper_mise(seed: int, tau: float) -> float:
    """The privacy-off default fit's MISE on the paper design's cell (the exact estimator's own error)."""
    import fdp_flower
    from fdp_flower.functional.design import simulate_slice, true_beta

    grid = np.linspace(0, 1, 100)
    train = simulate_slice(seed, 0, 20_000, tau=tau, grid=grid)
    m = fdp_flower.fit(train.curves, train.response, grid=grid, tau=tau, eps=None, n_clients=10, seed=seed,
                       reference=False)
    return float(m.mise(true_beta(grid)))


def measure(design: str, seed: int, tau: float) -> float:
    import fdp_flower
    from fdp_flower.functional.design import simulate_slice, true_beta

    if design == "paper":
        grid = np.linspace(0, 1, 100)
        train = simulate_slice(seed, 0, 20_000, tau=tau, grid=grid)
        m = fdp_flower.fit(train.curves, train.response, grid=grid, tau=tau, eps=1.0, n_clients=10, seed=seed,
                           reference=False, rule="newton")
        return float(m.mise(true_beta(grid)))
    train = D.draw(design, seed, 2500)
    exact = fdp_flower.fit(train.curves, train.response, grid=train.grid, tau=tau, eps=None, n_clients=5, seed=seed,
                           reference=False, rounds=100)
    m = fdp_flower.fit(train.curves, train.response, grid=train.grid, tau=tau, eps=1.0, n_clients=5, seed=seed,
                       reference=False, rule="newton")
    return float(np.linalg.norm(m.w[1:] - exact.w[1:]) / np.linalg.norm(exact.w[1:]))


def main() -> None:
    from fdp_flower.algorithms.fdp_admm import site
    from fdp_flower.engines import inprocess

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "estimates"))
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    released = {cell: measure(*cell) for cell in CELLS}
    exact = {cell: exact_paper_mise(*cell[1:]) if cell[0] == "paper" else 0.0 for cell in CELLS}

    def noiseless(requests, data, plan, noise):
        def zeros(events):
            noise(events)  # charged as released
            return _Zeros()
        return site.answer(requests, data, plan, zeros)

    inprocess.answer = noiseless
    lag = {cell: measure(*cell) for cell in CELLS}
    lines = ["fit(..., eps=1.0, rule='newton') on the cosine basis (K = 10): as released, and with the releases' noise "
             "replaced by 0 (same schedule and metric floor). irregular: ||slopes - exact|| / ||exact||; paper: MISE.",
             "The last column is the privacy-off fit's own value (the exact estimator's: its distance to itself is 0 on "
             "the irregular design, its MISE against beta on the paper design); the lag is the distance from it.",
             "", "| design | seed | tau | as released | without noise | privacy off (exact) |", "|---|---|---|---|---|---|"]
    lines += [f"| {d} | {s} | {t:g} | {released[(d, s, t)]:.3f} | {lag[(d, s, t)]:.3f} | {exact[(d, s, t)]:.3f} |"
              for d, s, t in CELLS]
    text = "\n".join(lines) + "\n"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "newton_fixed_lag.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
