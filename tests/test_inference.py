"""Private inference (docs/inference.md): the sites' releases, the server's recursion model, the bands.

Coverage itself is measured by benchmarks/confidence_bands.py (200 repetitions per cell); these tests
check the pieces against their definitions: sensitivities against adversarial neighbours, the closed-form
recursion covariances against the project's own update functions driven by linear data terms, the budget
split against the PLD ledger, and what a band refuses.
"""
from __future__ import annotations

import math
import warnings
import re

import numpy as np
import pytest

import fdp_flower
from fdp_flower.functional import design
from fdp_flower.inference import bands, releases
from fdp_flower.inference.bands import InferenceError, NoisePlanSummary

GRID = design.default_grid(40)


# ---------------------------------------------------------------- sensitivities (eqs. (9.1)-(9.3))
def _upper(matrix):
    return matrix[np.triu_indices(matrix.shape[0])]


def _moves(a, y, new_a, new_y, w, bound, h):
    """How far each release moves, in units of its stated sensitivity, when record 0 is replaced."""
    edges = releases.scale_edges()
    m = a.shape[0]
    one = releases.site_rows(a, y, w, scales=None, bound=bound)
    two = releases.site_rows(new_a, new_y, w, scales=None, bound=bound)
    f1, f2 = (releases.first_release(r, edges=edges, z_scale=None, z_gram=None, rng=None) for r in (one, two))
    (w1, _), (w2, _) = (releases.window_release(r, h, z_window=None, rng=None) for r in (one, two))
    return {"scale": np.linalg.norm(f1.scale_histogram - f2.scale_histogram) / releases.scale_histogram_sensitivity(m),
            "gram": np.linalg.norm(_upper(f1.gram - f2.gram)) / releases.gram_sensitivity(bound, m),
            "window": np.linalg.norm(w1 - w2) / releases.window_sensitivity(m)}


def test_release_sensitivities_hold_for_adversarial_neighbours_and_are_tight():
    """Replace one record (random rows, rows at the clip boundary, rows beyond it, residuals far out): each
    release moves by at most its stated sensitivity (eqs. (9.1)-(9.3)); the worst case -- two orthogonal
    rows at the boundary, a residual moved across bins -- reaches it."""
    rng = np.random.default_rng(0)
    bound, h, m, p = 3.0, 0.5, 50, 4
    worst = {"scale": 0.0, "gram": 0.0, "window": 0.0}
    for trial in range(300):
        a = rng.standard_normal((m, p)) * rng.uniform(0.1, 3.0)
        y = rng.standard_normal(m) * rng.uniform(0.1, 10.0)
        w = rng.standard_normal(p) * 0.1
        new_a, new_y = a.copy(), y.copy()
        new_a[0] = rng.standard_normal(p) * rng.choice([0.1, 1.0, 100.0])
        new_y[0] = y[0] + rng.choice([-1e4, 1e4, 0.3, 0.0])
        for k, v in _moves(a, y, new_a, new_y, w, bound, h).items():
            assert v <= 1.0 + 1e-12, (trial, k, v)
            worst[k] = max(worst[k], float(v))
    a = rng.standard_normal((m, p))
    a[0] = bound * np.eye(p)[0]
    new_a = a.copy()
    new_a[0] = bound * np.eye(p)[1]
    w = np.zeros(p)
    y = rng.standard_normal(m)
    y[0] = -0.1
    new_y = y.copy()
    new_y[0] = 0.1
    tight = _moves(a, y, new_a, new_y, w, bound, h)
    assert tight["gram"] == pytest.approx(1.0, abs=1e-12) and tight["window"] == pytest.approx(1.0, abs=1e-12)
    far = new_y.copy()
    far[0] = 1e4
    assert _moves(a, y, a, far, w, bound, h)["scale"] == pytest.approx(1.0, abs=1e-12)
    assert all(v > 0.5 for v in worst.values()), worst


