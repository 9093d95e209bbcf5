"""privacy.trust in FDP-ADMM (docs/privacy.md, "Trust modes"; docs/algorithms.md, eqs. (1.3s), (1.3t)):
secure_aggregation (Skellam shares, the server decodes only their integer sum) and trusted_aggregator
(noise-free terms, the server noises the sum once) on the in-process engine; the schema, API, run
config and site policy keys."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fdp_flower.algorithms.fdp_admm.config import parse_scenario
from fdp_flower.algorithms.fdp_admm.plan import build_objective, site_plan
from fdp_flower.algorithms.fdp_admm.protocol import FDPADMMServer, trusted_aggregator_rng
from fdp_flower.algorithms.fdp_admm.setup import simulation_setup
from fdp_flower.algorithms.fdp_admm.site import SiteData, answer, mean_loss_terms
from fdp_flower.algorithms.protocol import SiteRelease, SiteRequest
from fdp_flower.config.base import ScenarioError
from fdp_flower.engines.inprocess import run_fdp_admm
from fdp_flower.privacy.distributed import SkellamSumRelease, sum_noise_check
from fdp_flower.privacy.mechanisms import run_noise

M = 6


def scenario(trust: str = "secure_aggregation", *, clients: int = M, rounds: int = 4, tolerated: int | None = None,
             n: int = 600, **privacy):
    p = {"mode": "total", "eps": 1.0, "delta": 1e-5, "trust": trust, **privacy}
    if tolerated is not None:
        p["tolerated"] = tolerated
    return parse_scenario({"name": "trust", "seed": 5, "data": {"kind": "paper_simulation", "n_samples": n},
                           "federation": {"num_clients": clients}, "basis": {"kind": "fixed", "family": "cosine",
                                                                             "n_components": 6},
                           "algorithm": {"rounds": rounds}, "privacy": p})


def driven(sc):
    """The server and every client's site data of ``sc`` (the in-process engine's pieces)."""
    sizes, basis, features, responses, clipped, _ = simulation_setup(sc, with_reference=False)
    data = SiteData.stack(range(len(sizes)), features, responses, clipped)
    server = FDPADMMServer(sc, basis, sizes)
    return server, data, site_plan(sc, basis, sizes), basis, sizes


def one_round(server, data, plan, noise, *, skip=()):
    """Round of ``server``: every client but ``skip`` answers through the site function."""
    rp = server.begin_round([i for i in range(server.num_clients) if i not in skip])
    releases = answer(rp.requests, data, plan, noise)
    for rel in releases:
        assert isinstance(rel, SiteRelease), rel
        server.accept(rel)
    for i in skip:
        server.fail(i, "dropped", "not_released")
    return rp, releases


# ------------------------------------------------------------------ schema, API, run config, site policy

def test_default_is_site_and_bad_combinations_are_one_line_errors():
    from fdp_flower.algorithms.p2p.config import parse_p2p_scenario

    assert parse_scenario({}).privacy.trust == "site"
    with pytest.raises(ScenarioError, match="mode: total"):
        scenario(mode="per_round")
    with pytest.raises(ScenarioError, match="tolerated .* must be below federation.num_clients"):
        scenario(tolerated=M)
    with pytest.raises(ScenarioError, match="applies to trust 'secure_aggregation' only"):
        scenario("trusted_aggregator", tolerated=1)
    with pytest.raises(ScenarioError, match="needs privacy enabled"):
        parse_scenario({"privacy": {"enabled": False, "trust": "trusted_aggregator"}})
    with pytest.raises(ScenarioError, match="trust"):
        parse_scenario({"privacy": {"trust": "server"}})
    with pytest.raises(ScenarioError, match="peer-to-peer runs have no server"):
        parse_p2p_scenario({"privacy": {"mode": "total", "eps": 1.0, "trust": "trusted_aggregator"}})
    with pytest.raises(ScenarioError) as info:  # why, and what to use instead
        parse_scenario({"federation": {"num_clients": 4}, "basis": {"kind": "federated_dp", "eps": 0.5},
                        "privacy": {"mode": "total", "eps": 1.0, "trust": "secure_aggregation"}})
    message = str(info.value)
    assert "\n" not in message.strip() and "outside the secure sums' Skellam plan" in message
    assert "use basis kind fixed, provided or pooled, or privacy.trust 'site'" in message


def test_run_config_typed_trust_key():
    from fdp_flower.algorithms.registry import family
    from fdp_flower.config.base import run_config_field_overrides

    fields = family("fdp_admm").run_config
    assert run_config_field_overrides({"trust": "secure_aggregation"}, "fdp_admm", fields) == {
        "privacy.trust": "secure_aggregation"}
    assert run_config_field_overrides({"trust": ""}, "fdp_admm", fields) == {}
    with pytest.raises(ScenarioError, match="trust = 3 must be a string"):
        run_config_field_overrides({"trust": 3}, "fdp_admm", fields)
    with pytest.raises(ScenarioError, match="no meaning for p2p"):
        run_config_field_overrides({"trust": "site"}, "p2p", family("zcdp_nfl").run_config)


def test_site_policy_trust_keys():
    from fdp_flower.privacy.site_policy import (
        SitePolicy,
        SitePolicyError,
        SiteRefusal,
        check_node_config_keys,
        check_trust,
    )

    default = SitePolicy.from_node_config({})
    assert default.accepted_trust == ("site",)
    check_trust(default, "site")
    with pytest.raises(SiteRefusal, match="accepts site"):
        check_trust(default, "secure_aggregation", 3)
    policy = SitePolicy.from_node_config({"accept-trust": "site, secure_aggregation", "collusion-threshold": 2})
    check_trust(policy, "secure_aggregation", 2)
    with pytest.raises(SiteRefusal, match="collusion-threshold is 2"):
        check_trust(policy, "secure_aggregation", 1)
    with pytest.raises(SiteRefusal):
        check_trust(policy, "trusted_aggregator")
    with pytest.raises(SitePolicyError, match="not a trust mode"):
        SitePolicy.from_node_config({"accept-trust": "site,central"})
    with pytest.raises(SitePolicyError, match="did you mean 'collusion-threshold'"):
        check_node_config_keys({"colusion-threshold": 1})


def test_api_trust_argument():
    from fdp_flower.api import InputError, fit

    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 20))
    y = x.mean(axis=1) + rng.standard_normal(200)
    with pytest.raises(InputError, match="trust: choose one of"):
        fit(x, y, trust="server")
    with pytest.raises(InputError, match="needs privacy"):
        fit(x, y, eps=None, trust="secure_aggregation")
    with pytest.raises(InputError, match=r"basis: 'fpca' with trust='secure_aggregation' is not supported yet: .* "
                                         r"use a fixed basis \(cosine, bspline, fourier\) or a FunctionalBasis, or "
                                         r"trust='site'"):
        fit(x, y, basis="fpca", basis_eps=0.5, trust="secure_aggregation")
    model = fit(x, y, n_clients=4, rounds=3, n_components=4, trust="secure_aggregation", tolerated=1, reference=False)
    assert model.scenario.privacy.trust == "secure_aggregation" and model.scenario.privacy.tolerated == 1
    assert model.privacy.mechanisms == ("skellam_secure_sum",)
    assert 0.99 < model.privacy.eps <= 1.0
    assert "RDP, Skellam secure sums" in str(model.privacy)


@pytest.mark.parametrize("trust", ["secure_aggregation", "trusted_aggregator"])
def test_membership_audit_refuses_aggregated_trust_saying_why(trust):
    from fdp_flower.engines.audit import protocol_for

    with pytest.raises(ValueError) as info:
        protocol_for(scenario(trust))
    message = str(info.value)
    assert "\n" not in message and f"under {trust}" in message
    assert ("audit_secure_sums" in message) == (trust == "secure_aggregation")
    assert ("noise-free" in message) == (trust == "trusted_aggregator")


def test_fdp_flower_audit_of_secure_sums_passes_and_fails_on_a_site_that_skips_its_share(tmp_path, capsys, monkeypatch):
    """``fdp-flower audit`` on a secure_aggregation scenario audits the released sums (audit_secure_sums): the
    real site function's sums pass and the built-in mutant (site 0 without its share) fails, so the audit
    passes; a site function that leaves out client 0's Skellam share (a mutant of site.site_share) makes the
    released sums fail and the audit exit 1."""
    import yaml

    from fdp_flower.algorithms.fdp_admm import site as site_module
    from fdp_flower.cli import main
    from fdp_flower.engines.audit import audit_secure_sums, secure_sum_trials
    from fdp_flower.privacy.distributed import randomized_round

    sc = scenario(clients=4, rounds=3)
    path = tmp_path / "secure.yaml"
    path.write_text(yaml.safe_dump(sc.model_dump(mode="json", exclude_unset=True)))
    report = tmp_path / "audit.md"
    assert main(["audit", str(path), "--out", str(report)]) == 0
    out = capsys.readouterr().out
    assert "audit passed: FDP-ADMM secure sums" in out
    assert "released sums (must pass)" in report.read_text() and ": FAIL" in report.read_text()
    good = audit_secure_sums(sc, alpha=1e-4)
    assert good.trials == secure_sum_trials(4, good.dim, 1e-4) and good.passed
    assert good.honest.detectable_deficit <= 1 / 8 + 1e-12  # half of one missing share of 4 (eq. (9.11))
    assert good.mutant.variance_ratio < 1 - 1 / 8

    honest_share = site_module.site_share
    calls = {"n": 0}

    def skips_client_0(record_sum, plan, rng, *, records):  # every 4th share (client 0's) without its noise
        calls["n"] += 1
        if calls["n"] % 4 == 1:
            return randomized_round(plan.scale * np.asarray(record_sum, dtype=float), rng)
        return honest_share(record_sum, plan, rng, records=records)

    monkeypatch.setattr(site_module, "site_share", skips_client_0)
    bad = audit_secure_sums(sc, alpha=1e-4)
    assert not bad.honest.passed and not bad.passed and bad.honest.variance_ratio < 1 - 1 / 8
    assert main(["audit", str(path)]) == 1
    assert "AUDIT FAILED: secure sums: the released sums' noise does not match the plan" in capsys.readouterr().err


# ------------------------------------------------------------------ secure aggregation

def test_secure_round_uses_only_the_decoded_integer_sum():
    """The server's step equals the centralized step from S (sum_i v_i) / (gamma M), computed here from
    the sites' integer shares; the shares are integers of the plan's grid and every client's state stays
    equal (the consensus collapses to the centralized step)."""
    sc = scenario(tolerated=1)
    server, data, plan, _, sizes = driven(sc)
    noise = run_noise(sc.seed)
    rp, releases = one_round(server, data, plan, noise)
    shares = np.stack([r.value for r in releases])
    assert shares.dtype == np.int64
    assert all(isinstance(r.event, SkellamSumRelease) and r.event.tolerated == 1 and r.metrics == {}
               for r in releases)
    secure = plan.secure
    assert secure.sites == M and secure.tolerated == 1 and secure.share_variance == secure.variance / (M - 1)
    total = shares.sum(axis=0)
    descent = total / (secure.scale * M) * (1.0 if plan.scales is None else plan.scales)
    objective = build_objective(sc)
    eta = float(np.min(server.steps.step_size(1, sizes)))
    rho = sc.algorithm.rho
    w0 = np.zeros(server.dim)
    expected = (rho * w0 + w0 / eta + descent - objective.lam / M * objective.penalty.subgradient(w0)) / (rho + 1 / eta)
    server.end_round()
    np.testing.assert_allclose(server.state.noisy_primals, np.broadcast_to(expected, (M, server.dim)), rtol=0,
                               atol=1e-15 * max(1.0, float(np.max(np.abs(expected)))))
    assert np.all(server.state.noisy_primals == server.state.noisy_primals[0])
    # the decoded sum is the noise-free scaled sum plus noise of variance M V / (M - t) (not the mean!)
    whitened = -mean_loss_terms(plan.loss, data, np.zeros((M, server.dim)))
    whitened = whitened if plan.scales is None else whitened / plan.scales
    residual = total - secure.scale * whitened.sum(axis=0)
    assert np.all(np.abs(residual) < 8 * math.sqrt(M * secure.share_variance) + M)
    # a float "share" or another calibration is refused
    rp = server.begin_round()
    bad = answer(rp.requests, data, plan, noise)
    with pytest.raises(Exception, match="must be integer"):
        server.accept(SiteRelease(0, 2, bad[0].value.astype(float), bad[0].num_examples, bad[0].event, {}))
    with pytest.raises(Exception, match="secure_aggregation calibration"):
        server.accept(SiteRelease(0, 2, bad[0].value, bad[0].num_examples,
                                  SkellamSumRelease.of_plan(secure, client=1, round=2), {}))


def test_secure_dropouts_up_to_t_keep_the_round_beyond_t_refuse_it():
    sc = scenario(tolerated=2, rounds=3)
    server, data, plan, _, _ = driven(sc)
    noise = run_noise(sc.seed)
    one_round(server, data, plan, noise, skip=(1, 4))  # t = 2 missing: the round stands
    row = server.end_round()
    assert row["failed_clients"] == 2 and server.stop_reason is None
    # the guarantee holds with the M - t shares that arrived: eps at round 1 is one release of the plan
    assert row["eps_rdp"] == pytest.approx(plan.secure.epsilon(rounds=1), rel=1e-9)
    one_round(server, data, plan, noise, skip=(0, 2, 3))  # t + 1 missing: refused, nothing decoded
    before = server.state
    with pytest.raises(Exception):
        server.end_round()
    assert "secure sum of round 2 refused: 3 of 6 shares arrived, the guarantee needs M - t = 4" in server.stop_reason
    assert server.state is before


def test_secure_run_headline_eps_and_ledger():
    sc = scenario(tolerated=1, rounds=6)
    result = run_fdp_admm(sc, with_reference=False)
    assert result.stop_reason == "completed"
    events = result.ledger.releases
    assert len(events) == 6 * M and all(isinstance(e, SkellamSumRelease) and e.tolerated == 1 for e in events)
    eps = result.history[-1]["eps_rdp"]
    assert 0.999 * sc.privacy.eps < eps <= sc.privacy.eps  # the plan spends the budget and never more
    assert "eps_pld" not in result.history[-1]  # no PLD figure exists for the Skellam
    from fdp_flower.outputs.results import privacy_section
    from fdp_flower.privacy.ledger import PrivacyLedger

    section = privacy_section(result.ledger, sc.privacy.delta, mode="total", eps_budget=1.0)
    assert section["accountant"] == "rdp" and section["eps"] == pytest.approx(eps, rel=1e-12)
    assert "t = 1" in section["note"]
    again = PrivacyLedger.from_rows(result.ledger.to_rows())  # checkpoints and ledger.csv keep every field
    assert again.releases == events


def test_secure_in_process_run_is_reproducible_and_differs_from_site_mode():
    a = run_fdp_admm(scenario(rounds=3), with_reference=False)
    b = run_fdp_admm(scenario(rounds=3), with_reference=False)
    site = run_fdp_admm(scenario("site", rounds=3), with_reference=False)
    np.testing.assert_array_equal(a.state.global_w, b.state.global_w)
    assert not np.array_equal(a.state.global_w, site.state.global_w)


def test_noise_check_passes_on_released_sums_and_fails_without_one_share():
    """sum_noise_check (docs/secure_aggregation.md, eqs. (9.10)-(9.12)) on 2000 rounds of FDP-ADMM secure
    sums at a fixed point, M = 10: the honest sums pass; the same sums with one site's Skellam share left
    out (a site that skips its noise) fail."""
    clients, trials = 10, 2000
    sc = scenario(clients=clients, rounds=trials, n=1000)
    server, data, plan, _, _ = driven(sc)
    secure = plan.secure
    point = {"point": np.full(server.dim, 0.1)}
    noise = run_noise(sc.seed)
    whitened = -mean_loss_terms(plan.loss, data, np.broadcast_to(point["point"], (clients, server.dim)))
    whitened = whitened if plan.scales is None else whitened / plan.scales
    scaled = secure.scale * whitened
    honest, mutant = [], []
    for t in range(1, trials + 1):
        shares = np.stack([r.value for r in answer([SiteRequest(i, t, point) for i in range(clients)], data, plan,
                                                     noise)])
        residual = shares.sum(axis=0) - scaled.sum(axis=0)
        honest.append(residual)
        # the mutant: site 0 sends its rounded term without its Skellam share (its draw from the same stream)
        rng = noise([SkellamSumRelease.of_plan(secure, client=0, round=t)])
        rounded = np.floor(scaled[0] + rng.random(server.dim))
        mutant.append(residual - (shares[0] - rounded))
    fractions = np.broadcast_to(scaled - np.floor(scaled), (trials, clients, server.dim))
    ok = sum_noise_check(np.array(honest), skellam_variance=clients * secure.share_variance,
                         rounding_fractions=fractions)
    bad = sum_noise_check(np.array(mutant), skellam_variance=clients * secure.share_variance,
                          rounding_fractions=fractions)
    assert ok.passed, ok
    assert not bad.passed and bad.variance_ratio < 1 - 1 / clients / 2, bad


# ------------------------------------------------------------------ trusted aggregator

def test_trusted_aggregator_adds_the_noise_once_and_is_labelled():
    sc = scenario("trusted_aggregator")
    server, data, plan, _, sizes = driven(sc)
    rp, releases = one_round(server, data, plan, run_noise(sc.seed))
    terms = np.stack([r.value for r in releases])
    whitened = -mean_loss_terms(plan.loss, data, np.zeros((M, server.dim)))
    whitened = whitened if plan.scales is None else whitened / plan.scales
    np.testing.assert_array_equal(terms, whitened)  # noise-free: the sites add nothing
    event = releases[0].event
    z = plan.noise_multipliers[0]
    assert event.mechanism == "fdp_admm_trusted_aggregator"
    assert event.sigma == pytest.approx(z * 2 * plan.gradient_bound / min(sizes), rel=1e-12)
    expected = (terms.sum(axis=0) + event.sigma * trusted_aggregator_rng(sc, 1).standard_normal(server.dim)) / M
    np.testing.assert_array_equal(server.aggregate_descent(1, {r.client: r for r in releases}),
                                  expected if plan.scales is None else expected * plan.scales)
    server.end_round()
    result = run_fdp_admm(sc, with_reference=False)
    from fdp_flower.outputs.models import PrivacyReport
    from fdp_flower.outputs.results import privacy_section

    assert "NOT against the server" in privacy_section(result.ledger, 1e-5)["note"]
    report = PrivacyReport.from_ledger(result.ledger, delta=1e-5, mode="total", eps_budget=1.0)
    assert "NO protection against the server" in str(report)
    assert report.eps <= 1.0 + 1e-6


# ------------------------------------------------------------------ Flower: SecAgg+ for real

def test_server_decodes_a_flower_sum_and_refuses_one_beyond_t():
    """accept_secure_sum (what the Flower strategy hands over from SecAgg+) gives the same step as the
    in-process sum of the same shares; a sum of fewer than M - t clients' shares is refused."""
    sc = scenario(tolerated=1)
    a, data, plan, _, _ = driven(sc)
    b, *_ = driven(sc)
    noise = run_noise(sc.seed)
    one_round(a, data, plan, noise)
    a.end_round()
    rp = b.begin_round()
    shares = [r.value for r in answer(rp.requests, data, plan, noise)]
    b.accept_secure_sum(np.sum(shares, axis=0), range(M))
    b.end_round()
    np.testing.assert_array_equal(a.state.noisy_primals, b.state.noisy_primals)
    rp = b.begin_round()
    shares = [r.value for r in answer(rp.requests, data, plan, noise)]
    b.accept_secure_sum(np.sum(shares[: M - 2], axis=0), range(M - 2))
    for c in (M - 2, M - 1):
        b.fail(c, "dropped", "may_have_released")
    with pytest.raises(Exception):
        b.end_round()
    assert "refused: 4 of 6 shares arrived" in b.stop_reason


