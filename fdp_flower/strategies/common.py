"""Server-side helpers shared by the strategies: reply checks, waiting for nodes and replies, results directories."""
from __future__ import annotations

import math
import sys
import threading
import time
from logging import WARNING
from pathlib import Path

from fdp_flower.wire.flwr import Message, MetricRecord, log
from fdp_flower.wire.flwr_server import Grid


class FederationError(RuntimeError):
    """The federation cannot continue (missing or inconsistent replies)."""


def reply_sender(reply: Message, server_round: int, count: int, seen, error: type[Exception]) -> int:
    """The partition id a reply comes from; ``error`` for an error reply or a bad/duplicate id."""
    if reply.has_error():
        raise error(f"round {server_round}: node {reply.metadata.src_node_id} failed: {reply.error.reason}")
    sender = int(reply.content["metrics"]["partition-id"])
    if not 0 <= sender < count or sender in seen:
        raise error(f"round {server_round}: bad or duplicate partition id {sender}")
    return sender


#: The reply record in which a site reports its own totals (:data:`fdp_flower.clients.site.SITE_RECORD`).
SITE_RECORD = "site"


def site_report(reply: Message) -> dict | None:
    """The totals a site reported in ``reply`` (its own ledger: lifetime and run eps by PLD at its
    max-delta, its neighbouring relation, noise source), or None (no site policy: public data)."""
    if reply.has_error() or SITE_RECORD not in reply.content:
        return None
    return {str(k): v for k, v in reply.content[SITE_RECORD].items()}


def round_metrics(history: list[dict], server_round: int) -> MetricRecord | None:
    """The server-side metrics of round ``server_round`` (its row of ``history``; finite numbers only) as
    the :class:`MetricRecord` a Strategy's ``evaluate_fn`` returns, or None when the round has no row.

    Every strategy here computes its metrics on the server while it aggregates (MISE, objective, the
    privacy spent): ``aggregate_train`` returns no metrics and ``Strategy.start(evaluate_fn=...)``
    hands these to Flower, which prints each round once, under "Global evaluation", and keeps them in
    ``Result.evaluate_metrics_serverapp``.
    """
    row = next((r for r in reversed(history) if int(r.get("round", -1)) == server_round), None)
    if row is None:
        return None
    return MetricRecord({k: float(v) for k, v in row.items()
                         if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)})


def run_results_dir(run_config, run_id: int, name: str, tag: str = "flower") -> Path:
    """``<results-dir>/<name>-<tag>-<time>-run<id>``: where a ServerApp writes a run's results
    (``results-dir`` of the run config, default ``results``; ``tag`` "relay" for peer-to-peer)."""
    base = Path(str(run_config.get("results-dir", "") or "results"))
    return base / f"{name}-{tag}-{time.strftime('%Y%m%d-%H%M%S')}-run{run_id}"


def wait_for_nodes(grid: Grid, count: int, *, timeout: float = 120.0, settle: float | None = None) -> int:
    """Wait until ``count`` nodes are connected; with ``settle``, accept fewer (but >= 1) after that long.

    Returns the number of connected nodes.
    """
    start = time.monotonic()
    while True:
        connected = len(list(grid.get_node_ids()))
        waited = time.monotonic() - start
        if connected >= count or (settle is not None and connected >= 1 and waited >= settle):
            return connected
        if waited > timeout:
            raise FederationError(f"only {connected} of {count} nodes connected after {timeout:.0f}s")
        time.sleep(0.2)


def wait_for_simulation_backend(timeout: float = 300.0) -> None:
    """In Flower's simulation runtime, wait until Ray has started before doing heavy work.

    There the ServerApp runs in a thread while the main thread is still importing Ray
    and forking its processes; heavy numpy/SciPy work in this thread during those forks
    has been seen to deadlock the fork (the run then dies with "No heartbeat received").
    A ServerApp on the main thread (deployment, direct calls) returns at once; after
    ``timeout`` seconds the run goes on with a warning.
    """
    if threading.current_thread() is threading.main_thread():
        return
    if "flwr.simulation" not in sys.modules and "ray" not in sys.modules:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ray = sys.modules.get("ray")  # None until imported; no is_initialized while importing
        is_initialized = getattr(ray, "is_initialized", None) if ray is not None else None
        if is_initialized is not None and is_initialized():
            return
        time.sleep(0.2)
    log(WARNING, "Ray did not report itself initialized within %.0fs; going on", timeout)


#: First and longest pause between two pulls of a round's replies (seconds): the poll starts
#: short (a fast round is collected within milliseconds) and backs off to at most this.
FIRST_POLL, MAX_POLL = 0.01, 0.1


class PollingGrid:
    """A :class:`~flwr.serverapp.Grid` whose ``send_and_receive`` pushes the round's messages and
    pulls their replies with a short, backing-off poll (:data:`FIRST_POLL` .. :data:`MAX_POLL`),
    bounded by the round's timeout, instead of the fixed 3 s sleep of Flower's gRPC grid.
    Everything else is the wrapped grid's."""

    def __init__(self, grid: Grid) -> None:
        self._grid = grid

    def __getattr__(self, name):
        return getattr(self._grid, name)

    def send_and_receive(self, messages, *, timeout: float | None = None) -> list[Message]:
        messages = list(messages)
        if not messages:
            return []
        try:
            pending = set(self._grid.push_messages(messages))
        except NotImplementedError:  # a grid that only sends and receives together (a test double)
            return list(self._grid.send_and_receive(messages, timeout=timeout))
        del messages
        deadline = None if timeout is None else time.monotonic() + timeout
        pause, replies = FIRST_POLL, []
        while pending:
            got = list(self._grid.pull_messages(pending))
            replies += got
            pending.difference_update(m.metadata.reply_to_message_id for m in got)
            if not pending or (deadline is not None and time.monotonic() >= deadline):
                break
            wait = pause if deadline is None else min(pause, max(deadline - time.monotonic(), 0.0))
            time.sleep(wait)
            pause = min(2 * pause, MAX_POLL)
        return replies


def polling(grid) -> Grid:
    """``grid`` with :class:`PollingGrid`'s short poll when it can push and pull (a real Flower
    grid); a test double with only ``send_and_receive`` is returned as it is."""
    if isinstance(grid, PollingGrid) or not all(hasattr(grid, a) for a in ("push_messages", "pull_messages")):
        return grid
    return PollingGrid(grid)
