"""The empirical privacy audit (``fdp-flower audit``): its statistics, and every algorithm audited small.

Each audit replays neighbouring datasets through the real client code on the same transcript
(fdp_flower.engines.audit).  DP-valid algorithms must pass; the private-anchor zCDP-NFL variant
(NOT DP) must fail.  Sizes are cut down so that each audit takes seconds.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import optimize, stats

from fdp_flower.algorithms.registry import load_any_scenario, parse_any_scenario
from fdp_flower.engines.audit import BEND_ANGLE, audit_protocol, protocol_for
from fdp_flower.privacy.audit import (
    clopper_pearson_upper,
    epsilon_from_rates,
    epsilon_lower_bound,
    gaussian_llr,
    kl_estimate,
)

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
SIN_BEND = float(np.sin(BEND_ANGLE))


# ------------------------------------------------------------------ statistics
def test_clopper_pearson_matches_closed_forms():
    # no failures: the bound solves (1 - p)^n = alpha
    assert clopper_pearson_upper(0, 50, 0.05) == pytest.approx(1 - 0.05 ** (1 / 50), rel=1e-12)
    # k failures: the upper bound p solves P(X <= k | p) = alpha, X ~ Bin(n, p)
    p = clopper_pearson_upper(9, 10, 0.05)
    assert stats.binom.cdf(9, 10, p) == pytest.approx(0.05, rel=1e-9)
    assert clopper_pearson_upper(10, 10, 0.05) == 1.0
    with pytest.raises(ValueError):
        clopper_pearson_upper(11, 10, 0.05)


def test_epsilon_from_rates():
    assert epsilon_from_rates(0.01, 0.5, 0.0) == pytest.approx(math.log(50))
    assert epsilon_from_rates(0.5, 0.6, 0.0) == 0.0  # a test worse than chance certifies nothing
    assert epsilon_from_rates(0.0, 0.1, 0.0) == math.inf


def _gaussian_eps(mu: float, delta: float) -> float:
    """eps(delta) of the mu-Gaussian mechanism (Balle & Wang 2018, Thm. 8)."""
    def excess(eps):
        return stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2) - delta
    return optimize.brentq(excess, 0.0, 50.0)


def test_likelihood_ratio_bound_is_valid_and_has_power_on_a_gaussian_mechanism():
    """Releases N(0, 1) vs N(mu, 1): the log-likelihood ratio is N(+-mu^2/2, mu^2).  The bound must stay
    below the true eps(delta).  Power: with 10000 held-out trials per side, a threshold test is only
    measurable down to ~20 false positives (FPR 2e-3); the best population test there certifies
    ``reachable``.  The audit's bound may lose log(Clopper-Pearson upper / rate) <= log 2 at >= 20
    counts on each rate, and the threshold is picked on the other half: it must come within 1 of it."""
    mu, delta, n = 2.0, 1e-5, 20000
    rng = np.random.default_rng(0)
    under_d = mu * mu / 2 + mu * rng.standard_normal(n)
    under_d_prime = -mu * mu / 2 + mu * rng.standard_normal(n)
    test = epsilon_lower_bound(under_d, under_d_prime, delta=delta)
    truth = _gaussian_eps(mu, delta)
    t = np.linspace(-10.0, 20.0, 30001)
    fpr, fnr = stats.norm.sf((t + mu * mu / 2) / mu), stats.norm.cdf((t - mu * mu / 2) / mu)
    measurable = fpr >= 20 / (n // 2)
    reachable = float(np.max(np.log((1 - delta - fnr[measurable]) / fpr[measurable])))
    assert 0 < test.eps_lower <= truth
    assert test.eps_lower > reachable - 1.0
    assert test.fpr <= test.fpr_upper and test.fnr <= test.fnr_upper


def test_llr_and_kl_estimators():
    y, q, q2 = np.array([1.0, 2.0]), np.array([1.0, 1.0]), np.array([0.0, 1.0])
    assert gaussian_llr(y, q, q2, 2.0) == pytest.approx((2.0 - 1.0) / 8.0)
    assert gaussian_llr(y, q, q2, 1.0, np.array([2.0, 1.0])) == pytest.approx((0.25 + 1.0 - 1.0) / 2.0)
    est = kl_estimate(np.array([0.5, 0.5, 0.5]), np.array([0.0, 1.0, 0.5]))
    assert est.conditional == 0.5 and est.conditional_se == 0.0 and est.sampled == pytest.approx(0.5)


# ------------------------------------------------------------------ scenarios, cut small
FDP_SMALL = ["data.n_samples=400", "federation.num_clients=4"]
# per-step budgets: the total-budget PLD calibration at eps = 10 alone takes many seconds
P2P_SMALL = ["federation.num_clients=6", "data.samples_per_node=40", "privacy.mode=per_round", "privacy.eps=1"]


def _audit(path, overrides, *, steps, trials=30, relations="calibrated", variant=None, fpca=False):
    scenario = load_any_scenario(path, overrides) if isinstance(path, Path) else path
    protocol = protocol_for(scenario, variant=variant, fpca=fpca)
    return audit_protocol(protocol, steps=steps, transcripts=3, lr_trials=trials, relations=relations)


def _passes(report):
    assert report.passed, "\n".join(report.failures)
    ratios = [float(np.nanmax(np.r_[p.ratio, p.probe_ratio])) for p in report.pairs]
    assert max(ratios) <= 1 + 1e-6
    for p in report.pairs:
        assert p.kl.conditional <= p.rho * (1 + 1e-6) ** 2
    assert report.lr_test.eps_lower <= report.eps_accounted[report.lr_relation]


def test_fdp_admm_sphere_passes_and_the_canary_is_tight():
    report = _audit(SCENARIOS / "quickstart.yaml", FDP_SMALL, steps=6)
    _passes(report)
    canary = report.pairs[0]
    assert canary.label == "canary replace-one"
    # the worst-case canary attains the calibrated 2 G / (m (rho + 1/eta)) (quantile loss, clipped rows)
    assert canary.ratio.max() == pytest.approx(1.0, abs=1e-9)
    # ... so its conditional KL is the zCDP budget itself (Delta = Delta_cal at every step)
    assert canary.kl.conditional == pytest.approx(canary.rho, rel=1e-9)


def test_fdp_admm_ellipsoid_passes_in_the_mahalanobis_metric():
    report = _audit(SCENARIOS / "total_budget_ellipsoid.yaml",
                    ["data.n_samples=400", "federation.num_clients=4", "algorithm.rounds=20"], steps=5)
    assert report.algorithm == "FDP-ADMM (ellipsoid clip)"
    _passes(report)
    assert report.pairs[0].ratio.max() == pytest.approx(1.0, abs=1e-9)


def _fpca_scenario():
    return parse_any_scenario({
        "name": "audit_fpca", "seed": 0,
        "data": {"kind": "paper_simulation", "n_samples": 300, "grid_points": 40},
        "federation": {"num_clients": 3},
        "basis": {"kind": "federated_dp", "n_components": 3, "pre_basis": "bspline", "pre_basis_size": 10,
                  "clip_cb": 3.0, "eps": 1.0, "delta": 1e-6},
        "algorithm": {"kind": "fdp_admm", "rounds": 3},
        "privacy": {"enabled": True, "mode": "per_round", "eps": 0.5, "delta": 1e-5}})


def test_federated_dp_fpca_passes():
    report = _audit(_fpca_scenario(), None, steps=1, trials=100, relations="calibrated", fpca=True)
    assert report.algorithm == "federated DP-FPCA"
    _passes(report)


DP_ADMM = SCENARIOS / "dp_admm_breast_cancer.yaml"


@pytest.mark.parametrize("kind", ["dp_admm", "dp_acc_admm"])
def test_gradient_admm_replace_one_passes_and_the_adversarial_state_is_tight(kind):
    report = _audit(DP_ADMM, [f"algorithm.kind={kind}", "algorithm.neighbouring=replace_one",
                              "algorithm.rounds=10"], steps=4)
    _passes(report)
    # at the adversarial public state the bent canary's logistic gradients saturate: 2 c sin(89 deg) / m
    assert report.pairs[0].probe_ratio == pytest.approx(SIN_BEND, rel=1e-9)


@pytest.mark.parametrize("kind", ["dp_admm", "dp_acc_admm"])
def test_gradient_admm_add_remove_passes(kind):
    """The calibrated relation of the shipped DP-ADMM scenarios (add/remove)."""
    report = _audit(DP_ADMM, [f"algorithm.kind={kind}", "algorithm.rounds=10"], steps=4)
    _passes(report)


@pytest.mark.parametrize("name, overrides", [
    ("p2p_lad_zcdp_nfl.yaml", []),
    ("p2p_lad_dp_nfl.yaml", []),
    ("p2p_lad_grad_nfl.yaml", []),
    ("p2p_elastic_net_zcdp_nfl.yaml", []),
    ("p2p_lad_zcdp_nfl.yaml", ["algorithm.anchor=neighbourhood_average"]),
    ("p2p_ridge_p_admm.yaml", []),
])
def test_peer_to_peer_linearized_algorithms_pass(name, overrides):
    report = _audit(SCENARIOS / name, P2P_SMALL + overrides, steps=4)
    _passes(report)
    assert report.pairs[0].ratio.max() > 0.5  # the canary moves the release by a good part of the bound


def test_pr_admm_passes():
    report = _audit(SCENARIOS / "p2p_breast_cancer_pr_admm.yaml",
                    ["data.samples_per_node=40", "privacy.mode=per_round", "privacy.eps=1"], steps=3, trials=12)
    assert report.algorithm == "PR-ADMM"
    _passes(report)


ANCHOR = ["algorithm.rho=0.03", "algorithm.step.eta0=5"]  # the setting of benchmarks/p2p_nfl_anchor.py


def test_private_anchor_variant_fails_the_audit():
    report = _audit(SCENARIOS / "p2p_lad_zcdp_nfl.yaml", P2P_SMALL + ANCHOR, steps=8, variant="private_anchor")
    assert not report.passed
    assert report.algorithm == "zCDP-NFL (private anchor, NOT DP)"
    canary = report.pairs[0]
    # the hidden iterate carries the data from step to step: the release moves by more than Lemma I's bound
    assert canary.ratio[0] <= 1 + 1e-9 < canary.ratio[-1]
    assert canary.kl.conditional > 2 * canary.rho
    assert any("measured sensitivity" in f and "step" in f and "zCDP-NFL (private anchor" in f
               for f in report.failures)
    assert any("Monte-Carlo KL" in f for f in report.failures)
    # the same scenario with the library's rule (anchor = the release) passes
    _passes(_audit(SCENARIOS / "p2p_lad_zcdp_nfl.yaml", P2P_SMALL + ANCHOR, steps=8))


def test_variant_only_for_zcdp_nfl():
    scenario = load_any_scenario(SCENARIOS / "p2p_lad_grad_nfl.yaml", P2P_SMALL)
    with pytest.raises(ValueError, match="zCDP-NFL variant"):
        protocol_for(scenario, variant="private_anchor")


# ------------------------------------------------------------------ command line
def test_cli_exit_status_and_message(tmp_path, capsys):
    from fdp_flower.cli import main

    out = tmp_path / "anchor.md"
    code = main(["audit", str(SCENARIOS / "p2p_lad_zcdp_nfl.yaml"), "--variant", "private_anchor", "--steps", "6",
                 "--trials", "12", "--transcripts", "2", "--no-steps", "--out", str(out),
                 *sum((["--set", o] for o in P2P_SMALL + ANCHOR), [])])
    captured = capsys.readouterr()
    assert code == 1
    assert "AUDIT FAILED: zCDP-NFL (private anchor, NOT DP): step" in captured.err
    assert "FAIL" in out.read_text()
    code = main(["audit", str(SCENARIOS / "p2p_lad_grad_nfl.yaml"), "--steps", "3", "--trials", "12",
                 "--transcripts", "2", "--no-steps", *sum((["--set", o] for o in P2P_SMALL), [])])
    assert code == 0
    assert "audit passed: zCDP-grad-NFL" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--set", "privacy.enabled=false"], "needs privacy.enabled: true"),
    (["--party", "99"], "party must be a client / node index in 0..4"),
    (["--steps", "0"], "steps must be >= 1"),
])
def test_cli_bad_input_is_one_line(args, message, capsys):
    from fdp_flower.cli import main

    code = main(["audit", str(DP_ADMM), "--trials", "8", *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error:") and message in err and "\n" not in err


# ------------------------------------------------------------------ acceptance: DP-ADMM figures
def _independent_pld_eps(noise_multiplier: float, releases: int, delta: float) -> float:
    """eps of ``releases`` Gaussian releases with this noise multiplier, by dp_accounting's PLD
    accountant called directly (not through the project's ledger)."""
    import dp_accounting
    from dp_accounting import pld

    acc = pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_accounting.GaussianDpEvent(noise_multiplier), releases)
    return float(acc.get_epsilon(delta))


