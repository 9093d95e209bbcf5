"""Distributed integer noise for secure aggregation: the Skellam mechanism, its accounting and
Flower's SecAgg+ grid (docs/secure_aggregation.md, eqs. (9.1)-(9.12); pure numpy, dp_accounting
imported where it is used).

Setting.  M sites each hold a data term d_i = sum_j g_ij, the record-SUM of clipped per-record
vectors ||g_ij|| <= G (e.g. the quantile-loss subgradients at the public iterate, whitened by the
public noise shape).  Secure aggregation (Flower's SecAgg+) shows the server only
sum_i v_i mod 2^32 of integer vectors v_i.  Each site sends

    v_i = R(gamma d_i) + Z_i,     Z_i ~ Sk(V / (M - t)) i.i.d. per coordinate,            (9.1)

with gamma a public scale, R the randomized rounding of (9.2) and Sk(s) the symmetric Skellam
law of variance s (Poisson(s/2) - Poisson(s/2)).

Why Skellam and not the distributed discrete Gaussian.  A sum of independent Skellam variables is
Skellam, exactly: Sk(a) + Sk(b) = Sk(a + b).  So any set of k honest shares adds up to Sk(k V / (M - t))
whatever the other sites do, and with at least M - t honest shares in the sum (t sites dropped out
or colluding with the server) the noise protecting a site is *at least* an exact Sk(V) -- the
accounting of the sum is that of one central Skellam mechanism, with nothing approximated.  A sum of
discrete Gaussians is not a discrete Gaussian; Kairouz, Liu and Steinke (ICML 2021) bound its
distance to one with a term that grows as each share gets small, i.e. exactly in the highly
distributed regime (M large, each site a 1/M share) this product is for.  Skellam also needs only a
Poisson sampler (numpy's), where the discrete Gaussian needs a dedicated exact sampler.
(Agarwal, Kairouz and Liu, "The Skellam Mechanism for Differentially Private Federated Learning",
NeurIPS 2021.)

Rounding (9.2).  R(x) = floor(x + U), U ~ Uniform[0, 1)^K, unbiased (E R(x) = x).  For neighbours
D, D' (one record of site i replaced) the scaled data terms differ by x - x' = gamma (g - g'),
||x - x'|| <= 2 gamma G.  Couple the two roundings through the same U: coordinatewise
|R(x)_k - R(x')_k| <= ceil(|x_k - x'_k|) <= |x_k - x'_k| + 1, so (Minkowski, and ||v||_1 <= ||v||_2^2
for an integer vector)

    Delta_2 = 2 gamma G + sqrt(K),     Delta_1 = min(sqrt(K) Delta_2, Delta_2^2).          (9.2)

The released sum is a mixture over U of shifted Skellam laws with the same mixing weights under D
and D'; the Renyi divergence is jointly quasi-convex (van Erven and Harremoes 2014, Thm. 13) and the
hockey-stick divergence jointly convex, so the mixture costs no more than the worst shift of norm
(Delta_2, Delta_1).  This replaces the conditional rounding of the papers (which bounds the norm of a
client's whole vector under client-level neighbours) by a deterministic bound for record-level
neighbours inside a site's sum.  (A relative slack of 1e-9 on 2 gamma G covers floating-point
summation of the data term.)

Accounting (9.3).  The multi-dimensional Skellam mechanism of variance V with integer shifts of l2
norm <= Delta_2 and l1 norm <= Delta_1 is (alpha, eps(alpha))-RDP for integer alpha >= 2 with
(Agarwal, Kairouz and Liu 2021, their multi-dimensional Skellam bound; variance parametrization)

    eps(alpha) = alpha Delta_2^2 / (2 V)
                 + min( ((2 alpha - 1) Delta_2^2 + 6 Delta_1) / (4 V^2),  3 Delta_1 / (2 V) ).  (9.3)

The first term is the Gaussian mechanism's RDP at variance V; the second is O(1/V) relative to it.
RDP adds over rounds (and with Gaussian releases, alpha / (2 z^2) each); the composed curve is
converted to (eps, delta) by dp_accounting's ``compute_epsilon`` (the improved conversion of Canonne,
Kamath and Steinke 2020, Prop. 12).  That conversion, not the Skellam, is the price against the
Gaussian's PLD accounting: at eps = 1, delta = 1e-5 it needs 1.18 times the variance.  Tested against
exact Renyi divergences and exact hockey-stick divergences of small Skellam laws
(tests/test_distributed_noise.py).

Dropouts and collusion (9.4).  Each site draws V / (M - t): the M - t or more honest shares that
reach the sum carry at least Sk(V), which is what (9.3) accounts.  With more than t missing shares the
round must be refused (the noise would be short): :func:`honest_variance` and the sites' check of the
active count (fdp_flower.clients.secure_sum).  Without dropouts the sum carries M V / (M - t).

Flower's grid (9.5)-(9.7).  SecAgg+ (flwr/client/mod/secure_aggregation/secaggplus_mod.py) multiplies
a reply's arrays by num_examples / max_weight, maps each coordinate x to
stochastic_round((clip(x, -c, c) + c) q / (2c)) (c = clipping_range, q = quantization_range) and
masks modulo 2^32.  With c and q powers of two, num_examples = 1 and max_weight = q, a site that
sends x = 2 c v for an integer v with |v| <= q / 2 makes Flower's quantized value exactly v + q / 2:
every floating-point step is exact and the stochastic rounding has nothing to round (9.5).  The
server's dequantized average then encodes sum_i v_i mod 2^32 exactly (9.6, :meth:`FlowerGrid.decode_sum`);
it is the true sum when |sum_i v_i| < 2^31.

Clip and range (9.8)-(9.9).  |R(gamma d_i)_k| <= gamma m_i G + 1, so the clip at q / 2 can bind only
when a noise share exceeds q / 2 - gamma m_i G - 1.  A site whose share would be clipped refuses the
release (nothing is sent); by a Chernoff bound on the Skellam tail (9.8) this happens with
probability p_ref <= 2 K exp(-(T asinh(T / s) - (sqrt(s^2 + T^2) - s))) per release (s the share
variance, T the margin).  The released transcript differs from the ideal mechanism's only on that
event, so the run is (eps, delta_mech + (1 + e^eps) L p_ref)-DP (9.9); the planner chooses gamma
so that (1 + e^eps) L p_ref <= 1e-6 delta and accounts at delta_mech = (1 - 1e-6) delta.  The sum
wraps around 2^31 with probability <= 1e-9 per run (a failed round, not a privacy loss).

Empirical check (9.10)-(9.12): :func:`sum_noise_check`.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Integer Renyi orders of the accounting (the bound (9.3) is stated for integer alpha).
SKELLAM_ORDERS: tuple[int, ...] = tuple(range(2, 257)) + (320, 384, 448, 512, 640, 768, 1024, 1536, 2048, 4096)
#: Relative slack on the data sensitivity 2 gamma G for floating-point summation of the data term.
FLOAT_SLACK = 1e-9
#: Fraction of delta spent on the refusal event of (9.9).
TAIL_DELTA_FRACTION = 1e-6
#: Probability per run that the sum leaves the decodable range (a failed round).
WRAP_PROBABILITY = 1e-9
#: Largest Poisson mean numpy samples without loss (Generator.poisson refuses lam > ~9.2e18).
MAX_POISSON_MEAN = 1e17


class ShareRefused(ValueError):
    """A site's integer share cannot be released exactly (out of Flower's range, or its inputs break
    the plan's bounds); nothing may be sent for it."""


