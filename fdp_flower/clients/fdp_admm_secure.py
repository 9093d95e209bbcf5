"""FDP-ADMM's site under ``privacy.trust: secure_aggregation`` on Flower (docs/privacy.md, section 7.1;
docs/algorithms.md, eq. (1.3s); the secure sum: docs/secure_aggregation.md, section 6).

Each round the server runs one SecAgg+ round (:func:`fdp_flower.strategies.secure_sum.secure_integer_sum`)
whose public ``FitIns`` is the same for every node (:func:`secure_round_config`): the point, the basis,
and which clients each node hosts.  At the masked-vector stage a node computes the integer share of
every client it hosts with the site function (:func:`fdp_flower.algorithms.fdp_admm.site.answer`, the
same noise stream as the in-process engine, so the same integers), sums them and replies with the sum
encoded for Flower's grid (:func:`fdp_flower.clients.secure_sum.share_reply`: nothing else in clear).

:func:`secure_sum_mod` is the ClientApp mod: other messages pass through; SecAgg+ messages go through the
site's guard (:func:`fdp_flower.clients.secure_sum.secure_sum_guard`: the grid, the number of nodes, a
complete key graph, the Shamir threshold, and no unmasking of a sum with fewer than the nodes the plan
tolerates) and Flower's ``secaggplus_mod``.  A node carrying several clients' shares counts as that many
missing shares when it drops, so the server and the site both allow the most nodes whose clients total
at most t (:func:`secure_tolerance`).
"""
from __future__ import annotations

import json
import logging

import numpy as np

from fdp_flower.privacy.distributed import tolerated_nodes
from fdp_flower.wire import BASIS_DIGEST_KEY, BASIS_PREFIX
from fdp_flower.wire.flwr import ConfigRecord, Context, Message
from fdp_flower.wire.flwr_secagg import RECORD_KEY_CONFIGS, Key, Stage, parameters_to_ndarrays, recorddict_compat

recorddict_to_fitins = recorddict_compat.recorddict_to_fitins

log = logging.getLogger(__name__)

#: Public config keys of a secure FDP-ADMM round's FitIns.
SECURE_ROUND_KEY = "fdp-secure-round"
SECURE_CLIENTS_KEY = "fdp-secure-clients"  # JSON {node id: [client ids]}
SECURE_BASIS_KEYS = "fdp-secure-basis-keys"  # comma-separated names of the basis arrays after the point
SECURE_MIN_RECORDS_KEY = "fdp-secure-min-records"
#: Where a node keeps the round's SecAgg+ policy between the masked-vector and the unmask stage.
_POLICY_STATE = "fdp-secure-policy"


def secure_tolerance(hosted: dict[int, list[int]], tolerated: int) -> int:
    """The fewest nodes whose masked vectors a released sum must contain: all nodes but the most whose
    clients total at most t (:func:`~fdp_flower.privacy.distributed.tolerated_nodes`), and never fewer
    than 2 (Flower's SecAgg+ needs two)."""
    nodes = len(hosted)
    if nodes < 2:
        raise ValueError(f"secure aggregation needs at least 2 nodes, got {nodes}")
    missing = min(tolerated_nodes([len(c) for c in hosted.values()], tolerated), nodes - 2)
    return nodes - missing


def secure_round_config(round_: int, point: np.ndarray, basis_arrays: dict[str, np.ndarray], digest: str,
                        hosted: dict[int, list[int]], min_records: int) -> tuple[list[np.ndarray], dict]:
    """The public FitIns of one secure round: arrays [point, basis arrays...] and the config naming them."""
    keys = sorted(basis_arrays)
    arrays = [np.asarray(point, dtype=float)] + [np.asarray(basis_arrays[k]) for k in keys]
    config = {SECURE_ROUND_KEY: int(round_), BASIS_DIGEST_KEY: str(digest), SECURE_BASIS_KEYS: ",".join(keys),
              SECURE_CLIENTS_KEY: json.dumps({str(n): [int(c) for c in cs] for n, cs in sorted(hosted.items())}),
              SECURE_MIN_RECORDS_KEY: int(min_records)}
    return arrays, config


def is_secure_message(msg: Message) -> bool:
    """A SecAgg+ message (it carries Flower's ``secaggplus`` configs)."""
    return msg.has_content() and RECORD_KEY_CONFIGS in msg.content.config_records


def _hosted(config) -> dict[int, list[int]]:
    return {int(n): [int(c) for c in cs] for n, cs in json.loads(str(config[SECURE_CLIENTS_KEY])).items()}


