"""FDP-ADMM update rules, noise calibration, ledger and convergence (docs/algorithms.md, sections 1 and 6)."""
from __future__ import annotations

import numpy as np
import pytest

from fdp_flower.algorithms.fdp_admm.config import parse_scenario
from fdp_flower.algorithms.fdp_admm.plan import NoisePlan, build_basis, build_objective, load_partition, site_plan
from fdp_flower.algorithms.fdp_admm.site import SiteData, answer, site_features
from fdp_flower.algorithms.fdp_admm.update import (
    FDPADMMState,
    Objective,
    client_primal_step,
    primal_sensitivity,
    server_primal_step,
    server_update,
)
from fdp_flower.algorithms.protocol import SiteRequest
from fdp_flower.core.losses import QuantileLoss
from fdp_flower.core.penalties import Penalty
from fdp_flower.engines.inprocess import run_fdp_admm
from fdp_flower.functional import design
from fdp_flower.privacy.mechanisms import run_noise, zcdp_to_dp

RNG = np.random.default_rng(2024)


def test_client_step_is_the_papers_section_5_1_update():
    m, k, M, lam, rho, eta, tau = 50, 3, 4, 0.05, 0.1, 0.7, 0.3
    a, y = RNG.standard_normal((m, k)), RNG.standard_normal(m)
    wt, w, g = RNG.standard_normal(k), RNG.standard_normal(k), RNG.standard_normal(k)
    objective = Objective(QuantileLoss(tau), Penalty("l1"), lam, M)
    ours = client_primal_step(objective=objective, noisy_primal=wt, global_w=w, dual=g, features=a,
                              response=y, eta=eta, rho=rho)
    indicator = (y - a @ wt <= 0).astype(float)
    paper = ((a * (tau - indicator)[:, None]).mean(0) - lam / M * np.sign(wt) + g + rho * w + wt / eta) / (rho + 1 / eta)
    np.testing.assert_allclose(ours, paper, rtol=1e-13)
    # l2 (paper Section 5.2): the penalty term is -(lam/M) wt
    objective2 = Objective(QuantileLoss(tau), Penalty("l2"), lam, M)
    ours2 = client_primal_step(objective=objective2, noisy_primal=wt, global_w=w, dual=g, features=a,
                               response=y, eta=eta, rho=rho)
    paper2 = paper + (lam / M * np.sign(wt) - lam / M * wt) / (rho + 1 / eta)
    np.testing.assert_allclose(ours2, paper2, rtol=1e-13)


def test_server_update_average_and_duals():
    M, k, rho = 5, 3, 0.1
    noisy, duals = RNG.standard_normal((M, k)), RNG.standard_normal((M, k))
    w, new_duals = server_update(noisy, duals, rho)
    np.testing.assert_allclose(w, noisy.mean(0) - duals.sum(0) / (M * rho))
    np.testing.assert_allclose(new_duals, duals - rho * (noisy - w))
    # from zero duals (round 1) the new duals sum to zero, so w^2 is the plain mean of wt^2
    _, d1 = server_update(noisy, np.zeros((M, k)), rho)
    np.testing.assert_allclose(d1.sum(0), 0, atol=1e-12)
    w2, _ = server_update(noisy[::-1], d1, rho)
    np.testing.assert_allclose(w2, noisy.mean(0), atol=1e-12)
    state = FDPADMMState.initial(M, k).advance(noisy, rho)
    assert state.round == 1 and np.allclose(state.average_global_w, state.global_w)


def test_sensitivity_is_lemma_2_appendix_form():
    np.testing.assert_allclose(primal_sensitivity(gradient_bound=1.5, m=1000, rho=0.1, eta=2.0),
                               2 * 1.5 / (1000 * (0.1 + 0.5)))


SMALL = {"seed": 5, "data": {"n_samples": 4000}, "federation": {"num_clients": 4},
         "algorithm": {"rounds": 3}, "privacy": {"eps": 0.5, "delta": 1.0e-5}}


def _client_inputs(scenario, partition=0):
    data = load_partition(scenario, partition)
    basis = build_basis(scenario, data.curves)
    k = basis.n_components
    state = dict(global_w=RNG.standard_normal(k) * 0.1, dual=RNG.standard_normal(k) * 0.01,
                 noisy_primal=RNG.standard_normal(k) * 0.1)
    return data, basis, state


def site_release(scenario, data, basis, point, round_):
    """One client's release through the site function (:func:`fdp_flower.algorithms.fdp_admm.site.answer`)."""
    features, clipped = site_features(scenario, basis, data)
    site = SiteData.stack([0], [features], [data.response], [clipped])
    (release,) = answer([SiteRequest(0, round_, {"point": point})], site, site_plan(scenario, basis),
                        run_noise(scenario.seed))
    return release


