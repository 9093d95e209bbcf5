"""The papers' own privacy figures, to show next to the ledger (docs/algorithms.md, sections 1, 4, 5).

Each paper states its guarantee differently; none states what a whole run spends
per client under replace-one.  These functions reproduce each printed formula
exactly, so that a report can show it beside the ledger's composition:

- Zhou & Xiang (2022) (FDP-ADMM), Theorem 1: a *per-round* (eps, delta) guarantee from the
  classic Gaussian rule sigma = Delta sqrt(2 ln(1.25/delta)) / eps;
- Ding et al. (2019) (PR-ADMM), Theorems 3 and 4: total zCDP rho of the periodic and the
  iteration-based variance schedules, converted by Bun & Steinke.  Theorem 3's
  closed form is the sum of its own schedule *minus rho_1* (one step short);
  Theorem 4 equals the sum;
- Xu et al. (2020) (DP-ADMM), Theorem 1: sigma^2 = c^2 alpha T / (2 n^2 eps mu),
  alpha = ln(1/delta) / ((1 - mu) eps) + 1, i.e. RDP at one fixed order; its
  sensitivity c/n is the add/remove bound.

The ``*_closed_form`` factories return callables ``(releases, delta) -> ClosedForm``
for :meth:`fdp_flower.privacy.PrivacyLedger.summary` (``closed_form=``).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from fdp_flower.privacy.ledger import GaussianRelease
from fdp_flower.privacy.mechanisms import zcdp_to_dp


@dataclass(frozen=True)
class ClosedForm:
    """A paper's figure for one client's releases."""

    name: str
    eps: float
    delta: float
    rho: float | None = None
    note: str = ""


def _check_delta(delta: float) -> None:
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")


# ---------------------------------------------------------------- Zhou & Xiang (2022) (FDP-ADMM)
def fdp_admm_round_epsilon(sensitivity, sigma, delta: float):
    """Per-round eps of Zhou & Xiang (2022), Theorem 1: Delta sqrt(2 ln(1.25/delta)) / sigma.

    The inverse of the classic rule; the classic analysis needs eps <= 1.
    """
    _check_delta(delta)
    return np.asarray(sensitivity, dtype=float) * math.sqrt(2.0 * math.log(1.25 / delta)) / np.asarray(
        sigma, dtype=float)


def fdp_admm_closed_form() -> Callable[[Sequence[GaussianRelease], float], ClosedForm]:
    """Zhou & Xiang's (2022) figure: the largest per-round eps over the client's releases (a per-round
    guarantee, not a total; the ledger's columns are the totals)."""
    def closed_form(releases: Sequence[GaussianRelease], delta: float) -> ClosedForm:
        eps = max(float(fdp_admm_round_epsilon(r.sensitivity, r.sigma, delta)) for r in releases)
        note = "per round" + ("" if eps <= 1 else "; eps > 1 is outside the classic rule's validity")
        return ClosedForm("paper000_thm1_per_round", eps, delta, None, note)
    return closed_form


# ---------------------------------------------------------------- Ding et al. (2019) (PR-ADMM)
def pr_admm_sensitivity(lipschitz: float, eta: float, degree: int, m: int | None) -> float:
    """Replace-one sensitivity of PR-ADMM's exact local solve: V / (m eta |V_i|).

    ``m=None`` gives Ding et al.'s (2019) Lemma 5 as printed, V / (eta |V_i|), which drops
    the 1/|D_i| of the mean loss (docs/algorithms.md, section 4).
    """
    if not (lipschitz > 0 and eta > 0 and degree >= 1):
        raise ValueError("need lipschitz > 0, eta > 0, degree >= 1")
    if m is not None and m < 1:
        raise ValueError(f"m must be >= 1, got {m}")
    return lipschitz / ((1 if m is None else m) * eta * degree)


def _check_periodic(rounds: int, period: int, decay: float) -> None:
    if not 0 < decay < 1:
        raise ValueError(f"decay R_P must be in (0, 1) for Theorem 3, got {decay}")
    if not (period >= 1 and rounds >= 1 and rounds % period == 0):
        raise ValueError(f"Theorem 3 needs K divisible by K_p (K={rounds}, K_p={period})")


def pr_admm_theorem3_rho(rho1: float, rounds: int, period: int, decay: float) -> float:
    """rho_total of Ding et al. (2019), Theorem 3, as printed:
    rho_1 (K_p (1 - R_P^(K/K_p)) / (R_P^(K/K_p - 1) - R_P^(K/K_p)) - 1).

    This is :func:`pr_admm_periodic_rho_sum` minus rho_1: the printed "- 1" drops
    one step at the first step's rate.
    """
    _check_periodic(rounds, period, decay)
    q = rounds / period
    return rho1 * (period * (1 - decay**q) / (decay ** (q - 1) - decay**q) - 1)


def pr_admm_periodic_rho_sum(rho1: float, rounds: int, period: int, decay: float) -> float:
    """sum_{k=0}^{K-1} rho_1 / R_P^floor(k/K_p) = rho_1 K_p (R_P^(-K/K_p) - 1) / (R_P^(-1) - 1):
    the true total of the periodic schedule (the ledger's sum)."""
    _check_periodic(rounds, period, decay)
    q = rounds / period
    return rho1 * period * (decay ** (-q) - 1) / (1 / decay - 1)


def pr_admm_theorem4_rho(rho1: float, rounds: int, rate: float) -> float:
    """rho_total of Ding et al. (2019), Theorem 4: rho_1 (R_T K (K^2 - 1) + 3) / 3.

    Equals the sum of eq. (15) in its rho form: rho_1 + sum_{k=1}^{K-1} R_T k (k+1) rho_1.
    """
    if not (rate > 0 and rounds >= 1):
        raise ValueError("need rate R_T > 0 and rounds K >= 1")
    return rho1 * (rate * rounds * (rounds**2 - 1) + 3) / 3


def pr_admm_epsilon(rho_total: float, delta: float) -> float:
    """Theorems 3-4's eps = rho + 2 sqrt(rho ln(1/delta)) (Bun & Steinke)."""
    return zcdp_to_dp(rho_total, delta)


def pr_admm_theorem3_closed_form(period: int, decay: float):
    """Theorem 3 for a client's releases; rho_1 is its first release's zCDP."""
    def closed_form(releases: Sequence[GaussianRelease], delta: float) -> ClosedForm:
        rel = sorted(releases, key=lambda r: r.round)
        rho = pr_admm_theorem3_rho(rel[0].zcdp_rho, len(rel), period, decay)
        return ClosedForm("paper004_thm3", pr_admm_epsilon(rho, delta), delta, rho,
                          "printed form: ledger sum minus rho_1")
    return closed_form


def pr_admm_theorem4_closed_form(rate: float):
    """Theorem 4 for a client's releases; rho_1 is its first release's zCDP."""
    def closed_form(releases: Sequence[GaussianRelease], delta: float) -> ClosedForm:
        rel = sorted(releases, key=lambda r: r.round)
        rho = pr_admm_theorem4_rho(rel[0].zcdp_rho, len(rel), rate)
        return ClosedForm("paper004_thm4", pr_admm_epsilon(rho, delta), delta, rho, "equals the ledger sum")
    return closed_form


# ---------------------------------------------------------------- Xu et al. (2020) (DP-ADMM)
def dp_admm_theorem1_sigma(sensitivity, *, rounds: int, eps: float, delta: float, mu: float = 0.5):
    """sigma with sigma^2 = Delta^2 alpha T / (2 eps mu), alpha = ln(1/delta)/((1 - mu) eps) + 1.

    Xu et al. (2020), Theorem 1 (eq. (8)); with the paper's Delta = c/n it is the printed
    c^2 alpha T / (2 n^2 eps mu).
    """
    _check_delta(delta)
    if not (eps > 0 and 0 < mu < 1 and rounds >= 1):
        raise ValueError("need eps > 0, mu in (0, 1), rounds >= 1")
    alpha = math.log(1 / delta) / ((1 - mu) * eps) + 1
    return np.asarray(sensitivity, dtype=float) * math.sqrt(alpha * rounds / (2 * eps * mu))


def dp_admm_theorem1_epsilon(rho_total: float, delta: float, mu: float = 0.5) -> float:
    """The eps that Theorem 1's argument certifies for releases of total zCDP ``rho_total``.

    The argument asks sum_t alpha Delta_t^2 / (2 sigma_t^2) = mu eps at the order
    alpha = ln(1/delta)/((1 - mu) eps) + 1; with A = rho_total / mu this is
    eps^2 - A eps - A ln(1/delta) / (1 - mu) = 0, so
    eps = (A + sqrt(A^2 + 4 A ln(1/delta) / (1 - mu))) / 2.
    It inverts :func:`dp_admm_theorem1_sigma` exactly.
    """
    _check_delta(delta)
    if not 0 < mu < 1:
        raise ValueError(f"mu must be in (0, 1), got {mu}")
    a = rho_total / mu
    return float((a + math.sqrt(a * a + 4 * a * math.log(1 / delta) / (1 - mu))) / 2)


def dp_admm_theorem1_closed_form(mu: float = 0.5):
    """Theorem 1 under the paper's add/remove relation (releases are re-expressed
    with :meth:`GaussianRelease.under`)."""
    def closed_form(releases: Sequence[GaussianRelease], delta: float) -> ClosedForm:
        rho = float(sum(r.under("add_remove").zcdp_rho for r in releases))
        return ClosedForm("paper003_thm1", dp_admm_theorem1_epsilon(rho, delta, mu), delta, rho,
                          f"add/remove, fixed RDP order (mu={mu})")
    return closed_form
