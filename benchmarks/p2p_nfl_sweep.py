"""Can any (step, rho, budget, averaging) choice make zCDP-NFL beat zCDP-grad-NFL?
(Gauthier et al. 2023; docs/algorithms.md, section 3)

Usage::

    python benchmarks/p2p_nfl_sweep.py      # everything (about 1400 runs); prints tables to stdout
    python benchmarks/p2p_nfl_sweep.py --only wide --eps 10 --problems lad   # one part (for parallel runs)

Synthetic elastic net and LAD, N = 20 Erdos-Renyi (average degree 4), 100 samples per node, T = 200,
delta = 1e-4, total-budget zCDP.  Both algorithms get grids of the same size, are tuned on noise seeds
1000-1001 and evaluated on seeds 0-4.  "final" is the mean over nodes of ||x_i^T - x*|| / ||x*||;
"tail" the same for the average of x_i^k over the last 50 steps (post-processing, applied to both).
Sensitivities and accounting are the library's (2 G / (m_i (1/eta_k + 2 rho |N_i|)) and 2 G a_k / m_i).
"""
from __future__ import annotations

import argparse
import itertools
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
warnings.filterwarnings("ignore", category=DeprecationWarning)

from fdp_flower.algorithms.p2p.config import (  # noqa: E402
    DecentralizedAdmmConfig,
    P2PScenario,
    SyntheticRegressionData,
    ZcdpGradNflConfig,
    ZcdpNflConfig,
)
from fdp_flower.algorithms.p2p.plan import build_problem  # noqa: E402
from fdp_flower.config.sections import PrivacyConfig  # noqa: E402
from fdp_flower.engines.p2p import run_scenario  # noqa: E402

T, TAIL, TUNE, EVAL = 200, 50, (1000, 2), (0, 5)
PROBLEMS = ("elastic_net", "lad")
PROB = {n: build_problem(P2PScenario(data=SyntheticRegressionData(problem=n))) for n in PROBLEMS}


def errors(res, x_star):
    scale = np.linalg.norm(x_star)
    final = np.mean(np.linalg.norm(res.primal[-1] - x_star, axis=1)) / scale
    tail = np.mean(np.linalg.norm(res.primal[-TAIL:].mean(0) - x_star, axis=1)) / scale
    return final, tail


def run(name, alg, eps, seeds):
    priv = PrivacyConfig(enabled=False) if eps is None else PrivacyConfig(mode="total", eps=eps, delta=1e-4)
    s = P2PScenario(name="sweep", seed=0, data=SyntheticRegressionData(problem=name), algorithm=alg, privacy=priv)
    out = np.array([errors(run_scenario(s, problem=PROB[name], repetition=seeds[0] + r, metrics_every=T),
                           PROB[name].x_star) for r in range(seeds[1])])
    out[~np.isfinite(out)] = 1e9
    return out.mean(0)


def steps(spec):
    return [{"kind": k, "eta0": float(e)} for k, es in spec for e in es]


def nfl_grid(rhos, st, budgets):
    return [ZcdpNflConfig(rounds=T, rho=r, step=s, budget=b) for r, s, b in itertools.product(rhos, st, budgets)]


def grad_grid(st, budgets):
    return [ZcdpGradNflConfig(rounds=T, step=s, budget=b) for s, b in itertools.product(st, budgets)]


def desc(c):
    head = f"rho={c.rho:g} " if hasattr(c, "rho") else ""
    bud = "" if c.budget.kind == "constant" else f" geo {c.budget.ratio:g}"
    return f"{head}{c.step.kind} {c.step.eta0:g}{bud}"


