"""A server that acts gets nothing past the sites in a real deployment (issue 28's attacks 2-5):
flower-superlink + two flower-supernode processes on loopback, each with its own data file, its site
policy (``max-eps=1``, OS-entropy noise: no ``allow-seeded-noise``) and its ledger; the ClientApp is
the real ``fdp_flower.client_app:app``, the ServerApp the hostile tests/site_attacker_app.py (attack 1,
an unapproved app bundle, is tests/test_site_app_pin_deployment.py).  Site 1 opts in to releasing its
count of clipped rows (``clipped-rows-sigma``), site 0 does not.

The federation is started once (module fixture) and the attacker runs three times, each run with the
scenario its attacks need (the run config is the server's to write); the fixture keeps both ledgers'
bytes before and after every run.  A deployment starts a ClientApp process per message, so each attack
is a few messages; each release carries K = 60 coordinates of independent noise.

2. Run ``kind``: another data kind (``client_arrays`` naming the nodes' own files) on nodes with a
   ``data-path``: refused, nothing released, ledgers byte-identical, no local path in the reply.
3. Run ``values``, rounds 1-6: crafted points (1.5 * 2^59, -1e99, mixed, subnormals, zero) are released,
   one ledger line each, and the released term minus the noise-free one, over the sigma the ledger
   records, is N(0, 1): per point and site 60 draws, a two-sided chi-square test and a two-sided z test of
   the mean, each at level 1e-6.  Round 11: the points the site must not accept (1e300, NaN, inf, past
   the largest public magnitude, the wrong length) are refused and charge nothing (no ledger line of
   round 11).
4. Run ``values``, rounds 7-10: the run config asks for the count of clipped rows and the server replaces
   the basis in every message (scaled by 1e50 and 1e-300, mean shifted by 1e100, random): site 0 sends
   no count and charges only its terms; site 1 sends its count plus noise of its own sigma and its
   ledger records each count; the terms keep the ledger's spread (chi-square tests at level 1e-6).
5. Run ``loss``: the logistic loss (labels in {-1, +1}) on real-valued responses: refused, nothing
   released, ledgers byte-identical.

The noise is OS entropy by design, so it cannot be seeded: the statistical checks are 12 x 2 + 2 = 26
tests at level 1e-6 each, a false failure about once in 38,000 runs (Bonferroni).  3.5-5.5 minutes on a
loaded 2-core machine (3 runs, 17 messages per node; a ClientApp process starts for each message).
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from fdp_flower.algorithms.fdp_admm.config import load_scenario
from fdp_flower.algorithms.fdp_admm.plan import build_basis, build_objective, load_partition
from fdp_flower.algorithms.fdp_admm.site import site_features
from fdp_flower.config.base import parse_override_string
from fdp_flower.engines.flower import LoopbackFederation
from fdp_flower.functional.fpca import FunctionalBasis
from fdp_flower.functional.node_files import load_dataset, partition, write_partitions

HERE = Path(__file__).resolve().parent
APP = HERE.parent
SCENARIO = APP / "scenarios" / "deploy_demo.yaml"
ALPHA = 1e-6
MAX_EPS = 1.0
COUNT_SIGMA = 100.0  # site 1's clipped-rows-sigma
K = 60
BASE = f"federation.num_clients=2; basis.n_components={K}"
POINTS, BASES, ROUNDS = 6, 4, 11  # the values run: rounds 1-6, 7-10, 11

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("flower-superlink") is None
                                 and not (Path(sys.executable).parent / "flower-superlink").exists(),
                                 reason="flower-superlink not installed")]

ATTACKER_PYPROJECT = """\
[project]
name = "site-attacker"
version = "0.1.0"
description = "A ServerApp that acts against the sites (fdp-flower tests)"
license = "Apache-2.0"
dependencies = []

[tool.flwr.app]
publisher = "fdp-flower-tests"

[tool.flwr.app.components]
serverapp = "site_attacker_app:app"
clientapp = "fdp_flower.client_app:app"

