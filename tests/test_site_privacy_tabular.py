"""DP-ADMM / DP-AccADMM and peer-to-peer nodes with their own tabular file (issue: every family under the site
policy): through the real ClientApp train handler, a node whose node config names its ``data-path`` (data kind
``node_files``) charges every release to its site ledger before drawing, refuses past ``max-eps`` with nothing
released, draws noise the run seed does not reproduce, and serves that file only.

The release is checked against what the server could compute if it held the site's file: the released term
minus the noise-free one, over the ledger's sigma, must be N(0, 1) in every coordinate (chi-square), and must
not be the run seed's draw."""
from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from fdp_flower.algorithms.protocol import SiteRequest
from fdp_flower.algorithms.registry import parse_any_scenario
from fdp_flower.data.tabular import write_arrays_file
from fdp_flower.privacy.mechanisms import release_rng
from fdp_flower.wire import pack_requests
from fdp_flower.wire.flwr import Context, Message, MessageType, RecordDict
from tests.test_faults import task_identity  # noqa: F401  (autouse fixture: Flower's task identity)

K, M_I, RUN = 5, 200, 5151


def gradient_scenario(kind="dp_admm", **sections):
    base = {"name": "site_dp_admm", "seed": 3, "data": {"kind": "node_files"}, "federation": {"num_clients": 2},
            "model": {"loss": {"kind": "logistic"}, "penalty": {"kind": "l1", "lam": 1e-3},
                      "constraint": {"kind": "lasso"}, "clip_c1": 1.0},
            "algorithm": {"kind": kind, "rounds": 50, "rho": 0.03, "eta": 4.0},
            "privacy": {"enabled": True, "eps": 1.0, "delta": 1e-5}}
    base.update(sections)
    return parse_any_scenario(base)


def p2p_scenario(**sections):
    base = {"name": "site_p2p", "seed": 3, "federation": {"num_clients": 4}, "topology": {"kind": "ring"},
            "data": {"kind": "node_files"},
            "model": {"loss": {"kind": "absolute"}, "penalty": {"kind": "none", "lam": 0.0}, "clip_c1": 1.5},
            "algorithm": {"kind": "zcdp_nfl", "rho": 1.0, "rounds": 50, "step": {"kind": "inv", "eta0": 30.0},
                          "budget": {"kind": "constant"}},
            "privacy": {"enabled": True, "mode": "total", "eps": 1.0, "delta": 1e-5}}
    base.update(sections)
    return parse_any_scenario(base)


@pytest.fixture
def rows():
    rng = np.random.default_rng(11)
    features = rng.standard_normal((M_I, K))
    labels = np.where(features @ np.arange(1.0, K + 1) + rng.standard_normal(M_I) > 0, 1.0, -1.0)
    real = features @ np.ones(K) + 0.3 * rng.standard_normal(M_I)
    return features, labels, real


def npz_site(tmp_path, features, response):
    return write_arrays_file(tmp_path / "secret-site" / "node0.npz", features, response)


def csv_site(tmp_path, features, response):
    path = tmp_path / "secret-site" / "node0.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    header = ",".join([f"x{k}" for k in range(features.shape[1])] + ["y"])
    np.savetxt(path, np.column_stack([features, response]), delimiter=",", header=header, comments="")
    return path


def context(path, ledger_dir, run_id=RUN, **site):
    return Context(run_id=run_id, node_id=5, node_config={"partition-id": 0, "num-partitions": site.pop("n", 2),
                                                          "data-path": str(path), "ledger-dir": str(ledger_dir),
                                                          **site},
                   state=RecordDict(), run_config={})


def train(monkeypatch, sc, ctx, round_, name, point):
    """The server's request of ``round_``: ``{name: point}``, or the mapping ``name`` itself."""
    from fdp_flower import client_app

    monkeypatch.setattr(client_app, "run_scenario", lambda _ctx: sc)
    public = dict(name) if isinstance(name, dict) else {name: point}
    content = pack_requests([SiteRequest(None, round_, public)], {}, {})
    return client_app.train(Message(content, dst_node_id=5, message_type=MessageType.TRAIN), ctx)


def charges(ledger_dir) -> list[dict]:
    path = ledger_dir / "site-ledger.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if '"round"' in line]


# ------------------------------------------------------------------ the two families' noise-free terms
def gradient_truth(sc, features, response, point, round_):
    from fdp_flower.algorithms.gradient_admm.plan import site_plan
    from fdp_flower.algorithms.gradient_admm.site import SiteData, data_term

    site = SiteData.clip([0], [features], [response], sc.model.clip_c1)
    plan = site_plan(sc, K)
    term = data_term(plan.loss, point, site.features[0], site.responses[0])
    return term, float(plan.calibration(round_, M_I)[1])


