"""The batched in-process engine: many FDP-ADMM configurations as a few array operations per round.

A sweep (repetitions x quantile levels x privacy grid, ...) is thousands of runs of
the same small update.  This engine groups the configurations that share their
data -- same seed, data source, federation, basis and clip c1 -- generates the
data and the basis once per group, and advances every configuration of the group
together, with state arrays of shape (C, M, K) (C configurations):

- the projections a_ij . wt_i of all C configurations are one batched matrix
  product per round, (M, C, K) @ (M, K, m), and the subgradient sums another;
- the update rules are the shared pure functions of :mod:`fdp_flower.algorithms.fdp_admm.update`
  (:func:`~fdp_flower.algorithms.fdp_admm.update.client_primal_step`, :meth:`FDPADMMState.advance`),
  which broadcast over the leading configuration axis;
- step sizes, sensitivities and noise scales come from :class:`~fdp_flower.algorithms.fdp_admm.plan.NoisePlan`
  (once per distinct configuration, not per repetition);
- the noise of client i in round l is ``release_rng(seed, i, l).standard_normal(K)``
  (:func:`fdp_flower.privacy.mechanisms.release_rng`, the one derivation every engine uses)
  scaled by that configuration's sigma, so a configuration run here has exactly the
  iterates of :func:`fdp_flower.engines.inprocess.run_fdp_admm` with the same
  scenario (the test checks 1e-10).  Configurations that share a seed therefore
  share their standard-normal draws (common random numbers), exactly as separate
  runs with that seed would;
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
from fdp_flower.algorithms.fdp_admm.convergence import after_round
from fdp_flower.algorithms.fdp_admm.convergence import stop_reason as converged_reason
from fdp_flower.algorithms.fdp_admm.plan import (
    build_objective,
    data_source,
    noise_plan,
    noise_scales,
    split_coefficients,
    tail_start,
)
from fdp_flower.algorithms.fdp_admm.setup import simulation_setup
from fdp_flower.algorithms.fdp_admm.update import FDPADMMState, client_primal_step
from fdp_flower.core.losses import QuantileLoss
from fdp_flower.engines.inprocess import stack_clients
from fdp_flower.functional import design
from fdp_flower.functional.fpca import FunctionalBasis
from fdp_flower.privacy.ledger import epsilon_of_rho
from fdp_flower.privacy.mechanisms import release_rng, zcdp_to_dp

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
    """The data of one group: stacked clipped scores and tau-free responses."""

    sizes: np.ndarray  # (M,)
    basis: FunctionalBasis
    features: np.ndarray  # (M, m_max, K)
    features_t: np.ndarray  # (M, K, m_max), contiguous
    response: np.ndarray  # (M, m_max): paper design at tau = 0.5 (F^{-1}(0.5) = 0)
    mask: np.ndarray | None  # (M, m_max) or None when the clients have equal sizes
    clipped_rows: list[int]
    beta: np.ndarray | None  # true beta on the grid (simulation) or None
    shifts_with_tau: bool  # paper design: y(tau) = y(0.5) - F^{-1}(tau)
    counts: np.ndarray  # (M,) rows per client
    feature_means: np.ndarray  # (M, K) mean score of each client

    def response_for(self, scenario: Scenario) -> np.ndarray:
        if not self.shifts_with_tau:
            return self.response
        return self.response - data_source(scenario).tau_shift(scenario.model.loss.tau)


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
    f, y, mask = stack_clients(features, responses)
    counts = np.asarray(sizes, dtype=float)
    means = np.stack([a.mean(axis=0) for a in features])
    return SharedData(np.asarray(sizes), basis, f, np.ascontiguousarray(f.transpose(0, 2, 1)), y, mask,
                      [int(c) for c in clipped], evaluator.beta, paper, counts, means)


class _Given:
    """An objective whose subgradient was computed in batch: lets the batched engine call the
    shared :func:`client_primal_step` unchanged."""

    def __init__(self, subgradient: np.ndarray):
        self._s = subgradient

    def local_subgradient(self, *args, **kwargs) -> np.ndarray:
        return self._s


_ONE = np.ones(1)


def _batched_loss_terms(loss, data: SharedData, y: np.ndarray, w: np.ndarray, *, values: bool = False):
    """Mean subgradient (C, M, K) of the loss at w (C, M, K) for every client, or with
    ``values`` the mean loss (C, M).  Two batched matrix products instead of a
    (C, M, m, K) temporary; the loss sees its projections as 1-d features.

    Quantile loss fast path: (1/m) sum_j a_j (1{y_j - a_j.w <= 0} - tau)
    = (1/m) sum_j a_j 1{a_j.w >= y_j} - tau abar (the comparison is exact in floating
    point: y - p <= 0 iff p >= y), so only one comparison touches the (M, C, m) array.
    """
    if isinstance(loss, QuantileLoss) and not values:
        # one client at a time: the (C, m) temporaries stay in cache (2x faster than (M, C, m))
        n_cfg, num_clients, dim = w.shape
        m_max = data.features.shape[1]
        proj = np.empty((n_cfg, m_max))
        above = np.empty((n_cfg, m_max), dtype=bool)
        hit = np.empty((n_cfg, m_max))
        sums = np.empty((num_clients, n_cfg, dim))
        for i in range(num_clients):
            np.matmul(w[:, i, :], data.features_t[i], out=proj)
            np.greater_equal(proj, y[i], out=above)
            hit[...] = above
            if data.mask is not None:
                hit *= data.mask[i]
            np.matmul(hit, data.features[i], out=sums[i])
        return (sums / data.counts[:, None, None] - loss.tau * data.feature_means[:, None, :]).transpose(1, 0, 2)
    proj = np.matmul(w.transpose(1, 0, 2), data.features_t)  # (M, C, m)
    feats, resp = proj[..., None], y[:, None, :]
    if values:
        v = loss.per_sample(_ONE, feats, resp)
        if data.mask is not None:
            return ((v * data.mask[:, None, :]).sum(-1) / data.mask.sum(-1)[:, None]).T
        return v.mean(-1).T
    d = loss.per_sample_derivative(_ONE, feats, resp)  # (M, C, m)
    if data.mask is not None:
        d = d * data.mask[:, None, :]
        counts = data.mask.sum(-1)[:, None, None]
    else:
        counts = d.shape[-1]
    return (np.matmul(d, data.features) / counts).transpose(1, 0, 2)


def _mise(scenario: Scenario, basis: FunctionalBasis, beta: np.ndarray | None, w: np.ndarray) -> np.ndarray:
    if beta is None:
        return np.full(w.shape[:-1], np.nan)
    return design.mise(basis.function(split_coefficients(scenario, w)[1]), beta, basis.grid)


def _run_group(configs: list[Scenario], data: SharedData, plans: dict[str, tuple], noise: np.ndarray | None,
               *, history: bool, full_metrics: bool, trace: bool) -> list[BatchedResult]:
    sc0 = configs[0]
    objective = build_objective(sc0)
    rounds = sc0.algorithm.rounds
    y = data.response_for(sc0)
    num_clients, dim = data.features.shape[0], data.features.shape[2]
    n_cfg = len(configs)
    eta = np.stack([plans[_plan_key(c)][0] for c in configs], axis=1)  # (L, C, M)
    sigma = np.stack([plans[_plan_key(c)][1] for c in configs], axis=1)  # (L, C, M), 0 when not private
    zcdp = np.stack([plans[_plan_key(c)][2] for c in configs], axis=1)  # (L, C, M) per-round zCDP rho
    cum_zcdp = np.cumsum(zcdp, axis=0).max(axis=2)  # (L, C): worst client
    deltas = [c.privacy.delta for c in configs]
    private = np.array([c.privacy.enabled for c in configs])
    z = np.zeros((2, n_cfg, num_clients, dim))
    rho = np.full(n_cfg, float(sc0.algorithm.rho))  # rho^l of every configuration (eq. (1.16))
    state = FDPADMMState(0, z[0, :, 0].copy(), z[0].copy(), z[0].copy(), z[0, :, 0].copy(), z[0].copy(),
                         tail_start(sc0), z[0, :, 0].copy(), rho)  # the group shares its estimator and rules
    stopped = np.zeros(n_cfg, dtype=int)  # round after which the stopping rule (1.17) ended a configuration
    held: dict[int, tuple] = {}  # a stopped configuration's (w^l, wbar^l, released estimate) at its stop
    rows: list[list[dict]] = [[] for _ in configs]
    traces = np.zeros((rounds, n_cfg, dim)) if trace else None
    lam_over_m = objective.lam / objective.num_clients
    scales = noise_scales(sc0, data.basis)  # the group shares basis, c1 and clip shape
    shaped = None if noise is None or scales is None else noise * scales
    for l in range(1, rounds + 1):
        s = (_batched_loss_terms(objective.loss, data, y, state.noisy_primals)
             + lam_over_m * objective.penalty.subgradient(state.noisy_primals))
        primals = client_primal_step(objective=_Given(s), noisy_primal=state.noisy_primals,
                                     global_w=state.global_w[:, None, :], dual=state.duals, features=None,
                                     response=None, eta=eta[l - 1][..., None], rho=rho[:, None, None])
        if noise is not None and private.any():
            noisy = primals + sigma[l - 1][..., None] * (noise if shaped is None else shaped)[l - 1][None]
        else:
            noisy = primals
        previous_w = state.global_w
        state = state.advance(noisy, rho)
        control = after_round(sc0.algorithm, previous_global_w=previous_w, global_w=state.global_w,
                              noisy_primals=state.noisy_primals, duals=state.duals, rho=rho)  # eqs. (1.15)-(1.17)
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
                extra["empirical_loss"] = _batched_loss_terms(objective.loss, data, y, state.noisy_primals,
                                                              values=True).mean(-1)
                gw = np.broadcast_to(state.global_w[:, None, :], state.noisy_primals.shape)
                extra["objective"] = (_batched_loss_terms(objective.loss, data, y, np.ascontiguousarray(gw),
                                                          values=True).sum(-1)
                                      + objective.lam * objective.penalty.value(state.global_w))
            for c in np.flatnonzero(record):
                row = {"round": l, "eta_mean": float(eta[l - 1, c].mean()), **control.row(c), "mise": float(mise[c]),
                       "mise_avg": float(mise_avg[c]), "mise_estimate": float(mise_estimate[c])}
                row.update({k: float(v[c]) for k, v in extra.items()})
                if private[c]:  # eps_pld: the ledger's PLD figure, closed form of the composed Gaussians
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
        state = state.with_rho(rho)
    out = []
    estimate = state.estimate(sc0.algorithm.estimator.kind)
    for c, sc in enumerate(configs):
        hist = rows[c] if history else []
        last_w, avg_w, est_w = held.get(c, (state.global_w[c].copy(), state.average_global_w[c].copy(),
                                            estimate[c].copy()))
        out.append(BatchedResult(sc, last_w, avg_w, rows[c][-1], hist,
                                 None if traces is None else traces[:(stopped[c] or rounds), c].copy(),
                                 estimate_w=est_w,
                                 stop_reason=converged_reason(int(stopped[c])) if stopped[c] else "completed"))
    return out


def _plan_arrays(scenario: Scenario, sizes: np.ndarray, basis: FunctionalBasis) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(eta, sigma, per-round zCDP), each (L, M); sigma and zCDP are 0 without privacy."""
    plan = noise_plan(scenario, basis)
    rounds = scenario.algorithm.rounds
    eta = np.zeros((rounds, sizes.size))
    sigma = np.zeros_like(eta)
    zcdp = np.zeros_like(eta)
    for l in range(1, rounds + 1):
        e, sens, sig = plan.release(l, sizes)
        eta[l - 1] = e
        if sig is not None:
            sigma[l - 1] = sig
            zcdp[l - 1] = sens**2 / (2.0 * sig**2)
    return eta, sigma, zcdp


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
        dim = data.features.shape[2]
        sc0 = scenarios[indices[0]]
        max_rounds = max(scenarios[i].algorithm.rounds for i in indices)
        noise = None
        if any(scenarios[i].privacy.enabled for i in indices):
            source = getattr(sc0.privacy, "noise_source", "seeded")
            noise = np.stack([np.stack([release_rng(sc0.seed, i, l, source).standard_normal(dim)
                                        for i in range(data.sizes.size)]) for l in range(1, max_rounds + 1)])
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
            for i, res in zip(members, _run_group(configs, data, local_plans, noise, history=history,
                                                  full_metrics=full_metrics, trace=trace)):
                res.final["clipped_rows"] = int(sum(data.clipped_rows))
                res.final["group_seconds"] = time.perf_counter() - t0
                results[i] = res
        if progress is not None:
            progress(len(indices))
    return results  # type: ignore[return-value]