def test_ellipsoid_rows_are_released_in_the_noise_shape_units():
    """With the noise shape s, the Gram is of a / s (rows ||a / s|| <= 1) and its sensitivity is sqrt(2) / m."""
    rng = np.random.default_rng(1)
    s = np.array([3.0, 0.5, 0.2])
    x = rng.standard_normal((40, 3))
    x /= np.maximum(1.0, np.linalg.norm(x, axis=1))[:, None]
    rows = releases.site_rows(x * s, np.zeros(40), np.zeros(3), scales=s, bound=1.0)
    np.testing.assert_allclose(rows.whitened, x, atol=1e-12)
    assert releases.gram_sensitivity(1.0, 40) == pytest.approx(math.sqrt(2) / 40)


# ---------------------------------------------------------------- the budget split
def test_fit_and_inference_meet_the_total_budget_by_pld(tmp_path):
    """fit at fit_budget(eps), then the three inference releases per site calibrated against the fit's
    ledger: the site that spent most reports the total eps (PLD) and never more."""
    data = design.simulate_slice(2, 0, 3000, tau=0.5, grid=GRID)
    est = fdp_flower.FDPQuantileRegressor(eps=1.0, n_clients=3, n_components=3, rounds=10, random_state=3)
    est.fit(data.curves, data.response)
    model = est.model_
    p = model.privacy
    assert p.eps <= 1.0 + 1e-6 and p.eps == pytest.approx(1.0, abs=2e-3)
    assert set(releases.INFERENCE_MECHANISMS) <= set(p.mechanisms)
    per_site = [r for r in model.ledger.releases if r.client == 0]
    assert len(per_site) == 10 + 3
    fit_only = [r for r in per_site if r.mechanism == "fdp_admm_subgradient"]
    from fdp_flower.privacy.calibration import composed_mu

    mu_fit, mu_all = composed_mu([r.noise_multiplier for r in fit_only]), composed_mu([r.noise_multiplier
                                                                                      for r in per_site])
    assert (mu_all**2 - mu_fit**2) / mu_all**2 == pytest.approx(releases.INFERENCE_SHARE, rel=0.02)


# ---------------------------------------------------------------- the recursion model (eqs. (9.4), (9.5), (9.12))
def _linear_gradient(hessian, center, offsets):
    """A data term that is exactly linear, f_i'(w) = D (w - w°) + b_i: the model under which (9.4)-(9.12) are exact."""
    return lambda w: (w - center) @ hessian.T + offsets


def _simulate(hessian, center, eta, rho, rounds, sites, sigma_descent, draws, seed):
    """The project's protocol steps (fdp_flower.algorithms.fdp_admm.update) on linear data terms, over ``draws``
    noise paths: each site releases its noisy descent term -f_i'(wt_i) + sigma_descent z (eq. (1.3)), the server
    takes the affine primal step (1.2) and the consensus step (1.4)-(1.5); every round's global iterate and
    site 0's linearization point (draws, rounds, p)."""
    from fdp_flower.algorithms.fdp_admm.update import FDPADMMState, Objective, server_primal_step
    from fdp_flower.core.losses import QuantileLoss
    from fdp_flower.core.penalties import Penalty

    p = hessian.shape[0]
    rng = np.random.default_rng(seed)
    offsets = rng.standard_normal((sites, p)) * 0.05
    gradient = _linear_gradient(hessian, center, offsets - offsets.mean(axis=0))
    objective = Objective(QuantileLoss(0.5), Penalty("none"), 0.0, sites)
    globals_, points = np.zeros((draws, rounds, p)), np.zeros((draws, rounds, p))
    for k in range(draws):
        state = FDPADMMState.initial(sites, p)
        for l in range(rounds):
            descent = -gradient(state.noisy_primals) + sigma_descent * rng.standard_normal((sites, p))
            primals = server_primal_step(objective=objective, noisy_primal=state.noisy_primals,
                                         global_w=state.global_w[None, :], dual=state.duals, descent=descent,
                                         eta=eta[l], rho=rho[l])
            state = state.advance(primals, rho[l])
            globals_[k, l], points[k, l] = state.global_w, state.noisy_primals[0]
    return globals_, points


