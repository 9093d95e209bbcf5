"""The exact centralized reference (docs/algorithms.md, section 1): LP (HiGHS) and QP (Clarabel)."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize

from fdp_flower.algorithms.fdp_admm.reference import pooled_objective, solve_reference
from fdp_flower.core.losses import AbsoluteLoss, QuantileLoss
from fdp_flower.core.penalties import Penalty

RNG = np.random.default_rng(99)


def _clients(sizes=(60, 90, 75), k=3):
    feats = [RNG.standard_normal((m, k)) for m in sizes]
    truth = np.array([1.0, -0.5, 0.0])
    resp = [a @ truth + RNG.standard_t(3, len(a)) for a in feats]
    return feats, resp


def _primal_lp(feats, resp, tau, lam, l1=True, free=0):
    """The textbook primal LP (w = w+ - w-, residual split u+ - u-), solved independently;
    the ``free`` leading coordinates cost nothing (an unpenalized intercept)."""
    a, y = np.vstack(feats), np.concatenate(resp)
    c = np.concatenate([np.full(len(r), 1 / len(r)) for r in resp])
    n, k = a.shape
    weight = np.where(np.arange(k) < free, 0.0, lam if l1 else 0.0)
    cost = np.concatenate([weight, weight, tau * c, (1 - tau) * c])
    a_eq = np.hstack([a, -a, np.eye(n), -np.eye(n)])
    res = optimize.linprog(cost, A_eq=a_eq, b_eq=y, bounds=(0, None), method="highs")
    return res.fun


@pytest.mark.parametrize("tau", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("kind", ["l1", "none"])
def test_dual_lp_matches_the_primal_lp(tau, kind):
    feats, resp = _clients()
    loss, pen = QuantileLoss(tau), Penalty(kind)
    ref = solve_reference(feats, resp, loss, pen, 0.3)
    assert ref.objective == pytest.approx(_primal_lp(feats, resp, tau, 0.3, kind == "l1"), rel=1e-9)
    assert ref.objective == pytest.approx(pooled_objective(ref.w, feats, resp, loss, pen, 0.3))


@pytest.mark.parametrize("tau", [0.2, 0.9])
def test_unpenalized_intercept_matches_the_primal_lp_and_scikit_learn(tau):
    """A leading intercept column outside the l1 penalty (Penalty.unpenalized = 1): the dual LP
    equals the primal LP with a free coordinate and, on one client, scikit-learn's
    QuantileRegressor (which never penalizes its intercept)."""
    from sklearn.linear_model import QuantileRegressor

    feats, resp = _clients()
    feats = [np.c_[np.ones(len(a)), a] for a in feats]
    resp = [r + 4.0 for r in resp]
    loss, pen = QuantileLoss(tau), Penalty("l1", unpenalized=1)
    ref = solve_reference(feats, resp, loss, pen, 0.05)
    assert ref.objective == pytest.approx(_primal_lp(feats, resp, tau, 0.05, free=1), rel=1e-9)
    a, y = np.vstack(feats), np.concatenate(resp)
    one = solve_reference([a], [y], loss, pen, 0.05)
    sk = QuantileRegressor(quantile=tau, alpha=0.05, solver="highs").fit(a[:, 1:], y)
    np.testing.assert_allclose(one.w, np.r_[sk.intercept_, sk.coef_], atol=1e-7)
    penalized = solve_reference(feats, resp, loss, Penalty("l1"), 0.05)
    assert abs(penalized.w[0] - ref.w[0]) > 1e-3  # the penalty on w_0 would have shrunk it


@pytest.mark.parametrize("kind", ["l2", "elastic_net"])
def test_conic_solution_with_unpenalized_intercept_is_a_minimum(kind):
    feats, resp = _clients()
    feats = [np.c_[np.ones(len(a)), a] for a in feats]
    resp = [r + 4.0 for r in resp]
    loss, pen = QuantileLoss(0.3), Penalty(kind, lam1=0.5, lam2=0.4, unpenalized=1)
    ref = solve_reference(feats, resp, loss, pen, 0.8)
    f = lambda w: pooled_objective(w, feats, resp, loss, pen, 0.8)  # noqa: E731
    assert ref.objective == pytest.approx(f(ref.w), rel=1e-12)
    for step in (1e-2, 1e-4):
        for d in np.vstack([np.eye(4), -np.eye(4), RNG.standard_normal((20, 4))]):
            assert f(ref.w + step * d / np.linalg.norm(d)) >= ref.objective - 1e-9
    assert ref.w[0] > 2.5  # not shrunk towards 0 by the penalty


@pytest.mark.parametrize("kind", ["l2", "elastic_net"])
def test_conic_solution_is_a_minimum(kind):
    """No random or coordinate perturbation improves the objective (convex: local = global)."""
    feats, resp = _clients()
    loss, pen = QuantileLoss(0.3), Penalty(kind, lam1=0.5, lam2=0.4)
    ref = solve_reference(feats, resp, loss, pen, 0.8)
    f = lambda w: pooled_objective(w, feats, resp, loss, pen, 0.8)  # noqa: E731
    assert ref.objective == pytest.approx(f(ref.w), rel=1e-12)
    for step in (1e-2, 1e-4):
        for d in np.vstack([np.eye(3), -np.eye(3), RNG.standard_normal((20, 3))]):
            assert f(ref.w + step * d / np.linalg.norm(d)) >= ref.objective - 1e-9


def test_absolute_loss_is_twice_the_median_regression():
    feats, resp = _clients()
    lad = solve_reference(feats, resp, AbsoluteLoss(), Penalty("none"), 0.0)
    median = solve_reference(feats, resp, QuantileLoss(0.5), Penalty("none"), 0.0)
    assert lad.objective == pytest.approx(2 * median.objective, rel=1e-9)


def test_reference_refuses_what_it_cannot_solve_exactly():
    feats, resp = _clients()
    with pytest.raises(ValueError, match="nonconvex"):
        solve_reference(feats, resp, QuantileLoss(0.5), Penalty("scad"), 0.1)
    with pytest.raises(ValueError, match="one .features, response. pair"):
        solve_reference(feats, resp[:2], QuantileLoss(0.5), Penalty("l1"), 0.1)
