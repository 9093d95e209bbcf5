"""DP-ADMM / DP-AccADMM on node-local files (``data.kind: node_files``): what the server builds its protocol
from when no process holds the rows (Xu et al. 2020; docs/algorithms.md, section 5; docs/deployment.md,
section 4).

The server's step needs, besides the scenario, only public numbers: the number of clients M, each
client's m_i (the aggregate's weights m_i / n and the calibration Delta_i = 2c/m_i), the dimension d of
the rows and the constraint matrix A.  On node files each node reports its m_i and d in a setup phase
(one QUERY message, :func:`fdp_flower.clients.gradient_admm.handle_gradient_admm_setup_query`), before
anything is released; :func:`~fdp_flower.algorithms.node_reports.check_node_reports` turns the reports
into the server's :class:`~fdp_flower.algorithms.node_reports.NodePlan` or refuses them in one line.  A is the identity (``lasso``) or a file (``user``); the graph-guided A is
estimated on pooled rows and is refused (:func:`node_constraint_matrix`).  The metrics that need the
pooled rows (objective, gap, accuracies) are not computed: :class:`PublicStatistics` reports functions
of the server's own iterate only.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fdp_flower.algorithms.gradient_admm.config import GRAPH_GUIDED_REFUSAL
from fdp_flower.algorithms.gradient_admm.site import SitePlan
from fdp_flower.algorithms.gradient_admm.update import GradientADMMState
from fdp_flower.algorithms.node_reports import NodePlan, check_node_reports

#: the summary's words for the metrics a server on node files does not compute
NODE_FILES_EVALUATION = ("node files: the objective, its gap and the accuracies need every site's rows, which no "
                         "process holds; the history reports x_norm = ||x_t|| and penalty = lam ||A x_t||_1 only")


def node_constraint_matrix(scenario, dim: int) -> np.ndarray:
    """A of ``model.constraint`` without the pooled rows, for rows of ``dim`` columns: the identity (``lasso``) or
    the file of a ``user`` constraint (:func:`~fdp_flower.algorithms.gradient_admm.plan.load_matrix`: one line
    unless it has ``dim`` columns).  The graph-guided A is estimated on pooled rows: a one-line ``ValueError``
    (the scenario already refuses it on node files)."""
    from fdp_flower.algorithms.gradient_admm.plan import load_matrix
    from fdp_flower.algorithms.gradient_admm.update import lasso_matrix

    con = scenario.model.constraint
    if con.kind == "graph_guided":
        raise ValueError(GRAPH_GUIDED_REFUSAL)
    if con.kind == "lasso":
        return lasso_matrix(int(dim))
    return load_matrix(con.path, int(dim))


def planned_releases(plan: SitePlan, client: int, m: int) -> list:
    """The ledger events of a whole run for client ``client`` of ``m`` rows: one gradient release per round
    1..T at the run's calibration (empty when privacy is off); a site composes them with its ledger at setup."""
    if plan.privacy is None:
        return []
    return [plan.release(int(client), round_, float(m)) for round_ in range(1, int(plan.rounds) + 1)]


@dataclass
class PublicStatistics:
    """``evaluator(state) -> dict`` of a server without rows: ``x_norm`` = ||x_t|| and ``penalty`` =
    lam ||A x_t||_1, functions of the server's own iterate (post-processing of the releases)."""

    matrix: np.ndarray
    lam: float
    reference: None = None

    def __call__(self, state: GradientADMMState) -> dict[str, float]:
        return {"x_norm": float(np.linalg.norm(state.x)),
                "penalty": float(self.lam * np.sum(np.abs(self.matrix @ state.x)))}


__all__ = ["GRAPH_GUIDED_REFUSAL", "NODE_FILES_EVALUATION", "NodePlan", "PublicStatistics", "check_node_reports",
           "node_constraint_matrix", "planned_releases"]
