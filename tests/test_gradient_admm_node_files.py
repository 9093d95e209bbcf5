"""DP-ADMM / DP-AccADMM's server on node files (``data.kind: node_files``): the server builds its protocol from
the nodes' setup reports (m_i, d) and A without the pooled rows, refuses bad reports and a graph-guided A in one
line, and drives the same math as the in-process engine.

The fast tests run the real ClientApp setup handler and train handler in this process (a grid that hands each
message to ``client_app``); the slow ones are a real SuperLink and SuperNodes on loopback."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from fdp_flower.algorithms.gradient_admm.nodes import (
    PublicStatistics,
    check_node_reports,
    node_constraint_matrix,
)
from fdp_flower.algorithms.gradient_admm.plan import build_problem, load_scenario_data
from fdp_flower.algorithms.gradient_admm.protocol import node_files_server, server_for
from fdp_flower.algorithms.registry import parse_any_scenario
from fdp_flower.config.base import ScenarioError
from fdp_flower.data.tabular import write_arrays_file
from fdp_flower.engines.flower import LoopbackFederation
from fdp_flower.wire.flwr import Context, Message, RecordDict
from tests.test_faults import task_identity  # noqa: F401  (autouse fixture: Flower's task identity)

APP = Path(__file__).resolve().parents[1]
SCENARIO = APP / "scenarios" / "deploy_dp_admm.yaml"
K, SIZES = 4, (60, 45, 80)


def scenario(data=None, **sections):
    base = {"name": "dp_admm_nodes", "seed": 5, "data": data or {"kind": "node_files"},
            "federation": {"num_clients": len(SIZES)},
            "model": {"loss": {"kind": "logistic"}, "penalty": {"kind": "l1", "lam": 1e-3},
                      "constraint": {"kind": "lasso"}, "clip_c1": 1.0},
            "algorithm": {"kind": "dp_acc_admm", "rounds": 6, "rho": 0.03, "eta": 4.0},
            "privacy": {"enabled": True, "eps": 2.0, "delta": 1e-5}}
    base.update(sections)
    return parse_any_scenario(base)


def site_rows(seed=2):
    rng = np.random.default_rng(seed)
    rows = []
    for m in SIZES:
        a = rng.standard_normal((m, K))
        rows.append((a, np.where(a @ np.arange(1.0, K + 1) + rng.standard_normal(m) > 0, 1.0, -1.0)))
    return rows


def write_sites(directory, rows):
    return [write_arrays_file(Path(directory) / f"node-{i}.npz", a, y) for i, (a, y) in enumerate(rows)]


# ------------------------------------------------------------------ the pure setup path
def test_reports_give_the_plan_and_bad_reports_are_one_line():
    plan = check_node_reports({0: {"num-examples": 60, "dim": 4}, 1: {"num-examples": 45.0, "dim": 4},
                               2: {"num-examples": 80, "dim": 4}}, 3)
    assert plan.sizes.tolist() == [60, 45, 80] and plan.dim == 4 and plan.num_clients == 3
    good = {"num-examples": 10, "dim": 4}
    cases = [({0: good, 1: {"num-examples": 10.5, "dim": 4}}, "client 1: reports m_i (num-examples) = 10.5, not an integer"),
             ({0: good, 1: {"num-examples": -3, "dim": 4}}, "client 1: reports m_i (num-examples) = -3, expected an integer >= 1"),
             ({0: good, 1: {"num-examples": 0, "dim": 4}}, "expected an integer >= 1"),
             ({0: good, 1: {"num-examples": "ten", "dim": 4}}, "not an integer"),
             ({0: good, 1: {"num-examples": float("nan"), "dim": 4}}, "not an integer"),
             ({0: good, 1: {"num-examples": True, "dim": 4}}, "not an integer"),
             ({0: good, 1: {"num-examples": 10, "dim": 5}}, "the nodes' rows differ in dimension: clients [0] have d = 4; "
                                                           "clients [1] have d = 5"),
             ({0: good, 1: {"num-examples": 10}}, "client 1: the setup report lacks 'dim'"),
             ({0: good}, "no setup report from clients [1]"),
             ({0: good, 1: good, 2: good}, "setup reports from clients [2] outside 0..1")]
    for reports, message in cases:
        with pytest.raises(ValueError) as err:
            check_node_reports(reports, 2)
        assert message in str(err.value) and "\n" not in str(err.value), str(err.value)
    with pytest.raises(ValueError, match="the nodes' rows have d = 4 columns, the constraint matrix A has 3"):
        check_node_reports({0: good, 1: good}, 2, dim=3)


def test_graph_guided_a_is_refused_on_node_files_and_a_file_of_a_is_used(tmp_path):
    with pytest.raises(ScenarioError, match="graph_guided estimates A on the pooled rows") as err:
        scenario(model={"loss": {"kind": "logistic"}, "penalty": {"kind": "l1", "lam": 1e-3}})  # A's default
    assert "\n" not in str(err.value)
    with pytest.raises(ScenarioError, match="init_dual 'paper'"):
        scenario(privacy={"enabled": False}, algorithm={"kind": "dp_admm", "rounds": 5, "rho": 0.1, "eta": 1.0,
                                                         "init_dual": "paper", "nonprivate_step": "admm"})
    assert np.array_equal(node_constraint_matrix(scenario(), 4), np.eye(4))
    a = np.array([[1.0, -1.0, 0.0, 0.0], [0.0, 1.0, -1.0, 0.0]])
    np.save(tmp_path / "a.npy", a)
    user = scenario(model={"loss": {"kind": "logistic"}, "penalty": {"kind": "l1", "lam": 1e-3},
                           "constraint": {"kind": "user", "path": str(tmp_path / "a.npy")}})
    assert np.array_equal(node_constraint_matrix(user, 4), a)
    with pytest.raises(ValueError, match="A must be finite with 5 columns"):
        node_constraint_matrix(user, 5)


def test_the_server_from_reports_is_the_server_from_rows(tmp_path):
    """Built from the reported m_i and d, the server has the rows' calibration, gamma and A, and on the same
    releases takes the same steps as the server the in-process engine builds from the pooled rows."""
    rows = site_rows()
    paths = write_sites(tmp_path, rows)
    sim = scenario({"kind": "arrays", "paths": [str(p) for p in paths]})
    nodes = scenario()
    problem = build_problem(sim, load_scenario_data(sim))
    reference = server_for(sim, problem)
    plan = check_node_reports({i: {"num-examples": m, "dim": K} for i, m in enumerate(SIZES)}, len(SIZES))
    matrix = node_constraint_matrix(nodes, plan.dim)
    server = node_files_server(nodes, plan, matrix, evaluator=PublicStatistics(matrix, 1e-3))
    assert np.array_equal(server.sizes, reference.sizes) and server.gamma == reference.gamma
    assert np.array_equal(server.matrix, reference.matrix)
    for i, m in enumerate(SIZES):
        assert server.planned_release(1, i) == reference.planned_release(1, i)
    from fdp_flower.algorithms.gradient_admm.site import answer
    from fdp_flower.privacy.mechanisms import release_rng

    def noise(events):
        return release_rng(5, events[0].client, events[0].round, "seeded")

    sites = problem.site_data()
    for both in range(sim.algorithm.rounds):
        for srv in (reference, server):
            plan_ = srv.begin_round()
            for release in answer(plan_.requests, sites, problem.site_plan(sim.algorithm.rounds, srv.privacy), noise):
                srv.accept(release)
            srv.end_round()
    assert np.array_equal(server.state.x, reference.state.x) and np.array_equal(server.state.u, reference.state.u)
    row = server.history[-1]
    assert set(row) >= {"x_norm", "penalty"} and "objective" not in row
    assert row["x_norm"] == pytest.approx(float(np.linalg.norm(server.state.x)), rel=1e-15)


# ------------------------------------------------------------------ the setup phase through the real ClientApp
class NodesGrid:
    """A grid whose nodes are this process's ClientApp with one context each (node id 10 + i)."""

    def __init__(self, contexts, sc, monkeypatch):
        from fdp_flower import client_app

        monkeypatch.setattr(client_app, "run_scenario", lambda _ctx: sc)
        self.contexts = {10 + i: ctx for i, ctx in enumerate(contexts)}

    def get_node_ids(self):
        return list(self.contexts)

    def send_and_receive(self, messages, timeout=None):
        from fdp_flower import client_app

        replies = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            msg.metadata.__dict__["_message_id"] = f"m{node}"  # as the SuperLink sets it
            reply = client_app.query(msg, self.contexts[node])
            reply.metadata.__dict__["_src_node_id"] = node
            replies.append(reply)
        return replies