def _dp_admm_figures_agree(relation: str):
    """The ledger's eps of a 6-round DP-ADMM run under ``relation`` lies between the independent PLD eps of
    the audit's measured worst-case sensitivity and of that sensitivity over sin(89 deg), the known gap of
    the bent canary (it attains 2 c sin(89 deg) / m at the adversarial state)."""
    from fdp_flower.engines.gradient_admm import run_scenario

    overrides = ["algorithm.rounds=6"]
    scenario = load_any_scenario(DP_ADMM, overrides)
    delta = scenario.privacy.delta
    report = _audit(DP_ADMM, overrides, steps=6, trials=12, relations="both")
    result, _problem, _ref = run_scenario(scenario, with_reference=False)
    # what the ledger reports for the audited client (0) under the relation
    ledger_eps = result.ledger.under_neighbouring(relation).summary(0, delta).eps_pld
    sigma = float(result.sigmas[0])
    measured = max(max(float(p.measured.max()), p.probe_ratio * float(p.calibrated[0]))
                   for p in report.pairs if p.relation == relation)
    rounds = scenario.algorithm.rounds
    low = _independent_pld_eps(sigma / measured, rounds, delta)
    high = _independent_pld_eps(sigma * SIN_BEND / measured, rounds, delta)
    assert low < high
    assert low * (1 - 1e-6) <= ledger_eps <= high * (1 + 1e-6), (relation, low, ledger_eps, high)


