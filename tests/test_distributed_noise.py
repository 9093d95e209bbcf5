"""The Skellam mechanism for secure aggregation (fdp_flower/privacy/distributed.py,
docs/secure_aggregation.md eqs. (9.1)-(9.12)): its RDP bound against exact Renyi divergences, its
(eps, delta) against exact hockey-stick divergences, calibration, dropouts, Flower's grid (with
Flower's own quantization code) and the empirical check of released sums."""
from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from fdp_flower.privacy import distributed as dd

try:  # the exact references need 40-digit arithmetic; the other tests do not
    import mpmath
except ImportError:  # pragma: no cover
    mpmath = None
needs_mpmath = pytest.mark.skipif(mpmath is None, reason="mpmath (test extra) is not installed")


# ------------------------------------------------------------------------------------------------
# exact references (high precision)
# ------------------------------------------------------------------------------------------------

def _skellam_logpmf(variance: float, support: range, dps: int = 40) -> dict[int, object]:
    """log P(X = x) of Sk(variance) (Poisson(variance/2) - Poisson(variance/2)): -V + log I_|x|(V)."""
    with mpmath.workdps(dps):
        v = mpmath.mpf(variance)
        return {x: -v + mpmath.log(mpmath.besseli(abs(x), v)) for x in support}


def _renyi_1d(variance: float, shift: int, alpha: int, logpmf) -> object:
    """D_alpha(Sk + shift || Sk) summed exactly over a support wide enough that the rest is < 1e-30."""
    total = mpmath.fsum(mpmath.exp(alpha * logpmf[x - shift] + (1 - alpha) * logpmf[x])
                        for x in range(min(logpmf) + abs(shift), max(logpmf) - abs(shift) + 1))
    return mpmath.log(total) / (alpha - 1)


def _support(variance: float, reach: int) -> range:
    r = int(reach + 45 * math.sqrt(variance) + 60)
    return range(-r, r + 1)


@needs_mpmath
@pytest.mark.parametrize("variance", [2.0, 10.0, 60.0])
def test_skellam_rdp_bound_dominates_the_exact_renyi_divergence_of_every_small_integer_shift(variance):
    """eq. (9.3): for every integer shift d in Z^2 with ||d||_2 <= Delta_2 and ||d||_1 <= Delta_1 the
    exact D_alpha of the product law (sum of per-coordinate divergences) is below the bound."""
    alphas = [2, 3, 8, 20]
    logpmf = _skellam_logpmf(variance, _support(variance, 20 * 4 + 10))
    per_coordinate = {(a, s): float(_renyi_1d(variance, s, a, logpmf)) for a in alphas for s in range(0, 5)}
    worst_slack = math.inf
    for l2 in (1.0, 2.0, math.sqrt(5.0), 4.0):
        l1 = min(math.sqrt(2) * l2, l2 * l2)
        bound = dd.skellam_rdp(l2_sensitivity=l2, l1_sensitivity=l1, variance=variance, orders=alphas)
        for d in itertools.product(range(-4, 5), repeat=2):
            if sum(x * x for x in d) > l2 * l2 + 1e-12 or sum(map(abs, d)) > l1 + 1e-12:
                continue
            exact = np.array([per_coordinate[a, abs(d[0])] + per_coordinate[a, abs(d[1])] for a in alphas])
            assert np.all(exact <= bound * (1 + 1e-12)), (d, exact, bound)
            worst_slack = min(worst_slack, float(np.min(bound - exact)))
    assert worst_slack >= 0


def test_skellam_rdp_bound_approaches_the_gaussian_rdp_and_the_exact_divergence_at_large_variance():
    """The correction term of eq. (9.3) is O(1/V) relative to alpha Delta^2 / (2V): at V = 1e4 the
    bound, the Gaussian RDP and the exact Skellam divergence agree to 1e-3 (shift 5, alpha 2..20).
    (Float64 Bessel values suffice at this tolerance; mpmath is too slow at orders ~3000.)"""
    from scipy import special

    variance, shift = 1.0e4, 5
    x = np.arange(-int(30 * math.sqrt(variance)), int(30 * math.sqrt(variance)) + 1)
    logpmf = np.log(special.ive(np.abs(x), variance))  # log(e^-V I_|x|(V))
    assert np.all(np.isfinite(logpmf))
    for alpha in (2, 8, 20):
        terms = alpha * logpmf[:-shift] + (1 - alpha) * logpmf[shift:]  # P(y - shift)^a P(y)^(1-a), y = x[shift:]
        exact = float(special.logsumexp(terms)) / (alpha - 1)
        bound = float(dd.skellam_rdp(l2_sensitivity=shift, l1_sensitivity=shift, variance=variance, orders=[alpha])[0])
        gaussian = alpha * shift**2 / (2 * variance)
        assert exact <= bound
        assert abs(bound / gaussian - 1) < 1e-3 and abs(exact / gaussian - 1) < 1e-3