@pytest.mark.slow
def test_flower_secure_aggregation_equals_the_in_process_run(tmp_path):
    """A small FDP-ADMM fit with privacy.trust secure_aggregation on Flower's simulation engine (real
    SecAgg+: secure_integer_sum driven from the ServerApp, secaggplus_mod on every ClientApp): every round's
    decoded sum is the in-process engine's, so the whole run's state and ledger are equal bit for bit; with
    fewer nodes than clients a node sums its clients' shares before masking."""
    import json

    from fdp_flower.algorithms.fdp_admm.config import load_scenario
    from fdp_flower.config.base import parse_override_string
    from tests.flower_harness import REPO, flwr_run, simulation_superlink

    # a pooled basis: secure aggregation does not yet take the flagship's private federated_dp basis phase
    base = ("data.n_samples=3000; algorithm.rounds=3; privacy.mode=total; privacy.eps=1.0; "
            "privacy.trust=secure_aggregation; basis.kind=pooled")
    with simulation_superlink(tmp_path, num_supernodes=3) as env:
        for label, extra in (("one-per-node", "federation.num_clients=3"),
                             ("several-per-node", "federation.num_clients=5; privacy.tolerated=1")):
            overrides = f"{base}; {extra}"
            out = tmp_path / f"results-{label}"
            _, status, output = flwr_run(env, f"scenario='scenarios/flwr_default.yaml' overrides='{overrides}' "
                                              f"results-dir='{out}'")
            run = status["runs"][0]
            assert run["status"] == "finished:completed", f"{run['status']}: {run['status-details']}\n{output[-3000:]}"
            (result_dir,) = list(out.iterdir())
            summary = json.loads((result_dir / "summary.json").read_text())
            final = np.load(result_dir / "final.npz")
            sc = load_scenario(REPO / "scenarios/flwr_default.yaml", parse_override_string(overrides))
            local = run_fdp_admm(sc)
            for name in ("global_w", "duals", "noisy_primals"):
                np.testing.assert_array_equal(final[f"state_{name}"], getattr(local.state, name))
            assert summary["privacy"]["accountant"] == "rdp"
            assert summary["privacy"]["eps"] == pytest.approx(local.history[-1]["eps_rdp"], rel=1e-12)
            assert "secure sum" in output or "secure aggregation" in output


