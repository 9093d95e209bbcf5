"""The nodes' setup reports on node-local files (``data.kind: node_files``), any tabular family's: what a server
without rows learns before round 1 -- each client's m_i and the rows' dimension d -- checked in one line
(DP-ADMM / DP-AccADMM: :mod:`fdp_flower.algorithms.gradient_admm.nodes`; the peer-to-peer relay:
:mod:`fdp_flower.algorithms.p2p.nodes`; docs/deployment.md, section 3)."""
from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np


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


__all__ = ["NodePlan", "check_node_reports"]
