"""A server that acts (issue: the guarantee holds against a malicious server), tried against the real
client code of FDP-ADMM on a node with its own data file and site policy: crafted points, another data
kind, another loss, a request for data-dependent counts, and error replies that would leak paths.

Every release is the site's noisy descent term at the point the server names (docs/privacy.md): whatever
the server sends, the released noise keeps the spread the site's ledger records, and a request outside
the site's policy is refused with nothing released and nothing charged."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fdp_flower.algorithms.fdp_admm.config import parse_scenario
from fdp_flower.algorithms.fdp_admm.plan import build_basis, build_objective, site_plan
from fdp_flower.algorithms.fdp_admm.site import site_features
from fdp_flower.algorithms.protocol import MAX_PUBLIC_MAGNITUDE, SiteRequest
from fdp_flower.functional import design
from fdp_flower.functional.node_files import read_node_file, write_node_file
from fdp_flower.wire import pack_requests
from fdp_flower.wire.flwr import Context, Message, MessageType, RecordDict

K, M_I, RUN = 6, 300, 4242


@pytest.fixture(autouse=True)
def task_identity():
    """Flower's Message constructor reads the process's task identity (set by Flower's runtimes)."""
    from flwr.supercore.task_identity import TaskIdentity

    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 0
    yield
    TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved


def scenario(**sections):
    base = {"seed": 9, "data": {"kind": "node_files", "grid_points": 21}, "federation": {"num_clients": 2},
            "basis": {"kind": "fixed", "n_components": K}, "algorithm": {"rounds": 400},
            "privacy": {"eps": 1.0, "delta": 1.0e-5}}
    for key, value in sections.items():
        base[key] = {**base.get(key, {}), **value}
    return parse_scenario(base)


@pytest.fixture
def site(tmp_path):
    data = design.simulate_slice(4, 0, M_I, tau=0.5, grid=np.linspace(0, 1, 21))
    path = write_node_file(tmp_path / "secret-site" / "node0.npz", data)
    ledger = tmp_path / "ledger"

    def context(run_id=RUN, **extra):
        return Context(run_id=run_id, node_id=5, node_config={"partition-id": 0, "num-partitions": 2,
                                                              "data-path": str(path), "ledger-dir": str(ledger),
                                                              "max-eps": 1e6, **extra},
                       state=RecordDict(), run_config={})
    return path, ledger / "site-ledger.jsonl", context


def ask(monkeypatch, sc, ctx, round_, point):
    from fdp_flower import client_app

    monkeypatch.setattr(client_app, "run_scenario", lambda _ctx: sc)
    basis = build_basis(sc)
    content = pack_requests([SiteRequest(None, round_, {"point": point})], {},
                            {f"basis_{k}": v for k, v in basis.to_arrays().items()})
    return client_app.train(Message(content, dst_node_id=5, message_type=MessageType.TRAIN), ctx)


def noise_free_term(sc, path, point):
    data = read_node_file(path)
    features, _ = site_features(sc, build_basis(sc), data)
    return -build_objective(sc).loss.mean_subgradient(np.asarray(point, float), features, data.response)


def test_crafted_points_cannot_scale_or_absorb_the_noise(site, monkeypatch):
    """Points chosen to overflow a projection or to absorb the noise in floating point (the old release
    added the noise to a primal of magnitude 2^59: float spacing 64 against sigma 0.36), subnormals and
    zero: the released term minus the noise-free one, over the ledger's sigma, is N(0, 1) in every
    coordinate.  150 releases (K = 6): 900 draws."""
    path, ledger, context = site
    sc = scenario()
    sigma = float(site_plan(sc, build_basis(sc)).calibration(1, M_I)[1])
    points = [np.full(K, 1.5 * 2.0**59), np.full(K, -1e99), np.r_[1e99, -1e99, 0, 0, 1e99, 1],
              np.full(K, 5e-324), np.zeros(K), np.full(K, 1e-310) * (-1) ** np.arange(K)]
    standardized = []
    for r in range(1, 151):
        point = points[r % len(points)]
        reply = ask(monkeypatch, sc, context(), r, point)
        assert not reply.has_error(), reply.error.reason
        assert float(reply.content["metrics"]["sigma"][0]) == pytest.approx(sigma, rel=1e-12)
        released = reply.content["arrays"]["release"].numpy()[0]
        standardized.append((released - noise_free_term(sc, path, point)) / sigma)
    z = np.concatenate(standardized)
    n = z.size
    assert abs(z.mean()) < 4 / np.sqrt(n)
    low, high = stats.chi2.ppf(1e-6, n), stats.chi2.ppf(1 - 1e-6, n)
    assert low <= np.sum(z**2) <= high  # the spread the ledger records: not absorbed, not scaled
    assert sum('"round"' in line for line in ledger.read_text().splitlines()) == 150  # every release charged


@pytest.mark.parametrize("point", [np.full(K, 1e300), np.full(K, np.nan), np.full(K, np.inf),
                                   np.full(K, 2 * MAX_PUBLIC_MAGNITUDE), np.zeros(K + 1)])
def test_a_point_the_site_does_not_accept_releases_nothing(site, monkeypatch, point):
    path, ledger, context = site
    reply = ask(monkeypatch, scenario(), context(), 1, point)
    assert reply.has_error() and not reply.has_content()
    assert "point" in reply.error.reason
    assert not ledger.exists() or ledger.read_text() == ""  # nothing charged


def test_another_data_kind_cannot_read_the_sites_file(site, monkeypatch, tmp_path):
    """A scenario naming a simulated or a client_arrays source on a node with a data-path: refused, nothing
    released or charged, and the error reply names no local path."""
    path, ledger, context = site
    decoys = [write_node_file(tmp_path / f"{name}.npz", design.simulate_slice(1, 0, 50, tau=0.5,
                                                                             grid=np.linspace(0, 1, 21)))
              for name in ("x", "y")]
    for data in ({"kind": "client_arrays", "paths": [str(p) for p in decoys]},
                 {"kind": "paper_simulation", "n_samples": 600, "grid_points": 21}):
        sc = parse_scenario({**scenario().model_dump(mode="json"), "data": data})
        reply = ask(monkeypatch, sc, context(), 1, np.zeros(K))
        assert reply.has_error() and "own data file only" in reply.error.reason
        assert str(path.parent) not in reply.error.reason and "secret-site" not in reply.error.reason
    assert not ledger.exists()


def test_error_replies_carry_no_local_path(site, monkeypatch):
    """A node file that does not fit the scenario (another grid): the reason names the problem, not where
    the file is."""
    path, ledger, context = site
    sc = scenario(data={"grid_points": 31})
    reply = ask(monkeypatch, sc, context(), 1, np.zeros(K))
    assert reply.has_error() and "grid" in reply.error.reason
    assert "secret-site" not in reply.error.reason and str(path) not in reply.error.reason
    assert "<data-path>" in reply.error.reason


def test_a_loss_whose_bound_the_sites_labels_break_is_refused(site, monkeypatch):
    """The logistic loss's G = c1 assumes labels in {-1, +1}; the site's responses are real-valued:
    refused on the site (the sensitivity would be 21.6 times its calibration), nothing released."""
    path, ledger, context = site
    reply = ask(monkeypatch, scenario(model={"loss": {"kind": "logistic"}}), context(), 1, np.zeros(K))
    assert reply.has_error() and "labels in {-1, +1}" in reply.error.reason
    assert not ledger.exists()
    shifted = scenario(model={"loss": {"kind": "logistic"}}, data={"response_offset": 3.0})
    assert ask(monkeypatch, shifted, context(), 1, np.zeros(K)).has_error()


def test_the_server_cannot_ask_a_site_for_its_count_of_clipped_rows(site, monkeypatch):
    path, ledger, context = site
    reply = ask(monkeypatch, scenario(privacy={"report_clipped_rows": True}), context(), 1, np.zeros(K))
    assert not reply.has_error()
    assert set(reply.content["metrics"].keys()) == {"partition-id", "num-examples", "sensitivity", "sigma"}


def test_a_site_that_opts_in_sends_a_noisy_charged_count(site, monkeypatch):
    """With the node config's clipped-rows-sigma the site sends its count plus noise and charges it:
    two charges for the round (the descent term and the count)."""
    path, ledger, context = site
    reply = ask(monkeypatch, scenario(), context(**{"clipped-rows-sigma": 5.0}), 1, np.zeros(K))
    assert not reply.has_error()
    metrics = reply.content["metrics"]
    assert float(metrics["clipped-rows-sigma"][0]) == 5.0 and isinstance(metrics["clipped-rows"][0], float)
    charged = [line for line in ledger.read_text().splitlines() if '"round": 1' in line]
    assert len(charged) == 2