def node_context(path, i, ledger_dir, run_id=77, **site):
    return Context(run_id=run_id, node_id=10 + i,
                   node_config={"partition-id": i, "num-partitions": len(SIZES), "data-path": str(path),
                                "ledger-dir": str(ledger_dir / f"site-{i}"), **site},
                   state=RecordDict(), run_config={})


def test_the_setup_phase_learns_m_i_and_d_from_the_nodes(tmp_path, monkeypatch):
    from fdp_flower.strategies.gradient_admm import node_files_strategy

    paths = write_sites(tmp_path / "data", site_rows())
    sc = scenario()
    grid = NodesGrid([node_context(p, i, tmp_path) for i, p in enumerate(paths)], sc, monkeypatch)
    strategy = node_files_strategy(grid, sc, timeout=10)
    assert strategy.server.sizes.tolist() == list(SIZES) and strategy.server.plan.dim == K
    assert strategy.node_of_client == {0: 10, 1: 11, 2: 12} and not strategy.hosts_many_clients
    assert sorted(strategy.site_reports) == [0, 1, 2]
    assert all(r["releases"] == 0 and r["max-eps"] == 10.0 for r in strategy.site_reports.values())
    for i in range(len(SIZES)):  # nothing is charged at setup: no site ledger line yet
        ledger = tmp_path / f"site-{i}" / "site-ledger.jsonl"
        assert not ledger.exists() or '"round"' not in ledger.read_text()


