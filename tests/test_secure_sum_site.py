"""The site side of a secure sum without a federation (fdp_flower/clients/secure_sum.py): the
reply carries only the encoded share and data-independent values; the guard refuses a SecAgg+ setup
other than the site's plan and unmasking with fewer than M - t contributors."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    from flwr.app import ConfigRecord, Context, Message, RecordDict
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, RECORD_KEY_STATE, Key, Stage

from fdp_flower.clients.secure_sum import (
    SecureSumSiteRefusal,
    SiteSecureSumPolicy,
    check_secaggplus_setup,
    secure_sum_guard,
    share_reply,
)
from fdp_flower.privacy.distributed import FlowerGrid

POLICY = SiteSecureSumPolicy(sites=5, min_contributors=4)  # t = 1


@pytest.fixture(autouse=True)
def task_identity():
    """Flower's Message constructor reads the process's task identity (set by Flower's runtimes)."""
    from flwr.supercore.task_identity import TaskIdentity

    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 0
    yield
    TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved


def _state(**changes) -> dict:
    g = FlowerGrid()
    return {"clipping_range": g.clipping_range, "target_range": g.quantization_range, "mod_range": g.modulus_range,
            "max_weight": g.max_weight, "sample_num": 5, "share_num": 5, "threshold": 4} | changes


def test_the_planned_setup_passes_and_every_deviation_is_refused():
    check_secaggplus_setup(_state(), POLICY)
    check_secaggplus_setup(_state(threshold=2), POLICY)  # any threshold in (t, M - t] = (1, 4]
    for change in ({"clipping_range": 16.0}, {"target_range": 2**22}, {"mod_range": 2**31}, {"max_weight": 1000.0},
                   {"sample_num": 6}, {"share_num": 3}, {"threshold": 1}, {"threshold": 5}, {"threshold": None}):
        with pytest.raises(SecureSumSiteRefusal, match="refused"):
            check_secaggplus_setup(_state(**change), POLICY)


def test_the_reply_carries_the_encoded_share_and_nothing_data_dependent():
    grid = FlowerGrid()
    share = np.array([5, -7, grid.share_bound, 0])
    request = Message(RecordDict(), dst_node_id=1, message_type="train")
    content = share_reply(request, share, grid).content
    (params,) = content.array_records["fitres.parameters"].to_numpy_ndarrays()
    np.testing.assert_array_equal(params, share * 2.0 * grid.clipping_range)
    assert dict(content.config_records["fitres.metrics"]) == {}
    assert dict(content.metric_records["fitres.num_examples"]) == {"num_examples": 1}
    assert dict(content.config_records["fitres.status"])["message"] == ""
    assert sorted(content.array_records) == ["fitres.parameters"]
    with pytest.raises(ValueError, match="beyond Flower's clip"):
        share_reply(request, np.array([grid.share_bound + 1]), grid)


def _message(stage: str, **configs) -> Message:
    cfg = ConfigRecord({Key.STAGE: stage, **configs})
    return Message(RecordDict({RECORD_KEY_CONFIGS: cfg}), dst_node_id=1, message_type="train")


def _context(state: dict | None = None) -> Context:
    ctx = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})
    if state is not None:
        ctx.state.config_records[RECORD_KEY_STATE] = ConfigRecord(state)
    return ctx


def test_the_guard_refuses_to_unmask_fewer_than_m_minus_t_contributors():
    guard = secure_sum_guard(lambda _ctx: POLICY)
    calls = []

    def next_(msg, ctx):
        calls.append(msg)
        return msg

    guard(_message(Stage.UNMASK, **{Key.ACTIVE_NODE_ID_LIST: [1, 2, 3, 4], Key.DEAD_NODE_ID_LIST: [5]}), _context(),
          next_)
    assert len(calls) == 1
    with pytest.raises(SecureSumSiteRefusal, match="3 nodes contributed"):
        guard(_message(Stage.UNMASK, **{Key.ACTIVE_NODE_ID_LIST: [1, 2, 3], Key.DEAD_NODE_ID_LIST: [4, 5]}),
              _context(), next_)
    assert len(calls) == 1  # nothing passed on


def test_the_guard_checks_the_setup_before_the_share_is_computed():
    guard = secure_sum_guard(lambda _ctx: POLICY)
    calls = []
    msg = _message(Stage.COLLECT_MASKED_VECTORS, **{Key.CIPHERTEXT_LIST: [b"x"], Key.SOURCE_LIST: [2]})
    guard(msg, _context(_state()), lambda m, c: calls.append(m) or m)
    assert len(calls) == 1
    with pytest.raises(SecureSumSiteRefusal, match="target_range"):
        guard(msg, _context(_state(target_range=2**22)), lambda m, c: calls.append(m) or m)
    with pytest.raises(SecureSumSiteRefusal, match="clipping_range"):
        guard(msg, _context(None), lambda m, c: calls.append(m) or m)  # no setup seen: refuse
    assert len(calls) == 1
    # other messages pass through untouched
    plain = Message(RecordDict(), dst_node_id=1, message_type="query")
    assert guard(plain, _context(), lambda m, c: "next") == "next"


def test_policy_arguments_are_checked():
    with pytest.raises(ValueError, match="sites"):
        SiteSecureSumPolicy(sites=1, min_contributors=1)
    with pytest.raises(ValueError, match="min_contributors"):
        SiteSecureSumPolicy(sites=5, min_contributors=6)
