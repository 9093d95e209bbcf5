"""In-process engine of the peer-to-peer family (docs/p2p.md; docs/algorithms.md, sections 3 and 4).

A thin driver of the family's protocol: the relay's server (:class:`fdp_flower.algorithms.p2p.protocol.P2PServer`)
and every node's site function (:func:`fdp_flower.algorithms.p2p.site.answer`, all nodes of a round at once),
moved by :func:`fdp_flower.algorithms.protocol.run_in_process` -- the same server and site code the Flower relay
and its client worker run, so with the same seed the engines give bit-identical iterates.  Each release's noise
comes from ``release_rng(seed, node, round)``.  The engine keeps, for its metrics only, every node's noise-free
primal x_i (the site's noise-free value through the server's public step); no driver sees it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fdp_flower.algorithms.faults import FailureRecord, draw_failures
from fdp_flower.algorithms.p2p.plan import P2PAlgorithm
from fdp_flower.algorithms.p2p.problems import NetworkProblem
from fdp_flower.algorithms.p2p.protocol import BUDGET_EXHAUSTED, P2PServer, node_primal
from fdp_flower.algorithms.p2p.site import NodeData, NodeEvaluation, answer
from fdp_flower.algorithms.p2p.topology import Graph
from fdp_flower.algorithms.protocol import run_in_process
from fdp_flower.privacy import PrivacyLedger
from fdp_flower.privacy.ledger import epsilon_of_rho
from fdp_flower.privacy.mechanisms import run_noise


class BudgetExceededError(RuntimeError):
    """A release would take a node past its total budget."""


@dataclass
class P2PResult:
    """Histories of one run: ``primal[r]`` / ``released[r]`` are x^r / xt^r (r = 0..T; row 0 is the
    zero initialization), shape (T+1, N, K); per-round metrics are arrays of length T+1.  ``primal`` is the
    nodes' noise-free x_i (evaluation only), ``released`` the public xt_i."""

    algorithm: P2PAlgorithm
    graph: Graph
    seed: int
    primal: np.ndarray
    released: np.ndarray
    duals: np.ndarray
    ledger: PrivacyLedger
    cut_links: np.ndarray  # (T+1,) links cut by the threshold, summed over nodes (directed count)
    solver_iterations: np.ndarray  # (T+1,) Newton iterations summed over nodes
    metrics: dict = field(default_factory=dict)
    failed: np.ndarray | None = None  # (T+1, N) bool: node failed in round r (row 0 all False)
    failures: list[FailureRecord] = field(default_factory=list)
    stop_reason: str = "completed"

    @property
    def final_primal(self) -> np.ndarray:
        return self.primal[-1]

    def privacy(self, delta: float, *, with_pld: bool = False) -> dict:
        """Worst node's composed cost (zCDP rho and eps by zCDP / RDP / PLD), or {} without releases."""
        s = self.ledger.worst_case(delta, with_pld=with_pld)
        if s is None:
            return {}
        return {"node": s.client, "releases": s.releases, "zcdp_rho": s.zcdp_rho, "eps_zcdp": s.eps_zcdp,
                "eps_rdp": s.eps_rdp, "eps_pld": s.eps_pld, "delta": delta}


def evaluate(problem: NetworkProblem, xs: np.ndarray) -> dict:
    """Metrics of node estimates xs (..., N, K): normalized error (mean and max over nodes),
    average loss and, for classification, mean train/test accuracy over nodes."""
    out = {}
    if problem.x_star is not None:
        err = problem.normalized_error(xs)
        out["normalized_error"] = err.mean(axis=-1)
        out["normalized_error_max"] = err.max(axis=-1)
    xs2 = xs.reshape(-1, *xs.shape[-2:])
    out["average_loss"] = np.array([problem.average_loss(x) for x in xs2]).reshape(xs.shape[:-2])
    if problem.classification:
        out["train_accuracy"] = np.array([problem.accuracy(x).mean() for x in xs2]).reshape(xs.shape[:-2])
        if problem.test_features is not None:
            out["test_accuracy"] = np.array([problem.accuracy(x, test=True).mean()
                                             for x in xs2]).reshape(xs.shape[:-2])
    return out


