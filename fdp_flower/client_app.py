"""Flower ClientApp entry: parse the scenario once per run, hand each message to its family's handler.

Only what a client needs is imported here (numpy, the scenario schema, the wire format, the site
rules); each family's handler (the registry's ``client_train``) is imported on its first message, and
SciPy, dp_accounting, matplotlib and scikit-fda only by the code paths that use them.
"""
from __future__ import annotations

import logging

from fdp_flower.algorithms.registry import family, resolve
from fdp_flower.clients.common import run_scenario
from fdp_flower.clients.site import refusal_reply
from fdp_flower.wire.flwr import ClientApp, Context, Message

app = ClientApp()
log = logging.getLogger(__name__)


def secure_sum_mod(msg: Message, context: Context, call_next) -> Message:
    """SecAgg+ messages (``privacy.trust: secure_aggregation``) through the site's guard and Flower's
    ``secaggplus_mod`` (:func:`fdp_flower.clients.fdp_admm_secure.secure_sum_mod`); others as they are."""
    if not (msg.has_content() and "secaggplus_configs" in msg.content.config_records):
        return call_next(msg, context)
    from fdp_flower.clients.fdp_admm_secure import secure_sum_mod as guarded

    return guarded(msg, context, call_next)


@app.train(mods=[secure_sum_mod])
def train(msg: Message, context: Context) -> Message:
    """One round's releases.  Any failure -- a refusal by the site's policy, a value it does not accept,
    unreadable data -- is an error reply stripped of the node's local paths (nothing released); the whole
    message stays in the node's log."""
    if msg.has_content() and "secaggplus_configs" in msg.content.config_records:  # a secure sum's share
        from fdp_flower.clients.fdp_admm_secure import handle_secure_share
        from fdp_flower.clients.site import public_reason

        try:
            return handle_secure_share(msg, context, run_scenario(context))
        except Exception as exc:  # noqa: BLE001 (nothing is sent; the reason without local paths)
            log.warning("fdp-flower: secure-sum share refused: %s", exc)
            raise RuntimeError(public_reason(exc, context)) from None
    try:
        scenario = run_scenario(context)
        return resolve(family(scenario.algorithm.kind).client_train)(msg, context, scenario)
    except Exception as exc:  # noqa: BLE001 (every failure becomes a one-line, path-free error reply)
        log.warning("fdp-flower: train message refused: %s", exc)
        return refusal_reply(msg, exc, context)


@app.query()
def query(msg: Message, context: Context) -> Message:
    """The setup phase of a run on node-local data: the family's ``client_query`` handler (the registry's
    ``extra``; DP-ADMM: m_i and d), by default FDP-ADMM's (m_i, grid, federated DP-FPCA summary)."""
    try:
        scenario = run_scenario(context)
        handler = family(scenario.algorithm.kind).extra.get(
            "client_query", "fdp_flower.clients.node_phase:handle_node_setup_query")
        return resolve(handler)(msg, context, scenario)
    except Exception as exc:  # noqa: BLE001
        log.warning("fdp-flower: setup query refused: %s", exc)
        return refusal_reply(msg, exc, context)