# ----------------------------------------------------------------------------------------------
# Rounding, sensitivities, sampling
# ----------------------------------------------------------------------------------------------

def rounded_sensitivities(data_l2_sensitivity: float, dim: int) -> tuple[float, float]:
    """(Delta_2, Delta_1) of the rounded data term, eq. (9.2): 2 gamma G (1 + slack) + sqrt(K) and
    min(sqrt(K) Delta_2, Delta_2^2), from the l2 sensitivity 2 gamma G of the scaled term."""
    if not (math.isfinite(data_l2_sensitivity) and data_l2_sensitivity > 0):
        raise ValueError(f"data_l2_sensitivity must be finite and > 0, got {data_l2_sensitivity}")
    if int(dim) != dim or dim < 1:
        raise ValueError(f"dim must be a positive integer, got {dim}")
    l2 = data_l2_sensitivity * (1.0 + FLOAT_SLACK) + math.sqrt(dim)
    return l2, min(math.sqrt(dim) * l2, l2 * l2)


def randomized_round(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """R(x) = floor(x + U), U ~ Uniform[0, 1) per coordinate (eq. (9.2)): unbiased, int64."""
    x = np.asarray(x, dtype=float)
    if not np.all(np.isfinite(x)):
        raise ValueError("randomized_round: x must be finite")
    if np.any(np.abs(x) >= 2.0**62):
        raise ValueError("randomized_round: |x| must be below 2^62")
    return np.floor(x + rng.random(x.shape)).astype(np.int64)


def sample_skellam(variance: float, size, rng: np.random.Generator) -> np.ndarray:
    """Sk(variance) = Poisson(variance / 2) - Poisson(variance / 2), int64 (eq. (9.1))."""
    if not (math.isfinite(variance) and variance > 0):
        raise ValueError(f"Skellam variance must be finite and > 0, got {variance}")
    if variance / 2 > MAX_POISSON_MEAN:
        raise ValueError(f"Skellam variance {variance:.3g} is above what the Poisson sampler takes "
                         f"({2 * MAX_POISSON_MEAN:.0e})")
    lam = variance / 2.0
    return rng.poisson(lam, size).astype(np.int64) - rng.poisson(lam, size).astype(np.int64)


def skellam_log_tail(variance: float, threshold: float) -> float:
    """log of the Chernoff bound on P(|Sk(variance)| >= threshold), eq. (9.8):
    log 2 - (T asinh(T / s) - (sqrt(s^2 + T^2) - s)) (0 when the bound is vacuous)."""
    if not (variance > 0):
        raise ValueError(f"variance must be > 0, got {variance}")
    if threshold <= 0:
        return 0.0
    s, t = float(variance), float(threshold)
    r = t / s
    exponent = t * math.asinh(r) - s * r * r / (math.sqrt(1.0 + r * r) + 1.0)
    return min(0.0, math.log(2.0) - exponent)


# ----------------------------------------------------------------------------------------------
# Accounting
# ----------------------------------------------------------------------------------------------

def _orders(orders: Sequence[int] | None) -> np.ndarray:
    a = np.asarray(SKELLAM_ORDERS if orders is None else orders, dtype=float)
    if a.ndim != 1 or a.size == 0 or np.any(a < 2) or np.any(a != np.round(a)):
        raise ValueError("Renyi orders must be integers >= 2")
    return a


def skellam_rdp(*, l2_sensitivity: float, l1_sensitivity: float, variance: float,
                orders: Sequence[int] | None = None) -> np.ndarray:
    """eps(alpha) of one Skellam release, eq. (9.3), at every order (default :data:`SKELLAM_ORDERS`)."""
    if not (l2_sensitivity > 0 and l1_sensitivity > 0 and math.isfinite(l2_sensitivity)
            and math.isfinite(l1_sensitivity)):
        raise ValueError("sensitivities must be finite and > 0")
    if not (variance > 0 and math.isfinite(variance)):
        raise ValueError(f"variance must be finite and > 0, got {variance}")
    a = _orders(orders)
    d2, d1, v = l2_sensitivity**2, float(l1_sensitivity), float(variance)
    correction = np.minimum(((2 * a - 1) * d2 + 6 * d1) / (4 * v * v), 3 * d1 / (2 * v))
    return a * d2 / (2 * v) + correction


def gaussian_rdp(noise_multiplier: float, orders: Sequence[int] | None = None) -> np.ndarray:
    """alpha / (2 z^2): the RDP of a sensitivity-1 Gaussian release of multiplier z (to compose
    Skellam releases with the Gaussian ones of the same site, e.g. a private basis)."""
    if not (noise_multiplier > 0):
        raise ValueError(f"noise_multiplier must be > 0, got {noise_multiplier}")
    return _orders(orders) / (2.0 * noise_multiplier**2)


def rdp_to_epsilon(rdp: np.ndarray, delta: float, orders: Sequence[int] | None = None) -> float:
    """(eps at delta) of an RDP curve, by dp_accounting's conversion (Canonne, Kamath, Steinke 2020)."""
    from dp_accounting.rdp import rdp_privacy_accountant

    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    a = _orders(orders)
    rdp = np.asarray(rdp, dtype=float)
    if rdp.shape != a.shape:
        raise ValueError(f"rdp has {rdp.shape} values for {a.size} orders")
    eps, _order = rdp_privacy_accountant.compute_epsilon([float(x) for x in a], [float(x) for x in rdp], delta)
    return float(eps)


def _fast_epsilon(rdp: np.ndarray, a: np.ndarray, delta: float) -> float:
    """The same conversion as dp_accounting's compute_epsilon (orders > 1.01), vectorized for the
    bisections; the results are always re-checked with :func:`rdp_to_epsilon`."""
    eps = rdp + np.log1p(-1.0 / a) - np.log(delta * a) / (a - 1.0)
    return float(max(0.0, np.min(eps)))


def skellam_epsilon(*, rounds: int, l2_sensitivity: float, l1_sensitivity: float, variance: float,
                    delta: float, orders: Sequence[int] | None = None) -> float:
    """eps at ``delta`` of ``rounds`` composed Skellam releases of variance ``variance``, eq. (9.3)."""
    if int(rounds) != rounds or rounds < 1:
        raise ValueError(f"rounds must be a positive integer, got {rounds}")
    rdp = rounds * skellam_rdp(l2_sensitivity=l2_sensitivity, l1_sensitivity=l1_sensitivity,
                               variance=variance, orders=orders)
    return rdp_to_epsilon(rdp, delta, orders)


def calibrate_skellam_variance(eps: float, delta: float, *, rounds: int, l2_sensitivity: float,
                               l1_sensitivity: float, orders: Sequence[int] | None = None,
                               rtol: float = 1e-9) -> float:
    """The smallest honest-sum variance V (within ``rtol``) whose ``rounds`` composed releases spend
    at most ``eps`` at ``delta`` (eq. (9.3); eps is decreasing in V)."""
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"eps must be finite and > 0, got {eps}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    a = _orders(orders)

    def spent(v: float) -> float:
        return _fast_epsilon(rounds * skellam_rdp(l2_sensitivity=l2_sensitivity, l1_sensitivity=l1_sensitivity,
                                                  variance=v, orders=a), a, delta)

    # Gaussian start: V ~ rounds Delta_2^2 / (2 rho)-ish; bracket by doubling
    lo = hi = rounds * l2_sensitivity**2 / max(eps, 1e-12)
    while spent(hi) > eps:
        hi *= 2.0
    while spent(lo) <= eps and lo > 1e-300:
        lo /= 2.0
    while hi / lo - 1.0 > rtol:
        mid = math.sqrt(lo * hi)
        if spent(mid) > eps:
            lo = mid
        else:
            hi = mid
    # dp_accounting's own conversion must agree (the vectorized copy is for speed only)
    while rdp_to_epsilon(rounds * skellam_rdp(l2_sensitivity=l2_sensitivity, l1_sensitivity=l1_sensitivity,
                                              variance=hi, orders=a), delta, a) > eps:
        hi *= 1.0 + 10 * rtol
    return hi


# ----------------------------------------------------------------------------------------------
# Flower's SecAgg+ grid
# ----------------------------------------------------------------------------------------------

def _is_power_of_two(x: float) -> bool:
    m, _e = math.frexp(x)
    return x > 0 and m == 0.5


@dataclass(frozen=True)
class FlowerGrid:
    """The SecAgg+ quantization parameters under which a site's integer share passes through
    Flower exactly (eqs. (9.5)-(9.7)).

    Parameters
    ----------
    clipping_range : float
        Flower's ``clipping_range`` c, a power of two (default: 8.0, Flower's default).
    quantization_range : int
        Flower's ``quantization_range`` q, a power of two, at most 2^30 so that Flower's int32
        quantized values (up to q) do not overflow (default: 2^30; Flower's default 2^22 leaves each
        site only +-2^21).
    modulus_range : int
        Flower's ``modulus_range``, a power of two above q, at most 2^32 (default: 2^32).
    """

    clipping_range: float = 8.0
    quantization_range: int = 2**30
    modulus_range: int = 2**32

    def __post_init__(self):
        if not (isinstance(self.clipping_range, float) and _is_power_of_two(self.clipping_range)):
            raise ValueError(f"clipping_range must be a float power of two, got {self.clipping_range!r}")
        q = self.quantization_range
        if not (isinstance(q, int) and not isinstance(q, bool) and _is_power_of_two(q) and 2 <= q <= 2**30):
            raise ValueError(f"quantization_range must be a power of two in [2, 2^30], got {q!r}")
        mod = self.modulus_range
        if not (isinstance(mod, int) and not isinstance(mod, bool) and _is_power_of_two(mod) and q < mod <= 2**32):
            raise ValueError(f"modulus_range must be a power of two in (quantization_range, 2^32], got {mod!r}")

    @property
    def share_bound(self) -> int:
        """q / 2: the largest |v_k| Flower's clip leaves untouched (eq. (9.5))."""
        return self.quantization_range // 2

    @property
    def sum_bound(self) -> int:
        """modulus / 2 - 1: the largest |sum_i v_k| that decodes to itself (eq. (9.6))."""
        return self.modulus_range // 2 - 1

    @property
    def max_weight(self) -> float:
        """SecAgg+ ``max_weight`` = q: with ``num_examples`` = 1 the weight factor is exactly 1 / q."""
        return float(self.quantization_range)

    @property
    def num_examples(self) -> int:
        """SecAgg+ weight of every reply: 1 (public), so that Flower's weight factor is 1 / q."""
        return 1

    def encode(self, share: np.ndarray) -> np.ndarray:
        """x = 2 c v (float64), what a site puts in its reply so that Flower quantizes it to v + q / 2
        exactly (eq. (9.5)); a share with |v_k| > q / 2 is refused (:class:`ShareRefused`)."""
        v = np.asarray(share)
        if v.dtype.kind not in "iu":
            raise ValueError(f"share must be an integer array, got dtype {v.dtype}")
        if v.size and int(np.max(np.abs(v.astype(np.int64)))) > self.share_bound:
            raise ShareRefused(f"share coordinate {int(np.max(np.abs(v)))} is beyond Flower's clip "
                               f"+-{self.share_bound}; the release is refused")
        return v.astype(np.float64) * (2.0 * self.clipping_range)

    def decode_sum(self, aggregated: np.ndarray, active: int) -> np.ndarray:
        """sum_i v_i (int64, centered modulo 2^32) from the float vector SecAggPlusWorkflow hands to
        ``Strategy.aggregate_fit`` when ``active`` sites contributed (eq. (9.6)):
        aggregated = (2 c R - A c q) / A with R = sum_i (v_i + q/2) mod 2^32."""
        if int(active) != active or active < 1:
            raise ValueError(f"active must be a positive integer, got {active}")
        f = np.asarray(aggregated, dtype=float)
        if not np.all(np.isfinite(f)):
            raise ValueError("decode_sum: the aggregated vector is not finite")
        value = f * (float(active) / (2.0 * self.clipping_range))  # R - A q / 2, up to float error
        nearest = np.rint(value)
        if f.size and float(np.max(np.abs(value - nearest))) > 1e-3:
            raise ValueError("decode_sum: the aggregated vector is not on this grid (were the sites' "
                             "clipping_range / quantization_range / max_weight the plan's?)")
        mod = self.modulus_range
        residue = np.mod(nearest.astype(np.int64), mod)
        return np.where(residue > mod // 2 - 1, residue - mod, residue).astype(np.int64)


# ----------------------------------------------------------------------------------------------
# The plan of a secure-aggregation run
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SecureSumPlan:
    """Everything public about a run's secure sums: the scale, the noise, the accounting.

    Made by :func:`plan_secure_sum`; every site recomputes it from the same public inputs and its
    own policy (its t) and refuses a request that differs.
    """

    sites: int  # M
    tolerated: int  # t: shares that may be missing (dropped or colluding) with the guarantee kept
    dim: int  # K
    rounds: int  # L releases per site
    record_bound: float  # G, l2 bound of one record's vector (in the noise metric)
    max_site_records: int  # the largest m_i the range was planned for
    total_records: int  # n = sum_i m_i (range of the sum)
    scale: float  # gamma
    variance: float  # V: the honest-sum variance the accounting assumes (eq. (9.4))
    eps: float  # accounted eps of the whole run (eq. (9.3)), at delta
    delta: float
    grid: FlowerGrid = FlowerGrid()

    @property
    def share_variance(self) -> float:
        """V / (M - t): each site's Skellam share (eq. (9.4))."""
        return self.variance / (self.sites - self.tolerated)

    @property
    def sensitivities(self) -> tuple[float, float]:
        """(Delta_2, Delta_1) of one site's rounded term in integer units (eq. (9.2))."""
        return rounded_sensitivities(2.0 * self.scale * self.record_bound, self.dim)

    @property
    def delta_mechanism(self) -> float:
        """delta given to the RDP conversion: (1 - TAIL_DELTA_FRACTION) delta (eq. (9.9))."""
        return self.delta * (1.0 - TAIL_DELTA_FRACTION)

    def epsilon(self, rounds: int | None = None, honest_shares: int | None = None) -> float:
        """Accounted eps after ``rounds`` releases (default: all) when ``honest_shares`` shares
        (default: M - t) carry the noise (eq. (9.3) at variance honest_shares V / (M - t))."""
        shares = self.sites - self.tolerated if honest_shares is None else honest_shares
        if not 1 <= shares <= self.sites:
            raise ValueError(f"honest_shares must be in [1, {self.sites}], got {shares}")
        l2, l1 = self.sensitivities
        return skellam_epsilon(rounds=self.rounds if rounds is None else rounds, l2_sensitivity=l2,
                               l1_sensitivity=l1, variance=shares * self.share_variance, delta=self.delta_mechanism)

    def refusal_log_probability(self, records: int | None = None) -> float:
        """log of the bound on P(one site's share is refused) in one release, for a site of
        ``records`` records (default: the planned maximum), eq. (9.8)."""
        m = self.max_site_records if records is None else records
        margin = self.grid.share_bound - self.scale * m * self.record_bound - 1.0
        return math.log(self.dim) + skellam_log_tail(self.share_variance, margin) if margin > 0 else 0.0

    def wrap_log_probability(self) -> float:
        """log of the bound on P(the sum of one round leaves the decodable range), all M shares in."""
        margin = self.grid.sum_bound - self.scale * self.total_records * self.record_bound - self.sites
        total = self.sites * self.share_variance
        return math.log(self.dim) + skellam_log_tail(total, margin) if margin > 0 else 0.0

    def expected_sum_variance(self, contributing: int | None = None) -> float:
        """Variance per coordinate of the Skellam noise in a sum of ``contributing`` shares
        (default: all M), i.e. contributing V / (M - t)."""
        k = self.sites if contributing is None else contributing
        return k * self.share_variance

    def gaussian_equivalent_multiplier(self, contributing: int | None = None) -> float:
        """sqrt(noise variance of one round / rounds) / (2 gamma G): the multiplier of the single
        Gaussian release whose variance equals the run's averaged noise (for the floors of
        :mod:`fdp_flower.privacy.trust_modes`); includes the worst-case rounding variance M / 4."""
        k = self.sites if contributing is None else contributing
        per_round = self.expected_sum_variance(k) + k / 4.0
        return math.sqrt(per_round / self.rounds) / (2.0 * self.scale * self.record_bound)


def plan_secure_sum(*, eps: float, delta: float, rounds: int, sites: int, tolerated: int, dim: int,
                    record_bound: float, max_site_records: int, total_records: int,
                    grid: FlowerGrid | None = None) -> SecureSumPlan:
    """The largest public scale gamma (finest rounding) whose calibrated Skellam noise keeps every
    share inside Flower's clip and the sum inside the modulus (eqs. (9.8)-(9.9)), and the honest-sum
    variance V calibrated for (eps, delta) over ``rounds`` releases (eq. (9.3)).

    Parameters
    ----------
    eps, delta : float
        The whole run's budget per site.
    rounds : int
        Releases per site (L).
    sites : int
        M, the number of noise shares (clients; a node carrying several clients holds several).
    tolerated : int
        t in [0, M - 1]: missing or colluding shares the guarantee survives (eq. (9.4)).
    dim : int
        K, the length of the released vector.
    record_bound : float
        G, the l2 bound of one record's vector in the noise metric.
    max_site_records, total_records : int
        The largest m_i and n = sum_i m_i (public).
    grid : FlowerGrid, optional
        Flower's quantization (default: :class:`FlowerGrid` ()).
    """
    grid = grid or FlowerGrid()
    for name, value in (("rounds", rounds), ("sites", sites), ("dim", dim), ("max_site_records", max_site_records),
                        ("total_records", total_records)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value}")
    if sites < 2:
        raise ValueError(f"sites must be >= 2 for a secure sum, got {sites}")
    if int(tolerated) != tolerated or not 0 <= tolerated < sites:
        raise ValueError(f"tolerated must be an integer in [0, sites - 1] = [0, {sites - 1}], got {tolerated}")
    if not (record_bound > 0 and math.isfinite(record_bound)):
        raise ValueError(f"record_bound must be finite and > 0, got {record_bound}")
    if max_site_records > total_records:
        raise ValueError(f"max_site_records ({max_site_records}) exceeds total_records ({total_records})")
    if not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"eps must be finite and > 0, got {eps}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    delta_mech = delta * (1.0 - TAIL_DELTA_FRACTION)
    log_tail_budget = math.log(TAIL_DELTA_FRACTION * delta / ((1.0 + math.exp(min(eps, 700.0))) * rounds))
    log_wrap_budget = math.log(WRAP_PROBABILITY / rounds)

    def build(scale: float) -> SecureSumPlan:
        l2, l1 = rounded_sensitivities(2.0 * scale * record_bound, dim)
        variance = calibrate_skellam_variance(eps, delta_mech, rounds=rounds, l2_sensitivity=l2, l1_sensitivity=l1)
        return SecureSumPlan(sites=sites, tolerated=tolerated, dim=dim, rounds=rounds, record_bound=float(record_bound),
                             max_site_records=max_site_records, total_records=total_records, scale=scale,
                             variance=variance, eps=eps, delta=delta, grid=grid)

    def fits(plan: SecureSumPlan) -> bool:
        if plan.share_variance / 2 > MAX_POISSON_MEAN:
            return False
        return (plan.refusal_log_probability() <= log_tail_budget
                and plan.wrap_log_probability() <= log_wrap_budget)

    # the data alone bound the scale: gamma G n < 2^31 and gamma G m_max < q / 2
    hi = min(grid.sum_bound / (total_records * record_bound), grid.share_bound / (max_site_records * record_bound))
    lo = hi
    while not fits(build(lo)):
        lo /= 2.0
        if lo * record_bound < 1e-6:
            raise ValueError(f"no scale fits Flower's range (q = {grid.quantization_range}, n = {total_records}, "
                             f"m_max = {max_site_records}, eps = {eps}): the noise alone overflows it")
    if fits(build(hi)):
        lo = hi
    while hi / lo - 1.0 > 1e-3:
        mid = math.sqrt(lo * hi)
        if fits(build(mid)):
            lo = mid
        else:
            hi = mid
    plan = build(lo)
    accounted = plan.epsilon()
    if accounted > eps:  # calibrate_skellam_variance checks this already; a plan must never exceed its budget
        raise AssertionError(f"plan accounts eps {accounted} > budget {eps}")
    return plan


def honest_variance(plan: SecureSumPlan, contributing: int, colluding: int = 0) -> float:
    """Noise variance protecting a site when ``contributing`` shares reached the sum and
    ``colluding`` of them told the server theirs (eq. (9.4)); refuses (ValueError) a round whose
    honest shares are fewer than M - t, where the accounting (9.3) would not hold."""
    honest = contributing - colluding
    if honest < plan.sites - plan.tolerated:
        raise ValueError(f"only {honest} honest noise shares in the sum (contributing {contributing}, colluding "
                         f"{colluding}); the guarantee needs M - t = {plan.sites - plan.tolerated}: refuse the round")
    return honest * plan.share_variance


def site_share(record_sum: np.ndarray, plan: SecureSumPlan, rng: np.random.Generator, *, records: int) -> np.ndarray:
    """One site's integer share v_i = R(gamma d_i) + Sk(V / (M - t)) (eq. (9.1)), or
    :class:`ShareRefused` when its inputs break the plan's bounds or a coordinate would be clipped by
    Flower (eq. (9.8)); ``record_sum`` is d_i = sum_j g_ij with ||g_ij|| <= G, ``records`` = m_i."""
    d = np.asarray(record_sum, dtype=float)
    if d.shape != (plan.dim,):
        raise ValueError(f"record_sum must have shape ({plan.dim},), got {d.shape}")
    if int(records) != records or not 1 <= records <= plan.max_site_records:
        raise ShareRefused(f"records = {records} is outside the plan's [1, {plan.max_site_records}]")
    if not np.all(np.isfinite(d)) or float(np.max(np.abs(d))) > records * plan.record_bound * (1 + FLOAT_SLACK):
        raise ShareRefused("record_sum exceeds records * record_bound in some coordinate: the records were not "
                           "clipped to the plan's bound")
    share = randomized_round(plan.scale * d, rng) + sample_skellam(plan.share_variance, plan.dim, rng)
    plan.grid.encode(share)  # raises ShareRefused when Flower's clip would bind
    return share


# ----------------------------------------------------------------------------------------------
# The ledger's event
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SkellamSumRelease:
    """One release of a site's share into a secure sum whose honest part carries Sk(``variance``)
    with integer shifts of norms (``l2_sensitivity``, ``l1_sensitivity``) (eqs. (9.2)-(9.4))."""

    client: int
    round: int
    l2_sensitivity: float
    l1_sensitivity: float
    variance: float  # V, the honest-sum variance accounted (M - t shares)
    sites: int
    tolerated: int
    scale: float
    neighbouring: str = "replace_one"
    mechanism: str = "skellam_secure_sum"

    def __post_init__(self):
        if not (self.l2_sensitivity > 0 and self.l1_sensitivity > 0 and self.variance > 0):
            raise ValueError("sensitivities and variance must be > 0")
        if not 0 <= self.tolerated < self.sites:
            raise ValueError(f"tolerated must be in [0, sites - 1], got {self.tolerated} of {self.sites}")

    @classmethod
    def of_plan(cls, plan: SecureSumPlan, *, client: int, round: int) -> SkellamSumRelease:  # noqa: A002
        l2, l1 = plan.sensitivities
        return cls(client=client, round=round, l2_sensitivity=l2, l1_sensitivity=l1, variance=plan.variance,
                   sites=plan.sites, tolerated=plan.tolerated, scale=plan.scale)

    def rdp(self, orders: Sequence[int] | None = None) -> np.ndarray:
        return skellam_rdp(l2_sensitivity=self.l2_sensitivity, l1_sensitivity=self.l1_sensitivity,
                           variance=self.variance, orders=orders)


def composed_epsilon(releases: Sequence[SkellamSumRelease], delta: float, *,
                     gaussian_multipliers: Sequence[float] = (), orders: Sequence[int] | None = None) -> float:
    """eps at ``delta`` of one site's Skellam releases and Gaussian releases (multipliers z),
    composed by adding RDP (eq. (9.3)); ``delta`` is the mechanism's (see
    :attr:`SecureSumPlan.delta_mechanism`)."""
    a = _orders(orders)
    total = np.zeros_like(a)
    for r in releases:
        total = total + r.rdp(a)
    for z in gaussian_multipliers:
        total = total + gaussian_rdp(z, a)
    if not releases and not gaussian_multipliers:
        return 0.0
    return rdp_to_epsilon(total, delta, a)


# ----------------------------------------------------------------------------------------------
# Empirical check of released sums
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class NoiseSpreadCheck:
    """:func:`sum_noise_check`'s verdict on residuals r = released sum - gamma sum_i d_i."""

    passed: bool
    variance_ratio: float  # mean of r^2 / expected variance (1 under the mechanism)
    variance_ratio_se: float  # its standard error under the mechanism
    variance_z: float  # (ratio - 1) / se
    mean_z: float  # standardized mean of r / sqrt(expected variance)
    critical_z: float  # two-sided critical value at level alpha (each test alpha / 2)
    detectable_deficit: float  # relative variance shortfall detected with probability >= 1 - alpha
    samples: int  # coordinates x trials used
    alpha: float


def _rounding_cumulants(fraction: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(kappa_2, kappa_4) of R(x) - x summed over the sites, from each site's frac(x) (eq. (9.11))."""
    p = np.asarray(fraction, dtype=float)
    var = p * (1.0 - p)
    return var, var * (1.0 - 6.0 * var)


def sum_noise_check(residuals: np.ndarray, *, skellam_variance, rounding_fractions: np.ndarray | None = None,
                    alpha: float = 1e-6) -> NoiseSpreadCheck:
    """Does the noise in released sums match the mechanism's?  (eqs. (9.10)-(9.12))

    ``residuals``: (trials, K) released integer sums minus the noise-free scaled sums gamma sum_i d_i
    (the audit knows the data); under the mechanism each coordinate is Sk(s) plus the rounding
    errors, independent, mean 0, with s = ``skellam_variance`` (a scalar or (K,): the sum of the
    contributing sites' shares).  ``rounding_fractions``: (K,) or (trials, K) or (trials, sites, K)
    fractional parts frac(gamma d_ik) of every contributing site (their Bernoulli rounding errors have
    variance p (1 - p)); None: rounding variance taken as 0 (negligible when s >> sites).

    With v = s + sum_i p_i (1 - p_i) and kappa_4 = s + sum_i p_i (1 - p_i)(1 - 6 p_i (1 - p_i))
    (a Skellam's cumulants are all equal to its variance), the statistic
    T = mean r^2 / v has mean 1 and variance mean((kappa_4 + 2 v^2) / v^2) / N over N samples
    (eq. (9.10)); the check fails when |T - 1| / se or the standardized mean exceeds the two-sided
    normal critical value at level alpha / 2 each (eq. (9.12)).  A site that omits its share of M
    lowers T by about 1 / M (eq. (9.11)); ``detectable_deficit`` is the shortfall the sample detects
    with probability >= 1 - alpha: with N samples, (z_{alpha/4} + z_alpha) sqrt(2 / N).
    """
    from scipy import stats

    r = np.asarray(residuals, dtype=float)
    if r.ndim != 2 or r.shape[0] < 2 or r.shape[1] < 1:
        raise ValueError(f"residuals must be (trials >= 2, K >= 1), got shape {r.shape}")
    if not np.all(np.isfinite(r)):
        raise ValueError("residuals must be finite")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    s = np.broadcast_to(np.asarray(skellam_variance, dtype=float), r.shape[1:])
    if np.any(s <= 0):
        raise ValueError("skellam_variance must be > 0")
    if rounding_fractions is None:
        k2 = np.zeros(r.shape)
        k4 = np.zeros(r.shape)
    else:
        p = np.asarray(rounding_fractions, dtype=float)
        if np.any((p < 0) | (p >= 1)):
            raise ValueError("rounding_fractions must be in [0, 1)")
        k2, k4 = _rounding_cumulants(p)
        if p.ndim == 3:  # (trials, sites, K): sum over the sites
            k2, k4 = k2.sum(axis=1), k4.sum(axis=1)
        k2, k4 = np.broadcast_to(k2, r.shape), np.broadcast_to(k4, r.shape)
    v = s + k2
    kappa4 = s + k4
    n = r.size
    ratio = float(np.mean(r * r / v))
    se = float(math.sqrt(np.mean((kappa4 + 2.0 * v * v) / (v * v)) / n))
    mean_z = float(np.sum(r / np.sqrt(v)) / math.sqrt(n))
    crit = float(stats.norm.isf(alpha / 4.0))
    var_z = (ratio - 1.0) / se
    deficit = (crit + float(stats.norm.isf(alpha))) * se
    return NoiseSpreadCheck(passed=bool(abs(var_z) <= crit and abs(mean_z) <= crit), variance_ratio=ratio,
                            variance_ratio_se=se, variance_z=float(var_z), mean_z=mean_z, critical_z=crit,
                            detectable_deficit=float(deficit), samples=int(n), alpha=float(alpha))
