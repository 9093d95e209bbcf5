"""The ADMM rule's location/scale search and level calibration (``algorithm.level_calibration``;
fdp_flower/algorithms/fdp_admm/level_protocol.py): its schedule splits the ADMM plan's mu^2, a private fit gives the
same quantiles at any location and scale and places their level, the audit replays its releases, ``fdp-flower
privacy`` plans them, a checkpoint inside it resumes, and Flower runs it as the in-process engine does."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import stats

from fdp_flower.algorithms.fdp_admm import newton as N
from fdp_flower.algorithms.fdp_admm.config import parse_scenario
from fdp_flower.algorithms.fdp_admm.plan import build_basis, noise_plan, site_plan
from fdp_flower.config.base import ScenarioError
from fdp_flower.engines.inprocess import run_fdp_admm


def scenario(*, tau=0.25, rounds=20, n=1500, clients=3, level=True, **privacy):
    return parse_scenario({
        "name": "levels", "seed": 4, "data": {"kind": "paper_simulation", "n_samples": n, "grid_points": 40},
        "federation": {"num_clients": clients}, "basis": {"kind": "fixed", "family": "cosine", "n_components": 4},
        "model": {"loss": {"kind": "quantile", "tau": tau}, "penalty": {"kind": "l1", "lam": 0.05}, "intercept": True},
        "algorithm": {"kind": "fdp_admm", "rule": "admm", "rounds": rounds, "level_calibration": level},
        "privacy": {"enabled": True, "mode": "total", "eps": 1.0, "delta": 1e-5, **privacy}})


def test_the_schedule_adds_8_and_13_rounds_and_splits_the_admm_plans_mu_squared_exactly():
    sc = scenario()
    basis = build_basis(sc)
    z_admm = noise_plan(sc, basis).noise_multipliers
    schedule = site_plan(sc, basis, [500, 500, 500]).schedule
    assert schedule.kinds == (N.QUARTILES,) * 8 + (N.TERM,) * 20 + (N.RESIDUAL_QUARTILES,) * 8 + (N.SHARE,) * 5
    assert np.sum(schedule.multipliers ** -2.0) == pytest.approx(np.sum(z_admm ** -2.0), rel=1e-12)
    # the term rounds keep the ADMM plan's shape, each z_l scaled by the same factor
    ratio = schedule.multipliers[8:28] / z_admm
    np.testing.assert_allclose(ratio, ratio[0], rtol=1e-12)
    assert ratio[0] > 1


def test_level_calibration_refuses_what_it_cannot_run_in_one_line():
    with pytest.raises(ScenarioError, match="privacy.mode 'total'"):
        scenario(mode="per_round")
    with pytest.raises(ScenarioError, match="privacy.trust 'site'"):
        scenario(trust="trusted_aggregator")
    data = scenario().model_dump(mode="json")
    with pytest.raises(ScenarioError, match="model.intercept"):
        parse_scenario({**data, "model": {**data["model"], "intercept": False}})
    with pytest.raises(ScenarioError, match="rule 'admm'"):
        parse_scenario({**data, "algorithm": {"kind": "fdp_admm", "rule": "newton", "level_calibration": True},
                        "basis": {"kind": "pooled", "n_components": 4}})
    from fdp_flower.engines.batched import _check_supported

    with pytest.raises(ValueError, match="inprocess engine for algorithm.level_calibration"):
        _check_supported(scenario())
    _check_supported(scenario(level=False))  # the ADMM rounds alone still batch
    from fdp_flower.engines.audit import LevelAuditProtocol, protocol_for

    assert isinstance(protocol_for(scenario()), LevelAuditProtocol)


def test_a_private_run_spends_its_budget_and_fdp_flower_privacy_plans_the_same_releases():
    sc = scenario()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run = run_fdp_admm(sc, with_reference=False)
    assert len(run.history) == 41 and len(run.ledger.releases) == 3 * 41
    assert {r.mechanism for r in run.ledger.releases} == {"fdp_admm_subgradient", "fdp_newton_residual_share",
                                                          "fdp_newton_quartile_shares",
                                                          "fdp_level_residual_quartile_shares"}
    assert 0.97 <= run.history[-1]["eps_pld"] <= 1.0
    from fdp_flower.cli.privacy import fdp_admm_ledger

    planned, _sizes = fdp_admm_ledger(sc)
    assert [(r.client, r.round, r.mechanism) for r in planned.releases] == \
        [(r.client, r.round, r.mechanism) for r in run.ledger.releases]
    assert planned.summary(0, 1e-5).eps_pld == pytest.approx(run.ledger.summary(0, 1e-5).eps_pld, rel=1e-9)
    # the released model is the ADMM estimator with the intercept moved; every estimator kind agrees
    final = run.state
    for kind in ("last", "average", "tail_average"):
        np.testing.assert_allclose(final.estimate(kind), final.global_w, rtol=0, atol=1e-12)


def _tolerance(tau: float, sizes, eps: float = 1.0, delta: float = 1e-5, n_test: int = 0) -> float:
    """4 sds of the fitted level's error, from public quantities: the pooled share noise of the 5 calibration
    rounds, sqrt(M) z / n each (z their multiplier), averaged by the final intercept (the mean of the 5 one-shot
    estimates), the training sample's share sd sqrt(tau (1 - tau) / n) and the held-out share's
    sqrt(tau (1 - tau) / n_test)."""
    from fdp_flower.privacy.calibration import calibrate_noise_multiplier

    n, m = float(np.sum(sizes)), len(sizes)
    mu = 1.0 / calibrate_noise_multiplier(eps, delta, np.ones(1))
    share = N.budget_shares(n, mu, intercept=True, location_scale=True).calibration / N.CALIBRATION_ROUNDS
    z = 1.0 / (mu * math.sqrt(share))
    var = m * z**2 / n**2 / N.CALIBRATION_ROUNDS + tau * (1 - tau) / n + (tau * (1 - tau) / n_test if n_test else 0.0)
    return 4.0 * math.sqrt(var)


@pytest.mark.parametrize("rule", [None, "admm"], ids=["default_newton", "admm"])
@pytest.mark.parametrize("tau", [0.1, 0.9])
def test_fit_places_the_level_at_any_location_and_scale(tau, rule):
    """``fit`` on the cosine basis at eps = 1 -- with every default (the Newton rule: its location/scale search,
    noised second moments and intercept calibration) and with ``rule="admm"`` (the ADMM rule with its location/scale
    search and level calibration): the share of held-out responses below the fitted tau-quantile is within the
    level's error of tau, for the response 10 + y and for 1e4 + 1e3 y and 10 + 1e-3 y -- with nothing declared about
    the response -- and the fitted quantile keeps its spread over the curves in response sds (the ADMM rule alone in
    the response's units gives a 1e4-centred response slopes of noise: a spread of 10 sds or more).  Without them
    the ADMM rule's quantile of 10 + y is off its level."""
    import fdp_flower

    rng = np.random.default_rng(11)
    grid = np.linspace(0, 1, 30)
    n, n_test = 3000, 20000
    scores = rng.standard_normal((n + n_test, 3)) * np.array([1.0, 0.6, 0.3])
    curves = scores @ np.vstack([np.sqrt(2) * np.cos(k * np.pi * grid) for k in (1, 2, 3)])
    y0 = scores @ np.array([1.0, -0.5, 0.25]) + (1 + 0.3 * np.abs(scores[:, 0])) * rng.standard_normal(n + n_test)
    tolerance = _tolerance(tau, [n // 5] * 5, n_test=n_test)
    for c, s in ((10.0, 1.0), (1e4, 1e3), (10.0, 1e-3)):
        y = c + s * y0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the predicted privacy cost
            model = fdp_flower.fit(curves[:n], y[:n], grid=grid, tau=tau, eps=1.0, n_clients=5, reference=False,
                                   rule=rule)
        if rule is None:
            assert model.scenario.algorithm.rule == "newton" and len(model.history) == 30
        else:
            assert model.scenario.algorithm.level_calibration and model.scenario.algorithm.rule == "admm"
        fitted = model.predict(curves[n:])
        share = float(np.mean(y[n:] <= fitted))
        assert abs(share - tau) <= tolerance, (c, s, share, tolerance)
        # the exact conditional quantile's spread over the curves is sd(scores @ beta) = 1.12 response sds of y0
        # scaled; a fit in standardized units keeps it within a factor 3 (noise widens it, shrinkage narrows it)
        spread = float(np.std(fitted)) / (s * float(np.std(y0)))
        assert 0.1 <= spread <= 3.0, (c, s, spread)
        assert 0.97 <= model.privacy.eps <= 1.0
    if rule is None:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        off = fdp_flower.fit(curves[:n], 10 + y0[:n], grid=grid, tau=tau, eps=1.0, n_clients=5, reference=False,
                             rule="admm", level_calibration=False)
    assert abs(float(np.mean(10 + y0[n:] <= off.predict(curves[n:]))) - tau) > tolerance


def test_the_search_and_the_calibration_recover_the_residual_quantile_without_noise():
    """The server's steps on exact releases (no noise): the search's location and scale are the residuals'
    midhinge and IQR / 1.349 to its resolution, and after the 5 share rounds the pooled share of residuals at or
    below the calibrated intercept is tau to within the one-shot steps' residual error (a normal law's, 1e-3)."""
    from fdp_flower.algorithms.fdp_admm.level_protocol import LevelledADMMServer

    sc = scenario(tau=0.25)
    basis = build_basis(sc)
    sizes = [500, 500, 500]
    server = LevelledADMMServer(sc, basis, sizes)
    rng = np.random.default_rng(5)
    features = [np.c_[np.full(500, server.c0), rng.standard_normal((500, 4))] for _ in sizes]
    responses = [37.0 + 2.5 * rng.standard_normal(500) for _ in sizes]
    pooled = np.concatenate(responses)
    q1, q3 = np.quantile(pooled, [0.25, 0.75])
    for round_ in range(1, 9):  # the responses' search
        values = server.request_values(N.QUARTILES)
        server.apply(round_, {i: N.quartile_shares(y, values["thresholds"]) for i, y in enumerate(responses)})
    assert server.scale == pytest.approx((q3 - q1) / 1.349, rel=0.02)
    assert server.location == pytest.approx((q1 + q3) / 2, abs=0.02 * server.scale)
    # the ADMM rounds' point is the standardized iterate in the response's units: 0 -> location / c0 in the intercept
    np.testing.assert_allclose(server.request_values(N.TERM, 1)["point"], [server.location / server.c0, 0, 0, 0, 0])
    # as if the ADMM rounds had released the model at the responses' location: the residuals are y - location
    server.base = np.r_[server.location / server.c0, np.zeros(4)]
    for round_ in range(29, 42):
        values = server.request_values(server.schedule.kind(round_))
        if server.schedule.kind(round_) == N.RESIDUAL_QUARTILES:
            releases = {i: N.residual_quartile_shares(a, y, values["point"], values["thresholds"])
                        for i, (a, y) in enumerate(zip(features, responses))}
        else:
            releases = {i: np.array([N.residual_share(a, y, values["point"])])
                        for i, (a, y) in enumerate(zip(features, responses))}
        server.apply(round_, releases)
        if round_ == 36:
            assert server.residual_scale == pytest.approx((q3 - q1) / 1.349, rel=0.02)
            assert server.location + server.offset == pytest.approx(
                (q1 + q3) / 2 + server.residual_scale * stats.norm.ppf(0.25), abs=0.02 * server.residual_scale)
    w = server.current_model
    assert w[0] * server.c0 == pytest.approx(server.location + server.offset) and np.all(w[1:] == 0)
    assert abs(float(np.mean(pooled <= w[0] * server.c0)) - 0.25) <= 2e-3


def test_a_run_interrupted_inside_the_calibration_resumes_to_the_uninterrupted_model(tmp_path):
    from fdp_flower.outputs.checkpoint import read_checkpoint

    sc = scenario(rounds=12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = run_fdp_admm(sc, with_reference=False)
        sc_ckpt = parse_scenario({**sc.model_dump(mode="json"), "output": {"checkpoint_every": 1}})
        path = tmp_path / "checkpoint.npz"
        for stop in (5, 14, 25):  # inside the responses' search, the ADMM rounds and the residuals' search
            path = tmp_path / f"stop-{stop}" / "checkpoint.npz"
            run_fdp_admm(sc_ckpt, with_reference=False, checkpoint_path=path, stop_after=stop)
            checkpoint = read_checkpoint(path)
            assert checkpoint.round == stop and checkpoint.server_state["rule"] == "admm_levels"
            resumed = run_fdp_admm(sc_ckpt, with_reference=False, resume=checkpoint)
            np.testing.assert_allclose(resumed.state.global_w, whole.state.global_w, rtol=0, atol=1e-12)
            assert len(resumed.ledger.releases) == len(whole.ledger.releases)


def test_the_audit_replays_the_calibration_and_it_passes():
    """``fdp-flower audit``: the 8 quartile rounds, 3 data terms, 8 residual quartile rounds and 5 share rounds of
    party 0, each within
    its calibrated sensitivity on every neighbour pair, the KL within budget, the likelihood-ratio bound below the
    accounted eps, and the site's noise as its ledger says; the canary attains the share rounds' calibration."""
    from fdp_flower.engines.audit import audit_protocol, protocol_for

    sc = scenario(rounds=3, n=600)
    protocol = protocol_for(sc)
    report = audit_protocol(protocol, transcripts=3, lr_trials=30)
    assert report.passed, "\n".join(report.failures)
    assert report.steps == 24
    canary = next(p for p in report.pairs if p.label == "canary replace-one")
    assert np.all(canary.ratio <= 1 + 1e-9)
    # the canary (opposite responses) attains the quartile rounds' calibration from the second round on, as under
    # the Newton rule
    np.testing.assert_allclose(canary.ratio[1:8], 1.0, atol=1e-9)
    assert 0.97 <= report.eps_accounted["replace_one"] <= 1.0


def test_the_audit_fails_a_site_that_understates_the_residual_quartile_shares(monkeypatch):
    from fdp_flower.algorithms.fdp_admm import newton as newton_module
    from fdp_flower.engines.audit import audit_protocol, protocol_for

    true = newton_module.release_sensitivity

    def understated(kind, m, **kw):
        return true(kind, m, **kw) / (3.0 if kind == N.RESIDUAL_QUARTILES else 1.0)

    monkeypatch.setattr(newton_module, "release_sensitivity", understated)
    report = audit_protocol(protocol_for(scenario(rounds=3, n=600)), transcripts=3, lr_trials=30)
    assert not report.passed
    assert any("measured sensitivity" in f and any(f"step {t}:" in f for t in range(12, 20)) for f in report.failures), \
        report.failures


@pytest.mark.slow
def test_flower_simulation_runs_the_level_calibration_as_the_in_process_engine(tmp_path):
    """``fdp-flower run --engine flower`` (a SuperLink with Flower's simulation runtime, the real ClientApp) and the
    in-process engine: the same 8 + 15 + 13 releases per site and the same released model (to rounding)."""
    import csv

    import yaml

    from fdp_flower.engines.flower import run_on_simulation

    sc = scenario(rounds=15, n=1200)
    path = tmp_path / "levels.yaml"
    path.write_text(yaml.safe_dump(sc.model_dump(mode="json")))
    _run_id, status, results, _ = run_on_simulation(path, [], tmp_path / "res", echo=lambda line: None)
    assert status.startswith("finished:completed"), status
    local = run_fdp_admm(sc, with_reference=False)
    np.testing.assert_allclose(np.load(results / "final.npz")["state_global_w"], local.state.global_w,
                               rtol=0, atol=1e-9)
    with open(results / "ledger.csv") as f:
        assert sum(1 for _ in csv.DictReader(f)) == 3 * 36
