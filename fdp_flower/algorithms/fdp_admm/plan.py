"""FDP-ADMM from a scenario: objective, data, features, step sizes, sensitivities and noise.

The in-process engines, the Flower strategy and the Flower client worker all build their
losses, data, step sizes and noise from these functions, so that the engines cannot disagree
on an update rule or a calibration.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property, lru_cache

import numpy as np

from fdp_flower.algorithms.fdp_admm.config import Scenario
from fdp_flower.algorithms.fdp_admm.update import FDPADMMState, Objective, primal_sensitivity, tail_start_round
from fdp_flower.config.sections import ConstantStep, InvSqrtStep, InvStep, Theorem2Step
from fdp_flower.core.losses import make_loss
from fdp_flower.core.penalties import Penalty
from fdp_flower.core.schedules import StepSchedule, theorem2_base
from fdp_flower.functional import bases, sources
from fdp_flower.functional.design import CurveData
from fdp_flower.functional.fpca import FunctionalBasis
from fdp_flower.privacy.mechanisms import classic_gaussian_sigma


def build_objective(scenario: Scenario) -> Objective:
    lc, pc = scenario.model.loss, scenario.model.penalty
    loss = make_loss(lc.kind, tau=lc.tau, residual_bound=lc.residual_bound)
    penalty = Penalty(pc.kind, lam1=pc.lam1, lam2=pc.lam2, unpenalized=int(scenario.model.intercept))
    return Objective(loss=loss, penalty=penalty, lam=pc.lam, num_clients=scenario.federation.num_clients)


def data_source(scenario: Scenario, parts=None):
    """The scenario's data source (:mod:`fdp_flower.functional.sources`): grid, m_i, loading (``parts``: the
    curves of an in-memory source, which only the process holding them can pass)."""
    return sources.data_source(scenario.data, seed=scenario.seed, num_clients=scenario.federation.num_clients,
                               tau=scenario.model.loss.tau, parts=parts)


def grid_of(scenario: Scenario) -> np.ndarray:
    return data_source(scenario).grid()


def partition_sizes(scenario: Scenario) -> np.ndarray:
    """m_i of every client (public: the sensitivities use them)."""
    return data_source(scenario).partition_sizes()


def load_partition(scenario: Scenario, partition: int, path: str | None = None) -> CurveData:
    """Client ``partition``'s curves and responses (node-local data: from ``path``, else ``data.paths``)."""
    return data_source(scenario).load(partition, path)


def build_basis(scenario: Scenario, all_curves: np.ndarray | None = None) -> FunctionalBasis:
    """The basis of the run (:mod:`fdp_flower.functional.bases`).  ``pooled`` needs every curve
    (simulation only); ``federated_dp`` is built by its own phase."""
    return bases.build_basis(scenario.basis, grid_of(scenario), all_curves)


def model_dim(scenario: Scenario, basis: FunctionalBasis) -> int:
    """Dimension of w: the K scores, plus one leading coordinate when ``model.intercept`` is set."""
    return basis.n_components + int(scenario.model.intercept)


def score_scales(scenario: Scenario, basis: FunctionalBasis) -> np.ndarray | None:
    """c1 sqrt(lambda_k) of the ellipsoid clip (None for the sphere)."""
    if scenario.model.clip_shape == "sphere":
        return None
    lam = basis.eigenvalues
    if lam is None or lam.shape != (basis.n_components,) or not np.all(lam > 0):
        raise ValueError("model.clip_shape 'ellipsoid' needs the basis's score variances, all > 0 "
                         f"(basis kind {basis.kind!r} has {'none' if lam is None else np.round(lam, 6).tolist()})")
    return scenario.model.clip_c1 * np.sqrt(lam)


def noise_scales(scenario: Scenario, basis: FunctionalBasis) -> np.ndarray | None:
    """The public per-coordinate scales s of the clip and the noise: None for the sphere clip
    (isotropic noise); c1 sqrt(lambda_k) for the ellipsoid clip (``model.clip_shape``), preceded
    by c1 for the intercept coordinate (:func:`fdp_flower.core.clipping.intercept_design`)."""
    scales = score_scales(scenario, basis)
    if scales is None or not scenario.model.intercept:
        return scales
    return np.r_[scenario.model.clip_c1, scales]


