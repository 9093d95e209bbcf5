"""The site side of private inference: what a site releases after an FDP-ADMM fit (docs/inference.md).

After the fit the server names the released estimate w_hat (public: it is a release).  Site i,
holding m_i feature rows a_ij (the clipped rows it trained on, intercept column first) and
responses y_ij, with residuals r_ij = y_ij - a_ij . w_hat, releases in two steps, each part with
its own Gaussian noise:

1. (round L + 1)
   - its **scale histogram**: the fractions of |r_ij| in the public bins [0, e_1], (e_1, e_2], ...,
     (e_J, inf) with e_k = 2^k (:func:`scale_edges`, 2^-20 .. 2^20 in the response's units), plus
     N(0, sigma^2) on every bin.  Replacing one record moves one count from one bin to another,
     so the l2-sensitivity is sqrt(2) / m_i (eq. (9.1) of docs/inference.md).  It only locates the
     residuals' scale (within a factor 2), from which the server picks the density window h;
   - its **Gram matrix** of the rows in the units of the fit's noise shape S = diag(s) (s = 1 for the
     sphere clip, the ellipsoid's public scales otherwise): Q_i = (1/m_i) sum_j x_ij x_ij^T with
     x_ij = a_ij / s, ||x_ij|| <= b (b = c1 for the sphere, 1 for the ellipsoid), plus a symmetric
     Gaussian matrix (i.i.d. N(0, sigma^2) on and above the diagonal, mirrored: the "Analyze Gauss"
     release of Dwork, Talwar, Thakurta and Zhang, 2014).  Replacing x by x' moves Q_i by
     (x x^T - x' x'^T) / m_i, whose squared Frobenius norm is
     (||x||^4 + ||x'||^4 - 2 (x . x')^2) / m_i^2 <= 2 b^4 / m_i^2, and the upper triangle's l2 norm is
     at most the Frobenius norm: the sensitivity is sqrt(2) b^2 / m_i (eq. (9.2));
2. (round L + 2, once the server has named the window h) its **window fractions**: the fractions of
   residuals in (-h, 0] and in (0, h], plus N(0, sigma^2) on each; replacing a record moves one count
   between them or out of them, so the sensitivity is sqrt(2) / m_i (eq. (9.3)).  Their sum over 2h is
   the density at the quantile, their difference over h^2 its slope.

Each part is a mean over the site's records with a public m_i, so under add/remove-one the
sensitivity is the same (docs/algorithms.md, section 6, and ``NEIGHBOURING_FACTORS``).  Each is one
ledger event of the site (mechanisms :data:`INFERENCE_MECHANISMS`).

Why two steps: the density at the quantile is a window fraction over 2h, and the window must hold
a few per cent of the residuals.  A single histogram over an unknown scale (many bins) would sum the
noise of every bin inside the window; one coarse look at the scale and one exact count need two
releases whose noise does not add up.

Budget: :func:`fit_budget` gives the eps the fit may spend so that fit and inference share one
total (eps, delta); :func:`inference_multipliers` then calibrates the three inference releases with
the PLD accountant against the fit's recorded multipliers, so the site's ledger meets the total.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fdp_flower.core.clipping import clip_rows
from fdp_flower.functional.federated_fpca import symmetric_gaussian
from fdp_flower.privacy.ledger import GaussianRelease

SCALE_MECHANISM = "qr_scale_histogram"
GRAM_MECHANISM = "qr_gram"
WINDOW_MECHANISM = "qr_window_fraction"
INFERENCE_MECHANISMS = (SCALE_MECHANISM, GRAM_MECHANISM, WINDOW_MECHANISM)
#: default share of the inference releases in the total budget, as a fraction of mu^2 (the
#: Gaussian-DP parameter squared, i.e. of the zCDP rho: Gaussian releases compose additively in it)
INFERENCE_SHARE = 0.15
#: how the inference releases split their mu^2: scale histogram, Gram matrix, window fraction
RELEASE_SHARES = (0.05, 0.8, 0.15)


def scale_edges(low: int = -20, high: int = 20) -> np.ndarray:
    """The edges e_k = 2^k, k = low..high, of the scale histogram of |r| (about 1e-6 .. 1e6)."""
    return 2.0 ** np.arange(low, high + 1, dtype=float)


def scale_histogram_sensitivity(m) -> np.ndarray:
    """Replace-one l2-sensitivity of the scale histogram's fractions: sqrt(2) / m (eq. (9.1))."""
    return math.sqrt(2.0) / _sizes(m)


