"""FDP-ADMM's server protocol: the state machine every engine drives (docs/algorithms.md, section 1;
the protocol interface: :mod:`fdp_flower.algorithms.protocol`).

The server holds the whole run state: the consensus w, every client's dual g_i and last released
primal wt_i, the ledger.  Round l:

1. :meth:`FDPADMMServer.begin_round`: asks each client for its noisy descent term at the point
   wt_i^{l-1} (:mod:`fdp_flower.algorithms.fdp_admm.site`, eq. (1.3)); in total-budget mode the
   budget guard checks the planned releases first, and a journal records them when a re-release
   would draw new noise;
2. :meth:`~FDPADMMServer.accept` checks each release (shape, finiteness, the site's count m_i and
   calibration against the public plan);
3. :meth:`~FDPADMMServer.end_round` turns each released term d~_i into the client's primal by the
   server's step (eq. (1.2) in released form: :func:`~fdp_flower.algorithms.fdp_admm.update.server_primal_step`),
   averages and updates the duals (eqs. (1.4)-(1.5); failed clients keep their last wt_i and g_i:
   :func:`fdp_flower.algorithms.faults.advance_with_failures`), applies the rho rule and stopping rule
   (eqs. (1.15)-(1.17)), computes the round's metrics and calls the checkpoint hook.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from fdp_flower.algorithms.faults import advance_with_failures
from fdp_flower.algorithms.fdp_admm.convergence import cap_reason, server_after_round, stop_reason
from fdp_flower.algorithms.fdp_admm.plan import (
    aggregation_trust,
    build_objective,
    initial_state,
    model_dim,
    noise_plan,
    privacy_columns,
    round_rho,
    site_plan,
)
from fdp_flower.algorithms.fdp_admm.site import MECHANISM, term_release
from fdp_flower.algorithms.fdp_admm.update import FDPADMMState, server_primal_step
from fdp_flower.algorithms.protocol import (
    ReleaseRejected,
    RoundPlan,
    RunStopped,
    ServerProtocol,
    SiteRelease,
    SiteRequest,
)
from fdp_flower.privacy import BudgetExhausted, BudgetGuard
from fdp_flower.privacy.distributed import SkellamSumRelease

log = logging.getLogger(__name__)

#: SeedSequence spawn-key tag of the trusted aggregator's noise (sites' release noise uses 1, data 2,
#: site secrets 3, a site's further releases 4).
TRUSTED_AGGREGATOR_STREAM = 5


def trusted_aggregator_rng(scenario, round_: int) -> np.random.Generator:
    """The generator of the trusted aggregator's one noise draw of ``round_``: from the run seed when
    ``privacy.noise_source`` is seeded (reproducible), else from the operating system's entropy."""
    if scenario.privacy.noise_source != "seeded":
        return np.random.default_rng()
    return np.random.default_rng(np.random.SeedSequence(int(scenario.seed),
                                                        spawn_key=(TRUSTED_AGGREGATOR_STREAM, int(round_))))


def _close(reported: float, planned: float) -> bool:
    """|reported - planned| <= 1e-9 |planned| (scalar arithmetic: checked for every client and round)."""
    return abs(reported - planned) <= 1e-9 * abs(planned)


def server_round(scenario, objective, state: FDPADMMState, descent: np.ndarray, *, eta, rho,
                 replied: np.ndarray | None = None):
    """The server's whole step of one round from the released descent terms (docs/algorithms.md,
    eqs. (1.2), (1.4)-(1.5), (1.15)-(1.17)): every client's primal w_i^l
    (:func:`~fdp_flower.algorithms.fdp_admm.update.server_primal_step`), the consensus and the duals
    (failed clients, ``replied`` False, keep their last wt_i and g_i:
    :func:`~fdp_flower.algorithms.faults.advance_with_failures`), then the rho rule and the stopping
    rule.  ``descent`` (..., M, K) (rows of failed clients are ignored); ``eta`` broadcasts over it
    ((..., M, 1)); ``rho`` the round's penalty (scalar, or (...) for stacked configurations).
    Returns (the new state holding rho^{l+1}, the round's :class:`~fdp_flower.algorithms.fdp_admm.convergence.RoundControl`).
    """
    rho_b = rho if np.ndim(rho) == 0 else np.asarray(rho, dtype=float)[..., None, None]
    primals = server_primal_step(objective=objective, noisy_primal=state.noisy_primals,
                                 global_w=state.global_w[..., None, :], dual=state.duals, descent=descent,
                                 eta=eta, rho=rho_b)
    if replied is None or np.all(replied):
        advanced = state.advance(primals, rho)
    else:
        advanced = advance_with_failures(state, replied, primals, rho)
    return server_after_round(scenario.algorithm, state, advanced, rho)


