"""The count of clipped rows is the site's decision: never released unless its node config opts in, and
then released with Gaussian noise and charged to its ledger.

Before: the server's run config (``privacy.report_clipped_rows: true``) made every site send its exact
count, uncharged -- with a basis it may replace every message, a membership test.  The count changes by
at most 1 when one record is replaced, added or removed (checked here on the real feature map of a node
file), so the release is the Gaussian mechanism of sensitivity 1.  Statistical checks: chi-square,
two-sided at level 1e-6.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from fdp_flower.algorithms.fdp_admm.plan import build_basis
from fdp_flower.algorithms.fdp_admm.site import site_features
from fdp_flower.clients.site import SiteSession
from fdp_flower.functional.node_files import read_node_file
from fdp_flower.privacy import GaussianRelease, pld_epsilon
from fdp_flower.privacy.site_ledger import SiteLedgerError
from fdp_flower.privacy.site_policy import (
    CLIPPED_ROWS_MECHANISM,
    SitePolicy,
    SitePolicyError,
    SiteRefusal,
    clipped_rows_event,
    clipped_rows_release,
    read_noise_secret,
    secret_release_rng,
)
from tests.test_faults import task_identity  # noqa: F401  (autouse fixture: Flower's task identity)
from tests.test_site_privacy import RUN, context, node_file, node_scenario

ALPHA = 1e-6


def session(tmp_path, **site) -> SiteSession:
    path = node_file(tmp_path)
    return SiteSession.open(context(path, tmp_path / "ledger", **site), node_scenario(), node_local=True)


def ledger_rows(tmp_path) -> list[dict]:
    path = tmp_path / "ledger" / "site-ledger.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_one_record_changes_the_count_of_clipped_rows_by_at_most_one(tmp_path):
    """Replace-one and add/remove neighbours through the real feature map (scores on the basis, then the clip)."""
    from fdp_flower.algorithms.fdp_admm.config import parse_scenario

    data = read_node_file(node_file(tmp_path))
    norms = np.linalg.norm(build_basis(node_scenario()).scores(data.curves), axis=1)
    clip = float(np.median(norms))  # about half the rows clipped
    raw = node_scenario().model_dump(mode="json")
    sc = parse_scenario({**raw, "model": {**raw["model"], "clip_c1": clip}})
    basis = build_basis(sc)
    rng = np.random.default_rng(3)

    def count(curves):
        return site_features(sc, basis, type(data)(curves, data.response[: len(curves)], data.grid))[1]

    base = count(data.curves)
    assert 0 < base < len(data.curves) and base == int(np.sum(norms > clip))  # some rows clipped, some not
    changes = []
    for trial in range(200):
        j = rng.integers(len(data.curves))
        replacement = data.curves[rng.integers(len(data.curves))] * rng.choice([0.0, 0.5, 3.0, 1e3])
        replaced = data.curves.copy()
        replaced[j] = replacement
        changes.append(count(replaced) - base)
        changes.append(count(np.delete(data.curves, j, axis=0)) - base)  # remove one record
    assert set(changes) <= {-1, 0, 1} and {-1, 1} <= set(changes)  # the bound is attained both ways
    event = clipped_rows_event(0, 1, 4.0)
    assert (event.sensitivity, event.mechanism) == (1.0, CLIPPED_ROWS_MECHANISM)
    assert event.under("add_remove").sensitivity == 1.0


def test_the_release_is_the_count_plus_gaussian_noise():
    draws = np.random.default_rng(11).standard_normal(3)
    rng = np.random.default_rng(11)
    assert [clipped_rows_release(7, 2.5, rng) for _ in range(3)] == pytest.approx(7 + 2.5 * draws, abs=0, rel=1e-15)
    for count, sigma, message in [(-1, 1.0, "count must be a non-negative integer"),
                                  (2.5, 1.0, "count must be a non-negative integer"),
                                  (True, 1.0, "count must be a non-negative integer"),
                                  (3, 0.0, "sigma must be finite and > 0"),
                                  (3, float("nan"), "sigma must be finite and > 0")]:
        with pytest.raises(ValueError, match=message):
            clipped_rows_release(count, sigma, rng)


def test_the_policy_key_opts_in_with_its_sigma():
    assert SitePolicy.from_node_config({}).clipped_rows_sigma is None
    assert SitePolicy.from_node_config({"clipped-rows-sigma": 4}).clipped_rows_sigma == 4.0
    for bad, message in [(0, "greater than 0"), (-1.0, "greater than 0"), (float("inf"), "finite number"),
                         ("yes", "valid number")]:
        with pytest.raises(SitePolicyError, match=f"clipped-rows-sigma: .*{message}"):
            SitePolicy.from_node_config({"clipped-rows-sigma": bad})


def test_without_the_sites_opt_in_the_count_never_leaves_whatever_the_run_asks(tmp_path):
    site = session(tmp_path)
    assert site.clipped_rows(5, client=0, round_=1, requested=True) is None
    assert site.clipped_rows(5, client=0, round_=1, requested=False) is None
    assert ledger_rows(tmp_path) == []  # nothing released, nothing charged


def test_with_the_opt_in_the_count_is_noised_and_charged_before_its_noise(tmp_path):
    secret = tmp_path / "site.secret"
    secret.write_bytes(bytes(range(40)))
    site = session(tmp_path, **{"clipped-rows-sigma": 4.0, "noise-secret-file": str(secret), "max-eps": 50.0})
    released = site.clipped_rows(5, client=0, round_=1, requested=False)  # the server did not even ask
    # the site's own noise, from a stream of its own: not the draw of the primal release of the same round
    own = secret_release_rng(read_noise_secret(secret), RUN, 0, 1, 1).standard_normal()
    primal = secret_release_rng(read_noise_secret(secret), RUN, 0, 1).standard_normal()
    assert released == pytest.approx(5 + 4.0 * own, rel=1e-15) and own != primal
    (opened, row) = ledger_rows(tmp_path)
    assert opened["kind"] == "open"
    assert (row["kind"], row["mechanism"], row["sensitivity"], row["sigma"], row["round"], row["noise"]) == \
        ("release", CLIPPED_ROWS_MECHANISM, 1.0, 4.0, 1, "secret")
    assert site.totals.eps == pytest.approx(pld_epsilon([GaussianRelease(0, 1, 1.0, 4.0)], 1e-5), rel=1e-6)
    # once per (run, client, round): the server cannot average repeated requests
    with pytest.raises(SiteRefusal, match="re-release: run 4242 already received client 0's clipped_rows_count"):
        site.clipped_rows(5, client=0, round_=1, requested=True)
    assert len(ledger_rows(tmp_path)) == 2


def test_the_count_is_refused_past_the_sites_budget_with_nothing_released(tmp_path):
    one, two = (pld_epsilon([GaussianRelease(0, r, 1.0, 4.0) for r in range(n)], 1e-5) for n in (1, 2))
    cap = (one + two) / 2  # one count fits, two do not
    site = session(tmp_path, **{"clipped-rows-sigma": 4.0, "max-eps": cap})
    assert isinstance(site.clipped_rows(5, client=0, round_=1, requested=True), float)
    before = (tmp_path / "ledger" / "site-ledger.jsonl").read_bytes()
    with pytest.raises(SiteRefusal, match="clipped_rows_count release of round 2 would bring the site's eps"):
        site.clipped_rows(5, client=0, round_=2, requested=True)
    assert (tmp_path / "ledger" / "site-ledger.jsonl").read_bytes() == before
    # and a ledger that cannot be trusted releases no count either
    (tmp_path / "ledger" / "site-ledger.jsonl").write_text("")
    with pytest.raises(SiteLedgerError, match="is empty, but its head"):
        site.clipped_rows(5, client=0, round_=3, requested=True)


def test_released_counts_carry_noise_of_the_charged_sigma(tmp_path):
    """Released minus true count over 80 OS-entropy releases: sum of squares / sigma^2 ~ chi2(80)."""
    sigma = 30.0  # 80 releases compose to z = 3.4: a cheap accountant
    site = session(tmp_path, **{"clipped-rows-sigma": sigma, "max-eps": 1e3})
    residual = np.array([site.clipped_rows(12, client=0, round_=r, requested=True) - 12 for r in range(1, 81)])
    low, high = stats.chi2.ppf(ALPHA / 2, residual.size), stats.chi2.ppf(1 - ALPHA / 2, residual.size)
    assert low <= np.sum(residual**2) / sigma**2 <= high
    assert abs(residual.mean()) <= stats.norm.ppf(1 - ALPHA / 2) * sigma / np.sqrt(residual.size)
    rows = ledger_rows(tmp_path)[1:]
    assert len(rows) == 80 and {(r["sigma"], r["sensitivity"]) for r in rows} == {(sigma, 1.0)}


def test_data_the_server_can_count_itself_keep_the_exact_count_on_request(tmp_path):
    from flwr.app import Context, RecordDict

    from fdp_flower.algorithms.fdp_admm.config import parse_scenario

    sc = parse_scenario({"seed": 9, "data": {"n_samples": 80, "grid_points": 21}, "federation": {"num_clients": 2}})
    ctx = Context(run_id=RUN, node_id=5, node_config={"partition-id": 0, "num-partitions": 2}, state=RecordDict(),
                  run_config={})
    site = SiteSession.open(ctx, sc, node_local=False)
    assert site.clipped_rows(5, client=0, round_=1, requested=True) == 5
    assert site.clipped_rows(5, client=0, round_=1, requested=False) is None