class _NodesGrid:
    """Flower's message path in one process: every message goes to the real ClientApp
    (fdp_flower.client_app.app, mods included) of its node, one Context per node; the nodes in ``drop``
    fail at SecAgg+'s masked-vector stage (an error reply, like a runtime's)."""

    def __init__(self, run_config: dict, nodes: list[int]):
        from flwr.app import Context, RecordDict

        from fdp_flower.client_app import app

        self.app, self.nodes, self.drop = app, nodes, set()
        self.contexts = {n: Context(run_id=7, node_id=n, node_config={"partition-id": k, "num-partitions": len(nodes)},
                                    state=RecordDict(), run_config=run_config) for k, n in enumerate(nodes)}

    def get_node_ids(self):
        return list(self.nodes)

    def send_and_receive(self, messages, *, timeout=None):
        import copy
        import uuid

        from flwr.app import Error, Message

        replies = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = uuid.uuid4().hex
            cfg = msg.content.config_records.get("secaggplus_configs")
            node = msg.metadata.dst_node_id
            if node in self.drop and cfg is not None and cfg.get("stage") == "collect_masked_vectors":
                replies.append(Message(Error(2, "dropped"), reply_to=msg))
                continue
            try:
                replies.append(self.app(copy.deepcopy(msg), self.contexts[node]))
            except Exception as exc:  # noqa: BLE001 -- a runtime turns it into an error reply
                replies.append(Message(Error(2, str(exc)), reply_to=msg))
        return replies


