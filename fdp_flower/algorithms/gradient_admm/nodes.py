"""DP-ADMM / DP-AccADMM on node-local files (``data.kind: node_files``): what the server builds its protocol
from when no process holds the rows (Xu et al. 2020; docs/algorithms.md, section 5; docs/deployment.md,
section 4).

The server's step needs, besides the scenario, only public numbers: the number of clients M, each
client's m_i (the aggregate's weights m_i / n and the calibration Delta_i = 2c/m_i), the dimension d of
the rows and the constraint matrix A.  On node files each node reports its m_i and d in a setup phase
(one QUERY message, :func:`fdp_flower.clients.gradient_admm.handle_gradient_admm_setup_query`), before
anything is released; :func:`check_node_reports` turns the reports into the server's :class:`NodePlan`
or refuses them in one line.  A is the identity (``lasso``) or a file (``user``); the graph-guided A is
estimated on pooled rows and is refused (:func:`node_constraint_matrix`).  The metrics that need the
pooled rows (objective, gap, accuracies) are not computed: :class:`PublicStatistics` reports functions
of the server's own iterate only.
"""
from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np

from fdp_flower.algorithms.gradient_admm.config import GRAPH_GUIDED_REFUSAL
from fdp_flower.algorithms.gradient_admm.site import SitePlan
from fdp_flower.algorithms.gradient_admm.update import GradientADMMState

#: the summary's words for the metrics a server on node files does not compute
NODE_FILES_EVALUATION = ("node files: the objective, its gap and the accuracies need every site's rows, which no "
                         "process holds; the history reports x_norm = ||x_t|| and penalty = lam ||A x_t||_1 only")


@dataclass(frozen=True)
class NodePlan:
    """The public facts of a federation on node files: every client's m_i (client order) and the rows'
    dimension d (every node's file has d columns)."""

    sizes: np.ndarray
    dim: int

    @property
    def num_clients(self) -> int:
        return int(self.sizes.size)


def _count(client: int, name: str, value, least: int) -> int:
    """A reported count: an integer (a float of integral value is one) >= ``least``; else one line."""
    if isinstance(value, bool) or not isinstance(value, (Integral, Real)):
        raise ValueError(f"client {client}: reports {name} = {value!r}, not an integer")
    number = float(value)
    if not np.isfinite(number) or number != int(number):
        raise ValueError(f"client {client}: reports {name} = {value!r}, not an integer")
    if int(number) < least:
        raise ValueError(f"client {client}: reports {name} = {int(number)}, expected an integer >= {least}")
    return int(number)


def check_node_reports(reports: dict[int, dict], num_clients: int, dim: int | None = None) -> NodePlan:
    """The :class:`NodePlan` of the nodes' setup reports ``{client: {"num-examples": m_i, "dim": d}}``.

    Parameters
    ----------
    reports : dict
        One report per client 0..M-1.
    num_clients : int
        M, the scenario's ``federation.num_clients``.
    dim : int or None
        The number of columns the server's A has (a file of A), or None (A = I: d from the reports).

    Returns
    -------
    NodePlan

    Raises
    ------
    ValueError
        One line naming the client: a client missing or outside 0..M-1, an m_i or d that is not an
        integer >= 1, two nodes of different d, or a d other than A's.
    """
    missing = sorted(set(range(int(num_clients))) - set(reports))
    if missing:
        raise ValueError(f"no setup report from clients {missing}")
    stray = sorted(c for c in reports if not 0 <= int(c) < int(num_clients))
    if stray:
        raise ValueError(f"setup reports from clients {stray} outside 0..{int(num_clients) - 1}")
    sizes, dims = [], {}
    for client in range(int(num_clients)):
        report = reports[client]
        for key in ("num-examples", "dim"):
            if key not in report:
                raise ValueError(f"client {client}: the setup report lacks {key!r}")
        sizes.append(_count(client, "m_i (num-examples)", report["num-examples"], 1))
        dims.setdefault(_count(client, "d (dim)", report["dim"], 1), []).append(client)
    if len(dims) > 1:
        parts = "; ".join(f"clients {clients} have d = {d}" for d, clients in sorted(dims.items()))
        raise ValueError(f"the nodes' rows differ in dimension: {parts}")
    (reported,) = dims
    if dim is not None and reported != int(dim):
        raise ValueError(f"the nodes' rows have d = {reported} columns, the constraint matrix A has {int(dim)}")
    return NodePlan(np.asarray(sizes, dtype=int), reported)


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
