"""A peer-to-peer node against a relay that lies (docs/p2p.md, "What a node releases"): the real client worker
(``handle_p2p_train``) and site function answer crafted messages.

A node releases only its noisy data term: the descent term at the point the relay names, or PR-ADMM's exact
local solution.  Nothing else the relay sends enters the release, the noise is drawn for that term alone from
``release_rng(seed, node, round)``, and a public value the node refuses (1e300, NaN, infinities, subnormals, a
value whose exact solve cannot be certified) releases nothing and draws no noise.
"""
from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Context, RecordDict

from fdp_flower.algorithms.p2p.config import (
    RENAMED_FIELDS,
    P2PBreastCancerData,
    P2PScenario,
    PAdmmConfig,
    PrAdmmConfig,
    SyntheticRegressionData,
    ZcdpGradNflConfig,
    ZcdpNflConfig,
    load_p2p_scenario,
    parse_p2p_scenario,
)
from fdp_flower.algorithms.p2p.site import NodeData, answer, exact_solution
from fdp_flower.algorithms.protocol import SiteRequest
from fdp_flower.clients.p2p import handle_p2p_train, p2p_setup
from fdp_flower.config.base import ScenarioError
from fdp_flower.config.sections import PrivacyConfig
from fdp_flower.privacy.mechanisms import release_rng
from fdp_flower.wire import pack_requests, unpack_arrays
from fdp_flower.wire.flwr import Message, MessageType
from tests.test_faults import task_identity  # noqa: F401  (autouse fixture: Flower's task identity)

PRIVATE = PrivacyConfig(mode="per_round", eps=1.0, delta=1.0e-4)  # per-round: no PLD calibration (fast)
RING = dict(federation={"num_clients": 5}, topology={"kind": "ring"})
TERM_SCENARIOS = {
    "zcdp_nfl": P2PScenario(**RING, data=SyntheticRegressionData(problem="lad", samples_per_node=30, dim=3),
                            algorithm=ZcdpNflConfig(rounds=4), privacy=PRIVATE),
    "zcdp_grad_nfl": P2PScenario(**RING, data=SyntheticRegressionData(problem="lad", samples_per_node=30, dim=3),
                                 algorithm=ZcdpGradNflConfig(rounds=4), privacy=PRIVATE),
    "p_admm": P2PScenario(**RING, data=SyntheticRegressionData(problem="ridge", samples_per_node=30, dim=3),
                          algorithm=PAdmmConfig(rounds=4), privacy=PRIVATE),
    "pr_admm_linearized": P2PScenario(**RING, data=SyntheticRegressionData(problem="lad", samples_per_node=30, dim=3),
                                      algorithm=PrAdmmConfig(rounds=4), privacy=PRIVATE),
}
EXACT = P2PScenario(topology={"kind": "paper004_five"}, data=P2PBreastCancerData(),
                    algorithm=PrAdmmConfig(rounds=4, eta=0.1), privacy=PRIVATE)
NODE, ROUND = 2, 3


def _message(requests: dict[int, dict[str, np.ndarray]], *, extra_config=None, extra_arrays=None) -> Message:
    content = pack_requests([SiteRequest(node, ROUND, public) for node, public in requests.items()],
                            extra_config, extra_arrays)
    return Message(content=content, dst_node_id=7, message_type=MessageType.TRAIN)


def _reply(scenario, message: Message) -> Message:
    ctx = Context(run_id=1, node_id=7, node_config={}, state=RecordDict(), run_config={})
    return handle_p2p_train(message, ctx, scenario)


def _released(reply: Message) -> dict[int, np.ndarray]:
    values = unpack_arrays(reply.content["arrays"])["release"]
    return {int(c): values[j] for j, c in enumerate(reply.content["metrics"]["partition-id"])}


def _draw(scenario, node=NODE, round_=ROUND) -> np.ndarray:
    """The standard-normal draw of node ``node``'s release in ``round_``: release_rng of the run seed."""
    return release_rng(scenario.seed, node, round_).standard_normal(p2p_setup(scenario)[1].dim)


def _calibration(scenario, node=NODE):
    graph, problem, algorithm, _plan = p2p_setup(scenario)
    return algorithm.release_parameters(ROUND, len(problem.responses[node]), int(graph.degrees[node]))


