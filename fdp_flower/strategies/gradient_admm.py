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

from typing import Callable

import numpy as np

from fdp_flower.algorithms.gradient_admm.plan import GradientADMMProblem
from fdp_flower.algorithms.gradient_admm.protocol import GradientADMMServer, server_for
from fdp_flower.algorithms.gradient_admm.setup import paper_dual, simulation_setup
from fdp_flower.algorithms.gradient_admm.update import GradientADMMState
from fdp_flower.strategies.common import FederationError, run_results_dir
from fdp_flower.strategies.protocol import ProtocolStrategy
from fdp_flower.wire import pack_arrays
from fdp_flower.privacy.ledger import PrivacyLedger
from fdp_flower.wire.flwr import ERROR, INFO, ArrayRecord, log
from fdp_flower.wire.flwr_server import Grid

__all__ = ["GradientADMMStrategy", "run_gradient_admm_federation", "run_gradient_admm_server",
           "strategy_from_scenario"]


class GradientADMMStrategy(ProtocolStrategy):
    """Server side of DP-ADMM / DP-AccADMM on Flower: a :class:`ProtocolStrategy` over a
    :class:`~fdp_flower.algorithms.gradient_admm.protocol.GradientADMMServer` (every client must reply in
    every round; a missing, refused or rejected reply stops the run with a :class:`FederationError`)."""

    def __init__(self, server: GradientADMMServer, *, hosts_many_clients: bool = True) -> None:
        super().__init__(server, hosts_many_clients=hosts_many_clients)

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


#: seconds the server waits for the nodes' setup replies on node files
SETUP_TIMEOUT = 600.0


def node_files_strategy(grid: Grid, scenario, *, timeout: float = SETUP_TIMEOUT) -> GradientADMMStrategy:
    """The strategy of a run on node files (``data.kind: node_files``), from the nodes' setup phase: one QUERY
    a node (:func:`fdp_flower.clients.gradient_admm.handle_gradient_admm_setup_query`) returns its partition id,
    m_i, d and its site's totals; a node's error, a missing or duplicate partition, a site that refuses the
    run (its ``max-eps``) or reports that do not fit (:func:`~fdp_flower.algorithms.node_reports.check_node_reports`)
    stop the run here in one line (:class:`~fdp_flower.strategies.node_phase.SetupError`), before any release.
    Each node is one client (routed by the setup's partition ids); the history holds public statistics only
    (:class:`~fdp_flower.algorithms.gradient_admm.nodes.PublicStatistics`)."""
    from fdp_flower.algorithms.gradient_admm.nodes import PublicStatistics, node_constraint_matrix
    from fdp_flower.algorithms.gradient_admm.protocol import node_files_server
    from fdp_flower.strategies.node_phase import SetupError, tabular_node_setup

    setup = tabular_node_setup(grid, scenario.federation.num_clients, timeout=timeout)
    try:
        matrix = node_constraint_matrix(scenario, setup.plan.dim)
    except ValueError as exc:
        log(ERROR, "fdp-flower: %s", exc)
        raise SetupError(str(exc)) from None
    server = node_files_server(scenario, setup.plan, matrix,
                               evaluator=PublicStatistics(matrix, float(scenario.model.penalty.lam)))
    strategy = GradientADMMStrategy(server, hosts_many_clients=False)
    strategy.node_of_client.update(setup.node_of_client)
    strategy.site_reports.update(setup.site_reports)
    return strategy


def run_gradient_admm_server(grid: Grid, context, scenario) -> None:
    """ServerApp runner (dispatch hook for dp_admm / dp_acc_admm): run, then write the results.  A run that
    stops early (a client's reply missing, refused or rejected) still writes what it has, then fails.

    On node files (``data.kind: node_files``) the server holds no rows: a setup phase
    (:func:`node_files_strategy`) learns each client's m_i and d, A is the identity or a file, and the summary
    says which metrics are not computed (``evaluation``) and what each site reports of its own spending
    (``privacy.sites``)."""
    from fdp_flower.algorithms.gradient_admm.plan import data_source
    from fdp_flower.outputs.results import check_output_dir, site_report_rows, tabular_summary, write_run
    from fdp_flower.strategies.node_phase import SetupError

    out = check_output_dir(run_results_dir(context.run_config, context.run_id, scenario.name))  # before releasing
    extra = {}
    if data_source(scenario).node_local:
        from fdp_flower.algorithms.gradient_admm.nodes import NODE_FILES_EVALUATION

        try:
            strategy = node_files_strategy(grid, scenario)
        except SetupError as exc:  # nothing was released: the summary says why the run did not start
            write_run(out, scenario, history=[], ledger=PrivacyLedger(), final={},
                      summary=tabular_summary(scenario, [], PrivacyLedger(), engine="flower", stop_reason=f"stopped: "
                                              f"setup phase: {exc}", evaluation=NODE_FILES_EVALUATION))
            raise FederationError(f"setup phase: {exc}") from None
        extra = {"evaluation": NODE_FILES_EVALUATION, "sample_sizes": [int(m) for m in strategy.server.sizes]}
    else:
        problem, evaluator = simulation_setup(scenario)
        strategy = strategy_from_scenario(scenario, problem, evaluate_state=evaluator)
    error = None
    try:
        strategy.start(grid=grid, initial_arrays=pack_arrays(x=np.zeros(strategy.server.plan.dim)),
                       num_rounds=scenario.algorithm.rounds, evaluate_fn=strategy.evaluate_fn)
    except FederationError as exc:
        error = exc
    summary = tabular_summary(scenario, strategy.history, strategy.ledger, engine="flower",
                              stop_reason=strategy.stop_reason if error is None else str(error), **extra)
    if strategy.site_reports:
        summary["privacy"]["sites"] = site_report_rows(strategy.site_reports, strategy.ledger)
    write_run(out, scenario, history=strategy.history, ledger=strategy.ledger, summary=summary,
              final={"x": strategy.state.x})
    log(INFO, "fdp-flower: results in %s", out.resolve())
    if error is not None:
        raise error
