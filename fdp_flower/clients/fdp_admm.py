"""FDP-ADMM client worker: a thin driver of FDP-ADMM's site function on a Flower node
(:func:`fdp_flower.algorithms.fdp_admm.site.answer`; docs/algorithms.md, eq. (1.3)).

It unpacks a train message into the protocol's requests (the point each client is asked at), finds
the clients' rows, calls the site function with the site's noise (:mod:`fdp_flower.clients.site`:
on node-local data the site's own policy, noise and ledger) and packs the releases.  The algorithm's
state (w, g_i, wt_i) lives on the server.  What a node keeps between rounds stays on the node and is
never part of a reply: the run's basis, received once per node, in its own ``context.state`` (the
SuperNode stores it and hands it only to its own ClientApp), and each partition's clipped features
and responses, computed once per run, in a file of the node's feature cache (:func:`node_features`,
:func:`feature_cache_file`; not in ``context.state``, which Flower copies to and from every ClientApp
process, one per message in a deployment).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fdp_flower.algorithms.fdp_admm.config import Scenario
from fdp_flower.algorithms.fdp_admm.plan import data_source, load_partition, site_plan
from fdp_flower.algorithms.fdp_admm.site import SiteData, answer, site_features
from fdp_flower.algorithms.protocol import SiteRequest
from fdp_flower.clients.common import check_data_fingerprint, node_partition, partition_data_error
from fdp_flower.clients.site import (
    SITE_ERRORS,
    SiteSession,
    names_own_data,
    releases_reply,
    with_clipped_count,
)
from fdp_flower.functional.fpca import FunctionalBasis
from fdp_flower.wire import (
    BASIS_DIGEST_KEY,
    BASIS_MISSING,
    BASIS_PREFIX,
    MIN_RECORDS_KEY,
    TOTAL_RECORDS_KEY,
    basis_digest,
    pack_arrays,
    unpack_arrays,
    unpack_requests,
)
from fdp_flower.wire.flwr import ConfigRecord, Context, Message

log = logging.getLogger(__name__)

_BASIS_STATE = "fdp-basis"
#: The node's feature cache, under FLWR_HOME as the ClientApp process sees it (Flower's ``~/.flwr``)
FEATURE_CACHE_SUBDIR = "fdp-flower-cache"
#: Another run's cache directory not written to for this long is removed when a run starts its own
_FEATURE_CACHE_MAX_AGE_S = 24 * 3600


#: (id(scenario), id(basis), n) -> ((scenario, basis), the site's plan): built once per message, basis and (Newton
#: rule) named n = sum_i m_i
_PLANS: dict[tuple, tuple[tuple, object]] = {}


def _per_objects(store: dict, objects: tuple, make: Callable[[], object], limit: int, values: tuple = ()):
    """``make()`` once per tuple of live ``objects`` (matched by identity, held so that their ids stay
    theirs) and hashable ``values`` (matched by equality); the oldest entry is dropped beyond ``limit``."""
    key = tuple(id(o) for o in objects) + values
    known = store.get(key)
    if known is None or any(a is not b for a, b in zip(known[0], objects)):
        if len(store) >= limit:
            store.pop(next(iter(store)))
        known = store[key] = (objects, make())
    return known[1]


def _site_plan(scenario: Scenario, basis: FunctionalBasis, total_records: int | None = None):
    """The site's plan, built once per (scenario, basis) and, under the Newton rule, per named n = sum_i m_i."""
    return _per_objects(_PLANS, (scenario, basis), lambda: site_plan(scenario, basis, total_records=total_records),
                        limit=4, values=(total_records,))


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
        if path is not None:  # a site's own file: the one it used first in this run, unchanged
            check_data_fingerprint(context.node_config, context.run_id, partition, path, data.n_samples)
    except ValueError as exc:  # a deployment error names the partition
        raise partition_data_error(partition, exc) from None
    features, clipped = site_features(scenario, basis, data)
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


def _trusted_aggregator_plan(scenario: Scenario, basis: FunctionalBasis, config, source):
    """The site plan of a ``privacy.trust: trusted_aggregator`` round (None in any other mode): the public
    min_i m_i the message names (:data:`~fdp_flower.wire.MIN_RECORDS_KEY`) -- a positive integer; on simulated
    data the source's own min_i m_i; a client with fewer rows refuses in the site function."""
    from fdp_flower.algorithms.fdp_admm.plan import aggregation_trust, site_plan

    if aggregation_trust(scenario) != "trusted_aggregator":
        return None
    value = config[MIN_RECORDS_KEY] if MIN_RECORDS_KEY in config else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{MIN_RECORDS_KEY}: a trusted-aggregator round names the run's min_i m_i (a positive "
                         f"integer), got {value!r}")
    if not source.node_local and value != int(np.min(source.partition_sizes())):
        raise ValueError(f"{MIN_RECORDS_KEY} = {value} is not the run's min_i m_i")
    return site_plan(scenario, basis, [value])


#: the largest n = sum_i m_i a site accepts from the server (a federation of a trillion records)
MAX_TOTAL_RECORDS = 10**12


