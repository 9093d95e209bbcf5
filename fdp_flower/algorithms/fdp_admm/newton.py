"""The public-metric Newton rule of FDP-ADMM's data-term protocol (``algorithm.rule: newton``;
docs/algorithms.md, section 1, "The Newton rule"): pure functions, no Flower.

Every release of a site is a record-mean of bounded per-record terms plus Gaussian noise, at a point or
threshold the server names; the server does everything else.  One run is a fixed public schedule of
``algorithm.rounds`` releases per site (:func:`newton_schedule`):

1. **location and scale of the response**: the shares of the responses below 6 named thresholds,
   (1/m_i) #{y_ij <= t} (l2 sensitivity sqrt(6) / m_i); a noisy 4-ary search keeps, for the levels 0.25 and
   0.75, the sub-interval that disagrees with the fewest pooled shares (:func:`quartile_brackets`).
   Location = midhinge, scale = IQR / 1.349.  With declared ``response_bounds``: 6 rounds inside them.
   Without bounds and with privacy: :data:`UNBOUNDED_LOCATION_ROUNDS` rounds in the warped coordinate
   u = asinh(y) over [-asinh(Y), asinh(Y)], Y = :data:`UNBOUNDED_RESPONSE_LIMIT` (the server names the
   thresholds sinh(u); the release and its sensitivity are the same), which resolves a location to about
   2 asinh(Y) / 7^R relative to max(|y|, 1) (7-ary splits while both quartiles share one bracket;
   :func:`unbounded_resolution`).  Without privacy and without
   bounds the first round releases each site's (min, max) instead (refused with privacy), then 5 rounds;
   with a basis that publishes no score variances (a fixed basis) one more round releases each site's second
   moments (1/m_i) sum_j a_ij a_ij^T of its clipped rows, and the metric below is the full matrix f G, G their
   mean over the sites (N.1'; :class:`MomentMetric`).  With privacy the (d * d) release gets N(0, sigma^2) in
   every entry, sensitivity sqrt(2) c1^2 / m_i (||a a^T - b b^T||_F^2 = ||a||^4 + ||b||^4 - 2 (a.b)^2 <= 2 c1^4
   for rows of norm <= c1), a share of mu^2 of its own (:func:`budget_shares`); the server symmetrizes the mean,
   puts back the public c0^2 and floors its eigenvalues at the noise's spectral edge (:func:`floor_moments`);
2. **the fit** on (y - location) / scale: the data term (1.3) at the point the server names (the same
   release as the ADMM rule's, sensitivity 2 G / m_i), and twice the residual density
   (1/m_i) #{|y_ij - a_ij.x| <= h} / (2 h) (sensitivity 1 / (2 h m_i)).  The server takes Newton steps in
   the public metric H = f D (+ lam / M for l2), D = diag(c0^2, lambda_1..lambda_K) the public score
   variances and f the pooled released residual density (N.1); 6 transient rounds x <- prox_H(x - a H^-1 g),
   then dual averaging of the one-shot Newton estimates v_k = x_k - H^-1 g_k (N.2; with the private second-moments
   metric the index-weighted mean of the iterates, the transient rounds stepping only above its noise floor: N.2');
   the released coefficients are prox_H(mean v_k), shrunk by empirical Bayes with the public noise variance
   (N.3, privacy on only);
3. **intercept calibration** (5 rounds, models with an intercept): the share of residuals at the released
   slopes below the named intercept b, (1/m_i) #{y_ij <= a_ij.w} (sensitivity 1 / m_i); b by averaged
   one-shot Newton steps b - (share - tau) / f (N.4).
4. **components below the noise edge** (N.5): with a private federated DP-FPCA basis the fit steps only in
   the components whose released eigenvalue exceeds the pooled summary noise's spectral edge
   (:func:`fdp_flower.functional.federated_fpca.noise_edge`); the others stay at 0.

Every multiplier z is a function of public values (eps, delta, the sizes m_i, the schedule): the schedule
splits one total mu^2 = sum_l z_l^-2 (the same as the ADMM rule's plan for the same budget), so the
composed releases are one Gaussian mechanism of that mu whatever the split.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: the release kinds of the schedule, in the order a run asks for them (RESIDUAL_QUARTILES: the ADMM rule's level
#: calibration, :func:`level_schedule`)
RANGE, QUARTILES, TERM, DENSITY, SHARE = "range", "quartiles", "term", "density", "share"
#: a basis that publishes no score variances (a fixed basis): each site's second moments of its clipped feature
#: rows, (1/m_i) sum_j a_ij a_ij^T (with privacy: noised, sensitivity sqrt(2) c1^2 / m_i), the metric of the
#: Newton steps (N.1')
MOMENTS = "moments"
RESIDUAL_QUARTILES = "residual_quartiles"
#: quartile-search levels, thresholds per level and round, and the six rounds' shares of the phase's budget
LEVELS = (0.25, 0.75)
THRESHOLDS_PER_LEVEL = 3
QUARTILE_ROUND_SHARES = (0.1, 0.1, 0.15, 0.15, 0.2, 0.3)
LOCATION_ROUNDS = 6
#: the search without declared bounds (privacy on): its rounds, their shares of the phase's budget, and the
#: largest |y| it covers (a response beyond it is found at the limit: declare bounds)
UNBOUNDED_LOCATION_ROUNDS = 8
UNBOUNDED_QUARTILE_ROUND_SHARES = (0.08, 0.08, 0.1, 0.1, 0.12, 0.12, 0.15, 0.25)
UNBOUNDED_RESPONSE_LIMIT = 1e7
#: term rounds after which a residual density is released (1-based), and their bandwidths (the first in
#: standardized response units, the second divided by the current density)
DENSITY_AFTER = (4, 9)
DENSITY_BANDWIDTHS = (0.25, 0.1)
TRANSIENT_ROUNDS = 6
TRANSIENT_SHARE = 0.1
CALIBRATION_ROUNDS = 5
#: the step (in Newton units) before the first density, and after it
FIRST_STEP, STEP = 0.5, 1.0
CURVATURE_CLAMP = 4.0
#: the level calibration's rounds after the ADMM rule's term rounds (:func:`level_schedule`; before them the
#: same search as the Newton rule's without bounds, :data:`UNBOUNDED_LOCATION_ROUNDS` quartile rounds)
LEVEL_KINDS = (RESIDUAL_QUARTILES,) * UNBOUNDED_LOCATION_ROUNDS + (SHARE,) * CALIBRATION_ROUNDS


@dataclass(frozen=True)
class BudgetShares:
    """Shares of the run's mu^2 spent by the location/scale search, the densities, the intercept
    calibration and the second moments of a fixed basis (the fit's data terms take the rest)."""

    location_scale: float
    density: float
    calibration: float
    moments: float = 0.0

    @property
    def fit(self) -> float:
        return 1.0 - self.location_scale - self.density - self.calibration - self.moments


#: the second-moments release's share of mu^2 (:func:`budget_shares`), the same at every n and eps: its noise edge
#: floors the metric (:func:`floor_moments`), and both that edge and the data terms' noise fall like 1 / (n mu), so
#: a fixed share keeps the floor a fixed multiple of the fit's noise (chosen on design seeds 0-4 among 3% and 10%)
MOMENTS_SHARE = 0.03


def budget_shares(total_records: float, mu: float, *, intercept: bool, location_scale: bool,
                  moments: bool = False) -> BudgetShares:
    """The auxiliary releases' shares of mu^2 for n = ``total_records`` at budget ``mu``: their noise relative to
    what they estimate falls like 1 / (n mu sqrt(share)), so the shares that suffice at n = 2500, eps = 1
    (mu = 0.268 at delta 1e-5: location/scale 8%, densities 2%, calibration 10%) shrink like
    (2500 x 0.268 / (n mu))^2 down to floors of 1%, 0.5% and 2%; a fixed basis's second moments take
    :data:`MOMENTS_SHARE` at every n.  A function of public values only."""
    factor = min(1.0, (2500.0 * 0.268 / (float(total_records) * float(mu))) ** 2)
    return BudgetShares(location_scale=max(0.01, 0.08 * factor) if location_scale else 0.0,
                        density=max(0.005, 0.02 * factor),
                        calibration=max(0.02, 0.1 * factor) if intercept else 0.0,
                        moments=MOMENTS_SHARE if moments else 0.0)


@dataclass(frozen=True)
class NewtonSchedule:
    """The public schedule of one run: ``kinds[l - 1]`` the release of round l, ``multipliers[l - 1]`` its
    noise multiplier z_l (None: privacy off)."""

    kinds: tuple[str, ...]
    multipliers: np.ndarray | None

    @property
    def rounds(self) -> int:
        return len(self.kinds)

    def kind(self, round_: int) -> str:
        if not 1 <= round_ <= len(self.kinds):
            raise ValueError(f"round {round_} is outside the schedule's 1..{len(self.kinds)}")
        return self.kinds[round_ - 1]

    def z(self, round_: int) -> float | None:
        return None if self.multipliers is None else float(self.multipliers[round_ - 1])

    @property
    def term_rounds(self) -> int:
        return self.kinds.count(TERM)


def schedule_kinds(rounds: int, *, intercept: bool, bounds: bool, private: bool, moments: bool = False
                   ) -> tuple[str, ...]:
    """The release kinds of a run of ``rounds`` rounds (module docstring): the location/scale phase (6
    quartile rounds with declared bounds; without privacy and bounds a (min, max) round then 5 quartile
    rounds; with privacy and no bounds :data:`UNBOUNDED_LOCATION_ROUNDS` warped quartile rounds), the fit's
    term rounds with a density after term rounds 4 and 9, and 5 calibration rounds with an intercept.
    ``moments``: a second-moments round before the fit, for a basis without score variances.
    ``rounds`` must leave the fit at least 12 term rounds."""
    if bounds:
        location = [QUARTILES] * LOCATION_ROUNDS
    elif private:
        location = [QUARTILES] * UNBOUNDED_LOCATION_ROUNDS
    else:
        location = [RANGE] + [QUARTILES] * (LOCATION_ROUNDS - 1)
    location += [MOMENTS] if moments else []
    calibration = [SHARE] * CALIBRATION_ROUNDS if intercept else []
    terms = rounds - len(location) - len(calibration) - len(DENSITY_AFTER)
    if terms < 12:
        need = rounds - terms + 12
        raise ValueError(f"algorithm.rounds = {rounds} leaves {terms} fit rounds to the Newton rule; it needs at "
                         f"least 12 (set algorithm.rounds >= {need})")
    fit: list[str] = []
    for k in range(1, terms + 1):
        fit.append(TERM)
        if k in DENSITY_AFTER:
            fit.append(DENSITY)
    return tuple(location + fit + calibration)


def newton_schedule(rounds: int, *, mu: float | None, total_records: float, intercept: bool, bounds: bool,
                    moments: bool = False) -> NewtonSchedule:
    """Kinds (:func:`schedule_kinds`) and multipliers: the shares of :func:`budget_shares` split mu^2 --
    the quartile rounds by :data:`QUARTILE_ROUND_SHARES`, the densities and the calibration rounds equally,
    the term rounds 10% over the 6 transient rounds and the rest equally -- so sum_l z_l^-2 = mu^2."""
    kinds = schedule_kinds(rounds, intercept=intercept, bounds=bounds, private=mu is not None, moments=moments)
    if mu is None:
        return NewtonSchedule(kinds, None)
    shares = budget_shares(total_records, mu, intercept=intercept, location_scale=QUARTILES in kinds,
                           moments=MOMENTS in kinds)
    round_shares = UNBOUNDED_QUARTILE_ROUND_SHARES if not bounds else QUARTILE_ROUND_SHARES
    quartile_shares = np.asarray(round_shares[:kinds.count(QUARTILES)], float)
    quartile_shares = quartile_shares / quartile_shares.sum()
    terms = kinds.count(TERM)
    averaging = terms - TRANSIENT_ROUNDS
    term_shares = np.r_[np.full(TRANSIENT_ROUNDS, TRANSIENT_SHARE / TRANSIENT_ROUNDS),
                        np.full(averaging, (1 - TRANSIENT_SHARE) / averaging)]
    out, q, t = [], 0, 0
    for kind in kinds:
        if kind == QUARTILES:
            share, q = shares.location_scale * quartile_shares[q], q + 1
        elif kind == TERM:
            share, t = shares.fit * term_shares[t], t + 1
        elif kind == DENSITY:
            share = shares.density / len(DENSITY_AFTER)
        elif kind == MOMENTS:
            share = shares.moments
        else:
            share = shares.calibration / CALIBRATION_ROUNDS
        out.append(1.0 / (mu * math.sqrt(share)))
    return NewtonSchedule(kinds, np.asarray(out))


def level_schedule(term_multipliers, *, total_records: float) -> NewtonSchedule:
    """The ADMM rule's schedule with its location/scale search and level calibration
    (``algorithm.level_calibration``; docs/algorithms.md section 1.4): :data:`UNBOUNDED_LOCATION_ROUNDS` rounds of
    quartile shares of the responses, the L data-term rounds of the ADMM plan, then :data:`LEVEL_KINDS` (residual
    quartile shares, then residual shares).  ``term_multipliers``: the ADMM plan's z_l, which compose to
    mu^2 = sum_l z_l^-2.  The two searches take the location/scale share of :func:`budget_shares` each and the
    share rounds its calibration share; the term rounds take the rest, each z_l scaled by 1 / sqrt(1 - shares), so
    the whole schedule still composes to mu^2."""
    if term_multipliers is None:
        raise ValueError("the level calibration runs with privacy on only")
    z = np.asarray(term_multipliers, float)
    kinds = (QUARTILES,) * UNBOUNDED_LOCATION_ROUNDS + (TERM,) * len(z) + LEVEL_KINDS
    mu = float(np.sqrt(np.sum(z ** -2.0)))
    shares = budget_shares(total_records, mu, intercept=True, location_scale=True)
    auxiliary = 2.0 * shares.location_scale + shares.calibration
    quartile_shares = np.asarray(UNBOUNDED_QUARTILE_ROUND_SHARES, float)
    quartile_shares = quartile_shares / quartile_shares.sum()
    search = [1.0 / (mu * math.sqrt(shares.location_scale * q)) for q in quartile_shares]
    out = search + list(z / math.sqrt(1.0 - auxiliary)) + search
    out += [1.0 / (mu * math.sqrt(shares.calibration / CALIBRATION_ROUNDS))] * CALIBRATION_ROUNDS
    return NewtonSchedule(kinds, np.asarray(out))


def residual_quartile_shares(features: np.ndarray, response: np.ndarray, point: np.ndarray,
                             thresholds: np.ndarray) -> np.ndarray:
    """(1/m) #{y_j - a_j.w <= t} for every named threshold t: the quartile shares of the residuals at the named
    model w (the level calibration's search, :func:`level_schedule`)."""
    return quartile_shares(response - features @ point, thresholds)


#: l2 sensitivity of each kind's release in units of 1 / m_i (density: also / (2 h); term: times 2 G)
def release_sensitivity(kind: str, m: float, *, gradient_bound: float = 1.0, bandwidth: float | None = None,
                        row_bound: float | None = None) -> float:
    """The replace-one l2 sensitivity of one release of ``kind`` by a site of m records: quartile shares
    sqrt(6) / m, the data term 2 G / m (in the noise metric), the density 1 / (2 h m), a share 1 / m, the second
    moments sqrt(2) c1^2 / m for rows of norm <= c1 = ``row_bound`` (the Frobenius norm of a a^T - b b^T)."""
    if kind in (QUARTILES, RESIDUAL_QUARTILES):
        return math.sqrt(len(LEVELS) * THRESHOLDS_PER_LEVEL) / m
    if kind == TERM:
        return 2.0 * gradient_bound / m
    if kind == DENSITY:
        return 1.0 / (2.0 * float(bandwidth) * m)
    if kind == SHARE:
        return 1.0 / m
    if kind == MOMENTS:
        if row_bound is None:
            raise ValueError("the second-moments release's sensitivity needs the rows' norm bound c1")
        return math.sqrt(2.0) * float(row_bound) ** 2 / m
    raise ValueError(f"release kind {kind!r} has no noise (privacy off only)")


# ---------------------------------------------------------------- the site's noise-free values
def quartile_shares(response: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """(1/m) #{y_j <= t} for every named threshold t."""
    return (response[None, :] <= thresholds[:, None]).mean(axis=1)


def second_moments(features: np.ndarray) -> np.ndarray:
    """(d * d,) the site's (1/m) sum_j a_j a_j^T of its feature rows, flattened (the MOMENTS release)."""
    features = np.asarray(features, float)
    return (features.T @ features / max(len(features), 1)).ravel()


def residual_density(features: np.ndarray, response: np.ndarray, point: np.ndarray, bandwidth: float) -> float:
    """(1/m) #{|y_j - a_j.x| <= h} / (2 h), the residual density at the fitted quantile (N.1)."""
    return float(np.mean(np.abs(response - features @ point) <= bandwidth) / (2.0 * bandwidth))


def residual_share(features: np.ndarray, response: np.ndarray, point: np.ndarray) -> float:
    """(1/m) #{y_j <= a_j.w}, the share of responses at or below the fitted quantile (N.4)."""
    return float(np.mean(response <= features @ point))


# ---------------------------------------------------------------- the server's post-processing
def _joint(brackets: np.ndarray, shared: bool) -> bool:
    """Whether a round splits one bracket common to both levels into 7 cells (``shared`` searches only)."""
    return bool(shared) and bool(np.array_equal(brackets[0], brackets[1]))


def quartile_thresholds(brackets: np.ndarray, *, shared: bool = False) -> np.ndarray:
    """The 6 thresholds of a quartile round: 3 equispaced inside each level's bracket ((2, 2) -> (6,)).  With
    ``shared`` (the search without declared bounds), while both levels' brackets are one interval, its 6
    equispaced inner points instead: one 7-ary split serves both levels (log2 7 bits a round, not 2)."""
    if _joint(brackets, shared):
        a, b = brackets[0]
        return np.linspace(a, b, len(LEVELS) * THRESHOLDS_PER_LEVEL + 2)[1:-1]
    return np.concatenate([np.linspace(a, b, THRESHOLDS_PER_LEVEL + 2)[1:-1] for a, b in brackets])


def unbounded_brackets() -> np.ndarray:
    """The first brackets of the search without declared bounds, in u = asinh(y): [-asinh(Y), asinh(Y)] for both
    levels (Y = :data:`UNBOUNDED_RESPONSE_LIMIT`)."""
    u = math.asinh(UNBOUNDED_RESPONSE_LIMIT)
    return np.array([[-u, u], [-u, u]])


def unbounded_resolution(location: float, rounds: int = UNBOUNDED_LOCATION_ROUNDS) -> float:
    """The width in y of the final bracket of the warped search near ``location`` while both quartiles share one
    bracket (a response whose IQR is below it): cosh(asinh(location)) times the final width 2 asinh(Y) / 7^rounds
    in u (7-ary splits), i.e. about that width times max(|location|, 1)."""
    width_u = 2.0 * math.asinh(UNBOUNDED_RESPONSE_LIMIT) / 7.0**rounds
    return float(math.sqrt(1.0 + float(location) ** 2) * width_u)


def robust_cut(edges: np.ndarray, shares: np.ndarray, p: float) -> list[float]:
    """The cell of ``edges`` (the bracket's ends around its thresholds) that disagrees with the fewest shares:
    shares left of the cut should be < p, those right of it >= p."""
    above = (shares >= p).astype(int)
    wrong = [int(above[:j].sum() + (1 - above[j:]).sum()) for j in range(len(shares) + 1)]
    j = int(np.argmin(wrong))
    return [edges[j], edges[j + 1]]


def quartile_brackets(brackets: np.ndarray, pooled_shares: np.ndarray, *, shared: bool = False,
                      cut=robust_cut) -> np.ndarray:
    """The next brackets of the levels 0.25 and 0.75 from the pooled noisy shares at their thresholds: per
    level, the sub-interval (cut j) that disagrees with the fewest shares -- shares left of the cut should
    be < p, those right of it >= p -- robust to one noisy share (a wrong cut lies next to the quantile).
    ``shared``: as :func:`quartile_thresholds` (both levels cut the one bracket's 7 cells with all 6 shares).
    ``cut(edges, shares, p)``: the rule that picks a level's cell (the package's is :func:`robust_cut`; the
    benchmark benchmarks/estimates_location_search.py compares another)."""
    shares = np.asarray(pooled_shares, float)
    if _joint(brackets, shared):
        a, b = brackets[0]
        edges = np.r_[a, quartile_thresholds(brackets, shared=True), b]
        return np.asarray([cut(edges, shares, p) for p in LEVELS])
    thresholds = quartile_thresholds(brackets).reshape(len(LEVELS), THRESHOLDS_PER_LEVEL)
    shares = shares.reshape(len(LEVELS), THRESHOLDS_PER_LEVEL)
    return np.asarray([cut(np.r_[a, points, b], s, p)
                       for (a, b), points, s, p in zip(brackets, thresholds, shares, LEVELS)])


def location_and_scale(brackets: np.ndarray) -> tuple[float, float]:
    """Location = the midhinge, scale = IQR / 1.349 of the final brackets (floored at their widest width)."""
    from scipy import stats

    mids = brackets.mean(axis=1)
    width = float(np.max(brackets[:, 1] - brackets[:, 0]))
    scale = max(float(mids[1] - mids[0]) / (2.0 * float(stats.norm.ppf(LEVELS[1]))), width)
    return float(mids.mean()), float(scale)


def normal_density_at_quantile(tau: float) -> float:
    """phi(Phi^-1(tau)): the residual density at the tau-quantile of a normal law of unit scale (the
    starting curvature in standardized units, and the curvature's floor)."""
    from scipy import stats

    return float(stats.norm.pdf(stats.norm.ppf(tau)))


@dataclass(frozen=True)
class PublicMetric:
    """H = a^-1 (f D + ridge) with D the public second moments (diagonal): ``newton(g)`` = a H^-1 g... in the
    scaled form x - a (f D + ridge)^-1 g; ``prox(v)`` the exact proximal step of (lam/M) ||x_pen||_1 in that
    metric (a soft threshold per coordinate; v for l2 and no penalty, whose curvature is in the ridge)."""

    diagonal: np.ndarray  # f D + ridge
    step: float
    l1: float  # lam / M of the l1 penalty (0: none)
    free: int  # leading unpenalized coordinates

    @classmethod
    def of(cls, moments: np.ndarray, curvature: float, step: float, *, penalty: str, lam_site: float, free: int):
        ridge = np.where(np.arange(len(moments)) >= free, lam_site if penalty == "l2" else 0.0, 0.0)
        return cls(curvature * np.asarray(moments, float) + ridge, float(step),
                   lam_site if penalty == "l1" else 0.0, int(free))

    def newton(self, gradient: np.ndarray) -> np.ndarray:
        return self.step * gradient / self.diagonal

    def prox(self, v: np.ndarray) -> np.ndarray:
        if self.l1 == 0:
            return v
        out = np.array(v, dtype=float)
        t = self.step * self.l1 / self.diagonal[self.free:]
        out[self.free:] = np.sign(v[self.free:]) * np.maximum(np.abs(v[self.free:]) - t, 0.0)
        return out


@dataclass(frozen=True)
class MomentMetric:
    """H = a^-1 (f G + ridge) with G the sites' mean second moments of their feature rows (a full matrix;
    privacy off, N.1'): ``newton(g)`` = a (f G + ridge)^-1 g; ``prox(v)`` the proximal step of (lam/M) ||x_pen||_1
    in that metric, argmin_x 1/2 (x - v)^T H (x - v) + (lam/M) ||x_pen||_1, by cyclic coordinate descent to
    a relative change below 1e-12 (a d-dimensional lasso, d = K + 1; v itself for l2 and no penalty)."""

    matrix: np.ndarray  # f G + ridge
    step: float
    l1: float
    free: int

    #: coordinate-descent sweeps at most, and the relative change that stops them
    SWEEPS, TOLERANCE = 10_000, 1e-12

    @classmethod
    def of(cls, moments: np.ndarray, curvature: float, step: float, *, penalty: str, lam_site: float, free: int):
        moments = np.asarray(moments, float)
        ridge = np.where(np.arange(len(moments)) >= free, lam_site if penalty == "l2" else 0.0, 0.0)
        return cls(curvature * moments + np.diag(ridge), float(step), lam_site if penalty == "l1" else 0.0,
                   int(free))

    @property
    def diagonal(self) -> np.ndarray:
        return np.diag(self.matrix).copy()

    def newton(self, gradient: np.ndarray) -> np.ndarray:
        return self.step * np.linalg.solve(self.matrix, gradient)

    def prox(self, v: np.ndarray) -> np.ndarray:
        v = np.asarray(v, dtype=float)
        if self.l1 == 0:
            return v.copy()
        a = self.matrix / self.step
        diag = np.diag(a)
        x = v.copy()
        for _ in range(self.SWEEPS):
            change = 0.0
            for k in range(len(x)):
                # the coordinate's minimizer with the others fixed: v_k - (A (x - v))_{-k} / A_kk, soft-thresholded
                target = x[k] - (a[k] @ (x - v)) / diag[k]
                new = target if k < self.free else np.sign(target) * max(abs(target) - self.l1 / diag[k], 0.0)
                change = max(change, abs(new - x[k]))
                x[k] = new
            if change <= self.TOLERANCE * max(1.0, float(np.max(np.abs(x)))):
                break
        return x


def _averaged_release_variance(multipliers, sizes, gradient_bound: float, noise_shape: np.ndarray,
                               weights=None) -> np.ndarray:
    """(d,) variance V of the mean, over the averaged rounds, of the site-averaged release noise: z_l^2 (2 G / m_i)^2
    S^2 summed over the sites / M^2, summed over the rounds / L^2 (public); with ``weights`` w_l the weighted mean's,
    sum_l w_l^2 z_l^2 (...) / (sum_l w_l)^2."""
    sizes = np.asarray(sizes, float)
    z = np.asarray(multipliers, float)
    w = np.ones_like(z) if weights is None else np.asarray(weights, float)
    per_site = (2.0 * gradient_bound / sizes) ** 2
    return (float(np.sum((w * z) ** 2)) / float(np.sum(w)) ** 2 * np.asarray(noise_shape, float) ** 2
            * per_site.sum() / len(sizes) ** 2)


def averaged_noise_variance(multipliers, sizes, gradient_bound: float, noise_shape: np.ndarray,
                            diagonal: np.ndarray) -> np.ndarray:
    """(d,) variance of H^-1 times the mean, over the averaged rounds, of the site-averaged release noise:
    the noise left in the dual average (public: z_l, m_i, G, S and the server's H).  ``diagonal``: H's diagonal
    (:class:`PublicMetric`), or the full (d, d) H (:class:`MomentMetric`: the diagonal of H^-1 diag(V) H^-1)."""
    h = np.asarray(diagonal, float)
    if h.ndim == 2:
        return np.diag(averaged_noise_covariance(multipliers, sizes, gradient_bound, noise_shape, h)).copy()
    return _averaged_release_variance(multipliers, sizes, gradient_bound, noise_shape) / h**2


def averaged_noise_covariance(multipliers, sizes, gradient_bound: float, noise_shape: np.ndarray,
                              matrix: np.ndarray, weights=None) -> np.ndarray:
    """(d, d) covariance H^-1 diag(V) H^-1 of H^-1 times the averaged release noise (V its per-coordinate
    variance, as in :func:`averaged_noise_variance`; ``weights``: of a weighted mean over the rounds) for the full
    metric H = ``matrix`` (:class:`MomentMetric`)."""
    variance = _averaged_release_variance(multipliers, sizes, gradient_bound, noise_shape, weights)
    inverse = np.linalg.inv(np.asarray(matrix, float))
    return (inverse * variance) @ inverse.T


def eb_shrinkage_rotated(x: np.ndarray, noise_covariance: np.ndarray, moments: np.ndarray) -> np.ndarray:
    """The empirical-Bayes shrinkage (N.3) of ``x`` whose noise has a full ``noise_covariance`` (the moment metric):
    in the eigenbasis U of that covariance the noise coordinates are independent with variances its eigenvalues,
    the prior's second moments there are diag(U^T G U) (G = ``moments``), and :func:`eb_shrinkage` shrinks each;
    returns the shrunk x in the original coordinates.  Post-processing."""
    variance, vectors = np.linalg.eigh(np.asarray(noise_covariance, float))
    u = vectors.T @ np.asarray(x, float)
    prior = np.maximum(np.einsum("jk,jl,lk->k", vectors, np.asarray(moments, float), vectors), 1e-300)
    return vectors @ (eb_shrinkage(u, np.maximum(variance, 1e-300), prior) * u)


def floor_moments(mean: np.ndarray, noise_sd: float, *, c0: float | None = None, tau: float = 0.5) -> np.ndarray:
    """G from the sites' mean noisy second moments (privacy on, N.1'): symmetrized (the off-diagonal noise sd
    becomes s / sqrt 2 for entry sd s = ``noise_sd`` of the mean), the public c0^2 put back in the intercept's
    corner (``c0``; None without an intercept), and its eigenvalues floored at the symmetrized noise's spectral
    edge sqrt(2 d) s (a Wigner matrix of off-diagonal variance s^2 / 2 fills [-2 sqrt(d s^2 / 2), +...]): an
    eigenvalue below it cannot be told from noise, and the floor keeps the Newton steps from growing along it.
    At level ``tau`` the floor is that edge times phi(0) / phi(Phi^-1(tau)): the Newton step divides the noisy
    gradient by f G with f ~ phi(Phi^-1(tau)), so along a floored direction the step's noise stays at the
    median's level whatever tau (the tails' weak directions move slower instead of noisier).
    Post-processing of the releases."""
    return floor_moments_split(mean, noise_sd, c0=c0, tau=tau)[0]


def floor_moments_split(mean: np.ndarray, noise_sd: float, *, c0: float | None = None, tau: float = 0.5
                        ) -> tuple[np.ndarray, np.ndarray]:
    """(G, P): :func:`floor_moments`'s G and the (d, d) orthogonal projector P onto its eigenvectors whose
    eigenvalue is above the floor (the directions the released moments tell from noise; N.2').  Along the others
    the metric is the floor, larger than their curvature, so a step there corrects only a fraction of the
    point's error and the noise a step adds there stays.  Post-processing of the releases."""
    d = mean.shape[0]
    g = (np.asarray(mean, float) + np.asarray(mean, float).T) / 2.0
    if c0 is not None:
        g[0, 0] = float(c0) ** 2
    values, vectors = np.linalg.eigh(g)
    edge = math.sqrt(2.0 * d) * float(noise_sd) * normal_density_at_quantile(0.5) / normal_density_at_quantile(tau)
    floor = max(edge, 1e-12 * max(float(np.max(np.abs(values))), 1e-300))
    kept = vectors[:, values > floor]
    return (vectors * np.maximum(values, floor)) @ vectors.T, kept @ kept.T


def eb_shrinkage(x: np.ndarray, noise_var: np.ndarray, moments: np.ndarray) -> np.ndarray:
    """Factors s_k / (s_k + V_k) of the empirical-Bayes generalized ridge (N.3): the exact coefficients as
    theta_k ~ N(0, c m_k^alpha) (m_k the public second moments), the released x_k = theta_k + N(0, V_k),
    (c, alpha) maximizing the marginal likelihood of the x_k on a grid.  Post-processing."""
    x2 = np.asarray(x, float) ** 2
    noise_var = np.asarray(noise_var, float)
    m = np.asarray(moments, float) / float(np.max(moments))
    alphas = np.linspace(0.0, 4.0, 81)
    logc = np.linspace(-14.0, 6.0, 201)
    base = m[None, None, :] ** alphas[:, None, None] * np.exp(logc)[None, :, None]  # (A, C, K)
    total = base + noise_var
    ll = -0.5 * np.sum(np.log(total) + x2 / total, axis=-1)
    a, c = np.unravel_index(int(np.argmax(ll)), ll.shape)
    best = base[a, c]
    return best / (best + noise_var)
