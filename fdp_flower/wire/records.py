"""The wire format shared by strategies (server side) and client workers: numpy arrays <-> Flower records."""
from __future__ import annotations

import hashlib
import warnings

import numpy as np

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import Array, ArrayRecord


def pack_arrays(**arrays: np.ndarray) -> ArrayRecord:
    return ArrayRecord({k: Array(np.ascontiguousarray(v, dtype=float)) for k, v in arrays.items()})


def unpack_arrays(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in record.items()}


#: The ``phase`` of the QUERY message that opens a run on node-local data (m_i, grid, DP-FPCA summary).
SETUP_PHASE = "node-setup"


#: Prefix of the basis arrays in the first FDP-ADMM train message a node receives in a run.
BASIS_PREFIX = "basis_"
#: Start of the reason of a node's error reply when it does not hold the basis a message names
#: (the server then sends the basis again).
BASIS_MISSING = "basis-missing"
#: Config key of every FDP-ADMM train message: the digest of the run's basis (:func:`basis_digest`).
BASIS_DIGEST_KEY = "basis-digest"


def basis_digest(arrays: dict[str, np.ndarray]) -> str:
    """``sha256:<hex>`` of a basis's named arrays (as float64, in name order): the basis travels
    once per node and run, later messages name it by this digest."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        value = np.ascontiguousarray(arrays[name], dtype=float)
        h.update(f"{name}:{value.shape}".encode())
        h.update(value.tobytes())
    return "sha256:" + h.hexdigest()


#: Config key of a batched FDP-ADMM train message: the clients (partition ids) one node runs this
#: round, when nodes host several simulated clients.  Such a message carries ``global_w`` once and the
#: clients' ``duals`` and ``noisy_primals`` as one (clients, K) array each (row j: the j-th id); the node
#: replies once, with ``noisy_primals`` (one row per released client) and one list per metric
#: (``partition-id`` naming each row), and an ``errors`` record (``partition-id``, ``code``, ``reason``
#: lists) for the clients it refused.  A handful of records whatever the number of clients: Flower
#: moves each array and record of a message as a separate object.
BATCH_CLIENTS_KEY = "partition-ids"
