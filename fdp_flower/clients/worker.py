"""The generic client worker: a family's site function on a Flower node (its registry record's ``site``).

Unpacks a train message into the protocol's requests, names each client (the node's own partition, or
the simulated clients the server named), asks the family's site function for the releases with the
site's noise (:meth:`fdp_flower.clients.site.SiteSession.noise_for`) and packs them; a client the site
refuses is listed in the reply's errors (nothing of it is released), a one-client message's refusal is
an error reply.  A family on simulated data needs nothing else on the client side.
"""
from __future__ import annotations

from fdp_flower.algorithms.protocol import SiteRequest
from fdp_flower.algorithms.registry import family, resolve
from fdp_flower.clients.common import node_partition
from fdp_flower.clients.site import SiteSession
from fdp_flower.wire import pack_releases, unpack_requests
from fdp_flower.wire.flwr import Context, Error, ErrorCode, Message, RecordDict


def handle_protocol_train(msg: Message, context: Context, scenario) -> Message:
    """Answer a train message with the family's site function (simulated clients)."""
    record = family(scenario.algorithm.kind)
    if record.site is None:
        raise ValueError(f"family {record.name!r} has no site function for the generic client worker")
    requests, _config, _others = unpack_requests(msg.content)
    site = SiteSession.open(context, scenario, node_local=False)
    named, refused = [], {}
    for j, request in enumerate(requests):
        try:
            client = node_partition(context, scenario, request.client, simulated=True)
            named.append((j, SiteRequest(client, request.round, request.public)))
        except ValueError as exc:
            refused[j] = exc
    answers = resolve(record.site)([r for _, r in named], scenario, site.noise_for) if named else []
    released = []
    for (j, request), answer in zip(named, answers):
        if isinstance(answer, Exception):
            refused[j] = answer
        else:
            released.append(answer)
    code = int(ErrorCode.CLIENT_APP_RAISED_EXCEPTION)
    if len(requests) == 1 and refused:
        return Message(Error(code=code, reason=" ".join(str(refused[0]).split())), reply_to=msg)
    errors = [(-1 if requests[j].client is None else int(requests[j].client), code, str(refused[j]))
              for j in sorted(refused)]
    return Message(content=RecordDict({**pack_releases(released, errors), **site.records()}), reply_to=msg)
