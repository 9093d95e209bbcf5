"""DP-ADMM / DP-AccADMM client worker: a thin driver of the family's site function on a Flower node
(:func:`fdp_flower.algorithms.gradient_admm.site.answer`; Xu et al. 2020; docs/algorithms.md, section 5).

It unpacks a train message into the protocol's requests (the point xh_{t-1} each client is asked at),
loads the rows of the clients it is asked for, calls the site function with the site's noise
(:meth:`fdp_flower.clients.site.SiteSession.noise_for`) and packs the releases.  Where the rows come from
decides the noise:

- a node whose node config names its own file (``data-path``; data kind ``node_files``,
  :func:`fdp_flower.data.tabular.read_node_rows`): the site's policy, its own noise (OS entropy or its
  secret, never the run seed) and its ledger, charged before every draw, ``max-eps`` enforced; such a
  node serves that file only -- any other data kind is refused, nothing released -- and its error
  replies carry no local path;
- otherwise the scenario's data source (:mod:`fdp_flower.data.sources`: public data sets or files the
  scenario names, which the server can read as well; loaded once per process): the run's noise source,
  no site ledger.

The algorithm's state lives on the server; the client keeps nothing between rounds but its loaded rows.
"""
from __future__ import annotations

from fdp_flower.algorithms.gradient_admm.plan import ScenarioData, data_source, site_plan
from fdp_flower.algorithms.gradient_admm.site import SiteData, answer
from fdp_flower.algorithms.protocol import SiteRequest
from fdp_flower.clients.common import check_node_files, node_partition, own_rows, partition_data_error
from fdp_flower.clients.site import SITE_ERRORS, SiteSession, names_own_data, releases_reply, with_clipped_count
from fdp_flower.wire import unpack_requests
from fdp_flower.wire.flwr import Context, Message

#: id(scenario) -> (scenario, its data source): a process serving many messages of a run loads the rows once
_SOURCES: dict[int, tuple[object, object]] = {}


def _source(scenario):
    known = _SOURCES.get(id(scenario))
    if known is None or known[0] is not scenario:
        if len(_SOURCES) >= 4:
            _SOURCES.pop(next(iter(_SOURCES)))
        known = _SOURCES[id(scenario)] = (scenario, data_source(scenario))
    return known[1]


def handle_gradient_admm_train(msg: Message, context: Context, scenario, data: ScenarioData | None = None) -> Message:
    """Answer a DP-(Acc)ADMM train message: every client it asks for releases its noisy mean gradient at the
    point the server names (:func:`fdp_flower.algorithms.gradient_admm.site.answer`).  The reply holds the
    released rows, one list per metric (``clipped-rows`` only when privacy is off: a count of the data) and
    the clients the node refused (a public value or round it does not accept, labels the loss's bound does
    not hold for, bad data: nothing of them is released).

    ``scenario`` is the client's own :class:`~fdp_flower.algorithms.gradient_admm.config.GradientADMMScenario`;
    ``data`` (optional) its preloaded :class:`~fdp_flower.algorithms.gradient_admm.plan.ScenarioData`.
    """
    requests, _config, _others = unpack_requests(msg.content)
    private = scenario.privacy.enabled
    node_local = names_own_data(context)
    check_node_files(scenario, node_local)
    # the node's own file: its policy, noise and ledger; public tabular data (the server can load them too):
    # the run's noise source
    site = SiteSession.open(context, scenario, node_local=node_local)
    site.admit(private, "DP-ADMM gradients")
    refused: dict[int, Exception] = {}  # request -> why its client is refused (nothing of it is released)
    rows: dict[int, tuple[int, tuple]] = {}
    for j, request in enumerate(requests):
        try:
            if node_local:
                rows[j] = own_rows(context, scenario, request.client)
                continue
            partition = node_partition(context, scenario, request.client, simulated=True)
            try:
                own = (data.features[partition], data.labels[partition]) if data is not None else \
                    _source(scenario).load(partition)
            except ValueError as exc:  # a data error names the partition
                raise partition_data_error(partition, exc) from None
            rows[j] = (partition, own)
        except (*SITE_ERRORS, ValueError) as exc:
            refused[j] = exc
    released = []
    asked = sorted(rows)
    if asked:
        sites = SiteData.clip([rows[j][0] for j in asked], [rows[j][1][0] for j in asked],
                              [rows[j][1][1] for j in asked], scenario.model.clip_c1)
        plan = site_plan(scenario, sites.features[0].shape[1])
        named = [SiteRequest(rows[j][0], requests[j].round, requests[j].public) for j in asked]
        for k, (j, outcome) in enumerate(zip(asked, answer(named, sites, plan, site.noise_for))):
            if isinstance(outcome, Exception):
                refused[j] = outcome
                continue
            # a count of the data: on the node's own file only if the site opted in (noised, charged); on public
            # data only when nothing is private
            count = site.clipped_rows(sites.clipped_rows[k], client=outcome.client, round_=outcome.round,
                                      requested=not private)
            released.append(with_clipped_count(outcome, count, site))
    return releases_reply(msg, context, site, released, refused, lambda j: rows[j][0] if j in rows else (
        -1 if requests[j].client is None else requests[j].client), single=len(requests) == 1)


def handle_gradient_admm_setup_query(msg: Message, context: Context, scenario) -> Message:
    """Answer the server's setup query of a DP-(Acc)ADMM run on node files (``data.kind: node_files``): the node
    reads its own file (``data-path``), fingerprints it for the run, checks its size and its responses against
    the loss's bound, and reports public bookkeeping only -- its partition id, m_i (``num-examples``) and the
    rows' dimension d (``dim``) -- with the site's own totals; a run whose T planned releases would take the site
    past its ``max-eps`` is refused here, before anything is released
    (:meth:`fdp_flower.clients.site.SiteSession.run_refusal`)."""
    from fdp_flower.algorithms.gradient_admm.nodes import planned_releases
    from fdp_flower.algorithms.gradient_admm.site import check_responses
    from fdp_flower.clients.common import check_data_fingerprint, check_site_size
    from fdp_flower.clients.node_phase import SETUP_REFUSAL
    from fdp_flower.wire.flwr import ArrayRecord, ConfigRecord, MetricRecord, RecordDict

    node_local = names_own_data(context)
    check_node_files(scenario, node_local)
    site = SiteSession.open(context, scenario, node_local=node_local)
    site.admit(scenario.privacy.enabled, "DP-ADMM gradients")
    partition, (features, response) = own_rows(context, scenario, None)
    plan = site_plan(scenario, features.shape[1])
    try:
        check_data_fingerprint(context.node_config, context.run_id, partition, context.node_config["data-path"],
                               len(response))
        check_site_size(site.policy, partition, len(response))
        check_responses(plan.loss, response)
    except ValueError as exc:
        raise partition_data_error(partition, exc) from None
    refusal = site.run_refusal(planned_releases(plan, partition, len(response)))
    metrics = {"partition-id": partition, "num-examples": int(len(response)), "dim": int(features.shape[1])}
    content = RecordDict({"arrays": ArrayRecord(), "metrics": MetricRecord(metrics), **site.records(),
                          **({SETUP_REFUSAL: ConfigRecord({"reason": refusal})} if refusal else {})})
    return Message(content=content, reply_to=msg)
