"""ServerApp and ClientApp of the secure-sum spike (see pyproject.toml)."""
from __future__ import annotations

import dataclasses
import functools
import json
import time
import warnings
from logging import INFO

import numpy as np

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
    from flwr.client.mod import secaggplus_mod
    from flwr.clientapp import ClientApp
    from flwr.common.logger import log
    from flwr.serverapp import Grid, ServerApp

from fdp_flower.clients.secure_sum import SiteSecureSumPolicy, secure_sum_guard, share_reply
from fdp_flower.privacy.distributed import FlowerGrid, SecureSumPlan, plan_secure_sum, site_share

server = ServerApp()
client = ClientApp()

RECORD_BOUND = 1.0


@functools.lru_cache(maxsize=4)
def _plan(sites: int, tolerated: int, dim: int, records: int, rounds: int, eps: float) -> SecureSumPlan:
    return plan_secure_sum(eps=eps, delta=1e-5, rounds=rounds, sites=sites, tolerated=tolerated, dim=dim,
                           record_bound=RECORD_BOUND, max_site_records=records, total_records=sites * records)


def plan_of(cfg, context: Context | None = None) -> SecureSumPlan:
    """The run's public plan, recomputed by every party from the run config (a node keeps its own
    computation in its context state: in a deployment every message is a new ClientApp process)."""
    if context is not None and _PLAN_STATE in context.state.config_records:
        kept = context.state.config_records[_PLAN_STATE]
        return dataclasses.replace(_plan_shape(cfg), scale=float(kept["scale"]), variance=float(kept["variance"]))
    plan = _plan(int(cfg["num-nodes"]), int(cfg["tolerated"]), int(cfg["dim"]), int(cfg["records"]),
                 int(cfg["secure-rounds"]) + int(cfg["plain-rounds"]), float(cfg["eps"]))
    if context is not None:
        context.state.config_records[_PLAN_STATE] = ConfigRecord({"scale": plan.scale, "variance": plan.variance})
    return plan


_PLAN_STATE = "secure-sum-plan"


def _plan_shape(cfg) -> SecureSumPlan:
    """The plan's public fields without its computed scale and variance."""
    sites, records = int(cfg["num-nodes"]), int(cfg["records"])
    return SecureSumPlan(sites=sites, tolerated=int(cfg["tolerated"]), dim=int(cfg["dim"]),
                         rounds=int(cfg["secure-rounds"]) + int(cfg["plain-rounds"]), record_bound=RECORD_BOUND,
                         max_site_records=records, total_records=sites * records, scale=1.0, variance=1.0,
                         eps=float(cfg["eps"]), delta=1e-5)


def site_record_sum(partition: int, cfg) -> np.ndarray:
    """Synthetic data of a site: m records of norm <= G (some clipped), summed."""
    rng = np.random.default_rng(np.random.SeedSequence(int(cfg["seed"]), spawn_key=(1, partition)))
    rows = rng.normal(0.3, 1.0, (int(cfg["records"]), int(cfg["dim"])))
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    rows *= np.minimum(1.0, RECORD_BOUND / norms)
    return rows.sum(axis=0)


def share_of(partition: int, server_round: int, cfg, context: Context | None = None) -> np.ndarray:
    """Site ``partition``'s integer share in round ``server_round`` (its noise from its own stream)."""
    rng = np.random.default_rng(np.random.SeedSequence(int(cfg["seed"]), spawn_key=(2, partition, server_round)))
    return site_share(site_record_sum(partition, cfg), plan_of(cfg, context), rng, records=int(cfg["records"]))


def expected_sum(cfg, server_round: int, partitions) -> list[int]:
    """The in-process sum of the same shares (what Flower's sum must equal bit for bit)."""
    return np.sum([share_of(p, server_round, cfg) for p in partitions], axis=0).astype(np.int64).tolist()


def _policy(context: Context) -> SiteSecureSumPolicy:
    cfg = context.run_config
    sites, tolerated = int(cfg["num-nodes"]), int(cfg["tolerated"])
    return SiteSecureSumPolicy(sites=sites, min_contributors=sites - tolerated, grid=FlowerGrid())


