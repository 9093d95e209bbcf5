"""Which clip ``fdp_flower.fit(basis="fpca")`` should default to with privacy: its sphere of radius 3, or the
ellipsoid of Mahalanobis radius 4 that ``fdp-flower run`` gives a total-budget scenario with an FPCA basis.

    python benchmarks/estimates_fit_fpca_clip.py [--seeds 100 ...] [--out benchmarks/results/estimates]

The designs of benchmarks/estimates_designs.py, 2500 training curves over 5 sites of 500, 5000 held-out curves,
federated DP-FPCA with K = 5 (basis_eps = eps / 2 of the total eps = 1: its released eigenvalues are the
ellipsoid's scales), the Newton rule (fit's default on this basis), tau in {0.1, 0.5, 0.9}.  Per clip: the held-out
share below the fitted quantile (seeds within 0.03 of tau) and the held-out check loss's excess over the privacy-off
fit's, L / L_off - 1 in % (L the mean held-out check loss, L_off that of ``fit(..., eps=None)`` on the same basis
kind).  Writes fit_fpca_clip.md and .json to --out.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import estimates_designs as D  # noqa: E402

TAUS = (0.1, 0.5, 0.9)
CLIPS = {"sphere, c1 = 3 (fit's default)": {}, "ellipsoid, radius 4 (fdp-flower run's)":
         {"clip": 4.0, "clip_shape": "ellipsoid"}}


def run(seed: int, design: str) -> list[dict]:
    import fdp_flower

    tr, te = D.draw(design, seed, 2500), D.draw(design, seed, 5000, part=1)
    rows = []
    for tau in TAUS:
        common = dict(grid=tr.grid, tau=tau, n_clients=5, seed=seed, reference=False, basis="fpca", n_components=5)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            off = fdp_flower.fit(tr.curves, tr.response, eps=None, **common)
        loss_off = D.check_loss(te.response - off.predict(te.curves), tau)
        for clip, kwargs in CLIPS.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                m = fdp_flower.fit(tr.curves, tr.response, eps=1.0, **common, **kwargs)
            loss = D.check_loss(te.response - m.predict(te.curves), tau)
            rows.append({"seed": seed, "design": design, "tau": tau, "clip": clip, "rule": m.scenario.algorithm.rule,
                         "share": D.coverage(m.predict(te.curves), te.response),
                         "excess": float(loss / loss_off - 1.0)})
            print(f"seed {seed} {design:9s} tau {tau:3.1f} {clip:40s} share {rows[-1]['share']:.3f} "
                  f"excess loss {100 * rows[-1]['excess']:.2f}%", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(100, 110)))
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "estimates"))
    args = ap.parse_args()
    rows = []
    for design in ("irregular", "skewed"):
        for seed in args.seeds:
            t0 = time.perf_counter()
            rows += run(seed, design)
            print(f"{design} seed {seed}: {time.perf_counter() - t0:.0f} s", flush=True)
    lines = [f"Seeds {args.seeds[0]}..{args.seeds[-1]} ({len(args.seeds)}); fit(basis='fpca', n_components=5), "
             "5 sites of 500, total eps = 1. Per cell: mean held-out share below the fitted quantile (seeds within "
             "0.03 of tau) / mean held-out check loss above the privacy-off fit's, in %.", ""]
    for design in ("irregular", "skewed"):
        lines += [f"### {design}", "", "| clip | " + " | ".join(f"tau = {t:g}" for t in TAUS) + " |",
                  "|---|" + "---|" * len(TAUS)]
        for clip in CLIPS:
            cells = []
            for tau in TAUS:
                at = [r for r in rows if r["design"] == design and r["clip"] == clip and r["tau"] == tau]
                share = np.array([r["share"] for r in at])
                cells.append(f"{share.mean():.3f} ({int(np.sum(np.abs(share - tau) <= 0.03))}/{len(at)}) / "
                             f"{100 * np.mean([r['excess'] for r in at]):.2f}%")
            lines.append(f"| {clip} | " + " | ".join(cells) + " |")
        lines.append("")
    text = "\n".join(lines)
    D.write_results(args.out, "fit_fpca_clip", text, rows)
    print(text)


if __name__ == "__main__":
    main()
