"""DP-ADMM / DP-AccADMM (Xu et al. 2020; docs/algorithms.md, section 5): update rules, Theorem 1, ledger,
reference, engine."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from fdp_flower.algorithms.gradient_admm.reference import optimality_residual, solve_generalized_lasso
from fdp_flower.algorithms.gradient_admm.plan import GradientADMMProblem
from fdp_flower.algorithms.gradient_admm.site import POINT, SiteData, SitePlan, answer, data_term
from fdp_flower.algorithms.gradient_admm.update import (
    GradientPrivacy,
    aggregate_gradients,
    check_gamma,
    dual_update,
    extrapolate,
    gradient_sensitivity,
    graph_guided_matrix,
    min_gamma,
    next_theta,
    paper_sensitivity,
    privacy_report,
    spectral_norm_gram,
    theorem1_alpha,
    theorem1_epsilon,
    theorem1_sigma,
    under_neighbouring,
    x_update,
    y_update,
)
from fdp_flower.core.losses import AbsoluteLoss, LogisticLoss, QuantileLoss
from fdp_flower.data import load_breast_cancer_binary, train_test_split_binary
from fdp_flower.algorithms.protocol import PublicValueError, SiteRequest
from fdp_flower.data.sources import split_clients
from fdp_flower.engines.gradient_admm import run_gradient_admm
from fdp_flower.privacy import PrivacyLedger
from fdp_flower.privacy.ledger import rdp_epsilon
from fdp_flower.privacy.mechanisms import release_rng

LOSS = LogisticLoss()


# ---------------------------------------------------------------- update rules
def test_y_update_is_the_argmin_of_eq3():
    """y_t minimizes lam ||y||_1 + rho/2 ||A x - y + u||^2: 0 in lam d|y| - rho (v - y), v = A x + u."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(7, 4))
    x, u = rng.normal(size=4), rng.normal(size=7)
    lam, rho = 0.3, 0.7
    y = y_update(a, x, u, lam=lam, rho=rho)
    v = a @ x + u
    nz = y != 0
    # on the support: rho (v - y) = lam sign(y); off it: |rho v| <= lam
    np.testing.assert_allclose(rho * (v[nz] - y[nz]), lam * np.sign(y[nz]), atol=1e-12)
    assert np.all(np.abs(rho * v[~nz]) <= lam + 1e-12)
    # and no random perturbation does better
    obj = lambda z: lam * np.abs(z).sum() + rho / 2 * np.sum((v - z) ** 2)  # noqa: E731
    for _ in range(200):
        assert obj(y) <= obj(y + 0.05 * rng.normal(size=7)) + 1e-12


def test_x_update_solves_eq7():
    """The closed form zeroes the gradient of <g, x> + rho/2 ||A x - y + u||^2 + ||x - xh||_G^2 / (2 eta)."""
    rng = np.random.default_rng(1)
    a = rng.normal(size=(9, 5))
    xh, y, u, g = rng.normal(size=5), rng.normal(size=9), rng.normal(size=9), rng.normal(size=5)
    rho, eta = 0.8, 0.5
    gam = min_gamma(eta=eta, rho=rho, gram_norm=spectral_norm_gram(a)) + 0.25
    x = x_update(a, xh, g, y, u, rho=rho, eta=eta, gamma=gam)
    big_g = gam * np.eye(5) - eta * rho * a.T @ a
    assert np.linalg.eigvalsh(big_g).min() >= 1 - 1e-9  # G >= I
    stationarity = g + rho * a.T @ (a @ x - y + u) + big_g @ (x - xh) / eta
    np.testing.assert_allclose(stationarity, 0.0, atol=1e-10)


def test_gamma_condition_is_enforced():
    """The paper's experiments use gam = 1 < eta rho ||A^T A|| + 1: refused."""
    with pytest.raises(ValueError, match="gamma"):
        check_gamma(1.0, eta=1.0, rho=1.0, gram_norm=3.0)
    assert check_gamma(4.0, eta=1.0, rho=1.0, gram_norm=3.0) == 4.0


