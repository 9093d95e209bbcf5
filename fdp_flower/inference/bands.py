"""The server side of private inference: sandwich, privacy-noise covariance and bands (docs/inference.md).

Everything here is post-processing of released values: the fit's released estimate w_hat, its
public noise plan (steps, rho, the sigma of every release in the ledger, the noise shape, the
released estimator), and the sites' inference releases (:mod:`fdp_flower.inference.releases`).

Model (docs/inference.md, section 2).  Near the solution each site's mean check-loss subgradient is
linear, E g_i(w) = D_i (w - w°) with D_i = E_i[f(q(x) | x) a a^T]; averaged over the sites, the
server's global iterate follows (the duals sum to zero after every round, so the mean of the
released primals is w^l)

    w^l - w° = T_l (w^{l-1} - w°) + xi_l,   T_l = I - eta'_l D,  eta'_l = 1 / (rho_l + 1/eta_l),   (9.4)

xi_l = (1/M) sum_i N(0, sigma_il^2 S^2) the mean of the round's noise, D = (1/M) sum_i D_i.  The
released estimator w_hat = sum_l c_l w^l (last iterate, average or tail average) is then

    w_hat = (I - A) w°_n + sum_l B_l xi_l,   A = sum_l c_l T_l ... T_1,                       (9.5)

with w°_n the exact (non-private) minimizer of the sites' objective and B_l = sum_{k >= l} c_k
T_k ... T_{l+1}.  Its sampling error is the quantile-regression sandwich (Koenker 2005, Thm 4.1)

    Var(w°_n) = D^{-1} Omega D^{-1},  Omega = (1/M^2) sum_i tau (1 - tau) G_i / m_i,          (9.6)

G_i = E_i[a a^T], and under a location-shift model (f(q(x) | x) = f for all x) D = f G with
G = (1/M) sum_i G_i ("iid" sandwich, Koenker 2005, section 3.4).  The debiased estimate

    w_d = (I - A)^{-1} w_hat + D^{-1} (lam / M) P'(w_hat)                                   (9.7)

removes what the run's start at 0 left in the estimate (A) and the penalty's shift, and

    Var(w_d) = D^{-1} Omega D^{-1} + (I - A)^{-1} (sum_l B_l V_l B_l^T) (I - A)^{-T},         (9.8)

V_l = Var(xi_l), the two independent parts: sampling error and privacy noise.  Bands for
beta(t) = sum_k w_k phi_k(t) and the intercept are linear maps of w_d; the simultaneous band's
critical value is the level-quantile of max_t |Z(t)| / sd(t) over the grid for the Gaussian process
Z(t) of the estimate (simulated, seeded: post-processing).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

from fdp_flower.inference.releases import SiteInference

#: the released mean Gram matrix's smallest eigenvalue must exceed this many sds of its entries' noise (in the
#: noise shape's units) for a band: below, the noise decides the sandwich in some direction
GRAM_SNR_REFUSE = 3.0
#: below this many noise sds the band is computed but flagged as approximate
GRAM_SNR_WARN = 8.0
#: the smallest singular value of I - A (eq. (9.7)) a band needs: below, the run has not learned some direction
TRANSIENT_LIMIT = 0.1


class InferenceError(ValueError):
    """The releases cannot support a confidence band; the message (one line) says why and what to change."""




#: the cap on the eigenvalues of eta'_l D in the recursion (9.4): the stability boundary
STABILITY_LIMIT = 2.0
#: eigenvalue floor, relative to the largest, below which a released Gram counts as not positive definite
PD_FLOOR = 1e-8


# ---------------------------------------------------------------- density of the residuals at the quantile
def bofinger_bandwidth(n: int, tau: float) -> float:
    """Bofinger's (1975) bandwidth in probability units: n^(-1/5) [4.5 phi(z)^4 / (2 z^2 + 1)^2]^(1/5),
    z = Phi^{-1}(tau) (Koenker 2005, section 3.4.2), capped so that tau +- h stays in (0, 1)."""
    if not 0 < tau < 1:
        raise ValueError(f"tau must be in (0, 1), got {tau}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    normal = NormalDist()
    z = normal.inv_cdf(tau)
    h = n ** -0.2 * (4.5 * normal.pdf(z) ** 4 / (2 * z * z + 1) ** 2) ** 0.2
    return float(min(h, 0.5 * min(tau, 1 - tau)))


def choose_window(fractions: np.ndarray, edges: np.ndarray, *, n: int, tau: float) -> float:
    """The half-width h of the density window: where the pooled (noisy) scale histogram's cumulative
    fraction of |r| first reaches 2 h_n (h_n: :func:`bofinger_bandwidth`), interpolated geometrically
    between the edges e_k = 2^k around the crossing (eq. (9.9)).  Only a scale: an h off by a factor
    changes the window's bias and noise, not the estimator's validity.  The crossing is the last one from
    below, so noise in the many nearly empty bins near 0 cannot fake an early one."""
    fractions = np.asarray(fractions, dtype=float)
    edges = np.asarray(edges, dtype=float)
    if fractions.shape != (edges.size + 1,):
        raise ValueError(f"expected {edges.size + 1} histogram fractions, got shape {fractions.shape}")
    target = 2.0 * bofinger_bandwidth(n, tau)
    cumulative = np.cumsum(fractions)[:-1]  # fraction of |r| <= e_k (noisy: not monotone)
    below = np.flatnonzero(cumulative < target)
    if below.size == 0:
        raise InferenceError(f"more than {target:.3g} of the residuals lie within +-{edges[0]:g} of the fitted "
                             "quantile (by the released scale histogram): the response's scale is below the "
                             "histogram's range, or its noise hides the scale (rescale y, or more budget for inference)")
    k = int(below[-1]) + 1  # the last crossing from below: an early noisy crossing near 0 does not count
    if k >= cumulative.size:
        raise InferenceError(f"fewer than {target:.3g} of the residuals lie within +-{edges[-1]:g} of the fitted "
                             "quantile (by the released scale histogram): the response's scale is above the "
                             "histogram's range, or its noise hides the scale (rescale y, or more budget for inference)")
    low, high = cumulative[k - 1], cumulative[k]
    position = 1.0 if high <= low else float(np.clip((target - low) / (high - low), 0.0, 1.0))
    return float(edges[k - 1] * (edges[k] / edges[k - 1]) ** position)


@dataclass(frozen=True)
class ResidualDensity:
    """The density of the residuals at 0 (the fitted tau-quantile) and its slope, from the pooled fractions
    F_- of residuals in (-h, 0] and F_+ in (0, h] (eq. (9.10)): f_hat = (F_- + F_+) / (2h),
    f'_hat = (F_+ - F_-) / h^2, with the sd of f'_hat (release noise and sampling); h from
    :func:`choose_window`, 2 h_n the window's target mass."""

    density: float
    half_width: float
    window_fraction: float
    target_mass: float
    slope: float = 0.0
    slope_sd: float = 0.0


