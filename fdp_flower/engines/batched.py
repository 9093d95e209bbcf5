"""The batched in-process engine: many FDP-ADMM configurations as a few array operations per round.

A sweep (repetitions x quantile levels x privacy grid, ...) is thousands of runs of
the same small update.  This engine groups the configurations that share their
data -- same seed, data source, federation, basis and clip c1 -- generates the
data and the basis once per group, and advances every configuration of the group
together, with state arrays of shape (C, M, K) (C configurations):

- every round, the sites' releases are FDP-ADMM's site function vectorised over configurations
  and clients (:func:`fdp_flower.algorithms.fdp_admm.site.noisy_descent_terms`: the projections
  a_ij . wt_i of all C configurations are one batched matrix product per round, the subgradient
  sums another), and the server's step is the protocol's
  (:func:`fdp_flower.algorithms.fdp_admm.protocol.server_round`), which broadcasts over the leading
  configuration axis;
- step sizes and noise multipliers come from the same plans as every engine's
  (:class:`~fdp_flower.algorithms.fdp_admm.plan.NoisePlan`, :func:`~fdp_flower.algorithms.fdp_admm.plan.site_plan`;
  once per distinct configuration, not per repetition);
- the noise of client i in round l is drawn by the site function from
  ``release_rng(seed, i, l)`` (:func:`fdp_flower.privacy.mechanisms.run_noise`, the one derivation every
  engine uses) and scaled by each configuration's sigma, so a configuration run here has exactly the
  iterates of :func:`fdp_flower.engines.inprocess.run_fdp_admm` with the same
  scenario (the test checks 1e-10).  Configurations that share a seed therefore
  share their standard-normal draws (common random numbers), exactly as separate
  runs with that seed would;
- a configuration with ``privacy.trust`` secure_aggregation or trusted_aggregator runs the very functions
  of the in-process engine for its sites and its aggregate: every client's release is
  :func:`fdp_flower.algorithms.fdp_admm.site.answer` (the integer Skellam share, or the noise-free term)
  and the round's shared descent term :func:`fdp_flower.algorithms.fdp_admm.protocol.shared_descent`
  (the exact integer sum decoded, or the server's one noise draw), with the shared step
  min_i eta_i^l; so its integers, sums and iterates are those of the in-process run (the test checks
  equality), and its privacy columns come from a ledger of the releases' events, as the server's do;
- on the paper's simulation design the curves do not depend on tau (only the
  response shifts by F^{-1}(tau)), so the quantile levels share the data too;
- no reference LP is solved: the metrics are the MISE of the final iterate w^l
  and of the running average wbar^l, and the composed zCDP of the releases
  (optionally the empirical loss and objective, ``full_metrics=True``).

Not supported here (use :func:`~fdp_flower.engines.inprocess.run_fdp_admm`):
failure injection, checkpoints and the budget guard (a per-round or calibrated
total-budget plan never trips it).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fdp_flower.algorithms.fdp_admm.config import Scenario
from fdp_flower.algorithms.fdp_admm.convergence import cap_reason
from fdp_flower.algorithms.fdp_admm.convergence import stop_reason as converged_reason
from fdp_flower.algorithms.fdp_admm.plan import (
    aggregation_trust,
    build_objective,
    data_source,
    noise_plan,
    privacy_columns,
    site_plan,
    split_coefficients,
    tail_start,
)
from fdp_flower.algorithms.fdp_admm.protocol import server_round, shared_descent
from fdp_flower.algorithms.fdp_admm.setup import simulation_setup
from fdp_flower.algorithms.fdp_admm.site import SiteData, answer, mean_loss_terms, noisy_descent_terms
from fdp_flower.algorithms.protocol import SiteRequest
from fdp_flower.algorithms.fdp_admm.update import FDPADMMState
from fdp_flower.functional import design
from fdp_flower.functional.federated_fpca import basis_releases
from fdp_flower.functional.fpca import FunctionalBasis
from fdp_flower.privacy.ledger import PrivacyLedger, epsilon_of_rho
from fdp_flower.privacy.mechanisms import run_noise, zcdp_to_dp

__all__ = ["BatchedResult", "SharedData", "data_key", "run_batched", "shared_setup"]


@dataclass
class BatchedResult:
    """One configuration's outcome.  ``history`` rows are per round; ``trace`` (optional)
    holds w^l for l = 1..L, shape (L, K)."""

    scenario: Scenario
    global_w: np.ndarray
    average_global_w: np.ndarray
    final: dict
    history: list[dict] = field(default_factory=list)
    trace: np.ndarray | None = None
    engine: str = "batched"
    estimate_w: np.ndarray | None = None  # the released model of algorithm.estimator
    #: "completed" (ran to algorithm.rounds), or why the stopping rule ended it (its last history row's round)
    stop_reason: str = "completed"


@dataclass(frozen=True)
class SharedData:
    """The data of one group: every client's site data (stacked clipped scores, tau-free responses)."""

    sizes: np.ndarray  # (M,)
    basis: FunctionalBasis
    site: SiteData  # (M, m_max, K) rows; responses of the paper design at tau = 0.5 (F^{-1}(0.5) = 0)
    clipped_rows: list[int]
    beta: np.ndarray | None  # true beta on the grid (simulation) or None
    shifts_with_tau: bool  # paper design: y(tau) = y(0.5) - F^{-1}(tau)

    def site_for(self, scenario: Scenario) -> SiteData:
        """The site data with the responses at ``scenario``'s quantile level."""
        if not self.shifts_with_tau:
            return self.site
        return self.site.with_response(self.site.response - data_source(scenario).tau_shift(scenario.model.loss.tau))