[tool.flwr.app.config]
scenario = ""
overrides = ""
results-dir = ""
attack = ""
"""


def _runs(paths: list[Path]) -> dict[str, tuple[str, str]]:
    """label -> (attack, overrides): the scenario each run names (the server writes the run config)."""
    own = ", ".join(str(p) for p in paths)
    return {"values": ("values", f"{BASE}; algorithm.rounds={ROUNDS}; privacy.eps=0.05; "
                                 "privacy.report_clipped_rows=true"),
            "kind": ("kind", f"{BASE}; privacy.eps=0.1; data={{kind: client_arrays, paths: [{own}]}}"),
            "loss": ("loss", f"{BASE}; privacy.eps=0.1; model.loss={{kind: logistic}}")}


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """Run every attack once on one federation: {label: {"log", "overrides", "before", "after", "status"}},
    plus "paths" (the node files) and "ledgers" (their paths)."""
    tmp = tmp_path_factory.mktemp("attacker")
    paths = write_partitions(partition(load_dataset("paper", seed=0, n_samples=600), 2), tmp / "secret-site", "npz")
    app = tmp / "attacker"
    app.mkdir()
    (app / "pyproject.toml").write_text(ATTACKER_PYPROJECT)
    shutil.copy(HERE / "site_attacker_app.py", app / "site_attacker_app.py")
    sites = [{"max-eps": MAX_EPS}, {"max-eps": MAX_EPS, "clipped-rows-sigma": COUNT_SIGMA}]
    fed = LoopbackFederation(tmp, app_dir=app, data_paths=paths, site_config=sites)
    results: dict = {"paths": paths}
    try:
        fed.start()
        ledgers = [fed.ledger_path(i) for i in range(2)]
        results["ledgers"] = ledgers

        def snapshot():
            return [p.read_bytes() if p.exists() else b"" for p in ledgers]

        for label, (attack, overrides) in _runs(paths).items():
            out = tmp / "out" / label
            before = snapshot()
            run_id, status = fed.run({"scenario": str(SCENARIO), "overrides": overrides, "results-dir": str(out),
                                      "attack": attack}, timeout=600)
            assert status == "finished:completed", (label, fed.logs())
            results[label] = {"log": json.loads((out / f"{attack}.json").read_text()), "overrides": overrides,
                              "before": before, "after": snapshot(), "run_id": run_id}
    finally:
        fed.stop()
    return results


def _partitions(log: dict, replies: dict) -> dict[str, int]:
    """node id -> partition, from the released replies' metrics."""
    return {node: int(r["metrics"]["partition-id"][0]) for node, r in replies.items() if "metrics" in r}


def _new_lines(entry: dict, i: int) -> list[dict]:
    """The release lines run ``entry`` appended to site ``i``'s ledger (its earlier bytes kept as they were)."""
    before, after = entry["before"][i], entry["after"][i]
    assert after.startswith(before)  # append-only: nothing earlier rewritten
    lines = [json.loads(line) for line in after[len(before):].decode().splitlines()]
    assert {line["kind"] for line in lines} <= {"open", "release"}  # a new ledger's first line opens it
    return [line for line in lines if line["kind"] == "release"]


def _features(scenario, basis, path: Path, partition_id: int):
    data = load_partition(scenario, partition_id, str(path))
    features, clipped = site_features(scenario, basis, data)
    return features, clipped, data.response


def _chi2_ok(z: np.ndarray) -> bool:
    """Two-sided chi-square test of sum z^2 ~ chi2(n) at level ALPHA."""
    total = float(np.sum(np.square(z)))
    return bool(stats.chi2.ppf(ALPHA / 2, z.size) <= total <= stats.chi2.isf(ALPHA / 2, z.size))


def _mean_ok(z: np.ndarray) -> bool:
    """Two-sided z test of mean(z) = 0 (z ~ N(0, 1) iid) at level ALPHA."""
    return bool(abs(float(z.mean())) * np.sqrt(z.size) <= stats.norm.isf(ALPHA / 2))


def _assert_refused_unchanged(entry: dict, replies: dict, reason: str, paths) -> None:
    assert len(replies) == 2
    for reply in replies.values():
        assert set(reply) == {"error"}, reply  # an error reply: no release, no metrics
        assert reason in reply["error"], reply
        _assert_no_local_path(reply["error"], paths)
    assert entry["after"] == entry["before"]  # both ledgers byte-identical


def _assert_no_local_path(reason: str, paths) -> None:
    """No data file, no directory of it, nor the deployment's directory (ledgers, FLWR_HOME) in ``reason``."""
    for p in paths:
        assert str(p) not in reason and str(p.parent) not in reason, reason
    assert str(paths[0].parents[1]) not in reason and "secret-site" not in reason, reason


