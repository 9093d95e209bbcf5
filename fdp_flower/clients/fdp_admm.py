"""FDP-ADMM client worker: one local step on the client's own data (docs/algorithms.md, eq. (1.2)).

The step is a pure function of (scenario, partition, features, message contents); the
algorithm's state (w, g_i, wt_i) lives on the server.  What a node keeps between rounds stays on
the node and is never part of a reply: the run's basis, received once per node, in its own
``context.state`` (the SuperNode stores it and hands it only to its own ClientApp), and each
partition's clipped features and responses, computed once per run, in a file of the node's
feature cache (:func:`node_features`, :func:`feature_cache_file`; not in ``context.state``, which
Flower copies to and from every ClientApp process, one per message in a deployment).  Noise is
calibrated and added here, on the client, from public
quantities (its sample count m_i, the round, the scenario); on node-local data the site's
policy, noise and ledger apply (:mod:`fdp_flower.clients.site`).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fdp_flower.algorithms.fdp_admm.config import Scenario
from fdp_flower.algorithms.fdp_admm.plan import (
    build_objective,
    client_features,
    data_source,
    load_partition,
    model_dim,
    noise_plan,
    noise_scales,
    primal_release,
)
from fdp_flower.algorithms.fdp_admm.update import client_primal_step, stack_clients
from fdp_flower.clients.common import node_partition, partition_data_error
from fdp_flower.clients.site import SITE_ERRORS, SiteSession, names_own_data
from fdp_flower.functional.fpca import FunctionalBasis
from fdp_flower.privacy.ledger import GaussianRelease
from fdp_flower.privacy.mechanisms import add_gaussian_noise, release_rng
from fdp_flower.wire import (
    BASIS_DIGEST_KEY,
    BASIS_MISSING,
    BASIS_PREFIX,
    BATCH_CLIENTS_KEY,
    basis_digest,
    pack_arrays,
    unpack_arrays,
)

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="typer")
    from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict

_BASIS_STATE = "fdp-basis"
#: The node's feature cache, under FLWR_HOME as the ClientApp process sees it (Flower's ``~/.flwr``)
FEATURE_CACHE_SUBDIR = "fdp-flower-cache"
#: Another run's cache directory not written to for this long is removed when a run starts its own
_FEATURE_CACHE_MAX_AGE_S = 24 * 3600


@dataclass(frozen=True)
class ClientReply:
    """What a client releases: its noisy primal and public bookkeeping."""

    noisy_primal: np.ndarray
    partition: int
    num_examples: int
    eta: float
    sensitivity: float
    sigma: float  # 0.0 when privacy is off
    clipped_rows: int


def fdp_admm_client_update(scenario: Scenario, partition: int, data, basis: FunctionalBasis, *,
                           global_w: np.ndarray, dual: np.ndarray, noisy_primal: np.ndarray,
                           round_: int, rho: float | None = None,
                           noise: Callable[[GaussianRelease], np.random.Generator] | None = None,
                           features: tuple[np.ndarray, int] | None = None) -> ClientReply:
    """Compute w_i^l from (w^{l-1}, g_i^{l-1}, wt_i^{l-1}) and release wt_i^l = w_i^l + N(0, sigma^2 I).

    ``noise`` maps the release's ledger event to its noise generator, called once the noise-free
    step is computed (:meth:`fdp_flower.clients.site.SiteSession.noise_for`: the site's policy and
    ledger); default ``release_rng(seed, partition, round, privacy.noise_source)``.  ``features``:
    (features, rows clipped) of :func:`~fdp_flower.algorithms.fdp_admm.plan.client_features` on
    ``data`` and ``basis``, if already computed (a node's cache); ``data`` then supplies the responses.
    ``rho``: the round's penalty rho^l (default ``algorithm.rho``); a private client
    refuses any other, since its noise is calibrated for ``algorithm.rho`` (eq. (1.6)).
    """
    features, clipped = client_features(scenario, basis, data) if features is None else features
    (reply,) = fdp_admm_node_update(scenario, basis, [NodeClient(partition, features, clipped, data.response,
                                                                 dual, noisy_primal)],
                                    global_w=global_w, round_=round_, rho=rho, noise=noise)
    if isinstance(reply, Exception):
        raise reply
    return reply


@dataclass(frozen=True)
class NodeClient:
    """One client a node runs in a round: its partition, cached features and the server's rows for it."""

    partition: int
    features: np.ndarray
    clipped: int
    response: np.ndarray
    dual: np.ndarray
    noisy_primal: np.ndarray


def fdp_admm_node_update(scenario: Scenario, basis: FunctionalBasis, clients: list[NodeClient], *,
                         global_w: np.ndarray, round_: int, rho: float | None = None,
                         noise: Callable[[GaussianRelease], np.random.Generator] | None = None,
                         ) -> list[ClientReply | Exception]:
    """:func:`fdp_admm_client_update` for every client a node hosts, their steps (eq. (1.2)) as one
    array operation (the in-process engine's stacked form), each client's noise from its own release
    (``noise``, called client by client after all steps are computed).  Returns one entry per client:
    its reply, or the ``ValueError`` / site refusal that stops it alone (nothing of it is released)."""
    dim = model_dim(scenario, basis)
    plan = _noise_plan(scenario, basis)
    rho = scenario.algorithm.rho if rho is None else float(rho)
    out: list[ClientReply | Exception | None] = [None] * len(clients)
    try:
        _check_vector("global_w", global_w, dim)
        if not (np.isfinite(rho) and rho > 0):
            raise ValueError(f"rho must be finite and > 0, got {rho}")
    except ValueError as exc:
        return [exc] * len(clients)
    ready, releases = [], []
    for j, c in enumerate(clients):
        try:
            _check_vector("dual", c.dual, dim)
            _check_vector("noisy_primal", c.noisy_primal, dim)
            releases.append(plan.release(round_, c.features.shape[0], rho))  # a private plan refuses rho != algorithm.rho
            ready.append(j)
        except ValueError as exc:
            out[j] = exc
    if ready:
        features, response, mask = stack_clients([clients[j].features for j in ready],
                                                 [clients[j].response for j in ready])
        primals = client_primal_step(
            objective=build_objective(scenario), features=features, response=response, mask=mask,
            noisy_primal=np.stack([clients[j].noisy_primal for j in ready]), global_w=np.asarray(global_w)[None, :],
            dual=np.stack([clients[j].dual for j in ready]), rho=rho,
            eta=np.array([float(r[0]) for r in releases])[:, None])
        scales = None if releases[0][2] is None else noise_scales(scenario, basis)
        for j, primal, (eta, sensitivity, sigma) in zip(ready, primals, releases):
            c = clients[j]
            try:
                if sigma is None:
                    released, sigma_value = primal, 0.0
                else:
                    rng = (release_rng(scenario.seed, c.partition, round_, scenario.privacy.noise_source)
                           if noise is None else
                           noise(primal_release(c.partition, round_, float(sensitivity), float(sigma))))
                    released, sigma_value = add_gaussian_noise(primal, float(sigma), rng, scales), float(sigma)
            except (*SITE_ERRORS, ValueError) as exc:
                out[j] = exc
                continue
            out[j] = ClientReply(released, c.partition, c.features.shape[0], float(eta), float(sensitivity),
                                 sigma_value, c.clipped)
    return out


def _check_vector(name: str, arr, dim: int) -> None:
    if np.shape(arr) != (dim,):
        raise ValueError(f"{name} must have shape ({dim},), got {np.shape(arr)}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")


#: (id(scenario), id(basis)) -> ((scenario, basis), plan): a node's clients of one message share one plan
#: (its calibration and its per-(round, m) releases are computed once)
_PLANS: dict[tuple[int, ...], tuple[tuple, object]] = {}


def _per_objects(store: dict, objects: tuple, make: Callable[[], object], limit: int):
    """``make()`` once per tuple of live ``objects`` (matched by identity, held so that their ids stay
    theirs); the oldest entry is dropped beyond ``limit``."""
    key = tuple(id(o) for o in objects)
    known = store.get(key)
    if known is None or any(a is not b for a, b in zip(known[0], objects)):
        if len(store) >= limit:
            store.pop(next(iter(store)))
        known = store[key] = (objects, make())
    return known[1]


def _noise_plan(scenario: Scenario, basis: FunctionalBasis):
    return _per_objects(_PLANS, (scenario, basis), lambda: noise_plan(scenario, basis), limit=4)


class BasisMissing(RuntimeError):
    """The message names a basis this node does not hold (an error reply: nothing is released)."""


def node_basis(context: Context, arrays: dict[str, np.ndarray], digest: str | None) -> FunctionalBasis:
    """The run's basis: from the message (the first one this node gets in the run), then from the
    node's ``context.state``; ``digest`` (the message's ``basis-digest``) must match it."""
    sent = {k[len(BASIS_PREFIX):]: v for k, v in arrays.items() if k.startswith(BASIS_PREFIX)}
    if sent:
        own = basis_digest(sent)
        if digest is not None and own != digest:
            raise ValueError(f"the basis arrays do not match the message's {BASIS_DIGEST_KEY}")
        basis = _remember_basis(own, FunctionalBasis.from_arrays(sent))
        context.state[_BASIS_STATE] = pack_arrays(**sent)
        context.state[_BASIS_STATE + "-digest"] = ConfigRecord({"digest": own})
        return basis
    if _BASIS_STATE not in context.state or (
            digest is not None and context.state[_BASIS_STATE + "-digest"]["digest"] != digest):
        raise BasisMissing(f"{BASIS_MISSING}: this node does not hold the run's basis {digest}")
    held = str(context.state[_BASIS_STATE + "-digest"]["digest"])
    known = _BASES.get(held)  # this process has built it already (a simulation worker serves many messages)
    return known if known is not None else _remember_basis(
        held, FunctionalBasis.from_arrays(unpack_arrays(context.state[_BASIS_STATE])))


#: basis digest -> the basis, built once per process (the node's state still decides whether it is held)
_BASES: dict[str, FunctionalBasis] = {}


def _remember_basis(digest: str, basis: FunctionalBasis) -> FunctionalBasis:
    if len(_BASES) >= 4:
        _BASES.pop(next(iter(_BASES)))
    _BASES[digest] = basis
    return basis


#: This process's features, keyed by (run, node, partition, basis, scenario, data file): a ClientApp
#: process that serves many messages (Flower's simulation runtime) reuses them without reading the
#: node's feature cache again; bounded by _PROCESS_CACHE_BYTES.
_PROCESS_CACHE: dict[tuple, tuple[np.ndarray, int, np.ndarray]] = {}
_PROCESS_CACHE_BYTES = 2 * 1024**3
#: (id(scenario),) -> ((scenario,), its digest): the digest is computed once per parsed scenario
_SCENARIO_DIGESTS: dict[tuple[int, ...], tuple[tuple, str]] = {}


def _nbytes(value: tuple[np.ndarray, int, np.ndarray]) -> int:
    return value[0].nbytes + value[2].nbytes


def _remember(entries: dict[tuple, tuple[np.ndarray, int, np.ndarray]]) -> None:
    """Keep ``entries`` in this process's memory, dropping the oldest beyond _PROCESS_CACHE_BYTES."""
    held = sum(_nbytes(v) for v in _PROCESS_CACHE.values())
    for key, value in entries.items():
        size = _nbytes(value)
        if size > _PROCESS_CACHE_BYTES:
            continue
        if key in _PROCESS_CACHE:
            held -= _nbytes(_PROCESS_CACHE.pop(key))
        while _PROCESS_CACHE and held + size > _PROCESS_CACHE_BYTES:  # the oldest first
            held -= _nbytes(_PROCESS_CACHE.pop(next(iter(_PROCESS_CACHE))))
        _PROCESS_CACHE[key] = value
        held += size


def feature_cache_file(context: Context, key: dict[str, str]) -> Path:
    """``$FLWR_HOME/fdp-flower-cache/run-<run id>/node-<node id>-<key hash>.npz``: the file of this
    node's features for ``key`` (basis digest, scenario digest, data file), one file for every
    client the node hosts, FLWR_HOME as this process sees it
    (:func:`fdp_flower.privacy.site_policy.flower_home`)."""
    from fdp_flower.privacy.site_policy import flower_home

    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return (flower_home() / FEATURE_CACHE_SUBDIR / f"run-{int(context.run_id)}" /
            f"node-{int(context.node_id)}-{digest}.npz")


def _read_cached(path: Path, key: dict[str, str]) -> dict[int, tuple[np.ndarray, int, np.ndarray]]:
    """The cached {partition: (features, rows clipped, responses)}; empty when the file is absent,
    unreadable or for another key."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            if json.loads(str(stored["key"])) != key:
                return {}
            partitions, offsets, clipped = stored["partitions"], stored["offsets"], stored["clipped"]
            features, response = stored["features"], stored["response"]
    except (OSError, ValueError, KeyError):
        return {}
    if offsets.shape != (partitions.size + 1,) or clipped.shape != partitions.shape or \
            offsets[-1] != features.shape[0] or features.shape[0] != response.shape[0]:
        return {}
    return {int(p): (features[a:b], int(c), response[a:b])
            for p, a, b, c in zip(partitions, offsets[:-1], offsets[1:], clipped)}


def _write_cached(path: Path, key: dict[str, str], entries: dict[int, tuple[np.ndarray, int, np.ndarray]]) -> None:
    """Write the node's cache file atomically (owner-only directory and file), every partition's rows
    one after another; a run's first write removes the directories of other runs left untouched for a
    day.  A failure only costs a recomputation."""
    run_dir = path.parent
    partitions = sorted(entries)
    sizes = [entries[p][0].shape[0] for p in partitions]
    try:
        if not run_dir.exists():
            run_dir.mkdir(parents=True, mode=0o700, exist_ok=True)
            now = time.time()
            for other in run_dir.parent.glob("run-*"):
                if other != run_dir and now - other.stat().st_mtime > _FEATURE_CACHE_MAX_AGE_S:
                    shutil.rmtree(other, ignore_errors=True)
        fd, tmp = tempfile.mkstemp(dir=run_dir, suffix=".tmp")  # mode 0600
        try:
            with os.fdopen(fd, "wb") as out:
                np.savez(out, partitions=np.asarray(partitions, dtype=np.int64),
                         offsets=np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]),
                         clipped=np.asarray([entries[p][1] for p in partitions], dtype=np.int64),
                         features=np.concatenate([entries[p][0] for p in partitions]),
                         response=np.concatenate([entries[p][2] for p in partitions]),
                         key=np.str_(json.dumps(key, sort_keys=True)))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        pass


def _cache_key(context: Context, scenario: Scenario, digest: str) -> dict[str, str]:
    from fdp_flower.clients.site import scenario_digest

    scenario_key = _per_objects(_SCENARIO_DIGESTS, (scenario,), lambda: scenario_digest(scenario), limit=8)
    path = context.node_config.get("data-path") or None
    return {"basis": digest, "scenario": scenario_key, "data-path": str(path or "")}


def _compute_features(context: Context, scenario: Scenario, partition: int,
                      basis: FunctionalBasis) -> tuple[np.ndarray, int, np.ndarray]:
    path = context.node_config.get("data-path") or None
    try:
        data = load_partition(scenario, partition, path)
    except ValueError as exc:  # a deployment error names the partition
        raise partition_data_error(partition, exc) from None
    features, clipped = client_features(scenario, basis, data)
    return features, int(clipped), data.response


def _node_entries(context: Context, key: dict[str, str]) -> dict[int, tuple[np.ndarray, int, np.ndarray]]:
    """The partitions of this node and ``key`` held in this process's memory."""
    head, tail = (context.run_id, context.node_id), tuple(key.values())
    return {k[2]: v for k, v in _PROCESS_CACHE.items() if k[:2] == head and k[3:] == tail}


def load_node_features(context: Context, scenario: Scenario, partitions: list[int], basis: FunctionalBasis,
                       digest: str) -> dict[int, ValueError]:
    """Bring ``partitions``' features into this process's memory: read the node's cache file once,
    compute what it lacks and write the file once (a batched message's clients).  Returns the
    partitions whose data could not be read, with their errors (the others are loaded)."""
    key = _cache_key(context, scenario, digest)
    head, tail = (context.run_id, context.node_id), tuple(key.values())
    missing = [p for p in partitions if (*head, p, *tail) not in _PROCESS_CACHE]
    if not missing:
        return {}
    cache_file = feature_cache_file(context, key)
    _remember({(*head, p, *tail): value for p, value in _read_cached(cache_file, key).items()})
    computed, failed = {}, {}
    for p in missing:
        if (*head, p, *tail) not in _PROCESS_CACHE:
            try:
                computed[(*head, p, *tail)] = _compute_features(context, scenario, p, basis)
            except ValueError as exc:
                failed[p] = exc
    if computed:
        _remember(computed)
        _write_cached(cache_file, key, {**_node_entries(context, key), **{k[2]: v for k, v in computed.items()}})
    return failed


def node_features(context: Context, scenario: Scenario, partition: int, basis: FunctionalBasis,
                  digest: str) -> tuple[np.ndarray, int, np.ndarray]:
    """(features, rows clipped, responses) of ``partition`` on ``basis``: computed once per run and
    basis, then read from this process's memory or the node's feature cache file
    (:func:`feature_cache_file`, through :func:`load_node_features`; a deployment starts a new
    ClientApp process per message).  Both are keyed by the basis digest, the scenario and the data
    file; neither leaves the node (only the noisy primal is replied) and the file is readable by the
    node's user only."""
    failed = load_node_features(context, scenario, [partition], basis, digest)
    if partition in failed:
        raise failed[partition]
    key = _cache_key(context, scenario, digest)
    value = _PROCESS_CACHE.get((context.run_id, context.node_id, partition, *key.values()))
    # None only for a partition larger than this process's cache bound, which is then not kept
    return value if value is not None else _compute_features(context, scenario, partition, basis)


@dataclass(frozen=True)
class _Responses:
    """The part of a partition's data the step needs once its features are known."""

    response: np.ndarray


def handle_fdp_admm_train(msg: Message, context: Context, scenario: Scenario) -> Message:
    """Unpack an FDP-ADMM train message, run the client worker, pack the reply (with the site's totals
    on node-local data).  A node that lost the run's basis answers with a :data:`BASIS_MISSING`
    error before anything is computed or charged.

    A batched message (config :data:`~fdp_flower.wire.BATCH_CLIENTS_KEY`: a node hosting several
    simulated clients; row j of its ``duals`` and ``noisy_primals`` is client ``partition-ids[j]``)
    runs its clients' updates (:func:`fdp_admm_node_update`: one stacked step, then each client's noise
    from its own release) and replies once: the released rows of
    ``noisy_primals`` with one list per metric (``partition-id`` naming each row), and the clients it
    refused (bad data, the site's policy) in an ``errors`` record (``partition-id``, ``code``,
    ``reason`` lists); the others still release."""
    config = msg.content["config"]
    arrays = unpack_arrays(msg.content["arrays"])
    digest = str(config[BASIS_DIGEST_KEY]) if BASIS_DIGEST_KEY in config else None
    try:
        basis = node_basis(context, arrays, digest)
    except BasisMissing as exc:
        from flwr.app import Error
        from flwr.common.constant import ErrorCode

        return Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=str(exc)), reply_to=msg)
    site = SiteSession.open(context, scenario, node_local=names_own_data(context, data_source(scenario)))
    site.admit(scenario.privacy.enabled, "FDP-ADMM primal releases")
    if digest is None:
        digest = str(context.state[_BASIS_STATE + "-digest"]["digest"])
    round_, rho = int(config["round"]), float(config["rho"]) if "rho" in config else None
    if BATCH_CLIENTS_KEY not in config:
        named = int(config["partition-id"]) if "partition-id" in config else None
        released, metrics = _client_release(context, scenario, site, basis, digest, named, arrays["global_w"],
                                            arrays["dual"], arrays["noisy_primal"], round_, rho)
        return Message(content=RecordDict({"arrays": pack_arrays(noisy_primal=released),
                                           "metrics": MetricRecord(metrics), **site.records()}), reply_to=msg)
    from flwr.common.constant import ErrorCode

    clients = [int(c) for c in config[BATCH_CLIENTS_KEY]]
    duals, noisy_primals = np.atleast_2d(arrays["duals"]), np.atleast_2d(arrays["noisy_primals"])
    if duals.shape[0] != len(clients) or noisy_primals.shape[0] != len(clients):
        raise ValueError(f"a batched message for {len(clients)} clients carries {duals.shape[0]} duals and "
                         f"{noisy_primals.shape[0]} primals")
    simulated = not data_source(scenario).node_local
    refused: dict[int, Exception] = {}  # row -> why that client is refused (nothing of it is released)
    partitions: dict[int, int] = {}
    for row, named in enumerate(clients):
        try:
            partitions[row] = node_partition(context, scenario, named, simulated=simulated)
        except ValueError as exc:
            refused[row] = exc
    load_node_features(context, scenario, list(partitions.values()), basis, digest)  # one cache file read (and write)
    hosted: dict[int, NodeClient] = {}
    for row, partition in partitions.items():
        try:
            features, clipped, response = node_features(context, scenario, partition, basis, digest)
        except (*SITE_ERRORS, ValueError) as exc:
            refused[row] = exc
            continue
        hosted[row] = NodeClient(partition, features, clipped, response, duals[row], noisy_primals[row])
    replies = fdp_admm_node_update(scenario, basis, list(hosted.values()), global_w=arrays["global_w"],
                                   round_=round_, rho=rho, noise=site.noise_for)
    released, metrics, errors = [], {}, {"partition-id": [], "code": [], "reason": []}
    for row, reply in zip(hosted, replies):
        if isinstance(reply, Exception):
            refused[row] = reply
            continue
        released.append(reply.noisy_primal)
        for key, value in _metrics_of(scenario, reply).items():
            metrics.setdefault(key, []).append(value)
    for row in sorted(refused):
        errors["partition-id"].append(clients[row])
        errors["code"].append(int(ErrorCode.CLIENT_APP_RAISED_EXCEPTION))
        errors["reason"].append(" ".join(str(refused[row]).split()))
    dim = np.shape(arrays["global_w"])[0]
    content = {"arrays": pack_arrays(noisy_primals=np.reshape(released, (len(released), dim))),
               "metrics": MetricRecord(metrics)}
    if errors["partition-id"]:
        content["errors"] = ConfigRecord(errors)
    return Message(content=RecordDict({**content, **site.records()}), reply_to=msg)


