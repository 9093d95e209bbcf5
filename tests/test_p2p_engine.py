"""The in-process peer-to-peer engine: acceptance targets, locality, privacy ledger, reproducibility."""
import math

import numpy as np
import pytest

import fdp_flower.engines.p2p as engine
from fdp_flower.algorithms.p2p import budget as b
from fdp_flower.algorithms.p2p.config import (
    DecentralizedAdmmConfig,
    P2PBreastCancerData,
    P2PScenario,
    PrAdmmConfig,
    ZcdpGradNflConfig,
    ZcdpNflConfig,
)
from fdp_flower.algorithms.p2p.plan import P2PAlgorithm, build_algorithm, build_graph, build_problem, scenario_graph
from fdp_flower.algorithms.p2p.problems import data_rng, synthetic_problem
from fdp_flower.algorithms.p2p.topology import erdos_renyi, graph_rng, ring
from fdp_flower.config.sections import PrivacyConfig
from fdp_flower.core.schedules import StepSchedule

NONPRIVATE = PrivacyConfig(enabled=False)
TOTAL10 = PrivacyConfig(mode="total", eps=10.0, delta=1.0e-4)


def test_nonprivate_admm_reaches_1e3_on_lad():
    """Acceptance: N = 20, average degree 4, 100 samples per node, <= 1e-3 within 1000 steps."""
    s = P2PScenario(algorithm=DecentralizedAdmmConfig(rounds=1000), privacy=NONPRIVATE)
    res = engine.run_scenario(s, metrics_every=50)
    assert res.graph.num_nodes == 20 and 3.5 <= res.graph.average_degree <= 4.5
    err = res.metrics["primal_normalized_error_max"]
    assert err[-1] <= 1e-3  # every node, not only the mean
    assert res.ledger.releases == []


def test_every_node_step_uses_only_its_neighbours_and_the_site_sees_only_its_point(monkeypatch):
    """The relay's step of node i in round r (post-processing of its release) reads xt_i^{r-1} and its neighbours'
    xt_j^{r-1} only; the node's site is asked at its own last release and at nothing else."""
    from fdp_flower.algorithms.p2p import protocol

    g = erdos_renyi(8, 0.4, graph_rng(1))
    problem = synthetic_problem("lad", num_nodes=8, samples_per_node=20, dim=3, rng=data_rng(1))
    alg = build_algorithm(ZcdpNflConfig(rounds=5), TOTAL10, problem)
    steps, asked = [], []
    real_primal, real_answer = protocol.node_primal, engine.answer

    def spy_primal(algorithm, objective, step, term):
        steps.append(step)
        return real_primal(algorithm, objective, step, term)

    def spy_answer(requests, *args, **kwargs):
        asked.extend((r.client, r.round, dict(r.public)) for r in requests)
        return real_answer(requests, *args, **kwargs)

    monkeypatch.setattr(protocol, "node_primal", spy_primal)
    monkeypatch.setattr(engine, "answer", spy_answer)
    rounds_seen = []
    res = engine.run_p2p(problem, g, alg, seed=3, on_round=lambda r, server: rounds_seen.append(server.round))
    assert rounds_seen == [1, 2, 3, 4, 5]
    assert len(steps) == len(asked) == 8 * 5
    for step in steps:
        nbrs = list(g.neighbours[step.node])
        assert step.neighbours.shape == (g.degrees[step.node], 3)
        np.testing.assert_array_equal(step.neighbours, res.released[step.round - 1][nbrs])
        np.testing.assert_array_equal(step.own, res.released[step.round - 1][step.node])
    for node, r, public in asked:
        assert set(public) == {"point"}
        np.testing.assert_array_equal(public["point"], res.released[r - 1][node])


@pytest.mark.parametrize("budget", [{"kind": "constant"}, {"kind": "geometric", "ratio": 1.05}])
def test_ledger_meets_the_total_budget_exactly(budget):
    """Default: the PLD accountant reports the target (calibration margin 1e-3 at most) for every node;
    paper_constants: the papers' Bun-Steinke conversion of the zCDP sum meets it, with more noise."""
    s = P2PScenario(algorithm=ZcdpNflConfig(rounds=40, budget=budget),
                    privacy=PrivacyConfig(mode="total", eps=2.0, delta=1.0e-5))
    res = engine.run_scenario(s, metrics_every=40)
    rho = {round(res.ledger.zcdp_rho(node), 12) for node in range(20)}
    assert len(rho) == 1 and all(len(res.ledger.of_client(node)) == 40 for node in range(20))
    p = res.privacy(1.0e-5, with_pld=True)
    assert 2.0 * (1 - 1e-3) <= p["eps_pld"] <= 2.0 < p["eps_rdp"] < p["eps_zcdp"]
    paper = engine.run_scenario(s.model_copy(update={"privacy": s.privacy.model_copy(
        update={"paper_constants": True})}), metrics_every=40)
    for node in range(20):
        assert paper.ledger.zcdp_rho(node) == pytest.approx(b.rho_from_dp(2.0, 1e-5), rel=1e-9)
    assert paper.privacy(1.0e-5)["eps_zcdp"] == pytest.approx(2.0, rel=1e-9)
    assert rho.pop() > 1.5 * b.rho_from_dp(2.0, 1e-5)  # PLD calibration: less noise for the same (eps, delta)


