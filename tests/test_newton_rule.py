"""FDP-ADMM's Newton rule (``algorithm.rule: newton``; fdp_flower/algorithms/fdp_admm/newton.py): the schedule
spends the ADMM plan's budget exactly, the site answers only its own schedule's kind and checks what it is sent,
privacy off reaches the exact estimator, and the fitted quantiles follow the response's location and scale."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from fdp_flower.algorithms.fdp_admm import newton as N
from fdp_flower.algorithms.fdp_admm.config import parse_scenario
from fdp_flower.algorithms.fdp_admm.plan import newton_plan, noise_plan, site_plan
from fdp_flower.algorithms.fdp_admm.site import SiteData, answer
from fdp_flower.algorithms.protocol import SiteRequest
from fdp_flower.config.base import ScenarioError
from fdp_flower.engines.inprocess import run_fdp_admm
from fdp_flower.privacy.mechanisms import run_noise


def scenario(*, private=True, tau=0.5, penalty="l1", bounds=(-50.0, 50.0), n=2000, clients=5, rounds=None,
             basis=None, **privacy):
    algorithm = {"kind": "fdp_admm", "rule": "newton"}
    if bounds is not None:
        algorithm["response_bounds"] = list(bounds)
    if rounds is not None:
        algorithm["rounds"] = rounds
    return parse_scenario({
        "name": "newton", "seed": 3, "data": {"kind": "paper_simulation", "n_samples": n, "grid_points": 50},
        "federation": {"num_clients": clients}, "basis": basis or {"kind": "pooled", "n_components": 5},
        "model": {"loss": {"kind": "quantile", "tau": tau}, "penalty": {"kind": penalty, "lam": 0.05},
                  "intercept": True},
        "algorithm": algorithm,
        "privacy": {"enabled": private, "mode": "total", "eps": 1.0, "delta": 1e-5, **privacy}})


def test_the_schedule_splits_the_admm_plans_mu_squared_exactly():
    sc = scenario()
    plan, _ = _site(sc)
    basis = plan.basis
    z_admm = noise_plan(sc, basis).noise_multipliers
    schedule = newton_plan(sc, basis, 2000)
    assert schedule.rounds == 30 == sc.algorithm.rounds
    assert schedule.kinds[:6] == (N.QUARTILES,) * 6 and schedule.kinds[-5:] == (N.SHARE,) * 5
    assert schedule.kinds.count(N.DENSITY) == 2 and schedule.term_rounds == 17
    assert np.sum(schedule.multipliers ** -2.0) == pytest.approx(np.sum(z_admm ** -2.0), rel=1e-12)


def test_a_private_newton_run_spends_what_the_admm_rule_would():
    admm = parse_scenario({**scenario().model_dump(mode="json"),
                           "algorithm": {"kind": "fdp_admm", "rounds": 30, "step": {"kind": "constant", "eta0": 1.0}}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        newton = run_fdp_admm(scenario(), with_reference=False)
        ref = run_fdp_admm(admm, with_reference=False)
    assert len(newton.ledger.releases) == 5 * 30
    # every release is a Gaussian of multiplier z_l: the composition is the one Gaussian of the same mu
    assert newton.history[-1]["eps_pld"] == pytest.approx(ref.history[-1]["eps_pld"], rel=1e-3)
    assert 0.97 <= newton.history[-1]["eps_pld"] <= 1.0
    kinds = {r.mechanism for r in newton.ledger.releases}
    assert kinds == {"fdp_admm_subgradient", "fdp_newton_quartile_shares", "fdp_newton_residual_density",
                     "fdp_newton_residual_share"}
    # fdp-flower privacy (no data) plans the same releases: mechanisms, rounds and the run's eps
    from fdp_flower.cli.privacy import fdp_admm_ledger

    planned, _sizes = fdp_admm_ledger(scenario())
    assert [(r.client, r.round, r.mechanism) for r in planned.releases] == \
        [(r.client, r.round, r.mechanism) for r in newton.ledger.releases]
    assert planned.summary(0, 1e-5).eps_pld == pytest.approx(newton.ledger.summary(0, 1e-5).eps_pld, rel=1e-9)


class _Plan:
    def __init__(self, plan, basis):
        self.plan, self.basis = plan, basis

    def __getattr__(self, name):
        return getattr(self.plan, name)


def _site(sc):
    from fdp_flower.algorithms.fdp_admm.setup import simulation_setup

    sizes, basis, features, responses, clipped, _ = simulation_setup(sc, with_reference=False)
    data = SiteData.stack(range(len(sizes)), features, responses, clipped)
    return _Plan(site_plan(sc, basis, sizes), basis), data


def test_the_site_answers_only_its_own_schedules_kind_and_checks_the_values():
    sc = scenario()
    plan, data = _site(sc)
    plan = plan.plan
    noise = run_noise(sc.seed, "seeded")
    k = plan.dim
    # round 1 is a quartile round: a point instead of thresholds is refused, so is an infinite threshold
    (wrong,) = answer([SiteRequest(0, 1, {"point": np.zeros(k)})], data, plan, noise)
    assert isinstance(wrong, ValueError) and "quartiles release" in str(wrong)
    (bad,) = answer([SiteRequest(0, 1, {"thresholds": np.r_[np.inf, np.zeros(5)]})], data, plan, noise)
    assert isinstance(bad, ValueError) and "NaN or infinite" in str(bad)
    (ok,) = answer([SiteRequest(0, 1, {"thresholds": np.linspace(-1, 1, 6)})], data, plan, noise)
    m = int(data.counts[0])
    assert ok.value.shape == (6,) and ok.event.mechanism == "fdp_newton_quartile_shares"
    assert ok.event.sensitivity == pytest.approx(math.sqrt(6) / m)
    assert ok.event.sigma == pytest.approx(plan.schedule.z(1) * math.sqrt(6) / m)
    # a density round needs a positive bandwidth; a zero one is refused before anything is drawn
    density_round = plan.schedule.kinds.index(N.DENSITY) + 1
    (zero,) = answer([SiteRequest(0, density_round, {"point": np.zeros(k), "bandwidth": np.array([0.0])})],
                     data, plan, noise)
    assert isinstance(zero, ValueError) and "bandwidth" in str(zero)
    # privacy on: a (min, max) release is not in the schedule; a forged range request is refused as a wrong kind
    (forged,) = answer([SiteRequest(0, 1, {})], data, plan, noise)
    assert isinstance(forged, ValueError)


def test_the_noise_free_releases_are_the_counts_they_claim():
    sc = scenario(private=False)
    plan, data = _site(sc)
    plan = plan.plan
    a, y = data.rows_of(1)
    assert plan.schedule.kinds[0] == N.QUARTILES  # bounds declared: no range round
    t = np.quantile(y, [0.1, 0.2, 0.3, 0.6, 0.7, 0.8])
    (r,) = answer([SiteRequest(1, 1, {"thresholds": t})], data, plan, run_noise(0, "seeded"))
    np.testing.assert_array_equal(r.value, [(y <= v).mean() for v in t])
    assert r.event is None


def _exact(sc, result):
    from fdp_flower.algorithms.fdp_admm.reference import solve_reference
    from fdp_flower.algorithms.fdp_admm.plan import build_objective
    from fdp_flower.algorithms.fdp_admm.setup import simulation_setup

    _, _, features, responses, _, _ = simulation_setup(sc, with_reference=False)
    ob = build_objective(sc)
    return solve_reference(features, responses, ob.loss, ob.penalty, ob.lam).w


@pytest.mark.parametrize("tau,penalty", [(0.5, "l1"), (0.9, "l2")])
def test_privacy_off_reaches_the_exact_estimator(tau, penalty):
    """30 noise-free rounds end within 1% (in norm) of the exact LP / QP minimizer on the same clipped rows (issue
    29's criterion, at the size of the paper design's sites: 10 of 2000)."""
    sc = scenario(private=False, tau=tau, penalty=penalty, bounds=None, n=20000, clients=10)
    result = run_fdp_admm(sc, with_reference=False)
    assert result.scenario.algorithm.rounds == 30
    w, exact = result.state.global_w, _exact(sc, result)
    assert np.linalg.norm(w - exact) <= 0.01 * np.linalg.norm(exact)


COSINE = {"kind": "fixed", "family": "cosine", "n_components": 5}


@pytest.mark.parametrize("tau,penalty", [(0.5, "l1"), (0.9, "l1"), (0.25, "l2")])
def test_privacy_off_on_a_fixed_basis_reaches_the_exact_estimator(tau, penalty):
    """A basis without score variances (cosine, uncentred scores correlated with the intercept column): privacy off,
    one more round releases each site's second moments and the steps use the full matrix f G (N.1'); 30 rounds end
    within 1% (in norm) of the exact minimizer on the same clipped rows -- the ADMM rule's privacy-off defaults on
    the same rows stop at their cap further away -- and the history reports the distance itself."""
    from fdp_flower.algorithms.fdp_admm.config import privacy_off_schedule

    sc = scenario(private=False, tau=tau, penalty=penalty, bounds=None, n=20000, clients=10, basis=COSINE)
    assert sc.algorithm.rule == "newton"
    assert newton_plan(sc, _cosine_basis(), 20000).kinds[:7] == (N.RANGE,) + (N.QUARTILES,) * 5 + (N.MOMENTS,)
    result = run_fdp_admm(sc, with_reference=True)
    assert result.scenario.algorithm.rounds == 30 and len(result.history) == 30
    w, exact = result.state.global_w, _exact(sc, result)
    assert np.linalg.norm(w - exact) <= 0.01 * np.linalg.norm(exact)
    assert result.history[-1]["exact_distance"] == pytest.approx(np.linalg.norm(w - exact) / np.linalg.norm(exact))
    admm = parse_scenario({**sc.model_dump(mode="json", exclude={"algorithm"}),
                           "algorithm": {"kind": "fdp_admm", "rule": "admm", **privacy_off_schedule("sphere")}})
    assert run_fdp_admm(admm, with_reference=True).history[-1]["exact_distance"] > 0.01


def _cosine_basis():
    from fdp_flower.functional import bases, design

    return bases.build_basis(parse_scenario({"name": "b", "basis": COSINE, "privacy": {"enabled": False}}).basis,
                             design.default_grid(50), None)


def test_the_moment_metrics_prox_is_the_exact_lasso_step():
    """prox(v) = argmin_x 1/2 (x - v)^T (H / a) (x - v) + l1 ||x_pen||_1 for a non-diagonal H: the KKT conditions
    hold to rounding (unpenalized coordinates: zero gradient; penalized: gradient -l1 sign(x) where x != 0, at
    most l1 in size where x = 0), and the Newton step solves H d = a g."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((200, 6)) + np.r_[1.5, 0.8, 0, 0, 0, 0]  # uncentred: correlated columns
    moments = a.T @ a / len(a)
    metric = N.MomentMetric.of(moments, 0.4, 0.7, penalty="l1", lam_site=0.05, free=1)
    v = rng.standard_normal(6) * 0.2
    x = metric.prox(v)
    grad = (metric.matrix / metric.step) @ (x - v)
    assert abs(grad[0]) <= 1e-10
    on, off = x[1:] != 0, x[1:] == 0
    assert on.any() and off.any()  # both cases of the condition are exercised
    np.testing.assert_allclose(grad[1:][on], -metric.l1 * np.sign(x[1:][on]), atol=1e-10)
    assert np.all(np.abs(grad[1:][off]) <= metric.l1 + 1e-10)
    g = rng.standard_normal(6)
    np.testing.assert_allclose(metric.matrix @ metric.newton(g), metric.step * g, atol=1e-12)


