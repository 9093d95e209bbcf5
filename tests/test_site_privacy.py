"""The site's side of the guarantee (fast): its node-config policy, its noise, its on-disk ledger.

The pure parts (:mod:`fdp_flower.privacy.site_policy`, :mod:`fdp_flower.privacy.site_ledger`) and
the real ClientApp (``fdp_flower.client_app.train`` / ``query``) on a node-local file, called the
way a SuperNode calls it.  The deployment tests with a real SuperLink are in
tests/test_site_privacy_deployment.py.

Statistical checks use the chi-square distribution of a sum of squared N(0, sigma^2) draws,
two-sided at total level 1e-6: they fail by chance once in a million runs.
"""
from __future__ import annotations

import json
import os
import stat
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from fdp_flower.algorithms.fdp_admm.config import parse_scenario
from fdp_flower.algorithms.fdp_admm.plan import build_basis, build_objective, site_plan
from fdp_flower.algorithms.fdp_admm.site import site_features
from fdp_flower.algorithms.protocol import SiteRequest
from fdp_flower.functional import design, federated_fpca
from fdp_flower.functional.node_files import read_node_file, write_node_file
from fdp_flower.privacy import GaussianRelease, pld_epsilon
from fdp_flower.privacy.mechanisms import release_rng
from fdp_flower.privacy.site_ledger import SiteLedger, SiteLedgerError
from fdp_flower.privacy.site_policy import (
    SiteNoise,
    SitePolicy,
    SitePolicyError,
    SiteRefusal,
    SiteRelease,
    secret_release_rng,
    site_totals,
)
from fdp_flower.wire import pack_requests
from tests.test_faults import task_identity  # noqa: F401  (autouse fixture: Flower's task identity)

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict

ALPHA = 1e-6  # total two-sided level of every chi-square check
K, M_I, RUN = 6, 40, 4242


def chi2_bounds(df: int) -> tuple[float, float]:
    return float(stats.chi2.ppf(ALPHA / 2, df)), float(stats.chi2.ppf(1 - ALPHA / 2, df))


def release(client=0, round_=1, sigma=1.0, sensitivity=0.1, mechanism="fdp_admm_primal") -> GaussianRelease:
    return GaussianRelease(client, round_, sensitivity, sigma, mechanism=mechanism)


# ------------------------------------------------------------------ policy
def test_policy_defaults_and_one_line_errors(tmp_path):
    p = SitePolicy.from_node_config({"partition-id": 0, "data-path": "/x.npz"})  # other keys are not the policy's
    assert (p.max_eps, p.max_delta, p.neighbouring, p.allow_nonprivate, p.allow_seeded_noise) == \
        (10.0, 1e-5, "replace_one", False, False)
    assert p.ledger_path({"FLWR_HOME": str(tmp_path)}) == tmp_path / "fdp-flower-site" / "site-ledger.jsonl"
    assert SitePolicy.from_node_config({"ledger-dir": str(tmp_path / "l")}).ledger_path() == \
        tmp_path / "l" / "site-ledger.jsonl"
    for config, message in [({"max-eps": 0}, "max-eps: Input should be greater than 0"),
                            ({"max-eps": "lots"}, "max-eps: Input should be a valid number"),
                            ({"max-delta": 1.5}, "max-delta: Input should be less than 1"),
                            ({"neighbouring": "add_one"}, "neighbouring: Input should be 'replace_one' or"),
                            ({"allow-nonprivate": "maybe"}, "allow-nonprivate: Input should be a valid boolean"),
                            ({"max_eps": 100}, "node config key 'max_eps' is not known; did you mean 'max-eps'?"),
                            ({"allow-seeded-noise": True, "noise-secret-file": "s"}, "exclusive: choose one")]:
        with pytest.raises(SitePolicyError, match=message) as info:
            SitePolicy.from_node_config(config)
        assert "\n" not in str(info.value)


