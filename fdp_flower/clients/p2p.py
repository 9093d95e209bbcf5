"""Peer-to-peer client worker: a thin driver of the family's site function on a Flower node
(:func:`fdp_flower.algorithms.p2p.site.answer`; docs/p2p.md).

It unpacks a relay message into the protocol's requests (the point each graph node it hosts is asked at; for
PR-ADMM's exact solve also the node's dual and neighbour sum), finds the nodes' rows, calls the site function
with the site's noise (:meth:`fdp_flower.clients.site.SiteSession.noise_for`) and packs the releases -- each
node's noisy data term and nothing else (no solver iterations, no link counts).  The relay does every step that
uses the neighbours' releases.  Where the rows come from decides the noise:

- a node whose node config names its own file (``data-path``; data kind ``node_files``,
  :func:`fdp_flower.data.tabular.read_node_rows`): the site's policy, its own noise (OS entropy or its secret,
  never the run seed) and its ledger, charged before every draw, ``max-eps`` enforced; it serves its own graph
  node only (its ``partition-id``) and any other data kind is refused, nothing released.  Its site plan is built
  from the public scenario (graph, loss, penalty, noise plan) and its own rows' dimension;
- otherwise data simulated from the public seed or files the scenario names: ``release_rng(seed, node, round)``
  of the run's noise source, no site ledger.

``scenario`` is anything with ``seed``, ``federation``, ``topology``, ``data``, ``model``, ``algorithm`` and
``privacy`` as in :class:`fdp_flower.algorithms.p2p.config.P2PScenario`.  The peer-to-peer data sources are
simulated from the public seed (or read from files the scenario names), so any SuperNode can serve any graph
node (the relay names it when nodes host several).
"""
from __future__ import annotations

import json
from functools import lru_cache

from fdp_flower.algorithms.p2p.config import P2PScenario
from fdp_flower.algorithms.p2p.plan import scenario_setup
from fdp_flower.algorithms.p2p.site import NodeData, SitePlan, answer, site_plan
from fdp_flower.algorithms.protocol import SiteRequest
from fdp_flower.clients.common import check_node_files, node_partition, own_rows
from fdp_flower.clients.site import SiteSession, names_own_data, public_reason
from fdp_flower.wire import pack_releases, unpack_requests
from fdp_flower.wire.flwr import Context, Error, ErrorCode, Message, RecordDict


@lru_cache(maxsize=4)
def _setup(scenario_json: str):
    """(graph, problem without reference, algorithm, site plan) of a scenario; cached per scenario text because
    every piece is a pure function of the public scenario (no run state lives here)."""
    scenario = P2PScenario.model_validate(json.loads(scenario_json))
    graph, problem, algorithm = scenario_setup(scenario, with_reference=False)
    return graph, problem, algorithm, site_plan(algorithm, problem.objective, graph, problem.dim)


def p2p_setup(scenario):
    """Graph, node data, resolved algorithm and site plan of ``scenario`` (what a node computes from the public
    scenario)."""
    keys = ("federation", "topology", "data", "model", "algorithm", "privacy")
    data = {k: getattr(scenario, k).model_dump(mode="json") for k in keys}
    data["seed"] = scenario.seed
    return _setup(json.dumps(data, sort_keys=True))


def node_local_setup(scenario, features, response):
    """(algorithm, site plan, (clipped features, response)) of a node that holds its own rows: the public graph,
    loss, penalty and noise plan of the scenario, the node's rows clipped to ||a|| <= c1, and its labels checked
    against the loss (the logistic loss's bound assumes labels in {-1, +1}; one-line ``ValueError``)."""
    from fdp_flower.algorithms.fdp_admm.update import Objective
    from fdp_flower.algorithms.p2p.plan import build_algorithm, model_objects, scenario_graph
    from fdp_flower.algorithms.p2p.problems import NetworkProblem
    from fdp_flower.core.clipping import clip_rows

    loss, penalty, lam = model_objects(scenario.model)
    check = getattr(loss, "check_response", None)
    if check is not None:
        check(response)
    c1 = scenario.model.clip_c1
    clipped = clip_rows(features, c1)[0]
    own = NetworkProblem(name="node_files", features=(clipped,), responses=(response,), loss=loss, penalty=penalty,
                         lam=lam, c1=c1)
    algorithm = build_algorithm(scenario.algorithm, scenario.privacy, own)
    graph = scenario_graph(scenario)
    objective = Objective(loss=loss, penalty=penalty, lam=lam, num_clients=scenario.federation.num_clients)
    return algorithm, site_plan(algorithm, objective, graph, clipped.shape[1]), (clipped, response)


