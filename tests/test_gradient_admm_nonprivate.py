"""DP-ADMM / DP-AccADMM with privacy off reach their exact estimator (issue 29, item 3): the proximal
Barzilai-Borwein server step, its stop and its cap (docs/algorithms.md, section 5.2, eqs. (5.11)-(5.13))."""
from __future__ import annotations

import json

import numpy as np
import pytest

import fdp_flower
from fdp_flower.algorithms.gradient_admm.config import GradientADMMScenario
from fdp_flower.algorithms.gradient_admm.nonprivate import ROUND_CAP, generalized_lasso_prox
from fdp_flower.algorithms.gradient_admm.plan import build_problem
from fdp_flower.algorithms.gradient_admm.protocol import GradientADMMServer
from fdp_flower.algorithms.gradient_admm.reference import solve_generalized_lasso
from fdp_flower.algorithms.gradient_admm.update import GradientPrivacy, soft_threshold
from fdp_flower.config.base import validate_mapping


def _logistic_rows(n=400, seed=3):
    """Nearly separable labels: the loss is flat along x*, where the paper's fixed eta crawls (200 rounds of
    DP-ADMM with privacy off end 31% away from x*)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 4))
    score = 0.5 + x @ np.array([6.0, -4.5, 0.0, 3.0])
    return x, np.where(rng.uniform(size=n) < 1 / (1 + np.exp(-score)), 1.0, -1.0)


def _quantile_rows(n=400, seed=4):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 3))
    return x, 1.0 + x @ np.array([1.0, -0.5, 0.25]) + rng.standard_t(3, size=n)


def _distance_to_exact(model) -> float:
    """||x - x*|| / ||x*||, x* the exact generalized lasso (Clarabel) on the fit's own clipped rows."""
    problem = build_problem(model.scenario)
    x_star = solve_generalized_lasso(problem.loss, *problem.pooled(), problem.matrix, problem.lam).x
    return float(np.linalg.norm(model.w - x_star) / np.linalg.norm(x_star))


@pytest.mark.parametrize("algorithm", ["dp_admm", "dp_acc_admm"])
def test_privacy_off_fit_gradient_reaches_the_exact_logistic_estimator(tmp_path, algorithm):
    x, y = _logistic_rows()
    model = fdp_flower.fit_gradient(x, y, algorithm=algorithm, eps=None, n_clients=4, data_dir=tmp_path,
                                    reference=False)
    assert model.stop_reason.startswith("converged")
    assert len(model.history) < ROUND_CAP
    assert _distance_to_exact(model) <= 0.01


def test_privacy_off_fit_gradient_reaches_the_exact_quantile_estimator(tmp_path):
    x, y = _quantile_rows()
    model = fdp_flower.fit_gradient(x, y, loss="quantile", tau=0.3, eps=None, n_clients=4, data_dir=tmp_path,
                                    reference=False)
    assert model.stop_reason.startswith("converged")
    assert _distance_to_exact(model) <= 0.01


def test_a_privacy_off_run_that_reaches_its_cap_says_cap(tmp_path):
    x, y = _logistic_rows()
    model = fdp_flower.fit_gradient(x, y, eps=None, n_clients=4, rounds=5, out=tmp_path / "run", reference=False)
    assert model.stop_reason == "cap" and len(model.history) == 5
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["stop_reason"] == "cap"
    private = fdp_flower.fit_gradient(x, y, eps=1.0, n_clients=4, rounds=5, reference=False)
    assert private.stop_reason == "completed"  # the calibrated T rounds, no stopping rule


def test_the_privacy_off_defaults_are_the_scenario_schema_s():
    base = {"data": {"kind": "breast_cancer"}, "model": {"constraint": {"kind": "lasso"}}}
    off = validate_mapping(GradientADMMScenario, {**base, "privacy": {"enabled": False}}, "t")
    assert off.algorithm.rounds == ROUND_CAP and off.algorithm.nonprivate_step == "proximal_bb"
    on = validate_mapping(GradientADMMScenario, base, "t")
    assert on.algorithm.rounds == 200
    given = validate_mapping(GradientADMMScenario, {**base, "privacy": {"enabled": False},
                                                    "algorithm": {"rounds": 30}}, "t")
    assert given.algorithm.rounds == 30
    paper = validate_mapping(GradientADMMScenario, {**base, "privacy": {"enabled": False},
                                                    "algorithm": {"nonprivate_step": "admm"}}, "t")
    assert paper.algorithm.rounds == 200


def test_the_proximal_step_is_refused_with_privacy_on(tmp_path):
    x, y = _logistic_rows(n=40)
    model = fdp_flower.fit_gradient(x, y, eps=None, n_clients=2, rounds=1, data_dir=tmp_path, reference=False)
    problem = build_problem(model.scenario)
    plan = problem.site_plan(10, GradientPrivacy(1.0, 1e-5))
    with pytest.raises(ValueError, match="proximal_bb"):
        GradientADMMServer(matrix=problem.matrix, lam=problem.lam, rho=0.3, eta=4.0, sizes=problem.counts, plan=plan,
                           step_rule="proximal_bb")


def test_the_prox_of_the_lasso_is_soft_thresholding():
    """A = I: prox_{eta lam ||.||_1}(v) = S_{eta lam}(v) (eq. (5.12) with its dual solution clip(v / eta))."""
    v = np.random.default_rng(0).standard_normal(7) * 3
    z, w = generalized_lasso_prox(v, 2.0, np.eye(7), 0.4, np.zeros(7), gram_norm=1.0)
    np.testing.assert_allclose(z, soft_threshold(v, 0.8), atol=1e-12)
    assert np.all(np.abs(w) <= 0.4)


def test_the_prox_of_a_general_matrix_satisfies_its_optimality_condition():
    """z = prox(v) iff (v - z) / eta = lam A^T s with s in the subdifferential of ||.||_1 at A z (eq. (5.12))."""
    rng = np.random.default_rng(1)
    a = np.vstack([rng.standard_normal((3, 5)), np.eye(5)])
    v, eta, lam = rng.standard_normal(5) * 2, 0.7, 0.3
    gram = float(np.linalg.norm(a, 2) ** 2)
    z, w = generalized_lasso_prox(v, eta, a, lam, np.zeros(8), gram_norm=gram, iterations=20000)
    np.testing.assert_allclose((v - z) / eta, a.T @ w, atol=1e-12)
    az = a @ z
    active = np.abs(az) > 1e-6
    np.testing.assert_allclose(w[active], lam * np.sign(az[active]), atol=1e-5)  # s = sign(A z) where A z != 0
    assert np.all(np.abs(w) <= lam + 1e-15)


def test_the_papers_initial_dual_needs_the_papers_step():
    base = {"data": {"kind": "breast_cancer"}, "privacy": {"enabled": False}}
    with pytest.raises(ValueError, match="nonprivate_step: admm"):
        validate_mapping(GradientADMMScenario, {**base, "algorithm": {"init_dual": "paper"}}, "t")
    ok = validate_mapping(GradientADMMScenario,
                          {**base, "algorithm": {"init_dual": "paper", "nonprivate_step": "admm"}}, "t")
    assert ok.algorithm.init_dual == "paper"
