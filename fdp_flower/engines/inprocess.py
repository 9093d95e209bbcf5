"""The in-process engine: FDP-ADMM without Flower, vectorised over clients.

It calls the very update functions the Flower client and strategy call
(:func:`fdp_flower.algorithms.fdp_admm.update.client_primal_step`, :meth:`FDPADMMState.advance`)
and draws each release's noise from :func:`fdp_flower.privacy.mechanisms.release_rng`,
so with the same seed it reproduces a Flower run's iterates.
"""
from __future__ import annotations

import logging
import time
from typing import Callable

import numpy as np

from fdp_flower.algorithms.faults import FailureRecord, QuorumLost, advance_with_failures, check_quorum, draw_failures
from fdp_flower.algorithms.fdp_admm.config import Scenario
from fdp_flower.algorithms.fdp_admm.convergence import server_after_round, stop_reason
from fdp_flower.algorithms.fdp_admm.plan import (
    build_objective,
    initial_state,
    model_dim,
    noise_plan,
    noise_scales,
    primal_release,
    privacy_columns,
    round_rho,
)
from fdp_flower.algorithms.fdp_admm.setup import simulation_setup
from fdp_flower.algorithms.fdp_admm.update import client_primal_step, stack_clients
from fdp_flower.functional.federated_fpca import FPCA_ROUND, basis_releases
from fdp_flower.outputs.release_journal import append_requests, journal_path, releases_after
from fdp_flower.outputs.results import RunResult
from fdp_flower.privacy import BudgetExhausted, BudgetGuard
from fdp_flower.privacy.mechanisms import add_gaussian_noise, release_rng

log = logging.getLogger(__name__)


def accounting_delta(scenario: Scenario) -> float:
    """The delta at which the whole run's eps is reported."""
    return scenario.privacy.delta


