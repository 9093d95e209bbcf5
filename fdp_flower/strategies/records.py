"""Numpy arrays <-> Flower records, shared by strategies and client workers."""
from __future__ import annotations

import time
import warnings
from pathlib import Path

import numpy as np

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import Array, ArrayRecord, Message


def pack_arrays(**arrays: np.ndarray) -> ArrayRecord:
    return ArrayRecord({k: Array(np.ascontiguousarray(v, dtype=float)) for k, v in arrays.items()})


def unpack_arrays(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in record.items()}


def reply_sender(reply: Message, server_round: int, count: int, seen, error: type[Exception]) -> int:
    """The partition id a reply comes from; ``error`` for an error reply or a bad/duplicate id."""
    if reply.has_error():
        raise error(f"round {server_round}: node {reply.metadata.src_node_id} failed: {reply.error.reason}")
    sender = int(reply.content["metrics"]["partition-id"])
    if not 0 <= sender < count or sender in seen:
        raise error(f"round {server_round}: bad or duplicate partition id {sender}")
    return sender


def run_results_dir(run_config, run_id: int, name: str, tag: str = "flower") -> Path:
    """``<results-dir>/<name>-<tag>-<time>-run<id>``: where a ServerApp writes a run's results
    (``results-dir`` of the run config, default ``results``; ``tag`` "relay" for peer-to-peer)."""
    base = Path(str(run_config.get("results-dir", "") or "results"))
    return base / f"{name}-{tag}-{time.strftime('%Y%m%d-%H%M%S')}-run{run_id}"
