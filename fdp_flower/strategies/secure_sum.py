"""One secure sum of integer vectors through Flower's SecAgg+, driven from a Message-API ServerApp
(docs/secure_aggregation.md, section "Flower's SecAgg+ from a Message-API ServerApp").

Flower 1.41 / 1.42 run ``SecAggPlusWorkflow`` only with a ``LegacyContext`` and a legacy ``Strategy``
(``configure_fit`` names the nodes and their instructions, ``aggregate_fit`` receives the unmasked
aggregate).  :func:`secure_integer_sum` builds both for one round from inside any ServerApp main
(``grid``, ``context``): a private ``Context`` (the caller's ``context.state`` is not touched), a
shim strategy that hands every node the same public arrays and config and catches the aggregate,
and the workflow itself (no cryptography here).  It returns the exact integer sum of the sites'
shares (:meth:`fdp_flower.privacy.distributed.FlowerGrid.decode_sum` undoes Flower's quantization
and modulus) and the nodes whose shares it contains, or raises :class:`SecureSumRefused`.

Workflow settings (the sites check them, :mod:`fdp_flower.clients.secure_sum`): every node shares
its keys with every other (``num_shares`` = 1.0, the full graph, so that each site sees the whole
list of contributors at the unmask stage), ``reconstruction_threshold`` = M - t (at most t missing
nodes can still be unmasked; fewer than M - t colluders cannot reconstruct a mask), and the grid of
:class:`~fdp_flower.privacy.distributed.FlowerGrid` (``clipping_range`` c, ``quantization_range``
q = 2^30, ``max_weight`` q, each reply weighted 1).  The server refuses a round with fewer than
``min_contributors`` shares before asking for the unmasking shares; the sites refuse too.

What crosses the wire unmasked (``inspect=True`` records it per stage, :class:`WireRecord`): the
public instructions (the arrays and config of ``FitIns``), the key material of SecAgg+, and in the
masked-vector replies, besides the masked bytes, the reply's ``fitres.metrics`` (a ConfigRecord) and
``fitres.num_examples`` (a MetricRecord).  Those two must be data-independent: the site handler sends
empty metrics and num_examples = 1.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from logging import INFO, WARNING

import numpy as np

from fdp_flower.privacy.distributed import FlowerGrid
from fdp_flower.strategies.common import polling
from fdp_flower.wire.flwr import ArrayRecord, ConfigRecord, Context, Message, RecordDict, log
from fdp_flower.wire.flwr_secagg_server import (
    MAIN_CONFIGS_RECORD,
    MAIN_PARAMS_RECORD,
    ClientManager,
    ClientProxy,
    FitIns,
    FitRes,
    GridClientProxy,
    LegacyContext,
    Parameters,
    Scalar,
    SecAggPlusWorkflow,
    ServerConfig,
    SimpleClientManager,
    WorkflowKey,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from fdp_flower.wire.flwr_secagg_server import LegacyStrategy as Strategy
from fdp_flower.wire.flwr_server import Grid


class SecureSumRefused(RuntimeError):
    """The secure sum was not released: too few shares, or Flower's workflow halted."""


@dataclass(frozen=True)
class WireRecord:
    """What one reply carried, as the server received it (``inspect=True``)."""

    stage: str  # the SecAgg+ stage the reply answers
    node: int
    error: bool
    array_records: dict[str, int]  # record name -> number of arrays in it (0: cleared by the mod)
    config_records: dict[str, list[str]]  # record name -> its keys
    metric_records: dict[str, dict[str, object]]  # record name -> its values


@dataclass(frozen=True)
class SecureSumResult:
    """One secure sum: the exact integer sum and who is in it."""

    total: np.ndarray  # int64, sum of the contributors' shares
    contributors: tuple[int, ...]  # node ids whose shares are in ``total``
    dropped: tuple[int, ...]  # sampled node ids that are not
    seconds: float  # wall time of the four SecAgg+ stages
    unmasked: dict[int, dict[str, object]]  # node -> num_examples and metrics it sent in clear
    wire: tuple[WireRecord, ...] = field(default=())


class _InspectingGrid:
    """A grid that records, for every reply, which records it carried (for :class:`WireRecord`)."""

    def __init__(self, grid: Grid) -> None:
        self._grid = grid
        self.records: list[WireRecord] = []
        self._stage: dict[str, str] = {}

    def __getattr__(self, name):
        return getattr(self._grid, name)

    def send_and_receive(self, messages, *, timeout: float | None = None):
        messages = list(messages)
        stage = "?"
        for m in messages:
            cfg = m.content.config_records.get("secaggplus_configs")
            stage = str(cfg.get("stage", "?")) if cfg is not None else stage
        replies = list(self._grid.send_and_receive(messages, timeout=timeout))
        for r in replies:
            if r.has_error():
                self.records.append(WireRecord(stage, r.metadata.src_node_id, True, {}, {}, {}))
                continue
            c = r.content
            self.records.append(WireRecord(
                stage, r.metadata.src_node_id, False,
                {k: len(v) for k, v in c.array_records.items()},
                {k: sorted(v.keys()) for k, v in c.config_records.items()},
                {k: dict(v) for k, v in c.metric_records.items()}))
        return replies


