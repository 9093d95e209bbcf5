"""The ledger against direct dp-accounting computations (docs/algorithms.md, sections 0 and 6)."""
import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting import pld, rdp

from fdp_flower.privacy import GaussianRelease, PrivacyLedger
from fdp_flower.privacy.calibration import PLD_DISCRETIZATION
from fdp_flower.privacy.ledger import gaussian_epsilon
from fdp_flower.privacy.mechanisms import zcdp_to_dp

DELTA = 1e-5


def random_schedule(rng, n_events):
    """Heterogeneous releases: sensitivities and sigmas drawn independently, all multipliers distinct."""
    sens = rng.uniform(0.01, 0.2, n_events)
    sigma = sens * rng.uniform(1.0, 8.0, n_events)
    return sens, sigma


def direct_epsilons(sens, sigma, delta):
    """Fresh accountants: RDP composing one GaussianDpEvent(sigma_t / Delta_t) per release, in order;
    PLD of the one Gaussian they compose to (multiplier (sum_t (Delta_t/sigma_t)^2)^(-1/2)) and of
    the release-by-release composition (looser: one discretization per release)."""
    event = dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(s / d) for d, s in zip(sens, sigma)])
    r = rdp.RdpAccountant()
    r.compose(event)
    p = pld.PLDAccountant(value_discretization_interval=PLD_DISCRETIZATION)
    p.compose(dp_accounting.GaussianDpEvent(float(np.sum((sens / sigma) ** 2)) ** -0.5))
    stepwise = pld.PLDAccountant(value_discretization_interval=PLD_DISCRETIZATION)
    stepwise.compose(event)
    return r.get_epsilon(delta), p.get_epsilon(delta), stepwise.get_epsilon(delta)


def ledger_of(sens, sigma, client=0, first_round=1):
    led = PrivacyLedger()
    led.record_many(GaussianRelease(client, first_round + t, float(d), float(s)) for t, (d, s) in
                    enumerate(zip(sens, sigma)))
    return led


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_rdp_pld_and_zcdp_equal_direct_computation(seed):
    rng = np.random.default_rng(seed)
    sens, sigma = random_schedule(rng, int(rng.integers(5, 13)))
    summary = ledger_of(sens, sigma).summary(0, DELTA)
    eps_rdp, eps_pld, eps_pld_stepwise = direct_epsilons(sens, sigma, DELTA)
    assert summary.eps_rdp == pytest.approx(eps_rdp, abs=1e-9)
    assert summary.eps_pld == pytest.approx(eps_pld, abs=1e-9)
    assert summary.eps_pld <= eps_pld_stepwise + 1e-9
    # the closed form of the same composed Gaussian (history columns, the guard) agrees to 1e-7
    assert gaussian_epsilon(ledger_of(sens, sigma).releases, DELTA) == pytest.approx(summary.eps_pld, rel=1e-7)
    rho = float(np.sum(sens**2 / (2 * sigma**2)))
    assert summary.zcdp_rho == pytest.approx(rho, rel=1e-12)
    assert summary.eps_zcdp == pytest.approx(rho + 2 * math.sqrt(rho * math.log(1 / DELTA)), rel=1e-12)
    # the accountants' ordering for Gaussians: PLD <= RDP <= zCDP conversion
    assert summary.eps_pld <= summary.eps_rdp <= summary.eps_zcdp


@pytest.mark.parametrize("seed", range(10))
def test_rdp_equals_direct_on_longer_schedules(seed):
    rng = np.random.default_rng(100 + seed)
    sens, sigma = random_schedule(rng, 20)
    event = dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(s / d) for d, s in zip(sens, sigma)])
    acc = rdp.RdpAccountant()
    acc.compose(event)
    assert ledger_of(sens, sigma).summary(0, DELTA, with_pld=False).eps_rdp == pytest.approx(
        acc.get_epsilon(DELTA), abs=1e-9)


def test_clients_and_rounds_are_separated():
    rng = np.random.default_rng(7)
    led = PrivacyLedger()
    schedules = {c: random_schedule(rng, 6) for c in range(3)}
    for t in range(6):  # interleaved, as an engine records them
        for c, (sens, sigma) in schedules.items():
            led.record(GaussianRelease(c, t + 1, float(sens[t]), float(sigma[t])))
    for c, (sens, sigma) in schedules.items():
        s = led.summary(c, DELTA, up_to_round=4, with_pld=False)
        direct = rdp.RdpAccountant()
        direct.compose(dp_accounting.ComposedDpEvent(
            [dp_accounting.GaussianDpEvent(sg / d) for d, sg in zip(sens[:4], sigma[:4])]))
        assert s.releases == 4 and s.round == 4
        assert s.eps_rdp == pytest.approx(direct.get_epsilon(DELTA), abs=1e-9)
    table = led.summaries(DELTA, with_pld=False)
    assert [s.client for s in table] == [0, 1, 2]
    assert led.worst_case(DELTA, with_pld=False).client == max(range(3), key=led.zcdp_rho)


