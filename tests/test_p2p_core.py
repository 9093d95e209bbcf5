"""Peer-to-peer update rules, sensitivities, budgets and references (docs/algorithms.md, sections 3 and 4)."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize

from fdp_flower.algorithms.fdp_admm.update import Objective
from fdp_flower.algorithms.p2p import budget as b
from fdp_flower.algorithms.p2p.grad_nfl import grad_nfl_step, metropolis_row
from fdp_flower.algorithms.p2p.pr_admm import exact_primal_step, pr_sensitivity, threshold_neighbours
from fdp_flower.algorithms.p2p.problems import data_rng, synthetic_problem
from fdp_flower.algorithms.p2p.zcdp_nfl import nfl_dual_step, nfl_primal_step, nfl_sensitivity
from fdp_flower.core.losses import LogisticLoss
from fdp_flower.core.penalties import Penalty
from fdp_flower.privacy.mechanisms import zcdp_to_dp


@pytest.fixture(scope="module")
def lad():
    return synthetic_problem("lad", num_nodes=6, samples_per_node=40, dim=5, rng=data_rng(1))


def test_nfl_primal_step_solves_its_linearized_subproblem(lad):
    rng = np.random.default_rng(0)
    own, nb, dual = rng.normal(size=5), rng.normal(size=(3, 5)), rng.normal(size=5)
    eta, rho = 0.7, 0.3
    x = nfl_primal_step(objective=lad.objective, own_released=own, neighbour_released=nb, dual=dual,
                        features=lad.features[0], response=lad.responses[0], eta=eta, rho=rho)
    s = lad.objective.local_subgradient(own, lad.features[0], lad.responses[0])
    # stationarity of s.x + lam.x + (1/2eta)||x - xt_i||^2 + rho sum_j ||x - (xt_i + xt_j)/2||^2
    resid = s + dual + (x - own) / eta + rho * (2 * 3 * x - 3 * own - nb.sum(0))
    np.testing.assert_allclose(resid, 0, atol=1e-12)
    new_dual = nfl_dual_step(dual=dual, own_released=own, neighbour_released=nb, rho=rho)
    np.testing.assert_allclose(new_dual, dual + rho * (3 * own - nb.sum(0)), atol=1e-14)


def test_nfl_sensitivity_bounds_replace_one(lad):
    """Moving one sample to the worst case never moves x_i by more than 2 G / (m (1/eta + 2 rho d))."""
    rng = np.random.default_rng(1)
    a, y = lad.features[0], lad.responses[0]
    own, nb, dual = rng.normal(size=5), rng.normal(size=(4, 5)), np.zeros(5)
    eta, rho = 2.0, 0.2
    base = nfl_primal_step(objective=lad.objective, own_released=own, neighbour_released=nb, dual=dual,
                           features=a, response=y, eta=eta, rho=rho)
    bound = nfl_sensitivity(gradient_bound=lad.gradient_bound(), m=len(y), eta=eta, rho=rho, degree=4)
    worst = 0.0
    for _ in range(200):
        a2, y2 = a.copy(), y.copy()
        v = rng.normal(size=5)
        a2[0] = lad.c1 * v / np.linalg.norm(v)
        y2[0] = rng.normal() * 100
        x2 = nfl_primal_step(objective=lad.objective, own_released=own, neighbour_released=nb, dual=dual,
                             features=a2, response=y2, eta=eta, rho=rho)
        worst = max(worst, np.linalg.norm(x2 - base))
    assert worst <= bound * (1 + 1e-12)
    assert worst >= 0.3 * bound  # the bound is not vacuous


def test_grad_nfl_uses_metropolis_weights(lad):
    w_ii, w = metropolis_row(2, [3, 1])
    np.testing.assert_allclose(w, [0.25, 1 / 3])
    assert w_ii == pytest.approx(1 - 0.25 - 1 / 3)
    own, nb = np.ones(5), np.arange(10.0).reshape(2, 5)
    x = grad_nfl_step(objective=lad.objective, own_released=own, neighbour_released=nb, neighbour_degrees=[3, 1],
                      features=lad.features[0], response=lad.responses[0], step=0.0)
    np.testing.assert_allclose(x, w_ii * own + w @ nb)


def _logistic_node(seed=0, m=60, k=4):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(m, k)) / 2
    a /= np.maximum(1, np.linalg.norm(a, axis=1))[:, None]
    y = np.where(rng.random(m) < 0.5, -1.0, 1.0)
    obj = Objective(LogisticLoss(), Penalty("elastic_net", lam1=0.0, lam2=1.0), lam=0.05, num_clients=5)
    return obj, a, y


def test_exact_primal_step_matches_a_generic_solver():
    obj, a, y = _logistic_node()
    rng = np.random.default_rng(2)
    own, nb, dual, eta = rng.normal(size=4) * 3, rng.normal(size=(2, 4)), rng.normal(size=4), 0.5
    x, iters = exact_primal_step(objective=obj, own_released=own, neighbour_used=nb, dual=dual, features=a,
                                 response=y, eta=eta)
    b_ = eta * (2 * own + nb.sum(0))

    def phi(z):
        return float(obj.local_value(z, a, y)) + dual @ z + eta * 2 * (z @ z) - b_ @ z

    ref = optimize.minimize(phi, np.zeros(4), method="BFGS", options={"gtol": 1e-11}).x
    np.testing.assert_allclose(x, ref, atol=1e-7)
    grad = obj.local_subgradient(x, a, y) + dual + 2 * eta * 2 * x - b_
    assert np.linalg.norm(grad) < 1e-8 and iters <= 10


def test_pr_admm_sensitivity_tight_and_paper():
    """Replace-one perturbations of the exact solve stay within V / (m eta d); the paper's V / (eta d) is m
    times larger."""
    obj, a, y = _logistic_node(seed=3)
    rng = np.random.default_rng(4)
    own, nb, dual, eta = rng.normal(size=4), rng.normal(size=(3, 4)), np.zeros(4), 0.5
    x0, _ = exact_primal_step(objective=obj, own_released=own, neighbour_used=nb, dual=dual, features=a,
                              response=y, eta=eta)
    tight = pr_sensitivity(gradient_bound=1.0, m=len(y), eta=eta, degree=3)
    paper = pr_sensitivity(gradient_bound=1.0, m=len(y), eta=eta, degree=3, paper_constants=True)
    assert paper == pytest.approx(len(y) * tight)
    worst = 0.0
    for _ in range(50):
        a2, y2 = a.copy(), y.copy()
        v = rng.normal(size=4)
        a2[0], y2[0] = v / np.linalg.norm(v), -y[0]
        x2, _ = exact_primal_step(objective=obj, own_released=own, neighbour_used=nb, dual=dual, features=a2,
                                  response=y2, eta=eta)
        worst = max(worst, np.linalg.norm(x2 - x0))
    assert worst <= tight


def test_threshold_replaces_noisy_neighbours():
    own = np.array([1.0, 2.0])
    nb = np.array([[5.0, 5.0], [0.0, 0.0]])
    used, cut = threshold_neighbours(own, nb, np.array([2.0, 0.5]), threshold=1.0)
    assert cut.tolist() == [True, False]
    np.testing.assert_array_equal(used, [[1.0, 2.0], [0.0, 0.0]])
    used, cut = threshold_neighbours(own, nb, np.array([1e300, 0.5]), threshold=math.inf)
    assert not cut.any()


@settings(max_examples=50, deadline=None)
@given(eps=st.floats(1e-3, 50.0), delta=st.floats(1e-10, 0.5))
def test_rho_from_dp_inverts_bun_steinke(eps, delta):
    assert zcdp_to_dp(b.rho_from_dp(eps, delta), delta) == pytest.approx(eps, rel=1e-9)


def test_schedules_and_paper_closed_forms():
    k, r_p, r_t = 50, 0.925, 0.015
    per = b.periodic_multipliers(k, r_p, 1)
    np.testing.assert_allclose(per[:3], [1, 1 / r_p, 1 / r_p**2])
    # Theorem 3 of Ding et al. (2019) has an extra -1 relative to the sum of its own schedule
    # (docs/algorithms.md, eq. (4.9))
    q = k / 1
    thm3 = 1 * (1 - r_p**q) / (r_p ** (q - 1) - r_p**q) - 1
    assert per.sum() == pytest.approx(thm3 + 1, rel=1e-12)
    per5 = b.periodic_multipliers(k, r_p, 5)
    assert per5.sum() == pytest.approx(5 * (1 - r_p**10) / (r_p**9 - r_p**10), rel=1e-12)
    it = b.iteration_multipliers(k, r_t)
    np.testing.assert_allclose(it[:3], [1, 2 * r_t, 6 * r_t])
    assert it.sum() == pytest.approx((r_t * k * (k**2 - 1) + 3) / 3, rel=1e-12)  # Theorem 4 equals the sum
    np.testing.assert_allclose(b.geometric_multipliers(3, 2.0), [1, 2, 4])
    from fdp_flower.privacy.ledger import GaussianRelease, pld_epsilon

    pld_plan = b.NoisePlan.pld_total(per, 1.0, 1e-4)  # the schedule's shape is kept, the scale meets eps by PLD
    np.testing.assert_allclose(np.asarray(pld_plan.rho) / pld_plan.rho[0], per, rtol=1e-12)
    releases = [GaussianRelease(0, k + 1, 0.3, pld_plan.sigma(0.3, k + 1)) for k in range(len(per))]
    assert 1.0 * (1 - 1e-3) <= pld_epsilon(releases, 1e-4) <= 1.0
    assert sum(pld_plan.rho) == pytest.approx(pld_plan.rho_total) and pld_plan.rho_total > b.rho_from_dp(1.0, 1e-4)
    plan = b.NoisePlan.zcdp_total(per, 1.0, 1e-4)
    assert sum(plan.rho) == pytest.approx(b.rho_from_dp(1.0, 1e-4), rel=1e-12)
    assert plan.sigma(2.0, 1) == pytest.approx(2.0 / math.sqrt(2 * plan.rho[0]))
    with pytest.raises(ValueError, match="R_P"):
        b.periodic_multipliers(3, 1.5, 1)
    with pytest.raises(ValueError, match="ratio"):
        b.geometric_multipliers(3, 0.9)


def test_references_satisfy_optimality():
    en = synthetic_problem("elastic_net", num_nodes=4, samples_per_node=50, dim=6, rng=data_rng(5))
    x = en.x_star
    smooth = Objective(en.loss, Penalty("elastic_net", lam1=0.0, lam2=en.penalty.lam2), en.lam, 4)
    g = sum(smooth.local_subgradient(x, a, y) for a, y in zip(en.features, en.responses))
    l1 = en.lam * en.penalty.lam1
    nz = np.abs(x) > 1e-10
    np.testing.assert_allclose(g[nz] + l1 * np.sign(x[nz]), 0, atol=1e-9)  # KKT on the support
    assert np.all(np.abs(g[~nz]) <= l1 + 1e-9) and (~nz).any()  # and off it (sparse solution)
    ridge = synthetic_problem("ridge", num_nodes=4, samples_per_node=50, dim=6, rng=data_rng(5))
    g = sum(ridge.objective.local_subgradient(ridge.x_star, a, y) for a, y in zip(ridge.features, ridge.responses))
    assert np.linalg.norm(g) < 1e-10
    lad = synthetic_problem("lad", num_nodes=4, samples_per_node=50, dim=6, rng=data_rng(5))
    f0 = lad.total_objective(lad.x_star)
    rng = np.random.default_rng(0)
    assert all(lad.total_objective(lad.x_star + 1e-3 * rng.normal(size=6)) >= f0 - 1e-12 for _ in range(50))
