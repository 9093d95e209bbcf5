"""Noise calibration for a total (eps, delta) budget, through ``dp_accounting``."""
from __future__ import annotations

from collections import Counter
from typing import Sequence

import dp_accounting
import numpy as np
from dp_accounting import pld


def composed_gaussian_event(noise_multipliers: Sequence[float]) -> dp_accounting.DpEvent:
    """Composition of sensitivity-1 Gaussians; equal multipliers are self-composed (fast, exact)."""
    counts = Counter(float(z) for z in noise_multipliers)
    return dp_accounting.ComposedDpEvent([
        dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), n) for z, n in counts.items()
    ])


def calibrate_noise_multiplier(eps_total: float, delta_total: float,
                               relative_multipliers: Sequence[float]) -> float:
    """The smallest scale c such that Gaussians with multipliers c * r_t compose to (eps_total, delta_total).

    Gaussians compose exactly into one Gaussian with multiplier
    (sum_t (c r_t)^-2)^(-1/2), so the analytic Gaussian calibration of
    ``dp_accounting.get_sigma_gaussian`` gives c in closed form; it is then refined
    with ``dp_accounting.calibrate_dp_mechanism`` under the PLD accountant (the
    ledger's tightest, whose discretization is pessimistic) so that the ledger
    never reports more than the target.  ``relative_multipliers`` fix the
    schedule's shape (all 1 for a constant schedule).
    """
    if not eps_total > 0:
        raise ValueError(f"eps_total must be > 0, got {eps_total}")
    if not 0 < delta_total < 1:
        raise ValueError(f"delta_total must be in (0, 1), got {delta_total}")
    rel = np.asarray([float(r) for r in relative_multipliers])
    if rel.size == 0 or rel.min() <= 0 or not np.all(np.isfinite(rel)):
        raise ValueError("relative_multipliers must be a non-empty sequence of positive finite numbers")
    analytic = dp_accounting.get_sigma_gaussian(eps_total, delta_total) * float(np.sqrt(np.sum(rel**-2.0)))
    return float(dp_accounting.calibrate_dp_mechanism(
        lambda: pld.PLDAccountant(value_discretization_interval=1e-4),
        lambda c: composed_gaussian_event(c * rel),
        eps_total, delta_total,
        bracket_interval=dp_accounting.ExplicitBracketInterval(0.95 * analytic, 1.25 * analytic),
        tol=1e-6 * analytic,
    ))
