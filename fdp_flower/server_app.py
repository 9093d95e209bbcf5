"""Flower ServerApp entry: build the strategy from the scenario, run it, save the results."""
from __future__ import annotations

import sys
import time
import warnings
from logging import ERROR, INFO
from pathlib import Path

import numpy as np

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import Context
    from flwr.common.logger import log
    from flwr.serverapp import Grid, ServerApp

from fdp_flower.engine.inprocess import RunResult
from fdp_flower.results import summarize, write_results
from fdp_flower.runtime import simulation_setup
from fdp_flower.scenario import scenario_from_run_config
from fdp_flower.strategies.fdp_admm import FDPADMMStrategy, FederationError, pack_arrays

app = ServerApp()


def wait_for_nodes(grid: Grid, count: int, *, timeout: float = 120.0, settle: float | None = None) -> int:
    """Wait until ``count`` nodes are connected; with ``settle``, accept fewer (but >= 1) after that long.

    Returns the number of connected nodes.
    """
    start = time.monotonic()
    while True:
        connected = len(list(grid.get_node_ids()))
        waited = time.monotonic() - start
        if connected >= count or (settle is not None and connected >= 1 and waited >= settle):
            return connected
        if waited > timeout:
            raise FederationError(f"only {connected} of {count} nodes connected after {timeout:.0f}s")
        time.sleep(0.2)


def wait_for_simulation_backend(timeout: float = 300.0) -> None:
    """In Flower's simulation runtime, wait until Ray has started before doing heavy work.

    The ServerApp thread starts while the main thread is still forking Ray's
    processes; heavy numpy/SciPy work in this thread during those forks has been
    seen to deadlock the fork (the run then dies with "No heartbeat received").
    Outside the simulation runtime Ray is not loaded and this returns at once.
    """
    ray = sys.modules.get("ray")
    if ray is None:
        return
    deadline = time.monotonic() + timeout
    while not ray.is_initialized() and time.monotonic() < deadline:
        time.sleep(0.2)


def results_dir(context: Context, name: str) -> Path:
    base = Path(str(context.run_config.get("results-dir", "") or "results"))
    return base / f"{name}-flower-{time.strftime('%Y%m%d-%H%M%S')}-run{context.run_id}"


@app.main()
def main(grid: Grid, context: Context) -> None:
    scenario = scenario_from_run_config(context.run_config)
    log(INFO, "fdp-flower: scenario %r (%s)", scenario.name, scenario.algorithm.kind)
    wait_for_simulation_backend()
    sizes, basis, _features, _responses, _clipped, evaluator = simulation_setup(scenario)
    strategy = FDPADMMStrategy(scenario, basis, evaluate_state=evaluator)
    stop_reason = "completed"
    try:
        connected = wait_for_nodes(grid, scenario.federation.num_clients, settle=2.0)
        if connected < scenario.federation.num_clients:
            log(INFO, "fdp-flower: %d nodes for %d clients: each node simulates several clients",
                connected, scenario.federation.num_clients)
        strategy.start(grid=grid, initial_arrays=pack_arrays(global_w=np.zeros(basis.n_components)),
                       num_rounds=scenario.algorithm.rounds)
    except FederationError as exc:
        stop_reason = f"stopped: {exc}"
        log(ERROR, "run stopped early: %s", exc)
    result = RunResult(scenario, strategy.state, history=strategy.history, ledger=strategy.ledger,
                       basis=basis, reference=evaluator.reference,
                       clipped_rows=[strategy.clipped_rows.get(i, -1) for i in range(len(sizes))],
                       sample_sizes=[strategy.sample_sizes.get(i, int(m)) for i, m in enumerate(sizes)],
                       stop_reason=stop_reason, engine="flower")
    out = write_results(result, results_dir(context, scenario.name))
    summary = summarize(result)
    final = summary["final"] or {}
    log(INFO, "fdp-flower: %s after %d rounds; final MISE = %s", stop_reason, len(strategy.history),
        f"{final.get('mise', float('nan')):.5f}" if final else "n/a")
    privacy = summary["privacy"]
    if scenario.privacy.enabled and privacy.get("private"):
        w = privacy["worst_client"]
        log(INFO, "fdp-flower: total privacy spent per client (worst client %d, %d releases): eps = %.4f "
            "at delta = %g (PLD %.4f, RDP %.4f, zCDP %.4f; rho = %.5f)", w["client"], w["releases"],
            privacy["eps"], privacy["delta"], w["eps_pld"], w["eps_rdp"], w["eps_zcdp"], w["zcdp_rho"])
    elif not scenario.privacy.enabled:
        log(INFO, "fdp-flower: privacy off (F-ADMM): no DP guarantee")
    log(INFO, "fdp-flower: results in %s", out.resolve())
    if stop_reason != "completed":
        raise FederationError(stop_reason)
