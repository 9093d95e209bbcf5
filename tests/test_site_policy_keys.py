"""A node config key the site does not know is refused in one line naming the nearest known key.

Before this check a misspelled policy key (``max-esp=0.3``, ``max-epsilon=0.3``, ``Max-Eps=0.3``) was
ignored and the site ran at the default cap eps = 10.  Node configs also carry Flower's keys
(``partition-id``, ``num-partitions``) and the app's ``data-path``: those are known.
"""
from __future__ import annotations

import pytest

from fdp_flower.privacy.site_policy import (
    KNOWN_NODE_KEYS,
    SITE_KEYS,
    SitePolicy,
    SitePolicyError,
    check_node_config_keys,
    nearest_node_key,
)
from tests.test_faults import task_identity  # noqa: F401  (autouse fixture: Flower's task identity)
from tests.test_site_privacy import call_train, context, node_file, node_scenario, train_message


@pytest.mark.parametrize("key, nearest", [
    ("max-esp", "max-eps"), ("max-epsilon", "max-eps"), ("Max-Eps", "max-eps"), ("max_eps", "max-eps"),
    ("MAX_DELTA", "max-delta"), ("maxdelta", "max-delta"), ("neighboring", "neighbouring"),
    ("allow-non-private", "allow-nonprivate"), ("allow_seeded_noise", "allow-seeded-noise"),
    ("noise-secret", "noise-secret-file"), ("ledger-directory", "ledger-dir"),
    ("datapath", "data-path"), ("data_path", "data-path"), ("partition_id", "partition-id"),
    ("num-partition", "num-partitions"),
])
def test_a_misspelled_key_is_refused_naming_the_nearest_known_key(key, nearest):
    assert nearest_node_key(key) == nearest
    with pytest.raises(SitePolicyError) as info:
        SitePolicy.from_node_config({"partition-id": 0, "data-path": "/x.npz", key: 0.3})
    assert str(info.value).startswith(f"node config key {key!r} is not known; did you mean {nearest!r}? ")
    assert "\n" not in str(info.value)


def test_a_key_far_from_every_known_key_lists_the_known_keys():
    with pytest.raises(SitePolicyError) as info:
        check_node_config_keys({"batch-size": 32})
    assert str(info.value).startswith("node config key 'batch-size' is not known; known keys: max-eps, max-delta, ")
    assert all(k in str(info.value) for k in KNOWN_NODE_KEYS)


def test_every_known_key_is_accepted_and_read():
    config = {"partition-id": 1, "num-partitions": 3, "data-path": "/d.npz", "max-eps": 0.3, "max-delta": 1e-6,
              "neighbouring": "add_remove", "allow-nonprivate": False, "ledger-dir": "/l"}
    assert set(SITE_KEYS) <= set(KNOWN_NODE_KEYS)
    policy = SitePolicy.from_node_config(config)
    assert (policy.max_eps, policy.max_delta, policy.neighbouring) == (0.3, 1e-6, "add_remove")
    check_node_config_keys({})  # Flower's own empty node config


@pytest.mark.parametrize("key", ["max-esp", "max-epsilon", "Max-Eps"])
def test_the_real_client_app_refuses_a_misspelled_cap_and_releases_nothing(tmp_path, monkeypatch, key):
    """The issue's three spellings, through the ClientApp a SuperNode runs: an error reply naming max-eps, no
    released value and no ledger (before the check the same message released at the default cap eps = 10)."""
    sc, path = node_scenario(), node_file(tmp_path)
    ledger_dir = tmp_path / "ledger"
    reply = call_train(monkeypatch, sc, context(path, ledger_dir, **{key: 0.3}), train_message(sc, 1))
    assert reply.has_error() and not reply.has_content()
    assert reply.error.reason.startswith(f"node config key {key!r} is not known; did you mean 'max-eps'?")
    assert not ledger_dir.exists()
    # the same site with the key spelled right releases (the check above can fail)
    ok = call_train(monkeypatch, sc, context(path, ledger_dir, **{"max-eps": 3.0}), train_message(sc, 1))
    assert not ok.has_error() and dict(ok.content["site"])["max-eps"] == 3.0


def test_a_misspelled_data_path_is_refused_too(tmp_path, monkeypatch):
    """Without the check, ``datapath=...`` made the node look not node-local: no site policy at all."""
    sc, path = node_scenario(), node_file(tmp_path)
    ctx = context(path, tmp_path / "ledger")
    ctx.node_config["datapath"] = ctx.node_config.pop("data-path")
    reply = call_train(monkeypatch, sc, ctx, train_message(sc, 1))
    assert reply.has_error() and "did you mean 'data-path'?" in reply.error.reason
    assert not (tmp_path / "ledger").exists()
