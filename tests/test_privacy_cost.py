"""Issue 16: total-budget defaults that read no data, spend the target, and the further simulated designs."""
import warnings

import numpy as np
import pytest
from scipy import stats

from fdp_flower.algorithms.fdp_admm.config import (
    TOTAL_BUDGET_CLIP,
    TOTAL_BUDGET_DEFAULTS,
    parse_scenario,
)
from fdp_flower.algorithms.fdp_admm.plan import NoisePlan, noise_plan
from fdp_flower.engines.inprocess import run_fdp_admm
from fdp_flower.functional import design

DESIGNS = ("paper", "brownian", "heavy_tailed")


def total(design_name="paper", seed=0, clients=4, n=2000, rule="admm", **extra):
    """A total-budget scenario with the ADMM rule (these tests are its defaults'); ``rule=None`` leaves the rule
    to the schema (the Newton rule here)."""
    algorithm = {**({} if rule is None else {"rule": rule}), **extra.pop("algorithm", {})}
    with warnings.catch_warnings():  # the schema may warn of a mode mismatch; these tests read settings only
        warnings.simplefilter("ignore")
        return parse_scenario({"seed": seed, "data": {"n_samples": n, "design": design_name, "grid_points": 31},
                               "federation": {"num_clients": clients}, "basis": {"kind": "pooled", "n_components": 4},
                               "privacy": {"mode": "total", "eps": 1.0, "delta": 1.0e-5}, "algorithm": algorithm}
                              | extra)


def test_total_budget_defaults_read_no_data_and_are_the_same_for_every_seed_and_design(monkeypatch):
    """The defaults are fixed before any data exist: parsing touches no generator, and evaluation
    seeds 0-19, tuning seeds >= 1000, every design and client count resolve to the same settings."""
    def no_data(*args, **kwargs):
        raise AssertionError("the defaults read data")

    monkeypatch.setattr(design, "simulate_slice", no_data)
    monkeypatch.setattr(design, "simulate_partition", no_data)
    resolved, newton = set(), set()
    for seed in [*range(20), 1000, 1001, 123456]:
        for name in DESIGNS:
            for clients in (10, 50):
                sc = total(name, seed, clients, n=100_000)
                resolved.add((sc.algorithm.model_dump_json(), sc.model.clip_shape, sc.model.clip_c1))
                unset = total(name, seed, clients, n=100_000, rule=None)  # the schema's rule: the same for all
                newton.add((unset.algorithm.model_dump_json(), unset.model.clip_shape, unset.model.clip_c1))
    assert len(resolved) == 1 and len(newton) == 1
    newton_algorithm, *newton_clip = newton.pop()
    assert '"rule":"newton"' in newton_algorithm and tuple(newton_clip) == (TOTAL_BUDGET_CLIP["clip_shape"],
                                                                             TOTAL_BUDGET_CLIP["clip_c1"])
    algorithm, shape, radius = resolved.pop()
    assert (shape, radius) == (TOTAL_BUDGET_CLIP["clip_shape"], TOTAL_BUDGET_CLIP["clip_c1"])
    sc = total()
    assert sc.algorithm.rounds == TOTAL_BUDGET_DEFAULTS["rounds"]
    assert sc.algorithm.step.model_dump() == TOTAL_BUDGET_DEFAULTS["step"]
    assert sc.algorithm.step_units == "whitened"
    # a sphere clip or a step the scenario sets keeps absolute units; a fixed basis keeps the sphere
    assert total(model={"clip_c1": 2.0}).algorithm.step_units == "absolute"
    assert total(algorithm={"step": {"kind": "constant", "eta0": 5.0}}).algorithm.step_units == "absolute"
    fixed = total(basis={"kind": "fixed", "n_components": 5})
    assert fixed.model.clip_shape == "sphere" and fixed.algorithm.step_units == "absolute"
    with pytest.raises(Exception, match="step_units 'whitened'"):
        total(model={"clip_shape": "sphere"}, algorithm={"step_units": "whitened"})


def test_whitened_step_is_eta0_over_c1_squared_lambda1():
    sc = total()
    plan = NoisePlan(sc, 4, leading_score_variance=0.25)
    eta0, c1 = TOTAL_BUDGET_DEFAULTS["step"]["eta0"], TOTAL_BUDGET_CLIP["clip_c1"]
    np.testing.assert_allclose(plan.step_size(3, np.array([500, 700])), eta0 / (c1**2 * 0.25), rtol=1e-15)
    with pytest.raises(ValueError, match="lambda_1"):
        NoisePlan(sc, 4).step_size(1, 500)


@pytest.mark.parametrize("design_name", DESIGNS)
def test_total_budget_defaults_spend_the_target_on_every_design(design_name):
    """The ledger of a default total-budget run (every client, every round, PLD) composes to
    between 0.97 and 1.0 times the target eps."""
    sc = total(design_name, seed=7)
    result = run_fdp_admm(sc, with_reference=False)
    assert result.stop_reason == "completed" and len(result.history) == sc.algorithm.rounds
    spent = result.ledger.worst_case(1.0e-5).eps_pld
    assert 0.97 <= spent <= 1.0
    # the released noise follows the whitened step: sigma / Delta is the calibrated multiplier
    plan = noise_plan(sc, result.basis)
    _eta, sens, sigma = plan.release(1, result.sample_sizes)
    np.testing.assert_allclose(sigma / sens, plan.noise_multiplier, rtol=1e-12)
    assert np.all(np.isfinite(result.state.global_w))


@pytest.mark.parametrize("design_name,tau", [("paper", 0.9), ("brownian", 0.3), ("heavy_tailed", 0.7)])
def test_designs_have_the_stated_conditional_quantile(design_name, tau):
    """y - int beta X <= 0 with probability tau (binomial tolerance: 4 standard deviations)."""
    grid = design.default_grid(201)
    n = 20_000
    data = design.simulate_slice(5, 0, n, tau=tau, grid=grid, design=design_name)
    d = design.get_design(design_name)
    # int beta X by quadrature on the fine grid; beta has 50 terms, as the curves
    fitted = data.curves @ (design.design_beta(design_name, grid) * design.quadrature_weights(grid))
    below = np.mean(data.response - fitted <= 0)
    assert abs(below - tau) <= 4 * np.sqrt(tau * (1 - tau) / n) + 0.002  # + quadrature error of the fit
    assert d.error_quantile(0.5) == pytest.approx(0.0, abs=1e-12)  # symmetric: y(tau) = y(0.5) - F^{-1}(tau)
    # slices do not depend on the split
    part = design.simulate_partition(5, n, 7, 3, tau=tau, grid=grid, design=design_name)
    lo, hi = design.partition_bounds(n, 7)[3:5]
    np.testing.assert_array_equal(part.response, data.response[lo:hi])


def test_heavy_tailed_design_has_cauchy_errors():
    d = design.get_design("heavy_tailed")
    grid = design.default_grid(51)
    data = design.simulate_slice(2, 0, 20_000, tau=0.5, grid=grid, design="heavy_tailed")
    errors = data.response - data.curves @ (design.design_beta("heavy_tailed", grid) * design.quadrature_weights(grid))
    # the interquartile range of a Cauchy(0, s) is 2 s; its kurtosis is infinite (huge in a sample)
    q1, q3 = np.quantile(errors, [0.25, 0.75])
    assert q3 - q1 == pytest.approx(2 * d.error_scale, rel=0.1)
    assert stats.kurtosis(errors) > 100
    with pytest.raises(ValueError, match="unknown design"):
        design.get_design("nope")