def test_a_site_whose_max_eps_is_below_the_run_refuses_at_setup(tmp_path, monkeypatch):
    from fdp_flower.strategies.node_phase import SetupError
    from fdp_flower.strategies.gradient_admm import node_files_strategy

    paths = write_sites(tmp_path / "data", site_rows())
    sc = scenario()
    contexts = [node_context(p, i, tmp_path, **({"max-eps": 0.5} if i == 1 else {})) for i, p in enumerate(paths)]
    with pytest.raises(SetupError) as err:
        node_files_strategy(NodesGrid(contexts, sc, monkeypatch), sc, timeout=10)
    message = str(err.value)
    assert message.startswith("client 1: site refuses the run at setup: its 6 planned releases would bring the "
                              "site's eps to ") and "> max-eps 0.5" in message and "\n" not in message, message


def test_a_node_with_bad_data_or_another_dimension_stops_the_setup(tmp_path, monkeypatch):
    from fdp_flower.strategies.node_phase import SetupError
    from fdp_flower.strategies.gradient_admm import node_files_strategy

    rows = site_rows()
    rows[2] = (np.hstack([rows[2][0], np.ones((SIZES[2], 1))]), rows[2][1])
    paths = write_sites(tmp_path / "data", rows)
    sc = scenario()
    contexts = [node_context(p, i, tmp_path) for i, p in enumerate(paths)]
    with pytest.raises(SetupError, match=r"the nodes' rows differ in dimension: clients \[0, 1\] have d = 4; "
                                         r"clients \[2\] have d = 5"):
        node_files_strategy(NodesGrid(contexts, sc, monkeypatch), sc, timeout=10)
    rows = site_rows()
    rows[0] = (rows[0][0], np.where(rows[0][1] > 0, 1.0, 0.0))  # 0/1 labels: the logistic bound does not hold
    paths = write_sites(tmp_path / "data2", rows)
    contexts = [node_context(p, i, tmp_path / "l2") for i, p in enumerate(paths)]
    with pytest.raises(SetupError) as err:
        node_files_strategy(NodesGrid(contexts, sc, monkeypatch), sc, timeout=10)
    assert "setup phase failed on node 10: " in str(err.value) and "partition 0:" in str(err.value)
    assert str(tmp_path) not in str(err.value)  # the node's path stays on the node