def compare(title, nfl, grad, eps_list, problems=PROBLEMS):
    print(f"\n## {title} ({len(nfl)} zCDP-NFL configs, {len(grad)} zCDP-grad-NFL configs)\n")
    print("| eps | problem | metric | zCDP-NFL (tuned config) | zCDP-grad-NFL (tuned config) | winner |")
    print("|---|---|---|---|---|---|")
    for eps, name in itertools.product(eps_list, problems):
        sn = [(run(name, c, eps, TUNE), c) for c in nfl]
        sg = [(run(name, c, eps, TUNE), c) for c in grad]
        for key, lab in ((0, "final"), (1, f"tail-{TAIL} avg")):
            bn = min(sn, key=lambda t: t[0][key])[1]
            bg = min(sg, key=lambda t: t[0][key])[1]
            en, eg = run(name, bn, eps, EVAL)[key], run(name, bg, eps, EVAL)[key]
            print(f"| {eps:g} | {name} | {lab} | {en:.3g} ({desc(bn)}) | {eg:.3g} ({desc(bg)}) | "
                  f"{'zCDP-NFL' if en < eg else 'zCDP-grad-NFL'} |", flush=True)


def diagnostic():
    print("\n## Same parameters without and with noise (final error; private: mean of 3 seeds 1000-1002)\n")
    print("| problem | algorithm | non-private | eps = 10 | eps = 1 |\n|---|---|---|---|---|")
    cfgs = [ZcdpNflConfig(rounds=T, rho=r, step={"kind": k, "eta0": e}, budget=b) for r, k, e, b in (
        (0.03, "inv", 30, {"kind": "constant"}), (0.1, "inv", 10, {"kind": "constant"}),
        (0.3, "inv", 10, {"kind": "constant"}), (1, "inv", 1000, {"kind": "geometric", "ratio": 1.02}),
        (3, "inv", 100, {"kind": "constant"}), (10, "inv", 1000, {"kind": "constant"}))]
    cfgs += [ZcdpGradNflConfig(rounds=T, step={"kind": k, "eta0": e}) for k, e in
             (("inv", 5), ("inv", 10), ("inv_sqrt", 1))]
    for name in PROBLEMS:
        for c in cfgs:
            free = (DecentralizedAdmmConfig(rounds=T, rho=c.rho, step=c.step) if c.kind == "zcdp_nfl" else c)
            row = [run(name, free, None, (0, 1))[0]] + [run(name, c, e, (1000, 3))[0] for e in (10.0, 1.0)]
            lab = ("zCDP-NFL " if c.kind == "zcdp_nfl" else "zCDP-grad-NFL ") + desc(c)
            print(f"| {name} | {lab} | " + " | ".join(f"{v:.3g}" for v in row) + " |", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("diagnostic", "wide", "geometric"), default=None)
    ap.add_argument("--eps", type=float, nargs="+", default=[10.0, 1.0])
    ap.add_argument("--problems", nargs="+", choices=PROBLEMS, default=list(PROBLEMS))
    args = ap.parse_args(argv)
    if args.only in (None, "diagnostic"):
        diagnostic()
    if args.only in (None, "wide"):
        wide(args.eps, args.problems)
    if args.only in (None, "geometric"):
        geometric(args.eps, args.problems)


def wide(eps_list, problems):
    compare("Wide step/rho grid, constant budget",
            nfl_grid((0.01, 0.03, 0.1, 0.3, 1.0), steps((("inv", (3, 10, 30, 100)), ("inv_sqrt", (1, 3)),
                                                          ("constant", (1, 10)))), [{"kind": "constant"}]),
            grad_grid(steps((("inv", (1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 100)),
                             ("inv_sqrt", (0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5, 10)),
                             ("constant", (0.01, 0.02, 0.03, 0.05, 0.1, 0.2, 0.3, 0.5, 1, 2, 3, 5, 10, 30, 100,
                                           300, 1000, 3000)))), [{"kind": "constant"}]),
            eps_list, problems)


def geometric(eps_list, problems):
    geo = [{"kind": "geometric", "ratio": r} for r in (1.02, 1.03, 1.05)]
    compare("Large rho / large eta with the dynamic (geometric) zCDP budget",
            nfl_grid((0.3, 1.0, 3.0), steps((("inv", (30, 100, 1000)), ("constant", (10,)))), geo),
            grad_grid(steps((("inv", (3, 5, 7, 10)), ("inv_sqrt", (0.3, 0.5, 1, 2)),
                             ("constant", (0.02, 0.05, 0.1, 0.2)))), geo),
            eps_list, problems)


if __name__ == "__main__":
    main()