# ---------------------------------------------------------------- the sandwich pieces
@dataclass(frozen=True)
class SandwichEstimate:
    """The server's aggregate of the sites' inference releases (eq. (9.6)), in the units of w.

    gram : G = (1/M) sum_i G_i (positive definite after :func:`aggregate`)
    omega : (1/M^2) sum_i tau (1 - tau) G_i / m_i
    density : the residual density at the quantile (:class:`ResidualDensity`)
    hessian : D = f_hat G
    gram_min_eigenvalue : the smallest eigenvalue of the released mean Gram in the noise shape's units
        (before any repair), beside ``gram_noise``, the sd of one of its entries' noise
    repaired : True when a released matrix was not positive definite and its eigenvalues were floored
    """

    gram: np.ndarray
    omega: np.ndarray
    density: ResidualDensity
    hessian: np.ndarray
    sample_sizes: tuple[int, ...]
    tau: float
    gram_min_eigenvalue: float
    gram_noise: float
    repaired: bool
    private: bool

    @property
    def n(self) -> int:
        return int(sum(self.sample_sizes))

    @property
    def gram_snr(self) -> float:
        """The released mean Gram's smallest eigenvalue over the sd of its entries' noise (inf without noise)."""
        return float(self.gram_min_eigenvalue / self.gram_noise) if self.gram_noise > 0 else math.inf

    def check(self) -> None:
        """Raise :class:`InferenceError` when the released Gram matrix is not clearly positive definite."""
        if self.repaired or self.gram_snr < GRAM_SNR_REFUSE:
            raise InferenceError(
                f"the released Gram matrix's smallest eigenvalue ({self.gram_min_eigenvalue:.3g}) is within "
                f"{GRAM_SNR_REFUSE:g} sds of its noise ({self.gram_noise:.3g}): too little signal for a band; use fewer "
                "components, larger sites, a smaller clip or more budget for inference")


