"""No raw data or scores leave a client: every message a client sends is inspected.

A whole run on an in-memory grid drives the real client handlers (the functions the ClientApp
calls); every reply must be exactly {release (1 x K floats)} + {partition-id, num-examples,
sensitivity, sigma} (+ clipped-rows only when configured), and the release must be the client's
descent term at the point it was sent plus exactly its calibrated noise.  The setup reply of a run on node-local data carries only
bookkeeping and, for the federated DP basis, the noisy B x B summary -- never an array with one
entry per sample."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from fdp_flower.algorithms.fdp_admm.config import parse_scenario
from fdp_flower.algorithms.fdp_admm.plan import build_objective, load_partition, site_plan
from fdp_flower.algorithms.fdp_admm.site import site_features
from fdp_flower.functional import design
from fdp_flower.privacy.mechanisms import release_rng
from tests.test_faults import FakeGrid, run_strategy, task_identity  # noqa: F401  (fixture)

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict

TRAIN_METRICS = {"partition-id", "num-examples", "sensitivity", "sigma"}
M, N, K = 3, 111, 4  # m_i = 37: no legitimate array has 37 entries


def base(**privacy):
    return parse_scenario({"seed": 9, "data": {"n_samples": N, "grid_points": 21}, "federation": {"num_clients": M},
                           "basis": {"kind": "fixed", "n_components": K}, "algorithm": {"rounds": 3},
                           "privacy": privacy})


def _inspect_train_reply(reply: Message, sc, expect_clipped: bool):
    assert not reply.has_error()
    assert set(reply.content.keys()) == {"arrays", "metrics"}
    arrays = {k: v.numpy() for k, v in reply.content["arrays"].items()}
    assert set(arrays) == {"release"} and arrays["release"].shape == (1, K)
    assert arrays["release"].dtype == np.float64
    metrics = dict(reply.content["metrics"])
    assert set(metrics) == TRAIN_METRICS | ({"clipped-rows"} if expect_clipped else set())
    assert all(len(v) == 1 and np.ndim(v[0]) == 0 for v in metrics.values())  # one scalar each
    return arrays["release"][0], {k: v[0] for k, v in metrics.items()}


@pytest.mark.parametrize("privacy, expect_clipped", [({}, False), ({"report_clipped_rows": True}, True),
                                                     ({"enabled": False}, True)])
def test_every_train_reply_is_exactly_the_release(privacy, expect_clipped):
    sc = base(**privacy)
    strategy, grid = run_strategy(sc)
    assert len(grid.replies) == M * sc.algorithm.rounds
    basis = strategy.basis
    objective = build_objective(sc)
    plan = site_plan(sc, basis)
    for msg, reply in zip(grid.sent, grid.replies):
        primal, metrics = _inspect_train_reply(reply, sc, expect_clipped)
        client, rnd = int(metrics["partition-id"]), int(msg.content["config"]["round"])
        # the released value is the client's descent term at the point it was sent plus exactly its
        # calibrated noise, nothing else (eq. (1.3))
        sent = {k: v.numpy() for k, v in msg.content["arrays"].items()}
        assert {k for k in sent if not k.startswith("basis_")} == {"req.point"}
        data = load_partition(sc, client)
        feats, _ = site_features(sc, basis, data)
        sens, sigma = plan.calibration(rnd, feats.shape[0])
        exact = -objective.loss.mean_subgradient(sent["req.point"][0], feats, data.response)
        assert metrics["num-examples"] == feats.shape[0] == N // M
        if sigma is None:
            np.testing.assert_array_equal(primal, exact)
            assert metrics["sigma"] == 0.0
        else:
            noise = float(sigma) * release_rng(sc.seed, client, rnd).standard_normal(K)
            np.testing.assert_allclose(primal, exact + noise, rtol=0, atol=1e-12)
            assert metrics["sigma"] == pytest.approx(float(sigma), rel=1e-12)
            assert metrics["sensitivity"] == pytest.approx(float(sens), rel=1e-12)


def test_setup_reply_on_node_local_data_carries_no_samples(tmp_path):
    from fdp_flower.clients.node_phase import handle_node_setup_query
    from fdp_flower.functional.node_files import write_node_file

    grid_pts = np.linspace(0, 1, 21)
    data = design.simulate_slice(4, 0, 37, tau=0.5, grid=grid_pts)
    path = write_node_file(tmp_path / "node0.npz", data)
    for basis, arrays_expected in (({"kind": "fixed", "n_components": K}, set()),
                                   ({"kind": "federated_dp", "n_components": K, "pre_basis_size": 8},
                                    {"second_moment", "mean"})):
        sc = parse_scenario({"data": {"kind": "node_files", "grid_points": 21}, "federation": {"num_clients": 2},
                             "basis": basis})
        ctx = Context(run_id=1, node_id=5, node_config={"partition-id": 0, "num-partitions": 2,
                                                        "data-path": str(path)},
                      state=RecordDict(), run_config={})
        query = Message(RecordDict({"config": ConfigRecord({"phase": "node-setup"})}), dst_node_id=5,
                        message_type=MessageType.QUERY)
        reply = handle_node_setup_query(query, ctx, sc)
        arrays = {k: v.numpy() for k, v in reply.content["arrays"].items()}
        metrics = dict(reply.content["metrics"])
        assert set(arrays) == arrays_expected
        for arr in arrays.values():
            assert 37 not in arr.shape and arr.size <= 8 * 8  # B x B summary or B-vector, never per sample
        if arrays:
            assert arrays["second_moment"].shape == (8, 8) and arrays["mean"].shape == (8,)
            assert metrics["sigma"] > 0  # the summary is released with noise
        assert {"partition-id", "num-examples", "grid-digest", "grid-points", "grid-start",
                "grid-stop"} <= set(metrics) <= {"partition-id", "num-examples", "grid-digest", "grid-points",
                                                 "grid-start", "grid-stop", "sensitivity", "sigma", "clipped-rows"}
        assert metrics["num-examples"] == 37 and all(np.ndim(v) == 0 for v in metrics.values())


def test_the_inspector_catches_a_leak():
    """The checks above fail on a reply that carries scores."""
    sc = base()

    def leaky(rnd, client, msg, reply):
        from fdp_flower.wire import pack_arrays

        if rnd == 1:  # honest in round 1 (the server learns who is who), leaks scores from round 2
            return reply
        from flwr.app import MetricRecord

        arrays = pack_arrays(release=reply.content["arrays"]["release"].numpy(), scores=np.ones((37, K)))
        return Message(RecordDict({"arrays": arrays, "metrics": MetricRecord(dict(reply.content["metrics"]))}),
                       reply_to=msg)

    grid = FakeGrid(sc, leaky)
    sent = []
    orig = grid.send_and_receive
    grid.send_and_receive = lambda messages, timeout=None: sent.extend(out := orig(messages, timeout=timeout)) or out
    from fdp_flower.algorithms.fdp_admm.setup import simulation_setup
    from fdp_flower.strategies.fdp_admm import FDPADMMStrategy
    from fdp_flower.wire import pack_arrays

    _s, basis, *_r, ev = simulation_setup(sc, with_reference=False)
    strat = FDPADMMStrategy(sc, basis, partition_sizes=_s, evaluate_state=ev)
    with pytest.raises(Exception, match="quorum lost"):  # every reply rejected: the server refuses them all
        strat.start(grid=grid, initial_arrays=pack_arrays(global_w=np.zeros(K)), num_rounds=2)
    assert strat.state.round == 1 and len(strat.failures) == M
    assert all(f.round == 2 and "'scores'" in f.reason and f.charged for f in strat.failures)
    _inspect_train_reply(sent[0], sc, False)
    with pytest.raises(AssertionError):
        _inspect_train_reply(sent[-1], sc, False)