def test_the_second_moments_release_is_exact_without_privacy_and_noised_with_it():
    """Privacy off: the site's (1/m) sum_j a_j a_j^T of its clipped rows, no event.  Privacy on (a fixed basis under
    the Newton rule, the sphere clip): one MOMENTS round after the 8 search rounds, a share of the schedule's one
    mu^2 (the multipliers still compose to the ADMM plan's), charged as ``fdp_newton_second_moments`` with
    sensitivity sqrt(2) c1^2 / m_i, and the released value minus the exact one ~ N(0, sigma^2) in each of the d^2
    entries (chi-square at level 1e-6)."""
    sc = scenario(private=False, bounds=None, basis=COSINE, n=400, clients=4)
    plan = site_plan(sc, _cosine_basis(), [100] * 4, 400)
    rng = np.random.default_rng(1)
    data = SiteData.stack([0], [rng.standard_normal((100, 6))], [rng.standard_normal(100)])
    (release,) = answer([SiteRequest(0, 7, {})], data, plan, run_noise(sc.seed))
    features = data.rows_of(0)[0]
    np.testing.assert_allclose(release.value, (features.T @ features / 100).ravel())
    assert release.event is None

    private = scenario(bounds=None, basis=COSINE, n=400, clients=4)
    plan = site_plan(private, _cosine_basis(), [100] * 4, 400)
    kinds = plan.schedule.kinds
    assert kinds[:9] == (N.QUARTILES,) * N.UNBOUNDED_LOCATION_ROUNDS + (N.MOMENTS,) and len(kinds) == 30
    z_admm = noise_plan(private, _cosine_basis()).noise_multipliers
    assert np.sum(plan.schedule.multipliers ** -2.0) == pytest.approx(np.sum(z_admm ** -2.0), rel=1e-12)
    c1 = private.model.clip_c1
    assert plan.row_bound == c1
    z = [], []
    for seed in range(40):  # 40 releases of 36 entries: 1440 degrees of freedom
        (release,) = answer([SiteRequest(0, 9, {})], data, plan, run_noise(seed))
        event = release.event
        assert event.mechanism == "fdp_newton_second_moments"
        assert event.sensitivity == pytest.approx(math.sqrt(2.0) * c1**2 / 100, rel=1e-12)
        assert event.sigma == pytest.approx(plan.schedule.z(9) * event.sensitivity, rel=1e-12)
        z[0].append((release.value - (features.T @ features / 100).ravel()) / event.sigma)
    standardized = np.concatenate(z[0])
    from scipy import stats

    assert stats.chi2.ppf(1e-6, standardized.size) <= np.sum(standardized**2) <= stats.chi2.isf(1e-6, standardized.size)


