"""Flower ClientApp entry: parse the scenario once per run, hand each message to its family's handler.

Only what a client needs is imported here (numpy, the scenario schema, the wire format, the site
rules); each family's handler (the registry's ``client_train``) is imported on its first message, and
SciPy, dp_accounting, matplotlib and scikit-fda only by the code paths that use them.
"""
from __future__ import annotations

from fdp_flower.algorithms.registry import family, resolve
from fdp_flower.clients.common import run_scenario
from fdp_flower.clients.site import SITE_ERRORS, refusal_reply
from fdp_flower.wire.flwr import ClientApp, Context, Message

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One release; a refusal by the site's policy is an error reply (nothing released)."""
    scenario = run_scenario(context)
    try:
        return resolve(family(scenario.algorithm.kind).client_train)(msg, context, scenario)
    except SITE_ERRORS as exc:
        return refusal_reply(msg, exc)


@app.query()
def query(msg: Message, context: Context) -> Message:
    """The setup phase of a run on node-local data (m_i, grid, federated DP-FPCA summary)."""
    from fdp_flower.clients.node_phase import handle_node_setup_query

    try:
        return handle_node_setup_query(msg, context, run_scenario(context))
    except SITE_ERRORS as exc:
        return refusal_reply(msg, exc)
