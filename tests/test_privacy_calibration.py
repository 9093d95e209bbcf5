"""Schedule shapes and total-budget calibration (docs/algorithms.md, sections 1, 3, 4)."""
import logging

import numpy as np
import pytest

from fdp_flower.algorithms.fdp_admm.config import parse_scenario
from fdp_flower.config.base import ScenarioError
from fdp_flower.privacy import GaussianRelease, PrivacyLedger
from fdp_flower.privacy.calibration import calibrate_noise_multiplier, calibrate_schedule, schedule_multipliers

log = logging.getLogger(__name__)

SHAPES = [
    ("constant", {}),
    ("geometric", {"ratio": 1.1}),
    ("periodic", {"decay": 0.9, "period": 3}),
    ("iteration", {"rate": 0.015}),
]


def test_shapes_follow_their_formulas():
    t = np.arange(1, 11)
    assert np.array_equal(schedule_multipliers("constant", 10), np.ones(10))
    geo = schedule_multipliers("geometric", 10, ratio=1.2)
    rho = geo**-2.0  # zCDP of release t is proportional to r_t^-2
    np.testing.assert_allclose(rho[1:] / rho[:-1], 1.2, rtol=1e-12)
    per = schedule_multipliers("periodic", 10, decay=0.8, period=4)
    np.testing.assert_allclose(per**2, 0.8 ** np.floor((t - 1) / 4), rtol=1e-12)  # sigma^2 ratios, eq. (14)
    it = schedule_multipliers("iteration", 10, rate=0.5)
    rho = it**-2.0
    k = t[1:] - 1
    np.testing.assert_allclose(rho[1:], 0.5 * k * (k + 1), rtol=1e-12)  # eq. (15), rho form
    assert rho[0] == 1.0


@pytest.mark.parametrize("shape,params", SHAPES)
def test_total_mode_lands_just_under_the_target(shape, params):
    eps, delta, rounds = 1.0, 1e-5, 20
    z = calibrate_schedule(eps, delta, shape, rounds, **params)
    np.testing.assert_allclose(z / z[0], schedule_multipliers(shape, rounds, **params), rtol=1e-12)
    sens = 0.04 / np.sqrt(np.arange(1, rounds + 1))  # FDP-ADMM-like: Delta shrinks with eta
    led = PrivacyLedger([GaussianRelease(0, t + 1, float(d), float(zz * d)) for t, (d, zz) in
                         enumerate(zip(sens, z))])
    s = led.summary(0, delta)
    ratio = s.eps_pld / eps
    log.info("total mode, %s: eps_pld / target = %.6f", shape, ratio)
    print(f"total mode {shape}: eps_pld/target = {ratio:.6f}")
    assert 0.97 <= ratio <= 1.0
    assert s.eps_rdp > s.eps_pld  # RDP is looser: calibrating to PLD is the tight choice


@pytest.mark.parametrize("eps", [0.3, 8.0])
def test_constant_calibration_across_budgets(eps):
    z = calibrate_noise_multiplier(eps, 1e-6, [1.0] * 15)
    s = PrivacyLedger([GaussianRelease(0, t, 1.0, z) for t in range(1, 16)]).summary(0, 1e-6)
    assert 0.97 <= s.eps_pld / eps <= 1.0


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="shape"):
        schedule_multipliers("linear", 5)
    with pytest.raises(ValueError, match="ratio"):
        schedule_multipliers("geometric", 5, ratio=0.5)
    with pytest.raises(ValueError, match="decay"):
        schedule_multipliers("periodic", 5, decay=1.5)
    with pytest.raises(ValueError, match="rounds"):
        schedule_multipliers("constant", 0)
    with pytest.raises(ValueError, match="eps_total"):
        calibrate_noise_multiplier(0.0, 1e-5, [1.0])
    with pytest.raises(ValueError, match="relative_multipliers"):
        calibrate_noise_multiplier(1.0, 1e-5, [1.0, -1.0])


def test_scenario_schedule_field():
    sc = parse_scenario({"privacy": {"mode": "total", "eps": 1.0, "schedule": {"kind": "periodic", "decay": 0.9}}})
    assert sc.privacy.schedule.kind == "periodic" and sc.privacy.schedule.period == 1
    assert parse_scenario({}).privacy.schedule.kind == "constant"
    with pytest.raises(ScenarioError, match="needs mode: total"):
        parse_scenario({"privacy": {"mode": "per_round", "schedule": {"kind": "geometric"}}})
    with pytest.raises(ScenarioError, match="ratio"):
        parse_scenario({"privacy": {"mode": "total", "schedule": {"kind": "geometric", "ratio": 0.5}}})
    with pytest.raises(ScenarioError):
        parse_scenario({"privacy": {"mode": "total", "schedule": {"kind": "geometric", "decay": 0.5}}})


def test_noise_plan_total_mode_keeps_the_shape_and_meets_the_budget():
    from fdp_flower.algorithms.fdp_admm.plan import NoisePlan
    from fdp_flower.cli.privacy import fdp_admm_ledger

    sc = parse_scenario({"data": {"n_samples": 3000}, "federation": {"num_clients": 3},
                         "algorithm": {"rounds": 12}, "basis": {"kind": "fixed", "n_components": 5},
                         "privacy": {"mode": "total", "eps": 2.0, "delta": 1e-5,
                                     "schedule": {"kind": "geometric", "ratio": 1.2}}})
    plan = NoisePlan(sc, 5)
    z = plan.noise_multipliers
    np.testing.assert_allclose(z / z[0], schedule_multipliers("geometric", 12, ratio=1.2), rtol=1e-12)
    assert plan.noise_multiplier == pytest.approx(np.sqrt(12 / np.sum(z**-2.0)), rel=1e-12)
    led, _ = fdp_admm_ledger(sc)
    worst = led.worst_case(1e-5)
    assert 0.97 <= worst.eps_pld / 2.0 <= 1.0
    with pytest.raises(ValueError, match="outside 1..12"):
        plan.release(13, [1000])