def test_budget_guard_refuses_overspending():
    problem = synthetic_problem("lad", num_nodes=4, samples_per_node=10, dim=2, rng=data_rng(0))
    plan = b.NoisePlan("zcdp", rho=(0.1, 0.1, 0.1), rho_total=0.25)
    alg = P2PAlgorithm("zcdp_nfl", 3, 0.1, StepSchedule("inv", eta0=1.0), plan, problem.gradient_bound())
    with pytest.raises(engine.BudgetExceededError, match="round 3"):
        engine.run_p2p(problem, ring(4), alg, seed=0)


def test_same_seed_same_iterates_other_seed_other_noise():
    s = P2PScenario(algorithm=ZcdpGradNflConfig(rounds=10))
    problem = build_problem(s)
    r1 = engine.run_scenario(s, problem=problem)
    r2 = engine.run_scenario(s, problem=problem)
    r3 = engine.run_scenario(s, problem=problem, repetition=1)
    np.testing.assert_array_equal(r1.released, r2.released)
    assert not np.allclose(r1.released, r3.released)


def test_zero_noise_zcdp_nfl_is_decentralized_admm():
    s1 = P2PScenario(algorithm=ZcdpNflConfig(rounds=20), privacy=NONPRIVATE)
    s2 = P2PScenario(algorithm=DecentralizedAdmmConfig(rounds=20), privacy=NONPRIVATE)
    np.testing.assert_array_equal(engine.run_scenario(s1).primal, engine.run_scenario(s2).primal)


def test_pr_admm_on_breast_cancer():
    """Non-private PR-ADMM approaches the centralized classifier; at eps = 10 (one seed, 90 rows per node)
    it stays far above the majority rate (0.63); a tiny U cuts every link (the statistic only grows) and
    U = null cuts none.  The 3-point acceptance on 10 runs is in benchmarks/p2p.py."""
    base = dict(topology={"kind": "paper004_five"}, data=P2PBreastCancerData())
    acc = {}
    for name, alg, priv in [("np", PrAdmmConfig(eta=0.02), NONPRIVATE),
                            ("p", PrAdmmConfig(eta=0.02), TOTAL10),
                            ("cut", PrAdmmConfig(eta=0.02, threshold=1.0e-6), TOTAL10)]:
        res = engine.run_scenario(P2PScenario(algorithm=alg, privacy=priv, **base), metrics_every=50)
        acc[name] = res.metrics["released_train_accuracy"][-1]
        if name == "np":
            problem = build_problem(P2PScenario(**base))
            assert acc[name] >= problem.accuracy(problem.x_star)[0] - 0.02
            assert res.cut_links.sum() == 0
        if name == "cut":
            assert res.cut_links[-1] == 2 * 6  # every directed link of the 6-edge graph
    assert acc["p"] >= 0.9 and acc["cut"] >= 0.7


def test_paper_constants_mean_more_noise():
    problem = build_problem(P2PScenario(topology={"kind": "paper004_five"}, data=P2PBreastCancerData()),
                            with_reference=False)
    tight = build_algorithm(PrAdmmConfig(), TOTAL10, problem)
    paper = build_algorithm(PrAdmmConfig(), PrivacyConfig(mode="total", eps=10.0, delta=1.0e-4,
                                                          paper_constants=True), problem)
    (sens_t, sigma_t), (sens_p, sigma_p) = tight.release_parameters(1, 90, 2), paper.release_parameters(1, 90, 2)
    assert sens_p == pytest.approx(90 * sens_t)  # Lemma 5 as printed drops 1/|D_i|
    # and the papers' Bun-Steinke conversion gives each step a smaller rho than the PLD calibration
    assert paper.noise.rho[0] < tight.noise.rho[0]
    assert sigma_p == pytest.approx(90 * sigma_t * math.sqrt(tight.noise.rho[0] / paper.noise.rho[0]))


