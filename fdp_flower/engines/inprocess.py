"""The in-process engine: FDP-ADMM without Flower, every client's site in this process.

A thin driver of FDP-ADMM's protocol (:mod:`fdp_flower.algorithms.fdp_admm.protocol`, the server;
:func:`fdp_flower.algorithms.fdp_admm.site.answer`, every client's site, all clients of a round at
once): it builds the clients' data (:func:`fdp_flower.algorithms.fdp_admm.setup.simulation_setup`),
injects failures if the scenario asks, and moves requests and releases between the two
(:func:`fdp_flower.algorithms.protocol.run_in_process`).  Every release's noise comes from
:func:`fdp_flower.privacy.mechanisms.release_rng` of the run seed, so with the same seed it
reproduces a Flower run's iterates.
"""
from __future__ import annotations

import logging
import time
from functools import partial
from typing import Callable

from fdp_flower.algorithms.faults import draw_failures
from fdp_flower.algorithms.fdp_admm.config import Scenario
from fdp_flower.algorithms.fdp_admm.plan import site_plan
from fdp_flower.algorithms.fdp_admm.newton_protocol import make_server
from fdp_flower.algorithms.fdp_admm.protocol import FDPADMMServer
from fdp_flower.algorithms.fdp_admm.setup import simulation_setup
from fdp_flower.algorithms.fdp_admm.site import SiteData, answer
from fdp_flower.algorithms.protocol import run_in_process
from fdp_flower.functional.federated_fpca import FPCA_ROUND, basis_releases
from fdp_flower.outputs.release_journal import append_requests, journal_path, releases_after
from fdp_flower.outputs.results import RunResult
from fdp_flower.privacy.mechanisms import run_noise

log = logging.getLogger(__name__)


def accounting_delta(scenario: Scenario) -> float:
    """The delta at which the whole run's eps is reported."""
    return scenario.privacy.delta