def test_recursion_covariances_match_the_update_functions():
    """(9.5) and (9.12) in closed form against the project's own ADMM steps on exactly linear data terms over
    400 noise paths: the released tail average has mean (I - A) w° and variance sum_l B_l V_l B_l^T, and one
    site's linearization points spread (around their mean path) by Sigma_eval.  The sites release their descent
    terms with noise sigma_g; the primal noise the recursion sees is sigma_g eta' (eq. (1.2)).  Tolerances: 5
    Monte Carlo standard errors (of a mean, and of a variance: sqrt(2 / (draws - 1)) times it)."""
    rounds, sites, sigma_descent, draws = 40, 4, 0.05 / 2.5, 400
    hessian = np.array([[0.5, 0.05, 0.0], [0.05, 0.08, 0.01], [0.0, 0.01, 0.03]])
    center = np.array([1.0, -0.5, 0.8])
    eta, rho = np.full(rounds, 3.0), np.full(rounds, 0.1)
    weights = bands.estimator_weights("tail_average", rounds, 21)
    eta_prime = 1.0 / (rho + 1.0 / eta)
    v = (sigma_descent * eta_prime)**2  # one site's primal noise variance per coordinate
    plan = NoisePlanSummary(eta_prime, (v / sites)[:, None, None] * np.eye(3)[None], weights, np.zeros(3), eta, rho,
                            v[:, None, None] * np.eye(3)[None], sites, 0.0)
    transient, noise = bands.recursion_covariance(hessian, eta_prime, plan.noise_covariances, weights)
    spread = bands.evaluation_covariance(hessian, plan)
    globals_, points = _simulate(hessian, center, eta, rho, rounds, sites, sigma_descent, draws, seed=7)
    estimates = globals_.transpose(0, 2, 1) @ weights
    mean_se = np.sqrt(np.diag(noise) / draws)
    np.testing.assert_array_less(np.abs(estimates.mean(axis=0) - (np.eye(3) - transient) @ center), 5 * mean_se)
    var_se = np.sqrt(2.0 / (draws - 1)) * np.diag(noise)
    np.testing.assert_array_less(np.abs(np.var(estimates, axis=0, ddof=1) - np.diag(noise)), 5 * var_se)
    centred = points - points.mean(axis=0)
    empirical = np.einsum("l,klp,klq->pq", np.r_[weights[1:], 0.0], centred, centred) / (draws - 1)
    np.testing.assert_array_less(np.abs(np.diag(empirical) - np.diag(spread)), 5 * np.sqrt(2.0 / draws)
                                 * np.diag(spread))
    assert not np.allclose(np.diag(spread), v[0], rtol=0.2)  # the spread is not the noise alone


def test_the_stability_cap_keeps_an_estimated_hessian_past_the_limit_finite():
    """An estimated D whose eta' D exceeds 2 (the run itself was stable) is capped at the boundary: the
    tail average's variance stays finite and at most ~1.5 times its value at eta' D = 1.9 (eq. (9.4))."""
    w = bands.estimator_weights("tail_average", 80, 41)
    ones = np.ones(80)
    _, at_19 = bands.recursion_covariance(np.array([[1.9]]), ones, np.ones((80, 1, 1)), w)
    _, past = bands.recursion_covariance(np.array([[2.3]]), ones, np.ones((80, 1, 1)), w)
    assert np.isfinite(past).all() and at_19[0, 0] < past[0, 0] < 1.6 * at_19[0, 0]


# ---------------------------------------------------------------- the density window
def test_residual_density_and_slope_from_noise_free_windows():
    """f_hat = (F_- + F_+) / 2h and f'_hat = (F_+ - F_-) / h^2 recover a t(3) density at its 0.9-quantile within
    their sampling error (n = 2e5), with the window chosen from the scale histogram (Bofinger's 2 h_n)."""
    from scipy import stats

    rng = np.random.default_rng(4)
    n, tau = 200_000, 0.9
    residuals = rng.standard_t(3, n) - stats.t.ppf(tau, 3)
    edges = releases.scale_edges()
    rows = releases.SiteRows(np.ones((n, 1)), residuals, 1.0)
    first = releases.first_release(rows, edges=edges, z_scale=None, z_gram=None, rng=None)
    h = bands.choose_window(first.scale_histogram, edges, n=n, tau=tau)
    fractions, _ = releases.window_release(rows, h, z_window=None, rng=None)
    f_true = stats.t.pdf(stats.t.ppf(tau, 3), 3)
    mass = fractions.sum()
    assert mass == pytest.approx(2 * bands.bofinger_bandwidth(n, tau), rel=0.35)
    f_hat = mass / (2 * h)
    assert abs(f_hat - f_true) < 4 * math.sqrt(mass / n) / (2 * h) + 0.02 * f_true  # sampling + window bias
    x = stats.t.ppf(tau, 3)
    slope_true = -4 * x / (3 + x * x) * f_true
    slope_hat = (fractions[1] - fractions[0]) / h**2
    assert abs(slope_hat - slope_true) < 4 * math.sqrt(mass / n) / h**2 + 0.1 * abs(slope_true)


