"""ServerApp and ClientApp that exchange FDP-ADMM-sized messages and do nothing else."""
from __future__ import annotations

import time
import warnings
from logging import INFO

import numpy as np

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.common.logger import log
    from flwr.serverapp import Grid, ServerApp

server = ServerApp()
client = ClientApp()


def _arrays(**values: np.ndarray) -> ArrayRecord:
    return ArrayRecord({k: Array(np.ascontiguousarray(v, dtype=float)) for k, v in values.items()})


def short_poll(grid: Grid, messages: list[Message], timeout: float) -> list[Message]:
    """Push, then pull every 0.01 s doubling to 0.1 s (what fdp-flower's strategies do)."""
    pending = set(grid.push_messages(messages))
    deadline, pause, replies = time.monotonic() + timeout, 0.01, []
    while pending and time.monotonic() < deadline:
        got = list(grid.pull_messages(pending))
        replies += got
        pending.difference_update(m.metadata.reply_to_message_id for m in got)
        if pending:
            time.sleep(pause)
            pause = min(2 * pause, 0.1)
    return replies


@server.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    clients, dim, points, rounds = (int(cfg["num-clients"]), int(cfg["dim"]), int(cfg["grid-points"]),
                                    int(cfg["rounds"]))
    poll = str(cfg["poll"])
    # random values throughout: Flower stores equal arrays of a message once, fdp-flower's arrays all differ
    rng = np.random.default_rng(0)
    basis = {"basis_grid": rng.normal(size=points), "basis_components": rng.normal(size=(dim, points)),
             "basis_mean": rng.normal(size=points), "basis_weights": rng.normal(size=points)}
    while len(list(grid.get_node_ids())) < 1:
        time.sleep(0.2)
    time.sleep(2.0)  # the same settle time as the fdp-flower strategies
    nodes = sorted(grid.get_node_ids())
    sent_basis: set[int] = set()
    started = time.monotonic()
    hosted: dict[int, list[int]] = {}  # fdp-flower's round-robin assignment of clients to nodes
    for c in range(clients):
        hosted.setdefault(nodes[c % len(nodes)], []).append(c)
    for r in range(1, rounds + 1):
        log(INFO, "[ROUND %d/%d]", r, rounds)
        round_started = time.monotonic()
        messages = []
        for node, carried in hosted.items():  # one message per node, carrying every client it hosts
            extra = {} if node in sent_basis else basis
            sent_basis.add(node)
            if len(carried) == 1:
                arrays = _arrays(global_w=rng.normal(size=dim), dual=rng.normal(size=dim),
                                 noisy_primal=rng.normal(size=dim), **extra)
                config = {"round": r, "partition-id": carried[0]}
            else:
                arrays = _arrays(global_w=rng.normal(size=dim), duals=rng.normal(size=(len(carried), dim)),
                                 noisy_primals=rng.normal(size=(len(carried), dim)), **extra)
                config = {"round": r, "partition-ids": carried}
            content = RecordDict({"arrays": arrays, "config": ConfigRecord(config)})
            messages.append(Message(content=content, dst_node_id=node, message_type=MessageType.TRAIN))
        replies = list(grid.send_and_receive(messages, timeout=600) if poll == "flower" else
                       short_poll(grid, messages, timeout=600))
        if len(replies) != len(messages):
            raise RuntimeError(f"round {r}: {len(replies)} of {len(messages)} replies")
        log(INFO, "floor: round %d/%d done in %.3fs", r, rounds, time.monotonic() - round_started)
    log(INFO, "floor: %d rounds finished in %.3fs", rounds, time.monotonic() - started)


@client.train()
def train(msg: Message, context: Context) -> Message:
    """One K-vector and its bookkeeping back per client the message carries."""
    dim = msg.content["arrays"]["global_w"].numpy().size
    config = msg.content["config"]
    if "partition-ids" not in config:
        content = RecordDict({"arrays": _arrays(noisy_primal=np.random.default_rng().normal(size=dim)),
                              "metrics": MetricRecord({"partition-id": int(config["partition-id"])})})
        return Message(content=content, reply_to=msg)
    carried = [int(c) for c in config["partition-ids"]]
    rng = np.random.default_rng()
    metrics = {"partition-id": carried, "num-examples": [1000] * len(carried),
               **{k: rng.random(len(carried)).tolist() for k in ("eta", "sensitivity", "sigma")}}
    content = RecordDict({"arrays": _arrays(noisy_primals=rng.normal(size=(len(carried), dim))),
                          "metrics": MetricRecord(metrics)})
    return Message(content=content, reply_to=msg)