def test_dp_admm_replace_one_figure_agrees_with_dp_accounting_from_measured_sensitivity():
    _dp_admm_figures_agree("replace_one")


def test_dp_admm_add_remove_figure_agrees_with_dp_accounting_from_measured_sensitivity():
    _dp_admm_figures_agree("add_remove")


# ------------------------------------------------------------------ the noise actually drawn (the site function)
def test_spread_test_is_exact_chi_square_and_has_power_against_half_sigma():
    """X = sum ((v - vbar) / (sigma s))^2 ~ chi^2((N - 1) K) when the noise drawn is the noise charged: at level
    0.05 it rejects 5% of 4000 honest samples (binomial sd 0.0034, accepted within 4 sd); a sigma / 2 draw has
    ratio 1/4, below the lower bound 1 - 5.33 sqrt(2 / dof) of the audit's level for dof >= 40."""
    from fdp_flower.privacy.audit import noise_spread_test

    rng = np.random.default_rng(1)
    scales = np.array([1.0, 2.0, 0.5])
    honest = [noise_spread_test(5.0 + 0.7 * scales * rng.standard_normal((20, 3)), 0.7, scales, alpha=0.05)
              for _ in range(4000)]
    rate = np.mean([not t.passed for t in honest])
    assert abs(rate - 0.05) <= 4 * np.sqrt(0.05 * 0.95 / 4000)
    t = honest[0]
    assert t.dof == 57 and t.low == pytest.approx(stats.chi2.ppf(0.025, 57) / 57)
    assert t.high == pytest.approx(stats.chi2.ppf(0.975, 57) / 57)
    draws = rng.standard_normal((100, 2))
    assert noise_spread_test(draws, 1.0, alpha=1e-6).passed
    half = noise_spread_test(0.5 * draws, 1.0, alpha=1e-6)
    assert not half.passed and half.ratio == pytest.approx(0.25 * noise_spread_test(draws, 1.0).ratio)
    with pytest.raises(ValueError, match="releases must be"):
        noise_spread_test(np.zeros(3), 1.0)