def test_dual_update_and_nesterov():
    a = np.arange(6.0).reshape(3, 2)
    np.testing.assert_allclose(dual_update(a, np.ones(3), np.array([1.0, 2.0]), np.zeros(3)), 1 + a @ [1, 2])
    th = [1.0]
    for _ in range(50):
        th.append(next_theta(th[-1]))
    assert th[1] == pytest.approx((1 + math.sqrt(5)) / 2)
    # theta_{t+1}^2 - theta_{t+1} = theta_t^2 and theta_t >= (t + 1) / 2
    for t in range(1, 50):
        assert th[t] ** 2 - th[t] == pytest.approx(th[t - 1] ** 2)
        assert th[t - 1] >= (t + 1) / 2 - 1e-12
    # first step has no momentum (theta_1 = 1)
    np.testing.assert_array_equal(extrapolate(np.ones(2), np.zeros(2), 1.0, th[1]), np.ones(2))


def test_weighted_aggregate_is_the_pooled_gradient():
    """sum_i (m_i/n) grad f_i = grad of the pooled mean loss (federated = centralized without noise)."""
    rng = np.random.default_rng(2)
    feats = [rng.normal(size=(m, 4)) for m in (3, 11, 6)]
    labs = [np.sign(rng.normal(size=len(f))) for f in feats]
    x = rng.normal(size=4)
    grads = np.stack([LOSS.mean_subgradient(x, f, y) for f, y in zip(feats, labs)])
    pooled = LOSS.mean_subgradient(x, np.vstack(feats), np.concatenate(labs))
    np.testing.assert_allclose(aggregate_gradients(grads, [3, 11, 6]), pooled, atol=1e-14)


# ---------------------------------------------------------------- Theorem 1 and the ledger
def test_theorem1_sigma_matches_the_printed_formula_and_composes_to_eps():
    c, n, T, eps, delta, mu = 1.0, 3257, 100, 0.5, 1e-3, 0.5
    alpha = theorem1_alpha(eps, delta, mu)
    assert alpha == pytest.approx(math.log(1 / delta) / ((1 - mu) * eps) + 1)
    # eq. (8) with the paper's Delta = c/n is the printed formula
    assert float(theorem1_sigma(paper_sensitivity(c, n), rounds=T, eps=eps, delta=delta, mu=mu)) ** 2 == \
        pytest.approx(c**2 * alpha * T / (2 * n**2 * eps * mu), rel=1e-12)
    # the project calibrates with the valid 2c/n under both relations: twice the printed sigma
    sens = gradient_sensitivity(c, n, "add_remove")
    assert sens == pytest.approx(2 * c / n) and gradient_sensitivity(c, n, "replace_one") == sens
    sigma = float(theorem1_sigma(sens, rounds=T, eps=eps, delta=delta, mu=mu))
    assert sigma**2 == pytest.approx(4 * c**2 * alpha * T / (2 * n**2 * eps * mu), rel=1e-12)
    releases = PrivacyLedger()
    from fdp_flower.algorithms.gradient_admm.update import make_releases

    for t in range(1, T + 1):
        releases.record_many(make_releases(round_=t, sensitivities=[sens], sigmas=[sigma],
                                           neighbouring="add_remove"))
    # fixed-order RDP route of the proof: exactly eps
    assert theorem1_epsilon(releases.releases, delta=delta, alpha=alpha) == pytest.approx(eps, rel=1e-12)
    # the accountant optimises the order, so it can only be tighter
    assert rdp_epsilon(releases.releases, delta) <= eps * (1 + 1e-9)
    # the same sigma means the same eps under replace-one: the relabelled releases keep 2c/n
    swapped = under_neighbouring(releases, "replace_one")
    assert swapped.releases[0].sensitivity == sens and swapped.releases[0].neighbouring == "replace_one"
    rep = {r.neighbouring: r for r in privacy_report(releases, delta=delta, alpha=alpha)}
    assert rep["add_remove"].eps_theorem1 == pytest.approx(eps) == rep["replace_one"].eps_theorem1
    assert rep["replace_one"].eps_rdp == pytest.approx(rep["add_remove"].eps_rdp)


def test_sensitivity_validation():
    assert gradient_sensitivity(2.0, 4, "add_remove") == pytest.approx(1.0)
    assert gradient_sensitivity(2.0, 4, "replace_one") == pytest.approx(1.0)
    assert paper_sensitivity(2.0, 4) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="neighbouring"):
        gradient_sensitivity(1.0, 4, "swap")
    with pytest.raises(ValueError, match="mu"):
        theorem1_alpha(1.0, 1e-3, 1.0)


