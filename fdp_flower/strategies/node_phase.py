"""Server side of a run on node-local data: the setup phase and released-value statistics.

Before FDP-ADMM's round 1 the server sends one QUERY message to every node and
learns, from the replies only, each client's partition id, m_i and grid
fingerprint (a grid mismatch between nodes stops the run here, naming the
nodes), and -- for the ``federated_dp`` basis -- each client's noisy covariance
summary, from which it builds and then broadcasts (with every train message) the
basis.  Those releases are charged to each client's ledger (round 0).  The pure
math lives in :mod:`fdp_flower.functional.federated_fpca`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from logging import ERROR, INFO

import numpy as np

from fdp_flower.algorithms.fdp_admm.config import Scenario
from fdp_flower.algorithms.fdp_admm.plan import build_basis, data_source, grid_of
from fdp_flower.algorithms.fdp_admm.update import FDPADMMState
from fdp_flower.functional import federated_fpca
from fdp_flower.functional.bases import basis_kind
from fdp_flower.functional.fpca import FunctionalBasis
from fdp_flower.functional.node_files import grid_digest
from fdp_flower.privacy import GaussianRelease
from fdp_flower.strategies.common import site_report
from fdp_flower.wire import SETUP_PHASE, unpack_arrays
from fdp_flower.wire.flwr import ConfigRecord, Message, MessageType, RecordDict, log
from fdp_flower.wire.flwr_server import Grid


class SetupError(RuntimeError):
    """The setup phase failed (missing, failed or inconsistent replies)."""


@dataclass
class NodeSetup:
    """What the server learned in the setup phase."""

    basis: FunctionalBasis
    sizes: np.ndarray  # m_i by client
    node_of_client: dict[int, int]
    releases: list[GaussianRelease] = field(default_factory=list)
    clipped_rows: dict[int, int] = field(default_factory=dict)
    site_reports: dict[int, dict] = field(default_factory=dict)  # client -> the site's own totals


@dataclass
class ReleasedStatistics:
    """History columns a server can compute from released values only (no data, no Evaluator).

    ``global_w_norm`` = ||w^l||, ``primal_residual`` = (1/M) sum_i ||wt_i^l - w^l||
    (consensus residual of the released primals), ``dual_norm`` = max_i ||g_i^l||.
    """

    reference: None = None

    def __call__(self, state: FDPADMMState) -> dict[str, float]:
        return {"global_w_norm": float(np.linalg.norm(state.global_w)),
                "primal_residual": float(np.mean(np.linalg.norm(state.noisy_primals - state.global_w, axis=1))),
                "dual_norm": float(np.max(np.linalg.norm(state.duals, axis=1)))}


def _grid_text(metrics) -> str:
    return f"{int(metrics['grid-points'])} points {float(metrics['grid-start']):g}..{float(metrics['grid-stop']):g}"


def unpack_setup_reply(reply: Message) -> tuple[int, dict | None, dict | None, str | None]:
    """(node, metrics, arrays, error reason) of one setup reply; the site's own totals, if it
    reported them, are in ``metrics["site"]``."""
    node = int(reply.metadata.src_node_id)
    if reply.has_error():
        return node, None, None, str(reply.error.reason)
    metrics = dict(reply.content["metrics"])
    if (report := site_report(reply)) is not None:
        metrics["site"] = report
    if "site-setup-refusal" in reply.content:  # fdp_flower.clients.node_phase.SETUP_REFUSAL
        metrics["run-refused"] = str(reply.content["site-setup-refusal"]["reason"])
    return node, metrics, unpack_arrays(reply.content["arrays"]), None


def setup_replies_by_client(num: int, replies: list[tuple[int, dict | None, dict | None, str | None]]
                            ) -> dict[int, tuple[int, dict, dict]]:
    """{client: (node, metrics, arrays)} of unpacked setup replies (:func:`unpack_setup_reply`) of ``num``
    clients, any family's: a :class:`SetupError` naming the nodes at fault for an error reply, a bad or
    duplicate partition id, a client without a reply or a site that refuses the run."""
    errors = [f"node {node}: {reason.strip().splitlines()[-1] if reason.strip() else 'error'}"
              for node, _m, _a, reason in replies if reason is not None]
    if errors:
        raise SetupError("setup phase failed on " + "; ".join(errors))
    by_client: dict[int, tuple[int, dict, dict]] = {}
    for node, metrics, arrays, _reason in replies:
        client = int(metrics["partition-id"])
        if client in by_client or not 0 <= client < num:
            raise SetupError(f"node {node}: bad or duplicate partition-id {client}")
        by_client[client] = (node, metrics, arrays)
    missing = sorted(set(range(num)) - set(by_client))
    if missing:
        raise SetupError(f"no setup reply from clients {missing} (is every node's partition-id set?)")
    refused = [f"client {client}: {metrics['run-refused']}" for client, (_n, metrics, _a) in sorted(by_client.items())
               if metrics.get("run-refused")]
    if refused:  # a run that cannot finish within a site's remaining budget: stopped before any release
        raise SetupError("; ".join(refused))
    return by_client


def check_setup_replies(scenario: Scenario, replies: list[tuple[int, dict | None, dict | None, str | None]]
                        ) -> dict[int, tuple[int, dict, dict]]:
    """Validate unpacked setup replies (:func:`unpack_setup_reply`, :func:`setup_replies_by_client`) and the
    nodes' grids; returns {client: (node, metrics, arrays)} or raises :class:`SetupError` naming the nodes at
    fault."""
    by_client = setup_replies_by_client(scenario.federation.num_clients, replies)
    # each node compared its grid with the scenario's by the in-process rule (check_grid, GRID_RTOL): one
    # tolerance everywhere; the digests only name the groups of a mismatch (and decide for a node that does not say)
    if all(int(metrics.get("grid-matches", 0)) == 1 for _node, metrics, _arrays in by_client.values()):
        return by_client
    expected = grid_digest(grid_of(scenario))
    groups: dict[int, list[int]] = {}
    for client, (_node, metrics, _arrays) in sorted(by_client.items()):
        groups.setdefault(int(metrics["grid-digest"]), []).append(client)
    if len(groups) > 1 or expected not in groups:
        own = grid_of(scenario)
        parts = [f"clients {cl} have a grid of {_grid_text(by_client[cl[0]][1])}" for cl in groups.values()]
        raise SetupError("grid mismatch between nodes: " + "; ".join(parts) + f"; the scenario's grid is "
                         f"{own.size} points {own[0]:g}..{own[-1]:g}")
    return by_client


def query_setup(grid: Grid, node_ids: list[int], timeout: float | None = None
                ) -> list[tuple[int, dict | None, dict | None, str | None]]:
    """Send the setup QUERY to every node of ``node_ids`` and unpack the replies (:func:`unpack_setup_reply`)."""
    messages = [Message(content=RecordDict({"config": ConfigRecord({"phase": SETUP_PHASE})}),
                        dst_node_id=node, message_type=MessageType.QUERY) for node in node_ids]
    return [unpack_setup_reply(r) for r in grid.send_and_receive(messages, timeout=timeout)]


def node_setup(grid: Grid, scenario: Scenario, *, timeout: float | None = None) -> NodeSetup:
    """Run the setup phase (see module docstring) on ``grid``; raises :class:`SetupError`."""
    if not data_source(scenario).node_local:
        raise ValueError("node_setup is for node-local data (data kind 'node_files')")
    num = scenario.federation.num_clients
    node_ids = sorted(grid.get_node_ids())
    if len(node_ids) != num:
        raise SetupError(f"{len(node_ids)} nodes connected but the scenario has federation.num_clients = {num} "
                         "(node-local data: exactly one client per node)")
    log(INFO, "fdp-flower: setup phase: querying %d nodes (m_i, grid%s)", num,
        ", covariance summaries" if basis_kind(scenario.basis).federated_phase else "")
    try:
        by_client = check_setup_replies(scenario, query_setup(grid, node_ids, timeout))
    except SetupError as exc:
        log(ERROR, "fdp-flower: %s", exc)
        raise
    sizes = np.array([int(by_client[c][1]["num-examples"]) for c in range(num)])
    node_of_client = {c: int(by_client[c][0]) for c in range(num)}
    sites = {c: by_client[c][1]["site"] for c in range(num) if "site" in by_client[c][1]}
    b = scenario.basis
    if not basis_kind(b).federated_phase:
        return NodeSetup(build_basis(scenario), sizes, node_of_client, site_reports=sites)
    seconds, means, releases, clipped = [], [], [], {}
    pre = federated_fpca.scenario_pre_basis(scenario, grid_of(scenario))
    for c in range(num):
        _node, metrics, arr = by_client[c]
        if set(arr) != {"second_moment", "mean"}:
            raise SetupError(f"client {c}: setup reply lacks its covariance summary")
        try:
            federated_fpca.check_summary(arr["second_moment"], arr["mean"], pre.n_components)
        except ValueError as exc:
            raise SetupError(f"client {c}: {exc}") from None
        sensitivity = float(federated_fpca.summary_sensitivity(clip_cb=b.clip_cb, m=sizes[c]))
        sigma = federated_fpca.phase_noise_sigma(b, int(sizes[c]))
        if not np.isclose(float(metrics["sensitivity"]), sensitivity, rtol=1e-9, atol=0) or \
                not np.isclose(float(metrics["sigma"]), 0.0 if sigma is None else sigma, rtol=1e-9, atol=0):
            raise SetupError(f"client {c}: summary sensitivity/sigma do not match the scenario's calibration")
        if sigma is not None:  # the noise was added on the client before its reply
            releases.append(GaussianRelease(c, federated_fpca.FPCA_ROUND, sensitivity, sigma,
                                            mechanism=federated_fpca.FPCA_MECHANISM))
        if "clipped-rows" in metrics:
            clipped[c] = int(metrics["clipped-rows"])
        seconds.append(arr["second_moment"])
        means.append(arr["mean"])
    basis = federated_fpca.aggregate_basis(seconds, means, sizes, pre, b.n_components, whiten=b.whiten)
    log(INFO, "fdp-flower: federated DP-FPCA basis: K=%d of B=%d, explained variance %.3f", b.n_components,
        pre.n_components, float(np.sum(basis.explained_variance_ratio)))
    return NodeSetup(basis, sizes, node_of_client, releases, clipped, sites)


@dataclass
class TabularSetup:
    """What a server without rows learned in the setup phase of a tabular family (DP-ADMM, the relay): the nodes'
    :class:`~fdp_flower.algorithms.node_reports.NodePlan` (m_i, d), which node is which client, and each site's
    own totals."""

    plan: object
    node_of_client: dict[int, int]
    site_reports: dict[int, dict]


def tabular_node_setup(grid: Grid, num: int, *, timeout: float | None = None) -> TabularSetup:
    """The setup phase of a tabular family on node files: wait for ``num`` nodes, send each one QUERY
    (the family's ``client_query`` answers: partition id, m_i, d, the site's totals, a refusal), and check the
    replies (:func:`setup_replies_by_client`, :func:`~fdp_flower.algorithms.node_reports.check_node_reports`);
    raises :class:`SetupError` in one line, logged, before anything is released."""
    from fdp_flower.algorithms.node_reports import check_node_reports
    from fdp_flower.strategies.common import wait_for_nodes

    wait_for_nodes(grid, num)
    node_ids = sorted(grid.get_node_ids())
    try:
        if len(node_ids) != num:
            raise SetupError(f"{len(node_ids)} nodes connected but the scenario has federation.num_clients = {num} "
                             "(node-local data: exactly one client per node)")
        log(INFO, "fdp-flower: setup phase: querying %d nodes (m_i, d)", num)
        by_client = setup_replies_by_client(num, query_setup(grid, node_ids, timeout))
        try:
            plan = check_node_reports({c: metrics for c, (_node, metrics, _a) in by_client.items()}, num)
        except ValueError as exc:
            raise SetupError(str(exc)) from None
    except SetupError as exc:
        log(ERROR, "fdp-flower: %s", exc)
        raise
    log(INFO, "fdp-flower: setup phase: m_i = %s, d = %d", [int(m) for m in plan.sizes], plan.dim)
    return TabularSetup(plan, {c: int(node) for c, (node, _m, _a) in by_client.items()},
                        {c: metrics["site"] for c, (_n, metrics, _a) in by_client.items() if "site" in metrics})

