"""Client side of the setup phase of a run on node-local data (one QUERY message).

The node reads its own file (node config ``data-path``, else the scenario's
``data.paths``), reports public bookkeeping -- its partition id, its sample count
m_i and a fingerprint of its grid -- and, for the ``federated_dp`` basis, its noisy
covariance summary (:mod:`fdp_flower.functional.federated_fpca`).  Never a curve, a
coefficient vector or a score.  The reply also carries the site's own totals (ConfigRecord
``site``, :mod:`fdp_flower.clients.site`), so the server learns what each site has spent before
it asks for anything; a site whose policy refuses the run (e.g. privacy off) refuses here.
"""
from __future__ import annotations

from fdp_flower.algorithms.fdp_admm.config import Scenario
from fdp_flower.algorithms.fdp_admm.plan import data_source, grid_of, load_partition
from fdp_flower.clients.common import node_partition, partition_data_error
from fdp_flower.clients.site import SiteSession, names_own_data
from fdp_flower.functional import federated_fpca
from fdp_flower.functional.bases import basis_kind
from fdp_flower.functional.node_files import grid_digest
from fdp_flower.wire import pack_arrays
from fdp_flower.wire.flwr import ArrayRecord, Context, Message, MetricRecord, RecordDict


def node_data_path(context: Context) -> str | None:
    """The node's own data file from its node config (``data-path``), if any."""
    path = context.node_config.get("data-path")
    return None if path in (None, "") else str(path)


def handle_node_setup_query(msg: Message, context: Context, scenario: Scenario) -> Message:
    """Answer the server's setup query (see module docstring)."""
    source = data_source(scenario)
    if not source.node_local:
        raise ValueError("the setup phase is for node-local data (data kind 'node_files')")
    partition = node_partition(context, scenario)
    site = SiteSession.open(context, scenario, node_local=names_own_data(context, source))
    federated = basis_kind(scenario.basis).federated_phase
    site.admit(scenario.privacy.enabled, "FDP-ADMM primal releases")
    if federated:
        site.admit(scenario.basis.private, "the federated FPCA covariance summary")
    # Read without forcing the scenario's grid: the server compares every node's grid
    # fingerprint with the scenario's and names the nodes that differ.
    from fdp_flower.functional.node_files import read_node_file

    try:
        path = source.path_of(partition, node_data_path(context))
        raw = read_node_file(path)
    except ValueError as exc:
        raise partition_data_error(partition, exc) from None
    metrics = {"partition-id": partition, "num-examples": raw.n_samples, "grid-digest": grid_digest(raw.grid),
               "grid-points": int(raw.grid.size), "grid-start": float(raw.grid[0]), "grid-stop": float(raw.grid[-1])}
    arrays = ArrayRecord()
    if federated and grid_digest(raw.grid) == grid_digest(grid_of(scenario)):
        data = load_partition(scenario, partition, path)
        pre = federated_fpca.scenario_pre_basis(scenario, grid_of(scenario))
        summary = federated_fpca.scenario_client_summary(scenario, partition, data.curves, pre, noise=site.noise_for)
        arrays = pack_arrays(second_moment=summary.second_moment, mean=summary.mean)
        metrics.update({"sensitivity": summary.sensitivity, "sigma": summary.sigma})
        if scenario.privacy.report_clipped_rows or not scenario.basis.private:
            metrics["clipped-rows"] = summary.clipped_rows
    content = RecordDict({"arrays": arrays, "metrics": MetricRecord(metrics), **site.records()})
    return Message(content=content, reply_to=msg)


__all__ = ["handle_node_setup_query", "node_data_path"]