def test_exact_solver_refuses_nonsmooth_problems():
    problem = synthetic_problem("lad", num_nodes=3, samples_per_node=5, dim=2, rng=data_rng(0), with_reference=False)
    with pytest.raises(ValueError, match="smooth"):
        build_algorithm(PrAdmmConfig(local_solver="exact"), TOTAL10, problem)
    alg = build_algorithm(PrAdmmConfig(), TOTAL10, problem)
    assert alg.local_solver == "linearized" and math.isfinite(alg.release_parameters(1, 5, 2)[1])


def test_graph_is_part_of_the_results():
    s = P2PScenario(federation={"num_clients": 3}, topology={"kind": "custom", "edges": [[0, 1], [1, 2]]},
                    algorithm=ZcdpNflConfig(rounds=2))
    res = engine.run_scenario(s)
    assert res.graph.to_dict()["degrees"] == [1, 2, 1]
    with pytest.raises(ValueError, match="disconnected"):
        scenario_graph(P2PScenario(federation={"num_clients": 4},
                                   topology={"kind": "custom", "edges": [[0, 1], [2, 3]]}))


def test_every_shipped_p2p_scenario_loads_and_builds():
    from pathlib import Path

    from fdp_flower.algorithms.p2p.config import load_p2p_scenario

    files = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("p2p_*.yaml"))
    assert len(files) >= 8
    for f in files:
        s = load_p2p_scenario(f)
        g = build_graph(s.topology, s.federation.num_clients, s.seed)
        assert g.num_nodes == s.federation.num_clients
        problem = build_problem(s, with_reference=False) if s.data.kind != "adult_nodes" else None
        if problem is not None:
            assert build_algorithm(s.algorithm, s.privacy, problem).rounds == s.algorithm.rounds


def test_config_errors_are_clear():
    from fdp_flower.algorithms.p2p.config import parse_p2p_scenario
    from fdp_flower.config.base import ScenarioError

    with pytest.raises(ScenarioError, match="epsiln"):
        parse_p2p_scenario({"privacy": {"epsiln": 1.0}})
    with pytest.raises(ScenarioError, match="non-private baseline"):
        parse_p2p_scenario({"algorithm": {"kind": "decentralized_admm"}})
    with pytest.raises(ScenarioError, match="average_degree"):
        parse_p2p_scenario({"federation": {"num_clients": 4}, "topology": {"kind": "erdos_renyi",
                                                                          "average_degree": 5.0}})
    with pytest.raises(ScenarioError, match="leave privacy.schedule constant"):
        parse_p2p_scenario({"privacy": {"mode": "total", "eps": 1.0, "schedule": {"kind": "geometric"}}})


@pytest.mark.parametrize("decay", [{"kind": "periodic", "decay": 0.9, "period": 5}, {"kind": "iteration", "rate": 0.02}])
def test_pr_admm_ledger_against_paper_closed_forms(decay):
    """Per node, the ledger's zCDP sum equals Theorem 4 and Theorem 3 + rho_1 (its printed "-1"), and every
    release's sensitivity is the tight V / (m eta |V_i|) of fdp_flower.privacy.closed_forms."""
    from fdp_flower.privacy import closed_forms as cf

    s = P2PScenario(topology={"kind": "paper004_five"}, data=P2PBreastCancerData(),
                    algorithm=PrAdmmConfig(rounds=20, eta=0.1, decay=decay), privacy=TOTAL10)
    res = engine.run_scenario(s, metrics_every=20)
    for node in range(5):
        rel = res.ledger.of_client(node)
        rho1, total = rel[0].zcdp_rho, res.ledger.zcdp_rho(node)
        assert total == pytest.approx(res.algorithm.noise.rho_total, rel=1e-9)
        assert rel[0].sensitivity == pytest.approx(cf.pr_admm_sensitivity(1.0, 0.1, res.graph.degrees[node], 90))
        if decay["kind"] == "periodic":
            assert total == pytest.approx(cf.pr_admm_theorem3_rho(rho1, 20, 5, 0.9) + rho1, rel=1e-9)
            assert total == pytest.approx(cf.pr_admm_periodic_rho_sum(rho1, 20, 5, 0.9), rel=1e-9)
        else:
            assert total == pytest.approx(cf.pr_admm_theorem4_rho(rho1, 20, 0.02), rel=1e-9)
    assert 10.0 * (1 - 1e-3) <= res.privacy(1.0e-4, with_pld=True)["eps_pld"] <= 10.0
