"""The transport-free protocol every algorithm family is written as (docs/architecture.md).

A family is two pieces of pure code:

- a **site function** (``algorithms/<family>/site.py``): the only code that reads a site's data
  and draws its noise.  Given a :class:`SiteRequest` -- public values only, the point the server
  names -- it computes the family's *data term* (the one data-dependent quantity whose
  sensitivity is calibrated, e.g. FDP-ADMM's clipped mean subgradient), adds Gaussian noise from
  the :data:`NoiseSource` it is handed (which charges the site's ledger first) and returns a
  :class:`SiteRelease` holding that noisy term alone;
- a **server protocol** (``algorithms/<family>/protocol.py``), a state machine: :meth:`ServerProtocol.begin_round`
  plans a round (the requests, the releases they will make; the budget guard runs before any
  noise is drawn), :meth:`~ServerProtocol.accept` checks one release, :meth:`~ServerProtocol.fail`
  records a client that did not release, and :meth:`~ServerProtocol.end_round` closes the round:
  every affine or proximal step (consensus, duals, previous iterate, rho, step) is the server's
  post-processing of the released terms; then the ledger, convergence, metrics and checkpoint.

The drivers -- the in-process engine (:mod:`fdp_flower.engines.inprocess`), the batched sweep engine,
the Flower strategy and client worker, and the audit -- only move requests and releases between the
two; none sequences a round or draws noise itself.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from fdp_flower.algorithms.faults import (
    MAY_HAVE_RELEASED,
    NOT_RELEASED,
    FailureRecord,
    QuorumLost,
    charge_on_failure,
    check_quorum,
)
from fdp_flower.privacy.ledger import GaussianRelease, PrivacyLedger

#: Where a site's noise comes from: called with the ledger events one draw serves (one per
#: configuration the draw is shared by; a site's charge happens here, before the draw), returns
#: the generator of that draw.  A refusal raises (nothing is drawn or released).
NoiseSource = Callable[[Sequence[GaussianRelease]], np.random.Generator]

#: The most a public value a site is sent may be in absolute value.  An iterate of a model whose
#: responses and features are standardized never comes near it; a larger value is a crafted input
#: (e.g. one chosen to overflow a projection) and the site refuses it with nothing released.
MAX_PUBLIC_MAGNITUDE = 1e100


class PublicValueError(ValueError):
    """A public value a site was sent that it refuses (shape, non-finite, magnitude); one line."""


def check_public(name: str, value, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """``value`` as a float array, or :class:`PublicValueError` (one line naming it) when it does not
    have ``shape``, is not finite, or exceeds :data:`MAX_PUBLIC_MAGNITUDE` in absolute value."""
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise PublicValueError(f"{name} is not a numeric array") from None
    if shape is not None and arr.shape != shape:
        raise PublicValueError(f"{name} must have shape {shape}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise PublicValueError(f"{name} contains NaN or infinite values")
    if arr.size and float(np.max(np.abs(arr))) > MAX_PUBLIC_MAGNITUDE:
        raise PublicValueError(f"{name} has a value of magnitude {float(np.max(np.abs(arr))):.3g} > "
                               f"{MAX_PUBLIC_MAGNITUDE:.0e}, which no iterate reaches")
    return arr


@dataclass(frozen=True)
class SiteRequest:
    """One release the server asks of one client in one round: public values only.

    ``client`` is None when the server does not yet know which node hosts which client (the
    node's own partition answers; every client's public state is then still the initial one).
    """

    client: int | None
    round: int
    public: Mapping[str, np.ndarray]


def requested_client(request: SiteRequest, requests: Sequence[SiteRequest], clients: Sequence[int]) -> int:
    """The client a site's ``request`` names (None: the site's own, when it holds one), checked: the site holds
    it and the request is of the same round as the first of ``requests`` (one answer covers one round); a
    one-line ``ValueError`` otherwise."""
    client = clients[0] if request.client is None and len(clients) == 1 else request.client
    if client is None or int(client) not in clients:
        raise ValueError(f"this site does not hold client {client}")
    if request.round != requests[0].round:
        raise ValueError("one answer covers one round")
    return int(client)


@dataclass(frozen=True)
class SiteRelease:
    """What a site returns for one request: its noisy data term and public bookkeeping.

    ``event`` is the release as the site calibrated and charged it (None when privacy is off);
    ``metrics`` are the public numbers the site chose to send (never data-dependent counts
    unless the site opted in and noised them).
    """

    client: int
    round: int
    value: np.ndarray
    num_examples: int
    event: GaussianRelease | None
    metrics: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class RoundPlan:
    """The requests of one round and the releases they will make (``planned``: the ledger events
    of the clients asked, used by the budget guard, the release journal and to charge a reply
    that was lost).  A :class:`RoundPlan` with no requests never happens: a finished protocol
    returns None from :meth:`ServerProtocol.begin_round`."""

    round: int
    requests: tuple[SiteRequest, ...]
    planned: tuple[GaussianRelease, ...] = ()

    def planned_for(self, client: int) -> GaussianRelease | None:
        return next((r for r in self.planned if r.client == client), None)


class ReleaseRejected(ValueError):
    """A release the server's checks reject (one line); ``kind`` says whether it may have been seen."""

    def __init__(self, message: str, kind: str = MAY_HAVE_RELEASED) -> None:
        super().__init__(" ".join(str(message).split()))
        self.kind = kind


