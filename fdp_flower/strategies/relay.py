"""Relay strategy: peer-to-peer learning emulated on Flower's hub-and-spoke runtime.

There is no global model.  The relay keeps every graph node's state (its last
release xt_i, dual and link statistics -- all post-processing of releases) and,
each round, sends every node exactly one message holding its own state and its
neighbours' releases xt_j, j in N_i, of the previous round -- nothing else.  On
the replies it stores the new states, checks each release's calibration and
records it in the privacy ledger.  It never averages: the update rules run on
the nodes (:func:`fdp_flower.algorithms.p2p.node.node_round`), so with the same seed the
relay reproduces the in-process engine's iterates exactly.
"""
from __future__ import annotations

import json
import warnings
from logging import ERROR, INFO
from typing import Callable, Iterable

import numpy as np

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
    from flwr.common.logger import log
    from flwr.serverapp import Grid
    from flwr.serverapp.strategy import Strategy

from fdp_flower.algorithms.p2p.node import NodeState, P2PAlgorithm
from fdp_flower.algorithms.p2p.topology import Graph
from fdp_flower.privacy import GaussianRelease, PrivacyLedger
from fdp_flower.strategies.common import polling, reply_sender, round_metrics, run_results_dir
from fdp_flower.wire import pack_arrays, unpack_arrays


class RelayError(RuntimeError):
    """The relay cannot continue (missing, duplicate or inconsistent replies)."""


