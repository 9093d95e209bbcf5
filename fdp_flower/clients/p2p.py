"""Peer-to-peer client worker: one round of one graph node (docs/algorithms.md, sections 3 and 4).

The relay sends node i one message per round with its own state (last release,
dual, link statistics) and its neighbours' releases only; the worker runs
:func:`fdp_flower.algorithms.p2p.node.node_round` -- the very function of the in-process
engine -- and replies with the new state.  Noise is calibrated and added here,
from public quantities (m_i, |N_i|, the round, the scenario), with the generator of
:meth:`fdp_flower.clients.site.SiteSession.noise_for` (the data are public here, so that is
``release_rng(seed, node, round)``; a node-local source would switch on the site's policy).

``scenario`` is duck-typed: anything with ``seed``, ``topology``, ``data``,
``algorithm`` and ``privacy`` as in :class:`fdp_flower.algorithms.p2p.config.P2PScenario`.
The peer-to-peer data sources are simulated from the public seed, so any
SuperNode can serve any graph node (the relay names it in the message); node-local
data files are not supported in this mode yet.
"""
from __future__ import annotations

import json
import warnings
from functools import lru_cache

import numpy as np

from fdp_flower.algorithms.p2p.config import P2PScenario, build_algorithm, build_graph, build_problem
from fdp_flower.algorithms.p2p.node import NodeState, node_round
from fdp_flower.clients.site import SiteSession
from fdp_flower.wire import pack_arrays, unpack_arrays

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import Context, Message, MetricRecord, RecordDict

STATE_KEYS = ("round", "released", "dual", "link_stat")


@lru_cache(maxsize=4)
def _setup(scenario_json: str):
    """(graph, problem without reference, algorithm) of a scenario; cached per scenario text because every
    piece is a pure function of the public scenario (no run state lives here)."""
    scenario = P2PScenario.model_validate(json.loads(scenario_json))
    graph = build_graph(scenario.topology, scenario.seed)
    problem = build_problem(scenario.data, graph.num_nodes, scenario.seed, with_reference=False)
    return graph, problem, build_algorithm(scenario.algorithm, scenario.privacy, problem)


def p2p_setup(scenario):
    """Graph, node data and resolved algorithm of ``scenario`` (shared by client and relay)."""
    data = {k: getattr(scenario, k).model_dump(mode="json") for k in ("topology", "data", "algorithm", "privacy")}
    data["seed"] = scenario.seed
    return _setup(json.dumps(data, sort_keys=True))


def p2p_node_update(scenario, node: int, *, state: NodeState, neighbour_ids, neighbour_released, noise=None):
    """Check that only the node's neighbours' releases arrived, then run its round (``noise``: see
    :func:`fdp_flower.algorithms.p2p.node.node_round`)."""
    graph, problem, algorithm = p2p_setup(scenario)
    if not 0 <= node < graph.num_nodes:
        raise ValueError(f"node {node} outside 0..{graph.num_nodes - 1}")
    expected = graph.neighbours[node]
    if tuple(int(j) for j in neighbour_ids) != expected:
        raise ValueError(f"node {node} received vectors of {list(neighbour_ids)}, its neighbours are {list(expected)}")
    for name, arr in (("released", state.released), ("dual", state.dual), ("neighbour_released", neighbour_released)):
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} contains NaN or infinite values")
    return node_round(algorithm=algorithm, objective=problem.objective, node=node, seed=scenario.seed, state=state,
                      neighbour_released=neighbour_released, neighbour_degrees=graph.degrees[list(expected)],
                      features=problem.features[node], response=problem.responses[node], noise=noise), \
        len(problem.responses[node])


def handle_p2p_train(msg: Message, context: Context, scenario) -> Message:
    """Unpack a relay message, run the node's round, pack the reply (new state + public bookkeeping)."""
    config = msg.content["config"]
    node = int(config["partition-id"])  # the graph node this message is for (named by the relay)
    arrays = unpack_arrays(msg.content["arrays"])
    state = NodeState.from_arrays({k: arrays[k] for k in STATE_KEYS})
    if state.round + 1 != int(config["round"]):
        raise ValueError(f"node {node}: state is after round {state.round} but the relay asks for round "
                         f"{config['round']}")
    # simulated data (from the public seed: the server can compute them too): the run's noise source
    site = SiteSession.open(context, scenario, node_local=False)
    res, m = p2p_node_update(scenario, node, state=state, neighbour_ids=list(config["neighbours"]),
                             neighbour_released=arrays["neighbour_released"], noise=site.noise_for)
    metrics = {"partition-id": node, "num-examples": m, "sensitivity": res.sensitivity or 0.0,
               "sigma": res.sigma or 0.0, "cut-links": res.cut_links, "solver-iterations": res.solver_iterations}
    content = RecordDict({"arrays": pack_arrays(**res.state.to_arrays()), "metrics": MetricRecord(metrics)})
    return Message(content=content, reply_to=msg)
