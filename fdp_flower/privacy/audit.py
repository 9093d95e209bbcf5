"""Statistics of the empirical privacy audit (pure numpy/scipy; the drivers are in
:mod:`fdp_flower.engines.audit`).

Setting.  One audited party releases y_t = q_t(D; T_{<t}) + sigma_t N(0, diag(s)^2), t = 1..T, where
T_{<t} is the transcript so far (every release of every party) and s the public noise shape
(1 for isotropic noise).  For two neighbouring datasets D, D' the audit replays the *same*
transcript through the real client code and measures, per step,

    Delta_t = ||(q_t(D; T_{<t}) - q_t(D'; T_{<t})) / s||      (the noise metric)

and compares it with the calibrated sensitivity Delta_t^cal of the ledger.  By the chain rule of
the KL divergence (adaptive composition of Gaussian releases),

    KL(P_D || P_D') = E_{T ~ P_D} [ sum_t Delta_t^2 / (2 sigma_t^2) ],

which zCDP bounds by rho = sum_t (Delta_t^cal)^2 / (2 sigma_t^2) (the order-1 Renyi divergence).
The audit estimates it by Monte Carlo over transcripts (:func:`kl_estimate`), both in this
conditional form and from the sampled log-likelihood ratios (an unbiased but noisier estimate).

The likelihood-ratio test: on transcripts drawn under D and under D', the statistic
L = log p_D(T) / p_D'(T) = sum_t (||(y_t - q_t') / s||^2 - ||(y_t - q_t) / s||^2) / (2 sigma_t^2)
(the other parties' factors cancel: they are the same functions of the transcript under both)
is thresholded; any test with false-positive rate FPR and false-negative rate FNR against an
(eps, delta)-DP mechanism satisfies FPR e^eps + FNR >= 1 - delta, so

    eps >= log((1 - delta - FNR) / FPR),

and with Clopper-Pearson upper bounds on FPR and FNR this is a lower confidence bound on eps
(:func:`epsilon_lower_bound`).  The threshold is chosen on one half of the trials and the bound
evaluated on the other half, so the confidence statement holds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats


def clopper_pearson_upper(failures: int, trials: int, alpha: float) -> float:
    """One-sided (1 - alpha) Clopper-Pearson upper bound on a binomial proportion."""
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    if not 0 <= failures <= trials:
        raise ValueError(f"failures must be in [0, {trials}], got {failures}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if failures == trials:
        return 1.0
    return float(stats.beta.ppf(1.0 - alpha, failures + 1, trials - failures))


def epsilon_from_rates(fpr: float, fnr: float, delta: float) -> float:
    """log((1 - delta - FNR) / FPR), the eps an (FPR, FNR) test certifies (0 if nothing)."""
    numerator = 1.0 - delta - fnr
    if numerator <= 0:
        return 0.0
    if fpr <= 0:
        return math.inf
    return max(0.0, math.log(numerator / fpr))


@dataclass(frozen=True)
class LikelihoodRatioTest:
    """The threshold test on the canary: eps lower bound and the rates it came from."""

    eps_lower: float  # lower confidence bound on eps, at level 1 - alpha
    threshold: float
    fpr: float  # held-out rates (point estimates)
    fnr: float
    fpr_upper: float  # their Clopper-Pearson upper bounds
    fnr_upper: float
    trials: int  # held-out trials per hypothesis
    alpha: float
    direction: str  # "D vs D'" or "D' vs D"


def _upper(counts: np.ndarray, trials: int, alpha: float) -> np.ndarray:
    """Vectorized :func:`clopper_pearson_upper`."""
    counts = np.asarray(counts)
    full = counts >= trials
    safe = np.where(full, trials - 1, counts)
    return np.where(full, 1.0, stats.beta.ppf(1.0 - alpha, safe + 1, trials - safe))


def _threshold_bounds(pos: np.ndarray, neg: np.ndarray, thresholds: np.ndarray, delta: float, alpha: float):
    """(eps bound, plug-in eps, FN counts, FP counts) of 'say positive when stat > t' for every t."""
    fn = np.searchsorted(np.sort(pos), thresholds, side="right")
    fp = len(neg) - np.searchsorted(np.sort(neg), thresholds, side="right")
    fnr_hi, fpr_hi = _upper(fn, len(pos), alpha / 2), _upper(fp, len(neg), alpha / 2)
    with np.errstate(divide="ignore"):
        bound = np.maximum(0.0, np.log(np.maximum(1.0 - delta - fnr_hi, 0.0) / fpr_hi))
        plug_in = np.log(np.maximum(1.0 - fn / len(pos), 1e-300) / ((fp + 0.5) / len(neg)))
    return bound, plug_in, fn, fp


#: At most this many candidate thresholds (quantiles of the calibration statistics) are tried.
MAX_THRESHOLDS = 512


def epsilon_lower_bound(llr_under_d: np.ndarray, llr_under_d_prime: np.ndarray, *, delta: float,
                        alpha: float = 0.05) -> LikelihoodRatioTest:
    """Empirical lower bound on eps from the log-likelihood ratios log p_D / p_D' of transcripts
    drawn under D (``llr_under_d``) and under D' (``llr_under_d_prime``).

    Each sample is split in halves: the first half picks the threshold (and the direction of the
    test: 'D' when L is large, or 'D'' when L is small) that maximizes the bound there (ties broken
    by the plug-in estimate, then the middle of the tied thresholds); the second half gives the
    rates and their Clopper-Pearson bounds (alpha / 2 each), so that with probability >= 1 - alpha
    the returned ``eps_lower`` is below the mechanism's true eps.
    """
    a = np.asarray(llr_under_d, dtype=float)
    b = np.asarray(llr_under_d_prime, dtype=float)
    if a.ndim != 1 or b.ndim != 1 or len(a) < 4 or len(b) < 4:
        raise ValueError("give at least 4 log-likelihood ratios under each hypothesis")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("log-likelihood ratios must be finite")
    best = None
    for direction, pos, neg in (("D vs D'", a, b), ("D' vs D", -b, -a)):
        cal_pos, cal_neg = pos[: len(pos) // 2], neg[: len(neg) // 2]  # calibration halves
        candidates = np.unique(np.r_[cal_pos, cal_neg])
        if len(candidates) > MAX_THRESHOLDS:
            candidates = np.unique(np.quantile(candidates, np.linspace(0.0, 1.0, MAX_THRESHOLDS)))
        bound, plug_in, _fn, _fp = _threshold_bounds(cal_pos, cal_neg, candidates, delta, alpha)
        order = np.lexsort((plug_in, bound))
        best_k = order[-1]
        tied = np.flatnonzero((bound == bound[best_k]) & (plug_in == plug_in[best_k]))
        k = int(tied[len(tied) // 2])  # the middle of the best (separating) range of thresholds
        score = (float(bound[k]), float(plug_in[k]))
        if best is None or score > best[0]:
            best = (score, direction, float(candidates[k]))
    _, direction, thr = best
    pos, neg = (a, b) if direction == "D vs D'" else (-b, -a)
    test_pos, test_neg = pos[len(pos) // 2:], neg[len(neg) // 2:]
    bound, _plug, fn, fp = _threshold_bounds(test_pos, test_neg, np.array([thr]), delta, alpha)
    fnr_hi = float(_upper(fn, len(test_pos), alpha / 2)[0])
    fpr_hi = float(_upper(fp, len(test_neg), alpha / 2)[0])
    return LikelihoodRatioTest(float(bound[0]), thr if direction == "D vs D'" else -thr, int(fp[0]) / len(test_neg),
                               int(fn[0]) / len(test_pos), fpr_hi, fnr_hi, min(len(test_pos), len(test_neg)), alpha,
                               direction)


def gaussian_llr(y: np.ndarray, q: np.ndarray, q_prime: np.ndarray, sigma: float,
                 scales: np.ndarray | None = None) -> float:
    """log N(y; q, sigma^2 diag(s)^2) - log N(y; q', sigma^2 diag(s)^2)."""
    s = 1.0 if scales is None else np.asarray(scales, dtype=float)
    u, v = (y - q) / s, (y - q_prime) / s
    return float((np.sum(v * v) - np.sum(u * u)) / (2.0 * sigma * sigma))


@dataclass(frozen=True)
class KLEstimate:
    """Monte-Carlo estimates of KL(P_D || P_D') over transcripts drawn under D."""

    conditional: float  # mean over transcripts of sum_t Delta_t^2 / (2 sigma_t^2)
    conditional_se: float
    sampled: float  # mean of the sampled log-likelihood ratios
    sampled_se: float
    transcripts: int


def kl_estimate(per_transcript_conditional: np.ndarray, per_transcript_llr: np.ndarray) -> KLEstimate:
    """Both estimators of KL(P_D || P_D') with their standard errors (see the module docstring)."""
    c = np.asarray(per_transcript_conditional, dtype=float)
    s = np.asarray(per_transcript_llr, dtype=float)
    if c.shape != s.shape or c.ndim != 1 or len(c) < 1:
        raise ValueError("give one conditional KL and one log-likelihood ratio per transcript")
    n = len(c)
    se = (lambda x: float(np.std(x, ddof=1) / math.sqrt(n)) if n > 1 else math.inf)
    return KLEstimate(float(c.mean()), se(c), float(s.mean()), se(s), n)


# ------------------------------------------------------------------ the noise actually drawn
@dataclass(frozen=True)
class SpreadTest:
    """The released noise's empirical spread against the sigma the site's ledger records.

    N releases of one request (same data, same public values, fresh noise) are v_n = q + sigma_act S z_n with
    the noise shape S = diag(s).  With the ledger's sigma and the sample mean vbar,

        X = sum_n sum_k ((v_nk - vbar_k) / (sigma s_k))^2 ~ (sigma_act / sigma)^2 chi^2((N - 1) K),

    so under "the noise drawn is the noise charged" X ~ chi^2((N - 1) K) exactly, whatever q is (the
    noise-free value cancels; the test needs no model of the release).  ``ratio`` = X / dof estimates
    (sigma_act / sigma)^2; the test accepts iff X lies between the alpha/2 and 1 - alpha/2 quantiles.
    Under a sigma / 2 mutant ratio ~ 1/4, which is outside [low, high] for dof >= 40 at alpha = 1e-6.
    """

    statistic: float
    dof: int
    alpha: float
    low: float  # bounds on ratio = statistic / dof
    high: float

    @property
    def ratio(self) -> float:
        return self.statistic / self.dof

    @property
    def passed(self) -> bool:
        return self.low <= self.ratio <= self.high


def noise_spread_test(releases: np.ndarray, sigma: float, scales: np.ndarray | None = None, *,
                      alpha: float = 1e-6) -> SpreadTest:
    """:class:`SpreadTest` of ``releases`` (N, K), N >= 2 releases of one request, against the ledger's
    ``sigma`` (noise shape ``scales``, None: isotropic), two-sided at level ``alpha``."""
    v = np.asarray(releases, dtype=float)
    if v.ndim != 2 or v.shape[0] < 2:
        raise ValueError(f"releases must be (N >= 2, K), got shape {v.shape}")
    sigma = float(sigma)
    if not (np.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be finite and > 0, got {sigma}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    s = 1.0 if scales is None else np.asarray(scales, dtype=float)
    dev = (v - v.mean(axis=0)) / (s * sigma)
    dof = (v.shape[0] - 1) * v.shape[1]
    statistic = float(np.sum(dev * dev)) if np.all(np.isfinite(dev)) else math.inf
    return SpreadTest(statistic, dof, alpha, float(stats.chi2.ppf(alpha / 2, dof)) / dof,
                      float(stats.chi2.ppf(1 - alpha / 2, dof)) / dof)
