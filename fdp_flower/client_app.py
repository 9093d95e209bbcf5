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


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One round's releases.  Any failure -- a refusal by the site's policy, a value it does not accept,
    unreadable data -- is an error reply stripped of the node's local paths (nothing released); the whole
    message stays in the node's log."""
    try:
        scenario = run_scenario(context)
        return resolve(family(scenario.algorithm.kind).client_train)(msg, context, scenario)
    except Exception as exc:  # noqa: BLE001 (every failure becomes a one-line, path-free error reply)
        log.warning("fdp-flower: train message refused: %s", exc)
        return refusal_reply(msg, exc, context)


@app.query()
def query(msg: Message, context: Context) -> Message:
    """The setup phase of a run on node-local data (m_i, grid, federated DP-FPCA summary)."""
    from fdp_flower.clients.node_phase import handle_node_setup_query

    try:
        return handle_node_setup_query(msg, context, run_scenario(context))
    except Exception as exc:  # noqa: BLE001
        log.warning("fdp-flower: setup query refused: %s", exc)
        return refusal_reply(msg, exc, context)
