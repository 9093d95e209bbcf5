"""Flower ClientApp entry: parse the scenario once, dispatch on its algorithm."""
from __future__ import annotations

import warnings
from typing import Callable

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import Context, Message
    from flwr.clientapp import ClientApp

from fdp_flower.algorithms.registry import any_scenario_from_run_config, family_of
from fdp_flower.clients.fdp_admm import handle_fdp_admm_train
from fdp_flower.clients.gradient_admm import handle_gradient_admm_train
from fdp_flower.clients.p2p import handle_p2p_train
from fdp_flower.clients.site import SITE_ERRORS, refusal_reply

app = ClientApp()

# algorithm family -> handler(msg, context, scenario) -> reply
TRAIN_HANDLERS: dict[str, Callable[[Message, Context, object], Message]] = {
    "fdp_admm": handle_fdp_admm_train,
    "p2p": handle_p2p_train,
    "gradient_admm": handle_gradient_admm_train,
}


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One release; a refusal by the site's policy is an error reply (nothing released)."""
    scenario = any_scenario_from_run_config(context.run_config)
    try:
        return TRAIN_HANDLERS[family_of(scenario.algorithm.kind)](msg, context, scenario)
    except SITE_ERRORS as exc:
        return refusal_reply(msg, exc)


@app.query()
def query(msg: Message, context: Context) -> Message:
    """The setup phase of a run on node-local data (m_i, grid, federated DP-FPCA summary)."""
    from fdp_flower.clients.node_phase import handle_node_setup_query

    try:
        return handle_node_setup_query(msg, context, any_scenario_from_run_config(context.run_config))
    except SITE_ERRORS as exc:
        return refusal_reply(msg, exc)
