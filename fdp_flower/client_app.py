"""Flower ClientApp entry: parse the scenario once, dispatch on its algorithm."""
from __future__ import annotations

import warnings
from typing import Callable

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import Context, Message
    from flwr.clientapp import ClientApp

from fdp_flower.clients.fdp_admm import handle_fdp_admm_train
from fdp_flower.scenario import Scenario, scenario_from_run_config

app = ClientApp()

# algorithm kind -> handler(msg, context, scenario) -> reply
TRAIN_HANDLERS: dict[str, Callable[[Message, Context, Scenario], Message]] = {
    "fdp_admm": handle_fdp_admm_train,
}


@app.train()
def train(msg: Message, context: Context) -> Message:
    scenario = scenario_from_run_config(context.run_config)
    handler = TRAIN_HANDLERS.get(scenario.algorithm.kind)
    if handler is None:
        raise ValueError(f"algorithm {scenario.algorithm.kind!r} has no client handler")
    return handler(msg, context, scenario)


@app.query()
def query(msg: Message, context: Context) -> Message:
    """The setup phase of a run on node-local data (m_i, grid, federated DP-FPCA summary)."""
    from fdp_flower.clients.node_phase import handle_node_setup_query

    return handle_node_setup_query(msg, context, scenario_from_run_config(context.run_config))