def p2p_truth(sc, features, response, point, round_):
    from fdp_flower.clients.p2p import node_local_setup

    _alg, plan, (clipped, y) = node_local_setup(sc, features, response)
    from fdp_flower.algorithms.p2p.site import descent_term

    return descent_term(plan, point, clipped, y), float(plan.calibration(round_, 0, M_I)[1])


def pr_admm_scenario(**sections):
    return p2p_scenario(**{"model": {"loss": {"kind": "logistic"}, "penalty": {"kind": "l2", "lam": 0.1},
                                     "clip_c1": 1.0},
                           "algorithm": {"kind": "pr_admm", "eta": 0.05, "rounds": 50}, **sections})


def pr_admm_truth(sc, features, response, public, round_):
    """PR-ADMM's exact local solution at the public values (the Newton solve the node runs)."""
    from fdp_flower.algorithms.p2p.site import exact_solution
    from fdp_flower.clients.p2p import node_local_setup

    _alg, plan, (clipped, y) = node_local_setup(sc, features, response)
    return exact_solution(plan, 0, public, clipped, y)[0], float(plan.calibration(round_, 0, M_I)[1])


FAMILIES = {  # name -> (scenario builder, point name, noise-free term, response column)
    "dp_admm": (gradient_scenario, "x_hat", gradient_truth, 1),
    "dp_acc_admm": (lambda **s: gradient_scenario("dp_acc_admm", **s), "x_hat", gradient_truth, 1),
    "zcdp_nfl": (p2p_scenario, "point", p2p_truth, 2),
    "dp_nfl": (lambda **s: p2p_scenario(**{"algorithm": {"kind": "dp_nfl", "rho": 1.0, "rounds": 50,
                                                         "step": {"kind": "inv", "eta0": 30.0}}, **s}),
               "point", p2p_truth, 2),
    "zcdp_grad_nfl": (lambda **s: p2p_scenario(**{"algorithm": {"kind": "zcdp_grad_nfl", "rounds": 50,
                                                                "step": {"kind": "inv", "eta0": 5.0},
                                                                "budget": {"kind": "constant"}}, **s}),
                      "point", p2p_truth, 2),
    "p_admm": (lambda **s: p2p_scenario(**{"model": {"loss": {"kind": "squared", "residual_bound": 2.0},
                                                     "penalty": {"kind": "l2", "lam": 0.1}, "clip_c1": 1.5},
                                           "algorithm": {"kind": "p_admm", "eta": 0.3, "gamma": 1.0, "rounds": 50,
                                                         "decay": {"kind": "periodic", "decay": 0.9, "period": 20}},
                                           **s}),
               "point", p2p_truth, 2),
}
P2P_FAMILIES = ("zcdp_nfl", "dp_nfl", "zcdp_grad_nfl", "p_admm", "pr_admm")
MAIN = ["dp_admm", "dp_acc_admm", "zcdp_nfl"]  # the ledger, max-eps and file-only tests run on one p2p kind


@pytest.mark.parametrize("family", MAIN)
@pytest.mark.parametrize("writer", [npz_site, csv_site], ids=["npz", "csv"])
def test_a_node_with_its_own_file_charges_its_ledger_and_draws_noise_the_run_seed_does_not_give(
        tmp_path, monkeypatch, rows, family, writer):
    build, name, truth, column = FAMILIES[family]
    sc = build()
    features, response = rows[0], rows[column]
    path = writer(tmp_path, features, response)
    ledger = tmp_path / "ledger"
    n = 4 if family in P2P_FAMILIES else 2
    point = np.linspace(-0.5, 0.5, K)
    standardized, residuals = [], []
    for r in range(1, 31):
        reply = train(monkeypatch, sc, context(path, ledger, n=n), r, name, point)
        assert not reply.has_error(), reply.error.reason
        released = reply.content["arrays"]["release"].numpy()[0]
        term, sigma = truth(sc, features, response, point, r)
        assert float(reply.content["metrics"]["sigma"][0]) == pytest.approx(sigma, rel=1e-12)
        assert reply.content["site"]["releases"] == r  # the site's own totals ride on the reply
        standardized.append((released - term) / sigma)
        seeded = sigma * release_rng(sc.seed, 0, r, "seeded").standard_normal(K)
        residuals.append(np.max(np.abs(released - term - seeded)) / sigma)
    z = np.concatenate(standardized)
    assert stats.chi2.ppf(1e-6, z.size) <= np.sum(z**2) <= stats.chi2.ppf(1 - 1e-6, z.size)
    # the run seed's draw is not the noise: its residual is ~ |N(0, 2)| per coordinate, never 0
    assert min(residuals) > 1e-3
    events = charges(ledger)
    assert [e["round"] for e in events] == list(range(1, 31))  # every release charged, in order
    assert {e["noise"] for e in events} == {"os_entropy"}