def _floored(matrix: np.ndarray) -> tuple[np.ndarray, float, bool]:
    sym = (matrix + matrix.T) / 2.0
    values, vectors = np.linalg.eigh(sym)
    floor = PD_FLOOR * max(float(values[-1]), 0.0)
    if values[0] > floor:
        return sym, float(values[0]), False
    fixed = np.maximum(values, floor if floor > 0 else 1e-300)
    return (vectors * fixed) @ vectors.T, float(values[0]), True


def aggregate(sites: list[SiteInference], *, tau: float, half_width: float,
              scales: np.ndarray | None) -> SandwichEstimate:
    """The sandwich pieces of eq. (9.6) from every site's releases: sites weighted as the objective weights
    them (each site's mean loss counts 1/M), Grams un-whitened by the noise shape S = diag(s), the density
    f_hat = (mean window fraction) / (2h) (eq. (9.10))."""
    if not sites:
        raise ValueError("no site released anything")
    p = sites[0].first.gram.shape[0]
    s = np.ones(p) if scales is None else np.asarray(scales, dtype=float)
    count = len(sites)
    sizes = tuple(int(r.num_examples) for r in sites)
    minus, plus = np.mean([r.window_fractions for r in sites], axis=0)
    fraction = float(minus + plus)
    h2 = half_width**2
    slope_var = (2.0 * sum(r.sigma_window**2 for r in sites) / count**2 + max(fraction, 0.0) / sum(sizes)) / h2**2
    density = ResidualDensity(fraction / (2.0 * half_width), float(half_width), fraction,
                              2.0 * bofinger_bandwidth(sum(sizes), tau), float((plus - minus) / h2),
                              float(math.sqrt(slope_var)))
    if not density.density > 0:
        raise InferenceError(f"the released fraction of residuals within +-{half_width:.3g} of the fitted quantile is "
                         f"{fraction:.3g} <= 0: no density estimate (too little budget for inference)")
    mean_q, low, repaired = _floored(np.mean([r.first.gram for r in sites], axis=0))
    weighted = sum(r.first.gram / r.num_examples for r in sites) / count**2
    omega_q, _, repaired_omega = _floored(weighted)
    gram = mean_q * np.outer(s, s)
    omega = tau * (1 - tau) * omega_q * np.outer(s, s)
    noise = math.sqrt(sum(r.first.sigma_gram**2 for r in sites)) / count
    return SandwichEstimate(gram, omega, density, density.density * gram, sizes, float(tau), low, noise,
                            repaired or repaired_omega, any(r.first.sigma_gram > 0 for r in sites))


# ---------------------------------------------------------------- the server's recursion
def estimator_weights(kind: str, rounds: int, tail_start: int) -> np.ndarray:
    """c_l, l = 1..rounds, of the released estimator (docs/algorithms.md, eq. (1.9)): the last iterate,
    the running average, or the tail average from round ``tail_start`` (the last iterate before it)."""
    c = np.zeros(rounds)
    if rounds < 1:
        raise ValueError("the fit ran no round")
    if kind == "last" or (kind == "tail_average" and rounds < tail_start):
        c[-1] = 1.0
    elif kind == "average":
        c[:] = 1.0 / rounds
    elif kind == "tail_average":
        c[tail_start - 1:] = 1.0 / (rounds - tail_start + 1)
    else:
        raise ValueError(f"unknown estimator {kind!r}")
    return c


