"""Prototype of the FDP-ADMM family in the data-term protocol (issue 29 study; not part of the package).

Each round the server names a point x and every site i releases only its noisy DATA TERM, the
record-mean of the loss subgradient on its clipped rows at x,

    u_i = (1/m_i) sum_j grad l(x; a_ij, y_ij) + N(0, (z_l 2 G / m_i)^2 diag(S)^2),            (P.1)

with S the public noise shape of the clip (ones for the sphere, G = max(tau, 1 - tau) c1; (c1,
c1 sqrt(lambda_k)) for the ellipsoid, G = max(tau, 1 - tau)).  One replaced record moves the
data term by at most 2 G / m_i in the S-metric, so (P.1) is the Gaussian mechanism with multiplier
z_l, whatever x is, as long as x is a function of released values.  L releases of multipliers z_l
compose to one Gaussian with mu = (sum_l z_l^-2)^(1/2): the budget fixes sum_l z_l^-2 and nothing else.
Everything else is the server's (post-processing):

- :func:`run_admm`: Zhou & Xiang's (2022) linearized ADMM written in this form (the site's step (1.2)
  evaluated by the server from u_i; ``anchor='own'`` is today's rule, the point named to site i
  being its own last noisy primal wt_i; ``anchor='global'`` names the global iterate w instead);
- :func:`run_ppg`: preconditioned proximal gradient on F(x) = (1/M) sum_i f_i(x) (equal site weights, the
  FDP-ADMM objective / M) with a public diagonal preconditioner, a curvature scalar, a budget
  split between a short transient and an averaging phase, and the average of the second phase.

Pure numpy, explicit ``np.random.Generator``.  The data come from the package's own pure
functions (bases, clipping, intercept design), so the features are the runs' features.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
from scipy import special

from fdp_flower.core.clipping import clip_rows, clip_rows_ellipsoid, intercept_design


# ---------------------------------------------------------------- problem
@dataclass(frozen=True)
class Problem:
    """The clipped rows of every site and the public constants of the mechanism."""

    features: list  # (m_i, d) per site; intercept column first when ``free`` = 1
    responses: list  # (m_i,) per site
    tau: float
    penalty: str  # "l1", "l2", "none"
    lam: float  # weight of P in sum_i f_i (each site carries lam / M)
    free: int  # leading coordinates outside the penalty (1 with an intercept)
    scales: np.ndarray  # (d,) S: the noise shape (the clip metric)
    gradient_bound: float  # G: ||grad_j / S|| <= G for every record
    second_moments: np.ndarray  # (d,) public approximation of diag E[a a^T] (preconditioner)

    @property
    def num_sites(self) -> int:
        return len(self.features)

    @property
    def dim(self) -> int:
        return int(self.features[0].shape[1])

    @property
    def sizes(self) -> np.ndarray:
        return np.array([len(y) for y in self.responses], dtype=float)

    @property
    def lam_site(self) -> float:
        return self.lam / self.num_sites


def build_problem(site_scores: list, site_responses: list, *, tau: float, penalty: str = "l1", lam: float = 0.05,
                  clip: float = 3.0, shape: str = "sphere", eigenvalues: np.ndarray | None = None,
                  intercept: bool = True, share: float = 0.5) -> Problem:
    """Clip each site's scores as the package does (:mod:`fdp_flower.core.clipping`), optionally with the
    intercept column, and record the public constants.  ``eigenvalues``: the basis's score variances
    (needed by the ellipsoid; used as the preconditioner's scores part when given)."""
    k = site_scores[0].shape[1]
    score_scales = None if shape == "sphere" else clip * np.sqrt(np.asarray(eigenvalues, float))
    feats = []
    for a in site_scores:
        if intercept:
            f, _ = intercept_design(a, clip, share, score_scales)
        elif score_scales is None:
            f, _ = clip_rows(a, clip)
        else:
            f, _ = clip_rows_ellipsoid(a, score_scales)
        feats.append(f)
    g = max(tau, 1 - tau) * (clip if shape == "sphere" else 1.0)
    if shape == "sphere":
        scales = np.ones(k + int(intercept))
    else:
        scales = np.r_[[clip] if intercept else [], score_scales]
    lam_k = np.ones(k) if eigenvalues is None else np.asarray(eigenvalues, float)
    moments = np.r_[[(share * clip) ** 2] if intercept else [], lam_k]
    return Problem(feats, [np.asarray(y, float) for y in site_responses], tau, penalty, lam, int(intercept),
                   scales, g, moments)


# ---------------------------------------------------------------- site computations
def data_terms(problem: Problem, x: np.ndarray, *, bandwidth: float = 0.0) -> np.ndarray:
    """(M, d): every site's record-mean subgradient of the check loss at x ((d,) shared or (M, d) one per
    site).  ``bandwidth`` h > 0: the gradient of the Gaussian-smoothed check loss
    E rho_tau(r + h Z), -(1/m) sum_j a_j (tau - Phi(-r_j / h)), which has the same bound G."""
    out = []
    for i, (a, y) in enumerate(zip(problem.features, problem.responses)):
        xi = x if x.ndim == 1 else x[i]
        r = y - a @ xi
        if bandwidth > 0:
            below = special.ndtr(-r / bandwidth)
        else:
            below = (r <= 0).astype(float)
        out.append(-(problem.tau - below) @ a / len(y))
    return np.array(out)


def density_terms(problem: Problem, x: np.ndarray, bandwidth: float) -> np.ndarray:
    """(M,): every site's (1/m) sum_j 1{|r_j| <= h} / (2 h) at x, the residual density at the fitted
    quantile (replace-one sensitivity 1 / (2 h m_i))."""
    return np.array([np.mean(np.abs(y - a @ x) <= bandwidth) / (2 * bandwidth)
                     for a, y in zip(problem.features, problem.responses)])


def release_noise(problem: Problem, z: float, rng: np.random.Generator) -> np.ndarray:
    """(M, d): the Gaussian noise of one round's releases (P.1) at multiplier z (0: none)."""
    if z == 0:
        return np.zeros((problem.num_sites, problem.dim))
    sd = (z * 2.0 * problem.gradient_bound / problem.sizes)[:, None] * problem.scales[None, :]
    return sd * rng.standard_normal((problem.num_sites, problem.dim))


def penalty_gradient(problem: Problem, x: np.ndarray) -> np.ndarray:
    g = np.zeros_like(x)
    if problem.penalty == "l2":
        g[..., problem.free:] = x[..., problem.free:]
    elif problem.penalty == "l1":
        g[..., problem.free:] = np.sign(x[..., problem.free:])
    return g


def objective(problem: Problem, x: np.ndarray) -> float:
    """sum_i f_i(x) (the exact reference's objective)."""
    total = 0.0
    for a, y in zip(problem.features, problem.responses):
        r = y - a @ x
        total += float(np.mean(r * (problem.tau - (r <= 0))))
    p = x[problem.free:]
    if problem.penalty == "l1":
        total += problem.lam * float(np.abs(p).sum())
    elif problem.penalty == "l2":
        total += problem.lam * float(p @ p) / 2
    return total


def exact_solution(problem: Problem) -> np.ndarray:
    """The exact minimizer of sum_i f_i (the package's LP / QP reference)."""
    from fdp_flower.algorithms.fdp_admm.reference import solve_reference
    from fdp_flower.core.losses import make_loss
    from fdp_flower.core.penalties import Penalty

    ref = solve_reference(problem.features, problem.responses, make_loss("quantile", tau=problem.tau),
                          Penalty(problem.penalty, unpenalized=problem.free), problem.lam)
    return ref.w


# ---------------------------------------------------------------- budget
def total_mu(eps: float, delta: float) -> float:
    """mu of the one Gaussian that spends exactly (eps, delta) (the budget: sum of all z^-2 = mu^2)."""
    from fdp_flower.privacy.calibration import target_mu

    return target_mu(eps, delta)


def split_multipliers(mu: float, shares: np.ndarray) -> np.ndarray:
    """z of releases that get the given shares of mu^2 (the zCDP budget): z_j = 1 / (mu sqrt(p_j))."""
    shares = np.asarray(shares, float)
    return 1.0 / (mu * np.sqrt(shares))


# ---------------------------------------------------------------- today's rule in this form
@dataclass
class Trace:
    iterates: np.ndarray  # (L, d) the global iterates (or server iterates)
    estimate: np.ndarray  # (d,) the released estimator
    extra: dict = field(default_factory=dict)


def run_admm(problem: Problem, *, rounds: int, eta: float, rho: float, z: np.ndarray | float,
             rng: np.random.Generator, anchor: str = "own", tail_fraction: float = 0.5,
             step_units: float = 1.0) -> Trace:
    """Linearized ADMM (docs/algorithms.md, eqs. (1.2)-(1.5)) from data terms: the primal of site i is
    w_i = (g_i + rho w + p_i / eta - u_i - (lam/M) P'(p_i)) / (rho + 1/eta), released as
    wt_i = w_i - noise_i / (rho + 1/eta) (the same numbers as a noisy primal, Lemma 2); p_i, the point
    named to site i, is wt_i (``anchor='own'``, today's rule) or the global w (``'global'``).
    Returns the tail average of the last ``tail_fraction`` of the global iterates."""
    m, d = problem.num_sites, problem.dim
    zs = np.broadcast_to(np.asarray(z, float), (rounds,))
    eta = eta * step_units
    w = np.zeros(d)
    duals = np.zeros((m, d))
    released = np.zeros((m, d))
    iterates = []
    for l in range(rounds):
        points = released if anchor == "own" else np.broadcast_to(w, (m, d))
        u = data_terms(problem, points) + release_noise(problem, float(zs[l]), rng)
        u = u + problem.lam_site * penalty_gradient(problem, points)
        released = (duals + rho * w + points / eta - u) / (rho + 1.0 / eta)
        w = released.mean(axis=0) - duals.sum(axis=0) / (m * rho)
        duals = duals - rho * (released - w)
        iterates.append(w.copy())
    it = np.array(iterates)
    start = rounds - max(1, math.ceil(tail_fraction * rounds - 1e-9))
    return Trace(it, it[start:].mean(axis=0))


# ---------------------------------------------------------------- preconditioned proximal gradient
def prox(problem: Problem, v: np.ndarray, step: np.ndarray) -> np.ndarray:
    """argmin_x (lam/M) P(x) + sum_k (x_k - v_k)^2 / (2 step_k) (``step`` (d,)); l2 is handled in the
    gradient instead (it returns v)."""
    if problem.penalty != "l1":
        return v
    out = v.copy()
    t = step[problem.free:] * problem.lam_site
    out[problem.free:] = np.sign(v[problem.free:]) * np.maximum(np.abs(v[problem.free:]) - t, 0.0)
    return out


class Metric:
    """The server's quadratic model H = f D + (lam / M) 1_{l2} with D the public second moments: a vector
    (diagonal) or a (d, d) matrix (a released Gram matrix).  ``newton(g)`` = a H^-1 g; ``prox(v)`` =
    argmin_x (1/2a) (x - v)' H (x - v) + (lam / M) ||x_pen||_1 (soft-threshold for a diagonal H, coordinate
    descent otherwise; v for the l2 and no penalty, whose curvature is in H)."""

    def __init__(self, problem: Problem, moments: np.ndarray, curvature: float, step: float):
        d = problem.dim
        self.problem, self.step = problem, step
        ridge = (problem.lam_site if problem.penalty == "l2" else 0.0) * (np.arange(d) >= problem.free)
        moments = np.asarray(moments, float)
        self.full = moments.ndim == 2
        self.hess = curvature * moments + (np.diag(ridge) if self.full else ridge)
        self.inverse = np.linalg.inv(self.hess) if self.full else 1.0 / self.hess

    def newton(self, g: np.ndarray) -> np.ndarray:
        return self.step * (self.inverse @ g if self.full else self.inverse * g)

    def inverse_diagonal(self) -> np.ndarray:
        return np.diag(self.inverse) if self.full else self.inverse

    def prox(self, v: np.ndarray) -> np.ndarray:
        p = self.problem
        if p.penalty != "l1":
            return v
        if not self.full:
            return prox(p, v, self.step * self.inverse)
        q = self.hess / self.step
        lam = p.lam_site
        x = v.copy()
        for _ in range(100):
            old = x.copy()
            for k in range(p.dim):
                r = q[k, k] * v[k] - (q[k] @ (x - v) - q[k, k] * (x[k] - v[k]))
                # minimize (1/2) q_kk x_k^2 - x_k (q_kk v_k - sum_{j != k} q_kj (x_j - v_j)) + lam |x_k|
                if k < p.free:
                    x[k] = r / q[k, k]
                else:
                    x[k] = np.sign(r) * max(abs(r) - lam, 0.0) / q[k, k]
            if np.max(np.abs(x - old)) < 1e-12:
                break
        return x


@dataclass(frozen=True)
class PPGSettings:
    rounds: int = 30
    transient: int = 10  # rounds before the averaging phase
    transient_share: float = 0.1  # share of the fit's budget (mu^2) spent in the transient
    step: float = 1.0  # a: the step in Newton units, x <- x - a (f D + c)^-1 g
    first_step: float = 0.5  # a of the rounds before the first curvature update (secant only)
    bandwidths: tuple = ()  # smoothing h per round (empty: none); the last value repeats
    average: str = "phase2"  # "phase2": mean of the averaging phase's iterates; "prox_of_mean": prox of the
    #                          mean of the pre-prox points of the averaging phase; "last"; "dual": in the
    #                          averaging phase the server names x_{k+1} = prox(mean of v_1..v_k), v_j = x_j - a H^-1 g_j
    #                          (each v_j a one-shot Newton estimate made at the current average), and releases
    #                          prox(mean of all v_j)
    preconditioner: str = "diag"  # "diag": the public second moments; "identity"
    curvature: str = "given"  # "given": the curvature argument; "secant": estimated in the transient
    secant_clamp: float = 4.0  # one update moves f by at most this factor
    shrink: float = 0.0  # c of the final coordinatewise shrinkage x_k (1 - c V_k / x_k^2)_+ (0: none)
    shrink_mode: str = "js"  # "js": the positive-part rule above; "eb": empirical-Bayes generalized ridge
    eb_min_alpha: float = 0.0  # the smallest decay exponent of the EB prior (1: the source condition)
    step2: float | None = None  # a of the averaging phase (None: ``step``)
    final_density: bool = False  # release one more density at the last point (from the density budget) and
    #                              recompute the dual average's one-shot estimates and the noise variances with it
    secant_window: int = 0  # the secant uses the last this many round pairs (0: all of the transient)
    curvature_floor: float = 1.0  # f never falls below this times the starting value (the normal-law guess
    #                               phi(Phi^-1(tau)) / s from the response's scale: a lower bound of the residual
    #                               density whenever the residuals are less spread than the response)
    density_rounds: tuple = (2, 5)  # curvature "density": rounds (0-based) after whose gradient a density is released
    density_share: float = 0.02  # share of mu^2 of all density releases together (split equally)
    density_bandwidths: tuple = (0.25, 0.1)  # h of each density release: first x the response scale, then / f
    density_bandwidth_rule: str = "inverse_f"  # later releases: "inverse_f": h = density_bandwidths[j] / f;
    #                                            "normal_sd": h = density_bandwidths[j] phi(Phi^-1(tau)) / f (a fraction of
    #                                            the normal-equivalent residual sd, narrower at the tails)


def _secant(pairs: list, moments: np.ndarray) -> float | None:
    """f from released gradients: sum <dg, dx> / sum <dx, D dx> over consecutive rounds (None if <= 0)."""
    num = sum(float(dg @ dx) for dx, dg in pairs)
    den = sum(float(dx @ (moments * dx)) for dx, dg in pairs)
    if den <= 0 or num <= 0:
        return None
    return num / den


def run_ppg(problem: Problem, *, settings: PPGSettings, curvature: float, mu: float | None,
            rng: np.random.Generator, start: np.ndarray | None = None, response_scale: float = 1.0,
            mu_total: float | None = None) -> Trace:
    """Proximal preconditioned gradient in the data-term protocol.

    x_{l+1} = prox(x_l - a H^-1 (gbar_l + (lam/M) P'_smooth(x_l))),  H = f D + (lam / M) 1_{l2},
    gbar_l = (1/M) sum_i u_i(x_l) (P.1), D = diag of the public second moments, f the residual density at
    the quantile (``curvature``: given, or its starting value when ``settings.curvature`` is
    ``secant``, then estimated from the released gradients of the transient and frozen after it).
    ``mu``: the fit's budget (None: no noise); the transient gets ``transient_share`` of mu^2 over its
    rounds, the averaging phase the rest.  ``settings.curvature == 'density'``: f is the pooled noisy
    residual density (:func:`density_terms`) released after the gradients of ``density_rounds``, each with
    ``density_share / len(density_rounds)`` of ``mu_total``^2 (charged on top of ``mu``; the caller
    splits the budget), the first with bandwidth ``density_bandwidths[0] * response_scale``, the next
    with ``density_bandwidths[j] / f`` (f the previous estimate).  Returns the average of the averaging
    phase."""
    s = settings
    d = problem.dim
    moments = problem.second_moments if s.preconditioner == "diag" else np.ones(d)
    if mu is None:
        zs = np.zeros(s.rounds)
    else:
        t1, t2 = s.transient, s.rounds - s.transient
        if t1 == 0:
            shares = np.full(s.rounds, 1.0 / s.rounds)
        else:
            shares = np.r_[np.full(t1, s.transient_share / t1), np.full(t2, (1 - s.transient_share) / t2)]
        zs = split_multipliers(mu, shares)
    f = float(curvature)
    mu_total = mu if mu_total is None else mu_total
    x = np.zeros(d) if start is None else start.copy()
    iterates, pre, pairs, fs, grads = [], [], [], [], []
    previous = None
    for l in range(s.rounds):
        h = s.bandwidths[min(l, len(s.bandwidths) - 1)] if s.bandwidths else 0.0
        g = data_terms(problem, x, bandwidth=h).mean(axis=0) + release_noise(problem, float(zs[l]), rng).mean(axis=0)
        if s.curvature == "secant" and l < s.transient:
            if previous is not None:
                pairs.append((x - previous[0], g - previous[1]))
                est = _secant(pairs[-s.secant_window:] if s.secant_window else pairs, moments)
                if est is not None:
                    f = float(np.clip(est, f / s.secant_clamp, f * s.secant_clamp))
            previous = (x.copy(), g.copy())
        if s.curvature == "density" and l in s.density_rounds:
            j = s.density_rounds.index(l)
            h = s.density_bandwidths[0] * response_scale if j == 0 else _later_bandwidth(s, j, f, problem.tau)
            f = float(np.clip(_density_release(problem, x, h, mu, mu_total, s, rng),
                              max(f / s.secant_clamp, s.curvature_floor * float(curvature)), f * s.secant_clamp))
        fs.append(f)
        a = s.first_step if ((s.curvature == "secant" and not pairs) or
                             (s.curvature == "density" and l < s.density_rounds[0])) else s.step
        if l >= s.transient and s.step2 is not None:
            a = s.step2
        metric = Metric(problem, moments, f, a)
        if problem.penalty == "l2":
            g = g + problem.lam_site * penalty_gradient(problem, x)
        iterates.append(x.copy())  # the point this round's releases were made at
        grads.append(g)
        v = x - metric.newton(g)
        pre.append(v)
        if s.average == "dual" and l >= s.transient:
            x = metric.prox(np.mean(pre[s.transient:], axis=0))
        else:
            x = metric.prox(v)
    if s.final_density and s.curvature == "density":
        # the density at the last point (near the optimum: the least smoothed by the iterate's own noise)
        f = float(np.clip(_density_release(problem, x, _later_bandwidth(s, len(s.density_bandwidths) - 1, f, problem.tau),
                                           mu, mu_total, s, rng),
                          0.25 * float(curvature), f * s.secant_clamp))
        fs.append(f)
        metric = Metric(problem, moments, f, s.step if s.step2 is None else s.step2)
        if s.average == "dual":
            pre = pre[: s.transient] + [xk - metric.newton(gk) for xk, gk in
                                        zip(iterates[s.transient:], grads[s.transient:])]
    it = np.array(iterates + [x])
    if s.average == "last":
        est = x
    elif s.average in ("prox_of_mean", "dual"):
        est = metric.prox(np.mean(pre[s.transient:], axis=0))
    else:
        est = it[s.transient + 1:].mean(axis=0)
    if (s.shrink > 0 or s.shrink_mode == "eb") and mu is not None:
        var = averaged_noise_variance(problem, zs[s.transient:], 1.0 / metric.inverse_diagonal())
        if s.shrink_mode == "eb":
            factor = np.ones_like(est)
            factor[problem.free:] = eb_shrinkage(est[problem.free:], var[problem.free:],
                                                 problem.second_moments[problem.free:] if problem.second_moments.ndim == 1
                                                 else np.diag(problem.second_moments)[problem.free:],
                                                 min_alpha=s.eb_min_alpha)
        else:
            factor = np.clip(1.0 - s.shrink * var / np.maximum(est**2, 1e-300), 0.0, 1.0)
            factor[: problem.free] = 1.0
        est = est * factor
    return Trace(it, est, {"multipliers": zs, "curvature": np.array(fs)})


def _later_bandwidth(s: "PPGSettings", j: int, f: float, tau: float) -> float:
    c = s.density_bandwidths[min(j, len(s.density_bandwidths) - 1)]
    if s.density_bandwidth_rule == "normal_sd":
        return c * _normal_density_at_quantile(tau) / f
    return c / f


def _normal_density_at_quantile(tau: float) -> float:
    from scipy import stats

    return float(stats.norm.pdf(stats.norm.ppf(tau)))


def _density_release(problem: Problem, x: np.ndarray, h: float, mu, mu_total, s: PPGSettings,
                     rng: np.random.Generator) -> float:
    """The pooled (equal site weights) noisy residual density at x with bandwidth h (:func:`density_terms`),
    each release taking density_share / (number of density releases) of mu_total^2."""
    dens = density_terms(problem, x, h)
    if mu is not None:
        count = len(s.density_rounds) + int(s.final_density)
        zd = 1.0 / (mu_total * math.sqrt(s.density_share / count))
        dens = dens + zd / (2 * h * problem.sizes) * rng.standard_normal(problem.num_sites)
    return float(dens.mean())


def eb_shrinkage(x: np.ndarray, noise_var: np.ndarray, moments: np.ndarray, *, min_alpha: float = 0.0) -> np.ndarray:
    """Factors s_k / (s_k + V_k) of the empirical-Bayes generalized ridge: the exact coefficients are modelled
    as theta_k ~ N(0, s_k), s_k = c m_k^alpha (m_k the public second moment of direction k), the released
    x_k = theta_k + N(0, V_k) with V_k the public noise variance; (c, alpha) maximize the marginal likelihood
    of the x_k (a grid; post-processing of released values).  Directions with a large signal keep factor ~1,
    noisy directions whose coefficients look small go to 0 (what early stopping did implicitly).
    ``min_alpha`` = 1 is the source condition of functional linear regression (theta_k^2 decaying at least
    like the score variances; Hall & Horowitz 2007 assume |theta_k| <= C k^-b, lambda_k ~ k^-a, b > a/2 + 1)."""
    x2 = np.asarray(x, float) ** 2
    m = np.asarray(moments, float) / float(np.max(moments))
    best, best_ll = None, -np.inf
    for alpha in np.linspace(min_alpha, 4.0, int(round((4.0 - min_alpha) / 0.05)) + 1):
        base = m**alpha
        for logc in np.linspace(-14.0, 6.0, 201):
            tot = math.exp(logc) * base + noise_var
            ll = -0.5 * float(np.sum(np.log(tot) + x2 / tot))
            if ll > best_ll:
                best_ll, best = ll, math.exp(logc) * base
    return best / (best + noise_var)


def averaged_noise_variance(problem: Problem, multipliers: np.ndarray, hessian_diag: np.ndarray) -> np.ndarray:
    """(d,) variance of H^-1 times the mean over the given rounds of the site-averaged release noise:
    the noise left in a Polyak average (public: z_l, m_i, G, S and the server's H)."""
    sites = (2.0 * problem.gradient_bound / problem.sizes) ** 2  # (M,)
    per_round = np.outer(np.asarray(multipliers, float) ** 2, problem.scales**2) * sites.sum() / problem.num_sites**2
    return per_round.sum(axis=0) / len(multipliers) ** 2 / hessian_diag**2


# ---------------------------------------------------------------- the privacy-cost table's problems
def problem_of_scenario(scenario, data) -> Problem:
    """The :class:`Problem` of a privacy-cost scenario (benchmarks/privacy_cost.py) on its shared setup
    (pooled FPCA, the run's clip): the same clipped rows, noise shape and G as the package's runs."""
    from fdp_flower.algorithms.fdp_admm.plan import build_objective, noise_plan, noise_scales

    y = data.site_for(scenario).response
    sizes = [int(m) for m in data.sizes]
    feats = [np.ascontiguousarray(data.site.features[i, :m]) for i, m in enumerate(sizes)]
    resp = [np.ascontiguousarray(y[i, :m]) for i, m in enumerate(sizes)]
    plan = noise_plan(scenario, data.basis)
    scales = noise_scales(scenario, data.basis)
    dim = feats[0].shape[1]
    scales = np.ones(dim) if scales is None else scales
    lam = np.asarray(data.basis.eigenvalues, float)
    m = scenario.model
    moments = np.r_[[(m.intercept_share * m.clip_c1) ** 2] if m.intercept else [], lam]
    ob = build_objective(scenario)
    return Problem(feats, resp, m.loss.tau, m.penalty.kind, ob.lam, int(m.intercept), scales,
                   float(plan.gradient_bound), moments)


def error_density(design_name: str, tau: float) -> float:
    """f(q_tau) of a simulated design's error law (the oracle curvature; the floor uses it too)."""
    from scipy import stats

    from fdp_flower.functional import design

    d = design.get_design(design_name)
    law = {"t3": stats.t(3), "normal": stats.norm(), "cauchy": stats.cauchy()}[d.error_law]
    return float(law.pdf(law.ppf(tau)) / d.error_scale)


# ---------------------------------------------------------------- location and scale of the response
@dataclass(frozen=True)
class LocationScale:
    location: float  # the pooled median of y (noisy)
    scale: float  # (q75 - q25) / 1.349 of y (noisy), > 0
    brackets: np.ndarray  # (3, 2) final brackets of q25, q50, q75
    multipliers: np.ndarray  # z of every round's release (for the ledger)


def location_scale(responses: list, *, bounds: tuple[float, float], mu: float | None, rng: np.random.Generator,
                   rounds: int = 3, thresholds: int = 15, round_shares=(0.15, 0.25, 0.6),
                   levels=(0.25, 0.5, 0.75), margin: int = 1) -> LocationScale:
    """Private pooled quartiles of the response by a ``thresholds + 1``-ary noisy search inside the public
    ``bounds`` the sites declare (values outside count as at the bounds).

    Round r: the server names, for every level p, ``thresholds`` equispaced points inside that level's
    bracket; site i releases the shares (1/m_i) #{y_ij <= t} at all of them (a vector of
    3 x thresholds shares) + N(0, (z_r sqrt(3 thresholds) / m_i)^2 I): one replaced record changes each
    share by at most 1/m_i, so the l2 sensitivity is sqrt(3 thresholds) / m_i.  The server pools the
    shares with weights m_i / n and keeps, per level, the first sub-interval whose right end has pooled
    share >= p.  ``mu``: this phase's budget (sum_r z_r^-2 = mu^2), split over the rounds by
    ``round_shares``; None: no noise.  Location = the median, scale = IQR / 1.349 (floored at the last
    bracket's width).  Equivariant: bounds and responses transformed by a + b y give a + b location
    and |b| scale for the same noise draws (b > 0)."""
    lo, hi = float(bounds[0]), float(bounds[1])
    if not hi > lo:
        raise ValueError(f"bounds: need lo < hi, got {bounds}")
    sizes = np.array([len(y) for y in responses], dtype=float)
    weights = sizes / sizes.sum()
    shares = np.asarray(round_shares[:rounds], float)
    shares = shares / shares.sum()
    zs = np.zeros(rounds) if mu is None else 1.0 / (mu * np.sqrt(shares))
    brackets = np.array([[lo, hi]] * len(levels), dtype=float)
    sens = math.sqrt(len(levels) * thresholds)
    for r in range(rounds):
        points = np.array([np.linspace(a, b, thresholds + 2)[1:-1] for a, b in brackets])  # (3, T)
        pooled = np.zeros_like(points)
        for w, y, m in zip(weights, responses, sizes):
            share = (y[None, None, :] <= points[..., None]).mean(axis=-1)
            noise = zs[r] * sens / m * rng.standard_normal(points.shape)
            pooled += w * (share + noise)
        new = []
        for (a, b), pts, s, p in zip(brackets, points, pooled, levels):
            edges = np.r_[a, pts, b]
            # the cut j (quantile in [edges[j], edges[j+1]]) that disagrees with the fewest noisy shares:
            # shares left of the cut should be < p, those right of it >= p (robust to single noisy shares)
            above = (s >= p).astype(int)
            wrong = np.array([above[:j].sum() + (1 - above[j:]).sum() for j in range(len(pts) + 1)])
            j = int(np.argmin(wrong))
            lo_j, hi_j = max(j - margin, 0), min(j + 1 + margin, len(pts) + 1)
            new.append([edges[lo_j], edges[hi_j]])
        brackets = np.array(new)
    mids = brackets.mean(axis=1)
    width = float(np.max(brackets[:, 1] - brackets[:, 0]))
    scale = max((mids[-1] - mids[0]) / (2 * _normal_quantile(levels[-1])), width)
    location = float(mids[len(levels) // 2]) if len(levels) % 2 else float((mids[0] + mids[-1]) / 2)
    return LocationScale(location, float(scale), brackets, zs)


def _normal_quantile(p: float) -> float:
    from scipy import stats

    return float(stats.norm.ppf(p))


@dataclass(frozen=True)
class Budget:
    """Shares of the whole run's mu^2 (the zCDP budget): location/scale, curvature (density), the fit."""

    location_scale: float = 0.08
    density: float = 0.02
    calibration: float = 0.0  # the intercept calibration at the released slopes (models with an intercept)
    calibration_rounds: int = 5

    @property
    def fit(self) -> float:
        return 1.0 - self.location_scale - self.density - self.calibration

    @classmethod
    def for_sample(cls, sizes, mu: float, *, intercept: bool, reference_n: float = 2500.0,
                   reference_mu: float = 0.268) -> "Budget":
        """The shares of the auxiliary releases for a federation of public sizes m_i at budget mu: their noise,
        relative to what they estimate, falls like 1 / (n mu sqrt(share)), so the shares that suffice at
        n = 2500, eps = 1 (location/scale 8%, density 2%, intercept calibration 10%) shrink like
        (2500 x 0.268 / (n mu))^2, down to floors of 1%, 0.5% and 2%.  A function of public values only."""
        n = float(np.sum(sizes))
        factor = min(1.0, (reference_n * reference_mu / (n * mu)) ** 2)
        return cls(location_scale=max(0.01, 0.08 * factor), density=max(0.005, 0.02 * factor),
                   calibration=max(0.02, 0.1 * factor) if intercept else 0.0)


def private_fit(problem: Problem, *, eps: float | None, delta: float, settings: PPGSettings, rng: np.random.Generator,
                bounds: tuple[float, float] | None = None, budget: Budget | None = None, standardize: bool = True,
                ls_kwargs: dict | None = None, penalty_units: str = "response") -> tuple[np.ndarray, dict]:
    """The whole proposed pipeline on ``problem``: (1) the private location/scale of the response inside the
    declared ``bounds`` (:func:`location_scale`), (2) the fit on the standardized response (y - loc) / s
    (loc only with an intercept) by :func:`run_ppg` with the density curvature, started at f0 = phi(Phi^-1(tau))
    (the density of a standard normal at its tau-quantile, in standardized units), (3) the coefficients
    transformed back: intercept coordinate c0 w_0 -> loc + s c0 w_0, slopes -> s w.  ``eps`` None: no noise
    (the location/scale are then exact sample quartiles when bounds are given).  ``penalty_units``:
    "response" -- lam P(w) in the response's units, the problem the exact reference solves (the
    standardized problem carries lam for l1 and lam s for l2); "scale" -- lam P(w') on the standardized
    coefficients (location-scale equivariant).  Returns (w in the response's units, info)."""
    from scipy import stats

    mu = None if eps is None else total_mu(eps, delta)
    if budget is None:  # the shares for this sample and budget (privacy off: those of eps = 1)
        budget = Budget.for_sample(problem.sizes, mu if mu is not None else total_mu(1.0, delta),
                                   intercept=bool(problem.free))
    info: dict = {"budget": budget}
    if bounds is not None and standardize:
        ls = location_scale(problem.responses, bounds=bounds, mu=None if mu is None else mu * math.sqrt(budget.location_scale),
                            rng=rng, **(ls_kwargs or {}))
        loc = ls.location if problem.free else 0.0
        scale = ls.scale
        info.update(location=ls.location, scale=ls.scale)
        fit_share = budget.fit if mu is not None else 1.0
    else:
        loc, scale = 0.0, 1.0
        fit_share = budget.fit + budget.location_scale  # no location/scale phase
    c0 = _intercept_column(problem) if problem.free else 1.0
    lam = problem.lam * (scale if (penalty_units == "response" and problem.penalty == "l2") else 1.0)
    std = Problem(problem.features, [(y - loc) / scale for y in problem.responses], problem.tau, problem.penalty,
                  lam, problem.free, problem.scales, problem.gradient_bound, problem.second_moments)
    f0 = float(stats.norm.pdf(stats.norm.ppf(problem.tau)))
    fit_mu = None if mu is None else mu * math.sqrt(fit_share)
    settings = replace(settings, density_share=budget.density)  # the accounting and the releases agree
    tr = run_ppg(std, settings=settings, curvature=f0, mu=fit_mu, rng=rng, response_scale=1.0, mu_total=mu)
    w = tr.estimate * scale
    if problem.free:
        w[0] = w[0] + loc / c0
    f_hat = tr.extra["curvature"][-1] / scale
    info.update(curvature=f_hat, trace=tr)
    if problem.free and budget.calibration > 0:
        mu_c = None if mu is None else mu * math.sqrt(budget.calibration)
        info["intercept_before_calibration"] = c0 * w[0]
        w[0] = calibrate_intercept(problem, w, f_hat, mu=mu_c, rounds=budget.calibration_rounds, rng=rng) / c0
    return w, info


def _intercept_column(problem: Problem) -> float:
    """c0, the public constant of the intercept column (the first column of every row)."""
    return float(problem.features[0][0, 0])


def calibrate_intercept(problem: Problem, w: np.ndarray, curvature: float, *, mu: float | None, rounds: int,
                        rng: np.random.Generator) -> float:
    """The intercept b that puts tau of the pooled residuals at the released slopes below 0 (the first-order
    condition of the exact estimator in the intercept, with the slopes held at their released values).

    Round k: the server names b_k; site i releases its share (1/m_i) #{y_ij - a_ij.w_slopes <= b_k}
    + N(0, (z / m_i)^2) (replace-one sensitivity 1 / m_i); v_k = b_k - (mean_i share_i - tau) / f (a one-shot
    Newton estimate, f the released curvature), b_{k+1} = mean(v_1..v_k); returns mean of all v_k.  The
    slopes' noise is then the same in the calibration as in every later prediction, so the held-out share
    below the fitted quantile is tau up to the calibration's own noise (no Jensen bias from noisy slopes).
    ``mu``: this phase's budget, equal over the rounds (None: no noise)."""
    c0 = _intercept_column(problem)
    offsets = [a[:, 1:] @ w[1:] for a in problem.features]
    z = 0.0 if mu is None else math.sqrt(rounds) / mu
    b = c0 * float(w[0])
    vs = []
    for _ in range(rounds):
        shares = np.array([np.mean(y - o <= b) for y, o in zip(problem.responses, offsets)])
        shares = shares + z / problem.sizes * rng.standard_normal(problem.num_sites)
        vs.append(b - (shares.mean() - problem.tau) / curvature)
        b = float(np.mean(vs))
    return b


# ---------------------------------------------------------------- the ledger of the proposed pipeline
def pipeline_releases(*, eps: float, delta: float, settings: PPGSettings, budget: Budget, ls_rounds: int = 6,
                      ls_round_shares=(0.1, 0.1, 0.15, 0.15, 0.2, 0.3), standardize: bool = True) -> list[dict]:
    """Every release one site makes in :func:`private_fit` (the same list for every site: the multipliers are
    functions of public values only), with its phase, its noise multiplier z and its l2 sensitivity in
    the units its noise is scaled by.  sum z^-2 = mu^2 of (eps, delta): one composed Gaussian."""
    mu = total_mu(eps, delta)
    out = []
    if standardize:
        shares = np.asarray(ls_round_shares[:ls_rounds], float)
        shares = shares / shares.sum()
        for r, z in enumerate(1.0 / (mu * math.sqrt(budget.location_scale) * np.sqrt(shares))):
            out.append({"phase": "location/scale", "round": r + 1, "z": float(z), "sensitivity": "sqrt(6) / m_i"})
    fit_share = budget.fit if standardize else budget.fit + budget.location_scale
    t1, t2 = settings.transient, settings.rounds - settings.transient
    fit_shares = np.r_[np.full(t1, settings.transient_share / t1), np.full(t2, (1 - settings.transient_share) / t2)]
    base = len(out)
    for r, z in enumerate(split_multipliers(mu * math.sqrt(fit_share), fit_shares)):
        out.append({"phase": "fit: data term", "round": base + r + 1, "z": float(z), "sensitivity": "2 G / m_i"})
        if settings.curvature == "density" and r in settings.density_rounds:
            count = len(settings.density_rounds) + int(settings.final_density)
            out.append({"phase": "fit: residual density", "round": base + r + 1,
                        "z": float(1.0 / (mu * math.sqrt(budget.density / count))), "sensitivity": "1 / (2 h m_i)"})
    if budget.calibration > 0:
        base = out[-1]["round"]
        z = math.sqrt(budget.calibration_rounds) / (mu * math.sqrt(budget.calibration))
        for r in range(budget.calibration_rounds):
            out.append({"phase": "intercept calibration", "round": base + r + 1, "z": float(z),
                        "sensitivity": "1 / m_i"})
    return out


def pipeline_epsilon(releases: list[dict], delta: float) -> float:
    """The PLD eps (dp_accounting) of one site's releases, composed: the ledger's headline accountant."""
    import dp_accounting

    from fdp_flower.privacy.calibration import composed_gaussian_event, pld_accountant

    acc = pld_accountant()
    acc.compose(composed_gaussian_event([r["z"] for r in releases]))
    return float(acc.get_epsilon(delta))
