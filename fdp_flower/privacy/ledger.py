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
from typing import TYPE_CHECKING, Literal

import numpy as np

if TYPE_CHECKING:  # dp_accounting is imported where it is used: a client never loads it
    import dp_accounting

from fdp_flower.privacy.calibration import (
    PLD_FALLBACK_NOTE,
    analytic_gaussian_epsilon,
    composed_gaussian_event,
    composed_mu,
    pld_discretization,
)
from fdp_flower.privacy.distributed import TAIL_DELTA_FRACTION, SkellamSumRelease, composed_epsilon
from fdp_flower.privacy.mechanisms import zcdp_to_dp

Neighbouring = Literal["replace_one", "add_remove"]
NEIGHBOURING_RELATIONS = ("replace_one", "add_remove")

#: Replace-one sensitivity / add-remove sensitivity, for mechanisms where the ratio is known.
#: Each of these releases a public affine map of a mean q(D) = (1/|D|) sum_{d in D} g(d) of
#: per-record terms with ||g|| <= B, divided by the record count itself.  At the site's m = |D|:
#:
#: - replace-one: q(D') - q(D) = (g' - g) / m, norm <= 2B/m;
#: - remove d (|D'| = m - 1): q(D) - q(D') = (g(d) - q(D')) / m, norm <= 2B/m;
#: - add d (|D'| = m + 1): q(D') - q(D) = (g(d) - q(D)) / (m + 1), norm <= 2B/(m + 1).
#:
#: The worst add/remove neighbour (the removal) moves the mean as far as a replacement, so the
#: ratio is 1 for every mechanism below (a factor 2 holds only for a sum over a fixed public
#: denominator, which none of them releases):
#:
#: - ``gaussian_gradient``: DP-ADMM's noisy mean gradient (Xu et al. 2020): 2c/m;
#: - ``fdp_admm_subgradient``: FDP-ADMM's noisy descent term, the clipped mean subgradient (Zhou & Xiang
#:   2022, the data term of their primal): 2G/m;
#: - ``fdp_admm_primal``: FDP-ADMM's linearized primal, as releases before the descent term recorded it:
#:   2G/(m (rho + 1/eta));
#: - ``p2p_subgradient``: a peer-to-peer node's noisy descent term, the clipped mean loss subgradient at the
#:   public point the relay names (the data term of zCDP-NFL, DP-NFL, grad-NFL, P-ADMM and PR-ADMM's linearized
#:   step; Gauthier et al. 2023, Ding et al. 2019): 2G/m, ||grad l|| <= G per record at any point;
#: - ``pr_admm_primal``, ``nfl_primal``: exact or linearized local solves with a
#:   strongly convex data-independent part (Ding et al. 2019, Gauthier et al. 2023): V/(m eta |V_i|) (the exact
#:   solve: its minimizer x(D) solves (1/m) sum_d g(d, x) + public(x) = 0, so x(D) - x(D') is bounded by the
#:   difference of the two means at one point over the strong convexity, and that difference is the one above);
#: - ``fdp_newton_quartile_shares``, ``fdp_newton_residual_density``, ``fdp_newton_residual_share``: the Newton
#:   rule's shares of responses below 6 named thresholds (sqrt(6)/m), residual density
#:   (1/m) #{|r| <= h} / (2h) (1/(2hm)) and share of residuals below 0 (1/m): means of terms in [0, B];
#: - ``fdp_newton_second_moments``: the Newton rule's second moments (1/m) sum_j a_j a_j^T of the clipped rows on a
#:   fixed basis, sqrt(2) c1^2 / m: the terms are PSD of Frobenius norm <= c1^2, so ||g(d) - q(D')||_F^2 =
#:   ||a||^4 + ||q||^2 - 2 a^T q a <= 2 c1^4 for the removal too;
#: - ``fpca_covariance``: the federated FPCA second-moment matrix and mean: as recorded;
#: - ``clipped_rows_count``: a count of records (not a mean), which one replaced, added or removed
#:   record changes by at most 1: sensitivity 1 under both relations;
#: - ``qr_scale_histogram``, ``qr_gram``, ``qr_window_fraction``: the inference releases after an
#:   FDP-ADMM fit (fractions of residuals in bins, the Gram matrix of the clipped rows; docs/inference.md).
#:
#: A bare ``gaussian`` release has no known query, so it is not converted.
NEIGHBOURING_FACTORS: dict[str, float] = {
    "gaussian_gradient": 1.0,
    "fdp_newton_quartile_shares": 1.0,
    "fdp_newton_residual_density": 1.0,
    "fdp_newton_residual_share": 1.0,
    "fdp_newton_second_moments": 1.0,
    "fdp_admm_subgradient": 1.0,
    "fdp_admm_primal": 1.0,
    "p2p_subgradient": 1.0,
    "pr_admm_primal": 1.0,
    "nfl_primal": 1.0,
    "fpca_covariance": 1.0,
    "clipped_rows_count": 1.0,  # a count of records: +-1 when one is replaced, added or removed
    "qr_scale_histogram": 1.0,
    "qr_gram": 1.0,
    "qr_window_fraction": 1.0,
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
        """Delta^2 / (2 sigma^2) (inf when it overflows, e.g. sigma ~ 1e-300)."""
        try:
            return 0.5 * (self.sensitivity / self.sigma) ** 2
        except OverflowError:
            return math.inf

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
    def headline_eps(self) -> float:
        """The eps a run reports: the PLD figure of Gaussian releases, the RDP figure when the releases
        include a secure sum's Skellam shares (the only accountant of the Skellam)."""
        return self.eps_rdp if self.eps_pld is None else self.eps_pld

    @property
    def eps(self) -> float:
        """The tightest of the reported eps (all are valid upper bounds)."""
        candidates = [self.eps_zcdp, self.eps_rdp] + ([self.eps_pld] if self.eps_pld is not None else [])
        return min(candidates)


def _multipliers(releases) -> list[float]:
    # The l2-sensitivity already encodes the neighbouring relation, so each
    # release is the sensitivity-1 Gaussian with multiplier sigma / Delta.
    # A release of sensitivity 0 costs nothing and is left out.
    return [r.noise_multiplier for r in releases if isinstance(r, GaussianRelease) and r.sensitivity > 0]


def has_skellam(releases) -> bool:
    """Whether some release is a secure sum's Skellam share (:class:`~fdp_flower.privacy.distributed.SkellamSumRelease`)."""
    return any(isinstance(r, SkellamSumRelease) for r in releases)


#: Ledger mechanism of FDP-ADMM's data term sent to a trusted aggregator, which adds the noise once.
TRUSTED_AGGREGATOR_MECHANISM = "fdp_admm_trusted_aggregator"


def trust_note(ledger) -> str | None:
    """What the releases' trust mode means for the guarantee (docs/privacy.md, "Trust modes"), or None
    for per-site noise."""
    mechanisms = {r.mechanism for r in ledger.releases}
    if TRUSTED_AGGREGATOR_MECHANISM in mechanisms:
        return ("trust trusted_aggregator: the sites sent noise-free terms and the server added the noise once; "
                "the guarantee holds for what the server releases, NOT against the server")
    tolerated = {r.tolerated for r in ledger.releases if isinstance(r, SkellamSumRelease)}
    if tolerated:
        return (f"trust secure_aggregation: the server saw only sums of Skellam shares; the guarantee holds "
                f"against the server and up to t = {max(tolerated)} dropped or colluding sites (RDP accountant)")
    return None


def skellam_aware_epsilon(releases, delta: float) -> float:
    """eps at ``delta`` of one client's releases when some are Skellam shares of a secure sum
    (docs/secure_aggregation.md, eq. (9.3)): the RDP curves of the Skellam releases and of the
    Gaussian ones (alpha / (2 z^2)) are added and converted by dp_accounting at the mechanism's
    delta (1 - 1e-6) delta -- the remaining 1e-6 delta covers a share refused for Flower's clip
    (eq. (9.9)).  This is the headline eps of a secure-aggregation run (no PLD or zCDP figure
    exists for the Skellam)."""
    rel = list(releases)
    skellam = [r for r in rel if isinstance(r, SkellamSumRelease)]
    if not skellam:
        return rdp_epsilon(rel, delta)
    counts: dict[tuple[float, float, float], int] = {}
    for r in skellam:
        key = (r.l2_sensitivity, r.l1_sensitivity, r.variance)
        counts[key] = counts.get(key, 0) + 1
    # clients with the same releases (every client of a secure sum, every round) share one conversion
    key = (tuple(sorted(counts.items())), tuple(sorted(_multipliers(rel))), float(delta))
    eps = _SKELLAM_EPS.get(key)
    if eps is None:
        if len(_SKELLAM_EPS) > 4096:
            _SKELLAM_EPS.clear()
        eps = _SKELLAM_EPS[key] = composed_epsilon(skellam, delta * (1.0 - TAIL_DELTA_FRACTION),
                                                   gaussian_multipliers=list(key[1]))
    return eps


#: skellam_aware_epsilon's conversions, by the releases' (l2, l1, V) counts, Gaussian multipliers and delta
_SKELLAM_EPS: dict[tuple, float] = {}


def _dp_event(releases) -> dp_accounting.DpEvent:
    return composed_gaussian_event(_multipliers(releases))


def rdp_epsilon(releases, delta: float) -> float:
    """eps of the composed releases by the RDP accountant of ``dp_accounting``."""
    if not _multipliers(releases):
        return 0.0
    from dp_accounting import rdp

    try:
        with np.errstate(all="ignore"):  # tiny multipliers overflow some orders; the answer is checked below
            acc = rdp.RdpAccountant()
            acc.compose(_dp_event(releases))
            eps = float(acc.get_epsilon(delta))
    except (OverflowError, FloatingPointError, ValueError, ZeroDivisionError):
        eps = math.nan
    # noise so small that the RDP orders overflow: the zCDP bound, which RDP only tightens
    return eps if math.isfinite(eps) else zcdp_epsilon(releases, delta)


def rdp_epsilon_of_rho(rho: float, delta: float) -> float:
    """:func:`rdp_epsilon` from the composed zCDP rho of Gaussian releases, in O(1): a Gaussian of multiplier
    z_t has RDP alpha / (2 z_t^2) = alpha rho_t at every order alpha, so the composition's RDP is alpha rho,
    the RDP of the one Gaussian of multiplier 1 / sqrt(2 rho) (the per-round history column)."""
    if not rho > 0:
        return 0.0
    from dp_accounting import GaussianDpEvent, rdp

    try:
        with np.errstate(all="ignore"):
            acc = rdp.RdpAccountant()
            acc.compose(GaussianDpEvent(1.0 / math.sqrt(2.0 * rho)))
            eps = float(acc.get_epsilon(delta))
    except (OverflowError, FloatingPointError, ValueError, ZeroDivisionError):
        eps = math.nan
    return eps if math.isfinite(eps) else zcdp_to_dp(rho, delta)


def composed_multiplier(releases) -> float:
    """z of the one Gaussian equivalent to the composition: (sum_t (Delta_t / sigma_t)^2)^(-1/2).

    Gaussian mechanisms compose, adaptively, exactly into one Gaussian mechanism with
    mu^2 = sum_t mu_t^2, mu_t = Delta_t / sigma_t (Dong, Roth and Su 2022, Corollary 3.3: the
    Gaussian trade-off functions G_mu1 x G_mu2 = G_sqrt(mu1^2 + mu2^2)); inf without a release."""
    mu = composed_mu(_multipliers(releases))
    return math.inf if mu == 0 else (0.0 if not math.isfinite(mu) else 1.0 / mu)


def pld_epsilon(releases, delta: float, discretization: float | None = None) -> float:
    """eps of the composed releases by the PLD accountant of ``dp_accounting``, run on their exact
    one-Gaussian equivalent (:func:`composed_multiplier`): composing the releases' discretized
    PLDs one by one would add the discretization's pessimism once per distinct multiplier.

    The discretization interval is chosen from the composition's mu
    (:func:`~fdp_flower.privacy.calibration.pld_discretization`), so the answer comes in bounded
    time and memory for any noise; beyond ``PLD_MAX_MU``, or if the accountant fails, the analytic
    eps of the composed Gaussian is returned instead (:func:`pld_fallback_note` says so).
    """
    multipliers = _multipliers(releases)
    if not multipliers:
        return 0.0
    mu = composed_mu(multipliers)
    interval = pld_discretization(mu) if discretization is None else discretization
    if interval is None:
        return analytic_gaussian_epsilon(mu, delta)
    import dp_accounting
    from dp_accounting import pld

    try:
        acc = pld.PLDAccountant(value_discretization_interval=interval)
        acc.compose(dp_accounting.GaussianDpEvent(1.0 / mu))
        eps = float(acc.get_epsilon(delta))
    except (MemoryError, OverflowError, FloatingPointError):
        return analytic_gaussian_epsilon(mu, delta)
    return eps if math.isfinite(eps) else analytic_gaussian_epsilon(mu, delta)


def pld_fallback_note(releases) -> str | None:
    """A note when :func:`pld_epsilon` reports the analytic eps of these releases instead of the PLD's."""
    multipliers = _multipliers(releases)
    if multipliers and pld_discretization(composed_mu(multipliers)) is None:
        return PLD_FALLBACK_NOTE
    return None


def _quiet(fn, *args) -> float:
    with np.errstate(all="ignore"):
        try:
            return float(fn(*args))
        except (OverflowError, FloatingPointError, ValueError, ZeroDivisionError):
            return math.nan


def _finite_or(value: float, fallback: float) -> float:
    return value if math.isfinite(value) else fallback


def gaussian_epsilon(releases, delta: float) -> float:
    """The same eps in closed form (``dp_accounting.get_epsilon_gaussian`` on :func:`composed_multiplier`,
    no discretization): fast enough for every round of a history; equal to :func:`pld_epsilon` up to
    the PLD's discretization (1e-7 relative, tested)."""
    return epsilon_of_rho(float(sum(r.zcdp_rho for r in releases)), delta)


def epsilon_of_rho(rho: float, delta: float) -> float:
    """:func:`gaussian_epsilon` from the composed zCDP rho of Gaussian releases: rho = sum_t Delta_t^2 /
    (2 sigma_t^2) = mu^2 / 2, so the composition is the Gaussian of multiplier 1 / sqrt(2 rho)."""
    if not rho > 0:
        return 0.0
    return analytic_gaussian_epsilon(math.sqrt(2.0 * rho), delta)


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

    def record(self, release: GaussianRelease | SkellamSumRelease) -> None:
        """Append a release; call only after the noise was actually added."""
        if not isinstance(release, (GaussianRelease, SkellamSumRelease)):
            raise TypeError("the ledger records GaussianRelease and SkellamSumRelease events only")
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
            key = tuple(tuple(r.as_row().values())[1:] if isinstance(r, SkellamSumRelease)
                        else (r.round, r.sensitivity, r.sigma, r.neighbouring, r.mechanism) for r in rel)
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

        RDP composes round by round in one accountant; the PLD column is the closed form of the
        composed Gaussians (:func:`gaussian_epsilon`), equal to :meth:`summary`'s PLD figure up to
        the PLD's discretization (1e-7 relative, tested), so a history can carry it every round.
        """
        rel = sorted(self.of_client(client), key=lambda r: r.round)
        rounds = sorted({r.round for r in rel}) if rounds is None else sorted(set(rounds))
        if has_skellam(rel):  # RDP is the only accountant of the Skellam (eq. (9.3)): one figure per round
            out = []
            for t in rounds:
                upto = [r for r in rel if r.round <= t]
                eps = skellam_aware_epsilon(upto, delta) if upto else 0.0
                out.append(PrivacySummary(client=client, round=t, releases=len(upto), delta=delta,
                                          zcdp_rho=float(sum(r.zcdp_rho for r in upto)), eps_zcdp=eps, eps_rdp=eps,
                                          eps_pld=None))
            return out
        from dp_accounting import rdp

        rdp_acc = rdp.RdpAccountant()
        out, done, rho, count = [], 0, 0.0, 0
        for t in rounds:
            new = []
            while done < len(rel) and rel[done].round <= t:
                new.append(rel[done])
                done += 1
            if _multipliers(new):
                with np.errstate(all="ignore"):
                    rdp_acc.compose(_dp_event(new))
            rho += float(sum(r.zcdp_rho for r in new))
            count += len(new)
            spent = count > 0 and rho > 0
            out.append(PrivacySummary(
                client=client, round=t, releases=count, delta=delta, zcdp_rho=rho,
                eps_zcdp=zcdp_to_dp(rho, delta),
                eps_rdp=_finite_or(_quiet(rdp_acc.get_epsilon, delta), zcdp_to_dp(rho, delta)) if spent else 0.0,
                eps_pld=None if not with_pld else epsilon_of_rho(rho, delta)))
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
        return [r.as_row() if isinstance(r, SkellamSumRelease) else
                dict(client=r.client, round=r.round, sensitivity=r.sensitivity, sigma=r.sigma,
                     neighbouring=r.neighbouring, mechanism=r.mechanism) for r in self.releases]

    @classmethod
    def from_rows(cls, rows) -> PrivacyLedger:
        return cls([SkellamSumRelease.from_row(row) if row.get("mechanism") == SkellamSumRelease.mechanism
                    else GaussianRelease(**row) for row in rows])


def summarize(releases: Sequence[GaussianRelease], delta: float, *, client: int = -1,
              with_pld: bool = True, closed_form: ClosedFormFn | None = None) -> PrivacySummary:
    """The composed cost of ``releases`` (one client's) at ``delta``."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    rel = list(releases)
    rho = float(sum(r.zcdp_rho for r in rel))
    last_round = max((r.round for r in rel), default=0)
    if has_skellam(rel):  # a secure sum's Skellam shares: the RDP figure is the only (and headline) eps
        eps = skellam_aware_epsilon(rel, delta)
        return PrivacySummary(client=client, round=last_round, releases=len(rel), delta=delta, zcdp_rho=rho,
                              eps_zcdp=eps, eps_rdp=eps, eps_pld=None)
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