def data_key(scenario: Scenario) -> str:
    """Configurations with equal keys share data, basis and features."""
    dump = scenario.model_dump(mode="json", include={"seed", "data", "federation", "basis"})
    dump["clip_c1"] = scenario.model.clip_c1
    dump["clip_shape"] = scenario.model.clip_shape
    dump["intercept"] = (scenario.model.intercept, scenario.model.intercept_share)
    dump["noise_source"] = getattr(scenario.privacy, "noise_source", "seeded")
    if data_source(scenario).tau_shift(0.5) is None:
        dump["loss"] = scenario.model.loss.model_dump(mode="json")  # responses may depend on the loss
    return repr(sorted(dump.items()))


def _group_key(scenario: Scenario) -> str:
    """Configurations with equal keys share the loss, penalty, rho and L (one batched update)."""
    a = scenario.algorithm
    return repr(scenario.model_dump(mode="json", include={"model": {"loss", "penalty"}}) | {
        "rho": a.rho, "rounds": a.rounds, "estimator": a.estimator.model_dump(mode="json"),
        "rho_rule": a.rho_rule.model_dump(mode="json"), "stopping": a.stopping.model_dump(mode="json")})


def _plan_key(scenario: Scenario) -> str:
    return scenario.model_dump_json(exclude={"seed", "name", "output", "faults"})


def _check_supported(scenario: Scenario) -> None:
    if scenario.algorithm.kind != "fdp_admm":
        raise ValueError(f"the batched engine runs fdp_admm only, not {scenario.algorithm.kind!r}")
    if getattr(scenario.algorithm, "rule", "admm") != "admm":
        raise ValueError("the batched engine runs algorithm.rule 'admm' only: use the inprocess engine for 'newton'")
    if getattr(scenario.algorithm, "level_calibration", False) and scenario.privacy.enabled:
        raise ValueError("the batched engine runs the ADMM rounds only: use the inprocess engine for "
                         "algorithm.level_calibration")
    faults = getattr(scenario, "faults", None)
    if faults is not None and faults.failure_rate > 0:
        raise ValueError("the batched engine does not inject failures (faults.failure_rate > 0): "
                         "use the inprocess engine")


