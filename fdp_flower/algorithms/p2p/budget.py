"""Per-step privacy budgets of the peer-to-peer algorithms (docs/algorithms.md, sections 3, 4 and 6).

Every node spends rho_{i,k} zCDP at step k; a release with sensitivity Delta
and noise sigma spends Delta^2 / (2 sigma^2) (Bun & Steinke 2016, Prop. 1.6),
so sigma_{i,k} = Delta_{i,k} / sqrt(2 rho_{i,k}).  A schedule is a vector of
relative multipliers m_k (rho_k = rho_1 m_k); a total budget fixes rho_1.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from fdp_flower.privacy.mechanisms import classic_gaussian_sigma


def rho_from_dp(eps: float, delta: float) -> float:
    """The largest rho whose Bun-Steinke conversion rho + 2 sqrt(rho ln(1/delta)) equals eps:
    rho = (sqrt(eps + ln(1/delta)) - sqrt(ln(1/delta)))^2 (inverse of mechanisms.zcdp_to_dp)."""
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    ln = math.log(1.0 / delta)
    return (math.sqrt(eps + ln) - math.sqrt(ln)) ** 2


def constant_multipliers(steps: int) -> np.ndarray:
    """rho_k = rho_1 (Gauthier et al. 2023, constant budget)."""
    return np.ones(steps)


def geometric_multipliers(steps: int, ratio: float) -> np.ndarray:
    """rho_k = rho_1 r^(k-1), r >= 1: the noise variance decreases (Gauthier et al. 2023, dynamic zCDP)."""
    if ratio < 1:
        raise ValueError(f"geometric ratio must be >= 1 (non-increasing noise), got {ratio}")
    return ratio ** np.arange(steps, dtype=float)


def periodic_multipliers(steps: int, decay: float, period: int) -> np.ndarray:
    """Periodic linear decay (Ding et al. 2019, eq. (14)): sigma^2_{k+1} = sigma^2_1 R_P^floor(k / K_p),
    so rho_{k+1} = rho_1 R_P^-floor(k / K_p) for k = 0..K-1 (Delta fixed)."""
    if not 0 < decay < 1:
        raise ValueError(f"decay rate R_P must be in (0, 1), got {decay}")
    if period < 1:
        raise ValueError(f"period K_p must be >= 1, got {period}")
    k = np.arange(steps)
    return decay ** (-(k // period)).astype(float)


def iteration_multipliers(steps: int, rate: float) -> np.ndarray:
    """Iteration-based decay (Ding et al. 2019, eq. (15) in rho form; docs/algorithms.md, eq. (4.8)):
    step 1 spends rho_1,
    step k+1 spends R_T k (k+1) rho_1 for k >= 1."""
    if not rate > 0:
        raise ValueError(f"decay rate R_T must be > 0, got {rate}")
    k = np.arange(steps, dtype=float)
    return np.where(k == 0, 1.0, rate * k * (k + 1))


@lru_cache(maxsize=256)
def _pld_scale(relative: tuple, eps: float, delta: float) -> float:
    """:func:`fdp_flower.privacy.calibration.calibrate_noise_multiplier`, memoized: a pure function of the
    schedule's shape and the target, and with distinct multipliers (decaying variance) the PLD composition
    of every release takes minutes, so sweeps over step sizes must not repeat it."""
    from fdp_flower.privacy.calibration import calibrate_noise_multiplier

    return calibrate_noise_multiplier(eps, delta, relative)


@dataclass(frozen=True)
class NoisePlan:
    """How every release is calibrated.

    mode : "none" (no noise), "zcdp" (sigma = Delta / sqrt(2 rho_k)) or "classic"
        (sigma = Delta sqrt(2 ln(1.25/delta_step)) / eps_step, DP-NFL).
    rho : per-step zCDP budget rho_k, k = 1..T (mode "zcdp").
    eps_step, delta_step : per-step (eps, delta) (mode "classic").
    rho_total : the budget the whole run may spend per node (inf when not capped).
    """

    mode: str = "none"
    rho: tuple = ()
    eps_step: float = 0.0
    delta_step: float = 0.0
    rho_total: float = math.inf

    def __post_init__(self):
        if self.mode not in ("none", "zcdp", "classic"):
            raise ValueError(f"noise mode must be none, zcdp or classic, got {self.mode!r}")

    @property
    def private(self) -> bool:
        return self.mode != "none"

    def sigma(self, sensitivity: float, step: int) -> float:
        """Noise sd of a release at ``step`` (1-based) with l2-sensitivity ``sensitivity``."""
        if self.mode == "zcdp":
            if not 1 <= step <= len(self.rho):
                raise ValueError(f"step {step} is outside the planned 1..{len(self.rho)}")
            return float(sensitivity / math.sqrt(2.0 * self.rho[step - 1]))
        if self.mode == "classic":
            return float(classic_gaussian_sigma(sensitivity, self.eps_step, self.delta_step))
        raise ValueError("a non-private plan adds no noise")

    @classmethod
    def zcdp_total(cls, multipliers, eps: float, delta: float) -> "NoisePlan":
        """Scale a schedule so that its sum is the rho of a total (eps, delta) (Bun-Steinke inverse;
        the papers' conversion, used with ``paper_constants: true``)."""
        rho_total = rho_from_dp(eps, delta)
        mult = np.asarray(multipliers, dtype=float)
        return cls("zcdp", tuple((rho_total / mult.sum()) * mult), rho_total=rho_total)

    @classmethod
    def pld_total(cls, multipliers, eps: float, delta: float) -> "NoisePlan":
        """Scale a schedule so that its releases compose to the total (eps, delta) under the PLD
        accountant (dp-accounting), the ledger's tightest: all releases are Gaussian, so the
        composition is one Gaussian with (sum_k 2 rho_k)^(1/2) (the noise multiplier of release k
        is 1 / sqrt(2 rho_k)) and :func:`fdp_flower.privacy.calibration.calibrate_noise_multiplier`
        finds the scale.  The Bun-Steinke conversion (:meth:`zcdp_total`, the papers' Corollary /
        Theorems) reaches the same (eps, delta) with a smaller rho, i.e. more noise."""
        mult = np.asarray(multipliers, dtype=float)
        relative = mult ** -0.5  # z_k / z_1 with z_k = 1 / sqrt(2 rho_k), rho_k = rho_1 m_k
        z = _pld_scale(tuple(float(r) for r in relative), float(eps), float(delta)) * relative
        rho = 1.0 / (2.0 * z**2)
        return cls("zcdp", tuple(float(r) for r in rho), rho_total=float(rho.sum()))

    @classmethod
    def zcdp_per_step(cls, multipliers, eps: float, delta: float) -> "NoisePlan":
        """rho_1 from a per-step (eps, delta); rho_k = rho_1 m_k; the total is the sum (not capped)."""
        rho1 = rho_from_dp(eps, delta)
        mult = np.asarray(multipliers, dtype=float)
        return cls("zcdp", tuple(rho1 * mult))

    @classmethod
    def classic_total(cls, steps: int, eps: float, delta: float) -> "NoisePlan":
        """DP-NFL at a total budget: basic composition, every step (eps/T, delta/T) by the classic rule."""
        return cls("classic", eps_step=eps / steps, delta_step=delta / steps)

    @classmethod
    def classic_per_step(cls, eps: float, delta: float) -> "NoisePlan":
        return cls("classic", eps_step=eps, delta_step=delta)