_GUARD = secure_sum_guard(_policy)


def _site_guard(msg: Message, context: Context, call_next) -> Message:
    """The sites' guard, unless the run config switches it off (``site-guard = false``, tests only)."""
    if bool(context.run_config["site-guard"]):
        return _GUARD(msg, context, call_next)
    return call_next(msg, context)


@client.train(mods=[_site_guard, secaggplus_mod])
def train(msg: Message, context: Context) -> Message:
    cfg = context.run_config
    partition = int(context.node_config["partition-id"])
    if partition < int(cfg["drop"]):
        raise RuntimeError(f"partition {partition}: simulated dropout at the masked-vector stage")
    return share_reply(msg, share_of(partition, int(msg.metadata.group_id), cfg, context), FlowerGrid())


@client.query()
def plain(msg: Message, context: Context) -> Message:
    partition = int(context.node_config["partition-id"])
    share = share_of(partition, int(msg.metadata.group_id), context.run_config, context)
    return Message(RecordDict({"share": ArrayRecord([share])}), reply_to=msg)


@server.main()
def main(grid: Grid, context: Context) -> None:
    from fdp_flower.strategies.secure_sum import SecureSumRefused, plain_integer_sum, secure_integer_sum

    cfg = context.run_config
    sites, tolerated = int(cfg["num-nodes"]), int(cfg["tolerated"])
    deadline = time.monotonic() + 120
    while len(list(grid.get_node_ids())) < sites and time.monotonic() < deadline:
        time.sleep(0.2)
    nodes = sorted(grid.get_node_ids())[:sites]
    plan = plan_of(cfg)
    threshold = int(cfg["threshold"])
    out: dict = {"nodes": nodes, "plan": {"scale": plan.scale, "share_variance": plan.share_variance,
                                          "variance": plan.variance, "eps": plan.epsilon()},
                 "secure": [], "plain": []}
    secure_rounds, plain_rounds = int(cfg["secure-rounds"]), int(cfg["plain-rounds"])
    if plain_rounds:  # warm-up (not recorded): every ClientApp process imports and plans once
        plain_integer_sum(grid, node_ids=nodes, server_round=secure_rounds + plain_rounds + 1,
                          public_arrays=[np.zeros(1)])
    # secure rounds 1..S and plain rounds S+1..S+P, interleaved so that both see the same machine load
    order = [("secure", r) for r in range(1, secure_rounds + 1)]
    plain = [("plain", secure_rounds + r) for r in range(1, plain_rounds + 1)]
    order = [x for pair in zip(order, plain) for x in pair] + order[len(plain):] + plain[len(order):]
    for kind, r in order:
        if kind == "plain":
            total, seconds = plain_integer_sum(grid, node_ids=nodes, server_round=r, public_arrays=[np.zeros(1)],
                                               poll=bool(cfg["short-poll"]))
            out["plain"].append({"round": r, "total": total.tolist(), "seconds": seconds})
            continue
        try:
            res = secure_integer_sum(grid, context, node_ids=nodes, server_round=r, min_contributors=sites - tolerated,
                                     reconstruction_threshold=threshold if threshold > 0 else None,
                                     flower_grid=plan.grid, server_guard=bool(cfg["server-guard"]),
                                     short_poll=bool(cfg["short-poll"]), inspect=(r == 1), timeout=120.0)
            out["secure"].append({"round": r, "total": res.total.tolist(), "contributors": list(res.contributors),
                                  "dropped": list(res.dropped), "seconds": res.seconds,
                                  "unmasked": {str(k): v for k, v in res.unmasked.items()},
                                  "wire": [w.__dict__ for w in res.wire]})
        except SecureSumRefused as exc:
            out["secure"].append({"round": r, "refused": str(exc)})
    log(INFO, "secure-sum spike: %s", json.dumps({k: out[k] for k in ("secure", "plain")}, default=str)[:2000])
    if str(cfg["out"]):
        with open(str(cfg["out"]), "w") as fh:
            json.dump(out, fh, default=str)
