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