def shared_setup(scenario: Scenario) -> SharedData:
    """Data, basis and clipped scores of ``scenario``'s group (via :func:`runtime.simulation_setup`)."""
    paper = data_source(scenario).tau_shift(0.5) is not None
    base = scenario
    if paper:  # the curves do not depend on tau; F^{-1}(0.5) = 0 exactly for t(3)
        loss = scenario.model.loss.model_copy(update={"tau": 0.5})
        base = scenario.model_copy(update={"model": scenario.model.model_copy(update={"loss": loss})})
    sizes, basis, features, responses, clipped, evaluator = simulation_setup(base, with_reference=False)
    site = SiteData.stack(range(len(sizes)), features, responses, clipped)
    return SharedData(np.asarray(sizes), basis, site, [int(c) for c in clipped], evaluator.beta, paper)


def _mise(scenario: Scenario, basis: FunctionalBasis, beta: np.ndarray | None, w: np.ndarray) -> np.ndarray:
    if beta is None:
        return np.full(w.shape[:-1], np.nan)
    return design.mise(basis.function(split_coefficients(scenario, w)[1]), beta, basis.grid)


def _run_group(configs: list[Scenario], data: SharedData, plans: dict[str, tuple], *, history: bool,
               full_metrics: bool, trace: bool) -> list[BatchedResult]:
    sc0 = configs[0]
    objective = build_objective(sc0)
    rounds = sc0.algorithm.rounds
    site = data.site_for(sc0)
    num_clients, dim = site.features.shape[0], site.features.shape[2]
    n_cfg = len(configs)
    eta = np.stack([plans[_plan_key(c)][0] for c in configs], axis=1)  # (L, C, M)
    site_plans = [plans[_plan_key(c)][1] for c in configs]
    zcdp = np.stack([plans[_plan_key(c)][2] for c in configs], axis=1)  # (L, C, M) per-round zCDP rho
    cum_zcdp = np.cumsum(zcdp, axis=0).max(axis=2)  # (L, C): worst client
    deltas = [c.privacy.delta for c in configs]
    private = np.array([c.privacy.enabled for c in configs])
    noise = run_noise(sc0.seed, getattr(sc0.privacy, "noise_source", "seeded"))
    trusts = [aggregation_trust(c) for c in configs]
    per_site = [c for c in range(n_cfg) if trusts[c] == "site"]  # each client noises its own term (1.3)
    aggregated = [c for c in range(n_cfg) if trusts[c] != "site"]  # one shared term D per round (1.3s), (1.3t)
    ledgers = {c: _aggregate_ledger(configs[c], data) for c in aggregated}
    z = np.zeros((2, n_cfg, num_clients, dim))
    rho = np.full(n_cfg, float(sc0.algorithm.rho))  # rho^l of every configuration (eq. (1.16))
    state = FDPADMMState(0, z[0, :, 0].copy(), z[0].copy(), z[0].copy(), z[0, :, 0].copy(), z[0].copy(),
                         tail_start(sc0), z[0, :, 0].copy(), rho)  # the group shares its estimator and rules
    stopped = np.zeros(n_cfg, dtype=int)  # round after which the stopping rule (1.17) ended a configuration
    held: dict[int, tuple] = {}  # a stopped configuration's (w^l, wbar^l, released estimate) at its stop
    rows: list[list[dict]] = [[] for _ in configs]
    traces = np.zeros((rounds, n_cfg, dim)) if trace else None
    for l in range(1, rounds + 1):
        terms = np.empty_like(state.noisy_primals)
        if per_site:
            terms[per_site] = noisy_descent_terms(site, state.noisy_primals[per_site], round_=l,
                                                  plans=[site_plans[c] for c in per_site], noise=noise)  # (1.3)
        for c in aggregated:
            terms[c] = _aggregated_descent(configs[c], site, site_plans[c], state.noisy_primals[c], l, noise,
                                           ledgers[c])
        state, control = server_round(sc0, objective, state, terms, eta=eta[l - 1][..., None], rho=rho)
        running = stopped == 0
        stops_now = running & control.stop
        if traces is not None:
            traces[l - 1] = state.global_w
        record = running & (history or l == rounds) | stops_now  # rows of the configurations still running
        if record.any():  # metrics: every round, or only the last (a configuration's last: its stop)
            mise = _mise(sc0, data.basis, data.beta, state.global_w)
            mise_avg = _mise(sc0, data.basis, data.beta, state.average_global_w)
            mise_estimate = _mise(sc0, data.basis, data.beta, state.estimate(sc0.algorithm.estimator.kind))
            extra = {}
            if full_metrics:
                extra["empirical_loss"] = mean_loss_terms(objective.loss, site, state.noisy_primals,
                                                          values=True).mean(-1)
                gw = np.broadcast_to(state.global_w[:, None, :], state.noisy_primals.shape)
                extra["objective"] = (mean_loss_terms(objective.loss, site, np.ascontiguousarray(gw),
                                                      values=True).sum(-1)
                                      + objective.lam * objective.penalty.value(state.global_w))
            for c in np.flatnonzero(record):
                row = {"round": l, "eta_mean": float(eta[l - 1, c].mean()), **control.row(c), "mise": float(mise[c]),
                       "mise_avg": float(mise_avg[c]), "mise_estimate": float(mise_estimate[c])}
                row.update({k: float(v[c]) for k, v in extra.items()})
                if c in ledgers:  # the ledger of the releases' events, as the in-process server's rows
                    row.update(privacy_columns(ledgers[c], deltas[c]))
                elif private[c]:  # eps_pld: the ledger's PLD figure, closed form of the composed Gaussians
                    row["eps_pld"] = epsilon_of_rho(float(cum_zcdp[l - 1, c]), deltas[c])
                    row["zcdp_rho"] = float(cum_zcdp[l - 1, c])
                    row["eps_zcdp"] = zcdp_to_dp(float(cum_zcdp[l - 1, c]), deltas[c])
                rows[c].append(row)
        estimate = state.estimate(sc0.algorithm.estimator.kind)
        for c in np.flatnonzero(stops_now):
            stopped[c] = l
            held[c] = (state.global_w[c].copy(), state.average_global_w[c].copy(), estimate[c].copy())
        if stopped.all():
            break
        rho = control.next_rho
    out = []
    estimate = state.estimate(sc0.algorithm.estimator.kind)
    for c, sc in enumerate(configs):
        hist = rows[c] if history else []
        last_w, avg_w, est_w = held.get(c, (state.global_w[c].copy(), state.average_global_w[c].copy(),
                                            estimate[c].copy()))
        out.append(BatchedResult(sc, last_w, avg_w, rows[c][-1], hist,
                                 None if traces is None else traces[:(stopped[c] or rounds), c].copy(),
                                 estimate_w=est_w,
                                 stop_reason=converged_reason(int(stopped[c])) if stopped[c]
                                 else cap_reason(rounds) if sc.algorithm.stopping.kind == "residuals"
                                 else "completed"))
    return out


