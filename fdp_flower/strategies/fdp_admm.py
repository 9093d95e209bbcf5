"""FDP-ADMM server strategy (Flower Message API): averaging and dual bookkeeping.

The strategy owns every piece of run state (global w, each client's dual and
last released primal, the privacy ledger); a node keeps only a cache of its own features and
of the basis (:mod:`fdp_flower.clients.fdp_admm`).  Each round it sends every client its own
(w, g_i, wt_i, l) and the basis's digest (the basis itself only in a node's first message), in one
message per node: a node hosting several simulated clients gets them all in one message and replies
once (:data:`fdp_flower.wire.BATCH_CLIENTS_KEY`), each client's release checked on its own; on the
replies it calls the pure server update
:meth:`fdp_flower.algorithms.fdp_admm.update.FDPADMMState.advance`.  Its metrics go through
Flower's server-side evaluation (``evaluate_fn`` of :meth:`Strategy.start`,
:meth:`FDPADMMStrategy.evaluate_fn`): each round is printed once, as a global evaluation.
"""
from __future__ import annotations

import json
import time
import warnings
from logging import ERROR, INFO, WARNING
from pathlib import Path
from typing import Callable, Iterable, Mapping

import numpy as np

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
    from flwr.common.logger import log
    from flwr.serverapp import Grid
    from flwr.serverapp.strategy import Strategy

from fdp_flower.algorithms.faults import (
    MAY_HAVE_RELEASED,
    NOT_RELEASED,
    FailureRecord,
    QuorumLost,
    advance_with_failures,
    charge_on_failure,
    check_primal,
    check_quorum,
)
from fdp_flower.algorithms.fdp_admm.config import Scenario
from fdp_flower.algorithms.fdp_admm.convergence import server_after_round
from fdp_flower.algorithms.fdp_admm.convergence import stop_reason as converged_reason
from fdp_flower.algorithms.fdp_admm.plan import (
    data_source,
    initial_state,
    model_dim,
    noise_plan,
    noise_scales,
    primal_release,
    privacy_columns,
    round_rho,
)
from fdp_flower.algorithms.fdp_admm.setup import simulation_setup
from fdp_flower.algorithms.fdp_admm.update import FDPADMMState
from fdp_flower.functional.fpca import FunctionalBasis
from fdp_flower.outputs.release_journal import JOURNAL_NAME, append_requests, releases_after
from fdp_flower.outputs.results import RunResult, check_output_dir, privacy_headline, rescue_run, write_results
from fdp_flower.privacy import BudgetExhausted, BudgetGuard, GaussianRelease, PrivacyLedger
from fdp_flower.strategies.common import (
    SITE_RECORD,
    FederationError,
    polling,
    round_metrics,
    run_results_dir,
    wait_for_nodes,
)
from fdp_flower.wire import (
    BASIS_DIGEST_KEY,
    BASIS_MISSING,
    BASIS_PREFIX,
    BATCH_CLIENTS_KEY,
    basis_digest,
    pack_arrays,
    unpack_arrays,
)


def _close(reported: float, planned: float) -> bool:
    """|reported - planned| <= 1e-9 |planned| (``np.isclose(reported, planned, rtol=1e-9, atol=0)`` for
    scalars, without its array overhead: checked for every client and round)."""
    return abs(reported - planned) <= 1e-9 * abs(planned)


def _error_reply_failure(code: int, reason: str) -> FederationError:
    """The failure of a client whose node answered with an error (code, reason): nothing was released
    when the ClientApp raised or refused before releasing (codes 1, 2, 6, 7), else it may have been."""
    err = FederationError(f"error reply (code {code}): {reason}".splitlines()[0])
    err.kind = NOT_RELEASED if code in (1, 2, 6, 7) else MAY_HAVE_RELEASED
    return err


class RunConverged(Exception):
    """Raised by :meth:`FDPADMMStrategy.configure_train` once the stopping rule (docs/algorithms.md,
    eq. (1.17)) has ended the run; :meth:`FDPADMMStrategy.start` returns normally on it."""


