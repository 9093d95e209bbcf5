"""DP-ADMM / DP-AccADMM server strategy (Xu et al. 2020; docs/algorithms.md, section 5), Flower Message API.

The server keeps x, y, u (and for DP-AccADMM xh, uh, theta); each round it sends
every client the point xh_{t-1}, receives the clients' noisy gradients, and on the
replies calls the pure functions of :mod:`fdp_flower.algorithms.gradient_admm.update`:
``aggregate_gradients`` (grad = sum_i (m_i/n) grad_i) and ``server_step`` (y-update
by soft-thresholding, linearized x-update, dual update, Nesterov extrapolation).
"""
from __future__ import annotations

import warnings
from logging import INFO
from typing import Callable, Iterable

import numpy as np

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
    from flwr.common.logger import log
    from flwr.serverapp import Grid
    from flwr.serverapp.strategy import Strategy

from fdp_flower.algorithms.gradient_admm.update import (
    GradientADMMState,
    aggregate_gradients,
    check_gamma,
    gradient_sensitivity,
    make_releases,
    min_gamma,
    server_step,
    spectral_norm_gram,
)
from fdp_flower.privacy import PrivacyLedger
from fdp_flower.strategies.common import polling, reply_sender, round_metrics, run_results_dir
from fdp_flower.wire import pack_arrays, unpack_arrays


class GradientFederationError(RuntimeError):
    """The federation cannot continue (missing, duplicate or inconsistent replies)."""


