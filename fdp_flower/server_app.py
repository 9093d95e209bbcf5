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

from fdp_flower.scenario import Scenario, scenario_from_run_config
from fdp_flower.strategies.fdp_admm import run_fdp_admm_federation, wait_for_simulation_backend

app = ServerApp()

# algorithm kind -> runner(grid, context, scenario); each runner builds its strategy and saves results
RUNNERS: dict[str, Callable[[Grid, Context, Scenario], None]] = {
    "fdp_admm": run_fdp_admm_federation,
}


@app.main()
def main(grid: Grid, context: Context) -> None:
    scenario = scenario_from_run_config(context.run_config)
    log(INFO, "fdp-flower: scenario %r (%s)", scenario.name, scenario.algorithm.kind)
    runner = RUNNERS.get(scenario.algorithm.kind)
    if runner is None:
        raise ValueError(f"algorithm {scenario.algorithm.kind!r} has no Flower runner "
                         f"(available: {', '.join(sorted(RUNNERS))})")
    wait_for_simulation_backend()
    runner(grid, context, scenario)
