"""Flower ClientApp entry: unpack the message, call the client worker, pack the reply."""
from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import Context, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp

from fdp_flower.clients.fdp_admm import fdp_admm_client_update
from fdp_flower.fpca import FunctionalBasis
from fdp_flower.runtime import load_partition
from fdp_flower.scenario import Scenario, scenario_from_run_config
from fdp_flower.strategies.fdp_admm import pack_arrays, unpack_arrays

app = ClientApp()


def node_partition(context: Context, scenario: Scenario, named: int | None = None) -> int:
    """This node's partition id, checked against the scenario's federation size.

    ``named`` is a partition the server asked this node to simulate (when the
    simulation has fewer nodes than clients); it is accepted only for simulated
    data and when the node is not itself one client of a full-size federation.
    """
    num_nodes = int(context.node_config.get("num-partitions", 0))
    if named is not None and num_nodes != scenario.federation.num_clients:
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


@app.train()
def train(msg: Message, context: Context) -> Message:
    scenario = scenario_from_run_config(context.run_config)
    config = msg.content["config"]
    partition = node_partition(context, scenario, int(config["partition-id"]) if "partition-id" in config else None)
    arrays = unpack_arrays(msg.content["arrays"])
    basis = FunctionalBasis.from_arrays({k[len("basis_"):]: v for k, v in arrays.items() if k.startswith("basis_")})
    reply = fdp_admm_client_update(
        scenario, partition, load_partition(scenario, partition), basis,
        global_w=arrays["global_w"], dual=arrays["dual"], noisy_primal=arrays["noisy_primal"],
        round_=int(config["round"]))
    metrics = {"partition-id": reply.partition, "num-examples": reply.num_examples, "eta": reply.eta,
               "sensitivity": reply.sensitivity, "sigma": reply.sigma}
    if scenario.privacy.report_clipped_rows or not scenario.privacy.enabled:
        metrics["clipped-rows"] = reply.clipped_rows
    content = RecordDict({"arrays": pack_arrays(noisy_primal=reply.noisy_primal), "metrics": MetricRecord(metrics)})
    return Message(content=content, reply_to=msg)
