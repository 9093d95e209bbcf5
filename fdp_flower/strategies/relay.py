"""Relay strategy: peer-to-peer learning emulated on Flower's hub-and-spoke runtime (docs/p2p.md).

A thin driver of the family's protocol: the relay's server (:class:`fdp_flower.algorithms.p2p.protocol.P2PServer`)
moved by the generic strategy (:class:`fdp_flower.strategies.protocol.ProtocolStrategy`).  There is no global
model.  Each round the relay sends every graph node one request -- the point it is asked at (its own last
release, or the neighbourhood average of releases; for PR-ADMM's exact solve also its dual and the sum of its
neighbours' releases) and nothing else -- one Flower message per Flower node carrying the requests of the graph
nodes it hosts.  The node answers with its noisy data term (:mod:`fdp_flower.clients.p2p`); the relay checks each
release's calibration, records it in the privacy ledger and runs each node's step from its own neighbours'
releases (post-processing, which a real peer-to-peer deployment runs on the node itself).  It never averages
over the graph, so with the same seed it reproduces the in-process engine's iterates exactly.
"""
from __future__ import annotations

import json
from logging import ERROR, INFO

import numpy as np

from fdp_flower.algorithms.p2p.protocol import P2PServer, scenario_server
from fdp_flower.strategies.common import FederationError, run_results_dir, wait_for_nodes, wait_for_simulation_backend
from fdp_flower.strategies.protocol import ProtocolStrategy
from fdp_flower.wire.flwr import ArrayRecord, Context, log
from fdp_flower.wire.flwr_server import Grid


class P2PRelayStrategy(ProtocolStrategy):
    """Routes each graph node's request to the Flower node that hosts it; keeps every node's public side (in its
    :class:`~fdp_flower.algorithms.p2p.protocol.P2PServer`); never averages.

    Parameters
    ----------
    server : P2PServer
        The relay's protocol (graph, algorithm, the nodes' public m_i).
    """

    def __init__(self, server: P2PServer) -> None:
        # graph node i -> Flower node i mod (number of Flower nodes), always named: a node's request depends on its
        # neighbours' releases, so no request stands for "whichever node this is"
        super().__init__(server, hosts_many_clients=True, route_by_name=True)

    @property
    def graph(self):
        return self.server.graph

    @property
    def released_history(self) -> list[np.ndarray]:
        """xt^0, xt^1, ...: every round's released vectors (N, K)."""
        return self.server.released_history

    @property
    def dual_history(self) -> list[np.ndarray]:
        return self.server.dual_history

    def summary(self) -> None:
        g, a = self.graph, self.server.algorithm
        log(INFO, "\t├── P2P relay: %s graph, N=%d, degrees %s", g.name, g.num_nodes, g.degrees.tolist())
        log(INFO, "\t└── %s, T=%d, noise %s", a.kind, a.rounds, a.noise.mode)


def run_relay(grid: Grid, scenario, *, evaluate: bool = True) -> P2PRelayStrategy:
    """Run a peer-to-peer scenario (:class:`fdp_flower.algorithms.p2p.config.P2PScenario`) on ``grid``; returns the
    strategy (its server holds the histories and the ledger)."""
    from fdp_flower.algorithms.p2p.plan import build_problem
    from fdp_flower.engines.p2p import evaluate as evaluate_nodes

    problem = build_problem(scenario, with_reference=evaluate)

    def evaluator(_round, released):
        return {f"released_{k}": float(v) for k, v in evaluate_nodes(problem, released).items()}

    strategy = P2PRelayStrategy(scenario_server(scenario, problem, evaluator=evaluator if evaluate else None))
    strategy.log_every = scenario.output.log_every
    wait_for_simulation_backend()
    n = strategy.graph.num_nodes
    connected = wait_for_nodes(grid, n, settle=2.0)
    if connected < n:
        log(INFO, "p2p relay: %d Flower nodes for %d graph nodes: each Flower node runs several graph nodes",
            connected, n)
    strategy.start(grid=grid, initial_arrays=ArrayRecord(), num_rounds=strategy.server.rounds_planned,
                   timeout=scenario.faults.reply_timeout, evaluate_fn=strategy.evaluate_fn)
    return strategy


def run_p2p_federation(grid: Grid, context: Context, scenario) -> None:
    """ServerApp runner (dispatch hook for the peer-to-peer algorithm kinds): run and write results."""
    from fdp_flower.config.base import scenario_to_yaml
    from fdp_flower.outputs.results import check_output_dir, privacy_headline, privacy_section

    out = check_output_dir(run_results_dir(context.run_config, context.run_id, scenario.name, tag="relay"))
    try:
        strategy = run_relay(grid, scenario)
    except FederationError as exc:
        log(ERROR, "relay stopped: %s", exc)
        raise
    (out / "scenario.yaml").write_text(scenario_to_yaml(scenario))  # what fdp_flower.load_results reads first
    np.savez_compressed(out / "iterates.npz", released=np.stack(strategy.released_history),
                        duals=np.stack(strategy.dual_history))
    (out / "history.json").write_text(json.dumps(strategy.history, indent=1))
    (out / "ledger.json").write_text(json.dumps(strategy.ledger.to_rows()))
    (out / "graph.json").write_text(json.dumps(strategy.graph.to_dict()))
    (out / "failures.json").write_text(json.dumps([f.to_row() for f in strategy.failures]))
    p = scenario.privacy
    enabled = bool(p.enabled and strategy.ledger.releases)
    privacy = privacy_section(strategy.ledger, p.delta, mode=getattr(p, "mode", None) if enabled else None,
                              eps_budget=p.eps if enabled else None)
    (out / "summary.json").write_text(json.dumps({"name": scenario.name, "engine": "flower",
                                                  "algorithm": scenario.algorithm.kind,
                                                  "final": strategy.history[-1] if strategy.history else {},
                                                  "stop_reason": strategy.stop_reason or "completed",
                                                  "privacy": privacy}, indent=2, default=float))
    log(INFO, "p2p relay: %s", privacy_headline(privacy, "node"))
    log(INFO, "p2p relay: results in %s", out.resolve())


__all__ = ["P2PRelayStrategy", "run_p2p_federation", "run_relay"]
