"""Client-side helpers shared by the client workers: the run's scenario, which partition this node is."""
from __future__ import annotations

import os
from pathlib import Path

from fdp_flower.wire.flwr import Context

#: (run id, run config) -> parsed scenario: one parse per run and process (a ClientApp process
#: serves many messages in simulation; the run config of a run never changes)
_SCENARIOS: dict[tuple, object] = {}
_MAX_SCENARIOS = 8


def run_scenario(context: Context):
    """The scenario of ``context``'s run, parsed once per run in this process."""
    from fdp_flower.algorithms.registry import any_scenario_from_run_config

    key = (context.run_id, tuple(sorted((str(k), str(v)) for k, v in context.run_config.items())))
    scenario = _SCENARIOS.get(key)
    if scenario is None:
        scenario = any_scenario_from_run_config(context.run_config)
        if len(_SCENARIOS) >= _MAX_SCENARIOS:
            _SCENARIOS.pop(next(iter(_SCENARIOS)))
        _SCENARIOS[key] = scenario
    return scenario


def node_partition(context: Context, scenario, named: int | None = None, *, simulated: bool = False) -> int:
    """This node's partition id, checked against the scenario's federation size.

    ``named`` is a partition the server asked this node to simulate (a simulation with fewer nodes
    than clients, or a resumed simulation, whose server routes clients by name); it is accepted when
    the data are ``simulated`` (any node can generate any client's slice) or when the node is not
    itself one client of a full-size federation.
    """
    num_nodes = int(context.node_config.get("num-partitions", 0))
    if named is not None and (simulated or num_nodes != scenario.federation.num_clients):
        if not 0 <= named < scenario.federation.num_clients:
            raise ValueError(f"partition-id {named} outside [0, {scenario.federation.num_clients})")
        return named
    try:
        partition = int(context.node_config["partition-id"])
        num_partitions = int(context.node_config["num-partitions"])
    except KeyError as exc:
        raise ValueError(f"node config lacks {exc.args[0]!r} (set partition-id and num-partitions)") from None
    if num_partitions != scenario.federation.num_clients:
        raise ValueError(f"the federation has {num_partitions} nodes but the scenario expects "
                         f"federation.num_clients = {scenario.federation.num_clients}")
    if not 0 <= partition < num_partitions:
        raise ValueError(f"partition-id {partition} outside [0, {num_partitions})")
    return partition


def partition_data_error(partition: int, exc: ValueError) -> ValueError:
    """A data error on a node, prefixed with its partition id: the server's log and failures.csv
    know a node by its node id only, the operator knows it by its partition."""
    message = str(exc)
    return ValueError(message if message.startswith(f"partition {partition}:") else f"partition {partition}: {message}")


def check_node_files(scenario, node_local: bool) -> None:
    """A node that names its own file serves it only (data kind ``node_files``), and ``node_files`` needs
    one: a one-line ``ValueError`` otherwise (nothing released)."""
    kind = scenario.data.kind
    if node_local and kind != "node_files":
        raise ValueError(f"this site serves its own data file only (data kind 'node_files'); the run's data kind "
                         f"{kind!r} is refused")
    if kind == "node_files" and not node_local:
        raise ValueError("data kind node_files: this node's config names no data-path")


def own_rows(context, scenario, named: int | None) -> tuple[int, tuple]:
    """(partition, (features, response)) of the node's own file (its node config's ``data-path``); a request
    for another partition is refused (the node holds its own rows only)."""
    from fdp_flower.data.tabular import read_node_rows

    partition = node_partition(context, scenario)
    if named is not None and int(named) != partition:
        raise ValueError(f"this site holds partition {partition} only, not {named}")
    try:
        return partition, read_node_rows(context.node_config["data-path"])
    except ValueError as exc:  # a data error names the partition (and the file, which the reply replaces)
        raise partition_data_error(partition, exc) from None


def check_data_fingerprint(node_config, run_id: int, partition: int, path: str | Path,
                           records: int | None = None) -> str:
    """Fingerprint (SHA-256) a site's data file on its first use in run ``run_id`` and refuse another file or
    changed contents later in the same run (a SuperNode restarted with a different file would mix two data sets
    in one client).  The record, ``data-fingerprints/run-<id>-partition-<p>.json`` beside the site's ledger
    (``node_config``'s ``ledger-dir``), survives a restart of the SuperNode; returns the digest.  A mismatch is a
    ``ValueError`` of one line."""
    import json

    from fdp_flower.functional.node_files import file_digest
    from fdp_flower.privacy.site_policy import SitePolicy

    path = Path(path).resolve()
    digest = file_digest(path)
    record = (SitePolicy.from_node_config(node_config).ledger_path().parent / "data-fingerprints"
              / f"run-{int(run_id)}-partition-{int(partition)}.json")
    try:
        first = json.loads(record.read_text())
    except (OSError, ValueError):
        first = None
    if isinstance(first, dict) and "sha256" in first:
        if first["sha256"] != digest:  # the contents decide (a path may be spelled differently)
            raise ValueError(f"partition {partition}: the data file changed during run {run_id} (first used: "
                             f"{first.get('path')}, {first.get('records', '?')} records, sha256 "
                             f"{str(first['sha256'])[:12]}; now: {path}, sha256 {digest[:12]}); a site keeps one "
                             "data file for a whole run -- put the first file back or start a new run")
        return digest
    try:
        record.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = record.with_suffix(".tmp")
        tmp.write_text(json.dumps({"path": str(path), "sha256": digest, "records": records}))
        os.replace(tmp, record)
    except OSError:
        pass  # no place to keep it: the run goes on unchecked (as without a cache)
    return digest


def check_site_size(policy, partition: int, records: int) -> None:
    """A site's data file below its policy's ``min-records`` (default 20): a warning in the site's log, or a
    one-line ``ValueError`` when the policy sets ``refuse-below-min-records``."""
    import logging

    if records >= policy.min_records:
        return
    message = (f"partition {partition}: the data file holds {records} records, fewer than min-records = "
               f"{policy.min_records}: each release is calibrated to one record, so this site's releases are "
               "mostly noise")
    if policy.refuse_below_min_records:
        raise ValueError(f"{message}; refused (refuse-below-min-records)")
    logging.getLogger("fdp_flower.site").warning(message)
