"""The wire format of fdp-flower's Flower messages, shared by strategies and client workers.

Clients import only this (and the pure math), never the server side (:mod:`fdp_flower.strategies`).
"""
from fdp_flower.wire.records import SETUP_PHASE, pack_arrays, unpack_arrays

__all__ = ["SETUP_PHASE", "pack_arrays", "unpack_arrays"]