def _aggregate_ledger(scenario: Scenario, data: SharedData) -> PrivacyLedger:
    """An aggregated-trust configuration's ledger before round 1: the private basis phase's releases, if
    any (round 0, as the in-process engine records them)."""
    ledger = PrivacyLedger()
    if noise_plan(scenario, data.basis).basis_multiplier is not None:
        b = scenario.basis
        ledger.record_many(basis_releases([int(m) for m in data.sizes], clip_cb=b.clip_cb, eps=b.eps, delta=b.delta))
    return ledger


def _aggregated_descent(scenario: Scenario, site: SiteData, plan, points: np.ndarray, round_: int, noise,
                        ledger: PrivacyLedger) -> np.ndarray:
    """One aggregated-trust configuration's round: every client's release at its point (M, K) by the site
    function, then the shared descent term D (:func:`~fdp_flower.algorithms.fdp_admm.protocol.shared_descent`)
    broadcast to every client (M, K); the releases' events go to ``ledger``.  A refused release raises
    (this engine injects no failures)."""
    requests = [SiteRequest(client, round_, {"point": points[i]}) for i, client in enumerate(site.clients)]
    releases = answer(requests, site, plan, noise)
    refused = next((r for r in releases if isinstance(r, Exception)), None)
    if refused is not None:
        raise refused
    ledger.record_many([r.event for r in releases if r.event is not None])
    shared = shared_descent(scenario, plan, round_, [r.value for r in releases])
    return np.broadcast_to(shared, points.shape)