SITE_FAMILIES = [  # (scenario, overrides, site module): every family, cut small
    ("quickstart.yaml", FDP_SMALL, "fdp_admm"),
    ("dp_admm_breast_cancer.yaml", ["algorithm.rounds=10"], "gradient_admm"),
    ("dp_admm_breast_cancer.yaml", ["algorithm.kind=dp_acc_admm", "algorithm.rounds=10"], "gradient_admm"),
    ("p2p_lad_zcdp_nfl.yaml", P2P_SMALL, "p2p"),
    ("p2p_lad_dp_nfl.yaml", P2P_SMALL, "p2p"),
    ("p2p_lad_grad_nfl.yaml", P2P_SMALL, "p2p"),
    ("p2p_ridge_p_admm.yaml", P2P_SMALL, "p2p"),
    ("p2p_breast_cancer_pr_admm.yaml", ["data.samples_per_node=40", "privacy.mode=per_round", "privacy.eps=1"], "p2p"),
]
FAMILY_IDS = ["fdp_admm", "dp_admm", "dp_acc_admm", "zcdp_nfl", "dp_nfl", "grad_nfl", "p_admm", "pr_admm"]


class _HalvedDraws:
    """A generator whose standard-normal draws are half the real ones (the site draws sigma / 2)."""

    def __init__(self, rng):
        self._rng = rng

    def standard_normal(self, *args, **kwargs):
        return 0.5 * self._rng.standard_normal(*args, **kwargs)


