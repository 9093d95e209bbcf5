"""PollingGrid: push once, pull with a short backing-off poll until every reply is in or the timeout."""
from __future__ import annotations

import time
from types import SimpleNamespace

from fdp_flower.strategies.common import MAX_POLL, PollingGrid, polling


class SlowGrid:
    """Replies to message i become available ``delays[i]`` seconds after the push."""

    def __init__(self, delays):
        self.delays, self.pulls, self.pushed_at = list(delays), 0, None

    def get_node_ids(self):
        return [1, 2]

    def push_messages(self, messages):
        self.pushed_at = time.monotonic()
        return [f"m{i}" for i, _ in enumerate(messages)]

    def pull_messages(self, message_ids):
        self.pulls += 1
        now = time.monotonic() - self.pushed_at
        return [SimpleNamespace(metadata=SimpleNamespace(reply_to_message_id=i)) for i in sorted(message_ids)
                if now >= self.delays[int(i[1:])]]


def test_replies_are_collected_soon_after_they_arrive():
    grid = SlowGrid([0.0, 0.05, 0.3])
    start = time.monotonic()
    replies = PollingGrid(grid).send_and_receive(["a", "b", "c"], timeout=10)
    took = time.monotonic() - start
    assert sorted(r.metadata.reply_to_message_id for r in replies) == ["m0", "m1", "m2"]
    assert took < 0.3 + MAX_POLL + 0.5  # not Flower's 3 s between pulls
    assert grid.pulls >= 3


def test_the_timeout_bounds_the_wait_and_returns_what_arrived():
    grid = SlowGrid([0.0, 60.0])
    start = time.monotonic()
    replies = PollingGrid(grid).send_and_receive(["a", "b"], timeout=0.3)
    assert [r.metadata.reply_to_message_id for r in replies] == ["m0"]
    assert time.monotonic() - start < 0.3 + MAX_POLL + 0.5


def test_only_grids_that_push_and_pull_are_wrapped_and_nothing_is_sent_for_no_messages():
    plain = SimpleNamespace(send_and_receive=lambda messages, timeout=None: [])
    assert polling(plain) is plain
    wrapped = polling(SlowGrid([]))
    assert isinstance(wrapped, PollingGrid) and polling(wrapped) is wrapped
    assert wrapped.get_node_ids() == [1, 2]  # everything else is the wrapped grid's
    assert wrapped.send_and_receive([], timeout=1) == [] and wrapped._grid.pushed_at is None