def _exact_epsilon_1d(variance: float, shift: int, delta: float) -> float:
    """The exact eps at delta of one release of Sk(variance) with integer sensitivity ``shift`` (1-D):
    delta(eps) = sum_x max(0, P(x) - e^eps P(x - shift)), solved for eps by bisection (the law is
    symmetric, so both directions give the same curve)."""
    logpmf = _skellam_logpmf(variance, _support(variance, shift + 10))
    xs = range(min(logpmf) + shift, max(logpmf) + 1)
    p = np.array([float(mpmath.exp(logpmf[x])) for x in xs])
    log_ratio = np.array([float(logpmf[x] - logpmf[x - shift]) for x in xs])

    def hockey(eps):
        return float(np.sum(np.where(log_ratio > eps, p * -np.expm1(eps - log_ratio), 0.0)))

    lo, hi = 0.0, 50.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if hockey(mid) > delta else (lo, mid)
    return hi


@needs_mpmath
@pytest.mark.parametrize("variance,shift", [(20.0, 2), (8.0, 1), (200.0, 6)])
def test_accounted_epsilon_of_one_release_is_an_upper_bound_on_the_exact_epsilon(variance, shift):
    """One release through RDP (eq. (9.3)) and dp_accounting's conversion gives an eps at least the
    exact one, and at most the Gaussian-RDP eps at the same variance plus the largest correction
    term (the conversion adds at most the RDP curve's excess)."""
    delta = 1e-5
    accounted = dd.skellam_epsilon(rounds=1, l2_sensitivity=shift, l1_sensitivity=shift, variance=variance, delta=delta)
    exact = _exact_epsilon_1d(variance, shift, delta)
    gaussian_rdp_eps = dd.rdp_to_epsilon(dd.gaussian_rdp(math.sqrt(variance) / shift), delta)
    correction = np.max(dd.skellam_rdp(l2_sensitivity=shift, l1_sensitivity=shift, variance=variance)
                        - dd.gaussian_rdp(math.sqrt(variance) / shift))
    assert exact <= accounted
    assert accounted <= gaussian_rdp_eps + correction + 1e-12


# ------------------------------------------------------------------------------------------------
# calibration, composition, dropouts
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def plan():
    return dd.plan_secure_sum(eps=1.0, delta=1e-5, rounds=30, sites=10, tolerated=2, dim=11, record_bound=0.9,
                              max_site_records=1000, total_records=10_000)


def test_the_plan_spends_its_budget_and_no_more(plan):
    eps = plan.epsilon()
    assert eps <= 1.0
    assert eps >= 1.0 - 1e-6  # calibrate_skellam_variance's rtol 1e-9 on V moves eps by ~1e-9
    l2, l1 = plan.sensitivities
    assert l2 == pytest.approx(2 * plan.scale * plan.record_bound + math.sqrt(11), rel=1e-8)
    assert l1 == pytest.approx(math.sqrt(11) * l2)


def test_epsilon_decreases_as_the_per_site_share_grows(plan):
    shares = [0.25, 0.5, 1.0, 2.0, 4.0]
    eps = [dataclasses.replace(plan, variance=plan.variance * f).epsilon() for f in shares]
    assert all(a > b for a, b in zip(eps, eps[1:])), eps


