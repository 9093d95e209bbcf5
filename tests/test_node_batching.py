"""A node hosting several simulated clients gets one message a round carrying all of them and replies
once: the iterates, ledger and failures are those of the in-process engine (one client per message),
and a client the node refuses fails alone while a failed node fails every client it carried."""
from __future__ import annotations

import warnings

import numpy as np

from fdp_flower.algorithms.fdp_admm.site import site_features
from fdp_flower.clients import fdp_admm as client_worker
from fdp_flower.engines.inprocess import run_fdp_admm
from fdp_flower.wire import BASIS_PREFIX, CLIENTS_KEY, pack_arrays
from tests.test_faults import FakeGrid, error_reply, scenario, task_identity  # noqa: F401  (fixture)

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import Message, MetricRecord, RecordDict

NODES = [1, 2]  # 2 SuperNodes for the scenario's 6 clients: clients 0, 2, 4 on node 1 and 1, 3, 5 on node 2


def _run(sc, behaviour=None, grid=None):
    from fdp_flower.algorithms.fdp_admm.setup import simulation_setup
    from fdp_flower.strategies.fdp_admm import FDPADMMStrategy
    from fdp_flower.wire import pack_arrays

    sizes, basis, *_rest, evaluator = simulation_setup(sc, with_reference=False)
    strategy = FDPADMMStrategy(sc, basis, evaluate_state=evaluator, partition_sizes=sizes)
    grid = grid or FakeGrid(sc, behaviour, nodes=list(NODES))
    strategy.start(grid=grid, initial_arrays=pack_arrays(global_w=np.zeros(basis.n_components)),
                   num_rounds=sc.algorithm.rounds)
    return strategy, grid


def _rounds(grid):
    return [int(m.content["config"]["round"]) for m in grid.sent]


def test_two_nodes_six_clients_two_messages_a_round_equal_to_the_inprocess_engine():
    sc = scenario(privacy={"enabled": True, "eps": 2.0, "delta": 1e-5})
    strategy, grid = _run(sc)
    rounds = sc.algorithm.rounds
    assert _rounds(grid) == [r for r in range(1, rounds + 1) for _ in NODES]  # exactly 2 messages a round
    assert len(grid.replies) == 2 * rounds and not any(r.has_error() for r in grid.replies)
    for msg in grid.sent:
        node = msg.metadata.dst_node_id
        carried = list(msg.content["config"][CLIENTS_KEY])
        assert carried == [c for c in range(6) if c % 2 == node - 1]
        names = set(msg.content["arrays"].keys())
        assert {n for n in names if not n.startswith(BASIS_PREFIX)} == {"req.point"}  # the point, nothing else
        assert msg.content["arrays"]["req.point"].numpy().shape == (3, 4)
        assert any(n.startswith(BASIS_PREFIX) for n in names) == (int(msg.content["config"]["round"]) == 1)
    for reply in grid.replies:  # one release row and one metric entry per client, nothing else
        assert set(reply.content.keys()) == {"arrays", "metrics"}
        assert reply.content["arrays"]["release"].numpy().shape == (3, 4)
        assert all(len(v) == 3 for v in reply.content["metrics"].values())
        assert {"partition-id", "num-examples", "sensitivity", "sigma"} <= set(reply.content["metrics"]) \
            <= {"partition-id", "num-examples", "sensitivity", "sigma", "clipped-rows"}
    local = run_fdp_admm(sc, with_reference=False)
    for name in ("global_w", "duals", "noisy_primals"):
        np.testing.assert_allclose(getattr(strategy.state, name), getattr(local.state, name), rtol=0, atol=1e-10)
    key = lambda r: (r["round"], r["client"])  # noqa: E731
    assert sorted(strategy.ledger.to_rows(), key=key) == sorted(local.ledger.to_rows(), key=key)
    assert not strategy.failures and [int(m) for m in strategy.server.sizes] == local.sample_sizes


def test_a_refused_client_fails_alone_and_a_failed_node_fails_all_it_carried(monkeypatch):
    """Client 2's data cannot be read in round 3 (its node replies error.2, the others release);
    node 2 (clients 1, 3, 5) answers round 4 with an error reply; node 1's round-5 reply is lost."""
    sc = scenario(faults={"quorum": 0.3})
    real = client_worker.node_features
    state = {"round": 0}

    def features(context, scenario_, partition, basis, digest):
        if partition == 2 and state["round"] == 3:
            raise ValueError(f"partition {partition}: the data file is unreadable")
        return real(context, scenario_, partition, basis, digest)

    monkeypatch.setattr(client_worker, "node_features", features)

    class Grid(FakeGrid):
        def send_and_receive(self, messages, *, timeout=None):
            messages = list(messages)
            if messages:  # the evaluate step of a round sends none
                state["round"] = int(messages[0].content["config"]["round"])
            return super().send_and_receive(messages, timeout=timeout)

    def behaviour(rnd, _client, msg, reply):
        node = msg.metadata.dst_node_id
        if rnd == 4 and node == 2:
            return error_reply(msg)
        return None if rnd == 5 and node == 1 else reply

    grid = Grid(sc, behaviour, nodes=list(NODES))
    strategy, _ = _run(sc, grid=grid)
    refused = [r for r in grid.replies if not r.has_error() and "errors" in r.content]
    assert len(refused) == 1 and list(refused[0].content["errors"]["partition-id"]) == [2]
    assert "unreadable" in refused[0].content["errors"]["reason"][0]
    assert list(refused[0].content["metrics"]["partition-id"]) == [0, 4]  # the others released
    fails = [(f.round, f.client, f.charged) for f in strategy.failures]
    assert fails == [(3, 2, False), (4, 1, False), (4, 3, False), (4, 5, False),
                     (5, 0, True), (5, 2, True), (5, 4, True)]  # refused or raised: not released; lost: charged
    assert "unreadable" in strategy.failures[0].reason and "timeout" in strategy.failures[-1].reason
    assert [row["failed_clients"] for row in strategy.history] == [0, 0, 1, 3, 3, 0]
    assert strategy.state.round == sc.algorithm.rounds