def run_p2p(problem: NetworkProblem, graph: Graph, algorithm: P2PAlgorithm, *, seed: int,
            metrics_every: int = 1, on_round=None, failure_rate: float = 0.0,
            failure_seed: int | None = None, progress=None, accounting_delta: float = 1e-5,
            quorum: float | None = None, max_primal_norm: float | None = None) -> P2PResult:
    """Run ``algorithm`` for ``algorithm.rounds`` rounds on ``graph``.

    Parameters
    ----------
    problem : NetworkProblem
        Node i holds ``problem.features[i]``; N must equal ``graph.num_nodes``.
    graph : Graph
        Connected communication graph.
    algorithm : P2PAlgorithm
        The resolved algorithm (see ``fdp_flower.algorithms.p2p.plan.build_algorithm``).
    seed : int
        Run seed of the per-release noise generators ``release_rng(seed, node, round)``.
    metrics_every : int
        Evaluate metrics every this many rounds and at the last (default: 1).
    on_round : callable or None
        Called as ``on_round(round, server)`` after every round (the :class:`P2PServer`) (default: None).
    failure_rate : float
        Each node fails independently with this probability each round
        (:func:`fdp_flower.algorithms.faults.draw_failures`, stream of ``failure_seed``, default ``seed``).
        A failed node computes and releases nothing (no ledger entry); its state is held
        and its neighbours use its last released vector (:func:`fdp_flower.algorithms.faults.hold_failed_nodes`).
        (default: 0.0)
    progress : callable or None
        Called as ``progress(round, row)`` about twenty times per run and after the last round, with
        ``row`` the metrics of the released vectors (``released_normalized_error``, ...) and, when
        private, ``eps_pld``, the worst node's eps so far at ``accounting_delta`` (the PLD accountant's
        figure of the composed Gaussian, in closed form) (default: None).
    quorum : float or None
        Least fraction of nodes that must release in a round, else the run stops (None: no quorum; default: None).
    max_primal_norm : float or None
        Releases whose primal norm exceeds this are rejected as failures (default: None).

    A release that would take a node past its total zCDP budget raises :class:`BudgetExceededError` before any
    noise of that round is drawn.
    """
    n, k = problem.num_nodes, problem.dim
    if graph.num_nodes != n:
        raise ValueError(f"the graph has {graph.num_nodes} nodes but the problem {n}")
    if metrics_every < 1:
        raise ValueError(f"metrics_every must be >= 1, got {metrics_every}")
    rounds = algorithm.rounds
    server = P2PServer(algorithm, graph, problem.objective, problem.sample_counts, k, quorum=quorum,
                       max_primal_norm=max_primal_norm)
    data, noise = NodeData.of_problem(problem), run_noise(seed)
    evaluation: dict[int, NodeEvaluation] = {}
    primal = [np.zeros((n, k))]
    cut, iters, failed = [0], [0], [np.zeros(n, dtype=bool)]

    def site(requests):
        evaluation.clear()
        return answer(requests, data, server.plan, noise, evaluation=evaluation)

    def after_round(round_: int, row: dict) -> None:
        x = primal[-1].copy()  # a failed node is held
        for node, step in server.closed_steps.items():  # the noise-free value through the same public step
            x[node] = node_primal(algorithm, problem.objective, step, evaluation[node].value)
        primal.append(x)
        cut.append(int(row["cut_links"]))
        iters.append(int(sum(evaluation[i].solver_iterations for i in server.closed_steps)))
        failed.append(np.array([i not in server.closed_steps for i in range(n)]))
        if on_round is not None:
            on_round(round_, server)
        if progress is not None and (round_ % max(1, rounds // 20) == 0 or round_ == rounds):
            row = {f"released_{key}": float(np.asarray(val))
                   for key, val in evaluate(problem, server.state.released).items()}
            worst = server.ledger.worst_case(accounting_delta, with_pld=False)
            if worst is not None:  # the headline accountant's eps (PLD of the composed Gaussian, closed form)
                row["eps_pld"] = epsilon_of_rho(worst.zcdp_rho, accounting_delta)
            progress(round_, row)

    failures = None if failure_rate == 0 else (
        lambda round_: draw_failures(seed if failure_seed is None else failure_seed, round_, n, failure_rate))
    run_in_process(server, site, failed=failures, progress=after_round)
    if server.stop_reason is not None and server.stop_reason.startswith(BUDGET_EXHAUSTED):
        raise BudgetExceededError(server.stop_reason)
    primal_arr = np.stack(primal)
    released, duals = np.stack(server.released_history), np.stack(server.dual_history)
    done = len(primal) - 1
    marks = np.unique(np.r_[np.arange(0, done + 1, metrics_every), done])
    metrics = {"round": marks}
    for name, xs in (("primal", primal_arr[marks]), ("released", released[marks])):
        for key, val in evaluate(problem, xs).items():
            metrics[f"{name}_{key}"] = val
    return P2PResult(algorithm, graph, seed, primal_arr, released, duals, server.ledger, np.array(cut),
                     np.array(iters), metrics, np.stack(failed), list(server.failures),
                     server.stop_reason or "completed")


def run_scenario(scenario, *, repetition: int = 0, problem: NetworkProblem | None = None,
                 metrics_every: int = 1, progress=None) -> P2PResult:
    """Build graph, problem and algorithm of a :class:`fdp_flower.algorithms.p2p.config.P2PScenario` and run it.

    The graph and the data come from ``scenario.seed``; repetition r draws its noise with seed
    ``scenario.seed + r``.  Pass ``problem`` to reuse an already built one (same scenario data);
    ``progress`` as in :func:`run_p2p` (eps at the scenario's delta).  Faults: ``scenario.faults``
    (injected failure rate and seed, quorum, primal bound).
    """
    from fdp_flower.algorithms.p2p.plan import build_algorithm, build_problem, scenario_graph

    graph = scenario_graph(scenario)
    if problem is None:
        problem = build_problem(scenario)
    algorithm = build_algorithm(scenario.algorithm, scenario.privacy, problem)
    f = scenario.faults
    return run_p2p(problem, graph, algorithm, seed=scenario.seed + repetition, metrics_every=metrics_every,
                   progress=progress, accounting_delta=scenario.privacy.delta, failure_rate=f.failure_rate,
                   failure_seed=f.seed, quorum=f.quorum,
                   max_primal_norm=f.max_primal_norm)


def summarize(result: P2PResult, delta: float, *, privacy=None) -> dict:
    """Final metrics, privacy spent (:func:`fdp_flower.outputs.results.privacy_section`, the same keys as
    every family; ``privacy``: the scenario's privacy section, for the budget asked for), graph and link
    cuts of one run, as plain data."""
    from fdp_flower.outputs.results import privacy_section

    final = {k: float(v[-1]) for k, v in result.metrics.items() if k != "round"}
    enabled = privacy is not None and privacy.enabled and bool(result.ledger.releases)
    section = privacy_section(result.ledger, delta, mode=getattr(privacy, "mode", None) if enabled else None,
                              eps_budget=privacy.eps if enabled else None)
    return {"algorithm": result.algorithm.kind, "rounds": result.algorithm.rounds, "seed": result.seed,
            "final": final, "privacy": section, "graph": result.graph.to_dict(),
            "cut_links_final": int(result.cut_links[-1]), "stop_reason": result.stop_reason}


def main(argv=None) -> None:
    """``python -m fdp_flower.engines.p2p SCENARIO.yaml [a.b=value ...]``: run every repetition in process
    and print a JSON summary per repetition."""
    import json
    import sys

    from fdp_flower.algorithms.p2p.config import load_p2p_scenario
    from fdp_flower.algorithms.p2p.plan import build_problem

    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        raise SystemExit("usage: python -m fdp_flower.engines.p2p SCENARIO.yaml [section.field=value ...]")
    scenario = load_p2p_scenario(args[0], args[1:])
    problem = build_problem(scenario)
    for rep in range(scenario.repetitions):
        res = run_scenario(scenario, repetition=rep, problem=problem,
                           metrics_every=max(1, scenario.algorithm.rounds // 10))
        print(json.dumps({"repetition": rep, **summarize(res, scenario.privacy.delta, privacy=scenario.privacy)}))


if __name__ == "__main__":
    main()
