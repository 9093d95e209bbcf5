"""FDP-ADMM server strategy (Flower Message API): averaging and dual bookkeeping.

The strategy owns every piece of run state (global w, each client's dual and
last released primal, the privacy ledger); clients are stateless.  Each round it
sends every client its own (w, g_i, wt_i, l), and on the replies calls the pure
server update :meth:`fdp_flower.fdp_admm.FDPADMMState.advance`.
"""
from __future__ import annotations

import sys
import time
import warnings
from logging import ERROR, INFO, WARNING
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
    from flwr.common.logger import log
    from flwr.serverapp import Grid
    from flwr.serverapp.strategy import Strategy

from fdp_flower.engine.inprocess import RunResult
from fdp_flower.fdp_admm import FDPADMMState
from fdp_flower.fpca import FunctionalBasis
from fdp_flower.privacy import GaussianRelease, PrivacyLedger
from fdp_flower.results import summarize, write_results
from fdp_flower.runtime import NoisePlan, privacy_columns, simulation_setup
from fdp_flower.scenario import Scenario
from fdp_flower.strategies.records import pack_arrays, unpack_arrays



class FederationError(RuntimeError):
    """The federation cannot continue (missing or inconsistent replies)."""


class FDPADMMStrategy(Strategy):
    """Server side of FDP-ADMM / F-ADMM (paper 000; spec section 1, step 2).

    Parameters
    ----------
    scenario : Scenario
        The parsed run description (rho, rounds, privacy, ...).
    basis : FunctionalBasis
        The public basis sent to clients with every message.
    evaluate_state : callable, optional
        ``f(state) -> dict`` of metrics logged every round (simulation only:
        the evaluator may see pooled data). (default: None)
    hosts_many_clients : bool
        Whether a node may simulate several clients (simulated data only; with
        node-local data each node is exactly one client). (default: True)
    """

    def __init__(self, scenario: Scenario, basis: FunctionalBasis, *,
                 evaluate_state: Callable[[FDPADMMState], dict] | None = None,
                 hosts_many_clients: bool = True) -> None:
        self.hosts_many_clients = hosts_many_clients
        self._named = False
        self.scenario = scenario
        self.basis = basis
        self.num_clients = scenario.federation.num_clients
        self.plan = NoisePlan(scenario, basis.n_components)
        self.state = FDPADMMState.initial(self.num_clients, basis.n_components)
        self.evaluate_state = evaluate_state
        self.ledger = PrivacyLedger()
        self.history: list[dict] = []
        self.node_of_client: dict[int, int] = {}
        self.sample_sizes: dict[int, int] = {}
        self.clipped_rows: dict[int, int] = {}

    # ------------------------------------------------------------------ messages
    def summary(self) -> None:
        p = self.scenario.privacy
        log(INFO, "\t├── FDP-ADMM: M=%d clients, K=%d, rho=%g, L=%d rounds", self.num_clients,
            self.basis.n_components, self.scenario.algorithm.rho, self.scenario.algorithm.rounds)
        log(INFO, "\t└── privacy: %s", f"{p.mode} eps={p.eps} delta={p.delta}" if p.enabled else "off (F-ADMM)")

    def _client_payload(self, client: int | None) -> dict[str, np.ndarray]:
        dim = self.basis.n_components
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
        logical clients are spread round-robin over the nodes and named in the message.
        """
        if len(node_ids) >= self.num_clients:
            if self.state.round == 0 and not self.node_of_client:
                return [(node, None) for node in node_ids]
            if len(self.node_of_client) < self.num_clients:
                raise FederationError("some clients never identified themselves; cannot route their duals")
            return [(self.node_of_client[c], c) for c in range(self.num_clients)]
        if not self.hosts_many_clients:
            raise FederationError(
                f"{len(node_ids)} nodes connected but the scenario needs {self.num_clients} "
                f"(node-local data: one client per node)")
        if not self.node_of_client:
            self.node_of_client = {c: node_ids[c % len(node_ids)] for c in range(self.num_clients)}
        return [(self.node_of_client[c], c) for c in range(self.num_clients)]

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        node_ids = sorted(grid.get_node_ids())
        if not node_ids:
            raise FederationError(f"round {server_round}: no nodes connected")
        basis = {f"basis_{k}": v for k, v in self.basis.to_arrays().items()}
        self._named = self._named or len(node_ids) < self.num_clients
        messages = []
        for node, client in self._assign(node_ids):
            cfg = {"round": server_round}
            if client is not None and self._named:
                cfg["partition-id"] = client
            content = RecordDict({"arrays": pack_arrays(**self._client_payload(client), **basis),
                                  "config": ConfigRecord(cfg)})
            messages.append(Message(content=content, dst_node_id=node, message_type=MessageType.TRAIN))
        return messages

    def _check_release(self, server_round: int, client: int, metrics: MetricRecord) -> GaussianRelease | None:
        m = int(metrics["num-examples"])
        eta, sensitivity, sigma = self.plan.release(server_round, m)
        if not np.isclose(float(metrics["sensitivity"]), float(sensitivity), rtol=1e-9, atol=0):
            raise FederationError(f"client {client}: reported sensitivity does not match the scenario")
        if sigma is None:
            return None
        if not np.isclose(float(metrics["sigma"]), float(sigma), rtol=1e-9, atol=0):
            raise FederationError(f"client {client}: noise sigma {metrics['sigma']} != calibrated {float(sigma)}")
        return GaussianRelease(client, server_round, float(sensitivity), float(sigma))

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        replies = list(replies)
        dim = self.basis.n_components
        primals: dict[int, np.ndarray] = {}
        releases = []
        for reply in replies:
            if reply.has_error():
                raise FederationError(f"round {server_round}: node {reply.metadata.src_node_id} failed: "
                                      f"{reply.error.reason}")
            metrics = reply.content["metrics"]
            client = int(metrics["partition-id"])
            if not 0 <= client < self.num_clients or client in primals:
                raise FederationError(f"round {server_round}: bad or duplicate partition id {client}")
            primal = unpack_arrays(reply.content["arrays"])["noisy_primal"]
            if primal.shape != (dim,) or not np.all(np.isfinite(primal)):
                raise FederationError(f"round {server_round}: client {client} sent a malformed primal")
            if self.node_of_client.get(client, reply.metadata.src_node_id) != reply.metadata.src_node_id:
                raise FederationError(f"round {server_round}: client {client} replied from another node")
            self.node_of_client[client] = reply.metadata.src_node_id
            self.sample_sizes[client] = int(metrics["num-examples"])
            if "clipped-rows" in metrics:
                self.clipped_rows[client] = int(metrics["clipped-rows"])
            releases.append(self._check_release(server_round, client, metrics))
            primals[client] = primal
        if len(primals) < self.num_clients:
            missing = sorted(set(range(self.num_clients)) - set(primals))
            raise FederationError(f"round {server_round}: no reply from clients {missing}")
        for release in releases:  # noise was added on the client before the reply
            if release is not None:
                self.ledger.record(release)
        noisy = np.stack([primals[i] for i in range(self.num_clients)])
        self.state = self.state.advance(noisy, self.scenario.algorithm.rho)
        eta = np.mean([self.plan.step_size(server_round, self.sample_sizes[i]) for i in range(self.num_clients)])
        row = {"round": server_round, "eta_mean": float(eta)}
        if self.evaluate_state is not None:
            row.update(self.evaluate_state(self.state))
        if self.scenario.privacy.enabled:
            row.update(privacy_columns(self.ledger, self.scenario.privacy.delta))
        self.history.append(row)
        if server_round % self.scenario.output.log_every == 0 or server_round == self.scenario.algorithm.rounds:
            log(INFO, "round %d: %s", server_round,
                ", ".join(f"{k}={v:.5g}" for k, v in row.items() if k != "round"))
        return pack_arrays(global_w=self.state.global_w), MetricRecord(
            {k: float(v) for k, v in row.items() if np.isfinite(v)})

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        return []  # all evaluation is server-side

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        for reply in replies:
            if reply.has_error():
                log(WARNING, "evaluate reply with error: %s", reply.error.reason)
        return None


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

    The ServerApp thread starts while the main thread is still forking Ray's
    processes; heavy numpy/SciPy work in this thread during those forks has been
    seen to deadlock the fork (the run then dies with "No heartbeat received").
    Outside the simulation runtime Ray is not loaded and this returns at once.
    """
    ray = sys.modules.get("ray")
    if ray is None:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        is_initialized = getattr(ray, "is_initialized", None)  # None while ray is still importing
        if is_initialized is not None and is_initialized():
            return
        time.sleep(0.2)


