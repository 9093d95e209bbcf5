"""Per-client ledger of Gaussian releases and their composed privacy cost.

Every noisy release is an immutable :class:`GaussianRelease`.  The ledger
composes a client's releases three ways: zCDP (closed form, converted to
(eps, delta) by Bun & Steinke), RDP and PLD (both by ``dp_accounting``, each
release a Gaussian event with its own noise multiplier sigma / sensitivity).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import dp_accounting
from dp_accounting import pld, rdp

from fdp_flower.mechanisms import zcdp_to_dp
from fdp_flower.privacy.calibration import composed_gaussian_event

Neighbouring = Literal["replace_one", "add_remove"]


@dataclass(frozen=True)
class GaussianRelease:
    """One release q(D) + N(0, sigma^2 I) by one client.

    ``sensitivity`` is the l2-sensitivity of q under ``neighbouring``.
    """

    client: int
    round: int
    sensitivity: float
    sigma: float
    neighbouring: Neighbouring = "replace_one"
    mechanism: str = "gaussian"

    def __post_init__(self):
        if not (self.sensitivity >= 0 and math.isfinite(self.sensitivity)):
            raise ValueError(f"sensitivity must be finite and >= 0, got {self.sensitivity}")
        if not (self.sigma > 0 and math.isfinite(self.sigma)):
            raise ValueError(f"sigma must be finite and > 0, got {self.sigma}")

    @property
    def noise_multiplier(self) -> float:
        """z = sigma / sensitivity (the sensitivity-1 Gaussian's multiplier)."""
        return math.inf if self.sensitivity == 0 else self.sigma / self.sensitivity

    @property
    def zcdp_rho(self) -> float:
        """Delta^2 / (2 sigma^2)."""
        return self.sensitivity**2 / (2 * self.sigma**2)


@dataclass(frozen=True)
class PrivacySummary:
    """What one client has spent up to ``round``."""

    client: int
    round: int
    releases: int
    delta: float
    zcdp_rho: float
    eps_zcdp: float
    eps_rdp: float
    eps_pld: float | None

    @property
    def eps(self) -> float:
        """The tightest of the reported eps (all are valid upper bounds)."""
        candidates = [self.eps_zcdp, self.eps_rdp] + ([self.eps_pld] if self.eps_pld is not None else [])
        return min(candidates)


def _dp_event(releases) -> dp_accounting.DpEvent:
    # The l2-sensitivity already encodes the neighbouring relation, so each
    # release is the sensitivity-1 Gaussian with multiplier sigma / Delta.
    return composed_gaussian_event([r.noise_multiplier for r in releases])


def rdp_epsilon(releases, delta: float) -> float:
    """eps of the composed releases by the RDP accountant of ``dp_accounting``."""
    acc = rdp.RdpAccountant()
    acc.compose(_dp_event(releases))
    return float(acc.get_epsilon(delta))


def pld_epsilon(releases, delta: float, discretization: float = 1e-4) -> float:
    """eps of the composed releases by the PLD accountant of ``dp_accounting``."""
    acc = pld.PLDAccountant(value_discretization_interval=discretization)
    acc.compose(_dp_event(releases))
    return float(acc.get_epsilon(delta))


@dataclass
class PrivacyLedger:
    """Append-only record of every release, per client."""

    releases: list[GaussianRelease] = field(default_factory=list)

    def record(self, release: GaussianRelease) -> None:
        """Append a release; call only after the noise was actually added."""
        if not isinstance(release, GaussianRelease):
            raise TypeError("the ledger records GaussianRelease events only")
        self.releases.append(release)

    def record_many(self, releases) -> None:
        for r in releases:
            self.record(r)

    @property
    def clients(self) -> list[int]:
        return sorted({r.client for r in self.releases})

    def of_client(self, client: int, up_to_round: int | None = None) -> list[GaussianRelease]:
        return [
            r for r in self.releases
            if r.client == client and (up_to_round is None or r.round <= up_to_round)
        ]

    def zcdp_rho(self, client: int, up_to_round: int | None = None) -> float:
        """Total zCDP rho of ``client`` = sum of Delta^2 / (2 sigma^2)."""
        return float(sum(r.zcdp_rho for r in self.of_client(client, up_to_round)))

    def summary(self, client: int, delta: float, *, up_to_round: int | None = None,
                with_pld: bool = True) -> PrivacySummary:
        """Composed cost of ``client`` at ``up_to_round`` (default: all rounds)."""
        rel = self.of_client(client, up_to_round)
        rho = float(sum(r.zcdp_rho for r in rel))
        last_round = max((r.round for r in rel), default=0)
        if not rel:
            return PrivacySummary(client, last_round, 0, delta, 0.0, 0.0, 0.0, 0.0 if with_pld else None)
        return PrivacySummary(
            client=client,
            round=last_round,
            releases=len(rel),
            delta=delta,
            zcdp_rho=rho,
            eps_zcdp=zcdp_to_dp(rho, delta),
            eps_rdp=rdp_epsilon(rel, delta),
            eps_pld=pld_epsilon(rel, delta) if with_pld else None,
        )

    def worst_case(self, delta: float, *, with_pld: bool = True) -> PrivacySummary | None:
        """The summary of the client that spent the most (by zCDP rho)."""
        if not self.releases:
            return None
        worst = max(self.clients, key=self.zcdp_rho)
        return self.summary(worst, delta, with_pld=with_pld)

    def to_rows(self) -> list[dict]:
        """The events as plain dicts (for CSV/JSON)."""
        return [dict(client=r.client, round=r.round, sensitivity=r.sensitivity, sigma=r.sigma,
                     neighbouring=r.neighbouring, mechanism=r.mechanism) for r in self.releases]

    @classmethod
    def from_rows(cls, rows) -> "PrivacyLedger":
        return cls([GaussianRelease(**row) for row in rows])