@pytest.mark.parametrize("name", sorted(TERM_SCENARIOS))
def test_a_release_is_the_descent_term_at_the_point_plus_its_own_noise_and_nothing_else(name):
    """The reply is -(1/m_i) sum_j grad l(point) + sigma z, z = release_rng(seed, node, round), bit for bit, with
    sigma = z_k 2G/m_i; junk config keys and arrays the relay adds change nothing, and a point of magnitude 1e100
    (the largest accepted) leaves the noise intact: the term is bounded by G."""
    scenario = TERM_SCENARIOS[name]
    _graph, problem, algorithm, _plan = p2p_setup(scenario)
    sens, sigma = _calibration(scenario)
    assert sens == pytest.approx(2 * problem.gradient_bound() / 30, rel=1e-15)
    rng = np.random.default_rng(0)
    a, y = problem.features[NODE], problem.responses[NODE]
    for point in (rng.normal(size=3), np.array([1e100, -1e100, 3.0]), np.array([5.0, 0.0, -0.0])):
        reply = _reply(scenario, _message({NODE: {"point": point}}))
        term = -problem.loss.mean_subgradient(point, a, y)
        assert np.all(np.abs(term) <= problem.gradient_bound())
        np.testing.assert_array_equal(_released(reply)[NODE], term + sigma * _draw(scenario))
        assert list(reply.content["metrics"]["sigma"]) == [sigma]
        assert list(reply.content["metrics"]["sensitivity"]) == [sens]
        junk = _message({NODE: {"point": point}}, extra_config={"rho": 1e9, "eta": 0.0, "neighbours": [0, 1, 3]},
                        extra_arrays={"dual": np.full(3, 1e90), "neighbour_released": np.full((2, 3), -1e90)})
        np.testing.assert_array_equal(_released(_reply(scenario, junk))[NODE], _released(reply)[NODE])
    # a public value the node is never sent is refused, not ignored
    refused = _reply(scenario, _message({NODE: {"point": np.zeros(3), "dual": np.ones(3)}}))
    assert refused.has_error() and "never sent" in refused.error.reason


def test_the_exact_solve_depends_on_the_public_values_it_checks_and_its_noise_is_its_own():
    """PR-ADMM's exact release is the node's certified solution of eq. (12) at the public (point, dual, neighbour
    sum) plus sigma z; the calibration V / (m_i eta |V_i|) is the node's own whatever it is sent."""
    _graph, problem, algorithm, plan = p2p_setup(EXACT)
    sens, sigma = _calibration(EXACT)
    assert sens == pytest.approx(1.0 / (90 * 0.1 * 3), rel=1e-15)  # node 2 of the 5-agent graph has degree 3
    rng = np.random.default_rng(1)
    a, y = problem.features[NODE], problem.responses[NODE]
    dim = problem.dim
    for scale in (0.0, 1.0, 30.0):
        public = {"point": scale * rng.normal(size=dim), "dual": scale * rng.normal(size=dim),
                  "neighbour_sum": scale * rng.normal(size=dim)}
        reply = _reply(EXACT, _message({NODE: public}))
        x, _iters = exact_solution(plan, NODE, public, a, y)
        np.testing.assert_array_equal(_released(reply)[NODE], x + sigma * _draw(EXACT))
        assert list(reply.content["metrics"]["sensitivity"]) == [sens]
        junk = _message({NODE: public}, extra_config={"eta": 1e-9, "degree": 1000},
                        extra_arrays={"neighbour_released": np.ones((3, dim))})
        np.testing.assert_array_equal(_released(_reply(EXACT, junk))[NODE], _released(reply)[NODE])


EXTREME = {"1e300": 1e300, "nan": np.nan, "inf": np.inf, "-inf": -np.inf, "subnormal": 5e-324,
           "subnormal-negative": -1e-310}


@pytest.mark.parametrize("value", sorted(EXTREME))
@pytest.mark.parametrize("name, field", [("zcdp_nfl", "point"), ("exact", "point"), ("exact", "dual"),
                                         ("exact", "neighbour_sum")])
def test_extreme_public_values_are_refused_with_nothing_released_and_no_noise_drawn(name, field, value):
    scenario = EXACT if name == "exact" else TERM_SCENARIOS[name]
    graph, problem, algorithm, plan = p2p_setup(scenario)
    fields = ("point", "dual", "neighbour_sum") if algorithm.exact else ("point",)
    good = {f: np.zeros(problem.dim) for f in fields}
    bad = {**good, field: np.r_[EXTREME[value], np.zeros(problem.dim - 1)]}
    # a one-node message: its refusal is the reply
    reply = _reply(scenario, _message({NODE: bad}))
    assert reply.has_error() and field in reply.error.reason and "\n" not in reply.error.reason
    # a message for several nodes: that node is refused, the others release
    reply = _reply(scenario, _message({1: good, NODE: bad, 3: good}))
    assert list(reply.content["errors"]["partition-id"]) == [NODE]
    assert sorted(_released(reply)) == [1, 3]
    # the site function itself: no noise is drawn for the refused node
    drawn = []

    def noise(events):
        drawn.extend(e.client for e in events)
        return release_rng(scenario.seed, events[0].client, events[0].round)

    data = NodeData.of_problem(problem)
    out = answer([SiteRequest(1, ROUND, good), SiteRequest(NODE, ROUND, bad)], data, plan, noise)
    assert isinstance(out[1], ValueError) and not isinstance(out[0], Exception) and drawn == [1]