def test_fewer_than_m_minus_t_honest_shares_spend_more_than_the_budget_and_are_refused(plan):
    """eq. (9.4): the guarantee holds with M - t honest shares; one fewer exceeds the budget."""
    assert plan.epsilon(honest_shares=plan.sites - plan.tolerated) <= 1.0
    assert plan.epsilon(honest_shares=plan.sites) < plan.epsilon()
    assert plan.epsilon(honest_shares=plan.sites - plan.tolerated - 1) > 1.0
    assert dd.honest_variance(plan, contributing=plan.sites - 1, colluding=1) == pytest.approx(
        (plan.sites - 2) * plan.share_variance)
    with pytest.raises(ValueError, match="refuse the round"):
        dd.honest_variance(plan, contributing=plan.sites - plan.tolerated, colluding=1)
    with pytest.raises(ValueError, match="refuse the round"):
        dd.honest_variance(plan, contributing=plan.sites - plan.tolerated - 1)


def test_rounds_compose_by_adding_rdp_and_the_events_give_the_plans_epsilon(plan):
    events = [dd.SkellamSumRelease.of_plan(plan, client=3, round=r) for r in range(1, plan.rounds + 1)]
    assert dd.composed_epsilon(events, plan.delta_mechanism) == pytest.approx(plan.epsilon(), rel=1e-12)
    assert dd.composed_epsilon(events[:10], plan.delta_mechanism) < plan.epsilon()
    # a Gaussian release of the same site (e.g. a private basis) composes on top
    assert dd.composed_epsilon(events, plan.delta_mechanism, gaussian_multipliers=[5.0]) > plan.epsilon()
    single = dd.rdp_to_epsilon(plan.rounds * events[0].rdp(), plan.delta_mechanism)
    assert single == pytest.approx(plan.epsilon(), rel=1e-12)