def recursion_covariance(hessian: np.ndarray, eta_prime: np.ndarray, noise_covariances: np.ndarray,
                         weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(A, sum_l B_l V_l B_l^T) of eq. (9.5) for the recursion (9.4).

    ``eta_prime`` (L,): eta'_l; ``noise_covariances`` (L, p, p): V_l; ``weights`` (L,): c_l.
    B_L = c_L I, B_l = c_l I + B_{l+1} T_{l+1}; A = B_1 T_1.

    The run that released w_hat converged, so its recursion was stable: every eigenvalue of
    eta'_l D lay below 2.  An estimated D can put the largest just above (at the default step the
    intercept direction sits near 1.9 at tau = 0.5), where (9.4) would explode; the eigenvalues of
    eta'_l D_hat are therefore capped at :data:`STABILITY_LIMIT` = 2 (T_l's spectrum in [-1, 1]).  The
    tail average's variance is continuous up to 2 and at most about 1.5 times its value at 1.9 there,
    so the cap errs on the wide side (eq. (9.4)).
    """
    p = hessian.shape[0]
    rounds = len(weights)
    if eta_prime.shape != (rounds,) or noise_covariances.shape != (rounds, p, p):
        raise ValueError("one eta' and one noise covariance per round are needed")
    step = _steps(hessian, eta_prime)

    eye = np.eye(p)
    b = weights[-1] * eye
    cov = b @ noise_covariances[-1] @ b.T
    for l in range(rounds - 2, -1, -1):  # rounds l+1 (0-based l): B_l = c_l I + B_{l+1} T_{l+1}
        b = weights[l] * eye + b @ step(l + 1)
        cov = cov + b @ noise_covariances[l] @ b.T
    transient = b @ step(0)
    return transient, (cov + cov.T) / 2.0


def _capped(hessian: np.ndarray, eta_prime: float) -> np.ndarray:
    """eta' D with its eigenvalues kept in [0, STABILITY_LIMIT] (see :func:`recursion_covariance`)."""
    values, vectors = np.linalg.eigh((hessian + hessian.T) / 2.0)
    return (vectors * np.minimum(eta_prime * np.maximum(values, 0.0), STABILITY_LIMIT)) @ vectors.T


def _steps(hessian: np.ndarray, eta_prime: np.ndarray):
    eye = np.eye(hessian.shape[0])
    return lambda l: eye - _capped(hessian, float(eta_prime[l]))


def site_transition(hessian: np.ndarray, eta: float, eta_prime: float, rho: float) -> np.ndarray:
    """F_l of the sites' deviation recursion (9.12): (d, g) -> (P d + eta' g, -rho P d + (1 - rho eta') g),
    P = eta' (I / eta - D) (eta' D capped as in (9.4))."""
    eye = np.eye(hessian.shape[0])
    pl = eta_prime / eta * eye - _capped(hessian, eta_prime)
    return np.block([[pl, eta_prime * eye], [-rho * pl, (1.0 - rho * eta_prime) * eye]])