@pytest.mark.parametrize("family", MAIN)
def test_a_node_with_its_own_file_refuses_past_max_eps_with_nothing_released(tmp_path, monkeypatch, rows, family):
    from fdp_flower.privacy.ledger import GaussianRelease, pld_epsilon

    build, name, truth, column = FAMILIES[family]
    sc = build()
    path = npz_site(tmp_path, rows[0], rows[column])
    ledger = tmp_path / "ledger"
    n = 4 if family in P2P_FAMILIES else 2
    point = np.zeros(K)
    first = train(monkeypatch, sc, context(path, ledger, n=n), 1, name, point)
    assert not first.has_error(), first.error.reason
    event = charges(ledger)[0]
    one = GaussianRelease(0, 1, event["sensitivity"], event["sigma"], neighbouring=event["neighbouring"],
                          mechanism=event["mechanism"])
    two = pld_epsilon([one, GaussianRelease(0, 2, one.sensitivity, one.sigma, neighbouring=one.neighbouring,
                                            mechanism=one.mechanism)], 1e-5)
    cap = (pld_epsilon([one], 1e-5) + two) / 2  # the first release fits, a second would not
    before = (ledger / "site-ledger.jsonl").read_bytes()
    ctx = context(path, ledger, n=n, **{"max-eps": cap})
    reply = train(monkeypatch, sc, ctx, 2, name, point)
    assert reply.has_error() and "max-eps" in reply.error.reason and not reply.has_content()
    assert (ledger / "site-ledger.jsonl").read_bytes() == before  # nothing charged
    assert "secret-site" not in reply.error.reason and str(tmp_path) not in reply.error.reason


@pytest.mark.parametrize("family", MAIN)
def test_a_node_with_its_own_file_serves_that_file_only(tmp_path, monkeypatch, rows, family):
    """Another data kind (a public set, files the scenario names) on a node with a data-path, a request for another
    partition, and node_files without a data-path: refused, nothing released or charged, no local path in the
    reply."""
    build, name, truth, column = FAMILIES[family]
    path = npz_site(tmp_path, rows[0], rows[column])
    ledger = tmp_path / "ledger"
    n = 4 if family in P2P_FAMILIES else 2
    public = {"kind": "breast_cancer"} if family not in P2P_FAMILIES else {"kind": "synthetic_regression", "dim": K}
    decoy = write_arrays_file(tmp_path / "decoy.npz", rows[0], rows[column])
    named = {"kind": "arrays", "paths": [str(decoy)] * n}
    for data in (public, named):
        reply = train(monkeypatch, build(data=data), context(path, ledger, n=n), 1, name, np.zeros(K))
        assert reply.has_error() and "own data file only" in reply.error.reason, reply.error.reason
    from fdp_flower import client_app

    sc = build()
    monkeypatch.setattr(client_app, "run_scenario", lambda _ctx: sc)
    other = pack_requests([SiteRequest(1, 1, {name: np.zeros(K)})], {}, {})
    reply = client_app.train(Message(other, dst_node_id=5, message_type=MessageType.TRAIN), context(path, ledger, n=n))
    assert reply.has_error() and "holds partition 0 only" in reply.error.reason
    bare = Context(run_id=RUN, node_id=5, node_config={"partition-id": 0, "num-partitions": n}, state=RecordDict(),
                   run_config={})
    reply = train(monkeypatch, sc, bare, 1, name, np.zeros(K))
    assert reply.has_error() and "names no data-path" in reply.error.reason
    missing = train(monkeypatch, sc, context(tmp_path / "secret-site" / "gone.npz", ledger, n=n), 1, name, np.zeros(K))
    assert missing.has_error() and "secret-site" not in missing.error.reason and "<data-path>" in missing.error.reason
    assert charges(ledger) == []


def test_a_loss_whose_bound_the_nodes_labels_break_is_refused(tmp_path, monkeypatch, rows):
    """The logistic loss's G = c1 assumes labels in {-1, +1}: real-valued responses are refused on the node
    (DP-ADMM and a peer-to-peer node alike), nothing released or charged."""
    path = npz_site(tmp_path, rows[0], rows[2])
    ledger = tmp_path / "ledger"
    reply = train(monkeypatch, gradient_scenario(), context(path, ledger), 1, "x_hat", np.zeros(K))
    assert reply.has_error() and "{-1, +1}" in reply.error.reason
    logistic = p2p_scenario(model={"loss": {"kind": "logistic"}, "penalty": {"kind": "l2", "lam": 0.1},
                                   "clip_c1": 1.0},
                            algorithm={"kind": "pr_admm", "eta": 0.05, "rounds": 20})
    reply = train(monkeypatch, logistic, context(path, ledger, n=4), 1, "point", np.zeros(K))
    assert reply.has_error() and "{-1, +1}" in reply.error.reason
    assert charges(ledger) == []


