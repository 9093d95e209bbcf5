"""FDP-ADMM on Flower: the protocol's server (:class:`fdp_flower.algorithms.fdp_admm.protocol.FDPADMMServer`)
driven by the generic strategy (:class:`fdp_flower.strategies.protocol.ProtocolStrategy`), and the
ServerApp runner that sets a run up, runs it and writes its results.

The server owns every piece of run state (global w, each client's dual and last released primal, the
privacy ledger); a node keeps only a cache of its own features and of the basis
(:mod:`fdp_flower.clients.fdp_admm`).  Each round every client is asked for its noisy descent term at
its last released primal; the basis travels with a node's messages until the node has replied once,
later messages name it by its digest.  Its metrics go through Flower's server-side evaluation
(``evaluate_fn``): each round is printed once, as a global evaluation.
"""
from __future__ import annotations

import json
from functools import partial
from logging import ERROR, INFO, WARNING
from pathlib import Path
from typing import Callable

import numpy as np

from fdp_flower.algorithms.fdp_admm.config import Scenario
from fdp_flower.algorithms.fdp_admm.convergence import CAP, CONVERGED, ended_normally
from fdp_flower.algorithms.fdp_admm.plan import data_source, noise_scales, scheduled_rule
from fdp_flower.algorithms.fdp_admm.newton_protocol import make_server
from fdp_flower.algorithms.fdp_admm.protocol import FDPADMMServer
from fdp_flower.algorithms.fdp_admm.setup import simulation_setup
from fdp_flower.algorithms.fdp_admm.update import FDPADMMState
from fdp_flower.functional.federated_fpca import FPCA_ROUND, basis_releases
from fdp_flower.functional.fpca import FunctionalBasis
from fdp_flower.outputs.layout import ResultsDir
from fdp_flower.outputs.release_journal import JOURNAL_NAME, append_requests, releases_after
from fdp_flower.outputs.results import RunResult, check_output_dir, privacy_headline, rescue_run, write_results
from fdp_flower.strategies.common import FederationError, polling, run_results_dir, wait_for_nodes
from fdp_flower.strategies.protocol import Broadcast, ProtocolStrategy, RunConverged
from fdp_flower.wire import (BASIS_DIGEST_KEY, BASIS_MISSING, BASIS_PREFIX, MIN_RECORDS_KEY, TOTAL_RECORDS_KEY,
                             basis_digest, pack_arrays)
from fdp_flower.wire.flwr import ArrayRecord, Context, log
from fdp_flower.wire.flwr_server import Grid

__all__ = ["FDPADMMStrategy", "RunConverged", "run_fdp_admm_federation"]