@pytest.fixture
def task_identity():
    """Flower's message constructor reads the task identity a runtime sets (as tests/test_secure_sum_inmemory.py)."""
    from flwr.supercore.task_identity import TaskIdentity

    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 7, 0
    yield
    TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved


def test_flower_strategy_secure_rounds_with_dropouts_through_the_real_clientapp(tmp_path, monkeypatch, task_identity):
    """FDPADMMStrategy's secure round (secure_integer_sum from the server, secaggplus_mod and the site's
    guard on every node of the real ClientApp): the decoded round equals the in-process engine's bit for bit;
    one node dropping at the masked-vector stage (t = 1) leaves the round to the other shares, equal to the
    in-process round without that client; two dropping refuse the round and stop the run."""
    import tomllib

    import yaml
    from flwr.app import ArrayRecord, ConfigRecord, Context, RecordDict

    from fdp_flower.strategies.common import FederationError
    from fdp_flower.strategies.fdp_admm import FDPADMMStrategy
    from tests.flower_harness import REPO

    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))
    sc = scenario(clients=5, tolerated=1, rounds=3, n=1000)
    path = tmp_path / "secure.yaml"
    path.write_text(yaml.safe_dump(sc.model_dump(mode="json")))
    app_config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    run_config = {**app_config, "scenario": str(path), "overrides": ""}
    nodes = [11, 22, 33, 44, 55]
    grid = _NodesGrid(run_config, nodes)
    server, data, plan, basis, sizes = driven(sc)
    strategy = FDPADMMStrategy(sc, basis, partition_sizes=sizes)
    strategy.server_context = Context(run_id=7, node_id=0, node_config={}, state=RecordDict(), run_config=run_config)
    noise = run_noise(sc.seed)

    def flower_round(r):
        strategy.configure_train(r, ArrayRecord(), ConfigRecord(), grid)
        strategy.aggregate_train(r, [])

    flower_round(1)
    one_round(server, data, plan, noise)
    server.end_round()
    np.testing.assert_array_equal(strategy.state.noisy_primals, server.state.noisy_primals)
    grid.drop = {11}  # client 0's node (clients go round-robin over the sorted nodes)
    flower_round(2)
    one_round(server, data, plan, noise, skip=(0,))
    server.end_round()
    np.testing.assert_array_equal(strategy.state.noisy_primals, server.state.noisy_primals)
    assert strategy.history[-1]["failed_clients"] == 1
    grid.drop = {11, 22}
    with pytest.raises(FederationError, match="refused"):
        flower_round(3)
    assert strategy.state.round == 2 and "refused" in strategy.server.stop_reason