# ------------------------------------------------------------------ a real deployment on loopback
def _flower_installed() -> bool:
    return shutil.which("flower-superlink") is not None or (Path(sys.executable).parent / "flower-superlink").exists()


needs_flower = pytest.mark.skipif(not _flower_installed(), reason="flower-superlink not installed")
ROUNDS = 4


def _run(fed, results, overrides=""):
    return fed.run({"scenario": str(SCENARIO), "overrides": f"algorithm.rounds={ROUNDS}; {overrides}",
                    "results-dir": str(results)}, timeout=400)


def _site_charges(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if '"round"' in line] \
        if Path(path).exists() else []


@pytest.mark.slow
@needs_flower
def test_dp_admm_on_node_files_keeps_each_sites_ledger_and_max_eps(tmp_path):
    """Three SuperNodes hold their own tabular files; the DP-ADMM server learns m_i and d at setup and never a
    row.  Run 1 completes with OS-entropy noise, each site's ledger records its T releases, and each site's own
    total is the server ledger's.  Run 2 of the same scenario on the same sites: the site whose max-eps (2.5)
    cannot take a second run's cost (eps 2 each) refuses at setup, the run fails before any release and that
    site's ledger is byte-identical."""
    rows = site_rows()
    paths = write_sites(tmp_path / "data", rows)
    results = tmp_path / "results"
    fed = LoopbackFederation(tmp_path, data_paths=paths, site_config=[{}, {}, {"max-eps": 2.5}])
    try:
        fed.start()
        run_id, status = _run(fed, results)
        assert status == "finished:completed", fed.logs()
        charges = [_site_charges(fed.ledger_path(i)) for i in range(3)]
        before = fed.ledger_path(2).read_bytes()
        second, status2 = _run(fed, results)
        assert status2 != "finished:completed", fed.logs()
        after = fed.ledger_path(2).read_bytes()
        later = [_site_charges(fed.ledger_path(i)) for i in range(2)]
    finally:
        fed.stop()
    (out,) = list(results.glob(f"*run{run_id}"))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop_reason"] == "completed" and summary["rounds_completed"] == ROUNDS
    assert summary["sample_sizes"] == list(SIZES) and "no process holds" in summary["evaluation"]
    assert set(summary["final"]) >= {"x_norm", "penalty"} and "objective" not in summary["final"]
    for i, lines in enumerate(charges):  # one OS-entropy gradient release per round, charged before its draw
        assert [c["round"] for c in lines] == list(range(1, ROUNDS + 1)), lines
        assert {c["noise"] for c in lines} == {"os_entropy"} and {c["client"] for c in lines} == {i}
        assert {c["mechanism"] for c in lines} == {"gaussian_gradient"}
    reported = {s["client"]: s for s in summary["privacy"]["sites"]}
    for c in range(3):
        assert reported[c]["run_releases"] == ROUNDS and reported[c]["noise_source"] == "os_entropy"
        assert reported[c]["run_eps"] == pytest.approx(reported[c]["server_eps"], rel=1e-9)
        assert reported[c]["run_eps"] <= 2.0 + 1e-6  # the scenario's eps, at the site's delta and relation
    assert final_x(out).shape == (K,) and np.all(np.isfinite(final_x(out)))
    # run 2: refused at setup by site 2 alone; nothing released anywhere
    assert after == before
    assert [len(lines) for lines in later] == [ROUNDS, ROUNDS]
    (out2,) = list(results.glob(f"*run{second}"))
    stop = json.loads((out2 / "summary.json").read_text())["stop_reason"]
    assert stop.startswith("stopped: setup phase: client 2: site refuses the run at setup: its 4 planned releases"), stop
    assert "> max-eps 2.5" in stop and (out2 / "ledger.csv").read_text().count("\n") == 1  # header only


