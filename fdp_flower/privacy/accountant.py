"""A privacy budget across fits on one data set (docs/api.md, "A budget across fits").

Every private fit on the same records spends from the same budget: cross-validation over ``lam``, several
quantiles, a refit.  A :class:`PrivacyAccountant` is opened once per data set with the total (eps, delta) and
passed to every fit; before a fit trains, the accountant composes what the fits before it released with the
fit's planned releases and refuses the fit (:class:`BudgetExceeded`) if the composition would exceed the total;
after the fit, it records the fit's actual releases.

The composition.  Every release of the project is a Gaussian mechanism; one fit's releases by one site compose
exactly into one Gaussian of mu_f = (sum_t z_t^-2)^(1/2) (Dong, Roth & Su 2022, Corollary 3.3;
:func:`~fdp_flower.privacy.ledger.composed_multiplier`).  A record belongs to one site in each fit, though not
always the same one (a fit's seeded split, cross-validation folds), so its loss over the fits is at most the
composition over the fits of each fit's most-spending site: the accountant keeps, for every fit, the releases
of the site that spent most (its mu_f), and reports eps by PLD (``dp_accounting``, through
:func:`~fdp_flower.privacy.ledger.pld_epsilon`) of them all.  The bound is exact when a record's site spends the
most in every fit (equal sites).

Independent noise.  Composition assumes every release draws fresh noise.  With ``noise_source="seeded"`` a fit's
noise is a function of its seed, client and round: two fits with the same seed on the same data add the SAME noise
to two queries, and their difference is released without any.  The accountant therefore refuses a seeded fit whose
seed it has already charged (give each fit its own seed, or ``noise_source="os_entropy"``).

The accountant is a handle on one budget: copying it would duplicate the budget, so ``copy.copy`` and
``copy.deepcopy`` (scikit-learn's ``clone``) return the same accountant, and it refuses to be pickled (a worker
process of ``GridSearchCV(n_jobs > 1)`` would charge a copy that the others never see).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from fdp_flower.privacy.ledger import GaussianRelease, pld_epsilon

#: Relative slack of the refusal: a fit calibrated to meet the total exactly passes (the PLD's own
#: discretization pessimism is ~1e-5 relative, docs/privacy.md)
TOLERANCE = 1e-4


class BudgetExceeded(ValueError):
    """A fit would take the data set's composed eps past the accountant's total (raised before it trains)."""


@dataclass(frozen=True)
class AccountedFit:
    """One fit the accountant charged.

    name : what the fit was (e.g. ``fit(tau=0.5, lam=0.05)``)
    eps_alone : the fit's own eps at the accountant's delta (its most-spending site, PLD)
    eps_after : the data set's composed eps after this fit (PLD over every fit so far)
    releases : the number of Gaussian releases of its most-spending site
    mu : that site's composed Gaussian mu_f = (sum_t z_t^-2)^(1/2)
    """

    name: str
    eps_alone: float
    eps_after: float
    releases: int
    mu: float


class PrivacyAccountant:
    """The privacy budget of one data set, shared by every fit on it.

    Parameters
    ----------
    eps_total : float
        The total eps (> 0) of every record over all the fits this accountant sees.
    delta : float
        The total delta in (0, 1) (default: 1e-5); every fit's eps is computed at this delta.

    Examples
    --------
    >>> acc = fdp_flower.PrivacyAccountant(3.0, 1e-5)
    >>> m1 = fdp_flower.fit(X, y, eps=1.0, accountant=acc)   # doctest: +SKIP
    >>> acc.spent, acc.remaining                              # doctest: +SKIP
    """

    def __init__(self, eps_total: float, delta: float = 1e-5):
        if isinstance(eps_total, bool) or not isinstance(eps_total, (int, float)) or not math.isfinite(eps_total) \
                or eps_total <= 0:
            raise ValueError(f"eps_total: expected a finite number > 0, got {eps_total!r}")
        if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 1:
            raise ValueError(f"delta: expected a number in (0, 1), got {delta!r}")
        self.eps_total = float(eps_total)
        self.delta = float(delta)
        self._releases: list[GaussianRelease] = []
        self._fits: list[AccountedFit] = []
        self._noise_keys: set = set()

    # a handle on one budget: never duplicated
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        raise TypeError("a PrivacyAccountant cannot be pickled or sent to another process: a copy would spend the "
                        "same budget unseen (use GridSearchCV with n_jobs=1; set_params(accountant=None) before "
                        "saving an estimator)")

    # ------------------------------------------------------------ reading
    @property
    def fits(self) -> tuple[AccountedFit, ...]:
        """Every fit charged, in order."""
        return tuple(self._fits)

    @property
    def spent(self) -> float:
        """The data set's eps so far (PLD of every fit's most-spending site, at ``delta``)."""
        return self._eps(self._releases)

    @property
    def remaining(self) -> float:
        """``eps_total - spent``: how far the total is (eps does not add up: a next fit's cost is its
        composition with the others, which :meth:`check` computes)."""
        return max(0.0, self.eps_total - self.spent)

    def _eps(self, releases: Sequence[GaussianRelease]) -> float:
        return pld_epsilon(list(releases), self.delta) if releases else 0.0

    @staticmethod
    def _as_releases(multipliers: Sequence[float]) -> list[GaussianRelease]:
        return [GaussianRelease(0, t + 1, 1.0, float(z), mechanism="accounted") for t, z in enumerate(multipliers)]

    # ------------------------------------------------------------ spending
    def check(self, name: str, multipliers: Sequence[float] | None, noise_key=None) -> float:
        """The data set's eps if a fit releasing Gaussians of noise multipliers ``multipliers`` (its most-spending
        site's; None: no noise at all) ran now; raises :class:`BudgetExceeded` if it passes ``eps_total``, or if
        ``noise_key`` (what determines a seeded fit's noise, e.g. ``("seeded", seed)``; None: fresh entropy) was
        charged before: the two fits would add the same noise."""
        if noise_key is not None and noise_key in self._noise_keys:
            raise BudgetExceeded(f"{name}: refused: a fit with the same seeded noise {noise_key} was charged before; "
                                 "the two would add the same noise to two queries of the same records, so their "
                                 "difference is released exactly (give every fit its own seed / random_state, or "
                                 "noise_source='os_entropy')")
        if multipliers is None:
            raise BudgetExceeded(f"{name}: a fit without privacy (eps=None) releases its data without noise: its "
                                 f"eps is unbounded and the accountant's total {self.eps_total:g} would be exceeded")
        after = self._eps(self._releases + self._as_releases(multipliers))
        if after > self.eps_total * (1 + TOLERANCE):
            raise BudgetExceeded(f"{name}: refused before it releases anything: it would take this data set's eps from "
                                 f"{self.spent:.4g} to {after:.4g} (PLD at delta = {self.delta:g}), past the total "
                                 f"{self.eps_total:g} ({len(self._fits)} fits so far)")
        return after

    def charge(self, name: str, ledger, noise_key=None) -> AccountedFit:
        """Record a fit that ran: ``ledger`` (a :class:`~fdp_flower.privacy.ledger.PrivacyLedger` or a sequence of
        :class:`~fdp_flower.privacy.ledger.GaussianRelease`) holds its releases; the most-spending site's are
        kept.  The fit ran, so its releases are recorded even past the total (the check is :meth:`check`)."""
        releases = list(getattr(ledger, "releases", ledger))
        if noise_key is not None:
            self._noise_keys.add(noise_key)
        by_client: dict[int, list[float]] = {}
        for r in releases:
            if r.sensitivity > 0:
                by_client.setdefault(int(r.client), []).append(float(r.noise_multiplier))
        from fdp_flower.privacy.calibration import composed_mu

        worst = max(by_client.values(), key=composed_mu, default=[])
        mine = self._as_releases(worst)
        self._releases += mine
        entry = AccountedFit(str(name), self._eps(mine), self.spent, len(worst), composed_mu(worst))
        self._fits.append(entry)
        return entry

    def largest_fit(self) -> float:
        """The largest eps (at ``delta``) that one more fit may spend on its own without passing the total:
        its Gaussian mu with the others' composes to the total's, mu^2 = mu_total^2 - sum_f mu_f^2."""
        from fdp_flower.privacy.calibration import analytic_gaussian_epsilon, composed_mu, target_mu

        spent_mu = composed_mu([r.noise_multiplier for r in self._releases])
        left = target_mu(self.eps_total, self.delta) ** 2 - spent_mu**2
        return 0.0 if left <= 0 else analytic_gaussian_epsilon(math.sqrt(left), self.delta)

    def __repr__(self) -> str:
        return (f"PrivacyAccountant(eps_total={self.eps_total:g}, delta={self.delta:g}: {len(self._fits)} fits, "
                f"spent eps = {self.spent:.4g})")

    def table(self) -> str:
        """Every fit, its own eps and the composed eps after it (one line each)."""
        width = max([3] + [len(f.name) for f in self._fits])
        lines = [repr(self), f"{'#':>3}  {'fit':<{width}} {'eps alone':>10} {'eps after':>10}"]
        for i, f in enumerate(self._fits, start=1):
            lines.append(f"{i:>3}  {f.name:<{width}} {f.eps_alone:>10.4g} {f.eps_after:>10.4g}")
        return "\n".join(lines)
