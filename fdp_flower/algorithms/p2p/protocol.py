"""The peer-to-peer relay's protocol: the state machine every engine drives (docs/p2p.md; the protocol interface:
:mod:`fdp_flower.algorithms.protocol`; the node's side: :mod:`fdp_flower.algorithms.p2p.site`).

There is no global model.  The relay holds every node's *public* side -- its last released vector xt_i, its dual
and, for PR-ADMM, its link statistics S_ij and the threshold -- all post-processing of releases.  Round r:

1. :meth:`P2PServer.begin_round` computes, for every node from its neighbours' releases of round r - 1 only, the
   public part of its step (:func:`plan_node`: the dual step, eq. (3.3) / (4.4), the link statistics and the
   threshold of PR-ADMM, the point the node's loss is evaluated at) and asks each node for its noisy data term at
   that point (:class:`~fdp_flower.algorithms.protocol.SiteRequest`: the point; for PR-ADMM's exact solve also the
   dual and the neighbour sum); a release past a node's total zCDP budget ends the run first;
2. :meth:`~P2PServer.accept` checks each release (shape, finiteness, the node's m_i and the calibration against the
   public plan, the primal bound of ``faults.max_primal_norm``);
3. :meth:`~P2PServer.end_round` turns each node's release into its primal x_i^r = xt_i^r by the step of its
   algorithm (:func:`node_primal`: eq. (3.1), (3.8), (4.6) or P-ADMM's, the released term in place of the data
   term; for the exact solve the release itself) -- post-processing that uses only that node's neighbours'
   releases, run here for it and, in a real peer-to-peer deployment, by the node itself.  A node that did not
   release keeps its vectors and its neighbours use its last release
   (:func:`fdp_flower.algorithms.faults.hold_failed_nodes`).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fdp_flower.algorithms.p2p.grad_nfl import grad_nfl_step_from_term, metropolis_row
from fdp_flower.algorithms.p2p.p_admm import p_admm_step_from_term
from fdp_flower.algorithms.p2p.plan import P2PAlgorithm
from fdp_flower.algorithms.p2p.pr_admm import (
    linearized_step_from_term,
    pr_dual_step,
    threshold_neighbours,
    update_link_statistic,
)
from fdp_flower.algorithms.p2p.site import SitePlan, site_plan
from fdp_flower.algorithms.p2p.zcdp_nfl import nfl_dual_step, nfl_step
from fdp_flower.algorithms.protocol import (
    ReleaseRejected,
    RoundPlan,
    RunStopped,
    ServerProtocol,
    SiteRelease,
    SiteRequest,
)
from fdp_flower.privacy.ledger import GaussianRelease

#: Start of the ``stop_reason`` of a run that a node's total zCDP budget ended.
BUDGET_EXHAUSTED = "budget exhausted"


@dataclass(frozen=True)
class P2PState:
    """Everything the relay holds after round ``round`` (public: releases and post-processing of releases)."""

    round: int
    released: np.ndarray  # (N, K): xt_i^round
    duals: np.ndarray  # (N, K): lam_i^{round-1} (alpha_i for PR-ADMM)
    link_stats: tuple[np.ndarray, ...]  # S_ij over t <= round - 1, (|N_i|,) per node

    @classmethod
    def initial(cls, graph, dim: int) -> P2PState:
        """xt^0 = 0, lam^0 = 0, S = 0."""
        n = graph.num_nodes
        return cls(0, np.zeros((n, dim)), np.zeros((n, dim)), tuple(np.zeros(int(d)) for d in graph.degrees))


@dataclass(frozen=True)
class NodeStep:
    """The public part of node ``node``'s step in round ``round``, computed from its own and its neighbours'
    releases of the round before (:func:`plan_node`)."""

    node: int
    round: int
    own: np.ndarray  # xt_i^{round-1}
    neighbours: np.ndarray  # (|N_i|, K): the neighbour values the step uses (after PR-ADMM's threshold)
    neighbour_degrees: np.ndarray  # (|N_i|,): their degrees (grad-NFL's Metropolis weights)
    dual: np.ndarray  # the dual after this round's dual step
    link_stat: np.ndarray  # S_ij after this round's update
    cut: int  # links cut by the threshold
    point: np.ndarray  # where the node evaluates its loss: xt_i, or the neighbourhood average

    def request(self, algorithm: P2PAlgorithm) -> dict[str, np.ndarray]:
        """The public values the node is sent: the point; for the exact solve also its dual and neighbour sum
        b_i = |V_i| xt_i + sum_j xt_j."""
        if algorithm.exact:
            degree = self.neighbours.shape[0]
            return {"point": self.own, "dual": self.dual,
                    "neighbour_sum": degree * self.own + self.neighbours.sum(axis=0)}
        return {"point": self.point}


def plan_node(algorithm: P2PAlgorithm, graph, state: P2PState, node: int) -> NodeStep:
    """Node ``node``'s :class:`NodeStep` of round ``state.round + 1``: complete the previous step's dual update with
    the releases xt^{r-1} (eq. (3.3); PR-ADMM eq. (4.4) and S_ij += ||xt_i - xt_j||, then the threshold), and the
    point of its data term.  Round 1 sees xt^0 = 0 everywhere, so it leaves lam^0 = 0 and S = 0."""
    nbrs = list(graph.neighbours[node])
    own = state.released[node]
    nb = state.released[nbrs]
    degrees = np.asarray(graph.degrees)[nbrs]
    link_stat, used, cut = state.link_stats[node], nb, 0
    point = own
    if algorithm.kind == "pr_admm":
        dual = pr_dual_step(dual=state.duals[node], own_released=own, neighbour_released=nb, eta=algorithm.penalty)
        link_stat = update_link_statistic(state.link_stats[node], own, nb)
        used, mask = threshold_neighbours(own, nb, link_stat, algorithm.threshold)
        cut = int(mask.sum())
    elif algorithm.kind == "zcdp_grad_nfl":
        dual = state.duals[node]
    else:
        dual = nfl_dual_step(dual=state.duals[node], own_released=own, neighbour_released=nb, rho=algorithm.penalty)
        if algorithm.anchor == "neighbourhood_average":
            w_ii, w_ij = metropolis_row(len(nbrs), degrees)
            point = w_ii * own + w_ij @ nb
    return NodeStep(node, state.round + 1, own, used, degrees, dual, link_stat, cut, point)


def node_primal(algorithm: P2PAlgorithm, objective, step: NodeStep, term: np.ndarray) -> np.ndarray:
    """Node ``step.node``'s primal x_i^r from its release ``term`` (the relay's post-processing; module docstring):
    zCDP-NFL / DP-NFL / decentralized ADMM eq. (3.1), grad-NFL eq. (3.8), P-ADMM, PR-ADMM's linearized step eq. (4.6),
    all with the released descent term in place of the data term; the exact solve's release is the primal."""
    if algorithm.exact:
        return np.asarray(term, dtype=float)
    eta_k = float(algorithm.step_schedule(step.round))
    if algorithm.kind == "zcdp_grad_nfl":
        return grad_nfl_step_from_term(objective=objective, own_released=step.own, neighbour_released=step.neighbours,
                                       neighbour_degrees=step.neighbour_degrees, descent=term, step=eta_k)
    if algorithm.kind == "p_admm":
        return p_admm_step_from_term(objective=objective, own_released=step.own, neighbour_released=step.neighbours,
                                     dual=step.dual, descent=term, gamma=eta_k, eta=algorithm.penalty)
    if algorithm.kind == "pr_admm":
        return linearized_step_from_term(objective=objective, own_released=step.own, neighbour_used=step.neighbours,
                                         dual=step.dual, descent=term, eta=algorithm.penalty, step=eta_k)
    anchor = None if algorithm.anchor == "released" else step.point
    return nfl_step(objective=objective, own_released=step.own, neighbour_released=step.neighbours, dual=step.dual,
                    descent=term, eta=eta_k, rho=algorithm.penalty, anchor=anchor)