def test_the_second_moments_sensitivity_is_attained_by_rows_of_the_clip():
    """||a a^T - b b^T||_F <= sqrt(2) c1^2 for rows (c0, a), (c0, b) of norm c1 -- equality when a.b = -c0^2 (the
    rows are orthogonal), which the intercept share 1/2 allows: the calibration is tight, not loose."""
    c1, share = 3.0, 0.5
    c0 = share * c1
    room = c1 * math.sqrt(1 - share**2)
    rng = np.random.default_rng(2)
    worst = 0.0
    for _ in range(2000):
        a, b = rng.standard_normal((2, 5))
        a, b = room * a / np.linalg.norm(a), room * b / np.linalg.norm(b)
        u, v = np.r_[c0, a], np.r_[c0, b]
        worst = max(worst, np.linalg.norm(np.outer(u, u) - np.outer(v, v)))
    assert worst <= math.sqrt(2.0) * c1**2 * (1 + 1e-12)
    a = np.r_[room, 0.0, 0.0, 0.0, 0.0]
    b = np.r_[-c0**2 / room, math.sqrt(room**2 - c0**4 / room**2), 0.0, 0.0, 0.0]  # a.b = -c0^2, ||b|| = room
    u, v = np.r_[c0, a], np.r_[c0, b]
    assert np.linalg.norm(np.outer(u, u) - np.outer(v, v)) == pytest.approx(math.sqrt(2.0) * c1**2, rel=1e-12)


def test_the_server_floors_the_noisy_second_moments_at_the_noise_edge():
    """floor_moments: symmetric, the public c0^2 in the corner, every eigenvalue >= sqrt(2 d) s phi(0) /
    phi(Phi^-1(tau)); a matrix whose eigenvalues all clear that floor comes back unchanged (symmetrized)."""
    rng = np.random.default_rng(4)
    d, s = 6, 0.05
    q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    g = (q * np.linspace(1.0, 3.0, d)) @ q.T
    noisy = g + s * rng.standard_normal((d, d))
    floored = N.floor_moments(noisy, s, c0=1.5, tau=0.1)
    np.testing.assert_allclose(floored, floored.T, atol=1e-12)
    edge = math.sqrt(2 * d) * s * N.normal_density_at_quantile(0.5) / N.normal_density_at_quantile(0.1)
    assert np.linalg.eigvalsh(floored)[0] >= edge * (1 - 1e-12)
    weak = N.floor_moments(np.diag([2.25, 1.0, 1e-4, 1e-4, 1e-4, 1e-4]), s)
    np.testing.assert_allclose(np.sort(np.linalg.eigvalsh(weak))[:4], math.sqrt(2 * d) * s, rtol=1e-12)
    np.testing.assert_allclose(N.floor_moments(g, 1e-6), g, atol=1e-12)
    corner = N.floor_moments(g, 1e-6, c0=1.5)
    assert corner[0, 0] == pytest.approx(2.25, rel=1e-9)
    # the projector onto the directions above the floor: the two clear eigenvalues of ``weak``, all of ``g``
    np.testing.assert_allclose(N.floor_moments_split(np.diag([2.25, 1.0, 1e-4, 1e-4, 1e-4, 1e-4]), s)[1],
                               np.diag([1.0, 1.0, 0.0, 0.0, 0.0, 0.0]), atol=1e-12)
    np.testing.assert_allclose(N.floor_moments_split(g, 1e-6)[1], np.eye(d), atol=1e-12)