class GradientADMMStrategy(Strategy):
    """Server side of DP-ADMM (``accelerated=False``) and DP-AccADMM (Xu et al. 2020, Algorithms 2-3).

    Parameters
    ----------
    matrix : numpy.ndarray
        The constraint matrix A (p x d) of lam ||A x||_1.
    lam : float
        Weight of the l1 term (>= 0).
    rho : float
        ADMM penalty (> 0).
    eta : float
        Step size (> 0).
    rounds : int
        T, the number of rounds Theorem 1 is calibrated for (>= 1); no release beyond it.
    num_clients : int
        M (>= 1); every round needs a reply from every client.
    gradient_bound : float
        c, the per-sample gradient bound (> 0) used to check the clients' sensitivities.
    gamma : float or None
        Proximal weight; None takes eta rho ||A^T A|| + 1; smaller values are refused (default: None).
    accelerated : bool
        DP-AccADMM (default: False).
    restart : bool
        Adaptive momentum restart of DP-AccADMM (default: False).
    privacy : GradientPrivacy or None
        Theorem 1 parameters; None for the non-private ADMM (default: None).
    evaluate_state : callable or None
        ``f(state) -> dict`` of metrics per round (simulation only) (default: None).
    """

    def __init__(self, *, matrix: np.ndarray, lam: float, rho: float, eta: float, rounds: int, num_clients: int,
                 gradient_bound: float, gamma: float | None = None, accelerated: bool = False,
                 restart: bool = False, privacy=None,
                 evaluate_state: Callable[[GradientADMMState], dict] | None = None) -> None:
        matrix = np.asarray(matrix, dtype=float)
        if matrix.ndim != 2 or matrix.size == 0 or not np.all(np.isfinite(matrix)):
            raise ValueError("matrix must be a finite, non-empty 2-D array (A)")
        if not lam >= 0:
            raise ValueError(f"lam must be >= 0, got {lam}")
        if not rho > 0:
            raise ValueError(f"rho must be > 0, got {rho}")
        if not eta > 0:
            raise ValueError(f"eta must be > 0, got {eta}")
        if int(rounds) < 1:
            raise ValueError(f"rounds must be >= 1, got {rounds}")
        if int(num_clients) < 1:
            raise ValueError(f"num_clients must be >= 1, got {num_clients}")
        if not gradient_bound > 0:
            raise ValueError(f"gradient_bound must be > 0, got {gradient_bound}")
        gram = spectral_norm_gram(matrix)
        self.gamma = (min_gamma(eta=eta, rho=rho, gram_norm=gram) if gamma is None
                      else check_gamma(gamma, eta=eta, rho=rho, gram_norm=gram))
        self.matrix, self.lam, self.rho, self.eta = matrix, float(lam), float(rho), float(eta)
        self.rounds, self.num_clients = int(rounds), int(num_clients)
        self.gradient_bound = float(gradient_bound)
        self.accelerated, self.restart, self.privacy = bool(accelerated), bool(restart), privacy
        self.evaluate_state = evaluate_state
        self.state = GradientADMMState.initial(matrix.shape[1], matrix.shape[0])
        self.ledger = PrivacyLedger()
        self.history: list[dict] = []
        self.node_of_client: dict[int, int] = {}
        self.sample_sizes: dict[int, int] = {}
        self.clipped_rows: dict[int, int] = {}

    def summary(self) -> None:
        name = "DP-AccADMM" if self.accelerated else "DP-ADMM"
        log(INFO, "\t├── %s: M=%d clients, d=%d, rows(A)=%d, rho=%g, eta=%g, gamma=%g, T=%d", name,
            self.num_clients, self.matrix.shape[1], self.matrix.shape[0], self.rho, self.eta, self.gamma,
            self.rounds)
        p = self.privacy
        log(INFO, "\t└── privacy: %s", "off" if p is None else
            f"Theorem 1, eps={p.eps} delta={p.delta} mu={p.mu} ({p.neighbouring}) over T={self.rounds} rounds")

    def _assign(self, node_ids: list[int]) -> list[tuple[int, int]]:
        """(node, client) pairs: clients spread round-robin over the connected nodes, named in the message."""
        if not self.node_of_client:
            self.node_of_client = {c: node_ids[c % len(node_ids)] for c in range(self.num_clients)}
        return [(self.node_of_client[c], c) for c in range(self.num_clients)]

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        if server_round > self.rounds:  # budget check before any release
            raise GradientFederationError(
                f"round {server_round} exceeds T = {self.rounds}: Theorem 1's budget covers T releases only")
        node_ids = sorted(grid.get_node_ids())
        if not node_ids:
            raise GradientFederationError(f"round {server_round}: no nodes connected")
        payload = pack_arrays(x_hat=self.state.x_hat)
        return [Message(content=RecordDict({"arrays": payload,
                                            "config": ConfigRecord({"round": server_round, "partition-id": c})}),
                        dst_node_id=node, message_type=MessageType.TRAIN)
                for node, c in self._assign(node_ids)]

    def _expected_release(self, m: int) -> tuple[float, float | None]:
        if self.privacy is None:
            return 0.0, None
        sens = float(gradient_sensitivity(self.gradient_bound, m, self.privacy.neighbouring))
        sig = float(self.privacy.sigma(sens, self.rounds))
        return sens, sig

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        dim = self.matrix.shape[1]
        grads: dict[int, np.ndarray] = {}
        for reply in replies:
            client = reply_sender(reply, server_round, self.num_clients, grads, GradientFederationError)
            metrics = reply.content["metrics"]
            grad = unpack_arrays(reply.content["arrays"])["gradient"]
            if grad.shape != (dim,) or not np.all(np.isfinite(grad)):
                raise GradientFederationError(f"round {server_round}: client {client} sent a malformed gradient")
            m = int(metrics["num-examples"])
            if m < 1 or self.sample_sizes.get(client, m) != m:
                raise GradientFederationError(f"round {server_round}: client {client} changed its sample count")
            sens, sig = self._expected_release(m)
            if sig is not None and not (np.isclose(float(metrics["sigma"]), sig, rtol=1e-12, atol=0)
                                        and np.isclose(float(metrics["sensitivity"]), sens, rtol=1e-12, atol=0)):
                raise GradientFederationError(f"round {server_round}: client {client} noise does not match "
                                              f"the run's calibration (sigma {metrics['sigma']} != {sig})")
            self.sample_sizes[client] = m
            self.clipped_rows[client] = int(metrics.get("clipped-rows", -1))
            grads[client] = grad
        if len(grads) < self.num_clients:
            missing = sorted(set(range(self.num_clients)) - set(grads))
            raise GradientFederationError(f"round {server_round}: no reply from clients {missing}")
        counts = np.array([self.sample_sizes[i] for i in range(self.num_clients)])
        if self.privacy is not None:  # the noise was added on the clients before they replied
            plan = [self._expected_release(int(m)) for m in counts]
            self.ledger.record_many(make_releases(round_=server_round, sensitivities=[p[0] for p in plan],
                                                  sigmas=[p[1] for p in plan],
                                                  neighbouring=self.privacy.neighbouring))
        gradient = aggregate_gradients(np.stack([grads[i] for i in range(self.num_clients)]), counts)
        self.state = server_step(self.state, gradient, self.matrix, lam=self.lam, rho=self.rho, eta=self.eta,
                                 gamma=self.gamma, accelerated=self.accelerated, restart=self.restart)
        row = {"round": server_round}
        if self.evaluate_state is not None:
            row.update(self.evaluate_state(self.state))
        self.history.append(row)
        return pack_arrays(x=self.state.x), None  # metrics: server-side, see evaluate_fn

    def evaluate_fn(self, server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        """Flower's server-side evaluation (``Strategy.start(evaluate_fn=...)``): round ``server_round``'s
        row of the history (computed in :meth:`aggregate_train`); None before the first round."""
        return round_metrics(self.history, server_round)

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        return []  # evaluation is server-side

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return None


def strategy_from_scenario(scenario, problem, *, evaluate_state=None) -> GradientADMMStrategy:
    """Build the strategy of a :class:`~fdp_flower.algorithms.gradient_admm.config.GradientADMMScenario`."""
    from fdp_flower.engines.gradient_admm import scenario_privacy

    alg = scenario.algorithm
    return GradientADMMStrategy(matrix=problem.matrix, lam=problem.lam, rho=alg.rho, eta=alg.eta,
                                rounds=alg.rounds, num_clients=problem.num_clients,
                                gradient_bound=problem.gradient_bound, gamma=alg.gamma,
                                accelerated=alg.kind == "dp_acc_admm", restart=getattr(alg, "restart", False),
                                privacy=scenario_privacy(scenario), evaluate_state=evaluate_state)


def run_gradient_admm_federation(grid: Grid, scenario, *, with_reference: bool = True):
    """Run a whole DP-(Acc)ADMM federation of ``scenario`` on ``grid``; returns the finished strategy.

    Server-side evaluation (objective, gap to the reference, test accuracy) uses the pooled
    simulation data, as in the in-process engine; its history is ``strategy.history``.
    """
    from fdp_flower.algorithms.gradient_admm.reference import solve_generalized_lasso
    from fdp_flower.algorithms.gradient_admm.update import accuracy, generalized_lasso_objective
    from fdp_flower.engines.gradient_admm import build_problem

    problem = build_problem(scenario)
    pooled_a, pooled_y = problem.pooled()
    ref = (solve_generalized_lasso(problem.loss, pooled_a, pooled_y, problem.matrix, problem.lam).objective
           if with_reference else None)

    def evaluate(state: GradientADMMState) -> dict:
        obj = generalized_lasso_objective(problem.loss, state.x, pooled_a, pooled_y, problem.matrix, problem.lam)
        row = {"objective": obj, "test_accuracy": accuracy(state.x, problem.test_features, problem.test_labels)}
        if ref is not None:
            row["relative_gap"] = (obj - ref) / abs(ref)
        return row

    strategy = strategy_from_scenario(scenario, problem, evaluate_state=evaluate)
    strategy.start(grid=polling(grid), initial_arrays=pack_arrays(x=np.zeros(problem.dim)),
                   num_rounds=scenario.algorithm.rounds, evaluate_fn=strategy.evaluate_fn)
    if strategy.privacy is not None:
        from fdp_flower.outputs.results import privacy_headline, privacy_section

        p = strategy.privacy
        log(INFO, "fdp-flower: %s", privacy_headline(privacy_section(strategy.ledger, p.delta, mode="total",
                                                                      eps_budget=p.eps)))
    return strategy


def run_gradient_admm_server(grid: Grid, context, scenario) -> None:
    """ServerApp runner (dispatch hook for dp_admm / dp_acc_admm): run, then write the results."""
    import json

    from fdp_flower.config.base import scenario_to_yaml
    from fdp_flower.outputs.results import LEDGER_COLUMNS, check_output_dir, privacy_section, write_csv

    out = check_output_dir(run_results_dir(context.run_config, context.run_id, scenario.name))  # before releasing
    strategy = run_gradient_admm_federation(grid, scenario)
    (out / "scenario.yaml").write_text(scenario_to_yaml(scenario))
    write_csv(out / "history.csv", strategy.history)
    write_csv(out / "ledger.csv", strategy.ledger.to_rows(), LEDGER_COLUMNS)
    np.savez(out / "final.npz", x=strategy.state.x)
    p = strategy.privacy
    summary = {"name": scenario.name, "engine": "flower", "rounds_completed": len(strategy.history),
               "final": strategy.history[-1] if strategy.history else {},
               "privacy": privacy_section(strategy.ledger, scenario.privacy.delta,
                                          mode="total" if p is not None else None,
                                          eps_budget=None if p is None else p.eps)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    log(INFO, "fdp-flower: results in %s", out.resolve())