def check_sites_stable(hessian: np.ndarray, plan: "NoisePlanSummary") -> None:
    """Raise :class:`InferenceError` when the sites' deviations from the consensus have no stable linear
    dynamics in some round (spectral radius of F_l >= 1, eq. (9.12)).

    Then eta'_l D exceeds 1 + eta'_l / eta_l in some direction: each site overshoots the consensus by more
    than it corrects, and the sites oscillate around it with an amplitude that only the check loss's
    saturation bounds (measured on the paper's design at tau = 0.5 and the default step 3: about 20 noise
    sds in the intercept).  The linear model of the server's recursion, and with it the band, does not
    hold there.  A constant step eta below 2 / (d_max - rho) (d_max the largest eigenvalue of D) keeps
    every direction stable; the message gives 0.9 times that."""
    if plan.eta is None or plan.rho is None:
        return
    for l in range(len(plan.weights)):
        f = site_transition(hessian, float(plan.eta[l]), float(plan.eta_prime[l]), float(plan.rho[l]))
        radius = float(np.max(np.abs(np.linalg.eigvals(f))))
        if radius >= 1.0:
            d_max = float(np.linalg.eigvalsh((hessian + hessian.T) / 2)[-1])
            rho = float(plan.rho[l])
            hint = (f"; a constant step below {0.9 * 2.0 / (d_max - rho):.3g} keeps them stable" if d_max > rho
                    else "")
            raise InferenceError(f"the sites oscillate around the consensus in round {l + 1} (the step eta = "
                                 f"{float(plan.eta[l]):.3g} overshoots: eta' D reaches {float(plan.eta_prime[l]) * d_max:.3g} "
                                 f"> 1 + eta'/eta = {1 + float(plan.eta_prime[l] / plan.eta[l]):.3g}); the linear model of "
                                 f"the fit does not hold{hint}")


def evaluation_covariance(hessian: np.ndarray, plan: "NoisePlanSummary") -> np.ndarray:
    """Sigma_eval = sum_l c_{l+1} Var(wt_i^l - w°): the spread of the points a site linearizes at (its last
    release) around the fixed point, over the estimator's rounds (eq. (9.12)).

    wt_i^l - w° = (w^l - w°) + d_i^l.  The global part follows (9.4).  The site's deviation from the
    consensus, d_i = wt_i - w, and its dual g_i follow, with P_l = eta'_l (I / eta_l - D),

        d_i^l = P_l d_i^{l-1} + eta'_l g_i^{l-1} + nu_i^l,   g_i^l = g_i^{l-1} - rho_l d_i^l,

    driven by nu_i = xi_i - mean_j xi_j (covariance (1 - 1/M) U_l); the two parts are uncorrelated.  The
    site's own noise enters its next step through wt_i / eta, which is why a site's points spread by more
    than its noise alone (P's slow directions have eigenvalues near eta' / eta = 1 / (1 + rho eta)).
    """
    p = hessian.shape[0]
    if plan.eta is None or plan.rho is None or plan.site_noise_covariances is None:
        raise ValueError("the plan lacks eta, rho or the sites' noise covariances")
    rounds = len(plan.weights)
    eye = np.eye(p)
    global_cov = np.zeros((p, p))
    site_cov = np.zeros((2 * p, 2 * p))
    spread = np.zeros((p, p))
    for l in range(rounds):
        ep, rho = float(plan.eta_prime[l]), float(plan.rho[l])
        t = eye - _capped(hessian, ep)
        global_cov = t @ global_cov @ t.T + plan.noise_covariances[l]
        f = site_transition(hessian, float(plan.eta[l]), ep, rho)
        inject = np.vstack([eye, -rho * eye])
        nu = (1.0 - 1.0 / plan.num_sites) * plan.site_noise_covariances[l]
        site_cov = f @ site_cov @ f.T + inject @ nu @ inject.T
        if l + 1 < rounds:  # wt^l is where round l + 1 linearizes
            spread = spread + plan.weights[l + 1] * (global_cov + site_cov[:p, :p])
    return (spread + spread.T) / 2.0


@dataclass(frozen=True)
class NoisePlanSummary:
    """What the recursions (9.4) and (9.12) need of a fit, all public: per round eta_l, eta'_l, rho_l, the
    covariance V_l of the round's mean noise and the mean covariance U_l of one site's noise, the estimator's
    weights c_l, the penalty's mean subgradient term (lam / M) P'(w_hat), the number of sites M and the
    intercept column's value c0 (0: no intercept)."""

    eta_prime: np.ndarray
    noise_covariances: np.ndarray
    weights: np.ndarray
    penalty_gradient: np.ndarray
    eta: np.ndarray | None = None
    rho: np.ndarray | None = None
    site_noise_covariances: np.ndarray | None = None
    num_sites: int = 1
    intercept_scale: float = 0.0