class RunStopped(Exception):
    """:meth:`ServerProtocol.begin_round` or :meth:`~ServerProtocol.end_round` ended the run early
    (budget exhausted, quorum lost); ``reason`` is the run's ``stop_reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ServerProtocol:
    """The server side of one family: a state machine over rounds (see the module docstring).

    Subclasses implement :meth:`_plan`, :meth:`_check`, :meth:`_close` and keep their state; this
    base keeps what every family shares: the ledger (a release is recorded only after its noisy
    value arrived, a lost or rejected reply is charged the release it was asked for), the failures,
    the history rows, and the round bookkeeping.
    """

    #: the family's name in the registry
    family: str = ""

    def __init__(self, num_clients: int, *, quorum: float | None = None,
                 on_round: Callable[["ServerProtocol"], None] | None = None) -> None:
        self.num_clients = int(num_clients)
        #: least fraction of clients that must reply in a round (None: every client)
        self.quorum = quorum
        #: called with the server after every closed round (checkpoints)
        self.on_round = on_round
        self.ledger = PrivacyLedger()
        self.history: list[dict] = []
        self.failures: list[FailureRecord] = []
        self.stop_reason: str | None = None
        self._plan_of_round: RoundPlan | None = None
        self._accepted: dict[int, SiteRelease] = {}
        self._failed: dict[int, tuple[str, str]] = {}

    # ------------------------------------------------------------------ the state machine
    @property
    def round(self) -> int:
        """The number of rounds closed so far."""
        raise NotImplementedError

    @property
    def finished(self) -> bool:
        return self.stop_reason is not None

    def begin_round(self, clients: Sequence[int] | None = None) -> RoundPlan | None:
        """The next round's plan, asking ``clients`` (default: every client), or None when the run is
        over (:attr:`stop_reason` says why).

        Runs the budget guard before anything is released: a round that would exceed the budget
        ends the run here (``stop_reason``) and returns None.
        """
        if self.finished:
            return None
        try:
            plan = self._plan(clients)
        except RunStopped as exc:
            self.stop_reason = exc.reason
            return None
        if plan is None:
            self.stop_reason = self.stop_reason or "completed"
            return None
        self._plan_of_round, self._accepted, self._failed = plan, {}, {}
        return plan

    @property
    def current_plan(self) -> RoundPlan:
        if self._plan_of_round is None:
            raise RuntimeError("no round is open: call begin_round first")
        return self._plan_of_round

    def accept(self, release: SiteRelease) -> None:
        """Check one client's release; :class:`ReleaseRejected` (one line) if it fails the checks
        (the caller then calls :meth:`fail` with its ``kind``)."""
        plan = self.current_plan
        client = release.client
        if not isinstance(client, (int, np.integer)) or not 0 <= client < self.num_clients:
            raise ReleaseRejected(f"bad partition id {client}")
        if client in self._accepted:
            raise ReleaseRejected(f"duplicate release of client {client}")
        if release.round != plan.round:
            raise ReleaseRejected(f"client {client}: release of round {release.round} in round {plan.round}")
        self._check(release)
        self._accepted[int(client)] = release
        self._failed.pop(int(client), None)

    def fail(self, client: int, reason: str, kind: str = NOT_RELEASED) -> None:
        """Record that ``client`` did not release this round (``kind``: whether a release may have
        been seen, :func:`fdp_flower.algorithms.faults.charge_on_failure`)."""
        self.current_plan
        if client in self._accepted:
            return
        self._failed.setdefault(int(client), (reason, kind))

    def check_quorum(self, replying, round_: int | None = None) -> None:
        """Raise :class:`RunStopped` (and set :attr:`stop_reason`) when fewer than the quorum of clients
        (``replying``: a bool mask) reply in ``round_``; before a round (:func:`run_in_process`) the
        clients that cannot reply are recorded as failed, uncharged."""
        round_ = self.round + 1 if round_ is None else round_
        replying = np.asarray(replying, dtype=bool)
        try:
            check_quorum(replying, 1.0 if self.quorum is None else self.quorum, round_)
        except QuorumLost as exc:
            if self._plan_of_round is None:  # before the round: nothing was asked, nothing released
                self.failures += [FailureRecord(round_, int(i), "injected", False) for i in np.flatnonzero(~replying)]
            self.stop_reason = f"stopped: {exc}"
            raise RunStopped(self.stop_reason) from None

    def accepted_clients(self) -> list[int]:
        """The clients whose release of the open round was accepted."""
        return sorted(self._accepted)

    def failed_clients(self) -> list[int]:
        """The clients recorded as failed in the open round."""
        return sorted(self._failed)

    @property
    def rounds_planned(self) -> int:
        """The number of rounds the run is planned for (its cap)."""
        raise NotImplementedError

    def final_arrays(self) -> dict[str, np.ndarray]:
        """The arrays a results directory keeps of the run's end (``final.npz``): at least ``estimate``,
        the released model (post-processing of the releases)."""
        raise NotImplementedError

    def release_event(self, client: int, round_: int, sensitivity: float, sigma: float) -> GaussianRelease | None:
        """The ledger event of a release a site reported with this calibration (None: no noise, privacy
        off); a transport rebuilds each release's event with it.  The protocol checks it against its
        own plan in :meth:`accept`."""
        raise NotImplementedError

    def end_round(self) -> dict:
        """Close the open round: record the accepted releases and the charged failures in the ledger,
        apply the family's server step (:meth:`_close`) and append its history row (returned).
        A lost quorum or another stop raises :class:`RunStopped` (``stop_reason`` is set)."""
        plan = self.current_plan
        for client in range(self.num_clients):
            if client not in self._accepted and client not in self._failed:
                self._failed[client] = ("no valid reply", MAY_HAVE_RELEASED)
        for client in sorted(self._accepted):
            event = self._accepted[client].event
            if event is not None:  # the noise was added on the site before the reply
                self.ledger.record(event)
        for client, (reason, kind) in sorted(self._failed.items()):
            planned = plan.planned_for(client) if charge_on_failure(kind) else None
            if planned is not None:
                self.ledger.record(planned)
            self.failures.append(FailureRecord(plan.round, client, reason, planned is not None))
        try:
            row = self._close(plan, dict(self._accepted))
        except RunStopped as exc:
            self.stop_reason = exc.reason
            raise
        finally:
            self._plan_of_round = None
        self.history.append(row)
        if self.on_round is not None:
            self.on_round(self)
        return row

    # ------------------------------------------------------------------ the family's part
    def _plan(self, clients: Sequence[int] | None) -> RoundPlan | None:
        """The round's plan for ``clients`` (None: all), or None after the last round; raise
        :class:`RunStopped` to end the run before anything is released."""
        raise NotImplementedError

    def _check(self, release: SiteRelease) -> None:
        raise NotImplementedError

    def _close(self, plan: RoundPlan, accepted: dict[int, SiteRelease]) -> dict:
        raise NotImplementedError


def run_in_process(server: ServerProtocol, site: Callable[[Sequence[SiteRequest]], list[SiteRelease | Exception]], *,
                   failed: Callable[[int], np.ndarray] | None = None,
                   progress: Callable[[int, dict], None] | None = None,
                   stop_after: int | None = None) -> ServerProtocol:
    """Drive ``server`` with every round's requests answered by ``site`` in this process (the in-process
    engine; ``site`` answers a round's requests at once, one release or refusal each).

    ``failed(round) -> bool mask``: clients that fail in that round (injected: they compute and release
    nothing, uncharged); a round in which fewer than the quorum could reply stops the run before any
    release (``server.check_quorum``).  ``progress(round, row)`` is called after each closed round;
    ``stop_after``: stop (as if interrupted) after this round.
    """
    while not server.finished:
        round_ = server.round + 1
        down = np.zeros(server.num_clients, dtype=bool) if failed is None else np.asarray(failed(round_), bool)
        if down.any():
            try:
                server.check_quorum(~down, round_)
            except RunStopped:
                return server
        plan = server.begin_round([i for i in range(server.num_clients) if not down[i]])
        if plan is None:
            return server
        for client in np.flatnonzero(down):
            server.fail(int(client), "injected", NOT_RELEASED)
        for request, answer in zip(plan.requests, site(plan.requests)):
            if isinstance(answer, Exception):
                server.fail(int(request.client), " ".join(str(answer).split()), NOT_RELEASED)
            else:
                try:
                    server.accept(answer)
                except ReleaseRejected as exc:  # the server's checks (e.g. faults.max_primal_norm): a failure
                    server.fail(int(request.client), str(exc), exc.kind)
        try:
            row = server.end_round()
        except RunStopped:
            return server
        if progress is not None:
            progress(plan.round, row)
        if stop_after is not None and plan.round >= stop_after and not server.finished:
            server.stop_reason = f"interrupted after round {plan.round}"
    return server
