"""Predicted noise floors of the three trust modes (docs/secure_aggregation.md, eqs. (9.13)-(9.15)).

The floor (docs/choosing_a_budget.md, "The floor") is the privacy cost of the best unbiased use of
the whole budget: one noisy gradient of the loss at the exact solution and one exact Newton step.
In every FPCA direction, with the ellipsoid clip of radius gamma_c (rows whitened by the public
scales s_k = gamma_c sqrt(lambda_k), whitened per-record gradients of norm <= g = max(tau, 1 - tau)),
its variance over the statistical variance tau (1 - tau) / n of the exact estimator is

    floor = g^2 gamma_c^2 n V_g / (tau (1 - tau)),                                          (9.13)

where V_g is the variance, per coordinate and in units of g^2, of the noise on the pooled mean
gradient that the server uses.  The three modes differ only in V_g (one release at (eps, delta)
per site, or its composition over L rounds, which the Gaussian multiplier z makes equivalent):

- ``site`` (today): each site releases its mean with sensitivity 2 g / m_i and multiplier z (the
  PLD-exact one-release multiplier), and the server averages the M site means:
  V_g = (1 / M^2) sum_i (2 z / m_i)^2, i.e. 4 z^2 M / n^2 for equal sizes, and (9.13) becomes
  4 g^2 gamma_c^2 z^2 M / (n tau (1 - tau));                                                (9.14)
- ``trusted_aggregator`` (central DP): the server adds N(0, (2 g z)^2) once to the sum of the sites'
  record-sums and divides by n: V_g = 4 z^2 / n^2, the site floor divided by M;
- ``secure_aggregation``: the sum carries the sites' Skellam shares, M V / (M - t) in total plus at
  most M / 4 of rounding, in units of (gamma g)^2 (:mod:`fdp_flower.privacy.distributed`):
  V_g = 4 z_sa^2 / n^2 with z_sa = :meth:`~fdp_flower.privacy.distributed.SecureSumPlan.gaussian_equivalent_multiplier`,
  i.e. the central floor times (z_sa / z)^2 ~ (M / (M - t)) x 1.18 at eps = 1 (the 1.18 is the RDP
  conversion's price over the PLD-exact Gaussian; rounding and the Skellam's O(1/V) terms add < 1e-3).  (9.15)

The formulas leave out what the measured privacy cost also contains (benchmarks/privacy_cost.py):
the penalty's curvature, the exact estimator's bias (truncation, penalty, clip), which lower the
ratio, and the optimization error of a finite run, which raises it.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

TrustMode = Literal["site", "secure_aggregation", "trusted_aggregator"]
TRUST_MODES: tuple[str, ...] = ("site", "secure_aggregation", "trusted_aggregator")


def one_release_multiplier(eps: float, delta: float) -> float:
    """z of the one Gaussian release that spends exactly (eps, delta) (Balle and Wang 2018, through
    dp_accounting); L releases of multiplier z sqrt(L) spend the same."""
    from fdp_flower.privacy.calibration import target_mu

    mu = target_mu(eps, delta)
    if not (math.isfinite(mu) and mu > 0):
        raise ValueError(f"no Gaussian multiplier for eps = {eps}, delta = {delta}")
    return 1.0 / mu


def _sizes(sizes: Sequence[int] | None, clients: int, samples: int) -> np.ndarray:
    if sizes is None:
        if samples % clients:
            raise ValueError(f"samples ({samples}) must split evenly over clients ({clients}), or give sizes")
        return np.full(clients, samples // clients, dtype=float)
    m = np.asarray(sizes, dtype=float)
    if m.shape != (clients,) or np.any(m < 1) or int(m.sum()) != samples:
        raise ValueError(f"sizes must be {clients} positive counts summing to samples = {samples}")
    return m


def gradient_noise_variance(mode: str, *, clients: int, samples: int, eps: float, delta: float,
                            sizes: Sequence[int] | None = None, tolerated: int = 0, rounds: int = 120,
                            dim: int = 11) -> float:
    """V_g of eq. (9.13): the noise variance per coordinate on the pooled mean gradient, in units of
    the per-record bound squared, for trust mode ``mode`` (eqs. (9.14), (9.15))."""
    if mode not in TRUST_MODES:
        raise ValueError(f"mode must be one of {TRUST_MODES}, got {mode!r}")
    if int(clients) != clients or clients < 1:
        raise ValueError(f"clients must be a positive integer, got {clients}")
    if int(samples) != samples or samples < clients:
        raise ValueError(f"samples must be an integer >= clients, got {samples}")
    m = _sizes(sizes, clients, samples)
    z = one_release_multiplier(eps, delta)
    if mode == "site":
        return float(np.sum((2.0 * z / m) ** 2) / clients**2)
    if mode == "trusted_aggregator":
        return (2.0 * z / samples) ** 2
    from fdp_flower.privacy.distributed import plan_secure_sum

    if clients < 2:
        raise ValueError("secure aggregation needs at least 2 clients")
    plan = plan_secure_sum(eps=eps, delta=delta, rounds=rounds, sites=clients, tolerated=tolerated, dim=dim,
                           record_bound=1.0, max_site_records=int(m.max()), total_records=samples)
    return (2.0 * plan.gaussian_equivalent_multiplier() / samples) ** 2


def noise_floor_per_direction(mode: str, *, tau: float, clip_radius: float, clients: int, samples: int,
                              eps: float, delta: float, sizes: Sequence[int] | None = None, tolerated: int = 0,
                              rounds: int = 120, dim: int = 11) -> float:
    """The predicted floor of eq. (9.13) in one FPCA direction for trust mode ``mode``.

    Parameters
    ----------
    mode : {"site", "secure_aggregation", "trusted_aggregator"}
    tau : float
        Quantile level in (0, 1).
    clip_radius : float
        gamma_c, the Mahalanobis radius of the ellipsoid clip (the product's default: 4).
    clients, samples : int
        M and n.
    eps, delta : float
        The whole run's budget per site.
    sizes : sequence of int, optional
        m_i (default: n / M each).
    tolerated : int
        t, missing shares secure aggregation tolerates (default: 0).
    rounds, dim : int
        L and K of secure aggregation's plan (they move its floor by < 1e-3; default: 120, 11).
    """
    if not 0 < tau < 1:
        raise ValueError(f"tau must be in (0, 1), got {tau}")
    if not clip_radius > 0:
        raise ValueError(f"clip_radius must be > 0, got {clip_radius}")
    g = max(tau, 1.0 - tau)
    v = gradient_noise_variance(mode, clients=clients, samples=samples, eps=eps, delta=delta, sizes=sizes,
                                tolerated=tolerated, rounds=rounds, dim=dim)
    return g * g * clip_radius**2 * samples * v / (tau * (1.0 - tau))