@dataclass(frozen=True)
class CoefficientInference:
    """The debiased estimate w_d (eq. (9.7)) and its covariance split into sampling and privacy parts (9.8)."""

    estimate: np.ndarray
    released: np.ndarray
    sampling_covariance: np.ndarray
    privacy_covariance: np.ndarray
    transient: np.ndarray
    #: the smoothing-bias correction (eq. (9.11)): "corrected", "none (no noise)" or why it was not made
    smoothing: str = "corrected"

    @property
    def covariance(self) -> np.ndarray:
        return self.sampling_covariance + self.privacy_covariance

    @property
    def transient_norm(self) -> float:
        """||A||_2: 0 when the run forgot its start, near 1 in directions it has not learned."""
        return float(np.linalg.norm(self.transient, 2))


def coefficient_inference(w_hat: np.ndarray, sandwich: SandwichEstimate, plan: NoisePlanSummary, *,
                          debias: bool = True) -> CoefficientInference:
    """w_d and Var(w_d) of eqs. (9.7)-(9.8) (``debias=False``: centre at w_hat, A taken as 0)."""
    w_hat = np.asarray(w_hat, dtype=float)
    sandwich.check()
    d = sandwich.hessian
    d_inv = np.linalg.inv(d)
    sampling = d_inv @ sandwich.omega @ d_inv.T
    transient, noise = recursion_covariance(d, plan.eta_prime, plan.noise_covariances, plan.weights)
    check_sites_stable(d, plan)
    if debias:
        kept = float(np.linalg.svd(np.eye(d.shape[0]) - transient, compute_uv=False)[-1])
        if kept < TRANSIENT_LIMIT:
            raise InferenceError(f"the fit has not converged: it kept {100 * (1 - kept):.0f}% of its start (0) in some "
                                 "direction (||A|| near 1, eq. (9.5)); give it more rounds or a larger step")
        back = np.linalg.inv(np.eye(d.shape[0]) - transient)
        estimate = back @ w_hat + d_inv @ plan.penalty_gradient
        privacy = back @ noise @ back.T
        shift, shift_sd = smoothing_bias(sandwich, plan)
        estimate = estimate - shift
        privacy = privacy + np.outer(shift_sd, shift_sd)
        smoothing = "corrected" if np.any(shift_sd) else "none (no noise)"
    else:
        estimate, privacy, smoothing = w_hat.copy(), noise, "not corrected (debias=False)"
    return CoefficientInference(estimate, w_hat, (sampling + sampling.T) / 2, (privacy + privacy.T) / 2, transient,
                                smoothing)


def smoothing_bias(sandwich: SandwichEstimate, plan: NoisePlanSummary) -> tuple[np.ndarray, np.ndarray]:
    """(delta, sd of delta): the shift of the fixed point that the noisy linearization points cause (eq. (9.11)).

    A site evaluates its subgradient at its last release wt_i, which spreads around the fixed point with
    covariance Sigma_eval (:func:`evaluation_covariance`), so the fixed point solves the check loss's
    first-order condition with every residual smoothed by a . (wt_i - w°) ~ N(0, v(a)), v(a) = a' Sigma_eval a:
    E a (F(a . delta + Z) - tau) = 0, and to second order F(a.delta + Z) = tau + f a.delta + (f'/2) v(a), so

        delta = -(f'(q) / (2 f(q))) G^{-1} E[a v(a)],

    with E[a v(a)] from G and Sigma_eval (the intercept column is the constant c0; the scores' third moments
    are taken as 0).  The fitted quantile moves up where the density falls at the quantile (tau > 1/2 for a
    unimodal error), down where it rises, not at all for a symmetric error at the median (docs/api.md
    measured this bias).  delta is linear in f'_hat, so its sd is |delta| sd(f'_hat) / |f'_hat|.  Needs the
    sites' recursion to be stable (:func:`check_sites_stable`)."""
    dens = sandwich.density
    p = sandwich.gram.shape[0]
    zero = np.zeros(p)
    if plan.site_noise_covariances is None or dens.density <= 0 or not np.any(plan.site_noise_covariances):
        return zero, zero
    sigma = evaluation_covariance(sandwich.hessian, plan)
    g = sandwich.gram
    if plan.intercept_scale > 0:
        c0 = plan.intercept_scale
        moment = np.empty(p)
        moment[0] = c0 * float(np.sum(sigma * g))
        moment[1:] = c0 * sigma[0, 0] * g[1:, 0] + 2.0 * c0 * g[1:, 1:] @ sigma[1:, 0]
    else:
        moment = zero.copy()  # every third moment of centred-free scores: taken as 0
    unit = np.linalg.solve(g, moment) / (2.0 * dens.density)
    return -dens.slope * unit, np.abs(dens.slope_sd * unit)


