"""Noise calibration for a total (eps, delta) budget, through ``dp_accounting``.

A noise schedule is a sequence of noise multipliers z_t = sigma_t / Delta_t, one
per release.  Its *shape* (:func:`schedule_multipliers`) fixes the ratios
z_t / z_1; calibration (:func:`calibrate_noise_multiplier`,
:func:`calibrate_schedule`) finds the scale so that the composed releases meet
a total (eps, delta) under the PLD accountant, the ledger's tightest.

Shapes (t = 1..T is the release index, r_t = z_t / z_1, rho_t = zCDP of release t):

- ``constant``: r_t = 1.
- ``geometric`` (docs/algorithms.md, section 3, zCDP-NFL): rho_t = rho_1 ratio^(t-1), ratio >= 1,
  so r_t = ratio^(-(t-1)/2): the noise variance shrinks by ``ratio`` each step.
- ``periodic`` (Ding et al. 2019, eq. (14)): sigma_t^2 = sigma_1^2 decay^floor((t-1)/period),
  decay in (0, 1], so r_t = decay^(floor((t-1)/period)/2).
- ``iteration`` (Ding et al. 2019, eq. (15) in its rho form, docs/algorithms.md, section 4):
  rho_1 at step 1 and rho_{k+1} = rate k (k+1) rho_1 for k >= 1, so r_1 = 1 and
  r_{k+1} = (rate k (k+1))^(-1/2).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # dp_accounting is imported where it is used: a client never loads it
    import dp_accounting
    from dp_accounting import pld

SCHEDULE_SHAPES = ("constant", "geometric", "periodic", "iteration")

#: PLD discretization of the ledger and of the calibration (they must agree).
PLD_DISCRETIZATION = 1e-4

#: Calibration aims at eps_total (1 - CALIBRATION_MARGIN) - T CALIBRATION_DRIFT (T releases):
#: the ledger recomputes multipliers as sigma / Delta, which may differ from the calibrated
#: ones in the last bit (the relative margin), and the budget guard composes a run round by
#: round, one discretized PLD per release, which drifts above the calibration's
#: self-composition by about 3e-8 in eps per release (measured at delta = 1e-5, T = 80-160,
#: eps = 0.3-1); the absolute margin per release is three times that.
CALIBRATION_MARGIN = 1e-6
CALIBRATION_DRIFT = 1e-7

#: Multipliers within this relative distance are one value for grouping.
_GROUPING_RTOL = 1e-12


def _group_multipliers(noise_multipliers: Sequence[float]) -> list[tuple[float, int]]:
    """(multiplier, count) in order of first appearance; values within 1e-12 (relative) merge."""
    groups: list[list] = []
    index: dict[float, int] = {}
    for z in noise_multipliers:
        z = float(z)
        if z in index:
            groups[index[z]][1] += 1
            continue
        for k, (rep, _) in enumerate(groups):
            if abs(z - rep) <= _GROUPING_RTOL * max(abs(rep), abs(z)):
                index[z] = k
                groups[k][1] += 1
                break
        else:
            index[z] = len(groups)
            groups.append([z, 1])
    return [(z, n) for z, n in groups]


def composed_gaussian_event(noise_multipliers: Sequence[float]) -> dp_accounting.DpEvent:
    """Composition of sensitivity-1 Gaussians; equal multipliers are self-composed (fast, exact).

    Multipliers equal up to 1e-12 (relative), e.g. ``(z * Delta) / Delta``, are
    one group; distinct multipliers keep their order of first appearance.
    """
    import dp_accounting

    return dp_accounting.ComposedDpEvent([
        dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), n)
        for z, n in _group_multipliers(noise_multipliers)
    ])


def pld_accountant(discretization: float = PLD_DISCRETIZATION) -> pld.PLDAccountant:
    """A fresh PLD accountant (default: the ledger's discretization for mu <= PLD_FINE_MU)."""
    from dp_accounting import pld

    return pld.PLDAccountant(value_discretization_interval=discretization)


#: A composition of Gaussians with multipliers z_t is one Gaussian with
#: mu = (sum_t z_t^-2)^(1/2); its privacy loss mu x - mu^2 / 2 spans about mu^2 + 20 mu
#: (dp_accounting truncates the tails ~10 standard deviations out), so at a fixed interval the
#: PLD's size, memory and time grow like mu^2 (measured: mu = 10 at 1e-4 takes 10 s and 0.7 GB,
#: mu = 35 does not finish).  Up to PLD_FINE_MU (eps ~ 10 at delta = 1e-5; every paper table) the
#: interval is PLD_DISCRETIZATION; above, it grows in powers of two with mu^2 + 20 mu, so a PLD
#: never holds more points than at mu = PLD_FINE_MU (its pessimism, a few intervals, stays
#: about 1e-5 relative to eps ~ mu^2 / 2).
PLD_FINE_MU = 2.0
_FINE_SPAN = PLD_FINE_MU**2 + 20 * PLD_FINE_MU
#: Beyond this mu (eps ~ 5e7) the PLD is not built: the analytic eps of the composed Gaussian
#: (:func:`analytic_gaussian_epsilon`) is reported instead, with :data:`PLD_FALLBACK_NOTE`.
PLD_MAX_MU = 1.0e4
PLD_FALLBACK_NOTE = ("eps_pld is the analytic Gaussian eps of the composition (the PLD accountant "
                     "was not run: noise too small for a bounded discretization)")


def composed_mu(noise_multipliers: Sequence[float]) -> float:
    """mu = (sum_t z_t^-2)^(1/2): the single Gaussian the releases compose into (inf if some z = 0)."""
    z = np.asarray([float(v) for v in noise_multipliers], dtype=float)
    z = z[np.isfinite(z)]
    if z.size == 0:
        return 0.0
    if np.any(z <= 0):
        return math.inf
    with np.errstate(over="ignore"):
        return float(np.sqrt(np.sum(z**-2.0)))


def target_mu(eps: float, delta: float) -> float:
    """mu of the Gaussian whose exact eps at ``delta`` is ``eps`` (inf when not computable)."""
    import dp_accounting

    try:
        with np.errstate(all="ignore"):
            sigma = float(dp_accounting.get_sigma_gaussian(eps, delta))
    except (ValueError, OverflowError, ArithmeticError, RuntimeError):  # RuntimeError: no convergence
        return math.inf
    return 1.0 / sigma if sigma > 0 and math.isfinite(sigma) else math.inf


def pld_discretization(mu: float) -> float | None:
    """The PLD value-discretization interval for a composed Gaussian of ``mu`` (see PLD_FINE_MU);
    None when mu exceeds PLD_MAX_MU or is not finite (use :func:`analytic_gaussian_epsilon`)."""
    if not (math.isfinite(mu) and mu <= PLD_MAX_MU):
        return None
    if mu <= PLD_FINE_MU:
        return PLD_DISCRETIZATION
    return PLD_DISCRETIZATION * 2.0 ** math.ceil(math.log2((mu**2 + 20 * mu) / _FINE_SPAN))


def analytic_gaussian_epsilon(mu: float, delta: float) -> float:
    """Exact eps of the Gaussian mechanism with mu = Delta / sigma at ``delta`` (Balle & Wang 2018,
    ``dp_accounting.get_epsilon_gaussian``); where that fails numerically, the zCDP bound
    rho + 2 sqrt(rho ln(1/delta)), rho = mu^2 / 2 (inf when it overflows)."""
    if mu == 0:
        return 0.0
    if math.isfinite(mu):
        import dp_accounting

        try:
            with np.errstate(all="ignore"):
                eps = float(dp_accounting.get_epsilon_gaussian(1.0 / mu, delta))
            if math.isfinite(eps) and eps >= 0:
                return eps
        except (ValueError, OverflowError, ArithmeticError, RuntimeError):  # RuntimeError: no convergence
            pass
    with np.errstate(over="ignore"):
        rho = float(np.float64(mu) ** 2 / 2)
    return rho + 2 * math.sqrt(rho * math.log(1 / delta)) if math.isfinite(rho) else math.inf


def schedule_multipliers(shape: str, rounds: int, *, ratio: float = 1.0, decay: float = 1.0,
                         period: int = 1, rate: float = 1.0) -> np.ndarray:
    """Relative noise multipliers r_t = z_t / z_1, t = 1..rounds, of a schedule shape.

    Parameters
    ----------
    shape : str
        ``constant`` | ``geometric`` | ``periodic`` | ``iteration`` (see the module docstring).
    rounds : int
        Number of releases T >= 1.
    ratio : float
        geometric: rho_{t+1} / rho_t >= 1 (default: 1.0).
    decay : float
        periodic: R_P in (0, 1], the factor on sigma^2 every ``period`` steps (default: 1.0).
    period : int
        periodic: K_p >= 1 (default: 1).
    rate : float
        iteration: R_T > 0 (default: 1.0).
    """
    if shape not in SCHEDULE_SHAPES:
        raise ValueError(f"shape must be one of {', '.join(SCHEDULE_SHAPES)}, got {shape!r}")
    if not (isinstance(rounds, (int, np.integer)) and rounds >= 1):
        raise ValueError(f"rounds must be an integer >= 1, got {rounds!r}")
    t = np.arange(1, rounds + 1, dtype=float)
    if shape == "constant":
        return np.ones(rounds)
    if shape == "geometric":
        if not (ratio >= 1 and math.isfinite(ratio)):
            raise ValueError(f"geometric ratio must be finite and >= 1, got {ratio}")
        return ratio ** (-(t - 1) / 2.0)
    if shape == "periodic":
        if not 0 < decay <= 1:
            raise ValueError(f"periodic decay R_P must be in (0, 1], got {decay}")
        if not (isinstance(period, (int, np.integer)) and period >= 1):
            raise ValueError(f"periodic period K_p must be an integer >= 1, got {period!r}")
        return decay ** (np.floor((t - 1) / period) / 2.0)
    if not (rate > 0 and math.isfinite(rate)):
        raise ValueError(f"iteration rate R_T must be finite and > 0, got {rate}")
    k = t - 1
    out = np.ones(rounds)
    out[1:] = 1.0 / np.sqrt(rate * k[1:] * (k[1:] + 1))
    return out


def calibrate_noise_multiplier(eps_total: float, delta_total: float,
                               relative_multipliers: Sequence[float], *,
                               fixed_multipliers: Sequence[float] = ()) -> float:
    """The smallest scale c such that Gaussians with multipliers c * r_t compose to (eps_total, delta_total).

    Gaussians compose exactly into one Gaussian with multiplier
    (sum_t (c r_t)^-2)^(-1/2), so the analytic Gaussian calibration of
    ``dp_accounting.get_sigma_gaussian`` gives c in closed form; it is then refined
    with ``dp_accounting.calibrate_dp_mechanism`` under the PLD accountant (the
    ledger's tightest, whose discretization is pessimistic) so that the ledger
    never reports more than the target.  ``relative_multipliers`` fix the
    schedule's shape (all 1 for a constant schedule; see :func:`schedule_multipliers`).
    The target is eps_total (1 - 1e-6) - 1e-7 T (at least eps_total (1 - 1e-3)), so that
    neither the ledger's recomputation sigma / Delta nor the guard's round-by-round
    composition crosses the budget by a rounding error.

    ``fixed_multipliers``: releases of the same client whose noise is already set (e.g. the
    federated FPCA summary, calibrated for its own basis.eps) and that count against the same
    budget: the scale c is then found for the composition of those and the c r_t.  Analytically
    z_total^-2 = sum_f z_f^-2 + c^-2 sum_t r_t^-2; a ``ValueError`` if the fixed releases alone
    spend the budget.
    """
    if not (eps_total > 0 and math.isfinite(eps_total)):
        raise ValueError(f"eps_total must be finite and > 0, got {eps_total}")
    if not 0 < delta_total < 1:
        raise ValueError(f"delta_total must be in (0, 1), got {delta_total}")
    import dp_accounting

    rel = np.asarray([float(r) for r in relative_multipliers])
    if rel.size == 0 or rel.min() <= 0 or not np.all(np.isfinite(rel)):
        raise ValueError("relative_multipliers must be a non-empty sequence of positive finite numbers")
    fixed = np.asarray([float(z) for z in fixed_multipliers])
    if fixed.size and (fixed.min() <= 0 or not np.all(np.isfinite(fixed))):
        raise ValueError("fixed_multipliers must be positive and finite")
    n_releases = rel.size + fixed.size
    target = max(eps_total * (1.0 - CALIBRATION_MARGIN) - CALIBRATION_DRIFT * n_releases, eps_total * (1.0 - 1e-3))
    discretization = pld_discretization(target_mu(eps_total, delta_total))
    mu = target_mu(target, delta_total)  # the composed Gaussian whose exact eps is the target
    if not math.isfinite(mu):
        # where the analytic calibration cannot be solved numerically, through the zCDP bound
        # mu^2 / 2 + mu sqrt(2 ln(1/delta)) = target, which is at least the exact eps.
        a = math.sqrt(2 * math.log(1 / delta_total))
        mu = 2 * target / (a + math.sqrt(a * a + 2 * target))  # = sqrt(a^2 + 2 target) - a, stably
    room = mu**2 - float(np.sum(fixed**-2.0))
    if fixed.size:
        spent = analytic_gaussian_epsilon(composed_mu(fixed), delta_total)
        if room <= 0 or spent >= target:
            raise ValueError(f"the releases with fixed noise alone spend eps = {spent:.4g} "
                             f"of the total {eps_total:g} at delta {delta_total:g}: nothing is left for the "
                             "other releases")
    fixed_precision, rel_precision = float(np.sum(fixed**-2.0)), float(np.sum(rel**-2.0))
    analytic = float(np.sqrt(rel_precision / room))
    if discretization is None:
        # Beyond a bounded PLD the ledger reports the analytic eps of the composed Gaussian: meet it exactly.
        return analytic

    def calibrate(lo: float, hi: float) -> float:
        return float(dp_accounting.calibrate_dp_mechanism(
            lambda: pld_accountant(discretization),
            # the releases compose exactly into one Gaussian (the ledger's PLD is run on that one too)
            lambda c: dp_accounting.GaussianDpEvent(float(fixed_precision + c**-2.0 * rel_precision) ** -0.5),
            target, delta_total,
            bracket_interval=dp_accounting.ExplicitBracketInterval(lo * analytic, hi * analytic),
            tol=1e-6 * analytic,
        ))

    # The PLD accountant is pessimistic, so the answer is just above the analytic
    # value: a narrow bracket first (few accountant calls), a wide one if it misses.
    try:
        return calibrate(0.999, 1.02)
    except ValueError:
        return calibrate(0.9, 4.0)


def calibrate_schedule(eps_total: float, delta_total: float, shape: str, rounds: int,
                       **shape_params) -> np.ndarray:
    """Absolute multipliers z_t = c r_t of ``shape`` whose composition meets (eps_total, delta_total).

    ``shape_params`` go to :func:`schedule_multipliers`.  Multiply by each
    release's sensitivity to get its sigma.
    """
    rel = schedule_multipliers(shape, rounds, **shape_params)
    return calibrate_noise_multiplier(eps_total, delta_total, rel) * rel
