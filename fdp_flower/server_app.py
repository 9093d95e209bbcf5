"""Flower ServerApp entry: parse the scenario once, hand it to its family's runner (the registry)."""
from __future__ import annotations

from fdp_flower.algorithms.registry import any_scenario_from_run_config, family, resolve
from fdp_flower.strategies.common import wait_for_simulation_backend
from fdp_flower.wire.flwr import INFO, Context, log
from fdp_flower.wire.flwr_server import Grid, ServerApp

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    scenario = any_scenario_from_run_config(context.run_config)
    log(INFO, "fdp-flower: scenario %r (%s)", scenario.name, scenario.algorithm.kind)
    record = family(scenario.algorithm.kind)
    if str(context.run_config.get("resume", "") or "") and not record.extra.get("resumable", False):
        raise ValueError(f"resume: only FDP-ADMM runs write checkpoints, not {scenario.algorithm.kind}")
    wait_for_simulation_backend()
    resolve(record.server_app)(grid, context, scenario)