# ------------------------------------------------------------------ a server that sends crafted values
CRAFTED = [np.full(K, 1.5 * 2.0**59), np.r_[1.5 * 2.0**59, np.zeros(K - 1)], np.full(K, -1e99), np.zeros(K),
           np.r_[1e99, -1e99, 0.0, 1.0, 1e99]]
REFUSED = [np.full(K, 1e300), np.full(K, np.nan), np.full(K, np.inf), np.zeros(K + 1)]


def test_crafted_duals_and_neighbour_sums_of_pr_admm_are_refused_or_keep_the_ledgers_spread(tmp_path, monkeypatch,
                                                                                              rows):
    """PR-ADMM's exact solve is sent a point, a dual and a neighbour sum.  Values that would push the solution to a
    magnitude where float spacing absorbs part of the noise (1.5 * 2^59, 1e99) are refused with nothing charged; a
    moderate crafted state is released with the ledger's spread (40 releases x K = 200 draws)."""
    sc = pr_admm_scenario()
    features, labels = rows[0], rows[1]
    path = npz_site(tmp_path, features, labels)
    ledger = tmp_path / "ledger"
    zero = np.zeros(K)
    for bad in (np.full(K, 1.5 * 2.0**59), np.full(K, 1e99), np.full(K, 1e300), np.full(K, np.nan)):
        for key in ("dual", "neighbour_sum"):
            public = {"point": zero, "dual": zero, "neighbour_sum": zero, key: bad}
            reply = train(monkeypatch, sc, context(path, ledger, n=4), 1, public, None)
            assert reply.has_error() and not reply.has_content(), key
    reply = train(monkeypatch, sc, context(path, ledger, n=4), 1, {"point": zero, "weights": zero}, None)
    assert reply.has_error() and "never sent" in reply.error.reason
    assert charges(ledger) == []
    standardized = []
    for r in range(1, 41):
        public = {"point": np.full(K, 1.5 * 2.0**59) if r % 2 else zero, "dual": np.linspace(-2, 2, K),
                  "neighbour_sum": np.linspace(3, -3, K)}
        reply = train(monkeypatch, sc, context(path, ledger, n=4), r, public, None)
        assert not reply.has_error(), reply.error.reason
        term, sigma = pr_admm_truth(sc, features, labels, public, r)
        standardized.append((reply.content["arrays"]["release"].numpy()[0] - term) / sigma)
    z = np.concatenate(standardized)
    assert stats.chi2.ppf(1e-6, z.size) <= np.sum(z**2) <= stats.chi2.ppf(1 - 1e-6, z.size)
    assert len(charges(ledger)) == 40


@pytest.mark.parametrize("family", list(FAMILIES))
def test_crafted_points_are_refused_or_keep_the_ledgers_spread_on_the_node(tmp_path, monkeypatch, rows, family):
    """Through the real ClientApp of a node with its own file: points chosen to absorb the noise in floating point
    (1.5 * 2^59, where float spacing is 128) or near the magnitude bound are released with the spread the ledger
    records (the release is the data term, bounded by G; 60 releases x K = 300 draws, chi-square at 1e-6 each
    side); non-finite, out-of-bound or misshapen points are refused with nothing charged."""
    build, name, truth, column = FAMILIES[family]
    sc = build(algorithm={**build().algorithm.model_dump(mode="json"), "rounds": 60})
    features, response = rows[0], rows[column]
    path = npz_site(tmp_path, features, response)
    ledger = tmp_path / "ledger"
    n = 4 if family in P2P_FAMILIES else 2
    for point in REFUSED:
        reply = train(monkeypatch, sc, context(path, ledger, n=n), 1, name, point)
        assert reply.has_error() and not reply.has_content()
    assert charges(ledger) == []
    standardized = []
    for r in range(1, 61):
        point = CRAFTED[r % len(CRAFTED)]
        reply = train(monkeypatch, sc, context(path, ledger, n=n), r, name, point)
        assert not reply.has_error(), reply.error.reason
        term, sigma = truth(sc, features, response, point, r)
        standardized.append((reply.content["arrays"]["release"].numpy()[0] - term) / sigma)
    z = np.concatenate(standardized)
    assert abs(z.mean()) < 5 / np.sqrt(z.size)
    assert stats.chi2.ppf(1e-6, z.size) <= np.sum(z**2) <= stats.chi2.ppf(1 - 1e-6, z.size)
    assert len(charges(ledger)) == 60