class _ShimStrategy(Strategy):
    """The legacy strategy SecAggPlusWorkflow needs: one FitIns for every named node, and an
    ``aggregate_fit`` that decodes the unmasked aggregate to the integer sum."""

    def __init__(self, grid: Grid, run_id: int, node_ids: list[int], instructions: FitIns,
                 flower_grid: FlowerGrid) -> None:
        self._grid = grid
        self._run_id = run_id
        self._node_ids = node_ids
        self._instructions = instructions
        self._flower_grid = flower_grid
        self.total: np.ndarray | None = None
        self.contributors: tuple[int, ...] = ()
        self.unmasked: dict[int, dict[str, object]] = {}

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        return None

    def configure_fit(self, server_round: int, parameters: Parameters, client_manager: ClientManager
                      ) -> list[tuple[ClientProxy, FitIns]]:
        return [(GridClientProxy(nid, self._grid, self._run_id), self._instructions) for nid in self._node_ids]

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]], failures
                      ) -> tuple[Parameters | None, dict[str, Scalar]]:
        self.contributors = tuple(sorted(int(proxy.node_id) for proxy, _ in results))
        self.unmasked = {int(proxy.node_id): {"num_examples": res.num_examples, "metrics": dict(res.metrics)}
                         for proxy, res in results}
        if results:
            (aggregate,) = parameters_to_ndarrays(results[0][1].parameters)
            self.total = self._flower_grid.decode_sum(aggregate, len(results))
        return None, {}

    def configure_evaluate(self, server_round, parameters, client_manager):
        return []

    def aggregate_evaluate(self, server_round, results, failures):
        return None, {}

    def evaluate(self, server_round, parameters):
        return None