def _doubled_rows(family, module, data):
    """The site's rows with twice the clip (every row doubled)."""
    from dataclasses import replace

    if family == "fdp_admm":
        return replace(data, features=2.0 * data.features)
    if family == "gradient_admm":
        return module.SiteData(data.clients, tuple(2.0 * a for a in data.features), data.responses,
                               data.clipped_rows)
    return module.NodeData({k: (2.0 * f, y) for k, (f, y) in data.rows.items()})


def mutate_site(monkeypatch, family: str, mutant: str) -> None:
    """Mutants of the family's site function (``algorithms/<family>/site.py``):

    - ``half_noise``: it draws sigma / 2 while its ledger records sigma;
    - ``doubled_clip``: its data term is computed on rows clipped at 2 c (twice the calibrated sensitivity);
    - ``understated_sensitivity``: its calibration records Delta / 2 (and the sigma z Delta / 2 of that)."""
    import importlib

    module = importlib.import_module(f"fdp_flower.algorithms.{family}.site")
    real = module.answer
    if mutant == "half_noise":
        def answer(requests, data, plan, noise, **kw):
            return real(requests, data, plan, lambda events: _HalvedDraws(noise(events)), **kw)
        monkeypatch.setattr(module, "answer", answer)
    elif mutant == "doubled_clip":
        def answer(requests, data, plan, noise, **kw):
            return real(requests, _doubled_rows(family, module, data), plan, noise, **kw)
        monkeypatch.setattr(module, "answer", answer)
    elif mutant == "understated_sensitivity":
        calibration = module.SitePlan.calibration

        def halved(self, *args):
            sensitivity, sigma = calibration(self, *args)
            return sensitivity / 2, None if sigma is None else sigma / 2
        monkeypatch.setattr(module.SitePlan, "calibration", halved)
    else:
        raise ValueError(mutant)


