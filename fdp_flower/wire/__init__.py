"""The wire format of fdp-flower's Flower messages, shared by strategies and client workers.

Clients import only this (and the pure math), never the server side (:mod:`fdp_flower.strategies`).
"""
from fdp_flower.wire.records import (
    BASIS_DIGEST_KEY,
    BASIS_MISSING,
    BASIS_PREFIX,
    CLIENTS_KEY,
    ERRORS_RECORD,
    MIN_RECORDS_KEY,
    TOTAL_RECORDS_KEY,
    RELEASE_KEY,
    REQUEST_PREFIX,
    SETUP_PHASE,
    basis_digest,
    pack_arrays,
    pack_releases,
    pack_requests,
    unpack_arrays,
    unpack_releases,
    unpack_requests,
)

__all__ = ["BASIS_DIGEST_KEY", "BASIS_MISSING", "BASIS_PREFIX", "CLIENTS_KEY", "ERRORS_RECORD", "MIN_RECORDS_KEY", "TOTAL_RECORDS_KEY",
           "RELEASE_KEY",
           "REQUEST_PREFIX", "SETUP_PHASE", "basis_digest", "pack_arrays", "pack_releases", "pack_requests",
           "unpack_arrays", "unpack_releases", "unpack_requests"]
