"""The Flower driver of every family's server protocol (:mod:`fdp_flower.algorithms.protocol`).

:class:`ProtocolStrategy` is a Flower ``Strategy`` that only moves requests and releases: each round
it asks the family's :class:`~fdp_flower.algorithms.protocol.ServerProtocol` for its plan, sends every
node one message with the requests of the clients it hosts (:func:`fdp_flower.wire.pack_requests`),
splits each reply into the clients' releases (:func:`fdp_flower.wire.unpack_releases`) and hands them to
the protocol (``accept``, or ``fail`` with whether the release may have been seen), then closes the
round (``end_round``).  What belongs to the transport stays here: which node hosts which client (one
client per node, identified by its first reply, or several simulated clients a node, assigned
round-robin and named), a broadcast the nodes keep (the FDP-ADMM basis, sent until a node has
replied once), error, lost, late and malformed replies, and the short poll.  The round's metrics
go to Flower through its server-side evaluation (``evaluate_fn``): each round is printed once.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from logging import INFO, WARNING
from typing import Callable, Iterable

import numpy as np

from fdp_flower.algorithms.faults import MAY_HAVE_RELEASED, NOT_RELEASED
from fdp_flower.algorithms.protocol import ReleaseRejected, RunStopped, ServerProtocol, SiteRequest
from fdp_flower.strategies.common import SITE_RECORD, FederationError, polling, round_metrics
from fdp_flower.wire import pack_requests, unpack_releases
from fdp_flower.wire.flwr import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, log
from fdp_flower.wire.flwr_server import Grid, Strategy


def error_reply_kind(code: int) -> str:
    """Whether a node's error reply (its ``code``) means nothing was released: the ClientApp raised
    or refused before releasing (codes 1, 2, 6, 7), else it may have been."""
    return NOT_RELEASED if code in (1, 2, 6, 7) else MAY_HAVE_RELEASED


class RunConverged(Exception):
    """Raised by :meth:`ProtocolStrategy.configure_train` once the protocol has ended the run (its
    stopping rule); :meth:`ProtocolStrategy.start` returns normally on it."""


@dataclass
class Broadcast:
    """Arrays every node must hold before it can answer (e.g. the FDP-ADMM basis): sent with a
    node's messages until it has replied once, named by ``digest`` in every message's config
    (``digest_key``); a node that lost it answers with an error whose reason holds ``missing``, and
    is sent it again."""

    arrays: dict[str, np.ndarray]
    digest: str
    digest_key: str
    missing: str
    nodes: set[int] = field(default_factory=set)  # nodes that replied to a message with it


class ProtocolStrategy(Strategy):
    """A Flower ``Strategy`` that drives a family's ``server`` protocol (see the module docstring).

    Parameters
    ----------
    server : ServerProtocol
        The family's server protocol.
    hosts_many_clients : bool
        Whether a node may run several clients (simulated data only; with node-local data each
        node is exactly one client, identified by the partition id of its node config). (default: True)
    broadcast : Broadcast, optional
        Arrays the nodes must hold (default: None).
    route_by_name : bool
        Spread the clients round-robin over the nodes and name every client in its request from the first round,
        whatever the number of nodes (simulated data only: any node can serve any client; a client's request may
        then depend on state that differs between clients that have not replied yet). (default: False)
    """

    def __init__(self, server: ServerProtocol, *, hosts_many_clients: bool = True,
                 broadcast: Broadcast | None = None, route_by_name: bool = False) -> None:
        if route_by_name and not hosts_many_clients:
            raise ValueError("route_by_name needs hosts_many_clients (simulated data)")
        self.server = server
        self.num_clients = server.num_clients
        self.hosts_many_clients = hosts_many_clients
        self.broadcast = broadcast
        self.node_of_client: dict[int, int] = {}
        self.site_reports: dict[int, dict] = {}  # client -> its latest report of its own totals
        self.site_metrics: dict[int, dict] = {}  # client -> the extra metrics of its latest release
        self.round_offset = 0
        #: this round's messages: (message, node, the clients it carries (None: the node's own))
        self._outbox: list[tuple[Message, int, tuple[int | None, ...]]] = []
        self._one_client_per_node: bool | None = False if route_by_name else None
        self._named = route_by_name
        self._live_nodes: set[int] = set()
        self._round_started = time.monotonic()

    # ------------------------------------------------------------------ the protocol's state
    @property
    def ledger(self):
        return self.server.ledger

    @property
    def history(self) -> list[dict]:
        return self.server.history

    @property
    def failures(self):
        return self.server.failures

    @property
    def stop_reason(self) -> str | None:
        return None if self.server.stop_reason in (None, "completed") else self.server.stop_reason

    def resume_from(self, round_: int) -> None:
        """Flower's rounds 1, 2, ... are the protocol's rounds ``round_ + 1``, ...; simulated clients are
        then always named (a node's identity cannot be learnt from a first reply any more)."""
        self.round_offset = round_
        if self.hosts_many_clients:
            self._one_client_per_node, self._named = False, True

    # ------------------------------------------------------------------ messages
    def _assign(self, node_ids: list[int]) -> list[tuple[int, int | None]]:
        """(node, client) pairs to message this round; client None = 'the node's own partition'.

        With at least M nodes, each node is one client, identified by the partition id of its node
        config (learned from its first reply).  With fewer nodes and a simulated data source, clients
        are spread round-robin over the nodes and named in the messages (one message a node).
        """
        if self._one_client_per_node is None:
            self._one_client_per_node = len(node_ids) >= self.num_clients
        if self._one_client_per_node:
            # A client that never replied still has its initial public state, which is exactly what
            # an unnamed request carries: unidentified nodes get that.  A client whose node is gone is
            # not messaged (a failure this round).
            live = set(node_ids)
            known = set(self.node_of_client.values())
            pairs = [(node, c) for c, node in sorted(self.node_of_client.items()) if node in live]
            return pairs + [(node, None) for node in node_ids if node not in known]
        if not self.hosts_many_clients:
            raise FederationError(f"{len(node_ids)} nodes connected but the scenario needs {self.num_clients} "
                                  "(node-local data: one client per node)")
        if not self.node_of_client:
            self.node_of_client = {c: node_ids[c % len(node_ids)] for c in range(self.num_clients)}
        live = set(node_ids)
        return [(self.node_of_client[c], c) for c in range(self.num_clients) if self.node_of_client[c] in live]

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        server_round += self.round_offset  # a resumed run continues the round numbering
        if self.server.finished:
            raise RunConverged(self.server.stop_reason)
        self._round_started = time.monotonic()
        node_ids = sorted(grid.get_node_ids())
        if not node_ids:
            raise FederationError(f"round {server_round}: no nodes connected")
        self._live_nodes = set(node_ids)
        self._named = self._named or len(node_ids) < self.num_clients
        assignment = self._assign(node_ids)
        clients = [c for _, c in assignment]
        plan = self.server.begin_round(None if any(c is None for c in clients) else clients)
        if plan is None:  # the budget guard refused the round (or the run is over)
            raise FederationError(self.server.stop_reason or "the run is over")
        if plan.round != server_round:
            raise FederationError(f"Flower's round {server_round} is the protocol's round {plan.round}")
        by_client = {r.client: r for r in plan.requests}
        unknown = [c for c in range(self.num_clients) if c not in self.node_of_client]
        by_node: dict[int, list[int | None]] = {}
        for node, client in assignment:
            by_node.setdefault(node, []).append(client)
        self._outbox = []
        for node, hosted in by_node.items():
            groups = [[c] for c in hosted] if self._one_client_per_node else [hosted]
            for group in groups:
                requests = []
                for c in group:
                    if c is None:  # an unidentified node: the initial public state, its own partition
                        template = by_client[unknown[0]] if unknown else plan.requests[0]
                        requests.append(SiteRequest(None, plan.round, template.public))
                    else:  # a node that is one client is named only when its identity cannot be learnt
                        named = self._named or not self._one_client_per_node
                        requests.append(SiteRequest(c if named else None, plan.round, by_client[c].public))
                extra, sent = dict(self.request_config()), {}
                if self.broadcast is not None:
                    extra[self.broadcast.digest_key] = self.broadcast.digest
                    # sent until the node has replied once: a node may process one round's messages in
                    # parallel (Flower's simulation runtime), each on its own copy of the node's context
                    if node not in self.broadcast.nodes:
                        sent = self.broadcast.arrays
                content = pack_requests(requests, extra, sent)
                self._outbox.append((Message(content=content, dst_node_id=node, message_type=MessageType.TRAIN),
                                     node, tuple(group)))
        return [msg for msg, *_ in self._outbox]

    def request_config(self) -> dict:
        """Public config entries every train message of the run carries beside its requests (none here)."""
        return {}

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        server_round += self.round_offset
        replied_after = time.monotonic() - self._round_started
        replies = list(replies)
        unattributed: list[str] = []  # kinds of failures of nodes whose client is not yet known
        by_id = {msg.metadata.message_id: (node, clients) for msg, node, clients in self._outbox
                 if msg.metadata.message_id}
        pending = {(node, clients) for _msg, node, clients in self._outbox}
        for reply in replies:
            node = reply.metadata.src_node_id
            entry = by_id.get(reply.metadata.reply_to_message_id)
            if entry is None:
                same_node = [e for e in pending if e[0] == node]
                entry = same_node[0] if len(same_node) == 1 else (node, (None,))
            pending.discard(entry)
            self._take_reply(server_round, reply, entry, unattributed)
        for node, clients in pending:  # no reply before the timeout: it may have been sent and lost
            for client in clients:
                who = client if client is not None else self._client_of_node(node)
                log(WARNING, "round %d: no reply from node %d (client %s) before the timeout", server_round, node, who)
                self._fail(who, "no reply before the timeout", MAY_HAVE_RELEASED, unattributed)
        accepted = set(self.server.accepted_clients())
        for client in range(self.num_clients):
            if client in accepted or client in self.server.failed_clients():
                continue
            if self._one_client_per_node and client not in self.node_of_client:
                # its node never identified it: charged if any unidentified node's failure may have released
                kind = MAY_HAVE_RELEASED if MAY_HAVE_RELEASED in unattributed else NOT_RELEASED
                self.server.fail(client, "no valid reply yet (client not identified)", kind)
            else:  # not messaged: its node is gone
                self.server.fail(client, "node not connected", NOT_RELEASED)
        try:
            self.server.end_round()
        except RunStopped as exc:
            raise FederationError(exc.reason.removeprefix("stopped: ")) from None
        log(INFO, "fdp-flower: round %d/%d done in %.3fs (replies collected after %.3fs)", server_round,
            self.server.rounds_planned, time.monotonic() - self._round_started, replied_after)
        return self.round_arrays(), None  # metrics: server-side, see evaluate_fn

    def round_arrays(self) -> ArrayRecord:
        """What :meth:`aggregate_train` hands back to Flower's loop (nothing: the state is the protocol's)."""
        return ArrayRecord()

    def _fail(self, client: int | None, reason: str, kind: str, unattributed: list[str]) -> None:
        if client is None:
            unattributed.append(kind)
        elif client not in self.server.accepted_clients():
            self.server.fail(client, reason, kind)

    def _take_reply(self, server_round: int, reply: Message, entry: tuple[int, tuple[int | None, ...]],
                    unattributed: list[str]) -> None:
        """Hand every release of one reply to the protocol; an error reply or a malformed one fails every
        client the message carried, a client the node refused fails alone, and so does one it left out
        (charged: it may have been released)."""
        node, clients = entry
        hint = clients[0] if len(clients) == 1 else None
        if reply.has_error():
            reason = reply.error.reason
            if self.broadcast is not None and self.broadcast.missing in reason:  # lost its copy: send it again
                self.broadcast.nodes.discard(node)
            for client in clients:
                who = client if client is not None else self._client_of_node(node)
                log(WARNING, "round %d: node %d (client %s) failed: %s", server_round, node, who,
                    f"error reply (code {reply.error.code}): {reason}".splitlines()[0])
                self._fail(who, f"error reply (code {reply.error.code}): {reason}".splitlines()[0],
                           error_reply_kind(int(reply.error.code)), unattributed)
            return
        try:
            content = reply.content
            site = {str(k): v for k, v in content[SITE_RECORD].items()} if SITE_RECORD in content else None
            releases, refused = unpack_releases(content, server_round, self.server.release_event)
            named = [c for c in clients if c is not None]
            stray = sorted(({c for c, _ in releases} | {c for c, _, _ in refused}) - set(named)) if named else []
            if named and stray:
                raise FederationError(f"the reply names clients {stray} it was not sent")
            if not named and len(releases) + len(refused) > 1:
                raise FederationError("the reply of a one-client message holds several clients")
        except Exception as exc:  # malformed record: any shape of garbage
            reason = str(exc) if isinstance(exc, FederationError) else f"malformed reply ({type(exc).__name__}: {exc})"
            for client in clients:
                who = client if client is not None else self._client_of_node(node)
                log(WARNING, "round %d: node %d (client %s) failed: %s", server_round, node, who,
                    reason.splitlines()[0])
                self._fail(who, reason.splitlines()[0], MAY_HAVE_RELEASED, unattributed)
            return
        answered = set()
        for client, code, reason in refused:
            who = client if client != -1 else (hint if hint is not None else self._client_of_node(node))
            answered.add(who)
            log(WARNING, "round %d: node %d (client %s) failed: error (code %d): %s", server_round, node, who,
                code, reason)
            self._fail(who, f"error reply (code {code}): {reason}".splitlines()[0], error_reply_kind(code),
                       unattributed)
        for client, release in releases:
            answered.add(client)
            try:
                self._route(client, node, hint)
                self.server.accept(release)
            except (FederationError, ReleaseRejected) as exc:
                kind = getattr(exc, "kind", MAY_HAVE_RELEASED)
                who = hint if hint is not None else (client if 0 <= client < self.num_clients else None)
                log(WARNING, "round %d: node %d (client %s) failed: %s", server_round, node, who, exc)
                self._fail(who, str(exc).splitlines()[0], kind, unattributed)
                continue
            self.node_of_client[client] = node
            if self.broadcast is not None:
                self.broadcast.nodes.add(node)
            if site is not None:  # the site's own totals (node-local data)
                self.site_reports[client] = site
            extra = {k: v for k, v in release.metrics.items() if k not in ("sensitivity", "sigma")}
            if extra:
                self.site_metrics[client] = extra
            sigma = float(extra.get("clipped-rows-sigma", 0.0) or 0.0)
            if sigma > 0:  # a count the site chose to release, noised: it joins the client's ledger
                from fdp_flower.privacy.site_policy import clipped_rows_event

                self.server.ledger.record(clipped_rows_event(client, server_round, sigma))
        for client in clients:  # a client the reply leaves out may have been released
            if client is not None and client not in answered:
                self._fail(client, f"the node's reply has no release for client {client}", MAY_HAVE_RELEASED,
                           unattributed)
        if all(c is None for c in clients) and not answered:
            self._fail(self._client_of_node(node), "the node's reply has no release", MAY_HAVE_RELEASED, unattributed)

    def _route(self, client: int, node: int, hint: int | None) -> None:
        """Check that ``client``'s release may come from ``node`` (a :class:`FederationError` rejects it)."""
        if not isinstance(client, int) or not 0 <= client < self.num_clients:
            raise FederationError(f"bad or duplicate partition id {client}")
        if client in self.server.accepted_clients():
            raise FederationError(f"bad or duplicate partition id {client}")
        if hint is not None and client != hint:
            raise FederationError(f"reply names partition {client} but the message was for client {hint}")
        old = self.node_of_client.get(client, node)
        if old != node:
            if hint is None and old not in self._live_nodes:
                # the client's node is gone and it came back as a new node (a restarted SuperNode): this
                # release was computed from an unnamed (initial) request, so it is discarded, but the client
                # is routed to its new node from the next round on
                self.node_of_client[client] = node
                raise FederationError(f"client {client} rejoined from a new node; this reply is discarded "
                                      "(computed without its state), it is messaged again next round")
            raise FederationError(f"client {client} replied from another node")

    def _client_of_node(self, node: int) -> int | None:
        clients = [c for c, n in self.node_of_client.items() if n == node]
        return clients[0] if len(clients) == 1 else None

    # ------------------------------------------------------------------ Flower's loop
    def summary(self) -> None:
        log(INFO, "\t└── %s protocol: %d clients, %d rounds", self.server.family or type(self.server).__name__,
            self.num_clients, self.server.rounds_planned)

    def evaluate_fn(self, server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        """Flower's server-side evaluation (``Strategy.start(evaluate_fn=...)``): round ``server_round``'s
        row of the protocol's history, every ``log_every`` rounds and at the last round; round 0: the
        metrics of the initial state (:meth:`initial_metrics`)."""
        server_round += self.round_offset
        if server_round == self.round_offset:
            if self.round_offset:
                return round_metrics(self.history, server_round)
            initial = self.initial_metrics()
            return None if initial is None else round_metrics([{"round": 0, **initial}], 0)
        if server_round % self.log_every and server_round != self.server.rounds_planned and self.stop_reason is None:
            return None
        return round_metrics(self.history, server_round)

    #: log every this many rounds (the scenario's ``output.log_every``)
    log_every: int = 1

    def initial_metrics(self) -> dict | None:
        """The metrics of the initial state, or None."""
        return None

    def start(self, grid: Grid, initial_arrays: ArrayRecord, num_rounds: int = 3, timeout: float = 3600,
              train_config: ConfigRecord | None = None, evaluate_config: ConfigRecord | None = None,
              evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None):
        """:meth:`Strategy.start` collecting each round's replies with the short poll of
        :class:`~fdp_flower.strategies.common.PollingGrid` (a test double without push/pull is used as is);
        returns None when the protocol ended the run before ``num_rounds``."""
        try:
            return super().start(polling(grid), initial_arrays, num_rounds, timeout, train_config,
                                  evaluate_config, evaluate_fn)
        except RunConverged as exc:
            log(INFO, "fdp-flower: %s", exc)
            return None

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        return []  # all evaluation is server-side

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        for reply in replies:
            if reply.has_error():
                log(WARNING, "evaluate reply with error: %s", reply.error.reason)
        return None


__all__ = ["Broadcast", "ProtocolStrategy", "RunConverged", "error_reply_kind"]
