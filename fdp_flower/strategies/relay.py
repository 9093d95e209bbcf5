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


#: seconds the relay waits for the nodes' setup replies on node files
SETUP_TIMEOUT = 600.0


def node_files_relay(grid: Grid, scenario, *, timeout: float = SETUP_TIMEOUT) -> P2PRelayStrategy:
    """The relay of a run on node files (``data.kind: node_files``), from the nodes' setup phase
    (:func:`fdp_flower.strategies.node_phase.tabular_node_setup`: each node's partition id -- its graph node --,
    m_i, d and its site's totals; a site that refuses the run stops it here, before any release).  Graph node i
    is routed to the Flower node whose file is partition i, named in every request; the history holds public
    statistics of the releases only (:class:`~fdp_flower.algorithms.p2p.nodes.PublicStatistics`)."""
    from fdp_flower.algorithms.p2p.nodes import PublicStatistics, node_files_server
    from fdp_flower.strategies.node_phase import tabular_node_setup

    setup = tabular_node_setup(grid, scenario.federation.num_clients, timeout=timeout)
    strategy = P2PRelayStrategy(node_files_server(scenario, setup.plan, evaluator=PublicStatistics()))
    strategy.node_of_client.update(setup.node_of_client)
    strategy.site_reports.update(setup.site_reports)
    return strategy


def run_relay(grid: Grid, scenario, *, evaluate: bool = True) -> P2PRelayStrategy:
    """Run a peer-to-peer scenario (:class:`fdp_flower.algorithms.p2p.config.P2PScenario`) on ``grid``; returns the
    strategy (its server holds the histories and the ledger).  On node files the relay holds no rows
    (:func:`node_files_relay`)."""
    from fdp_flower.algorithms.p2p.plan import build_problem, data_source
    from fdp_flower.engines.p2p import evaluate as evaluate_nodes

    wait_for_simulation_backend()
    if data_source(scenario).node_local:
        strategy = node_files_relay(grid, scenario)
    else:
        problem = build_problem(scenario, with_reference=evaluate)

        def evaluator(_round, released):
            return {f"released_{k}": float(v) for k, v in evaluate_nodes(problem, released).items()}

        strategy = P2PRelayStrategy(scenario_server(scenario, problem, evaluator=evaluator if evaluate else None))
    strategy.log_every = scenario.output.log_every
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
    from fdp_flower.outputs.results import check_output_dir, privacy_headline, tabular_summary, write_run

    from fdp_flower.algorithms.p2p.plan import data_source
    from fdp_flower.outputs.results import site_report_rows
    from fdp_flower.privacy.ledger import PrivacyLedger
    from fdp_flower.strategies.node_phase import SetupError

    out = check_output_dir(run_results_dir(context.run_config, context.run_id, scenario.name, tag="relay"))
    extra = {}
    if data_source(scenario).node_local:
        from fdp_flower.algorithms.p2p.nodes import NODE_FILES_EVALUATION

        extra = {"evaluation": NODE_FILES_EVALUATION}
    try:
        strategy = run_relay(grid, scenario)
    except SetupError as exc:  # nothing was released: the summary says why the run did not start
        write_run(out, scenario, history=[], ledger=PrivacyLedger(), summary=tabular_summary(
            scenario, [], PrivacyLedger(), engine="flower", stop_reason=f"stopped: setup phase: {exc}", **extra))
        raise FederationError(f"setup phase: {exc}") from None
    except FederationError as exc:
        log(ERROR, "relay stopped: %s", exc)
        raise
    if extra:
        extra["sample_sizes"] = [int(m) for m in strategy.server.sizes]
    summary = tabular_summary(scenario, strategy.history, strategy.ledger, engine="flower",
                              stop_reason=strategy.stop_reason, **extra)
    if strategy.site_reports:
        summary["privacy"]["sites"] = site_report_rows(strategy.site_reports, strategy.ledger)
    write_run(out, scenario, history=strategy.history, ledger=strategy.ledger, summary=summary,
              iterates={"released": np.stack(strategy.released_history), "duals": np.stack(strategy.dual_history)},
              failures=strategy.failures, graph=strategy.graph.to_dict())
    privacy = summary["privacy"]
    log(INFO, "p2p relay: %s", privacy_headline(privacy, "node"))
    log(INFO, "p2p relay: results in %s", out.resolve())


__all__ = ["P2PRelayStrategy", "run_p2p_federation", "run_relay"]
