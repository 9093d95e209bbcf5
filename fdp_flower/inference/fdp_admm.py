"""Private inference for a fitted FDP-ADMM model: the glue between a model's public pieces and the math
of :mod:`fdp_flower.inference.bands`, and each site's release from its own data (docs/inference.md).

A "model" here is anything with the attributes of :class:`fdp_flower.outputs.models.FunctionalModel`
(``w``, ``basis``, ``scenario``, ``ledger``, ``history``, ``sample_sizes``): the released estimate,
the public basis, the resolved scenario (steps, rho, clip, penalty, estimator) and the ledger (the
sigma of every release).  Nothing here reads data except :func:`site_release`, which is what a site
runs on its own rows.
"""
from __future__ import annotations

import numpy as np

from fdp_flower.inference.bands import (
    ConfidenceBand,
    NoisePlanSummary,
    SandwichEstimate,
    band_from_coefficients,
    coefficient_inference,
    estimator_weights,
)
from fdp_flower.inference.releases import SiteRows, site_rows

#: The fit's release: the site's noisy descent term -g_i + sigma_g,i S z (descent-term units,
#: sigma_g = z_l 2G/m_i; eq. (1.3)), whose noise reaches the primal iterate times eta'_{l,i} (eq. (1.2)).
FIT_MECHANISM = "fdp_admm_subgradient"
#: The same release as results written before the site released its descent term recorded it: sigma already
#: in primal units, z_l 2G / (m_i (rho + 1/eta_i^l)).
LEGACY_FIT_MECHANISM = "fdp_admm_primal"


def row_bound(scenario) -> float:
    """b with ||a / s|| <= b for every clipped row: c1 for the sphere clip (s = 1), 1 for the ellipsoid."""
    return float(scenario.model.clip_c1) if scenario.model.clip_shape == "sphere" else 1.0


def noise_shape(scenario, basis) -> np.ndarray | None:
    """The fit's public noise shape s (None: isotropic), as every engine uses it."""
    from fdp_flower.algorithms.fdp_admm.plan import noise_scales

    return noise_scales(scenario, basis)


def inference_round(scenario) -> int:
    """The ledger round of the inference releases: right after the fit's last planned round (a level
    calibration's included)."""
    from fdp_flower.algorithms.fdp_admm.plan import planned_rounds

    return planned_rounds(scenario) + 1


def site_rows_of(model, curves: np.ndarray, response: np.ndarray) -> SiteRows:
    """A site's rows as in training (basis scores, clipped, intercept column) in the noise shape's units and
    its residuals at the model's released estimate ``model.w`` (in the fit's units: (y - response_offset) /
    response_scale, the public constants the sites trained on)."""
    from fdp_flower.algorithms.fdp_admm.site import site_features
    from fdp_flower.functional.design import CurveData
    from fdp_flower.functional.node_files import standardized_response

    sc = model.scenario
    data = CurveData(np.asarray(curves, dtype=float), np.asarray(response, dtype=float), model.basis.grid)
    features, _ = site_features(sc, model.basis, data)
    response = standardized_response(data.response, float(getattr(sc.data, "response_offset", 0.0)),
                                     float(getattr(sc.data, "response_scale", 1.0)))
    return site_rows(features, response, model.w, scales=noise_shape(sc, model.basis),
                     bound=row_bound(sc))


def fit_multipliers(ledger, client: int) -> list[float]:
    """The noise multipliers sigma / Delta of every release ``client`` made (its ledger)."""
    return [r.noise_multiplier for r in ledger.releases if r.client == client]