def test_a_batched_reply_naming_another_client_is_rejected_for_every_client_it_carried():
    sc = scenario(privacy={"enabled": True, "eps": 2.0, "delta": 1e-5}, faults={"quorum": 0.3})

    def behaviour(rnd, _client, msg, reply):
        if rnd != 2 or msg.metadata.dst_node_id != 1:
            return reply
        metrics = {k: list(v) for k, v in reply.content["metrics"].items()}
        metrics["partition-id"][0] = 1  # client 1 lives on node 2
        return Message(RecordDict({"arrays": reply.content["arrays"], "metrics": MetricRecord(metrics)}),
                       reply_to=msg)

    strategy, _ = _run(sc, behaviour)
    fails = [(f.round, f.client, f.charged) for f in strategy.failures]
    assert fails == [(2, 0, True), (2, 2, True), (2, 4, True)]  # they may have been released: charged
    assert len(strategy.ledger.releases) == sc.algorithm.rounds * 6


def test_a_batched_reply_leaving_a_client_out_fails_that_client_alone_and_charges_it():
    sc = scenario(privacy={"enabled": True, "eps": 2.0, "delta": 1e-5}, faults={"quorum": 0.3})

    def behaviour(rnd, _client, msg, reply):
        if rnd != 3 or msg.metadata.dst_node_id != 2:
            return reply
        metrics = {k: list(v)[1:] for k, v in reply.content["metrics"].items()}  # client 1's row dropped
        arrays = pack_arrays(release=reply.content["arrays"]["release"].numpy()[1:])
        return Message(RecordDict({"arrays": arrays, "metrics": MetricRecord(metrics)}), reply_to=msg)

    strategy, _ = _run(sc, behaviour)
    assert [(f.round, f.client, f.charged) for f in strategy.failures] == [(3, 1, True)]
    assert "no release for client 1" in strategy.failures[0].reason
    assert len(strategy.ledger.releases) == sc.algorithm.rounds * 6


def test_the_stacked_site_function_equals_each_client_alone_and_refuses_clients_alone():
    """The site function answers a node's clients as one stacked array operation: with unequal sizes
    (a padded, masked stack) each client's release equals its answer alone to rounding; a client sent a
    bad point, or refused by the site when its noise is asked for, fails alone."""
    from fdp_flower.algorithms.fdp_admm import plan
    from fdp_flower.algorithms.fdp_admm.site import SiteData, answer
    from fdp_flower.algorithms.protocol import SiteRequest
    from fdp_flower.privacy.mechanisms import run_noise
    from fdp_flower.privacy.site_policy import SiteRefusal

    sc = scenario(privacy={"enabled": True, "eps": 2.0, "delta": 1e-5}, data={"n_samples": 605})
    basis = plan.build_basis(sc)
    dim = basis.n_components
    rng = np.random.default_rng(11)
    rows, sizes = [], set()
    for partition in range(6):
        data = plan.load_partition(sc, partition)
        features, clipped = site_features(sc, basis, data)
        sizes.add(features.shape[0])
        rows.append((features, data.response, clipped))
    assert len(sizes) > 1  # 605 curves on 6 clients: unequal slices
    site = SiteData.stack(range(6), [f for f, _, _ in rows], [y for _, y, _ in rows], [c for _, _, c in rows])
    calibration, seeded = plan.site_plan(sc, basis), run_noise(sc.seed)
    requests = [SiteRequest(i, 3, {"point": rng.normal(size=dim)}) for i in range(6)]
    together = answer(requests, site, calibration, seeded)
    for i, release in enumerate(together):
        alone_site = SiteData.stack([i], [rows[i][0]], [rows[i][1]], [rows[i][2]])
        (alone,) = answer([requests[i]], alone_site, calibration, seeded)
        np.testing.assert_allclose(release.value, alone.value, rtol=0, atol=1e-12)
        assert (release.client, release.num_examples, release.event) == (alone.client, alone.num_examples, alone.event)

    requests[1] = SiteRequest(1, 3, {"point": np.full(dim, np.nan)})
    asked = []

    def noise(events):
        asked.append(events[0].client)
        if events[0].client == 4:
            raise SiteRefusal("client 4: over the site's max-eps")
        return seeded(events)

    replies = answer(requests, site, calibration, noise)
    assert isinstance(replies[1], ValueError) and "point contains NaN" in str(replies[1])
    assert isinstance(replies[4], SiteRefusal)
    assert asked == [0, 2, 3, 4, 5]  # the bad client's noise is never asked for
    for i in (0, 2, 3, 5):
        np.testing.assert_allclose(replies[i].value, together[i].value, rtol=0, atol=1e-12)