def newton_total_records(scenario: Scenario, config, source, own_records: int) -> int | None:
    """The Newton rule's public n = sum_i m_i the message names (:data:`~fdp_flower.wire.TOTAL_RECORDS_KEY`), checked
    by the site: a positive integer, at least its own ``own_records`` and at most :data:`MAX_TOTAL_RECORDS`; on
    simulated data equal to the partition's total.  n only splits the schedule's one mu^2 among its release kinds
    (every split sums to the same mu^2, :func:`fdp_flower.algorithms.fdp_admm.newton.newton_schedule`), so a
    wrong n costs accuracy, never privacy.  None: not a Newton-rule run."""
    from fdp_flower.algorithms.fdp_admm.plan import scheduled_rule

    if not scheduled_rule(scenario):  # the Newton rule, or the ADMM rule's level calibration
        return None
    value = config[TOTAL_RECORDS_KEY] if TOTAL_RECORDS_KEY in config else None
    if isinstance(value, bool) or not isinstance(value, int) or not own_records <= value <= MAX_TOTAL_RECORDS:
        raise ValueError(f"{TOTAL_RECORDS_KEY}: a Newton-rule round names the run's n = sum_i m_i (an integer in "
                         f"[{own_records}, {MAX_TOTAL_RECORDS}], at least this site's records), got {value!r}")
    if not source.node_local and value != int(np.sum(source.partition_sizes())):
        raise ValueError(f"{TOTAL_RECORDS_KEY} = {value} is not the run's n = sum_i m_i")
    return value


def handle_fdp_admm_train(msg: Message, context: Context, scenario: Scenario) -> Message:
    """Answer an FDP-ADMM train message: every client it asks for (one, or every client a node hosts
    when nodes host several simulated clients) releases its noisy descent term at the point the
    server names (:func:`fdp_flower.algorithms.fdp_admm.site.answer`), with the site's noise and
    ledger (:class:`~fdp_flower.clients.site.SiteSession`).  The reply holds the released rows, one
    list per metric and the clients the node refused (bad data, a public value it does not accept,
    the site's policy: nothing of them is released), plus the site's totals on node-local data.

    A node that does not hold the basis the message names answers with a :data:`BASIS_MISSING`
    error before anything is computed or charged."""
    requests, config, others = unpack_requests(msg.content)
    digest = str(config[BASIS_DIGEST_KEY]) if BASIS_DIGEST_KEY in config else None
    try:
        basis = node_basis(context, others, digest)
    except BasisMissing as exc:
        from fdp_flower.wire.flwr import Error, ErrorCode

        return Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=str(exc)), reply_to=msg)
    if digest is None:
        digest = str(context.state[_BASIS_STATE + "-digest"]["digest"])
    source = data_source(scenario)
    site = SiteSession.open(context, scenario, node_local=names_own_data(context, source))
    site.admit(scenario.privacy.enabled, "FDP-ADMM releases")
    if site.node_local and not source.node_local:
        raise ValueError(f"this site serves its own data file only (data kind 'node_files'); the run's data kind "
                         f"{source.kind!r} is refused")
    refused: dict[int, Exception] = {}  # request -> why its client is refused (nothing of it is released)
    partitions: dict[int, int] = {}
    for j, request in enumerate(requests):
        try:
            partitions[j] = node_partition(context, scenario, request.client, simulated=not source.node_local)
        except ValueError as exc:
            refused[j] = exc
    load_node_features(context, scenario, sorted(set(partitions.values())), basis, digest)  # one cache read
    rows: dict[int, tuple[np.ndarray, int, np.ndarray]] = {}
    for j, partition in partitions.items():
        try:
            rows[j] = node_features(context, scenario, partition, basis, digest)
        except (*SITE_ERRORS, ValueError) as exc:
            refused[j] = exc
    asked = [j for j in range(len(requests)) if j in rows]
    released = []
    if asked:
        data = SiteData.stack([partitions[j] for j in asked], [rows[j][0] for j in asked],
                              [rows[j][2] for j in asked], [rows[j][1] for j in asked])
        named = [SiteRequest(partitions[j], requests[j].round, requests[j].public) for j in asked]
        total = newton_total_records(scenario, config, source, int(sum(len(rows[j][2]) for j in asked)))
        plan = (_trusted_aggregator_plan(scenario, basis, config, source) or _site_plan(scenario, basis, total))
        for j, outcome in zip(asked, answer(named, data, plan, site.noise_for)):
            if isinstance(outcome, Exception):
                refused[j] = outcome
                continue
            # a count of clipped rows is data-dependent: on node-local data the site decides (its node config's
            # clipped-rows-sigma: noised and charged), never the server; simulated data send it when asked
            try:
                count = site.clipped_rows(rows[j][1], client=partitions[j], round_=requests[j].round,
                                          requested=scenario.privacy.report_clipped_rows or not scenario.privacy.enabled)
            except SITE_ERRORS as exc:  # the count is refused alone: the release stands
                count = None
                log.warning("fdp-flower: client %d's count of clipped rows not sent: %s", partitions[j], exc)
            released.append(with_clipped_count(outcome, count, site))
    return releases_reply(msg, context, site, released, refused, lambda j: partitions.get(
        j, -1 if requests[j].client is None else requests[j].client), single=len(requests) == 1)
