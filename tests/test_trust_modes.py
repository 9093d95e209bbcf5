"""Predicted noise floors of the trust modes (fdp_flower/privacy/trust_modes.py,
docs/secure_aggregation.md eqs. (9.13)-(9.15))."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fdp_flower.privacy import distributed as dd
from fdp_flower.privacy import trust_modes as tm

Z_ONE_RELEASE = 3.7306316348159374  # dp_accounting.get_sigma_gaussian(1, 1e-5), docs/choosing_a_budget.md


def test_site_floor_is_the_documented_closed_form():
    """eq. (9.14): 4 max(tau, 1 - tau)^2 gamma^2 z^2 M / (n tau (1 - tau)): 0.0089 M at tau = 0.5,
    n = 1e5, gamma = 4, and nine times that at tau = 0.9 (docs/choosing_a_budget.md)."""
    assert tm.one_release_multiplier(1.0, 1e-5) == pytest.approx(Z_ONE_RELEASE, rel=1e-9)
    for tau in (0.5, 0.9):
        for m in (10, 50):
            got = tm.noise_floor_per_direction("site", tau=tau, clip_radius=4.0, clients=m, samples=100_000,
                                               eps=1.0, delta=1e-5)
            g = max(tau, 1 - tau)
            assert got == pytest.approx(4 * g * g * 16 * Z_ONE_RELEASE**2 * m / (100_000 * tau * (1 - tau)), rel=1e-12)
    assert tm.noise_floor_per_direction("site", tau=0.5, clip_radius=4.0, clients=1, samples=100_000, eps=1.0,
                                        delta=1e-5) == pytest.approx(0.0089, abs=5e-5)


def test_unequal_sizes_weigh_the_smallest_sites_in_the_site_floor():
    sizes = [100, 900]
    v = tm.gradient_noise_variance("site", clients=2, samples=1000, eps=1.0, delta=1e-5, sizes=sizes)
    assert v == pytest.approx(((2 * Z_ONE_RELEASE / 100) ** 2 + (2 * Z_ONE_RELEASE / 900) ** 2) / 4, rel=1e-12)
    equal = tm.gradient_noise_variance("site", clients=2, samples=1000, eps=1.0, delta=1e-5)
    assert v > equal  # for a fixed n, equal sizes minimize sum m_i^-2


def test_the_trusted_aggregator_floor_is_the_site_floor_over_m():
    for m in (10, 200):
        kw = dict(tau=0.9, clip_radius=4.0, clients=m, samples=200_000, eps=1.0, delta=1e-5)
        assert tm.noise_floor_per_direction("trusted_aggregator", **kw) == pytest.approx(
            tm.noise_floor_per_direction("site", **kw) / m, rel=1e-12)


@pytest.mark.parametrize("clients,tolerated,samples", [(10, 1, 20_000), (200, 20, 100_000), (1000, 100, 1_000_000)])
def test_secure_aggregation_floor_is_the_central_one_times_m_over_m_minus_t_and_the_rdp_price(clients, tolerated, samples):
    """eq. (9.15): central x M / (M - t) x (z_rdp / z)^2, the Gaussian multiplier the RDP conversion
    needs at (1, 1e-5) over the PLD-exact one, times the rounding's inflation of the sensitivity
    (Delta_2 / (2 gamma G))^2 and of the variance (M / 4 on top of M V / (M - t)); the Skellam's O(1/V)
    terms are below 1e-9 here."""
    kw = dict(tau=0.5, clip_radius=4.0, clients=clients, samples=samples, eps=1.0, delta=1e-5, tolerated=tolerated)
    central = tm.noise_floor_per_direction("trusted_aggregator", **kw)
    secure = tm.noise_floor_per_direction("secure_aggregation", **kw)
    lo, hi = 1.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2
        eps = dd.rdp_to_epsilon(120 * dd.gaussian_rdp(mid * math.sqrt(120)), 1e-5 * (1 - dd.TAIL_DELTA_FRACTION))
        lo, hi = (mid, hi) if eps > 1.0 else (lo, mid)
    rdp_price = (hi / Z_ONE_RELEASE) ** 2
    plan = dd.plan_secure_sum(eps=1.0, delta=1e-5, rounds=120, sites=clients, tolerated=tolerated, dim=11,
                              record_bound=1.0, max_site_records=samples // clients, total_records=samples)
    base = rdp_price * clients / (clients - tolerated)
    rounding = (plan.sensitivities[0] / (2 * plan.scale)) ** 2 * (1 + 0.25 / plan.share_variance)
    assert base * (1 - 1e-6) <= secure / central <= base * rounding * (1 + 1e-6)
    assert rounding < 1.002
    assert secure / central < 1.5  # the goal for t = M / 10


def test_the_secure_aggregation_floor_matches_the_noise_of_simulated_sums():
    """The V_g of eq. (9.15) against sums of real site shares (zero data, so the rounding is exact):
    the empirical variance of sum_i v_i / (gamma n) agrees with M V / (M - t) / (gamma n)^2 within
    5 standard errors, and V_g (which adds the worst-case rounding M / 4) is not below it."""
    clients, tolerated, samples, rounds = 8, 2, 8000, 30
    plan = dd.plan_secure_sum(eps=1.0, delta=1e-5, rounds=rounds, sites=clients, tolerated=tolerated, dim=11,
                              record_bound=1.0, max_site_records=samples // clients, total_records=samples)
    rng = np.random.default_rng(11)
    trials = 3000
    noise = np.stack([sum(dd.site_share(np.zeros(11), plan, rng, records=samples // clients) for _ in range(clients))
                      for _ in range(trials)]) / (plan.scale * samples)
    expected = clients * plan.share_variance / (plan.scale * samples) ** 2
    se = expected * math.sqrt(2.0 / noise.size)
    assert abs(noise.var() - expected) < 5 * se
    v_g = tm.gradient_noise_variance("secure_aggregation", clients=clients, samples=samples, eps=1.0, delta=1e-5,
                                     tolerated=tolerated, rounds=rounds)
    assert v_g * rounds >= expected  # V_g is per unit of the whole budget: one round's noise / L
    assert v_g * rounds == pytest.approx(expected, rel=1e-6)


def test_bad_arguments_name_themselves():
    kw = dict(tau=0.5, clip_radius=4.0, clients=10, samples=1000, eps=1.0, delta=1e-5)
    with pytest.raises(ValueError, match="mode"):
        tm.noise_floor_per_direction("central", **kw)
    with pytest.raises(ValueError, match="tau"):
        tm.noise_floor_per_direction("site", **(kw | {"tau": 1.0}))
    with pytest.raises(ValueError, match="samples"):
        tm.noise_floor_per_direction("site", **(kw | {"samples": 1001}))
    with pytest.raises(ValueError, match="sizes"):
        tm.noise_floor_per_direction("site", **kw, sizes=[1] * 10)
    with pytest.raises(ValueError, match="tolerated"):
        tm.noise_floor_per_direction("secure_aggregation", **kw, tolerated=10)