def test_measured_mean_gradient_sensitivity_reaches_2c_over_m_under_add_remove_and_replace_one():
    """Adversarial neighbours of a site with m rows for the absolute loss (rows ||a|| = c1 = 1, so
    c = 1): at x = 0 a row (e_1, y) has gradient -sign(y) e_1, so the crowd (y = 1) sits at -c e_1
    and the canary (y = -1) at +c e_1."""
    loss, m, x = AbsoluteLoss(), 50, np.zeros(3)
    e1 = np.eye(3)[:1]
    mean = lambda rows, y: loss.mean_subgradient(x, np.repeat(e1, len(y), axis=0), np.asarray(y, float))  # noqa: E731
    crowd = [1.0] * (m - 1)
    full = mean(None, crowd + [-1.0])  # m rows, the canary in
    removed = mean(None, crowd)  # m - 1 rows
    replaced = mean(None, crowd + [1.0])  # m rows, the canary swapped for a crowd row
    added = mean(None, crowd + [1.0, -1.0])  # m + 1 rows
    bound = float(gradient_sensitivity(loss.gradient_bound(1.0), m, "add_remove"))
    assert bound == float(gradient_sensitivity(loss.gradient_bound(1.0), m, "replace_one")) == 2.0 / m
    assert np.linalg.norm(full - removed) == pytest.approx(bound, rel=1e-12)  # removal attains 2c/m
    assert np.linalg.norm(full - replaced) == pytest.approx(bound, rel=1e-12)  # replacement too
    assert np.linalg.norm(added - replaced) == pytest.approx(2.0 / (m + 1), rel=1e-12)  # addition: 2c/(m+1)
    assert np.linalg.norm(full - removed) == pytest.approx(2 * float(paper_sensitivity(1.0, m)))  # c/m fails


def _site(response, features=None):
    features = np.eye(3) if features is None else features
    return SiteData((0,), (features,), (np.asarray(response, dtype=float),))


def _ask(site, plan, point, round_=1):
    """The site's answer to one request, and the ledger events its noise source was called with."""
    drawn = []

    def noise(events):
        drawn.extend(events)
        return release_rng(0, 0, round_)

    (out,) = answer([SiteRequest(0, round_, {POINT: point})], site, plan, noise)
    return out, drawn


PRIVATE = SitePlan(LOSS, 1.0, 3, 4, GradientPrivacy(eps=1.0, delta=1e-3))


def test_logistic_labels_outside_plus_minus_one_are_refused_on_the_site():
    """A logistic request on a site with real-valued responses: refused, nothing released, nothing charged."""
    for labels, pattern in (([1.0, -1.0, 50.0], r"labels in \{-1, \+1\}.*e\.g\. 50"), ([1.0, 0.0, 1.0], "labels in")):
        for plan in (PRIVATE, SitePlan(LOSS, 1.0, 3, 4, None)):
            out, drawn = _ask(_site(labels), plan, np.zeros(3))
            assert isinstance(out, ValueError) and re.search(pattern, str(out)), out
            assert drawn == []  # the noise source (the site's charge) was never called
    ok, drawn = _ask(_site([1.0, -1.0, 1.0]), SitePlan(LOSS, 1.0, 3, 4, None), np.zeros(3))
    assert np.linalg.norm(ok.value) <= 1.0 and ok.event is None and drawn == []
    # the same real-valued responses are a valid quantile site: labels are checked against the loss asked for,
    # every time a new loss is asked for on the same site
    site = _site([1.0, -1.0, 50.0])
    out, _ = _ask(site, SitePlan(QuantileLoss(tau=0.5), 0.5, 3, 4, None), np.zeros(3))
    assert out.value.shape == (3,)
    out, drawn = _ask(site, PRIVATE, np.zeros(3))
    assert isinstance(out, ValueError) and "labels in" in str(out) and drawn == []