class _GuardedSecAggPlus(SecAggPlusWorkflow):
    """SecAggPlusWorkflow that halts before the unmask stage when fewer than ``min_contributors``
    masked vectors arrived (the noise of the missing shares would be short, eq. (9.4))."""

    def __init__(self, *args, min_contributors: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.min_contributors = min_contributors
        self.halt_reason = ""
        self.failures: list[str] = []  # the error replies' reasons, stage by stage
        self._seen = 0

    def _note_failures(self, stage: str, state) -> None:
        for exc in state.failures[self._seen:]:
            error = exc.args[0] if exc.args else exc
            reason = " ".join(str(getattr(error, "reason", error)).split())
            # a runtime wraps the ClientApp's exception (e.g. in Ray's traceback): its message comes last
            self.failures.append(f"{stage}: ...{reason[-300:]}" if len(reason) > 300 else f"{stage}: {reason}")
        self._seen = len(state.failures)

    def setup_stage(self, grid, context, state) -> bool:
        ok = super().setup_stage(grid, context, state)
        self._note_failures("setup", state)
        return ok

    def share_keys_stage(self, grid, context, state) -> bool:
        ok = super().share_keys_stage(grid, context, state)
        self._note_failures("share keys", state)
        return ok

    def unmask_stage(self, grid, context, state) -> bool:
        ok = super().unmask_stage(grid, context, state)
        self._note_failures("unmask", state)
        return ok

    def collect_masked_vectors_stage(self, grid, context, state) -> bool:
        ok = super().collect_masked_vectors_stage(grid, context, state)
        self._note_failures("masked vectors", state)
        if ok and len(state.active_node_ids) < self.min_contributors:
            self.halt_reason = (f"{len(state.active_node_ids)} masked vectors arrived, the round needs "
                                f"{self.min_contributors}; not unmasking")
            log(WARNING, "secure sum: %s", self.halt_reason)
            return False
        return ok


def secure_integer_sum(grid: Grid, context: Context, *, node_ids: list[int], server_round: int,
                       public_arrays: list[np.ndarray] | None = None, public_config: dict[str, Scalar] | None = None,
                       flower_grid: FlowerGrid | None = None, min_contributors: int | None = None,
                       reconstruction_threshold: int | None = None, timeout: float | None = 300.0,
                       server_guard: bool = True, short_poll: bool = True, inspect: bool = False) -> SecureSumResult:
    """Run one SecAgg+ round over ``node_ids`` and return the exact integer sum of their shares.

    Parameters
    ----------
    grid, context : Grid, Context
        The ServerApp main's arguments.  ``context.state`` is left as it is.
    node_ids : list of int
        The M nodes asked for a share (at least 2).
    server_round : int
        The round number (the messages' group id).
    public_arrays, public_config : optional
        What every node receives as its ``FitIns`` (parameters and config): public values only, they
        travel in clear (default: none).
    flower_grid : FlowerGrid, optional
        Quantization the sites encoded their shares for (default: ``FlowerGrid()``).
    min_contributors : int, optional
        M - t: the fewest shares a released sum may contain (default: M, no dropout tolerated).
    reconstruction_threshold : int, optional
        Shamir threshold of SecAgg+ (default: ``min_contributors``); must be in [2, min_contributors].
    timeout : float or None
        Seconds each of the four stages waits for replies (default: 300; None waits forever, which a
        node that died never ends).
    server_guard : bool
        Halt before unmasking when fewer than ``min_contributors`` masked vectors arrived (default:
        True; False leaves the refusal to the sites, for tests).
    short_poll : bool
        Collect replies with the project's short poll instead of Flower's 3 s sleep (default: True).
    inspect : bool
        Record what every reply carried (:class:`WireRecord`; default: False).
    """
    node_ids = sorted(int(n) for n in node_ids)
    if len(node_ids) < 2 or len(set(node_ids)) != len(node_ids):
        raise ValueError(f"node_ids must name at least 2 distinct nodes, got {node_ids}")
    sites = len(node_ids)
    min_contributors = sites if min_contributors is None else int(min_contributors)
    if not 2 <= min_contributors <= sites:
        raise ValueError(f"min_contributors must be in [2, {sites}], got {min_contributors}")
    threshold = min_contributors if reconstruction_threshold is None else int(reconstruction_threshold)
    if not 2 <= threshold <= min_contributors:
        raise ValueError(f"reconstruction_threshold must be in [2, min_contributors = {min_contributors}], "
                         f"got {threshold}")
    flower_grid = flower_grid or FlowerGrid()
    transport = polling(grid) if short_poll else grid
    inspector = _InspectingGrid(transport) if inspect else None
    transport = inspector or transport
    instructions = FitIns(ndarrays_to_parameters([np.asarray(a) for a in (public_arrays or [])]),
                          dict(public_config or {}))
    shim = _ShimStrategy(transport, context.run_id, node_ids, instructions, flower_grid)
    private = Context(run_id=context.run_id, node_id=context.node_id, node_config=context.node_config,
                      state=RecordDict(), run_config=context.run_config)
    legacy = LegacyContext(private, config=ServerConfig(num_rounds=1), strategy=shim,
                           client_manager=SimpleClientManager())
    legacy.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({WorkflowKey.CURRENT_ROUND: int(server_round)})
    legacy.state.array_records[MAIN_PARAMS_RECORD] = ArrayRecord([])
    workflow = _GuardedSecAggPlus(
        1.0, threshold, max_weight=flower_grid.max_weight, clipping_range=flower_grid.clipping_range,
        quantization_range=flower_grid.quantization_range, modulus_range=flower_grid.modulus_range,
        timeout=timeout, min_contributors=min_contributors if server_guard else 2)
    start = time.perf_counter()
    workflow(transport, legacy)
    seconds = time.perf_counter() - start
    if shim.total is None:
        reason = workflow.halt_reason or "the SecAgg+ workflow halted (too few replies or unmasking shares)"
        errors = "; ".join(dict.fromkeys(workflow.failures))
        raise SecureSumRefused(f"secure sum of round {server_round} refused: {reason}"
                               + (f" [error replies: {errors}]" if errors else ""))
    dropped = tuple(n for n in node_ids if n not in shim.contributors)
    log(INFO, "secure sum of round %s: %s of %s shares in %.2fs", server_round, len(shim.contributors), sites, seconds)
    return SecureSumResult(total=shim.total, contributors=shim.contributors, dropped=dropped, seconds=seconds,
                           unmasked=shim.unmasked, wire=tuple(inspector.records) if inspector else ())


def plain_integer_sum(grid: Grid, *, node_ids: list[int], server_round: int, public_arrays: list[np.ndarray],
                      message_type: str = "query", timeout: float | None = 300.0, poll: bool = True
                      ) -> tuple[np.ndarray, float]:
    """The same round without secure aggregation (each node's share in clear, summed by the server),
    for comparisons of round time: (sum, seconds).  Replies carry the share as array ``share``;
    ``poll``: the project's short poll (default) or Flower's ``send_and_receive``."""
    msgs = [Message(RecordDict({"public": ArrayRecord([np.asarray(a) for a in public_arrays])}), dst_node_id=int(n),
                    message_type=message_type, group_id=str(server_round)) for n in node_ids]
    start = time.perf_counter()
    replies = list((polling(grid) if poll else grid).send_and_receive(msgs, timeout=timeout))
    seconds = time.perf_counter() - start
    if len(replies) != len(node_ids) or any(r.has_error() for r in replies):
        raise SecureSumRefused(f"plain round {server_round}: {len(replies)} replies of {len(node_ids)}")
    total = sum(r.content.array_records["share"].to_numpy_ndarrays()[0].astype(np.int64) for r in replies)
    return np.asarray(total, dtype=np.int64), seconds