# ------------------------------------------------------------------ the noise-source rule
def test_seeded_noise_on_node_local_data_is_refused_without_the_sites_opt_in():
    noise = SiteNoise.of(SitePolicy())
    with pytest.raises(SiteRefusal) as info:
        noise.release_rng("seeded", node_local=True, run_seed=0, run_id=RUN, client=0, round_=1)
    assert str(info.value) == ("seeded noise on node-local data is refused: the server knows the run seed; set "
                               "allow-seeded-noise=true in the node config only for reproducibility tests")
    # the site decides for node-local data, whatever the run asks for
    assert noise.source("seeded", node_local=True) == "os_entropy"
    assert noise.source("os_entropy", node_local=True) == "os_entropy"
    # public (simulated) data keep the run's source: the seeded draws every engine shares
    assert noise.source("seeded", node_local=False) == "seeded"
    np.testing.assert_array_equal(
        noise.release_rng("seeded", node_local=False, run_seed=7, run_id=RUN, client=2, round_=3).standard_normal(5),
        release_rng(7, 2, 3).standard_normal(5))
    # the opt-in: the run's choice, i.e. the run seed's noise
    opted = SiteNoise.of(SitePolicy(allow_seeded_noise=True))
    assert opted.source("seeded", node_local=True) == "seeded"
    np.testing.assert_array_equal(
        opted.release_rng("seeded", node_local=True, run_seed=7, run_id=RUN, client=2, round_=3).standard_normal(5),
        release_rng(7, 2, 3).standard_normal(5))


def test_os_entropy_draws_differ_between_identical_requests():
    noise = SiteNoise.of(SitePolicy())
    draws = [noise.release_rng("os_entropy", node_local=True, run_seed=7, run_id=RUN, client=0,
                               round_=1).standard_normal(4) for _ in range(2)]
    assert not np.allclose(draws[0], draws[1])


def test_secret_noise_is_reproducible_by_the_site_only(tmp_path):
    secret = tmp_path / "site.secret"
    secret.write_bytes(bytes(range(32)))
    noise = SiteNoise.of(SitePolicy(noise_secret_file=str(secret)))
    assert noise.source("seeded", node_local=True) == "secret"
    draw = lambda run, client, rnd: noise.release_rng("secret", node_local=True, run_seed=7, run_id=run,  # noqa: E731
                                                      client=client, round_=rnd).standard_normal(8)
    np.testing.assert_array_equal(draw(RUN, 0, 1), draw(RUN, 0, 1))  # the site can regenerate its own noise
    for other in (draw(RUN + 1, 0, 1), draw(RUN, 1, 1), draw(RUN, 0, 2), release_rng(7, 0, 1).standard_normal(8)):
        assert not np.allclose(other, draw(RUN, 0, 1))  # a new run, client, round -- and not the run seed's
    other_secret = tmp_path / "other.secret"
    other_secret.write_bytes(bytes(range(1, 33)))
    assert not np.allclose(SiteNoise.of(SitePolicy(noise_secret_file=str(other_secret))).release_rng(
        "secret", node_local=True, run_seed=7, run_id=RUN, client=0, round_=1).standard_normal(8), draw(RUN, 0, 1))
    short = tmp_path / "short.secret"
    short.write_bytes(b"1234")
    with pytest.raises(SitePolicyError, match="holds 4 bytes; a secret needs at least 16"):
        SiteNoise.of(SitePolicy(noise_secret_file=str(short)))
    with pytest.raises(SitePolicyError, match="missing.secret"):
        SiteNoise.of(SitePolicy(noise_secret_file=str(tmp_path / "missing.secret")))
    np.testing.assert_array_equal(secret_release_rng(5, 1, 2, 3).standard_normal(3),
                                  secret_release_rng(5, 1, 2, 3).standard_normal(3))