def test_a_noisy_gram_near_zero_refuses_a_band_in_one_line():
    data = design.simulate_slice(3, 0, 3000, tau=0.5, grid=GRID)
    est = fdp_flower.FDPQuantileRegressor(eps=1.0, n_clients=3, n_components=6, rounds=8)
    with pytest.warns(UserWarning, match="no confidence band"):
        est.fit(data.curves, data.response)
    assert est.band_ is None
    with pytest.raises(InferenceError, match=r"released Gram matrix's smallest eigenvalue") as info:
        est.model_.confidence_band()
    assert "\n" not in str(info.value)
    assert "No standard errors: the released Gram matrix" in str(est.summary())


def test_sites_that_overshoot_the_consensus_refuse_a_band_and_get_a_stable_step():
    """eta' D above 1 + eta'/eta: the sites' deviation recursion (9.12) has spectral radius >= 1 (they
    oscillate around the consensus, as the paper's design does at tau = 0.5 with step 3 in the intercept
    direction); the band is refused, and the suggested constant step is stable."""
    d = np.diag([0.84, 0.1, 0.02])  # the paper design's D at tau = 0.5, roughly: f(0) c0^2 leads
    rounds = 10

    def plan(step):
        eta, rho = np.full(rounds, step), np.full(rounds, 0.1)
        return NoisePlanSummary(1.0 / (rho + 1.0 / eta), np.zeros((rounds, 3, 3)), np.full(rounds, 0.1),
                                np.zeros(3), eta, rho, np.zeros((rounds, 3, 3)), 5, 1.5)

    with pytest.raises(InferenceError, match=r"the sites oscillate .* a constant step below ([0-9.]+) keeps") as info:
        bands.check_sites_stable(d, plan(3.0))
    suggested = float(re.search(r"step below ([0-9.]+)", str(info.value)).group(1))
    assert 2.0 < suggested < 3.0
    bands.check_sites_stable(d, plan(suggested))  # no error
    radius = max(np.abs(np.linalg.eigvals(bands.site_transition(d, 3.0, 1 / (0.1 + 1 / 3.0), 0.1))))
    assert radius >= 1.0


def test_plan_noise_covariances_are_the_primal_noise_of_the_released_descent_terms():
    """The ledger records each site's descent-term release (sigma_g = z_l 2G/m_i); the recursion needs the noise
    of the primal iterate, sigma_g eta'_{l,i} (eq. (1.2)): V_l = (1/M^2) sum_i (z_l 2G / (m_i (rho + 1/eta_i)))^2 S^2,
    as the noise plan's own primal calibration gives it."""
    from fdp_flower.algorithms.fdp_admm.plan import noise_plan
    from fdp_flower.inference.fdp_admm import noise_shape, plan_summary

    data = design.simulate_slice(2, 0, 1500, tau=0.5, grid=GRID)
    model = fdp_flower.fit(data.curves, data.response, eps=1.0, n_clients=3, n_components=3, rounds=6, seed=4,
                           grid=GRID, reference=False, rule="admm", level_calibration=False)
    assert {r.mechanism for r in model.ledger.releases} == {"fdp_admm_subgradient"}
    plan = noise_plan(model.scenario, model.basis)
    sizes = np.asarray(model.sample_sizes, dtype=float)
    s = noise_shape(model.scenario, model.basis)
    shape = np.ones(model.w.size) if s is None else np.asarray(s, dtype=float)
    summary = plan_summary(model)
    for l in range(1, 7):
        _, _, sigma_primal = plan.release(l, sizes)
        expected = np.sum(sigma_primal**2) / sizes.size**2 * np.diag(shape**2)
        np.testing.assert_allclose(summary.noise_covariances[l - 1], expected, rtol=1e-10)