class FDPADMMStrategy(Strategy):
    """Server side of FDP-ADMM / F-ADMM (Zhou & Xiang 2022; docs/algorithms.md, eqs. (1.4)-(1.5)).

    Parameters
    ----------
    scenario : Scenario
        The parsed run description (rho, rounds, privacy, ...).
    basis : FunctionalBasis
        The public basis, sent to each node once per run (later messages carry its digest).
    evaluate_state : callable, optional
        ``f(state) -> dict`` of metrics logged every round (simulation only:
        the evaluator may see pooled data). (default: None)
    hosts_many_clients : bool
        Whether a node may simulate several clients (simulated data only; with
        node-local data each node is exactly one client). (default: True)
    partition_sizes : sequence of int, optional
        Public m_i of every client, used to charge the calibrated release of a client
        whose reply was lost or rejected before it ever reported its m_i. (default: None)
    on_round : callable, optional
        ``f(strategy)`` called after every applied round (checkpoints). (default: None)

    Faults (``scenario.faults``): an error reply, a missing reply (timeout) or a reply
    rejected by the checks (malformed, non-finite, norm above ``max_primal_norm``,
    wrong sensitivity or sigma, wrong partition) makes that client "failed" for the
    round: it keeps its last released primal and its dual
    (:func:`fdp_flower.algorithms.faults.advance_with_failures`), the failure is logged and
    recorded in ``failures`` (a node's error, lost or malformed reply fails every client its message
    carried; a client in a batched reply's ``errors`` record fails alone), and no exception leaves :meth:`aggregate_train` unless
    fewer than ``quorum`` clients replied (then :class:`FederationError`, which the
    runner turns into a clean stop with results saved).
    """

    def __init__(self, scenario: Scenario, basis: FunctionalBasis, *,
                 evaluate_state: Callable[[FDPADMMState], dict] | None = None,
                 hosts_many_clients: bool = True, partition_sizes=None,
                 on_round: Callable[["FDPADMMStrategy"], None] | None = None) -> None:
        self.hosts_many_clients = hosts_many_clients
        self.partition_sizes = None if partition_sizes is None else [int(m) for m in partition_sizes]
        self.on_round = on_round
        self.failures: list[FailureRecord] = []
        #: this round's messages: (message, node, the clients it carries, whether it is batched)
        self._outbox: list[tuple[Message, int, tuple[int | None, ...], bool]] = []
        self._one_client_per_node: bool | None = None
        self._named = False
        self._guard: BudgetGuard | None = None
        self.scenario = scenario
        self.basis = basis
        self.num_clients = scenario.federation.num_clients
        self.dim = model_dim(scenario, basis)
        self.plan = noise_plan(scenario, basis)
        noise_scales(scenario, basis)  # an ellipsoid clip needs the basis's score variances: fail here
        self.state = initial_state(scenario, self.dim)
        self.evaluate_state = evaluate_state
        self.ledger = PrivacyLedger()
        self.history: list[dict] = []
        self._round_started = time.monotonic()  # reset by each configure_train (round time in the log)
        self.node_of_client: dict[int, int] = {}
        self.sample_sizes: dict[int, int] = {}
        self.clipped_rows: dict[int, int] = {}
        self.site_reports: dict[int, dict] = {}  # client -> its latest report of its own totals
        self.round_offset = 0
        #: journal of requested releases (:mod:`fdp_flower.outputs.release_journal`), when a re-release
        #: would draw new noise (node-local data, or a non-seeded noise source); set by the runner
        self.journal: Path | None = None
        self._basis_arrays = {f"{BASIS_PREFIX}{k}": v for k, v in basis.to_arrays().items()}
        self.basis_digest = basis_digest(basis.to_arrays())
        self._basis_nodes: set[int] = set()  # nodes that replied to a message with the basis in this run
        #: set when the stopping rule (eq. (1.17)) ends the run: "converged: ... after round l"
        self.stop_reason: str | None = None

    def resume_from(self, checkpoint) -> int:
        """Continue a run after ``checkpoint.round`` (:class:`fdp_flower.outputs.checkpoint.Checkpoint`): state,
        ledger, history and failures are restored and Flower's rounds 1, 2, ... become rounds
        ``checkpoint.round + 1``, ..., so every release draws the noise and step of an uninterrupted run.
        Simulated clients are then always named in the messages (the server cannot learn a node's
        identity from a first reply any more: its dual is no longer zero).  Returns the rounds left."""
        self.state = checkpoint.state
        self.ledger.record_many(checkpoint.ledger.releases)
        self.history = list(checkpoint.history)
        self.failures = list(checkpoint.failures)
        self.round_offset = checkpoint.round
        if self.hosts_many_clients:
            self._one_client_per_node, self._named = False, True
        return self.scenario.algorithm.rounds - checkpoint.round

    # ------------------------------------------------------------------ messages
    def summary(self) -> None:
        p = self.scenario.privacy
        log(INFO, "\t├── FDP-ADMM: M=%d clients, K=%d, rho=%g, L=%d rounds", self.num_clients,
            self.basis.n_components, self.scenario.algorithm.rho, self.scenario.algorithm.rounds)
        log(INFO, "\t└── privacy: %s", f"{p.mode} eps={p.eps} delta={p.delta}" if p.enabled else "off (F-ADMM)")

    def _client_payload(self, client: int | None) -> dict[str, np.ndarray]:
        dim = self.dim
        if client is None:  # identity not yet known: only valid while all state is zero
            zeros = np.zeros(dim)
            return {"global_w": self.state.global_w, "dual": zeros, "noisy_primal": zeros}
        return {"global_w": self.state.global_w, "dual": self.state.duals[client],
                "noisy_primal": self.state.noisy_primals[client]}

    def _assign(self, node_ids: list[int]) -> list[tuple[int, int | None]]:
        """(node, client) pairs to message this round; client None = 'the node's own partition'.

        With at least M nodes, each node is one client, identified by the partition id
        of its node config (learned from its first reply).  With fewer nodes (e.g. the
        2 virtual SuperNodes of a default local simulation) and a simulated data source,
        logical clients are spread round-robin over the nodes and named in the message
        (:meth:`configure_train` sends a node all its clients in one message).
        """
        if self._one_client_per_node is None:
            self._one_client_per_node = len(node_ids) >= self.num_clients
        if self._one_client_per_node:
            # A client that never replied still has dual 0 and last primal 0, which is
            # exactly the payload of an unnamed message: unidentified nodes get that.
            # A client whose node is gone is not messaged (a failure this round).
            live = set(node_ids)
            known = set(self.node_of_client.values())
            pairs = [(node, c) for c, node in sorted(self.node_of_client.items()) if node in live]
            return pairs + [(node, None) for node in node_ids if node not in known]
        if not self.hosts_many_clients:
            raise FederationError(
                f"{len(node_ids)} nodes connected but the scenario needs {self.num_clients} "
                f"(node-local data: one client per node)")
        if not self.node_of_client:
            self.node_of_client = {c: node_ids[c % len(node_ids)] for c in range(self.num_clients)}
        live = set(node_ids)
        return [(self.node_of_client[c], c) for c in range(self.num_clients) if self.node_of_client[c] in live]

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        server_round += self.round_offset  # a resumed run continues the round numbering
        if self.stop_reason is not None:
            raise RunConverged(self.stop_reason)
        self._round_started = time.monotonic()
        node_ids = sorted(grid.get_node_ids())
        if not node_ids:
            raise FederationError(f"round {server_round}: no nodes connected")
        self._live_nodes = set(node_ids)
        self._named = self._named or len(node_ids) < self.num_clients
        self._outbox = []
        assignment = self._assign(node_ids)
        self._check_budget(server_round, [client for _, client in assignment])
        if self.journal is not None:  # fsynced before any message leaves
            clients = [c for _, c in assignment]
            targets = range(self.num_clients) if any(c is None for c in clients) else clients
            append_requests(self.journal, [r for r in (self._planned_release(server_round, c) for c in targets)
                                           if r is not None])
        # one message per node: a node hosting several clients runs them all from one message (Flower
        # 1.41 runs each message in its own ClientApp process, one after another on a SuperNode)
        by_node: dict[int, list[int | None]] = {}
        for node, client in assignment:
            by_node.setdefault(node, []).append(client)
        rho = round_rho(self.scenario, self.state)  # rho^l (eq. (1.16))
        for node, clients in by_node.items():
            groups = [[c] for c in clients] if self._one_client_per_node else [clients]
            for group in groups:
                batched = len(group) > 1
                cfg = {"round": server_round, BASIS_DIGEST_KEY: self.basis_digest, "rho": rho}
                if batched:
                    cfg[BATCH_CLIENTS_KEY] = [int(c) for c in group]
                    rows = np.asarray(group, dtype=int)  # row j of duals / noisy_primals: client group[j]
                    payload = {"global_w": self.state.global_w, "duals": self.state.duals[rows],
                               "noisy_primals": self.state.noisy_primals[rows]}
                else:
                    if group[0] is not None and self._named:
                        cfg["partition-id"] = group[0]
                    payload = self._client_payload(group[0])
                # the basis goes with every message to a node until it has replied once: a node may
                # process one round's messages in parallel (Flower's simulation runtime), each on its own
                # copy of the node's context
                basis = {} if node in self._basis_nodes else self._basis_arrays
                content = RecordDict({"arrays": pack_arrays(**payload, **basis), "config": ConfigRecord(cfg)})
                self._outbox.append((Message(content=content, dst_node_id=node, message_type=MessageType.TRAIN),
                                     node, tuple(group), batched))
        return [msg for msg, *_ in self._outbox]

    def _check_release(self, server_round: int, client: int, metrics: MetricRecord) -> GaussianRelease | None:
        m = int(metrics["num-examples"])
        if m < 1:
            raise FederationError(f"client {client}: num-examples {m} < 1")
        eta, sensitivity, sigma = self.plan.release(server_round, m, round_rho(self.scenario, self.state))
        if not _close(float(metrics["sensitivity"]), float(sensitivity)):
            raise FederationError(f"client {client}: reported sensitivity does not match the scenario")
        if sigma is None:
            return None
        if not _close(float(metrics["sigma"]), float(sigma)):
            raise FederationError(f"client {client}: noise sigma {metrics['sigma']} != calibrated {float(sigma)}")
        return primal_release(client, server_round, sensitivity, sigma)

    def _check_budget(self, server_round: int, clients: list[int | None]) -> None:
        """Total-budget mode: refuse the round before anything is sent if a release would exceed it."""
        p = self.scenario.privacy
        if not (p.enabled and p.mode == "total"):
            return
        if self._guard is None:
            self._guard = BudgetGuard(self.ledger, p.eps, p.delta)
        targets = range(self.num_clients) if any(c is None for c in clients) else clients
        planned = [r for r in (self._planned_release(server_round, c) for c in targets) if r is not None]
        try:
            self._guard.check(planned)
        except BudgetExhausted as exc:
            raise FederationError(exc.reason) from None

    def _planned_release(self, server_round: int, client: int) -> GaussianRelease | None:
        """The release ``client`` was asked to make (to charge a lost or rejected reply)."""
        m = self.sample_sizes.get(client)
        if m is None and self.partition_sizes is not None:
            m = self.partition_sizes[client]
        if m is None:
            log(WARNING, "round %d: client %d's m_i is unknown; its possible release cannot be charged",
                server_round, client)
            return None
        _eta, sensitivity, sigma = self.plan.release(server_round, m, round_rho(self.scenario, self.state))
        return None if sigma is None else primal_release(client, server_round, sensitivity, sigma)

    def _client_replies(self, reply: Message, entry: tuple[int, tuple[int | None, ...], bool]
                        ) -> list[tuple[int | None, tuple[Mapping, dict, dict | None] | FederationError]]:
        """(client hint, its (metrics, arrays, site totals) or the error that fails it) for each client
        ``reply`` answers for: an error reply or a malformed batched reply fails every client the message
        carried; a client in a batched reply's ``errors`` record fails alone, and so does one the reply
        leaves out (charged: it may have been released)."""
        node, clients, batched = entry
        if reply.has_error():
            if BASIS_MISSING in reply.error.reason:  # the node lost its cache: send it the basis again
                self._basis_nodes.discard(node)
            err = _error_reply_failure(int(reply.error.code), reply.error.reason)
            return [(c, err) for c in clients]
        try:
            content = reply.content
            site = {str(k): v for k, v in content[SITE_RECORD].items()} if SITE_RECORD in content else None
            if not batched:
                return [(clients[0], (content["metrics"], unpack_arrays(content["arrays"]), site))]
            metrics, arrays = content["metrics"], unpack_arrays(content["arrays"])
            ids = [int(c) for c in metrics["partition-id"]] if "partition-id" in metrics else []
            refused = content["errors"] if "errors" in content else {"partition-id": [], "code": [], "reason": []}
            refused_ids = [int(c) for c in refused["partition-id"]]
            if set(arrays) != {"noisy_primals"} or np.ndim(arrays["noisy_primals"]) != 2 \
                    or len(arrays["noisy_primals"]) != len(ids):
                raise FederationError(f"batched reply: arrays {sorted(arrays)} do not hold one row per released client")
            if any(len(v) != len(ids) for v in metrics.values()) or \
                    not len(refused["code"]) == len(refused["reason"]) == len(refused_ids):
                raise FederationError("batched reply: its metric or error lists differ in length")
            if not set(ids + refused_ids) <= set(clients):
                raise FederationError(f"batched reply names clients {sorted(set(ids + refused_ids) - set(clients))} "
                                      "it was not sent")
            out: list[tuple[int | None, tuple[Mapping, dict, dict | None] | FederationError]] = []
            columns = {k: list(v) for k, v in metrics.items()}
            for row, c in enumerate(ids):  # a client named twice is caught by _accept as a duplicate
                out.append((c, ({k: v[row] for k, v in columns.items()},
                                {"noisy_primal": arrays["noisy_primals"][row]}, site)))
            for c, code, reason in zip(refused_ids, refused["code"], refused["reason"]):
                out.append((c, _error_reply_failure(int(code), str(reason))))
            out += [(c, FederationError(f"the node's reply has no release for client {c}"))
                    for c in clients if c not in ids and c not in refused_ids]
            return out
        except FederationError as exc:
            return [(c, exc) for c in clients]
        except Exception as exc:  # malformed record: any shape of garbage
            err = FederationError(f"malformed reply ({type(exc).__name__}: {exc})".splitlines()[0])
            return [(c, err) for c in clients]

    def _accept(self, server_round: int, metrics: Mapping, arrays: dict, src_node: int, client_hint: int | None,
                dim: int, primals: dict[int, np.ndarray]) -> tuple[int, np.ndarray, GaussianRelease | None]:
        """Check one client's release (its metrics and arrays) from node ``src_node``; a
        :class:`FederationError` (one line) rejects it."""
        try:
            client = int(metrics["partition-id"])
        except Exception as exc:  # malformed record: any shape of garbage
            raise FederationError(f"malformed reply ({type(exc).__name__}: {exc})".splitlines()[0]) from None
        if not 0 <= client < self.num_clients or client in primals:
            raise FederationError(f"bad or duplicate partition id {client}")
        if client_hint is not None and client != client_hint:
            raise FederationError(f"reply names partition {client} but the message was for client {client_hint}")
        old = self.node_of_client.get(client, src_node)
        if old != src_node:
            if client_hint is None and old not in getattr(self, "_live_nodes", {old}):
                # the client's node is gone and it came back as a new node (a restarted SuperNode):
                # this reply was computed from an unnamed (zero) state, so it is discarded, but the
                # client is routed to its new node from the next round on
                self.node_of_client[client] = src_node
                raise FederationError(f"client {client} rejoined from a new node; this reply is discarded "
                                      "(computed without its state), it is messaged again next round")
            raise FederationError(f"client {client} replied from another node")
        if set(arrays) != {"noisy_primal"}:
            raise FederationError(f"client {client}: reply arrays {sorted(arrays)} != ['noisy_primal']")
        check = check_primal(arrays["noisy_primal"], dim, self.scenario.faults.max_primal_norm)
        if not check.ok:
            raise FederationError(f"client {client}: {check.reason}")
        try:
            release = self._check_release(server_round, client, metrics)
        except (KeyError, TypeError, ValueError) as exc:
            raise FederationError(f"client {client}: bad metrics ({type(exc).__name__}: {exc})".splitlines()[0]) \
                from None
        return client, np.asarray(arrays["noisy_primal"], dtype=float), release

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        server_round += self.round_offset  # a resumed run continues the round numbering
        replied_after = time.monotonic() - self._round_started
        replies = list(replies)
        dim = self.dim
        primals: dict[int, np.ndarray] = {}
        releases: list[GaussianRelease] = []
        failed: dict[int, tuple[str, str]] = {}  # client -> (reason, kind)
        unattributed: list[str] = []  # kinds of failures of nodes whose client is not yet known
        by_id = {msg.metadata.message_id: (node, clients, batched) for msg, node, clients, batched in self._outbox
                 if msg.metadata.message_id}
        pending = {(node, clients, batched) for _msg, node, clients, batched in self._outbox}
        for reply in replies:
            node = reply.metadata.src_node_id
            entry = by_id.get(reply.metadata.reply_to_message_id)
            if entry is None:
                same_node = [e for e in pending if e[0] == node]
                entry = same_node[0] if len(same_node) == 1 else (node, (None,), False)
            pending.discard(entry)
            for hint, released in self._client_replies(reply, entry):
                try:
                    if isinstance(released, FederationError):
                        raise released
                    metrics, arrays, site = released
                    client, primal, release = self._accept(server_round, metrics, arrays, node, hint, dim, primals)
                except Exception as exc:  # never crash on a reply
                    kind = getattr(exc, "kind", MAY_HAVE_RELEASED)
                    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                    who = hint if hint is not None else self._client_of_node(node)
                    log(WARNING, "round %d: node %d (client %s) failed: %s", server_round, node, who, reason)
                    if who is not None and who not in primals:
                        failed.setdefault(who, (reason, kind))
                    elif who is None:
                        unattributed.append(kind)
                    continue
                self.node_of_client[client] = node
                self._basis_nodes.add(node)
                self.sample_sizes[client] = int(metrics["num-examples"])
                if site is not None:  # the site's own totals (node-local data)
                    self.site_reports[client] = site
                if "clipped-rows" in metrics:
                    self.clipped_rows[client] = int(metrics["clipped-rows"])
                if release is not None:
                    releases.append(release)
                primals[client] = primal
                failed.pop(client, None)
        for node, clients, _batched in pending:  # no reply before the timeout: it may have been sent and lost
            for client in clients:
                who = client if client is not None else self._client_of_node(node)
                log(WARNING, "round %d: no reply from node %d (client %s) before the timeout", server_round, node,
                    who)
                if who is not None and who not in primals:
                    failed.setdefault(who, ("no reply before the timeout", MAY_HAVE_RELEASED))
                elif who is None:
                    unattributed.append(MAY_HAVE_RELEASED)
        for client in range(self.num_clients):
            if client in primals or client in failed:
                continue
            if self._one_client_per_node and client not in self.node_of_client:
                # its node never identified it: charged if any unidentified node's failure may have released
                kind = MAY_HAVE_RELEASED if MAY_HAVE_RELEASED in unattributed else NOT_RELEASED
                failed[client] = ("no valid reply yet (client not identified)", kind)
            else:  # not messaged: its node is gone
                failed[client] = ("node not connected", NOT_RELEASED)
        replied = np.array([i in primals for i in range(self.num_clients)])
        for release in releases:  # noise was added on the client before the reply
            if release is not None:
                self.ledger.record(release)
        for client, (reason, kind) in sorted(failed.items()):
            charged = charge_on_failure(kind)
            planned = self._planned_release(server_round, client) if charged else None
            if planned is not None:
                self.ledger.record(planned)
            self.failures.append(FailureRecord(server_round, client, reason, planned is not None))
        try:
            check_quorum(replied, self.scenario.faults.quorum, server_round)
        except QuorumLost as exc:
            raise FederationError(str(exc)) from None
        noisy = np.stack([primals.get(i, np.full(dim, np.nan)) for i in range(self.num_clients)])
        rho, previous = round_rho(self.scenario, self.state), self.state
        self.state = advance_with_failures(previous, replied, noisy, rho)
        self.state, control = server_after_round(self.scenario.algorithm, previous, self.state, rho)  # (1.15)-(1.17)
        if control.stop:
            self.stop_reason = converged_reason(server_round)
        eta = np.mean(self.plan.step_size(server_round, np.array([self.sample_sizes[i] for i in primals], dtype=float)))
        row = {"round": server_round, "eta_mean": float(eta), **control.row()}
        if self.evaluate_state is not None:
            row.update(self.evaluate_state(self.state))
        if self.scenario.privacy.enabled:
            row.update(privacy_columns(self.ledger, self.scenario.privacy.delta))
        row["failed_clients"] = int(self.num_clients - replied.sum())
        self.history.append(row)
        if self.on_round is not None:
            self.on_round(self)
        log(INFO, "fdp-flower: round %d/%d done in %.3fs (replies collected after %.3fs)", server_round,
            self.scenario.algorithm.rounds, time.monotonic() - self._round_started, replied_after)
        return pack_arrays(global_w=self.state.global_w), None  # metrics: server-side, see evaluate_fn

    def evaluate_fn(self, server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        """Flower's server-side evaluation (``Strategy.start(evaluate_fn=...)``): round ``server_round``'s
        row of the history (MISE, objective, privacy spent; computed in :meth:`aggregate_train`), every
        ``output.log_every`` rounds and at the last round; round 0: the metrics of the initial state."""
        server_round += self.round_offset
        if server_round == self.round_offset:
            if self.round_offset or self.evaluate_state is None:
                return round_metrics(self.history, server_round)
            return round_metrics([{"round": 0, **self.evaluate_state(self.state)}], 0)
        if server_round % self.scenario.output.log_every and server_round != self.scenario.algorithm.rounds \
                and self.stop_reason is None:
            return None
        return round_metrics(self.history, server_round)

    def start(self, grid: Grid, initial_arrays: ArrayRecord, num_rounds: int = 3, timeout: float = 3600,
              train_config: ConfigRecord | None = None, evaluate_config: ConfigRecord | None = None,
              evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None):
        """:meth:`Strategy.start` collecting each round's replies with the short poll of
        :class:`~fdp_flower.strategies.common.PollingGrid` (a test double without push/pull is used as is);
        returns None when the stopping rule (eq. (1.17)) ended the run before ``num_rounds``."""
        try:
            return super().start(polling(grid), initial_arrays, num_rounds, timeout, train_config, evaluate_config,
                                 evaluate_fn)
        except RunConverged as exc:  # the stopping rule ended the run after its last applied round
            log(INFO, "fdp-flower: %s", exc)
            return None

    def _client_of_node(self, node: int) -> int | None:
        clients = [c for c, n in self.node_of_client.items() if n == node]
        return clients[0] if len(clients) == 1 else None

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        return []  # all evaluation is server-side

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        for reply in replies:
            if reply.has_error():
                log(WARNING, "evaluate reply with error: %s", reply.error.reason)
        return None


def run_fdp_admm_federation(grid: Grid, context: Context, scenario: Scenario) -> None:
    """Run a whole FDP-ADMM federation on ``grid`` and write its results.

    Node-local data (``node_files``): the server never sees data; a setup phase
    (:func:`fdp_flower.strategies.node_phase.node_setup`) learns m_i, checks the
    grids and builds the basis (``federated_dp``: from DP covariance summaries), and
    the history holds only statistics of released values.

    Run config ``resume``: a checkpoint file or results directory of the same scenario
    (:func:`fdp_flower.outputs.checkpoint.check_resumable`); the run continues after its round, from
    its state, ledger and history.  With node-local data the setup phase runs again and its
    releases are charged again (an over-count, never an under-count).
    """
    resume = None
    if str(context.run_config.get("resume", "") or ""):
        from fdp_flower.outputs.checkpoint import (
            CheckpointError,
            check_resumable,
            read_checkpoint,
            resolve_checkpoint_path,
        )

        path = Path(str(context.run_config["resume"]))
        if not path.is_absolute() and not path.exists():
            raise CheckpointError(f"resume={path}: give an absolute path (the ServerApp runs in "
                                  f"{Path.cwd()}, not where `flwr run` was typed)")
        resume = read_checkpoint(path)
        check_resumable(resume, scenario)
    # the results directory is checked before the first release (the setup phase releases too)
    out_dir = check_output_dir(run_results_dir(context.run_config, context.run_id, scenario.name))
    setup = None
    if data_source(scenario).node_local:
        from fdp_flower.strategies.node_phase import ReleasedStatistics, node_setup

        wait_for_nodes(grid, scenario.federation.num_clients)
        setup = node_setup(polling(grid), scenario, timeout=scenario.faults.reply_timeout)
        sizes, basis, evaluator = setup.sizes, setup.basis, ReleasedStatistics()
    else:
        sizes, basis, _features, _responses, _clipped, evaluator = simulation_setup(scenario)

    def checkpoint(strat: FDPADMMStrategy) -> None:
        every = scenario.output.checkpoint_every
        if every and strat.state.round % every == 0:
            from fdp_flower.outputs.checkpoint import CHECKPOINT_NAME, Checkpoint, write_checkpoint

            try:
                write_checkpoint(out_dir / CHECKPOINT_NAME, Checkpoint(
                    scenario, strat.state, strat.ledger, strat.history, strat.failures, engine="flower"))
            except OSError as exc:  # the run goes on; writing its results rescues what is lost
                log(WARNING, "fdp-flower: checkpoint not written (%s)", exc.strerror or exc)

    strategy = FDPADMMStrategy(scenario, basis, evaluate_state=evaluator, partition_sizes=sizes,
                               on_round=checkpoint, hosts_many_clients=setup is None)
    if setup is not None:  # the setup phase's releases (noise added on the clients), routing, site totals
        strategy.ledger.record_many(setup.releases)
        strategy.node_of_client.update(setup.node_of_client)
        strategy.site_reports.update(setup.site_reports)
    if scenario.privacy.enabled and (setup is not None or scenario.privacy.noise_source != "seeded"):
        strategy.journal = out_dir / JOURNAL_NAME
    rounds_left = scenario.algorithm.rounds
    if resume is not None:
        rounds_left = strategy.resume_from(resume)
        if strategy.journal is not None:  # made after the checkpoint by the interrupted run: charged too
            lost = releases_after(resolve_checkpoint_path(path).with_name(JOURNAL_NAME), resume.round)
            strategy.ledger.record_many(lost)
            log(INFO, "fdp-flower: charging %d releases the interrupted run requested after round %d",
                len(lost), resume.round)
        log(INFO, "fdp-flower: resuming after round %d of %d (%d releases already in the ledger)",
            resume.round, scenario.algorithm.rounds, len(resume.ledger.releases))
    stop_reason = "completed"
    try:
        connected = wait_for_nodes(grid, scenario.federation.num_clients, settle=2.0)
        if connected < scenario.federation.num_clients:
            log(INFO, "fdp-flower: %d nodes for %d clients: each node simulates several clients",
                connected, scenario.federation.num_clients)
        if rounds_left > 0:
            strategy.start(grid=grid, initial_arrays=pack_arrays(global_w=strategy.state.global_w),
                           num_rounds=rounds_left, timeout=scenario.faults.reply_timeout,
                           evaluate_fn=strategy.evaluate_fn)
        if strategy.stop_reason is not None:  # converged (eq. (1.17)): a normal end
            stop_reason = strategy.stop_reason
    except FederationError as exc:
        stop_reason = f"stopped: {exc}"
        log(ERROR, "run stopped early: %s", exc)
    result = RunResult(scenario, strategy.state, history=strategy.history, ledger=strategy.ledger,
                       basis=basis, reference=evaluator.reference,
                       clipped_rows=[strategy.clipped_rows.get(i, -1) for i in range(len(sizes))],
                       sample_sizes=[strategy.sample_sizes.get(i, int(m)) for i, m in enumerate(sizes)],
                       stop_reason=stop_reason, engine="flower", failures=strategy.failures,
                       site_reports=strategy.site_reports)
    try:
        out = write_results(result, out_dir)
    except OSError as exc:  # a full disk or a removed directory: keep the ledger and a checkpoint
        log(ERROR, "fdp-flower: %s", rescue_run(result, out_dir, exc))
        raise
    summary = json.loads((out / "summary.json").read_text())
    final = summary["final"] or {}
    log(INFO, "fdp-flower: %s after %d rounds; final MISE (%s) = %s", stop_reason, len(strategy.history),
        scenario.algorithm.estimator.kind,
        f"{final.get('mise_estimate', final.get('mise', float('nan'))):.5f}" if final else "n/a")
    privacy = summary["privacy"]
    if scenario.privacy.enabled and privacy.get("private"):
        log(INFO, "fdp-flower: %s (RDP %.4f, zCDP %.4f; rho = %.5f)", privacy_headline(privacy),
            privacy["eps_rdp"], privacy["eps_zcdp"], privacy["zcdp_rho"])
    elif not scenario.privacy.enabled:
        log(INFO, "fdp-flower: privacy off (F-ADMM): no DP guarantee")
    for site in privacy.get("sites", []):
        log(INFO, "fdp-flower: site of client %d reports eps = %.4f in this run (%d releases), %.4f over its "
            "lifetime (%d releases; max-eps %g) at delta = %g, %s; server ledger: eps = %s",
            site["client"], site["run_eps"], site["run_releases"], site["eps"], site["releases"], site["max_eps"],
            site["delta"], site["neighbouring"], "n/a" if site["server_eps"] is None else f"{site['server_eps']:.4f}")
    log(INFO, "fdp-flower: results in %s", out.resolve())
    if stop_reason != "completed" and stop_reason != strategy.stop_reason:
        raise FederationError(stop_reason)
