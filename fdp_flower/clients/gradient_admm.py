"""DP-ADMM / DP-AccADMM client worker: a thin driver of the family's site function on a Flower node
(:func:`fdp_flower.algorithms.gradient_admm.site.answer`; Xu et al. 2020; docs/algorithms.md, section 5).

It unpacks a train message into the protocol's requests (the point xh_{t-1} each client is asked at),
loads the rows of the clients it is asked for from the scenario's data source
(:mod:`fdp_flower.data.sources`, once per process), calls the site function with the site's noise
(:meth:`fdp_flower.clients.site.SiteSession.noise_for`: the tabular data are public or named by the
scenario, so the run's noise source applies and no site ledger is kept) and packs the releases.  The
algorithm's state lives on the server; the client keeps nothing between rounds but its loaded rows.
"""
from __future__ import annotations

from dataclasses import replace

from fdp_flower.algorithms.gradient_admm.plan import ScenarioData, data_source, site_plan
from fdp_flower.algorithms.gradient_admm.site import SiteData, answer
from fdp_flower.algorithms.protocol import SiteRequest
from fdp_flower.clients.common import node_partition, partition_data_error
from fdp_flower.clients.site import SITE_ERRORS, SiteSession
from fdp_flower.wire import pack_releases, unpack_requests
from fdp_flower.wire.flwr import Context, Error, ErrorCode, Message, RecordDict

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
    # public tabular data (every node can load them, and so can the server): the run's noise source
    site = SiteSession.open(context, scenario, node_local=False)
    site.admit(private, "DP-ADMM gradients")
    refused: dict[int, Exception] = {}  # request -> why its client is refused (nothing of it is released)
    rows: dict[int, tuple[int, tuple]] = {}
    for j, request in enumerate(requests):
        try:
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
            if not private:  # a count of the data: only when nothing is private
                outcome = replace(outcome, metrics={**outcome.metrics, "clipped-rows": sites.clipped_rows[k]})
            released.append(outcome)
    code = int(ErrorCode.CLIENT_APP_RAISED_EXCEPTION)
    if len(requests) == 1 and refused:  # a one-client message: its refusal is the reply (nothing released)
        return Message(Error(code=code, reason=" ".join(str(refused[0]).split())), reply_to=msg)
    errors = [(rows[j][0] if j in rows else (-1 if requests[j].client is None else requests[j].client), code,
               str(refused[j])) for j in sorted(refused)]
    return Message(content=RecordDict({**pack_releases(released, errors), **site.records()}), reply_to=msg)
