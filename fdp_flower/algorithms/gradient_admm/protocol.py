"""DP-ADMM / DP-AccADMM's server protocol: the state machine every engine drives (Xu et al. 2020,
Algorithms 2-3; docs/algorithms.md, section 5; the protocol interface: :mod:`fdp_flower.algorithms.protocol`).

The server holds the whole run state: x, y, u, the extrapolated xh, uh and theta, the ledger.  Round t:

1. :meth:`GradientADMMServer.begin_round` asks every client for its noisy mean gradient at xh_{t-1}
   (:mod:`fdp_flower.algorithms.gradient_admm.site`, eq. (5.3)); no round beyond T is planned (the calibration
   calibrates for T releases per client);
2. :meth:`~GradientADMMServer.accept` checks each release (shape, finiteness, the site's count m_i and its
   calibration against the public plan: Delta_i = 2c/m_i and the run's sigma_i);
3. :meth:`~GradientADMMServer.end_round` needs every client's release (the aggregate weighs them all), then
   applies the server's step, all post-processing of the released terms (:func:`server_round`):
   grad = sum_i (m_i / n) g~_i, the y-update by soft-thresholding (5.2), the linearized x-update (5.4), the
   dual update (5.5) and, for DP-AccADMM, the Nesterov extrapolation (5.6) with its optional adaptive
   restart; then the round's metrics.

With privacy off and ``step_rule="proximal_bb"`` (the scenario's default ``algorithm.nonprivate_step``) step 3
is instead the proximal Barzilai-Borwein step (5.11)-(5.12) and the run stops by (5.13) or at its cap
(``stop_reason`` ``converged: ...`` or ``cap``; :mod:`fdp_flower.algorithms.gradient_admm.nonprivate`).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import numpy as np

from fdp_flower.algorithms.gradient_admm import nonprivate
from fdp_flower.algorithms.gradient_admm.plan import resolve_gamma, scenario_privacy, scenario_step_rule
from fdp_flower.algorithms.gradient_admm.site import POINT, SitePlan, gradient_release
from fdp_flower.algorithms.gradient_admm.update import (
    MECHANISM,
    GradientADMMState,
    aggregate_gradients,
    barzilai_borwein_eta,
    server_step,
    spectral_norm_gram,
)
from fdp_flower.algorithms.protocol import ReleaseRejected, RoundPlan, ServerProtocol, SiteRelease, SiteRequest


def server_round(state: GradientADMMState, releases: np.ndarray, counts, matrix: np.ndarray, *, lam: float,
                 rho: float, eta: float, gamma: float, accelerated: bool, restart: bool = False) -> GradientADMMState:
    """The server's whole step of one round from the clients' released gradients ``releases`` (M, d):
    the weighted aggregate grad = sum_i (m_i / n) g~_i (``counts`` the public m_i), then
    :func:`~fdp_flower.algorithms.gradient_admm.update.server_step` (y-, x-, dual update and extrapolation)."""
    gradient = aggregate_gradients(np.asarray(releases, dtype=float), counts)
    return server_step(state, gradient, matrix, lam=lam, rho=rho, eta=eta, gamma=gamma, accelerated=accelerated,
                       restart=restart)


def _matches(reported: float, planned: float) -> bool:
    """|reported - planned| <= 1e-12 |planned|: a site computes its calibration with the same formula."""
    return abs(reported - planned) <= 1e-12 * abs(planned)


class GradientADMMServer(ServerProtocol):
    """The server side of DP-ADMM (``accelerated=False``) and DP-AccADMM (Xu et al. 2020, Algorithms 2-3).

    Parameters
    ----------
    matrix : numpy.ndarray
        The constraint matrix A (p x d) of lam ||A x||_1.
    lam : float
        Weight of the l1 term (>= 0).
    rho, eta : float
        ADMM penalty and step size (> 0).
    gamma : float or None
        Proximal weight; None takes eta rho ||A^T A|| + 1; smaller values are refused.
    sizes : sequence of int
        The public m_i of every client (the aggregate's weights m_i / n and the sites' calibration).
    plan : SitePlan
        The sites' public calibration (loss, c, K = d, T, the (eps, delta) calibration); every release is checked against it.
    accelerated, restart : bool
        DP-AccADMM, and its adaptive momentum restart (default: False, False).
    initial_dual : numpy.ndarray or None
        u_0 (p,) (default: 0; the paper's u_0 is a noise-free function of the data, non-private runs only).
    step_rule : {"admm", "proximal_bb"}
        The server's step: the paper's (5.2)-(5.6) (default), or, privacy off only, the proximal
        Barzilai-Borwein step (5.11)-(5.12) with eta as eta_t's floor, the stop (5.13) and ``stop_reason``
        ``converged: ...`` or, after ``plan.rounds``, ``cap`` (the state's u then holds the prox's dual w).
    evaluator : callable or None
        ``f(state) -> dict`` of metrics, every ``eval_every`` rounds and at the last (default: None).
    on_round : callable or None
        ``f(server)`` after every closed round (default: None).
    """

    family = "gradient_admm"

    def __init__(self, *, matrix: np.ndarray, lam: float, rho: float, eta: float, sizes: Sequence[int],
                 plan: SitePlan, gamma: float | None = None, accelerated: bool = False, restart: bool = False,
                 initial_dual: np.ndarray | None = None, step_rule: str = "admm",
                 evaluator: Callable[[GradientADMMState], dict] | None = None, eval_every: int = 1,
                 on_round: Callable[["GradientADMMServer"], None] | None = None) -> None:
        matrix = np.asarray(matrix, dtype=float)
        if matrix.ndim != 2 or matrix.size == 0 or not np.all(np.isfinite(matrix)):
            raise ValueError("matrix must be a finite, non-empty 2-D array (A)")
        if not lam >= 0:
            raise ValueError(f"lam must be >= 0, got {lam}")
        if not rho > 0:
            raise ValueError(f"rho must be > 0, got {rho}")
        if not eta > 0:
            raise ValueError(f"eta must be > 0, got {eta}")
        if int(plan.rounds) < 1:
            raise ValueError(f"rounds must be >= 1, got {plan.rounds}")
        if int(eval_every) < 1:
            raise ValueError(f"eval_every must be >= 1, got {eval_every}")
        if step_rule not in nonprivate.STEP_RULES:
            raise ValueError(f"step_rule must be one of {nonprivate.STEP_RULES}, got {step_rule!r}")
        if step_rule == "proximal_bb" and plan.privacy is not None:
            raise ValueError("step_rule 'proximal_bb' is for runs without privacy (its eta_t would amplify the noise)")
        if step_rule == "proximal_bb" and initial_dual is not None:
            raise ValueError("initial_dual is the start of the paper's ADMM step, not of step_rule 'proximal_bb'")
        if plan.dim != matrix.shape[1]:
            raise ValueError(f"the sites' rows have {plan.dim} columns, A has {matrix.shape[1]}")
        sizes = np.asarray(sizes, dtype=int)
        if sizes.ndim != 1 or sizes.size < 1 or np.any(sizes < 1):
            raise ValueError("sizes must give every client's m_i >= 1")
        if not plan.gradient_bound > 0:
            raise ValueError(f"gradient_bound must be > 0, got {plan.gradient_bound}")
        super().__init__(sizes.size, on_round=on_round)
        self.matrix, self.lam, self.rho, self.eta = matrix, float(lam), float(rho), float(eta)
        self.gamma = resolve_gamma(matrix, eta=eta, rho=rho, gamma=gamma)
        self.sizes, self.plan = sizes, plan
        self.accelerated, self.restart = bool(accelerated), bool(restart)
        self.evaluator, self.eval_every = evaluator, int(eval_every)
        self.state = GradientADMMState.initial(matrix.shape[1], matrix.shape[0], initial_dual)
        if self.state.u.shape != (matrix.shape[0],):
            raise ValueError(f"initial_dual must have shape ({matrix.shape[0]},), got {self.state.u.shape}")
        self.step_rule = step_rule
        #: proximal_bb: x_0 .. x_t for the stop (5.13), the last (point, aggregated gradient) and eta_t of (5.11)
        self.path: list[np.ndarray] = [self.state.x.copy()]
        self._last_gradient: tuple[np.ndarray, np.ndarray] | None = None
        self.step_size = self.eta
        self._gram_norm = spectral_norm_gram(matrix) if step_rule == "proximal_bb" else math.nan
        #: seconds spent in the rounds (asking, the sites' answers, the server step), evaluation excluded
        self.elapsed = 0.0
        self._round_started = 0.0

    @property
    def round(self) -> int:
        return self.state.round

    @property
    def rounds_planned(self) -> int:
        return self.plan.rounds

    @property
    def privacy(self):
        return self.plan.privacy

    def planned_release(self, round_: int, client: int):
        """The ledger event of ``client``'s release in ``round_`` (None when privacy is off)."""
        return self.plan.release(client, round_, float(self.sizes[client]))

    def release_event(self, client: int, round_: int, sensitivity: float, sigma: float):
        """A release's event as a site reported it (None for sigma 0: no noise)."""
        if sigma == 0:
            return None
        neighbouring = self.privacy.neighbouring if self.privacy is not None else "add_remove"
        return gradient_release(client, round_, sensitivity, sigma, neighbouring)

    # ------------------------------------------------------------------ the state machine
    def _plan(self, clients=None) -> RoundPlan | None:
        round_ = self.state.round + 1
        if round_ > self.plan.rounds:
            return None  # the calibration covers T releases per client: no round beyond T
        self._round_started = time.perf_counter()
        asked = range(self.num_clients) if clients is None else sorted(int(c) for c in clients)
        planned = () if self.privacy is None else tuple(self.planned_release(round_, i) for i in asked)
        requests = tuple(SiteRequest(i, round_, {POINT: self.state.x_hat}) for i in asked)
        return RoundPlan(round_, requests, planned)

    def _check(self, release: SiteRelease) -> None:
        client, round_ = int(release.client), self.current_plan.round
        value = release.value if isinstance(release.value, np.ndarray) else None
        if value is None or value.shape != (self.plan.dim,):
            raise ReleaseRejected(f"client {client}: release has shape {np.shape(release.value)}, "
                                  f"expected ({self.plan.dim},)")
        if not np.all(np.isfinite(value)):
            raise ReleaseRejected(f"client {client}: release contains NaN or infinite values")
        m = int(release.num_examples)
        if m != int(self.sizes[client]):
            raise ReleaseRejected(f"client {client}: reports m_i = {m}, the run's plan has {int(self.sizes[client])}")
        planned, event = self.planned_release(round_, client), release.event
        if planned is None:
            if event is not None:
                raise ReleaseRejected(f"client {client}: released with noise in a run without privacy")
            return
        if event is None or event.mechanism != MECHANISM or event.neighbouring != planned.neighbouring:
            raise ReleaseRejected(f"client {client}: release without its calibration")
        if not _matches(event.sensitivity, planned.sensitivity):
            raise ReleaseRejected(f"client {client}: reported sensitivity {event.sensitivity} != 2c/m_i = "
                                  f"{planned.sensitivity}")
        if not _matches(event.sigma, planned.sigma):
            raise ReleaseRejected(f"client {client}: noise does not match the run's calibration (sigma {event.sigma} != "
                                  f"{planned.sigma})")

    def _close(self, plan: RoundPlan, accepted: dict[int, SiteRelease]) -> dict:
        round_ = plan.round
        self.check_quorum(np.array([i in accepted for i in range(self.num_clients)]), round_)  # all must reply
        releases = np.stack([np.asarray(accepted[i].value, dtype=float) for i in range(self.num_clients)])
        if self.step_rule == "proximal_bb":
            self.state = self._proximal_bb_round(aggregate_gradients(releases, self.sizes))
        else:
            self.state = server_round(self.state, releases, self.sizes, self.matrix, lam=self.lam, rho=self.rho,
                                      eta=self.eta, gamma=self.gamma, accelerated=self.accelerated,
                                      restart=self.restart)
        self.elapsed += time.perf_counter() - self._round_started
        row = {"round": round_, "time": self.elapsed}
        if self.step_rule == "proximal_bb":
            row["eta"] = self.step_size
            if nonprivate.converged(self.path, round_):
                self.stop_reason = nonprivate.stop_reason(round_)
            elif round_ >= self.plan.rounds:
                self.stop_reason = nonprivate.stop_reason(None)
        if self.evaluator is not None and (round_ % self.eval_every == 0 or round_ == self.plan.rounds
                                           or self.finished):
            row.update(self.evaluator(self.state))
        return row

    def _proximal_bb_round(self, gradient: np.ndarray) -> GradientADMMState:
        """x_t = prox_{eta_t lam ||A .||_1}(x_{t-1} - eta_t g_t) (eqs. (5.11)-(5.12)) from the aggregated
        noise-free gradient g_t at x_{t-1}."""
        state = self.state
        if self._last_gradient is not None:
            point, previous = self._last_gradient
            self.step_size = barzilai_borwein_eta(state.x - point, gradient - previous, eta_min=self.eta,
                                                  eta_max=nonprivate.ETA_MAX, previous=self.step_size)
        self._last_gradient = (state.x.copy(), gradient)
        x, dual = nonprivate.generalized_lasso_prox(state.x - self.step_size * gradient, self.step_size, self.matrix,
                                                    self.lam, state.u, gram_norm=self._gram_norm,
                                                    iterations=nonprivate.PROX_ITERATIONS)
        self.path.append(x.copy())
        return GradientADMMState(state.round + 1, x, state.y, dual, x, dual, 1.0, 0, math.inf, state.sum_x + x)


def server_for(scenario, problem, *, evaluator=None, eval_every: int = 1, initial_dual=None,
               on_round=None) -> GradientADMMServer:
    """The server of a :class:`~fdp_flower.algorithms.gradient_admm.config.GradientADMMScenario` on ``problem``
    (:func:`fdp_flower.algorithms.gradient_admm.plan.build_problem`: A, lam and the public m_i)."""
    alg = scenario.algorithm
    return GradientADMMServer(matrix=problem.matrix, lam=problem.lam, rho=alg.rho, eta=alg.eta, sizes=problem.counts,
                              plan=problem.site_plan(alg.rounds, scenario_privacy(scenario)), gamma=alg.gamma,
                              accelerated=alg.kind == "dp_acc_admm", restart=getattr(alg, "restart", False),
                              initial_dual=initial_dual, step_rule=scenario_step_rule(scenario), evaluator=evaluator,
                              eval_every=eval_every, on_round=on_round)


def node_files_server(scenario, plan, matrix: np.ndarray, *, evaluator=None, eval_every: int = 1,
                      on_round=None) -> GradientADMMServer:
    """The server of a scenario on node files (``data.kind: node_files``), from public facts only: the nodes'
    reported m_i and d (``plan``, a :class:`~fdp_flower.algorithms.gradient_admm.nodes.NodePlan`) and A
    (:func:`~fdp_flower.algorithms.gradient_admm.nodes.node_constraint_matrix`).  The same server as
    :func:`server_for` on the same rows: the sites' calibration :func:`~fdp_flower.algorithms.gradient_admm.plan.site_plan`
    is :meth:`~fdp_flower.algorithms.gradient_admm.plan.GradientADMMProblem.site_plan` of d = the rows' columns."""
    from fdp_flower.algorithms.gradient_admm.plan import site_plan

    alg = scenario.algorithm
    return GradientADMMServer(matrix=matrix, lam=scenario.model.penalty.lam, rho=alg.rho, eta=alg.eta,
                              sizes=plan.sizes, plan=site_plan(scenario, plan.dim), gamma=alg.gamma,
                              accelerated=alg.kind == "dp_acc_admm", restart=getattr(alg, "restart", False),
                              step_rule=scenario_step_rule(scenario), evaluator=evaluator, eval_every=eval_every,
                              on_round=on_round)
