"""A ServerApp that tries to get more out of the sites than their policy allows (test only).

tests/test_site_privacy_deployment.py copies this file into a temporary Flower app whose
ClientApp is the real ``fdp_flower.client_app:app``, and runs it on a real SuperLink with
real SuperNodes.  It sends hand-made FDP-ADMM train messages: rounds 1 and 2, round 3 (past
the sites' max-eps), then -- after the test killed and restarted SuperNode 0 -- a setup query
(each site's totals), round 1 again (a re-release) and round 4 (past the calibrated rounds).
Every reply (released values, error reasons, site reports) goes to ``<results-dir>/*.json``;
at two points it waits for the test (``<name>.json`` written, then ``<name>.go`` awaited).
"""
from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import numpy as np

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
    from flwr.serverapp import Grid, ServerApp

from fdp_flower.algorithms.fdp_admm.plan import build_basis
from fdp_flower.algorithms.protocol import SiteRequest
from fdp_flower.algorithms.registry import any_scenario_from_run_config
from fdp_flower.wire import RELEASE_KEY, SETUP_PHASE, pack_requests

app = ServerApp()
WAIT = 300.0


def _outcomes(replies) -> dict[str, dict]:
    out = {}
    for reply in replies:
        node = str(reply.metadata.src_node_id)
        if reply.has_error():
            out[node] = {"error": reply.error.reason}
            continue
        partition = reply.content["metrics"]["partition-id"]
        entry = {"partition": int(partition[0] if isinstance(partition, list) else partition),
                 "site": dict(reply.content["site"]) if "site" in reply.content else None}
        if RELEASE_KEY in reply.content["arrays"]:
            entry["released"] = reply.content["arrays"][RELEASE_KEY].numpy()[0].tolist()
        out[node] = entry
    return out


def train(grid: Grid, nodes, round_: int, basis) -> dict[str, dict]:
    """Ask every node for its release of ``round_`` at the point 0 (the node's own partition)."""
    request = SiteRequest(None, round_, {"point": np.zeros(basis.n_components)})
    broadcast = {f"basis_{k}": v for k, v in basis.to_arrays().items()}
    messages = [Message(pack_requests([request], {}, broadcast), dst_node_id=node, message_type=MessageType.TRAIN)
                for node in nodes]
    return _outcomes(grid.send_and_receive(messages, timeout=120))


def status(grid: Grid, nodes) -> dict[str, dict]:
    messages = [Message(RecordDict({"config": ConfigRecord({"phase": SETUP_PHASE})}), dst_node_id=node,
                        message_type=MessageType.QUERY) for node in nodes]
    return _outcomes(grid.send_and_receive(messages, timeout=120))


def handshake(out: Path, name: str, log: dict) -> None:
    (out / f"{name}.json").write_text(json.dumps(log))
    deadline = time.monotonic() + WAIT
    while not (out / f"{name}.go").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the test did not answer {name} within {WAIT:.0f}s")
        time.sleep(0.2)


def wait_nodes(grid: Grid, count: int, exclude=()) -> list[int]:
    deadline = time.monotonic() + WAIT
    while True:
        nodes = sorted(set(grid.get_node_ids()) - set(exclude))
        if len(nodes) >= count:
            return nodes
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(nodes)} of {count} nodes after {WAIT:.0f}s")
        time.sleep(0.2)


@app.main()
def main(grid: Grid, context: Context) -> None:
    scenario = any_scenario_from_run_config(context.run_config)
    out = Path(str(context.run_config["results-dir"]))
    out.mkdir(parents=True, exist_ok=True)
    basis = build_basis(scenario)
    nodes = wait_nodes(grid, scenario.federation.num_clients)
    log: dict = {"run_id": int(context.run_id), "nodes": nodes, "status": status(grid, nodes)}
    log["round1"] = train(grid, nodes, 1, basis)
    log["round2"] = train(grid, nodes, 2, basis)
    handshake(out, "before-round3", log)
    log["round3"] = train(grid, nodes, 3, basis)
    handshake(out, "after-round3", log)  # the test kills SuperNode 0 and starts it again
    node_of = {int(n): r["partition"] for n, r in log["status"].items()}
    survivor = [n for n in nodes if node_of[n] != 0]
    (restarted,) = wait_nodes(grid, 1, exclude=nodes)  # SuperNode 0 again, under a new node id
    again = [restarted, *survivor]
    log["restarted_node"] = restarted
    log["status_after_restart"] = status(grid, again)
    log["round1_again"] = train(grid, again, 1, basis)
    log["round4"] = train(grid, again, 4, basis)
    (out / "final.json").write_text(json.dumps(log))
