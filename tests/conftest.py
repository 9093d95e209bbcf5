"""Shared test setup: no test may write a site ledger into the user's own Flower home.

A ClientApp on node-local data keeps its site ledger under ``$FLWR_HOME`` when its node config
names no ``ledger-dir`` (:mod:`fdp_flower.privacy.site_policy`); every test gets its own FLWR_HOME.
"""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_flower_home(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("FLWR_HOME", str(tmp_path_factory.mktemp("flwr_home")))