def test_a_private_newton_fit_on_a_fixed_basis_runs_30_rounds_and_spends_its_budget(tmp_path):
    """fit(..., rule="newton") on the default cosine basis with privacy: 30 rounds, one second-moments release per
    site in the ledger, the whole budget spent (PLD eps in [0.97, 1])."""
    import fdp_flower
    from fdp_flower.functional import design

    grid = design.default_grid(40)
    data = design.simulate_slice(5, 0, 1200, tau=0.5, grid=grid)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = fdp_flower.fit(data.curves, data.response, grid=grid, eps=1.0, n_components=6, n_clients=4,
                               rule="newton", reference=False, data_dir=tmp_path)
    assert len(model.history) == 30 and model.stop_reason == "completed"
    moments = [r for r in model.ledger.releases if r.mechanism == "fdp_newton_second_moments"]
    assert sorted(r.client for r in moments) == [0, 1, 2, 3] and {r.round for r in moments} == {9}
    assert 0.97 <= model.privacy.eps <= 1.0
    # ``fdp-flower privacy`` computes the same releases from the scenario alone (no data): kinds, sensitivities
    from fdp_flower.cli.privacy import fdp_admm_ledger

    calculated, _sizes = fdp_admm_ledger(model.scenario)
    ran = {(r.client, r.round): r for r in model.ledger.releases}
    for r in calculated.releases:
        assert ran[(r.client, r.round)].mechanism == r.mechanism
        if r.mechanism != "fdp_newton_residual_density":  # its bandwidth follows the run's density
            assert ran[(r.client, r.round)].sigma == pytest.approx(r.sigma, rel=1e-9)


@pytest.mark.parametrize("private", [False, True])
def test_the_fitted_quantiles_follow_location_and_scale(private):
    """Responses c + s y with bounds c + s (lo, hi) give fitted quantiles c + s q (same noise draws): the search,
    the standardization, the check loss and the l1 penalty are equivariant (up to rounding)."""
    import fdp_flower
    from fdp_flower.functional import design

    rng = np.random.default_rng(5)
    grid = np.linspace(0, 1, 30)
    curves = rng.standard_normal((600, 30)).cumsum(axis=1) / 5
    y = curves @ np.sin(2 * np.pi * grid) / 30 + rng.standard_t(3, 600)
    fits = {}
    for c, s in ((0.0, 1.0), (1e4, 1e-3), (10.0, 1e3)):
        model = fdp_flower.fit(curves, c + s * y, grid=grid, tau=0.25, eps=1.0 if private else None, n_clients=3,
                               basis="fpca", n_components=4, rule="newton", reference=False,
                               response_bounds=(c - 40 * s, c + 40 * s) if private else None)
        fits[(c, s)] = (model.predict(curves) - c) / s
    base = fits[(0.0, 1.0)]
    for key, q in fits.items():
        np.testing.assert_allclose(q, base, atol=1e-6 * (1 + np.max(np.abs(base))), err_msg=str(key))
    assert design is not None


def test_newton_refuses_what_it_cannot_run_in_one_line():
    with pytest.raises(ScenarioError, match="privacy.mode 'total'"):
        scenario(mode="per_round")
    with pytest.raises(ScenarioError, match="fit rounds"):
        scenario(rounds=20)
    with pytest.raises(ScenarioError, match="response_bounds"):
        scenario(bounds=(1.0, 1.0))
    from fdp_flower.engines.batched import _check_supported

    with pytest.raises(ValueError, match="inprocess engine for 'newton'"):
        _check_supported(scenario())
    from fdp_flower.engines.audit import NewtonAuditProtocol, protocol_for

    assert isinstance(protocol_for(scenario()), NewtonAuditProtocol)  # never the ADMM transcript under a Newton ledger
    with pytest.raises(ScenarioError, match="exactly|at most 2"):
        scenario(bounds=(1.0, 2.0, 3.0))
    with warnings.catch_warnings():  # without bounds the search runs in asinh(y) (privacy on) or after a
        warnings.simplefilter("error")  # range round (privacy off): nothing to warn about
        scenario(bounds=None)
        scenario(bounds=None, private=False)
        scenario()


@pytest.mark.slow
@pytest.mark.parametrize("private,basis", [(True, None), (False, COSINE), (True, COSINE)],
                         ids=["private", "privacy_off_fixed_basis", "private_fixed_basis"])
def test_flower_simulation_runs_the_newton_rule_as_the_in_process_engine(tmp_path, private, basis):
    """``fdp-flower run --engine flower`` (a SuperLink with Flower's simulation runtime, the real ClientApp) and the
    in-process engine: the same 30 releases per site, the same released model (to rounding: the server averages
    the replies in arrival order); on a fixed basis the second-moments round travels as well (noised with
    privacy)."""
    import yaml

    from fdp_flower.engines.flower import run_on_simulation

    sc = scenario(n=2000, clients=4, private=private, bounds=(-50.0, 50.0) if private else None, basis=basis)
    path = tmp_path / "newton.yaml"
    path.write_text(yaml.safe_dump(sc.model_dump(mode="json")))
    run_id, status, results, _ = run_on_simulation(path, [], tmp_path / "res", echo=lambda line: None)
    assert status.startswith("finished:completed"), status
    flower_w = np.load(results / "final.npz")["state_global_w"]
    local = run_fdp_admm(sc, with_reference=False)
    np.testing.assert_allclose(flower_w, local.state.global_w, rtol=0, atol=1e-12)
    import csv

    with open(results / "ledger.csv") as f:
        assert sum(1 for _ in csv.DictReader(f)) == (4 * 30 if private else 0)