def test_released_noise_has_the_calibrated_standard_deviation():
    """The site releases its descent term with noise of the calibrated sigma = z 2G/m (eq. (1.3)):
    (noisy - noise-free) / sigma over 300 rounds are iid N(0, 1)."""
    private = parse_scenario({**SMALL, "algorithm": {"rounds": 300}})
    public = parse_scenario({**SMALL, "algorithm": {"rule": "admm", "rounds": 300}, "privacy": {"enabled": False}})
    data, basis, state = _client_inputs(private)
    z = np.sqrt(2 * np.log(1.25 / 1e-5)) / 0.5
    standardized = []
    for round_ in range(1, 301):
        noisy = site_release(private, data, basis, state["noisy_primal"], round_)
        clean = site_release(public, data, basis, state["noisy_primal"], round_)
        assert clean.event is None and noisy.event.mechanism == "fdp_admm_subgradient"
        sensitivity = 2 * private.model.clip_c1 * 0.5 / data.n_samples  # 2G/m, G = c1 max(tau, 1 - tau)
        assert noisy.event.sensitivity == pytest.approx(sensitivity, rel=1e-12)
        assert noisy.event.sigma == pytest.approx(z * sensitivity, rel=1e-12)
        standardized.append((noisy.value - clean.value) / noisy.event.sigma)
    z_scores = np.concatenate(standardized)  # 3000 draws that should be iid N(0, 1)
    n = z_scores.size
    assert abs(z_scores.mean()) < 4 / np.sqrt(n)
    assert abs(z_scores.var() - 1) < 4 * np.sqrt(2 / n)
    # and they are not all the same draw: different rounds use different noise
    assert len(np.unique(np.round(z_scores, 12))) == n


def test_the_server_step_on_a_release_is_the_papers_noisy_primal():
    """The server's step on the released descent term gives the paper's primal (eq. (1.2)) plus the
    noise scaled by 1 / (rho + 1/eta): the same mechanism, its affine part post-processing."""
    private = parse_scenario(SMALL)
    data, basis, state = _client_inputs(private)
    objective, plan = build_objective(private), NoisePlan(private, basis.n_components)
    features, _ = site_features(private, basis, data)
    eta, rho = plan.step_size(2, data.n_samples), private.algorithm.rho
    release = site_release(private, data, basis, state["noisy_primal"], 2)
    primal = server_primal_step(objective=objective, descent=release.value, eta=eta, rho=rho, **state)
    clean = client_primal_step(objective=objective, features=features, response=data.response, eta=eta, rho=rho,
                               **state)
    noise = (primal - clean) * (rho + 1 / eta)
    expected = release.value + objective.loss.mean_subgradient(state["noisy_primal"], features, data.response)
    np.testing.assert_allclose(noise, expected, rtol=1e-9, atol=1e-12)


def test_client_clips_rows_to_c1():
    scenario = parse_scenario({**SMALL, "model": {"clip_c1": 0.8}})
    data = load_partition(scenario, 1)
    basis = build_basis(scenario, data.curves)
    features, clipped = site_features(scenario, basis, data)
    raw_norms = np.linalg.norm(basis.scores(data.curves), axis=1)
    assert np.linalg.norm(features, axis=1).max() <= 0.8 + 1e-12
    assert clipped == np.count_nonzero(raw_norms > 0.8) > 0


def test_ledger_totals_match_the_closed_form():
    scenario = parse_scenario({**SMALL, "algorithm": {"rounds": 12}})
    result = run_fdp_admm(scenario, with_reference=False)
    eps, delta, L = 0.5, 1e-5, 12
    rho_closed = L * eps**2 / (4 * np.log(1.25 / delta))  # each round: Delta^2 / (2 sigma^2)
    for client in range(4):
        assert len(result.ledger.of_client(client)) == L
        assert result.ledger.zcdp_rho(client) == pytest.approx(rho_closed, rel=1e-12)
    summary = result.ledger.summary(0, delta)
    assert summary.eps_zcdp == pytest.approx(rho_closed + 2 * np.sqrt(rho_closed * np.log(1 / delta)), rel=1e-12)
    assert summary.eps_zcdp == pytest.approx(zcdp_to_dp(rho_closed, delta))
    # the tighter accountants never report more than zCDP, and all are above one round's
    assert summary.eps_pld <= summary.eps_rdp <= summary.eps_zcdp
    assert summary.eps_pld > eps * 0.5


def test_total_budget_mode_spends_the_target():
    scenario = parse_scenario({**SMALL, "algorithm": {"rounds": 20},
                               "privacy": {"mode": "total", "eps": 1.0, "delta": 1.0e-5}})
    result = run_fdp_admm(scenario, with_reference=False)
    spent = result.ledger.worst_case(1e-5).eps_pld
    assert 0.97 <= spent <= 1.0


def test_f_admm_reaches_the_exact_solution_at_small_n():
    """Privacy off, paper design at n = 20000: objective gap <= 1% within 30 rounds and MISE within 5%."""
    scenario = parse_scenario({"seed": 1, "data": {"n_samples": 20000}, "federation": {"num_clients": 10},
                               "algorithm": {"rounds": 120}, "privacy": {"enabled": False}})
    result = run_fdp_admm(scenario)
    gaps = [row["objective_gap"] for row in result.history]
    assert min(gaps[:30]) <= 0.01
    assert gaps[-1] <= 1e-3
    exact_mise = design.mise(result.basis.function(result.reference.w), design.true_beta(result.basis.grid),
                             result.basis.grid)
    assert result.history[-1]["mise"] == pytest.approx(exact_mise, rel=0.05)