def test_flower_strategy_trusted_aggregator_through_the_real_clientapp(tmp_path, monkeypatch, task_identity):
    """privacy.trust trusted_aggregator on the Flower strategy: every node's real ClientApp sends its clients'
    noise-free data terms, the server adds its one noise draw per round; three rounds equal the in-process
    engine's bit for bit (state and the trusted-aggregator ledger)."""
    import tomllib

    import yaml
    from flwr.app import ArrayRecord, ConfigRecord, Context, RecordDict

    from fdp_flower.strategies.fdp_admm import FDPADMMStrategy
    from tests.flower_harness import REPO

    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))
    sc = scenario("trusted_aggregator", clients=4, rounds=3, n=800)
    path = tmp_path / "trusted.yaml"
    path.write_text(yaml.safe_dump(sc.model_dump(mode="json")))
    app_config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    run_config = {**app_config, "scenario": str(path), "overrides": ""}
    grid = _NodesGrid(run_config, [11, 22])  # two nodes, two clients each
    _, _, _, basis, sizes = driven(sc)
    strategy = FDPADMMStrategy(sc, basis, partition_sizes=sizes)
    strategy.server_context = Context(run_id=7, node_id=0, node_config={}, state=RecordDict(), run_config=run_config)
    for r in (1, 2, 3):
        messages = strategy.configure_train(r, ArrayRecord(), ConfigRecord(), grid)
        strategy.aggregate_train(r, grid.send_and_receive(list(messages)))
    local = run_fdp_admm(sc)
    for name in ("global_w", "duals", "noisy_primals"):
        np.testing.assert_array_equal(getattr(strategy.state, name), getattr(local.state, name))
    assert strategy.server.ledger.to_rows() == local.ledger.to_rows() and len(local.ledger.to_rows()) == 4 * 3