@pytest.mark.parametrize("point, message", [
    (np.array([1e300, 0.0, 0.0]), "magnitude"),
    (np.array([-1.0e101, 1.0, 1.0]), "magnitude"),
    (np.array([np.inf, 0.0, 0.0]), "NaN or infinite"),
    (np.array([np.nan, 0.0, 0.0]), "NaN or infinite"),
    (np.zeros(4), "shape"),
    (None, "not a numeric array|shape"),
])
def test_extreme_public_values_are_refused_with_nothing_released(point, message):
    out, drawn = _ask(_site([1.0, -1.0, 1.0]), PRIVATE, point)
    assert isinstance(out, PublicValueError) and re.search(message, str(out)), out
    assert drawn == []


def test_extreme_but_accepted_points_keep_the_noise_sigma():
    """Subnormal or large (<= 1e100) points: the release is the clipped mean gradient plus N(0, sigma^2 I),
    whatever the point; the gradient's norm stays <= c, so the noise cannot be absorbed by rounding."""
    rng = np.random.default_rng(0)
    features = rng.normal(size=(40, 3))
    features /= np.linalg.norm(features, axis=1, keepdims=True)
    labels = np.sign(rng.normal(size=40))
    site = _site(labels, features)
    for point in (np.full(3, 5e-324), np.array([1e100, -1e100, 1e99]), np.zeros(3)):
        out, drawn = _ask(site, PRIVATE, point)
        sigma = float(PRIVATE.calibration(1, 40)[1])
        assert [e.sigma for e in drawn] == [sigma] and out.event == drawn[0]
        clean = data_term(LOSS, point, features, labels)
        assert np.linalg.norm(clean) <= 1.0 + 1e-12
        np.testing.assert_array_equal(out.value, clean + sigma * release_rng(0, 0, 1).standard_normal(3))


def test_a_round_outside_the_calibration_is_refused():
    out, drawn = _ask(_site([1.0, -1.0, 1.0]), PRIVATE, np.zeros(3), round_=5)
    assert isinstance(out, ValueError) and "calibrated for 4 releases" in str(out) and drawn == []


def test_site_release_draws_the_release_rng_noise():
    rng = np.random.default_rng(3)
    a, y = rng.normal(size=(20, 3)), np.sign(rng.normal(size=20))
    x = rng.normal(size=3)
    site = SiteData((2,), (a,), (y,))
    plan = SitePlan(LOSS, 1.0, 3, 10, GradientPrivacy(eps=1.0, delta=1e-3))
    from fdp_flower.privacy.mechanisms import run_noise

    (noisy,) = answer([SiteRequest(2, 7, {POINT: x})], site, plan, run_noise(5))
    sens, sigma = plan.calibration(7, 20)
    assert noisy.event.sensitivity == float(sens) == 2.0 / 20 and noisy.event.sigma == float(sigma)
    assert noisy.event.mechanism == "gaussian_gradient" and noisy.event.neighbouring == "add_remove"
    clean = data_term(LOSS, x, a, y)
    np.testing.assert_array_equal(noisy.value, clean + float(sigma) * release_rng(5, 2, 7).standard_normal(3))


# ---------------------------------------------------------------- fixtures on breast cancer
@pytest.fixture(scope="module")
def cancer():
    x, y = load_breast_cancer_binary(c1=1.0)
    split = train_test_split_binary(x, y, test_fraction=0.3, rng=np.random.default_rng(0))
    a = graph_guided_matrix(split.x_train, alpha=0.3)
    lam = 1e-3
    ref = solve_generalized_lasso(LOSS, split.x_train, split.y_train, a, lam)
    fa, fy = split_clients(split.x_train, split.y_train, 5, np.random.default_rng(1))
    problem = GradientADMMProblem.from_clients(loss=LOSS, matrix=a, lam=lam, features=fa, responses=fy, c1=1.0,
                                               test_features=split.x_test, test_labels=split.y_test)
    return problem, ref, split


def test_graph_guided_matrix_shape(cancer):
    problem, _, _ = cancer
    a = problem.matrix
    d = problem.dim
    np.testing.assert_array_equal(a[-d:], np.eye(d))  # A = [W; I]
    w = a[:-d]
    assert len(w) > 0
    assert np.all(np.count_nonzero(w, axis=1) == 2)  # one edge per row: e_j -/+ e_k
    assert np.all(np.abs(w).sum(axis=1) == 2)