def _app_function(name: str):
    sys.path.insert(0, str(HERE))
    try:
        import site_attacker_app
    finally:
        sys.path.remove(str(HERE))
    return getattr(site_attacker_app, name)


def _released_z(entry: dict, paths, part: str, basis_of) -> tuple[dict, dict, dict]:
    """For the ``part`` ("points" or "bases") of the values run: {(site, index): standardized noise}, site ->
    that part's ledger lines by round and kind, and {site: the replies' clipped-row metrics}; ``basis_of(j)``
    is the basis of entry j (its point is crafted_points()[j] for "points", zero for "bases")."""
    scenario = load_scenario(SCENARIO, parse_override_string(entry["overrides"]))
    loss = build_objective(scenario).loss
    points = _app_function("crafted_points")(K)
    rounds = entry["log"][part]
    partitions = _partitions(entry["log"], rounds[0]["replies"])
    assert sorted(partitions.values()) == [0, 1]
    z, ledger, counts = {}, {}, {}
    for node, p in partitions.items():
        lines = _new_lines(entry, p)
        ledger[p] = lines
        terms = {line["round"]: line for line in lines if line["mechanism"] != "clipped_rows_count"}
        for r in rounds:
            j = r.get("point", r.get("basis"))
            reply = r["replies"][node]
            assert "error" not in reply, reply
            sigma = terms[r["round"]]["sigma"]  # the ledger's record of this release
            assert reply["metrics"]["sigma"][0] == pytest.approx(sigma, rel=1e-12)
            point = points[j] if part == "points" else np.zeros(K)
            features, clipped, response = _features(scenario, basis_of(j), paths[p], p)
            truth = -loss.mean_subgradient(point, features, response)
            released = np.asarray(reply["released"][0])
            assert released.shape == (K,) and np.all(np.isfinite(released))
            z[(p, j)] = (released - truth) / sigma
            counts.setdefault(p, []).append((reply["metrics"], clipped, r["round"]))
    return z, ledger, counts


def test_another_data_kind_is_refused_with_nothing_charged_and_no_path(deployment):
    """Attack 2: the scenario names client_arrays pointing at the nodes' own files."""
    entry = deployment["kind"]
    assert all(entry["before"])  # ledgers that hold the values run's releases, kept as they are
    _assert_refused_unchanged(entry, entry["log"]["round1"], "this site serves its own data file only",
                              deployment["paths"])
    print(f"client_arrays on the nodes' own files: {next(iter(entry['log']['round1'].values()))['error']!r}")


def test_points_the_site_does_not_accept_release_and_charge_nothing(deployment):
    """Attack 3, first half: 1e300, NaN, inf, twice the largest public magnitude, one coordinate too many,
    each at round 11 of the values run: error replies, and no ledger line of round 11 on either site."""
    entry = deployment["values"]
    replies = entry["log"]["refused"]
    assert sorted(replies) == sorted(["1e300", "nan", "inf", "2*max", "length+1"])
    for name, per_node in replies.items():
        assert len(per_node) == 2
        for reply in per_node.values():
            assert set(reply) == {"error"} and "point" in reply["error"], (name, reply)
            _assert_no_local_path(reply["error"], deployment["paths"])
    for i in range(2):
        rounds = [line["round"] for line in _new_lines(entry, i)]
        assert ROUNDS not in rounds and set(rounds) == set(range(1, POINTS + BASES + 1))