def test_an_exact_solve_that_cannot_be_certified_is_refused():
    """Duals within the accepted range (<= 1e100) that would leave the released solution off by more than 1e-6 Delta
    are refused (site.py's rule): Newton cannot certify ||grad phi|| <= 1e-6 2V/m_i in float64, or the solution is
    so large that its rounding is not small against Delta (a residual can cancel exactly in float64: the magnitude
    rule still holds).  Nothing is released and no noise is drawn; a large but certifiable dual is released."""
    graph, problem, algorithm, plan = p2p_setup(EXACT)
    zero = np.zeros(problem.dim)
    duals = [1e12 * np.random.default_rng(seed).normal(size=problem.dim) for seed in range(6)]
    duals += [np.full(problem.dim, 1e10), np.full(problem.dim, 1e60), np.full(problem.dim, -1e90)]
    drawn, reasons = [], set()
    for dual in duals:
        (out,) = answer([SiteRequest(NODE, ROUND, {"point": zero, "dual": dual, "neighbour_sum": zero})],
                        NodeData.of_problem(problem), plan, lambda events: drawn.append(events) or release_rng(0, 2, 3))
        assert isinstance(out, ValueError) and "nothing released" in str(out), out
        reasons.add("did not reach" if "did not reach" in str(out) else "magnitude" if "magnitude" in str(out) else "?")
    assert reasons == {"did not reach", "magnitude"} and drawn == []
    (ok,) = answer([SiteRequest(NODE, ROUND, {"point": zero, "dual": np.full(problem.dim, 1e4), "neighbour_sum": zero})],
                   NodeData.of_problem(problem), plan, lambda events: drawn.append(events) or release_rng(0, 2, 3))
    assert not isinstance(ok, Exception) and len(drawn) == 1


# ------------------------------------------------------------------ the schema's old names
@pytest.mark.parametrize("old, new", sorted(RENAMED_FIELDS.items()))
def test_an_old_field_name_fails_in_one_line_naming_the_new_one(old, new, tmp_path):
    section, _, key = old.partition(".")
    data = {"algorithm": {"kind": "zcdp_nfl"}, section: {key: 1}}
    if section == "data":
        data[section]["kind"] = "synthetic_regression"
    with pytest.raises(ScenarioError) as err:
        parse_p2p_scenario(data, "s.yaml")
    assert str(err.value) == f"s.yaml: {old}: renamed to {new}"
    path = tmp_path / "s.yaml"
    path.write_text("algorithm: {kind: zcdp_nfl, rounds: 2}\n")
    with pytest.raises(ScenarioError, match=f"^{path}: {old}: renamed to {new}$"):
        load_p2p_scenario(path, [f"{old}=1"])
    with pytest.raises(ValueError, match=f"{old}: renamed to {new}"):  # direct construction too
        P2PScenario(**data)


def test_errors_name_the_field_without_a_union_tag_and_the_data_sets_the_default_model():
    with pytest.raises(ScenarioError) as err:
        parse_p2p_scenario({"data": {"kind": "adult_nodes", "lamb": 1.0}, "federation": {"num_clients": 5}},
                           "s.yaml")
    assert str(err.value) == "s.yaml: data.lamb: Extra inputs are not permitted"
    adult = parse_p2p_scenario({"data": {"kind": "adult_nodes"}, "federation": {"num_clients": 5},
                                "model": {"penalty": {"lam": 0.5}}})
    assert (adult.model.loss.kind, adult.model.penalty.kind, adult.model.penalty.lam, adult.model.penalty.lam1,
            adult.model.penalty.lam2) == ("logistic", "elastic_net", 0.5, 0.0, 1.0)  # R(x) = Lambda ||x||^2
    ridge = parse_p2p_scenario({"data": {"problem": "ridge"}})
    assert (ridge.model.loss.kind, ridge.model.loss.residual_bound, ridge.model.penalty.kind,
            ridge.model.penalty.lam, ridge.model.clip_c1, ridge.federation.num_clients) == ("squared", 2.0, "l2", 0.1,
                                                                                          1.5, 20)
    with pytest.raises(ScenarioError, match="logistic needs labels"):
        parse_p2p_scenario({"model": {"loss": {"kind": "logistic"}}})
    with pytest.raises(ScenarioError, match="paper004_five graph has 5 nodes"):
        parse_p2p_scenario({"topology": {"kind": "paper004_five"}, "federation": {"num_clients": 6}})
    assert parse_p2p_scenario({"topology": {"kind": "paper004_five"}}).federation.num_clients == 5