def _site_audit(name, overrides, **kw):
    from fdp_flower.engines.audit import audit_site

    return audit_site(protocol_for(load_any_scenario(SCENARIOS / name, overrides)), steps=2, **kw)


@pytest.mark.parametrize("name, overrides, family", SITE_FAMILIES, ids=FAMILY_IDS)
def test_the_site_function_of_every_family_passes_and_its_canary_is_near_tight(name, overrides, family):
    report = _site_audit(name, overrides)
    assert report.passed, "\n".join(report.failures)
    assert {s.outcome for s in report.spreads} == {"released"}
    assert all(s.test.low <= s.test.ratio <= s.test.high for s in report.spreads)
    worst = max(r for w, r in report.sensitivity if w.startswith("canary"))
    # the worst-case canary moves the release by more than half the ledger's sensitivity (where the party's largest
    # row is clipped: by all of it up to sin(89 deg) of the bent pair and, for PR-ADMM's exact solve, the penalty's
    # curvature), so a data term twice its calibration shows above 1
    assert 0.5 < worst <= 1 + 1e-6, report.sensitivity


@pytest.mark.parametrize("mutant, message", [
    ("half_noise", "the released noise's variance is 0.2"),
    ("doubled_clip", "the site's release moves by"),
    ("understated_sensitivity", "the site's release moves by"),
])
@pytest.mark.parametrize("name, overrides, family", SITE_FAMILIES, ids=FAMILY_IDS)
def test_a_site_mutant_fails_the_audit_in_every_family(monkeypatch, name, overrides, family, mutant, message):
    """sigma / 2 drawn while the ledger records sigma: variance ratio ~1/4 (acceptance [0.5, 1.6] at 2 x 100
    releases); a data term twice its calibration: the canary moves by ~2 x the ledger's sensitivity."""
    mutate_site(monkeypatch, family, mutant)
    report = _site_audit(name, overrides)
    assert not report.passed
    assert any(message in f for f in report.failures), "\n".join(report.failures)


@pytest.mark.parametrize("mutant", ["half_noise", "doubled_clip"])
@pytest.mark.parametrize("name, overrides, family", SITE_FAMILIES, ids=FAMILY_IDS)
def test_fdp_flower_audit_fails_on_a_site_mutant_that_the_transcript_checks_miss(monkeypatch, capsys, name, overrides,
                                                                                 family, mutant):
    """``fdp-flower audit`` exits 1 on either mutant of every family; the transcript checks alone (sensitivity,
    KL and eps bound of the audit's own noise-free releases, which do not go through the site's draw) pass it:
    only the site-function checks catch it."""
    from fdp_flower.cli import main

    mutate_site(monkeypatch, family, mutant)
    code = main(["audit", str(SCENARIOS / name), "--steps", "2", "--trials", "8", "--transcripts", "2", "--no-steps",
                 *sum((["--set", o] for o in overrides), [])])
    err = capsys.readouterr().err
    assert code == 1
    failures = [line for line in err.splitlines() if line.startswith("AUDIT FAILED")]
    assert failures and all("the released noise's variance" in f or "the site's release moves by" in f
                            for f in failures), err


def _adds_the_point(monkeypatch, family):
    """A mutant site that releases its noisy term plus the point it was sent (a primal-like release, as FDP-ADMM's
    client once did): a point of 1.5 * 2^59 then rounds the noise away."""
    import importlib
    from dataclasses import replace

    module = importlib.import_module(f"fdp_flower.algorithms.{family}.site")
    real, key = module.answer, "x_hat" if family == "gradient_admm" else "point"

    def answer(requests, data, plan, noise, **kw):
        out = real(requests, data, plan, noise, **kw)
        return [o if isinstance(o, Exception) else replace(o, value=o.value + np.asarray(r.public[key], dtype=float))
                for o, r in zip(out, requests)]
    monkeypatch.setattr(module, "answer", answer)


