"""The budget guard: a release that would exceed the total budget is never made."""
import logging

import numpy as np
import pytest

from fdp_flower.algorithms.fdp_admm.config import parse_scenario
from fdp_flower.privacy import BudgetExhausted, BudgetGuard, GaussianRelease, PrivacyLedger

DELTA = 1e-5


def guarded_loop(guard, ledger, rounds, sens, sigma):
    """What an engine does: check before releasing, record after (same sigma for every client)."""
    for t in range(1, rounds + 1):
        planned = [GaussianRelease(c, t, float(sens[c]), float(sigma[t - 1])) for c in range(len(sens))]
        try:
            guard.check(planned)
        except BudgetExhausted as exc:
            return t, exc
        ledger.record_many(planned)
    return None, None


@pytest.mark.parametrize("accountant", ["pld", "rdp", "zcdp"])
def test_guard_stops_before_the_release_that_would_exceed(accountant):
    rng = np.random.default_rng(3)
    sigma = 0.02 * rng.uniform(3.0, 6.0, 12)
    sens = np.array([0.01, 0.02])  # client 1 (more sensitive) spends more
    # reference: eps of client 1 after each round, by the same accountant
    probe = PrivacyLedger([GaussianRelease(1, t, float(sens[1]), float(sigma[t - 1])) for t in range(1, 13)])
    if accountant == "pld":
        eps_after = [p.eps_pld for p in probe.epsilon_curve(1, DELTA)]
    else:
        eps_after = [BudgetGuard(probe, 1.0, DELTA, accountant).epsilon(probe.of_client(1, t)) for t in range(1, 13)]
    budget = 0.5 * (eps_after[7] + eps_after[8])  # between rounds 8 and 9
    ledger = PrivacyLedger()
    guard = BudgetGuard(ledger, budget, DELTA, accountant)
    stopped, exc = guarded_loop(guard, ledger, 12, sens, sigma)
    assert stopped == 9
    assert exc.client == 1 and exc.round == 9 and exc.last_round == 8
    # the guard composes round by round: equal to the ledger's composition up to the PLD's rounding
    assert exc.eps_after == pytest.approx(eps_after[8], rel=1e-6) and exc.eps_after > budget
    assert "round 9" in exc.reason and "stopped before it" in exc.reason and accountant in exc.reason
    assert ledger.rounds == list(range(1, 9))  # nothing of round 9 was recorded
    report = guard.report()
    assert report.refused == exc.reason
    assert report.worst_client == 1 and 0 <= report.remaining < budget
    assert report.worst_eps == pytest.approx(eps_after[7], rel=1e-7)  # PLD vs its closed form


def test_guard_never_lets_spend_exceed_the_budget():
    rng = np.random.default_rng(5)
    for _ in range(3):
        z = rng.uniform(2.0, 10.0, 12)
        budget = float(rng.uniform(0.3, 2.0))
        ledger = PrivacyLedger()
        guard = BudgetGuard(ledger, budget, DELTA, "rdp")
        guarded_loop(guard, ledger, 12, np.array([1.0]), z)
        assert ledger.summary(0, DELTA, with_pld=False).eps_rdp <= budget


def test_guard_arguments():
    with pytest.raises(ValueError, match="eps_total"):
        BudgetGuard(PrivacyLedger(), 0.0, DELTA)
    with pytest.raises(ValueError, match="accountant"):
        BudgetGuard(PrivacyLedger(), 1.0, DELTA, "moments")
    assert BudgetGuard(PrivacyLedger(), 1.0, DELTA).refusal([]) is None


SMALL = {"data": {"n_samples": 1500}, "federation": {"num_clients": 3}, "algorithm": {"rounds": 8},
         "basis": {"kind": "fixed", "n_components": 4}, "privacy": {"eps": 0.5, "delta": 1e-5}}