def split_coefficients(scenario: Scenario, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(b, coef): the intercept b = c0 w_0 of the centred model y = b + sum_k coef_k <X - mean, phi_k>
    (0 without ``model.intercept``) and the K basis coefficients; ``w`` (..., dim)."""
    w = np.asarray(w, dtype=float)
    m = scenario.model
    if not m.intercept:
        return np.zeros(w.shape[:-1]), w
    return m.intercept_share * m.clip_c1 * w[..., 0], w[..., 1:]


@dataclass(frozen=True)
class NoisePlan:
    """Step sizes, sensitivities and noise of FDP-ADMM, from public quantities only.

    noise multiplier z = sigma / Delta: per_round mode, the classic rule
    sqrt(2 ln(1.25/delta)) / eps (Zhou & Xiang 2022, Theorem 1); total mode, the shape of
    ``privacy.schedule`` scaled so that the L releases of each client compose to
    (eps, delta) (:func:`fdp_flower.privacy.calibration.calibrate_noise_multiplier`) -- together
    with the client's federated DP-FPCA summary when the basis is ``federated_dp`` and private
    (its noise is set by ``basis.eps``; ``privacy.eps`` is the whole run's budget).
    """

    scenario: Scenario
    dim: int
    #: lambda_1, the basis's largest score variance: needed by ``algorithm.step_units: whitened``
    #: only (:func:`noise_plan` fills it from the basis)
    leading_score_variance: float | None = None

    @property
    def private(self) -> bool:
        return self.scenario.privacy.enabled

    @cached_property
    def noise_multipliers(self) -> np.ndarray | None:
        """z_l for rounds l = 1..L (None if not private)."""
        p = self.scenario.privacy
        if not p.enabled:
            return None
        rounds = self.scenario.algorithm.rounds
        if p.mode == "per_round":
            return np.full(rounds, float(classic_gaussian_sigma(1.0, p.eps, p.delta)))
        from fdp_flower.privacy.calibration import calibrate_noise_multiplier, schedule_multipliers

        rel = schedule_multipliers(p.schedule.kind, rounds, **p.schedule.model_dump(exclude={"kind"}))
        fixed = [] if self.basis_multiplier is None else [self.basis_multiplier]
        try:
            return calibrate_noise_multiplier(p.eps, p.delta, rel, fixed_multipliers=fixed) * rel
        except ValueError as exc:
            if not fixed:
                raise
            raise ValueError(f"privacy.eps = {p.eps:g} is the whole run's budget and the federated DP-FPCA "
                             f"summary (basis.eps = {self.scenario.basis.eps:g}) leaves none of it: {exc}; "
                             "raise privacy.eps or lower basis.eps") from None

    @cached_property
    def basis_multiplier(self) -> float | None:
        """z of each client's federated DP-FPCA summary (one release before round 1), or None
        without a private ``federated_dp`` basis."""
        b = self.scenario.basis
        if getattr(b, "kind", None) != "federated_dp" or not b.private:
            return None
        from fdp_flower.functional.federated_fpca import noise_multiplier

        return noise_multiplier(b.eps, b.delta)

    @cached_property
    def noise_multiplier(self) -> float | None:
        """The constant z of the run; for a non-constant schedule, the constant z with the
        same total zCDP, (L / sum_l z_l^-2)^(1/2) (used by the Theorem 2 step size)."""
        z = self.noise_multipliers
        if z is None:
            return None
        if np.all(z == z[0]):
            return float(z[0])
        return float(np.sqrt(len(z) / np.sum(z**-2.0)))

    @property
    def gradient_bound(self) -> float:
        """G of the loss on clipped rows; for the ellipsoid clip, in the units of the noise scales
        (rows with ||a / s|| <= 1: the G of c1 = 1), so sensitivities and sigmas are Mahalanobis."""
        objective = build_objective(self.scenario)
        c1 = self.scenario.model.clip_c1 if self.scenario.model.clip_shape == "sphere" else 1.0
        return objective.loss.gradient_bound(c1, paper_constants=self.scenario.privacy.paper_constants)

    def step_size(self, round_: int, m) -> np.ndarray:
        """eta_i^l for clients of sizes ``m`` (array or scalar)."""
        s = self.scenario.algorithm.step
        m = np.asarray(m, dtype=float)
        if isinstance(s, Theorem2Step):
            sc = self.scenario
            objective = build_objective(sc)
            c1 = sc.model.clip_c1
            base = theorem2_base(
                c_w=s.c_w, c1=c1, c2=objective.penalty.subgradient_bound(self.dim, s.c_w),
                lam=objective.lam, num_clients=sc.federation.num_clients, dim=self.dim, m=m,
                noise_multiplier=self.noise_multiplier)
            return StepSchedule("theorem2", scale=s.scale)(round_, theorem2_base=base) * np.ones_like(m)
        kind = {ConstantStep: "constant", InvSqrtStep: "inv_sqrt", InvStep: "inv"}[type(s)]
        return StepSchedule(kind, eta0=s.eta0)(round_) * self.step_unit * np.ones_like(m)

    @property
    def step_unit(self) -> float:
        """1 for ``step_units: absolute``; 1 / (c1^2 lambda_1) for ``whitened`` (the ellipsoid's scale of
        its leading axis: rescaling the curves by c rescales lambda_1 by c^2 and leaves the iterates'
        relative path unchanged)."""
        if getattr(self.scenario.algorithm, "step_units", "absolute") != "whitened":
            return 1.0
        lam1 = self.leading_score_variance
        if lam1 is None or not np.isfinite(lam1) or lam1 <= 0:
            raise ValueError("algorithm.step_units 'whitened' needs the basis's largest score variance lambda_1 > 0 "
                             f"(got {lam1}); build the plan with noise_plan(scenario, basis)")
        return 1.0 / (self.scenario.model.clip_c1 ** 2 * float(lam1))

    @cached_property
    def _scalar_releases(self) -> dict[tuple, tuple]:
        """(round, m, rho) -> :meth:`release` for one client size (a round's clients mostly share m)."""
        return {}

    def release(self, round_: int, m, rho: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(eta, sensitivity, sigma) of round ``round_`` for clients of sizes ``m``; sigma None if not private.
        ``rho``: the round's penalty rho^l (default ``algorithm.rho``; a private run always uses that one)."""
        if np.ndim(m) == 0:
            key = (int(round_), float(m), None if rho is None else float(rho))
            known = self._scalar_releases.get(key)
            if known is None:
                known = self._scalar_releases[key] = self._release(round_, m, rho)
            return known
        return self._release(round_, m, rho)

    def _release(self, round_: int, m, rho: float | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        eta = self.step_size(round_, m)
        rho = self.scenario.algorithm.rho if rho is None else float(rho)
        if self.private and rho != self.scenario.algorithm.rho:
            raise ValueError(f"rho = {rho:g} differs from algorithm.rho = {self.scenario.algorithm.rho:g}, "
                             "for which this private run's noise is calibrated")
        sensitivity = primal_sensitivity(gradient_bound=self.gradient_bound, m=m, rho=rho, eta=eta)
        z = self.noise_multipliers
        if z is not None and not 1 <= round_ <= len(z):
            raise ValueError(f"round {round_} is outside 1..{len(z)}: the noise was calibrated for {len(z)} rounds")
        sigma = None if z is None else z[round_ - 1] * sensitivity
        return eta, sensitivity, sigma


def noise_plan(scenario: Scenario, basis: FunctionalBasis) -> NoisePlan:
    """The :class:`NoisePlan` of a run on ``basis`` (every engine, the strategy and the client build
    it here): dimension from :func:`model_dim`, lambda_1 from the basis's score variances if any."""
    lam = basis.eigenvalues
    lam1 = float(np.max(lam)) if lam is not None and np.size(lam) else None
    return NoisePlan(scenario, model_dim(scenario, basis), lam1)


def newton_rule(scenario: Scenario) -> bool:
    """True for ``algorithm.rule: newton`` (:mod:`fdp_flower.algorithms.fdp_admm.newton`)."""
    return getattr(scenario.algorithm, "rule", "admm") == "newton"


def level_calibration(scenario: Scenario) -> bool:
    """True for a private ADMM-rule run with ``algorithm.level_calibration`` (its schedule:
    :func:`fdp_flower.algorithms.fdp_admm.newton.level_schedule`; ignored with privacy off)."""
    return bool(getattr(scenario.algorithm, "level_calibration", False)) and scenario.privacy.enabled \
        and not newton_rule(scenario)


def planned_rounds(scenario: Scenario) -> int:
    """The rounds of a run: ``algorithm.rounds``, plus the location/scale search's 8 and the level calibration's 13
    when they run."""
    from fdp_flower.algorithms.fdp_admm.newton import LEVEL_KINDS, UNBOUNDED_LOCATION_ROUNDS

    extra = UNBOUNDED_LOCATION_ROUNDS + len(LEVEL_KINDS) if level_calibration(scenario) else 0
    return int(scenario.algorithm.rounds) + extra


def scheduled_rule(scenario: Scenario) -> bool:
    """True when the run's releases follow a public schedule of kinds split from one mu^2 by the public
    n = sum_i m_i: the Newton rule, or the ADMM rule with a level calibration."""
    return newton_rule(scenario) or level_calibration(scenario)


def newton_plan(scenario: Scenario, basis: FunctionalBasis, total_records: float):
    """The Newton rule's public schedule (:func:`fdp_flower.algorithms.fdp_admm.newton.newton_schedule`): its
    mu^2 is the ADMM plan's sum_l z_l^-2 for the same ``algorithm.rounds`` and budget (the total budget net of
    a private basis phase), so the run spends exactly what the ADMM rule would; ``total_records`` n = sum m_i
    sets the auxiliary releases' shares (public).  On a basis without score variances the schedule has a
    second-moments round (the metric's matrix; noised with privacy)."""
    from fdp_flower.algorithms.fdp_admm.newton import newton_schedule

    z = noise_plan(scenario, basis).noise_multipliers
    mu = None if z is None else float(np.sqrt(np.sum(np.asarray(z, float) ** -2.0)))
    a = scenario.algorithm
    return newton_schedule(a.rounds, mu=mu, total_records=float(total_records),
                           intercept=bool(scenario.model.intercept), bounds=a.response_bounds is not None,
                           moments=basis.eigenvalues is None)


def site_plan(scenario: Scenario, basis: FunctionalBasis, sizes=None, total_records: float | None = None):
    """The :class:`~fdp_flower.algorithms.fdp_admm.site.SitePlan` of a run on ``basis``: the loss, G on
    the clipped rows (in the noise metric), the noise shape and every round's noise multiplier z_l;
    with ``privacy.trust`` other than site, also the trust mode, min_i m_i of the public ``sizes`` and
    (secure_aggregation) the secure-sum plan (:func:`secure_sum_plan`)."""
    from fdp_flower.algorithms.fdp_admm.site import SitePlan

    plan = noise_plan(scenario, basis)
    site = SitePlan(loss=build_objective(scenario).loss, gradient_bound=plan.gradient_bound,
                    scales=noise_scales(scenario, basis), noise_multipliers=plan.noise_multipliers, dim=plan.dim,
                    row_bound=float(scenario.model.clip_c1) if scenario.model.clip_shape == "sphere" else None)
    if newton_rule(scenario):
        if total_records is None:
            total_records = float(np.sum(sizes)) if sizes is not None else float(np.sum(partition_sizes(scenario)))
        schedule = newton_plan(scenario, basis, total_records)
        site = replace(site, schedule=schedule, noise_multipliers=schedule.multipliers)
    elif level_calibration(scenario):
        from fdp_flower.algorithms.fdp_admm.newton import level_schedule

        if total_records is None:
            total_records = float(np.sum(sizes)) if sizes is not None else float(np.sum(partition_sizes(scenario)))
        schedule = level_schedule(plan.noise_multipliers, total_records=float(total_records))
        site = replace(site, schedule=schedule, noise_multipliers=schedule.multipliers)
    trust = aggregation_trust(scenario)
    if trust == "site":
        return site
    if sizes is None:
        raise ValueError(f"privacy.trust {trust!r} needs the public client sizes m_i to plan the aggregate")
    m_min = int(np.min(np.asarray(sizes)))
    return replace(site, trust=trust, min_records=m_min,
                   secure=secure_sum_plan(scenario, plan.dim, plan.gradient_bound, m_min)
                   if trust == "secure_aggregation" else None)


def aggregation_trust(scenario: Scenario) -> str:
    """``privacy.trust`` of a private run, "site" for a run without privacy (nothing to aggregate privately)."""
    p = scenario.privacy
    return p.trust if p.enabled else "site"


def secure_sum_plan(scenario: Scenario, dim: int, gradient_bound: float, min_records: int):
    """The run's :class:`~fdp_flower.privacy.distributed.SecureSumPlan` (docs/algorithms.md, eq. (1.3s)):
    the whitened mean descent term x_i of a client of m_i >= min_records rows is a sum of at most
    min_records vectors of norm <= G / min_records in the plan's units (||x_i|| <= G, replacing a row
    moves it by <= 2 G / m_i <= 2 G / min_records), M = num_clients shares, t = ``privacy.tolerated``,
    one release per round, (eps, delta) the whole run's."""
    p, m = scenario.privacy, int(min_records)
    return _secure_sum_plan(float(p.eps), float(p.delta), int(scenario.algorithm.rounds),
                            int(scenario.federation.num_clients), int(p.tolerated), int(dim),
                            float(gradient_bound) / m, m)


@lru_cache(maxsize=32)
def _secure_sum_plan(eps, delta, rounds, sites, tolerated, dim, record_bound, min_records):
    from fdp_flower.privacy.distributed import plan_secure_sum

    return plan_secure_sum(eps=eps, delta=delta, rounds=rounds, sites=sites, tolerated=tolerated, dim=dim,
                           record_bound=record_bound, max_site_records=min_records,
                           total_records=sites * min_records)


def tail_start(scenario: Scenario) -> int:
    """First round summed by the released estimator's tail average (1 unless ``tail_average``)."""
    a = scenario.algorithm
    if a.estimator.kind != "tail_average":
        return 1
    return tail_start_round(a.rounds, a.estimator.tail_fraction)


def initial_state(scenario: Scenario, dim: int) -> FDPADMMState:
    """w^0 = 0, g^0 = 0, wt^0 = 0 in R^dim (``dim``: :func:`model_dim`), with the tail-average start
    of ``algorithm.estimator`` and rho^1 = ``algorithm.rho``."""
    return FDPADMMState.initial(scenario.federation.num_clients, dim, tail_start=tail_start(scenario),
                                rho=scenario.algorithm.rho)


def round_rho(scenario: Scenario, state: FDPADMMState) -> float:
    """rho^{l+1}, the penalty of the round after ``state`` (eq. (1.16)): the state's, else ``algorithm.rho``
    (a checkpoint written before the rule existed)."""
    return scenario.algorithm.rho if state.rho is None else float(state.rho)


def privacy_columns(ledger, delta: float) -> dict[str, float]:
    """Per-round privacy figures of the worst-off client: ``eps_pld`` (the headline accountant's eps, in
    closed form from the composed rho: :func:`fdp_flower.privacy.ledger.epsilon_of_rho`), then the
    looser ``eps_rdp`` and ``eps_zcdp`` and rho."""
    from fdp_flower.privacy.ledger import epsilon_of_rho, rdp_epsilon_of_rho
    from fdp_flower.privacy.mechanisms import zcdp_to_dp

    clients = ledger.clients
    if not clients:
        return {"eps_pld": 0.0, "zcdp_rho": 0.0, "eps_zcdp": 0.0, "eps_rdp": 0.0}
    if _skellam(ledger):  # secure aggregation: the Skellam's RDP figure is the only one
        return {"eps_rdp": ledger.worst_case(delta, with_pld=False).eps_rdp}
    # every figure is a function of the worst client's composed rho, which the ledger keeps as a running sum:
    # O(clients) a round, not O(releases so far)
    rho = max(ledger.zcdp_rho(c) for c in clients)
    return {"eps_pld": epsilon_of_rho(rho, delta), "zcdp_rho": rho, "eps_zcdp": zcdp_to_dp(rho, delta),
            "eps_rdp": rdp_epsilon_of_rho(rho, delta)}


def _skellam(ledger) -> bool:
    from fdp_flower.privacy.ledger import has_skellam

    return has_skellam(ledger.releases)