@pytest.mark.parametrize("name, overrides, family", SITE_FAMILIES, ids=FAMILY_IDS)
def test_adversarial_mode_every_crafted_value_is_refused_or_keeps_the_ledgers_spread(monkeypatch, name, overrides,
                                                                                     family):
    """Every public value of the request replaced by 1e300, +-1e300, 2e100, 1e100, 1.5 * 2^59, subnormals, NaN,
    inf, zero and the wrong shape: refused with nothing charged, or released with the ledger's spread.  The
    non-finite, out-of-bound and misshapen values are refused in every family (subnormals by the peer-to-peer
    node; FDP-ADMM and DP-ADMM release their bounded data term there, with the ledger's spread).  A mutant that
    adds the point to its release passes the start state but fails here (the noise rounds away at 1.5 * 2^59)."""
    report = _site_audit(name, overrides, adversarial=True)
    assert report.passed, "\n".join(report.failures)
    crafted = {s.where: s for s in report.spreads if ", " in s.where}
    for where, s in crafted.items():
        if any(bad in where for bad in ("= 1e300", "= +-1e300", "2 x the magnitude bound", "NaN", "= inf",
                                        "wrong shape")) or (family == "p2p" and "subnormal" in where):
            assert s.outcome == "refused", where
    assert any(s.outcome == "released" and "1.5 * 2^59" in w for w, s in crafted.items())
    _adds_the_point(monkeypatch, family)
    assert _site_audit(name, overrides).passed  # at the start state the point is 0
    mutant = _site_audit(name, overrides, adversarial=True)
    assert any("1.5 * 2^59" in f and "variance is" in f for f in mutant.failures), "\n".join(mutant.failures)


def test_adversarial_mode_switched_losses_are_refused_or_calibrated(monkeypatch):
    """A server that switches FDP-ADMM's loss: the logistic loss on the site's real-valued responses is refused on
    the site (its G = c1 assumes labels in {-1, +1}); the absolute and squared losses are released with the
    sensitivity and spread the ledger records.  A mutant site that skips the label check releases under the
    logistic loss and fails: its release moves by many times the calibrated 2 c1 / m."""
    from fdp_flower.core.losses import LogisticLoss
    from fdp_flower.engines.audit import switched_loss_audits

    scenario = load_any_scenario(SCENARIOS / "quickstart.yaml", FDP_SMALL)
    results = {r.loss: r for r in switched_loss_audits(scenario)}
    assert set(results) == {"absolute", "logistic", "squared"}
    assert results["logistic"].outcome == "refused" and "labels in {-1, +1}" in results["logistic"].reason
    for kind in ("absolute", "squared"):
        assert results[kind].outcome == "released" and results[kind].site.passed, results[kind].site.failures
    monkeypatch.setattr(LogisticLoss, "check_response", lambda self, response: None)
    mutant = {r.loss: r for r in switched_loss_audits(scenario)}["logistic"]
    assert mutant.outcome == "released" and not mutant.site.passed
    assert any(f.startswith("loss switched to logistic:") and "moves by" in f for f in mutant.site.failures)


def test_cli_adversarial_mode_passes_on_the_real_code(capsys):
    from fdp_flower.cli import main

    code = main(["audit", str(SCENARIOS / "p2p_breast_cancer_pr_admm.yaml"), "--steps", "2", "--trials", "8",
                 "--transcripts", "2", "--no-steps", "--adversarial", "--set", "data.samples_per_node=40",
                 "--set", "privacy.mode=per_round", "--set", "privacy.eps=1"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "neighbour_sum = 1.5 * 2^59" in out and "Losses switched by the server" in out