def plan_summary(model, point: np.ndarray | None = None) -> NoisePlanSummary:
    """eta'_l, V_l, c_l and (lam / M) P'(w_hat) of a fit (eq. (9.4)), from its scenario, history and ledger.

    A level-calibrated fit (``algorithm.level_calibration``): the recursion of its L ADMM rounds (global rounds
    9..8+L, counted 1..L), in the standardized units they ran in (the l2 weight lam s), at ``point`` (the ADMM
    estimator in those units, :func:`level_inference`)."""
    from fdp_flower.algorithms.fdp_admm.plan import build_objective, level_calibration, noise_plan, tail_start

    sc = model.scenario
    history = model.history
    rounds = int(history["round"].iloc[-1]) if len(history) else 0
    if rounds < 1:
        raise ValueError("the model ran no round: nothing to infer from")
    levelled = level_calibration(sc)
    shift = 0
    if levelled:
        from fdp_flower.algorithms.fdp_admm.newton import UNBOUNDED_LOCATION_ROUNDS

        shift, rounds = UNBOUNDED_LOCATION_ROUNDS, int(sc.algorithm.rounds)
    plan = noise_plan(sc, model.basis)
    sizes = np.asarray(model.sample_sizes, dtype=float)
    if sizes.size == 0:
        raise ValueError("the model does not know its sites' sample sizes")
    rho = (history["rho"].to_numpy(dtype=float) if "rho" in history.columns and not levelled
           else np.full(rounds, float(sc.algorithm.rho)))  # a private run's rho is fixed
    eta = np.array([float(np.mean(plan.step_size(l, sizes))) for l in range(1, rounds + 1)])
    eta_prime = 1.0 / (rho[:rounds] + 1.0 / eta)
    dim = model.w.size
    s = noise_shape(sc, model.basis)
    shape = np.ones(dim) if s is None else np.asarray(s, dtype=float)
    num_clients = int(sc.federation.num_clients)
    variance = np.zeros(rounds)  # sum over the sites of the primal noise's sigma^2, per round
    for r in model.ledger.releases:
        l = r.round - shift  # the ADMM round
        if not 1 <= l <= rounds:
            continue
        if r.mechanism == FIT_MECHANISM:
            if not 0 <= r.client < sizes.size:
                raise ValueError(f"the ledger names client {r.client}, but the model knows {sizes.size} sites")
            step = float(np.asarray(plan.step_size(l, sizes[r.client])).reshape(-1)[0])
            variance[l - 1] += (r.sigma / (rho[l - 1] + 1.0 / step))**2
        elif r.mechanism == LEGACY_FIT_MECHANISM:
            variance[l - 1] += r.sigma**2
    covariances = (variance / num_clients**2)[:, None, None] * np.diag(shape**2)[None]
    weights = estimator_weights(sc.algorithm.estimator.kind, rounds, tail_start(sc))
    objective = build_objective(sc)
    if levelled:
        from fdp_flower.algorithms.fdp_admm.level_protocol import standardized_objective

        objective = standardized_objective(objective, float(history["scale"].iloc[-1]))
    point = model.w if point is None else point
    penalty = (objective.lam / num_clients) * np.asarray(objective.penalty.subgradient(point), dtype=float)
    site = (variance / num_clients)[:, None, None] * np.diag(shape**2)[None]  # one site's mean noise covariance
    c0 = sc.model.intercept_share * sc.model.clip_c1 if sc.model.intercept else 0.0
    return NoisePlanSummary(eta_prime, covariances, weights, penalty, eta, rho[:rounds], site, num_clients, float(c0))


def linear_maps(model) -> tuple[np.ndarray, np.ndarray, float]:
    """(beta_map (G, p), intercept_map (p,), offset): beta(t_g) = beta_map[g] . w and
    alpha = offset + intercept_map . w (docs/algorithms.md, eq. (1.12)), in the response's units: the sites
    fit (y - response_offset) / response_scale, so both maps carry the public ``response_scale`` (as
    ``model.beta_values`` and ``model.intercept`` do)."""
    sc = model.scenario
    basis = model.basis
    dim = model.w.size
    k = basis.n_components
    scale = float(getattr(sc.data, "response_scale", 1.0))
    beta_map = np.zeros((basis.grid.size, dim))
    beta_map[:, dim - k:] = basis.components.T
    intercept_map = np.zeros(dim)
    intercept_map[dim - k:] = -(basis.components * basis.weights) @ basis.mean
    if sc.model.intercept:
        intercept_map[0] = sc.model.intercept_share * sc.model.clip_c1
    return scale * beta_map, scale * intercept_map, float(getattr(sc.data, "response_offset", 0.0))


