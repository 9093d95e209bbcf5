"""The peer-to-peer relay on node-local files (``data.kind: node_files``): the relay's protocol from public facts
only (docs/p2p.md; docs/deployment.md, section 3).

The relay's server needs the public graph, the resolved algorithm (its noise plan and the gradient bound G,
a function of the loss and c1 alone), the objective (loss, penalty, lam, N), each node's m_i and the rows'
dimension d.  On node files each node reports m_i and d in a setup phase
(:func:`fdp_flower.clients.p2p.handle_p2p_setup_query`; checked by
:func:`fdp_flower.algorithms.node_reports.check_node_reports`).  The metrics that need the nodes' rows (the
objective, the error to x*, the accuracies) are not computed: :class:`PublicStatistics` reports functions of
the releases only.
"""
from __future__ import annotations

import numpy as np

#: the summary's words for the metrics a relay on node files does not compute
NODE_FILES_EVALUATION = ("node files: the objective, the error to the centralized x* and the accuracies need every "
                         "node's rows, which no process holds; the history reports released_mean_norm = (1/N) sum_i "
                         "||xt_i|| and released_disagreement = (1/N) sum_i ||xt_i - mean_j xt_j|| only")


def public_problem(scenario):
    """A :class:`~fdp_flower.algorithms.p2p.problems.NetworkProblem` without rows: the scenario's loss, penalty, lam
    and c1 (what :func:`~fdp_flower.algorithms.p2p.plan.build_algorithm` reads: G and the smoothness of f_i)."""
    from fdp_flower.algorithms.p2p.plan import model_objects
    from fdp_flower.algorithms.p2p.problems import NetworkProblem

    loss, penalty, lam = model_objects(scenario.model)
    return NetworkProblem(name="node_files", features=(), responses=(), loss=loss, penalty=penalty, lam=lam,
                          c1=scenario.model.clip_c1)


def node_files_server(scenario, plan, *, evaluator=None, on_round=None):
    """The relay's :class:`~fdp_flower.algorithms.p2p.protocol.P2PServer` of a scenario on node files from the
    nodes' reports ``plan`` (:class:`~fdp_flower.algorithms.node_reports.NodePlan`): the same server as
    :func:`~fdp_flower.algorithms.p2p.protocol.scenario_server` on the same rows (G, the noise plan and the site
    plan depend on public values only)."""
    from fdp_flower.algorithms.fdp_admm.update import Objective
    from fdp_flower.algorithms.p2p.plan import build_algorithm, scenario_graph
    from fdp_flower.algorithms.p2p.protocol import P2PServer

    graph = scenario_graph(scenario)
    problem = public_problem(scenario)
    algorithm = build_algorithm(scenario.algorithm, scenario.privacy, problem)
    objective = Objective(loss=problem.loss, penalty=problem.penalty, lam=problem.lam, num_clients=graph.num_nodes)
    return P2PServer(algorithm, graph, objective, plan.sizes, plan.dim, evaluator=evaluator,
                     quorum=scenario.faults.quorum, max_primal_norm=scenario.faults.max_primal_norm,
                     on_round=on_round)


def planned_releases(site_plan, node: int, m: int) -> list:
    """The ledger events of a whole run for graph node ``node`` of ``m`` rows: one release per round 1..T at its
    calibration (:meth:`~fdp_flower.algorithms.p2p.site.SitePlan.event`; empty when privacy is off)."""
    events = [site_plan.event(round_, int(node), int(m)) for round_ in range(1, site_plan.algorithm.rounds + 1)]
    return [e for e in events if e is not None]


class PublicStatistics:
    """``evaluator(round, released) -> dict`` of a relay without rows: the mean norm of the released vectors xt_i
    and their mean distance to their average (how far the nodes are from consensus), both functions of the
    releases (post-processing)."""

    reference = None

    def __call__(self, _round: int, released: np.ndarray) -> dict[str, float]:
        xs = np.asarray(released, dtype=float)
        return {"released_mean_norm": float(np.mean(np.linalg.norm(xs, axis=1))),
                "released_disagreement": float(np.mean(np.linalg.norm(xs - xs.mean(axis=0), axis=1)))}


__all__ = ["NODE_FILES_EVALUATION", "PublicStatistics", "node_files_server", "planned_releases", "public_problem"]