def decode_secure_sum(plan, round_: int, total: np.ndarray, contributing: int) -> np.ndarray:
    """D = S (sum_i v_i) / (gamma A) from the integer sum ``total`` of A = ``contributing`` secure-sum shares
    (docs/algorithms.md, eq. (1.3s); ``plan`` the run's :class:`~fdp_flower.algorithms.fdp_admm.site.SitePlan`).
    Fewer than M - t shares refuse the round (:class:`RunStopped`: the noise would be short, eq. (9.4)),
    before anything is decoded."""
    secure = plan.secure
    needed = secure.sites - secure.tolerated
    if contributing < needed:
        raise RunStopped(f"stopped: secure sum of round {round_} refused: {contributing} of {secure.sites} "
                         f"shares arrived, the guarantee needs M - t = {needed} (privacy.tolerated = "
                         f"{secure.tolerated})")
    total = np.asarray(total)
    if total.shape != (plan.dim,) or total.dtype.kind not in "iu":
        raise ValueError(f"the secure sum must be an integer vector of shape ({plan.dim},)")
    return plan.unwhiten(total.astype(float) / (secure.scale * contributing))


def shared_descent(scenario, plan, round_: int, values) -> np.ndarray:
    """The shared descent term D of an aggregated trust mode from the contributors' releases ``values``
    (in client order), the one simulation of the aggregate every engine runs (docs/algorithms.md,
    eqs. (1.3s), (1.3t)): the whitened terms' sum over the A contributors, decoded or noised, divided by A
    and mapped back by the noise shape S.

    secure_aggregation: D = S (sum_i v_i) / (gamma A), the exact integer sum of the shares
    (:func:`decode_secure_sum`); trusted_aggregator: D = S (sum_i x_i + sigma_l N(0, I)) / A, the server's
    one noise draw (:func:`trusted_aggregator_rng`)."""
    if plan.trust == "secure_aggregation":
        total = np.zeros(plan.dim, dtype=np.int64)
        for value in values:
            total = total + np.asarray(value, dtype=np.int64)
        return decode_secure_sum(plan, round_, total, len(values))
    total = np.sum([np.asarray(value, dtype=float) for value in values], axis=0)
    sigma = plan.trusted_release(0, round_, plan.min_records).sigma  # sigma_l = z_l 2 G / min_i m_i
    noisy = total + sigma * trusted_aggregator_rng(scenario, round_).standard_normal(plan.dim)
    return plan.unwhiten(noisy / len(values))