def final_x(out):
    with np.load(Path(out) / "final.npz") as final:
        return final["x"]


@pytest.mark.slow
@needs_flower
def test_dp_acc_admm_on_node_files_equals_the_in_process_engine(tmp_path):
    """With seeded noise (each site opts in: allow-seeded-noise) the same rows give the same iterates whether
    the in-process engine reads them as arrays or three SuperNodes read them as their own files."""
    from fdp_flower.algorithms.registry import any_scenario_from_run_config
    from fdp_flower.engines.gradient_admm import run_scenario

    rows = site_rows()
    paths = write_sites(tmp_path / "data", rows)
    results = tmp_path / "results"
    overrides = "algorithm.kind=dp_acc_admm"
    fed = LoopbackFederation(tmp_path, data_paths=paths, site_config={"allow-seeded-noise": True})
    try:
        fed.start()
        run_id, status = _run(fed, results, overrides)
        assert status == "finished:completed", fed.logs()
    finally:
        fed.stop()
    (out,) = list(results.glob(f"*run{run_id}"))
    sim_scenario = any_scenario_from_run_config({
        "scenario": str(SCENARIO), "overrides": f"algorithm.rounds={ROUNDS}; {overrides}; "
                                                f"data={json.dumps({'kind': 'arrays', 'paths': [str(p) for p in paths]})}"})
    sim, _problem, _ref = run_scenario(sim_scenario, with_reference=False)
    np.testing.assert_allclose(final_x(out), sim.state.x, rtol=1e-10, atol=1e-12)
    ledger = (out / "ledger.csv").read_text().splitlines()
    assert len(ledger) == 1 + 3 * ROUNDS and len(sim.ledger.releases) == 3 * ROUNDS
    print(f"node files == in process: max |x_dep - x_sim| = {np.max(np.abs(final_x(out) - sim.state.x)):.3g}")


def test_partition_writes_tabular_node_files_the_sites_read(tmp_path, capsys):
    """``fdp-flower partition breast_cancer`` writes site files of rows that read back exactly (npz and csv)."""
    from fdp_flower.cli import main
    from fdp_flower.data.tabular import load_breast_cancer_binary, read_node_rows

    features, response = load_breast_cancer_binary()
    for fmt in ("npz", "csv"):
        out = tmp_path / fmt
        assert main(["partition", "breast_cancer", "--nodes", "3", "--out", str(out), "--format", fmt]) == 0
        parts = [read_node_rows(out / f"node-{i}.{fmt}") for i in range(3)]
        assert [len(y) for _a, y in parts] == [190, 190, 189]
        assert np.array_equal(np.vstack([a for a, _y in parts]), features)
        assert np.array_equal(np.concatenate([y for _a, y in parts]), response)
    assert "data-path=" in capsys.readouterr().out
    assert main(["partition", "breast_cancer", "--nodes", "3", "--out", str(tmp_path / "p"), "--format",
                 "parquet"]) == 2
    assert "breast_cancer rows are written as npz or csv" in capsys.readouterr().err


# ------------------------------------------------------------------ the peer-to-peer relay on node files
def p2p_scenario(data=None, **sections):
    base = {"name": "p2p_nodes", "seed": 4, "federation": {"num_clients": len(SIZES)}, "topology": {"kind": "ring"},
            "data": data or {"kind": "node_files"},
            "model": {"loss": {"kind": "logistic"}, "penalty": {"kind": "l2", "lam": 0.1}, "clip_c1": 1.0},
            "algorithm": {"kind": "zcdp_nfl", "rho": 1.0, "rounds": 5, "step": {"kind": "inv", "eta0": 10.0},
                          "budget": {"kind": "constant"}},
            "privacy": {"enabled": True, "mode": "total", "eps": 2.0, "delta": 1e-5}}
    base.update(sections)
    return parse_any_scenario(base)