@pytest.mark.parametrize("value", [None, True, 0, -3, 2.5, "200", 199])
def test_a_trusted_aggregator_round_must_name_the_runs_min_records(value):
    """The client's plan of a trusted-aggregator round: the message's min_i m_i is a positive integer and, on
    simulated data, the source's own (here 200); anything else is one ValueError line naming the key."""
    from fdp_flower.algorithms.fdp_admm.plan import data_source
    from fdp_flower.clients.fdp_admm import _trusted_aggregator_plan
    from fdp_flower.wire import MIN_RECORDS_KEY

    sc = scenario("trusted_aggregator", clients=4, n=800)
    _, _, _, basis, sizes = driven(sc)
    assert int(min(sizes)) == 200
    config = {} if value is None else {MIN_RECORDS_KEY: value}
    with pytest.raises(ValueError, match=MIN_RECORDS_KEY):
        _trusted_aggregator_plan(sc, basis, config, data_source(sc))
    plan = _trusted_aggregator_plan(sc, basis, {MIN_RECORDS_KEY: 200}, data_source(sc))
    assert plan.trust == "trusted_aggregator" and plan.min_records == 200
    assert _trusted_aggregator_plan(scenario("site"), basis, {}, data_source(sc)) is None


def test_site_ledger_charges_skellam_shares_by_rdp_and_refuses_them_under_add_remove(tmp_path):
    """A site's own ledger (node-local data) records a secure-sum share with its accounting fields, reads it
    back, composes the site's eps by the same RDP figure as the run's ledger, refuses a share beyond
    max-eps, and refuses shares altogether under add_remove neighbours."""
    from fdp_flower.privacy.ledger import skellam_aware_epsilon
    from fdp_flower.privacy.site_ledger import SiteLedger
    from fdp_flower.privacy.site_policy import SitePolicy, SiteRefusal
    from fdp_flower.privacy.site_policy import SiteRelease as SiteEntry

    sc = scenario(tolerated=1, rounds=5)
    _, _, plan, _, _ = driven(sc)
    events = [SkellamSumRelease.of_plan(plan.secure, client=2, round=r) for r in range(1, 6)]
    ledger = SiteLedger(tmp_path / "site" / "site-ledger.jsonl", tmp_path / "head" / "head.json")
    policy = SitePolicy(max_eps=1.0 + 1e-9, max_delta=1e-5)
    totals = [ledger.charge(SiteEntry(1, e, "os_entropy", "digest"), policy) for e in events]
    assert totals[-1].eps == pytest.approx(skellam_aware_epsilon(events, 1e-5), rel=1e-12)
    assert 0.999 < totals[-1].eps <= 1.0  # the plan spends the whole budget at its 5 rounds
    assert [entry.release for entry in ledger.read()] == events
    extra = SkellamSumRelease.of_plan(plan.secure, client=2, round=6)
    with pytest.raises(SiteRefusal, match="max-eps"):
        ledger.charge(SiteEntry(1, extra, "os_entropy", "digest"), policy)
    other = SiteLedger(tmp_path / "other" / "site-ledger.jsonl", tmp_path / "head2" / "head.json")
    with pytest.raises(SiteRefusal, match="replace-one neighbours only"):
        other.charge(SiteEntry(1, events[0], "os_entropy", "digest"), SitePolicy(neighbouring="add_remove"))