# ---------------------------------------------------------------- bands
@dataclass(frozen=True)
class ConfidenceBand:
    """Pointwise and simultaneous confidence bands for beta(t) on the grid and an interval for the intercept.

    Attributes
    ----------
    grid : (G,) the model's grid
    estimate : (G,) beta_d(t), the debiased estimate (eq. (9.7)) on the grid
    sd, sd_sampling, sd_privacy : (G,) its standard error and the two parts of its variance
        (sd^2 = sd_sampling^2 + sd_privacy^2)
    pointwise : (2, G) lower and upper pointwise limits, estimate -+ z sd
    simultaneous : (2, G) lower and upper simultaneous limits, estimate -+ c sd
    critical_pointwise, critical_simultaneous : z = Phi^{-1}((1 + level) / 2) and c
    intercept, intercept_sd, intercept_sd_sampling, intercept_sd_privacy, intercept_interval
    level : the nominal coverage
    coefficients : the :class:`CoefficientInference` (w_d, covariances, the transient A)
    sandwich : the :class:`SandwichEstimate`
    """

    grid: np.ndarray
    estimate: np.ndarray
    sd: np.ndarray
    sd_sampling: np.ndarray
    sd_privacy: np.ndarray
    pointwise: np.ndarray
    simultaneous: np.ndarray
    critical_pointwise: float
    critical_simultaneous: float
    intercept: float
    intercept_sd: float
    intercept_sd_sampling: float
    intercept_sd_privacy: float
    intercept_interval: tuple[float, float]
    level: float
    coefficients: CoefficientInference = field(repr=False)
    sandwich: SandwichEstimate = field(repr=False)

    def at(self, points) -> dict[str, np.ndarray]:
        """Estimate, sd and both bands at ``points`` (linear interpolation on the grid)."""
        t = np.atleast_1d(np.asarray(points, dtype=float))
        if np.any(t < self.grid[0] - 1e-12) or np.any(t > self.grid[-1] + 1e-12):
            raise ValueError(f"points: outside the grid's range [{self.grid[0]:g}, {self.grid[-1]:g}]")
        f = lambda v: np.interp(t, self.grid, v)  # noqa: E731
        return {"t": t, "estimate": f(self.estimate), "sd": f(self.sd),
                "pointwise_lower": f(self.pointwise[0]), "pointwise_upper": f(self.pointwise[1]),
                "simultaneous_lower": f(self.simultaneous[0]), "simultaneous_upper": f(self.simultaneous[1])}

    def to_frame(self):
        """The band on the grid as a pandas DataFrame (t, estimate, sd, sd_sampling, sd_privacy, limits)."""
        import pandas as pd

        return pd.DataFrame({"t": self.grid, "estimate": self.estimate, "sd": self.sd,
                             "sd_sampling": self.sd_sampling, "sd_privacy": self.sd_privacy,
                             "pointwise_lower": self.pointwise[0], "pointwise_upper": self.pointwise[1],
                             "simultaneous_lower": self.simultaneous[0],
                             "simultaneous_upper": self.simultaneous[1]})

    def plot(self, ax=None, *, truth=None, label: str = "beta_hat", truth_label: str = "truth"):
        """Draw the estimate with both bands on a matplotlib axis (created when ``ax`` is None); ``truth``:
        values on the grid or a callable of t, drawn dashed (``truth_label``).  Returns the axis."""
        if ax is None:
            import matplotlib.pyplot as plt

            _, ax = plt.subplots(figsize=(6, 3.5))
        pct = f"{100 * self.level:g}%"
        ax.fill_between(self.grid, *self.simultaneous, color="tab:blue", alpha=0.18, lw=0,
                        label=f"simultaneous {pct}")
        ax.fill_between(self.grid, *self.pointwise, color="tab:blue", alpha=0.35, lw=0, label=f"pointwise {pct}")
        ax.plot(self.grid, self.estimate, color="tab:blue", lw=1.6, label=label)
        if truth is not None:
            values = truth(self.grid) if callable(truth) else np.asarray(truth, dtype=float)
            ax.plot(self.grid, values, "k--", lw=1.2, label=truth_label)
        ax.set_xlabel("t")
        ax.set_ylabel("beta(t)")
        ax.legend(loc="best", fontsize=8)
        return ax