def test_the_noise_actually_drawn_matches_each_new_releases_calibration():
    """Measured, not assumed: for each new kind, release minus its noise-free value over the charged sigma is
    standard normal (N draws: the sample variance's sd is sqrt(2 / N); bounds at 5 sds, the mean at 5 / sqrt(N)).
    A release with half the noise (variance 0.25) or twice the sensitivity would fail both."""
    sc = scenario()
    plan, data = _site(sc)
    plan = plan.plan
    k = plan.dim
    density_round = plan.schedule.kinds.index(N.DENSITY) + 1
    share_round = plan.schedule.kinds.index(N.SHARE) + 1
    cases = {1: {"thresholds": np.linspace(-1, 1, 6)},
             density_round: {"point": np.full(k, 0.1), "bandwidth": np.array([0.3])},
             share_round: {"point": np.full(k, 0.1)}}
    clean = {r: answer([SiteRequest(0, r, p)], data, plan, lambda events: _NoNoise())[0].value
             for r, p in cases.items()}
    for round_, public in cases.items():
        z = []
        for seed in range(400):
            (release,) = answer([SiteRequest(0, round_, public)], data, plan, run_noise(seed, "seeded"))
            z.append((release.value - clean[round_]) / release.event.sigma)
        z = np.concatenate(z)
        assert abs(z.var() - 1.0) <= 5 * np.sqrt(2.0 / z.size), (round_, z.var())
        assert abs(z.mean()) <= 5 / np.sqrt(z.size), (round_, z.mean())


class _NoNoise:
    """A generator whose draws are zeros: the noise-free value of a release (test only)."""

    def __call__(self, events):
        return self

    def standard_normal(self, shape):
        return np.zeros(shape)


def test_each_new_release_moves_by_at_most_its_sensitivity_and_attains_it():
    """Measured on the site's real answer (noise-free): over neighbouring datasets of client 0 -- every record
    replaced by a worst-case record (a response far below or above every threshold and residual window, or at
    the point's fitted value), random records of another client, and each record removed (the ledger's
    add/remove factor 1 with m_i the public count) -- the l2 change of each new release is at most its charged
    sensitivity (to rounding), and the worst case attains it, so neither a looser bound nor a wrong formula
    (6 / m instead of sqrt(6) / m, 1 / (h m) instead of 1 / (2 h m)) passes."""
    sc = scenario()
    plan, data = _site(sc)
    plan = plan.plan
    k = plan.dim
    a, y = data.rows_of(0)
    donor_a, donor_y = data.rows_of(1)
    point = np.full(k, 0.1)
    cases = {1: {"thresholds": np.linspace(-1, 1, 6)},
             plan.schedule.kinds.index(N.DENSITY) + 1: {"point": point, "bandwidth": np.array([0.3])},
             plan.schedule.kinds.index(N.SHARE) + 1: {"point": point}}

    def release(round_, features, response):
        held = SiteData.stack([0], [features], [response])
        (out,) = answer([SiteRequest(0, round_, cases[round_])], held, plan, lambda events: _NoNoise())
        assert not isinstance(out, Exception), out
        return out.value

    rng = np.random.default_rng(29)
    for round_ in cases:
        (charged,) = [answer([SiteRequest(0, round_, cases[round_])], data, plan, run_noise(0, "seeded"))[0]]
        sensitivity = charged.event.sensitivity
        base = release(round_, a, y)
        fitted = a @ point
        worst = 0.0
        for j in range(0, len(y), 7):
            for new_y in (-1e6, 1e6, fitted[j]):
                yy = y.copy()
                yy[j] = new_y
                worst = max(worst, float(np.linalg.norm(release(round_, a, yy) - base)))
        for _ in range(100):
            j, d = int(rng.integers(len(y))), int(rng.integers(len(donor_y)))
            aa, yy = a.copy(), y.copy()
            aa[j], yy[j] = donor_a[d], donor_y[d]
            worst = max(worst, float(np.linalg.norm(release(round_, aa, yy) - base)))
        for j in range(0, len(y), 7):
            keep = np.arange(len(y)) != j
            assert np.linalg.norm(release(round_, a[keep], y[keep]) - base) <= sensitivity * (1 + 1e-9)
        assert worst <= sensitivity * (1 + 1e-9), (round_, worst, sensitivity)
        assert worst >= sensitivity * (1 - 1e-9), (round_, worst, sensitivity)


def test_a_site_checks_the_named_total_records_which_moves_the_split_never_the_budget():
    """Deployment: each train message names n = sum_i m_i (the setup phase's).  The site refuses a missing, boolean,
    too small (below its own records) or absurd n, and on simulated data any n but the partition's; whatever n a
    server names, the schedule's multipliers compose to the same mu^2 (the privacy loss), only the split moves."""
    from fdp_flower.algorithms.fdp_admm.plan import data_source
    from fdp_flower.clients.fdp_admm import MAX_TOTAL_RECORDS, newton_total_records
    from fdp_flower.wire import TOTAL_RECORDS_KEY

    sc = scenario()
    source = data_source(sc)

    class NodeLocal:
        node_local = True

    for bad in ({}, {TOTAL_RECORDS_KEY: True}, {TOTAL_RECORDS_KEY: 399}, {TOTAL_RECORDS_KEY: 2.0e3},
                {TOTAL_RECORDS_KEY: MAX_TOTAL_RECORDS + 1}):
        with pytest.raises(ValueError, match=TOTAL_RECORDS_KEY):
            newton_total_records(sc, bad, NodeLocal(), 400)
    assert newton_total_records(sc, {TOTAL_RECORDS_KEY: 400}, NodeLocal(), 400) == 400
    with pytest.raises(ValueError, match="is not the run's n"):
        newton_total_records(sc, {TOTAL_RECORDS_KEY: 2001}, source, 400)
    assert newton_total_records(sc, {TOTAL_RECORDS_KEY: 2000}, source, 400) == 2000
    assert newton_total_records(scenario().model_copy(update={"algorithm": scenario().algorithm.model_copy(
        update={"rule": "admm"})}), {}, source, 400) is None
    plan, _ = _site(sc)
    splits = [newton_plan(sc, plan.basis, n).multipliers for n in (400, 2000, 10**9)]
    assert not np.allclose(splits[0], splits[2])
    for z in splits:
        assert np.sum(z ** -2.0) == pytest.approx(np.sum(splits[1] ** -2.0), rel=1e-12)