# ------------------------------------------------------------------ the ledger file
def exact_gaussian_eps(releases, delta):
    """eps(delta) of composed Gaussians in closed form: one Gaussian of multiplier z = (sum z_t^-2)^-1/2,
    delta(eps) = Phi(1/(2z) - eps z) - e^eps Phi(-1/(2z) - eps z) (Balle & Wang 2018, Theorem 8)."""
    from scipy.optimize import brentq

    z = sum((r.sensitivity / r.sigma) ** 2 for r in releases) ** -0.5
    def gap(eps):
        return stats.norm.cdf(0.5 / z - eps * z) - np.exp(eps) * stats.norm.cdf(-0.5 / z - eps * z) - delta

    return brentq(gap, 0.0, 100.0)



def entry(run=RUN, **kw) -> SiteRelease:
    return SiteRelease(run, release(**kw), "os_entropy", "sha256:x", "2025-01-01T00:00:00Z")


def test_ledger_is_append_only_and_totals_are_the_pld_accountants(tmp_path):
    ledger = SiteLedger(tmp_path / "site" / "site-ledger.jsonl")
    policy = SitePolicy(max_eps=50.0)
    assert ledger.read() == [] and not ledger.path.exists()
    before = b""
    for rnd in (1, 2, 3):
        totals = ledger.charge(entry(round_=rnd, sigma=0.5 + rnd), policy)
        now = ledger.path.read_bytes()
        assert now.startswith(before) and now.count(b"\n") == 1 + rnd  # earlier lines never change (1: "open")
        before = now
    assert stat.S_IMODE(ledger.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(ledger.path.parent.stat().st_mode) == 0o700
    # a resumed run (new Flower run id) re-releases round 3: charged next to the original
    totals = ledger.charge(entry(run=RUN + 1, round_=3, sigma=3.5), policy)
    releases = [release(round_=r, sigma=0.5 + r) for r in (1, 2, 3)] + [release(round_=3, sigma=3.5)]
    assert totals.releases == 4 and totals.run_releases == 1
    # the PLD accountant of the server's ledger: release by release there, as one exact Gaussian here
    assert totals.eps == pytest.approx(pld_epsilon(releases, 1e-5), rel=1e-6)
    assert totals.eps <= pld_epsilon(releases, 1e-5) * (1 + 1e-12)
    assert totals.eps == pytest.approx(exact_gaussian_eps(releases, 1e-5), abs=2e-4)  # discretization 1e-4
    assert totals.run_eps == pytest.approx(pld_epsilon(releases[3:], 1e-5), rel=1e-12)
    assert totals == ledger.totals(policy, RUN + 1)  # what a restarted node reads back
    # the site's own relation: the ledger keeps the computed (replace-one) events and converts them
    add_remove = site_totals(ledger.read(), SitePolicy(max_eps=50.0, neighbouring="add_remove"), RUN)
    assert add_remove.eps == pytest.approx(pld_epsilon([r.under("add_remove") for r in releases], 1e-5), rel=1e-6)
    # a mean over m rows moves as far when a row is removed as when one is replaced: same eps
    assert add_remove.eps == totals.eps and add_remove.neighbouring == "add_remove"
    rows = [json.loads(line) for line in ledger.path.read_text().splitlines()]
    assert [row["kind"] for row in rows] == ["open"] + ["release"] * 4
    assert [row["round"] for row in rows[1:]] == [1, 2, 3, 3]


def test_a_refused_release_leaves_the_ledger_byte_identical(tmp_path):
    ledger = SiteLedger(tmp_path / "site" / "site-ledger.jsonl")
    one, two = (pld_epsilon([release(sigma=1.0)] * n, 1e-5) for n in (1, 2))
    policy = SitePolicy(max_eps=(one + two) / 2)  # room for one release of this size, not two
    ledger.charge(entry(round_=1), policy)
    snapshot, head = ledger.path.read_bytes(), ledger.head_path.read_bytes()
    with pytest.raises(SiteRefusal, match=r"round 2 would bring the site's eps to [\d.]+ > max-eps [\d.]+ at delta "
                                          r"1e-05 \(replace_one, PLD; [\d.]+ spent in 1 releases\)"):
        ledger.charge(entry(round_=2), policy)
    assert ledger.path.read_bytes() == snapshot
    with pytest.raises(SiteRefusal, match=f"re-release: run {RUN} already received client 0's fdp_admm_primal "
                                          "release of round 1"):
        ledger.charge(entry(round_=1, sigma=1e6), SitePolicy(max_eps=100.0))  # even with more noise
    assert ledger.path.read_bytes() == snapshot and ledger.head_path.read_bytes() == head
    assert ledger.charge(entry(round_=1, client=1, sigma=1e3), SitePolicy(max_eps=100.0)).releases == 2


def test_a_failed_fsync_releases_nothing_and_leaves_no_torn_line(tmp_path):
    """A full disk: nothing is released, and the ledger is cut back to its last complete line (the
    tamper-evident chain, the head, repair and reset: tests/test_site_ledger_chain.py)."""
    def broken(fd):
        raise OSError(28, "No space left on device")

    ledger = SiteLedger(tmp_path / "site" / "site-ledger.jsonl", fsync=broken)
    with pytest.raises(SiteLedgerError, match=r"could not write it \(No space left on device\); nothing was released"):
        ledger.charge(entry(), SitePolicy())
    assert not ledger.path.exists() and not ledger.head_path.exists()
    good = SiteLedger(ledger.path, ledger.head_path)
    good.charge(entry(round_=1), SitePolicy())
    snapshot, head = ledger.path.read_bytes(), ledger.head_path.read_bytes()

    def ledger_fsync_fails(fd):  # the ledger's disk is full, the head's is not
        if os.readlink(f"/proc/self/fd/{fd}") == str(ledger.path):
            raise OSError(28, "No space left on device")
        os.fsync(fd)

    with pytest.raises(SiteLedgerError, match="could not record the release .*nothing was released$"):
        SiteLedger(ledger.path, ledger.head_path, fsync=ledger_fsync_fails).charge(entry(round_=2), SitePolicy())
    assert ledger.path.read_bytes() == snapshot and ledger.head_path.read_bytes() == head  # cut back: no torn line
    assert good.charge(entry(round_=2), SitePolicy()).releases == 2


# ------------------------------------------------------------------ the real ClientApp on a node-local file
def node_file(tmp_path, seed=4):
    data = design.simulate_slice(seed, 0, M_I, tau=0.5, grid=np.linspace(0, 1, 21))
    return write_node_file(tmp_path / "node0.npz", data)


def node_scenario(**privacy):
    return parse_scenario({"seed": 9, "data": {"kind": "node_files", "grid_points": 21},
                           "federation": {"num_clients": 2}, "basis": {"kind": "fixed", "n_components": K},
                           "algorithm": {"rounds": 3}, "privacy": privacy})


def context(path, ledger_dir, run_id=RUN, **site) -> Context:
    return Context(run_id=run_id, node_id=5, node_config={"partition-id": 0, "num-partitions": 2,
                                                          "data-path": str(path), "ledger-dir": str(ledger_dir),
                                                          **site},
                   state=RecordDict(), run_config={})


def train_message(sc, round_, *, point=None) -> Message:
    """The server's request for client 0's release at ``point`` (default: 0), with the basis."""
    basis = build_basis(sc)
    request = SiteRequest(None, round_, {"point": np.zeros(K) if point is None else point})
    content = pack_requests([request], {}, {f"basis_{k}": v for k, v in basis.to_arrays().items()})
    return Message(content, dst_node_id=5, message_type=MessageType.TRAIN)


def call_train(monkeypatch, sc, ctx, msg):
    from fdp_flower import client_app

    monkeypatch.setattr(client_app, "run_scenario", lambda _ctx: sc)
    return client_app.train(msg, ctx)


def noise_free_term(sc, path, round_):
    """What the server could compute if it held the site's data: the descent term at 0 without noise,
    and the release's sigma."""
    data = read_node_file(path)
    basis = build_basis(sc)
    features, _ = site_features(sc, basis, data)
    _sensitivity, sigma = site_plan(sc, basis).calibration(round_, features.shape[0])
    term = -build_objective(sc).loss.mean_subgradient(np.zeros(K), features, data.response)
    return term, float(sigma)


def test_the_ledger_line_is_fsynced_before_the_noise_is_drawn(tmp_path, monkeypatch):
    from fdp_flower.clients.site import SiteSession

    events = []
    real_fsync, real_noise_for = os.fsync, SiteSession.noise_for
    ledger_path = tmp_path / "ledger" / "site-ledger.jsonl"
    head_dir = tmp_path / "ledger-head"

    def on_disk():  # (lines in the ledger, lines its head records)
        heads = list(head_dir.glob("*.head.json"))
        return (ledger_path.read_text().count("\n") if ledger_path.exists() else 0,
                json.loads(heads[0].read_text())["count"] if heads else None)

    def fsync(fd):
        real_fsync(fd)
        name = os.readlink(f"/proc/self/fd/{fd}")
        what = "ledger" if name == str(ledger_path) else "head" if ".head.json" in name else f"dir {Path(name).name}"
        events.append(("fsync", what, *on_disk()))

    class Watched:
        """The site's generator, noting when the noise is drawn."""

        def __init__(self, rng):
            self.rng = rng

        def standard_normal(self, *args, **kw):
            events.append(("noise", "", *on_disk()))
            return self.rng.standard_normal(*args, **kw)

    def noise_for(self, releases):
        return Watched(real_noise_for(self, releases))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(SiteSession, "noise_for", noise_for)
    sc, path = node_scenario(), node_file(tmp_path)
    reply = call_train(monkeypatch, sc, context(path, tmp_path / "ledger"), train_message(sc, 1))
    assert not reply.has_error()
    # a new site: an empty head, the ledger's "open" and release lines and its directory entry, the head of
    # those 2 lines; only then -- with the line and the head on disk -- the noise; the reply comes last
    assert events == [("fsync", "head", 0, None), ("fsync", "dir ledger-head", 0, 0),
                      ("fsync", "ledger", 2, 0), ("fsync", "dir ledger", 2, 0),
                      ("fsync", "head", 2, 0), ("fsync", "dir ledger-head", 2, 2), ("noise", "", 2, 2)]

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    events.clear()
    monkeypatch.setattr(os, "fsync", full_disk)
    reply = call_train(monkeypatch, sc, context(path, tmp_path / "ledger"), train_message(sc, 2))
    assert reply.has_error() and "could not record the release" in reply.error.reason
    assert events == []  # no noise drawn, no value released


def test_the_site_refuses_less_noise_more_rounds_a_re_release_and_privacy_off(tmp_path, monkeypatch):
    sc, path = node_scenario(), node_file(tmp_path)
    ledger = tmp_path / "ledger" / "site-ledger.jsonl"
    plan = site_plan(sc, build_basis(sc))
    events = [GaussianRelease(0, r, *(float(v) for v in plan.calibration(r, M_I)), mechanism="fdp_admm_subgradient")
              for r in (1, 2, 3)]
    two, three = pld_epsilon(events[:2], 1e-5), pld_epsilon(events, 1e-5)
    site = {"max-eps": (two + three) / 2}  # two rounds fit, not three
    replies = [call_train(monkeypatch, sc, context(path, ledger.parent, **site), train_message(sc, r)) for r in (1, 2)]
    assert not any(r.has_error() for r in replies)
    reported = dict(replies[1].content["site"])
    assert reported["releases"] == reported["run-releases"] == 2
    assert reported["eps"] == pytest.approx(two, rel=1e-12)
    assert (reported["neighbouring"], reported["delta"], reported["noise-source"]) == \
        ("replace_one", 1e-5, "os_entropy")
    snapshot = ledger.read_bytes()

    def refused(scenario, round_, **extra):
        reply = call_train(monkeypatch, scenario, context(path, ledger.parent, **{**site, **extra}),
                           train_message(scenario, round_))
        assert reply.has_error() and not reply.has_content()
        assert ledger.read_bytes() == snapshot  # nothing charged
        return reply.error.reason

    assert "round 3 would bring the site's eps to" in refused(sc, 3)  # past max-eps
    assert "re-release: run 4242 already received client 0's fdp_admm_subgradient release of round 2" in \
        refused(sc, 2)
    less_noise = node_scenario(eps=50.0)  # the server's run config asks for per-round eps 50: far less noise
    assert "would bring the site's eps to" in refused(less_noise, 3, **{"max-eps": 3.0})
    assert "site refuses FDP-ADMM releases without noise: set allow-nonprivate=true" in \
        refused(node_scenario(enabled=False), 3)
    assert "round 4 is outside 1..3" in refused(sc, 4)  # more rounds than calibrated
    reply = call_train(monkeypatch, node_scenario(enabled=False), context(path, ledger.parent, **{
        "allow-nonprivate": True}), train_message(sc, 3))
    assert not reply.has_error() and "site" in reply.content and ledger.read_bytes() == snapshot  # nothing to charge


def test_what_the_server_sends_per_message_does_not_change_sigma(tmp_path, monkeypatch):
    """sigma comes from the site's own m_i and the run's scenario; the point the server names only moves
    the noise-free term."""
    sc, path = node_scenario(), node_file(tmp_path)
    _term, sigma = noise_free_term(sc, path, 1)
    sigmas = []
    for run, scale in enumerate((0.0, 1e3, -1e6)):
        msg = train_message(sc, 1, point=np.full(K, scale))
        reply = call_train(monkeypatch, sc, context(path, tmp_path / "ledger", run_id=run), msg)
        sigmas.append(float(reply.content["metrics"]["sigma"][0]))
    assert sigmas == [pytest.approx(sigma, rel=1e-12)] * 3


def test_the_server_cannot_subtract_the_noise_of_a_node_local_release(tmp_path, monkeypatch):
    """The site's own noise (OS entropy): released term minus the noise-free term ~ N(0, sigma^2 I), fresh in
    every run (disjoint pairs of runs differ by N(0, 2 sigma^2 I), where a run-seeded draw would repeat exactly);
    with the site's seeded opt-in it is the run seed's draw to 1e-12 (the check can fail).

    (Subtracting the one seeded guess from all 20 releases would share that guess across them: the sum of
    squares would then carry 20 ||c||^2 with c one N(0, sigma^2 I) draw, not chi2(120), and exceed the chi2
    bound in about 2% of runs -- so each statistic below has independent terms.)"""
    sc, path = node_scenario(), node_file(tmp_path)
    truth, sigma = noise_free_term(sc, path, 1)
    seeded_noise = sigma * release_rng(sc.seed, 0, 1).standard_normal(K)
    noises = []
    for run in range(20):  # 20 independent releases: 120 degrees of freedom
        reply = call_train(monkeypatch, sc, context(path, tmp_path / "ledger", run_id=run), train_message(sc, 1))
        noises.append(reply.content["arrays"]["release"].numpy()[0] - truth)
    noises = np.asarray(noises)
    low, high = chi2_bounds(noises.size)
    assert low <= np.sum(np.square(noises)) / sigma**2 <= high
    pair_differences = noises[0::2] - noises[1::2]  # 10 disjoint pairs: 60 degrees of freedom
    low, high = chi2_bounds(pair_differences.size)
    assert low <= np.sum(np.square(pair_differences)) / (2 * sigma**2) <= high
    assert np.min(np.linalg.norm(noises - seeded_noise, axis=1)) > 1e-6 * sigma  # never the run seed's draw
    opted = call_train(monkeypatch, sc, context(path, tmp_path / "ledger-seeded", **{"allow-seeded-noise": True}),
                       train_message(sc, 1))
    np.testing.assert_allclose(opted.content["arrays"]["release"].numpy()[0] - seeded_noise, truth,
                               rtol=0, atol=1e-12)


def test_the_federated_fpca_summary_follows_the_same_rule(tmp_path, monkeypatch):
    """The setup reply's covariance summary: noise from OS entropy by default (the server's seeded guess
    is off by N(0, 2 sigma^2) in each of the B(B+1)/2 + B released entries), the run seed's with the opt-in."""
    from fdp_flower import client_app

    B = 8
    sc = parse_scenario({"seed": 9, "data": {"kind": "node_files", "grid_points": 21},
                         "federation": {"num_clients": 2},
                         "basis": {"kind": "federated_dp", "n_components": 3, "pre_basis_size": B}})
    monkeypatch.setattr(client_app, "run_scenario", lambda _ctx: sc)
    path = node_file(tmp_path)
    curves = read_node_file(path).curves
    pre = federated_fpca.scenario_pre_basis(sc, np.linspace(0, 1, 21))
    truth = federated_fpca.client_summary(pre.scores(curves), clip_cb=sc.basis.clip_cb, sigma=None, rng=None)
    seeded = federated_fpca.scenario_client_summary(sc, 0, curves, pre)  # the old code's noise, from the run seed
    upper = np.triu_indices(B)

    def released(ctx):
        query = Message(RecordDict({"config": ConfigRecord({"phase": "node-setup"})}), dst_node_id=5,
                        message_type=MessageType.QUERY)
        reply = client_app.query(query, ctx)
        assert not reply.has_error(), reply.error.reason if reply.has_error() else ""
        arrays = {k: v.numpy() for k, v in reply.content["arrays"].items()}
        return arrays, dict(reply.content["site"])

    arrays, site = released(context(path, tmp_path / "ledger"))
    residual = np.concatenate([(arrays["second_moment"] - (seeded.second_moment - truth.second_moment))[upper]
                               - truth.second_moment[upper],
                               arrays["mean"] - (seeded.mean - truth.mean) - truth.mean])
    low, high = chi2_bounds(residual.size)
    assert low <= np.sum(residual**2) / (2 * seeded.sigma**2) <= high
    assert site["releases"] == 1 and site["noise-source"] == "os_entropy"
    assert site["eps"] == pytest.approx(pld_epsilon([GaussianRelease(0, 0, seeded.sensitivity, seeded.sigma,
                                                                     mechanism="fpca_covariance")], 1e-5), rel=1e-12)
    arrays, site = released(context(path, tmp_path / "ledger-seeded", **{"allow-seeded-noise": True}))
    np.testing.assert_allclose(arrays["second_moment"], seeded.second_moment, rtol=0, atol=1e-12)
    np.testing.assert_allclose(arrays["mean"], seeded.mean, rtol=0, atol=1e-12)
    assert site["noise-source"] == "seeded"
    # the same setup query again in the same run is a re-release: refused, ledger unchanged
    before = (tmp_path / "ledger" / "site-ledger.jsonl").read_bytes()
    query = Message(RecordDict({"config": ConfigRecord({"phase": "node-setup"})}), dst_node_id=5,
                    message_type=MessageType.QUERY)
    reply = client_app.query(query, context(path, tmp_path / "ledger"))
    assert reply.has_error() and "re-release" in reply.error.reason
    assert (tmp_path / "ledger" / "site-ledger.jsonl").read_bytes() == before
    # a non-private summary is refused unless the site allows it
    nonprivate = parse_scenario({**sc.model_dump(mode="json"), "basis": {**sc.basis.model_dump(mode="json"),
                                                                         "private": False}})
    monkeypatch.setattr(client_app, "run_scenario", lambda _ctx: nonprivate)
    reply = client_app.query(query, context(path, tmp_path / "ledger", run_id=RUN + 1))
    assert reply.has_error() and reply.error.reason == (
        "site refuses the federated FPCA covariance summary without noise: set allow-nonprivate=true in the node "
        "config to accept non-private runs")


def test_public_data_keep_the_runs_seeded_noise_and_no_site_ledger(tmp_path, monkeypatch):
    """Simulated data (the server can generate them from the run seed) and files the scenario names:
    every engine's noise, no site ledger."""
    from fdp_flower.clients.fdp_admm import handle_fdp_admm_train

    sc = parse_scenario({"seed": 9, "data": {"n_samples": 80, "grid_points": 21}, "federation": {"num_clients": 2},
                         "basis": {"kind": "fixed", "n_components": K}, "algorithm": {"rounds": 3}})
    ctx = Context(run_id=RUN, node_id=5, node_config={"partition-id": 0, "num-partitions": 2,
                                                      "ledger-dir": str(tmp_path / "ledger")},
                  state=RecordDict(), run_config={})
    reply = handle_fdp_admm_train(train_message(sc, 1), ctx, sc)
    assert set(reply.content.keys()) == {"arrays", "metrics"}  # no site report
    assert not (tmp_path / "ledger").exists()
    # node files named by the scenario (a simulation on one machine), not by the node: the same
    path = node_file(tmp_path)
    sc = parse_scenario({**node_scenario().model_dump(mode="json"),
                         "data": {"kind": "node_files", "grid_points": 21, "paths": [str(path), str(path)]}})
    reply = handle_fdp_admm_train(train_message(sc, 1), ctx, sc)
    assert set(reply.content.keys()) == {"arrays", "metrics"} and not (tmp_path / "ledger").exists()
    truth, sigma = noise_free_term(sc, path, 1)
    np.testing.assert_allclose(reply.content["arrays"]["release"].numpy()[0],
                               truth + sigma * release_rng(sc.seed, 0, 1).standard_normal(K), rtol=0, atol=1e-12)


def test_the_results_show_the_sites_reports_next_to_the_server_ledger():
    from fdp_flower.outputs.results import site_report_rows
    from fdp_flower.privacy import PrivacyLedger

    ledger = PrivacyLedger([release(0, r, sigma=1.0) for r in (1, 2)])
    report = {"eps": 3.0, "releases": 5, "run-eps": 1.0, "run-releases": 2, "delta": 1e-6,
              "neighbouring": "add_remove", "max-eps": 4.0, "noise-source": "secret"}
    (row,) = site_report_rows({0: report}, ledger)
    assert row == {"client": 0, "eps": 3.0, "releases": 5, "run_eps": 1.0, "run_releases": 2, "delta": 1e-6,
                   "neighbouring": "add_remove", "max_eps": 4.0, "noise_source": "secret",
                   "server_eps": pytest.approx(pld_epsilon(ledger.under_neighbouring("add_remove").releases, 1e-6))}


@pytest.mark.parametrize("name", ["deploy_demo.yaml", "deploy_federated_fpca.yaml", "tecator.yaml", "tecator_dp.yaml"])
def test_shipped_deployment_scenarios_do_not_rely_on_server_known_seeds(tmp_path, name):
    """Opened as a site with its own data-path and a default policy, every shipped deployment
    scenario draws the site's OS-entropy noise (never the run seed's) and charges the site ledger."""
    from pathlib import Path

    from fdp_flower.algorithms.fdp_admm.config import load_scenario
    from fdp_flower.clients.site import SiteSession, names_own_data
    from fdp_flower.functional.sources import data_source

    sc = load_scenario(Path(__file__).resolve().parents[1] / "scenarios" / name)
    ctx = Context(run_id=RUN, node_id=5, node_config={"partition-id": 0, "num-partitions": 3,
                                                      "data-path": str(tmp_path / "site.npz"),
                                                      "ledger-dir": str(tmp_path / "ledger")},
                  state=RecordDict(), run_config={})
    source = data_source(sc.data, seed=sc.seed, num_clients=sc.federation.num_clients, tau=sc.model.loss.tau)
    assert names_own_data(ctx, source)
    site = SiteSession.open(ctx, sc, node_local=True)
    rng = site.noise_for(release(sigma=1.0))
    assert site.noise.source(site.requested_source, node_local=True) == "os_entropy"
    assert not np.array_equal(rng.standard_normal(4), release_rng(sc.seed, 0, 1, site.requested_source)
                              .standard_normal(4))
    assert [e.noise_source for e in site.ledger.read()] == ["os_entropy"]
