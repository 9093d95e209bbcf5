"""The generic ServerApp runner: a family's server protocol on Flower (its registry record's ``server``),
driven by :class:`~fdp_flower.strategies.protocol.ProtocolStrategy`, and its results directory
(:func:`fdp_flower.outputs.results.write_protocol_results`)."""
from __future__ import annotations

from fdp_flower.algorithms.registry import family, resolve
from fdp_flower.outputs.results import check_output_dir, privacy_headline, write_protocol_results
from fdp_flower.strategies.common import FederationError, run_results_dir, wait_for_nodes
from fdp_flower.strategies.protocol import ProtocolStrategy
from fdp_flower.wire.flwr import ERROR, INFO, ArrayRecord, Context, log
from fdp_flower.wire.flwr_server import Grid


def run_protocol_federation(grid: Grid, context: Context, scenario) -> None:
    """Run ``scenario`` on ``grid`` with its family's server protocol and write its results."""
    record = family(scenario.algorithm.kind)
    if record.server is None:
        raise ValueError(f"family {record.name!r} has no server protocol for the generic ServerApp runner")
    out = check_output_dir(run_results_dir(context.run_config, context.run_id, scenario.name))
    server = resolve(record.server)(scenario)
    strategy = ProtocolStrategy(server)
    try:
        wait_for_nodes(grid, server.num_clients, settle=2.0)
        strategy.start(grid=grid, initial_arrays=ArrayRecord(), num_rounds=server.rounds_planned,
                       evaluate_fn=strategy.evaluate_fn)
    except FederationError as exc:
        server.stop_reason = f"stopped: {exc}"
        log(ERROR, "run stopped early: %s", exc)
    summary = write_protocol_results(server, scenario, out, engine="flower")
    log(INFO, "fdp-flower: %s", privacy_headline(summary["privacy"], record.party))
    log(INFO, "fdp-flower: results in %s", out.resolve())
    if str(server.stop_reason or "").startswith("stopped"):
        raise FederationError(server.stop_reason)
