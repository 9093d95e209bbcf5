"""The guarantee holds against the server in a real deployment (flower-superlink + flower-supernode
processes on loopback, node-local files, the real ClientApp).

1. The server tries to subtract the sites' noise with everything it knows -- the run seed, the
   scenario, the released primals it stores, and (here) the noise-free step computed from the
   pooled data -- and recovers nothing better than the calibrated noise level, except from the
   site that opted in to seeded noise (the negative control: there it recovers the step to 1e-12).
2. A server that asks a site for a release past its max-eps, for a re-release of a round, or for a
   round past the calibrated ones gets a refusal, and the site's ledger stays byte-identical; a
   SuperNode killed and restarted keeps its ledger and reports the same totals.

The chi-square checks are two-sided at level 1e-6 each (the noise is OS entropy by design, so it
cannot be seeded): a false failure happens about once in 250,000 runs.
"""
from __future__ import annotations

import json
import shutil
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats

from fdp_flower.algorithms.fdp_admm.config import load_scenario
from fdp_flower.algorithms.fdp_admm.plan import NoisePlan, build_basis, build_objective
from fdp_flower.algorithms.fdp_admm.site import site_features, term_release
from fdp_flower.algorithms.fdp_admm.update import client_primal_step
from fdp_flower.config.base import parse_override_string
from fdp_flower.engines.flower import LoopbackFederation
from fdp_flower.functional.node_files import load_dataset, partition, read_node_file, write_partitions
from fdp_flower.privacy import pld_epsilon
from fdp_flower.privacy.mechanisms import release_rng
from fdp_flower.privacy.site_policy import read_noise_secret, secret_release_rng

APP = Path(__file__).resolve().parents[1]
SCENARIO = APP / "scenarios" / "deploy_demo.yaml"
ALPHA = 1e-6

pytestmark = pytest.mark.skipif(shutil.which("flower-superlink") is None
                                and not (Path(sys.executable).parent / "flower-superlink").exists(),
                                reason="flower-superlink not installed")


def noise_free_primal(scenario, path, round_=1):
    """Round ``round_``'s step of the client holding ``path`` from a zero state, and its noise's sigma in
    primal units (the released term's sigma / (rho + 1/eta): the server steps on the released term)."""
    data = read_node_file(path, expected_grid=np.linspace(0, 1, 100))
    basis = build_basis(scenario)
    features, _ = site_features(scenario, basis, data)
    eta, _sens, sigma = NoisePlan(scenario, basis.n_components).release(round_, features.shape[0])
    zeros = np.zeros(basis.n_components)
    return client_primal_step(objective=build_objective(scenario), noisy_primal=zeros, global_w=zeros, dual=zeros,
                              features=features, response=data.response, eta=float(eta),
                              rho=scenario.algorithm.rho), float(sigma)


@pytest.mark.slow
def test_the_server_cannot_subtract_the_sites_noise(tmp_path):
    overrides = "algorithm.rounds=1; basis.n_components=20"
    paths = write_partitions(partition(load_dataset("paper", seed=0, n_samples=900), 3), tmp_path / "data", "npz")
    secret = tmp_path / "site1.secret"
    secret.write_bytes(bytes(range(7, 39)))
    sites = [{}, {"noise-secret-file": str(secret)}, {"allow-seeded-noise": True}]  # OS entropy, secret, opt-in
    results = tmp_path / "results"
    fed = LoopbackFederation(tmp_path, data_paths=paths, site_config=sites)
    try:
        fed.start()
        run_id, status = fed.run({"scenario": str(SCENARIO), "overrides": overrides, "results-dir": str(results)},
                                 timeout=300)
        assert status == "finished:completed", fed.logs()
    finally:
        fed.stop()

    # everything the server knows: its results (scenario with the run seed, released primals, ledger)
    (out,) = list(results.glob(f"*run{run_id}"))
    scenario = load_scenario(out / "scenario.yaml")
    assert scenario.seed == yaml.safe_load((out / "scenario.yaml").read_text())["seed"] == 0
    released = np.load(out / "final.npz")["state_noisy_primals"]
    K = released.shape[1]
    low, high = stats.chi2.ppf(ALPHA / 2, K), stats.chi2.ppf(1 - ALPHA / 2, K)
    outcome = {}
    for client, path in enumerate(paths):
        truth, sigma = noise_free_primal(scenario, path)  # the test's pooled data: more than any server has
        seeded_noise = sigma * release_rng(scenario.seed, client, 1).standard_normal(K)  # the old code's noise
        as_released = np.sum((released[client] - truth) ** 2) / sigma**2  # ~ chi2(K): the calibrated noise
        attack = np.sum((released[client] - seeded_noise - truth) ** 2) / sigma**2
        outcome[client] = (as_released, attack)
        if client < 2:  # the site's own noise: the noise is there at its level, and the attack gains nothing
            assert low <= as_released <= high, (client, as_released, (low, high))
            assert low <= attack / 2 <= high, (client, attack, (low, high))  # ~ 2 sigma^2 chi2(K)
            assert attack >= low  # no reconstruction better than the calibrated noise level
    # negative control: the site that opted in to seeded noise is exposed (the check above would fail)
    assert outcome[2][1] < 1e-18 < low
    np.testing.assert_allclose(released[2], truth + seeded_noise, rtol=0, atol=1e-12)
    # the site with a secret can regenerate its own noise for its own audit; the server cannot
    truth1, sigma1 = noise_free_primal(scenario, paths[1])
    own = sigma1 * secret_release_rng(read_noise_secret(secret), run_id, 1, 1).standard_normal(K)
    np.testing.assert_allclose(released[1] - own, truth1, rtol=0, atol=1e-12)

    summary = json.loads((out / "summary.json").read_text())
    reported = {s["client"]: s for s in summary["privacy"]["sites"]}
    assert [reported[c]["noise_source"] for c in range(3)] == ["os_entropy", "secret", "seeded"]
    for c in range(3):  # every site's own total is the server ledger's, by the same accountant
        assert reported[c]["run_releases"] == reported[c]["releases"] == 1
        assert reported[c]["run_eps"] == pytest.approx(reported[c]["server_eps"], rel=1e-9)
        assert reported[c]["neighbouring"] == "replace_one" and reported[c]["delta"] == 1e-5
    print(f"chi2/K (as released, seeded-noise attack): "
          f"{ {c: (round(float(a) / K, 3), round(float(b) / K, 3)) for c, (a, b) in outcome.items()} }")