def test_crafted_points_cannot_absorb_or_scale_the_noise(deployment):
    """Attack 3: rounds 1-6 at crafted points; the released term minus the noise-free one, over the
    ledger's sigma of that release, is N(0, 1) per point and site (60 draws each).  A noise-free release,
    or noise absorbed by adding it to a value of magnitude 1.5 * 2^59 (the old release), fails the check."""
    entry = deployment["values"]
    scenario = load_scenario(SCENARIO, parse_override_string(entry["overrides"]))
    basis = build_basis(scenario)
    z, ledger, _ = _released_z(entry, deployment["paths"], "points", lambda j: basis)
    assert len(z) == 2 * POINTS
    for (p, j), draws in z.items():
        assert _chi2_ok(draws), (p, j, float(np.sum(draws**2)))
        assert _mean_ok(draws), (p, j, float(draws.mean()))
    for reply in entry["log"]["points"][-1]["replies"].values():  # the site's own report: within its policy
        assert reply["site"]["max-eps"] == MAX_EPS and 0 < reply["site"]["eps"] <= MAX_EPS, reply["site"]
    for p, lines in ledger.items():  # one line per release (site 1: and one per count, attack 4)
        terms = [line for line in lines if line["mechanism"] != "clipped_rows_count"]
        assert sorted(line["round"] for line in terms) == list(range(1, POINTS + BASES + 1))
        assert all(line["run"] == entry["run_id"] and line["noise"] == "os_entropy" for line in lines)
    # the check has teeth: a noise-free release fails it, and so does the old release, which added the noise
    # to a primal of magnitude 1.5 * 2^59 (float spacing 128): what is left of the noise once the server
    # subtracts that primal
    sigma = ledger[0][0]["sigma"]
    assert not _chi2_ok(np.zeros(K))
    big = _app_function("crafted_points")(K)[0][0]
    noise = sigma * np.random.default_rng(0).standard_normal(K)
    assert not _chi2_ok(((big + noise) - big) / sigma)
    print(f"{len(z)} (site, point) groups of {K} draws: sum z^2 / n in "
          f"[{min(np.mean(v**2) for v in z.values()):.3f}, {max(np.mean(v**2) for v in z.values()):.3f}], "
          f"sigma {sigma:.4g}; chi2 bounds / n [{stats.chi2.ppf(ALPHA / 2, K) / K:.3f}, "
          f"{stats.chi2.isf(ALPHA / 2, K) / K:.3f}]")


def test_a_count_of_clipped_rows_is_sent_only_by_a_site_that_opted_in_and_charged(deployment):
    """Attack 4: rounds 7-10 with the run config asking for the count of clipped rows and a new basis in every
    message: site 0 (no clipped-rows-sigma) sends no count; site 1 sends the count plus N(0, COUNT_SIGMA^2)
    noise and its ledger records each one; the released terms keep the ledger's spread."""
    entry = deployment["values"]
    scenario = load_scenario(SCENARIO, parse_override_string(entry["overrides"]))
    assert scenario.privacy.report_clipped_rows
    bases = _app_function("crafted_bases")(build_basis(scenario).to_arrays())
    z, ledger, counts = _released_z(entry, deployment["paths"], "bases",
                                    lambda j: FunctionalBasis.from_arrays(bases[j]))
    assert len(z) == 2 * BASES
    terms = np.concatenate(list(z.values()))
    assert _chi2_ok(terms), float(np.mean(terms**2))
    for metrics, _clipped, _r in counts[0]:  # no opt-in: no count, whatever the run config asks
        assert "clipped-rows" not in metrics and "clipped-rows-sigma" not in metrics, metrics
    assert not [line for line in ledger[0] if line["mechanism"] == "clipped_rows_count"]
    charged = {line["round"]: line for line in ledger[1] if line["mechanism"] == "clipped_rows_count"}
    assert sorted(charged) == list(range(1, POINTS + BASES + 1))  # each count sent is charged, by round
    count_z = []
    for metrics, clipped, r in counts[1]:
        assert metrics["clipped-rows-sigma"][0] == COUNT_SIGMA
        assert charged[r]["sigma"] == COUNT_SIGMA and charged[r]["sensitivity"] == 1.0
        assert charged[r]["run"] == entry["run_id"] and charged[r]["noise"] == "os_entropy"
        count_z.append((metrics["clipped-rows"][0] - clipped) / COUNT_SIGMA)
    count_z = np.asarray(count_z)
    assert count_z.size == BASES and _chi2_ok(count_z), count_z  # the count's noise is there, at its sigma
    assert not _chi2_ok(np.zeros(BASES))  # exact counts would fail the check
    print(f"site 1's counts minus the true ones, over sigma: {np.round(count_z, 3).tolist()} "
          f"(true counts {[c for _m, c, _r in counts[1]]})")


def test_a_loss_the_sites_responses_break_is_refused(deployment):
    """Attack 5: the logistic loss (its bound G = c1 assumes labels in {-1, +1}) on real-valued responses:
    refused, nothing released, ledgers byte-identical."""
    entry = deployment["loss"]
    assert all(entry["before"])
    _assert_refused_unchanged(entry, entry["log"]["round1"], "labels in {-1, +1}", deployment["paths"])
