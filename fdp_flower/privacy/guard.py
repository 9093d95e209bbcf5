"""The budget guard: no release may take a client past a total (eps, delta) budget.

Order of use, as in Flower's DP wrappers: before a round's noisy releases,
``guard.check(planned)`` composes each client's recorded releases with the
planned ones and raises :class:`BudgetExhausted` if any client would exceed the
budget; the caller then stops before releasing (keeping what it has).  Only after
the noise is actually added are the releases recorded in the ledger.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from fdp_flower.privacy.calibration import _group_multipliers
from fdp_flower.privacy.ledger import (
    GaussianRelease,
    PrivacyLedger,
    epsilon_of_rho,
    has_skellam,
    pld_epsilon,
    rdp_epsilon,
    skellam_aware_epsilon,
    zcdp_epsilon,
)
from fdp_flower.privacy.mechanisms import zcdp_to_dp

log = logging.getLogger(__name__)

Accountant = Literal["pld", "rdp", "zcdp"]
ACCOUNTANTS = ("pld", "rdp", "zcdp")
_EPSILON_OF = {"pld": pld_epsilon, "rdp": rdp_epsilon, "zcdp": zcdp_epsilon}


class BudgetExhausted(Exception):
    """A planned release would take ``client`` past the budget; nothing was released."""

    def __init__(self, *, client: int, round: int, eps_after: float, eps_total: float, delta_total: float,
                 accountant: str, last_round: int):
        self.client = client
        self.round = round
        self.eps_after = eps_after
        self.eps_total = eps_total
        self.delta_total = delta_total
        self.accountant = accountant
        self.last_round = last_round
        super().__init__(self.reason)

    @property
    def reason(self) -> str:
        """One line saying what was refused and why."""
        return (f"privacy budget exhausted: client {self.client}'s release in round {self.round} would bring "
                f"eps to {self.eps_after:.6g} > eps_total {self.eps_total:g} at delta {self.delta_total:g} "
                f"({self.accountant} accountant); stopped before it, after round {self.last_round}")


@dataclass(frozen=True)
class GuardReport:
    """What the guarded run spent, per client, against its budget."""

    eps_total: float
    delta_total: float
    accountant: str
    spent: dict[int, float]
    refused: str | None

    @property
    def worst_client(self) -> int | None:
        return max(self.spent, key=self.spent.get) if self.spent else None

    @property
    def worst_eps(self) -> float:
        return max(self.spent.values(), default=0.0)

    @property
    def remaining(self) -> float:
        """eps_total minus the worst client's spend (>= 0 by construction)."""
        return self.eps_total - self.worst_eps


@dataclass
class BudgetGuard:
    """Refuses releases that would take any client past (eps_total, delta_total).

    Parameters
    ----------
    ledger : PrivacyLedger
        The run's ledger (read, never written: record releases there after the noise).
    eps_total : float
        Total eps per client, > 0.
    delta_total : float
        Total delta per client, in (0, 1).
    accountant : str
        ``pld`` (default: the accountant that total-mode calibration targets), ``rdp`` or ``zcdp``.
    """

    ledger: PrivacyLedger
    eps_total: float
    delta_total: float
    accountant: Accountant = "pld"
    refused: BudgetExhausted | None = field(default=None, init=False)
    _cache: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self):
        if not (self.eps_total > 0 and math.isfinite(self.eps_total)):
            raise ValueError(f"eps_total must be finite and > 0, got {self.eps_total}")
        if not 0 < self.delta_total < 1:
            raise ValueError(f"delta_total must be in (0, 1), got {self.delta_total}")
        if self.accountant not in ACCOUNTANTS:
            raise ValueError(f"accountant must be one of {', '.join(ACCOUNTANTS)}, got {self.accountant!r}")

    def epsilon(self, releases: Sequence[GaussianRelease]) -> float:
        """The guard's eps of one client's releases (cached on their multipliers)."""
        if has_skellam(releases):  # a secure sum's shares: their RDP figure whatever the accountant
            return skellam_aware_epsilon(releases, self.delta_total)
        if self.accountant == "zcdp":
            return zcdp_epsilon(releases, self.delta_total)
        key = tuple(_group_multipliers([r.noise_multiplier for r in releases if r.sensitivity > 0]))
        if key not in self._cache:
            if len(self._cache) > 256:
                self._cache.clear()
            self._cache[key] = _EPSILON_OF[self.accountant](releases, self.delta_total)
        return self._cache[key]

    def refusal(self, planned: Sequence[GaussianRelease]) -> BudgetExhausted | None:
        """The reason ``planned`` may not be released, or None if it may."""
        by_client: dict[int, list[GaussianRelease]] = {}
        for r in planned:
            by_client.setdefault(r.client, []).append(r)
        for client in sorted(by_client):
            if has_skellam(by_client[client]):  # secure aggregation: the Skellam shares' own RDP accounting
                eps_after = skellam_aware_epsilon(self.ledger.of_client(client) + by_client[client], self.delta_total)
            elif self.accountant in ("pld", "zcdp"):
                # functions of the composed rho: the ledger's running sum plus the planned releases' (O(1) in
                # the rounds done); "pld" is the ledger's PLD figure in closed form (:func:`gaussian_epsilon`)
                rho = self.ledger.zcdp_rho(client) + float(sum(r.zcdp_rho for r in by_client[client]))
                eps_after = (epsilon_of_rho if self.accountant == "pld" else zcdp_to_dp)(rho, self.delta_total)
            else:
                eps_after = self.epsilon(self.ledger.of_client(client) + by_client[client])
            if eps_after > self.eps_total:
                return BudgetExhausted(
                    client=client, round=min(r.round for r in by_client[client]), eps_after=eps_after,
                    eps_total=self.eps_total, delta_total=self.delta_total, accountant=self.accountant,
                    last_round=max(self.ledger.rounds, default=0))
        return None

    def check(self, planned: Sequence[GaussianRelease]) -> None:
        """Raise :class:`BudgetExhausted` if ``planned`` would exceed the budget; call BEFORE releasing."""
        exc = self.refusal(planned)
        if exc is not None:
            self.refused = exc
            log.warning(exc.reason)
            raise exc

    def report(self) -> GuardReport:
        spent = {c: self.epsilon(self.ledger.of_client(c)) for c in self.ledger.clients}
        return GuardReport(self.eps_total, self.delta_total, self.accountant, spent,
                           None if self.refused is None else self.refused.reason)
