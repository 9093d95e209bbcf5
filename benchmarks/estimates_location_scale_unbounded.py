"""Issue 29, item 1, with nothing declared: ``fdp_flower.fit`` on a response at any location and scale.

    python benchmarks/estimates_location_scale_unbounded.py [--seeds 0 1 2] [--basis fpca|cosine]
        [--out benchmarks/results/estimates]

``--basis cosine`` (fit's default basis: the Newton rule with its location/scale search and a second-moments round,
docs/algorithms.md section 1.3) writes location_scale_unbounded_cosine.md / .json instead; the description below is
``--basis fpca``'s.

Design ``irregular`` (benchmarks/estimates_designs.py), 2500 training curves over 5 sites of 500, 10000 held-out
curves.  The base response y0 is the design's response standardized by public constants ((y - 11) / 1.2); every
variant is y = c + s y0 with c in {0, 10, 1e4} and s in {1e-3, 1, 1e3}.  Each is fitted by

    fdp_flower.fit(curves, c + s * y0, tau=tau, eps=eps, n_clients=5, seed=seed, basis="fpca")

with every other argument at its default and **no response bounds, offset or scale declared**: the federated
DP-FPCA basis (K = 10) and so the Newton rule, whose private location/scale search runs in asinh(y) (docs/algorithms.md,
section 1.3), at a total eps = 1, and with privacy off (eps=None: the range round, then the quartile search).
Reported per (c, s): the max over held-out curves of |(q_{c,s}(x) - c) / s - q_{0,1}(x)| in units of the
standardized response's IQR / 1.349, against the standardized fit of the same seed and tau (worst over seeds and
tau; the seeds fix the split and the noise draws,
so the two fits differ only through the location/scale search), the mean share of held-out responses at or below
the fitted quantile per tau, and the search's location and scale relative to the response's median and
IQR / 1.349 (worst over seeds and tau; log-scale error).  Writes location_scale_unbounded.md and .json to --out.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import estimates_designs as D  # noqa: E402

LOCATIONS = (0.0, 10.0, 1e4)
SCALES = (1e-3, 1.0, 1e3)
TAUS = (0.1, 0.5, 0.9)


def run_seed(seed: int, basis: str = "fpca") -> list[dict]:
    import fdp_flower
    from fdp_flower.api import client_partition

    tr, te = D.draw("irregular", seed, 2500), D.draw("irregular", seed, 10_000, part=1)
    y0, y0_test = (tr.response - 11.0) / 1.2, (te.response - 11.0) / 1.2
    rows = []
    for eps in (1.0, None):
        for tau in TAUS:
            for c in LOCATIONS:
                for s in SCALES:
                    y = c + s * y0
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # the predicted privacy cost (said before training)
                        m = fdp_flower.fit(tr.curves, y, grid=tr.grid, tau=tau, eps=eps, n_clients=5, seed=seed,
                                           basis=basis, reference=False)
                    q = (m.predict(te.curves) - c) / s
                    last = m.history.iloc[-1]
                    median = float(np.median(y))
                    iqr_scale = float(np.subtract(*np.quantile(y, [0.75, 0.25]))) / 1.349
                    # the search works in the units the sites fit, (y - offset) / scale (privacy off: fit's
                    # exact median and IQR; privacy on: 0 and 1, nothing declared)
                    offset, unit = m.scenario.data.response_offset, m.scenario.data.response_scale
                    found_location = offset + unit * float(last.get("location", float("nan")))
                    found_scale = unit * float(last.get("scale", float("nan")))
                    rows.append({"seed": seed, "tau": tau, "eps": eps, "location": c, "scale": s,
                                 "rule": m.scenario.algorithm.rule, "basis": m.scenario.basis.kind, "q": q,
                                 "coverage": D.coverage(q, y0_test),
                                 "location_error": abs(found_location - median) / iqr_scale,
                                 "log_scale_error": abs(float(np.log(found_scale / iqr_scale)))})
                    if (c, s) == (0.0, 1.0):  # the same split with other noise draws: the fit's own noise
                        labels = np.empty(len(y), dtype=int)
                        for i, rows_i in enumerate(client_partition(len(y), n_clients=5, client_ids=None,
                                                                    seed=seed)[0]):
                            labels[rows_i] = i
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            other = fdp_flower.fit(tr.curves, y, grid=tr.grid, tau=tau, eps=eps, client_ids=labels,
                                                   seed=seed + 7919, basis=basis, reference=False)
                        rows.append({"seed": seed, "tau": tau, "eps": eps, "location": c, "scale": s,
                                     "rule": other.scenario.algorithm.rule, "basis": other.scenario.basis.kind,
                                     "q": (other.predict(te.curves) - c) / s, "noise_reference": True,
                                     "coverage": D.coverage((other.predict(te.curves) - c) / s, y0_test),
                                     "location_error": float("nan"), "log_scale_error": float("nan")})
    return rows


def deviations(rows: list[dict], unit: float) -> list[dict]:
    """Per row: max |q - q_{0,1}| / ``unit`` (the standardized response's IQR / 1.349) against the standardized fit
    of the same seed, tau and eps."""
    ref = {(r["seed"], r["tau"], r["eps"]): r["q"] for r in rows
           if (r["location"], r["scale"]) == (0.0, 1.0) and not r.get("noise_reference")}
    out = []
    for r in rows:
        q0 = ref[(r["seed"], r["tau"], r["eps"])]
        out.append({k: v for k, v in r.items() if k != "q"} | {"max_dev": float(np.max(np.abs(r["q"] - q0)) / unit)})
    return out


def report(rows: list[dict], seeds: list[int], basis: str = "fpca") -> str:
    what = ("federated DP-FPCA basis, Newton rule" if basis == "fpca" else
            "cosine basis, the Newton rule with its location/scale search and noised second moments; privacy off: "
            "the exact standardization and the Newton rule")
    lines = [f"`fit(curves, c + s y0, tau, eps, n_clients=5, basis='{basis}')` with nothing declared about the "
             f"response ({what}); irregular design, 5 sites of 500, seeds {seeds}, 10000 held-out curves.",
             "Max deviation: max over held-out curves of |(q_{c,s}(x) - c) / s - q_{0,1}(x)| in units of the "
             "standardized response's IQR / 1.349 (worst over seeds and tau).  Location / log-scale error: the "
             "search's location and scale against the response's "
             "median and IQR / 1.349, in units of that scale (worst over seeds and tau).", "",
             "| privacy | location c | scale s | max deviation | location error | log-scale error | "
             "share below, tau = " + " / ".join(f"{t:g}" for t in TAUS) + " |",
             "|---|---|---|---|---|---|---|"]
    for eps in (1.0, None):
        for c in LOCATIONS:
            for s in SCALES:
                sel = [r for r in rows if r["eps"] == eps and r["location"] == c and r["scale"] == s
                       and not r.get("noise_reference")]
                if not sel:
                    continue
                cov = " / ".join(f"{np.mean([r['coverage'] for r in sel if r['tau'] == t]):.3f}" for t in TAUS)
                lines.append(f"| {'eps = 1' if eps else 'off'} | {c:g} | {s:g} | {max(r['max_dev'] for r in sel):.2e} "
                             f"| {max(r['location_error'] for r in sel):.3f} | "
                             f"{max(r['log_scale_error'] for r in sel):.3f} | {cov} |")
    for eps in (1.0, None):
        noise = [r["max_dev"] for r in rows if r["eps"] == eps and r.get("noise_reference")]
        lines.append(f"| {'eps = 1' if eps else 'off'}, the (0, 1) fit with other noise draws (same split) | 0 | 1 | "
                     f"{max(noise):.2e} | | | |")
    for eps in (1.0, None):
        sel = [r for r in rows if r["eps"] == eps and not r.get("noise_reference")]
        worst = {t: max(abs(np.mean([r["coverage"] for r in sel if r["tau"] == t and r["location"] == c
                                     and r["scale"] == s]) - t) for c in LOCATIONS for s in SCALES) for t in TAUS}
        within = sum(abs(np.mean([r["coverage"] for r in sel if r["tau"] == t and r["location"] == c
                                  and r["scale"] == s]) - t) <= 0.03 for t in TAUS for c in LOCATIONS for s in SCALES)
        lines.append("")
        lines.append(f"- {'eps = 1' if eps else 'privacy off'}: {within} of {len(TAUS) * len(LOCATIONS) * len(SCALES)} "
                     "(c, s, tau) cells with the mean share below within 0.03 of tau; worst |share - tau| per tau: "
                     + ", ".join(f"{t:g}: {worst[t]:.3f}" for t in TAUS))
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--basis", choices=["fpca", "cosine"], default="fpca")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "estimates"))
    args = ap.parse_args()
    rows = []
    for seed in args.seeds:
        t0 = time.perf_counter()
        rows += run_seed(seed, args.basis)
        print(f"seed {seed}: {time.perf_counter() - t0:.0f} s", flush=True)
    y0 = (D.draw("irregular", args.seeds[0], 10_000, part=1).response - 11.0) / 1.2
    rows = deviations(rows, float(np.subtract(*np.quantile(y0, [0.75, 0.25]))) / 1.349)
    text = report(rows, args.seeds, args.basis)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "location_scale_unbounded" + ("" if args.basis == "fpca" else f"_{args.basis}")
    (out / f"{name}.md").write_text(text)
    (out / f"{name}.json").write_text(json.dumps(rows, indent=1))
    print(text)


if __name__ == "__main__":
    sys.exit(main())
