"""Flower ServerApp entry: parse the scenario once, dispatch on its algorithm."""
from __future__ import annotations

import warnings
from logging import INFO
from typing import Callable

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import Context
    from flwr.common.logger import log
    from flwr.serverapp import Grid, ServerApp

from fdp_flower.algorithms.registry import any_scenario_from_run_config, family_of
from fdp_flower.strategies.common import wait_for_simulation_backend
from fdp_flower.strategies.fdp_admm import run_fdp_admm_federation
from fdp_flower.strategies.gradient_admm import run_gradient_admm_server
from fdp_flower.strategies.relay import run_p2p_federation

app = ServerApp()

# algorithm family -> runner(grid, context, scenario); each runner builds its strategy and saves results
RUNNERS: dict[str, Callable[[Grid, Context, object], None]] = {
    "fdp_admm": run_fdp_admm_federation,
    "p2p": run_p2p_federation,
    "gradient_admm": run_gradient_admm_server,
}


@app.main()
def main(grid: Grid, context: Context) -> None:
    scenario = any_scenario_from_run_config(context.run_config)
    log(INFO, "fdp-flower: scenario %r (%s)", scenario.name, scenario.algorithm.kind)
    family = family_of(scenario.algorithm.kind)
    if str(context.run_config.get("resume", "") or "") and family != "fdp_admm":
        raise ValueError(f"resume: only FDP-ADMM runs write checkpoints, not {scenario.algorithm.kind}")
    wait_for_simulation_backend()
    RUNNERS[family](grid, context, scenario)
