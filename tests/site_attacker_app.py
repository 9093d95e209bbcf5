"""A ServerApp that acts against the sites (test only): issue 28's attacks 2-5 in a real deployment.

tests/test_malicious_server_deployment.py copies this file into a temporary Flower app whose
ClientApp is the real ``fdp_flower.client_app:app`` and runs it several times on one SuperLink with
real SuperNodes, each run with the scenario its attack needs (the run config is the server's to
write) and the run config key ``attack``:

- ``values`` (a scenario of 11 rounds whose run config asks for the count of clipped rows,
  ``privacy.report_clipped_rows``): rounds 1-6 at the crafted points of :func:`crafted_points` (honest
  basis), rounds 7-10 at the point 0 with the basis replaced in every message (:func:`crafted_bases`),
  then round 11 at each point the site must refuse (:func:`refused_points`);
- ``kind``, ``loss``: one round-1 request under the run's scenario (the test names another data kind,
  or a loss the sites' responses break).

A deployment starts a ClientApp process per message (seconds each on a loaded machine), so every
attack is a handful of messages; each release has K coordinates of independent noise.

Every reply (released values, metrics, error reasons, site reports) goes to
``<results-dir>/<attack>.json``.
"""
from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import numpy as np

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import Context, Message, MessageType
    from flwr.serverapp import Grid, ServerApp

from fdp_flower.algorithms.fdp_admm.plan import build_basis
from fdp_flower.algorithms.protocol import MAX_PUBLIC_MAGNITUDE, SiteRequest
from fdp_flower.algorithms.registry import any_scenario_from_run_config
from fdp_flower.wire import RELEASE_KEY, pack_requests

app = ServerApp()
WAIT = 300.0


def crafted_points(k: int) -> list[np.ndarray]:
    """Points that would overflow a projection or absorb noise added to them in floating point (the old
    release added the noise to a primal of magnitude 2^59: float spacing 128 against a sigma below 1)."""
    return [np.full(k, 1.5 * 2.0**59), np.full(k, -1e99), np.resize([1e99, -1e99, 0.0, 0.0, 1e99, 1.0], k),
            np.full(k, 5e-324), np.zeros(k), np.full(k, 1e-310) * (-1.0) ** np.arange(k)]


def refused_points(k: int) -> dict[str, np.ndarray]:
    return {"1e300": np.full(k, 1e300), "nan": np.full(k, np.nan), "inf": np.full(k, np.inf),
            "2*max": np.full(k, 2 * MAX_PUBLIC_MAGNITUDE), "length+1": np.zeros(k + 1)}


def crafted_bases(honest: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """Bases the server swaps in between messages: components scaled by 1e50 and 1e-300, the mean
    shifted by 1e100, random components (seed 3)."""
    rng = np.random.default_rng(3)
    return [{**honest, "components": 1e50 * honest["components"]},
            {**honest, "components": 1e-300 * honest["components"]},
            {**honest, "mean": honest["mean"] + 1e100},
            {**honest, "components": rng.standard_normal(honest["components"].shape)}]


def _outcomes(replies) -> dict[str, dict]:
    out = {}
    for reply in replies:
        node = str(reply.metadata.src_node_id)
        if reply.has_error():
            out[node] = {"error": reply.error.reason}
            continue
        content = reply.content
        entry: dict = {"site": dict(content["site"]) if "site" in content else None}
        if "metrics" in content:
            entry["metrics"] = {k: (v if isinstance(v, list) else [v]) for k, v in content["metrics"].items()}
        if "arrays" in content and RELEASE_KEY in content["arrays"]:
            entry["released"] = content["arrays"][RELEASE_KEY].numpy().tolist()
        out[node] = entry
    return out


def train(grid: Grid, nodes, round_: int, point: np.ndarray, basis_arrays: dict) -> dict[str, dict]:
    """Ask every node for its release of ``round_`` at ``point``, sending ``basis_arrays`` as the run's basis."""
    request = SiteRequest(None, round_, {"point": point})
    broadcast = {f"basis_{k}": v for k, v in basis_arrays.items()}
    messages = [Message(pack_requests([request], {}, broadcast), dst_node_id=node, message_type=MessageType.TRAIN)
                for node in nodes]
    return _outcomes(grid.send_and_receive(messages, timeout=120))


def wait_nodes(grid: Grid, count: int) -> list[int]:
    deadline = time.monotonic() + WAIT
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= count:
            return nodes
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(nodes)} of {count} nodes after {WAIT:.0f}s")
        time.sleep(0.2)


@app.main()
def main(grid: Grid, context: Context) -> None:
    scenario = any_scenario_from_run_config(context.run_config)
    attack = str(context.run_config["attack"])
    out = Path(str(context.run_config["results-dir"]))
    out.mkdir(parents=True, exist_ok=True)
    basis = build_basis(scenario).to_arrays()
    k = scenario.basis.n_components
    nodes = wait_nodes(grid, scenario.federation.num_clients)
    log: dict = {"run_id": int(context.run_id), "nodes": nodes, "attack": attack}
    if attack == "values":  # rounds 1-6: crafted points; 7-10: crafted bases; 11: points the site must refuse
        points, bases = crafted_points(k), crafted_bases(basis)
        log["points"] = [{"round": r, "point": r - 1, "replies": train(grid, nodes, r, point, basis)}
                         for r, point in enumerate(points, start=1)]
        log["bases"] = [{"round": r, "basis": j, "replies": train(grid, nodes, r, np.zeros(k), crafted)}
                        for j, (r, crafted) in enumerate(zip(range(len(points) + 1, scenario.algorithm.rounds),
                                                             bases))]
        log["refused"] = {name: train(grid, nodes, scenario.algorithm.rounds, point, basis)
                          for name, point in refused_points(k).items()}
    elif attack in ("kind", "loss"):  # the run's scenario is the attack: one request at round 1
        log["round1"] = train(grid, nodes, 1, np.zeros(k), basis)
    else:
        raise ValueError(f"unknown attack {attack!r}")
    (out / f"{attack}.json").write_text(json.dumps(log))