def standardized_sandwich(sandwich: SandwichEstimate, scale: float) -> SandwichEstimate:
    """The sandwich pieces in the units of a fit of y / s: residuals r / s have density s f(s u) and slope
    s^2 f'(s u), so D = f G becomes s D (G and Omega carry no response unit)."""
    from dataclasses import replace

    d = sandwich.density
    density = replace(d, density=scale * d.density, half_width=d.half_width / scale, slope=scale**2 * d.slope,
                      slope_sd=scale**2 * d.slope_sd)
    return replace(sandwich, density=density, hessian=scale * sandwich.hessian)


def calibration_weights(steps: int, ratio: float) -> tuple[np.ndarray, float]:
    """(c (steps,), alpha) with b_K - b* = alpha (b_0 - b*) + sum_k c_k e_k / f after the level calibration's K
    averaged one-shot Newton steps (docs/algorithms.md section 1.4): I_k = b_{k-1} - (share_k - tau) / f,
    b_k = mean(I_1..I_k), where share_k = tau + f_true (b_{k-1} - b*) + e_k and ``ratio`` = f_true / f; b_0 is
    the residual search's start.  With f = f_true one step lands on b* (alpha = 0, c_k = -1/K)."""
    coefficients = np.zeros((steps + 1, steps + 1))  # b_k - b* on (d_0, e_1..e_K), e in units of f
    coefficients[0, 0] = 1.0
    one_shots = []
    for k in range(1, steps + 1):
        shot = (1.0 - ratio) * coefficients[k - 1]
        shot[k] -= 1.0
        one_shots.append(shot)
        coefficients[k] = np.mean(one_shots, axis=0)
    return coefficients[steps, 1:], float(coefficients[steps, 0])