# ---------------------------------------------------------------- level-calibrated fits (docs/inference.md section 6)
@pytest.mark.parametrize("ratio", [1.0, 0.7, 1.3])
def test_calibration_weights_are_the_share_rounds_linear_recursion(ratio):
    """b_K - b* = alpha (b_0 - b*) + sum_k c_k e_k / f for the calibration's averaged one-shot steps: the
    coefficients reproduce the recursion run on arbitrary start errors and share noises (with f = f_true a
    single step removes the start: alpha = 0, c_k = -1/K)."""
    from fdp_flower.inference.fdp_admm import calibration_weights

    c, alpha = calibration_weights(5, ratio)
    rng = np.random.default_rng(3)
    for _ in range(5):
        start, noise, f = rng.normal(), rng.normal(size=5), 0.3
        b, shots = start, []  # b - b* (b* = 0); share_k - tau = f_true b + e_k
        for e in noise:
            shots.append(b - (ratio * f * b + e) / f)
            b = float(np.mean(shots))
        assert b == pytest.approx(alpha * start + c @ noise / f, abs=1e-12)
    if ratio == 1.0:
        assert alpha == pytest.approx(0.0, abs=1e-15)
        np.testing.assert_allclose(c, -0.2, rtol=1e-12)


@pytest.mark.slow
def test_a_level_calibrated_band_describes_the_spread_of_its_own_noise():
    """Private bands of a level-calibrated fit (ADMM rounds in standardized units, then the calibrated
    intercept): on fixed data (a linear quantile model in 3 cosine scores, t(3) errors, tau = 0.9, 5 sites of
    2000, eps = 4, response at 10), 24 fits that differ only in their noise.  The band's privacy sd of beta(t)
    (released estimate, debias=False) and of the debiased intercept are within the sampling range of the sd
    over the fits (24 draws: an sd estimate within [0.65, 1.45] of its value has probability > 0.99), and the
    debiased intercept centres on the exact estimator's (within 4 of its standard errors over the fits)."""
    from fdp_flower.functional.fpca import fixed_basis
    from fdp_flower.inference.inprocess import run_inference
    from fdp_flower.inference.releases import fit_budget

    grid = np.linspace(0, 1, 50)
    rng = np.random.default_rng(11)
    n, eps = 10_000, 4.0
    scores = rng.standard_normal((n, 3)) * np.array([1.0, 0.6, 0.4])
    curves = scores @ fixed_basis("cosine", 3, grid).components
    y = 10.0 + scores @ np.array([1.0, -0.8, 0.5]) + 0.7 * rng.standard_t(3, n)
    labels = np.arange(n) % 5
    parts = [(curves[labels == i], y[labels == i]) for i in range(5)]
    kw = dict(grid=grid, tau=0.9, client_ids=labels, n_components=3, reference=False, penalty="none", lam=0.0,
              rule="admm")  # the bands model the ADMM rule (fit's private default is the Newton rule)
    betas, intercepts, beta_sd, intercept_sd = [], [], [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for seed in range(24):
            model = fdp_flower.fit(curves, y, eps=fit_budget(eps, 1e-5), seed=seed, **kw)
            assert model.scenario.algorithm.level_calibration
            model = model.with_inference(run_inference(model, parts, eps_total=eps))
            released, debiased = (model.confidence_band(0.95, debias=d, draws=200) for d in (False, True))
            betas.append(model.beta_values)
            intercepts.append(debiased.intercept)
            beta_sd.append(released.sd_privacy.mean())
            intercept_sd.append(debiased.intercept_sd_privacy)
        exact = fdp_flower.fit(curves, y, eps=None, **kw).intercept
    spread = np.std(betas, axis=0, ddof=1).mean()
    assert 0.65 <= np.mean(beta_sd) / spread <= 1.45
    assert 0.65 <= np.mean(intercept_sd) / np.std(intercepts, ddof=1) <= 1.45
    assert abs(np.mean(intercepts) - exact) <= 4 * np.std(intercepts, ddof=1) / math.sqrt(24)
