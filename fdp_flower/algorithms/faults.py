"""Fault semantics shared by every engine: failed clients, rejected replies, quorum.

Pure numpy; the in-process engine (injected failures) and the Flower strategy
(real failures) call the same functions, so a round with the same set of
failed clients gives the same state in both.

Server-coordinated FDP-ADMM (docs/algorithms.md, section 1) with a set R of clients that
replied in round l (the others "failed"):

- wt_i^l = the released primal of i if i in R, else wt_i^{l-1} (its last
  released value, which every party already holds; nothing new is released);
- w^l = (1/M) sum_{i=1..M} wt_i^l - (1/(M rho)) sum_{i=1..M} g_i^{l-1}: the
  average keeps all M clients, a failed client entering with its last wt_i;
- g_i^l = g_i^{l-1} - rho (wt_i^l - w^l) if i in R, else g_i^{l-1} (unchanged).

With R = all clients this is exactly :meth:`FDPADMMState.advance` (same
floating-point operations).  The running sums of the state add the held wt_i.

Peer-to-peer algorithms (docs/algorithms.md, sections 3-4): a failed node keeps its state
(x_i, dual, last released xt_i); its neighbours use its last released vector
(:func:`hold_failed_nodes`).

Privacy accounting of failures (the conservative rule; see docs in
:func:`charge_on_failure`): a client that never computed (injected failure,
node down before the instruction, an error raised by its ClientApp, whose
content never leaves the node) makes no release and is not charged.  A client
whose reply was lost, timed out, or was rejected by the server's checks may
have released a noisy value that someone observed: it is charged the release
it was asked to make.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fdp_flower.algorithms.fdp_admm.update import FDPADMMState, server_update

#: SeedSequence spawn-key tag of the failure-injection stream (distinct from
#: :data:`fdp_flower.privacy.mechanisms.NOISE_STREAM` = 1 and ``DATA_STREAM`` = 2).
FAULT_STREAM = 3


class QuorumLost(RuntimeError):
    """Fewer clients replied than the quorum: the run stops before applying the round."""


def advance_with_failures(state: FDPADMMState, replied, primals, rho: float) -> FDPADMMState:
    """The server step of one round where only the clients flagged in ``replied`` released.

    Parameters
    ----------
    state : FDPADMMState
        The state after round l - 1.
    replied : array of bool, shape (M,)
        Which clients' released primals are valid this round.
    primals : array, shape (M, K)
        Released primals; rows of failed clients are ignored (may be NaN).
    rho : float
        ADMM penalty.
    """
    replied = np.asarray(replied, dtype=bool)
    m, k = state.noisy_primals.shape
    if replied.shape != (m,):
        raise ValueError(f"replied must have shape ({m},), got {replied.shape}")
    primals = np.asarray(primals, dtype=float)
    if primals.shape != (m, k):
        raise ValueError(f"primals must have shape ({m}, {k}), got {primals.shape}")
    held = np.where(replied[:, None], primals, state.noisy_primals)
    global_w, new_duals = server_update(held, state.duals, rho)
    duals = np.where(replied[:, None], new_duals, state.duals)
    return state.successor(global_w, duals, held)


def hold_failed_nodes(previous: np.ndarray, current: np.ndarray, replied) -> np.ndarray:
    """Peer-to-peer: node i's row of ``current`` if it replied, else its ``previous`` row.

    Apply to every per-node array (released vectors, duals, primals) so that a
    failed node's state is unchanged and its neighbours see its last release.
    """
    replied = np.asarray(replied, dtype=bool)
    previous, current = np.asarray(previous), np.asarray(current)
    if previous.shape != current.shape or replied.shape != previous.shape[:1]:
        raise ValueError(f"shapes differ: previous {previous.shape}, current {current.shape}, "
                         f"replied {replied.shape}")
    mask = replied.reshape((-1,) + (1,) * (previous.ndim - 1))
    return np.where(mask, current, previous)


def quorum_count(quorum: float, num_clients: int) -> int:
    """The least number of replies a round needs: ceil(quorum M), at least 1."""
    if not 0 < quorum <= 1:
        raise ValueError(f"quorum must be in (0, 1], got {quorum}")
    return max(1, math.ceil(quorum * num_clients - 1e-12))


def check_quorum(replied, quorum: float, round_: int) -> None:
    """Raise :class:`QuorumLost` (one line) if fewer than ``quorum_count`` clients replied."""
    replied = np.asarray(replied, dtype=bool)
    need = quorum_count(quorum, replied.size)
    got = int(replied.sum())
    if got < need:
        missing = np.flatnonzero(~replied).tolist()
        raise QuorumLost(f"round {round_}: quorum lost, {got} of {replied.size} clients replied "
                         f"(need {need}); failed clients {missing}")


def draw_failures(seed: int, round_: int, num_clients: int, failure_rate: float) -> np.ndarray:
    """Injected failures of round ``round_``: a bool mask (M,), True = the client fails.

    Each client fails independently with probability ``failure_rate``.  The
    stream is keyed by (seed, round) alone, so a resumed run draws the same
    failures without storing a generator position.
    """
    if not 0 <= failure_rate <= 1:
        raise ValueError(f"failure_rate must be in [0, 1], got {failure_rate}")
    if failure_rate == 0:
        return np.zeros(num_clients, dtype=bool)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(FAULT_STREAM, round_)))
    return rng.random(num_clients) < failure_rate


@dataclass(frozen=True)
class ReplyCheck:
    """Outcome of :func:`check_primal`: ``ok`` or the one-line reason it was rejected."""

    ok: bool
    reason: str = ""


def check_primal(primal, dim: int, max_norm: float | None = None) -> ReplyCheck:
    """Validate a released primal: shape (dim,), finite, and ||wt|| <= ``max_norm`` (None: no bound)."""
    try:
        arr = np.asarray(primal, dtype=float)
    except (TypeError, ValueError):
        return ReplyCheck(False, "primal is not a numeric array")
    if arr.shape != (dim,):
        return ReplyCheck(False, f"primal has shape {arr.shape}, expected ({dim},)")
    if not np.all(np.isfinite(arr)):
        return ReplyCheck(False, "primal contains NaN or infinite values")
    if max_norm is not None:
        norm = float(np.linalg.norm(arr))
        if norm > max_norm:
            return ReplyCheck(False, f"primal norm {norm:.4g} exceeds the bound {max_norm:.4g}")
    return ReplyCheck(True)


#: How a failure is classified for privacy accounting.
NOT_RELEASED = "not_released"  # the client computed nothing that left it: no charge
MAY_HAVE_RELEASED = "may_have_released"  # lost, timed out or rejected reply: charged


def charge_on_failure(kind: str) -> bool:
    """Whether a failure of ``kind`` is charged to the client's privacy ledger.

    The conservative rule: charge unless the release certainly did not happen
    (``NOT_RELEASED``).  A reply that was lost in transit, arrived after the
    timeout or was rejected by the server's checks carried a noisy value that
    may have been observed, so its calibrated release is recorded even though
    the server did not use it.
    """
    if kind not in (NOT_RELEASED, MAY_HAVE_RELEASED):
        raise ValueError(f"unknown failure kind {kind!r}")
    return kind == MAY_HAVE_RELEASED


@dataclass(frozen=True)
class FailureRecord:
    """One client's failure in one round (written to ``failures.csv``)."""

    round: int
    client: int
    reason: str
    charged: bool

    #: the header of ``failures.csv`` (written also when no client failed)
    COLUMNS: ClassVar[tuple[str, ...]] = ("round", "client", "reason", "charged")

    def to_row(self) -> dict:
        return {"round": self.round, "client": self.client, "reason": self.reason, "charged": int(self.charged)}
