"""The wire format shared by strategies (server side) and client workers: numpy arrays <-> Flower records."""
from __future__ import annotations

import hashlib

import numpy as np

from fdp_flower.wire.flwr import Array, ArrayRecord


def pack_arrays(**arrays: np.ndarray) -> ArrayRecord:
    return ArrayRecord({k: Array(np.ascontiguousarray(v, dtype=float)) for k, v in arrays.items()})


def unpack_arrays(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in record.items()}


#: The ``phase`` of the QUERY message that opens a run on node-local data (m_i, grid, DP-FPCA summary).
SETUP_PHASE = "node-setup"


#: Prefix of the basis arrays in the first FDP-ADMM train message a node receives in a run.
BASIS_PREFIX = "basis_"
#: Start of the reason of a node's error reply when it does not hold the basis a message names
#: (the server then sends the basis again).
BASIS_MISSING = "basis-missing"
#: Config key of every FDP-ADMM train message: the digest of the run's basis (:func:`basis_digest`).
BASIS_DIGEST_KEY = "basis-digest"


def basis_digest(arrays: dict[str, np.ndarray]) -> str:
    """``sha256:<hex>`` of a basis's named arrays (as float64, in name order): the basis travels
    once per node and run, later messages name it by this digest."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        value = np.ascontiguousarray(arrays[name], dtype=float)
        h.update(f"{name}:{value.shape}".encode())
        h.update(value.tobytes())
    return "sha256:" + h.hexdigest()


# ---------------------------------------------------------------- requests and releases (every family)
#: Config key of a train message: the clients (partition ids) the message asks for, one per request;
#: -1 stands for "the node's own partition" (the server does not yet know which node holds which client).
CLIENTS_KEY = "clients"
#: Prefix of a request's public arrays: ``req.<name>`` holds the ``<name>`` of every request, stacked.
REQUEST_PREFIX = "req."
#: Config key of an FDP-ADMM train message under ``privacy.trust: trusted_aggregator``: the run's public min_i m_i,
#: which fixes the sensitivity 2 G / min_i m_i of the aggregator's one noise draw (a client with fewer rows refuses).
MIN_RECORDS_KEY = "fdp-min-records"
#: Config key of an FDP-ADMM train message under ``algorithm.rule: newton``: the run's public n = sum_i m_i, which
#: splits the schedule's one mu^2 among its release kinds (any n keeps the sum, so it moves utility, never privacy).
TOTAL_RECORDS_KEY = "fdp-total-records"
#: The reply's array of released values, one row per released client (the ``partition-id`` list names them).
RELEASE_KEY = "release"
#: The reply's record of refused clients (``partition-id``, ``code``, ``reason`` lists): nothing of them left.
ERRORS_RECORD = "errors"
#: Metrics every release carries (the others are the site's own choice).
RELEASE_METRICS = ("partition-id", "num-examples", "sensitivity", "sigma")


def pack_requests(requests, extra_config: dict | None = None, broadcast: dict[str, np.ndarray] | None = None):
    """The content of a train message asking one node for ``requests`` (all of one round): config
    ``round`` and :data:`CLIENTS_KEY`, the public arrays stacked under :data:`REQUEST_PREFIX`, and
    ``broadcast`` arrays (e.g. the run's basis, sent until the node holds it)."""
    from fdp_flower.wire.flwr import ConfigRecord, RecordDict

    requests = list(requests)
    names = sorted(requests[0].public) if requests else []
    arrays = {f"{REQUEST_PREFIX}{n}": np.stack([np.asarray(r.public[n], dtype=float) for r in requests])
              for n in names}
    config = {"round": int(requests[0].round), CLIENTS_KEY: [-1 if r.client is None else int(r.client)
                                                                for r in requests], **(extra_config or {})}
    return RecordDict({"arrays": pack_arrays(**arrays, **(broadcast or {})), "config": ConfigRecord(config)})


def unpack_requests(content):
    """(requests, config, other arrays) of a train message: one
    :class:`~fdp_flower.algorithms.protocol.SiteRequest` per entry of :data:`CLIENTS_KEY` (client None
    for -1); a one-line ``ValueError`` for a message whose arrays do not hold one row per client."""
    from fdp_flower.algorithms.protocol import SiteRequest

    config = content["config"]
    arrays = unpack_arrays(content["arrays"])
    clients = [int(c) for c in config[CLIENTS_KEY]]
    round_ = int(config["round"])
    public = {k[len(REQUEST_PREFIX):]: v for k, v in arrays.items() if k.startswith(REQUEST_PREFIX)}
    for name, value in public.items():
        if np.ndim(value) < 1 or len(value) != len(clients):
            raise ValueError(f"a message for {len(clients)} clients carries {name} of shape {np.shape(value)}")
    requests = [SiteRequest(None if c == -1 else c, round_, {n: v[j] for n, v in public.items()})
                for j, c in enumerate(clients)]
    others = {k: v for k, v in arrays.items() if not k.startswith(REQUEST_PREFIX)}
    return requests, config, others


def pack_releases(releases, refused: list[tuple[int, int, str]]) -> dict:
    """The records of a reply: the released values stacked (:data:`RELEASE_KEY`), one list per metric
    (:data:`RELEASE_METRICS` first, then the site's own), and the refused clients as
    (client, error code, reason) in :data:`ERRORS_RECORD`."""
    from fdp_flower.wire.flwr import ConfigRecord, MetricRecord

    releases = list(releases)
    dim = len(releases[0].value) if releases else 0
    metrics: dict[str, list] = {k: [] for k in RELEASE_METRICS} if releases else {}
    for r in releases:
        own = {"partition-id": int(r.client), "num-examples": int(r.num_examples), **r.metrics}
        own.setdefault("sensitivity", 0.0)
        own.setdefault("sigma", 0.0)
        for key, value in own.items():
            metrics.setdefault(key, []).append(value)
    content = {"arrays": pack_arrays(**{RELEASE_KEY: np.reshape([r.value for r in releases], (len(releases), dim))}),
               "metrics": MetricRecord(metrics)}
    if refused:
        content[ERRORS_RECORD] = ConfigRecord({"partition-id": [int(c) for c, _, _ in refused],
                                               "code": [int(code) for _, code, _ in refused],
                                               "reason": [" ".join(str(reason).split()) for _, _, reason in refused]})
    return content


def unpack_releases(content, round_: int, event_of):
    """The releases of a reply as ``(client, release)`` pairs, and the refused clients as
    ``(client, code, reason)``: ``event_of(client, round, sensitivity, sigma)`` rebuilds each release's
    ledger event from its metrics.  A reply whose records do not line up is a one-line ``ValueError``."""
    from fdp_flower.algorithms.protocol import SiteRelease

    arrays = unpack_arrays(content["arrays"])
    metrics = content["metrics"]
    if set(arrays) != {RELEASE_KEY}:
        raise ValueError(f"reply arrays {sorted(arrays)} != ['{RELEASE_KEY}']")
    values = arrays[RELEASE_KEY]
    columns = {str(k): list(v) if isinstance(v, list) else [v] for k, v in metrics.items()}
    ids = [int(c) for c in columns.get("partition-id", [])]
    if np.ndim(values) != 2 or len(values) != len(ids) or any(len(v) != len(ids) for v in columns.values()) \
            or (ids and not set(RELEASE_METRICS) <= set(columns)):
        raise ValueError("the reply's releases and metrics do not hold one entry per released client")
    out = []
    for row, client in enumerate(ids):
        own = {k: v[row] for k, v in columns.items()}
        sensitivity, sigma = float(own.pop("sensitivity")), float(own.pop("sigma"))
        m = int(own.pop("num-examples"))
        own.pop("partition-id")
        event = event_of(client, round_, sensitivity, sigma)
        out.append((client, SiteRelease(client, round_, np.asarray(values[row], dtype=float), m, event,
                                        {"sensitivity": sensitivity, "sigma": sigma, **own})))
    refused = []
    if ERRORS_RECORD in content:
        record = content[ERRORS_RECORD]
        if not len(record["partition-id"]) == len(record["code"]) == len(record["reason"]):
            raise ValueError("the reply's errors record lists differ in length")
        refused = [(int(c), int(code), str(reason))
                   for c, code, reason in zip(record["partition-id"], record["code"], record["reason"])]
    return out, refused