def test_repeated_multipliers_are_grouped_and_close_to_sequential():
    # constant multiplier, sensitivities vary by round (FDP-ADMM): z_t = (z Delta_t) / Delta_t
    z = 7.3
    sens = 0.05 / np.sqrt(np.arange(1, 13))
    sigma = z * sens
    s = ledger_of(sens, sigma).summary(0, DELTA)
    seq = pld.PLDAccountant(value_discretization_interval=PLD_DISCRETIZATION)
    for d, sg in zip(sens, sigma):
        seq.compose(dp_accounting.GaussianDpEvent(sg / d))
    grouped = pld.PLDAccountant(value_discretization_interval=PLD_DISCRETIZATION)
    grouped.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), 12))
    assert s.eps_pld == pytest.approx(grouped.get_epsilon(DELTA), abs=1e-9)
    # self-composition and sequential composition differ only by the PLD's rounding
    assert s.eps_pld == pytest.approx(seq.get_epsilon(DELTA), rel=1e-6)


def test_epsilon_curve_matches_summaries():
    rng = np.random.default_rng(11)
    sens, sigma = random_schedule(rng, 8)
    led = ledger_of(sens, sigma)
    curve = led.epsilon_curve(0, DELTA, rounds=[2, 5, 8])
    for point in curve:
        s = led.summary(0, DELTA, up_to_round=point.round)
        assert point.releases == s.releases
        assert point.eps_rdp == pytest.approx(s.eps_rdp, abs=1e-9)
        assert point.eps_zcdp == pytest.approx(s.eps_zcdp, rel=1e-12)
        assert point.eps_pld == pytest.approx(s.eps_pld, rel=1e-6)
    assert [p.eps_pld for p in curve] == sorted(p.eps_pld for p in curve)


def test_neighbouring_reexpression():
    """A mean over the record count moves as far when a record is removed as when one is replaced
    (NEIGHBOURING_FACTORS = 1): re-expressing relabels and keeps sensitivity and sigma."""
    c, m, sigma = 1.0, 500, 0.02
    add_remove = GaussianRelease(0, 1, 2 * c / m, sigma, neighbouring="add_remove", mechanism="gaussian_gradient")
    replace_one = add_remove.under("replace_one")
    assert replace_one.sensitivity == add_remove.sensitivity
    assert replace_one.neighbouring == "replace_one" and replace_one.sigma == sigma
    assert replace_one.under("add_remove") == add_remove
    assert add_remove.under("add_remove") is add_remove
    led = PrivacyLedger([replace_one] * 5)
    assert led.under_neighbouring("add_remove").summary(0, DELTA).eps_pld == led.summary(0, DELTA).eps_pld
    with pytest.raises(ValueError, match="no known"):
        GaussianRelease(0, 1, 0.1, 1.0).under("add_remove")  # bare "gaussian": query unknown
    with pytest.raises(ValueError, match="neighbouring"):
        GaussianRelease(0, 1, 0.1, 1.0, neighbouring="swap")


def test_rows_round_trip_and_free_releases():
    led = PrivacyLedger([GaussianRelease(1, 2, 0.1, 1.0, neighbouring="add_remove", mechanism="gaussian_gradient"),
                         GaussianRelease(1, 3, 0.0, 1.0)])
    again = PrivacyLedger.from_rows(led.to_rows())
    assert again.releases == led.releases
    free = PrivacyLedger([GaussianRelease(0, 1, 0.0, 1.0)]).summary(0, DELTA)
    assert (free.zcdp_rho, free.eps_rdp, free.eps_pld, free.eps_zcdp) == (0.0, 0.0, 0.0, 0.0)
    assert PrivacyLedger().summary(0, DELTA).releases == 0


def test_zcdp_conversion_formula():
    assert zcdp_to_dp(0.1, 1e-6) == pytest.approx(0.1 + 2 * math.sqrt(0.1 * math.log(1e6)), rel=1e-15)