def gram_sensitivity(bound: float, m) -> np.ndarray:
    """Replace-one l2-sensitivity of the Gram matrix's upper triangle: sqrt(2) b^2 / m (eq. (9.2))."""
    if not (bound > 0 and math.isfinite(bound)):
        raise ValueError(f"the row bound must be finite and > 0, got {bound}")
    return math.sqrt(2.0) * bound**2 / _sizes(m)


def window_sensitivity(m) -> np.ndarray:
    """Replace-one l2-sensitivity of the two window fractions: sqrt(2) / m (eq. (9.3))."""
    return math.sqrt(2.0) / _sizes(m)


def _sizes(m) -> np.ndarray:
    m = np.asarray(m, dtype=float)
    if np.any(m < 1):
        raise ValueError("every site needs at least one record (m_i >= 1)")
    return m


def abs_histogram(residuals: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Fractions of |residuals| in [0, e_1], (e_1, e_2], ..., (e_J, inf)."""
    index = np.searchsorted(edges, np.abs(residuals), side="left")
    return np.bincount(index, minlength=edges.size + 1) / max(residuals.size, 1)


@dataclass(frozen=True)
class SiteRows:
    """A site's rows in the units of the noise shape: x = a / s clipped to ||x|| <= b, and residuals
    r = y - a . w_hat (the site-side state between its two inference releases)."""

    whitened: np.ndarray
    residuals: np.ndarray
    bound: float

    @property
    def num_examples(self) -> int:
        return int(self.residuals.size)


def site_rows(features: np.ndarray, response: np.ndarray, w_hat: np.ndarray, *, scales: np.ndarray | None,
              bound: float) -> SiteRows:
    """The site's clipped rows a_ij (as in training, intercept column first), responses (minus the
    public offset) and the named estimate w_hat -> :class:`SiteRows`.  Rows are clipped to
    ||a / s|| <= b here again, so the sensitivities hold whatever rows are passed."""
    a = np.asarray(features, dtype=float)
    y = np.asarray(response, dtype=float)
    w = np.asarray(w_hat, dtype=float)
    if a.ndim != 2 or a.shape[0] < 1 or y.shape != (a.shape[0],) or w.shape != (a.shape[1],):
        raise ValueError(f"features (m, p), response (m,) and w_hat (p,) are needed, got {a.shape}, {y.shape}, "
                         f"{w.shape}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(y)) and np.all(np.isfinite(w))):
        raise ValueError("features, response and w_hat must be finite")
    s = np.ones(a.shape[1]) if scales is None else np.asarray(scales, dtype=float)
    x, _ = clip_rows(a / s, bound)
    return SiteRows(x, y - (x * s) @ w, float(bound))


@dataclass(frozen=True)
class FirstRelease:
    """Step 1 of a site's inference release (noisy unless privacy is off)."""

    scale_histogram: np.ndarray  # (len(scale_edges) + 1,)
    gram: np.ndarray  # (p, p) symmetric, in the units of the noise shape
    num_examples: int
    sigma_scale: float  # 0.0 without privacy
    sigma_gram: float


def first_release(rows: SiteRows, *, edges: np.ndarray, z_scale: float | None, z_gram: float | None,
                  rng: np.random.Generator | None) -> FirstRelease:
    """The scale histogram and the Gram matrix (eqs. (9.1)-(9.2)); multipliers None: no noise (no privacy)."""
    m = rows.num_examples
    hist = abs_histogram(rows.residuals, edges)
    gram = rows.whitened.T @ rows.whitened / m
    if (z_scale is None) != (z_gram is None):
        raise ValueError("give both noise multipliers, or neither (no privacy)")
    if z_scale is None:
        return FirstRelease(hist, gram, m, 0.0, 0.0)
    if rng is None:
        raise ValueError("a private release needs a random generator")
    sigma_h = float(z_scale * scale_histogram_sensitivity(m))
    sigma_g = float(z_gram * gram_sensitivity(rows.bound, m))
    hist = hist + sigma_h * rng.standard_normal(hist.shape)
    gram = gram + symmetric_gaussian(gram.shape[0], sigma_g, rng)
    return FirstRelease(hist, gram, m, sigma_h, sigma_g)


