"""The wire format of fdp-flower's Flower messages, shared by strategies and client workers.

Clients import only this (and the pure math), never the server side (:mod:`fdp_flower.strategies`).
"""
from fdp_flower.wire.records import (
    BASIS_DIGEST_KEY,
    BASIS_MISSING,
    BASIS_PREFIX,
    BATCH_CLIENTS_KEY,
    SETUP_PHASE,
    basis_digest,
    pack_arrays,
    unpack_arrays,
)

__all__ = ["BASIS_DIGEST_KEY", "BASIS_MISSING", "BASIS_PREFIX", "BATCH_CLIENTS_KEY", "SETUP_PHASE", "basis_digest",
           "pack_arrays", "unpack_arrays"]