def handle_p2p_train(msg: Message, context: Context, scenario) -> Message:
    """Answer a relay message: every graph node it asks for (one, or every node a Flower node hosts) releases its
    noisy data term at the public values the relay names (:func:`fdp_flower.algorithms.p2p.site.answer`).  The
    reply holds the released rows, one list per metric and the nodes the site refused (a public value it does not
    accept, a solve it cannot certify, the site's policy: nothing of them is released)."""
    requests, _config, _others = unpack_requests(msg.content)
    node_local = names_own_data(context)
    check_node_files(scenario, node_local)
    refused: dict[int, Exception] = {}
    nodes: dict[int, int] = {}
    if node_local:  # the node's own file: its own rows, its policy, noise and ledger
        own = None
        for j, request in enumerate(requests):
            try:
                nodes[j], own = own_rows(context, scenario, request.client)
            except ValueError as exc:
                refused[j] = exc
        if own is None:  # nothing to answer with: the first refusal is the reply
            raise refused[0]
        algorithm, plan, own = node_local_setup(scenario, *own)
        data = NodeData({nodes[j]: own for j in nodes})
    else:
        _graph, problem, algorithm, plan = p2p_setup(scenario)
        for j, request in enumerate(requests):
            try:
                nodes[j] = node_partition(context, scenario, request.client, simulated=True)
            except ValueError as exc:
                refused[j] = exc
    site = SiteSession.open(context, scenario, node_local=node_local)
    site.admit(algorithm.noise.private, "peer-to-peer releases")
    asked = [j for j in range(len(requests)) if j in nodes]
    released = []
    if asked:
        if not node_local:
            data = NodeData.of_problem(problem, sorted({nodes[j] for j in asked}))
        named = [SiteRequest(nodes[j], requests[j].round, requests[j].public) for j in asked]
        for j, outcome in zip(asked, answer(named, data, plan, site.noise_for)):
            if isinstance(outcome, Exception):
                refused[j] = outcome
            else:
                released.append(outcome)
    code = int(ErrorCode.CLIENT_APP_RAISED_EXCEPTION)
    if len(requests) == 1 and refused:  # a one-node message: its refusal is the reply (nothing released)
        return Message(Error(code=code, reason=public_reason(refused[0], context)), reply_to=msg)
    errors = [(nodes.get(j, -1 if requests[j].client is None else requests[j].client), code,
               public_reason(refused[j], context)) for j in sorted(refused)]
    return Message(content=RecordDict({**pack_releases(released, errors), **site.records()}), reply_to=msg)


def handle_p2p_setup_query(msg: Message, context: Context, scenario) -> Message:
    """Answer the relay's setup query of a run on node files (``data.kind: node_files``): the node reads its own
    file (``data-path``), fingerprints it for the run, checks its size and its responses against the loss
    (:func:`node_local_setup`), and reports public bookkeeping only -- its partition id (its graph node), m_i
    (``num-examples``) and the rows' dimension d (``dim``) -- with the site's own totals; a run whose T planned
    releases would take the site past its ``max-eps`` is refused here, before anything is released
    (:meth:`fdp_flower.clients.site.SiteSession.run_refusal`)."""
    from fdp_flower.algorithms.p2p.nodes import planned_releases
    from fdp_flower.clients.common import check_data_fingerprint, check_site_size, partition_data_error
    from fdp_flower.clients.node_phase import SETUP_REFUSAL
    from fdp_flower.wire.flwr import ArrayRecord, ConfigRecord, MetricRecord

    node_local = names_own_data(context)
    check_node_files(scenario, node_local)
    site = SiteSession.open(context, scenario, node_local=node_local)
    partition, (features, response) = own_rows(context, scenario, None)
    try:
        check_data_fingerprint(context.node_config, context.run_id, partition, context.node_config["data-path"],
                               len(response))
        check_site_size(site.policy, partition, len(response))
        algorithm, plan, _own = node_local_setup(scenario, features, response)
    except ValueError as exc:
        raise partition_data_error(partition, exc) from None
    site.admit(algorithm.noise.private, "peer-to-peer releases")
    refusal = site.run_refusal(planned_releases(plan, partition, len(response)))
    metrics = {"partition-id": partition, "num-examples": int(len(response)), "dim": int(features.shape[1])}
    content = RecordDict({"arrays": ArrayRecord(), "metrics": MetricRecord(metrics), **site.records(),
                          **({SETUP_REFUSAL: ConfigRecord({"reason": refusal})} if refusal else {})})
    return Message(content=content, reply_to=msg)


__all__ = ["SitePlan", "handle_p2p_setup_query", "handle_p2p_train", "p2p_setup"]
