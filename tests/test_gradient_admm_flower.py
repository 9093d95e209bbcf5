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
from fdp_flower.clients.gradient_admm import gradient_admm_client_update, handle_gradient_admm_train
from fdp_flower.core.losses import LogisticLoss
from fdp_flower.engines.gradient_admm import build_problem, load_scenario_data, run_gradient_admm, scenario_privacy
from fdp_flower.strategies.gradient_admm import (
    GradientADMMStrategy,
    GradientFederationError,
    strategy_from_scenario,
)
from fdp_flower.wire import pack_arrays


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch):
    """Messages read the run/node identity a Flower runtime would set; restored after each test."""
    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)


class _NodeContext:
    node_config: dict = {}


class LocalGrid(Grid):
    """Routes every TRAIN message to ``handler(msg)`` on one of ``nodes`` virtual nodes."""

    def __init__(self, handler, nodes: int = 2):
        self.handler, self.nodes = handler, list(range(1, nodes + 1))
        self.sent = 0

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
            replies.append(self.handler(msg))
        return replies


def _scenario(kind: str, private: bool) -> GradientADMMScenario:
    return GradientADMMScenario.model_validate({
        "name": "flower-equivalence", "seed": 7,
        "data": {"kind": "breast_cancer", "test_fraction": 0.3},
        "federation": {"num_clients": 3},
        "model": {"lam": 1.0e-3, "constraint": {"kind": "graph_guided", "alpha": 0.3}, "clip_c1": 1.0},
        "algorithm": {"kind": kind, "rounds": 12, "rho": 0.3, "eta": 4.0},
        "privacy": {"enabled": private, "eps": 1.0, "delta": 1.0e-3},
    })


@pytest.mark.parametrize("kind,private", [("dp_admm", True), ("dp_acc_admm", True), ("dp_acc_admm", False)])
def test_flower_and_inprocess_give_identical_iterates(kind, private):
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
    grid = LocalGrid(lambda msg: handle_gradient_admm_train(msg, _NodeContext(), scenario, data))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        strategy.start(grid=grid, initial_arrays=pack_arrays(x=np.zeros(problem.dim)), num_rounds=alg.rounds)
    assert len(flower_iterates) == alg.rounds
    for a, b in zip(engine.iterates, flower_iterates):
        np.testing.assert_array_equal(a, b)  # bit for bit
    assert grid.sent == alg.rounds * problem.num_clients
    if private:
        assert engine.ledger.to_rows() == strategy.ledger.to_rows()
    else:
        assert not strategy.ledger.releases


def test_strategy_refuses_bad_arguments_and_extra_rounds():
    a = np.eye(3)
    with pytest.raises(ValueError, match="rho"):
        GradientADMMStrategy(matrix=a, lam=0.1, rho=0.0, eta=1.0, rounds=2, num_clients=1, gradient_bound=1.0)
    with pytest.raises(ValueError, match="gamma"):
        GradientADMMStrategy(matrix=a, lam=0.1, rho=1.0, eta=1.0, rounds=2, num_clients=1, gradient_bound=1.0,
                             gamma=1.0)  # the paper's gam = 1 violates gam >= eta rho ||A^T A|| + 1
    s = GradientADMMStrategy(matrix=a, lam=0.1, rho=1.0, eta=1.0, rounds=2, num_clients=1, gradient_bound=1.0)
    with pytest.raises(GradientFederationError, match="exceeds T"):
        s.configure_train(3, pack_arrays(x=np.zeros(3)), None, LocalGrid(None))


def test_client_worker_refuses_rounds_beyond_T():
    rng = np.random.default_rng(0)
    a, y = rng.normal(size=(10, 3)), np.sign(rng.normal(size=10))
    with pytest.raises(ValueError, match="Theorem 1"):
        gradient_admm_client_update(loss=LogisticLoss(), features=a, labels=y, x_hat=np.zeros(3), round_=5,
                                    partition=0, seed=0, c1=1.0, rounds=4)
    reply = gradient_admm_client_update(loss=LogisticLoss(), features=a, labels=y, x_hat=np.zeros(3), round_=1,
                                        partition=0, seed=0, c1=1.0, rounds=4)
    assert reply.sigma == 0.0 and reply.clipped_rows == int(np.sum(np.linalg.norm(a, axis=1) > 1.0))


def test_federation_runner_logs_gap_and_both_neighbouring_relations():
    from fdp_flower.strategies.gradient_admm import run_gradient_admm_federation

    scenario = _scenario("dp_admm", True)
    data = load_scenario_data(scenario)
    grid = LocalGrid(lambda msg: handle_gradient_admm_train(msg, _NodeContext(), scenario, data), nodes=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        strategy = run_gradient_admm_federation(grid, scenario)
    assert len(strategy.history) == scenario.algorithm.rounds
    assert all(np.isfinite(row["relative_gap"]) and row["relative_gap"] > -1e-8 for row in strategy.history)
    assert len(strategy.ledger.releases) == scenario.algorithm.rounds * scenario.federation.num_clients
