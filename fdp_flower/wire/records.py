"""The wire format shared by strategies (server side) and client workers: numpy arrays <-> Flower records."""
from __future__ import annotations

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
