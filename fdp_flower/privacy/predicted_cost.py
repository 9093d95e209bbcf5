"""The predicted privacy cost of an FDP-ADMM fit, before training, from public quantities only.

The privacy cost of a fit is E int (beta_private - beta_exact)^2 / E int (beta_exact - beta)^2
(docs/choosing_a_budget.md, section 0).  Its floor -- every site spends its whole budget on one
noisy record-mean gradient of the check loss at the exact solution and the server takes one exact
Newton step (docs/choosing_a_budget.md, "The floor") -- has, in every FPCA direction k, the ratio of
privacy variance to statistical variance

    r_k = 4 G^2 z^2 (s_k^2 / E[a_k^2]) (sum_i 1 / m_i^2) / (tau (1 - tau) sum_i 1 / m_i)        (F.1)

with G = max(tau, 1 - tau) the per-record gradient bound in the clip's units, z the noise
multiplier of one Gaussian release spending the run's (eps, delta) (a composition of L releases of
multiplier z sqrt(L) spends the same), s_k the noise scale of direction k and E[a_k^2] its score
variance.  The error density f(q_tau) and the Hessian cancel: (F.1) needs no data.  With equal
sizes m_i = n / M it is 4 G^2 z^2 gamma^2 M / (n tau (1 - tau)), the formula of docs/choosing_a_budget.md.

- Ellipsoid clip of Mahalanobis radius gamma (s_k = gamma sqrt(lambda_k)): s_k^2 / E[a_k^2] = gamma^2 in
  every direction, so the predicted cost is r = (F.1) with gamma^2.
- Sphere clip of radius c1 (s_k = c1) with score variances lambda_k: r_k uses c1^2 / lambda_k and the
  cost weighs the directions by their statistical variance, proportional to 1 / lambda_k:
  sum_k r_k / lambda_k / sum_k 1 / lambda_k.

The prediction is the floor of an unbiased estimator; the exact estimator's bias (penalty,
truncation at K) and a shrinking estimator make measured costs lower, a run that spends part of
the budget on other releases (``budget_share``) or does not reach its floor makes them higher.
Above 1, privacy adds more error than the data have: :func:`privacy_cost_warning` says what would
bring it to 1.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["PredictedCost", "default_clip_radius", "predicted_privacy_cost", "privacy_cost_warning"]


def default_clip_radius(n_components: int, coverage: float = 0.9) -> float:
    """gamma = sqrt of the ``coverage`` quantile of chi^2 with K degrees of freedom: the Mahalanobis
    radius that clips about 1 - coverage of Gaussian score rows (4.0 at K = 10 is the total-budget
    default; docs/choosing_a_budget.md)."""
    from scipy import stats

    if not (isinstance(n_components, (int, np.integer)) and n_components >= 1):
        raise ValueError(f"n_components: expected a positive integer, got {n_components!r}")
    if not 0 < coverage < 1:
        raise ValueError(f"coverage: expected a value in (0, 1), got {coverage!r}")
    return float(math.sqrt(stats.chi2.ppf(coverage, n_components)))


def _noise_multiplier(eps: float, delta: float) -> float:
    """z of the one Gaussian release that spends exactly (eps, delta) (1 / mu of the analytic Gaussian)."""
    from fdp_flower.privacy.calibration import target_mu

    mu = target_mu(eps, delta)
    if not (math.isfinite(mu) and mu > 0):
        raise ValueError(f"no Gaussian release spends eps = {eps!r} at delta = {delta!r}")
    return 1.0 / mu


@dataclass(frozen=True)
class PredictedCost:
    """A prediction of (F.1): ``cost`` (the privacy cost), ``per_direction`` (r_k), ``noise_multiplier``
    (the z of the budget share that reaches the estimate) and the inputs that produced it."""

    cost: float
    per_direction: np.ndarray
    noise_multiplier: float
    sizes: np.ndarray
    eps: float
    delta: float
    tau: float
    n_components: int
    clip_shape: str
    clip_radius: float
    budget_share: float


def _validate(sizes, eps, delta, tau, budget_share) -> np.ndarray:
    m = np.asarray(sizes, dtype=float).ravel()
    if m.size == 0 or not np.all(np.isfinite(m)) or np.any(m < 1):
        raise ValueError(f"sizes: expected one record count >= 1 per site, got {sizes!r}")
    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps > 0):
        raise ValueError(f"eps: expected a finite number > 0, got {eps!r}")
    if not 0 < delta < 1:
        raise ValueError(f"delta: expected a value in (0, 1), got {delta!r}")
    if not 0 < tau < 1:
        raise ValueError(f"tau: expected a value in (0, 1), got {tau!r}")
    if not (isinstance(budget_share, (int, float)) and math.isfinite(budget_share) and budget_share > 0):
        raise ValueError(f"budget_share: expected a finite number > 0, got {budget_share!r}")
    return m


def predicted_privacy_cost(sizes: Sequence[float], *, eps: float, delta: float, tau: float, n_components: int,
                           clip_shape: str = "ellipsoid", clip_radius: float | None = None,
                           score_variances: Sequence[float] | None = None,
                           budget_share: float = 1.0) -> PredictedCost:
    """The floor privacy cost (F.1) of an FDP-ADMM fit.

    Parameters
    ----------
    sizes : the public record counts m_i of the sites
    eps, delta : the whole run's budget per site
    tau : quantile level
    n_components : K
    clip_shape : "ellipsoid" (Mahalanobis radius ``clip_radius``, default :func:`default_clip_radius`) or
        "sphere" (radius ``clip_radius`` = c1, with the basis's ``score_variances`` lambda_k)
    budget_share : mu_fit^2 / mu(eps, delta)^2, the composed Gaussian of the releases that make the
        estimate over the one that spends (eps, delta) (1: all of it; less when a basis, location/scale or
        transient phase takes the rest; about L when ``eps`` is a per-round eps spent in each of L rounds)

    Returns
    -------
    PredictedCost
    """
    m = _validate(sizes, eps, delta, tau, budget_share)
    if not (isinstance(n_components, (int, np.integer)) and n_components >= 1):
        raise ValueError(f"n_components: expected a positive integer, got {n_components!r}")
    z = _noise_multiplier(eps, delta) / math.sqrt(budget_share)
    g = max(tau, 1.0 - tau)
    base = 4.0 * g * g * z * z * float(np.sum(m**-2.0)) / (tau * (1.0 - tau) * float(np.sum(1.0 / m)))
    if clip_shape == "ellipsoid":
        gamma = default_clip_radius(int(n_components)) if clip_radius is None else float(clip_radius)
        if not (math.isfinite(gamma) and gamma > 0):
            raise ValueError(f"clip_radius: expected a number > 0, got {clip_radius!r}")
        per = np.full(int(n_components), base * gamma * gamma)
        cost = float(per[0])
    elif clip_shape == "sphere":
        if clip_radius is None or not (math.isfinite(clip_radius) and clip_radius > 0):
            raise ValueError(f"clip_radius: the sphere clip needs its radius c1 > 0, got {clip_radius!r}")
        if score_variances is None:
            raise ValueError("score_variances: the sphere clip's cost depends on the score variances lambda_k "
                             "(give the basis's, or an estimate)")
        lam = np.asarray(score_variances, dtype=float)
        if lam.shape != (int(n_components),) or not np.all(lam > 0):
            raise ValueError(f"score_variances: expected {n_components} values > 0, got {score_variances!r}")
        gamma = float(clip_radius)
        per = base * gamma * gamma / lam
        cost = float(np.sum(per / lam) / np.sum(1.0 / lam))
    else:
        raise ValueError(f"clip_shape: choose 'ellipsoid' or 'sphere', got {clip_shape!r}")
    return PredictedCost(cost, per, z, m, float(eps), float(delta), float(tau), int(n_components), clip_shape,
                         gamma, float(budget_share))


def _round_up(x: float, digits: int = 2) -> float:
    """x rounded up to ``digits`` significant digits (so that a printed eps still suffices)."""
    if x <= 0:
        return x
    scale = 10.0 ** (math.floor(math.log10(x)) - digits + 1)
    return math.ceil(x / scale - 1e-9) * scale


def _eps_for_cost(p: PredictedCost, target: float) -> float:
    """The smallest eps, rounded up to 2 significant digits, at which the same fit's predicted cost is <=
    ``target`` (bisection on log eps; the cost falls monotonically with eps)."""
    lo, hi = p.eps, p.eps
    while True:
        hi *= 2.0
        if _cost_at(p, eps=hi) <= target or hi > 1e4:
            break
    while hi / lo > 1.001:
        mid = math.sqrt(lo * hi)
        if _cost_at(p, eps=mid) <= target:
            hi = mid
        else:
            lo = mid
    return _round_up(hi)


def _cost_at(p: PredictedCost, *, eps: float | None = None, n_components: int | None = None) -> float:
    k = p.n_components if n_components is None else n_components
    if p.clip_shape == "ellipsoid":
        radius = default_clip_radius(k) if n_components is not None else p.clip_radius
        return predicted_privacy_cost(p.sizes, eps=p.eps if eps is None else eps, delta=p.delta, tau=p.tau,
                                      n_components=k, clip_radius=radius, budget_share=p.budget_share).cost
    scale = p.cost  # the sphere's cost scales with z^2 only (K enters through lambda_k, not modelled here)
    z_new = _noise_multiplier(p.eps if eps is None else eps, p.delta) / math.sqrt(p.budget_share)
    return scale * (z_new / p.noise_multiplier) ** 2


def privacy_cost_warning(p: PredictedCost, threshold: float = 1.0) -> str | None:
    """None when ``p.cost`` <= ``threshold``; else one line naming what would bring it to the threshold:
    more records per site (the cost falls like 1 / m), a larger eps, or (ellipsoid clip) fewer components."""
    if p.cost <= threshold:
        return None
    m_needed = int(math.ceil(float(np.min(p.sizes)) * p.cost / threshold))
    eps_needed = _eps_for_cost(p, threshold)
    fixes = [f"at least {m_needed} records per site (smallest has {int(np.min(p.sizes))})",
             f"eps >= {eps_needed:g} (now {p.eps:g})"]
    if p.clip_shape == "ellipsoid":
        fewer = [k for k in range(p.n_components - 1, 0, -1) if _cost_at(p, n_components=k) <= threshold]
        if fewer:
            fixes.append(f"n_components <= {fewer[0]} (now {p.n_components})")
    return (f"predicted privacy cost {p.cost:.2g} > {threshold:g}: privacy noise would add {p.cost:.2g} times the "
            f"statistical error of the coefficient function at tau = {p.tau:g}; " + ", or ".join(fixes))