def results_dir(context: Context, name: str) -> Path:
    base = Path(str(context.run_config.get("results-dir", "") or "results"))
    return base / f"{name}-flower-{time.strftime('%Y%m%d-%H%M%S')}-run{context.run_id}"


def run_fdp_admm_federation(grid: Grid, context: Context, scenario: Scenario) -> None:
    """Run a whole FDP-ADMM federation on ``grid`` and write its results."""
    sizes, basis, _features, _responses, _clipped, evaluator = simulation_setup(scenario)
    strategy = FDPADMMStrategy(scenario, basis, evaluate_state=evaluator)
    stop_reason = "completed"
    try:
        connected = wait_for_nodes(grid, scenario.federation.num_clients, settle=2.0)
        if connected < scenario.federation.num_clients:
            log(INFO, "fdp-flower: %d nodes for %d clients: each node simulates several clients",
                connected, scenario.federation.num_clients)
        strategy.start(grid=grid, initial_arrays=pack_arrays(global_w=np.zeros(basis.n_components)),
                       num_rounds=scenario.algorithm.rounds)
    except FederationError as exc:
        stop_reason = f"stopped: {exc}"
        log(ERROR, "run stopped early: %s", exc)
    result = RunResult(scenario, strategy.state, history=strategy.history, ledger=strategy.ledger,
                       basis=basis, reference=evaluator.reference,
                       clipped_rows=[strategy.clipped_rows.get(i, -1) for i in range(len(sizes))],
                       sample_sizes=[strategy.sample_sizes.get(i, int(m)) for i, m in enumerate(sizes)],
                       stop_reason=stop_reason, engine="flower")
    out = write_results(result, results_dir(context, scenario.name))
    summary = summarize(result)
    final = summary["final"] or {}
    log(INFO, "fdp-flower: %s after %d rounds; final MISE = %s", stop_reason, len(strategy.history),
        f"{final.get('mise', float('nan')):.5f}" if final else "n/a")
    privacy = summary["privacy"]
    if scenario.privacy.enabled and privacy.get("private"):
        w = privacy["worst_client"]
        log(INFO, "fdp-flower: total privacy spent per client (worst client %d, %d releases): eps = %.4f "
            "at delta = %g (PLD %.4f, RDP %.4f, zCDP %.4f; rho = %.5f)", w["client"], w["releases"],
            privacy["eps"], privacy["delta"], w["eps_pld"], w["eps_rdp"], w["eps_zcdp"], w["zcdp_rho"])
    elif not scenario.privacy.enabled:
        log(INFO, "fdp-flower: privacy off (F-ADMM): no DP guarantee")
    log(INFO, "fdp-flower: results in %s", out.resolve())
    if stop_reason != "completed":
        raise FederationError(stop_reason)
