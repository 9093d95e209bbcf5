"""A node's cache: the basis travels once per node and run (kept in the node's context), features are
computed once per run (kept in the node's owner-only cache file), neither is ever in a reply, and a
client imports only what it needs."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
import warnings
from pathlib import Path

import numpy as np

from fdp_flower.algorithms.fdp_admm.site import site_features
from fdp_flower.algorithms.fdp_admm import plan
from fdp_flower.algorithms.fdp_admm.config import parse_scenario
from fdp_flower.clients import fdp_admm as client
from fdp_flower.wire import BASIS_DIGEST_KEY, BASIS_MISSING, BASIS_PREFIX
from tests.test_faults import FakeGrid, run_strategy, task_identity  # noqa: F401  (fixture)

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import Context, RecordDict

M, N, K = 3, 90, 4


def scenario(rounds: int = 4):
    return parse_scenario({"seed": 4, "data": {"n_samples": N, "grid_points": 21}, "federation": {"num_clients": M},
                           "basis": {"kind": "fixed", "n_components": K}, "algorithm": {"rounds": rounds}})


def test_the_basis_travels_once_per_node_and_the_features_are_computed_once(monkeypatch):
    sc = scenario()
    client._PROCESS_CACHE.clear()
    loads = []
    real_load = client.load_partition
    monkeypatch.setattr(client, "load_partition", lambda s, i, path=None: loads.append(i) or real_load(s, i, path))
    strategy, grid = run_strategy(sc)
    assert len(strategy.history) == sc.algorithm.rounds and not strategy.failures
    with_basis = [m.metadata.dst_node_id for m in grid.sent
                  if any(k.startswith(BASIS_PREFIX) for k in m.content["arrays"].keys())]
    assert sorted(with_basis) == [1, 2, 3]  # each node's first message only
    assert all(m.content["config"][BASIS_DIGEST_KEY] == strategy.basis_digest for m in grid.sent)
    assert sorted(loads) == [0, 1, 2]  # each partition generated and projected once in 4 rounds
    for reply in grid.replies:  # the cache never leaves the node
        assert set(reply.content.keys()) == {"arrays", "metrics"}
        assert set(reply.content["arrays"].keys()) == {"release"}
    state = grid.contexts[1].state  # the node's state holds the basis only: Flower copies it per message
    assert set(state.keys()) == {"fdp-basis", "fdp-basis-digest"}
    expected, _clipped = site_features(sc, strategy.basis, real_load(sc, 0))
    client._PROCESS_CACHE.clear()  # a new ClientApp process (a deployment's next message) reads the node's file
    features, _, _ = client.node_features(grid.contexts[1], sc, 0, strategy.basis, strategy.basis_digest)
    np.testing.assert_array_equal(features, expected)
    assert sorted(loads) == [0, 1, 2]  # read from the file, not generated again
    cached = sorted((Path(os.environ["FLWR_HOME"]) / client.FEATURE_CACHE_SUBDIR).rglob("*"))
    assert [p.suffix for p in cached if p.is_file()] == [".npz"] * M
    assert all(p.stat().st_mode & 0o077 == 0 for p in cached if p.is_file() or p.name.startswith("run-"))


def test_a_node_hosting_several_clients_keeps_one_cache_file_read_once_a_message(monkeypatch):
    """2 nodes x 3 clients (one batched message per node and round): one file per node holding its 3
    clients; a new ClientApp process reads it once for the whole message and generates nothing."""
    sc = parse_scenario({"seed": 4, "data": {"n_samples": 2 * N, "grid_points": 21},
                         "federation": {"num_clients": 6}, "basis": {"kind": "fixed", "n_components": K},
                         "algorithm": {"rounds": 3}})
    client._PROCESS_CACHE.clear()
    loads, reads, writes = [], [], []
    real_load, real_read, real_write = client.load_partition, client._read_cached, client._write_cached
    monkeypatch.setattr(client, "load_partition", lambda s, i, path=None: loads.append(i) or real_load(s, i, path))
    monkeypatch.setattr(client, "_read_cached", lambda path, key: reads.append(path) or real_read(path, key))
    monkeypatch.setattr(client, "_write_cached", lambda path, key, e: writes.append(path) or real_write(path, key, e))

    class TwoNodes(FakeGrid):
        def __init__(self, sc_):
            super().__init__(sc_, nodes=[1, 2])

    strategy, grid = _run(sc, TwoNodes)
    assert not strategy.failures and sorted(loads) == list(range(6))
    assert len(writes) == 2  # each node writes its file once, in round 1, for its 3 clients
    files = sorted((Path(os.environ["FLWR_HOME"]) / client.FEATURE_CACHE_SUBDIR / "run-1").glob("node-*.npz"))
    assert [f.name.split("-")[1] for f in files] == ["1", "2"]  # one file per node
    for path in files:
        node = int(path.name.split("-")[1])
        with np.load(path) as stored:
            assert list(stored["partitions"]) == [c for c in range(6) if c % 2 == node - 1]
            assert stored["features"].shape == (3 * 2 * N // 6, K) and stored["offsets"][-1] == 3 * 2 * N // 6
        for c in range(node - 1, 6, 2):  # each client's rows are its own features
            expected, _ = site_features(sc, strategy.basis, real_load(sc, c))
            entry = client._read_cached(path, client._cache_key(grid.contexts[node], sc, strategy.basis_digest))[c]
            np.testing.assert_array_equal(entry[0], expected)
    loads.clear()
    reads.clear()
    client._PROCESS_CACHE.clear()  # the next message's new ClientApp process
    train = next(m for m in grid.sent if m.metadata.dst_node_id == 1 and int(m.content["config"]["round"]) == 2)
    reply = client.handle_fdp_admm_train(train, grid.contexts[1], sc)
    assert not reply.has_error() and reply.content["arrays"]["release"].numpy().shape == (3, K)
    assert loads == [] and len(reads) == 1


def test_a_node_given_a_new_client_adds_it_to_its_file_and_keeps_the_others():
    sc = scenario()
    basis = plan.build_basis(sc)
    ctx = Context(run_id=9, node_id=1, node_config={}, state=RecordDict(), run_config={})
    client._PROCESS_CACHE.clear()
    client.load_node_features(ctx, sc, [0, 1], basis, "sha256:a")
    client._PROCESS_CACHE.clear()  # a new process is asked for client 2 as well (e.g. a reassignment)
    third, _, _ = client.node_features(ctx, sc, 2, basis, "sha256:a")
    (cache_file,) = (Path(os.environ["FLWR_HOME"]) / client.FEATURE_CACHE_SUBDIR / "run-9").iterdir()
    stored = client._read_cached(cache_file, client._cache_key(ctx, sc, "sha256:a"))
    assert sorted(stored) == [0, 1, 2]
    for c in range(3):
        np.testing.assert_array_equal(stored[c][0], site_features(sc, basis, plan.load_partition(sc, c))[0])
    np.testing.assert_array_equal(stored[2][0], third)


def test_a_node_that_lost_its_cache_refuses_and_is_sent_the_basis_again():
    sc = scenario(rounds=3)

    class ForgetfulGrid(FakeGrid):
        """Node 2 loses its context (state) after round 1."""

        def send_and_receive(self, messages, *, timeout=None):
            messages = list(messages)
            if messages and int(messages[0].content["config"]["round"]) == 2:
                self.contexts.pop(2, None)
            return super().send_and_receive(messages, timeout=timeout)

    strategy, grid = _run(sc, ForgetfulGrid)
    errors = [r for r in grid.replies if r.has_error()]
    assert len(errors) == 1 and errors[0].error.reason.startswith(BASIS_MISSING)
    assert [(f.round, f.client, f.charged) for f in strategy.failures] == [(2, 1, False)]  # nothing released
    round3_to_node2 = [m for m in grid.sent if m.metadata.dst_node_id == 2
                       and int(m.content["config"]["round"]) == 3]
    assert any(k.startswith(BASIS_PREFIX) for k in round3_to_node2[0].content["arrays"].keys())
    assert strategy.history[-1]["failed_clients"] == 0


def _run(sc, grid_cls):
    from fdp_flower.algorithms.fdp_admm.setup import simulation_setup
    from fdp_flower.strategies.fdp_admm import FDPADMMStrategy
    from fdp_flower.wire import pack_arrays

    sizes, basis, *_rest, evaluator = simulation_setup(sc, with_reference=False)
    strategy = FDPADMMStrategy(sc, basis, evaluate_state=evaluator, partition_sizes=sizes)
    grid = grid_cls(sc)
    strategy.start(grid=grid, initial_arrays=pack_arrays(global_w=np.zeros(K)), num_rounds=sc.algorithm.rounds)
    return strategy, grid


def test_a_stale_cache_is_not_reused_for_another_basis():
    sc = scenario()
    basis_a = plan.build_basis(sc)
    basis_b = plan.build_basis(parse_scenario({**sc.model_dump(mode="json"),
                                                "basis": {"kind": "fixed", "n_components": K, "family": "fourier"}}))
    ctx = Context(run_id=1, node_id=1, node_config={"partition-id": 0, "num-partitions": M}, state=RecordDict(),
                  run_config={})
    fa, _, _ = client.node_features(ctx, sc, 0, basis_a, "sha256:a")
    fb, _, _ = client.node_features(ctx, sc, 0, basis_b, "sha256:b")
    data = plan.load_partition(sc, 0)
    np.testing.assert_array_equal(fa, site_features(sc, basis_a, data)[0])
    np.testing.assert_array_equal(fb, site_features(sc, basis_b, data)[0])
    assert not np.allclose(fa, fb)


def test_an_unreadable_cache_file_is_recomputed_and_rewritten():
    sc = scenario()
    basis = plan.build_basis(sc)
    ctx = Context(run_id=5, node_id=2, node_config={"partition-id": 1, "num-partitions": M}, state=RecordDict(),
                  run_config={})
    client._PROCESS_CACHE.clear()
    first, _, _ = client.node_features(ctx, sc, 1, basis, "sha256:a")
    (cache_file,) = (Path(os.environ["FLWR_HOME"]) / client.FEATURE_CACHE_SUBDIR / "run-5").iterdir()
    cache_file.write_bytes(b"not an npz file")
    client._PROCESS_CACHE.clear()
    again, _, _ = client.node_features(ctx, sc, 1, basis, "sha256:a")
    np.testing.assert_array_equal(again, first)
    with np.load(cache_file) as stored:  # rewritten
        np.testing.assert_array_equal(stored["features"], first)
        assert list(stored["partitions"]) == [1]


def test_the_client_app_imports_no_plotting_fda_or_scipy():
    # ... also not when it simulates its slice (the paper design's t(3) quantile shift)
    code = ("import sys, fdp_flower.client_app, fdp_flower.clients.fdp_admm\n"
            "from fdp_flower.algorithms.fdp_admm import plan\n"
            "from fdp_flower.algorithms.fdp_admm.config import parse_scenario\n"
            "plan.load_partition(parse_scenario({'data': {'n_samples': 60, 'grid_points': 11}, "
            "'federation': {'num_clients': 3}}), 1)\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('matplotlib', 'skfda', 'scipy', 'dp_accounting', 'pandas', 'sklearn'))\n"
            "assert not heavy, heavy\n"
            "other = sorted(m for m in sys.modules if m.startswith(('fdp_flower.algorithms.p2p', "
            "'fdp_flower.algorithms.gradient_admm', 'fdp_flower.clients.p2p', 'fdp_flower.clients.gradient_admm')))\n"
            "assert not other, other\n")
    subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", code], check=True,
                   cwd=Path(__file__).resolve().parents[1])


def test_the_scenario_is_parsed_once_per_run(monkeypatch):
    from fdp_flower.algorithms import registry
    from fdp_flower.clients import common

    calls = []
    monkeypatch.setattr(registry, "any_scenario_from_run_config", lambda cfg: calls.append(cfg) or scenario())
    run_config = {"scenario": f"unused-{uuid.uuid4().hex}.yaml"}
    for node in (1, 2, 1):
        common.run_scenario(Context(run_id=7, node_id=node, node_config={}, state=RecordDict(),
                                    run_config=run_config))
    common.run_scenario(Context(run_id=8, node_id=1, node_config={}, state=RecordDict(), run_config=run_config))
    assert len(calls) == 2  # run 7 once, run 8 once
