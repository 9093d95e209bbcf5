"""Several quantile levels fitted on the same sites with one budget (``fdp_flower.fit(tau=[0.1, 0.5, 0.9])``).

One FDP-ADMM fit per level, on the same split into sites and the same public basis, each with independent noise;
the fits share one budget: every site's releases over all the levels compose (PLD) to the (eps, delta) asked for
(docs/api.md, "Several quantiles").  The combined ledger holds every release, each fit's rounds shifted after the
previous fit's, so that a site's releases over all levels are one sequence.

Quantile curves that do not cross.  Fitted separately, the conditional quantile functions
x -> Q_tau(y | x) = alpha_tau + int beta_tau X may cross for some curves.  With ``noncrossing=True`` the predictions
are rearranged (Chernozhukov, Fernandez-Val & Galichon 2010, Econometrica 78(3)): at every curve the Q predicted
values are sorted, which is the rearrangement of the step function tau_q -> Q_tau_q(y | x); it never increases the
distance to the true, monotone, quantile function (their Proposition 4) and is post-processing of released
estimates, so it costs no privacy.  It holds at every curve, on the data's range and beyond.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from fdp_flower.outputs.models import FunctionalModel, PrivacyReport
from fdp_flower.privacy.ledger import PrivacyLedger


def rearrange(predictions: np.ndarray) -> np.ndarray:
    """Rearranged quantile predictions: each row of ``predictions`` (n, Q), one column per increasing tau, sorted
    in increasing order (Chernozhukov et al. 2010, eq. (2.3) on the finite grid of levels)."""
    return np.sort(np.asarray(predictions, dtype=float), axis=-1)


def combined_ledger(models: Sequence[FunctionalModel]) -> PrivacyLedger:
    """Every release of every model, each model's rounds shifted past the previous model's last round."""
    releases = []
    offset = 0
    for model in models:
        rounds = [r.round for r in model.ledger.releases]
        releases += [replace(r, round=r.round + offset) for r in model.ledger.releases]
        offset += max(rounds, default=0)
    return PrivacyLedger(releases)


@dataclass(frozen=True)
class QuantileModels:
    """Fitted models at several quantile levels that share one budget.

    Attributes
    ----------
    taus : the levels, increasing
    models : one :class:`FunctionalModel` per level (its own ``privacy`` is that fit's share)
    ledger : every release of every fit (:func:`combined_ledger`)
    privacy : the :class:`PrivacyReport` of the combined ledger: every site's releases over all levels, by PLD
    noncrossing : whether :meth:`predict` rearranges (default True)
    """

    taus: tuple[float, ...]
    models: tuple[FunctionalModel, ...]
    ledger: PrivacyLedger
    privacy: PrivacyReport
    noncrossing: bool = True

    def __len__(self) -> int:
        return len(self.models)

    def __getitem__(self, tau: float) -> FunctionalModel:
        """The model of level ``tau``."""
        for t, m in zip(self.taus, self.models):
            if abs(t - float(tau)) < 1e-12:
                return m
        raise KeyError(f"tau: no fit at {tau!r}; fitted levels: {', '.join(f'{t:g}' for t in self.taus)}")

    @property
    def grid(self) -> np.ndarray:
        return self.models[0].grid

    @property
    def beta_hats(self) -> np.ndarray:
        """(Q, G): every level's released coefficient function (not rearranged: a rearranged quantile function
        is not linear in the curve, so it has no coefficient function)."""
        return np.stack([m.beta_values for m in self.models])

    @property
    def intercepts(self) -> np.ndarray:
        return np.array([float(m.intercept) for m in self.models])

    def predict(self, curves) -> np.ndarray:
        """(n, Q): the fitted quantile of every curve at every level, rearranged when ``noncrossing``."""
        raw = np.column_stack([m.predict(curves) for m in self.models])
        return rearrange(raw) if self.noncrossing else raw

    def crossings(self, curves) -> float:
        """The fraction of ``curves`` at which the raw (not rearranged) fitted quantiles cross."""
        raw = np.column_stack([m.predict(curves) for m in self.models])
        return float(np.mean(np.any(np.diff(raw, axis=1) < 0, axis=1))) if raw.shape[1] > 1 else 0.0

    def __repr__(self) -> str:
        return (f"QuantileModels(taus={list(self.taus)}, {len(self.models)} fits, "
                f"{'non-crossing (rearranged)' if self.noncrossing else 'raw'} predictions; {self.privacy})")


def quantile_models(taus: Sequence[float], models: Sequence[FunctionalModel], *, delta: float, mode: str | None,
                    eps_budget: float | None, noncrossing: bool = True) -> QuantileModels:
    """The :class:`QuantileModels` of ``models`` (one per increasing level of ``taus``)."""
    ledger = combined_ledger(models)
    report = PrivacyReport.from_ledger(ledger, delta=delta, mode=mode, eps_budget=eps_budget)
    return QuantileModels(tuple(float(t) for t in taus), tuple(models), ledger, report, bool(noncrossing))