class P2PRelayStrategy(Strategy):
    """Routes each node's neighbours' releases to it; keeps all node states; never averages.

    Parameters
    ----------
    graph : Graph
        The communication graph (public).
    algorithm : P2PAlgorithm
        The resolved algorithm, used only to check each reply's noise calibration.
    dim : int
        K, the length of every released vector.
    evaluate : callable, optional
        ``f(round, released (N, K)) -> dict`` of metrics logged every round (simulation only; it may
        see pooled data) (default: None).
    """

    def __init__(self, graph: Graph, algorithm: P2PAlgorithm, dim: int, *,
                 evaluate: Callable[[int, np.ndarray], dict] | None = None) -> None:
        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        self.graph = graph
        self.algorithm = algorithm
        self.dim = dim
        self.evaluate = evaluate
        self.states = [NodeState.initial(dim, int(d)) for d in graph.degrees]
        self.ledger = PrivacyLedger()
        self.history: list[dict] = []
        self.released_history: list[np.ndarray] = [np.zeros((graph.num_nodes, dim))]
        self.dual_history: list[np.ndarray] = [np.zeros((graph.num_nodes, dim))]
        self.flower_node: dict[int, int] = {}

    def summary(self) -> None:
        log(INFO, "\t├── P2P relay: %s graph, N=%d, degrees %s", self.graph.name, self.graph.num_nodes,
            self.graph.degrees.tolist())
        log(INFO, "\t└── %s, T=%d, noise %s", self.algorithm.kind, self.algorithm.steps, self.algorithm.noise.mode)

    def node_payload(self, node: int) -> tuple[dict[str, np.ndarray], list[int]]:
        """The arrays of node ``node``'s message: its own state and its neighbours' releases only."""
        nbrs = list(self.graph.neighbours[node])
        released = np.stack([s.released for s in self.states])
        arrays = dict(self.states[node].to_arrays(), neighbour_released=released[nbrs])
        return arrays, nbrs

    def _route(self, node_ids: list[int]) -> dict[int, int]:
        if not node_ids:
            raise RelayError("no Flower nodes connected")
        if not self.flower_node:  # graph node i -> Flower node (one each, or round-robin)
            self.flower_node = {i: node_ids[i % len(node_ids)] for i in range(self.graph.num_nodes)}
        return self.flower_node

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        route = self._route(sorted(grid.get_node_ids()))
        messages = []
        for node in range(self.graph.num_nodes):
            payload, nbrs = self.node_payload(node)
            content = RecordDict({"arrays": pack_arrays(**payload),
                                  "config": ConfigRecord({"round": server_round, "partition-id": node,
                                                          "neighbours": nbrs})})
            messages.append(Message(content=content, dst_node_id=route[node], message_type=MessageType.TRAIN))
        return messages

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        new: dict[int, NodeState] = {}
        releases = []
        cut = iters = 0
        for reply in replies:
            node = reply_sender(reply, server_round, self.graph.num_nodes, new, RelayError)
            metrics = reply.content["metrics"]
            state = NodeState.from_arrays(unpack_arrays(reply.content["arrays"]))
            if state.round != server_round or state.released.shape != (self.dim,) \
                    or state.link_stat.shape != (self.graph.degrees[node],) \
                    or not np.all(np.isfinite(state.released)):
                raise RelayError(f"round {server_round}: node {node} sent a malformed state")
            params = self.algorithm.release_parameters(server_round, int(metrics["num-examples"]),
                                                       int(self.graph.degrees[node]))
            if params is not None:
                if not np.isclose(float(metrics["sigma"]), params[1], rtol=1e-9, atol=0):
                    raise RelayError(f"node {node}: sigma {metrics['sigma']} != calibrated {params[1]}")
                releases.append(GaussianRelease(client=node, round=server_round, sensitivity=params[0],
                                                sigma=params[1]))
            cut += int(metrics["cut-links"])
            iters += int(metrics["solver-iterations"])
            new[node] = state
        if len(new) < self.graph.num_nodes:
            raise RelayError(f"round {server_round}: no reply from nodes "
                             f"{sorted(set(range(self.graph.num_nodes)) - set(new))}")
        for release in sorted(releases, key=lambda r: r.client):  # noise was added before the reply
            self.ledger.record(release)
        self.states = [new[i] for i in range(self.graph.num_nodes)]
        released = np.stack([s.released for s in self.states])
        self.released_history.append(released)
        self.dual_history.append(np.stack([s.dual for s in self.states]))
        row = {"round": server_round, "cut_links": cut, "solver_iterations": iters}
        if self.evaluate is not None:
            row.update(self.evaluate(server_round, released))
        self.history.append(row)
        return None, None  # metrics: server-side, see evaluate_fn

    def evaluate_fn(self, server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        """Flower's server-side evaluation (``Strategy.start(evaluate_fn=...)``): round ``server_round``'s
        row of the history (computed in :meth:`aggregate_train`); None before the first round."""
        return round_metrics(self.history, server_round)

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        return []

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return None


def run_relay(grid: Grid, scenario, *, evaluate: bool = True) -> P2PRelayStrategy:
    """Run a peer-to-peer scenario (``fdp_flower.algorithms.p2p.config.P2PScenario`` or a scenario with the same
    ``seed``/``topology``/``data``/``algorithm``/``privacy`` fields) on ``grid``; returns the strategy."""
    from fdp_flower.algorithms.p2p.config import build_problem
    from fdp_flower.clients.p2p import p2p_setup
    from fdp_flower.engines.p2p import evaluate as evaluate_nodes

    graph, problem, algorithm = p2p_setup(scenario)
    evaluator = None
    if evaluate:
        full = build_problem(scenario.data, graph.num_nodes, scenario.seed)

        def evaluator(_round, released):
            return {f"released_{k}": float(v) for k, v in evaluate_nodes(full, released).items()}

    strategy = P2PRelayStrategy(graph, algorithm, problem.dim, evaluate=evaluator)
    from fdp_flower.strategies.common import wait_for_nodes, wait_for_simulation_backend

    wait_for_simulation_backend()
    connected = wait_for_nodes(grid, graph.num_nodes, settle=2.0)
    if connected < graph.num_nodes:
        log(INFO, "p2p relay: %d Flower nodes for %d graph nodes: each Flower node runs several graph nodes",
            connected, graph.num_nodes)
    strategy.start(grid=polling(grid), initial_arrays=ArrayRecord(), num_rounds=algorithm.steps,
                   evaluate_fn=strategy.evaluate_fn)
    return strategy


def run_p2p_federation(grid: Grid, context: Context, scenario) -> None:
    """ServerApp runner (dispatch hook for the peer-to-peer algorithm kinds): run and write results."""
    from fdp_flower.outputs.results import check_output_dir

    out = check_output_dir(run_results_dir(context.run_config, context.run_id, scenario.name, tag="relay"))
    try:
        strategy = run_relay(grid, scenario)
    except RelayError as exc:
        log(ERROR, "relay stopped: %s", exc)
        raise
    from fdp_flower.config.base import scenario_to_yaml

    (out / "scenario.yaml").write_text(scenario_to_yaml(scenario))  # what fdp_flower.load_results reads first
    np.savez_compressed(out / "iterates.npz", released=np.stack(strategy.released_history),
                        duals=np.stack(strategy.dual_history))
    (out / "history.json").write_text(json.dumps(strategy.history, indent=1))
    (out / "ledger.json").write_text(json.dumps(strategy.ledger.to_rows()))
    (out / "graph.json").write_text(json.dumps(strategy.graph.to_dict()))
    from fdp_flower.outputs.results import privacy_headline, privacy_section

    p = scenario.privacy
    enabled = bool(p.enabled and strategy.ledger.releases)
    privacy = privacy_section(strategy.ledger, p.delta, mode=getattr(p, "mode", None) if enabled else None,
                              eps_budget=p.eps if enabled else None)
    (out / "summary.json").write_text(json.dumps({"name": scenario.name, "engine": "flower",
                                                  "algorithm": scenario.algorithm.kind,
                                                  "final": strategy.history[-1] if strategy.history else {},
                                                  "privacy": privacy}, indent=2, default=float))
    log(INFO, "p2p relay: %s", privacy_headline(privacy, "node"))
    log(INFO, "p2p relay: results in %s", out.resolve())