def test_secure_aggregation_noise_is_near_the_central_gaussian_one():
    """The Gaussian-equivalent multiplier of the plan over the central PLD-calibrated one:
    (M / (M - t)) times the RDP conversion's price (1.176 at eps = 1, delta = 1e-5, measured
    below from dp_accounting itself), up to rounding (sqrt(K) / (2 gamma G)) and O(1/V) terms."""
    import dp_accounting

    z_pld = float(dp_accounting.get_sigma_gaussian(1.0, 1e-5))
    orders = dd.SKELLAM_ORDERS
    lo, hi = 1.0, 10.0
    for _ in range(100):  # Gaussian multiplier of one release at eps = 1 under the RDP conversion
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if dd.rdp_to_epsilon(dd.gaussian_rdp(mid, orders), 1e-5 * (1 - 1e-6)) > 1.0 else (lo, mid)
    rdp_price = (hi / z_pld) ** 2
    assert 1.15 < rdp_price < 1.20
    for sites, tolerated in ((10, 0), (50, 5), (200, 40)):
        p = dd.plan_secure_sum(eps=1.0, delta=1e-5, rounds=120, sites=sites, tolerated=tolerated, dim=11,
                               record_bound=0.5, max_site_records=100_000 // sites, total_records=100_000)
        ratio = (p.gaussian_equivalent_multiplier() / z_pld) ** 2
        expected = rdp_price * sites / (sites - tolerated)
        rounding = math.sqrt(11) / (2 * p.scale * p.record_bound)
        assert expected <= ratio * (1 + 1e-6)
        assert ratio <= expected * (1 + 2 * rounding) ** 2 * (1 + 1e-4)


# ------------------------------------------------------------------------------------------------
# sampling, rounding, tails
# ------------------------------------------------------------------------------------------------

def test_skellam_samples_have_the_skellam_moments():
    rng = np.random.default_rng(0)
    v = 37.5
    x = dd.sample_skellam(v, 200_000, rng)
    assert x.dtype == np.int64
    # mean 0 (se sqrt(v / n)), variance v (se sqrt((kappa4 + 2 v^2) / n) with kappa4 = v): 5 se
    assert abs(x.mean()) < 5 * math.sqrt(v / x.size)
    assert abs(x.var() - v) < 5 * math.sqrt((v + 2 * v * v) / x.size)


def test_the_chernoff_tail_bound_is_above_the_exact_skellam_tail():
    from scipy import stats

    for v in (4.0, 100.0, 1.0e4):
        for k in (1.0, 3.0, 6.0, 10.0):
            t = k * math.sqrt(v)
            exact = 2 * stats.skellam.sf(math.ceil(t) - 1, v / 2, v / 2)  # P(|X| >= t)
            assert exact <= math.exp(dd.skellam_log_tail(v, t)) * (1 + 1e-9)
    assert dd.skellam_log_tail(100.0, 0.0) == 0.0


def test_randomized_rounding_is_unbiased():
    rng = np.random.default_rng(1)
    x = np.array([0.25, -3.7, 1e6 + 0.5, -0.01])
    draws = np.stack([dd.randomized_round(x, rng) for _ in range(20_000)])
    frac = x - np.floor(x)
    se = np.sqrt(frac * (1 - frac) / len(draws))
    assert np.all(np.abs(draws.mean(axis=0) - x) < 5 * se)


def test_coupled_rounding_of_neighbouring_terms_stays_within_the_rounded_sensitivities():
    """eq. (9.2): with the same U, ||R(x) - R(x')||_2 <= 2 gamma G + sqrt(K) and the l1 norm <= Delta_1."""
    rng = np.random.default_rng(2)
    dim, data_sens = 11, 7.3
    l2, l1 = dd.rounded_sensitivities(data_sens, dim)
    worst = 0.0
    for _ in range(5000):
        x = rng.normal(0, 1e3, dim)
        step = rng.normal(size=dim) * rng.integers(0, 2, dim)  # sparse and dense directions
        step = step / max(np.linalg.norm(step), 1e-12) * data_sens
        u = rng.random(dim)
        a, b = np.floor(x + u), np.floor(x + step + u)
        worst = max(worst, float(np.linalg.norm(a - b)) / l2)
        assert np.abs(a - b).sum() <= l1
    assert worst <= 1.0


# ------------------------------------------------------------------------------------------------
# Flower's grid, with Flower's own code
# ------------------------------------------------------------------------------------------------

def _through_secaggplus(shares: list[np.ndarray], grid: dd.FlowerGrid, rng: np.random.Generator) -> np.ndarray:
    """The arithmetic of secaggplus_mod._collect_masked_vectors for each site and of
    SecAggPlusWorkflow.unmask_stage on the server, with Flower's functions and random masks that
    cancel (pairwise) or are removed (private), returning what aggregate_fit receives."""
    from flwr.common.secure_aggregation.ndarrays_arithmetic import (
        factor_combine,
        factor_extract,
        parameters_addition,
        parameters_mod,
        parameters_multiply,
        parameters_subtraction,
    )
    from flwr.common.secure_aggregation.quantization import dequantize, quantize

    mod = grid.modulus_range
    dims = [(1,), shares[0].shape]
    pair = {(i, j): [rng.integers(0, mod - 1, d) for d in dims] for i in range(len(shares)) for j in range(i + 1, len(shares))}
    private = [[rng.integers(0, mod - 1, d) for d in dims] for _ in shares]
    total = None
    for i, share in enumerate(shares):
        ratio = grid.num_examples / grid.max_weight
        q_ratio = round(ratio * grid.quantization_range)
        dq_ratio = q_ratio / grid.quantization_range
        params = parameters_multiply([grid.encode(share)], dq_ratio)
        quantized = factor_combine(q_ratio, quantize(params, grid.clipping_range, grid.quantization_range))
        quantized = parameters_addition(quantized, private[i])
        for (a, b), mask in pair.items():
            if i == a:
                quantized = parameters_addition(quantized, mask)
            elif i == b:
                quantized = parameters_subtraction(quantized, mask)
        masked = parameters_mod(quantized, mod)
        total = masked if total is None else parameters_addition(total, masked)
    total = parameters_mod(total, mod)
    for p in private:
        total = parameters_subtraction(total, p)
    recon = parameters_mod(total, mod)
    q_total, recon = factor_extract(recon)
    out = dequantize(recon, grid.clipping_range, grid.quantization_range)
    for vec in out:
        vec += -(len(shares) - 1) * grid.clipping_range
        vec *= grid.quantization_range / q_total
    return out[0]


@pytest.mark.parametrize("sites", [3, 10, 200])
def test_integer_shares_pass_through_flowers_quantization_and_masking_bit_for_bit(sites):
    """eqs. (9.5)-(9.6): Flower's quantization of x = 2 c v is exactly v + q/2, and the float vector
    the workflow hands to aggregate_fit decodes to sum_i v_i, including shares at +-q/2 and sums
    whose residues wrap modulo 2^32."""
    rng = np.random.default_rng(sites)
    grid = dd.FlowerGrid()
    b = grid.share_bound
    lim = min(b, grid.sum_bound // sites)  # every sum decodable; the residues sum_i (v_i + q/2) still wrap
    for trial in range(5):
        shares = [rng.integers(-lim, lim + 1, 11) for _ in range(sites)]
        if trial == 0:
            shares[0][:3] = [b, -b, 0]
            shares[1][:3] = [-b, b, b] if sites > 3 else [0, 0, 0]
        if trial in (1, 2):  # the largest sums of either sign
            shares = [np.full(11, lim if trial == 1 else -lim) for _ in range(sites)]
        expected = np.sum(shares, axis=0)
        assert np.max(np.abs(expected)) <= grid.sum_bound
        got = grid.decode_sum(_through_secaggplus(shares, grid, rng), sites)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, expected)


def test_flowers_quantization_of_an_encoded_share_is_exact_and_never_random():
    from flwr.common.secure_aggregation.quantization import quantize

    grid = dd.FlowerGrid()
    v = np.array([0, 1, -1, grid.share_bound, -grid.share_bound, 123456789, -987654321 // 2])
    x = grid.encode(v) * (grid.num_examples / grid.max_weight)
    np.random.seed(0)  # Flower's stochastic rounding uses the global numpy RNG: it must not matter
    first = quantize([x], grid.clipping_range, grid.quantization_range)[0]
    np.random.seed(12345)
    second = quantize([x], grid.clipping_range, grid.quantization_range)[0]
    np.testing.assert_array_equal(first, v + grid.quantization_range // 2)
    np.testing.assert_array_equal(first, second)


def test_a_share_beyond_flowers_clip_is_refused_not_clipped():
    grid = dd.FlowerGrid()
    with pytest.raises(dd.ShareRefused, match="beyond Flower's clip"):
        grid.encode(np.array([0, grid.share_bound + 1]))
    with pytest.raises(ValueError, match="integer array"):
        grid.encode(np.array([0.5]))
    with pytest.raises(ValueError, match="not on this grid"):
        grid.decode_sum(np.array([0.3]), 3)


def test_grid_parameters_are_checked():
    with pytest.raises(ValueError, match="quantization_range"):
        dd.FlowerGrid(quantization_range=2**31)
    with pytest.raises(ValueError, match="quantization_range"):
        dd.FlowerGrid(quantization_range=3 * 2**20)
    with pytest.raises(ValueError, match="clipping_range"):
        dd.FlowerGrid(clipping_range=6.0)
    with pytest.raises(ValueError, match="modulus_range"):
        dd.FlowerGrid(modulus_range=2**33)


# ------------------------------------------------------------------------------------------------
# the sites' shares under the plan
# ------------------------------------------------------------------------------------------------

def test_worst_case_shares_fit_flowers_range_and_bad_inputs_are_refused(plan):
    """At the planned maximum m_i with every record at the bound in one direction the data term is at
    its largest; the planned margin leaves the refusal probability below (9.9)'s budget, so none of
    2000 shares is refused; a site with more records, or unclipped records, refuses."""
    rng = np.random.default_rng(3)
    m = plan.max_site_records
    worst = np.zeros(plan.dim)
    worst[0] = m * plan.record_bound  # all records along e_1, at the bound
    budget = math.log(dd.TAIL_DELTA_FRACTION * plan.delta / ((1 + math.e) * plan.rounds))
    assert plan.refusal_log_probability() <= budget
    shares = np.stack([dd.site_share(worst, plan, rng, records=m) for _ in range(2000)])
    assert np.max(np.abs(shares)) <= plan.grid.share_bound
    assert abs(shares[:, 0].mean() - plan.scale * worst[0]) < 5 * math.sqrt(plan.share_variance / 2000)
    with pytest.raises(dd.ShareRefused, match="outside the plan"):
        dd.site_share(worst, plan, rng, records=m + 1)
    with pytest.raises(dd.ShareRefused, match="not clipped"):
        dd.site_share(worst * 1.01, plan, rng, records=m)
    too_coarse = dataclasses.replace(plan, scale=plan.scale * 10)
    with pytest.raises(dd.ShareRefused, match="beyond Flower's clip"):
        dd.site_share(worst, too_coarse, rng, records=m)


def test_plan_arguments_are_checked():
    kw = dict(eps=1.0, delta=1e-5, rounds=10, sites=10, tolerated=1, dim=5, record_bound=1.0, max_site_records=10,
              total_records=100)
    for name, bad in (("tolerated", 10), ("tolerated", -1), ("eps", 0.0), ("delta", 1.0), ("sites", 0),
                      ("record_bound", -1.0), ("max_site_records", 1000)):
        with pytest.raises(ValueError, match=name):
            dd.plan_secure_sum(**(kw | {name: bad}))


# ------------------------------------------------------------------------------------------------
# the empirical check of released sums
# ------------------------------------------------------------------------------------------------

def _released_residuals(plan, trials: int, rng, *, omit: int | None = None, double: int | None = None):
    """Residuals released sum - gamma sum_i d_i over ``trials`` rounds of all M sites (fixed data),
    and every site's rounding fractions; site ``omit`` sends its rounded term without its noise share
    (the mutant), site ``double`` adds its share twice."""
    d = rng.uniform(-1, 1, (plan.sites, plan.dim)) * 50 * plan.record_bound  # 50 records' worth
    x = plan.scale * d
    residuals = np.empty((trials, plan.dim))
    for t in range(trials):
        total = np.zeros(plan.dim, dtype=np.int64)
        for i in range(plan.sites):
            share = dd.randomized_round(x[i], rng)
            if i != omit:
                share = share + dd.sample_skellam(plan.share_variance, plan.dim, rng)
            if i == double:
                share = share + dd.sample_skellam(plan.share_variance, plan.dim, rng)
            total += share
        residuals[t] = total - x.sum(axis=0)
    return residuals, x - np.floor(x)


def test_the_noise_check_passes_honest_sums_and_fails_a_site_that_omits_its_share(plan):
    """eqs. (9.10)-(9.12): M = 10 shares, 2000 rounds x 11 coordinates: se of the variance ratio is
    sqrt(2 / 22000) = 0.0095; one omitted share of ten lowers it by 0.1, about 10.5 se, against a
    critical value of 5.03 (alpha = 1e-6): the mutant passes with probability ~1e-8."""
    rng = np.random.default_rng(4)
    trials = 2000
    honest, frac = _released_residuals(plan, trials, rng)
    check = dd.sum_noise_check(honest, skellam_variance=plan.expected_sum_variance(), rounding_fractions=frac[None])
    assert check.passed, check
    assert check.detectable_deficit < 1 / plan.sites
    mutant, frac = _released_residuals(plan, trials, rng, omit=7)
    bad = dd.sum_noise_check(mutant, skellam_variance=plan.expected_sum_variance(), rounding_fractions=frac[None])
    assert not bad.passed
    assert bad.variance_ratio == pytest.approx(1 - 1 / plan.sites, abs=5 * bad.variance_ratio_se)
    double, frac = _released_residuals(plan, trials, rng, double=2)
    assert not dd.sum_noise_check(double, skellam_variance=plan.expected_sum_variance(),
                                  rounding_fractions=frac[None]).passed


def test_the_noise_check_counts_the_rounding_variance_when_the_noise_is_small():
    """With a Skellam variance of 0.5 per coordinate and ten sites' rounding errors (p = 0.5:
    variance 0.25 each) the rounding is most of the spread: ignoring it fails an honest sum."""
    rng = np.random.default_rng(5)
    trials, sites, dim = 4000, 10, 3
    x = np.full((sites, dim), 0.5)
    res = np.stack([sum(dd.randomized_round(x[i], rng) for i in range(sites)) + dd.sample_skellam(0.5, dim, rng)
                    - x.sum(axis=0) for _ in range(trials)])
    frac = np.broadcast_to(x - np.floor(x), (trials, sites, dim))
    assert dd.sum_noise_check(res, skellam_variance=0.5, rounding_fractions=frac).passed
    assert not dd.sum_noise_check(res, skellam_variance=0.5).passed


def test_noise_check_arguments_are_checked():
    with pytest.raises(ValueError, match="residuals"):
        dd.sum_noise_check(np.zeros(5), skellam_variance=1.0)
    with pytest.raises(ValueError, match="skellam_variance"):
        dd.sum_noise_check(np.zeros((5, 2)), skellam_variance=0.0)
    with pytest.raises(ValueError, match="rounding_fractions"):
        dd.sum_noise_check(np.zeros((5, 2)), skellam_variance=1.0, rounding_fractions=np.full(2, 1.0))