def run_fdp_admm(scenario: Scenario, *, progress: Callable[[int, dict], None] | None = None,
                 with_reference: bool | None = None, total_budget: tuple[float, float] | None = None,
                 checkpoint_path=None, resume=None, stop_after: int | None = None,
                 resume_journal=None) -> RunResult:
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
    """
    t0 = time.perf_counter()
    sizes, basis, features, responses, clipped, evaluator = simulation_setup(
        scenario, with_reference=with_reference)
    objective = build_objective(scenario)
    dim = model_dim(scenario, basis)
    plan = noise_plan(scenario, basis)
    scales = noise_scales(scenario, basis)
    f, y, mask = stack_clients(features, responses)
    state = initial_state(scenario, dim)
    result = RunResult(scenario, state, basis=basis, reference=evaluator.reference,
                       clipped_rows=clipped, sample_sizes=[int(m) for m in sizes])
    if resume is not None:
        from fdp_flower.outputs.checkpoint import check_resumable

        check_resumable(resume, scenario)
        state = result.state = resume.state
        result.history, result.failures = list(resume.history), list(resume.failures)
        result.ledger.record_many(resume.ledger.releases)
    journal = None
    if checkpoint_path is not None and scenario.privacy.enabled and scenario.privacy.noise_source != "seeded":
        journal = journal_path(checkpoint_path)
    if resume is not None and scenario.privacy.enabled and scenario.privacy.noise_source != "seeded":
        source = resume_journal if resume_journal is not None else journal
        lost = [] if source is None else releases_after(source, resume.round)
        if lost:  # made by the interrupted run after its last checkpoint: charged, then made again
            log.info("charging %d releases the interrupted run made after round %d", len(lost), resume.round)
            result.ledger.record_many(lost)
    faults = scenario.faults
    fault_seed = scenario.seed if faults.seed is None else faults.seed
    log.info("setup done in %.1fs (K=%d, M=%d)", time.perf_counter() - t0, dim, len(sizes))
    p = scenario.privacy
    if total_budget is None and p.enabled and p.mode == "total":
        total_budget = (p.eps, p.delta)
    if plan.basis_multiplier is not None and not any(r.round == FPCA_ROUND for r in result.ledger.releases):
        # The basis phase's releases (one per client, round 0, before round 1; same calibration as
        # in Flower): in total mode they count against privacy.eps with FDP-ADMM's (NoisePlan).
        b = scenario.basis
        result.ledger.record_many(basis_releases(result.sample_sizes, clip_cb=b.clip_cb, eps=b.eps, delta=b.delta))
    guard = None if total_budget is None else BudgetGuard(result.ledger, *total_budget)
    for round_ in range(state.round + 1, scenario.algorithm.rounds + 1):
        rho = round_rho(scenario, state)  # rho^l (eq. (1.16); fixed unless algorithm.rho_rule says otherwise)
        eta, sensitivity, sigma = plan.release(round_, sizes, rho)
        failed = draw_failures(fault_seed, round_, len(sizes), faults.failure_rate)
        try:
            check_quorum(~failed, faults.quorum, round_)
        except QuorumLost as exc:
            result.failures += [FailureRecord(round_, int(i), "injected", False) for i in np.flatnonzero(failed)]
            result.stop_reason = f"stopped: {exc}"
            break
        planned = [] if sigma is None else [
            primal_release(i, round_, sensitivity[i], sigma[i])
            for i in range(len(sizes)) if not failed[i]]
        if guard is not None and planned:
            try:
                guard.check(planned)  # before any noise is drawn or released
            except BudgetExhausted as exc:
                result.stop_reason = exc.reason
                break
        if journal is not None:
            append_requests(journal, planned)
        primals = client_primal_step(
            objective=objective, noisy_primal=state.noisy_primals, global_w=state.global_w[None, :],
            dual=state.duals, features=f, response=y, eta=eta[:, None], rho=rho, mask=mask)
        if sigma is None:
            noisy = primals
        else:
            noisy = np.stack([add_gaussian_noise(primals[i], sigma[i],
                                                 release_rng(scenario.seed, i, round_, p.noise_source), scales)
                              if not failed[i] else primals[i] for i in range(len(sizes))])
            result.ledger.record_many(planned)
        previous = state
        if failed.any():
            result.failures += [FailureRecord(round_, int(i), "injected", False) for i in np.flatnonzero(failed)]
            state = advance_with_failures(state, ~failed, noisy, rho)
        else:
            state = state.advance(noisy, rho)
        state, control = server_after_round(scenario.algorithm, previous, state, rho)  # eqs. (1.15)-(1.17)
        row = {"round": round_, "eta_mean": float(np.mean(eta)), **control.row(), **evaluator(state)}
        if sigma is not None:
            row.update(privacy_columns(result.ledger, accounting_delta(scenario)))
        if faults.failure_rate > 0:
            row["failed_clients"] = int(failed.sum())
        result.history.append(row)
        result.state = state
        if progress is not None:
            progress(round_, row)
        every = scenario.output.checkpoint_every
        if checkpoint_path is not None and every and round_ % every == 0:
            _checkpoint(checkpoint_path, result)
        if control.stop:
            result.stop_reason = stop_reason(round_)
            break
        if stop_after is not None and round_ >= stop_after:
            result.stop_reason = f"interrupted after round {round_}"
            break
    if checkpoint_path is not None and scenario.output.checkpoint_every:
        _checkpoint(checkpoint_path, result)
    return result


def _checkpoint(path, result: RunResult) -> None:
    from fdp_flower.outputs.checkpoint import Checkpoint, write_checkpoint

    try:
        write_checkpoint(path, Checkpoint(result.scenario, result.state, result.ledger, result.history,
                                          result.failures, engine=result.engine))
    except OSError as exc:  # the run goes on; writing its results reports (and rescues) what is lost
        log.warning("checkpoint %s not written (%s)", path, exc.strerror or exc)