def band_from_coefficients(inference: CoefficientInference, sandwich: SandwichEstimate, *,
                           beta_map: np.ndarray, intercept_map: np.ndarray, intercept_offset: float,
                           grid: np.ndarray, level: float = 0.95, draws: int = 20000,
                           seed: int = 0) -> ConfidenceBand:
    """The bands of beta(t) = beta_map @ w (beta_map (G, p)) and alpha = intercept_offset + intercept_map . w.

    The simultaneous critical value is the ``level``-quantile of max_t |Z(t)| / sd(t) over ``draws``
    draws of Z = beta_map @ N(0, Var(w_d)) (generator seeded by ``seed``: the band is reproducible).
    """
    if not 0 < level < 1:
        raise ValueError(f"level: expected a number in (0, 1), got {level!r}")
    if not (isinstance(draws, (int, np.integer)) and draws >= 100):
        raise ValueError(f"draws: expected an integer >= 100, got {draws!r}")
    cov_s, cov_p = inference.sampling_covariance, inference.privacy_covariance
    cov = cov_s + cov_p

    def sd_of(c):
        return np.sqrt(np.maximum(np.einsum("gp,pq,gq->g", beta_map, c, beta_map), 0.0))

    sd, sd_s, sd_p = sd_of(cov), sd_of(cov_s), sd_of(cov_p)
    estimate = beta_map @ inference.estimate
    z = NormalDist().inv_cdf((1 + level) / 2)
    values, vectors = np.linalg.eigh(cov)
    root = vectors * np.sqrt(np.maximum(values, 0.0))
    rng = np.random.default_rng(seed)
    paths = (rng.standard_normal((draws, root.shape[1])) @ root.T) @ beta_map.T
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(sd > 0, np.abs(paths) / np.where(sd > 0, sd, 1.0), 0.0)
    c = float(np.quantile(ratio.max(axis=1), level))
    a_sd = float(np.sqrt(max(intercept_map @ cov @ intercept_map, 0.0)))
    a = float(intercept_offset + intercept_map @ inference.estimate)
    return ConfidenceBand(
        grid=np.asarray(grid, dtype=float), estimate=estimate, sd=sd, sd_sampling=sd_s, sd_privacy=sd_p,
        pointwise=np.vstack([estimate - z * sd, estimate + z * sd]),
        simultaneous=np.vstack([estimate - c * sd, estimate + c * sd]),
        critical_pointwise=float(z), critical_simultaneous=c, intercept=a, intercept_sd=a_sd,
        intercept_sd_sampling=float(np.sqrt(max(intercept_map @ cov_s @ intercept_map, 0.0))),
        intercept_sd_privacy=float(np.sqrt(max(intercept_map @ cov_p @ intercept_map, 0.0))),
        intercept_interval=(a - z * a_sd, a + z * a_sd), level=float(level),
        coefficients=inference, sandwich=sandwich)