@pytest.mark.parametrize("stop,bounds,private,basis", [
    (3, (-50.0, 50.0), True, None), (10, (-50.0, 50.0), True, None), (27, (-50.0, 50.0), True, None),
    (5, None, True, None), (7, None, False, COSINE), (12, None, False, COSINE), (19, None, True, COSINE)],
    ids=["quartiles", "term_before_density", "calibrating", "warped_quartiles", "fixed_basis_moments",
         "fixed_basis_fit", "private_fixed_basis_averaging"])
def test_an_interrupted_newton_run_resumes_to_the_uninterrupted_model(tmp_path, stop, bounds, private, basis):
    """Nothing lost: a run stopped after round ``stop`` keeps the Newton server's own state (brackets, curvature,
    dual average, pending gradient, calibration) in its checkpoint; resuming draws what the uninterrupted run
    draws and ends at its model, ledger and history exactly (also inside the search without bounds, whose
    brackets are in asinh(y)).  A checkpoint without that state is refused."""
    from fdp_flower.outputs.checkpoint import read_checkpoint, write_checkpoint

    sc = scenario(bounds=bounds, private=private, basis=basis)
    sc = parse_scenario({**sc.model_dump(mode="json"), "output": {"checkpoint_every": 1}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = run_fdp_admm(sc, with_reference=False)
        part = run_fdp_admm(sc, with_reference=False, stop_after=stop, checkpoint_path=tmp_path / "c.npz")
        ck = read_checkpoint(tmp_path / "c.npz")
        assert part.state.round == ck.round == stop and ck.server_state["rule"] == "newton"
        done = run_fdp_admm(sc, with_reference=False, resume=ck)
    np.testing.assert_array_equal(done.state.global_w, full.state.global_w)
    assert done.ledger.to_rows() == full.ledger.to_rows()
    assert [r["curvature"] for r in done.history] == [r["curvature"] for r in full.history]
    ck.server_state = None
    write_checkpoint(tmp_path / "old.npz", ck)
    with pytest.raises(ValueError, match="no Newton-rule server state"):
        run_fdp_admm(sc, with_reference=False, resume=read_checkpoint(tmp_path / "old.npz"))


def _small_audit(bounds=(-20.0, 20.0), basis=None):
    from fdp_flower.engines.audit import audit_protocol, protocol_for

    sc = scenario(bounds=bounds, n=400, clients=4, basis=basis)
    protocol = protocol_for(sc)
    return sc, protocol, audit_protocol(protocol, transcripts=3, lr_trials=30)


@pytest.mark.parametrize("bounds", [(-20.0, 20.0), None], ids=["bounds", "no_bounds"])
def test_the_audit_replays_a_newton_transcript_and_it_passes(bounds):
    """``fdp-flower audit`` on the Newton rule: all 30 steps (every release kind) within their calibrated
    sensitivity on every neighbour pair, the transcript's KL within its zCDP budget, the likelihood-ratio bound below
    the accounted eps, and the site function's noise and sensitivity as its ledger says."""
    sc, protocol, report = _small_audit(bounds)
    assert report.passed, "\n".join(report.failures)
    assert report.steps == sc.algorithm.rounds == 30
    kinds = [protocol.schedule.kind(t) for t in range(1, 31)]
    canary = next(p for p in report.pairs if p.label == "canary replace-one")
    assert np.all(canary.ratio <= 1 + 1e-9)
    # the canary is chosen at step 1, a quartile release: opposite responses, which also attain the calibration's
    # shares.  Without bounds the search names its thresholds sinh(u) in asinh(y): the same release, but the first
    # round's 7-ary thresholds (|y| = 5.5, 670, 8e4) leave 4 of 6 outside both canary responses (ratio
    # sqrt(2/6)); from round 2 on they straddle all 6
    tight = [t for t, kind in enumerate(kinds) if kind in (N.QUARTILES, N.SHARE)][0 if bounds else 1:]
    np.testing.assert_allclose(canary.ratio[tight], 1.0, atol=1e-9)
    assert kinds.count(N.QUARTILES) == (N.LOCATION_ROUNDS if bounds else N.UNBOUNDED_LOCATION_ROUNDS)
    assert set(kinds) == {N.QUARTILES, N.TERM, N.DENSITY, N.SHARE}
    # the accounted eps of the audited releases is the run's (one Gaussian of the schedule's mu)
    assert 0.97 <= report.eps_accounted["replace_one"] <= 1.0
    assert report.lr_test.eps_lower <= report.eps_accounted["replace_one"]


@pytest.mark.parametrize("kind,message", [(N.QUARTILES, "measured sensitivity"), (N.DENSITY, "measured sensitivity"),
                                          (N.SHARE, "measured sensitivity")])
def test_the_audit_fails_a_site_that_understates_a_newton_release(monkeypatch, kind, message):
    """A third of one kind's true sensitivity (the ledger and the noise follow it): the audit names the step."""
    from fdp_flower.algorithms.fdp_admm import newton as newton_module

    true = newton_module.release_sensitivity

    def understated(k, m, **kw):
        return true(k, m, **kw) / (3.0 if k == kind else 1.0)

    monkeypatch.setattr(newton_module, "release_sensitivity", understated)
    _sc, protocol, report = _small_audit()
    assert not report.passed
    steps = [t for t in range(1, 31) if protocol.schedule.kind(t) == kind]
    assert any(message in f and f"step {t}:" in f for f in report.failures for t in steps), report.failures


@pytest.mark.parametrize("understate", [1.0, 3.0], ids=["calibrated", "understated"])
def test_the_audit_measures_the_second_moments_release_of_a_fixed_basis(monkeypatch, understate):
    """A private Newton run on the cosine basis: the audit replays its second-moments step with the real site
    function and passes; a site stating a third of that release's sensitivity fails at that step."""
    from fdp_flower.algorithms.fdp_admm import newton as newton_module

    true = newton_module.release_sensitivity

    def stated(k, m, **kw):
        return true(k, m, **kw) / (understate if k == N.MOMENTS else 1.0)

    monkeypatch.setattr(newton_module, "release_sensitivity", stated)
    _sc, protocol, report = _small_audit(bounds=None, basis=COSINE)
    step = protocol.schedule.kinds.index(N.MOMENTS) + 1
    if understate == 1.0:
        assert report.passed, "\n".join(report.failures)
        assert 0.97 <= report.eps_accounted["replace_one"] <= 1.0
    else:
        assert not report.passed
        assert any("measured sensitivity" in f and f"step {step}:" in f for f in report.failures), report.failures


# ---------------------------------------------------------------- the search without declared bounds
def test_without_bounds_the_private_schedule_searches_8_rounds_and_still_splits_mu_squared_exactly():
    sc = scenario(bounds=None)
    plan, _ = _site(sc)
    z_admm = noise_plan(sc, plan.basis).noise_multipliers
    schedule = newton_plan(sc, plan.basis, 2000)
    assert schedule.kinds[:N.UNBOUNDED_LOCATION_ROUNDS] == (N.QUARTILES,) * N.UNBOUNDED_LOCATION_ROUNDS
    assert schedule.rounds == 30 and schedule.term_rounds == 30 - 8 - 2 - 5
    assert np.sum(schedule.multipliers ** -2.0) == pytest.approx(np.sum(z_admm ** -2.0), rel=1e-12)


@pytest.mark.parametrize("c,s", [(0.0, 1.0), (1e4, 1.0), (10.0, 1e-3), (-3e5, 1e2), (0.0, 1e-3), (1e4, 1e-3)])
def test_the_warped_search_brackets_both_quartiles_to_its_stated_resolution(c, s):
    """Noise-free shares: after 8 rounds in asinh(y) each level's bracket holds its sample quartile; in u it is at
    most 2 asinh(Y) / 4^8 wide (every round splits at least 4-ary), and exactly 2 asinh(Y) / 7^8 while both levels
    still share one bracket (a response whose IQR is below :func:`newton.unbounded_resolution`)."""
    y = c + s * np.random.default_rng(1).standard_normal(3000)
    brackets_u = N.unbounded_brackets()
    for _ in range(N.UNBOUNDED_LOCATION_ROUNDS):
        named = np.sinh(N.quartile_thresholds(brackets_u, shared=True))
        brackets_u = N.quartile_brackets(brackets_u, N.quartile_shares(y, named), shared=True)
    span = 2 * math.asinh(N.UNBOUNDED_RESPONSE_LIMIT)
    for (lo, hi), p in zip(np.sinh(brackets_u), N.LEVELS):
        assert np.mean(y <= lo) < p <= np.mean(y <= hi), (lo, hi, p)  # the robust cut's invariant, exact shares
    widths = brackets_u[:, 1] - brackets_u[:, 0]
    assert np.all(widths <= span / 4.0**N.UNBOUNDED_LOCATION_ROUNDS * (1 + 1e-9))
    quartiles = np.quantile(y, N.LEVELS, method="inverted_cdf")  # min{y: share(y) >= p}: what the cuts bracket
    iqr = float(quartiles[1] - quartiles[0])
    if np.array_equal(brackets_u[0], brackets_u[1]):
        np.testing.assert_allclose(widths, span / 7.0**N.UNBOUNDED_LOCATION_ROUNDS, rtol=1e-9)
        assert iqr <= 2 * N.unbounded_resolution(c)  # unresolved only when the IQR is within about one cell
    else:
        location, scale = N.location_and_scale(np.sinh(brackets_u))
        width = float(np.max(np.diff(np.sinh(brackets_u), axis=1)))
        assert abs(location - float(np.mean(quartiles))) <= width  # each quartile known to its bracket
        assert abs(scale * 1.349 - iqr) <= 2 * width


def test_a_shared_bracket_is_split_into_seven_cells_for_both_levels_and_separate_brackets_into_four():
    joint = np.array([[0.0, 7.0], [0.0, 7.0]])
    np.testing.assert_allclose(N.quartile_thresholds(joint, shared=True), [1, 2, 3, 4, 5, 6])
    np.testing.assert_allclose(N.quartile_thresholds(joint), [1.75, 3.5, 5.25] * 2)  # the bounded search: as before
    # shares 0.1 .. 0.95 at 1..6: level 0.25 lies in (2, 3], level 0.75 in (4, 5]
    nxt = N.quartile_brackets(joint, np.array([0.1, 0.2, 0.3, 0.6, 0.8, 0.95]), shared=True)
    np.testing.assert_allclose(nxt, [[2.0, 3.0], [4.0, 5.0]])
    np.testing.assert_allclose(N.quartile_thresholds(nxt, shared=True), [2.25, 2.5, 2.75, 4.25, 4.5, 4.75])


@pytest.mark.parametrize("c,s", [(0.0, 1.0), (1e4, 1.0), (10.0, 1e3), (0.0, 1e-3)])
def test_a_private_fit_without_bounds_finds_the_location_and_scale_and_the_level(c, s):
    """``fit`` with privacy on and nothing declared (the Newton rule's search in asinh(y)): the location within 0.5
    and the scale within a factor e^0.5 of the response's median and IQR / 1.349, and the share of the training
    responses below the fitted quantile within 0.05 of tau.  Tolerances: at 3 sites of 1000 and eps = 1 the last
    search round's pooled share noise is ~0.045, a quartile error ~0.14 scales (share noise / density 0.32),
    so midhinge ~0.1 and log IQR ~0.15 (3.5 sds: 0.5); the calibration's share noise ~0.008 after averaging,
    plus the binomial sd 0.008 of 3000 shares (4 combined sds: 0.05)."""
    import fdp_flower

    rng = np.random.default_rng(11)
    grid = np.linspace(0, 1, 30)
    curves = rng.standard_normal((3000, 30)).cumsum(axis=1) / 5
    y0 = curves @ np.sin(2 * np.pi * grid) / 30 + rng.standard_normal(3000)
    y = c + s * y0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the predicted privacy cost of 1000 curves a site
        model = fdp_flower.fit(curves, y, grid=grid, tau=0.25, eps=1.0, n_clients=3, basis="fpca", n_components=4,
                               reference=False)
    assert model.scenario.algorithm.rule == "newton" and model.scenario.algorithm.response_bounds is None
    last = model.history.iloc[-1]
    iqr_scale = float(np.subtract(*np.quantile(y, [0.75, 0.25]))) / 1.349
    assert abs(float(last["location"]) - float(np.median(y))) <= 0.5 * iqr_scale
    assert abs(math.log(float(last["scale"]) / iqr_scale)) <= 0.5
    assert abs(float(np.mean(y <= model.predict(curves))) - 0.25) <= 0.05


def test_fit_warns_before_training_when_a_private_admm_fit_knows_nothing_of_the_response():
    import fdp_flower
    from fdp_flower.api import ResponseUnitsWarning

    rng = np.random.default_rng(2)
    curves, y = rng.standard_normal((300, 20)), 10 + rng.standard_normal(300)
    common = {"eps": 1.0, "n_clients": 3, "n_components": 3, "rounds": 5, "reference": False}
    with pytest.warns(ResponseUnitsWarning, match="level_calibration=True"):
        fdp_flower.fit(curves, y, level_calibration=False, **common)  # the cosine basis: the ADMM rule, no levels
    for declared in ({}, {"response_bounds": (0.0, 20.0)}, {"response_offset": 10.0, "response_scale": 1.0},
                     {"eps": None}):  # {}: the default level calibration places the level
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # the predicted privacy cost of 100 curves a site
            warnings.simplefilter("error", ResponseUnitsWarning)  # (the later filter wins)
            fdp_flower.fit(curves, y, **{**common, **declared})


# ---------------------------------------------------------------- components below the noise edge (N.5)
def test_the_noise_edge_is_twice_the_pooled_summary_noise_times_root_b_and_zero_without_noise():
    from fdp_flower.functional.federated_fpca import noise_edge, phase_noise_sigma

    sc = parse_scenario({**scenario().model_dump(mode="json"),
                         "basis": {"kind": "federated_dp", "n_components": 5, "eps": 0.5, "pre_basis_size": 20}})
    sizes = [300, 300, 600]
    sigmas = np.array([phase_noise_sigma(sc.basis, m) for m in sizes])
    weights = np.array(sizes) / 1200
    assert noise_edge(sc.basis, sizes) == pytest.approx(2 * np.sqrt(np.sum(weights**2 * sigmas**2)) * np.sqrt(20))
    for change in ({"private": False}, {"whiten": True}):
        off = parse_scenario({**sc.model_dump(mode="json"), "basis": {**sc.basis.model_dump(mode="json"), **change}})
        assert noise_edge(off.basis, sizes) == 0.0
    assert noise_edge(scenario().basis, sizes) == 0.0  # a pooled basis has no summary noise


def test_a_private_fpca_fit_uses_only_the_components_above_the_noise_edge():
    """The paper's design with a federated DP-FPCA basis of 8 components at total eps = 1: the fit keeps the
    components whose released eigenvalue clears the public noise edge (history's components_used), the others'
    coefficients are exactly 0, and the coefficient function's MISE is 1.34 (4.26 when the fit also steps in the
    noise-picked components, which is what this guards against)."""
    import fdp_flower
    from fdp_flower.functional.design import simulate_slice, true_beta
    from fdp_flower.functional.federated_fpca import noise_edge

    grid = np.linspace(0, 1, 60)
    data = simulate_slice(2, 0, 8000, tau=0.9, grid=grid)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the predicted privacy cost
        model = fdp_flower.fit(data.curves, data.response, grid=grid, tau=0.9, eps=1.0, n_clients=4, basis="fpca",
                               n_components=8, seed=2, reference=False)
    sc = model.scenario
    assert sc.algorithm.rule == "newton"
    edge = noise_edge(sc.basis, [2000] * 4)
    above = np.asarray(model.basis.eigenvalues) > edge
    above[0] = True
    used = int(model.history["components_used"].iloc[-1])
    assert used == int(above.sum()) < 8
    coefficients = model.coefficients  # the K basis coefficients (the intercept apart)
    assert np.all(coefficients[~above] == 0.0)
    assert model.mise(true_beta(grid)) < 2.0