def _client_release(context: Context, scenario: Scenario, site: SiteSession, basis: FunctionalBasis, digest: str,
                    named: int | None, global_w: np.ndarray, dual: np.ndarray, noisy_primal: np.ndarray,
                    round_: int, rho: float | None) -> tuple[np.ndarray, dict]:
    """One client's release on this node: (noisy primal, public bookkeeping)."""
    partition = node_partition(context, scenario, named, simulated=not data_source(scenario).node_local)
    features, clipped, response = node_features(context, scenario, partition, basis, digest)
    reply = fdp_admm_client_update(
        scenario, partition, _Responses(response), basis, global_w=global_w, dual=dual, noisy_primal=noisy_primal,
        round_=round_, rho=rho, noise=site.noise_for, features=(features, clipped))
    return reply.noisy_primal, _metrics_of(scenario, reply)


def _metrics_of(scenario: Scenario, reply: ClientReply) -> dict:
    """A release's public bookkeeping (the rows clipped only if the scenario reports them)."""
    metrics = {"partition-id": reply.partition, "num-examples": reply.num_examples, "eta": reply.eta,
               "sensitivity": reply.sensitivity, "sigma": reply.sigma}
    if scenario.privacy.report_clipped_rows or not scenario.privacy.enabled:
        metrics["clipped-rows"] = reply.clipped_rows
    return metrics
