"""Flower ClientApp entry: parse the scenario once per run, dispatch on its algorithm.

Only what a client needs is imported here (numpy, the scenario schema, the wire format, the site
rules); each family's worker is imported on its first message, and SciPy, dp_accounting,
matplotlib and scikit-fda only by the code paths that use them.
"""
from __future__ import annotations

import warnings
from typing import Callable

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import Context, Message
    from flwr.clientapp import ClientApp

import importlib

from fdp_flower.algorithms.registry import family_of
from fdp_flower.clients.common import run_scenario
from fdp_flower.clients.site import SITE_ERRORS, refusal_reply

app = ClientApp()

# algorithm family -> (module, handler(msg, context, scenario) -> reply), imported on first use
TRAIN_HANDLERS: dict[str, tuple[str, str]] = {
    "fdp_admm": ("fdp_flower.clients.fdp_admm", "handle_fdp_admm_train"),
    "p2p": ("fdp_flower.clients.p2p", "handle_p2p_train"),
    "gradient_admm": ("fdp_flower.clients.gradient_admm", "handle_gradient_admm_train"),
}


def train_handler(family: str) -> Callable[[Message, Context, object], Message]:
    module, name = TRAIN_HANDLERS[family]
    return getattr(importlib.import_module(module), name)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One release; a refusal by the site's policy is an error reply (nothing released)."""
    scenario = run_scenario(context)
    try:
        return train_handler(family_of(scenario.algorithm.kind))(msg, context, scenario)
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