def level_inference(model, sandwich: SandwichEstimate, *, debias: bool = True):
    """w_d and its covariance (eqs. (9.7)-(9.8)) of a level-calibrated fit (``algorithm.level_calibration``,
    docs/algorithms.md section 1.4; docs/inference.md section 6).

    The slopes are the ADMM estimator's, run in standardized units x = (w - location e_0 / c0) / s: its
    recursion (9.4) in those units (D_s = s D, the released noise, the steps and the standardized penalty) gives
    x_d and Var(x_d), and the slopes are s x_d with covariance s^2 Var.  The intercept is the calibration's:
    the share of responses below the fit is tau at the released slopes, i.e. the intercept's first-order
    condition D_00 w_0 + D_0s w_s = const, so it moves with the slopes by J = -D_0s / D_00.  Released, it carries
    the share rounds' noise, sum_k c_k e_k / f (:func:`calibration_weights`; e_k the pooled share noise, f the
    server's density phi(Phi^-1(tau)) / s_r).  Debiased, the level is re-estimated from the share releases
    (recovered from the history's offsets) with the released density f_hat, averaging the rounds after the first
    -- which removes what the server's normal-law density left of the search's start -- minus the shift
    -(f'/2f) tr(C Sigma_delta) of the released slopes' noise; its variance is the averaged rounds' share noise
    over f_hat^2 plus that shift's.  The sampling part is the exact estimator's, D^-1 Omega D^-1: the calibrated
    intercept solves the same first-order condition."""
    from fdp_flower.algorithms.fdp_admm.newton import normal_density_at_quantile
    from fdp_flower.algorithms.fdp_admm.site import NEWTON_MECHANISMS
    from fdp_flower.inference.bands import CoefficientInference

    sc = model.scenario
    history = model.history
    last = history.iloc[-1]
    scale, location = float(last["scale"]), float(last["location"])
    offset, residual_scale = float(last["level_offset"]), float(last["residual_scale"])
    c0 = float(sc.model.intercept_share * sc.model.clip_c1)
    w_hat = np.asarray(model.w, dtype=float)
    x_hat = w_hat.copy()
    x_hat[0] -= (offset + location) / c0  # the ADMM estimator before the calibration's move, then standardized
    x_hat /= scale
    standardized, plan = standardized_sandwich(sandwich, scale), plan_summary(model, x_hat)
    inner = coefficient_inference(x_hat, standardized, plan, debias=debias)
    d = sandwich.hessian
    move = -d[0, 1:] / d[0, 0]  # J: the calibrated intercept's move per unit of slope
    lift = np.vstack([move, np.eye(d.shape[0] - 1)])
    slopes = scale * inner.estimate[1:]
    estimate = np.r_[w_hat[0] + move @ (slopes - w_hat[1:]), slopes]
    privacy = scale**2 * lift @ inner.privacy_covariance[1:, 1:] @ lift.T
    share = NEWTON_MECHANISMS["share"]
    rounds = sorted({r.round for r in model.ledger.releases if r.mechanism == share})
    if rounds:
        sizes = np.asarray(model.sample_sizes, dtype=float)
        weights = sizes / sizes.sum()
        noise = np.array([sum((weights[r.client] * r.sigma) ** 2 for r in model.ledger.releases
                              if r.round == k and r.mechanism == share) for k in rounds])
        f_server = normal_density_at_quantile(float(sc.model.loss.tau)) / residual_scale
        c, _start = calibration_weights(len(rounds), sandwich.density.density / f_server)
        variance = float(np.sum(c**2 * noise)) / f_server**2  # the released intercept's share noise
        if debias:
            # the released slopes' noise delta smooths the residuals the calibration counts: the share is tau at
            # b*(w°) - E[a] delta - (f' / 2f) delta^T C delta (C the scores' covariance), so the calibrated intercept
            # sits (f' / 2f) tr(C Sigma_delta) away in expectation, with variance (f' / 2f)^2 2 tr((C Sigma)^2)
            released = coefficient_inference(x_hat, standardized, plan, debias=False)
            sigma = scale**2 * released.privacy_covariance[1:, 1:]
            g = sandwich.gram
            spread = g[1:, 1:] - np.outer(g[1:, 0], g[0, 1:]) / g[0, 0]
            dens = sandwich.density
            kappa = dens.slope / dens.density
            product = spread @ sigma
            shift = -0.5 * kappa * float(np.trace(product))
            smoothing = 0.5 * kappa**2 * float(np.trace(product @ product)) \
                + ((shift * dens.slope_sd / dens.slope) ** 2 if dens.slope else 0.0)
            # the calibration's own level, re-estimated with the released density: each share round k released
            # share_k at the server's b_{k-1} (recovered from the offsets: one-shot I_k = k b_k - (k-1) b_{k-1},
            # share_k - tau = f (b_{k-1} - I_k)), and b_{k-1} - (share_k - tau) / f_hat estimates b* up to
            # (1 - f_true / f_hat)(b_{k-1} - b*) - e_k / f_hat; the rounds after the first (their b_{k-1} is
            # already near b*) are averaged, which removes what the server's normal-law density left of the start
            offsets = [float(history.loc[history["round"] == k - 1, "level_offset"].iloc[0]) for k in rounds]
            offsets.append(offset)
            one_shots = [k * offsets[k] - (k - 1) * offsets[k - 1] for k in range(1, len(offsets))]
            later = range(2, len(offsets)) if len(offsets) > 2 else range(1, len(offsets))
            level = np.mean([offsets[k - 1] - f_server * (offsets[k - 1] - one_shots[k - 1]) / dens.density
                             for k in later])
            estimate[0] += (float(level) - offset - shift) / c0
            variance = float(np.sum(noise[[k - 1 for k in later]])) / len(later) ** 2 / dens.density**2 + smoothing
        privacy[0, 0] += variance / c0**2
    d_inv = np.linalg.inv(d)
    sampling = d_inv @ sandwich.omega @ d_inv.T
    return CoefficientInference(estimate, w_hat, (sampling + sampling.T) / 2, (privacy + privacy.T) / 2,
                                inner.transient, inner.smoothing)


def model_band(model, sandwich: SandwichEstimate, *, level: float = 0.95, debias: bool = True,
               draws: int = 20000, seed: int = 0) -> ConfidenceBand:
    """The pointwise and simultaneous bands of a fitted model from the sites' aggregated releases (a
    level-calibrated fit's by :func:`level_inference`)."""
    from fdp_flower.algorithms.fdp_admm.plan import level_calibration

    if level_calibration(model.scenario):
        inference = level_inference(model, sandwich, debias=debias)
    else:
        inference = coefficient_inference(model.w, sandwich, plan_summary(model), debias=debias)
    beta_map, intercept_map, offset = linear_maps(model)
    return band_from_coefficients(inference, sandwich, beta_map=beta_map, intercept_map=intercept_map,
                                  intercept_offset=offset, grid=model.basis.grid, level=level, draws=draws,
                                  seed=seed)
