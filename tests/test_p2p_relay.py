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
)
from fdp_flower.algorithms.p2p.plan import scenario_graph
from fdp_flower.algorithms.p2p.protocol import scenario_server
from fdp_flower.clients.p2p import handle_p2p_train
from fdp_flower.config.sections import PrivacyConfig
from fdp_flower.engines.p2p import run_scenario
from fdp_flower.strategies.common import FederationError
from fdp_flower.strategies.relay import P2PRelayStrategy, run_relay
from fdp_flower.wire import pack_arrays


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch):
    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)


class InMemoryGrid:
    """Delivers each message to the client worker of its destination node; logs every message and reply.
    ``drop``: (round, Flower node) pairs whose reply is lost."""

    def __init__(self, scenario, node_ids, drop=()):
        self.scenario, self.node_ids, self.sent, self.replies, self.drop = scenario, list(node_ids), [], [], set(drop)

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
            reply = handle_p2p_train(msg, ctx, self.scenario)
            self.replies.append(reply)
            if (int(msg.content["config"]["round"]), msg.metadata.dst_node_id) not in self.drop:
                replies.append(reply)
        return replies


SCENARIOS = {
    "zcdp_nfl": P2PScenario(federation={"num_clients": 8}, topology={"kind": "erdos_renyi", "average_degree": 3.0},
                            data=SyntheticRegressionData(problem="elastic_net", samples_per_node=30, dim=4),
                            algorithm=ZcdpNflConfig(rounds=12), privacy=PrivacyConfig(mode="total", eps=5.0,
                                                                                      delta=1.0e-4)),
    "grad": P2PScenario(federation={"num_clients": 5}, topology={"kind": "ring"},
                        data=SyntheticRegressionData(problem="lad", samples_per_node=20, dim=3),
                        algorithm=ZcdpGradNflConfig(rounds=6, budget={"kind": "geometric", "ratio": 1.1})),
    "p_admm": P2PScenario(federation={"num_clients": 5}, topology={"kind": "ring"},
                          data=SyntheticRegressionData(problem="ridge", samples_per_node=20, dim=3),
                          algorithm=PAdmmConfig(rounds=6, eta=0.3, gamma=1.0,
                                                decay={"kind": "periodic", "decay": 0.9, "period": 3}),
                          privacy=PrivacyConfig(mode="total", eps=5.0, delta=1.0e-4)),
    "zcdp_nfl_neighbourhood_anchor": P2PScenario(
        federation={"num_clients": 6}, topology={"kind": "erdos_renyi", "average_degree": 3.0},
        data=SyntheticRegressionData(problem="lad", samples_per_node=20, dim=3),
        algorithm=ZcdpNflConfig(rounds=5, anchor="neighbourhood_average"),
        privacy=PrivacyConfig(mode="total", eps=5.0, delta=1.0e-4)),
    "pr_admm": P2PScenario(topology={"kind": "paper004_five"}, data=P2PBreastCancerData(),
                           algorithm=PrAdmmConfig(rounds=6, eta=0.1, threshold=5.0, decay={"kind": "iteration"}),
                           privacy=PrivacyConfig(mode="total", eps=1.0, delta=1.0e-4)),
    "pr_admm_linearized": P2PScenario(federation={"num_clients": 5}, topology={"kind": "ring"},
                                      data=SyntheticRegressionData(problem="lad", samples_per_node=20, dim=3),
                                      algorithm=PrAdmmConfig(rounds=5, eta=0.3, threshold=3.0),
                                      privacy=PrivacyConfig(mode="total", eps=5.0, delta=1.0e-4)),
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
    assert len(strategy.ledger.releases) == scenario.algorithm.rounds * strategy.graph.num_nodes
    assert [row["cut_links"] for row in strategy.history] == engine.cut_links[1:].tolist()


def test_each_node_is_sent_only_its_point_and_releases_only_its_noisy_term():
    """One message per Flower node and round; it carries, for the one graph node it hosts, the point the node is
    asked at -- its own last release (the paper's anchor) -- and nothing else: no neighbour's vector, no dual.  The
    reply holds the node's noisy descent term and its calibration, no data-dependent count."""
    scenario = SCENARIOS["zcdp_nfl"]
    graph = scenario_graph(scenario)
    grid = InMemoryGrid(scenario, node_ids=list(range(100, 108)))
    strategy = run_relay(grid, scenario, evaluate=False)
    assert len(grid.sent) == scenario.algorithm.rounds
    for r, messages in enumerate(grid.sent, start=1):
        assert len(messages) == graph.num_nodes
        previous = strategy.released_history[r - 1]
        for msg in messages:
            (node,) = [int(c) for c in msg.content["config"]["clients"]]
            assert msg.metadata.dst_node_id == 100 + node  # graph node i -> the i-th Flower node
            arrays = {k: v.numpy() for k, v in msg.content["arrays"].items()}
            assert set(arrays) == {"req.point"}
            np.testing.assert_array_equal(arrays["req.point"], previous[[node]])
    for reply in grid.replies:
        assert set(reply.content) == {"arrays", "metrics"}
        assert set(reply.content["metrics"]) == {"partition-id", "num-examples", "sensitivity", "sigma"}
        (sens,) = reply.content["metrics"]["sensitivity"]
        assert sens == pytest.approx(2 * 1.5 * 2.0 / 30)  # 2 G / m_i, G = c1 R of the clipped squared loss


def test_pr_admm_exact_requests_carry_the_dual_and_the_neighbour_sum_the_relay_computed():
    scenario = SCENARIOS["pr_admm"]
    grid = InMemoryGrid(scenario, node_ids=list(range(5)))
    strategy = run_relay(grid, scenario, evaluate=False)
    graph = strategy.graph
    r = 3
    state_released, duals = strategy.released_history[r - 1], strategy.dual_history[r]
    for msg in grid.sent[r - 1]:
        (node,) = [int(c) for c in msg.content["config"]["clients"]]
        arrays = {k: v.numpy()[0] for k, v in msg.content["arrays"].items()}
        assert set(arrays) == {"req.point", "req.dual", "req.neighbour_sum"}
        np.testing.assert_array_equal(arrays["req.point"], state_released[node])
        np.testing.assert_array_equal(arrays["req.dual"], duals[node])  # the dual step is the relay's
        nbrs = list(graph.neighbours[node])
        assert np.linalg.norm(arrays["req.neighbour_sum"] - (len(nbrs) * state_released[node]
                                                            + state_released[nbrs].sum(0))) <= 1e-12 or \
            strategy.history[r - 1]["cut_links"] > 0  # a cut link replaces xt_j by xt_i


def test_a_lost_reply_is_a_charged_failure_the_node_is_held_and_a_refusal_releases_nothing():
    """The relay runs the protocol's fault rules: a lost reply may have been seen (charged), the node keeps its
    vectors and its neighbours use its last release; a request the node refuses (a crafted point) releases
    nothing and is not charged; fewer replies than the quorum stop the run."""
    scenario = SCENARIOS["grad"].model_copy(update={"faults": SCENARIOS["grad"].faults.model_copy(
        update={"quorum": 0.5})})
    grid = InMemoryGrid(scenario, node_ids=[1, 2, 3, 4, 5], drop={(2, 5)})  # round 2: graph node 4's reply lost
    strategy = run_relay(grid, scenario, evaluate=False)
    fails = [(f.round, f.client, f.charged) for f in strategy.failures]
    assert fails == [(2, 4, True)]
    assert {(e.round, e.client) for e in strategy.ledger.releases} == {(r, i) for r in range(1, 7) for i in range(5)}
    np.testing.assert_array_equal(strategy.released_history[2][4], strategy.released_history[1][4])
    assert [row["failed_clients"] for row in strategy.history] == [0, 1, 0, 0, 0, 0]

    server = scenario_server(scenario)
    strategy = P2PRelayStrategy(server)
    grid = InMemoryGrid(scenario, [1])
    msgs = list(strategy.configure_train(1, None, None, grid))
    point = msgs[0].content["arrays"]["req.point"].numpy()
    point[2] = 1e300  # a crafted value for graph node 2
    msgs[0].content["arrays"] = pack_arrays(**{"req.point": point})
    replies = grid.send_and_receive(msgs)
    assert list(replies[0].content["errors"]["partition-id"]) == [2]
    assert "1e+100" in replies[0].content["errors"]["reason"][0]
    assert list(replies[0].content["metrics"]["partition-id"]) == [0, 1, 3, 4]  # the others released
    strategy.aggregate_train(1, replies)
    assert [(f.client, f.charged) for f in strategy.failures] == [(2, False)]
    assert 2 not in {e.client for e in strategy.ledger.releases}

    lossy = InMemoryGrid(scenario, node_ids=[1, 2, 3, 4, 5], drop={(1, 1), (1, 2), (1, 3)})
    with pytest.raises(FederationError, match="quorum lost"):
        run_relay(lossy, scenario, evaluate=False)


def test_relay_evaluator_matches_engine_metrics():
    scenario = SCENARIOS["grad"]
    strategy = run_relay(InMemoryGrid(scenario, [7]), scenario, evaluate=True)
    engine = run_scenario(scenario)
    got = [row["released_normalized_error"] for row in strategy.history]
    np.testing.assert_allclose(got, engine.metrics["released_normalized_error"][1:], rtol=1e-12)
    assert all(isinstance(v, float) for v in got)
