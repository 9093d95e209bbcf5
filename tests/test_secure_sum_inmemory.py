"""The whole SecAgg+ protocol in one process (fast): secure_integer_sum's workflow and shim strategy
against the spike app's real ClientApp (secure_sum_guard + Flower's secaggplus_mod + the share
handler) behind an in-memory grid with one Context per node.  The sum is the in-process sum bit for
bit; dropouts within t keep the round, beyond t refuse it (the Flower runtime version of these
checks is tests/test_secure_sum_flower.py)."""
from __future__ import annotations

import copy
import importlib
import sys
import uuid
import warnings
from pathlib import Path

import numpy as np
import pytest

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    from flwr.app import Context, Error, Message, RecordDict

from fdp_flower.strategies.secure_sum import SecureSumRefused, secure_integer_sum

APP = Path(__file__).resolve().parents[1] / "benchmarks" / "secure_sum_app"
NODES = [11, 22, 33, 44, 55]  # M = 5; node k holds partition k


@pytest.fixture(autouse=True)
def task_identity():
    from flwr.supercore.task_identity import TaskIdentity

    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 0
    yield
    TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved


def _app():
    if str(APP) not in sys.path:
        sys.path.insert(0, str(APP))
    return importlib.import_module("secure_sum_app.apps")


def _cfg(**overrides) -> dict:
    import tomllib

    cfg = dict(tomllib.loads((APP / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"])
    return cfg | {"num-nodes": len(NODES), "records": 50} | overrides


class InMemoryGrid:
    """Delivers every message to the node's ClientApp (the real one, mods included) at once; a node
    whose app raises replies with an error, like Flower's runtimes."""

    def __init__(self, app, run_config: dict):
        self.app = app
        self.contexts = {n: Context(run_id=1, node_id=n, node_config={"partition-id": k, "num-partitions": len(NODES)},
                                    state=RecordDict(), run_config=run_config) for k, n in enumerate(NODES)}
        self.errors: list[str] = []

    def get_node_ids(self):
        return list(NODES)

    def send_and_receive(self, messages, *, timeout=None):
        replies = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = uuid.uuid4().hex
            delivered = copy.deepcopy(msg)  # a runtime serializes each message: nodes never share records
            try:
                reply = self.app(delivered, self.contexts[msg.metadata.dst_node_id])
            except Exception as exc:  # noqa: BLE001 -- the runtime turns any exception into an error reply
                self.errors.append(str(exc))
                reply = Message(Error(2, str(exc)), reply_to=msg)
            replies.append(reply)
        return replies


def _server_context(cfg) -> Context:
    return Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=cfg)


def test_secure_sum_is_the_inprocess_sum_bit_for_bit_and_leaves_the_callers_state_alone():
    apps = _app()
    cfg = _cfg()
    grid = InMemoryGrid(apps.client, cfg)
    ctx = _server_context(cfg)
    for rnd in (1, 2):
        res = secure_integer_sum(grid, ctx, node_ids=NODES, server_round=rnd, min_contributors=4)
        assert res.total.dtype == np.int64
        assert res.total.tolist() == apps.expected_sum(cfg, rnd, range(len(NODES)))
        assert res.contributors == tuple(NODES) and res.dropped == ()
    assert len(ctx.state.config_records) == 0 and len(ctx.state.array_records) == 0
    assert grid.errors == []


def test_a_dropout_within_t_is_summed_without_it_and_two_beyond_t_are_refused():
    apps = _app()
    cfg = _cfg(drop=1)
    res = secure_integer_sum(InMemoryGrid(apps.client, cfg), _server_context(cfg), node_ids=NODES, server_round=1,
                             min_contributors=4)
    assert res.dropped == (NODES[0],)
    assert res.total.tolist() == apps.expected_sum(cfg, 1, range(1, len(NODES)))
    cfg = _cfg(drop=2)
    with pytest.raises(SecureSumRefused, match="halted"):  # Flower's threshold M - t = 4 > 3 live nodes
        secure_integer_sum(InMemoryGrid(apps.client, cfg), _server_context(cfg), node_ids=NODES, server_round=1,
                           min_contributors=4)
    with pytest.raises(SecureSumRefused, match="3 masked vectors arrived, the round needs 4"):
        secure_integer_sum(InMemoryGrid(apps.client, cfg), _server_context(cfg), node_ids=NODES, server_round=1,
                           min_contributors=4, reconstruction_threshold=2)
    grid = InMemoryGrid(apps.client, cfg)
    with pytest.raises(SecureSumRefused, match="refused at unmasking: 3 nodes contributed"):
        secure_integer_sum(grid, _server_context(cfg), node_ids=NODES, server_round=1, min_contributors=4,
                           reconstruction_threshold=2, server_guard=False)


def test_without_the_guards_flower_releases_an_under_noised_sum():
    """The control of the test above: sites that do not check and a server that does not check
    let Flower unmask the sum of 3 of 5 shares (threshold 2), whose noise is 3/4 of what the
    accounting for t = 1 needs."""
    apps = _app()
    cfg = _cfg(drop=2, **{"site-guard": False})
    res = secure_integer_sum(InMemoryGrid(apps.client, cfg), _server_context(cfg), node_ids=NODES, server_round=1,
                             min_contributors=4, reconstruction_threshold=2, server_guard=False)
    assert len(res.contributors) == 3
    assert res.total.tolist() == apps.expected_sum(cfg, 1, range(2, len(NODES)))


def test_a_server_asking_for_another_grid_is_refused_by_the_sites():
    from fdp_flower.privacy.distributed import FlowerGrid

    apps = _app()
    cfg = _cfg()
    grid = InMemoryGrid(apps.client, cfg)
    with pytest.raises(SecureSumRefused, match="target_range"):
        secure_integer_sum(grid, _server_context(cfg), node_ids=NODES, server_round=1, min_contributors=4,
                           flower_grid=FlowerGrid(quantization_range=2**22))
    assert len(grid.errors) == len(NODES)


def test_driver_arguments_are_checked():
    apps = _app()
    cfg = _cfg()
    grid = InMemoryGrid(apps.client, cfg)
    with pytest.raises(ValueError, match="node_ids"):
        secure_integer_sum(grid, _server_context(cfg), node_ids=[11], server_round=1)
    with pytest.raises(ValueError, match="min_contributors"):
        secure_integer_sum(grid, _server_context(cfg), node_ids=NODES, server_round=1, min_contributors=6)
    with pytest.raises(ValueError, match="reconstruction_threshold"):
        secure_integer_sum(grid, _server_context(cfg), node_ids=NODES, server_round=1, min_contributors=4,
                           reconstruction_threshold=5)
