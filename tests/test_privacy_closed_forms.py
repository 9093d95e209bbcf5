"""The papers' closed forms against the ledger (docs/algorithms.md, sections 1, 4, 5)."""
import math

import numpy as np
import pytest

from fdp_flower.privacy import GaussianRelease, PrivacyLedger
from fdp_flower.privacy.closed_forms import (
    dp_admm_theorem1_closed_form,
    dp_admm_theorem1_epsilon,
    dp_admm_theorem1_sigma,
    fdp_admm_closed_form,
    fdp_admm_round_epsilon,
    pr_admm_periodic_rho_sum,
    pr_admm_sensitivity,
    pr_admm_theorem3_closed_form,
    pr_admm_theorem3_rho,
    pr_admm_theorem4_closed_form,
    pr_admm_theorem4_rho,
)
from fdp_flower.privacy.mechanisms import classic_gaussian_sigma, zcdp_to_dp

DELTA = 1e-4


def pr_admm_ledger(sigma2, *, lipschitz=0.25, eta=0.5, degree=2, m=8000):
    """One PR-ADMM agent's releases with the correct replace-one sensitivity."""
    sens = pr_admm_sensitivity(lipschitz, eta, degree, m)
    return PrivacyLedger([GaussianRelease(0, k + 1, sens, float(math.sqrt(s2)), mechanism="pr_admm_primal")
                          for k, s2 in enumerate(sigma2)])


@pytest.mark.parametrize("rounds,period,decay", [(50, 1, 0.925), (50, 5, 0.8), (12, 4, 0.5)])
def test_theorem3_is_the_ledger_sum_minus_one_step(rounds, period, decay):
    sigma2_1 = 1e-4
    k = np.arange(rounds)
    led = pr_admm_ledger(sigma2_1 * decay ** np.floor(k / period))  # eq. (14)
    rho1 = led.releases[0].zcdp_rho
    total = led.zcdp_rho(0)
    assert pr_admm_periodic_rho_sum(rho1, rounds, period, decay) == pytest.approx(total, rel=1e-12)
    printed = pr_admm_theorem3_rho(rho1, rounds, period, decay)
    # the printed "- 1" drops exactly one step at the first step's rate
    assert total - printed == pytest.approx(rho1, rel=1e-9)
    s = led.summary(0, DELTA, with_pld=False, closed_form=pr_admm_theorem3_closed_form(period, decay))
    assert s.closed_form_name == "paper004_thm3"
    assert s.closed_form_eps == pytest.approx(zcdp_to_dp(printed, DELTA), rel=1e-12)
    assert s.closed_form_eps < s.eps_zcdp  # the printed figure under-reports


@pytest.mark.parametrize("rounds,rate", [(50, 0.015), (10, 1.0), (1, 0.3)])
def test_theorem4_equals_the_ledger_sum(rounds, rate):
    sigma2_1 = 1e-4
    k = np.arange(rounds, dtype=float)
    rho_weights = np.where(k == 0, 1.0, rate * k * (k + 1))  # eq. (15) in its rho form
    led = pr_admm_ledger(sigma2_1 / rho_weights)
    rho1 = led.releases[0].zcdp_rho
    assert pr_admm_theorem4_rho(rho1, rounds, rate) == pytest.approx(led.zcdp_rho(0), rel=1e-12)
    s = led.summary(0, DELTA, with_pld=False, closed_form=pr_admm_theorem4_closed_form(rate))
    assert s.closed_form_eps == pytest.approx(s.eps_zcdp, rel=1e-12)


def test_theorem3_needs_divisible_rounds():
    with pytest.raises(ValueError, match="divisible"):
        pr_admm_theorem3_rho(0.1, 10, 3, 0.9)


def test_pr_admm_paper_sensitivity_drops_the_sample_size():
    assert pr_admm_sensitivity(1.0, 0.5, 4, None) == pytest.approx(0.5)
    assert pr_admm_sensitivity(1.0, 0.5, 4, 8000) == pytest.approx(0.5 / 8000)


def test_fdp_admm_per_round_closed_form_inverts_the_classic_rule():
    sens = np.array([0.02, 0.01, 0.005])
    sigma = classic_gaussian_sigma(sens, 0.3, DELTA)
    np.testing.assert_allclose(fdp_admm_round_epsilon(sens, sigma, DELTA), 0.3, rtol=1e-12)
    led = PrivacyLedger([GaussianRelease(0, t + 1, float(d), float(s)) for t, (d, s) in enumerate(zip(sens, sigma))])
    s = led.summary(0, DELTA, closed_form=fdp_admm_closed_form())
    assert s.closed_form_eps == pytest.approx(0.3, rel=1e-12)
    assert s.eps_pld > 0.3  # three rounds spend more than one round's figure


def test_dp_admm_theorem1_round_trip_and_relations():
    c, n, rounds, eps, mu = 1.0, 2000, 40, 0.8, 0.5
    sens_ar = c / n
    sigma = float(dp_admm_theorem1_sigma(sens_ar, rounds=rounds, eps=eps, delta=DELTA, mu=mu))
    alpha = math.log(1 / DELTA) / ((1 - mu) * eps) + 1
    assert sigma**2 == pytest.approx(c**2 * alpha * rounds / (2 * n**2 * eps * mu), rel=1e-12)  # eq. (8)
    rho_ar = rounds * sens_ar**2 / (2 * sigma**2)
    assert dp_admm_theorem1_epsilon(rho_ar, DELTA, mu) == pytest.approx(eps, rel=1e-12)
    # the ledger records replace-one (2c/n); the paper's figure is add/remove
    led = PrivacyLedger([GaussianRelease(0, t, 2 * sens_ar, sigma, mechanism="gaussian_gradient")
                         for t in range(1, rounds + 1)])
    s = led.summary(0, DELTA, closed_form=dp_admm_theorem1_closed_form(mu))
    assert s.closed_form_eps == pytest.approx(eps, rel=1e-12)
    ar = led.under_neighbouring("add_remove").summary(0, DELTA)
    assert ar.eps_rdp <= eps + 1e-12  # optimal-order RDP is no worse than the fixed order
    assert s.eps_pld > eps  # under replace-one the same noise spends more than the paper's eps