class FDPADMMStrategy(ProtocolStrategy):
    """Server side of FDP-ADMM / F-ADMM on Flower (Zhou & Xiang 2022; docs/algorithms.md, eqs. (1.2)-(1.5)).

    Parameters
    ----------
    scenario : Scenario
        The parsed run description (rho, rounds, privacy, ...).
    basis : FunctionalBasis
        The public basis, sent to each node once per run (later messages carry its digest).
    evaluate_state : callable, optional
        ``f(state) -> dict`` of metrics logged every round (simulation only: the evaluator may see
        pooled data). (default: None)
    hosts_many_clients : bool
        Whether a node may simulate several clients (simulated data only; with node-local data each
        node is exactly one client). (default: True)
    partition_sizes : sequence of int
        The public m_i of every client (the protocol's calibration and its checks of each reply).
    on_round : callable, optional
        ``f(strategy)`` called after every applied round (checkpoints). (default: None)

    Faults (``scenario.faults``): an error reply, a missing reply (timeout) or a reply the protocol
    rejects (malformed, non-finite, a primal norm above ``max_primal_norm``, the wrong m_i,
    sensitivity or sigma, the wrong partition) makes that client "failed" for the round: it keeps its
    last released primal and its dual, the failure is logged and recorded in ``failures`` (charged
    unless nothing can have been released), and no exception leaves :meth:`aggregate_train` unless
    fewer than ``quorum`` clients replied (then :class:`FederationError`, which the runner turns into
    a clean stop with results saved).
    """

    def __init__(self, scenario: Scenario, basis: FunctionalBasis, *,
                 evaluate_state: Callable[[FDPADMMState], dict] | None = None,
                 hosts_many_clients: bool = True, partition_sizes=None,
                 on_round: Callable[["FDPADMMStrategy"], None] | None = None) -> None:
        if partition_sizes is None:
            raise ValueError("partition_sizes: the server needs every client's m_i (simulation: the data "
                             "source's; node-local data: the setup phase's)")
        noise_scales(scenario, basis)  # an ellipsoid clip needs the basis's score variances: fail here
        p = scenario.privacy
        total_budget = (p.eps, p.delta) if p.enabled and p.mode == "total" else None  # guarded before each round
        server = make_server(scenario, basis, partition_sizes, evaluator=evaluate_state, total_budget=total_budget,
                               on_round=None if on_round is None else (lambda _server: on_round(self)))
        arrays = basis.to_arrays()
        super().__init__(server, hosts_many_clients=hosts_many_clients,
                         broadcast=Broadcast({f"{BASIS_PREFIX}{k}": v for k, v in arrays.items()},
                                             basis_digest(arrays), BASIS_DIGEST_KEY, BASIS_MISSING))
        self.scenario = scenario
        self.basis = basis
        self.evaluate_state = evaluate_state
        self.log_every = scenario.output.log_every
        self._journal: Path | None = None
        #: the ServerApp's context (secure_aggregation: SecAgg+ runs inside it; set by the runner)
        self.server_context: Context | None = None
        self._secure_round: tuple | None = None  # (result or None, node -> clients, refusal reason)

    @property
    def state(self) -> FDPADMMState:
        return self.server.state

    @property
    def basis_digest(self) -> str:
        return self.broadcast.digest

    @property
    def journal(self) -> Path | None:
        """The release journal (:mod:`fdp_flower.outputs.release_journal`), when a re-release would
        draw new noise (node-local data, or a non-seeded noise source); set by the runner."""
        return self._journal

    @journal.setter
    def journal(self, path: Path | None) -> None:
        self._journal = path
        self.server.journal = None if path is None else partial(append_requests, path)

    @property
    def clipped_rows(self) -> dict[int, int]:
        """client -> the count of clipped rows it reported (only when it reports them)."""
        return {c: int(round(float(m["clipped-rows"]))) for c, m in self.site_metrics.items() if "clipped-rows" in m}

    def resume_from(self, checkpoint) -> int:
        """Continue a run after ``checkpoint.round`` (:class:`fdp_flower.outputs.checkpoint.Checkpoint`): state,
        ledger, history and failures are restored and Flower's rounds 1, 2, ... become rounds
        ``checkpoint.round + 1``, ..., so every release draws the noise and step of an uninterrupted run.
        Returns the rounds left."""
        self.server.resume(checkpoint.state, checkpoint.ledger.releases, checkpoint.history, checkpoint.failures,
                           checkpoint.server_state)
        super().resume_from(checkpoint.round)
        return self.server.rounds_planned - checkpoint.round

    def round_arrays(self) -> ArrayRecord:
        return pack_arrays(global_w=self.state.global_w)

    # ------------------------------------------------------------------ secure aggregation (SecAgg+)
    def request_config(self) -> dict:
        """trusted_aggregator: the public min_i m_i, which every site checks against its own m_i and records in
        its ledger's event (the sensitivity of the server's one noise draw, eq. (1.3t)); the Newton rule: the
        public n = sum_i m_i of the schedule's split (:func:`fdp_flower.clients.fdp_admm.newton_total_records`)."""
        if self.server.trust == "trusted_aggregator":
            return {MIN_RECORDS_KEY: int(self.server.calibration.min_records)}
        if scheduled_rule(self.scenario):  # the schedule's split of mu^2 (every site checks what it can)
            return {TOTAL_RECORDS_KEY: int(np.sum(self.server.sizes))}
        return {}

    def configure_train(self, server_round, arrays, config, grid):
        if self.server.trust != "secure_aggregation":
            return super().configure_train(server_round, arrays, config, grid)
        self._run_secure_sum(server_round + self.round_offset, grid)
        return []  # the round's messages were SecAgg+'s own (secure_integer_sum)

    def aggregate_train(self, server_round, replies):
        if self.server.trust != "secure_aggregation":
            return super().aggregate_train(server_round, replies)
        return self._close_secure_round(server_round + self.round_offset)

    def secure_assignment(self, node_ids: list[int]) -> dict[int, list[int]]:
        """node -> the clients whose shares it sums before masking: simulated data spread round-robin over
        the connected nodes (named in the public config); node-local data, each node its own client (from
        the setup phase)."""
        if self.hosts_many_clients:
            if not node_ids:
                raise FederationError("no nodes connected")
            hosted: dict[int, list[int]] = {}
            for c in range(self.num_clients):
                hosted.setdefault(node_ids[c % len(node_ids)], []).append(c)
            return hosted
        live = set(node_ids)
        return {node: [c] for c, node in sorted(self.node_of_client.items()) if node in live}

    def _run_secure_sum(self, server_round: int, grid) -> None:
        """One FDP-ADMM round through Flower's SecAgg+ (:func:`fdp_flower.strategies.secure_sum.secure_integer_sum`):
        every node receives the same public FitIns -- the point, the basis, which clients it hosts -- and
        answers with the sum of its clients' integer shares, masked; the server learns only the total."""
        import time

        from fdp_flower.clients.fdp_admm_secure import secure_round_config, secure_tolerance
        from fdp_flower.strategies.secure_sum import SecureSumRefused, secure_integer_sum

        if self.server.finished:
            raise RunConverged(self.server.stop_reason)
        if self.server_context is None:
            raise FederationError("secure aggregation needs the ServerApp's context (FDPADMMStrategy.server_context)")
        self._round_started = time.monotonic()
        hosted = self.secure_assignment(sorted(grid.get_node_ids()))
        plan = self.server.begin_round(sorted(c for clients in hosted.values() for c in clients))
        if plan is None:
            raise FederationError(self.server.stop_reason or "the run is over")
        if plan.round != server_round:
            raise FederationError(f"Flower's round {server_round} is the protocol's round {plan.round}")
        secure = self.server.calibration.secure
        min_nodes = secure_tolerance(hosted, secure.tolerated)
        arrays, config = secure_round_config(plan.round, plan.requests[0].public["point"], self.broadcast.arrays,
                                             self.broadcast.digest, hosted, self.server.calibration.min_records)
        try:
            result = secure_integer_sum(grid, self.server_context, node_ids=sorted(hosted), server_round=plan.round,
                                        public_arrays=arrays, public_config=config, flower_grid=secure.grid,
                                        min_contributors=min_nodes, timeout=self.scenario.faults.reply_timeout)
        except SecureSumRefused as exc:
            self._secure_round = (None, hosted, " ".join(str(exc).split()))
        else:
            self._secure_round = (result, hosted, None)

    def _close_secure_round(self, server_round: int):
        import time

        from fdp_flower.algorithms.faults import MAY_HAVE_RELEASED, NOT_RELEASED
        from fdp_flower.algorithms.protocol import RunStopped

        result, hosted, refused = self._secure_round
        self._secure_round = None
        if result is not None:
            self.server.accept_secure_sum(result.total, [c for n in result.contributors for c in hosted[n]])
            for node in result.dropped:  # its masked vector may have been sent: charged
                for c in hosted[node]:
                    self.server.fail(c, f"node {node}: no masked vector in the secure sum", MAY_HAVE_RELEASED)
        else:
            for clients in hosted.values():
                for c in clients:
                    self.server.fail(c, refused, MAY_HAVE_RELEASED)
        asked = {c for clients in hosted.values() for c in clients}
        for c in range(self.num_clients):
            if c not in asked:
                self.server.fail(c, "node not connected", NOT_RELEASED)
        try:
            self.server.end_round()
        except RunStopped as exc:
            reason = refused or exc.reason.removeprefix("stopped: ")
            self.server.stop_reason = f"stopped: {reason}"
            raise FederationError(reason) from None
        if refused is not None:  # unreachable: end_round refuses a round without shares
            raise FederationError(refused)
        log(INFO, "fdp-flower: round %d/%d done in %.3fs by secure aggregation (SecAgg+ %.3fs; %d of %d nodes' "
            "shares)", server_round, self.server.rounds_planned, time.monotonic() - self._round_started,
            result.seconds, len(result.contributors), len(hosted))
        return self.round_arrays(), None

    def initial_metrics(self) -> dict | None:
        return None if self.evaluate_state is None else self.evaluate_state(self.state)

    def summary(self) -> None:
        p = self.scenario.privacy
        log(INFO, "\t├── FDP-ADMM: M=%d clients, K=%d, rho=%g, L=%d rounds", self.num_clients,
            self.basis.n_components, self.scenario.algorithm.rho, self.scenario.algorithm.rounds)
        log(INFO, "\t└── privacy: %s", f"{p.mode} eps={p.eps} delta={p.delta}" if p.enabled else "off (F-ADMM)")


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
                    scenario, strat.state, strat.ledger, strat.history, strat.failures, engine="flower",
                    server_state=strat.server.checkpoint_state()))
            except OSError as exc:  # the run goes on; writing its results rescues what is lost
                log(WARNING, "fdp-flower: checkpoint not written (%s)", exc.strerror or exc)

    if resume is None:  # what the setting can support, said before the first round (summary.json keeps it)
        from fdp_flower.algorithms.fdp_admm.predicted import predicted_cost_lines, predicted_cost_section

        for line in predicted_cost_lines(predicted_cost_section(scenario, sizes, eigenvalues=basis.eigenvalues,
                                                                n_components=basis.n_components)):
            log(WARNING if line.startswith("warning:") else INFO, "fdp-flower: %s", line)
    strategy = FDPADMMStrategy(scenario, basis, evaluate_state=evaluator, partition_sizes=sizes,
                               on_round=checkpoint, hosts_many_clients=setup is None)
    strategy.server_context = context
    if setup is not None:  # the setup phase's releases (noise added on the clients), routing, site totals
        strategy.ledger.record_many(setup.releases)
        strategy.node_of_client.update(setup.node_of_client)
        strategy.site_reports.update(setup.site_reports)
    if scenario.privacy.enabled and (setup is not None or scenario.privacy.noise_source != "seeded"):
        strategy.journal = out_dir / JOURNAL_NAME
    rounds_left = strategy.server.rounds_planned
    if resume is not None:
        rounds_left = strategy.resume_from(resume)
        if strategy.journal is not None:  # made after the checkpoint by the interrupted run: charged too
            lost = releases_after(resolve_checkpoint_path(path).with_name(JOURNAL_NAME), resume.round)
            strategy.ledger.record_many(lost)
            log(INFO, "fdp-flower: charging %d releases the interrupted run requested after round %d",
                len(lost), resume.round)
        log(INFO, "fdp-flower: resuming after round %d of %d (%d releases already in the ledger)",
            resume.round, strategy.server.rounds_planned, len(resume.ledger.releases))
    if setup is None and not any(r.round == FPCA_ROUND for r in strategy.ledger.releases):
        from fdp_flower.algorithms.fdp_admm.plan import noise_plan

        if noise_plan(scenario, basis).basis_multiplier is not None:
            # simulated data: the private basis phase's releases (one per client, round 0), charged as in process
            b = scenario.basis
            strategy.ledger.record_many(basis_releases([int(m) for m in sizes], clip_cb=b.clip_cb, eps=b.eps,
                                                       delta=b.delta))
    stop_reason = "completed"
    try:
        connected = wait_for_nodes(grid, scenario.federation.num_clients, settle=2.0)
        if connected < scenario.federation.num_clients:
            log(INFO, "fdp-flower: %d nodes for %d clients: each node simulates several clients",
                connected, scenario.federation.num_clients)
        if rounds_left > 0:
            strategy.start(grid=grid, initial_arrays=strategy.round_arrays(), num_rounds=rounds_left,
                           timeout=scenario.faults.reply_timeout, evaluate_fn=strategy.evaluate_fn)
        if strategy.stop_reason is not None and strategy.stop_reason.startswith((CONVERGED, CAP)):  # eq. (1.17)
            stop_reason = strategy.stop_reason
    except FederationError as exc:
        stop_reason = f"stopped: {exc}"
        log(ERROR, "run stopped early: %s", exc)
    clipped = strategy.clipped_rows
    result = RunResult(scenario, strategy.state, history=strategy.history, ledger=strategy.ledger,
                       basis=basis, reference=evaluator.reference,
                       clipped_rows=[clipped.get(i, -1) for i in range(len(sizes))],
                       sample_sizes=[int(m) for m in sizes],
                       stop_reason=stop_reason, engine="flower", failures=strategy.failures,
                       site_reports=strategy.site_reports, server_state=strategy.server.checkpoint_state())
    try:
        out = write_results(result, out_dir)
    except OSError as exc:  # a full disk or a removed directory: keep the ledger and a checkpoint
        log(ERROR, "fdp-flower: %s", rescue_run(result, out_dir, exc))
        raise
    summary = json.loads(ResultsDir.at(out).summary.read_text())
    final = summary["final"] or {}
    log(INFO, "fdp-flower: %s after %d rounds; final MISE (%s) = %s", stop_reason, len(strategy.history),
        scenario.algorithm.estimator.kind,
        f"{final.get('mise_estimate', final.get('mise', float('nan'))):.5f}" if final else "n/a")
    privacy = summary["privacy"]
    if scenario.privacy.enabled and privacy.get("private"):
        log(INFO, "fdp-flower: %s (RDP %.4f, zCDP %.4f; rho = %.5f)", privacy_headline(privacy),
            privacy["eps_rdp"], privacy["eps_zcdp"] if privacy["eps_zcdp"] is not None else float("nan"),
            privacy["zcdp_rho"])
    elif not scenario.privacy.enabled:
        log(INFO, "fdp-flower: privacy off (F-ADMM): no DP guarantee")
    for site in privacy.get("sites", []):
        log(INFO, "fdp-flower: site of client %d reports eps = %.4f in this run (%d releases), %.4f over its "
            "lifetime (%d releases; max-eps %g) at delta = %g, %s; server ledger: eps = %s",
            site["client"], site["run_eps"], site["run_releases"], site["eps"], site["releases"], site["max_eps"],
            site["delta"], site["neighbouring"], "n/a" if site["server_eps"] is None else f"{site['server_eps']:.4f}")
    log(INFO, "fdp-flower: results in %s", out.resolve())
    if not ended_normally(stop_reason):
        raise FederationError(stop_reason)
