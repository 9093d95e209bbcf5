"""In-process engine of the peer-to-peer mode (docs/algorithms.md, sections 3 and 4).

Runs every node's round with :func:`fdp_flower.algorithms.p2p.node.node_round` -- the same
function the Flower relay's client calls, on the same arrays in the same order,
so the two engines give bit-identical iterates for the same seed.  Each node
sees only its neighbours' releases of the previous round.  Metrics over nodes
are vectorised.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from fdp_flower.algorithms.faults import draw_failures, hold_failed_nodes
from fdp_flower.algorithms.p2p.node import NodeState, P2PAlgorithm, node_round
from fdp_flower.algorithms.p2p.problems import NetworkProblem
from fdp_flower.algorithms.p2p.topology import Graph
from fdp_flower.privacy import GaussianRelease, PrivacyLedger
from fdp_flower.privacy.ledger import epsilon_of_rho


class BudgetExceededError(RuntimeError):
    """A release would take a node past its total budget."""


@dataclass
class P2PResult:
    """Histories of one run: ``primal[r]`` / ``released[r]`` are x^r / xt^r (r = 0..T; row 0 is the
    zero initialization), shape (T+1, N, K); per-round metrics are arrays of length T+1."""

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
    failed: np.ndarray | None = None  # (T+1, N) bool: node failed in round r (injected; row 0 all False)
    stop_reason: str = "completed"  # with a stopping rule: "cap" or why it stopped before the cap

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
            stop=None) -> P2PResult:
    """Run ``algorithm`` for ``algorithm.steps`` rounds on ``graph``.

    Parameters
    ----------
    problem : NetworkProblem
        Node i holds ``problem.features[i]``; N must equal ``graph.num_nodes``.
    graph : Graph
        Connected communication graph.
    algorithm : P2PAlgorithm
        The resolved algorithm (see ``fdp_flower.algorithms.p2p.config.build_algorithm``).
    seed : int
        Run seed of the per-release noise generators ``release_rng(seed, node, round)``.
    metrics_every : int
        Evaluate metrics every this many rounds and at the last (default: 1).
    on_round : callable or None
        Called as ``on_round(round, states)`` after every round (default: None).
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
    stop : callable or None
        A stopping rule ``stop(released, round) -> bool`` on the releases xt^0..xt^round (e.g.
        :func:`fdp_flower.algorithms.p2p.nonprivate.converged`); when it holds the run ends after that
        round, the histories end there and ``stop_reason`` says why, else ``stop_reason`` is ``cap``
        (default: None, every round, ``stop_reason`` ``completed``).
    """
    n, k = problem.num_nodes, problem.dim
    if graph.num_nodes != n:
        raise ValueError(f"the graph has {graph.num_nodes} nodes but the problem {n}")
    if metrics_every < 1:
        raise ValueError(f"metrics_every must be >= 1, got {metrics_every}")
    steps = algorithm.steps
    objective = problem.objective
    nbrs = [list(x) for x in graph.neighbours]
    degrees = graph.degrees
    states = [NodeState.initial(k, int(degrees[i])) for i in range(n)]
    primal = np.zeros((steps + 1, n, k))
    released = np.zeros((steps + 1, n, k))
    duals = np.zeros((steps + 1, n, k))
    cut = np.zeros(steps + 1, dtype=int)
    iters = np.zeros(steps + 1, dtype=int)
    ledger = PrivacyLedger()
    rho_spent = np.zeros(n)
    cap = algorithm.noise.rho_total
    failed = np.zeros((steps + 1, n), dtype=bool)
    for r in range(1, steps + 1):
        prev = released[r - 1]
        new_states = []
        failed[r] = draw_failures(seed if failure_seed is None else failure_seed, r, n, failure_rate)
        for i in range(n):
            if failed[r, i]:  # held: same vectors, round counter in step with the others
                s = states[i]
                new_states.append(NodeState(r, s.released, s.dual, s.link_stat))
                continue
            params = algorithm.release_parameters(r, len(problem.responses[i]), int(degrees[i]))
            if params is not None and math.isfinite(cap):
                rho = params[0] ** 2 / (2 * params[1] ** 2)
                if rho_spent[i] + rho > cap * (1 + 1e-9):
                    raise BudgetExceededError(f"node {i}, round {r}: release would spend {rho_spent[i] + rho:.6g} "
                                              f"> total zCDP budget {cap:.6g}")
            res = node_round(algorithm=algorithm, objective=objective, node=i, seed=seed, state=states[i],
                             neighbour_released=prev[nbrs[i]], neighbour_degrees=degrees[nbrs[i]],
                             features=problem.features[i], response=problem.responses[i])
            if res.sigma is not None:  # recorded only after the noise was added
                ledger.record(GaussianRelease(client=i, round=r, sensitivity=res.sensitivity, sigma=res.sigma))
                rho_spent[i] += res.sensitivity ** 2 / (2 * res.sigma ** 2)
            new_states.append(res.state)
            primal[r, i] = res.primal
            released[r, i] = res.state.released
            duals[r, i] = res.state.dual
            cut[r] += res.cut_links
            iters[r] += res.solver_iterations
        states = new_states
        if failed[r].any():
            for arr in (primal, released, duals):
                arr[r] = hold_failed_nodes(arr[r - 1], arr[r], ~failed[r])
        if on_round is not None:
            on_round(r, states)
        if progress is not None and (r % max(1, steps // 20) == 0 or r == steps):
            row = {f"released_{key}": float(np.asarray(val)) for key, val in evaluate(problem, released[r]).items()}
            worst = ledger.worst_case(accounting_delta, with_pld=False)
            if worst is not None:  # the headline accountant's eps (PLD of the composed Gaussian, closed form)
                row["eps_pld"] = epsilon_of_rho(worst.zcdp_rho, accounting_delta)
            progress(r, row)
        if stop is not None and stop(released, r):
            fired = r
            break
    else:
        fired = None
    stop_reason = "completed"
    if stop is not None:
        from fdp_flower.algorithms.p2p.nonprivate import stop_reason as _reason

        stop_reason = _reason(fired)
        if r < steps:  # the histories end at the round the rule stopped the run
            steps = r
            primal, released, duals = primal[: r + 1], released[: r + 1], duals[: r + 1]
            cut, iters, failed = cut[: r + 1], iters[: r + 1], failed[: r + 1]
    rounds = np.unique(np.r_[np.arange(0, steps + 1, metrics_every), steps])
    metrics = {"round": rounds}
    for name, xs in (("primal", primal[rounds]), ("released", released[rounds])):
        for key, val in evaluate(problem, xs).items():
            metrics[f"{name}_{key}"] = val
    return P2PResult(algorithm, graph, seed, primal, released, duals, ledger, cut, iters, metrics, failed, stop_reason)


def run_scenario(scenario, *, repetition: int = 0, problem: NetworkProblem | None = None,
                 metrics_every: int = 1, progress=None, stop=None) -> P2PResult:
    """Build graph, problem and algorithm of a :class:`fdp_flower.algorithms.p2p.config.P2PScenario` and run it.

    The graph and the data come from ``scenario.seed``; repetition r draws its noise with seed
    ``scenario.seed + r``.  Pass ``problem`` to reuse an already built one (same scenario data);
    ``progress`` and ``stop`` as in :func:`run_p2p` (eps at the scenario's delta).
    """
    from fdp_flower.algorithms.p2p.config import build_algorithm, build_graph, build_problem

    graph = build_graph(scenario.topology, scenario.seed)
    if problem is None:
        problem = build_problem(scenario.data, graph.num_nodes, scenario.seed)
    algorithm = build_algorithm(scenario.algorithm, scenario.privacy, problem)
    return run_p2p(problem, graph, algorithm, seed=scenario.seed + repetition, metrics_every=metrics_every,
                   progress=progress, accounting_delta=scenario.privacy.delta, stop=stop)


def summarize(result: P2PResult, delta: float, *, privacy=None) -> dict:
    """Final metrics, privacy spent (:func:`fdp_flower.outputs.results.privacy_section`, the same keys as
    every family; ``privacy``: the scenario's privacy section, for the budget asked for), graph and link
    cuts of one run, as plain data."""
    from fdp_flower.outputs.results import privacy_section

    final = {k: float(v[-1]) for k, v in result.metrics.items() if k != "round"}
    enabled = privacy is not None and privacy.enabled and bool(result.ledger.releases)
    section = privacy_section(result.ledger, delta, mode=getattr(privacy, "mode", None) if enabled else None,
                              eps_budget=privacy.eps if enabled else None)
    return {"algorithm": result.algorithm.kind, "steps": result.algorithm.steps, "seed": result.seed,
            "final": final, "privacy": section, "graph": result.graph.to_dict(),
            "cut_links_final": int(result.cut_links[-1])}


def main(argv=None) -> None:
    """``python -m fdp_flower.engines.p2p SCENARIO.yaml [a.b=value ...]``: run every repetition in process
    and print a JSON summary per repetition."""
    import json
    import sys

    from fdp_flower.algorithms.p2p.config import build_graph, build_problem, load_p2p_scenario

    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        raise SystemExit("usage: python -m fdp_flower.engines.p2p SCENARIO.yaml [section.field=value ...]")
    scenario = load_p2p_scenario(args[0], args[1:])
    graph = build_graph(scenario.topology, scenario.seed)
    problem = build_problem(scenario.data, graph.num_nodes, scenario.seed)
    for rep in range(scenario.repetitions):
        res = run_scenario(scenario, repetition=rep, problem=problem,
                           metrics_every=max(1, scenario.algorithm.steps // 10))
        print(json.dumps({"repetition": rep, **summarize(res, scenario.privacy.delta, privacy=scenario.privacy)}))


if __name__ == "__main__":
    main()