# ------------------------------------------------------------------ several quantile levels

def test_three_quantile_secure_fit_composes_its_skellam_releases_within_the_budget():
    """fit(tau=[...], trust='secure_aggregation') splits (eps, delta) in equal Gaussian shares mu / sqrt(3) and
    calibrates each level's Skellam plan by RDP to that share; the combined headline eps must be the RDP
    composition of all three levels' releases, recomputed here from the ledger's event fields (eq. (9.3)
    written out, summed over the worst client's releases, converted by dp_accounting's compute_epsilon at
    the mechanism's delta (1 - 1e-6) delta), and stay within the budget (a split that gave every level the
    whole eps would compose to about 3 eps)."""
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    from fdp_flower import api
    from fdp_flower.privacy.calibration import analytic_gaussian_epsilon, target_mu
    from fdp_flower.privacy.distributed import SKELLAM_ORDERS, TAIL_DELTA_FRACTION

    rng = np.random.default_rng(0)
    curves = rng.standard_normal((1200, 30)).cumsum(axis=1) / 5
    y = curves[:, 10] + rng.standard_normal(1200)
    eps, delta, levels = 1.0, 1e-5, [0.25, 0.5, 0.75]
    with pytest.warns(UserWarning, match="predicted privacy cost"):  # 300 rows a site: the noise dominates
        result = api.fit(curves, y, tau=levels, eps=eps, delta=delta, n_clients=4, trust="secure_aggregation",
                         rounds=5, reference=False)
    share = analytic_gaussian_epsilon(target_mu(eps, delta) / math.sqrt(3), delta)
    for model in result.models:  # each level: its own Skellam plan spending its share
        assert all(isinstance(r, SkellamSumRelease) for r in model.ledger.releases)
        assert 0.999 * share < model.privacy.eps <= share * (1 + 1e-12)
    orders = np.array(SKELLAM_ORDERS, dtype=float)
    composed = {}
    for client in range(4):
        events = [r for r in result.ledger.releases if r.client == client]
        assert len(events) == 3 * 5 and len({r.round for r in events}) == 15
        rdp = np.zeros_like(orders)
        for r in events:  # eq. (9.3): alpha D2^2 / (2 V) + min(((2 alpha - 1) D2^2 + 6 D1) / (4 V^2), 3 D1 / (2 V))
            d2, d1, v = r.l2_sensitivity**2, r.l1_sensitivity, r.variance
            rdp += orders * d2 / (2 * v) + np.minimum(((2 * orders - 1) * d2 + 6 * d1) / (4 * v * v), 3 * d1 / (2 * v))
        composed[client] = compute_epsilon(list(orders), list(rdp), delta * (1 - TAIL_DELTA_FRACTION))[0]
    worst = max(composed.values())
    assert result.privacy.eps == pytest.approx(worst, rel=1e-9)
    assert result.privacy.releases == 15 and "RDP, Skellam secure sums" in str(result.privacy)
    assert worst <= eps  # the Gaussian split, composed by RDP, stays within the budget
    assert worst > 0.98 * eps  # and spends it (measured 0.9947)
