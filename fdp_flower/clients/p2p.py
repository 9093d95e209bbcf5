"""Peer-to-peer client worker: a thin driver of the family's site function on a Flower node
(:func:`fdp_flower.algorithms.p2p.site.answer`; docs/p2p.md).

It unpacks a relay message into the protocol's requests (the point each graph node it hosts is asked at; for
PR-ADMM's exact solve also the node's dual and neighbour sum), finds the nodes' rows, calls the site function
with the site's noise (:meth:`fdp_flower.clients.site.SiteSession.noise_for`: the data are simulated from the
public seed or named by the scenario, so that is ``release_rng(seed, node, round)``; a node-local source would
switch on the site's policy) and packs the releases -- each node's noisy data term and nothing else (no solver
iterations, no link counts).  The relay does every step that uses the neighbours' releases.

``scenario`` is anything with ``seed``, ``federation``, ``topology``, ``data``, ``model``, ``algorithm`` and
``privacy`` as in :class:`fdp_flower.algorithms.p2p.config.P2PScenario`.  The peer-to-peer data sources are
simulated from the public seed (or read from files the scenario names), so any SuperNode can serve any graph
node (the relay names it when nodes host several); node-local data files are not supported in this mode yet.
"""
from __future__ import annotations

import json
from functools import lru_cache

from fdp_flower.algorithms.p2p.config import P2PScenario
from fdp_flower.algorithms.p2p.plan import scenario_setup
from fdp_flower.algorithms.p2p.site import NodeData, SitePlan, answer, site_plan
from fdp_flower.algorithms.protocol import SiteRequest
from fdp_flower.clients.common import node_partition
from fdp_flower.clients.site import SiteSession
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


def handle_p2p_train(msg: Message, context: Context, scenario) -> Message:
    """Answer a relay message: every graph node it asks for (one, or every node a Flower node hosts) releases its
    noisy data term at the public values the relay names (:func:`fdp_flower.algorithms.p2p.site.answer`).  The
    reply holds the released rows, one list per metric and the nodes the site refused (a public value it does not
    accept, a solve it cannot certify, the site's policy: nothing of them is released)."""
    requests, _config, _others = unpack_requests(msg.content)
    _graph, problem, algorithm, plan = p2p_setup(scenario)
    site = SiteSession.open(context, scenario, node_local=False)
    site.admit(algorithm.noise.private, "peer-to-peer releases")
    refused: dict[int, Exception] = {}
    nodes: dict[int, int] = {}
    for j, request in enumerate(requests):
        try:
            nodes[j] = node_partition(context, scenario, request.client, simulated=True)
        except ValueError as exc:
            refused[j] = exc
    asked = [j for j in range(len(requests)) if j in nodes]
    released = []
    if asked:
        data = NodeData.of_problem(problem, sorted({nodes[j] for j in asked}))
        named = [SiteRequest(nodes[j], requests[j].round, requests[j].public) for j in asked]
        for j, outcome in zip(asked, answer(named, data, plan, site.noise_for)):
            if isinstance(outcome, Exception):
                refused[j] = outcome
            else:
                released.append(outcome)
    code = int(ErrorCode.CLIENT_APP_RAISED_EXCEPTION)
    if len(requests) == 1 and refused:  # a one-node message: its refusal is the reply (nothing released)
        return Message(Error(code=code, reason=" ".join(str(refused[0]).split())), reply_to=msg)
    errors = [(nodes.get(j, -1 if requests[j].client is None else requests[j].client), code, str(refused[j]))
              for j in sorted(refused)]
    return Message(content=RecordDict({**pack_releases(released, errors), **site.records()}), reply_to=msg)


__all__ = ["SitePlan", "handle_p2p_train", "p2p_setup"]
