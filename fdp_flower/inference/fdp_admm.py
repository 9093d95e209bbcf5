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


def plan_summary(model) -> NoisePlanSummary:
    """eta'_l, V_l, c_l and (lam / M) P'(w_hat) of a fit (eq. (9.4)), from its scenario, history and ledger."""
    from fdp_flower.algorithms.fdp_admm.plan import build_objective, noise_plan, tail_start

    sc = model.scenario
    history = model.history
    rounds = int(history["round"].iloc[-1]) if len(history) else 0
    if rounds < 1:
        raise ValueError("the model ran no round: nothing to infer from")
    plan = noise_plan(sc, model.basis)
    sizes = np.asarray(model.sample_sizes, dtype=float)
    if sizes.size == 0:
        raise ValueError("the model does not know its sites' sample sizes")
    rho = (history["rho"].to_numpy(dtype=float) if "rho" in history.columns
           else np.full(rounds, float(sc.algorithm.rho)))
    eta = np.array([float(np.mean(plan.step_size(l, sizes))) for l in range(1, rounds + 1)])
    eta_prime = 1.0 / (rho[:rounds] + 1.0 / eta)
    dim = model.w.size
    s = noise_shape(sc, model.basis)
    shape = np.ones(dim) if s is None else np.asarray(s, dtype=float)
    num_clients = int(sc.federation.num_clients)
    variance = np.zeros(rounds)  # sum over the sites of the primal noise's sigma^2, per round
    for r in model.ledger.releases:
        if not 1 <= r.round <= rounds:
            continue
        if r.mechanism == FIT_MECHANISM:
            if not 0 <= r.client < sizes.size:
                raise ValueError(f"the ledger names client {r.client}, but the model knows {sizes.size} sites")
            step = float(np.asarray(plan.step_size(r.round, sizes[r.client])).reshape(-1)[0])
            variance[r.round - 1] += (r.sigma / (rho[r.round - 1] + 1.0 / step))**2
        elif r.mechanism == LEGACY_FIT_MECHANISM:
            variance[r.round - 1] += r.sigma**2
    covariances = (variance / num_clients**2)[:, None, None] * np.diag(shape**2)[None]
    weights = estimator_weights(sc.algorithm.estimator.kind, rounds, tail_start(sc))
    objective = build_objective(sc)
    penalty = (objective.lam / num_clients) * np.asarray(objective.penalty.subgradient(model.w), dtype=float)
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


def model_band(model, sandwich: SandwichEstimate, *, level: float = 0.95, debias: bool = True,
               draws: int = 20000, seed: int = 0) -> ConfidenceBand:
    """The pointwise and simultaneous bands of a fitted model from the sites' aggregated releases."""
    inference = coefficient_inference(model.w, sandwich, plan_summary(model), debias=debias)
    beta_map, intercept_map, offset = linear_maps(model)
    return band_from_coefficients(inference, sandwich, beta_map=beta_map, intercept_map=intercept_map,
                                  intercept_offset=offset, grid=model.basis.grid, level=level, draws=draws,
                                  seed=seed)
