"""DP-(Acc)ADMM through the Flower Message API: same iterates as the in-process engine for the same seed.

The strategy and the client handler exchange real ``flwr`` Messages over a small
in-memory Grid (no Ray, no network), so the test runs in about a second.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import Message
    from flwr.serverapp import Grid
    from flwr.supercore.task_identity import TaskIdentity

from fdp_flower.algorithms.gradient_admm.config import GradientADMMScenario
from fdp_flower.algorithms.gradient_admm.plan import build_problem, load_scenario_data, scenario_privacy
from fdp_flower.clients.gradient_admm import handle_gradient_admm_train
from fdp_flower.engines.gradient_admm import run_gradient_admm
from fdp_flower.strategies.gradient_admm import strategy_from_scenario
from fdp_flower.wire import pack_arrays


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch):
    """Messages read the run/node identity a Flower runtime would set; restored after each test."""
    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)


class _NodeContext:
    """A node's context as Flower's simulation builds it: its partition id and the number of partitions."""

    def __init__(self, node: int = 1, nodes: int = 1):
        self.node_config = {"partition-id": node - 1, "num-partitions": nodes}


class LocalGrid(Grid):
    """Routes every TRAIN message to ``handler(msg, context of its node)`` on one of ``nodes`` virtual nodes."""

    def __init__(self, handler, nodes: int = 2):
        self.handler, self.nodes = handler, list(range(1, nodes + 1))
        self.contexts = {n: _NodeContext(n, nodes) for n in self.nodes}
        self.sent = 0
        self.requests = 0  # the clients asked for, over all messages

    def set_run(self, run):
        self._run = run

    @property
    def run(self):
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return Message(content=content, dst_node_id=dst_node_id, message_type=message_type, group_id=group_id)

    def get_node_ids(self):
        return list(self.nodes)

    def push_messages(self, messages):
        raise NotImplementedError

    def pull_messages(self, message_ids):
        raise NotImplementedError

    def send_and_receive(self, messages, *, timeout=None):
        replies = []
        for msg in messages:
            self.sent += 1
            msg.metadata.__dict__["_message_id"] = f"m{self.sent}"  # what the SuperLink would assign
            self.requests += len(msg.content["config"]["clients"])
            replies.append(self.handler(msg, self.contexts[msg.metadata.dst_node_id]))
        return replies


def _scenario(kind: str, private: bool) -> GradientADMMScenario:
    return GradientADMMScenario.model_validate({
        "name": "flower-equivalence", "seed": 7,
        "data": {"kind": "breast_cancer", "test_fraction": 0.3},
        "federation": {"num_clients": 3},
        "model": {"penalty": {"lam": 1.0e-3}, "constraint": {"kind": "graph_guided", "alpha": 0.3}, "clip_c1": 1.0},
        "algorithm": {"kind": kind, "rounds": 12, "rho": 0.3, "eta": 4.0},
        "privacy": {"enabled": private, "eps": 1.0, "delta": 1.0e-3},
    })


@pytest.mark.parametrize("kind,private,nodes", [("dp_admm", True, 2), ("dp_acc_admm", True, 2),
                                                ("dp_acc_admm", False, 2), ("dp_acc_admm", True, 3)])
def test_flower_and_inprocess_give_identical_iterates(kind, private, nodes):
    """2 nodes: 3 clients routed round-robin, named in one message a node; 3 nodes: one client a node, known
    by its node config's partition id."""
    scenario = _scenario(kind, private)
    data = load_scenario_data(scenario)
    problem = build_problem(scenario, data)
    alg = scenario.algorithm
    engine = run_gradient_admm(problem, rounds=alg.rounds, rho=alg.rho, eta=alg.eta,
                               accelerated=kind == "dp_acc_admm", privacy=scenario_privacy(scenario),
                               seed=scenario.seed, keep_iterates=True, eval_every=alg.rounds)
    flower_iterates = []
    strategy = strategy_from_scenario(scenario, problem,
                                      evaluate_state=lambda s: flower_iterates.append(s.x.copy()) or {})
    grid = LocalGrid(lambda msg, ctx: handle_gradient_admm_train(msg, ctx, scenario, data), nodes=nodes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        strategy.start(grid=grid, initial_arrays=pack_arrays(x=np.zeros(problem.dim)), num_rounds=alg.rounds)
    assert len(flower_iterates) == alg.rounds
    for a, b in zip(engine.iterates, flower_iterates):
        np.testing.assert_array_equal(a, b)  # bit for bit
    assert grid.sent == alg.rounds * min(nodes, problem.num_clients)  # one message a node and round
    assert grid.requests == alg.rounds * problem.num_clients  # every client asked once a round
    if private:
        assert engine.ledger.to_rows() == strategy.ledger.to_rows()
    else:
        assert not strategy.ledger.releases


def test_the_server_refuses_bad_arguments_and_plans_no_round_beyond_T():
    from fdp_flower.algorithms.gradient_admm.protocol import GradientADMMServer
    from fdp_flower.algorithms.gradient_admm.site import SitePlan
    from fdp_flower.core.losses import LogisticLoss

    a = np.eye(3)
    plan = SitePlan(LogisticLoss(), 1.0, 3, 2, None)
    with pytest.raises(ValueError, match="rho"):
        GradientADMMServer(matrix=a, lam=0.1, rho=0.0, eta=1.0, sizes=[5], plan=plan)
    with pytest.raises(ValueError, match="gamma"):  # the paper's gam = 1 violates gam >= eta rho ||A^T A|| + 1
        GradientADMMServer(matrix=a, lam=0.1, rho=1.0, eta=1.0, sizes=[5], plan=plan, gamma=1.0)
    with pytest.raises(ValueError, match="columns"):
        GradientADMMServer(matrix=np.eye(4), lam=0.1, rho=1.0, eta=1.0, sizes=[5], plan=plan)
    server = GradientADMMServer(matrix=a, lam=0.1, rho=1.0, eta=1.0, sizes=[5], plan=plan)
    for round_ in (1, 2):
        plan_ = server.begin_round()
        assert plan_.round == round_
        server.accept(_release(server, np.zeros(3)))
        server.end_round()
    assert server.begin_round() is None and server.stop_reason == "completed"  # T = 2: no third release


def _release(server, value):
    from fdp_flower.algorithms.protocol import SiteRelease

    plan = server.current_plan
    return SiteRelease(0, plan.round, value, 5, None, {"sensitivity": 0.4, "sigma": 0.0})


def test_the_client_refuses_a_round_beyond_T_and_counts_clipped_rows_only_without_privacy():
    from fdp_flower.algorithms.gradient_admm.site import POINT
    from fdp_flower.algorithms.protocol import SiteRequest
    from fdp_flower.wire import pack_requests, unpack_releases

    for private in (True, False):
        scenario = _scenario("dp_admm", private)
        data = load_scenario_data(scenario)
        dim = data.features[0].shape[1]
        rounds = scenario.algorithm.rounds
        late = Message(content=pack_requests([SiteRequest(1, rounds + 1, {POINT: np.zeros(dim)})]),
                       dst_node_id=1, message_type="train")
        reply = handle_gradient_admm_train(late, _NodeContext(1, 2), scenario, data)
        assert reply.has_error() and "Theorem 1 was calibrated for 12 releases" in reply.error.reason
        ok = Message(content=pack_requests([SiteRequest(c, 1, {POINT: np.zeros(dim)}) for c in (0, 1)]),
                     dst_node_id=1, message_type="train")
        reply = handle_gradient_admm_train(ok, _NodeContext(1, 2), scenario, data)
        releases, refused = unpack_releases(reply.content, 1, lambda *a: None)
        assert not refused and [c for c, _ in releases] == [0, 1]
        clipped = [int(np.sum(np.linalg.norm(data.features[c], axis=1) > scenario.model.clip_c1)) for c in (0, 1)]
        counts = [r.metrics.get("clipped-rows") for _, r in releases]
        assert counts == ([None, None] if private else clipped)
        assert max(clipped) > 0  # standardized rows do exceed c1 = 1: the count is data, hence private


def test_federation_runner_logs_gap_and_both_neighbouring_relations():
    from fdp_flower.strategies.gradient_admm import run_gradient_admm_federation

    scenario = _scenario("dp_admm", True)
    data = load_scenario_data(scenario)
    grid = LocalGrid(lambda msg, ctx: handle_gradient_admm_train(msg, ctx, scenario, data), nodes=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        strategy = run_gradient_admm_federation(grid, scenario)
    assert len(strategy.history) == scenario.algorithm.rounds
    assert all(np.isfinite(row["relative_gap"]) and row["relative_gap"] > -1e-8 for row in strategy.history)
    assert len(strategy.ledger.releases) == scenario.algorithm.rounds * scenario.federation.num_clients


def test_the_client_refuses_extreme_points_and_real_valued_labels_with_nothing_released():
    """Through the real client worker: a point above 1e100 (or non-finite) and a logistic request on a
    site whose responses are real-valued are refused; the reply carries no release of that client."""
    from dataclasses import replace

    from fdp_flower.algorithms.gradient_admm.site import POINT
    from fdp_flower.algorithms.protocol import SiteRequest
    from fdp_flower.wire import pack_requests, unpack_releases

    scenario = _scenario("dp_admm", True)
    data = load_scenario_data(scenario)
    dim = data.features[0].shape[1]
    crafted = np.zeros(dim)
    crafted[0] = 1e300
    for point in (crafted, np.full(dim, np.nan)):
        msg = Message(content=pack_requests([SiteRequest(c, 1, {POINT: point}) for c in (0, 1)]),
                      dst_node_id=1, message_type="train")
        releases, refused = unpack_releases(handle_gradient_admm_train(msg, _NodeContext(1, 2), scenario, data).content,
                                            1, lambda *a: None)
        assert releases == [] and [c for c, _, _ in refused] == [0, 1]
        assert all("x_hat" in reason for _, _, reason in refused)
    real = replace(data, labels=(data.labels[0] * 2.5,) + data.labels[1:])  # client 0: responses in {-2.5, 2.5}
    msg = Message(content=pack_requests([SiteRequest(c, 1, {POINT: np.zeros(dim)}) for c in (0, 1)]),
                  dst_node_id=1, message_type="train")
    releases, refused = unpack_releases(handle_gradient_admm_train(msg, _NodeContext(1, 2), scenario, real).content,
                                        1, lambda *a: None)
    assert [c for c, _ in releases] == [1]  # the other client of the message still releases
    assert [c for c, _, _ in refused] == [0] and "labels in {-1, +1}" in refused[0][2]


def test_the_papers_initial_dual_gives_the_same_iterates_on_flower_and_in_process():
    """Privacy off, ``init_dual: paper``: u_0 = -(A^T)^+ grad f(x_0) / rho from the sites' noise-free terms on
    every engine (the Flower strategy used to start from u_0 = 0 here)."""
    from fdp_flower.engines.gradient_admm import run_scenario

    scenario = _scenario("dp_admm", False).model_copy(
        update={"algorithm": _scenario("dp_admm", False).algorithm.model_copy(update={"init_dual": "paper"})})
    data = load_scenario_data(scenario)
    problem = build_problem(scenario, data)
    engine, _problem, _ref = run_scenario(scenario, with_reference=False, keep_iterates=True)
    flower_iterates = []
    strategy = strategy_from_scenario(scenario, problem,
                                      evaluate_state=lambda s: flower_iterates.append(s.x.copy()) or {})
    assert np.linalg.norm(strategy.state.u) > 0  # the paper's u_0, not 0
    grid = LocalGrid(lambda msg, ctx: handle_gradient_admm_train(msg, ctx, scenario, data), nodes=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        strategy.start(grid=grid, initial_arrays=pack_arrays(x=np.zeros(problem.dim)),
                       num_rounds=scenario.algorithm.rounds)
    assert len(flower_iterates) == len(engine.iterates) == scenario.algorithm.rounds
    for a, b in zip(engine.iterates, flower_iterates):
        np.testing.assert_array_equal(a, b)
