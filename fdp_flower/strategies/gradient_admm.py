"""DP-ADMM / DP-AccADMM on Flower (Xu et al. 2020; docs/algorithms.md, section 5): the protocol's server
(:class:`fdp_flower.algorithms.gradient_admm.protocol.GradientADMMServer`) driven by the generic strategy
(:class:`fdp_flower.strategies.protocol.ProtocolStrategy`), and the ServerApp runner that builds a run,
runs it and writes its results.

Each round every client is asked for its noisy mean gradient at xh_{t-1}; the server's step (aggregate,
y-, x-, dual update, extrapolation) is the protocol's.  The metrics go through Flower's server-side
evaluation (``evaluate_fn``): the objective, the gap to the exact reference and the accuracies on the
pooled public rows of the simulation.
"""
from __future__ import annotations

import json
from typing import Callable

import numpy as np

from fdp_flower.algorithms.gradient_admm.plan import GradientADMMProblem
from fdp_flower.algorithms.gradient_admm.protocol import GradientADMMServer, server_for
from fdp_flower.algorithms.gradient_admm.setup import paper_dual, simulation_setup
from fdp_flower.algorithms.gradient_admm.update import GradientADMMState
from fdp_flower.strategies.common import FederationError, run_results_dir
from fdp_flower.strategies.protocol import ProtocolStrategy
from fdp_flower.wire import pack_arrays
from fdp_flower.wire.flwr import INFO, ArrayRecord, log
from fdp_flower.wire.flwr_server import Grid

__all__ = ["GradientADMMStrategy", "run_gradient_admm_federation", "run_gradient_admm_server",
           "strategy_from_scenario"]


class GradientADMMStrategy(ProtocolStrategy):
    """Server side of DP-ADMM / DP-AccADMM on Flower: a :class:`ProtocolStrategy` over a
    :class:`~fdp_flower.algorithms.gradient_admm.protocol.GradientADMMServer` (every client must reply in
    every round; a missing, refused or rejected reply stops the run with a :class:`FederationError`)."""

    def __init__(self, server: GradientADMMServer) -> None:
        super().__init__(server, hosts_many_clients=True)

    @property
    def state(self) -> GradientADMMState:
        return self.server.state

    @property
    def privacy(self):
        return self.server.privacy

    def round_arrays(self) -> ArrayRecord:
        return pack_arrays(x=self.state.x)

    def summary(self) -> None:
        s = self.server
        name = "DP-AccADMM" if s.accelerated else "DP-ADMM"
        log(INFO, "\t├── %s: M=%d clients, d=%d, rows(A)=%d, rho=%g, eta=%g, gamma=%g, T=%d", name,
            s.num_clients, s.matrix.shape[1], s.matrix.shape[0], s.rho, s.eta, s.gamma, s.rounds_planned)
        p = s.privacy
        log(INFO, "\t└── privacy: %s", "off" if p is None else
            f"Theorem 1, eps={p.eps} delta={p.delta} mu={p.mu} ({p.neighbouring}) over T={s.rounds_planned} rounds")


def strategy_from_scenario(scenario, problem: GradientADMMProblem, *,
                           evaluate_state: Callable[[GradientADMMState], dict] | None = None) -> GradientADMMStrategy:
    """The strategy of a :class:`~fdp_flower.algorithms.gradient_admm.config.GradientADMMScenario` on ``problem``
    (its A, lam and public m_i); ``evaluate_state(state) -> dict`` adds metrics every round."""
    alg = scenario.algorithm
    u0 = paper_dual(problem, alg.rho) if alg.init_dual == "paper" else None  # non-private runs only
    return GradientADMMStrategy(server_for(scenario, problem, evaluator=evaluate_state, initial_dual=u0))


def run_gradient_admm_federation(grid: Grid, scenario, *, with_reference: bool = True) -> GradientADMMStrategy:
    """Run a whole DP-(Acc)ADMM federation of ``scenario`` on ``grid``; returns the finished strategy.

    Server-side evaluation (objective, gap to the reference, test and train accuracy) uses the pooled
    simulation data, as in the in-process engine; its history is ``strategy.history``.
    """
    problem, evaluator = simulation_setup(scenario, with_reference=with_reference)
    strategy = strategy_from_scenario(scenario, problem, evaluate_state=evaluator)
    strategy.start(grid=grid, initial_arrays=pack_arrays(x=np.zeros(problem.dim)),
                   num_rounds=scenario.algorithm.rounds, evaluate_fn=strategy.evaluate_fn)
    if strategy.privacy is not None:
        from fdp_flower.outputs.results import privacy_headline, privacy_section

        p = strategy.privacy
        log(INFO, "fdp-flower: %s", privacy_headline(privacy_section(strategy.ledger, p.delta, mode="total",
                                                                      eps_budget=p.eps)))
    return strategy


def run_gradient_admm_server(grid: Grid, context, scenario) -> None:
    """ServerApp runner (dispatch hook for dp_admm / dp_acc_admm): run, then write the results.  A run that
    stops early (a client's reply missing, refused or rejected) still writes what it has, then fails."""
    from fdp_flower.config.base import scenario_to_yaml
    from fdp_flower.outputs.results import LEDGER_COLUMNS, check_output_dir, privacy_section, write_csv

    out = check_output_dir(run_results_dir(context.run_config, context.run_id, scenario.name))  # before releasing
    problem, evaluator = simulation_setup(scenario)
    strategy = strategy_from_scenario(scenario, problem, evaluate_state=evaluator)
    error = None
    try:
        strategy.start(grid=grid, initial_arrays=pack_arrays(x=np.zeros(problem.dim)),
                       num_rounds=scenario.algorithm.rounds, evaluate_fn=strategy.evaluate_fn)
    except FederationError as exc:
        error = exc
    (out / "scenario.yaml").write_text(scenario_to_yaml(scenario))
    write_csv(out / "history.csv", strategy.history)
    write_csv(out / "ledger.csv", strategy.ledger.to_rows(), LEDGER_COLUMNS)
    np.savez(out / "final.npz", x=strategy.state.x)
    p = strategy.privacy
    summary = {"name": scenario.name, "engine": "flower", "rounds_completed": len(strategy.history),
               "stop_reason": "completed" if error is None else str(error),
               "final": strategy.history[-1] if strategy.history else {},
               "privacy": privacy_section(strategy.ledger, scenario.privacy.delta,
                                          mode="total" if p is not None else None,
                                          eps_budget=None if p is None else p.eps)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    log(INFO, "fdp-flower: results in %s", out.resolve())
    if error is not None:
        raise error