def run_fdp_admm(scenario: Scenario, *, progress: Callable[[int, dict], None] | None = None,
                 with_reference: bool | None = None, total_budget: tuple[float, float] | None = None,
                 checkpoint_path=None, resume=None, stop_after: int | None = None,
                 resume_journal=None, source=None) -> RunResult:
    """Run FDP-ADMM (or F-ADMM when privacy is off) on a simulated federation.

    ``total_budget`` (eps, delta) is enforced by a :class:`~fdp_flower.privacy.BudgetGuard`
    before every round's releases (default: the scenario's budget in total mode, none
    in per_round mode); if a round would exceed it, the run stops before that round,
    keeps its history and says why in ``stop_reason``.

    Faults (``scenario.faults``): each round every client fails independently with
    probability ``failure_rate`` (stream of ``faults.seed``, default the run seed); a
    failed client computes and releases nothing (no ledger entry) and the server step is
    :func:`fdp_flower.algorithms.faults.advance_with_failures`.  If fewer than ``quorum`` of the
    clients reply, the run stops before applying that round (``stop_reason`` says so).

    ``checkpoint_path``: write :mod:`fdp_flower.outputs.checkpoint` there every
    ``output.checkpoint_every`` rounds and at the end; ``resume``: a
    :class:`~fdp_flower.outputs.checkpoint.Checkpoint` to continue from (same scenario);
    ``stop_after``: stop (as if interrupted) after this round (for tests).
    ``with_reference``: solve the exact reference (default: only up to
    :data:`~fdp_flower.algorithms.fdp_admm.setup.REFERENCE_AUTO_LIMIT` samples; its time is logged apart).

    Noise that cannot be drawn again (``privacy.noise_source`` other than ``seeded``): every round's
    releases are journaled next to ``checkpoint_path`` before the noise is drawn
    (:mod:`fdp_flower.outputs.release_journal`), and a resumed run records in its ledger the
    journaled releases of rounds after the checkpoint (``resume_journal``: the journal of the run
    being resumed; default: the one next to ``checkpoint_path``), since re-releasing them draws new noise.
    ``source``: the data source (default: the scenario's; the holder of in-memory curves passes theirs,
    :class:`fdp_flower.functional.sources.InMemorySource`).
    """
    t0 = time.perf_counter()
    sizes, basis, features, responses, clipped, evaluator = simulation_setup(
        scenario, with_reference=with_reference, source=source)
    p = scenario.privacy
    if total_budget is None and p.enabled and p.mode == "total":
        total_budget = (p.eps, p.delta)
    unrepeatable = p.enabled and p.noise_source != "seeded"
    journal = journal_path(checkpoint_path) if checkpoint_path is not None and unrepeatable else None
    journal_requests = None if journal is None else partial(append_requests, journal)
    every = scenario.output.checkpoint_every

    server = make_server(scenario, basis, sizes, evaluator=evaluator, total_budget=total_budget,
                           journal=journal_requests)

    def after_round(round_: int, row: dict) -> None:  # the caller's progress first, then the checkpoint
        if progress is not None:
            progress(round_, row)
        if checkpoint_path is not None and every and server.round % every == 0:
            _checkpoint(checkpoint_path, _result(server))

    def _result(srv: FDPADMMServer) -> RunResult:
        return RunResult(scenario, srv.state, history=srv.history, ledger=srv.ledger, basis=basis,
                         reference=evaluator.reference, clipped_rows=clipped, sample_sizes=[int(m) for m in sizes],
                         stop_reason=srv.stop_reason or "completed", failures=srv.failures,
                         server_state=srv.checkpoint_state())

    if resume is not None:
        from fdp_flower.outputs.checkpoint import check_resumable

        check_resumable(resume, scenario)
        server.resume(resume.state, resume.ledger.releases, resume.history, resume.failures, resume.server_state)
        if unrepeatable:
            source = resume_journal if resume_journal is not None else journal
            lost = [] if source is None else releases_after(source, resume.round)
            if lost:  # made by the interrupted run after its last checkpoint: charged, then made again
                log.info("charging %d releases the interrupted run made after round %d", len(lost), resume.round)
                server.ledger.record_many(lost)
    if server.steps.basis_multiplier is not None and not any(r.round == FPCA_ROUND for r in server.ledger.releases):
        # The basis phase's releases (one per client, round 0, before round 1; same calibration as
        # in Flower): in total mode they count against privacy.eps with FDP-ADMM's (NoisePlan).
        b = scenario.basis
        server.ledger.record_many(basis_releases([int(m) for m in sizes], clip_cb=b.clip_cb, eps=b.eps,
                                                 delta=b.delta))
    log.info("setup done in %.1fs (K=%d, M=%d)", time.perf_counter() - t0, server.dim, len(sizes))
    data = SiteData.stack(range(len(sizes)), features, responses, clipped)
    plan, noise = site_plan(scenario, basis, sizes), run_noise(scenario.seed, p.noise_source)
    faults = scenario.faults
    fault_seed = scenario.seed if faults.seed is None else faults.seed
    failed = None if faults.failure_rate == 0 else (
        lambda round_: draw_failures(fault_seed, round_, len(sizes), faults.failure_rate))
    run_in_process(server, lambda requests: answer(requests, data, plan, noise), failed=failed,
                   progress=after_round, stop_after=stop_after)
    result = _result(server)
    if checkpoint_path is not None and every:
        _checkpoint(checkpoint_path, result)
    return result


def _checkpoint(path, result: RunResult) -> None:
    from fdp_flower.outputs.checkpoint import Checkpoint, write_checkpoint

    try:
        write_checkpoint(path, Checkpoint(result.scenario, result.state, result.ledger, result.history,
                                          result.failures, engine=result.engine, server_state=result.server_state))
    except OSError as exc:  # the run goes on; writing its results reports (and rescues) what is lost
        log.warning("checkpoint %s not written (%s)", path, exc.strerror or exc)
