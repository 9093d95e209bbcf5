"""Per-client ledger of Gaussian releases and their composed privacy cost.

Every noisy release is an immutable :class:`GaussianRelease`.  The ledger
composes a client's releases three ways: zCDP (closed form, converted to
(eps, delta) by Bun & Steinke), RDP and PLD (both by ``dp_accounting``, each
release a Gaussian event with its own noise multiplier sigma / sensitivity).

The recorded sensitivity is the one of the release's neighbouring relation, so
every release is the sensitivity-1 Gaussian with multiplier sigma / Delta and
the accountants run with their default relation (for a Gaussian without
subsampling the relation changes nothing once the sensitivity encodes it).
:meth:`GaussianRelease.under` re-expresses a release under the other relation
where that is well defined (:data:`NEIGHBOURING_FACTORS`).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from fdp_flower.privacy.calibration import PLD_DISCRETIZATION, composed_gaussian_event
from fdp_flower.privacy.mechanisms import zcdp_to_dp

Neighbouring = Literal["replace_one", "add_remove"]
NEIGHBOURING_RELATIONS = ("replace_one", "add_remove")

#: Replace-one sensitivity / add-remove sensitivity, for mechanisms where the
#: ratio is known.  Each of these releases a public affine map of a mean
#: (1/m) sum_j g(d_j) of per-record terms with ||g|| <= B and a public m: replacing
#: one record moves the sum by up to 2B, adding or removing one by up to B.
#:
#: - ``gaussian_gradient``: DP-ADMM's noisy mean gradient (Xu et al. 2020): c/m vs 2c/m.
#: - ``fdp_admm_primal``: FDP-ADMM's linearized primal (Zhou & Xiang 2022):
#:   G/(m (rho + 1/eta)) vs 2G/(m (rho + 1/eta)).
#: - ``pr_admm_primal``, ``nfl_primal``: exact or linearized local solves with a
#:   strongly convex data-independent part (Ding et al. 2019, Gauthier et al. 2023):
#:   V/(2 m eta |V_i|) vs V/(m eta |V_i|).
#: - ``fpca_covariance``: the federated FPCA second-moment matrix: c_b^2/m vs 2 c_b^2/m.
#:
#: A bare ``gaussian`` release has no known query, so it is not converted.
NEIGHBOURING_FACTORS: dict[str, float] = {
    "gaussian_gradient": 2.0,
    "fdp_admm_primal": 2.0,
    "pr_admm_primal": 2.0,
    "nfl_primal": 2.0,
    "fpca_covariance": 2.0,
}


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
        if self.neighbouring not in NEIGHBOURING_RELATIONS:
            raise ValueError(f"neighbouring must be one of {NEIGHBOURING_RELATIONS}, got {self.neighbouring!r}")

    @property
    def noise_multiplier(self) -> float:
        """z = sigma / sensitivity (the sensitivity-1 Gaussian's multiplier)."""
        return math.inf if self.sensitivity == 0 else self.sigma / self.sensitivity

    @property
    def zcdp_rho(self) -> float:
        """Delta^2 / (2 sigma^2)."""
        return self.sensitivity**2 / (2 * self.sigma**2)

    def under(self, neighbouring: Neighbouring) -> GaussianRelease:
        """The same release (same sigma) with the sensitivity of another neighbouring relation.

        Defined for the mechanisms of :data:`NEIGHBOURING_FACTORS`; a ``ValueError``
        otherwise.  ``under(self.neighbouring)`` returns ``self``.
        """
        if neighbouring not in NEIGHBOURING_RELATIONS:
            raise ValueError(f"neighbouring must be one of {NEIGHBOURING_RELATIONS}, got {neighbouring!r}")
        if neighbouring == self.neighbouring:
            return self
        factor = NEIGHBOURING_FACTORS.get(self.mechanism)
        if factor is None:
            raise ValueError(
                f"mechanism {self.mechanism!r} has no known {self.neighbouring} -> {neighbouring} conversion; "
                f"known: {', '.join(sorted(NEIGHBOURING_FACTORS))}")
        scale = factor if neighbouring == "replace_one" else 1.0 / factor
        return replace(self, sensitivity=self.sensitivity * scale, neighbouring=neighbouring)


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
    closed_form_eps: float | None = None
    closed_form_name: str | None = None

    @property
    def eps(self) -> float:
        """The tightest of the reported eps (all are valid upper bounds)."""
        candidates = [self.eps_zcdp, self.eps_rdp] + ([self.eps_pld] if self.eps_pld is not None else [])
        return min(candidates)


def _multipliers(releases) -> list[float]:
    # The l2-sensitivity already encodes the neighbouring relation, so each
    # release is the sensitivity-1 Gaussian with multiplier sigma / Delta.
    # A release of sensitivity 0 costs nothing and is left out.
    return [r.noise_multiplier for r in releases if r.sensitivity > 0]


def _dp_event(releases) -> dp_accounting.DpEvent:
    return composed_gaussian_event(_multipliers(releases))


def rdp_epsilon(releases, delta: float) -> float:
    """eps of the composed releases by the RDP accountant of ``dp_accounting``."""
    if not _multipliers(releases):
        return 0.0
    from dp_accounting import rdp

    acc = rdp.RdpAccountant()
    acc.compose(_dp_event(releases))
    return float(acc.get_epsilon(delta))


def pld_epsilon(releases, delta: float, discretization: float = PLD_DISCRETIZATION) -> float:
    """eps of the composed releases by the PLD accountant of ``dp_accounting``."""
    if not _multipliers(releases):
        return 0.0
    from dp_accounting import pld

    acc = pld.PLDAccountant(value_discretization_interval=discretization)
    acc.compose(_dp_event(releases))
    return float(acc.get_epsilon(delta))


def zcdp_epsilon(releases, delta: float) -> float:
    """eps of the composed releases by zCDP: rho = sum Delta^2 / (2 sigma^2), then Bun & Steinke."""
    return zcdp_to_dp(float(sum(r.zcdp_rho for r in releases)), delta)


#: A paper's closed form: releases of one client and delta -> an object with
#: ``.eps`` and ``.name`` (see :mod:`fdp_flower.privacy.closed_forms`).
ClosedFormFn = Callable[[Sequence[GaussianRelease], float], object]


@dataclass
class PrivacyLedger:
    """Append-only record of every release, per client."""

    releases: list[GaussianRelease] = field(default_factory=list)
    # per-client index of ``releases`` (and each client's running zCDP rho), extended on use:
    # the per-round worst-case look-up is then O(clients), not O(clients x releases)
    _index: dict[int, list[GaussianRelease]] = field(default_factory=dict, init=False, repr=False, compare=False)
    _rho: dict[int, float] = field(default_factory=dict, init=False, repr=False, compare=False)
    _indexed: int = field(default=0, init=False, repr=False, compare=False)
    _indexed_list: list | None = field(default=None, init=False, repr=False, compare=False)

    def _by_client(self) -> dict[int, list[GaussianRelease]]:
        """The releases of every client, in order (the list is append-only; replaced -> rebuilt)."""
        if self._indexed_list is not self.releases or self._indexed > len(self.releases):
            self._index, self._rho, self._indexed, self._indexed_list = {}, {}, 0, self.releases
        for r in self.releases[self._indexed:]:
            self._index.setdefault(r.client, []).append(r)
            self._rho[r.client] = self._rho.get(r.client, 0) + r.zcdp_rho
        self._indexed = len(self.releases)
        return self._index

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
        return sorted(self._by_client())

    def of_client(self, client: int, up_to_round: int | None = None) -> list[GaussianRelease]:
        rel = self._by_client().get(client, [])
        return list(rel) if up_to_round is None else [r for r in rel if r.round <= up_to_round]

    def zcdp_rho(self, client: int, up_to_round: int | None = None) -> float:
        """Total zCDP rho of ``client`` = sum of Delta^2 / (2 sigma^2)."""
        if up_to_round is None:
            self._by_client()
            return float(self._rho.get(client, 0))
        return float(sum(r.zcdp_rho for r in self.of_client(client, up_to_round)))

    def summary(self, client: int, delta: float, *, up_to_round: int | None = None,
                with_pld: bool = True, closed_form: ClosedFormFn | None = None) -> PrivacySummary:
        """Composed cost of ``client`` at ``up_to_round`` (default: all rounds).

        ``closed_form`` (optional) adds the paper's figure for the same releases
        (e.g. :func:`fdp_flower.privacy.closed_forms.fdp_admm_per_round`).
        """
        return summarize(self.of_client(client, up_to_round), delta, client=client,
                         with_pld=with_pld, closed_form=closed_form)

    def summaries(self, delta: float, *, up_to_round: int | None = None, with_pld: bool = True,
                  closed_form: ClosedFormFn | None = None) -> list[PrivacySummary]:
        """One summary per client; clients with the same releases are computed once."""
        cache: dict[tuple, PrivacySummary] = {}
        out = []
        for c in self.clients:
            rel = self.of_client(c, up_to_round)
            key = tuple((r.round, r.sensitivity, r.sigma, r.neighbouring, r.mechanism) for r in rel)
            if key not in cache:
                cache[key] = summarize(rel, delta, client=c, with_pld=with_pld, closed_form=closed_form)
            out.append(replace(cache[key], client=c))
        return out

    @property
    def rounds(self) -> list[int]:
        """The rounds in which some release was recorded."""
        return sorted({r.round for r in self.releases})

    def epsilon_curve(self, client: int, delta: float, *, rounds: Sequence[int] | None = None,
                      with_pld: bool = True) -> list[PrivacySummary]:
        """Summaries of ``client`` after each of ``rounds`` (default: every round with a release).

        The accountants compose round by round (one pass, not one composition per
        round), so a PLD figure here may differ from :meth:`summary`'s, which groups
        equal multipliers across rounds, by the PLD's rounding (about 1e-8).
        """
        rel = sorted(self.of_client(client), key=lambda r: r.round)
        rounds = sorted({r.round for r in rel}) if rounds is None else sorted(set(rounds))
        from dp_accounting import pld, rdp

        rdp_acc = rdp.RdpAccountant()
        pld_acc = pld.PLDAccountant(value_discretization_interval=PLD_DISCRETIZATION) if with_pld else None
        out, done, rho, count = [], 0, 0.0, 0
        for t in rounds:
            new = []
            while done < len(rel) and rel[done].round <= t:
                new.append(rel[done])
                done += 1
            if _multipliers(new):
                event = _dp_event(new)
                rdp_acc.compose(event)
                if pld_acc is not None:
                    pld_acc.compose(event)
            rho += float(sum(r.zcdp_rho for r in new))
            count += len(new)
            spent = count > 0 and rho > 0
            out.append(PrivacySummary(
                client=client, round=t, releases=count, delta=delta, zcdp_rho=rho,
                eps_zcdp=zcdp_to_dp(rho, delta),
                eps_rdp=float(rdp_acc.get_epsilon(delta)) if spent else 0.0,
                eps_pld=None if pld_acc is None else (float(pld_acc.get_epsilon(delta)) if spent else 0.0)))
        return out

    def under_neighbouring(self, neighbouring: Neighbouring) -> PrivacyLedger:
        """A new ledger with every release re-expressed under ``neighbouring`` (see
        :meth:`GaussianRelease.under`; a ``ValueError`` if some release cannot be)."""
        return PrivacyLedger([r.under(neighbouring) for r in self.releases])

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
    def from_rows(cls, rows) -> PrivacyLedger:
        return cls([GaussianRelease(**row) for row in rows])


def summarize(releases: Sequence[GaussianRelease], delta: float, *, client: int = -1,
              with_pld: bool = True, closed_form: ClosedFormFn | None = None) -> PrivacySummary:
    """The composed cost of ``releases`` (one client's) at ``delta``."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    rel = list(releases)
    rho = float(sum(r.zcdp_rho for r in rel))
    last_round = max((r.round for r in rel), default=0)
    cf = closed_form(rel, delta) if (closed_form is not None and rel) else None
    return PrivacySummary(
        client=client,
        round=last_round,
        releases=len(rel),
        delta=delta,
        zcdp_rho=rho,
        eps_zcdp=zcdp_to_dp(rho, delta),
        eps_rdp=rdp_epsilon(rel, delta),
        eps_pld=pld_epsilon(rel, delta) if with_pld else None,
        closed_form_eps=None if cf is None else float(cf.eps),
        closed_form_name=None if cf is None else str(cf.name),
    )