class FDPADMMServer(ServerProtocol):
    """The server side of FDP-ADMM / F-ADMM (Zhou & Xiang 2022; docs/algorithms.md, eqs. (1.2)-(1.5)).

    Parameters
    ----------
    scenario : Scenario
        The parsed run description.
    basis : FunctionalBasis
        The public basis (its dimension, its score variances for the ellipsoid clip).
    sizes : sequence of int
        The public m_i of every client (simulated data: from the source; node-local data: from
        the setup phase).
    evaluator : callable, optional
        ``f(state) -> dict`` of metrics for each round's history row (default: None).
    total_budget : (eps, delta), optional
        Enforced by a :class:`~fdp_flower.privacy.BudgetGuard` before every round's releases
        (default: None).
    journal : callable, optional
        ``f(planned releases)``, called with every round's planned releases before any is asked for, when
        a re-release would draw new noise (the drivers pass :func:`fdp_flower.outputs.release_journal.append_requests`
        on the run's journal file, which fsyncs them) (default: None).
    on_round : callable, optional
        ``f(server)`` after every closed round (checkpoints) (default: None).
    """

    family = "fdp_admm"

    def __init__(self, scenario, basis, sizes, *, evaluator: Callable[[FDPADMMState], dict] | None = None,
                 total_budget: tuple[float, float] | None = None,
                 journal: Callable[[list], None] | None = None,
                 on_round: Callable[["FDPADMMServer"], None] | None = None) -> None:
        super().__init__(scenario.federation.num_clients, quorum=scenario.faults.quorum, on_round=on_round)
        self.scenario = scenario
        self.basis = basis
        self.sizes = np.asarray(sizes, dtype=float)
        if self.sizes.shape != (self.num_clients,):
            raise ValueError(f"sizes must give m_i of each of the {self.num_clients} clients, got {self.sizes.shape}")
        self.objective = build_objective(scenario)
        self.dim = model_dim(scenario, basis)
        self.steps = noise_plan(scenario, basis)
        self.trust = aggregation_trust(scenario)
        self.calibration = site_plan(scenario, basis, self.sizes)
        self.state = initial_state(scenario, self.dim)
        self.evaluator = evaluator
        self.guard = None if total_budget is None else BudgetGuard(self.ledger, *total_budget)
        self.journal = journal
        self._secure_total: np.ndarray | None = None  # the open round's sum from Flower's SecAgg+

    @property
    def round(self) -> int:
        return self.state.round

    @property
    def rounds_planned(self) -> int:
        return self.scenario.algorithm.rounds

    def release_event(self, client: int, round_: int, sensitivity: float, sigma: float):
        """An FDP-ADMM release's event as a site reported it (None for sigma 0: no noise); under
        trusted_aggregator the planned event of the server's own noise draw (eq. (1.3t): the site's term is
        noise-free and carries no metrics)."""
        if self.trust == "trusted_aggregator":
            return self.planned_release(round_, client)
        return None if sigma == 0 else term_release(client, round_, sensitivity, sigma)

    def checkpoint_state(self) -> dict | None:
        """The rule's state beyond :class:`FDPADMMState` a checkpoint must keep (JSON): none under the ADMM rule."""
        return None

    #: a scheduled server's own fields a checkpoint keeps (:meth:`_dump_fields`): numbers (or None) as they are,
    #: arrays (or None) as nested lists, lists of floats
    _SCALARS: tuple[str, ...] = ()
    _ARRAYS: tuple[str, ...] = ()
    _LISTS: tuple[str, ...] = ()

    def _dump_fields(self) -> dict:
        """The fields named by :attr:`_SCALARS`, :attr:`_ARRAYS` and :attr:`_LISTS` as JSON (each round-trips
        exactly)."""
        out = {k: getattr(self, k) for k in self._SCALARS}
        out.update({k: None if getattr(self, k) is None else np.asarray(getattr(self, k), float).tolist()
                    for k in self._ARRAYS})
        out.update({k: [float(v) for v in getattr(self, k)] for k in self._LISTS})
        return out

    def _load_fields(self, server_state: dict) -> None:
        """Set the fields :meth:`_dump_fields` wrote (KeyError / TypeError / ValueError for a state without them)."""
        for k in self._SCALARS:
            setattr(self, k, server_state[k])
        for k in self._ARRAYS:
            value = server_state[k]
            setattr(self, k, None if value is None else np.asarray(value, dtype=float))
        for k in self._LISTS:
            setattr(self, k, [float(v) for v in server_state[k]])

    def resume(self, state: FDPADMMState, ledger_releases, history, failures, server_state: dict | None = None
               ) -> None:
        """Continue after ``state.round`` with the run's ledger, history and failures restored (``server_state``:
        :meth:`checkpoint_state` of the interrupted run)."""
        self.state = state
        self.ledger.record_many(ledger_releases)
        self.history, self.failures = list(history), list(failures)

    def planned_release(self, round_: int, client: int, m: float | None = None):
        """The ledger event of ``client``'s release in ``round_`` (None when privacy is off)."""
        m = self.sizes[client] if m is None else m
        if self.trust == "secure_aggregation":
            return SkellamSumRelease.of_plan(self.calibration.secure, client=int(client), round=int(round_))
        if self.trust == "trusted_aggregator":
            return self.calibration.trusted_release(client, round_, m)
        sensitivity, sigma = self.calibration.calibration(round_, m)
        return None if sigma is None else term_release(client, round_, float(sensitivity), float(sigma))

    # ------------------------------------------------------------------ the state machine
    def _plan(self, clients=None) -> RoundPlan | None:
        self._secure_total = None
        round_ = self.state.round + 1
        if round_ > self.scenario.algorithm.rounds:
            return None
        asked = range(self.num_clients) if clients is None else sorted(int(c) for c in clients)
        planned = self._guarded_releases(round_, asked)
        requests = tuple(SiteRequest(i, round_, {"point": self.state.noisy_primals[i]}) for i in asked)
        return RoundPlan(round_, requests, planned)

    def _guarded_releases(self, round_: int, asked) -> tuple:
        """The planned ledger events of ``round_``'s releases by ``asked``, checked by the budget guard before any
        noise is drawn or released, and journaled (fsynced) before any release is asked for."""
        planned = tuple(r for r in (self.planned_release(round_, i) for i in asked) if r is not None)
        if self.guard is not None and planned:
            try:
                self.guard.check(planned)
            except BudgetExhausted as exc:
                raise RunStopped(exc.reason) from None
        if self.journal is not None and planned:
            self.journal(list(planned))
        return planned

    def _check(self, release: SiteRelease) -> None:
        if self.trust != "site":
            self._check_aggregated(release)
            return
        client, round_ = int(release.client), self.current_plan.round
        value = np.asarray(release.value, dtype=float) if isinstance(release.value, np.ndarray) else None
        if value is None or value.shape != (self.dim,):
            raise ReleaseRejected(f"client {client}: release has shape {np.shape(release.value)}, "
                                  f"expected ({self.dim},)")
        if not np.all(np.isfinite(value)):
            raise ReleaseRejected(f"client {client}: release contains NaN or infinite values")
        m = int(release.num_examples)
        if m != int(self.sizes[client]):
            raise ReleaseRejected(f"client {client}: reports m_i = {m}, the run's plan has {int(self.sizes[client])}")
        planned = self.planned_release(round_, client)
        event = release.event
        if planned is None:
            if event is not None:
                raise ReleaseRejected(f"client {client}: released with noise in a run without privacy")
        else:
            if event is None or event.mechanism != MECHANISM:
                raise ReleaseRejected(f"client {client}: release without its calibration")
            if not _close(event.sensitivity, planned.sensitivity):
                raise ReleaseRejected(f"client {client}: reported sensitivity does not match the scenario")
            if not _close(event.sigma, planned.sigma):
                raise ReleaseRejected(f"client {client}: noise sigma {event.sigma} != calibrated {planned.sigma}")
        bound = self.scenario.faults.max_primal_norm
        if bound is not None:
            primal = self._primal(client, value)
            if float(np.linalg.norm(primal)) > bound:
                raise ReleaseRejected(f"client {client}: primal norm {float(np.linalg.norm(primal)):.4g} exceeds "
                                      f"the bound {bound:.4g}")

    def _primal(self, client: int, descent: np.ndarray) -> np.ndarray:
        """Client ``client``'s primal w_i^l from its released descent term (eq. (1.2), the server's step)."""
        round_ = self.current_plan.round
        eta = self.steps.step_size(round_, self.sizes[client])
        return server_primal_step(objective=self.objective, noisy_primal=self.state.noisy_primals[client],
                                  global_w=self.state.global_w, dual=self.state.duals[client],
                                  descent=descent, eta=eta, rho=round_rho(self.scenario, self.state))

    # ------------------------------------------------------------------ aggregated trust modes
    def _check_aggregated(self, release: SiteRelease) -> None:
        """A release into an aggregate: an integer share of the planned grid (secure_aggregation) or a finite
        term (trusted_aggregator) of shape (K,), with the planned event and the public m_i."""
        client = int(release.client)
        value = release.value if isinstance(release.value, np.ndarray) else None
        if value is None or value.shape != (self.dim,):
            raise ReleaseRejected(f"client {client}: release has shape {np.shape(release.value)}, "
                                  f"expected ({self.dim},)")
        if int(release.num_examples) != int(self.sizes[client]):
            raise ReleaseRejected(f"client {client}: reports m_i = {int(release.num_examples)}, the run's plan has "
                                  f"{int(self.sizes[client])}")
        if release.event != self.planned_release(self.current_plan.round, client):
            raise ReleaseRejected(f"client {client}: release without the run's {self.trust} calibration")
        if self.trust == "secure_aggregation":
            if value.dtype.kind not in "iu":
                raise ReleaseRejected(f"client {client}: a secure-sum share must be integer, got {value.dtype}")
        elif not np.all(np.isfinite(value)):
            raise ReleaseRejected(f"client {client}: release contains NaN or infinite values")

    def aggregate_descent(self, round_: int, accepted: dict[int, SiteRelease]) -> np.ndarray:
        """The round's shared descent term D from the accepted releases (:func:`shared_descent`, eqs. (1.3s),
        (1.3t)); secure_aggregation: the sum Flower's SecAgg+ unmasked when :meth:`accept_secure_sum` gave
        one (the shares never reach the server), else the integer sum of the accepted shares -- the only
        value of the shares this method reads."""
        contributors = sorted(accepted)
        if self.trust == "secure_aggregation" and self._secure_total is not None:
            total, self._secure_total = self._secure_total, None
            return self.descent_from_sum(round_, total, contributors)
        return shared_descent(self.scenario, self.calibration, round_, [accepted[i].value for i in contributors])

    def accept_secure_sum(self, total: np.ndarray, contributors) -> None:
        """Accept the open round's secure sum as Flower's SecAgg+ returned it: the integer sum of the shares
        of ``contributors`` (the clients whose nodes' masked vectors were unmasked), each with its planned
        ledger event (the site added its share's noise before masking); :meth:`end_round` decodes it
        (:meth:`descent_from_sum`).  The individual shares never reach the server."""
        plan = self.current_plan
        if self.trust != "secure_aggregation":
            raise RuntimeError("accept_secure_sum: the run's privacy.trust is not secure_aggregation")
        total = np.asarray(total)
        if total.shape != (self.dim,) or total.dtype.kind not in "iu":
            raise ReleaseRejected(f"the secure sum must be an integer vector of shape ({self.dim},)")
        for client in sorted(int(c) for c in contributors):
            if not 0 <= client < self.num_clients or client in self._accepted:
                raise ReleaseRejected(f"bad or duplicate contributor {client}")
            self._accepted[client] = SiteRelease(client, plan.round, None, int(self.sizes[client]),
                                                 self.planned_release(plan.round, client), {})
            self._failed.pop(client, None)
        self._secure_total = total.astype(np.int64)

    def descent_from_sum(self, round_: int, total: np.ndarray, contributors) -> np.ndarray:
        """D = S (sum_i v_i) / (gamma A) from the integer sum of A >= M - t secure-sum shares
        (:func:`decode_secure_sum`, eq. (1.3s)); fewer shares refuse the round (:class:`RunStopped`)."""
        return decode_secure_sum(self.calibration, round_, total, len(contributors))

    def _close_aggregated(self, plan: RoundPlan, accepted: dict[int, SiteRelease]) -> dict:
        """The server step of an aggregated trust mode: every client takes the shared descent term D and
        the shared step eta^l = min_i eta_i^l, so every client's primal, dual and next point stay equal
        (the consensus collapses to the centralized step w^l = w^{l-1} + (D - (lam/M) P'(w^{l-1})) /
        (rho + 1/eta); docs/algorithms.md, section 1, "Trust modes")."""
        round_ = plan.round
        replied = np.array([i in accepted for i in range(self.num_clients)])
        self.check_quorum(replied, round_)
        shared = self.aggregate_descent(round_, accepted)
        descent = np.broadcast_to(shared, (self.num_clients, self.dim))
        eta = np.full(self.num_clients, float(np.min(self.steps.step_size(round_, self.sizes))))
        self.state, control = server_round(self.scenario, self.objective, self.state, descent, eta=eta[:, None],
                                           rho=round_rho(self.scenario, self.state))
        row = {"round": round_, "eta_mean": float(np.mean(eta)), **control.row()}
        if self.evaluator is not None:
            row.update(self.evaluator(self.state))
        row.update(privacy_columns(self.ledger, self.scenario.privacy.delta))
        row["failed_clients"] = int(self.num_clients - replied.sum())
        return row

    def _close(self, plan: RoundPlan, accepted: dict[int, SiteRelease]) -> dict:
        if self.trust != "site":
            return self._close_aggregated(plan, accepted)
        round_ = plan.round
        replied = np.array([i in accepted for i in range(self.num_clients)])
        self.check_quorum(replied, round_)
        descent = np.stack([np.asarray(accepted[i].value, dtype=float) if i in accepted else np.full(self.dim, np.nan)
                            for i in range(self.num_clients)])
        eta = self.steps.step_size(round_, self.sizes)
        self.state, control = server_round(self.scenario, self.objective, self.state, descent, eta=eta[:, None],
                                           rho=round_rho(self.scenario, self.state), replied=replied)
        row = {"round": round_, "eta_mean": float(np.mean(eta)), **control.row()}
        if self.evaluator is not None:
            row.update(self.evaluator(self.state))
        if self.scenario.privacy.enabled:
            row.update(privacy_columns(self.ledger, self.scenario.privacy.delta))
        row["failed_clients"] = int(self.num_clients - replied.sum())
        if control.stop:
            self.stop_reason = stop_reason(round_)
        elif round_ >= self.scenario.algorithm.rounds and self.scenario.algorithm.stopping.kind == "residuals":
            self.stop_reason = cap_reason(round_)  # the stopping test was on and never held
        return row