def window_release(rows: SiteRows, half_width: float, *, z_window: float | None,
                   rng: np.random.Generator | None) -> tuple[np.ndarray, float]:
    """(the fractions of residuals in (-h, 0] and in (0, h], plus noise; their sigma) (eq. (9.3));
    ``z_window`` None: no noise.  Replacing a record moves one count between the two bins or out of them:
    l2-sensitivity sqrt(2) / m."""
    if not (half_width > 0 and math.isfinite(half_width)):
        raise ValueError(f"the window half-width must be finite and > 0, got {half_width}")
    r = rows.residuals
    fractions = np.array([np.mean((r > -half_width) & (r <= 0)), np.mean((r > 0) & (r <= half_width))])
    if z_window is None:
        return fractions, 0.0
    if rng is None:
        raise ValueError("a private release needs a random generator")
    sigma = float(z_window * window_sensitivity(rows.num_examples))
    return fractions + sigma * rng.standard_normal(2), sigma


@dataclass(frozen=True)
class SiteInference:
    """Everything one site released for inference."""

    first: FirstRelease
    window_fractions: np.ndarray  # (2,): residuals in (-h, 0] and in (0, h]
    sigma_window: float

    @property
    def num_examples(self) -> int:
        return self.first.num_examples


def inference_releases(client: int, round_: int, m: int, *, bound: float, z_scale: float, z_gram: float,
                       z_window: float) -> list[GaussianRelease]:
    """The three ledger events of one site's inference releases (replace-one): rounds ``round_`` (scale
    histogram, Gram) and ``round_ + 1`` (window fraction)."""
    sh, sg, sw = (float(scale_histogram_sensitivity(m)), float(gram_sensitivity(bound, m)),
                  float(window_sensitivity(m)))
    return [GaussianRelease(int(client), int(round_), sh, z_scale * sh, mechanism=SCALE_MECHANISM),
            GaussianRelease(int(client), int(round_), sg, z_gram * sg, mechanism=GRAM_MECHANISM),
            GaussianRelease(int(client), int(round_) + 1, sw, z_window * sw, mechanism=WINDOW_MECHANISM)]


def _check_share(share: float, what: str) -> float:
    if not (isinstance(share, (int, float)) and 0 < share < 1):
        raise ValueError(f"{what}: expected a number in (0, 1), got {share!r}")
    return float(share)


def fit_budget(eps: float, delta: float, share: float = INFERENCE_SHARE) -> float:
    """The eps the fit may spend so that the inference releases get ``share`` of the total mu^2.

    All releases are Gaussian, so they compose into one Gaussian of mu = (sum_t z_t^-2)^(1/2)
    (Gaussian DP); the total (eps, delta) fixes mu, the fit gets mu sqrt(1 - share) and its eps is
    that Gaussian's exact eps at delta.  :func:`inference_multipliers` then sizes the inference
    releases against what the fit actually recorded (PLD), so the total is met, not exceeded.
    """
    from fdp_flower.privacy.calibration import analytic_gaussian_epsilon, target_mu

    share = _check_share(share, "inference_share")
    mu = target_mu(eps, delta)
    return float(analytic_gaussian_epsilon(mu * math.sqrt(1.0 - share), delta))


def inference_multipliers(eps: float, delta: float, fit_multipliers: Sequence[float], *,
                          shares: Sequence[float] = RELEASE_SHARES) -> tuple[float, float, float]:
    """(z_scale, z_gram, z_window) of the three inference releases so that they and the fit's releases (their
    noise multipliers ``fit_multipliers``, from the site's ledger) compose to (eps, delta) by PLD; they split
    their mu^2 by ``shares``.  A ``ValueError`` when the fit's releases leave nothing."""
    from fdp_flower.privacy.calibration import calibrate_noise_multiplier

    shares = [float(v) for v in shares]
    if len(shares) != 3 or min(shares) <= 0 or not math.isclose(sum(shares), 1.0, rel_tol=1e-9):
        raise ValueError(f"shares: expected three positive numbers summing to 1, got {shares}")
    relative = [1.0 / math.sqrt(v) for v in shares]
    scale = calibrate_noise_multiplier(eps, delta, relative, fixed_multipliers=list(fit_multipliers))
    return tuple(float(scale * r) for r in relative)
