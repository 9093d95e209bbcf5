"""The Flower relay strategy: locality of every message and bit-identical iterates to the in-process engine.

Flower's Grid is replaced by an in-memory grid that hands each message to the
real client worker (``handle_p2p_train``) and returns its reply, so the test
exercises the strategy's and the worker's Message handling without a network.
"""
import numpy as np
import pytest
from flwr.app import Context, RecordDict  # noqa: E402  (warning filtered in pyproject)
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from fdp_flower.algorithms.p2p.config import (
    P2PBreastCancerData,
    P2PScenario,
    PAdmmConfig,
    PrAdmmConfig,
    SyntheticRegressionData,
    ZcdpGradNflConfig,
    ZcdpNflConfig,
    build_graph,
)
from fdp_flower.clients.p2p import handle_p2p_train
from fdp_flower.config.sections import PrivacyConfig
from fdp_flower.engines.p2p import run_scenario
from fdp_flower.strategies.relay import P2PRelayStrategy, RelayError, run_relay


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch):
    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)


class InMemoryGrid:
    """Delivers each message to the client worker of its destination node; logs every message."""

    def __init__(self, scenario, node_ids):
        self.scenario, self.node_ids, self.sent = scenario, list(node_ids), []

    def get_node_ids(self):
        return self.node_ids

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        if messages:  # the relay sends no evaluate messages
            self.sent.append(messages)
        replies = []
        for msg in messages:
            assert msg.metadata.dst_node_id in self.node_ids
            ctx = Context(run_id=1, node_id=msg.metadata.dst_node_id, node_config={}, state=RecordDict(),
                          run_config={})
            replies.append(handle_p2p_train(msg, ctx, self.scenario))
        return replies


SCENARIOS = {
    "zcdp_nfl": P2PScenario(topology={"kind": "erdos_renyi", "num_nodes": 8, "average_degree": 3.0},
                            data=SyntheticRegressionData(problem="elastic_net", samples_per_node=30, dim=4),
                            algorithm=ZcdpNflConfig(steps=12), privacy=PrivacyConfig(mode="total", eps=5.0,
                                                                                     delta=1.0e-4)),
    "grad": P2PScenario(topology={"kind": "ring", "num_nodes": 5},
                        data=SyntheticRegressionData(problem="lad", samples_per_node=20, dim=3),
                        algorithm=ZcdpGradNflConfig(steps=6, budget={"kind": "geometric", "ratio": 1.1})),
    "p_admm": P2PScenario(topology={"kind": "ring", "num_nodes": 5},
                          data=SyntheticRegressionData(problem="ridge", samples_per_node=20, dim=3),
                          algorithm=PAdmmConfig(steps=6, eta=0.3, gamma=1.0,
                                                decay={"kind": "periodic", "decay": 0.9, "period": 3}),
                          privacy=PrivacyConfig(mode="total", eps=5.0, delta=1.0e-4)),
    "zcdp_nfl_neighbourhood_anchor": P2PScenario(
        topology={"kind": "erdos_renyi", "num_nodes": 6, "average_degree": 3.0},
        data=SyntheticRegressionData(problem="lad", samples_per_node=20, dim=3),
        algorithm=ZcdpNflConfig(steps=5, anchor="neighbourhood_average"),
        privacy=PrivacyConfig(mode="total", eps=5.0, delta=1.0e-4)),
    "pr_admm": P2PScenario(topology={"kind": "paper004_five"}, data=P2PBreastCancerData(),
                           algorithm=PrAdmmConfig(steps=6, eta=0.1, threshold=5.0, decay={"kind": "iteration"}),
                           privacy=PrivacyConfig(mode="total", eps=1.0, delta=1.0e-4)),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_relay_reproduces_the_engine_bit_for_bit(name):
    scenario = SCENARIOS[name]
    grid = InMemoryGrid(scenario, node_ids=[11, 12, 13])  # fewer Flower nodes than graph nodes: round-robin
    strategy = run_relay(grid, scenario, evaluate=False)
    engine = run_scenario(scenario)
    np.testing.assert_array_equal(np.stack(strategy.released_history), engine.released)
    np.testing.assert_array_equal(np.stack(strategy.dual_history), engine.duals)
    assert strategy.ledger.to_rows() == engine.ledger.to_rows()
    assert len(strategy.ledger.releases) == scenario.algorithm.steps * strategy.graph.num_nodes


def test_each_node_receives_only_its_neighbours_every_round():
    scenario = SCENARIOS["zcdp_nfl"]
    graph = build_graph(scenario.topology, scenario.seed)
    grid = InMemoryGrid(scenario, node_ids=list(range(100, 108)))
    strategy = run_relay(grid, scenario, evaluate=False)
    assert len(grid.sent) == scenario.algorithm.steps
    for r, messages in enumerate(grid.sent, start=1):
        assert sorted(int(m.content["config"]["partition-id"]) for m in messages) == list(range(graph.num_nodes))
        previous = strategy.released_history[r - 1]
        for msg in messages:  # one message per node per round
            node = int(msg.content["config"]["partition-id"])
            nbrs = list(graph.neighbours[node])
            assert list(msg.content["config"]["neighbours"]) == nbrs
            arrays = {k: v.numpy() for k, v in msg.content["arrays"].items()}
            assert set(arrays) == {"round", "released", "dual", "link_stat", "neighbour_released"}
            assert arrays["neighbour_released"].shape == (len(nbrs), 4)
            np.testing.assert_array_equal(arrays["neighbour_released"], previous[nbrs])
            np.testing.assert_array_equal(arrays["released"], previous[node])  # its own state
            others = [j for j in range(graph.num_nodes) if j not in nbrs and j != node]
            for j in others:  # no non-neighbour's vector travels in this message (round 1: all zero)
                if np.any(previous[j] != 0):
                    assert not any(np.array_equal(previous[j], row) for row in arrays["neighbour_released"])


def test_worker_refuses_a_non_neighbour_vector_and_relay_refuses_missing_replies():
    scenario = SCENARIOS["grad"]
    graph = build_graph(scenario.topology, scenario.seed)
    strategy = P2PRelayStrategy(graph, run_scenario(scenario).algorithm, 3)
    grid = InMemoryGrid(scenario, [1])
    msgs = list(strategy.configure_train(1, None, None, grid))
    msgs[0].content["config"]["neighbours"] = [2, 3]
    with pytest.raises(ValueError, match="neighbours are"):
        grid.send_and_receive(msgs[:1])
    good = list(strategy.configure_train(1, None, None, grid))
    replies = grid.send_and_receive(good[:-1])
    with pytest.raises(RelayError, match="no reply from nodes \\[4\\]"):
        strategy.aggregate_train(1, replies)


def test_relay_evaluator_matches_engine_metrics():
    scenario = SCENARIOS["grad"]
    strategy = run_relay(InMemoryGrid(scenario, [7]), scenario, evaluate=True)
    engine = run_scenario(scenario)
    got = [row["released_normalized_error"] for row in strategy.history]
    np.testing.assert_allclose(got, engine.metrics["released_normalized_error"][1:], rtol=1e-12)
    assert all(isinstance(v, float) for v in got)