def test_reference_satisfies_optimality(cancer):
    problem, ref, split = cancer
    res = optimality_residual(LOSS, ref.x, split.x_train, split.y_train, problem.matrix, problem.lam)
    assert res < 1e-6
    # and beats random nearby points
    rng = np.random.default_rng(4)
    for _ in range(20):
        assert ref.objective <= problem.objective(ref.x + 1e-3 * rng.normal(size=problem.dim)) + 1e-12


def test_reference_quantile_lp_matches_a_direct_check():
    """Check loss + lasso: the LP optimum is below every perturbation (convex, piecewise linear)."""
    rng = np.random.default_rng(5)
    a = rng.normal(size=(40, 3))
    y = a @ np.array([1.0, -2.0, 0.5]) + rng.standard_t(3, size=40)
    loss = QuantileLoss(tau=0.3)
    sol = solve_generalized_lasso(loss, a, y, np.eye(3), 0.05)
    obj = lambda w: float(loss.mean(w, a, y)) + 0.05 * np.abs(w).sum()  # noqa: E731
    for _ in range(100):
        assert sol.objective <= obj(sol.x + 0.01 * rng.normal(size=3)) + 1e-9


def test_nonprivate_admm_reaches_relative_gap_1e3(cancer):
    problem, ref, _ = cancer
    res = run_gradient_admm(problem, rounds=1000, rho=0.03, eta=4.0, reference_objective=ref.objective,
                            eval_every=10)
    assert res.history[-1]["relative_gap"] <= 1e-3
    assert res.history[-1]["relative_gap"] >= -1e-8  # never below the optimum (up to solver tolerance)


def test_nonprivate_accadmm_is_faster_than_admm(cancer):
    problem, ref, _ = cancer
    hits = {}
    for acc in (False, True):
        res = run_gradient_admm(problem, rounds=6000, rho=0.3, eta=4.0, accelerated=acc,
                                reference_objective=ref.objective, eval_every=5)
        hits[acc] = res.first_round_below("relative_gap", 1e-3)
    assert hits[False] is not None and hits[True] is not None
    assert hits[True] < hits[False] / 5


def test_private_run_is_reproducible_and_ledgered(cancer):
    problem, ref, _ = cancer
    priv = GradientPrivacy(eps=1.0, delta=1e-3)
    kw = dict(rounds=30, rho=0.3, eta=4.0, privacy=priv, keep_iterates=True, eval_every=30)
    r1 = run_gradient_admm(problem, seed=11, **kw)
    r2 = run_gradient_admm(problem, seed=11, **kw)
    r3 = run_gradient_admm(problem, seed=12, **kw)
    for a, b in zip(r1.iterates, r2.iterates):
        np.testing.assert_array_equal(a, b)
    assert not np.allclose(r1.iterates[-1], r3.iterates[-1])
    # one release per client and round, local calibration with each client's own m_i
    assert len(r1.ledger.releases) == 30 * problem.num_clients
    rel = r1.ledger.releases[0]
    assert rel.mechanism == "gaussian_gradient" and rel.neighbouring == "add_remove"
    np.testing.assert_allclose(r1.sensitivities, 2.0 / problem.counts)  # c = c1 = 1 for the logistic loss
    np.testing.assert_allclose(r1.sigmas * problem.counts, r1.sigmas[0] * problem.counts[0])
    # the whole run spends the target eps per client under either relation (Theorem 1 with 2c/m)
    rep = {r.neighbouring: r for r in privacy_report(r1.ledger, delta=1e-3, alpha=priv.alpha)}
    assert rep["add_remove"].eps_theorem1 == pytest.approx(1.0)
    assert rep["replace_one"].eps_theorem1 == pytest.approx(1.0)


def test_paper_initial_dual_is_refused_under_privacy(cancer):
    problem, _, _ = cancer
    with pytest.raises(ValueError, match="init_dual"):
        run_gradient_admm(problem, rounds=2, rho=1.0, eta=1.0, privacy=GradientPrivacy(1.0, 1e-3),
                          init_dual="paper")
    # without privacy it is the paper's u_0 and the run still converges toward the optimum
    res = run_gradient_admm(problem, rounds=5, rho=1.0, eta=1.0, init_dual="paper", eval_every=5)
    assert np.isfinite(res.history[-1]["objective"])
