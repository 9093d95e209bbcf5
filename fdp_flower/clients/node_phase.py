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
from fdp_flower.clients.common import (
    check_data_fingerprint,
    check_site_size,
    node_partition,
    partition_data_error,
)
from fdp_flower.clients.site import SiteSession, names_own_data
from fdp_flower.functional import federated_fpca
from fdp_flower.functional.bases import basis_kind
from fdp_flower.functional.node_files import grid_digest
from fdp_flower.wire import pack_arrays
from fdp_flower.wire.flwr import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict


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
    from fdp_flower.functional.node_files import check_grid, read_node_file

    try:
        path = source.path_of(partition, node_data_path(context))
        raw = read_node_file(path)
        if site.node_local:  # the site's own file: fingerprinted for the run, its size against the policy
            check_data_fingerprint(context.node_config, context.run_id, partition, path, raw.n_samples)
            check_site_size(site.policy, partition, raw.n_samples)
    except ValueError as exc:
        raise partition_data_error(partition, exc) from None
    refusal = site.run_refusal(planned_releases(scenario, partition))  # the whole run within the site's budget
    try:  # the in-process rule (check_grid: GRID_RTOL), so that a grid accepted in process is accepted here
        check_grid(raw.grid, grid_of(scenario), str(path))
        grid_matches = True
    except ValueError:
        grid_matches = False
    metrics = {"partition-id": partition, "num-examples": raw.n_samples, "grid-digest": grid_digest(raw.grid),
               "grid-matches": int(grid_matches),
               "grid-points": int(raw.grid.size), "grid-start": float(raw.grid[0]), "grid-stop": float(raw.grid[-1])}
    arrays = ArrayRecord()
    if federated and grid_matches:
        data = load_partition(scenario, partition, path)
        pre = federated_fpca.scenario_pre_basis(scenario, grid_of(scenario))
        summary = federated_fpca.scenario_client_summary(scenario, partition, data.curves, pre, noise=site.noise_for)
        arrays = pack_arrays(second_moment=summary.second_moment, mean=summary.mean)
        metrics.update({"sensitivity": summary.sensitivity, "sigma": summary.sigma})
        if scenario.privacy.report_clipped_rows or not scenario.basis.private:
            metrics["clipped-rows"] = summary.clipped_rows
    content = RecordDict({"arrays": arrays, "metrics": MetricRecord(metrics), **site.records(),
                          **({SETUP_REFUSAL: ConfigRecord({"reason": refusal})} if refusal else {})})
    return Message(content=content, reply_to=msg)


#: the setup reply's record of a site's refusal of the whole run (``reason``: one line)
SETUP_REFUSAL = "site-setup-refusal"


def planned_releases(scenario: Scenario, partition: int) -> list:
    """The ledger events a whole run of ``scenario`` plans for client ``partition``: its federated DP-FPCA summary
    (when private) and one primal release per round, each as a sensitivity-1 Gaussian of its calibrated
    multiplier (an eps depends on the multiplier only: every sigma is z times its own sensitivity)."""
    from fdp_flower.algorithms.fdp_admm.plan import NoisePlan
    from fdp_flower.algorithms.fdp_admm.site import term_release
    from fdp_flower.privacy.ledger import GaussianRelease

    plan = NoisePlan(scenario, 1)
    if not plan.private:
        return []
    planned = [term_release(partition, round_, 1.0, float(z)) for round_, z in enumerate(plan.noise_multipliers, 1)]
    if plan.basis_multiplier is not None:
        planned.insert(0, GaussianRelease(partition, federated_fpca.FPCA_ROUND, 1.0, float(plan.basis_multiplier),
                                          mechanism=federated_fpca.FPCA_MECHANISM))
    return planned


__all__ = ["SETUP_REFUSAL", "handle_node_setup_query", "node_data_path", "planned_releases"]