def test_engine_stops_cleanly_before_exceeding(caplog):
    from fdp_flower.cli.privacy import fdp_admm_ledger
    from fdp_flower.engines.inprocess import run_fdp_admm

    sc = parse_scenario(SMALL)
    full, _ = fdp_admm_ledger(sc)  # the releases the run would make, without training
    worst = full.worst_case(DELTA).client
    eps = [full.summary(worst, DELTA, up_to_round=t).eps_pld for t in range(1, 9)]
    budget = 0.5 * (eps[4] + eps[5])  # rounds 1-5 fit, round 6 would not
    with caplog.at_level(logging.WARNING):
        result = run_fdp_admm(sc, with_reference=False, total_budget=(budget, DELTA))
    assert "round 6" in result.stop_reason and "exhausted" in result.stop_reason
    assert [row["round"] for row in result.history] == [1, 2, 3, 4, 5]  # history kept
    assert result.ledger.rounds == [1, 2, 3, 4, 5]
    assert result.ledger.worst_case(DELTA).eps_pld <= budget
    assert np.all(np.isfinite(result.state.global_w))
    assert any("exhausted" in r.getMessage() for r in caplog.records)


def test_engine_total_mode_completes_within_budget():
    from fdp_flower.engines.inprocess import run_fdp_admm

    sc = parse_scenario({**SMALL, "privacy": {"mode": "total", "eps": 1.0, "delta": 1e-5,
                                              "schedule": {"kind": "periodic", "decay": 0.8, "period": 2}}})
    result = run_fdp_admm(sc, with_reference=False)
    assert result.stop_reason == "completed" and len(result.history) == 8
    assert 0.97 <= result.ledger.worst_case(DELTA).eps_pld <= 1.0


def _counting_rho(monkeypatch) -> list[int]:
    """Count every read of a release's zcdp_rho (the unit of accounting work)."""
    from fdp_flower.privacy.ledger import GaussianRelease

    reads = [0]
    real = GaussianRelease.zcdp_rho.fget

    def counted(self):
        reads[0] += 1
        return real(self)
    monkeypatch.setattr(GaussianRelease, "zcdp_rho", property(counted))
    return reads


@pytest.mark.parametrize("done", [10, 3000])
def test_per_round_accounting_is_o1_in_the_rounds_done(done, monkeypatch):
    """The guard's check and the per-round privacy columns read each release once (the ledger's running rho),
    so one more round costs the same after 10 rounds as after 3000 (issue 30: 5000 rounds took 91 s)."""
    from fdp_flower.algorithms.fdp_admm.plan import privacy_columns
    from fdp_flower.privacy.guard import BudgetGuard
    from fdp_flower.privacy.ledger import GaussianRelease, PrivacyLedger, epsilon_of_rho, rdp_epsilon

    ledger = PrivacyLedger([GaussianRelease(c, t, 0.1, 2.0) for t in range(1, done + 1) for c in range(3)])
    guard = BudgetGuard(eps_total=1e9, delta_total=1e-5, ledger=ledger)
    reads = _counting_rho(monkeypatch)
    privacy_columns(ledger, 1e-5)  # indexes the ledger once
    planned = [GaussianRelease(c, done + 1, 0.1, 2.0) for c in range(3)]
    reads[0] = 0
    guard.check(planned)
    ledger.record_many(planned)
    columns = privacy_columns(ledger, 1e-5)
    assert reads[0] <= 2 * len(planned), reads[0]  # the planned releases, then their entry into the index
    # the same figures as composing every release
    releases = ledger.of_client(0)
    rho = sum(r.zcdp_rho for r in releases)
    assert columns["zcdp_rho"] == pytest.approx(rho, rel=1e-12)
    assert columns["eps_pld"] == pytest.approx(epsilon_of_rho(rho, 1e-5), rel=1e-12)
    assert columns["eps_rdp"] == pytest.approx(rdp_epsilon(releases, 1e-5), rel=1e-9)
