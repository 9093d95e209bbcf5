"""The Flower strategy's budget guard: a total-budget run never sends a round whose releases would
exceed the budget (docs/algorithms.md, section 6)."""
from __future__ import annotations

import numpy as np
import pytest

from fdp_flower.algorithms.fdp_admm.setup import simulation_setup
from fdp_flower.privacy import GaussianRelease
from fdp_flower.strategies.common import FederationError
from fdp_flower.strategies.fdp_admm import FDPADMMStrategy
from fdp_flower.wire import pack_arrays
from tests.test_faults import FakeGrid, scenario, task_identity  # noqa: F401  (fixture)


def _strategy(sc):
    sizes, basis, *_rest, evaluator = simulation_setup(sc, with_reference=False)
    return FDPADMMStrategy(sc, basis, evaluate_state=evaluator, partition_sizes=sizes), basis


def test_guard_stops_before_a_round_that_would_exceed_the_total_budget():
    sc = scenario(privacy={"mode": "total", "eps": 1.0, "delta": 1.0e-5}, algorithm={"rounds": 4})
    strategy, basis = _strategy(sc)
    # an earlier phase already spent most of client 2's budget (e.g. a noisy basis summary)
    strategy.ledger.record(GaussianRelease(2, 0, 1.0, 1.2, mechanism="fpca_covariance"))
    grid = FakeGrid(sc)
    with pytest.raises(FederationError, match="client 2"):
        strategy.start(grid=grid, initial_arrays=pack_arrays(global_w=np.zeros(basis.n_components)),
                       num_rounds=sc.algorithm.rounds)
    assert grid.sent == []  # nothing was sent, so nothing was released
    assert [r.round for r in strategy.ledger.releases] == [0]


def test_calibrated_total_budget_run_completes_within_budget():
    sc = scenario(privacy={"mode": "total", "eps": 1.0, "delta": 1.0e-5}, algorithm={"rounds": 4})
    strategy, basis = _strategy(sc)
    strategy.start(grid=FakeGrid(sc), initial_arrays=pack_arrays(global_w=np.zeros(basis.n_components)),
                   num_rounds=sc.algorithm.rounds)
    assert len(strategy.history) == 4
    assert strategy.ledger.worst_case(1e-5).eps_pld <= 1.0