def test_the_relay_from_reports_is_the_relay_from_rows(tmp_path, monkeypatch):
    """The relay built from the nodes' setup replies (real ClientApp query handler) has the rows' sizes, d, G, noise
    plan and calibration, routes graph node i to the node whose file is partition i, and a site whose max-eps the
    run's T releases would exceed refuses at setup."""
    from fdp_flower.algorithms.p2p.protocol import scenario_server
    from fdp_flower.strategies.node_phase import SetupError
    from fdp_flower.strategies.relay import node_files_relay

    paths = write_sites(tmp_path / "data", site_rows())
    sc = p2p_scenario()
    relay = node_files_relay(NodesGrid([node_context(p, i, tmp_path) for i, p in enumerate(paths)], sc, monkeypatch),
                             sc, timeout=10)
    reference = scenario_server(p2p_scenario({"kind": "arrays", "paths": [str(p) for p in paths]}))
    server = relay.server
    assert server.sizes.tolist() == list(SIZES) == reference.sizes.tolist() and server.dim == reference.dim == K
    assert server.algorithm == reference.algorithm and server.plan.degrees == reference.plan.degrees
    for node in range(len(SIZES)):
        assert server.planned_release(3, node) == reference.planned_release(3, node)
    assert relay.node_of_client == {0: 10, 1: 11, 2: 12} and sorted(relay.site_reports) == [0, 1, 2]
    contexts = [node_context(p, i, tmp_path / "b", **({"max-eps": 0.5} if i == 2 else {})) for i, p in enumerate(paths)]
    with pytest.raises(SetupError, match=r"^client 2: site refuses the run at setup: its 5 planned releases"):
        node_files_relay(NodesGrid(contexts, sc, monkeypatch), sc, timeout=10)


@pytest.mark.slow
@needs_flower
def test_the_relay_on_node_files_equals_the_in_process_engine(tmp_path):
    """Three SuperNodes hold their own files and opt in to seeded noise: the relay learns m_i and d at setup,
    every site's ledger records its T releases, and the released iterates are the in-process engine's on the
    same rows (read as arrays)."""
    from fdp_flower.engines.p2p import run_scenario as run_p2p_scenario

    rows = site_rows()
    paths = write_sites(tmp_path / "data", rows)
    scenario_file = tmp_path / "p2p_nodes.yaml"
    import yaml

    base = p2p_scenario().model_dump(mode="json")
    scenario_file.write_text(yaml.safe_dump(base))
    results = tmp_path / "results"
    fed = LoopbackFederation(tmp_path, data_paths=paths, site_config={"allow-seeded-noise": True})
    try:
        fed.start()
        run_id, status = fed.run({"scenario": str(scenario_file), "overrides": "", "results-dir": str(results)},
                                 timeout=400)
        assert status == "finished:completed", fed.logs()
        charges = [_site_charges(fed.ledger_path(i)) for i in range(3)]
    finally:
        fed.stop()
    (out,) = list(results.glob(f"*run{run_id}"))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["sample_sizes"] == list(SIZES) and "no process holds" in summary["evaluation"]
    assert set(summary["final"]) >= {"released_mean_norm", "released_disagreement"}
    for i, lines in enumerate(charges):
        assert [c["round"] for c in lines] == [1, 2, 3, 4, 5] and {c["client"] for c in lines} == {i}
    sim = run_p2p_scenario(p2p_scenario({"kind": "arrays", "paths": [str(p) for p in paths]}))
    with np.load(out / "iterates.npz") as it:
        released = it["released"]
    np.testing.assert_allclose(released, sim.released, rtol=1e-10, atol=1e-12)
    print(f"relay on node files == in process: max |xt_dep - xt_sim| = {np.max(np.abs(released - sim.released)):.3g}")
