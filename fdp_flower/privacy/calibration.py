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

import numpy as np

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


def pld_accountant() -> pld.PLDAccountant:
    """A fresh PLD accountant with the ledger's discretization."""
    from dp_accounting import pld

    return pld.PLDAccountant(value_discretization_interval=PLD_DISCRETIZATION)


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
                               relative_multipliers: Sequence[float]) -> float:
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
    """
    if not (eps_total > 0 and math.isfinite(eps_total)):
        raise ValueError(f"eps_total must be finite and > 0, got {eps_total}")
    if not 0 < delta_total < 1:
        raise ValueError(f"delta_total must be in (0, 1), got {delta_total}")
    import dp_accounting

    rel = np.asarray([float(r) for r in relative_multipliers])
    if rel.size == 0 or rel.min() <= 0 or not np.all(np.isfinite(rel)):
        raise ValueError("relative_multipliers must be a non-empty sequence of positive finite numbers")
    target = max(eps_total * (1.0 - CALIBRATION_MARGIN) - CALIBRATION_DRIFT * rel.size, eps_total * (1.0 - 1e-3))
    analytic = dp_accounting.get_sigma_gaussian(target, delta_total) * float(np.sqrt(np.sum(rel**-2.0)))

    def calibrate(lo: float, hi: float) -> float:
        return float(dp_accounting.calibrate_dp_mechanism(
            pld_accountant, lambda c: composed_gaussian_event(c * rel), target, delta_total,
            bracket_interval=dp_accounting.ExplicitBracketInterval(lo * analytic, hi * analytic),
            tol=1e-6 * analytic,
        ))

    # The PLD accountant is pessimistic, so the answer is just above the analytic
    # value: a narrow bracket first (few accountant calls), a wide one if it misses.
    try:
        return calibrate(0.999, 1.02)
    except ValueError:
        return calibrate(0.9, 2.0)


def calibrate_schedule(eps_total: float, delta_total: float, shape: str, rounds: int,
                       **shape_params) -> np.ndarray:
    """Absolute multipliers z_t = c r_t of ``shape`` whose composition meets (eps_total, delta_total).

    ``shape_params`` go to :func:`schedule_multipliers`.  Multiply by each
    release's sensitivity to get its sigma.
    """
    rel = schedule_multipliers(shape, rounds, **shape_params)
    return calibrate_noise_multiplier(eps_total, delta_total, rel) * rel