def _plan_arrays(scenario: Scenario, sizes: np.ndarray, basis: FunctionalBasis) -> tuple:
    """(eta (L, M), the site's plan, per-round zCDP (L, M)); the zCDP is 0 without privacy.  An aggregated
    trust mode takes the shared step min_i eta_i^l for every client (the server's, docs/algorithms.md,
    section 1, "Trust modes"); its privacy columns come from its ledger, not from this zCDP."""
    steps, calibration = noise_plan(scenario, basis), site_plan(scenario, basis, sizes)
    shared_step = aggregation_trust(scenario) != "site"
    rounds = scenario.algorithm.rounds
    eta = np.zeros((rounds, sizes.size))
    zcdp = np.zeros_like(eta)
    for l in range(1, rounds + 1):
        eta[l - 1] = steps.step_size(l, sizes)
        if shared_step:
            eta[l - 1] = float(np.min(eta[l - 1]))
        sensitivity, sigma = calibration.calibration(l, sizes)
        if sigma is not None:
            zcdp[l - 1] = sensitivity**2 / (2.0 * sigma**2)
    return eta, calibration, zcdp


def run_batched(scenarios: Sequence[Scenario], *, history: bool = True, full_metrics: bool = False,
                trace: bool = False, progress: Callable[[int], None] | None = None,
                plan_cache: dict | None = None) -> list[BatchedResult]:
    """Run every scenario; results in input order.

    Parameters
    ----------
    scenarios : the configurations (any mix; they are grouped by :func:`data_key`)
    history : keep per-round rows (default: True); else only the final row
    full_metrics : also the empirical loss at the released primals and the objective at w^l
        per round (two more passes over the data; default: False)
    trace : keep w^l of every round in ``BatchedResult.trace`` (default: False)
    progress : called with the number of configurations finished after each data group
    plan_cache : a dict reused across calls to skip recomputing noise plans
    """
    for sc in scenarios:
        _check_supported(sc)
    plans = {} if plan_cache is None else plan_cache
    by_data: dict[str, list[int]] = {}
    for i, sc in enumerate(scenarios):
        by_data.setdefault(data_key(sc), []).append(i)
    results: list[BatchedResult | None] = [None] * len(scenarios)
    for indices in by_data.values():
        t0 = time.perf_counter()
        data = shared_setup(scenarios[indices[0]])
        dim = data.site.features.shape[2]
        groups: dict[str, list[int]] = {}
        lam = data.basis.eigenvalues  # the step in whitened units depends on lambda_1 of this group's basis
        suffix = f"|K={dim}|m={data.sizes.tolist()}|lam1={None if lam is None else float(np.max(lam))!r}"
        for i in indices:
            key = _plan_key(scenarios[i]) + suffix
            if key not in plans:
                plans[key] = _plan_arrays(scenarios[i], data.sizes, data.basis)
            groups.setdefault(_group_key(scenarios[i]), []).append(i)
        for members in groups.values():
            configs = [scenarios[i] for i in members]
            local_plans = {_plan_key(c): plans[_plan_key(c) + suffix] for c in configs}
            for i, res in zip(members, _run_group(configs, data, local_plans, history=history,
                                                  full_metrics=full_metrics, trace=trace)):
                res.final["clipped_rows"] = int(sum(data.clipped_rows))
                res.final["group_seconds"] = time.perf_counter() - t0
                results[i] = res
        if progress is not None:
            progress(len(indices))
    return results  # type: ignore[return-value]