def advance(state: P2PState, steps: dict[int, NodeStep], primals: dict[int, np.ndarray]) -> P2PState:
    """The state after the round of ``steps``: a node in ``primals`` takes its new release, dual and link statistics,
    any other node keeps its own (a failed node is held, :func:`fdp_flower.algorithms.faults.hold_failed_nodes`)."""
    released, duals = state.released.copy(), state.duals.copy()
    links = list(state.link_stats)
    for node, x in primals.items():
        released[node] = x
        duals[node] = steps[node].dual
        links[node] = steps[node].link_stat
    return P2PState(state.round + 1, released, duals, tuple(links))


def _close(reported: float, planned: float) -> bool:
    return abs(reported - planned) <= 1e-9 * abs(planned)


class P2PServer(ServerProtocol):
    """The relay's side of the peer-to-peer family (module docstring; docs/algorithms.md, sections 3 and 4).

    Parameters
    ----------
    algorithm : P2PAlgorithm
        The resolved algorithm (:func:`fdp_flower.algorithms.p2p.plan.build_algorithm`).
    graph : Graph
        The public communication graph.
    objective : Objective
        The nodes' local objective (its penalty's subgradient at public points is part of the step).
    sizes : sequence of int
        The public m_i of every node.
    dim : int
        K, the length of every release.
    evaluator : callable, optional
        ``f(round, released (N, K)) -> dict`` of metrics for each round's history row (simulation: it may see
        pooled data) (default: None).
    quorum : float, optional
        Least fraction of nodes that must release in a round (None: any number may fail; default: None).
    max_primal_norm : float, optional
        A release whose primal has a larger norm is rejected (default: None).
    on_round : callable, optional
        ``f(server)`` after every closed round (default: None).
    """

    family = "p2p"

    def __init__(self, algorithm: P2PAlgorithm, graph, objective, sizes, dim: int, *,
                 evaluator: Callable[[int, np.ndarray], dict] | None = None, quorum: float | None = None,
                 max_primal_norm: float | None = None,
                 on_round: Callable[["P2PServer"], None] | None = None) -> None:
        super().__init__(graph.num_nodes, quorum=quorum, on_round=on_round)
        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        self.algorithm, self.graph, self.objective, self.dim = algorithm, graph, objective, int(dim)
        self.sizes = np.asarray(sizes, dtype=int)
        if self.sizes.shape != (self.num_clients,):
            raise ValueError(f"sizes must give m_i of each of the {self.num_clients} nodes, got {self.sizes.shape}")
        self.plan: SitePlan = site_plan(algorithm, objective, graph, dim)
        self.evaluator = evaluator
        self.max_primal_norm = max_primal_norm
        self.state = P2PState.initial(graph, self.dim)
        self.released_history: list[np.ndarray] = [self.state.released]
        self.dual_history: list[np.ndarray] = [self.state.duals]
        #: the public steps of the open round (every node), and of the last closed round (the nodes that released)
        self._steps: dict[int, NodeStep] = {}
        self.closed_steps: dict[int, NodeStep] = {}

    @property
    def round(self) -> int:
        return self.state.round

    @property
    def rounds_planned(self) -> int:
        return self.algorithm.rounds

    def check_quorum(self, replying, round_: int | None = None) -> None:
        """:meth:`ServerProtocol.check_quorum`; without a quorum any number of nodes may fail (a failed node is
        held, its neighbours use its last release)."""
        if self.quorum is not None:
            super().check_quorum(replying, round_)

    def release_event(self, client: int, round_: int, sensitivity: float, sigma: float) -> GaussianRelease | None:
        """A node's release event as it reported it (None for sigma 0: no noise)."""
        return None if sigma == 0 else GaussianRelease(int(client), int(round_), float(sensitivity), float(sigma),
                                                        mechanism=self.algorithm.mechanism)

    def planned_release(self, round_: int, node: int) -> GaussianRelease | None:
        """The ledger event of ``node``'s release in ``round_`` (None when privacy is off)."""
        return self.plan.event(round_, node, int(self.sizes[node]))

    # ------------------------------------------------------------------ the state machine
    def _plan(self, clients=None) -> RoundPlan | None:
        round_ = self.state.round + 1
        if round_ > self.algorithm.rounds:
            return None
        asked = range(self.num_clients) if clients is None else sorted(int(c) for c in clients)
        planned = tuple(r for r in (self.planned_release(round_, i) for i in asked) if r is not None)
        cap = self.algorithm.noise.rho_total
        if math.isfinite(cap):
            for release in planned:  # before any noise is drawn
                spent = self.ledger.zcdp_rho(release.client) + release.zcdp_rho
                if spent > cap * (1 + 1e-9):
                    raise RunStopped(f"{BUDGET_EXHAUSTED}: node {release.client}, round {round_}: release would "
                                     f"spend {spent:.6g} > total zCDP budget {cap:.6g}")
        self._steps = {i: plan_node(self.algorithm, self.graph, self.state, i) for i in range(self.num_clients)}
        requests = tuple(SiteRequest(i, round_, self._steps[i].request(self.algorithm)) for i in asked)
        return RoundPlan(round_, requests, planned)

    def _check(self, release: SiteRelease) -> None:
        node, round_ = int(release.client), self.current_plan.round
        value = np.asarray(release.value, dtype=float) if isinstance(release.value, np.ndarray) else None
        if value is None or value.shape != (self.dim,):
            raise ReleaseRejected(f"node {node}: release has shape {np.shape(release.value)}, expected ({self.dim},)")
        if not np.all(np.isfinite(value)):
            raise ReleaseRejected(f"node {node}: release contains NaN or infinite values")
        if int(release.num_examples) != int(self.sizes[node]):
            raise ReleaseRejected(f"node {node}: reports m_i = {int(release.num_examples)}, the run's plan has "
                                  f"{int(self.sizes[node])}")
        planned, event = self.planned_release(round_, node), release.event
        if planned is None:
            if event is not None:
                raise ReleaseRejected(f"node {node}: released with noise in a run without privacy")
        else:
            if event is None or event.mechanism != planned.mechanism:
                raise ReleaseRejected(f"node {node}: release without its calibration")
            if not _close(event.sensitivity, planned.sensitivity):
                raise ReleaseRejected(f"node {node}: reported sensitivity does not match the scenario")
            if not _close(event.sigma, planned.sigma):
                raise ReleaseRejected(f"node {node}: noise sigma {event.sigma} != calibrated {planned.sigma}")
        if self.max_primal_norm is not None:
            norm = float(np.linalg.norm(node_primal(self.algorithm, self.objective, self._steps[node], value)))
            if norm > self.max_primal_norm:
                raise ReleaseRejected(f"node {node}: primal norm {norm:.4g} exceeds the bound {self.max_primal_norm:.4g}")

    def _close(self, plan: RoundPlan, accepted: dict[int, SiteRelease]) -> dict:
        round_ = plan.round
        replied = np.array([i in accepted for i in range(self.num_clients)])
        self.check_quorum(replied, round_)
        primals = {i: node_primal(self.algorithm, self.objective, self._steps[i],
                                  np.asarray(accepted[i].value, dtype=float)) for i in sorted(accepted)}
        self.closed_steps = {i: self._steps[i] for i in sorted(accepted)}
        self.state = advance(self.state, self._steps, primals)
        self.released_history.append(self.state.released)
        self.dual_history.append(self.state.duals)
        row = {"round": round_, "cut_links": int(sum(self._steps[i].cut for i in accepted)),
               "failed_clients": int(self.num_clients - replied.sum())}
        if self.evaluator is not None:
            row.update(self.evaluator(round_, self.state.released))
        self._steps = {}
        return row


def scenario_server(scenario, problem=None, *, evaluator=None, on_round=None) -> P2PServer:
    """The :class:`P2PServer` of a scenario (its graph, algorithm, the nodes' public m_i; ``problem``: one already
    built from the scenario) with the scenario's quorum and primal bound."""
    from fdp_flower.algorithms.p2p.plan import build_algorithm, build_problem, scenario_graph

    graph = scenario_graph(scenario)
    problem = build_problem(scenario, with_reference=False) if problem is None else problem
    algorithm = build_algorithm(scenario.algorithm, scenario.privacy, problem)
    return P2PServer(algorithm, graph, problem.objective, problem.sample_counts, problem.dim, evaluator=evaluator,
                     quorum=scenario.faults.quorum, max_primal_norm=scenario.faults.max_primal_norm,
                     on_round=on_round)