def _policy_of(context: Context):
    from fdp_flower.clients.secure_sum import SiteSecureSumPolicy

    kept = context.state.config_records.get(_POLICY_STATE)
    if kept is None:  # no masked-vector stage seen: a policy that refuses any unmasking
        return SiteSecureSumPolicy(sites=2, min_contributors=2)
    return SiteSecureSumPolicy(sites=int(kept["sites"]), min_contributors=int(kept["min-contributors"]))


def secure_sum_mod(msg: Message, context: Context, call_next) -> Message:
    """ClientApp mod: SecAgg+ messages through the site's guard and Flower's ``secaggplus_mod``, others as
    they are.  At the masked-vector stage the node's policy (M nodes, M - d contributors) is computed from
    the public FitIns and the site's own scenario (its t) before the guard checks the setup against it."""
    if not is_secure_message(msg):
        return call_next(msg, context)
    from flwr.client.mod import secaggplus_mod

    from fdp_flower.clients.common import run_scenario
    from fdp_flower.clients.secure_sum import secure_sum_guard

    stage = msg.content.config_records[RECORD_KEY_CONFIGS].get(Key.STAGE)
    if stage == Stage.COLLECT_MASKED_VECTORS:
        scenario = run_scenario(context)
        hosted = _hosted(recorddict_to_fitins(msg.content, keep_input=True).config)
        context.state.config_records[_POLICY_STATE] = ConfigRecord({
            "sites": len(hosted), "min-contributors": secure_tolerance(hosted, int(scenario.privacy.tolerated))})
    return secure_sum_guard(_policy_of)(msg, context, lambda m, c: secaggplus_mod(m, c, call_next))


def handle_secure_share(msg: Message, context: Context, scenario) -> Message:
    """The masked-vector stage's handler: the sum of the integer shares of the clients this node hosts
    (eq. (1.3s)), encoded for Flower's grid; a refusal raises (nothing is sent)."""
    from fdp_flower.algorithms.fdp_admm.plan import data_source, site_plan
    from fdp_flower.algorithms.fdp_admm.site import SiteData, answer
    from fdp_flower.algorithms.protocol import SiteRequest, check_public
    from fdp_flower.clients.common import node_partition
    from fdp_flower.clients.fdp_admm import load_node_features, node_basis, node_features
    from fdp_flower.clients.secure_sum import share_reply
    from fdp_flower.clients.site import SiteSession, names_own_data

    if scenario.privacy.trust != "secure_aggregation" or not scenario.privacy.enabled:
        raise ValueError("a secure-sum round in a run whose privacy.trust is not secure_aggregation")
    fitins = recorddict_to_fitins(msg.content, keep_input=True)
    arrays, config = parameters_to_ndarrays(fitins.parameters), fitins.config
    keys = [k for k in str(config[SECURE_BASIS_KEYS]).split(",") if k]
    if len(arrays) != 1 + len(keys) or not all(k.startswith(BASIS_PREFIX) for k in keys):
        raise ValueError("the secure round's arrays do not match its basis keys")
    digest = str(config[BASIS_DIGEST_KEY])
    basis = node_basis(context, dict(zip(keys, arrays[1:])), digest)
    round_ = int(config[SECURE_ROUND_KEY])
    clients = _hosted(config).get(int(context.node_id))
    if not clients:
        raise ValueError(f"node {context.node_id} hosts no client in this secure round")
    source = data_source(scenario)
    min_records = int(config[SECURE_MIN_RECORDS_KEY])
    if not source.node_local and min_records != int(np.min(source.partition_sizes())):
        raise ValueError(f"{SECURE_MIN_RECORDS_KEY} = {min_records} is not the run's min_i m_i")
    site = SiteSession.open(context, scenario, node_local=names_own_data(context, source))  # its policy, t
    if site.node_local and not source.node_local:
        raise ValueError(f"this site serves its own data file only (data kind 'node_files'); the run's data kind "
                         f"{source.kind!r} is refused")
    site.admit(True, "FDP-ADMM secure-sum shares")
    partitions = [node_partition(context, scenario, c, simulated=not source.node_local) for c in clients]
    failed = load_node_features(context, scenario, sorted(set(partitions)), basis, digest)
    if failed:
        raise next(iter(failed.values()))
    rows = [node_features(context, scenario, p, basis, digest) for p in partitions]
    data = SiteData.stack(partitions, [r[0] for r in rows], [r[2] for r in rows], [r[1] for r in rows])
    plan = site_plan(scenario, basis, [min_records])
    point = check_public("point", arrays[0], (plan.dim,))
    releases = answer([SiteRequest(p, round_, {"point": point}) for p in partitions], data, plan, site.noise_for)
    refused = [r for r in releases if isinstance(r, Exception)]
    if refused:
        raise refused[0]
    total = np.sum([r.value for r in releases], axis=0).astype(np.int64)
    return share_reply(msg, total, plan.secure.grid)