ADVERSARY_PYPROJECT = """\
[project]
name = "site-adversary"
version = "0.1.0"
description = "A ServerApp that asks sites for more than their policy allows (fdp-flower tests)"
license = "Apache-2.0"
dependencies = []

[tool.flwr.app]
publisher = "fdp-flower-tests"

[tool.flwr.app.components]
serverapp = "site_adversary_app:app"
clientapp = "fdp_flower.client_app:app"

[tool.flwr.app.config]
scenario = ""
overrides = ""
results-dir = ""
"""


def _await(path: Path, runner: threading.Thread, fed, timeout: float = 300.0) -> dict:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert runner.is_alive() and time.monotonic() < deadline, fed.logs()
        time.sleep(0.2)
    time.sleep(0.2)
    return json.loads(path.read_text())


@pytest.mark.slow
def test_sites_refuse_a_greedy_server_and_keep_their_ledgers_across_a_restart(tmp_path):
    overrides = "federation.num_clients=2"
    paths = write_partitions(partition(load_dataset("paper", seed=0, n_samples=600), 2), tmp_path / "data", "npz")
    scenario = load_scenario(SCENARIO, parse_override_string(overrides))
    plan = NoisePlan(scenario, scenario.basis.n_components)
    sensitivity = 2 * plan.gradient_bound / 300  # the descent term's 2G/m_i, m_i = 300
    events = [term_release(0, r, sensitivity, plan.noise_multipliers[r - 1] * sensitivity) for r in (1, 2, 3)]
    two, three = pld_epsilon(events[:2], 1e-5), pld_epsilon(events, 1e-5)
    max_eps = (two + three) / 2  # each site accepts two of the scenario's rounds, not three

    app = tmp_path / "adversary"
    app.mkdir()
    (app / "pyproject.toml").write_text(ADVERSARY_PYPROJECT)
    shutil.copy(Path(__file__).parent / "site_adversary_app.py", app / "site_adversary_app.py")
    out = tmp_path / "out"
    fed = LoopbackFederation(tmp_path, app_dir=app, data_paths=paths, site_config={"max-eps": max_eps})
    outcome: dict = {}
    try:
        fed.start()
        ledgers = [fed.ledger_path(i) for i in range(2)]
        runner = threading.Thread(target=lambda: outcome.update(zip(("run_id", "status"), fed.run(
            {"scenario": str(SCENARIO), "overrides": overrides, "results-dir": str(out)}, timeout=600))))
        runner.start()
        before = _await(out / "before-round3.json", runner, fed)
        snapshot = [p.read_bytes() for p in ledgers]
        (out / "before-round3.go").touch()
        after = _await(out / "after-round3.json", runner, fed)
        unchanged = [p.read_bytes() for p in ledgers] == snapshot  # checked below, after the processes stop
        fed.kill_node(0)
        fed.restart_node(0)
        (out / "after-round3.go").touch()
        runner.join(400)
        assert not runner.is_alive()
        assert outcome.get("status") == "finished:completed", fed.logs()
    finally:
        fed.stop()
    final = json.loads((out / "final.json").read_text())

    # rounds 1 and 2 released; each site reports the PLD eps of its own two releases
    for rnd in ("round1", "round2"):
        assert all("released" in r for r in before[rnd].values()), before[rnd]
    reports = {r["partition"]: r["site"] for r in before["round2"].values()}
    assert sorted(reports) == [0, 1]
    for report in reports.values():
        assert report["releases"] == report["run-releases"] == 2
        assert report["eps"] == pytest.approx(two, rel=1e-9) and report["max-eps"] == pytest.approx(max_eps)
    # round 3 would take every site past its max-eps: refused, nothing released, ledgers byte-identical
    for reply in after["round3"].values():
        assert set(reply) == {"error"} and "would bring the site's eps to" in reply["error"], reply
        assert f"> max-eps {max_eps:g}" in reply["error"]
    assert unchanged
    for path in ledgers:  # the ledger's "open" line and the two releases
        assert [json.loads(line)["kind"] for line in path.read_text().splitlines()] == ["open", "release", "release"]

    # SuperNode 0 was killed and restarted (a new node id): same ledger, same totals, and it refuses
    # to release round 1 of this run again; a round past the calibrated three is refused too
    assert final["restarted_node"] not in before["nodes"]
    restarted = final["status_after_restart"][str(final["restarted_node"])]
    assert restarted["partition"] == 0 and restarted["site"] == reports[0]
    for reply in final["round1_again"].values():
        assert set(reply) == {"error"} and "re-release: run " in reply["error"] and "round 1" in reply["error"], reply
    for reply in final["round4"].values():
        assert set(reply) == {"error"} and "round 4 is outside 1..3" in reply["error"], reply
    assert [p.read_bytes() for p in ledgers] == snapshot
    print(f"max-eps {max_eps:.4f}: 2 rounds released (eps {two:.4f}), round 3 refused (would be {three:.4f}); "
          f"restarted node reports eps {restarted['site']['eps']:.4f} over {restarted['site']['releases']} releases")
